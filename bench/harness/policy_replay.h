// Replays the revisit trace against kvtier's RAM tier itself (src/tier),
// once per eviction policy, to compare their hit ratios on the same trace in
// the same run (issue 6 asks for the policy to be justified this way). The
// store does not let a caller pick the policy (Options has no field for it),
// so the replay drives kvtier::RamTier directly with the store's geometry and
// the store's calls: a put inserts, a get acquires, a miss is admitted after
// the (here skipped) disk read. No disk I/O; payloads are real bytes.
#ifndef KVTIER_BENCH_HARNESS_POLICY_REPLAY_H_
#define KVTIER_BENCH_HARNESS_POLICY_REPLAY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvbench {

struct ReplayResult {
  std::string policy;           // "s3-fifo" | "lru"
  uint64_t ram_bytes = 0;       // the tier's size
  uint64_t hits = 0, misses = 0;  // over the revisits (first visits excluded)
  uint64_t bytes_ram = 0, bytes_disk = 0;
  double hit_ratio() const { return hits + misses ? double(hits) / double(hits + misses) : 0; }
};

// `docs` holds each document's block ids, visited in order: round 0 puts
// every block, rounds 1..rounds-1 look each document's blocks up in turn.
// Keys come from MakeKey(1, id). Errors: the tier could not be mapped.
[[nodiscard]] kvtier::Result<std::vector<ReplayResult>> ReplayRevisitPolicies(
    const std::vector<std::vector<uint64_t>>& docs, uint64_t block_bytes, uint32_t rounds,
    uint64_t ram_bytes);

}  // namespace kvbench

#endif  // KVTIER_BENCH_HARNESS_POLICY_REPLAY_H_
