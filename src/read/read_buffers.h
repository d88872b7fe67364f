// The bounce buffers of one reader thread. Records up to a slot's size are
// read into a slab of fixed-size slots on transparent huge pages, registered
// with the thread's io_uring, so a small read neither pins pages nor fills
// the device's request with one segment per 4 KiB page; larger records use
// heap buffers kept for reuse (on huge pages from 2 MiB up).
//
// Not thread-safe: one per reader thread, used with that thread's IoQueue.
#ifndef KVTIER_SRC_READ_READ_BUFFERS_H_
#define KVTIER_SRC_READ_READ_BUFFERS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvtier/io.h"
#include "util/aligned_buffer.h"

namespace kvtier {

class ReadBuffers {
 public:
  // `slots` slab slots of `slot_bytes` (rounded up to 4 KiB). Without the
  // slab (mapping refused) every buffer comes from the heap.
  ReadBuffers(size_t slots, size_t slot_bytes);
  ~ReadBuffers();
  ReadBuffers(const ReadBuffers&) = delete;
  ReadBuffers& operator=(const ReadBuffers&) = delete;

  // Whether slots were used since the last Register (the reader registers
  // when idle, only what it has used: pinning fresh memory holds the mmap
  // lock, see docs/ram_tier.md).
  bool NeedsRegister() const { return RegisterBytes() > registered_; }
  // Registers the used part of the slab with `queue`, in whole 2 MiB pages:
  // best effort, as IoQueue promises.
  void Register(IoQueue* queue);
  // A page-aligned buffer of at least `bytes` for the b-th read of a batch,
  // valid until the next Get with the same b; nullptr when out of memory.
  uint8_t* Get(size_t b, size_t bytes);
  // Whether Get(b, bytes) is served from the slab.
  bool InSlab(size_t b, size_t bytes) const { return slab_ != nullptr && b < slots_ && bytes <= slot_bytes_; }
  // Whether Get(b, bytes) would keep the heap buffers within `budget` bytes
  // in all: a bounce that is a choice (not a must) asks first, so that large
  // blocks cannot make each reader keep queue_depth copies of them.
  bool BounceFits(size_t b, size_t bytes, size_t budget) const;

 private:
  size_t RegisterBytes() const;

  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  uint8_t* slab_ = nullptr;
  size_t slots_ = 0;
  size_t slot_bytes_ = 0;
  size_t used_slots_ = 0;  // 1 + the highest slot handed out
  size_t registered_ = 0;  // bytes of the slab registered
  std::vector<AlignedBuffer> heap_;
  size_t heap_bytes_ = 0;  // the sizes of heap_ in all
};

}  // namespace kvtier

#endif  // KVTIER_SRC_READ_READ_BUFFERS_H_
