// The steady-state workload (issue 21, item 2): a store at its byte budget
// with eviction running, as a cache spends its life. The store is filled to
// its capacity, then mixed traffic runs until at least 3x the capacity has
// been written: 70% gets (80% of them revisits of a hot set that fits, 20%
// of any block ever written, most of them evicted) and 30% puts of new
// blocks; a hot block that missed is put again, as an engine stores what it
// had to recompute. Reported per time window: throughput, get and put
// latency percentiles, and where gets were served (RAM, disk, miss); over
// the run: write amplification (device bytes and the store's own segment
// bytes per payload byte) and the goals. Every block read is verified; a
// block with wrong bytes fails the run. kvtier, kvtier-ram and
// file-per-block(-fsync) with a byte budget (LRU by mtime, as the engines'
// file tiers with a capacity limit); rocksdb-blob with the oldest writes
// deleted past the budget (what a TTL matched to it drops) and blob
// garbage collection.
#ifndef KVTIER_BENCH_HARNESS_STEADY_H_
#define KVTIER_BENCH_HARNESS_STEADY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/common.h"
#include "harness/report.h"

namespace kvbench {

// The sizes of a mixed-size run (--steady-sizes mix): a small model's
// blocks, a 70B model's cross-layer blocks, a 2 MiB block; each block id has
// one of them, drawn by a hash of the id.
inline const std::vector<uint64_t> kSteadyMixSizes = {64ull << 10, 512ull << 10, 2ull << 20};

struct SteadyConfig {
  uint64_t capacity_bytes = 0;   // the store's byte budget
  std::vector<uint64_t> sizes;   // one block size, or several for a mixed run
  double write_multiple = 3.0;   // bytes put, fill included, over the capacity
  uint32_t windows = 10;         // after the fill
  uint32_t queue_depth = 16;
  std::vector<std::string> designs;
  std::string dir;
  std::vector<std::string> kvtier_overrides;  // the run's --kvtier-option values
  // The fill writes the hot set first, in a few segments of its own, instead
  // of spread among the cold blocks as a cache's puts arrive. Flatters any
  // eviction that keeps whole segments (--steady-hot-first).
  bool hot_first = false;
};

// Runs the workload for each design; `progress` hears each step.
WorkloadResult RunSteadyState(const SteadyConfig& c, const Payloads& payloads,
                              const std::function<void(const std::string&)>& progress);

}  // namespace kvbench

#endif  // KVTIER_BENCH_HARNESS_STEADY_H_
