// The write path: admission, ring reservation, the writer thread's group
// commit, segment rollover and reclaim, removes and checkpoints.
#include <algorithm>
#include <cstring>
#include <future>

#include "log/put_plan.h"
#include "log/write_runs.h"
#include "store/store_impl.h"
#include "util/checksum.h"
#include "util/clock.h"

namespace kvtier {

Status StoreImpl::Validate(NamespaceId ns, std::string_view key, uint64_t payload_len) {
  if (key.empty() || key.size() > format::kMaxKeyBytes)
    return Status::InvalidArgument("key length " + std::to_string(key.size()) +
                                   " is outside 1.." + std::to_string(format::kMaxKeyBytes));
  if (payload_len == 0 || payload_len > opt_.max_payload_bytes)
    return Status::InvalidArgument("payload of " + std::to_string(payload_len) +
                                   " bytes is outside 1.." + std::to_string(opt_.max_payload_bytes));
  std::shared_lock<std::shared_mutex> l(ns_mu_);
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end())
    return Status::NotFound("unknown namespace " + NamespaceIdToHex(ns));
  if (it->second.block_bytes != 0 && it->second.block_bytes != payload_len)
    return Status::InvalidArgument("namespace " + it->second.DisplayName() + " takes blocks of " +
                                   std::to_string(it->second.block_bytes) + " bytes, got " +
                                   std::to_string(payload_len));
  return Status::OK();
}

namespace {
constexpr uint64_t kPage = format::kPage;

// Copies `payload` (gathered in order) to dst.
void Gather(std::span<const Fragment> payload, uint8_t* dst) {
  for (const Fragment& f : payload) {
    if (f.size != 0) std::memcpy(dst, f.data, f.size);
    dst += f.size;
  }
}

// Copies `payload` into the pieces of a RAM-tier reservation of its size.
void Scatter(std::span<const Fragment> payload, const std::vector<RamTier::Piece>& pieces) {
  size_t pi = 0, po = 0;
  for (const Fragment& f : payload) {
    const uint8_t* src = static_cast<const uint8_t*>(f.data);
    size_t left = f.size;
    while (left > 0) {
      const RamTier::Piece& p = pieces[pi];
      const size_t n = std::min(left, p.size - po);
      std::memcpy(p.data + po, src, n);
      src += n;
      left -= n;
      po += n;
      if (po == p.size) ++pi, po = 0;
    }
  }
}

uint64_t ChecksumOf(std::span<const Fragment> payload) {
  if (payload.size() == 1) return format::Checksum(payload[0].data, payload[0].size);
  Xxh3Stream st;
  for (const Fragment& f : payload) st.Update(f.data, f.size);
  return st.Digest();
}
}  // namespace

