// RamTier: a byte-budgeted, sharded cache of KV blocks in host memory.
//
// Memory is one mapping: a metadata area followed by `capacity_bytes` of
// data cut into fixed chunks (chunk_bytes, default 64 KiB). A block takes a
// chain of chunks; its payload starts at a chunk boundary. The mapping is
// either anonymous (MAP_ANONYMOUS, MADV_HUGEPAGE) or a file under /dev/shm
// (MAP_SHARED) that outlives the process: Open() then adopts the blocks it
// holds after checking the file's header (magic, version, owner id,
// geometry), each block's descriptor and chunk chain, each payload's XXH3
// checksum, and the caller's filter (the store checks its index). Anything
// that fails is dropped; a header that does not match discards the file.
//
// Shards: a block's (namespace, key) hash picks its shard; each shard owns a
// fixed range of chunks, its own map, eviction policy and mutex.
//
// Thread safety: every method may be called from any thread. A Pin keeps a
// block's chunks from being reused while the holder reads (or, for a
// reservation, fills) them; Erase of a pinned block hides it at once and
// frees its chunks when the last pin goes.
//
// Write-through contract (kept by the store): the tier holds copies only;
// evicting never loses data.
#ifndef KVTIER_SRC_TIER_RAM_TIER_H_
#define KVTIER_SRC_TIER_RAM_TIER_H_

#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kvtier/io.h"
#include "kvtier/namespace.h"
#include "kvtier/status.h"
#include "kvtier/store.h"
#include "tier/eviction.h"
#include "util/copy_checksum.h"
#include "util/worker_pool.h"

namespace kvtier {

struct RamTierOptions {
  uint64_t capacity_bytes = 0;         // data bytes (rounded down to chunks); > 0
  uint32_t chunk_bytes = 64u << 10;    // multiple of 4096
  uint32_t shards = 0;                 // 0: up to 16, each >= 256 chunks
  RamPolicy policy = RamPolicy::kS3Fifo;
  // Empty: anonymous memory. Else the shared-memory file to create or adopt,
  // opened, checked and reserved through `fs` (the kernel's when null) and
  // mapped by its File::map_fd(); a file that cannot be mapped is an error.
  std::string shm_path;
  std::shared_ptr<FileSystem> fs;
  std::array<uint8_t, 16> owner_id{};  // the store id; a file of another owner is discarded
  unsigned file_mode = 0600;
  // Fault the data area in on a background thread after Open (MADV_POPULATE_WRITE),
  // so the first puts do not pay the kernel's page zeroing inline.
  bool prefault = true;
  // Read() checks each block's XXH3 against the bytes it hands out; a block
  // that no longer matches (a memory fault, a stray write into the mapping)
  // is dropped and the read fails with Corruption, so the caller goes to
  // disk instead of getting wrong bytes.
  bool verify_reads = true;
  // Threads that copy one ReadBatch's blocks, the caller included.
  uint32_t copy_threads = 1;
  // How long idle copy threads poll for the next read before they sleep
  // (Options::ram_copy_spin_us); 0: they sleep at once.
  uint32_t copy_spin_us = 0;
  // Read() copies blocks (ReadBatch: batches) of at least this size with
  // non-temporal stores (Options::ram_streaming_copy_min_bytes).
  uint64_t streaming_copy_min_bytes = UINT64_MAX;
  // Read() of a block at least this large (0: never) shares its copy out
  // over the copy threads, each piece verified as it is copied against the
  // hash's states at its two ends (Options::ram_split_copy_min_bytes). The
  // states are recorded by the block's first read, which is one pass.
  // ReadBatch copies such blocks as pieces too, among its other blocks.
  uint64_t split_copy_min_bytes = 0;
  // Told of counted reads (Acquire, AcquireHit, CountRead) of a block whose
  // place on the disk was noted (NotePlaced), outside the tier's locks (which
  // of them: below): the disk's reclaim weighs reads per segment when it
  // picks a victim, and reads served here never reach the disk. A block not
  // placed counts its reads in the tier instead (TakeReads). May be empty.
  std::function<void(uint32_t segment, uint64_t offset, uint64_t bytes)> on_placed_read;
  // Past its first `placed_reads_reported` reads since placed, a block's
  // reads are reported only when `read_epoch` (when set) has moved since its
  // last report: enough to tell a hot block still read, at one report per
  // block per epoch instead of one per read on a path that copies at memory
  // speed.
  uint32_t placed_reads_reported = UINT32_MAX;
  const std::atomic<uint64_t>* read_epoch = nullptr;
};

struct RamTierStats {
  uint64_t hits = 0, misses = 0, inserts = 0, insert_rejects = 0;
  uint64_t evictions = 0, evicted_bytes = 0, erases = 0;
  uint64_t blocks = 0, payload_bytes = 0, used_bytes = 0, capacity_bytes = 0;
  uint64_t adopted_blocks = 0, adopted_bytes = 0, adopt_dropped = 0;
  uint64_t prefaulted_bytes = 0;  // data bytes faulted in by the background thread
  uint64_t checksum_failures = 0;  // blocks that reads found changed in memory (and dropped)
  uint64_t split_copies = 0;       // blocks read (alone or in a batch) as pieces the copy threads shared
  bool shared = false;        // backed by a /dev/shm file
  bool adopted_file = false;  // that file was adopted at open
};

// Where the disk holds a block's record (RamTier::NotePlaced): its segment,
// offset and size in whole pages.
struct RamPlacement {
  uint32_t segment = UINT32_MAX;  // UINT32_MAX: not known
  uint64_t offset = 0, bytes = 0;
};

// Called at adoption for every block whose checksum verified; return false
// to drop it. It may fill in `placed` (never null) with where the disk holds
// the block, as NotePlaced would.
using RamAdoptFilter = std::function<bool(NamespaceId ns, std::string_view key, uint64_t len, uint64_t checksum,
                                          RamPlacement* placed)>;

class RamTier {
 public:
  struct Piece {
    uint8_t* data;
    size_t size;
  };
  struct Entry;
  struct Shard;

