// DeviceRanges: checks that a call's fragments are memory of one device,
// asking the driver once per allocation instead of once per fragment.
//
// Every byte of a fragment is checked, not only its first: one that runs
// past its allocation is checked again from the allocation's end, so memory
// that is not the device's is refused before a copy could fault the
// caller's context. The first fragment found in an allocation records the
// allocation's address range, and every later fragment inside it needs no
// driver call: a per-layer block's 56 fragments cost one query per KV
// tensor, not one each.
//
// The ranges live for one call only: memory freed and mapped again between
// calls is never trusted from an earlier answer.
//
// Thread safety: one object per call, used by the calling thread.
#ifndef KVTIER_SRC_CUDA_DEVICE_RANGES_H_
#define KVTIER_SRC_CUDA_DEVICE_RANGES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::gpu {

class DeviceRanges {
 public:
  explicit DeviceRanges(int device) : device_(device) {}

  // OK when [p, p + n) is memory of the device (n > 0); else
  // InvalidArgument saying what the memory is instead. Where the driver
  // cannot give an allocation's range, only p itself is checked (the
  // fragments of a block come from the same KV cache).
  [[nodiscard]] Status Check(const void* p, size_t n);

  // Driver queries made so far (TransferStats::pointer_queries).
  uint64_t queries() const { return queries_; }

 private:
  struct Range {
    uintptr_t begin, end;
  };
  // The checked range holding `a`, or null.
  const Range* Find(uintptr_t a) const;
  // Asks the driver about `a`: its allocation's range when it is memory of
  // the device (a range of one byte where the driver gives none).
  Result<Range> Query(uintptr_t a);

  const int device_;
  std::vector<Range> ranges_;  // sorted by begin, disjoint; one per KV tensor
  uint64_t queries_ = 0;
};

}  // namespace kvtier::gpu

#endif  // KVTIER_SRC_CUDA_DEVICE_RANGES_H_
