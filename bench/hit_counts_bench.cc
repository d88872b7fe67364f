// The read counts kept for hot-block reinsertion (log/hit_counts.h): what a
// record read costs in memory and time, at the scale of 10M 4 KiB blocks.
//
//   hit_counts_bench [--benchmark_filter=FirstReads]
// "bytes_per_record" is the tables' own size over the records read; resident
// memory adds the allocator's rounding. Segments of 256 MiB hold 64,407
// dense 4 KiB records (4,168 bytes each, the store's default layout).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>

#include "log/hit_counts.h"

namespace kvtier {
namespace {

constexpr uint64_t kRecordBytes = 4168;
constexpr uint64_t kPerSegment = (256ull << 20) / kRecordBytes;

void Note(HitCounts* h, uint64_t record) {
  h->Note(static_cast<uint32_t>(record / kPerSegment), record % kPerSegment * kRecordBytes, 8192);
}

// Every record read once, as a fill followed by one pass of gets leaves them.
void BM_FirstReads(benchmark::State& state) {
  const uint64_t n = static_cast<uint64_t>(state.range(0));
  size_t bytes = 0;
  for (auto _ : state) {
    HitCounts h(2);
    for (uint64_t r = 0; r < n; ++r) Note(&h, r);
    bytes = h.MemoryBytes();
  }
  state.counters["bytes_per_record"] = static_cast<double>(bytes) / static_cast<double>(n);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_FirstReads)->Arg(10'000'000)->Unit(benchmark::kMillisecond)->Iterations(1);

// Reads of records already counted, from several get threads at once.
HitCounts* Filled() {
  static HitCounts* h = [] {
    auto* c = new HitCounts(2);
    for (uint64_t r = 0; r < 10'000'000; ++r) Note(c, r);
    return c;
  }();
  return h;
}

void BM_RepeatReads(benchmark::State& state) {
  HitCounts* h = Filled();
  std::mt19937_64 g(static_cast<uint64_t>(state.thread_index()) + 1);
  for (auto _ : state) Note(h, g() % 10'000'000);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_RepeatReads)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace
}  // namespace kvtier

BENCHMARK_MAIN();
