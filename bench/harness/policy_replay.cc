#include "harness/policy_replay.h"

#include <memory>

#include "harness/common.h"
#include "tier/eviction.h"
#include "tier/ram_tier.h"

namespace kvbench {

kvtier::Result<std::vector<ReplayResult>> ReplayRevisitPolicies(
    const std::vector<std::vector<uint64_t>>& docs, uint64_t block_bytes, uint32_t rounds,
    uint64_t ram_bytes) {
  // Contents do not matter to a policy; one buffer stands in for every block
  // (the copies in and their cost are still real).
  AlignedBuf block(block_bytes);
  for (size_t i = 0; i < block_bytes; ++i) block.data()[i] = static_cast<uint8_t>(i * 131);
  const kvtier::Fragment frag{block.data(), block_bytes};
  std::vector<ReplayResult> out;
  for (kvtier::RamPolicy p : {kvtier::RamPolicy::kS3Fifo, kvtier::RamPolicy::kLru}) {
    kvtier::RamTierOptions o;
    o.capacity_bytes = ram_bytes;  // the store's geometry: default chunks and shards
    o.policy = p;
    auto t = kvtier::RamTier::Open(o);
    if (!t.ok()) return t.status().WithContext("policy replay: RAM tier of " + HumanBytes(ram_bytes));
    kvtier::RamTier& tier = **t;
    constexpr kvtier::NamespaceId kNs = 1;
    ReplayResult r;
    r.policy = p == kvtier::RamPolicy::kLru ? "lru" : "s3-fifo";
    r.ram_bytes = ram_bytes;
    for (const auto& doc : docs)
      for (uint64_t id : doc) tier.Insert(kNs, MakeKey(1, id), {&frag, 1}, /*checksum=*/0);
    for (uint32_t round = 1; round < rounds; ++round)
      for (const auto& doc : docs)
        for (uint64_t id : doc) {
          const std::string key = MakeKey(1, id);
          if (tier.Acquire(kNs, key)) {
            ++r.hits;
            r.bytes_ram += block_bytes;
          } else {
            ++r.misses;
            r.bytes_disk += block_bytes;
            tier.Insert(kNs, key, {&frag, 1}, 0, /*only_if_absent=*/true);
          }
        }
    out.push_back(r);
  }
  return out;
}

}  // namespace kvbench
