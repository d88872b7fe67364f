// kvtier-bench: kvtier against the drive's limit (fio) and against the
// designs peers ship (file per block, RocksDB with blob files), in one run on
// one folder. `kvtier bench ARGS` runs this binary with ARGS.
//
// Exit status: 0 when every design ran and every block read back verified;
// 1 when any read failed or did not verify (or a design failed); 2 on bad
// options or too little free space.
#include <sys/statvfs.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <tuple>

#include "harness/fio.h"
#include "harness/report.h"
#include "harness/steady.h"
#include "harness/workloads.h"

namespace kvbench {
namespace {

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

struct Preset {
  const char* sizes;
  uint64_t seq_bytes, seq_capped, fio_bytes, small_4k, small_64k, fpb_cap, fpb_fsync_cap, rocks_cap,
      get_sample, lookup_keys, kill_blocks;
  uint32_t docs, docs_capped, rounds, doc_tokens;
};

// tiny: the CI test (seconds). quick: about 2 minutes on a 2-core VM with a
// ~0.3-1.4 GB/s virtio disk: the fixed costs per step dominate there (store
// open/close, RocksDB's synced puts, and deleting file-per-block files: the
// disk is mounted with `discard`, ~250 unlinks/s), so the slow designs move
// less data (seq_capped) and file counts are capped; rates are per byte and
// settle on these sizes. full: the sizes (1M-key lookups and reopen
// need --small-4k-blocks 1000000 in quick).
// tiny's documents are 8 blocks (128 tokens): 2 of them (28 MiB) exceed
// kvtier-ram's smallest tier (16 MiB, one shard) at the 0.75 fraction.
const Preset kTiny = {"64K,2M", 8ull << 20, 0, 0, 500, 0, 200, 100, 0, 200, 5000, 200,
                      2, 0, 3, 128};
const Preset kQuick = {"64K,2M,5M", 128ull << 20, 64ull << 20, 64ull << 20, 50000, 0, 2000, 500,
                       10000, 5000, 50000, 10000, 2, 1, 3, 2750};
const Preset kFull = {"64K,2M,5M", 8ull << 30, 0, 0, 2000000, 300000, 0, 0, 0, 100000,
                      4000000, 1000000, 6, 0, 3, 2750};

std::string LoadAverage() {
  double l[3] = {0, 0, 0};
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf %lf %lf", &l[0], &l[1], &l[2]) != 3) l[0] = l[1] = l[2] = 0;
    std::fclose(f);
  }
  char b[64];
  std::snprintf(b, sizeof b, "%.2f %.2f %.2f", l[0], l[1], l[2]);
  return b;
}

}  // namespace
}  // namespace kvbench

