// The block index on RocksDB. The contract is in index.h; this file says how.
//
// Key encodings (big-endian integers so that byte order is numeric order):
//   default     'K' ns(8) key                 -> format::EncodeIndexValue()
//               'N' ns(8)                     -> NamespaceSpec::Encode()
//               'M' name                      -> metadata
//   by_segment  segment(4) generation(4) offset(8) -> ns(8) key
//
// The checkpoint record ('M' "checkpoint") is 40 bytes, little-endian like
// every other kvtier on-disk structure:
//   [0,8) epoch  [8,16) offset  [16,24) next_sequence
//   [24] version (1)  [25] clean (0/1)  [26,32) zero
//   [32,40) format::Checksum (XXH3-64) of bytes [0,32)
#include "index/index.h"

#include "format/coding.h"

#include <atomic>
#include <thread>

#include "index/file_mode_fs.h"
#include "index/presence_map.h"

#include <rocksdb/cache.h>
#include <rocksdb/comparator.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>

namespace kvtier {

namespace {

constexpr char kEntryTag = 'K';
constexpr char kNamespaceTag = 'N';
constexpr char kMetaTag = 'M';
constexpr size_t kEntryPrefixBytes = 1 + 8;  // tag + ns
constexpr size_t kSegmentRowKeyBytes = 4 + 4 + 8;

const char kBySegmentName[] = "by_segment";
// by_segment is created in the same DB::Open as "default" on a fresh index, so
// RocksDB always gives it id 1. Open() refuses a database where it is not.
constexpr uint32_t kBySegmentCfId = 1;

constexpr size_t kCheckpointBytes = 40;
constexpr uint8_t kCheckpointVersion = 1;

// Sized for point lookups over a few million entries: the hot index and
// filter blocks of the SST files plus the data blocks that lookups touch.
// Memory is only taken as blocks are read.
constexpr size_t kBlockCacheBytes = 128u << 20;

// ---- byte helpers ----

void AppendBE32(std::string* out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(v >> (24 - 8 * i));
  out->append(b, 4);
}

void AppendBE64(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (56 - 8 * i));
  out->append(b, 8);
}

uint64_t LoadBE64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

void AppendEntryKey(std::string* out, NamespaceId ns, std::string_view key) {
  out->push_back(kEntryTag);
  AppendBE64(out, ns);
  out->append(key.data(), key.size());
}

std::string NamespaceKey(NamespaceId id) {
  std::string k(1, kNamespaceTag);
  AppendBE64(&k, id);
  return k;
}

std::string CheckpointKey() { return std::string(1, kMetaTag) + "checkpoint"; }

void AppendSegmentRowKey(std::string* out, uint32_t segment, uint32_t generation,
                         uint64_t offset) {
  AppendBE32(out, segment);
  AppendBE32(out, generation);
  AppendBE64(out, offset);
}

// Smallest string greater than every string that starts with `prefix`, or
// empty when there is none (prefix is all 0xff).
std::string PrefixSuccessor(std::string prefix) {
  while (!prefix.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(prefix.back());
    if (c != 0xff) {
      ++c;
      return prefix;
    }
    prefix.pop_back();
  }
  return prefix;
}

std::string_view View(const rocksdb::Slice& s) { return {s.data(), s.size()}; }

std::string Hex(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

// ---- status mapping ----

Status FromRocks(const rocksdb::Status& s, std::string_view context) {
  if (s.ok()) return Status::OK();
  std::string msg(context);
  msg += ": ";
  msg += s.ToString();
  if (s.IsNoSpace() || msg.find("No space") != std::string::npos) {
    return Status::NoSpace(std::move(msg));
  }
  if (s.IsNotFound() || s.IsPathNotFound()) return Status::NotFound(std::move(msg));
  if (s.IsCorruption()) return Status::Corruption(std::move(msg));
  if (s.IsInvalidArgument()) return Status::InvalidArgument(std::move(msg));
  if (s.IsBusy() || s.IsTryAgain()) return Status::Busy(std::move(msg));
  if (s.IsNotSupported()) return Status::NotSupported(std::move(msg));
  if (s.IsTimedOut()) return Status::TimedOut(std::move(msg));
  if (s.IsAborted()) return Status::Aborted(std::move(msg));
  return Status::IOError(std::move(msg));
}

// RocksDB reports a held LOCK file as a plain IOError; these are the texts of
// its two cases (another process holds the fcntl lock; this process already
// opened the database).
bool IsLockHeld(const rocksdb::Status& s) {
  if (!s.IsIOError()) return false;
  const std::string m = s.ToString();
  return m.find("While lock file") != std::string::npos ||
         m.find("lock hold by current process") != std::string::npos;
}

// ---- options ----

rocksdb::DBOptions MakeDBOptions(const IndexOpenOptions& o) {
  rocksdb::DBOptions d;
  d.create_if_missing = o.create_if_missing && !o.read_only;
  d.create_missing_column_families = !o.read_only;
  d.max_background_jobs = 2;
  // Deletes obsolete files in the background instead of in the caller's Write.
  d.avoid_unnecessary_blocking_io = true;
  d.keep_log_file_num = 2;
  d.max_log_file_size = 8u << 20;
  // Every Write reaches the WAL file (the OS) before it returns, so a process
  // crash loses nothing; only a machine crash can, and recovery covers that.
  d.manual_wal_flush = false;
  // After a crash, DB::Open replays the WAL into memtables and by default
  // writes them out as SST files before it returns: seconds of a reopen of
  // a large store spent on data that is already safe in the WAL. Keep the
  // replayed memtables (and the WAL behind them) instead; they are flushed
  // later like any other.
  d.avoid_flush_during_recovery = true;
  d.stats_dump_period_sec = 0;
  d.stats_persist_period_sec = 0;
  d.persist_stats_to_disk = false;
  return d;
}

rocksdb::CompressionType ChooseCompression() {
  static const rocksdb::CompressionType kType = [] {
    const auto supported = rocksdb::GetSupportedCompressions();
    return std::find(supported.begin(), supported.end(), rocksdb::kLZ4Compression) !=
                   supported.end()
               ? rocksdb::kLZ4Compression
               : rocksdb::kNoCompression;
  }();
  return kType;
}

// point_lookups: the default column family is read by Get/MultiGet, mostly
// for keys that may be absent, so it gets whole-key bloom filters (in the SST
// files and in the memtable) and hash-indexed data blocks. by_segment is only
// range-scanned, so filters would be memory spent for nothing.
rocksdb::ColumnFamilyOptions MakeCfOptions(const std::shared_ptr<rocksdb::Cache>& cache,
                                           bool point_lookups, uint64_t write_buffer_bytes) {
  rocksdb::ColumnFamilyOptions cf;
  cf.write_buffer_size = std::max<uint64_t>(write_buffer_bytes, 1u << 20);
  cf.compression = ChooseCompression();
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = cache;
  if (point_lookups) {
    t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
    t.whole_key_filtering = true;
    t.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
    // The in-block hash index finds a key's restart interval; the key is then
    // found by decoding the interval's keys one by one. Random 32-byte keys
    // share little beyond 'K'+ns, so short intervals cost little space, and
    // MultiGet in bench/index_bench.cc ran 5-30% faster than with 16.
    t.block_restart_interval = 4;
    cf.memtable_whole_key_filtering = true;
    cf.memtable_prefix_bloom_size_ratio = 0.02;
  }
  cf.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return cf;
}

// A rocksdb::WriteBatch names column families by handle, but an IndexBatch is
// filled without an Index at hand. WriteBatch only asks a handle for its id
// and comparator, so this stand-in (with the id Open() verified) lets the
// batch go to DB::Write as is, without copying it at commit.
class BySegmentStandIn final : public rocksdb::ColumnFamilyHandle {
 public:
  const std::string& GetName() const override { return name_; }
  uint32_t GetID() const override { return kBySegmentCfId; }
  rocksdb::Status GetDescriptor(rocksdb::ColumnFamilyDescriptor*) override {
    return rocksdb::Status::NotSupported("by_segment stand-in handle has no descriptor");
  }
  const rocksdb::Comparator* GetComparator() const override {
    return rocksdb::BytewiseComparator();
  }

 private:
  const std::string name_ = kBySegmentName;
};

rocksdb::ColumnFamilyHandle* BySegmentHandleForBatch() {
  static BySegmentStandIn* const kHandle = new BySegmentStandIn();  // never destroyed
  return kHandle;
}

// Per-thread buffers for MultiGet, reused across calls so a lookup of a batch
// allocates nothing once the buffers have grown to the batch size.
struct MultiGetScratch {
  std::string keys;
  std::vector<rocksdb::Slice> slices;
  std::vector<rocksdb::PinnableSlice> values;
  std::vector<rocksdb::Status> statuses;
};

}  // namespace

// ---------------------------------------------------------------------------
// IndexBatch

struct IndexBatch::Rep {
  rocksdb::WriteBatch batch;
  // (hash, location or kAbsent) to apply to the presence map after commit.
  std::vector<std::pair<uint64_t, uint64_t>> presence;
  std::string key;    // scratch for the key being added
  std::string value;  // scratch for a by_segment row value
  size_t count = 0;   // logical operations (Put/Delete/DeleteSegmentRow)
};

IndexBatch::IndexBatch() : rep_(std::make_unique<Rep>()) {}
IndexBatch::~IndexBatch() = default;
IndexBatch::IndexBatch(IndexBatch&&) noexcept = default;
IndexBatch& IndexBatch::operator=(IndexBatch&&) noexcept = default;

// WriteBatch::Put/Delete only fail for keys or values over 4 GiB or for
// timestamp misuse, neither of which these fixed-layout keys can hit; their
// statuses are dropped on purpose.
void IndexBatch::Put(NamespaceId ns, std::string_view key, const format::IndexValue& v) {
  if (!rep_) rep_ = std::make_unique<Rep>();  // reuse after a move
  Rep& r = *rep_;
  r.key.clear();
  AppendEntryKey(&r.key, ns, key);
  const std::string encoded = format::EncodeIndexValue(v);
  r.batch.Put(r.key, encoded).PermitUncheckedError();

  r.key.clear();
  AppendSegmentRowKey(&r.key, v.segment, v.generation, v.offset);
  r.value.clear();
  AppendBE64(&r.value, ns);
  r.value.append(key.data(), key.size());
  r.batch.Put(BySegmentHandleForBatch(), r.key, r.value).PermitUncheckedError();
  r.presence.emplace_back(PresenceMap::Hash(ns, key), PresenceMap::Location(v.segment, v.generation));
  ++r.count;
}

void IndexBatch::Delete(NamespaceId ns, std::string_view key, const format::IndexValue& old) {
  if (!rep_) rep_ = std::make_unique<Rep>();
  Rep& r = *rep_;
  r.key.clear();
  AppendEntryKey(&r.key, ns, key);
  r.batch.Delete(r.key).PermitUncheckedError();
  r.key.clear();
  AppendSegmentRowKey(&r.key, old.segment, old.generation, old.offset);
  r.batch.Delete(BySegmentHandleForBatch(), r.key).PermitUncheckedError();
  r.presence.emplace_back(PresenceMap::Hash(ns, key), PresenceMap::kAbsent);
  ++r.count;
}

void IndexBatch::DeleteSegmentRow(uint32_t segment, uint32_t generation, uint64_t offset) {
  if (!rep_) rep_ = std::make_unique<Rep>();
  Rep& r = *rep_;
  r.key.clear();
  AppendSegmentRowKey(&r.key, segment, generation, offset);
  r.batch.Delete(BySegmentHandleForBatch(), r.key).PermitUncheckedError();
  ++r.count;
}

size_t IndexBatch::count() const { return rep_ ? rep_->count : 0; }

// ---------------------------------------------------------------------------
// Index

struct Index::Rep {
  std::string path;
  bool read_only = false;
  std::unique_ptr<rocksdb::Env> env;  // outlives db (deleted by ~Index)
  rocksdb::DB* db = nullptr;
  rocksdb::ColumnFamilyHandle* entries = nullptr;     // "default"
  rocksdb::ColumnFamilyHandle* by_segment = nullptr;
  PresenceMap presence;
  std::thread loader;
  std::atomic<bool> stop_loader{false};

