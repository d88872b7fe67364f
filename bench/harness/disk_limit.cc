#include "harness/disk_limit.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>

#include "harness/common.h"

namespace kvbench {

uint64_t WrittenBytes(int fd) {
  const off_t hole = ::lseek(fd, 0, SEEK_HOLE);
  if (hole >= 0) return static_cast<uint64_t>(hole);
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

double UringRead(const std::vector<std::string>& files, size_t io, unsigned qd, size_t total, bool sequential) {
  std::vector<int> fds;
  std::vector<uint64_t> sizes;
  for (const auto& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) continue;
    const uint64_t size = WrittenBytes(fd) / io * io;
    if (size < 2 * io) {
      ::close(fd);
      continue;
    }
    fds.push_back(fd);
    sizes.push_back(size);
  }
  auto close_all = [&fds] {
    for (int fd : fds) ::close(fd);
  };
  io_uring ring;
  if (fds.empty() || io_uring_queue_init(qd, &ring, 0) != 0) {
    close_all();
    return 0;
  }
  // On huge pages, as a store's staging is: an O_DIRECT read into 4 KiB
  // pages pins each of them, which on a VM can cost more than the drive.
  AlignedBuf buf(io * qd);
  std::mt19937_64 rng(1);
  size_t issued = 0, done = 0, seq_file = 0;
  uint64_t seq_off = 0;
  unsigned inflight = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (done < total) {
    while (inflight < qd && issued < total) {
      size_t k;
      uint64_t off;
      if (sequential) {
        if (seq_off + io > sizes[seq_file]) {
          seq_file = (seq_file + 1) % fds.size();
          seq_off = 0;
        }
        k = seq_file;
        off = seq_off;
        seq_off += io;
      } else {
        k = rng() % fds.size();
        off = (rng() % (sizes[k] / io)) * io;
      }
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      const unsigned slot = static_cast<unsigned>((issued / io) % qd);
      io_uring_prep_read(sqe, fds[k], buf.data() + slot * io, static_cast<unsigned>(io), off);
      issued += io;
      ++inflight;
    }
    io_uring_submit(&ring);
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring, &cqe) != 0) break;
    const bool ok = cqe->res == static_cast<int>(io);
    io_uring_cqe_seen(&ring, cqe);
    --inflight;
    if (!ok) {  // a failed or short read: no limit rather than a wrong one
      while (inflight > 0 && io_uring_wait_cqe(&ring, &cqe) == 0) {
        io_uring_cqe_seen(&ring, cqe);
        --inflight;
      }
      io_uring_queue_exit(&ring);
      close_all();
      return 0;
    }
    done += io;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  io_uring_queue_exit(&ring);
  close_all();
  return s > 0 ? static_cast<double>(done) / s / 1e9 : 0;
}

double ReplayReads(const std::vector<Extent>& extents, unsigned qd) {
  std::map<std::string, int> fds;
  size_t longest = 0;
  bool ok = !extents.empty();
  for (const Extent& e : extents) {
    longest = std::max(longest, e.len);
    if (fds.count(e.file) != 0) continue;
    const int fd = ::open(e.file.c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) ok = false;
    fds[e.file] = fd;
  }
  auto close_all = [&fds] {
    for (auto& [name, fd] : fds)
      if (fd >= 0) ::close(fd);
  };
  io_uring ring;
  if (!ok || io_uring_queue_init(qd, &ring, 0) != 0) {
    close_all();
    return 0;
  }
  AlignedBuf buf(longest * qd);
  std::vector<unsigned> free_slots;
  for (unsigned s = qd; s-- > 0;) free_slots.push_back(s);
  size_t next = 0, done = 0;
  uint64_t bytes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (done < extents.size()) {
    while (!free_slots.empty() && next < extents.size()) {
      const Extent& e = extents[next];
      const unsigned slot = free_slots.back();
      free_slots.pop_back();
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      io_uring_prep_read(sqe, fds[e.file], buf.data() + slot * longest, static_cast<unsigned>(e.len), e.offset);
      io_uring_sqe_set_data64(sqe, (uint64_t{slot} << 32) | static_cast<uint32_t>(e.len));
      ++next;
    }
    io_uring_submit(&ring);
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring, &cqe) != 0) break;
    const uint64_t tag = io_uring_cqe_get_data64(cqe);
    const bool good = cqe->res == static_cast<int>(static_cast<uint32_t>(tag));
    io_uring_cqe_seen(&ring, cqe);
    free_slots.push_back(static_cast<unsigned>(tag >> 32));
    if (!good) {
      ok = false;
      break;
    }
    bytes += static_cast<uint32_t>(tag);
    ++done;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Reads still in flight after a failure land before their buffer goes.
  for (size_t inflight = qd - free_slots.size(); inflight > 0; --inflight) {
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring, &cqe) != 0) break;
    io_uring_cqe_seen(&ring, cqe);
  }
  io_uring_queue_exit(&ring);
  close_all();
  return ok && done == extents.size() && s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0;
}

ReadLimit BestReplay(const std::vector<Extent>& extents) {
  ReadLimit best;
  for (unsigned qd : {1u, 2u, 4u, 8u, 16u, 32u}) {
    const double g = ReplayReads(extents, qd);
    if (g > best.gbps) best = {g, qd, false};
  }
  return best;
}

ReadLimit BestRead(const std::vector<std::string>& files, size_t io, size_t total) {
  ReadLimit best;
  for (bool seq : {false, true})
    for (unsigned qd : {1u, 4u, 16u, 64u}) {
      const double g = UringRead(files, io, qd, total, seq);
      if (g > best.gbps) best = {g, qd, seq};
    }
  return best;
}

}  // namespace kvbench