int main(int argc, char** argv) {
  using namespace kvbench;
  CLI::App app{
      "kvtier-bench: kvtier against the drive's limit (fio, io_uring + O_DIRECT) and against the\n"
      "designs inference engines ship, side by side in one run on one folder:\n"
      "  fio, fio-durable      the limit: O_DIRECT writes / random reads; fio-durable adds an\n"
      "                        fdatasync per queue depth of writes (a kvtier put's durability)\n"
      "  kvtier                default options (capacity raised to hold the data set)\n"
      "  kvtier-ram            the same with its host RAM tier on (write-through; warm gets,\n"
      "                        revisits with a tier smaller than the working set)\n"
      "  file-per-block        vLLM/SGLang file tier: a file per block in hash-sharded folders,\n"
      "                        temp file + rename, O_DIRECT, no fsync (their default)\n"
      "  file-per-block-fsync  the same, fdatasync + folder fsync (durable like kvtier)\n"
      "  rocksdb-blob          RocksDB values with enable_blob_files, WAL sync on\n"
      "Workloads: seq (sequential durable puts, then cold random gets at each --sizes),\n"
      "small (many 4 KiB / 64 KiB blocks; on the 4 KiB store also batched prefix lookups,\n"
      "reopen after a clean close and after a kill), revisit (documents revisited\n"
      "round-robin, Qwen3-0.6B blocks). Tables on stdout (or one JSON object with --json),\n"
      "progress on stderr. Every block read is verified; exit status 1 if any fails.\n"
      "The end of the output lists issue 5's targets as met / missed, and the wall time.\n",
      "kvtier-bench"};
  app.set_help_flag("-h,--help", "Show this help and exit");
  std::string preset = "quick", dir = "./kvtier-bench-data", sizes, designs, workloads = "seq,small,revisit";
  std::string seq_bytes_s, inflight_s = "64M";
  BenchConfig c;
  bool json = false, no_fio = false;
  app.add_option("--preset", preset,
                 "tiny (CI, ~15 s) | quick (~2 min on a 2-core VM) | full (issue 5 sizes); explicit "
                 "options below override it")
      ->check(CLI::IsMember({"tiny", "quick", "full"}))
      ->capture_default_str();
  app.add_option("--dir", dir, "Folder for every design's data and fio's file (created; each "
                               "design's data is removed after its run)")
      ->capture_default_str();
  app.add_option("--sizes", sizes, "Block sizes of the seq workload, e.g. 64K,2M,5M");
  app.add_option("--seq-bytes", seq_bytes_s, "Payload bytes per design and block size (seq)");
  std::string seq_capped_s, fio_bytes_s, ram_tier_s;
  app.add_option("--seq-bytes-capped", seq_capped_s,
                 "At most this much for file-per-block(-fsync) and rocksdb-blob in seq (0: no cap)");
  app.add_option("--fio-bytes", fio_bytes_s, "At most this much per fio run (0: as --seq-bytes)");
  std::string fio_sweep;
  app.add_option("--fio-sweep", fio_sweep,
                 "How the device's limit is searched: full (queue depth 1-64, 1-4 jobs, sequential and "
                 "random) | quick (fewer depths and jobs) | single (the designs' queue depth, one job); "
                 "default full with --preset full, single with tiny, else quick")
      ->check(CLI::IsMember({"full", "quick", "single"}));
  app.add_option("--ram-tier", ram_tier_s,
                 "kvtier-ram's RAM tier in seq (default: twice the data set plus 2 blocks per shard, "
                 "at most 1/4 of memory)");
  app.add_option("--revisit-ram-fraction", c.revisit_ram_fraction,
                 "kvtier-ram's RAM tier in revisit, as a fraction of the working set")
      ->check(CLI::Range(0.01, 0.99))
      ->capture_default_str();
  app.add_option("--policy-fractions", c.policy_fractions,
                 "More RAM-tier sizes, as fractions of the revisit working set, for the S3-FIFO / "
                 "LRU replay (e.g. 0.25,0.5,0.9)")
      ->delimiter(',')
      ->check(CLI::Range(0.01, 0.99));
  app.add_option("--designs", designs,
                 "Comma list of designs (default: kvtier,kvtier-ram,file-per-block,"
                 "file-per-block-fsync,rocksdb-blob)");
  app.add_option("--workloads", workloads, "Comma list of seq,small,revisit,steady")->capture_default_str();
  std::string steady_capacity_s, steady_sizes;
  app.add_option("--steady-capacity", steady_capacity_s,
                 "steady: the store's byte budget (--steady-write-multiple times it is written); default by preset: 32M tiny, 1G quick, "
                 "8G full");
  app.add_option("--steady-sizes", steady_sizes,
                 "steady: block sizes, e.g. 64K,2M,mix (default 64K,2M; mix: 64K, 512K and 2M blocks together)");
  app.add_option("--steady-write-multiple", c.steady_write_multiple,
                 "steady: bytes put, fill included, as a multiple of the budget (at least 2; a longer run "
                 "weighs the one-time cost of finding the hot set less)")
      ->check(CLI::Range(2.0, 100.0))
      ->capture_default_str();
  app.add_flag("--steady-hot-first", c.steady_hot_first,
               "steady: the fill writes the hot set first (default: spread among the cold blocks)");
  app.add_option("--queue-depth", c.queue_depth,
                 "I/Os in flight: fio's iodepth, kvtier's gets in flight, threads of the "
                 "thread-based designs")
      ->capture_default_str();
  app.add_option("--put-inflight", inflight_s,
                 "Payload bytes of kvtier async puts in flight (at least queue-depth puts, at most 3/4 of the store's write queue)")
      ->capture_default_str();
  app.add_option("--small-4k-blocks", c.small_4k_blocks, "4 KiB blocks put by kvtier (small)");
  app.add_option("--small-64k-blocks", c.small_64k_blocks, "64 KiB blocks put by kvtier (small)");
  app.add_option("--fpb-max-files", c.fpb_max_files, "Cap on file-per-block blocks in small (0: none)");
  app.add_option("--fpb-fsync-max-files", c.fpb_fsync_max_files,
                 "Cap on file-per-block-fsync blocks in small (0: none)");
  app.add_option("--rocksdb-max-blocks", c.rocksdb_max_blocks,
                 "Cap on rocksdb-blob blocks in small (0: none)");
  app.add_option("--small-get-sample", c.small_get_sample, "Cold gets measured per small store");
  app.add_option("--small-get-batch", c.small_get_batch,
                 "The same cold gets again in batch calls of this many keys (0 or 1: not run)")
      ->capture_default_str();
  app.add_option("--kill-blocks", c.kill_blocks,
                 "4 KiB blocks put by the kill-reopen child (0: skip reopen-kill)");
  app.add_option("--lookup-keys", c.lookup_keys, "Keys looked up by prefix-lookup");
  app.add_option("--lookup-batch", c.lookup_batch, "Keys per LookupPrefix call")->capture_default_str();
  app.add_option("--revisit-docs", c.revisit_docs, "Documents in the revisit trace");
  app.add_option("--revisit-docs-capped", c.revisit_docs_capped,
                 "Documents for file-per-block(-fsync) and rocksdb-blob in revisit (0: all)");
  app.add_option("--revisit-rounds", c.revisit_rounds, "Rounds (the first writes)");
  app.add_option("--revisit-doc-tokens", c.revisit_doc_tokens, "Tokens per document");
  app.add_option("--kvtier-option", c.kvtier_overrides,
                 "Experiments: override a kvtier Option, name=value (repeatable): read_threads, "
                 "queue_depth, max_write_chunk_bytes, group_commit_bytes, write_queue_bytes, "
                 "segment_size_bytes, zero_copy_min_bytes, dense_record_max_bytes, verify_ram_hits, zero_copy_small_pages, read_on_caller_thread (0 or 1), reinsert_max_fraction (0-1), reinsert_min_hits, hot_region_fraction (0-1), reclaim_window_fraction (0-1). Results are then not kvtier's defaults");
  std::string buffer_pages = "huge";
  app.add_option("--buffer-pages", buffer_pages,
                 "Memory of the blocks handed to every design: huge (buffers of 2 MiB and more on transparent "
                 "huge pages, like pinned staging memory) or 4k (4 KiB pages, the memory fio uses)")
      ->check(CLI::IsMember({"huge", "4k"}))
      ->capture_default_str();
  app.add_flag("--json", json, "Print one JSON object on stdout instead of tables");
  app.add_flag("--no-fio", no_fio, "Do not run fio (no device-limit ratios)");
  app.add_flag("--keep", c.keep, "Keep each design's data after its run");
  // The kill-reopen child (internal).
  bool child = false;
  std::string child_design;
  uint64_t child_count = 0, child_block = 0, child_cap = 0;
  app.add_flag("--child-fill", child)->group("");
  app.add_option("--child-design", child_design)->group("");
  app.add_option("--child-count", child_count)->group("");
  app.add_option("--child-block", child_block)->group("");
  app.add_option("--child-capacity", child_cap)->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is 0; every bad option is 2, as documented above.
    return app.exit(e) == 0 ? 0 : 2;
  }
  SetHugePageBuffers(buffer_pages == "huge");

  if (child) ChildFill(child_design, dir, child_count, child_block, c.queue_depth, child_cap);

  const Preset& p = preset == "tiny" ? kTiny : preset == "full" ? kFull : kQuick;
  auto unset = [&](const char* name) { return app.count(name) == 0; };
  if (unset("--sizes")) sizes = p.sizes;
  if (unset("--small-4k-blocks")) c.small_4k_blocks = p.small_4k;
  if (unset("--small-64k-blocks")) c.small_64k_blocks = p.small_64k;
  if (unset("--fpb-max-files")) c.fpb_max_files = p.fpb_cap;
  if (unset("--fpb-fsync-max-files")) c.fpb_fsync_max_files = p.fpb_fsync_cap;
  if (unset("--rocksdb-max-blocks")) c.rocksdb_max_blocks = p.rocks_cap;
  if (unset("--small-get-sample")) c.small_get_sample = p.get_sample;
  if (unset("--lookup-keys")) c.lookup_keys = p.lookup_keys;
  if (unset("--kill-blocks")) c.kill_blocks = p.kill_blocks;
  if (unset("--revisit-docs")) c.revisit_docs = p.docs;
  if (unset("--revisit-docs-capped")) c.revisit_docs_capped = p.docs_capped;
  if (unset("--revisit-rounds")) c.revisit_rounds = p.rounds;
  if (unset("--revisit-doc-tokens")) c.revisit_doc_tokens = p.doc_tokens;
  c.seq_bytes = p.seq_bytes;
  c.seq_bytes_capped = p.seq_capped;
  c.fio_bytes = p.fio_bytes;
  c.fio_sweep = !fio_sweep.empty() ? fio_sweep : preset == "full" ? "full" : preset == "tiny" ? "single" : "quick";
  if (!seq_bytes_s.empty()) {
    auto v = ParseBytes(seq_bytes_s);
    if (!v || *v == 0) {
      std::fprintf(stderr, "kvtier-bench: bad --seq-bytes '%s'\n", seq_bytes_s.c_str());
      return 2;
    }
    c.seq_bytes = *v;
  }
  for (auto [flag, text, dst] : {std::tuple{"--seq-bytes-capped", &seq_capped_s, &c.seq_bytes_capped},
                                 std::tuple{"--fio-bytes", &fio_bytes_s, &c.fio_bytes},
                                 std::tuple{"--ram-tier", &ram_tier_s, &c.ram_tier_bytes}}) {
    if (text->empty()) continue;
    auto v = ParseBytes(*text);
    if (!v) {
      std::fprintf(stderr, "kvtier-bench: bad %s '%s'\n", flag, text->c_str());
      return 2;
    }
    *dst = *v;
  }
  auto inflight = ParseBytes(inflight_s);
  if (!inflight || *inflight == 0) {
    std::fprintf(stderr, "kvtier-bench: bad --put-inflight '%s'\n", inflight_s.c_str());
    return 2;
  }
  c.put_inflight_bytes = *inflight;
  for (const std::string& s : SplitList(sizes)) {
    auto v = ParseBytes(s);
    if (!v || *v < 4096 || *v % 4096 != 0 || *v > (64ull << 20)) {
      std::fprintf(stderr,
                   "kvtier-bench: bad block size '%s' in --sizes: need a multiple of 4 KiB "
                   "between 4K and 64M\n",
                   s.c_str());
      return 2;
    }
    c.sizes.push_back(*v);
  }
  for (const std::string& kv : c.kvtier_overrides) {
    const std::string err = CheckKvtierOverride(kv);
    if (!err.empty()) {
      std::fprintf(stderr, "kvtier-bench: %s\n", err.c_str());
      return 2;
    }
  }
  c.designs = designs.empty() ? AllDesignNames() : SplitList(designs);
  for (const std::string& d : c.designs)
    if (!MakeDesign(d, DesignConfig{})) {
      std::fprintf(stderr, "kvtier-bench: unknown design '%s' in --designs\n", d.c_str());
      return 2;
    }
  c.workloads = SplitList(workloads);
  for (const std::string& w : c.workloads)
    if (w != "seq" && w != "small" && w != "revisit" && w != "steady") {
      std::fprintf(stderr, "kvtier-bench: unknown workload '%s' (seq, small, revisit, steady)\n", w.c_str());
      return 2;
    }
  c.steady_capacity_bytes = preset == "tiny" ? 32ull << 20 : preset == "full" ? 8ull << 30 : 1ull << 30;
  if (!steady_capacity_s.empty()) {
    auto v = ParseBytes(steady_capacity_s);
    if (!v || *v < (8ull << 20)) {
      std::fprintf(stderr, "kvtier-bench: bad --steady-capacity '%s' (at least 8M)\n", steady_capacity_s.c_str());
      return 2;
    }
    c.steady_capacity_bytes = *v;
  }
  for (const std::string& t : SplitList(steady_sizes.empty() ? "64K,2M" : steady_sizes)) {
    if (t == "mix" && kSteadyMixSizes.back() * 16 <= c.steady_capacity_bytes) {
      c.steady_sizes.push_back(0);  // 0: the mixed-size run (kSteadyMixSizes)
      continue;
    }
    auto v = ParseBytes(t);
    if (!v || *v == 0 || *v % 4096 != 0 || *v * 16 > c.steady_capacity_bytes) {
      std::fprintf(stderr, "kvtier-bench: bad --steady-sizes entry '%s' (mix, or multiples of 4K; 16 of the largest must fit "
                           "the capacity)\n", t.c_str());
      return 2;
    }
    c.steady_sizes.push_back(*v);
  }
  if (c.queue_depth == 0 || c.queue_depth > 1024 || c.lookup_batch == 0 ||
      c.revisit_doc_tokens < c.block_tokens) {
    std::fprintf(stderr, "kvtier-bench: --queue-depth must be 1..1024, --lookup-batch >= 1, "
                         "--revisit-doc-tokens >= 16\n");
    return 2;
  }

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "kvtier-bench: cannot create --dir %s: %s\n", dir.c_str(),
                 ec.message().c_str());
    return 2;
  }
  c.dir = std::filesystem::absolute(dir).lexically_normal().string();
  if (!c.dir.empty() && c.dir.back() == '/') c.dir.pop_back();
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) c.self_exe.assign(exe, static_cast<size_t>(n));
  c.fio = no_fio ? "" : FindFio();

  // Free space: keep the run within it, scaling down if needed.
  struct statvfs sv{};
  if (statvfs(c.dir.c_str(), &sv) != 0) {
    std::fprintf(stderr, "kvtier-bench: statvfs %s failed\n", c.dir.c_str());
    return 2;
  }
  const uint64_t free_bytes = static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize;
  const uint64_t reserve = std::min<uint64_t>(2ull << 30, free_bytes / 10);
  const uint64_t need = PeakDiskBytes(c);
  nlohmann::json machine = DescribeMachine(c.dir, c.fio);
  machine["preset"] = preset;
  machine["fio_sweep"] = c.fio_sweep;
  if (!c.kvtier_overrides.empty()) machine["kvtier_options"] = c.kvtier_overrides;
  machine["peak_disk_bytes"] = need;
  if (need + reserve > free_bytes) {
    const double f = free_bytes > reserve ? double(free_bytes - reserve) / need : 0;
    if (f < 0.05) {
      std::fprintf(stderr,
                   "kvtier-bench: %s has %s free but the run needs about %s at its peak; free "
                   "space or pick a smaller --preset / sizes\n",
                   c.dir.c_str(), HumanBytes(free_bytes).c_str(), HumanBytes(need).c_str());
      return 2;
    }
    ScaleDown(&c, f);
    std::fprintf(stderr,
                 "kvtier-bench: %s has %s free, the run needed about %s at its peak: scaled "
                 "every data set by %.2f to fit (peak now %s)\n",
                 c.dir.c_str(), HumanBytes(free_bytes).c_str(), HumanBytes(need).c_str(), f,
                 HumanBytes(PeakDiskBytes(c)).c_str());
    machine["scaled_by"] = f;
    machine["peak_disk_bytes"] = PeakDiskBytes(c);
  }
  if (!json) {
    PrintMachine(machine);
    std::printf("preset %s; peak disk use about %s of %s free (data removed after each design)\n\n",
                preset.c_str(), HumanBytes(PeakDiskBytes(c)).c_str(), HumanBytes(free_bytes).c_str());
    if (c.fio.empty())
      std::printf("fio: %s: the device limit is not measured and no ratio to fio is given\n\n",
                  no_fio ? "disabled (--no-fio)" : "NOT FOUND on PATH (apt-get install fio)");
    std::fflush(stdout);
  } else if (c.fio.empty() && !no_fio) {
    std::fprintf(stderr, "kvtier-bench: fio not found on PATH: no device-limit ratios\n");
  }

  const std::string load_start = LoadAverage();
  const auto t0 = SteadyClock::now();
  std::vector<WorkloadResult> results;
  RunAll(c, json, &results);
  const std::vector<Target> targets = EvaluateTargets(results);
  const double wall_s = SecondsSince(t0);
  const std::string load_end = LoadAverage();
  machine["wall_s"] = wall_s;
  machine["loadavg_start"] = load_start;
  machine["loadavg_end"] = load_end;
  if (json) {
    std::printf("%s\n", ToJson(machine, results, targets).dump(2).c_str());
  } else {
    PrintTargets(targets);
    std::printf("wall time %.1f s; load average (1/5/15 min) at start %s, at end %s on %d cores\n",
                wall_s, load_start.c_str(), load_end.c_str(), machine.value("cores", 0));
  }
  std::fprintf(stderr, "kvtier-bench: wall time %.1f s (load average %s -> %s)\n", wall_s,
               load_start.c_str(), load_end.c_str());

  uint64_t bad = 0;
  for (const auto& w : results)
    for (const auto& m : w.results) bad += m.bad;
  if (bad > 0) {
    std::fprintf(stderr, "kvtier-bench: %llu operations failed or did not verify (see notes)\n",
                 static_cast<unsigned long long>(bad));
    return 1;
  }
  std::error_code ec2;
  std::filesystem::remove(c.dir, ec2);  // only if empty: never the user's files
  return 0;
}
