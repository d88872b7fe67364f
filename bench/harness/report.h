// What kvtier-bench ran on, and how its results are printed: one table per
// workload, or (--json) one JSON object with the schema of issue 5:
//   {"machine": {...}, "workloads": [{"name", "block_bytes", "results": [
//     {"design", "op", "gbps", "ops_per_s", "p50_us", "p99_us", "p999_us",
//      "write_amp", "cpu_s_per_gb"}]}]}
// Fields that do not apply are left out. A workload may also carry "params"
// (what it ran), "notes" and (revisit) "policies": the RAM tier's hit ratio
// per eviction policy on the same trace. Results of kvtier-ram's gets add
// "bytes_read_ram" / "bytes_read_disk". The top level adds "targets": each
// target of issue 5 with the measured value and "met" / "missed" (or, for
// the file-per-block contrast, "holds" / "does not hold"; "not measured"
// when the run lacked what it needs).
#ifndef KVTIER_BENCH_HARNESS_REPORT_H_
#define KVTIER_BENCH_HARNESS_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/common.h"

namespace kvbench {

// The RAM tier's hits on the revisit trace under one eviction policy.
struct PolicyResult {
  std::string policy;  // "s3-fifo" | "lru"
  uint64_t ram_bytes = 0, working_set_bytes = 0;
  double hit_ratio = 0;  // block hits / block reads over the revisits
  uint64_t bytes_ram = 0, bytes_disk = 0;
};

struct WorkloadResult {
  std::string name;
  uint64_t block_bytes = 0;
  std::string params;               // one line: counts, depth, ...
  std::vector<Measurement> results;
  std::vector<std::string> notes;
  std::vector<PolicyResult> policies;
  nlohmann::json details;  // workload-specific (steady: windows and goals), null when none
};

// One target of issue 5 against this run's results.
struct Target {
  std::string workload;  // where it is read: "seq-put", "cold-get", ...
  uint64_t block_bytes = 0;
  std::string target;    // e.g. "kvtier put >= 0.9x fio"
  std::optional<double> value;  // the measured ratio (or write amplification)
  double threshold = 0;
  bool at_most = false;  // value <= threshold meets it (else >=)
  std::string status;    // "met" | "missed" | "holds" | "does not hold" | "not measured"
  std::string detail;    // the numbers behind value, or why not measured
};

// Evaluates every target of issue 5 that the run's workloads bear on:
// at 2 MiB kvtier put and cold get >= 0.9x fio, >= 3x file-per-block-fsync
// and >= 2x rocksdb-blob; kvtier write amplification <= 1.05 wherever kvtier
// put; kvtier's 64 KiB rate per byte within 20% of its 2 MiB rate (put and
// get), and whether file-per-block(-fsync) holds the same (the issue
// expects it not to).
std::vector<Target> EvaluateTargets(const std::vector<WorkloadResult>& ws);
void PrintTargets(const std::vector<Target>& ts);

// CPU model, cores, memory, kernel, file system of `dir` (statfs), free
// space, date, fio version.
nlohmann::json DescribeMachine(const std::string& dir, const std::string& fio);
void PrintMachine(const nlohmann::json& machine);

// Ratio of m's throughput to the same op of `design` in the workload, if any.
std::optional<double> RatioTo(const WorkloadResult& w, const Measurement& m,
                              const std::string& design);

void PrintTable(const WorkloadResult& w);
nlohmann::json ToJson(const nlohmann::json& machine, const std::vector<WorkloadResult>& ws,
                      const std::vector<Target>& targets);

}  // namespace kvbench

#endif  // KVTIER_BENCH_HARNESS_REPORT_H_