  Status CheckWritable(std::string_view what) const {
    if (!read_only) return Status::OK();
    std::string m = "index ";
    m += path;
    m += " is open read-only; ";
    m += what;
    m += " needs a read-write open";
    return Status::NotSupported(std::move(m));
  }
  std::string Context(std::string_view what) const {
    std::string m = "index ";
    m += path;
    m += ": ";
    m += what;
    return m;
  }
};

Index::Index() : rep_(std::make_unique<Rep>()) {}

Index::~Index() {
  if (rep_ == nullptr || rep_->db == nullptr) return;
  rep_->stop_loader.store(true);
  if (rep_->loader.joinable()) rep_->loader.join();
  // Handles must go before the DB. Close() may report a failed final sync of
  // the WAL; the index is a cache that recovery rebuilds, and a destructor
  // has nobody to tell, so it is dropped.
  if (rep_->entries != nullptr) rep_->db->DestroyColumnFamilyHandle(rep_->entries).PermitUncheckedError();
  if (rep_->by_segment != nullptr) rep_->db->DestroyColumnFamilyHandle(rep_->by_segment).PermitUncheckedError();
  rep_->db->Close().PermitUncheckedError();
  delete rep_->db;
}

Result<std::unique_ptr<Index>> Index::Open(const std::string& path, const IndexOpenOptions& o) {
  if (path.empty()) return Status::InvalidArgument("index path is empty");

  // Create the folder ourselves, with the caller's mode: RocksDB would create
  // it with 0755 less the umask.
  if (!o.read_only && o.create_if_missing) {
    if (::mkdir(path.c_str(), static_cast<mode_t>(o.dir_mode & 07777)) != 0 && errno != EEXIST) {
      return Status::FromErrno(errno, "create index folder " + path);
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, "index folder " + path);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument("index path " + path + " is not a folder");
  // Without CURRENT there is no database; say so plainly instead of passing on
  // RocksDB's complaint about the file it could not open.
  if (o.read_only || !o.create_if_missing) {
    struct stat cur;
    if (::stat((path + "/CURRENT").c_str(), &cur) != 0) {
      if (errno == ENOENT) return Status::NotFound("index " + path + " has no database (no CURRENT file)");
      return Status::FromErrno(errno, "index " + path + "/CURRENT");
    }
  }

  auto cache = rocksdb::NewLRUCache(kBlockCacheBytes);
  rocksdb::DBOptions dbo = MakeDBOptions(o);
  std::unique_ptr<rocksdb::Env> env = NewFileModeEnv(o.file_mode, o.dir_mode);
  dbo.env = env.get();
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  cfs.emplace_back(rocksdb::kDefaultColumnFamilyName, MakeCfOptions(cache, true, o.write_buffer_bytes));
  cfs.emplace_back(kBySegmentName, MakeCfOptions(cache, false, o.write_buffer_bytes));

  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  rocksdb::Status rs;
  if (o.read_only) {
    // Does not take the LOCK file, so it works while a writer has the index
    // open; it sees what the writer had written when it opened (WAL included).
    rs = rocksdb::DB::OpenForReadOnly(dbo, path, cfs, &handles, &db);
  } else {
    rs = rocksdb::DB::Open(dbo, path, cfs, &handles, &db);
  }
  if (!rs.ok()) {
    if (IsLockHeld(rs)) {
      return Status::Busy("index " + path + " is already open read-write (RocksDB LOCK held): " +
                          rs.ToString());
    }
    return FromRocks(rs, "open index " + path);
  }

  std::unique_ptr<Index> index(new Index());
  Rep& r = *index->rep_;
  r.path = path;
  r.read_only = o.read_only;
  r.env = std::move(env);
  r.db = db;
  r.entries = handles[0];
  r.by_segment = handles[1];

  if (r.by_segment->GetID() != kBySegmentCfId) {
    return Status::Corruption("index " + path + ": column family by_segment has id " +
                              std::to_string(r.by_segment->GetID()) + ", expected " +
                              std::to_string(kBySegmentCfId));
  }

  // The folder gets the bits the store asks for that it lacks (a store
  // created before group access, or under a umask). Only its owner changes
  // it, and never by taking bits away: a group member opening the store, or
  // the owner opening without group_access, must not lock the group out.
  const mode_t want = static_cast<mode_t>((st.st_mode | o.dir_mode) & 07777);
  if (!o.read_only && st.st_uid == ::geteuid() && (st.st_mode & 07777) != want) {
    if (::chmod(path.c_str(), want) != 0) return Status::FromErrno(errno, "chmod index folder " + path);
  }
  // Fill the presence map in the background: open stays fast with millions
  // of entries, and lookups use RocksDB until the map is ready.
  r.presence.BeginLoad();
  Index* self = index.get();
  r.loader = std::thread([self] {
    Rep& rr = *self->rep_;
    Status st = self->ForEach(0, "", [&rr](NamespaceId ns, std::string_view key, const format::IndexValue& v) {
      rr.presence.LoadIfAbsent(PresenceMap::Hash(ns, key), PresenceMap::Location(v.segment, v.generation));
      return !rr.stop_loader.load(std::memory_order_relaxed);
    });
    if (st.ok() && !rr.stop_loader.load()) rr.presence.FinishLoad();
  });
  return index;
}

bool Index::FindLocations(NamespaceId ns, std::span<const std::string_view> keys,
                          std::vector<uint64_t>* out) {
  if (!rep_->presence.Ready()) return false;
  out->resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) (*out)[i] = rep_->presence.Find(PresenceMap::Hash(ns, keys[i]));
  return true;
}


Status Index::Commit(IndexBatch& batch, bool sync) {
  KVTIER_RETURN_IF_ERROR(rep_->CheckWritable("Commit"));
  if (batch.empty()) return Status::OK();
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  Status st = FromRocks(rep_->db->Write(wo, &batch.rep()->batch), rep_->Context("commit"));
  if (st.ok()) {
    for (const auto& [hash, loc] : batch.rep()->presence) {
      if (loc == PresenceMap::kAbsent) {
        rep_->presence.Erase(hash);
      } else {
        rep_->presence.Set(hash, loc);
      }
    }
  }
  return st;
}

Result<std::optional<format::IndexValue>> Index::Get(NamespaceId ns, std::string_view key) {
  std::string k;
  k.reserve(kEntryPrefixBytes + key.size());
  AppendEntryKey(&k, ns, key);
  rocksdb::PinnableSlice value;
  rocksdb::Status rs = rep_->db->Get(rocksdb::ReadOptions(), rep_->entries, k, &value);
  if (rs.IsNotFound()) return std::optional<format::IndexValue>();
  if (!rs.ok()) return FromRocks(rs, rep_->Context("get"));
  auto v = format::DecodeIndexValue(View(value));
  if (!v.ok()) {
    return v.status().WithContext(rep_->Context("entry " + Hex(k.substr(1, 8)) + "/" + Hex(key)));
  }
  return std::optional<format::IndexValue>(*v);
}

Status Index::MultiGet(NamespaceId ns, std::span<const std::string_view> keys,
                       std::vector<std::optional<format::IndexValue>>* out) {
  const size_t n = keys.size();
  out->resize(n);
  if (n == 0) return Status::OK();

  thread_local MultiGetScratch scratch;
  MultiGetScratch& s = scratch;

  // All keys go into one buffer, sized first so the slices stay valid.
  size_t total = 0;
  for (auto k : keys) total += kEntryPrefixBytes + k.size();
  s.keys.clear();
  s.keys.reserve(total);
  for (auto k : keys) AppendEntryKey(&s.keys, ns, k);
  if (s.slices.size() < n) s.slices.resize(n);
  if (s.values.size() < n) s.values.resize(n);
  if (s.statuses.size() < n) s.statuses.resize(n);
  size_t pos = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t len = kEntryPrefixBytes + keys[i].size();
    s.slices[i] = rocksdb::Slice(s.keys.data() + pos, len);
    pos += len;
  }

