// Index lookup throughput: batched MultiGet over 1M stored keys, the way the
// store's prefix lookups use it (one namespace, 32-byte hash keys).
//
//   index_bench [--benchmark_filter=MultiGet]
// KVTIER_BENCH_DIR picks the folder for the temporary index (default: the
// system temp folder); it is removed at exit.
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "index/index.h"

namespace kvtier {
namespace {

constexpr size_t kKeys = 1'000'000;
constexpr size_t kKeyBytes = 32;
constexpr NamespaceId kNs = 0x5eed5eed5eed5eedull;

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Fills `out` with n random 32-byte keys (like the sha256 block hashes
// engines use), back to back.
void MakeKeys(uint64_t seed, size_t n, std::string* out) {
  out->resize(n * kKeyBytes);
  for (size_t i = 0; i < out->size(); i += 8) {
    const uint64_t r = SplitMix64(&seed);
    for (int b = 0; b < 8; ++b) (*out)[i + b] = static_cast<char>(r >> (8 * b));
  }
}

// One index with kKeys entries, built on first use and shared by every
// benchmark; removed at exit.
struct Loaded {
  std::string dir;
  std::unique_ptr<Index> index;
  std::string present;  // kKeys keys, stored
  std::string absent;   // kKeys keys, never stored

  Loaded() {
    const char* base = std::getenv("KVTIER_BENCH_DIR");
    std::string tmpl = (std::filesystem::path(base ? base : std::filesystem::temp_directory_path().c_str()) /
                        "kvtier_index_bench.XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp " + tmpl);
    dir = tmpl;
    auto r = Index::Open(dir + "/index", {});
    if (!r.ok()) Die(r.status().ToString());
    index = std::move(r).value();

    MakeKeys(1, kKeys, &present);
    MakeKeys(2, kKeys, &absent);
    constexpr size_t kCommit = 1000;
    for (size_t i = 0; i < kKeys; i += kCommit) {
      IndexBatch b;
      for (size_t j = i; j < std::min(kKeys, i + kCommit); ++j) {
        format::IndexValue v;
        v.segment = static_cast<uint32_t>(j / 8192);
        v.offset = 4096 + 4096 * (j % 8192);
        v.payload_len = 2 << 20;
        v.payload_checksum = 0xabcdef0123456789ull * (j + 1);
        v.sequence = j + 1;
        v.written_unix_ms = 1700000000000ull + j;
        v.key_len = kKeyBytes;
        b.Put(kNs, Key(present, j), v);
      }
      Check(index->Commit(b, /*sync=*/false));
    }
    // Lookups then go to SST files (bloom filters, block cache), the steady
    // state of a long-running store, rather than to the memtable.
    Check(index->FlushMemtables());
  }
  ~Loaded() {
    index.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  static std::string_view Key(const std::string& keys, size_t i) {
    return std::string_view(keys).substr(i * kKeyBytes, kKeyBytes);
  }
  static void Check(const Status& s) {
    if (!s.ok()) Die(s.ToString());
  }
  [[noreturn]] static void Die(const std::string& m) {
    std::fprintf(stderr, "index_bench: %s\n", m.c_str());
    std::exit(1);
  }
};

Loaded& Data() {
  static Loaded loaded;
  return loaded;
}

// Batches of random keys; hit_percent of them stored.
void RunMultiGet(benchmark::State& state, int hit_percent) {
  Loaded& d = Data();
  const size_t batch = static_cast<size_t>(state.range(0));
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<size_t> pick(0, kKeys - 1);
  std::uniform_int_distribution<int> percent(0, 99);
  // Precomputed query batches so the timed loop measures the index only.
  constexpr size_t kQueries = 1 << 18;
  std::vector<std::string_view> queries(kQueries);
  size_t expected_hits = 0;
  for (auto& q : queries) {
    const bool hit = percent(rng) < hit_percent;
    expected_hits += hit;
    q = Loaded::Key(hit ? d.present : d.absent, pick(rng));
  }
  std::vector<std::optional<format::IndexValue>> out;
  size_t pos = 0, hits = 0, looked_up = 0;
  for (auto _ : state) {
    if (pos + batch > kQueries) pos = 0;
    Status s = d.index->MultiGet(kNs, std::span(queries).subspan(pos, batch), &out);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    for (const auto& o : out) hits += o.has_value();
    looked_up += batch;
    pos += batch;
  }
  state.SetItemsProcessed(static_cast<int64_t>(looked_up));
  state.counters["hit_ratio"] = looked_up ? static_cast<double>(hits) / looked_up : 0;
  benchmark::DoNotOptimize(expected_hits);
}

void BM_MultiGetHits(benchmark::State& state) { RunMultiGet(state, 100); }
void BM_MultiGetHalfMiss(benchmark::State& state) { RunMultiGet(state, 50); }
BENCHMARK(BM_MultiGetHits)->Arg(64)->Arg(1024)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MultiGetHalfMiss)->Arg(64)->Arg(1024)->Unit(benchmark::kMicrosecond);

// Reference point: one Get per key.
void BM_GetHits(benchmark::State& state) {
  Loaded& d = Data();
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<size_t> pick(0, kKeys - 1);
  size_t n = 0;
  for (auto _ : state) {
    auto r = d.index->Get(kNs, Loaded::Key(d.present, pick(rng)));
    if (!r.ok() || !r->has_value()) {
      state.SkipWithError("lookup failed");
      break;
    }
    ++n;
  }
  state.SetItemsProcessed(static_cast<int64_t>(n));
}
BENCHMARK(BM_GetHits)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvtier

BENCHMARK_MAIN();