void StoreImpl::SubmitPut(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                          bool blocking, bool borrow, PutCallback done, RamTier::Pin* reserved,
                          const uint64_t* checksum) {
  if (opt_.read_only) return FinishPut(done, Status::NotSupported("store opened read-only"));
  uint64_t payload_len = 0;
  for (const Fragment& f : payload) {
    if (f.data == nullptr && f.size != 0)
      return FinishPut(done, Status::InvalidArgument("fragment with null data"));
    payload_len += f.size;
  }
  Status st = Validate(ns, key, payload_len);
  if (!st.ok()) {
    c_.puts_failed.Add();
    return FinishPut(done, st);
  }
  if (!admission_->Admit(ns, key, payload_len)) {
    c_.puts_not_admitted.Add();
    return FinishPut(done, Status::NotAdmitted("declined by the admission policy"));
  }
  const RecordPlan plan = PlanRecord({key.size(), payload_len, dense_ok_, opt_.dense_record_max_bytes,
                                      opt_.zero_copy_min_bytes, ram_ != nullptr,
                                      reserved != nullptr && static_cast<bool>(*reserved)});
  RamTier::Pin pin;
  bool ram_copy = false;
  if (reserved != nullptr && *reserved) {
    pin = std::move(*reserved);
  } else if (plan.reserve_ram_copy) {
    pin = ram_->Reserve(ns, key, payload_len);
    ram_copy = static_cast<bool>(pin);
  }
  std::span<const Fragment> source = payload;
  std::vector<Fragment> pin_frags;
  if (pin) {
    for (const RamTier::Piece& p : pin.pieces()) pin_frags.push_back(Fragment{p.data, p.size});
    source = pin_frags;
  }
  WritePlanInput wi{payload_len, opt_.zero_copy_min_bytes, static_cast<bool>(pin), borrow, PageRun(source.data(), source.size(), payload_len),
                    /*small_pages=*/false};
  WritePlan w = PlanWrite(plan, wi);
  // Asked of the kernel only where it decides (a direct write from the
  // caller's memory).
  if (w.direct && !pin && !ZeroCopyPagesOk(source.data(), source.size(), payload_len, opt_.zero_copy_small_pages)) {
    wi.small_pages = true;
    w = PlanWrite(plan, wi);
    c_.small_page_copies.Add();
  }
  WriteOp op;
  op.dense = plan.dense;
  op.rec_bytes = plan.rec_bytes;
  st = ReserveRing(&op, w, blocking);
  if (!st.ok()) {
    admission_->Refund(payload_len);
    if (st.code() == Code::kNotAdmitted) c_.puts_not_admitted.Add();
    return FinishPut(done, st);
  }
  // Fill and checksum outside the lock: on the caller's thread, in parallel
  // with other callers and the writer. Padding never leaks old memory.
  if (ram_copy) Scatter(payload, pin.pieces());
  FillRecord(&op, key.size(), source, plan, w, checksum);
  op.kind = WriteOp::Kind::kRecord;
  op.ns = ns;
  op.key.assign(key);
  op.payload_len = payload_len;
  op.written_ms = NowUnixMs();
  op.done = std::move(done);
  if (ram_ != nullptr) {
    // Write-through: the RAM copy is visible at once; the committer undoes
    // it (by token) if the record cannot be made durable.
    if (pin) {
      op.ram_token = ram_->CommitKeepPin(pin, op.checksum);
      if (w.direct) op.hold = std::move(pin);  // the device write reads these chunks
    } else {
      Fragment whole_payload{op.alloc.data + plan.payload_offset, payload_len};
      op.ram_token = ram_->Insert(ns, key, {&whole_payload, 1}, op.checksum);
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(op));
  }
  work_cv_.notify_one();
}

Status StoreImpl::ReserveRing(WriteOp* op, const WritePlan& w, bool blocking) {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    if (closing_) return Status::Closed("store is closing");
    // Borrowed bytes count against the queue budget like ring bytes, but one
    // put is always let through so that no size can starve.
    const bool fits = w.borrowed == 0 || borrowed_inflight_ == 0 ||
                      borrowed_inflight_ + w.borrowed + ring_.used() <= opt_.write_queue_bytes;
    if (fits) {
      op->alloc = ring_.Allocate(w.ring_bytes, op->dense ? format::kDenseAlign : kPage);
      if (op->alloc.data != nullptr) break;
    }
    if (!blocking) return Status::NotAdmitted("write queue full");
    space_cv_.wait(l);
  }
  op->alloc_id = next_alloc_id_++;
  slots_.push_back(Slot{op->alloc_id, op->alloc, false});
  borrowed_inflight_ += w.borrowed;
  op->borrowed = w.borrowed;
  return Status::OK();
}

void StoreImpl::FillRecord(WriteOp* op, size_t key_len, std::span<const Fragment> source, const RecordPlan& plan,
                           const WritePlan& w, const uint64_t* checksum) {
  uint8_t* rec = op->alloc.data;
  const size_t head = format::kRecordHeaderBytes + key_len;
  const uint64_t payload_len = w.whole + w.tail;
  if (!w.direct) {
    std::memset(rec + head, 0, plan.payload_offset - head);
    Gather(source, rec + plan.payload_offset);
    std::memset(rec + plan.payload_offset + payload_len, 0, w.ring_bytes - plan.payload_offset - payload_len);
    op->checksum = checksum != nullptr ? *checksum : format::Checksum(rec + plan.payload_offset, payload_len);
    return;
  }
  // Header page, the payload's whole pages where they are, tail page.
  std::memset(rec + head, 0, kPage - head);
  op->pieces.push_back(iovec{rec, kPage});
  uint64_t left = w.whole;
  for (const Fragment& f : source) {
    const uint64_t n = std::min<uint64_t>(left, f.size / kPage * kPage);
    if (n == 0) break;
    op->pieces.push_back(iovec{const_cast<void*>(f.data), n});
    left -= n;
  }
  if (w.tail != 0) {
    // The tail page holds the payload's last `tail` bytes.
    uint8_t* t = rec + kPage;
    uint64_t skip = w.whole;
    uint8_t* out = t;
    for (const Fragment& f : source) {
      if (skip >= f.size) {
        skip -= f.size;
        continue;
      }
      std::memcpy(out, static_cast<const uint8_t*>(f.data) + skip, f.size - skip);
      out += f.size - skip;
      skip = 0;
    }
    std::memset(out, 0, t + kPage - out);
    op->pieces.push_back(iovec{t, kPage});
  }
  op->checksum = checksum != nullptr ? *checksum : ChecksumOf(source);
}

