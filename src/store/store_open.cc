// Opening, recovery, namespaces, stats and closing.
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "client/service_store.h"
#include "format/coding.h"
#include "log/reindexer.h"
#include "store/layout.h"
#include "store/store_impl.h"
#include "util/clock.h"

namespace kvtier {

namespace {

Status CheckOptions(const Options& o) {
  if (o.segment_size_bytes < format::kMinSegmentBytes || o.segment_size_bytes > format::kMaxSegmentBytes ||
      o.segment_size_bytes % (1ull << 20) != 0)
    return Status::InvalidArgument("segment_size_bytes must be a multiple of 1 MiB between 1 MiB and 64 GiB");
  if (o.queue_depth == 0 || o.queue_depth > 4096)
    return Status::InvalidArgument("queue_depth must be in 1..4096");
  if (o.read_threads == 0 || o.read_threads > 256)
    return Status::InvalidArgument("read_threads must be in 1..256");
  if (o.max_write_chunk_bytes < format::kPage || o.max_write_chunk_bytes % format::kPage != 0)
    return Status::InvalidArgument("max_write_chunk_bytes must be a positive multiple of 4096");
  if (o.max_payload_bytes == 0) return Status::InvalidArgument("max_payload_bytes must be > 0");
  if (o.dense_record_max_bytes > (4u << 20))
    return Status::InvalidArgument("dense_record_max_bytes must be at most 4 MiB");
  if (o.reinsert_max_fraction < 0 || o.reinsert_max_fraction > 1)
    return Status::InvalidArgument("reinsert_max_fraction must be in [0, 1]");
  if (!(o.hot_region_fraction >= 0 && o.hot_region_fraction < 1))
    return Status::InvalidArgument("hot_region_fraction must be in [0, 1)");
  if (!(o.reclaim_window_fraction >= 0 && o.reclaim_window_fraction <= 1))
    return Status::InvalidArgument("reclaim_window_fraction must be in [0, 1]");
  if (o.ram_tier_chunk_bytes < format::kPage || o.ram_tier_chunk_bytes > (64u << 20) ||
      o.ram_tier_chunk_bytes % format::kPage != 0)
    return Status::InvalidArgument("ram_tier_chunk_bytes must be a multiple of 4096 from 4 KiB to 64 MiB");
  if (o.ram_copy_spin_us > 10000) return Status::InvalidArgument("ram_copy_spin_us must be at most 10000");
  return Status::OK();
}
}  // namespace

StoreImpl::StoreImpl(std::string dir, Options options) : dir_(std::move(dir)), opt_(std::move(options)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

StoreImpl::~StoreImpl() { Close().IgnoreError(); }

Result<std::unique_ptr<Store>> Store::Open(const std::string& dir, const Options& options) {
  if (dir.empty()) return Status::InvalidArgument("store folder path is empty");
  if (dir.rfind("unix:", 0) == 0 || dir.rfind("auto:", 0) == 0) return client::OpenServiceStore(dir, options);
  KVTIER_RETURN_IF_ERROR(CheckOptions(options));
  auto s = std::make_unique<StoreImpl>(dir, options);
  Status st = s->OpenImpl();
  if (!st.ok()) return st;
  return std::unique_ptr<Store>(std::move(s));
}

// Reads SUPERBLOCK and returns the first copy that verifies.
static Result<format::Superblock> LoadSuperblock(FileSystem* fs, const std::string& path) {
  OpenFlags f;
  f.read_only = true;
  auto file = fs->Open(path, f);
  if (!file.ok()) return file.status();
  auto size = (*file)->Size();
  if (!size.ok()) return size.status();
  std::vector<uint8_t> buf(format::kSuperblockFileBytes, 0);
  size_t n = std::min<uint64_t>(*size, buf.size());
  if (n > 0) KVTIER_RETURN_IF_ERROR((*file)->ReadAt(0, buf.data(), n));
  Status first_error;
  for (size_t copy = 0; copy < 2; ++copy) {
    auto r = format::DecodeSuperblock({buf.data() + copy * format::kPage, format::kSuperblockEncodedBytes});
    if (r.ok()) return r;
    if (r.status().code() == Code::kNotSupported) return r.status().WithContext(path);
    if (first_error.ok()) first_error = r.status();
  }
  return Status::Corruption(path + ": both superblock copies are damaged (" + first_error.message() + ")");
}

Result<StoreDescription> Store::Describe(const std::string& dir) {
  auto fs = DefaultFileSystem(IoBackend::kPosix);
  auto sb = LoadSuperblock(fs.get(), layout::SuperblockPath(dir));
  if (!sb.ok()) {
    if (sb.status().code() == Code::kNotFound)
      return Status::NotFound(dir + " holds no kvtier store (no SUPERBLOCK)");
    return sb.status();
  }
  StoreDescription d;
  d.format_version = sb->format_version;
  d.store_id = format::StoreIdHex(sb->store_id);
  d.segment_size_bytes = sb->segment_size;
  d.created_unix_ms = sb->created_unix_ms;
  return d;
}

Status StoreImpl::CreateOrLoadSuperblock(bool* created) {
  const std::string path = layout::SuperblockPath(dir_);
  auto exists = fs_->Exists(path);
  if (!exists.ok()) return exists.status();
  *created = false;
  if (!*exists) {
    if (opt_.read_only || !opt_.create_if_missing)
      return Status::NotFound(dir_ + " holds no kvtier store (no SUPERBLOCK)");
    auto names = fs_->ListDir(dir_);
    if (!names.ok()) return names.status();
    // Besides the lock, tolerate what a crash during an earlier creation can
    // leave behind (the superblock is renamed into place last).
    for (const std::string& n : *names)
      if (!layout::LeftByInterruptedCreation(n))
        return Status::InvalidArgument(dir_ + " is not a kvtier store and is not empty (found '" + n + "')");
    format::Superblock sb;
    if (getrandom(sb.store_id.data(), sb.store_id.size(), 0) != static_cast<ssize_t>(sb.store_id.size()))
      return Status::FromErrno(errno, "getrandom");
    sb.segment_size = opt_.segment_size_bytes;
    sb.created_unix_ms = NowUnixMs();
    // Two identical checksummed copies, written to a temporary file that is
    // synced and renamed into place: a crash leaves no superblock or a whole one.
    std::vector<uint8_t> buf(format::kSuperblockFileBytes, 0);
    for (size_t copy = 0; copy < 2; ++copy)
      format::EncodeSuperblock(sb, std::span<uint8_t, format::kSuperblockEncodedBytes>(
                                       buf.data() + copy * format::kPage, format::kSuperblockEncodedBytes));
    const std::string tmp = path + std::string(layout::kTempSuffix);
    OpenFlags f;
    f.create = true;
    f.mode = opt_.group_access ? 0660 : 0600;
    auto file = fs_->Open(tmp, f);
    if (!file.ok()) return file.status();
    KVTIER_RETURN_IF_ERROR((*file)->Truncate(0));
    KVTIER_RETURN_IF_ERROR((*file)->WriteAt(0, buf.data(), buf.size()));
    KVTIER_RETURN_IF_ERROR((*file)->Sync());
    file->reset();
    unsigned dmode = opt_.group_access ? 0770 : 0700;
    KVTIER_RETURN_IF_ERROR(fs_->CreateDir(layout::SegmentsDir(dir_), dmode));
    KVTIER_RETURN_IF_ERROR(fs_->CreateDir(layout::NamespacesDir(dir_), dmode));
    KVTIER_RETURN_IF_ERROR(fs_->Rename(tmp, path));
    KVTIER_RETURN_IF_ERROR(fs_->SyncDir(dir_));
    *created = true;
  } else if (opt_.error_if_exists) {
    return Status::InvalidArgument("a kvtier store already exists in " + dir_);
  }
  auto sb = LoadSuperblock(fs_.get(), path);
  if (!sb.ok()) return sb.status();
  store_id_ = sb->store_id;
  description_.format_version = sb->format_version;
  // A quarter segment at most, so a dense record at any offset within its
  // first page fits an empty segment.
  opt_.dense_record_max_bytes = std::min<uint64_t>(opt_.dense_record_max_bytes, sb->segment_size / 4);
  description_.store_id = format::StoreIdHex(sb->store_id);
  description_.segment_size_bytes = sb->segment_size;
  description_.created_unix_ms = sb->created_unix_ms;
  return Status::OK();
}

Status StoreImpl::OpenImpl() {
  const Clock::time_point started = Clock::now();
  fs_ = opt_.file_system ? opt_.file_system : DefaultFileSystem(opt_.io_backend);
  KVTIER_RETURN_IF_ERROR(OpenFolder());
  bool created = false;
  KVTIER_RETURN_IF_ERROR(CreateOrLoadSuperblock(&created));
  KVTIER_RETURN_IF_ERROR(OpenIndex());
  KVTIER_RETURN_IF_ERROR(LoadNamespaces());
  KVTIER_RETURN_IF_ERROR(OpenSegments());
  if (!opt_.read_only) {
    KVTIER_RETURN_IF_ERROR(OpenWritePath());
    if (!repair_mode_) KVTIER_RETURN_IF_ERROR(Recover());
  } else {
    LoadUsageReadOnly();
  }
  if (!repair_mode_) KVTIER_RETURN_IF_ERROR(OpenRamTier());  // store_ram.cc
  if (!repair_mode_) StartThreads();
  KVTIER_RETURN_IF_ERROR(StartRemote());  // store_remote.cc
  c_.open_seconds.store(SecondsSince(started));
  return Status::OK();
}

// The folder (made when missing and allowed) and, read-write, its lock.
Status StoreImpl::OpenFolder() {
  auto exists = fs_->Exists(dir_);
  if (!exists.ok()) return exists.status();
  if (!*exists) {
    if (opt_.read_only || !opt_.create_if_missing)
      return Status::NotFound("store folder " + dir_ + " does not exist");
    KVTIER_RETURN_IF_ERROR(fs_->CreateDir(dir_, opt_.group_access ? 0770 : 0700));
  }
  if (!opt_.read_only) {
    auto lock = fs_->Lock(layout::LockPath(dir_), /*exclusive=*/true, opt_.group_access ? 0660 : 0600);
    if (!lock.ok()) return lock.status();
    lock_ = std::move(lock).value();
  }
  return Status::OK();
}

uint64_t StoreImpl::CapacityBytes() const { return opt_.capacity_bytes != 0 ? opt_.capacity_bytes : 8ull << 30; }

Status StoreImpl::OpenIndex() {
  IndexOpenOptions io;
  io.file_system = fs_;
  io.read_only = opt_.read_only;
  io.create_if_missing = !opt_.read_only;
  io.dir_mode = opt_.group_access ? 0770 : 0700;
  io.file_mode = opt_.group_access ? 0660 : 0600;
  // About 100 bytes of index per block and blocks of >= 4 KiB: a memtable of
  // capacity/256 holds more than a tenth of the store's entries; at most
  // RocksDB's usual 64 MiB, at least 4 MiB.
  io.write_buffer_bytes = std::clamp<uint64_t>(CapacityBytes() / 256, 4u << 20, 64u << 20);
  io.warn = [this](const std::string& line) { Warn(line); };
  auto index = Index::Open(layout::IndexDir(dir_), io);
  if (!index.ok() && repair_mode_ && index.status().code() != Code::kBusy) {
    // The index is a cache of the segments: set the damaged one aside (for
    // inspection) and rebuild into a fresh one.
    const std::string aside = layout::DamagedIndexPath(dir_, NowUnixMs());
    KVTIER_RETURN_IF_ERROR(fs_->Rename(layout::IndexDir(dir_), aside));
    KVTIER_RETURN_IF_ERROR(fs_->SyncDir(dir_));
    damaged_index_moved_to_ = aside;
    index = Index::Open(layout::IndexDir(dir_), io);
  }
  if (!index.ok()) {
    return index.status().WithContext("opening index of " + dir_ +
                                      (repair_mode_ ? "" : " (`kvtier repair " + dir_ +
                                                               "` rebuilds it from the segments)"));
  }
  index_ = std::move(index).value();
  return Status::OK();
}

// The segment table, the budget in segments, the payload bound and the
// admission policy.
Status StoreImpl::OpenSegments() {
  SegmentTable::Config tc;
  tc.fs = fs_.get();
  tc.dir = layout::SegmentsDir(dir_);
  tc.segment_size = description_.segment_size_bytes;
  tc.store_id = store_id_;
  tc.direct = opt_.use_direct_io;
  tc.read_only = opt_.read_only;
  tc.file_mode = opt_.group_access ? 0660 : 0600;
  table_ = std::make_unique<SegmentTable>(tc);
  KVTIER_RETURN_IF_ERROR(table_->Load());
  max_segments_ = std::max<uint64_t>(2, CapacityBytes() / description_.segment_size_bytes);
  configured_segments_ = max_segments_;
  if (!opt_.read_only) CapCapacityToDisk();
  opt_.max_payload_bytes =
      std::min({opt_.max_payload_bytes, description_.segment_size_bytes - format::kPage,
                format::AlignUp(opt_.write_queue_bytes, 1ull << 20) - format::kPage});
  admission_ = std::make_unique<Admission>(opt_.write_budget_bytes_per_day, opt_.admit_on_second_put,
                                           opt_.second_put_window);
  return Status::OK();
}

// The committer (recovery checkpoints through it), the write ring and the
// writer (its thread starts with the others).
Status StoreImpl::OpenWritePath() {
  Committer::Deps cd;
  cd.index = index_.get();
  cd.table = table_.get();
  cd.counters = &c_;
  cd.checkpoint_interval_bytes = opt_.checkpoint_interval_bytes;
  cd.release = [this](std::span<const WriteOp> ops) { ReleaseCommitted(ops); };
  committer_ = std::make_unique<Committer>(std::move(cd));
  KVTIER_RETURN_IF_ERROR(ops_.Init());
  auto q = fs_->NewIoQueue(opt_.queue_depth);
  if (!q.ok()) return q.status();
  Writer::Deps wd;
  wd.ops = &ops_;
  wd.index = index_.get();
  wd.table = table_.get();
  wd.committer = committer_.get();
  wd.counters = &c_;
  wd.hits = &hits_;
  wd.io = std::move(q).value();
  wd.max_segments = &max_segments_;
  wd.group_commit_bytes = opt_.group_commit_bytes;
  wd.max_write_chunk_bytes = opt_.max_write_chunk_bytes;
  wd.stored_payload_limit = StoredPayloadLimit();
  wd.reinsert = opt_.reinsert_hot_blocks;
  wd.punch_holes = opt_.punch_holes;
  wd.reinsert_max_fraction = opt_.reinsert_max_fraction;
  wd.reinsert_min_hits = opt_.reinsert_min_hits;
  wd.hot_region_fraction = opt_.hot_region_fraction;
  wd.reclaim_window_fraction = opt_.reclaim_window_fraction;
  wd.dir = dir_;
  wd.warn = [this](const std::string& line) { Warn(line); };
  wd.sealed = [this](uint32_t seg, uint32_t gen) { RemoteNoteSealed(seg, gen); };
  writer_ = std::make_unique<Writer>(std::move(wd));
  return Status::OK();
}

// Usage as the writer last recorded it (no recovery runs read-only).
void StoreImpl::LoadUsageReadOnly() {
  auto cp = index_->ReadCheckpoint();
  if (cp.ok() && cp->has_value())
    for (const SegmentInfo& s : table_->Snapshot())
      if (s.state != SegmentState::kFree && s.epoch == (*cp)->epoch && (*cp)->offset < description_.segment_size_bytes)
        table_->SetUsed(s.id, (*cp)->offset);
}

void StoreImpl::Warn(const std::string& line) const {
  if (opt_.warn) {
    opt_.warn(line);
  } else {
    std::fprintf(stderr, "kvtier: %s\n", line.c_str());
  }
}

// Segment files are preallocated, so the ones held already have their
// space; new ones need free space beside the index's growth (kept free).
// A budget above that would be met by evicting at every rollover while each
// put still answered OK: cap it, and say so.
void StoreImpl::CapCapacityToDisk() {
  auto free = fs_->FreeSpace(dir_);
  if (!free.ok()) return;
  const uint64_t seg = description_.segment_size_bytes;
  const uint64_t headroom = std::min<uint64_t>(*free / 8, 256ull << 20);
  const uint64_t room = table_->CountFiles() + (*free - headroom) / seg;
  if (room >= max_segments_) return;
  const uint64_t capped = std::max<uint64_t>(2, room);
  Warn("capacity " + std::to_string(max_segments_ * seg) + " bytes is more than the disk under " + dir_ +
       " can hold (" + std::to_string(*free) + " bytes free): using " + std::to_string(capped * seg) +
       " bytes, " + std::to_string((max_segments_ - capped) * seg) + " less");
  max_segments_ = capped;
}

// Recovery: index entries are durable up to the checkpoint; records appended
// after it may have lost theirs. Rescan exactly those records, re-index what
// verifies, and cut the torn tail.
Status StoreImpl::Recover() {
  auto cpr = index_->ReadCheckpoint();
  if (!cpr.ok()) return cpr.status().WithContext("reading checkpoint");
  Checkpoint cp = cpr->value_or(Checkpoint{});
  AppendPosition& pos = writer_->position();
  std::vector<SegmentInfo> segs = table_->Snapshot();
  std::erase_if(segs, [](const SegmentInfo& s) { return s.state == SegmentState::kFree; });
  std::sort(segs.begin(), segs.end(), [](const SegmentInfo& a, const SegmentInfo& b) { return a.epoch < b.epoch; });
  pos.epoch = table_->MaxEpoch();
  pos.next_seq = std::max<uint64_t>(cp.next_sequence, 1);
  for (const SegmentInfo& s : segs) index_->DropSegmentRowsBelow(s.id, s.generation).IgnoreError();
  table_->MarkHot(index_->ReadHotSegments());

  const bool clean = cp.clean && pos.epoch == cp.epoch;
  if (clean) {
    // Nothing after the checkpoint: resume appending where Close stopped.
    if (!segs.empty() && segs.back().epoch == cp.epoch && cp.offset < description_.segment_size_bytes) {
      pos.seg = segs.back().id;
      pos.gen = segs.back().generation;
      pos.off = cp.offset;
      table_->SetUsed(pos.seg, pos.off);
    }
  } else {
    c_.recovered_from_crash.store(true);
    auto marks = index_->HasRemoveMarks();
    if (!marks.ok()) return marks.status().WithContext("recovery");
    remove_marks_ = *marks;
    uint64_t max_seq = 0;
    for (const SegmentInfo& s : segs) {
      if (s.epoch < cp.epoch) continue;
      const uint64_t start = s.epoch == cp.epoch ? cp.offset : format::kSegmentDataStart;
      KVTIER_RETURN_IF_ERROR(RecoverSegment(s, start, 0, &max_seq));
    }
    KVTIER_RETURN_IF_ERROR(RecoverHotTail(segs, cp, &max_seq));
    pos.next_seq = std::max(pos.next_seq, max_seq + 1);
    // Appends resume in a fresh segment: the cut tail is never written again.
    pos.seg = UINT32_MAX;
  }
  // A crash from now on must rescan from here.
  KVTIER_RETURN_IF_ERROR(writer_->CheckpointNow(false));
  // Past every record now: the marks have done their work. Their delete is
  // durable only with or after that checkpoint (a flush is a prefix).
  if (remove_marks_) KVTIER_RETURN_IF_ERROR(index_->DropRemoveMarks().WithContext("recovery"));
  remove_marks_ = false;
  return Status::OK();
}

// Re-indexes the records of `s` from `start` that verify (those with a
// sequence below `min_sequence` only counted), and cuts the torn tail after
// the last of them: whatever follows it was never acknowledged. Zeroed, so
// no later scan can mistake it for data.
Status StoreImpl::RecoverSegment(const SegmentInfo& s, uint64_t start, uint64_t min_sequence, uint64_t* max_seq) {
  if (start >= description_.segment_size_bytes) return Status::OK();
  SegmentScanner scanner(table_->file(s.id), s.id, s.generation, description_.segment_size_bytes,
                         StoredPayloadLimit());
  Reindexer reindex(index_.get(), remove_marks_);
  Status ist;
  ScanResult r;
  Status st = scanner.Scan(start, /*verify_payload=*/true, /*resync=*/false, [&](const ScannedRecord& rec) {
    *max_seq = std::max(*max_seq, rec.header.sequence);
    if (rec.header.sequence < min_sequence) return true;
    if (!namespaces_.Contains(rec.header.ns_id)) return true;  // namespace was removed
    auto taken = reindex.Offer(rec, s.id, s.generation);
    if (!taken.ok()) {
      ist = taken.status();
      return false;
    }
    if (*taken) c_.recovery_reindexed.Add();
    return true;
  }, &r);
  if (!st.ok()) return st.WithContext("recovery scan of segment " + std::to_string(s.id));
  if (!ist.ok()) return ist.WithContext("recovery re-index");
  KVTIER_RETURN_IF_ERROR(reindex.Finish().WithContext("recovery re-index"));
  c_.recovery_scanned_bytes.Add(r.bytes_read);
  table_->Seal(s.id, format::AlignUp(r.end));  // zero from r.end (cut below)
  if (r.end < description_.segment_size_bytes) {
    // A group commit can tear the end of one segment and the start of the
    // next: every segment written since the checkpoint is cut.
    c_.recovery_torn_bytes.Add(r.torn ? description_.segment_size_bytes - r.end : 0);
    File* f = table_->file(s.id);
    Status ps = ZeroRange(f, r.end, description_.segment_size_bytes - r.end);
    if (ps.ok()) ps = f->Sync();
    if (!ps.ok()) return ps.WithContext("cutting the torn tail of segment " + std::to_string(s.id));
  }
  return Status::OK();
}

// Reclaims write hot blocks again into the hot region's open segment, which
// can be older than the checkpoint: the scan above does not reach it, and a
// crash inside such a write left a torn record there that nothing cut (a
// deep verify after a kill found one). That segment is the hot one of the
// highest epoch: its records are verified and the rest after the last good
// one cut, as above, but none is re-indexed. A reinserted block whose entry
// the crash took is evicted, as a cache may; re-indexing it could bring back
// a block removed or replaced since.
Status StoreImpl::RecoverHotTail(const std::vector<SegmentInfo>& segs, const Checkpoint& cp, uint64_t* max_seq) {
  const auto hot_ids = table_->HotSegments();  // marked from the index's hint above
  const SegmentInfo* hot = nullptr;
  for (const SegmentInfo& s : segs) {
    const bool is_hot = std::any_of(hot_ids.begin(), hot_ids.end(), [&](const auto& h) {
      return h.first == s.id && h.second == s.generation;
    });
    if (is_hot && (hot == nullptr || s.epoch > hot->epoch)) hot = &s;
  }
  if (hot == nullptr || hot->epoch >= cp.epoch) return Status::OK();  // scanned above
  return RecoverSegment(*hot, format::kSegmentDataStart, /*min_sequence=*/UINT64_MAX, max_seq);
}

void StoreImpl::StartThreads() {
  reads_ = std::make_unique<ReadPool>(ReadDeps());
  deadlines_ = std::make_unique<DeadlineTimer>(&c_);
  if (!opt_.read_only) {
    committer_->Start();
    // Last: it starts by registering the write ring, which holds the mmap
    // lock that creating the other threads' stacks needs.
    writer_->Start(ram_.get());
  }
}

Status StoreImpl::Close() {
  if (closed_.load()) return Status::Closed("store already closed");
  ShareOnClose();  // store_remote.cc
  StopRemote();
  if (closed_.exchange(true)) return Status::Closed("store already closed");
  ops_.Close();
  if (writer_ != nullptr) writer_->Stop();
  if (committer_ != nullptr) committer_->Stop();
  if (reads_ != nullptr) reads_->Stop();
  if (deadlines_ != nullptr) deadlines_->Stop();
  Status st;
  if (writer_ != nullptr && index_ != nullptr && table_ != nullptr) {
    const AppendPosition& pos = writer_->position();
    if (pos.seg != UINT32_MAX) table_->SetUsed(pos.seg, pos.off);
    st = writer_->CheckpointNow(/*clean=*/true);
    Status f = index_->FlushMemtables();
    if (st.ok()) st = f;
  }
  ram_.reset();  // a shared-memory tier stays in its file for the next open
  writer_.reset();
  committer_.reset();
  index_.reset();
  table_.reset();
  lock_.reset();
  return st;
}

}  // namespace kvtier