  rep_->db->MultiGet(rocksdb::ReadOptions(), rep_->entries, n, s.slices.data(), s.values.data(),
                     s.statuses.data(), /*sorted_input=*/false);

  // Every slot is filled; the first failure (a corrupt value or a read error)
  // is what the call returns, and its slot is left empty.
  Status first_error;
  for (size_t i = 0; i < n; ++i) {
    auto& slot = (*out)[i];
    const rocksdb::Status& rs = s.statuses[i];
    if (rs.ok()) {
      auto v = format::DecodeIndexValue(View(s.values[i]));
      if (v.ok()) {
        slot = *v;
      } else {
        slot.reset();
        if (first_error.ok()) {
          first_error = v.status().WithContext(
              rep_->Context("entry " + Hex(View(s.slices[i]).substr(1, 8)) + "/" + Hex(keys[i])));
        }
      }
    } else {
      slot.reset();
      if (!rs.IsNotFound() && first_error.ok()) {
        first_error = FromRocks(rs, rep_->Context("multiget key " + Hex(keys[i])));
      }
    }
    // Drop pins on cache blocks now: the scratch outlives this call and
    // possibly the DB.
    s.values[i].Reset();
  }
  return first_error;
}

Status Index::ForEach(NamespaceId ns, std::string_view prefix,
                      const std::function<bool(NamespaceId, std::string_view key,
                                               const format::IndexValue&)>& fn) {
  // Scan bounds: one namespace, or all of 'K'. With ns = 0 and a prefix the
  // scan seeks to the prefix inside each namespace it meets, so it reads only
  // matching entries plus one per namespace.
  std::string lower(1, kEntryTag);
  if (ns != 0) {
    AppendBE64(&lower, ns);
    lower.append(prefix.data(), prefix.size());
  }
  std::string upper = PrefixSuccessor(lower);  // never empty: 'K' < 0xff
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(rep_->db->NewIterator(ro, rep_->entries));

  const bool per_namespace_seek = ns == 0 && !prefix.empty();
  std::string seek_key;
  it->Seek(lower);
  while (it->Valid()) {
    const rocksdb::Slice k = it->key();
    if (k.size() < kEntryPrefixBytes) {
      return Status::Corruption(rep_->Context("short entry key " + Hex(View(k))));
    }
    const NamespaceId entry_ns = LoadBE64(k.data() + 1);
    const std::string_view user_key(k.data() + kEntryPrefixBytes, k.size() - kEntryPrefixBytes);
    if (per_namespace_seek && user_key.substr(0, prefix.size()) != prefix) {
      seek_key.assign(1, kEntryTag);
      AppendBE64(&seek_key, entry_ns);
      if (user_key < prefix) {
        seek_key.append(prefix.data(), prefix.size());
      } else {  // past this namespace's matches: on to the next namespace
        if (entry_ns == UINT64_MAX) break;
        seek_key.resize(1);
        AppendBE64(&seek_key, entry_ns + 1);
      }
      it->Seek(seek_key);
      continue;
    }
    auto v = format::DecodeIndexValue(View(it->value()));
    if (!v.ok()) {
      return v.status().WithContext(
          rep_->Context("entry " + Hex(View(k).substr(1, 8)) + "/" + Hex(user_key)));
    }
    if (!fn(entry_ns, user_key, *v)) return Status::OK();
    it->Next();
  }
  return FromRocks(it->status(), rep_->Context("scan entries"));
}

