// kvtier::Store: a persistent, crash-safe store of immutable KV-cache blocks.
//
// A block is an immutable byte string (4 KiB .. max_payload_bytes) stored
// under (namespace, key). Blocks are appended to fixed-size segment files on
// disk (O_DIRECT, io_uring) and indexed in RocksDB.
//
// Durability contract
// - A Put that returns OK (or whose callback receives OK) is durable: its
//   record was written and fdatasync'd, then its index entry was committed.
//   A crash at any instant loses at most puts not yet acknowledged.
// - Flush() returns when every put submitted before it has completed.
// - Every read verifies the record header, the full key, the namespace, the
//   segment generation and the payload checksum. A mismatch is reported as a
//   miss (NotFound, counted in checksum_failures) and the entry is dropped;
//   wrong bytes are never returned.
// - Remove() is durable when it returns.
//
// Cache semantics
// - capacity_bytes is a budget: when it is reached the oldest segment is
//   reclaimed whole (FIFO), optionally reinserting blocks read since written.
//   Any block may therefore disappear; a Get of an evicted block is a miss.
// - Putting an existing key replaces its entry (blocks are immutable, so the
//   bytes are expected to be equal; the newest wins).
//
// Thread safety
// - All methods are safe to call concurrently from any number of threads.
// - Callbacks run on kvtier's internal threads (or inline on the caller's
//   thread when the request is rejected at once, or when a get is served
//   from the host RAM tier, see Options::ram_tier_bytes). They must not block for
//   long and must not call Close().
// - A Store belongs to the process that opened it: a child forked after the
//   open must not use it (or destroy it), since the store's threads stayed
//   in the parent. The C ABI and Python enforce this (Busy in the child).
//
// Buffers
// - PutAsync copies the payload before it returns: the caller may reuse its
//   buffer at once. Blocking Put/PutBatch and PutAsyncBorrowed read the
//   caller's buffer until the put completes, writing page-aligned payloads
//   straight to the device (no copy).
// - Get writes into caller buffers: for GetAsync they must stay valid until
//   the callback has run. After a deadline miss kvtier never touches them.
//   Reads without a deadline land straight in page-aligned buffers (no
//   copy) and are verified there, so after any other miss or error the
//   buffers' contents are unspecified.
#ifndef KVTIER_STORE_H_
#define KVTIER_STORE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/namespace.h"
#include "kvtier/options.h"
#include "kvtier/status.h"

