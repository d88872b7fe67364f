// The write ring: staging memory for records on their way to a segment
// (page aligned, or 8-byte aligned and back to back for dense records). Callers encode a record straight into ring memory (one copy from
// the engine's buffer), the writer thread hands ring memory to the device and
// frees it in the order it was allocated once the group is durable.
//
// One anonymous mapping, so the kernel can register it with io_uring as a
// single fixed buffer; consecutive records that go to consecutive disk
// offsets are consecutive in memory too, and are written with one I/O.
//
// Live allocations form runs (contiguous in memory, freed oldest first); a
// new allocation extends the newest run, or starts a run at the front once
// the front has room for everything in flight, or past the highest run. The
// memory touched thus stays about twice the bytes in flight instead of the
// capacity: the first touch of a page is not free (about 9 us per 4 KiB page
// under the test VM's hypervisor, 2 s for a 256 MiB ring), and a ring sized
// for bursts should not charge that to steady streaming.
//
// Not thread-safe: the store guards it with its queue mutex.
#ifndef KVTIER_SRC_LOG_WRITE_RING_H_
#define KVTIER_SRC_LOG_WRITE_RING_H_

#include <cstddef>
#include <cstdint>
#include <deque>

#include "kvtier/status.h"

namespace kvtier {

class WriteRing {
 public:
  struct Allocation {
    uint8_t* data = nullptr;  // `align`-aligned start of the requested bytes
    uint64_t offset = 0;      // within the ring, including the gap before data
    uint64_t bytes = 0;       // requested bytes plus that gap
  };

  WriteRing() = default;
  ~WriteRing();
  WriteRing(const WriteRing&) = delete;
  WriteRing& operator=(const WriteRing&) = delete;

  // Maps `capacity` bytes (rounded up to 1 MiB) on 2 MiB-aligned memory
  // advised for transparent huge pages.
  Status Init(uint64_t capacity);
  // Contiguous `bytes` starting on an `align` boundary (a power of two up to
  // 4096; `bytes` a multiple of 8), or an Allocation with data == nullptr
  // when the ring cannot hold it now (full, or no gap fits). Allocations of
  // 8-byte alignment follow each other without gaps, so that dense records
  // queued one after another lie back to back in memory as on disk; a page
  // aligned one after them skips to the next page.
  Allocation Allocate(uint64_t bytes, uint64_t align = 4096);
  // Frees the oldest allocation; must be called in allocation order.
  void Release(const Allocation& a);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }  // bytes of live allocations
  // The highest end of any allocation so far: how much has been touched.
  uint64_t touched() const { return touched_; }
  uint8_t* base() const { return base_; }

 private:
  struct Run {
    uint64_t start, end;  // live bytes [start, end)
  };
  static constexpr size_t kMaxRuns = 16;
  bool Free(uint64_t offset, uint64_t bytes) const;

  void* map_ = nullptr;
  uint64_t map_bytes_ = 0;
  uint8_t* base_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t used_ = 0;
  uint64_t touched_ = 0;
  std::deque<Run> runs_;  // oldest first; allocations extend the last
};

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_WRITE_RING_H_
