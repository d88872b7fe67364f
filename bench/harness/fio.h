// Runs fio (the drive's limit) as a subprocess on a file in the bench folder:
// io_uring, O_DIRECT, the same block size and queue depth as the designs.
#ifndef KVTIER_BENCH_HARNESS_FIO_H_
#define KVTIER_BENCH_HARNESS_FIO_H_

#include <cstdint>
#include <string>

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
[[nodiscard]] kvtier::Status RunFio(const std::string& fio, const std::string& file,
                                    const std::string& rw, uint64_t block_bytes,
                                    uint64_t file_bytes, uint32_t queue_depth, Measurement* m,
                                    uint32_t fdatasync_every = 0);

}  // namespace kvbench

#endif  // KVTIER_BENCH_HARNESS_FIO_H_
