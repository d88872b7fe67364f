// A small client over librados for the shared tier: every call is
// asynchronous underneath and bounded by a deadline, so a slow or dead
// cluster turns into TimedOut, never a hang. The C API serves everything but
// the uploads' writes, which go through the C++ API so that librados sends a
// WriteBuffer's bytes without copying them (the C API copies every write).
//
// - ReadAsync: ranged reads into a buffer the client owns; the callback runs
//   once, on a librados thread or the client's timer thread. After a
//   deadline the op is cancelled and the callback has already run with
//   TimedOut: late bytes go nowhere.
// - AsyncWrites: object writes kept in flight by an uploader, each bounded
//   by op_timeout from its start; from a WriteBuffer without a copy.
// - The blocking helpers (WriteObject, Remove, omap, ReadWhole) are for
//   background threads; each waits at most op_timeout, then cancels.
//
// Errors: NotFound when the object does not exist (ENOENT), TimedOut,
// IOError for other librados errors (with the errno text and object name).
// Thread-safe. The destructor cancels what is in flight and waits for the
// callbacks before disconnecting.
#ifndef KVTIER_SRC_REMOTE_RADOS_CLIENT_H_
#define KVTIER_SRC_REMOTE_RADOS_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::remote {

class RadosClient {
 public:
  using Clock = std::chrono::steady_clock;
  struct Config {
    std::string conf_path;  // empty: librados' default search
    std::string client_id = "admin";
    std::string pool;
    std::string rados_namespace;
    uint32_t op_timeout_ms = 10000;
  };
  // Connects (bounded by op_timeout) and opens the pool.
  static Result<std::unique_ptr<RadosClient>> Connect(const Config& c);
  ~RadosClient();
  RadosClient(const RadosClient&) = delete;
  RadosClient& operator=(const RadosClient&) = delete;

  // A piece of a read: `len` bytes at `offset` of `object`, placed at
  // `dst_offset` of the read's buffer.
  struct Piece {
    std::string object;
    uint64_t offset = 0;
    uint64_t len = 0;
    uint64_t dst_offset = 0;
  };
  // Reads every piece into one buffer of `total` bytes. `done` gets OK and
  // the buffer (valid during the call only) when every piece read in full;
  // NotFound when an object is missing; Corruption when one is short;
  // TimedOut at `deadline`.
  using ReadDone = std::function<void(Status, const uint8_t* data, size_t len)>;
  void ReadAsync(std::vector<Piece> pieces, uint64_t total, Clock::time_point deadline, ReadDone done);

  class AsyncWrites;
  class WriteBuffer;

  // Writes data[0, len) as the whole object `object` in chunks of
  // `chunk` bytes, up to `window` in flight (the first chunk replaces the
  // object's contents, the rest follow).
  Status WriteObject(const std::string& object, const uint8_t* data, size_t len, size_t chunk,
                     unsigned window);
  // Reads the whole object of `size` bytes (NotFound when absent).
  Result<std::string> ReadWhole(const std::string& object, uint64_t size);
  // Removes the object; OK when it was already gone.
  Status Remove(const std::string& object);
  Status OmapSet(const std::string& object, const std::string& key, const std::string& value);
  Status OmapRemove(const std::string& object, const std::vector<std::string>& keys);
  // Every omap pair of the object in key order (none when it is absent).
  Result<std::vector<std::pair<std::string, std::string>>> OmapList(const std::string& object);
  // Names of the objects in the client's RADOS namespace. librados has no
  // asynchronous listing: each step is bounded by rados_osd_op_timeout.
  Result<std::vector<std::string>> ListObjects();
  // The object's modification time, in seconds since the epoch.
  Result<int64_t> ModifiedUnixSeconds(const std::string& object);

 private:
  struct Impl;
  explicit RadosClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Memory that librados sends from without copying: the client and librados
// share it by reference count, so it lives until both are done with it.
// Fill it only while HeldByCluster() is false: a write that was waited for
// after its deadline may still be queued to go out, and its bytes must not
// change under it (take a fresh buffer instead). 4 KiB aligned, so direct
// reads may land in it. Move-only; one thread at a time.
class RadosClient::WriteBuffer {
 public:
  // IOError when the memory cannot be had.
  [[nodiscard]] static Result<WriteBuffer> Allocate(size_t len);
  WriteBuffer();
  ~WriteBuffer();
  WriteBuffer(WriteBuffer&&) noexcept;
  WriteBuffer& operator=(WriteBuffer&&) noexcept;

  uint8_t* data();
  size_t size() const;
  // True while a write started from it is still held by librados.
  bool HeldByCluster() const;

 private:
  friend class AsyncWrites;
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

// Writes in flight at once, for one thread that uploads: Start() issues one
// and returns its ticket; Wait(ticket) waits for that write, Drain() for all.
// The caller bounds how many are in flight (by reusing a ring of buffers,
// each waited for before it is refilled). A write's data must stay valid
// until it was waited for. The first failure sticks: later Starts issue
// nothing and every call returns it. The destructor drains.
class RadosClient::AsyncWrites {
 public:
  explicit AsyncWrites(RadosClient* client);
  ~AsyncWrites();
  AsyncWrites(const AsyncWrites&) = delete;
  AsyncWrites& operator=(const AsyncWrites&) = delete;

  // Writes data[0, len) at `offset` of `object`; `replace`: as the object's
  // whole contents (rados write_full, offset 0).
  [[nodiscard]] Result<uint64_t> Start(const std::string& object, const uint8_t* data, size_t len, uint64_t offset,
                                       bool replace);
  // The same for buf[0, len), sent without a copy: librados holds the
  // buffer until it is done with it, past Wait when the write timed out.
  [[nodiscard]] Result<uint64_t> Start(const std::string& object, const WriteBuffer& buf, size_t len, uint64_t offset,
                                       bool replace);
  // OK once the write finished well (or was waited for before).
  [[nodiscard]] Status Wait(uint64_t ticket);
  [[nodiscard]] Status Drain();

 private:
  struct Op;
  RadosClient* const c_;
  std::vector<std::unique_ptr<Op>> ops_;  // not yet waited for, by ticket
  uint64_t next_ = 1;
  Status first_error_;
};

}  // namespace kvtier::remote

#endif  // KVTIER_SRC_REMOTE_RADOS_CLIENT_H_