Status Index::ForEachInSegment(uint32_t segment, uint32_t generation,
                               const std::function<bool(uint64_t offset, NamespaceId,
                                                        std::string_view key)>& fn) {
  std::string lower;
  AppendBE32(&lower, segment);
  AppendBE32(&lower, generation);
  std::string upper = PrefixSuccessor(lower);  // empty only for (max, max)
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(rep_->db->NewIterator(ro, rep_->by_segment));
  for (it->Seek(lower); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    if (!k.starts_with(lower)) break;  // only reachable without an upper bound
    if (k.size() != kSegmentRowKeyBytes || v.size() < 8) {
      return Status::Corruption(rep_->Context("bad by_segment row " + Hex(View(k))));
    }
    const uint64_t offset = LoadBE64(k.data() + 8);
    const NamespaceId ns = LoadBE64(v.data());
    if (!fn(offset, ns, std::string_view(v.data() + 8, v.size() - 8))) return Status::OK();
  }
  return FromRocks(it->status(), rep_->Context("scan by_segment"));
}

Status Index::DropSegmentRowsBelow(uint32_t segment, uint32_t below_generation) {
  KVTIER_RETURN_IF_ERROR(rep_->CheckWritable("DropSegmentRowsBelow"));
  if (below_generation == 0) return Status::OK();
  // Not synced: rows this loses in a crash are still stale after restart,
  // and the caller drops them again.
  std::string begin, end;
  AppendSegmentRowKey(&begin, segment, 0, 0);
  AppendSegmentRowKey(&end, segment, below_generation, 0);
  return FromRocks(rep_->db->DeleteRange(rocksdb::WriteOptions(), rep_->by_segment, begin, end),
                   rep_->Context("drop by_segment rows"));
}

