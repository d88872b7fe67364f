// The one seam through which kvtier touches files.
//
// Every byte kvtier reads or writes, every fsync, rename, directory sync and
// lock goes through a FileSystem. The default (DefaultFileSystem) talks to the
// kernel with io_uring when it is available and pread/pwrite otherwise; tests
// substitute wrappers that inject errors or simulate power loss.
//
// Contract
// - All paths are absolute or relative to the process's working directory.
// - Files are opened without following symlinks in the final component
//   (O_NOFOLLOW); a symlink yields an IOError naming the path.
// - A File is safe to use from several threads at once for positional I/O.
//   IoQueue is NOT thread-safe: one queue per thread (like one ring per thread).
// - Short reads/writes never surface as success: ReadAt/WriteAt either transfer
//   exactly `n` bytes or return an error (a read past end of file is
//   Corruption, "short read").
// - Errors carry the path and the errno text.
#ifndef KVTIER_IO_H_
#define KVTIER_IO_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

class File {
 public:
  File();
  virtual ~File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  // A number no other File of this process has had or will have. Queues key
  // per-file state (a registered descriptor) by it: descriptor numbers are
  // reused by the kernel as soon as a file is closed.
  uint64_t uid() const { return uid_; }
  virtual const std::string& path() const = 0;
  // Reads exactly n bytes at offset into buf. With direct I/O, buf, offset and
  // n must be multiples of read_align() (the caller guarantees it).
  virtual Status ReadAt(uint64_t offset, void* buf, size_t n) = 0;
  // Reads the bytes at offset into `pieces`, one after another, as ReadAt
  // would into one buffer (the same alignment rules for each piece). Files
  // of the kernel do it as one request (preadv); the default reads piece by
  // piece.
  virtual Status ReadAtV(uint64_t offset, std::span<const iovec> pieces) {
    for (const iovec& p : pieces) {
      if (p.iov_len == 0) continue;
      Status s = ReadAt(offset, p.iov_base, p.iov_len);
      if (!s.ok()) return s;
      offset += p.iov_len;
    }
    return Status::OK();
  }
  // Writes exactly n bytes at offset. Not durable until Sync() returns OK.
  virtual Status WriteAt(uint64_t offset, const void* buf, size_t n) = 0;
  // fdatasync: data written before the call is durable when it returns OK.
  // After a failed Sync the written data must be treated as lost.
  virtual Status Sync() = 0;
  // Reserves [offset, offset+len) (fallocate mode 0). Not durable until Sync.
  virtual Status Allocate(uint64_t offset, uint64_t len) = 0;
  // Releases [offset, offset+len) to the device (punch hole, keep size). Reads
  // of the range return zeros afterwards. NotSupported where the file system
  // cannot; callers treat that as a no-op.
  virtual Status PunchHole(uint64_t offset, uint64_t len) = 0;
  virtual Result<uint64_t> Size() = 0;
  virtual Status Truncate(uint64_t size) = 0;
  // The kernel descriptor, or -1 for files that have none (simulations).
  virtual int fd() const { return -1; }
  // The descriptor to mmap the file by (the RAM tier's shared-memory file),
  // or -1 where it cannot be mapped. A wrapper that only watches calls, like
  // fault injection, passes its base's through; a simulation of the disk
  // has none, so what it wraps is never mapped past it.
  virtual int map_fd() const { return fd(); }
  virtual bool direct() const { return false; }
  // The granule of reads that always works: offset, length and buffer
  // address multiples of it. A power of two from 512 to 4096; 4096 unless
  // the file says less (a direct file on a device of 512-byte sectors, where
  // a small record then costs one read of its sectors instead of its pages).
  virtual uint32_t read_align() const { return 4096; }

 private:
  const uint64_t uid_;
};

// One batched I/O on an IoQueue.
struct IoRequest {
  enum class Op : uint8_t { kRead, kWrite };
  Op op = Op::kRead;
  File* file = nullptr;
  uint64_t offset = 0;
  void* buf = nullptr;  // for writes the bytes are only read
  size_t len = 0;
  Status status;        // filled in by the queue
  // Optional: called once, on the queue's thread inside Submit or Reap, as
  // soon as this request's status is final, so a caller can act on early
  // completions while the rest is still in flight. It may Enqueue more
  // requests, but not call Submit or Reap.
  void (*on_done)(IoRequest&) = nullptr;
  void* user = nullptr;  // for on_done
  // Reads only: when set, the `len` bytes at `offset` land in these pieces in
  // order (their sizes add up to `len`; `buf` is unused), as one request to
  // the device. A record whose header page goes to a bounce buffer and whose
  // payload goes to the caller's pages is then one read, not two: without a
  // plug, two adjacent requests reach the device apart and it serves each.
  // The array must stay valid until the request is final.
  const iovec* iov = nullptr;
  unsigned iovcnt = 0;
};