namespace kvtier {

// A read-only piece of a payload (gathered in order on Put).
struct Fragment {
  const void* data = nullptr;
  size_t size = 0;
};
// A writable piece of a destination (filled in order on Get).
struct MutableFragment {
  void* data = nullptr;
  size_t size = 0;
};

struct PutItem {
  std::string_view key;
  std::span<const Fragment> payload;
};

struct GetItem {
  std::string_view key;
  // Destination. The payload is scattered across the fragments in order;
  // their total size must be >= the payload size (else BufferTooSmall).
  std::span<const MutableFragment> out;
};

using Clock = std::chrono::steady_clock;
// No deadline.
inline constexpr Clock::time_point kNoDeadline = Clock::time_point::max();

// Completion of a put: OK (durable), NotAdmitted (declined, nothing stored),
// or an error.
using PutCallback = std::function<void(Status)>;
// Completion of a get: the payload size, or NotFound (miss), TimedOut
// (deadline passed: treat as a miss), BufferTooSmall, or an error.
using GetCallback = std::function<void(Result<size_t>)>;

// Where a block lives, as recorded in the index.
// Where Stat found a block: on local disk, only in the host RAM tier (a
// shared-tier hit admitted there), or only in the shared tier on Ceph.
enum class BlockTier : uint8_t { kDisk, kRam, kShared };

struct BlockInfo {
  NamespaceId ns = 0;
  std::string key;
  BlockTier tier = BlockTier::kDisk;  // the fields below up to payload_bytes describe a disk copy
  uint32_t segment = 0;
  uint32_t generation = 0;
  uint64_t offset = 0;          // byte offset of the record in its segment file
  uint64_t payload_bytes = 0;
  uint64_t record_bytes = 0;    // on-disk size including header and padding
  uint64_t payload_offset = 0;  // byte offset of the payload in the segment file
  bool dense = false;           // a dense record, which may share its pages (docs/format.md)
  uint64_t payload_checksum = 0;  // XXH3-64
  uint64_t sequence = 0;
  uint64_t written_unix_ms = 0;
  uint32_t hits = 0;            // reads since written (this process's view)
};

// Where a listing resumes (Store::ListBlocks): strictly after the entry
// (ns, key) in (namespace, key) order, whether or not that entry is still
// there.
struct ListCursor {
  NamespaceId ns = 0;
  std::string key;
};

struct NamespaceInfo {
  NamespaceId id = 0;
  NamespaceSpec spec;
  uint64_t blocks = 0;   // counted from the index (0 when not asked for)
  uint64_t payload_bytes = 0;
};

// What ListNamespaces says of each namespace: also its blocks and bytes,
// which walks every index entry (seconds at tens of millions of blocks), or
// its id and spec alone, read from memory.
enum class NamespaceListing : uint8_t { kWithCounts, kSpecsOnly };

enum class SegmentState : uint8_t { kFree, kOpen, kSealed };

struct SegmentInfo {
  uint32_t id = 0;
  uint32_t generation = 0;
  uint64_t epoch = 0;  // write order (FIFO); 0 for free segments
  SegmentState state = SegmentState::kFree;
  uint64_t used_bytes = 0;  // bytes appended (records + padding)
};

struct Stats {
  // Operations.
  uint64_t puts = 0, put_bytes = 0;              // acknowledged durable
  uint64_t puts_not_admitted = 0;                // queue full or admission policy
  uint64_t puts_failed = 0;
  // Gets count every block read, whoever copied it: the GPU path's RAM hits
  // (Transfer) and a service's blocks lent to its clients' GPU loads count
  // as RAM-tier gets too.
  uint64_t gets = 0;
  uint64_t hits_ram = 0, hits_disk = 0, misses = 0;
  uint64_t bytes_read_ram = 0, bytes_read_disk = 0;
  // Host RAM tier (zeros when off).
  // used: memory its blocks take in whole chunks (Options::ram_tier_chunk_bytes);
  // payload: their bytes.
  uint64_t ram_capacity_bytes = 0, ram_used_bytes = 0, ram_payload_bytes = 0, ram_blocks = 0;
  // Of the capacity, faulted in by the tier's prefault after open
  // (Options::ram_tier_prefault): equal to it once that is done.
  uint64_t ram_prefaulted_bytes = 0;
  uint64_t ram_evictions = 0, ram_evicted_bytes = 0;
  uint64_t ram_adopted_blocks = 0, ram_adopt_dropped = 0;  // at open, from shared memory
  uint64_t ram_checksum_failures = 0;  // RAM hits whose copy no longer matched (dropped; served from disk)
  bool ram_shared_memory = false;                          // tier lives in /dev/shm
  uint64_t get_deadline_misses = 0;
  uint64_t checksum_failures = 0;                // records that failed a check on read
  uint64_t stale_entries_dropped = 0;            // index entries pointing at reused space
  uint64_t lookups = 0, contains = 0, removes = 0;  // calls; removes: keys (a RemoveBatch counts each)
  uint64_t touches = 0;  // keys a TouchBatch found stored (and marked as read for reclaim)
  // Device.
  uint64_t device_bytes_written = 0, device_bytes_read = 0;
  // Payload bytes written to the device from where they already were (the
  // caller's or the RAM tier's pages), and read straight into callers' pages.
  uint64_t zero_copy_put_bytes = 0, direct_read_bytes = 0;
  // Puts and gets of at least zero_copy_min_bytes that were copied because
  // the caller's memory sits on 4 KiB pages (Options::zero_copy_small_pages).
  uint64_t small_page_copies = 0;
  // Device writes issued from io_uring-registered memory (the write ring and
  // the RAM tier's data area); 0 on the posix backend.
  uint64_t registered_writes = 0;
  uint64_t syncs = 0, group_commits = 0;
  // Where gets that reached the device spent their time, summed over
  // disk_reads_timed of them (divide for the mean): waiting for a read
  // thread (0 for a blocking get read on the caller's thread), the index
  // lookup, the device (submitted to reaped, the read thread's turn
  // included), and the rest: verifying the record, admitting it to the RAM
  // tier and the caller's completion.
  uint64_t disk_reads_timed = 0, disk_read_queue_ns = 0, disk_read_index_ns = 0;
  uint64_t disk_read_device_ns = 0, disk_read_finish_ns = 0;
  // Where acknowledged puts spent their time, summed over puts_timed of them:
  // on the caller's thread (room in the write queue, the copy and the
  // checksum), waiting for the writer thread, placing the record (a segment
  // rolled over and reclaimed included), the device write, waiting for the
  // committer and fdatasync, and the index commit up to the acknowledgment.
  uint64_t puts_timed = 0, put_encode_ns = 0, put_queue_ns = 0, put_place_ns = 0;
  uint64_t put_write_ns = 0, put_sync_ns = 0, put_commit_ns = 0;
  double write_amplification = 0;                // device bytes written / payload bytes put
  // Capacity.
  uint64_t evictions = 0, evicted_blocks = 0, evicted_bytes = 0;
  // The budget asked for (Options::capacity_bytes) when capacity_bytes is
  // less: the disk could not hold it (at open, or when it filled up first).
  uint64_t capacity_configured_bytes = 0;
  uint64_t disk_full_events = 0;  // a new segment file found no space: the store shrank instead
  uint64_t reinsertions = 0, reinserted_bytes = 0;
  // Of the reinsertions, those copied from the RAM tier's copy (verified)
  // instead of read back from the disk.
  uint64_t reinserted_from_ram = 0;
  // Reclaims that took a segment other than the oldest, passing over ones
  // whose blocks are still read (Options::reclaim_window_fraction).
  uint64_t reclaims_not_oldest = 0;
  uint64_t capacity_bytes = 0, used_bytes = 0;
  uint64_t blocks_estimate = 0;                  // RocksDB's estimate of index entries
  // The index (RocksDB): table files on disk, memtables, and bytes written
  // to table files since open by flushes and compactions.
  uint64_t index_sst_bytes = 0, index_memtable_bytes = 0, index_written_bytes = 0;
  // LookupPrefix and Contains answer from an in-memory map of the index
  // (about 32 bytes per block), loaded in the background after open; until
  // it is ready they read RocksDB, several times slower on a large store.
  bool lookup_map_ready = false;
  // True while the index refuses writes until the store is reopened: a
  // write of its files failed, and RocksDB 7.8 does not resume after that.
  // Puts and removes fail meanwhile (none is acknowledged); reads go on.
  // Not set for lack of space, from which RocksDB resumes by itself once
  // space is freed (puts fail meanwhile, as puts_failed counts). `kvtier
  // serve` exits for its supervisor to restart it when this is set.
  bool index_writes_refused = false;
  uint64_t lookup_map_entries = 0;
  uint32_t segments_total = 0, segments_sealed = 0, segments_free = 0;
  // Of them, the hot region's (Options::hot_region_fraction), open or sealed.
  uint32_t segments_hot = 0;
  // Entries of segments/ with a segment's name that are not regular files
  // (a stray symlink or folder): ignored, never used.
  uint32_t segment_entries_ignored = 0;
  // Open and recovery.
  bool recovered_from_crash = false;
  uint64_t recovery_scanned_bytes = 0, recovery_reindexed = 0, recovery_torn_bytes = 0;
  double open_seconds = 0;
  std::string io_backend;  // "io_uring" or "posix"
  // Shared tier on Ceph (zeros when off; docs/shared-tier.md).
  bool remote_connected = false;
  uint64_t hits_remote = 0, bytes_read_remote = 0;
  uint64_t remote_misses = 0;             // remote reads that failed (included in misses)
  uint64_t remote_deadline_misses = 0, remote_checksum_failures = 0;
  uint64_t remote_uploads = 0, remote_upload_bytes = 0;
  uint64_t remote_upload_retries = 0;     // failed attempts, retried with back-off
  uint64_t remote_uploads_skipped = 0;    // segments reclaimed locally before their upload
  uint64_t remote_segments_imported = 0;  // summaries imported into the remote index
  uint64_t remote_objects_deleted = 0;    // RADOS objects (parts, summaries) deleted for the budget
  uint64_t remote_uploads_deleted = 0;    // whole segment uploads deleted for the budget
  uint64_t remote_admitted_to_ram = 0;    // remote hits copied into the RAM tier
  uint64_t remote_orphans_removed = 0;    // objects no catalog entry named, swept
};

// Result of Verify().
struct VerifyReport {
  uint64_t records_scanned = 0, records_ok = 0, records_corrupt = 0;
  uint64_t index_entries = 0;
  uint64_t entries_without_record = 0;  // index -> nothing valid on disk
  uint64_t records_without_entry = 0;   // valid record, no (or an older) index entry
  uint64_t stale_entries = 0;           // entry names an old generation
  uint64_t bytes_scanned = 0;
  // Bytes behind a segment's last record left by an earlier life of the
  // segment (holes not punched): unreachable, so not a problem.
  uint64_t stale_tail_bytes = 0;
  std::vector<std::string> problems;    // first few, human-readable
  bool ok() const {
    return records_corrupt == 0 && entries_without_record == 0 && stale_entries == 0;
  }
};

struct VerifyOptions {
  // Read every payload and check its checksum (else headers only).
  bool deep = false;
  // Called now and then with (bytes done, bytes total).
  std::function<void(uint64_t, uint64_t)> progress;
};

struct RepairReport {
  uint64_t records_scanned = 0, records_indexed = 0, records_dropped = 0;
  uint64_t regions_cleared = 0;  // corrupt regions zeroed (punched) in segments
  uint64_t entries_before = 0, entries_after = 0;
  // An index RocksDB could not open is moved here and rebuilt ("" if none).
  std::string damaged_index_moved_to;
};

// Information read from a store folder without opening it for I/O.
// What a store folder says of itself without opening the store (kvtier info).
struct FolderState {
  bool in_use = false;  // a process has the store open read-write
  long holder_pid = 0;  // that process, 0 when unknown
  enum class Shutdown : uint8_t { kUnknown, kNeverCheckpointed, kClean, kNotClean };
  // From the index's last checkpoint: kNotClean means the next read-write
  // open recovers (replays the segments' tails).
  Shutdown last_shutdown = Shutdown::kUnknown;
};

// A block's record header as decoded from its segment file.
struct RecordHeaderInfo {
  uint32_t magic = 0;  // 0x5254564B "KVTR", or 0x4454564B "KVTD": a dense record's compact header
  uint32_t format_version = 0;
  uint32_t flags = 0;
  bool dense = false;
  uint32_t key_len = 0;
  uint32_t segment = 0;
  uint32_t generation = 0;
  NamespaceId ns = 0;
  uint64_t sequence = 0;
  uint64_t payload_len = 0;
  uint64_t payload_checksum = 0;
  uint64_t written_unix_ms = 0;
};

// A block's index entry beside the record it points at (kvtier show).
struct RecordInspection {
  BlockInfo entry;                         // the disk copy's index entry
  std::string segment_file;                // path of its segment file
  std::optional<RecordHeaderInfo> header;  // absent when the header does not decode
  std::vector<std::string> problems;       // where record and entry disagree; empty when they match
};

// A store's shared-memory RAM tier file (/dev/shm/kvtier-<store id>.ram),
// which outlives its process by design (the next open adopts it), and with
// it what became of the store (kvtier shm).
struct RamTierFile {
  std::string path;
  std::string store_id;  // 32 hex digits, from the file's name
  uint64_t bytes = 0;    // the file's size: memory it holds until removed or reboot
  std::string folder;    // the store's folder, as its last open noted it; empty when not noted
  enum class State : uint8_t {
    kOpen,     // a process has the store open (holder_pid)
    kKept,     // the folder holds the store, closed: its next open adopts the tier
    kOrphan,   // the folder is gone or holds another store: nothing will open it
    kUnknown,  // no folder noted (a tier made before kvtier noted them): left alone
  };
  State state = State::kUnknown;
  long holder_pid = 0;  // kOpen: the process, 0 when unknown
  std::string why;      // kOrphan: what was found in the folder
};

struct StoreDescription {
  uint32_t format_version = 0;
  std::string store_id;  // 32 hex digits
  uint64_t segment_size_bytes = 0;
  uint64_t created_unix_ms = 0;
};

class Store {
 public:
  // Opens (or creates, per options) the store in folder `dir`; or, for
  // "unix:/path/to.sock" and "auto:/store/folder", connects to a service
  // (kvtier/service.h) that serves a store, with the same interface.
  // Errors: Busy ("store is in use by pid N"), NotFound (no store and
  // create_if_missing=false), InvalidArgument (not a store folder, bad
  // options), NotSupported (newer format), Corruption (both superblock copies
  // bad), IOError/NoSpace.
  [[nodiscard]] static Result<std::unique_ptr<Store>> Open(const std::string& dir,
                                                           const Options& options);
  // Reads the superblock only.
  [[nodiscard]] static Result<StoreDescription> Describe(const std::string& dir);
  // Whether a process has the store open and how it was last closed, read
  // without taking the lock or changing anything in the folder.
  [[nodiscard]] static Result<FolderState> Inspect(const std::string& dir);
  // Removes the store: its shared-memory RAM tier, then every file and
  // folder kvtier made in `dir`, the superblock last, then `dir` itself when
  // nothing else is left in it (files kvtier did not make stay, with the
  // folder). Deleting a folder by hand leaves the RAM tier's /dev/shm file
  // holding memory until reboot; this does not. Errors: Busy ("store is in
  // use by pid N": open in a process, a service or a read-only open), NotFound
  // (no store in `dir`), Corruption (both superblock copies damaged: the RAM
  // tier cannot be named), IOError. Interrupted, it leaves a store that
  // opens, and calling it again finishes.
  [[nodiscard]] static Status Destroy(const std::string& dir);
  // Every store's shared-memory RAM tier file on this machine, by store id,
  // and what became of its store. Deleting a store's folder by hand (rather
  // than Destroy) leaves its tier an orphan, holding memory until reboot.
  // Errors: IOError when /dev/shm cannot be listed.
  [[nodiscard]] static Result<std::vector<RamTierFile>> ListRamTierFiles();
  // Removes the RAM tier file of store `store_id` (and its folder note) when
  // it is an orphan, checked again here. Errors: Busy when its store is open,
  // InvalidArgument when it is kept for its store's next open or its folder
  // is unknown, NotFound when there is no such file, IOError.
  [[nodiscard]] static Status RemoveOrphanRamTier(const std::string& store_id);
  // Rebuilds the index from the segment files: drops every entry, rescans
  // every segment, re-indexes what verifies. The store must not be open.
  [[nodiscard]] static Result<RepairReport> Repair(
      const std::string& dir, const Options& options,
      std::function<void(uint64_t, uint64_t)> progress = nullptr);

