// The store designs compared by kvtier-bench, behind one interface:
//   kvtier               this project, default options (capacity raised to fit)
//   kvtier-ram           the same with its host RAM tier on (ram_tier_bytes;
//                        anonymous memory, so the run leaves nothing in /dev/shm)
//   file-per-block       vLLM's / SGLang's file tier: one file per block in
//                        hash-sharded folders, temp file + rename, O_DIRECT
//   file-per-block-fsync the same with fdatasync of the file and fsync of its
//                        folder (durable like a kvtier put)
//   rocksdb-blob         blocks as RocksDB values with enable_blob_files,
//                        WAL synced on every write
//
// Every design moves blocks with the same queue depth: kvtier through its
// async API with a window of requests in flight, the others with one thread
// per queue slot (they have no async API). A design object is used by one
// harness thread at a time.
#ifndef KVTIER_BENCH_HARNESS_DESIGNS_H_
#define KVTIER_BENCH_HARNESS_DESIGNS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/common.h"
#include "kvtier/status.h"

namespace kvbench {

using kvtier::Result;
using kvtier::Status;

struct DesignConfig {
  uint32_t queue_depth = 16;
  // kvtier keeps this many payload bytes of puts in flight (at least
  // queue_depth puts), as an engine offloading a prefill does.
  uint64_t put_inflight_bytes = 64ull << 20;
  // kvtier capacity (0: kvtier's default); the harness raises it to fit.
  uint64_t kvtier_capacity_bytes = 0;
  // kvtier-ram's Options::ram_tier_bytes (> 0 for that design).
  uint64_t kvtier_ram_bytes = 0;
  uint64_t key_seed = 1;
  // file-per-block(-fsync): keep at most this many payload bytes, evicting
  // the least recently used file (by mtime, which a hit refreshes), as the
  // engines' file tiers with a capacity limit do. rocksdb-blob: delete the
  // oldest writes past it (what a TTL would drop), blob garbage collection
  // on. 0: no limit.
  uint64_t file_byte_budget = 0;
  // Experiments only (--kvtier-option): overrides of kvtier Options as
  // "name=value" (read_threads, queue_depth, max_write_chunk_bytes,
  // group_commit_bytes, write_queue_bytes, segment_size_bytes).
  std::vector<std::string> kvtier_overrides;
};

// Checks one --kvtier-option; empty when fine, else the problem.
std::string CheckKvtierOverride(const std::string& kv);

// Bytes of kvtier's RAM tier a block of `block` bytes takes under these
// --kvtier-option values: whole chunks (docs/ram_tier.md).
uint64_t RamFootprint(uint64_t block, const std::vector<std::string>& overrides);

// Per-op results of a batch run.
struct RunStats {
  std::vector<double> lat_us;  // one per op
  uint64_t bad = 0;            // failed or did not verify
  uint64_t misses = 0;         // NotFound (also counted in bad)
  std::vector<uint64_t> missed_ids;  // which ids were NotFound (every design)
  std::string first_error;
};

// Reads served by each tier (kvtier Stats: hits_ram/hits_disk,
// bytes_read_ram/bytes_read_disk).
struct TierCounts {
  uint64_t hits_ram = 0, hits_disk = 0, bytes_ram = 0, bytes_disk = 0;
  uint64_t ram_evictions = 0;
  // kvtier: its own segment bytes written / payload bytes put (Stats::
  // write_amplification), without its RocksDB index; 0 when unknown.
  double segment_write_amp = 0;
  // kvtier: what reclaim rewrote, and the index's tables and the bytes its
  // flushes and compactions wrote since open.
  uint64_t reinserted_bytes = 0, index_sst_bytes = 0, index_written_bytes = 0, index_memtable_bytes = 0;
  bool lookup_map_ready = false;  // kvtier: lookups answer from its in-memory map
};

class Design {
 public:
  virtual ~Design() = default;
  virtual const char* name() const = 0;
  // Opens (creating if needed) the design's store in `dir`.
  [[nodiscard]] virtual Status Open(const std::string& dir) = 0;
  // Clean shutdown.
  [[nodiscard]] virtual Status Close() = 0;
  // Allocates and touches the I/O buffers that Put/Get of `block_bytes`
  // blocks use (one per queue slot; kept across calls), so timed calls do not
  // pay first-touch page faults, which are expensive on the test VM (as an
  // engine's buffers, they exist before the I/O). Put/Get do it themselves
  // when it was not done.
  virtual void Prepare(size_t block_bytes) = 0;
  // Writes blocks `ids` (contents from `payloads`), each `size` bytes, durably
  // for the designs that promise it. Returns when all are acknowledged.
  virtual RunStats Put(const std::vector<uint64_t>& ids, size_t size, const Payloads& payloads) = 0;
  // Reads blocks `ids` and verifies each against `payloads`.
  virtual RunStats Get(const std::vector<uint64_t>& ids, size_t size, const Payloads& payloads) = 0;
  // Reads blocks `ids` in calls of `batch` keys each, from queue-depth threads
  // (an engine loading a prefix); latencies are per call. Designs with no
  // batch read serve a batch key by key, as their Get does (SGLang's file
  // backend's batch_get reads its files one after another).
  virtual RunStats GetBatches(const std::vector<uint64_t>& ids, size_t size, const Payloads& payloads,
                              uint32_t batch) {
    (void)batch;
    return Get(ids, size, payloads);
  }
  // How many leading keys are stored (an engine's prefix match); keys come
  // from MakeKey(config.key_seed, id). NotSupported where the design has no
  // existence check short of reading the value.
  [[nodiscard]] virtual Result<size_t> LookupPrefix(const std::vector<std::string>& keys) = 0;
  // Reads served per tier since Open; false where the design does not know.
  virtual bool TierCounters(TierCounts* out) {
    *out = TierCounts{};
    return false;
  }
};

// Known names: "kvtier", "kvtier-ram", "file-per-block", "file-per-block-fsync",
// "rocksdb-blob".
std::unique_ptr<Design> MakeDesign(const std::string& name, const DesignConfig& config);
const std::vector<std::string>& AllDesignNames();

// Drops the page cache of every file under `dir` (or of the file `dir`) with
// posix_fadvise DONTNEED, so reads that follow come from disk.
void DropPageCache(const std::string& dir);

}  // namespace kvbench

#endif  // KVTIER_BENCH_HARNESS_DESIGNS_H_
