#include "util/checksum.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t's size and fields
#include <xxhash.h>

#include <cstdlib>

namespace kvtier {
namespace internal {

#if defined(__x86_64__)
extern const Xxh3Impl kXxh3Avx512;
extern const Xxh3Impl kXxh3Avx2;
#endif

namespace {

static_assert(sizeof(XXH3_state_t) <= kXxh3StateBytes, "Xxh3Stream's state buffer is too small");

XXH3_state_t* State(void* s) { return static_cast<XXH3_state_t*>(s); }
uint64_t OneShot(const void* data, size_t n) { return XXH3_64bits(data, n); }
void Reset(void* s) {
  XXH3_INITSTATE(State(s));
  XXH3_64bits_reset(State(s));
}
void Update(void* s, const void* data, size_t n) { XXH3_64bits_update(State(s), data, n); }
uint64_t Digest(const void* s) { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(s)); }

// The library as built by the distribution: its baseline vector unit (SSE2
// on x86-64).
const Xxh3Impl kXxh3Library = {"sse2", OneShot, Reset, Update, Digest};

std::vector<const Xxh3Impl*> Supported() {
  std::vector<const Xxh3Impl*> out;
#if defined(__x86_64__)
  __builtin_cpu_init();
  // libgcc's checks include the OS saving the wider registers (XCR0). AVX2
  // first: on payloads that come from memory it is the faster (checksum.h).
  if (__builtin_cpu_supports("avx2")) out.push_back(&kXxh3Avx2);
  if (__builtin_cpu_supports("avx512f")) out.push_back(&kXxh3Avx512);
#endif
  out.push_back(&kXxh3Library);
  return out;
}

const std::vector<const Xxh3Impl*>& All() {
  static const std::vector<const Xxh3Impl*> all = Supported();
  return all;
}

const Xxh3Impl* Chosen() {
  static const Xxh3Impl* chosen = All().front();
  return chosen;
}

const Xxh3Impl* Named(const std::string& isa) {
  for (const Xxh3Impl* i : All())
    if (isa == i->isa) return i;
  std::abort();  // a test asked for an implementation this CPU lacks
}

}  // namespace
}  // namespace internal

uint64_t Xxh3(const void* data, size_t n) { return internal::Chosen()->oneshot(data, n); }

Xxh3Stream::Xxh3Stream() : impl_(internal::Chosen()) { impl_->reset(state_); }
Xxh3Stream::Xxh3Stream(const std::string& isa) : impl_(internal::Named(isa)) { impl_->reset(state_); }
void Xxh3Stream::Update(const void* data, size_t n) {
  if (n != 0) impl_->update(state_, data, n);
}
uint64_t Xxh3Stream::Digest() const { return impl_->digest(state_); }

const char* Xxh3Isa() { return internal::Chosen()->isa; }

std::vector<std::string> Xxh3Isas() {
  std::vector<std::string> out;
  for (const internal::Xxh3Impl* i : internal::All()) out.emplace_back(i->isa);
  return out;
}

uint64_t Xxh3On(const std::string& isa, const void* data, size_t n) { return internal::Named(isa)->oneshot(data, n); }

}  // namespace kvtier
