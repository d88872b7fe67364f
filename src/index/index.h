// The block index: (namespace, key) -> where the record lives, in RocksDB.
//
// Column families
//   default     'K' ns(8, big-endian) key        -> format::IndexValue (56 bytes)
//               'N' ns(8, big-endian)            -> NamespaceSpec::Encode()
//               'M' name                         -> metadata (checkpoint, ...)
//               'R' ns(8, big-endian) key        -> u64 LE: a remove's mark (below)
//   by_segment  segment(4 BE) generation(4 BE) offset(8 BE) -> ns(8 BE) key
//               (which keys a segment generation holds: reclaim and verify
//               walk it instead of reading the segment)
//
// Durability: the index is a cache of what the segments say, and the
// segments are its log: it is written without RocksDB's WAL. A write is
// durable once its memtable is flushed; flushes commit every column family
// at one cut of the writes (atomic_flush), so after a crash the index is a
// prefix of what was written. Entries a crash takes are re-created by the
// recovery scan of everything after the last durable checkpoint, and the
// checkpoint record is written after the entries it covers, so it is never
// durable before them. A read-only open sees the last flush.
//
// Thread safety: all methods are thread-safe (RocksDB is).
#ifndef KVTIER_SRC_INDEX_INDEX_H_
#define KVTIER_SRC_INDEX_INDEX_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/record.h"
#include "kvtier/io.h"
#include "kvtier/namespace.h"
#include "kvtier/status.h"
#include "kvtier/store.h"

namespace kvtier {

// Up to this point (segment epoch, byte offset in that segment) every record
// appended has its index entry durable. Recovery scans from here.
struct Checkpoint {
  uint64_t epoch = 0;          // epoch of the segment being written at the checkpoint
  uint64_t offset = 0;         // append offset within that segment
  uint64_t next_sequence = 1;  // first sequence number not yet used
  bool clean = false;          // written by Close(): nothing after it
};

// A batch of index changes committed atomically.
class IndexBatch {
 public:
  IndexBatch();
  ~IndexBatch();
  IndexBatch(IndexBatch&&) noexcept;
  IndexBatch& operator=(IndexBatch&&) noexcept;
  // Adds/replaces the entry for (ns, key) and its by_segment row.
  void Put(NamespaceId ns, std::string_view key, const format::IndexValue& v);
  // Deletes (ns, key) and the by_segment row of `old` (the entry being deleted).
  void Delete(NamespaceId ns, std::string_view key, const format::IndexValue& old);
  // Deletes only a by_segment row.
  void DeleteSegmentRow(uint32_t segment, uint32_t generation, uint64_t offset);
  // Marks (ns, key) removed: recovery re-indexes no record of it with a
  // sequence below `below_sequence`. For a remove the checkpoint cannot
  // follow (Index::RemovedBelow). An empty key marks the whole namespace.
  void MarkRemoved(NamespaceId ns, std::string_view key, uint64_t below_sequence);
  size_t count() const;
  bool empty() const { return count() == 0; }
  struct Rep;
  Rep* rep() { return rep_.get(); }

 private:
  std::unique_ptr<Rep> rep_;
};

struct IndexOpenOptions {
  // Every file of the index goes through it (index/rocks_fs.h); null means
  // the kernel's (posix backend).
  std::shared_ptr<FileSystem> file_system;
  bool read_only = false;
  bool create_if_missing = true;
  unsigned dir_mode = 0700;   // the index folder's (an existing one only gains bits)
  unsigned file_mode = 0600;  // applied to every file RocksDB creates in it
  // RocksDB memtable size per column family. Opening costs grow with it (its
  // Bloom filter is zeroed, the WAL is preallocated to about this size), so a
  // small store asks for less; see the store's choice in store_open.cc.
  uint64_t write_buffer_bytes = 64u << 20;
  // Told once each time the index starts refusing writes (a write of its
  // files failed), from the thread whose write failed. Null: not told.
  std::function<void(const std::string&)> warn;
};

class Index {
 public:
  // Opens (creating when allowed) the RocksDB database at `path`.
  // Errors: Busy if RocksDB's own LOCK is held, Corruption, IOError.
  static Result<std::unique_ptr<Index>> Open(const std::string& path, const IndexOpenOptions& o);
  ~Index();