// ---- namespaces ----

Status Index::PutNamespace(NamespaceId id, const NamespaceSpec& spec, bool sync) {
  KVTIER_RETURN_IF_ERROR(rep_->CheckWritable("PutNamespace"));
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  return FromRocks(rep_->db->Put(wo, rep_->entries, NamespaceKey(id), spec.Encode()),
                   rep_->Context("put namespace " + NamespaceIdToHex(id)));
}

Result<std::optional<NamespaceSpec>> Index::GetNamespace(NamespaceId id) {
  rocksdb::PinnableSlice value;
  rocksdb::Status rs = rep_->db->Get(rocksdb::ReadOptions(), rep_->entries, NamespaceKey(id), &value);
  if (rs.IsNotFound()) return std::optional<NamespaceSpec>();
  if (!rs.ok()) return FromRocks(rs, rep_->Context("get namespace " + NamespaceIdToHex(id)));
  auto spec = NamespaceSpec::Decode(View(value));
  if (!spec.ok()) {
    return Status::Corruption(rep_->Context("namespace " + NamespaceIdToHex(id) + ": " +
                                            spec.status().ToString()));
  }
  return std::optional<NamespaceSpec>(std::move(spec).value());
}

Result<std::vector<std::pair<NamespaceId, NamespaceSpec>>> Index::ListNamespaces() {
  const std::string lower(1, kNamespaceTag);
  const std::string upper(1, kNamespaceTag + 1);
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(rep_->db->NewIterator(ro, rep_->entries));
  std::vector<std::pair<NamespaceId, NamespaceSpec>> out;
  for (it->Seek(lower); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != 1 + 8) {
      return Status::Corruption(rep_->Context("bad namespace key " + Hex(View(k))));
    }
    const NamespaceId id = LoadBE64(k.data() + 1);
    auto spec = NamespaceSpec::Decode(View(it->value()));
    if (!spec.ok()) {
      return Status::Corruption(rep_->Context("namespace " + NamespaceIdToHex(id) + ": " +
                                              spec.status().ToString()));
    }
    out.emplace_back(id, std::move(spec).value());
  }
  KVTIER_RETURN_IF_ERROR(FromRocks(it->status(), rep_->Context("list namespaces")));
  return out;
}

