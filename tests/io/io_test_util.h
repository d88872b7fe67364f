// Helpers shared by the io tests: a scratch directory and aligned buffers.
#ifndef KVTIER_TESTS_IO_IO_TEST_UTIL_H_
#define KVTIER_TESTS_IO_IO_TEST_UTIL_H_

#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

namespace kvtier::testing {

// A fresh directory under /tmp, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kvtier_io_test_XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    path_ = p != nullptr ? p : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// 4 KiB-aligned heap memory (posix_memalign), as O_DIRECT needs.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t size) : size_(size) {
    if (::posix_memalign(&data_, 4096, size == 0 ? 4096 : size) != 0) data_ = nullptr;
  }
  ~AlignedBuffer() { ::free(data_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  char* data() const { return static_cast<char*>(data_); }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_;
};

// Fills [p, p+n) with bytes from `rng`.
inline void FillRandom(std::mt19937_64& rng, char* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  if (i < n) {
    const uint64_t v = rng();
    std::memcpy(p + i, &v, n - i);
  }
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_IO_IO_TEST_UTIL_H_