  // Holds a block's chunks. Move-only; releases on destruction.
  class Pin {
   public:
    Pin() = default;
    Pin(Pin&& o) noexcept;
    Pin& operator=(Pin&& o) noexcept;
    Pin(const Pin&) = delete;
    Pin& operator=(const Pin&) = delete;
    ~Pin() { Release(); }
    explicit operator bool() const { return entry_ != nullptr; }
    uint64_t size() const;
    uint64_t checksum() const;
    uint64_t token() const;
    // The payload, in order: chunk runs (adjacent chunks merged).
    const std::vector<Piece>& pieces() const;
    void Release();

   private:
    friend class RamTier;
    Pin(RamTier* t, Entry* e) : tier_(t), entry_(e) {}
    RamTier* tier_ = nullptr;
    Entry* entry_ = nullptr;
  };

  ~RamTier();
  RamTier(const RamTier&) = delete;
  RamTier& operator=(const RamTier&) = delete;

  // Maps (and with shm_path, creates or adopts) the tier. Errors name the
  // path: IOError (open/ftruncate/mmap), InvalidArgument (options).
  [[nodiscard]] static Result<std::unique_ptr<RamTier>> Open(const RamTierOptions& options,
                                                             const RamAdoptFilter& filter = nullptr);

  // Bytes the tier maps for these options: its metadata (a header, then 324
  // bytes per chunk) and its whole chunks. 0 where Open would refuse them.
  [[nodiscard]] static uint64_t MappingBytes(uint64_t capacity_bytes, uint32_t chunk_bytes);

  // Copies the payload in. Returns a token (> 0) naming this version of the
  // block, or 0 when it was not stored (larger than a shard, everything
  // pinned, or only_if_absent and present).
  uint64_t Insert(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                  uint64_t checksum, bool only_if_absent = false);
  // Allocates chunks for a block of `len` bytes, invisible to lookups, for
  // the caller to fill through pieces(); Commit publishes it.
  Pin Reserve(NamespaceId ns, std::string_view key, uint64_t len);
  // Publishes a reservation (replacing any older version). Returns its token,
  // or 0 when the reservation was empty.
  uint64_t Commit(Pin reservation, uint64_t checksum);
  // Like Commit, but `reservation` stays a pin on the published block (for a
  // reader such as the device write of the same bytes) until released.
  uint64_t CommitKeepPin(Pin& reservation, uint64_t checksum);

