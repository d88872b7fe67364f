#include "io/posix_file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "io/io_errors.h"
#include "io/posix_io_queue.h"
#include "io/uring_queue.h"

namespace kvtier {

namespace {

// Kernel transfers stop at about 2 GiB per call anyway; asking for less keeps
// the arithmetic inside ssize_t everywhere.
constexpr size_t kMaxPerCall = size_t{1} << 30;

// What reads of a file need to be aligned to: the file system's direct-I/O
// granule where it reports one (statx STATX_DIOALIGN, Linux 6.1 on), else a
// page. Buffered reads take any alignment; 512 keeps the arithmetic the same.
uint32_t ReadAlignOf(int fd, bool direct) {
  if (!direct) return 512;
  struct statx sx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) != 0 || (sx.stx_mask & STATX_DIOALIGN) == 0) return 4096;
  const uint32_t a = std::max(sx.stx_dio_offset_align, sx.stx_dio_mem_align);
  // Anything outside 512..4096 or not a power of two: the page, as before.
  if (a < 512 || a > 4096 || (a & (a - 1)) != 0) return 4096;
  return a;
}

int RetryOnEintr(int (*fn)(int), int fd) {
  int r;
  do {
    r = fn(fd);
  } while (r < 0 && errno == EINTR);
  return r;
}

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd, bool direct)
      : path_(std::move(path)), fd_(fd), direct_(direct), read_align_(ReadAlignOf(fd, direct)) {}
  ~PosixFile() override { ::close(fd_); }

  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  const std::string& path() const override { return path_; }
  int fd() const override { return fd_; }
  bool direct() const override { return direct_; }
  uint32_t read_align() const override { return read_align_; }

  Status ReadAt(uint64_t offset, void* buf, size_t n) override {
    const iovec one{buf, n};
    return ReadAtV(offset, {&one, 1});
  }

  Status ReadAtV(uint64_t offset, std::span<const iovec> pieces) override {
    size_t n = 0;
    for (const iovec& v : pieces) n += v.iov_len;
    // The pieces as given; a copy only once a read stops inside them.
    std::vector<iovec> rest;
    const iovec* at = pieces.data();
    size_t count = pieces.size(), done = 0, first = 0;
    while (done < n) {
      ssize_t r = ::preadv(fd_, at, static_cast<int>(std::min<size_t>(count, IOV_MAX)),
                           static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return TransferError(errno, /*write=*/false, path_, offset, n);
      }
      if (r == 0) return ShortReadError(path_, offset, n, done);
      done += static_cast<size_t>(r);
      // A direct read stops short of a block boundary only at end of file;
      // asking for the rest at an unaligned offset would just fail EINVAL.
      if (direct_ && done < n && done % read_align_ != 0) return ShortReadError(path_, offset, n, done);
      if (done == n) break;
      // Continue where the read stopped (past 2 GiB in one call, a signal).
      if (rest.empty()) {
        rest.assign(at, at + count);
        first = 0;
      }
      for (size_t skip = static_cast<size_t>(r); skip > 0;) {
        const size_t k = std::min(skip, rest[first].iov_len);
        rest[first].iov_base = static_cast<char*>(rest[first].iov_base) + k;
        rest[first].iov_len -= k;
        skip -= k;
        if (rest[first].iov_len == 0) ++first;
      }
      while (first < rest.size() && rest[first].iov_len == 0) ++first;
      at = rest.data() + first;
      count = rest.size() - first;
    }
    return Status::OK();
  }

  Status WriteAt(uint64_t offset, const void* buf, size_t n) override {
    const char* p = static_cast<const char*>(buf);
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pwrite(fd_, p + done, std::min(n - done, kMaxPerCall), static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return TransferError(errno, /*write=*/true, path_, offset, n);
      }
      if (r == 0) return StalledWriteError(path_, offset, n, done);
      done += static_cast<size_t>(r);
    }
    return Status::OK();
  }

  Status Sync() override {
    // Only EINTR is retried: after EIO the kernel may have dropped the dirty
    // pages, so a second fdatasync could "succeed" over lost data.
    if (RetryOnEintr(::fdatasync, fd_) < 0) return Status::FromErrno(errno, "fdatasync " + path_);
    return Status::OK();
  }

  Status Allocate(uint64_t offset, uint64_t len) override {
    if (len == 0) return Status::OK();
    int r;
    do {
      r = ::fallocate(fd_, 0, static_cast<off_t>(offset), static_cast<off_t>(len));
    } while (r < 0 && errno == EINTR);
    if (r == 0) return Status::OK();
    if (errno != EOPNOTSUPP) return Status::FromErrno(errno, "fallocate " + path_ + Range(offset, len));
    // No reservation on this file system; at least make the size right so
    // that later reads of the range see zeros rather than end of file.
    Result<uint64_t> size = Size();
    if (!size.ok()) return size.status();
    if (*size < offset + len) return Truncate(offset + len);
    return Status::OK();
  }

  Status PunchHole(uint64_t offset, uint64_t len) override {
    if (len == 0) return Status::OK();
    int r;
    do {
      r = ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                      static_cast<off_t>(len));
    } while (r < 0 && errno == EINTR);
    if (r == 0) return Status::OK();
    if (errno == EOPNOTSUPP) {
      return Status::NotSupported("punch hole " + path_ + ": " + std::strerror(errno));
    }
    return Status::FromErrno(errno, "punch hole " + path_ + Range(offset, len));
  }

  Result<uint64_t> Size() override {
    struct stat st;
    if (::fstat(fd_, &st) < 0) return Status::FromErrno(errno, "fstat " + path_);
    return static_cast<uint64_t>(st.st_size);
  }

  Status Truncate(uint64_t size) override {
    int r;
    do {
      r = ::ftruncate(fd_, static_cast<off_t>(size));
    } while (r < 0 && errno == EINTR);
    if (r < 0) return Status::FromErrno(errno, "ftruncate " + path_ + " to " + std::to_string(size));
    return Status::OK();
  }

 private:
  static std::string Range(uint64_t offset, uint64_t len) {
    return " [" + std::to_string(offset) + ", +" + std::to_string(len) + ")";
  }

  const std::string path_;
  const int fd_;
  const bool direct_;
  const uint32_t read_align_;
};

