// The copy kernels a memcpy limit sweeps. A verified get copies with its own
// vector loop (src/util/copy_checksum.h); a limit that only timed the C
// library's memcpy could sit below it on CPUs where the library picks a
// slower method (`rep movsb`, or streaming stores at sizes where the
// destination would have stayed in cache). The limit is the best of all.
#ifndef KVTIER_BENCH_HARNESS_COPY_LIMIT_H_
#define KVTIER_BENCH_HARNESS_COPY_LIMIT_H_

#include <cstddef>
#include <vector>

namespace kvbench {

struct CopyKernel {
  const char* name;  // "memcpy", "avx2", "avx2-stream", "avx512", "avx512-stream"
  void (*copy)(void* dst, const void* src, size_t n);
};

// The kernels this CPU runs, the C library's memcpy first.
const std::vector<CopyKernel>& CopyKernels();

// Copies that also compute the payload's XXH3-64 in the same pass, as a
// verified RAM-tier read must (src/util/copy_checksum.h), on each vector unit
// with ordinary and with streaming stores: "xxh3-avx512-stream" and so on.
// Their best is what verification leaves of the copy on this host, the
// ceiling for any verified get; the plain kernels above stay the limit.
const std::vector<CopyKernel>& VerifiedCopyKernels();

}  // namespace kvbench

#endif  // KVTIER_BENCH_HARNESS_COPY_LIMIT_H_
