// Opening, recovery, namespaces, stats and closing.
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "format/coding.h"
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
  return Status::OK();
}
}  // namespace

StoreImpl::StoreImpl(std::string dir, Options options) : dir_(std::move(dir)), opt_(std::move(options)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

StoreImpl::~StoreImpl() { Close().IgnoreError(); }

Result<std::unique_ptr<Store>> Store::Open(const std::string& dir, const Options& options) {
  if (dir.empty()) return Status::InvalidArgument("store folder path is empty");
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
  dense_ok_ = sb->format_version >= 3 && opt_.dense_record_max_bytes > 0;
  description_.store_id = format::StoreIdHex(sb->store_id);
  description_.segment_size_bytes = sb->segment_size;
  description_.created_unix_ms = sb->created_unix_ms;
  return Status::OK();
}

Status StoreImpl::OpenImpl() {
  open_started_ = Clock::now();
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
  c_.open_seconds.store(SecondsSince(open_started_));
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
  io.read_only = opt_.read_only;
  io.create_if_missing = !opt_.read_only;
  io.dir_mode = opt_.group_access ? 0770 : 0700;
  io.file_mode = opt_.group_access ? 0660 : 0600;
  // About 100 bytes of index per block and blocks of >= 4 KiB: a memtable of
  // capacity/256 holds more than a tenth of the store's entries; at most
  // RocksDB's usual 64 MiB, at least 4 MiB.
  io.write_buffer_bytes = std::clamp<uint64_t>(CapacityBytes() / 256, 4u << 20, 64u << 20);
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
// writer's queue.
Status StoreImpl::OpenWritePath() {
  Committer::Deps cd;
  cd.index = index_.get();
  cd.table = table_.get();
  cd.counters = &c_;
  cd.checkpoint_interval_bytes = opt_.checkpoint_interval_bytes;
  cd.release = [this](std::span<const WriteOp> ops) { ReleaseCommitted(ops); };
  committer_ = std::make_unique<Committer>(std::move(cd));
  KVTIER_RETURN_IF_ERROR(ring_.Init(opt_.write_queue_bytes));
  auto q = fs_->NewIoQueue(opt_.queue_depth);
  if (!q.ok()) return q.status();
  write_queue_ = std::move(q).value();
  return Status::OK();
}

// Usage as the writer last recorded it (no recovery runs read-only).
void StoreImpl::LoadUsageReadOnly() {
  pos_.epoch = table_->MaxEpoch();
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

// Namespaces live in the index and, so that the index can be rebuilt from
// the store folder alone, in one small checksummed file each under
// namespaces/. The files are authoritative; the index copy serves listing.
Status StoreImpl::LoadNamespaces() {
  auto list = index_->ListNamespaces();
  if (!list.ok()) return list.status();
  std::unique_lock<std::shared_mutex> l(ns_mu_);
  for (auto& [id, spec] : *list) namespaces_[id] = std::move(spec);
  const std::string nsdir = layout::NamespacesDir(dir_);
  auto names = fs_->ListDir(nsdir);
  if (!names.ok()) return names.status().IsNotFound() ? Status::OK() : names.status();
  for (const std::string& n : *names) {
    if (n.size() != 19 || n.substr(16) != ".ns") continue;
    OpenFlags f;
    f.read_only = true;
    auto file = fs_->Open(nsdir + "/" + n, f);
    if (!file.ok()) return file.status();
    auto size = (*file)->Size();
    if (!size.ok()) return size.status();
    if (*size < 8 || *size > (1u << 20)) return Status::Corruption(nsdir + "/" + n + ": bad size");
    std::string buf(*size, '\0');
    KVTIER_RETURN_IF_ERROR((*file)->ReadAt(0, buf.data(), buf.size()));
    uint64_t sum = format::GetFixed64(reinterpret_cast<const uint8_t*>(buf.data() + buf.size() - 8));
    buf.resize(buf.size() - 8);
    if (format::Checksum(buf.data(), buf.size()) != sum)
      return Status::Corruption(nsdir + "/" + n + ": checksum mismatch");
    auto spec = NamespaceSpec::Decode(buf);
    if (!spec.ok()) return spec.status().WithContext(nsdir + "/" + n);
    NamespaceId id = spec->Fingerprint();
    if (NamespaceIdToHex(id) != n.substr(0, 16))
      return Status::Corruption(nsdir + "/" + n + ": file name does not match its spec");
    if (!namespaces_.count(id) && !opt_.read_only) {
      KVTIER_RETURN_IF_ERROR(index_->PutNamespace(id, *spec, false));
    }
    namespaces_[id] = std::move(spec).value();
  }
  return Status::OK();
}

Status StoreImpl::WriteNamespaceFile(NamespaceId id, const NamespaceSpec& spec) {
  const std::string nsdir = layout::NamespacesDir(dir_);
  KVTIER_RETURN_IF_ERROR(fs_->CreateDir(nsdir, opt_.group_access ? 0770 : 0700));
  std::string buf = spec.Encode();
  uint64_t sum = format::Checksum(buf.data(), buf.size());
  format::AppendFixed64(&buf, sum);
  const std::string path = layout::NamespacePath(dir_, id);
  OpenFlags f;
  f.create = true;
  f.mode = opt_.group_access ? 0660 : 0600;
  const std::string tmp = path + std::string(layout::kTempSuffix);
  auto file = fs_->Open(tmp, f);
  if (!file.ok()) return file.status();
  KVTIER_RETURN_IF_ERROR((*file)->Truncate(0));
  KVTIER_RETURN_IF_ERROR((*file)->WriteAt(0, buf.data(), buf.size()));
  KVTIER_RETURN_IF_ERROR((*file)->Sync());
  file->reset();
  KVTIER_RETURN_IF_ERROR(fs_->Rename(tmp, path));
  return fs_->SyncDir(nsdir);
}

Status StoreImpl::RemoveNamespaceFile(NamespaceId id) {
  const std::string nsdir = layout::NamespacesDir(dir_);
  Status st = fs_->Remove(layout::NamespacePath(dir_, id));
  if (!st.ok() && !st.IsNotFound()) return st;
  return fs_->SyncDir(nsdir);
}

// Recovery: index entries are durable up to the checkpoint; records appended
// after it may have lost theirs. Rescan exactly those records, re-index what
// verifies, and cut the torn tail.
Status StoreImpl::Recover() {
  auto cpr = index_->ReadCheckpoint();
  if (!cpr.ok()) return cpr.status().WithContext("reading checkpoint");
  Checkpoint cp = cpr->value_or(Checkpoint{});
  std::vector<SegmentInfo> segs = table_->Snapshot();
  std::erase_if(segs, [](const SegmentInfo& s) { return s.state == SegmentState::kFree; });
  std::sort(segs.begin(), segs.end(), [](const SegmentInfo& a, const SegmentInfo& b) { return a.epoch < b.epoch; });
  pos_.epoch = table_->MaxEpoch();
  pos_.next_seq = std::max<uint64_t>(cp.next_sequence, 1);
  for (const SegmentInfo& s : segs) index_->DropSegmentRowsBelow(s.id, s.generation).IgnoreError();

  const bool clean = cp.clean && pos_.epoch == cp.epoch;
  if (clean) {
    // Nothing after the checkpoint: resume appending where Close stopped.
    if (!segs.empty() && segs.back().epoch == cp.epoch && cp.offset < description_.segment_size_bytes) {
      pos_.seg = segs.back().id;
      pos_.gen = segs.back().generation;
      pos_.off = cp.offset;
      table_->SetUsed(pos_.seg, pos_.off);
    }
  } else {
    c_.recovered_from_crash.store(true);
    uint64_t max_seq = 0;
    for (const SegmentInfo& s : segs) {
      if (s.epoch < cp.epoch) continue;
      uint64_t start = s.epoch == cp.epoch ? cp.offset : format::kSegmentDataStart;
      if (start >= description_.segment_size_bytes) continue;
      SegmentScanner scanner(table_->file(s.id), s.id, s.generation, description_.segment_size_bytes,
                             StoredPayloadLimit());
      IndexBatch batch;
      Status ist;
      ScanResult r;
      Status st = scanner.Scan(start, /*verify_payload=*/true, /*resync=*/false, [&](const ScannedRecord& rec) {
        max_seq = std::max(max_seq, rec.header.sequence);
        {
          std::shared_lock<std::shared_mutex> l(ns_mu_);
          if (!namespaces_.count(rec.header.ns_id)) return true;  // namespace was removed
        }
        auto e = index_->Get(rec.header.ns_id, rec.key);
        if (!e.ok()) {
          ist = e.status();
          return false;
        }
        if (e->has_value() && (*e)->sequence >= rec.header.sequence) return true;
        batch.Put(rec.header.ns_id, rec.key, IndexValueOf(rec, s.id, s.generation));
        c_.recovery_reindexed.Add();
        if (batch.count() >= 4096) {
          ist = index_->Commit(batch, false);
          batch = IndexBatch();
        }
        return ist.ok();
      }, &r);
      if (!st.ok()) return st.WithContext("recovery scan of segment " + std::to_string(s.id));
      if (!ist.ok()) return ist.WithContext("recovery re-index");
      if (!batch.empty()) KVTIER_RETURN_IF_ERROR(index_->Commit(batch, false));
      c_.recovery_scanned_bytes.Add(r.bytes_read);
      table_->Seal(s.id, format::AlignUp(r.end));  // zero from r.end (cut below)
      if (r.end < description_.segment_size_bytes) {
        // Cut the torn tail of every segment written since the checkpoint (a
        // group commit can tear the end of one segment and the start of the
        // next): whatever follows the last valid record was never
        // acknowledged. Zero it so no later scan can mistake it for data.
        c_.recovery_torn_bytes.Add(r.torn ? description_.segment_size_bytes - r.end : 0);
        File* f = table_->file(s.id);
        Status ps = ZeroRange(f, r.end, description_.segment_size_bytes - r.end);
        if (ps.ok()) ps = f->Sync();
        if (!ps.ok()) return ps.WithContext("cutting the torn tail of segment " + std::to_string(s.id));
      }
    }
    pos_.next_seq = std::max(pos_.next_seq, max_seq + 1);
    // Appends resume in a fresh segment: the cut tail is never written again.
    pos_.seg = UINT32_MAX;
  }
  // A crash from now on must rescan from here.
  return CheckpointNow(false);
}

void StoreImpl::StartThreads() {
  reads_ = std::make_unique<ReadPool>(ReadDeps());
  deadlines_ = std::make_unique<DeadlineTimer>(&c_);
  if (!opt_.read_only) {
    committer_->Start();
    Reclaimer::Deps rd;
    rd.index = index_.get();
    rd.table = table_.get();
    rd.committer = committer_.get();
    rd.ram = ram_.get();
    rd.hits = &hits_;
    rd.counters = &c_;
    rd.stored_payload_limit = StoredPayloadLimit();
    rd.reinsert = opt_.reinsert_hot_blocks;
    rd.punch_holes = opt_.punch_holes;
    rd.policy = std::make_unique<HitReinsertion>(opt_.reinsert_max_fraction);
    reclaimer_ = std::make_unique<Reclaimer>(std::move(rd));
    // Last: it starts by registering the write ring, which holds the mmap
    // lock that creating the other threads' stacks needs.
    writer_ = std::thread([this] { WriterLoop(); });
  }
}

Status StoreImpl::Close() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_) return Status::Closed("store already closed");
  }
  ShareOnClose();  // store_remote.cc
  StopRemote();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_) return Status::Closed("store already closed");
    closed_ = true;
    closing_ = true;
    writer_stop_ = true;
  }
  work_cv_.notify_all();
  space_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (committer_ != nullptr) committer_->Stop();
  if (reads_ != nullptr) reads_->Stop();
  if (deadlines_ != nullptr) deadlines_->Stop();
  Status st;
  if (!opt_.read_only && index_ != nullptr && table_ != nullptr) {
    if (pos_.seg != UINT32_MAX) table_->SetUsed(pos_.seg, pos_.off);
    st = CheckpointNow(/*clean=*/true);
    Status f = index_->FlushMemtables();
    if (st.ok()) st = f;
  }
  ram_.reset();  // a shared-memory tier stays in its file for the next open
  index_.reset();
  table_.reset();
  lock_.reset();
  return st;
}

