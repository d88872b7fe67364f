// The drive's read limit over a store's own segment files: the best of a
// sweep of O_DIRECT reads (io_uring; random and sequential; queue depth 1, 4,
// 16 and 64), for benches that compare a store's disk path with the drive
// under it (bench/gpu).
#ifndef KVTIER_BENCH_HARNESS_DISK_LIMIT_H_
#define KVTIER_BENCH_HARNESS_DISK_LIMIT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvbench {

// Bytes of the open file `fd` before its first hole (its size when the file
// system cannot tell). kvtier preallocates its segment files, and a read of
// an extent never written returns zeros without reaching the drive: a limit
// that counted those would be too high.
uint64_t WrittenBytes(int fd);

// O_DIRECT reads of `io` bytes, `qd` in flight, over the written part of
// `files`, `total` bytes in all, at random places or file after file. GB/s;
// 0 when no file has two reads' worth or io_uring is unavailable.
double UringRead(const std::vector<std::string>& files, size_t io, unsigned qd, size_t total, bool sequential);

struct ReadLimit {
  double gbps = 0;
  unsigned qd = 0;
  bool sequential = false;
};
// The best UringRead over the sweep, and which point gave it.
ReadLimit BestRead(const std::vector<std::string>& files, size_t io, size_t total);

// One read of the device: a file's bytes [offset, offset + len), page aligned.
struct Extent {
  std::string file;
  uint64_t offset = 0;
  size_t len = 0;
};
// O_DIRECT reads of exactly `extents`, in order, `qd` in flight: a store's
// own reads with nothing of the store around them. GB/s; 0 on any failure.
double ReplayReads(const std::vector<Extent>& extents, unsigned qd);
// The best ReplayReads at queue depth 1, 2, 4, 8, 16 and 32.
ReadLimit BestReplay(const std::vector<Extent>& extents);

}  // namespace kvbench

#endif  // KVTIER_BENCH_HARNESS_DISK_LIMIT_H_
