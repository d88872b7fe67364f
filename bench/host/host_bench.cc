// kvtier-host-bench (`kvtier bench --host`): the host load path (issue 20).
// An engine that loads into its own pinned host memory (vLLM's CPU tier,
// SGLang's host pool, LMCache's L1) calls GetBatch with RAM-tier hits; this
// measures that call against the host's best memcpy of the same run.
//
//   limit      the best memcpy rate over 1..N threads (N: the cores), block
//              pieces from a source larger than the caches into a batch-sized
//              destination, as a load does (with --destinations D, each
//              batch into the next of D such destinations, both here and in
//              get_batch: a destination the caches no longer hold, as an
//              engine's buffer is once the GPU has read it)
//   get_batch  one caller thread, GetBatch of `batch` RAM-tier hits, checksums
//              verified (the default), at each block size
//   parts      what a get costs apart: one thread's memcpy, one thread's
//              XXH3, and GetBatch with verification off (a diagnostic only:
//              checksums stay on in every real configuration)
//
// Prints a table, or JSON with --json; each figure carries its ratio to the
// limit. Says what it ran on.
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <xxhash.h>

#include "harness/common.h"
#include "harness/copy_limit.h"
#include "kvtier/store.h"

namespace {

using kvbench::AlignedBuf;
using kvbench::SecondsSince;
using kvbench::SteadyClock;
using kvtier::NamespaceId;
using kvtier::Store;

struct Args {
  std::string dir = "./kvtier-host-bench";
  std::vector<size_t> blocks = {256 << 10, 2 << 20, 16 << 20};
  size_t batch_bytes = 64 << 20;    // one GetBatch moves this much (32 x 2 MiB)
  size_t working_set = 1ull << 30;  // held by the RAM tier, larger than the caches
  double seconds = 2.0;
  int max_threads = 0;  // 0: the cores
  int copy_threads = -1;  // Options::ram_copy_threads; -1: the default
  int64_t stream_min_kib = -1;  // Options::ram_streaming_copy_min_bytes in KiB; -1: the default
  int64_t split_min_kib = -1;   // Options::ram_split_copy_min_bytes in KiB; -1: the default
  uint32_t copy_spin_us = 0;    // Options::ram_copy_spin_us
  bool shared_memory = false;  // the tier in /dev/shm, as a store that survives restarts keeps it
  size_t destinations = 1;     // batch-sized destinations each batch rotates over
  double gap_ms = 0;           // idle time between GetBatch calls (not timed), as between an engine's loads
  bool json = false;
};

[[noreturn]] void Usage() {
  std::fprintf(stderr,
               "usage: kvtier-host-bench [--dir D] [--block-kib K,K,...] [--batch-mib M] [--working-set-mib W]\n"
               "                         [--seconds S] [--max-threads N] [--copy-threads N] [--stream-min-kib K]\n"
               "                         [--split-min-kib K] [--copy-spin-us N]\n"
               "                         [--shared-memory] [--destinations D] [--gap-ms G]\n"
               "                         [--json]\n");
  std::exit(2);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage();
      return argv[++i];
    };
    try {
      if (k == "--dir") a.dir = next();
      else if (k == "--block-kib") {
        a.blocks.clear();
        std::string v = next();
        for (size_t p = 0; p < v.size();) {
          size_t q = v.find(',', p);
          if (q == std::string::npos) q = v.size();
          a.blocks.push_back(std::stoul(v.substr(p, q - p)) << 10);
          p = q + 1;
        }
      } else if (k == "--batch-mib") a.batch_bytes = std::stoul(next()) << 20;
      else if (k == "--working-set-mib") a.working_set = std::stoull(next()) << 20;
      else if (k == "--seconds") a.seconds = std::stod(next());
      else if (k == "--max-threads") a.max_threads = std::stoi(next());
      else if (k == "--copy-threads") a.copy_threads = std::stoi(next());
      else if (k == "--stream-min-kib") a.stream_min_kib = std::stoll(next());
      else if (k == "--split-min-kib") a.split_min_kib = std::stoll(next());
      else if (k == "--copy-spin-us") a.copy_spin_us = static_cast<uint32_t>(std::stoul(next()));
      else if (k == "--shared-memory") a.shared_memory = true;
      else if (k == "--destinations") a.destinations = std::stoul(next());
      else if (k == "--gap-ms") a.gap_ms = std::stod(next());
      else if (k == "--json") a.json = true;
      else Usage();
    } catch (const std::exception&) {
      std::fprintf(stderr, "kvtier-host-bench: bad value for %s\n", k.c_str());
      Usage();
    }
  }
  if (a.gap_ms < 0 || a.gap_ms > 1000) {
    std::fprintf(stderr, "kvtier-host-bench: --gap-ms must be 0 to 1000\n");
    std::exit(2);
  }
  if (a.destinations == 0 || a.destinations > 64) {
    std::fprintf(stderr, "kvtier-host-bench: --destinations must be 1 to 64\n");
    std::exit(2);
  }
  for (size_t b : a.blocks)
    if (b == 0 || b > a.batch_bytes || b > a.working_set) {
      std::fprintf(stderr, "kvtier-host-bench: each block must be > 0 and fit the batch and the working set\n");
      std::exit(2);
    }
  if (a.max_threads <= 0) a.max_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return a;
}

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// Runs `work(thread, rng)` on `threads` threads for `seconds`; each call
// returns the bytes it moved. Returns GB/s.
template <typename Work>
double Rate(int threads, double seconds, Work work) {
  std::atomic<uint64_t> bytes{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  const auto t0 = SteadyClock::now();
  for (int i = 0; i < threads; ++i)
    ts.emplace_back([&, i] {
      std::mt19937_64 rng(i + 1);
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) n += work(i, rng);
      bytes += n;
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : ts) t.join();
  return bytes.load() / SecondsSince(t0) / 1e9;
}

struct Limit {
  double gbps = 0;
  int threads = 0;
  std::string kernel;  // the copy kernel that won (harness/copy_limit.h)
  double one_thread = 0;
};

// The best copy of the same work as a GetBatch, over `kernels`
// (harness/copy_limit.h) and 1..N threads: one batch-sized
// destination (an engine's buffer) filled with block pieces from random
// places of `source`, its blocks dealt out over the threads. One shared
// destination, not one per thread: on a host whose last-level cache holds a
// batch, per-thread destinations would not fit it where the get's does, and
// the limit would sit below what the get reaches.
Limit BestCopy(const Args& a, const AlignedBuf& source, size_t block, const std::vector<kvbench::CopyKernel>& kernels) {
  const size_t nsrc = source.size() / block, per_batch = a.batch_bytes / block;
  AlignedBuf dst(a.destinations * per_batch * block);
  std::memset(dst.data(), 0, dst.size());
  Limit l;
  std::vector<int> counts;
  for (int t = 1; t < a.max_threads; t *= 2) counts.push_back(t);
  counts.push_back(a.max_threads);
  for (const kvbench::CopyKernel& k : kernels) {
    for (int t : counts) {
      std::vector<size_t> batches(static_cast<size_t>(t));  // each thread's, to pick its destination
      double g = Rate(t, a.seconds / 2, [&](int i, std::mt19937_64& rng) {
        uint8_t* out = dst.data() + (batches[i]++ % a.destinations) * per_batch * block;
        size_t bytes = 0;
        for (size_t b = static_cast<size_t>(i); b < per_batch; b += static_cast<size_t>(t)) {
          k.copy(out + b * block, source.data() + (rng() % nsrc) * block, block);
          bytes += block;
        }
        return bytes;
      });
      if (t == 1 && k.copy == kernels.front().copy) l.one_thread = g;
      if (g > l.gbps) l.gbps = g, l.threads = t, l.kernel = k.name;
    }
  }
  return l;
}

double Xxh3Rate(const Args& a, const AlignedBuf& source, size_t block) {
  const size_t nsrc = source.size() / block;
  volatile uint64_t sink = 0;
  return Rate(1, a.seconds / 2, [&](int, std::mt19937_64& rng) {
    sink = sink + XXH3_64bits(source.data() + (rng() % nsrc) * block, block);
    return block;
  });
}

std::unique_ptr<Store> OpenStore(const Args& a, const std::string& dir, bool verify) {
  kvtier::Options o;
  // Room for the working set however its blocks fall into the tier's
  // shards (each holds 1/16 of the tier).
  const size_t largest = *std::max_element(a.blocks.begin(), a.blocks.end());
  o.ram_tier_bytes = 2 * a.working_set + 64 * largest + (64ull << 20);
  o.ram_tier_shared_memory = a.shared_memory;
  o.capacity_bytes = 2 * a.working_set + (1ull << 30);
  o.verify_ram_hits = verify;
  if (a.copy_threads >= 0) o.ram_copy_threads = static_cast<uint32_t>(a.copy_threads);
  if (a.stream_min_kib >= 0) o.ram_streaming_copy_min_bytes = static_cast<uint64_t>(a.stream_min_kib) << 10;
  if (a.split_min_kib >= 0) o.ram_split_copy_min_bytes = static_cast<uint64_t>(a.split_min_kib) << 10;
  o.ram_copy_spin_us = a.copy_spin_us;
  auto s = Store::Open(dir, o);
  if (!s.ok()) {
    std::fprintf(stderr, "kvtier-host-bench: open %s: %s\n", dir.c_str(), s.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(s).value();
}

// GetBatch of `batch` random RAM-tier hits, from one caller thread.
double GetBatchRate(const Args& a, Store* store, NamespaceId ns, size_t block, size_t nblocks) {
  const size_t per_batch = a.batch_bytes / block;
  AlignedBuf dst(a.destinations * per_batch * block);
  std::memset(dst.data(), 0, dst.size());
  size_t batches = 0;
  std::vector<std::string> keys(per_batch);
  std::vector<kvtier::MutableFragment> frags(per_batch);
  std::vector<kvtier::GetItem> items(per_batch);
  uint64_t bad = 0;
  const kvtier::Stats before = store->GetStats();
  double busy = 0;  // seconds inside GetBatch
  auto one = [&](std::mt19937_64& rng) {
    uint8_t* out = dst.data() + (batches++ % a.destinations) * per_batch * block;
    for (size_t b = 0; b < per_batch; ++b) {
      keys[b] = kvbench::MakeKey(block, rng() % nblocks);
      frags[b] = {out + b * block, block};
      items[b] = {keys[b], {&frags[b], 1}};
    }
    const auto t0 = SteadyClock::now();
    auto r = store->GetBatch(ns, items);
    busy += SecondsSince(t0);
    for (const auto& x : r) bad += !x.ok() || *x != block;
    return per_batch * block;
  };
  double g = 0;
  if (a.gap_ms <= 0) {
    g = Rate(1, a.seconds, [&](int, std::mt19937_64& rng) { return one(rng); });
  } else {
    // Only the calls are timed; between them the store's threads go idle.
    std::mt19937_64 rng(1);
    uint64_t bytes = 0;
    const auto t0 = SteadyClock::now();
    while (SecondsSince(t0) < a.seconds) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(a.gap_ms));
      bytes += one(rng);
    }
    g = bytes / busy / 1e9;
  }
  const kvtier::Stats after = store->GetStats();
  bad += (after.hits_disk - before.hits_disk) + (after.misses - before.misses);
  if (bad != 0) {
    std::fprintf(stderr, "kvtier-host-bench: %llu gets were not RAM hits of the right size\n",
                 static_cast<unsigned long long>(bad));
    std::exit(1);
  }
  return g;
}

struct Row {
  size_t block;
  Limit limit;
  Limit verified;  // the same copies, each also hashed in one pass: what verification leaves
  double get_batch = 0, get_batch_noverify = 0, xxh3 = 0;
};

void Fill(Store* store, NamespaceId ns, size_t block, size_t n, const AlignedBuf& source) {
  for (size_t i = 0; i < n; ++i) {
    const std::string k = kvbench::MakeKey(block, i);
    if (!store->Put(ns, k, source.data() + i * block, block).ok()) {
      std::fprintf(stderr, "kvtier-host-bench: fill failed\n");
      std::exit(1);
    }
  }
  if (!store->Flush().ok()) std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  Args a = Parse(argc, argv);
  std::string cmd = "rm -rf '" + a.dir + "' && mkdir -p '" + a.dir + "'";
  if (std::system(cmd.c_str()) != 0) return 1;
  AlignedBuf source(a.working_set);
  {
    std::mt19937_64 r(5);
    for (size_t i = 0; i + 8 <= source.size(); i += 8) {
      uint64_t x = r();
      std::memcpy(source.data() + i, &x, 8);
    }
  }
  kvtier::NamespaceSpec spec;
  spec.model_id = "bench/host";
  spec.dtype = "bf16";
  std::vector<Row> rows;
  for (int verify = 1; verify >= 0; --verify) {
    const std::string dir = a.dir + (verify ? "/verify" : "/noverify");
    auto store = OpenStore(a, dir, verify != 0);
    for (size_t bi = 0; bi < a.blocks.size(); ++bi) {
      const size_t block = a.blocks[bi], n = a.working_set / block;
      // A namespace per size, removed after it: the tier holds one size at a time.
      spec.layout = "blocks of " + std::to_string(block);
      const NamespaceId ns = store->RegisterNamespace(spec).value();
      if (!a.json) std::fprintf(stderr, "host bench: %s, %zu KiB blocks: filling %zu\n",
                                verify ? "verified" : "unverified", block >> 10, n);
      Fill(store.get(), ns, block, n, source);
      if (verify) {
        Row r;
        r.block = block;
        if (!a.json)
          std::fprintf(stderr, "host bench: copy limit (%zu kernels and %zu verifying ones, 1..%d threads)\n",
                       kvbench::CopyKernels().size(), kvbench::VerifiedCopyKernels().size(), a.max_threads);
        r.limit = BestCopy(a, source, block, kvbench::CopyKernels());
        r.verified = BestCopy(a, source, block, kvbench::VerifiedCopyKernels());
        r.xxh3 = Xxh3Rate(a, source, block);
        r.get_batch = GetBatchRate(a, store.get(), ns, block, n);
        rows.push_back(r);
      } else {
        rows[bi].get_batch_noverify = GetBatchRate(a, store.get(), ns, block, n);
      }
      if (!store->RemoveNamespace(ns).ok()) std::exit(1);
    }
    (void)store->Close();
    store.reset();
    (void)Store::Destroy(dir);  // with --shared-memory its tier would outlive the folder
  }
  struct utsname u {};
  uname(&u);
  const std::string machine = CpuModel() + ", " + std::to_string(std::thread::hardware_concurrency()) + " cores, " +
                              u.release;
  if (a.json) {
    std::printf("{\"bench\": \"host\", \"machine\": \"%s\", \"batch_bytes\": %zu, \"working_set_bytes\": %zu, "
                "\"destinations\": %zu, \"gap_ms\": %.1f, \"rows\": [\n",
                machine.c_str(), a.batch_bytes, a.working_set, a.destinations, a.gap_ms);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf("  {\"block_bytes\": %zu, \"memcpy_best_gbps\": %.3f, \"memcpy_best_threads\": %d, "
                  "\"memcpy_best_kernel\": \"%s\", "
                  "\"memcpy_1thread_gbps\": %.3f, \"xxh3_1thread_gbps\": %.3f, \"get_batch_gbps\": %.3f, "
                  "\"get_batch_ratio\": %.3f, \"get_batch_unverified_gbps\": %.3f, "
                  "\"verified_copy_best_gbps\": %.3f, \"verified_copy_best_kernel\": \"%s\", "
                  "\"verified_copy_best_threads\": %d, \"get_batch_x_verified_best\": %.3f}%s\n",
                  r.block, r.limit.gbps, r.limit.threads, r.limit.kernel.c_str(), r.limit.one_thread, r.xxh3, r.get_batch,
                  r.get_batch / r.limit.gbps, r.get_batch_noverify, r.verified.gbps, r.verified.kernel.c_str(),
                  r.verified.threads, r.get_batch / r.verified.gbps, i + 1 < rows.size() ? "," : "");
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("kvtier host load path: GetBatch of RAM-tier hits (%zu MiB per call, one caller thread, each call "
              "into the next of %zu destinations, %.1f ms idle between calls) against the best memcpy of the "
              "same\n%s\n\n",
              a.batch_bytes >> 20, a.destinations, a.gap_ms, machine.c_str());
  std::printf("%-8s %14s %20s %13s %13s %9s %13s %25s %13s\n", "block", "copy best", "(kernel, threads)",
              "memcpy 1 thr", "xxh3 1 thr", "GetBatch", "vs copy best", "verified copy best", "vs verified");
  for (const Row& r : rows)
    std::printf("%-8s %9.2f GB/s %20s %8.2f GB/s %8.2f GB/s %6.2f GB/s %12.2fx %9.2f GB/s (%s, %d) %12.2fx\n",
                (std::to_string(r.block >> 10) + "K").c_str(), r.limit.gbps,
                (r.limit.kernel + ", " + std::to_string(r.limit.threads)).c_str(), r.limit.one_thread, r.xxh3,
                r.get_batch, r.get_batch / r.limit.gbps, r.verified.gbps, r.verified.kernel.c_str(), r.verified.threads,
                r.get_batch / r.verified.gbps);
  std::printf("\nWithout checksum verification (diagnostic; never the configuration): ");
  for (const Row& r : rows) std::printf("%zuK %.2f GB/s  ", r.block >> 10, r.get_batch_noverify);
  std::printf("\n");
  return 0;
}