// A submission queue owned by one thread: io_uring ring, or a loop of
// pread/pwrite with identical results.
//
// Two ways to use it. Batch: Submit hands over a batch and returns when all
// of it is done. Streaming, for a thread that keeps the device busy while
// new work arrives: Enqueue requests as they come and call Reap, which
// returns as soon as some of them finished, so their slots can be refilled
// without waiting for the slowest request of a batch.
// What a queue reports of its own work (zeros from a backend that does not
// count it: the posix queue registers no buffers).
struct IoQueueStats {
  uint64_t requests = 0;                  // requests issued
  uint64_t registered_buffer_requests = 0;  // ... of which used a registered buffer
};

class IoQueue {
 public:
  // Requests still outstanding when a queue is destroyed are cancelled
  // where the kernel can and otherwise waited for (it is done with their
  // buffers when the destructor returns); their on_done is not run.
  virtual ~IoQueue() = default;
  // Issues every request (keeping up to depth() in flight), waits for all of
  // them, and sets each request's status. Returns OK when all succeeded, else
  // the first failure (the others' statuses are still filled in). Requests
  // enqueued earlier and still outstanding are waited for too.
  virtual Status Submit(std::span<IoRequest> requests) = 0;
  // Streaming: hands `request` to the queue. It must stay alive and unmoved
  // until its on_done has run; on_done never runs inside Enqueue, only
  // inside Reap or Submit.
  virtual void Enqueue(IoRequest* request) = 0;
  // Issues what fits in depth(), then waits (when `wait` and requests are
  // outstanding) until at least one of them is final; runs on_done for each
  // request that became final and returns how many did. With `wait` false
  // it only collects what is already done.
  virtual size_t Reap(bool wait) = 0;
  // Enqueued requests whose on_done has not run yet.
  virtual size_t Outstanding() const = 0;
  // Registers memory regions for fixed-buffer I/O. Requests whose buffer lies
  // in registered regions use them (a request crossing from one region into
  // the next may run in parts). Best effort: an error means the regions are
  // simply used unregistered. Only while nothing is outstanding.
  virtual Status RegisterBuffers(std::span<const iovec> regions) { (void)regions; return Status::OK(); }
  virtual unsigned depth() const = 0;
  // "io_uring" or "posix" (or a test wrapper's name).
  virtual const char* backend() const = 0;
  // Counters since the queue was made. Thread-compatible like the queue.
  virtual IoQueueStats stats() const { return {}; }
};

struct OpenFlags {
  bool create = false;     // O_CREAT
  bool exclusive = false;  // O_EXCL (with create)
  bool read_only = false;  // O_RDONLY instead of O_RDWR
  bool direct = false;     // O_DIRECT; falls back to buffered if the fs refuses, see File::direct()
  unsigned mode = 0600;    // permission bits for new files, set whatever the umask
};

// An advisory whole-store lock (flock). Released when destroyed.
class FileLock {
 public:
  virtual ~FileLock() = default;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  virtual Result<std::unique_ptr<File>> Open(const std::string& path, OpenFlags flags) = 0;
  // OK if it exists; a new folder gets exactly `mode`, whatever the umask,
  // and an existing one this user owns gains the bits of `mode` it lacks.
  virtual Status CreateDir(const std::string& path, unsigned mode) = 0;
  virtual Status SyncDir(const std::string& path) = 0;
  // Atomically replaces `to` with `from` (rename(2)). Durable after SyncDir.
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Status Remove(const std::string& path) = 0;
  virtual Result<bool> Exists(const std::string& path) = 0;
  // Names (not paths) of the entries of a directory, without "." and "..".
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;
  // Takes an exclusive (or shared) flock on `path`, creating it with `mode`.
  // When the lock is held elsewhere, returns Busy. With exclusive locks the
  // holder's pid is written into the file and named in the error: "store is
  // in use by pid N".
  virtual Result<std::unique_ptr<FileLock>> Lock(const std::string& path, bool exclusive, unsigned mode) = 0;
  // Whether a process holds the lock on `path`, without taking it or
  // creating or changing the file: the holder's pid (0 when it wrote none),
  // or nullopt when nobody holds it or the file does not exist.
  virtual Result<std::optional<long>> LockHolder(const std::string& path) = 0;
  // Bytes free to unprivileged users on the file system holding `path`.
  virtual Result<uint64_t> FreeSpace(const std::string& path) = 0;
  // A queue for batched I/O on files of this FileSystem; one per thread.
  virtual Result<std::unique_ptr<IoQueue>> NewIoQueue(unsigned depth) = 0;
  // Name of the backend NewIoQueue hands out: "io_uring" or "posix".
  virtual std::string IoBackendName() const = 0;
};

enum class IoBackend : uint8_t {
  kAuto,     // io_uring when the kernel allows it, else posix
  kIoUring,  // io_uring or fail at Open with NotSupported
  kPosix,    // pread/pwrite
};

// The kernel-backed file system. kAuto probes io_uring once (it can be
// disabled by sysctl or seccomp) and picks posix when it is unavailable.
// Thread-safe; share one instance.
std::shared_ptr<FileSystem> DefaultFileSystem(IoBackend backend = IoBackend::kAuto);

// True when io_uring_setup succeeds in this process.
bool IoUringAvailable();

}  // namespace kvtier

#endif  // KVTIER_IO_H_