  virtual ~Store() = default;  // closes if still open (errors are dropped)

  // --- Namespaces ----------------------------------------------------------
  // Registers spec (idempotent): returns its id, the same across restarts.
  virtual Result<NamespaceId> RegisterNamespace(const NamespaceSpec& spec) = 0;
  // Finds a namespace by display name or by 16-hex-digit id.
  virtual Result<NamespaceId> FindNamespace(std::string_view name_or_hex) = 0;
  // With counts, `progress` (when set) is called now and then, on the
  // calling thread, with (index entries counted, the index's estimate of
  // its entries); a service's client counts on the service and never calls it.
  virtual Result<std::vector<NamespaceInfo>> ListNamespaces(
      NamespaceListing listing, const std::function<void(uint64_t, uint64_t)>& progress) = 0;
  Result<std::vector<NamespaceInfo>> ListNamespaces(NamespaceListing listing) { return ListNamespaces(listing, nullptr); }
  Result<std::vector<NamespaceInfo>> ListNamespaces() { return ListNamespaces(NamespaceListing::kWithCounts, nullptr); }
  // Drops every block of a namespace and the namespace itself.
  virtual Status RemoveNamespace(NamespaceId ns) = 0;

  // --- Writes (blocking) -----------------------------------------------------
  virtual Status Put(NamespaceId ns, std::string_view key, std::span<const Fragment> payload) = 0;
  Status Put(NamespaceId ns, std::string_view key, const void* data, size_t size) {
    Fragment f{data, size};
    return Put(ns, key, std::span<const Fragment>(&f, 1));
  }
  // One status per item, in order. Items are committed in groups.
  virtual std::vector<Status> PutBatch(NamespaceId ns, std::span<const PutItem> items) = 0;

