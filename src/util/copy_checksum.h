// Copies a payload and computes its XXH3-64 in the same pass: each 64-byte
// stripe is loaded once, folded into the hash and stored. A copy followed by
// a hash (even of data still in the core's cache) leaves the memory system
// idle while the hash runs; fused, the hash's arithmetic hides under the
// copy's loads. The digest equals XXH3_64bits of the bytes copied (and
// Xxh3() of src/util/checksum.h), on every vector unit.
//
// One object per payload, used by one thread at a time. Copy accepts dst ==
// src (Hash): the bytes are then only hashed. The payload's total
// length is given up front because XXH3 hashes its last 64 bytes apart from
// the rest; the pieces passed to Copy must add up to exactly that length
// before Digest is called (a shorter or longer sum is a caller's bug and
// yields a digest that will not match).
#ifndef KVTIER_SRC_UTIL_COPY_CHECKSUM_H_
#define KVTIER_SRC_UTIL_COPY_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/checksum.h"

namespace kvtier {

namespace internal {
// Folds `stripes` 64-byte stripes of src into acc (numbered from `first`, so
// that the 16-stripe block boundaries fall where XXH3 puts them) and stores
// them to dst. dst may equal src.
using CopyStripesFn = void (*)(uint64_t* acc, uint64_t first, uint8_t* dst, const uint8_t* src, size_t stripes,
                               const uint8_t* secret);
struct CopyStripesImpl {
  const char* isa;
  CopyStripesFn copy_stripes;
  CopyStripesFn copy_stripes_streaming;  // non-temporal stores: dst aligned to stream_align
  size_t stream_align;
};
}  // namespace internal

// How the copy writes its destination.
enum class CopyStores {
  kCached,     // ordinary stores: the destination is read again soon, by this core
  kStreaming,  // non-temporal stores where aligned: the destination goes to memory without
               // first being read into the cache; for large copies read by a device or another core
};

// The hash's state between two 64-byte stripes of a long payload (the eight
// accumulators). A payload's hash is a chain of such states, so a copy that
// starts at a mark and ends at the next one, reaching the same state,
// checks its piece exactly as one pass over the whole payload would: pieces
// can be copied and verified by several threads at once, and a wrong mark
// only fails the check, never passes wrong bytes.
struct Xxh3Mark {
  uint64_t acc[8];
  bool operator==(const Xxh3Mark& o) const;
};

class Xxh3Copy {
 public:
  explicit Xxh3Copy(uint64_t total, CopyStores stores = CopyStores::kCached);
  // On a named implementation (tests): one of Xxh3CopyIsas().
  Xxh3Copy(uint64_t total, const std::string& isa, CopyStores stores = CopyStores::kCached);
  // Resumes a payload's hash at byte `offset`, whose state is `mark`: the
  // first Copy is of the bytes from `offset` on. `offset` must be a valid
  // mark offset (MarkOffsetOk).
  Xxh3Copy(uint64_t total, uint64_t offset, const Xxh3Mark& mark, CopyStores stores = CopyStores::kCached);

  // Whether a payload of `total` bytes has a mark at `offset`: a multiple of
  // 64 with the payload's last 64 bytes after it (they are hashed apart).
  static bool MarkOffsetOk(uint64_t total, uint64_t offset) {
    return total > 240 && offset % 64 == 0 && offset + 64 <= total;
  }
  // From here on, appends the state at every `every` bytes of the payload
  // (a multiple of 64) that the copy passes to *marks, in order, where
  // MarkOffsetOk. Call before the first Copy; *marks outlives the copy.
  void RecordMarks(uint64_t every, std::vector<Xxh3Mark>* marks);
  // The state after the bytes copied so far, which must end on a mark.
  [[nodiscard]] Xxh3Mark State() const;
  // The state of every payload at offset 0.
  static Xxh3Mark InitialMark();

  // Copies the payload's next n bytes from src to dst (which must not overlap).
  void Copy(void* dst, const void* src, size_t n);
  // Hashes the payload's next n bytes where they are (landed there by
  // another copier, such as the kernel), marks included.
  void Hash(void* data, size_t n) { Copy(data, data, n); }
  // XXH3_64bits of everything copied.
  [[nodiscard]] uint64_t Digest() const;

 private:
  void CopyLong(uint8_t* dst, const uint8_t* src, size_t n);
  void CopyStripes(uint8_t* dst, const uint8_t* src, size_t stripes, bool stream);
  void MaybeMark();

  const internal::CopyStripesImpl* impl_;
  bool stream_;
  uint64_t total_;
  uint64_t done_ = 0;
  uint64_t stripes_ = 0;     // folded into acc_ so far
  uint64_t loop_stripes_;    // stripes XXH3 folds before its last one
  size_t pend_n_ = 0;        // bytes of a stripe not yet complete
  alignas(64) uint64_t acc_[8];
  alignas(64) uint8_t pend_[64];
  alignas(64) uint8_t tail_[64];  // the payload's last 64 bytes
  Xxh3Stream short_;              // payloads too short for XXH3's long form
  std::vector<Xxh3Mark>* marks_ = nullptr;
  uint64_t mark_stripes_ = 0;  // stripes between marks
};

// "avx512", "avx2" (where the CPU has them) and "scalar", the preferred first.
std::vector<std::string> Xxh3CopyIsas();

}  // namespace kvtier

#endif  // KVTIER_SRC_UTIL_COPY_CHECKSUM_H_