  // Pins a block for reading; an empty Pin on a miss. Counts a hit or miss.
  Pin Acquire(NamespaceId ns, std::string_view key) { return PinEntry(ns, key, Count::kHitOrMiss); }
  // Acquire, but a miss is not counted: for a caller that reads a block the
  // tier lacks through the store next, which counts that miss.
  Pin AcquireHit(NamespaceId ns, std::string_view key) { return PinEntry(ns, key, Count::kHit); }
  // Pins a block without counting a hit, a miss or a read, and without
  // touching the eviction order: for the store's own copies (reclaim's
  // reinsertion), which are not the engine's reads.
  Pin Peek(NamespaceId ns, std::string_view key) { return PinEntry(ns, key, Count::kNothing); }
  // Counts a Peek's pin as a read after all (a hit that moves the block in
  // the eviction order), for a caller that decides only after pinning
  // whether it reads. Nothing when the block was erased or replaced since.
  void CountRead(const Pin& pin);
  // Copies a block into `out`: its size, NotFound, BufferTooSmall, or
  // Corruption (verify_reads: the copy no longer matches its checksum; the
  // block is dropped and `out` holds garbage).
  Result<size_t> Read(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out) {
    return ReadAs(ns, key, out, 0, /*may_split=*/true);
  }
  // Read() of every item into results[i] (results.size() == items.size()),
  // spread over the copy threads when the batch is worth it: whole blocks,
  // and blocks whose states are recorded as pieces, so that the threads
  // finish together.
  void ReadBatch(NamespaceId ns, std::span<const GetItem> items, std::span<Result<size_t>> results);
  bool Contains(NamespaceId ns, std::string_view key);
  // Whether reads check each copy against its checksum (RamTierOptions::
  // verify_reads): the GPU path's copies straight to the device follow it.
  bool verifies_reads() const { return opt_.verify_reads; }
  // How many reads the tier served of this block since it was inserted or
  // since the last call, which starts the count again (0 when absent). The
  // disk's reclaim asks it: reads served here never reach the disk's counts.
  uint32_t TakeReads(NamespaceId ns, std::string_view key);
  // Notes where the disk holds the block whose payload has `checksum`: its
  // reads from now on go to on_placed_read. Nothing when the tier holds no
  // such version.
  void NotePlaced(NamespaceId ns, std::string_view key, uint64_t checksum, const RamPlacement& placed);

  void Erase(NamespaceId ns, std::string_view key);
  // Erases only the version named by `token` (a failed put undoing itself);
  // true when it did.
  bool EraseIf(NamespaceId ns, std::string_view key, uint64_t token);
  void EraseNamespace(NamespaceId ns);

  // Whether a read's copy of `bytes` (a block, or a batch's blocks
  // together) uses non-temporal stores while `in_flight` bytes of reads, its
  // own included, are being copied at once: their destinations share the
  // cache, so eight callers' batches that each fit in it together do not.
  static bool StreamsCopy(uint64_t bytes, uint64_t in_flight, uint64_t streaming_copy_min_bytes) {
    return std::max(bytes, in_flight) >= streaming_copy_min_bytes;
  }

  // Whether a lone read shares its copy out (split_copy_min_bytes) while
  // `reads_in_flight` reads, its own included, run at once: while they
  // leave each read two copy threads, when idle copy threads poll for work
  // (`polling`, copy_spin_us > 0), else four: pieces handed to sleeping
  // threads wait for their wake-ups, and eight readers on 16 threads that
  // shared lost (docs/ram_tier.md).
  static bool SharesCopy(uint32_t reads_in_flight, uint32_t copy_threads, bool polling) {
    return reads_in_flight * (polling ? 2 : 4) <= copy_threads;
  }