  // --- Writes (async) ----------------------------------------------------------
  // Copies the payload, queues the record and returns. `done` runs once, with
  // OK when durable. A full write queue or the admission policy completes it
  // at once (inline) with NotAdmitted: this never blocks.
  virtual void PutAsync(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                        PutCallback done) = 0;
  // Like PutAsync, but the payload is not copied first: kvtier writes it to
  // the device from the caller's memory (zero-copy) when every fragment
  // starts on a 4 KiB boundary and all but the last are whole pages, and
  // copies it otherwise. The fragments must stay valid and unchanged until
  // `done` has run. Puts in flight this way count against
  // Options::write_queue_bytes like copied ones.
  virtual void PutAsyncBorrowed(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                                PutCallback done) = 0;

  // --- Reads ---------------------------------------------------------------------
  // Returns the payload size written into `out`. Blocking reads (Get,
  // GetVector, GetBatch) wait for room when the read queue is full
  // (Options::max_pending_reads); GetAsync completes TimedOut at once.
  virtual Result<size_t> Get(NamespaceId ns, std::string_view key,
                             std::span<const MutableFragment> out) = 0;
  Result<size_t> Get(NamespaceId ns, std::string_view key, void* buf, size_t cap) {
    MutableFragment f{buf, cap};
    return Get(ns, key, std::span<const MutableFragment>(&f, 1));
  }
  // Reads a whole block into a new vector (its size from the index, then
  // the block). Aborted when the key was replaced by a block of another size
  // between the two, twice: a put of the key in flight is served from the
  // RAM tier before the index has it; read again once it has landed.
  virtual Result<std::vector<uint8_t>> GetVector(NamespaceId ns, std::string_view key) = 0;
  // Reads issued together (one submission per read thread); one result each.
  std::vector<Result<size_t>> GetBatch(NamespaceId ns, std::span<const GetItem> items) {
    return GetBatch(ns, items, kNoDeadline);
  }
  // GetBatch whose reads start by `deadline`: an item not started by then
  // (still waiting for room, or queued) completes TimedOut, its `out` never
  // touched. A read already on the device when it passes completes (it may
  // be writing `out`), so the call returns up to one device read after the
  // deadline, and nothing writes any item's `out` once it has returned.
  virtual std::vector<Result<size_t>> GetBatch(NamespaceId ns, std::span<const GetItem> items,
                                               Clock::time_point deadline) = 0;
  // Queues a read; `done` runs once. When `deadline` passes first, or the
  // read queue is full, `done` gets TimedOut (counted as a deadline miss)
  // and `out` is never touched.
  virtual void GetAsync(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                        Clock::time_point deadline, GetCallback done) = 0;

