// Xxh3Copy's stripes on AVX-512 (compiled with -mavx512f; used only where the
// CPU has it): one 64-byte lane holds all eight accumulators.
#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports its own AVX-512 intrinsics (_mm512_undefined_epi32 inside
// avx512fintrin.h) as (maybe-)uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "util/copy_checksum.h"

namespace kvtier::internal {
namespace {

__m512i Fold(__m512i acc, __m512i data, const uint8_t* key) {
  const __m512i k = _mm512_xor_si512(data, _mm512_loadu_si512(key));
  const __m512i product = _mm512_mul_epu32(k, _mm512_srli_epi64(k, 32));
  const __m512i swapped = _mm512_shuffle_epi32(data, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_add_epi64(acc, _mm512_add_epi64(swapped, product));  // one add on the chain through acc
}

__m512i Scramble(__m512i acc, const uint8_t* key) {
  const __m512i prime = _mm512_set1_epi32(static_cast<int>(0x9E3779B1u));
  acc = _mm512_xor_si512(acc, _mm512_srli_epi64(acc, 47));
  acc = _mm512_xor_si512(acc, _mm512_loadu_si512(key));
  const __m512i lo = _mm512_mul_epu32(acc, prime);
  const __m512i hi = _mm512_mul_epu32(_mm512_srli_epi64(acc, 32), prime);
  return _mm512_add_epi64(lo, _mm512_slli_epi64(hi, 32));
}

template <bool kStream>
void CopyStripesAs(uint64_t* acc, uint64_t first, uint8_t* dst, const uint8_t* src, size_t stripes,
                   const uint8_t* secret) {
  __m512i a = _mm512_load_si512(acc);
  while (stripes > 0) {
    // Up to the end of XXH3's 16-stripe block, which ends in a scramble.
    const size_t at = first & 15;
    const size_t run = std::min<size_t>(16 - at, stripes);
    for (size_t j = 0; j < run; ++j, src += 64, dst += 64) {
      const __m512i d = _mm512_loadu_si512(src);
      if constexpr (kStream) _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), d);
      else _mm512_storeu_si512(dst, d);
      a = Fold(a, d, secret + (at + j) * 8);
    }
    first += run, stripes -= run;
    if (at + run == 16) a = Scramble(a, secret + 128);
  }
  _mm512_store_si512(acc, a);
  if constexpr (kStream) _mm_sfence();  // ordered before whatever publishes the copy
}

}  // namespace

extern const CopyStripesImpl kCopyStripesAvx512;
const CopyStripesImpl kCopyStripesAvx512 = {"avx512", CopyStripesAs<false>, CopyStripesAs<true>, 64};

}  // namespace kvtier::internal
#endif