Status StoreImpl::Put(NamespaceId ns, std::string_view key, std::span<const Fragment> payload) {
  std::promise<Status> p;
  auto f = p.get_future();
  SubmitPut(ns, key, payload, /*blocking=*/true, /*borrow=*/true, [&p](Status st) { p.set_value(std::move(st)); });
  return f.get();
}

std::vector<Status> StoreImpl::PutBatch(NamespaceId ns, std::span<const PutItem> items) {
  std::vector<Status> out(items.size());
  std::mutex m;
  std::condition_variable cv;
  size_t left = items.size();
  for (size_t i = 0; i < items.size(); ++i) {
    SubmitPut(ns, items[i].key, items[i].payload, /*blocking=*/true, /*borrow=*/true, [&, i](Status st) {
      std::lock_guard<std::mutex> l(m);
      out[i] = std::move(st);
      if (--left == 0) cv.notify_one();
    });
  }
  std::unique_lock<std::mutex> l(m);
  cv.wait(l, [&] { return left == 0; });
  return out;
}

void StoreImpl::PutAsync(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                         PutCallback done) {
  SubmitPut(ns, key, payload, /*blocking=*/false, /*borrow=*/false, std::move(done));
}

void StoreImpl::PutAsyncBorrowed(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                                 PutCallback done) {
  SubmitPut(ns, key, payload, /*blocking=*/false, /*borrow=*/true, std::move(done));
}

void StoreImpl::PutInternal(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                            RamTier::Pin reservation, bool blocking, PutCallback done,
                            const uint64_t* checksum) {
  if (!reservation)
    return SubmitPut(ns, key, payload, blocking, /*borrow=*/false, std::move(done), nullptr, checksum);
  std::vector<Fragment> frags;
  for (const RamTier::Piece& p : reservation.pieces()) frags.push_back(Fragment{p.data, p.size});
  SubmitPut(ns, key, frags, blocking, /*borrow=*/false, std::move(done), &reservation, checksum);
}

Status StoreImpl::RunOnWriter(WriteOp op) {
  if (opt_.read_only) return Status::NotSupported("store opened read-only");
  std::promise<Status> p;
  auto f = p.get_future();
  op.done = [&p](Status st) { p.set_value(std::move(st)); };
  {
    std::lock_guard<std::mutex> l(mu_);
    if (closing_) return Status::Closed("store is closing");
    queue_.push_back(std::move(op));
  }
  work_cv_.notify_one();
  return f.get();
}

Status StoreImpl::Flush() {
  WriteOp op;
  op.kind = WriteOp::Kind::kFlush;
  return RunOnWriter(std::move(op));
}

Status StoreImpl::Remove(NamespaceId ns, std::string_view key) {
  if (key.empty() || key.size() > format::kMaxKeyBytes)
    return Status::InvalidArgument("key length out of range");
  c_.removes.Add();
  WriteOp op;
  op.kind = WriteOp::Kind::kRemove;
  op.ns = ns;
  op.key.assign(key);
  return RunOnWriter(std::move(op));
}

Status StoreImpl::RemoveNamespace(NamespaceId ns) {
  WriteOp op;
  op.kind = WriteOp::Kind::kRemoveNamespace;
  op.ns = ns;
  return RunOnWriter(std::move(op));
}

Status StoreImpl::EvictTo(uint64_t target_used_bytes) {
  WriteOp op;
  op.kind = WriteOp::Kind::kEvictTo;
  op.arg = target_used_bytes;
  return RunOnWriter(std::move(op));
}

