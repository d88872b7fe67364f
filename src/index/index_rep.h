// Inside the index room: the key encodings and the state behind Index, shared
// by index.cc (open, entries, lookups) and index_meta.cc (namespaces,
// checkpoints, maintenance). Not for other rooms.
#ifndef KVTIER_SRC_INDEX_INDEX_REP_H_
#define KVTIER_SRC_INDEX_INDEX_REP_H_

#include <rocksdb/db.h>
#include <rocksdb/env.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "index/index.h"
#include "index/presence_map.h"
#include "index/rocks_util.h"

namespace kvtier {
namespace index_internal {

inline constexpr char kEntryTag = 'K';
inline constexpr char kNamespaceTag = 'N';
inline constexpr char kMetaTag = 'M';
inline constexpr char kRemovedTag = 'R';
inline constexpr size_t kEntryPrefixBytes = 1 + 8;  // tag + ns
inline constexpr size_t kSegmentRowKeyBytes = 4 + 4 + 8;

inline constexpr char kBySegmentName[] = "by_segment";
// by_segment is created in the same DB::Open as "default" on a fresh index, so
// RocksDB always gives it id 1. Open() refuses a database where it is not.
inline constexpr uint32_t kBySegmentCfId = 1;

inline constexpr size_t kCheckpointBytes = 40;
inline constexpr uint8_t kCheckpointVersion = 1;

// Sized for point lookups over a few million entries: the hot index and
// filter blocks of the SST files plus the data blocks that lookups touch.
// Memory is only taken as blocks are read.
inline constexpr size_t kBlockCacheBytes = 128u << 20;

inline void AppendEntryKey(std::string* out, NamespaceId ns, std::string_view key) {
  out->push_back(kEntryTag);
  AppendBE64(out, ns);
  out->append(key.data(), key.size());
}

inline void AppendRemovedKey(std::string* out, NamespaceId ns, std::string_view key) {
  out->push_back(kRemovedTag);
  AppendBE64(out, ns);
  out->append(key.data(), key.size());
}

inline std::string NamespaceKey(NamespaceId id) {
  std::string k(1, kNamespaceTag);
  AppendBE64(&k, id);
  return k;
}

inline std::string CheckpointKey() { return std::string(1, kMetaTag) + "checkpoint"; }
inline std::string HotSegmentsKey() { return std::string(1, kMetaTag) + "hot-segments"; }

inline void AppendSegmentRowKey(std::string* out, uint32_t segment, uint32_t generation,
                         uint64_t offset) {
  AppendBE32(out, segment);
  AppendBE32(out, generation);
  AppendBE64(out, offset);
}

}  // namespace index_internal

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

  // Set when a write failed at the file system. RocksDB then holds a
  // background error, and its WAL writer must not be asked to write or sync
  // again (Debian's build asserts, aborting the process): the next write
  // first asks RocksDB to resume, and fails as long as it cannot. After a
  // failed flush or WAL write it never can (RocksDB 7.8 treats both as
  // fatal): writes fail until the store is reopened, reads go on. Out of
  // space is the exception: RocksDB's SstFileManager retries by itself and
  // resumes once space is freed.
  std::atomic<bool> write_failed{false};
  // write_failed for a reason RocksDB does not resume from (all but out of
  // space): only a reopen of the store clears it (Footprint::writes_refused).
  std::atomic<bool> reopen_needed{false};

  Status CheckWritable(std::string_view what) {
    if (read_only) {
      std::string m = "index ";
      m += path;
      m += " is open read-only; ";
      m += what;
      m += " needs a read-write open";
      return Status::NotSupported(std::move(m));
    }
    if (!write_failed.load()) return Status::OK();
    std::lock_guard<std::mutex> l(resume_mu);
    if (!write_failed.load()) return Status::OK();
    rocksdb::Status rs = db->Resume();
    if (!rs.ok()) {
      return FromRocks(rs, Context(reopen_needed.load()
                                       ? "an earlier write failed and cannot be resumed (reopen the store)"
                                       : "an earlier write found no space; writes resume once RocksDB has recovered"));
    }
    reopen_needed.store(false);
    write_failed.store(false);
    return Status::OK();
  }
  // Every write of the index: no WAL (index.h, "Durability").
  static rocksdb::WriteOptions NoWal() {
    rocksdb::WriteOptions wo;
    wo.disableWAL = true;
    return wo;
  }
  // The status of a write; a failure of the file system marks the index.
  Status Written(const rocksdb::Status& rs, std::string_view what) {
    Status st = FromRocks(rs, Context(what));
    if (rs.ok() || !(rs.IsIOError() || rs.IsCorruption() || rs.IsNoSpace() || rs.IsIncomplete())) return st;
    const bool no_space = st.code() == Code::kNoSpace;
    const bool newly_failed = !write_failed.exchange(true);
    const bool newly_fatal = !no_space && !reopen_needed.exchange(true);
    if (warn && newly_fatal) {
      warn(Context(std::string(what) + " failed (" + rs.ToString() +
                   "): the index refuses writes until the store is reopened (RocksDB 7.8 does not resume after "
                   "this); puts and removes fail meanwhile, reads go on"));
    } else if (warn && newly_failed && no_space) {
      warn(Context(std::string(what) + " found no space (" + rs.ToString() +
                   "): puts and removes fail until space is freed, when RocksDB resumes by itself; reads go on"));
    }
    return st;
  }
  std::function<void(const std::string&)> warn;  // IndexOpenOptions::warn
  std::mutex resume_mu;
  std::string Context(std::string_view what) const {
    std::string m = "index ";
    m += path;
    m += ": ";
    m += what;
    return m;
  }
};

}  // namespace kvtier

#endif  // KVTIER_SRC_INDEX_INDEX_REP_H_
