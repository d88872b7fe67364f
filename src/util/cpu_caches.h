// The size of the last-level cache one core shares, as the kernel reports
// it (sysfs), for decisions that depend on whether a copy's destination
// stays in the cache. Thread-safe; read once.
#ifndef KVTIER_SRC_UTIL_CPU_CACHES_H_
#define KVTIER_SRC_UTIL_CPU_CACHES_H_

#include <cstdint>

namespace kvtier {

// Bytes of the largest cache cpu0 sees. On CPUs built of core complexes
// (AMD EPYC) this is one complex's L3, not the socket's total that
// sysconf(_SC_LEVEL3_CACHE_SIZE) gives. 32 MiB where nothing says.
uint64_t LastLevelCacheBytes();

}  // namespace kvtier

#endif  // KVTIER_SRC_UTIL_CPU_CACHES_H_