void StoreImpl::RequestDrop(NamespaceId ns, std::string_view key, uint64_t sequence) {
  if (opt_.read_only) return;
  WriteOp op;
  op.kind = WriteOp::Kind::kDrop;
  op.ns = ns;
  op.key.assign(key);
  op.arg = sequence;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (closing_) return;
    queue_.push_back(std::move(op));
  }
  work_cv_.notify_one();
}

void StoreImpl::ReleaseRing(uint64_t alloc_id) {
  // Caller holds mu_. Ring space is freed strictly in allocation order.
  for (Slot& s : slots_)
    if (s.id == alloc_id) {
      s.freed = true;
      break;
    }
  while (!slots_.empty() && slots_.front().freed) {
    ring_.Release(slots_.front().alloc);
    slots_.pop_front();
  }
}

// ---------------------------------------------------------------------------
// Writer thread

// The write ring is registered in pieces of this size (see WriterLoop).
constexpr uint64_t kRingPiece = 8ull << 20;

// Registers with the writer's io_uring the RAM tier's data area (in pieces of
// at most 1 GiB, io_uring's limit per buffer; puts are written from its
// chunks) and the first `ring_bytes` of the write ring, in 8 MiB pieces. The
// RAM tier comes first so that a grown ring only adds regions, which the
// queue registers without pinning the rest again. Best effort: if the kernel
// refuses (locked-memory limit), the ring alone from then on, else nothing;
// unregistered I/O works the same, only with per-I/O page pinning.
void StoreImpl::RegisterWriteBuffers(uint64_t ring_bytes) {
  std::vector<iovec> regions;
  if (ram_ != nullptr && !ram_unregistered_) {
    for (const iovec& r : ram_->Regions()) {
      constexpr size_t kMaxRegion = 1ull << 30;
      for (size_t off = 0; off < r.iov_len; off += kMaxRegion)
        regions.push_back(iovec{static_cast<uint8_t*>(r.iov_base) + off, std::min(kMaxRegion, r.iov_len - off)});
    }
  }
  const size_t ram_regions = regions.size();
  for (uint64_t off = 0; off < ring_bytes; off += kRingPiece)
    regions.push_back(iovec{ring_.base() + off, std::min(kRingPiece, ring_bytes - off)});
  if (write_queue_->RegisterBuffers(regions).ok() || ram_regions == 0) return;
  ram_unregistered_ = true;
  write_queue_->RegisterBuffers(std::span<const iovec>(regions).subspan(ram_regions)).IgnoreError();
}

void StoreImpl::WriterLoop() {
  // Registration happens here, not in Open (the ring binds to the thread that
  // uses it), and only when the writer is idle, for the part of the ring used
  // so far: the kernel holds the process's mmap lock while it pins a region,
  // and pinning the whole 256 MiB ring up front, on fresh huge pages, took
  // 1.1 s on the test VM (~4 ms per 2 MiB page), delaying the first puts and
  // every mmap of the process. Pages already touched pin in milliseconds.
  uint64_t registered = 0;  // ring bytes registered
  bool ever_registered = false;
  std::vector<WriteOp> group;
  for (;;) {
    group.clear();
    {
      std::unique_lock<std::mutex> l(mu_);
      if (queue_.empty() && !writer_stop_) {
        const uint64_t used = std::min(ring_.capacity(), (ring_.touched() + kRingPiece - 1) / kRingPiece * kRingPiece);
        if (used > registered || !ever_registered) {
          l.unlock();
          RegisterWriteBuffers(used);
          registered = used;
          ever_registered = true;
          l.lock();
        }
      }
      work_cv_.wait(l, [this] { return !queue_.empty() || writer_stop_; });
      if (queue_.empty() && writer_stop_) return;
      // A group: records up to group_commit_bytes, ended early by any other op
      // (which then runs after the records before it, keeping queue order).
      uint64_t bytes = 0;
      while (!queue_.empty()) {
        WriteOp& front = queue_.front();
        if (front.kind != WriteOp::Kind::kRecord) {
          if (group.empty()) {
            group.push_back(std::move(front));
            queue_.pop_front();
          }
          break;
        }
        if (!group.empty() && bytes + front.rec_bytes > opt_.group_commit_bytes) break;
        bytes += front.rec_bytes;
        group.push_back(std::move(front));
        queue_.pop_front();
      }
    }
    WriteOp& first = group.front();
    // Everything but records needs the passes before it committed.
    if (first.kind != WriteOp::Kind::kRecord) committer_->Drain();
    switch (first.kind) {
      case WriteOp::Kind::kRecord: WriteGroup(group); break;
      case WriteOp::Kind::kFlush: FinishPut(first.done, Status::OK()); break;
      case WriteOp::Kind::kRemove: DoRemove(first); break;
      case WriteOp::Kind::kDrop: DoDrop(first); break;
      case WriteOp::Kind::kRemoveNamespace: DoRemoveNamespace(first); break;
      case WriteOp::Kind::kEvictTo: DoEvictTo(first); break;
      case WriteOp::Kind::kSeal: DoSeal(first); break;
    }
  }
}