Status Index::DeleteNamespace(NamespaceId id, bool sync) {
  KVTIER_RETURN_IF_ERROR(rep_->CheckWritable("DeleteNamespace"));
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  return FromRocks(rep_->db->Delete(wo, rep_->entries, NamespaceKey(id)),
                   rep_->Context("delete namespace " + NamespaceIdToHex(id)));
}

// ---- checkpoint ----

Status Index::SyncWAL() {
  KVTIER_RETURN_IF_ERROR(rep_->CheckWritable("SyncWAL"));
  return FromRocks(rep_->db->SyncWAL(), rep_->Context("sync WAL"));
}

Status Index::WriteCheckpoint(const Checkpoint& cp) {
  KVTIER_RETURN_IF_ERROR(rep_->CheckWritable("WriteCheckpoint"));
  // Entries committed without sync must be durable before a checkpoint
  // says recovery may skip the records they came from.
  KVTIER_RETURN_IF_ERROR(SyncWAL());
  uint8_t buf[kCheckpointBytes] = {};
  format::PutFixed64(buf + 0, cp.epoch);
  format::PutFixed64(buf + 8, cp.offset);
  format::PutFixed64(buf + 16, cp.next_sequence);
  buf[24] = kCheckpointVersion;
  buf[25] = cp.clean ? 1 : 0;
  format::PutFixed64(buf + 32, format::Checksum(buf, 32));
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(rep_->db->Put(wo, rep_->entries, CheckpointKey(),
                                 rocksdb::Slice(reinterpret_cast<const char*>(buf), sizeof(buf))),
                   rep_->Context("write checkpoint"));
}

