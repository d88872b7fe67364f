#include "util/copy_checksum.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_generateSecret_fromSeed
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>

namespace kvtier {
namespace internal {

#if defined(__x86_64__)
extern const CopyStripesImpl kCopyStripesAvx512;
extern const CopyStripesImpl kCopyStripesAvx2;
#endif

namespace {

// XXH3's published constants (its specification, doc/xxhash_spec.md).
constexpr uint64_t kPrime32_1 = 0x9E3779B1u;
constexpr uint64_t kPrime32_2 = 0x85EBCA77u;
constexpr uint64_t kPrime32_3 = 0xC2B2AE3Du;
constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kPrime64_3 = 0x165667B19E3779F9ull;
constexpr uint64_t kPrime64_4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kPrime64_5 = 0x27D4EB2F165667C5ull;
constexpr size_t kSecretBytes = 192;
constexpr size_t kLongAbove = 240;  // XXH3 hashes longer payloads stripe by stripe

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (x86-64, aarch64)
}

// XXH3's default secret: the one derived from seed 0 is the default itself.
const uint8_t* DefaultSecret() {
  static const std::array<uint8_t, kSecretBytes> secret = [] {
    std::array<uint8_t, kSecretBytes> s{};
    XXH3_generateSecret_fromSeed(s.data(), 0);
    return s;
  }();
  return secret.data();
}

void FoldStripe(uint64_t* acc, const uint8_t* in, const uint8_t* key) {
  for (int i = 0; i < 8; ++i) {
    const uint64_t v = Load64(in + 8 * i);
    const uint64_t k = v ^ Load64(key + 8 * i);
    acc[i ^ 1] += v;
    acc[i] += (k & 0xFFFFFFFFu) * (k >> 32);
  }
}

void Scramble(uint64_t* acc, const uint8_t* key) {
  for (int i = 0; i < 8; ++i) {
    uint64_t a = acc[i];
    a ^= a >> 47;
    a ^= Load64(key + 8 * i);
    acc[i] = a * kPrime32_1;
  }
}

void CopyStripesScalar(uint64_t* acc, uint64_t first, uint8_t* dst, const uint8_t* src, size_t stripes,
                       const uint8_t* secret) {
  for (size_t s = 0; s < stripes; ++s, ++first, src += 64, dst += 64) {
    FoldStripe(acc, src, secret + (first & 15) * 8);
    if (dst != src) std::memcpy(dst, src, 64);
    if ((first & 15) == 15) Scramble(acc, secret + kSecretBytes - 64);
  }
}

uint64_t Fold128(uint64_t a, uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}

uint64_t MergeAccs(const uint64_t* acc, const uint8_t* key, uint64_t start) {
  uint64_t h = start;
  for (int i = 0; i < 4; ++i)
    h += Fold128(acc[2 * i] ^ Load64(key + 16 * i), acc[2 * i + 1] ^ Load64(key + 16 * i + 8));
  h ^= h >> 37;
  h *= 0x165667919E3779F9ull;
  return h ^ (h >> 32);
}

const CopyStripesImpl kCopyStripesScalar = {"scalar", CopyStripesScalar, CopyStripesScalar, 1};

std::vector<const CopyStripesImpl*> Supported() {
  std::vector<const CopyStripesImpl*> out;
#if defined(__x86_64__)
  __builtin_cpu_init();
  // AVX-512 first, unlike the plain checksum (checksum.h): fused with the
  // copy it was the faster on the H200's host, from memory (8.3 against 6.9
  // GB/s per core) and in cache (31 against 23); docs/benchmarks.md.
  if (__builtin_cpu_supports("avx512f")) out.push_back(&kCopyStripesAvx512);
  if (__builtin_cpu_supports("avx2")) out.push_back(&kCopyStripesAvx2);
#endif
  out.push_back(&kCopyStripesScalar);
  return out;
}

const std::vector<const CopyStripesImpl*>& All() {
  static const std::vector<const CopyStripesImpl*> all = Supported();
  return all;
}

const CopyStripesImpl* Named(const std::string& isa) {
  for (const CopyStripesImpl* i : All())
    if (isa == i->isa) return i;
  std::abort();  // a test asked for an implementation this CPU lacks
}

}  // namespace
}  // namespace internal

using namespace internal;  // NOLINT: this file's own helpers

Xxh3Copy::Xxh3Copy(uint64_t total, CopyStores stores) : Xxh3Copy(total, All().front()->isa, stores) {}

bool Xxh3Mark::operator==(const Xxh3Mark& o) const { return std::memcmp(acc, o.acc, sizeof(acc)) == 0; }

Xxh3Mark Xxh3Copy::InitialMark() {
  return Xxh3Mark{{kPrime32_3, kPrime64_1, kPrime64_2, kPrime64_3, kPrime64_4, kPrime32_2, kPrime64_5, kPrime32_1}};
}

