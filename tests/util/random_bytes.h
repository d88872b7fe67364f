// Reproducible pseudo-random payloads for the checksum tests.
#ifndef KVTIER_TESTS_UTIL_RANDOM_BYTES_H_
#define KVTIER_TESTS_UTIL_RANDOM_BYTES_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace kvtier {

inline std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 r(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(r());
  return v;
}

}  // namespace kvtier

#endif  // KVTIER_TESTS_UTIL_RANDOM_BYTES_H_
