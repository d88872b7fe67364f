// The kernel-backed FileSystem (what DefaultFileSystem returns).
//
// Files are opened O_CLOEXEC|O_NOFOLLOW; with OpenFlags::direct also O_DIRECT,
// reopened buffered when the file system refuses it (File::direct() says
// which). Positional I/O loops over pread/pwrite until every byte moved, retrying
// EINTR. Errors name the path and carry strerror.
//
// Thread safety: PosixFileSystem and PosixFile are safe to share between
// threads; the IoQueues they hand out are one per thread.
#ifndef KVTIER_IO_POSIX_FILE_SYSTEM_H_
#define KVTIER_IO_POSIX_FILE_SYSTEM_H_

#include <memory>
#include <string>
#include <vector>

#include "kvtier/io.h"

namespace kvtier {

// Largest queue depth NewIoQueue accepts (io_uring's IORING_MAX_ENTRIES).
inline constexpr unsigned kMaxIoQueueDepth = 32768;

class PosixFileSystem final : public FileSystem {
 public:
  // `backend` picks what NewIoQueue hands out:
  //   kPosix   - a pread/pwrite loop;
  //   kIoUring - an io_uring queue, or NotSupported("io_uring unavailable: ...")
  //              when the kernel refuses io_uring (files still work);
  //   kAuto    - io_uring when IoUringAvailable(), else posix; also posix when
  //              a ring cannot be created for this queue (e.g. memory limits).
  explicit PosixFileSystem(IoBackend backend = IoBackend::kAuto);

  Result<std::unique_ptr<File>> Open(const std::string& path, OpenFlags flags) override;
  // Not recursive: the parent must exist. IOError if `path` exists and is not
  // a directory.
  Status CreateDir(const std::string& path, unsigned mode) override;
  Status SyncDir(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  // unlink, or rmdir for an (empty) directory. NotFound when absent.
  Status Remove(const std::string& path) override;
  // True when a directory entry exists (a dangling symlink counts).
  Result<bool> Exists(const std::string& path) override;
  // Sorted by name.
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Result<std::unique_ptr<FileLock>> Lock(const std::string& path, bool exclusive, unsigned mode) override;
  Result<std::optional<long>> LockHolder(const std::string& path) override;
  Result<uint64_t> FreeSpace(const std::string& path) override;
  // `depth` must be in [1, kMaxIoQueueDepth] (InvalidArgument otherwise).
  Result<std::unique_ptr<IoQueue>> NewIoQueue(unsigned depth) override;
  std::string IoBackendName() const override;

 private:
  const IoBackend backend_;
};

}  // namespace kvtier

#endif  // KVTIER_IO_POSIX_FILE_SYSTEM_H_