Xxh3Copy::Xxh3Copy(uint64_t total, const std::string& isa, CopyStores stores)
    : impl_(Named(isa)), stream_(stores == CopyStores::kStreaming), total_(total), loop_stripes_(total > 0 ? (total - 1) / 64 : 0) {
  std::memcpy(acc_, InitialMark().acc, sizeof(acc_));
}

Xxh3Copy::Xxh3Copy(uint64_t total, uint64_t offset, const Xxh3Mark& mark, CopyStores stores)
    : Xxh3Copy(total, stores) {
  if (!MarkOffsetOk(total, offset)) std::abort();  // a caller's bug: no state is defined there
  std::memcpy(acc_, mark.acc, sizeof(acc_));
  done_ = offset;
  stripes_ = offset / 64;
}

void Xxh3Copy::RecordMarks(uint64_t every, std::vector<Xxh3Mark>* marks) {
  if (every == 0 || every % 64 != 0 || total_ <= kLongAbove) return;
  marks_ = marks;
  mark_stripes_ = every / 64;
}

Xxh3Mark Xxh3Copy::State() const {
  Xxh3Mark m;
  std::memcpy(m.acc, acc_, sizeof(acc_));
  return m;
}

void Xxh3Copy::MaybeMark() {
  if (marks_ != nullptr && stripes_ % mark_stripes_ == 0 && MarkOffsetOk(total_, stripes_ * 64)) marks_->push_back(State());
}

// Folds and copies whole stripes, stopping at each mark to record it.
void Xxh3Copy::CopyStripes(uint8_t* dst, const uint8_t* src, size_t stripes, bool stream) {
  const uint8_t* secret = DefaultSecret();
  const CopyStripesFn fn = stream ? impl_->copy_stripes_streaming : impl_->copy_stripes;
  while (stripes > 0) {
    size_t run = stripes;
    if (marks_ != nullptr) run = std::min<uint64_t>(run, mark_stripes_ - stripes_ % mark_stripes_);
    fn(acc_, stripes_, dst, src, run, secret);
    stripes_ += run;
    dst += run * 64, src += run * 64, stripes -= run;
    MaybeMark();
  }
}

void Xxh3Copy::Copy(void* dst, const void* src, size_t n) {
  if (n == 0) return;
  if (total_ <= kLongAbove) {
    if (dst != src) std::memcpy(dst, src, n);
    short_.Update(dst, n);
    done_ += n;
    return;
  }
  CopyLong(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n);
}

void Xxh3Copy::CopyLong(uint8_t* dst, const uint8_t* src, size_t n) {
  const uint8_t* secret = DefaultSecret();
  // The last 64 bytes are hashed again, on their own, by Digest.
  const uint64_t start = done_;
  done_ += n;
  const uint64_t tail_from = total_ - 64;
  if (done_ > tail_from && start < total_) {
    const uint64_t from = std::max(start, tail_from);
    const uint64_t to = std::min(done_, total_);
    std::memcpy(tail_ + (from - tail_from), src + (from - start), to - from);
  }
  if (pend_n_ > 0) {  // finish the stripe a previous piece began
    const size_t k = std::min(64 - pend_n_, n);
    if (dst != src) std::memcpy(dst, src, k);
    std::memcpy(pend_ + pend_n_, src, k);
    pend_n_ += k, dst += k, src += k, n -= k;
    if (pend_n_ < 64) return;
    if (stripes_ >= loop_stripes_) {  // XXH3's last stripe is Digest's
      if (n > 0 && dst != src) std::memcpy(dst, src, n);  // past the stated total: copied, never matches
      return;
    }
    impl_->copy_stripes(acc_, stripes_, pend_, pend_, 1, secret);
    ++stripes_;
    pend_n_ = 0;
    MaybeMark();
  }
  const size_t whole = static_cast<size_t>(std::min<uint64_t>(n / 64, loop_stripes_ - stripes_));
  if (whole > 0) {
    CopyStripes(dst, src, whole, stream_ && reinterpret_cast<uintptr_t>(dst) % impl_->stream_align == 0);
    dst += whole * 64, src += whole * 64, n -= whole * 64;
  }
  if (n > 0) {  // at most one stripe's worth: the payload's last, or a part
    const size_t k = std::min<size_t>(n, 64);
    if (dst != src) std::memcpy(dst, src, n);
    std::memcpy(pend_, src, k);
    pend_n_ = k;
  }
}

uint64_t Xxh3Copy::Digest() const {
  if (total_ <= kLongAbove) return short_.Digest();
  const uint8_t* secret = DefaultSecret();
  uint64_t acc[8];
  std::memcpy(acc, acc_, sizeof(acc));
  FoldStripe(acc, tail_, secret + kSecretBytes - 64 - 7);
  return MergeAccs(acc, secret + 11, total_ * kPrime64_1);
}

std::vector<std::string> Xxh3CopyIsas() {
  std::vector<std::string> out;
  for (const CopyStripesImpl* i : All()) out.emplace_back(i->isa);
  return out;
}

}  // namespace kvtier
