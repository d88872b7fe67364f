#include "log/writer.h"

#include <algorithm>

#include "util/clock.h"

namespace kvtier {

Writer::Writer(Deps deps) : d_(std::move(deps)) {}

Writer::~Writer() { Stop(); }

void Writer::Start(RamTier* ram) {
  ram_ = ram;
  Reclaimer::Deps rd;
  rd.index = d_.index;
  rd.table = d_.table;
  rd.committer = d_.committer;
  rd.ram = ram;
  rd.hits = d_.hits;
  rd.counters = d_.counters;
  rd.io = d_.io.get();
  rd.stored_payload_limit = d_.stored_payload_limit;
  rd.reinsert = d_.reinsert;
  rd.punch_holes = d_.punch_holes;
  rd.policy = std::make_unique<HitReinsertion>(d_.reinsert_max_fraction, d_.reinsert_min_hits);
  reclaimer_ = std::make_unique<Reclaimer>(std::move(rd));
  d_.hits->SetEpoch(pos_.epoch);  // where recovery left it
  thread_ = std::thread([this] { Loop(); });
}

void Writer::Stop() {
  d_.ops->Close();
  if (thread_.joinable()) thread_.join();
}

// The write ring is registered in pieces of this size (see Loop).
constexpr uint64_t kRingPiece = 8ull << 20;

// Registers with the writer's io_uring the RAM tier's data area (in pieces of
// at most 1 GiB, io_uring's limit per buffer; puts are written from its
// chunks) and the first `ring_bytes` of the write ring, in 8 MiB pieces. The
// RAM tier comes first so that a grown ring only adds regions, which the
// queue registers without pinning the rest again. The tier joins only once
// its prefault has faulted it in: pinning faults in every page not yet
// there, on this thread, while puts wait (docs/ram_tier.md). Best effort: if
// the kernel refuses (locked-memory limit), the ring alone from then on,
// else nothing; unregistered I/O works the same, only with per-I/O page
// pinning.
void Writer::RegisterBuffers(uint64_t ring_bytes) {
  std::vector<iovec> regions;
  if (ram_ != nullptr && ram_registration_ != RamRegistration::kRefused && ram_->Prefaulted()) {
    regions = ram_->Regions();
  }
  const size_t ram_regions = regions.size();
  for (uint64_t off = 0; off < ring_bytes; off += kRingPiece)
    regions.push_back(iovec{d_.ops->ring_base() + off, std::min(kRingPiece, ring_bytes - off)});
  if (d_.io->RegisterBuffers(regions).ok()) {
    if (ram_regions > 0) ram_registration_ = RamRegistration::kDone;
    return;
  }
  if (ram_regions == 0) return;
  ram_registration_ = RamRegistration::kRefused;
  d_.io->RegisterBuffers(std::span<const iovec>(regions).subspan(ram_regions)).IgnoreError();
}

void Writer::Loop() {
  // Registration happens here, not in Open (the ring binds to the thread that
  // uses it), and only when the writer is idle, for the part of the ring used
  // so far: the kernel holds the process's mmap lock while it pins a region,
  // and pinning the whole 256 MiB ring up front, on fresh huge pages, took
  // 1.1 s on the test VM (~4 ms per 2 MiB page), delaying the first puts and
  // every mmap of the process. Pages already touched pin in milliseconds.
  auto idle = [this](uint64_t touched) {
    const uint64_t used = std::min(d_.ops->ring_capacity(), (touched + kRingPiece - 1) / kRingPiece * kRingPiece);
    const bool ram_ready =
        ram_ != nullptr && ram_registration_ == RamRegistration::kWaiting && ram_->Prefaulted();
    if (used > registered_ || !ever_registered_ || ram_ready) {
      RegisterBuffers(used);
      registered_ = used;
      ever_registered_ = true;
    }
  };
  std::vector<WriteOp> group;
  while (d_.ops->NextGroup(d_.group_commit_bytes, idle, &group)) {
    if (group.front().kind == WriteOp::Kind::kRecord) {
      WriteGroup(group);
    } else {
      // Everything but records needs the passes before it committed.
      d_.committer->Drain();
      Run(group.front());
    }
  }
}

void Writer::Run(WriteOp& op) {
  switch (op.kind) {
    case WriteOp::Kind::kRecord: break;  // WriteGroup's
    case WriteOp::Kind::kFlush: DoFlush(op); break;
    case WriteOp::Kind::kRemove: DoRemove(op); break;
    case WriteOp::Kind::kDrop: DoDrop(op); break;
    case WriteOp::Kind::kEvictTo: DoEvictTo(op); break;
    case WriteOp::Kind::kSeal: DoSeal(op); break;
    case WriteOp::Kind::kTask: FinishPut(op.done, op.task()); break;
  }
}

Status Writer::OpenNextSegment(const Touched& touched) {
  uint32_t seg = d_.table->AnyFree();
  std::atomic<uint64_t>& max_segments = *d_.max_segments;
  if (seg == UINT32_MAX && d_.table->CountFiles() < max_segments) {
    auto created = d_.table->CreateSegmentFile();
    if (created.ok()) {
      seg = *created;
    } else if (created.status().code() != Code::kNoSpace || d_.table->OldestSealed() == UINT32_MAX) {
      return created.status();
    } else {
      // Out of disk before the budget: the budget becomes what is held, and
      // the store reclaims from here on. Said once, and counted.
      d_.counters->disk_full_events.Add();
      const uint64_t held = std::max<uint64_t>(2, d_.table->CountFiles());
      if (held < max_segments) {
        d_.warn("the disk under " + d_.dir + " is full before the capacity was reached: capacity lowered from " +
             std::to_string(max_segments * d_.table->segment_size()) + " to " +
             std::to_string(held * d_.table->segment_size()) + " bytes (" + created.status().message() + ")");
        max_segments = held;
      }
    }
  }
  if (seg == UINT32_MAX) {
    d_.committer->Drain();  // earlier passes may still be committing into a victim
    // Each round frees a segment; one whose reinserted blocks filled the hot
    // region's open segment becomes the next of those, and another follows.
    for (uint32_t round = 0; pos_.seg == UINT32_MAX; ++round) {
      seg = ChooseVictim();
      if (seg == UINT32_MAX || round > d_.table->CountFiles())
        return Status::NoSpace("capacity holds no segment to reclaim");
      if (touched.count(seg)) return Status::Aborted("victim segment is being written");
      const bool hot_region = d_.hot_region_fraction > 0;
      KVTIER_RETURN_IF_ERROR(MakeEntriesDurableBeforeReclaim(seg));
      KVTIER_RETURN_IF_ERROR(reclaimer_->Reclaim(seg, /*reuse=*/true, &pos_, hot_region ? &hot_ : nullptr));
    }
    d_.hits->SetEpoch(pos_.epoch);
    return Status::OK();
  }
  auto gen = d_.table->Activate(seg, ++pos_.epoch);
  d_.hits->SetEpoch(pos_.epoch);
  if (!gen.ok()) return gen.status();
  pos_.seg = seg;
  pos_.gen = *gen;
  pos_.off = format::kSegmentDataStart;
  return Status::OK();
}

// The index has no WAL: an entry is durable only once a flush of its
// memtables has run. A reclaim destroys its victim's records, so recovery
// can no longer re-create their entries from them, and an older version of a
// key whose newer entry was still only in memory would come back after a
// crash. So the entries of every record in the victim must be durable first:
// one flush, after the committer has committed every pass handed to it,
// covers every segment below the newest one, and later reclaims of those
// need none. Not the newest: it is open, or was sealed by the roll-over
// that called this, with the pass being placed still holding records for it.
Status Writer::MakeEntriesDurableBeforeReclaim(uint32_t seg) {
  if (d_.table->Info(seg).epoch < flushed_below_epoch_) return Status::OK();
  d_.committer->Drain();
  KVTIER_RETURN_IF_ERROR(d_.index->FlushMemtables());
  flushed_below_epoch_ = pos_.epoch;
  return Status::OK();
}

uint32_t Writer::ChooseVictim() {
  if (d_.hot_region_fraction <= 0) return LeastHotOfOldest(std::nullopt);
  const bool any_cold = d_.table->OldestSealed(/*hot=*/false) != UINT32_MAX;
  const uint32_t hot = d_.table->OldestSealed(/*hot=*/true);
  const auto share = static_cast<uint32_t>(d_.hot_region_fraction * static_cast<double>(d_.max_segments->load()));
  if (hot != UINT32_MAX && (!any_cold || d_.table->CountHot() >= share)) return hot;
  if (any_cold || hot_.seg == UINT32_MAX) return LeastHotOfOldest(/*hot=*/false);
  // Nothing sealed: the hot region's open segment is sealed to be taken.
  SealHotSegment();
  return d_.table->OldestSealed(/*hot=*/true);
}

// Reclaiming the oldest segment rewrites its hot blocks. Where the hot set
// is spread over the log, as blocks are read again long after they were
// written, FIFO moves each of them once, and again whenever the hot region
// comes round. Passing over the segments whose blocks are still read leaves
// those where they lie; one whose reads stopped a lap ago counts as cold, so
// blocks once hot do not hold the space for good.
uint32_t Writer::LeastHotOfOldest(std::optional<bool> hot) {
  const uint64_t segments = d_.max_segments->load();
  const auto window = static_cast<size_t>(d_.reclaim_window_fraction * static_cast<double>(segments));
  if (window <= 1 || !d_.reinsert) return d_.table->OldestSealed(hot);
  const auto candidates = d_.table->OldestSealedN(window, hot);  // (id, epoch), oldest first
  if (candidates.empty()) return UINT32_MAX;
  const uint64_t read_since = pos_.epoch > segments ? pos_.epoch - segments : 0;
  uint32_t best = candidates.front().first;
  uint64_t best_bytes = d_.hits->HotBytes(best, read_since);
  for (size_t i = 1; i < candidates.size() && best_bytes > 0; ++i) {
    const uint64_t bytes = d_.hits->HotBytes(candidates[i].first, read_since);
    if (bytes < best_bytes) {
      best = candidates[i].first;
      best_bytes = bytes;
    }
  }
  if (best != candidates.front().first) d_.counters->reclaims_not_oldest.Add();
  return best;
}

void Writer::SealHotSegment() {
  d_.table->Seal(hot_.seg, format::AlignUp(hot_.off));
  hot_.seg = UINT32_MAX;
}

Status Writer::CheckpointNow(bool clean, Index::CheckpointFlush flush) {
  Status st = d_.committer->CheckpointAt(CheckpointOf(pos_, d_.table->segment_size(), clean), flush);
  if (st.ok() && flush == Index::CheckpointFlush::kWait) removes_not_flushed_ = false;
  return st;
}

void Writer::DoRemove(WriteOp& op) {
  // The checkpoint moves past the keys' records so that recovery never
  // re-indexes them, and its flush makes the deletes durable: one flush for
  // the whole list. While a failed write holds the checkpoint back, recovery
  // will scan some of them again, and a put that failed after writing its
  // record may have left it whole with no entry to delete: a mark keeps out
  // every record of the key written so far. Without an entry and with nothing
  // held, no record of the key lies past the checkpoint unindexed: nothing to
  // do, unless an earlier remove's delete is not yet durable (its flush
  // failed): the key may be one of its keys.
  const bool mark = d_.committer->HoldsFailedWrite();
  if (op.present != nullptr) op.present->assign(op.keys.size(), false);
  Status st;
  IndexBatch b;
  for (size_t i = 0; i < op.keys.size(); ++i) {
    auto e = d_.index->Get(op.ns, op.keys[i]);
    st = e.status();
    if (!st.ok()) break;
    if (e->has_value()) b.Delete(op.ns, op.keys[i], **e);
    if (mark) b.MarkRemoved(op.ns, op.keys[i], pos_.next_seq);
    if (op.present != nullptr) (*op.present)[i] = e->has_value();
  }
  if (st.ok() && !b.empty()) {
    st = d_.index->Commit(b, false);
    if (st.ok()) removes_not_flushed_ = true;
  }
  if (st.ok() && removes_not_flushed_) st = CheckpointNow(false);
  if (ram_ != nullptr)
    for (const std::string& key : op.keys) ram_->Erase(op.ns, key);
  FinishPut(op.done, st);
}

// Every put before it committed, and the index flushed behind a checkpoint:
// a read-only open then sees them, and a crash rescans nothing before them.
void Writer::DoFlush(WriteOp& op) {
  d_.committer->Drain();
  FinishPut(op.done, CheckpointNow(false));
}

void Writer::DoDrop(WriteOp& op) {
  auto e = d_.index->Get(op.ns, op.key);
  if (e.ok() && e->has_value() && (*e)->sequence == op.arg) {
    IndexBatch b;
    b.Delete(op.ns, op.key, **e);
    if (d_.index->Commit(b, false).ok()) d_.counters->stale_entries_dropped.Add();
    if (ram_ != nullptr) ram_->Erase(op.ns, op.key);
  }
}

void Writer::DoEvictTo(WriteOp& op) {
  Status st;
  while (st.ok() && UsedBytes() > op.arg) {
    uint32_t seg = d_.table->OldestSealed();
    if (seg == UINT32_MAX) {
      // Only open segments are left: seal them so they can go too.
      if (pos_.seg == UINT32_MAX && hot_.seg == UINT32_MAX) break;
      if (pos_.seg != UINT32_MAX) d_.table->Seal(pos_.seg, pos_.off);
      if (hot_.seg != UINT32_MAX) SealHotSegment();
      pos_.seg = UINT32_MAX;
      continue;
    }
    st = MakeEntriesDurableBeforeReclaim(seg);
    if (st.ok()) st = reclaimer_->Reclaim(seg, /*reuse=*/false, &pos_);
  }
  if (st.ok()) st = CheckpointNow(false);
  FinishPut(op.done, st);
}

void Writer::SealOpenSegment() {
  // Its last write is padded to a page: used bytes stay page aligned (the
  // shared tier uploads them with O_DIRECT reads).
  d_.table->Seal(pos_.seg, format::AlignUp(pos_.off));
  if (d_.sealed) d_.sealed(pos_.seg, pos_.gen);
  pos_.seg = UINT32_MAX;
}

// Seals the open segment if it holds records, for the shared tier to upload.
void Writer::DoSeal(WriteOp& op) {
  Status st;
  if (pos_.seg != UINT32_MAX && pos_.off > format::kSegmentDataStart) {
    SealOpenSegment();
    st = CheckpointNow(false);
  }
  FinishPut(op.done, st);
}

uint64_t Writer::UsedBytes() const {
  uint64_t used = 0;
  for (const SegmentInfo& s : d_.table->Snapshot())
    if (s.state != SegmentState::kFree) used += s.used_bytes;
  return used;
}

}  // namespace kvtier