  // --- Lookups (index only, no disk read of payloads) ---------------------------
  virtual Result<bool> Contains(NamespaceId ns, std::string_view key) = 0;
  // Contains for each key: `present` (not null) gets a flag per key, in
  // order. Through a service one request per 4,096 keys instead of one per key.
  virtual Status ContainsBatch(NamespaceId ns, std::span<const std::string_view> keys, std::vector<bool>* present) = 0;
  // Counts a use of each present key as a read does, for the hot-block
  // reinsertion at reclaim (Options::reinsert_min_hits): for a block an
  // engine's upper tier served without reading it here. Index only; absent
  // keys are skipped. `present` (may be null) gets a flag per key. Through a
  // service one request per 4,096 keys.
  virtual Status TouchBatch(NamespaceId ns, std::span<const std::string_view> keys, std::vector<bool>* present) = 0;
  // How many leading keys are present (engines' prefix match).
  virtual Result<size_t> LookupPrefix(NamespaceId ns, std::span<const std::string_view> keys) = 0;
  // The local disk copy's record when there is one; else the RAM tier's or
  // the shared tier's copy (tier, payload_bytes and, from RAM, the checksum).
  virtual Result<BlockInfo> Stat(NamespaceId ns, std::string_view key) = 0;
  // Visits index entries of one namespace (ns = 0: all) in (namespace, key)
  // order, from the first or strictly after `after` (may be null): a page
  // costs the entries it visits, not those before the cursor. Return false
  // from `fn` to stop.
  virtual Status ListBlocks(NamespaceId ns, std::string_view key_prefix, const ListCursor* after,
                            const std::function<bool(const BlockInfo&)>& fn) = 0;
  Status ListBlocks(NamespaceId ns, std::string_view key_prefix, const std::function<bool(const BlockInfo&)>& fn) {
    return ListBlocks(ns, key_prefix, nullptr, fn);
  }

