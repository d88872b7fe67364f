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

#include "index/rocks_fs.h"
#include "index/rocks_threads.h"
#include "index/rocks_options.h"
#include "index/rocks_util.h"
#include "index/index_rep.h"
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

using namespace index_internal;  // NOLINT: the room's own helpers

namespace {

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

// RocksDB reports a held LOCK file as a plain IOError; these are the texts of
// its two cases (another process holds the fcntl lock; this process already
// opened the database).
bool IsLockHeld(const rocksdb::Status& s) {
  if (!s.IsIOError()) return false;
  const std::string m = s.ToString();
  return m.find("While lock file") != std::string::npos ||
         m.find("lock hold by current process") != std::string::npos;
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

void IndexBatch::MarkRemoved(NamespaceId ns, std::string_view key, uint64_t below_sequence) {
  if (!rep_) rep_ = std::make_unique<Rep>();
  Rep& r = *rep_;
  r.key.clear();
  AppendRemovedKey(&r.key, ns, key);
  uint8_t v[8];
  format::PutFixed64(v, below_sequence);
  r.batch.Put(r.key, rocksdb::Slice(reinterpret_cast<const char*>(v), sizeof v)).PermitUncheckedError();
  ++r.count;
}

size_t IndexBatch::count() const { return rep_ ? rep_->count : 0; }

// ---------------------------------------------------------------------------
// Index

Index::Index() : rep_(std::make_unique<Rep>()) {}

Index::~Index() {
  if (rep_ == nullptr || rep_->db == nullptr) return;
  rep_->stop_loader.store(true);
  if (rep_->loader.joinable()) rep_->loader.join();
  // Handles must go before the DB. Close() may report a failure; the index
  // is a cache that recovery rebuilds, and a destructor has nobody to tell,
  // so it is dropped.
  if (rep_->entries != nullptr) rep_->db->DestroyColumnFamilyHandle(rep_->entries).PermitUncheckedError();
  if (rep_->by_segment != nullptr) rep_->db->DestroyColumnFamilyHandle(rep_->by_segment).PermitUncheckedError();
  rep_->db->Close().PermitUncheckedError();
  delete rep_->db;
}

namespace {

// The index folder, made with the caller's mode when allowed (RocksDB would
// make it 0755 less the umask); an existing one of this user's gains the
// bits it lacks (a store created before group access). Without CURRENT
// there is no database: say so plainly instead of passing on RocksDB's
// complaint about the file it could not open.
Status CheckFolder(FileSystem* fs, const std::string& path, const IndexOpenOptions& o) {
  auto names = fs->ListDir(path);
  const bool absent = !names.ok() && names.status().IsNotFound();
  if (!names.ok() && !absent)
    return Status::InvalidArgument("index path " + path + " is not a folder (" + names.status().message() + ")");
  const bool may_create = !o.read_only && o.create_if_missing;
  if (absent && !may_create) return Status::NotFound("index " + path + " does not exist");
  if (may_create) {
    KVTIER_RETURN_IF_ERROR(fs->CreateDir(path, o.dir_mode & 07777).WithContext("index folder"));
    return Status::OK();
  }
  if (std::find(names->begin(), names->end(), "CURRENT") == names->end())
    return Status::NotFound("index " + path + " has no database (no CURRENT file)");
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<Index>> Index::Open(const std::string& path, const IndexOpenOptions& o) {
  if (path.empty()) return Status::InvalidArgument("index path is empty");

  std::shared_ptr<FileSystem> fs = o.file_system ? o.file_system : DefaultFileSystem(IoBackend::kPosix);
  KVTIER_RETURN_IF_ERROR(CheckFolder(fs.get(), path, o));
  auto cache = rocksdb::NewLRUCache(kBlockCacheBytes);
  rocksdb::DBOptions dbo = MakeDBOptions(o);
  std::unique_ptr<rocksdb::Env> env = WithOwnThreads(NewRocksEnv(fs, o.file_mode, o.dir_mode));
  dbo.env = env.get();
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  cfs.emplace_back(rocksdb::kDefaultColumnFamilyName, MakeCfOptions(cache, true, o.write_buffer_bytes));
  cfs.emplace_back(kBySegmentName, MakeCfOptions(cache, false, o.write_buffer_bytes));

  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  rocksdb::Status rs;
  if (o.read_only) {
    // Does not take the LOCK file, so it works while a writer has the index
    // open; it sees what the writer's last memtable flush made durable (its
    // last checkpoint or later).
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
  r.warn = o.warn;
  r.db = db;
  r.entries = handles[0];
  r.by_segment = handles[1];

  if (r.by_segment->GetID() != kBySegmentCfId) {
    return Status::Corruption("index " + path + ": column family by_segment has id " +
                              std::to_string(r.by_segment->GetID()) + ", expected " +
                              std::to_string(kBySegmentCfId));
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
  Status st = rep_->Written(rep_->db->Write(Rep::NoWal(), &batch.rep()->batch), "commit");
  if (st.ok() && sync) st = FlushMemtables();
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

Status Index::ForEach(NamespaceId ns, std::string_view prefix, const ListCursor* after,
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
  // Entry keys sort as (namespace, key): a cursor is the entry key to pass.
  std::string resume;
  if (after != nullptr) {
    resume.assign(1, kEntryTag);
    AppendBE64(&resume, after->ns);
    resume.append(after->key);
  }
  it->Seek(resume > lower ? resume : lower);
  if (after != nullptr && it->Valid() && View(it->key()) == resume) it->Next();
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
  // Not made durable: rows this loses in a crash are still stale after
  // restart, and the caller drops them again.
  std::string begin, end;
  AppendSegmentRowKey(&begin, segment, 0, 0);
  AppendSegmentRowKey(&end, segment, below_generation, 0);
  return rep_->Written(rep_->db->DeleteRange(Rep::NoWal(), rep_->by_segment, begin, end),
                      "drop by_segment rows");
}

}  // namespace kvtier