Result<std::optional<Checkpoint>> Index::ReadCheckpoint() {
  rocksdb::PinnableSlice value;
  rocksdb::Status rs = rep_->db->Get(rocksdb::ReadOptions(), rep_->entries, CheckpointKey(), &value);
  if (rs.IsNotFound()) return std::optional<Checkpoint>();
  if (!rs.ok()) return FromRocks(rs, rep_->Context("read checkpoint"));
  if (value.size() != kCheckpointBytes) {
    return Status::Corruption(rep_->Context("checkpoint record has " + std::to_string(value.size()) +
                                            " bytes, expected " + std::to_string(kCheckpointBytes)));
  }
  const auto* p = reinterpret_cast<const uint8_t*>(value.data());
  if (format::GetFixed64(p + 32) != format::Checksum(p, 32)) {
    return Status::Corruption(rep_->Context("checkpoint record checksum mismatch"));
  }
  if (p[24] != kCheckpointVersion) {
    return Status::NotSupported(rep_->Context("checkpoint record version " + std::to_string(p[24])));
  }
  bool reserved_zero = true;
  for (int i = 26; i < 32; ++i) reserved_zero = reserved_zero && p[i] == 0;
  if (p[25] > 1 || !reserved_zero) {
    return Status::Corruption(rep_->Context("checkpoint record has bad flag bytes"));
  }
  Checkpoint cp;
  cp.epoch = format::GetFixed64(p + 0);
  cp.offset = format::GetFixed64(p + 8);
  cp.next_sequence = format::GetFixed64(p + 16);
  cp.clean = p[25] == 1;
  return std::optional<Checkpoint>(cp);
}