  // Commits atomically (in memory until the next flush). sync=true then
  // flushes the memtables, waiting: the batch is durable on return.
  Status Commit(IndexBatch& batch, bool sync);
  Result<std::optional<format::IndexValue>> Get(NamespaceId ns, std::string_view key);
  // Locations (PresenceMap::Location(segment, generation), or
  // PresenceMap::kAbsent) of many keys from the in-memory presence map.
  // Returns false, filling nothing, while the map is still loading after
  // open; callers then use MultiGet. A 64-bit hash collision can make an
  // absent key look present (see presence_map.h); never the reverse.
  bool FindLocations(NamespaceId ns, std::span<const std::string_view> keys, std::vector<uint64_t>* out);
  // One lookup for many keys of one namespace (RocksDB MultiGet). out[i] is
  // nullopt for absent keys. A corrupt value leaves its slot empty and the
  // first such error (naming the key) is returned.
  Status MultiGet(NamespaceId ns, std::span<const std::string_view> keys,
                  std::vector<std::optional<format::IndexValue>>* out);
  // Visits entries of namespace ns (0 = all namespaces) whose key starts with
  // `prefix`, in (ns, key) order, until fn returns false.
  Status ForEach(NamespaceId ns, std::string_view prefix,
                 const std::function<bool(NamespaceId, std::string_view key,
                                          const format::IndexValue&)>& fn) {
    return ForEach(ns, prefix, nullptr, fn);
  }
  // The same, strictly after `after` (null: from the first): it seeks there.
  Status ForEach(NamespaceId ns, std::string_view prefix, const ListCursor* after,
                 const std::function<bool(NamespaceId, std::string_view key,
                                          const format::IndexValue&)>& fn);
  // Visits by_segment rows of (segment, generation) in offset order.
  Status ForEachInSegment(uint32_t segment, uint32_t generation,
                          const std::function<bool(uint64_t offset, NamespaceId,
                                                   std::string_view key)>& fn);
  // Deletes by_segment rows of `segment` with generation < below_generation
  // (left over when a crash interrupted a reclaim).
  Status DropSegmentRowsBelow(uint32_t segment, uint32_t below_generation);

  // Namespaces.
  Status PutNamespace(NamespaceId id, const NamespaceSpec& spec, bool sync);
  Result<std::optional<NamespaceSpec>> GetNamespace(NamespaceId id);
  Result<std::vector<std::pair<NamespaceId, NamespaceSpec>>> ListNamespaces();
  Status DeleteNamespace(NamespaceId id, bool sync);

  // Checkpoint: the record, after every entry written before it, then
  // (kStart) a flush that makes them durable together, or (kWait) that
  // flush waited for. With kNone it becomes durable with the next flush.
  enum class CheckpointFlush { kNone, kStart, kWait };
  Status WriteCheckpoint(const Checkpoint& cp, CheckpointFlush flush);
  // nullopt on a fresh index.
  Result<std::optional<Checkpoint>> ReadCheckpoint();

  // The hot region's segments, (segment, generation) pairs: a hint kept
  // across a reopen, written without a sync (it is durable with the next
  // checkpoint). A pair whose generation is no longer the segment's is
  // stale and ignored by the reader. A record that does not verify reads
  // as empty: the region is then rebuilt from reads, nothing is lost.
  Status WriteHotSegments(const std::vector<std::pair<uint32_t, uint32_t>>& segments);
  std::vector<std::pair<uint32_t, uint32_t>> ReadHotSegments();

  // Remove marks. A remove deletes the key's entry and moves the checkpoint
  // past the key's records, so that no recovery scans them again; while a
  // failed write holds the checkpoint back (Committer), that is not enough,
  // and the remove also leaves a mark. Recovery skips the records it covers,
  // then drops every mark once its own checkpoint has passed them all.
  // RemovedBelow: the larger of the key's and its namespace's marks, nullopt
  // without either, Corruption for a value that is not 8 bytes.
  Result<std::optional<uint64_t>> RemovedBelow(NamespaceId ns, std::string_view key);
  Result<bool> HasRemoveMarks();
  Status DropRemoveMarks();

  // Removes every 'K' entry and every by_segment row (repair starts here).
  // Namespaces and metadata stay.
  Status DropAllEntries();
  // RocksDB's estimate of the number of keys.
  uint64_t ApproximateEntries();
  // The index's footprint: its table files on disk, its memtables, and the
  // bytes RocksDB has written to table files since open (flushes and
  // compactions: the index's share of write amplification), and the
  // in-memory map that answers lookups: loaded yet, and its entries.
  struct Footprint {
    uint64_t sst_bytes = 0, memtable_bytes = 0, written_bytes = 0;
    bool lookup_map_ready = false;
    uint64_t lookup_map_entries = 0;
    bool writes_refused = false;  // a write failed, and only a reopen resumes writing (not out of space)
  };
  Footprint GetFootprint();
  // Flushes every memtable: with `wait`, every write so far is durable on
  // return; without, the flush is started and runs on.
  Status FlushMemtables(bool wait = true);

 private:
  Index();
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_INDEX_INDEX_H_