  // --- Shared memory ---------------------------------------------------------------
  // Says that [base, base+len) is a MAP_SHARED mapping of `fd` at file offset
  // `offset` (a memfd, or a file in /dev/shm). A served store then moves
  // payloads that lie in it straight between the service and that memory,
  // without staging (one host copy fewer per put and get); the descriptor is
  // sent to the service, which maps the file. An embedded store ignores it.
  // The mapping must stay until UnregisterMemory or Close.
  virtual Status RegisterMemory(void* base, size_t len, int fd, uint64_t offset) {
    (void)base, (void)len, (void)fd, (void)offset;
    return Status::OK();
  }
  virtual Status UnregisterMemory(void* base) {
    (void)base;
    return Status::OK();
  }

  // --- Removal, durability, capacity -------------------------------------------
  // Removes a key. OK also when it was absent. Durable on return, through a
  // crash at any later instant (docs/durability.md): it waits for the puts
  // queued before it and, when there was something to remove, an index flush.
  virtual Status Remove(NamespaceId ns, std::string_view key) = 0;
  // Removes every key in `keys`, as Remove does each, with one index flush
  // per 4,096 keys (a Remove per key costs a flush each): durable on return.
  // `present`, when not null, is set to whether each key had a block; on an
  // error it says nothing, and any of the keys may be gone or still there.
  virtual Status RemoveBatch(NamespaceId ns, std::span<const std::string_view> keys, std::vector<bool>* present) = 0;
  // Returns when every put submitted before the call has completed and its
  // index entry is durable: a read-only open (the `kvtier` tools) then sees
  // it, and a crash makes recovery scan nothing before it. (Puts are durable
  // when acknowledged; the index is flushed every checkpoint_interval_bytes.)
  virtual Status Flush() = 0;
  // Reclaims oldest segments until used bytes <= target.
  virtual Status EvictTo(uint64_t target_used_bytes) = 0;
  // Shared tier: seals the open segment (the next put starts a new one) and
  // waits until every sealed segment is uploaded, so other nodes can serve
  // what this node wrote. TimedOut when `timeout` passes first (the uploads
  // go on); OK at once when no shared tier is enabled. Close() does the same,
  // bounded by RemoteTierOptions::close_upload_timeout_ms.
  virtual Status ShareNow(std::chrono::milliseconds timeout) = 0;

  // --- Inspection -----------------------------------------------------------------
  virtual Stats GetStats() = 0;
  virtual std::vector<SegmentInfo> Segments() = 0;
  virtual Result<VerifyReport> Verify(const VerifyOptions& options) = 0;
  // Reads the header of a block's disk record and checks it against the
  // block's index entry (the payload is not read). NotFound when the block
  // has no disk copy.
  virtual Result<RecordInspection> InspectRecord(NamespaceId ns, std::string_view key) = 0;
  virtual const std::string& dir() const = 0;
  virtual StoreDescription Description() const = 0;

  // Completes queued work, writes a clean-shutdown checkpoint (so the next
  // open scans nothing) and releases the lock. Later calls return Closed.
  virtual Status Close() = 0;
};

}  // namespace kvtier

#endif  // KVTIER_STORE_H_