StoreImpl::Place StoreImpl::PlaceRecord(WriteOp& op, const std::unordered_set<uint32_t>& touched) {
  const uint64_t seg_size = table_->segment_size();
  // A dense record that follows the previous one in the ring follows it on
  // disk. Any other starts on a fresh page, a dense one at its offset within
  // its ring page, so that the pages in between can be written from the ring
  // as they are (WriteGroup). Every write ends on a page: the record must fit
  // with its padding.
  auto where = [&]() -> uint64_t {
    if (op.dense && dense_mem_end_ == op.alloc.data) return pos_.off;
    const uint64_t page = format::AlignUp(pos_.off);
    return op.dense ? page + reinterpret_cast<uintptr_t>(op.alloc.data) % kPage : page;
  };
  uint64_t at = where();
  if (pos_.seg == UINT32_MAX || format::AlignUp(at + op.rec_bytes) > seg_size || committer_->IsPoisoned(pos_.seg)) {
    dense_mem_end_ = nullptr;
    if (pos_.seg != UINT32_MAX) {
      SealOpenSegment();
      pass_sealed_ = true;
    }
    Status st = OpenNextSegment(touched);
    if (st.code() == Code::kAborted) return Place::kEndGroup;  // victim is in this group
    if (!st.ok()) {
      op.status = st;
      return Place::kFailed;
    }
    at = where();  // fits: dense records are at most a quarter of a segment
  }
  op.segment = pos_.seg;
  op.generation = pos_.gen;
  op.offset = at;
  op.sequence = pos_.next_seq++;
  pos_.off = at + op.rec_bytes;
  dense_mem_end_ = op.dense ? op.alloc.data + op.rec_bytes : nullptr;
  format::EncodeRecordHeader(HeaderOf(op), op.key, op.alloc.data);
  return Place::kPlaced;
}

// The writer stage: place a pass of records, write them, hand the pass to
// the committer. While the committer fdatasyncs and commits pass N, the writer is
// already writing pass N+1, so the device never idles waiting for a sync.
void StoreImpl::WriteGroup(std::vector<WriteOp>& group) {
  std::unordered_set<uint32_t> touched;
  WriteRuns runs(opt_.max_write_chunk_bytes);
  for (size_t begin = 0; begin < group.size();) {
    touched.clear();
    runs.Clear();
    pass_sealed_ = false;
    const size_t end = PlacePass(group, begin, &touched);
    QueueWrites(group, begin, end, &runs);
    SubmitPass(group, begin, end, touched, &runs);
    begin = end;
  }
}

// Places records from `begin`; stops early when rollover would reclaim a
// segment this pass is still writing, or when the pass's dense runs could
// need more than the staging buffer for their partial first and last pages.
// Returns the end of the pass.
size_t StoreImpl::PlacePass(std::vector<WriteOp>& group, size_t begin, std::unordered_set<uint32_t>* touched) {
  dense_mem_end_ = nullptr;  // pos_.off is on a page: nothing continues
  uint64_t scratch = 0;
  size_t end = begin;
  for (; end < group.size(); ++end) {
    WriteOp& op = group[end];
    if (op.dense && dense_mem_end_ != op.alloc.data) {
      if (end > begin && scratch + 2 * kPage > kStagingBytes) break;
      scratch += 2 * kPage;
    }
    Place r = PlaceRecord(op, *touched);
    if (r == Place::kEndGroup) break;
    if (r == Place::kPlaced) touched->insert(op.segment);
  }
  if (end == begin) {  // could not place even one: reclaim is blocked
    group[end].status = Status::NoSpace("no segment can be reclaimed");
    ++end;
  }
  pos_.off = format::AlignUp(pos_.off);  // the pass's last write is padded to a page
  return end;
}