// ---- Namespaces ----

Result<NamespaceId> StoreImpl::RegisterNamespace(const NamespaceSpec& spec) {
  KVTIER_RETURN_IF_ERROR(spec.Validate());
  NamespaceId id = spec.Fingerprint();
  {
    std::shared_lock<std::shared_mutex> l(ns_mu_);
    if (namespaces_.count(id)) return id;
  }
  if (opt_.read_only) return Status::NotSupported("store opened read-only: cannot register namespaces");
  std::unique_lock<std::shared_mutex> l(ns_mu_);
  if (namespaces_.count(id)) return id;
  NamespaceSpec stored = spec;
  if (stored.name.empty()) stored.name = spec.DisplayName();
  KVTIER_RETURN_IF_ERROR(WriteNamespaceFile(id, stored));
  KVTIER_RETURN_IF_ERROR(index_->PutNamespace(id, stored, /*sync=*/false));
  // Keep the decoded form (salt replaced by its hash), as a reopen would see it.
  auto round = NamespaceSpec::Decode(stored.Encode());
  namespaces_[id] = round.ok() ? *round : stored;
  return id;
}

Result<NamespaceSpec> StoreImpl::SpecOf(NamespaceId ns) {
  std::shared_lock<std::shared_mutex> l(ns_mu_);
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) return Status::NotFound("unknown namespace " + NamespaceIdToHex(ns));
  return it->second;
}