class PosixFileLock final : public FileLock {
 public:
  PosixFileLock(int fd, bool exclusive) : fd_(fd), exclusive_(exclusive) {}
  ~PosixFileLock() override {
    // Clear our pid while still holding the lock so that nobody later blames
    // this process; closing the last descriptor releases the flock.
    if (exclusive_) (void)!::ftruncate(fd_, 0);
    ::close(fd_);
  }
  PosixFileLock(const PosixFileLock&) = delete;
  PosixFileLock& operator=(const PosixFileLock&) = delete;

 private:
  const int fd_;
  const bool exclusive_;
};

// The pid an exclusive holder wrote into the lock file, or 0 if unreadable.
long ReadLockPid(int fd) {
  char buf[32] = {};
  ssize_t r;
  do {
    r = ::pread(fd, buf, sizeof(buf) - 1, 0);
  } while (r < 0 && errno == EINTR);
  if (r <= 0) return 0;
  char* end = nullptr;
  long pid = std::strtol(buf, &end, 10);
  return (end != buf && pid > 0) ? pid : 0;
}

// A file opened with O_CREAT gets the bits of `mode` the umask took away
// (group write under umask 022 would defeat Options::group_access). Only the
// owner's files are changed, and only by adding bits: a group member opening
// an existing file leaves it as it is.
void EnsureModeBits(int fd, mode_t mode) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_uid != ::geteuid()) return;
  const mode_t want = (st.st_mode | mode) & 07777;
  if ((st.st_mode & 07777) != want) (void)::fchmod(fd, want);
}

}  // namespace

PosixFileSystem::PosixFileSystem(IoBackend backend) : backend_(backend) {}