namespace {
// A run of dense records: from an op, the ops after it that follow it on
// disk and in memory (ops that failed placement hold no space and are
// skipped).
struct DenseRun {
  size_t last, next;  // the run's last op, where to continue after it
};

std::vector<DenseRun> FindDenseRuns(const std::vector<WriteOp>& group, size_t begin, size_t end) {
  std::vector<DenseRun> runs;
  for (size_t i = begin; i < end;) {
    if (!group[i].status.ok() || !group[i].dense) {
      ++i;
      continue;
    }
    size_t last = i, j = i + 1;
    for (; j < end; ++j) {
      const WriteOp& o = group[j];
      if (!o.status.ok()) continue;
      const WriteOp& p = group[last];
      if (!o.dense || o.segment != p.segment || o.offset != p.offset + p.rec_bytes ||
          o.alloc.data != p.alloc.data + p.rec_bytes)
        break;
      last = j;
    }
    runs.push_back(DenseRun{last, j});
    i = j;
  }
  return runs;
}
}  // namespace

// One I/O per run that is contiguous on disk and in memory (records copied
// into the ring merge; borrowed payloads are written where they are). A run
// of dense records shares its first and last pages with other ring memory:
// those go through the staging buffer, zero outside the run.
void StoreImpl::QueueWrites(std::vector<WriteOp>& group, size_t begin, size_t end, WriteRuns* runs) {
  const std::vector<DenseRun> dense = FindDenseRuns(group, begin, end);
  const uint64_t stage_need = 2 * kPage * dense.size();  // a run's partial first and last page
  if (staging_.size() < stage_need && !staging_.Reset(std::max(stage_need, kStagingBytes))) {
    // Records placed after unwritten ones must not be acknowledged: fail the
    // pass and retire its segments, as a failed write does.
    for (size_t i = begin; i < end; ++i)
      if (group[i].status.ok()) {
        group[i].status = Status::NoSpace("out of memory for the write staging buffer");
        committer_->Poison(group[i].segment);
      }
  }
  uint8_t* scratch_page = staging_.data();
  size_t run = 0;
  for (size_t i = begin; i < end;) {
    WriteOp& op = group[i];
    if (!op.status.ok()) {
      ++i;
      continue;
    }
    File* file = table_->file(op.segment);
    if (op.dense) {
      const auto [last, next] = dense[run++];
      // The run is [f0, f1) on disk and starts at m0 in the ring, at the same
      // offset within a page (PlaceRecord).
      const uint64_t f0 = op.offset, f1 = group[last].offset + group[last].rec_bytes;
      uint8_t* const m0 = op.alloc.data;
      for (uint64_t pg = format::PageStart(f0); pg < f1;) {
        if (pg >= f0 && pg + kPage <= f1) {  // whole pages of the run
          const uint64_t stop = format::PageStart(f1);
          runs->Add(file, pg, m0 + (pg - f0), stop - pg);
          pg = stop;
          continue;
        }
        const uint64_t lo = std::max(pg, f0), hi = std::min(pg + kPage, f1);
        std::memset(scratch_page, 0, kPage);
        std::memcpy(scratch_page + (lo - pg), m0 + (lo - f0), hi - lo);
        runs->Add(file, pg, scratch_page, kPage);
        scratch_page += kPage;
        pg += kPage;
      }
      i = next;
      continue;
    }
    iovec whole{op.alloc.data, op.rec_bytes};
    std::span<const iovec> pieces = op.pieces.empty() ? std::span<const iovec>(&whole, 1) : op.pieces;
    uint64_t at = op.offset;
    for (const iovec& piece : pieces) {
      runs->Add(file, at, static_cast<uint8_t*>(piece.iov_base), piece.iov_len);
      at += piece.iov_len;
    }
    ++i;
  }
}

