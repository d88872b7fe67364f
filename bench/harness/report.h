// What kvtier-bench ran on, and how its results are printed: one table per
// workload, or (--json) one JSON object with the schema of issue 5:
//   {"machine": {...}, "workloads": [{"name", "block_bytes", "results": [
//     {"design", "op", "gbps", "ops_per_s", "p50_us", "p99_us", "p999_us",
//      "write_amp", "cpu_s_per_gb"}]}]}
// Fields that do not apply are left out. A workload may also carry "params"
// (what it ran) and "notes".
#ifndef KVTIER_BENCH_HARNESS_REPORT_H_
#define KVTIER_BENCH_HARNESS_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/common.h"

namespace kvbench {

struct WorkloadResult {
  std::string name;
  uint64_t block_bytes = 0;
  std::string params;               // one line: counts, depth, ...
  std::vector<Measurement> results;
  std::vector<std::string> notes;
};

// CPU model, cores, memory, kernel, file system of `dir` (statfs), free
// space, date, fio version.
nlohmann::json DescribeMachine(const std::string& dir, const std::string& fio);
void PrintMachine(const nlohmann::json& machine);

// Ratio of m's throughput to the same op of `design` in the workload, if any.
std::optional<double> RatioTo(const WorkloadResult& w, const Measurement& m,
                              const std::string& design);

void PrintTable(const WorkloadResult& w);
nlohmann::json ToJson(const nlohmann::json& machine, const std::vector<WorkloadResult>& ws);

}  // namespace kvbench

#endif  // KVTIER_BENCH_HARNESS_REPORT_H_