Result<std::unique_ptr<File>> PosixFileSystem::Open(const std::string& path, OpenFlags flags) {
  int base = O_CLOEXEC | O_NOFOLLOW | (flags.read_only ? O_RDONLY : O_RDWR);
  if (flags.create) base |= O_CREAT | (flags.exclusive ? O_EXCL : 0);
  const mode_t mode = static_cast<mode_t>(flags.mode);
  bool direct = flags.direct;
  int fd;
  do {
    fd = ::open(path.c_str(), base | (direct ? O_DIRECT : 0), mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0 && direct && errno == EINVAL) {
    // The file system refuses O_DIRECT. Linux checks that after creating the
    // file, so an O_EXCL open may already have created it: drop O_EXCL (the
    // first attempt proved nobody else had the name).
    direct = false;
    int retry = base & ~O_EXCL;
    do {
      fd = ::open(path.c_str(), retry, mode);
    } while (fd < 0 && errno == EINTR);
  }
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  struct stat st;
  if (::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
    // A folder opens read-only; every store file is a regular file.
    ::close(fd);
    return Status::InvalidArgument("open " + path + ": not a regular file");
  }
  if (flags.create) EnsureModeBits(fd, mode);
  return std::unique_ptr<File>(new PosixFile(path, fd, direct));
}

Status PosixFileSystem::CreateDir(const std::string& path, unsigned mode) {
  if (::mkdir(path.c_str(), static_cast<mode_t>(mode)) == 0) {
    // The umask may have taken bits away (group write under 022).
    if (::chmod(path.c_str(), static_cast<mode_t>(mode & 07777)) != 0)
      return Status::FromErrno(errno, "chmod " + path);
    return Status::OK();
  }
  const int err = errno;
  if (err == EEXIST) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      // Only the owner changes it, and only by adding bits: a group member,
      // or the owner opening without group access, never locks others out.
      const mode_t want = static_cast<mode_t>((st.st_mode | mode) & 07777);
      if (st.st_uid == ::geteuid() && (st.st_mode & 07777) != want && ::chmod(path.c_str(), want) != 0)
        return Status::FromErrno(errno, "chmod " + path);
      return Status::OK();
    }
    return Status::FromErrno(ENOTDIR, "mkdir " + path + " (exists)");
  }
  return Status::FromErrno(err, "mkdir " + path);
}

Status PosixFileSystem::SyncDir(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return Status::FromErrno(errno, "open dir " + path);
  Status s;
  if (RetryOnEintr(::fsync, fd) < 0) s = Status::FromErrno(errno, "fsync dir " + path);
  ::close(fd);
  return s;
}

Status PosixFileSystem::Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) < 0) return Status::FromErrno(errno, "rename " + from + " to " + to);
  return Status::OK();
}

Status PosixFileSystem::Remove(const std::string& path) {
  if (::unlink(path.c_str()) == 0) return Status::OK();
  if (errno == EISDIR) {
    if (::rmdir(path.c_str()) == 0) return Status::OK();
    return Status::FromErrno(errno, "rmdir " + path);
  }
  return Status::FromErrno(errno, "unlink " + path);
}

Result<bool> PosixFileSystem::Exists(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT || errno == ENOTDIR) return false;
  return Status::FromErrno(errno, "stat " + path);
}

Result<std::vector<std::string>> PosixFileSystem::ListDir(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return Status::FromErrno(errno, "opendir " + path);
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    struct dirent* e = ::readdir(dir);
    if (e == nullptr) break;
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    names.emplace_back(e->d_name);
  }
  const int err = errno;
  ::closedir(dir);
  if (err != 0) return Status::FromErrno(err, "readdir " + path);
  std::sort(names.begin(), names.end());
  return names;
}

