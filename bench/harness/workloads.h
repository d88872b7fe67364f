// The workloads of issue 5, each run for every selected design (and fio where
// there is a device-limit counterpart) in the same folder, one design at a
// time; each design's data is removed before the next design runs, so the
// peak disk use is one design's data set.
#ifndef KVTIER_BENCH_HARNESS_WORKLOADS_H_
#define KVTIER_BENCH_HARNESS_WORKLOADS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "harness/designs.h"
#include "harness/report.h"

namespace kvbench {

struct BenchConfig {
  std::string dir;
  std::string self_exe;        // this binary, for the kill-reopen child
  std::string fio;             // "" when fio is missing or disabled
  std::vector<std::string> designs;
  std::vector<std::string> workloads;  // "seq", "small", "revisit", "steady"
  std::vector<uint64_t> sizes;         // block sizes of the sequential/cold workloads
  uint64_t seq_bytes = 0;              // payload per design and block size
  // Less for file-per-block(-fsync) and rocksdb-blob (0: no cap): they are
  // slow to fill (RocksDB) or to delete (a file per block).
  uint64_t seq_bytes_capped = 0;
  uint64_t fio_bytes = 0;              // most fio moves per run (0: as the designs)
  std::string fio_sweep = "quick";     // the limit's search: full | quick | single (fio.h SweepFor)
  uint32_t queue_depth = 16;
  uint64_t put_inflight_bytes = 64ull << 20;
  // Many small blocks (+ prefix lookups and reopen on the 4 KiB store).
  uint64_t small_4k_blocks = 0, small_64k_blocks = 0;
  uint64_t fpb_max_files = 0, fpb_fsync_max_files = 0, rocksdb_max_blocks = 0;  // 0: no cap
  uint64_t small_get_sample = 0;      // cold gets measured on the small stores
  uint32_t small_get_batch = 32;      // the same keys again in batches of this many (0, 1: not)
  uint64_t kill_blocks = 0;           // 4 KiB blocks the kill-reopen child puts (0: skip)
  uint64_t lookup_keys = 0;           // keys looked up (in batches)
  uint32_t lookup_batch = 32;
  // Revisit trace.
  uint32_t revisit_docs = 0, revisit_rounds = 0, revisit_doc_tokens = 2750;
  // Documents for file-per-block(-fsync) and rocksdb-blob (0: all): without
  // a RAM tier every revisit loads its whole prefix from disk, so their
  // per-revisit figures do not depend on how many documents rotate.
  uint32_t revisit_docs_capped = 0;
  uint32_t block_tokens = 16;
  uint64_t bytes_per_token = 114688;  // Qwen3-0.6B, bf16
  // kvtier-ram: its tier in seq (0: twice the data set, so every warm get
  // can hit, at most a quarter of the machine's memory) and in revisit (this
  // fraction of the working set: larger than the tier, smaller than the disk).
  uint64_t ram_tier_bytes = 0;
  double revisit_ram_fraction = 0.75;
  // More tier sizes (fractions of the working set) for the RAM-tier policy
  // replay of the revisit trace; the run's own fraction is always replayed.
  std::vector<double> policy_fractions;
  // Steady state (harness/steady.h): the store's byte budget and block sizes.
  uint64_t steady_capacity_bytes = 0;
  std::vector<uint64_t> steady_sizes;
  bool steady_hot_first = false;  // SteadyConfig::hot_first
  double steady_write_multiple = 3.0;  // SteadyConfig::write_multiple
  bool keep = false;                  // keep design folders after the run
  std::vector<std::string> kvtier_overrides;  // experiments: kvtier Options
};

// Peak bytes the configured run keeps on disk at once.
uint64_t PeakDiskBytes(const BenchConfig& c);
// Multiplies every size-driving count by `f` (< 1) to fit free space.
void ScaleDown(BenchConfig* c, double f);

// Runs everything; appends one WorkloadResult per (workload, block size).
// Tables are printed as results arrive unless `quiet`. Data of finished
// designs is deleted by a background thread between measurements (see
// Trash), and all of it is gone when RunAll returns.
void RunAll(const BenchConfig& c, bool quiet, std::vector<WorkloadResult>* out);

// The kill-reopen child: opens `design` in `dir`, puts `count` blocks of
// `block` bytes (acknowledged), then _exit(0)s without closing.
[[noreturn]] void ChildFill(const std::string& design, const std::string& dir, uint64_t count,
                            uint64_t block, uint32_t queue_depth, uint64_t capacity);

}  // namespace kvbench

#endif  // KVTIER_BENCH_HARNESS_WORKLOADS_H_
