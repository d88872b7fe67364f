// Clock helpers. Wall-clock ones serve record timestamps, which are
// informational only: nothing correctness-related depends on the wall clock.
#ifndef KVTIER_SRC_UTIL_CLOCK_H_
#define KVTIER_SRC_UTIL_CLOCK_H_

#include <chrono>
#include <cstdint>

namespace kvtier {

inline uint64_t NowUnixMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// A steady-clock instant in nanoseconds: CLOCK_MONOTONIC, one clock for
// every process on the machine (the service's deadlines cross processes).
inline int64_t MonotonicNs(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace kvtier

#endif  // KVTIER_SRC_UTIL_CLOCK_H_