  // The states between a block's pieces, for a writer that hashes the
  // block as it fills the tier's copy: true when blocks of `bytes` are read
  // as pieces, and then *marks (RecordMarks every kMarkBytes, before the
  // first Copy) go to SetMarks with the pin of that copy, before it commits.
  // Marks that do not chain to the block's checksum only fail the pieces;
  // the one pass then decides.
  static constexpr uint64_t kMarkBytes = 256u << 10;
  bool WantsMarks(uint64_t bytes) const { return Splittable(bytes); }
  void SetMarks(const Pin& p, std::vector<Xxh3Mark> marks);

  RamTierStats GetStats() const;
  // True once the background prefault has faulted in the whole data area
  // (never with RamTierOptions::prefault off, or where the kernel refused).
  bool Prefaulted() const { return prefaulted_.load(std::memory_order_relaxed) == map_bytes_ - meta_bytes_; }
  // Data bytes from the start of the data area that the prefault has
  // faulted in so far (it goes in address order), and whether it has
  // stopped: done, refused by the kernel, or never started (prefault off).
  // Whoever pins the tier pins behind it, where pinning is cheap.
  uint64_t PrefaultedBytes() const { return prefaulted_.load(std::memory_order_acquire); }
  bool PrefaultOver() const { return prefault_over_.load(std::memory_order_acquire); }
  // The data area (metadata excluded) in regions of kRegionBytes (whole
  // chunks; the last may be shorter), each registered on its own with
  // io_uring or cudaHostRegister: pinning a region holds the process's mmap
  // lock while it faults in and pins it, so one registration of a whole tier
  // of tens of GiB stalled every mmap of the process (an engine's allocator,
  // its threads' stacks) for seconds (docs/ram_tier.md). No Pin piece
  // crosses a region's end, so each copy lies in one registration.
  static constexpr uint64_t kRegionBytes = 1ull << 30;
  std::vector<iovec> Regions() const;
  uint64_t region_bytes() const { return uint64_t{region_chunks_} * opt_.chunk_bytes; }
  const std::string& shm_path() const { return opt_.shm_path; }
  // For lending the tier to another process (a service's clients copy hits
  // straight out of it): the tier's file opened read-only through its file
  // system (NotSupported for a tier in anonymous memory), the file's size,
  // and where a piece of a Pin lies in that file.
  [[nodiscard]] Result<std::unique_ptr<File>> OpenFileReadOnly() const;
  uint64_t file_bytes() const { return map_bytes_; }
  uint64_t capacity_bytes() const { return base_.capacity_bytes; }
  uint64_t FileOffsetOf(const uint8_t* p) const { return static_cast<uint64_t>(p - map_); }

 private:
  // Acquire, AcquireHit and Peek: the lookup and the pin. A counted hit is a
  // read (it also moves the block in the eviction order).
  enum class Count : uint8_t { kNothing, kHit, kHitOrMiss };
  Pin PinEntry(NamespaceId ns, std::string_view key, Count count);
  // Counts a hit of `e` under its shard's lock; returns the place to tell
  // on_placed_read of once the lock is let go (segment UINT32_MAX: none).
  RamPlacement CountReadLocked(Shard& s, Entry* e);
  void ReportPlacedRead(const RamPlacement& r);
  explicit RamTier(const RamTierOptions& o);
  Status Map(bool* adopt);
  bool IsAdoptable(File& f) const;
  void Format();
  // Adoption of a shared-memory file left by an earlier process: every
  // shard checked in parallel, each block's chain and checksum verified.
  struct AdoptCounts;
  void Adopt(const RamAdoptFilter& filter);
  void AdoptShard(Shard& s, const RamAdoptFilter& filter, AdoptCounts* n);
  // The entry of the block whose head chunk is `i` (chunks not `used`), or
  // null when it does not verify (its descriptor is then dropped).
  Entry* AdoptBlock(Shard& s, uint32_t i, const std::vector<bool>& used, const RamAdoptFilter& filter);
  void PublishAdopted(Shard& s, std::vector<Entry*>& found, std::vector<bool>& used, AdoptCounts* n);
  Shard& ShardFor(uint64_t hash) const;
  Entry* AllocateLocked(Shard& s, NamespaceId ns, std::string_view key, uint64_t hash, uint64_t len);
  void PublishLocked(Shard& s, Entry* e, uint64_t checksum);
  void UnlinkLocked(Shard& s, Entry* e);
  void FreeLocked(Shard& s, Entry* e);
  void Unpin(Entry* e);
  void WriteDescriptor(const Entry* e, bool valid);
  uint8_t* ChunkData(uint32_t c) const;

