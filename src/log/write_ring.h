// The write ring: page-aligned staging memory for records on their way to a
// segment. Callers encode a record straight into ring memory (one copy from
// the engine's buffer), the writer thread hands ring memory to the device and
// frees it in the order it was allocated once the group is durable.
//
// One anonymous mapping, so the kernel can register it with io_uring as a
// single fixed buffer; consecutive records that go to consecutive disk
// offsets are consecutive in memory too, and are written with one I/O.
//
// Not thread-safe: the store guards it with its queue mutex.
#ifndef KVTIER_SRC_LOG_WRITE_RING_H_
#define KVTIER_SRC_LOG_WRITE_RING_H_

#include <cstddef>
#include <cstdint>

#include "kvtier/status.h"

namespace kvtier {

class WriteRing {
 public:
  struct Allocation {
    uint8_t* data = nullptr;
    uint64_t offset = 0;  // within the ring
    uint64_t bytes = 0;   // requested bytes
    uint64_t charged = 0; // bytes + any end-of-ring gap skipped to fit it
  };

  WriteRing() = default;
  ~WriteRing();
  WriteRing(const WriteRing&) = delete;
  WriteRing& operator=(const WriteRing&) = delete;

  // Maps `capacity` bytes (rounded up to 1 MiB).
  Status Init(uint64_t capacity);
  // Contiguous `bytes` (a multiple of 4096), or an Allocation with data ==
  // nullptr when the ring cannot hold it now.
  Allocation Allocate(uint64_t bytes);
  // Frees the oldest allocation; must be called in allocation order.
  void Release(const Allocation& a);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  uint8_t* base() const { return base_; }

 private:
  uint8_t* base_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t head_ = 0;  // next allocation starts here
  uint64_t tail_ = 0;  // oldest live allocation starts here
  uint64_t used_ = 0;  // charged bytes live
};

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_WRITE_RING_H_
