// Xxh3Copy's stripes on AVX2 (compiled with -mavx2; used only where the CPU
// has it): two 32-byte lanes of four 64-bit accumulators each.
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>

#include "util/copy_checksum.h"

namespace kvtier::internal {
namespace {

__m256i Fold(__m256i acc, __m256i data, const uint8_t* key) {
  const __m256i k = _mm256_xor_si256(data, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(key)));
  const __m256i product = _mm256_mul_epu32(k, _mm256_srli_epi64(k, 32));
  const __m256i swapped = _mm256_shuffle_epi32(data, _MM_SHUFFLE(1, 0, 3, 2));  // acc[i ^ 1] += data[i]
  return _mm256_add_epi64(acc, _mm256_add_epi64(swapped, product));  // one add on the chain through acc
}

__m256i Scramble(__m256i acc, const uint8_t* key) {
  const __m256i prime = _mm256_set1_epi32(static_cast<int>(0x9E3779B1u));
  acc = _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 47));
  acc = _mm256_xor_si256(acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(key)));
  const __m256i lo = _mm256_mul_epu32(acc, prime);
  const __m256i hi = _mm256_mul_epu32(_mm256_srli_epi64(acc, 32), prime);
  return _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 32));
}

template <bool kStream>
void CopyStripesAs(uint64_t* acc, uint64_t first, uint8_t* dst, const uint8_t* src, size_t stripes,
                   const uint8_t* secret) {
  __m256i a0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc));
  __m256i a1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc + 4));
  while (stripes > 0) {
    // Up to the end of XXH3's 16-stripe block, which ends in a scramble.
    const size_t at = first & 15;
    const size_t run = std::min<size_t>(16 - at, stripes);
    for (size_t j = 0; j < run; ++j, src += 64, dst += 64) {
      const __m256i d0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
      const __m256i d1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32));
      if constexpr (kStream) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), d0);
        _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 32), d1);
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), d0);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), d1);
      }
      const uint8_t* key = secret + (at + j) * 8;
      a0 = Fold(a0, d0, key);
      a1 = Fold(a1, d1, key + 32);
    }
    first += run, stripes -= run;
    if (at + run == 16) {
      a0 = Scramble(a0, secret + 128);
      a1 = Scramble(a1, secret + 160);
    }
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc), a0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc + 4), a1);
  if constexpr (kStream) _mm_sfence();  // ordered before whatever publishes the copy
}

}  // namespace

extern const CopyStripesImpl kCopyStripesAvx2;
const CopyStripesImpl kCopyStripesAvx2 = {"avx2", CopyStripesAs<false>, CopyStripesAs<true>, 32};

}  // namespace kvtier::internal
#endif
