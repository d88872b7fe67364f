#include "read/read_buffers.h"

#include "format/record.h"

#include <sys/mman.h>
#include <sys/uio.h>

#include <algorithm>

namespace kvtier {

namespace {
constexpr size_t kPage = format::kPage;
constexpr size_t kHuge = AlignedBuffer::kHugeBytes;

// What a heap buffer for `bytes` takes: large ones sit on huge pages (one
// device segment per 2 MiB instead of one per 4 KiB page).
size_t HeapBytes(size_t bytes) {
  const size_t align = bytes >= kHuge ? kHuge : kPage;
  return (bytes + align - 1) / align * align;
}
}  // namespace

ReadBuffers::ReadBuffers(size_t slots, size_t slot_bytes) {
  slot_bytes_ = (slot_bytes + kPage - 1) / kPage * kPage;
  const size_t bytes = (slots * slot_bytes_ + kHuge - 1) / kHuge * kHuge;
  if (bytes == 0) return;
  // One extra huge page to align the slab on one.
  void* p = mmap(nullptr, bytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  map_ = p;
  map_bytes_ = bytes + kHuge;
  slab_ = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1));
  madvise(slab_, bytes, MADV_HUGEPAGE);  // best effort: THP may be off
  slots_ = slots;
}

ReadBuffers::~ReadBuffers() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

size_t ReadBuffers::RegisterBytes() const {
  const size_t used = (used_slots_ * slot_bytes_ + kHuge - 1) / kHuge * kHuge;
  return std::min(used, slots_ * slot_bytes_);
}

void ReadBuffers::Register(IoQueue* queue) {
  if (slab_ == nullptr || !NeedsRegister()) return;
  const iovec region{slab_, RegisterBytes()};
  queue->RegisterBuffers({&region, 1}).IgnoreError();
  registered_ = region.iov_len;
}

bool ReadBuffers::BounceFits(size_t b, size_t bytes, size_t budget) const {
  if (InSlab(b, bytes)) return true;
  const size_t have = b < heap_.size() ? heap_[b].size() : 0;
  if (have >= bytes) return true;
  return heap_bytes_ - have + HeapBytes(bytes) <= budget;
}

uint8_t* ReadBuffers::Get(size_t b, size_t bytes) {
  if (InSlab(b, bytes)) {
    used_slots_ = std::max(used_slots_, b + 1);
    return slab_ + b * slot_bytes_;
  }
  if (heap_.size() <= b) heap_.resize(b + 1);
  if (heap_[b].size() < bytes) {
    heap_bytes_ -= heap_[b].size();
    if (!(bytes >= kHuge ? heap_[b].ResetHuge(bytes) : heap_[b].Reset(bytes))) return nullptr;
    heap_bytes_ += heap_[b].size();
  }
  return heap_[b].data();
}

}  // namespace kvtier
