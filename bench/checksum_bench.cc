// Payload checksum throughput per XXH3 implementation this CPU runs (every
// put and every get hashes each payload byte once), in cache and from
// memory. The limit it compares with is memcpy of the same bytes in the same
// run: a checksum slower than a copy is what a put's CPU time is made of.
//
//   checksum_bench [--benchmark_filter=2097152]
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "util/checksum.h"
#include "util/copy_checksum.h"

namespace kvtier {
namespace {

// 256 MiB: well past any cache, so the large sizes read from memory.
constexpr size_t kArena = 256u << 20;

uint8_t* Arena() {
  static std::vector<uint8_t> a = [] {
    std::vector<uint8_t> v(kArena);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 131 + 7);
    return v;
  }();
  return a.data();
}

// Walks the arena so that blocks >= 1 MiB come from memory, smaller ones
// from cache (the first block over and over).
template <typename Fn>
void Run(benchmark::State& state, Fn fn) {
  const size_t n = static_cast<size_t>(state.range(0));
  uint8_t* base = Arena();
  size_t at = 0;
  for (auto _ : state) {
    fn(base + at, n);
    if (n >= (1u << 20)) at = (at + n + n > kArena) ? 0 : at + n;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}

void BM_Memcpy(benchmark::State& state) {
  static std::vector<uint8_t> dst(64u << 20);
  Run(state, [](const uint8_t* p, size_t n) {
    std::memcpy(dst.data(), p, n);
    benchmark::DoNotOptimize(dst.data());
  });
}

void BM_Xxh3(benchmark::State& state, std::string isa) {
  state.SetLabel(isa);
  Run(state, [&](const uint8_t* p, size_t n) { benchmark::DoNotOptimize(Xxh3On(isa, p, n)); });
}

// A 2 MiB block made of 64 KiB RAM-tier chunks, hashed as a stream.
void BM_Xxh3StreamOfChunks(benchmark::State& state) {
  state.SetLabel(Xxh3Isa());
  Run(state, [](const uint8_t* p, size_t n) {
    Xxh3Stream s;
    for (size_t at = 0; at < n; at += 65536) s.Update(p + at, std::min<size_t>(65536, n - at));
    benchmark::DoNotOptimize(s.Digest());
  });
}

// A verified get's work: copy a block out and hash it. "CopyThenHash" is the
// RAM tier's way until now (64 KiB copied, then hashed back from the cache);
// "FusedCopyHash" hashes each stripe as it is copied (util/copy_checksum.h).
// Page-aligned, as an engine's buffers are (streaming stores need 32 bytes).
uint8_t* CopyDst() {
  static uint8_t* dst = [] {
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, 64u << 20));
    std::memset(p, 0, 64u << 20);
    return p;
  }();
  return dst;
}

void BM_CopyThenHash(benchmark::State& state) {
  state.SetLabel(Xxh3Isa());
  Run(state, [](const uint8_t* p, size_t n) {
    uint8_t* dst = CopyDst();
    Xxh3Stream s;
    for (size_t at = 0; at < n; at += 65536) {
      const size_t k = std::min<size_t>(65536, n - at);
      std::memcpy(dst + at, p + at, k);
      s.Update(dst + at, k);
    }
    benchmark::DoNotOptimize(s.Digest());
  });
}

void BM_FusedCopyHash(benchmark::State& state, std::string isa, CopyStores stores) {
  state.SetLabel(isa + (stores == CopyStores::kStreaming ? ", streaming stores" : ""));
  Run(state, [&](const uint8_t* p, size_t n) {
    uint8_t* dst = CopyDst();
    Xxh3Copy c(n, isa, stores);
    c.Copy(dst, p, n);
    benchmark::DoNotOptimize(c.Digest());
  });
}

const int kRegistered = [] {
  for (const int64_t n : {4096, 65536, 2 << 20, 32 << 20})
    benchmark::RegisterBenchmark("Memcpy", BM_Memcpy)->Arg(n);
  for (const std::string& isa : Xxh3Isas())
    benchmark::RegisterBenchmark(("Xxh3/" + isa).c_str(), BM_Xxh3, isa)
        ->Arg(4096)->Arg(65536)->Arg(2 << 20)->Arg(32 << 20);
  benchmark::RegisterBenchmark("Xxh3StreamOf64KiBChunks", BM_Xxh3StreamOfChunks)->Arg(2 << 20);
  benchmark::RegisterBenchmark("CopyThenHash", BM_CopyThenHash)->Arg(65536)->Arg(2 << 20)->Arg(32 << 20);
  for (const std::string& isa : Xxh3CopyIsas()) {
    benchmark::RegisterBenchmark(("FusedCopyHash/" + isa).c_str(), BM_FusedCopyHash, isa, CopyStores::kCached)
        ->Arg(65536)->Arg(2 << 20)->Arg(32 << 20);
    if (isa != "scalar")
      benchmark::RegisterBenchmark(("FusedCopyHashStreaming/" + isa).c_str(), BM_FusedCopyHash, isa,
                                   CopyStores::kStreaming)
          ->Arg(65536)->Arg(2 << 20)->Arg(32 << 20);
  }
  return 0;
}();

}  // namespace
}  // namespace kvtier

BENCHMARK_MAIN();
