// What the service pays to read a put's payload out of a client
// (wire::PeerMemory, process_vm_readv) against memcpy of the same bytes in
// the same run, from private memory on 4 KiB pages and on transparent huge
// pages. The kernel pins each page it reads: on 4 KiB pages that costs more
// than the copy itself, which is why the service spends more CPU per put it
// reads than per put it copies out of staging (docs/benchmarks.md).
//
//   peer_read_bench [--benchmark_filter=Huge]
#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "kvtier/store.h"
#include "wire/peer_memory.h"

namespace kvtier {
namespace {

constexpr size_t kBlock = 2u << 20;
constexpr size_t kBlocks = 64;  // 128 MiB of sources: past the caches

// kBlocks source blocks, 2 MiB-aligned, on huge pages or never.
uint8_t* Sources(bool huge) {
  const size_t bytes = kBlock * kBlocks;
  void* raw = mmap(nullptr, bytes + kBlock, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) std::abort();
  auto* p = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + kBlock - 1) & ~uintptr_t{kBlock - 1});
  (void)madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(i * 131 + 7);
  return p;
}

template <typename Fn>
void Run(benchmark::State& state, Fn fn) {
  const bool huge = state.range(0) != 0;
  static uint8_t* sources[2] = {nullptr, nullptr};
  if (sources[huge] == nullptr) sources[huge] = Sources(huge);
  void* dst = std::aligned_alloc(4096, kBlock);
  std::memset(dst, 0, kBlock);
  size_t at = 0;
  for (auto _ : state) {
    fn(static_cast<uint8_t*>(dst), sources[huge] + at * kBlock);
    at = (at + 1) % kBlocks;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBlock));
  state.SetLabel(huge ? "transparent huge pages" : "4 KiB pages");
  std::free(dst);
}

void BM_Memcpy(benchmark::State& state) {
  Run(state, [](uint8_t* dst, const uint8_t* src) {
    std::memcpy(dst, src, kBlock);
    benchmark::DoNotOptimize(dst);
  });
}

void BM_PeerRead(benchmark::State& state) {
  static const std::string probe = "peer-read-bench!";
  auto pm = wire::PeerMemory::Open(::getpid(), reinterpret_cast<uintptr_t>(probe.data()), probe);
  if (!pm.ok()) {
    state.SkipWithError(pm.status().ToString().c_str());
    return;
  }
  Run(state, [&](uint8_t* dst, const uint8_t* src) {
    const Fragment from{src, kBlock};
    const MutableFragment to{dst, kBlock};
    if (!(*pm)->Read({&from, 1}, {&to, 1}).ok()) std::abort();
  });
}

BENCHMARK(BM_Memcpy)->Arg(0)->Arg(1);
BENCHMARK(BM_PeerRead)->Arg(0)->Arg(1);

}  // namespace
}  // namespace kvtier

BENCHMARK_MAIN();