  RamTierOptions opt_;
  uint8_t* map_ = nullptr;
  size_t map_bytes_ = 0, meta_bytes_ = 0;
  uint32_t chunks_ = 0;
  uint32_t region_chunks_ = 1;  // chunks per region (Regions)
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<uint64_t> next_token_{1};
  RamTierStats base_;  // shared/adopted flags and adoption counts
  void Prefault();
  std::thread prefault_;
  std::atomic<bool> stop_prefault_{false};
  std::atomic<uint64_t> prefaulted_{0};
  std::atomic<bool> prefault_over_{true};  // false while the prefault thread runs
  std::atomic<uint64_t> checksum_failures_{0};
  // Read() as part of a copy of `copy_bytes` in all (a batch), which decides
  // the kind of stores (RamTierOptions::streaming_copy_min_bytes).
  // `may_split`: not from inside a copy thread (ReadBatch's), whose pool
  // cannot be asked for more.
  Result<size_t> ReadAs(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                        uint64_t copy_bytes, bool may_split);
  // The copy threads copy `p` into `out` together, each piece verified in
  // the same pass against `marks` (Entry::marks) and the last against the
  // block's checksum. True when every piece matched.
  bool CopyShared(const Pin& p, std::span<const MutableFragment> out, const std::vector<Xxh3Mark>& marks,
                  bool stream);
  // One piece of CopyShared: unit `unit` of `p`, verified against its marks.
  bool CopyMarkedUnit(const Pin& p, std::span<const MutableFragment> out, const std::vector<Xxh3Mark>& marks,
                      size_t unit, CopyStores stores);
  // Whether a block of `bytes` may be copied as pieces (split_copy_min_bytes).
  bool Splittable(uint64_t bytes) const;
  // The one pass: copies `p` into `out`, verifying it (and recording the
  // states between pieces when `record`); a copy gone bad is dropped and
  // answered Corruption.
  Result<size_t> CopyVerified(Pin& p, NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                              bool stream, bool record);
  // ReadBatch over the copy threads: whole blocks (largest first), then the
  // 256 KiB pieces of blocks whose states are recorded, each verified as a
  // lone read's shared copy is.
  void ReadBatchShared(NamespaceId ns, std::span<const GetItem> items, std::span<Result<size_t>> results,
                       uint64_t asked);
  std::shared_ptr<const std::vector<Xxh3Mark>> MarksOf(const Pin& p);
  std::atomic<uint64_t> split_copies_{0};
  // Bytes that reads are copying into their destinations now (StreamsCopy),
  // and how many reads (a batch counts once) are (SharesCopy).
  std::atomic<uint64_t> copying_{0};
  std::atomic<uint32_t> reads_{0};
  struct Copying;

  std::unique_ptr<WorkerPool> copiers_;  // copy_threads - 1 helpers; null for one thread
};

// The default shared-memory file of a store: /dev/shm/kvtier-<store id>.ram.
inline constexpr std::string_view kRamTierShmDir = "/dev/shm";
std::string RamTierShmPath(const std::string& store_id_hex);
// The store id a name in kRamTierShmDir is the tier file of; empty when it
// is not one.
std::string RamTierStoreIdOf(std::string_view file_name);
// Beside it, the folder of the store that made it (/dev/shm/kvtier-<store
// id>.dir, the folder's absolute path): a tier whose folder is gone, or
// holds another store, is an orphan (Store::ListRamTierFiles).
std::string RamTierFolderNotePath(const std::string& store_id_hex);

}  // namespace kvtier

#endif  // KVTIER_SRC_TIER_RAM_TIER_H_