// Writes the pass, fails (and poisons) what a failed write touched, and hands
// the pass to the committer with the append position after it.
void StoreImpl::SubmitPass(std::vector<WriteOp>& group, size_t begin, size_t end,
                           const std::unordered_set<uint32_t>& touched, WriteRuns* runs) {
  std::vector<IoRequest>& reqs = runs->requests();
  if (!reqs.empty()) write_queue_->Submit(reqs).IgnoreError();  // per-request statuses below
  c_.registered_writes.Set(write_queue_->stats().registered_buffer_requests);
  std::unordered_map<File*, Status> failed;
  for (const IoRequest& rq : reqs) {
    if (!rq.status.ok() && !failed.count(rq.file)) failed[rq.file] = rq.status;
    if (rq.status.ok()) c_.device_bytes_written.Add(rq.len);
  }
  CommitJob job;
  for (size_t i = begin; i < end; ++i) {
    WriteOp& op = group[i];
    if (op.status.ok()) {
      auto f = failed.find(table_->file(op.segment));
      if (f != failed.end()) {
        op.status = f->second.WithContext("writing record");
        committer_->Poison(op.segment);
      }
    }
    job.ops.push_back(std::move(op));
  }
  job.touched.assign(touched.begin(), touched.end());
  job.sealed = pass_sealed_;
  if (pos_.seg != UINT32_MAX) table_->SetUsed(pos_.seg, pos_.off);
  job.frontier.epoch = pos_.epoch;
  job.frontier.offset = pos_.seg == UINT32_MAX ? table_->segment_size() : pos_.off;
  job.frontier.next_sequence = pos_.next_seq;
  committer_->HandOff(std::move(job));
}

void StoreImpl::ReleaseCommitted(std::span<const WriteOp> ops) {
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const WriteOp& op : ops) {
      ReleaseRing(op.alloc_id);
      borrowed_inflight_ -= op.borrowed;
    }
  }
  space_cv_.notify_all();
  // A put that did not become durable takes its RAM copy back.
  if (ram_ != nullptr)
    for (const WriteOp& op : ops)
      if (!op.status.ok() && op.ram_token != 0) ram_->EraseIf(op.ns, op.key, op.ram_token);
}

Status StoreImpl::OpenNextSegment(const std::unordered_set<uint32_t>& touched) {
  uint32_t seg = table_->AnyFree();
  if (seg == UINT32_MAX && table_->CountFiles() < max_segments_) {
    auto created = table_->CreateSegmentFile();
    if (created.ok()) {
      seg = *created;
    } else if (created.status().code() != Code::kNoSpace || table_->OldestSealed() == UINT32_MAX) {
      return created.status();
    } else {
      // Out of disk before the budget: the budget becomes what is held, and
      // the store reclaims from here on. Said once, and counted.
      c_.disk_full_events.Add();
      const uint64_t held = std::max<uint64_t>(2, table_->CountFiles());
      if (held < max_segments_) {
        Warn("the disk under " + dir_ + " is full before the capacity was reached: capacity lowered from " +
             std::to_string(max_segments_ * table_->segment_size()) + " to " +
             std::to_string(held * table_->segment_size()) + " bytes (" + created.status().message() + ")");
        max_segments_ = held;
      }
    }
  }
  if (seg == UINT32_MAX) {
    seg = table_->OldestSealed();
    if (seg == UINT32_MAX) return Status::NoSpace("capacity holds no segment to reclaim");
    if (touched.count(seg)) return Status::Aborted("victim segment is being written");
    committer_->Drain();  // earlier passes may still be committing into the victim
    return reclaimer_->Reclaim(seg, /*reuse=*/true, &pos_);
  }
  auto gen = table_->Activate(seg, ++pos_.epoch);
  if (!gen.ok()) return gen.status();
  pos_.seg = seg;
  pos_.gen = *gen;
  pos_.off = format::kSegmentDataStart;
  return Status::OK();
}

Status StoreImpl::CheckpointNow(bool clean) {
  Checkpoint cp;
  cp.epoch = pos_.epoch;
  cp.offset = pos_.seg == UINT32_MAX ? table_->segment_size() : pos_.off;
  cp.next_sequence = pos_.next_seq;
  cp.clean = clean;
  return committer_->CheckpointAt(cp);
}

