// XXH3-64 of payloads on a vector unit chosen at run time: AVX2 where the
// CPU has it, else AVX-512, else the library's own SSE2 build. Every
// implementation returns exactly XXH3_64bits' value, so stores move between
// machines freely; only speed differs. Measured (bench/checksum_bench.cc,
// docs/benchmarks.md): 2 MiB payloads from memory hash at ~25 GB/s per core
// with AVX2 against ~15 with AVX-512 or SSE2 (which only win in cache), and
// on an H200 host SSE2's ~7 GB/s per core could not keep 14 threads ahead of
// a 55 GB/s device-to-host link.
//
// Thread-safe: the choice is made once, on first use. Xxh3Stream is a value
// type for one thread at a time.
#ifndef KVTIER_SRC_UTIL_CHECKSUM_H_
#define KVTIER_SRC_UTIL_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvtier {

namespace internal {
inline constexpr size_t kXxh3StateBytes = 640;  // >= sizeof(XXH3_state_t), checked where it is known
struct Xxh3Impl {
  const char* isa;
  uint64_t (*oneshot)(const void* data, size_t n);
  void (*reset)(void* state);
  void (*update)(void* state, const void* data, size_t n);
  uint64_t (*digest)(const void* state);
};
}  // namespace internal

// XXH3_64bits(data, n).
uint64_t Xxh3(const void* data, size_t n);

// XXH3_64bits of the concatenation of everything passed to Update.
class Xxh3Stream {
 public:
  Xxh3Stream();
  // On a named implementation (tests); `isa` must be one of Xxh3Isas().
  explicit Xxh3Stream(const std::string& isa);
  void Update(const void* data, size_t n);
  uint64_t Digest() const;

 private:
  const internal::Xxh3Impl* impl_;
  alignas(64) unsigned char state_[internal::kXxh3StateBytes];
};

// The implementation in use: "avx2", "avx512" or "sse2".
const char* Xxh3Isa();
// Every implementation this CPU can run, the preferred first.
std::vector<std::string> Xxh3Isas();
// One-shot on a named implementation (tests); `isa` must be in Xxh3Isas().
uint64_t Xxh3On(const std::string& isa, const void* data, size_t n);

}  // namespace kvtier

#endif  // KVTIER_SRC_UTIL_CHECKSUM_H_
