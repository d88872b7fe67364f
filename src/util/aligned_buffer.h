// A page-aligned heap buffer for O_DIRECT I/O. Owns its memory; movable.
#ifndef KVTIER_SRC_UTIL_ALIGNED_BUFFER_H_
#define KVTIER_SRC_UTIL_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sys/mman.h>
#include <utility>

namespace kvtier {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // size is rounded up to a multiple of `align`. Contents are uninitialised.
  explicit AlignedBuffer(size_t size, size_t align = 4096) { Reset(size, align); }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Returns false when memory could not be allocated (the buffer is then empty).
  bool Reset(size_t size, size_t align = 4096) {
    std::free(data_);
    data_ = nullptr;
    size_ = 0;
    size_t rounded = (size + align - 1) / align * align;
    if (rounded == 0) return true;
    void* p = nullptr;
    if (posix_memalign(&p, align, rounded) != 0) return false;
    data_ = static_cast<uint8_t*>(p);
    size_ = rounded;
    return true;
  }
  // Reset on 2 MiB boundaries, rounded up to 2 MiB, advised for transparent
  // huge pages (a hint: one device segment and one fault per 2 MiB where the
  // kernel has them).
  bool ResetHuge(size_t size) {
    if (!Reset(size, kHugeBytes)) return false;
    if (data_ != nullptr) madvise(data_, size_, MADV_HUGEPAGE);
    return true;
  }
  static constexpr size_t kHugeBytes = size_t{2} << 20;
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_UTIL_ALIGNED_BUFFER_H_
