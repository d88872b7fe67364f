#include "log/write_ring.h"

#include <sys/mman.h>

#include <cerrno>

namespace kvtier {

WriteRing::~WriteRing() {
  if (base_ != nullptr) munmap(base_, capacity_);
}

Status WriteRing::Init(uint64_t capacity) {
  capacity_ = (capacity + (1ull << 20) - 1) & ~((1ull << 20) - 1);
  void* p = mmap(nullptr, capacity_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    capacity_ = 0;
    return Status::FromErrno(errno, "mmap write ring");
  }
  base_ = static_cast<uint8_t*>(p);
  return Status::OK();
}

WriteRing::Allocation WriteRing::Allocate(uint64_t bytes) {
  Allocation a;
  if (bytes == 0 || bytes > capacity_ || used_ + bytes > capacity_) return a;
  if (used_ == 0) head_ = tail_ = 0;
  // Live data is [tail, head) when not wrapped, else [tail, cap) + [0, head).
  bool wrapped = head_ < tail_ || (used_ > 0 && head_ == tail_);
  if (!wrapped) {
    if (capacity_ - head_ >= bytes) {
      a.offset = head_;
      a.charged = bytes;
    } else if (tail_ >= bytes) {  // skip the end gap and start over at 0
      a.offset = 0;
      a.charged = (capacity_ - head_) + bytes;
    } else {
      return a;
    }
  } else {
    if (tail_ - head_ < bytes) return a;
    a.offset = head_;
    a.charged = bytes;
  }
  a.bytes = bytes;
  a.data = base_ + a.offset;
  head_ = a.offset + bytes;
  if (head_ == capacity_) head_ = 0;
  used_ += a.charged;
  return a;
}

void WriteRing::Release(const Allocation& a) {
  used_ -= a.charged;
  tail_ = a.offset + a.bytes;
  if (tail_ == capacity_) tail_ = 0;
  if (used_ == 0) head_ = tail_ = 0;
}

}  // namespace kvtier
