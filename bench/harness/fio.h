// Runs fio (the drive's limit) as a subprocess on a file in the bench folder:
// io_uring, O_DIRECT, the same block size and queue depth as the designs.
#ifndef KVTIER_BENCH_HARNESS_FIO_H_
#define KVTIER_BENCH_HARNESS_FIO_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/common.h"
#include "kvtier/status.h"

namespace kvbench {

// Path of the fio binary, or "" when it is not on PATH.
std::string FindFio();

// rw: "write" (sequential) or "randread". Writes/reads `file_bytes` of
// `file` once (time_based off). Fills gbps, ops_per_s, latency percentiles
// (completion latency) and cpu_s_per_gb (fio's usr+sys) of `m`.
// fdatasync_every > 0 (writes only): fdatasync after every that many writes,
// reported as design "fio-durable": the drive's limit at the durability a
// kvtier put has (a plain O_DIRECT write may sit in a volatile cache; on a
// VM, in the host's page cache).
// numjobs > 1: that many jobs, each on its own 1/numjobs of the file.
[[nodiscard]] kvtier::Status RunFio(const std::string& fio, const std::string& file,
                                    const std::string& rw, uint64_t block_bytes,
                                    uint64_t file_bytes, uint32_t queue_depth, Measurement* m,
                                    uint32_t fdatasync_every = 0, uint32_t numjobs = 1);

// The fio configurations tried for one operation's limit: access patterns
// (sequential and random), queue depths and job counts. A limit is the best
// the device does, so kvtier is divided by the best of all of them.
struct FioSweep {
  std::vector<std::string> patterns;  // fio --rw values
  std::vector<uint32_t> depths, jobs;
};
// op "put": write, randwrite; "get": randread, read. full: queue depth
// 1..64 and 1..4 jobs; quick: 1, 16, 64 and 1, 4; "single": the designs'
// own queue depth, one job, one pattern (the limit before the sweep).
FioSweep SweepFor(const std::string& op, const std::string& mode, uint32_t queue_depth);

// One point of a sweep.
struct FioConfig {
  std::string rw;  // fio --rw
  uint32_t depth = 1, jobs = 1;
};

// Runs every configuration of `sweep` on `file` (written first for gets)
// and returns the fastest in `best`, its note naming the winning
// configuration, how many were tried, and the file's size against the
// host's memory (a page cache on the host of a VM can hide a file smaller
// than that, even from O_DIRECT). `progress` hears each configuration;
// `winner`, when given, receives the fastest.
[[nodiscard]] kvtier::Status SweepFio(const std::string& fio, const std::string& file, const std::string& op,
                                      uint64_t block_bytes, uint64_t file_bytes, const FioSweep& sweep,
                                      Measurement* best,
                                      const std::function<void(const std::string&)>& progress = nullptr,
                                      FioConfig* winner = nullptr);

// Runs the sweep's winner once more (after the designs: a drive's rate
// drifts between minutes, and a limit taken at its slower moment reads as a
// design beating the device) and keeps the faster of the two in `best`,
// whose note says both. Leaves `best` as it was when the run fails.
void RecheckFio(const std::string& fio, const std::string& file, const std::string& op, uint64_t block_bytes,
                uint64_t file_bytes, const FioConfig& winner, Measurement* best);

}  // namespace kvbench

#endif  // KVTIER_BENCH_HARNESS_FIO_H_