void StoreImpl::DoRemove(WriteOp& op) {
  auto e = index_->Get(op.ns, op.key);
  Status st = e.status();
  if (e.ok() && e->has_value()) {
    IndexBatch b;
    b.Delete(op.ns, op.key, **e);
    st = index_->Commit(b, false);
    // Move the checkpoint past the record so recovery can never re-index it;
    // this also makes the delete durable (the WAL is synced first).
    if (st.ok()) st = CheckpointNow(false);
  }
  if (ram_ != nullptr) ram_->Erase(op.ns, op.key);
  FinishPut(op.done, st);
}

void StoreImpl::DoDrop(WriteOp& op) {
  auto e = index_->Get(op.ns, op.key);
  if (e.ok() && e->has_value() && (*e)->sequence == op.arg) {
    IndexBatch b;
    b.Delete(op.ns, op.key, **e);
    if (index_->Commit(b, false).ok()) c_.stale_entries_dropped.Add();
    if (ram_ != nullptr) ram_->Erase(op.ns, op.key);
  }
}

void StoreImpl::DoRemoveNamespace(WriteOp& op) {
  {
    std::shared_lock<std::shared_mutex> l(ns_mu_);
    if (!namespaces_.count(op.ns))
      return FinishPut(op.done, Status::NotFound("unknown namespace " + NamespaceIdToHex(op.ns)));
  }
  Status st;
  for (;;) {
    IndexBatch b;
    st = index_->ForEach(op.ns, "", [&](NamespaceId ns, std::string_view key, const format::IndexValue& v) {
      b.Delete(ns, key, v);
      return b.count() < 10000;
    });
    if (!st.ok() || b.empty()) break;
    st = index_->Commit(b, false);
    if (!st.ok()) break;
  }
  // The file goes first: once it is gone a crash cannot resurrect the
  // namespace's records through recovery or repair.
  if (st.ok()) st = RemoveNamespaceFile(op.ns);
  if (st.ok()) st = index_->DeleteNamespace(op.ns, false);
  if (st.ok()) st = CheckpointNow(false);
  if (st.ok()) {
    std::unique_lock<std::shared_mutex> l(ns_mu_);
    namespaces_.erase(op.ns);
  }
  if (ram_ != nullptr) ram_->EraseNamespace(op.ns);
  FinishPut(op.done, st);
}

void StoreImpl::DoEvictTo(WriteOp& op) {
  Status st;
  while (st.ok() && UsedBytes() > op.arg) {
    uint32_t seg = table_->OldestSealed();
    if (seg == UINT32_MAX) {
      // Only the open segment is left: seal it so it can go too.
      if (pos_.seg == UINT32_MAX) break;
      table_->Seal(pos_.seg, pos_.off);
      pos_.seg = UINT32_MAX;
      continue;
    }
    st = reclaimer_->Reclaim(seg, /*reuse=*/false, &pos_);
  }
  if (st.ok()) st = CheckpointNow(false);
  FinishPut(op.done, st);
}

void StoreImpl::SealOpenSegment() {
  // Its last write is padded to a page: used bytes stay page aligned (the
  // shared tier uploads them with O_DIRECT reads).
  table_->Seal(pos_.seg, format::AlignUp(pos_.off));
  RemoteNoteSealed(pos_.seg, pos_.gen);
  pos_.seg = UINT32_MAX;
}

// Seals the open segment if it holds records, for the shared tier to upload.
void StoreImpl::DoSeal(WriteOp& op) {
  Status st;
  if (pos_.seg != UINT32_MAX && pos_.off > format::kSegmentDataStart) {
    SealOpenSegment();
    st = CheckpointNow(false);
  }
  FinishPut(op.done, st);
}

Status StoreImpl::ShareNow(std::chrono::milliseconds timeout) {
  if (!remote_ || opt_.read_only) return Status::OK();
  const Clock::time_point deadline = Clock::now() + timeout;
  WriteOp op;
  op.kind = WriteOp::Kind::kSeal;
  KVTIER_RETURN_IF_ERROR(RunOnWriter(std::move(op)));
  if (!RemoteWaitUploaded(deadline))
    return Status::TimedOut("shared tier uploads still running after " + std::to_string(timeout.count()) + " ms");
  return Status::OK();
}

uint64_t StoreImpl::UsedBytes() const {
  uint64_t used = 0;
  for (const SegmentInfo& s : table_->Snapshot())
    if (s.state != SegmentState::kFree) used += s.used_bytes;
  return used;
}

}  // namespace kvtier
