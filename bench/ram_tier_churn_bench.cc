// The RAM tier's chunk size against churn: how many pieces a 2 MiB block is
// copied in once blocks of other sizes have come and gone, and what that
// costs a verified read. Each piece is one copy on the host and one
// cudaMemcpy on the GPU path, so smaller chunks (Options::ram_tier_chunk_bytes,
// for small blocks) cost large blocks more pieces once freed chunks scatter.
//
//   ram_tier_churn_bench [--benchmark_filter=Churn]
// Args: chunk KiB, and whether the churn mixes sizes (64 KiB, 512 KiB and
// 2 MiB blocks) or puts 2 MiB blocks only. The tier is 1 GiB; 16,384 blocks
// pass through it, then 256 blocks of 2 MiB are inserted and read back.
// x_copy_limit is the reads' rate over the best copy of 256 other 2 MiB
// blocks that this CPU does (every kernel of bench/harness/copy_limit.h,
// three passes each, before and after the reads), in the same run on the
// same thread; a read is such a copy, verified in the same pass.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "harness/copy_limit.h"
#include "tier/ram_tier.h"
#include "util/checksum.h"

namespace kvtier {
namespace {

constexpr NamespaceId kNs = 7;
constexpr uint64_t kTier = 1ull << 30;
constexpr uint64_t kBlock = 2ull << 20;

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

// Bytes per second of the best copy kernel's best of three passes over 256
// blocks of 2 MiB laid end to end, into the reads' 2 MiB buffer: the copy a
// read cannot beat.
double CopyLimit(uint8_t* dst) {
  constexpr int kBlocks = 256;
  std::vector<uint8_t> from(kBlocks * kBlock, 0x3c);
  double best = 0;
  for (const kvbench::CopyKernel& k : kvbench::CopyKernels()) {
    for (int pass = 0; pass < 3; ++pass) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kBlocks; ++i) k.copy(dst, from.data() + i * kBlock, kBlock);
      benchmark::DoNotOptimize(dst);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, static_cast<double>(kBlocks * kBlock) / s);
    }
  }
  return best;
}

void BM_Churn(benchmark::State& state) {
  const uint32_t chunk = static_cast<uint32_t>(state.range(0)) << 10;
  const bool mixed = state.range(1) != 0;
  RamTierOptions o;
  o.capacity_bytes = kTier;
  o.chunk_bytes = chunk;
  o.prefault = false;
  auto tier = RamTier::Open(o);
  if (!tier.ok()) {
    state.SkipWithError(tier.status().ToString().c_str());
    return;
  }
  std::vector<uint8_t> src(kBlock, 0x5a), dst(kBlock);
  const uint64_t sum = Xxh3(src.data(), kBlock);
  const uint64_t sizes[3] = {64u << 10, 512u << 10, kBlock};
  for (uint64_t i = 0; i < 16384; ++i) {
    const uint64_t len = mixed ? sizes[Mix(i) % 3] : kBlock;
    const std::string key = "churn" + std::to_string(i);
    const Fragment f{src.data(), len};
    (*tier)->Insert(kNs, key, {&f, 1}, Xxh3(src.data(), len));
  }
  std::vector<std::string> keys;
  const Fragment f{src.data(), kBlock};
  for (int i = 0; i < 256; ++i) {
    keys.push_back("probe" + std::to_string(i));
    (*tier)->Insert(kNs, keys.back(), {&f, 1}, sum);
  }
  uint64_t pieces = 0, blocks = 0;
  for (const std::string& k : keys) {
    RamTier::Pin p = (*tier)->Peek(kNs, k);
    if (!p) continue;
    pieces += p.pieces().size();
    ++blocks;
  }
  const MutableFragment out{dst.data(), kBlock};
  size_t at = 0;
  const double limit_before = CopyLimit(dst.data());
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    auto r = (*tier)->Read(kNs, keys[at++ % keys.size()], {&out, 1});
    if (!r.ok() && !r.status().IsNotFound()) state.SkipWithError(r.status().ToString().c_str());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Swept on either side of the reads: this VM's memory bandwidth drifts.
  const double limit = std::max(limit_before, CopyLimit(dst.data()));
  state.counters["x_copy_limit"] = secs > 0 && limit > 0 ? static_cast<double>(state.iterations() * kBlock) / secs / limit : 0;
  state.counters["pieces_per_2MiB_block"] = blocks ? static_cast<double>(pieces) / static_cast<double>(blocks) : 0;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBlock));
}
BENCHMARK(BM_Churn)->ArgsProduct({{4, 64}, {0, 1}})->ArgNames({"chunk_kib", "mixed"})->MinTime(1.0);

}  // namespace
}  // namespace kvtier

BENCHMARK_MAIN();