Result<NamespaceId> StoreImpl::FindNamespace(std::string_view name_or_hex) {
  std::shared_lock<std::shared_mutex> l(ns_mu_);
  auto id = NamespaceIdFromHex(name_or_hex);
  if (id.ok() && namespaces_.count(*id)) return *id;
  for (const auto& [nid, spec] : namespaces_)
    if (spec.DisplayName() == name_or_hex) return nid;
  return Status::NotFound("no namespace named '" + std::string(name_or_hex) + "'");
}

Result<std::vector<NamespaceInfo>> StoreImpl::ListNamespaces() {
  std::vector<NamespaceInfo> out;
  {
    std::shared_lock<std::shared_mutex> l(ns_mu_);
    for (const auto& [id, spec] : namespaces_) out.push_back(NamespaceInfo{id, spec, 0, 0});
  }
  std::sort(out.begin(), out.end(), [](const NamespaceInfo& a, const NamespaceInfo& b) { return a.id < b.id; });
  for (NamespaceInfo& info : out) {
    Status st = index_->ForEach(info.id, "", [&](NamespaceId, std::string_view, const format::IndexValue& v) {
      ++info.blocks;
      info.payload_bytes += v.payload_len;
      return true;
    });
    if (!st.ok()) return st;
  }
  return out;
}