// ---- maintenance ----

Status Index::DropAllEntries() {
  KVTIER_RETURN_IF_ERROR(rep_->CheckWritable("DropAllEntries"));
  const std::string k_begin(1, kEntryTag), k_end(1, kEntryTag + 1);
  // by_segment keys are 16 bytes; 17 0xff bytes sort after all of them.
  const std::string s_begin, s_end(kSegmentRowKeyBytes + 1, '\xff');
  rocksdb::WriteBatch wb;
  KVTIER_RETURN_IF_ERROR(FromRocks(wb.DeleteRange(rep_->entries, k_begin, k_end),
                                   rep_->Context("drop entries")));
  KVTIER_RETURN_IF_ERROR(FromRocks(wb.DeleteRange(rep_->by_segment, s_begin, s_end),
                                   rep_->Context("drop by_segment rows")));
  rocksdb::WriteOptions wo;
  wo.sync = true;
  // The background loader may still be filling the map from an older view:
  // stop it; the now empty map is complete.
  rep_->stop_loader.store(true);
  if (rep_->loader.joinable()) rep_->loader.join();
  KVTIER_RETURN_IF_ERROR(FromRocks(rep_->db->Write(wo, &wb), rep_->Context("drop all entries")));
  rep_->presence.Clear();
  rep_->presence.FinishLoad();

  // Range tombstones hide the old entries at once; compacting the ranges
  // reclaims their space and spares later reads from skipping them.
  rocksdb::CompactRangeOptions cro;
  cro.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForceOptimized;
  const rocksdb::Slice kb(k_begin), ke(k_end);
  KVTIER_RETURN_IF_ERROR(FromRocks(rep_->db->CompactRange(cro, rep_->entries, &kb, &ke),
                                   rep_->Context("compact entries")));
  return FromRocks(rep_->db->CompactRange(cro, rep_->by_segment, nullptr, nullptr),
                   rep_->Context("compact by_segment"));
}

// RocksDB's own estimate for the default column family: it counts namespace
// and metadata records too, and is off (either way) after deletes and range
// deletes until compaction. Good for sizing and progress, not for accounting.
uint64_t Index::ApproximateEntries() {
  uint64_t n = 0;
  if (!rep_->db->GetIntProperty(rep_->entries, "rocksdb.estimate-num-keys", &n)) return 0;
  return n;
}

Status Index::FlushMemtables() {
  KVTIER_RETURN_IF_ERROR(rep_->CheckWritable("FlushMemtables"));
  rocksdb::FlushOptions fo;
  fo.wait = true;
  return FromRocks(rep_->db->Flush(fo, {rep_->entries, rep_->by_segment}),
                   rep_->Context("flush memtables"));
}

}  // namespace kvtier
