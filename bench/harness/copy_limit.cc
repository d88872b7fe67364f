#include "harness/copy_limit.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "util/copy_checksum.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvbench {
namespace {

void LibcCopy(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }

#if defined(__x86_64__)
// Copies the unaligned head so that dst is aligned to `a`; returns the
// bytes done.
size_t AlignHead(uint8_t* dst, const uint8_t* src, size_t n, size_t a) {
  const size_t head = std::min(n, (a - reinterpret_cast<uintptr_t>(dst) % a) % a);
  std::memcpy(dst, src, head);
  return head;
}

template <bool kStream>
__attribute__((target("avx2"))) void Avx2Copy(void* d, const void* s, size_t n) {
  auto* dst = static_cast<uint8_t*>(d);
  const auto* src = static_cast<const uint8_t*>(s);
  const size_t h = AlignHead(dst, src, n, 32);
  dst += h, src += h, n -= h;
  for (; n >= 128; n -= 128, src += 128, dst += 128) {
    __m256i v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32 * i));
    for (int i = 0; i < 4; ++i) {
      if constexpr (kStream) _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 32 * i), v[i]);
      else _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 32 * i), v[i]);
    }
  }
  if constexpr (kStream) _mm_sfence();
  std::memcpy(dst, src, n);
}

template <bool kStream>
__attribute__((target("avx512f"))) void Avx512Copy(void* d, const void* s, size_t n) {
  auto* dst = static_cast<uint8_t*>(d);
  const auto* src = static_cast<const uint8_t*>(s);
  const size_t h = AlignHead(dst, src, n, 64);
  dst += h, src += h, n -= h;
  for (; n >= 256; n -= 256, src += 256, dst += 256) {
    __m512i v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm512_loadu_si512(src + 64 * i);
    for (int i = 0; i < 4; ++i) {
      if constexpr (kStream) _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + 64 * i), v[i]);
      else _mm512_store_si512(dst + 64 * i, v[i]);
    }
  }
  if constexpr (kStream) _mm_sfence();
  std::memcpy(dst, src, n);
}
#endif

std::vector<CopyKernel> Supported() {
  std::vector<CopyKernel> out = {{"memcpy", LibcCopy}};
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) {
    out.push_back({"avx2", Avx2Copy<false>});
    out.push_back({"avx2-stream", Avx2Copy<true>});
  }
  if (__builtin_cpu_supports("avx512f")) {
    out.push_back({"avx512", Avx512Copy<false>});
    out.push_back({"avx512-stream", Avx512Copy<true>});
  }
#endif
  return out;
}

// The digest must be used, or the compiler could drop the hash.
thread_local volatile uint64_t digest_sink = 0;

template <int kIsa, bool kStream>
void VerifiedCopy(void* dst, const void* src, size_t n) {
  static const char* const kIsas[] = {"scalar", "avx2", "avx512"};
  static const std::string isa = kIsas[kIsa];
  kvtier::Xxh3Copy c(n, isa, kStream ? kvtier::CopyStores::kStreaming : kvtier::CopyStores::kCached);
  c.Copy(dst, src, n);
  digest_sink = c.Digest();
}

std::vector<CopyKernel> SupportedVerified() {
  std::vector<CopyKernel> out;
  for (const std::string& isa : kvtier::Xxh3CopyIsas()) {
    if (isa == "avx512") {
      out.push_back({"xxh3-avx512", VerifiedCopy<2, false>});
      out.push_back({"xxh3-avx512-stream", VerifiedCopy<2, true>});
    } else if (isa == "avx2") {
      out.push_back({"xxh3-avx2", VerifiedCopy<1, false>});
      out.push_back({"xxh3-avx2-stream", VerifiedCopy<1, true>});
    }
  }
  if (out.empty()) out.push_back({"xxh3-scalar", VerifiedCopy<0, false>});
  return out;
}

}  // namespace

const std::vector<CopyKernel>& CopyKernels() {
  static const std::vector<CopyKernel> all = Supported();
  return all;
}

const std::vector<CopyKernel>& VerifiedCopyKernels() {
  static const std::vector<CopyKernel> all = SupportedVerified();
  return all;
}

}  // namespace kvbench