// ---- Inspection ----

std::vector<SegmentInfo> StoreImpl::Segments() {
  std::vector<SegmentInfo> s = table_ ? table_->Snapshot() : std::vector<SegmentInfo>{};
  return s;
}

Stats StoreImpl::GetStats() {
  Stats s;
  s.puts = c_.puts.Get();
  s.put_bytes = c_.put_bytes.Get();
  s.puts_not_admitted = c_.puts_not_admitted.Get();
  s.puts_failed = c_.puts_failed.Get();
  s.gets = c_.gets.Get();
  s.hits_ram = c_.hits_ram.Get();
  s.hits_disk = c_.hits_disk.Get();
  s.misses = c_.misses.Get();
  s.bytes_read_ram = c_.bytes_read_ram.Get();
  s.bytes_read_disk = c_.bytes_read_disk.Get();
  s.get_deadline_misses = c_.get_deadline_misses.Get();
  s.checksum_failures = c_.checksum_failures.Get();
  s.stale_entries_dropped = c_.stale_entries_dropped.Get();
  s.lookups = c_.lookups.Get();
  s.contains = c_.contains.Get();
  s.removes = c_.removes.Get();
  s.device_bytes_written = c_.device_bytes_written.Get();
  s.device_bytes_read = c_.device_bytes_read.Get();
  s.zero_copy_put_bytes = c_.zero_copy_put_bytes.Get();
  s.direct_read_bytes = c_.direct_read_bytes.Get();
  s.small_page_copies = c_.small_page_copies.Get();
  s.remote_admitted_to_ram = c_.remote_admitted_to_ram.Get();
  s.registered_writes = c_.registered_writes.Get();
  s.syncs = c_.syncs.Get();
  s.group_commits = c_.group_commits.Get();
  s.write_amplification =
      s.put_bytes == 0 ? 0 : static_cast<double>(s.device_bytes_written) / static_cast<double>(s.put_bytes);
  s.evictions = c_.evictions.Get();
  s.disk_full_events = c_.disk_full_events.Get();
  s.evicted_blocks = c_.evicted_blocks.Get();
  s.evicted_bytes = c_.evicted_bytes.Get();
  s.reinsertions = c_.reinsertions.Get();
  s.reinserted_bytes = c_.reinserted_bytes.Get();
  s.recovered_from_crash = c_.recovered_from_crash.load();
  s.recovery_scanned_bytes = c_.recovery_scanned_bytes.Get();
  s.recovery_reindexed = c_.recovery_reindexed.Get();
  s.recovery_torn_bytes = c_.recovery_torn_bytes.Get();
  s.open_seconds = c_.open_seconds.load();
  s.io_backend = fs_ ? fs_->IoBackendName() : "";
  if (table_) {
    s.capacity_bytes = max_segments_ * description_.segment_size_bytes;
    if (max_segments_ < configured_segments_)
      s.capacity_configured_bytes = configured_segments_ * description_.segment_size_bytes;
    for (const SegmentInfo& seg : table_->Snapshot()) {
      ++s.segments_total;
      if (seg.state == SegmentState::kSealed) ++s.segments_sealed;
      if (seg.state == SegmentState::kFree) ++s.segments_free;
      if (seg.state != SegmentState::kFree) s.used_bytes += seg.used_bytes;
    }
    s.segment_entries_ignored = static_cast<uint32_t>(table_->Ignored().size());
  }
  if (index_) s.blocks_estimate = index_->ApproximateEntries();
  if (ram_) {
    RamTierStats r = ram_->GetStats();
    s.ram_capacity_bytes = r.capacity_bytes;
    s.ram_used_bytes = r.used_bytes;
    s.ram_blocks = r.blocks;
    s.ram_evictions = r.evictions;
    s.ram_evicted_bytes = r.evicted_bytes;
    s.ram_adopted_blocks = r.adopted_blocks;
    s.ram_adopt_dropped = r.adopt_dropped;
    s.ram_checksum_failures = r.checksum_failures;
    s.ram_shared_memory = r.shared;
  }
  RemoteStats(&s);  // store_remote.cc
  return s;
}

}  // namespace kvtier