Result<std::unique_ptr<FileLock>> PosixFileSystem::Lock(const std::string& path, bool exclusive, unsigned mode) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, static_cast<mode_t>(mode));
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return Status::FromErrno(errno, "open lock file " + path);
  EnsureModeBits(fd, static_cast<mode_t>(mode));
  int r;
  do {
    r = ::flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB);
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      const long pid = ReadLockPid(fd);
      ::close(fd);
      const std::string who = pid > 0 ? "pid " + std::to_string(pid) : "another process";
      return Status::Busy("store is in use by " + who + " (lock file " + path + ")");
    }
    ::close(fd);
    return Status::FromErrno(err, "flock " + path);
  }
  if (exclusive) {
    // Best effort: the pid only improves the Busy message others get, and a
    // full disk must not stop the store from opening.
    const std::string line = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, line.data(), line.size(), 0);
  }
  return std::unique_ptr<FileLock>(new PosixFileLock(fd, exclusive));
}

Result<std::optional<long>> PosixFileSystem::LockHolder(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<long>();
    return Status::FromErrno(errno, "open lock file " + path);
  }
  // A shared, non-blocking probe: it fails only while someone holds the
  // exclusive lock, and is dropped at once otherwise.
  int r;
  do {
    r = ::flock(fd, LOCK_SH | LOCK_NB);
  } while (r < 0 && errno == EINTR);
  const int err = r < 0 ? errno : 0;
  std::optional<long> holder;
  if (r == 0) {
    ::flock(fd, LOCK_UN);
  } else if (err == EWOULDBLOCK) {
    holder = ReadLockPid(fd);
  }
  ::close(fd);
  if (r < 0 && err != EWOULDBLOCK) return Status::FromErrno(err, "flock " + path);
  return holder;
}

Result<uint64_t> PosixFileSystem::FreeSpace(const std::string& path) {
  struct statvfs st;
  if (::statvfs(path.c_str(), &st) < 0) return Status::FromErrno(errno, "statvfs " + path);
  return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
}

Result<std::unique_ptr<IoQueue>> PosixFileSystem::NewIoQueue(unsigned depth) {
  if (depth == 0 || depth > kMaxIoQueueDepth) {
    return Status::InvalidArgument("io queue depth " + std::to_string(depth) + " outside [1, " +
                                   std::to_string(kMaxIoQueueDepth) + "]");
  }
  switch (backend_) {
    case IoBackend::kPosix:
      return NewPosixIoQueue(depth);
    case IoBackend::kIoUring:
      if (!IoUringAvailable()) return Status::NotSupported("io_uring unavailable: " + IoUringUnavailableReason());
      return NewUringIoQueue(depth);
    case IoBackend::kAuto:
      if (IoUringAvailable()) {
        Result<std::unique_ptr<IoQueue>> q = NewUringIoQueue(depth);
        if (q.ok()) return q;
      }
      return NewPosixIoQueue(depth);
  }
  return Status::InvalidArgument("unknown io backend");
}

std::string PosixFileSystem::IoBackendName() const {
  switch (backend_) {
    case IoBackend::kPosix: return "posix";
    case IoBackend::kIoUring: return "io_uring";
    case IoBackend::kAuto: return IoUringAvailable() ? "io_uring" : "posix";
  }
  return "posix";
}

std::shared_ptr<FileSystem> DefaultFileSystem(IoBackend backend) {
  // Stateless, so one instance per backend serves the whole process. Never
  // destroyed, so that objects torn down at exit may still use them.
  static const auto* const kAutoFs = new std::shared_ptr<FileSystem>(new PosixFileSystem(IoBackend::kAuto));
  static const auto* const kUringFs = new std::shared_ptr<FileSystem>(new PosixFileSystem(IoBackend::kIoUring));
  static const auto* const kPosixFs = new std::shared_ptr<FileSystem>(new PosixFileSystem(IoBackend::kPosix));
  switch (backend) {
    case IoBackend::kIoUring: return *kUringFs;
    case IoBackend::kPosix: return *kPosixFs;
    case IoBackend::kAuto: break;
  }
  return *kAutoFs;
}

}  // namespace kvtier
