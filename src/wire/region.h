// SharedRegion: memory two processes map, the way payloads cross between a
// client and the service without passing through the socket.
//
// A client makes its staging area with CreateMemfd: a memfd sized and then
// sealed against shrinking and growing, so the service, once it has mapped it,
// can never be cut short by a truncation (which would fault it with SIGBUS).
// The service maps what a client sends with Map: a regular file or memfd,
// sealed, or unsealed only where the caller says the peer is trusted (the
// same user as the service: a /dev/shm file such as vLLM's CPU tier).
//
// Thread safety: immutable after creation; the bytes are the users' to order.
#ifndef KVTIER_SRC_WIRE_REGION_H_
#define KVTIER_SRC_WIRE_REGION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/status.h"
#include "wire/socket_io.h"

namespace kvtier::wire {

class SharedRegion {
 public:
  // A sealed memfd of `bytes` (rounded up to 2 MiB), mapped read-write.
  static Result<std::shared_ptr<SharedRegion>> CreateMemfd(const std::string& name, uint64_t bytes);
  // Maps `fd` (duplicated; the caller keeps its own), checked as above.
  static Result<std::shared_ptr<SharedRegion>> Map(int fd, bool trusted, uint64_t max_bytes);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_.get(); }
  // Whether [offset, offset+n) lies inside the region (overflow-safe).
  bool Contains(uint64_t offset, uint64_t n) const { return offset <= size_ && n <= size_ - offset; }

 private:
  static Result<std::shared_ptr<SharedRegion>> CreateMemfdOf(const std::string& name, uint64_t bytes, bool huge);
  SharedRegion(UniqueFd fd, uint8_t* data, uint64_t size) : fd_(std::move(fd)), data_(data), size_(size) {}
  UniqueFd fd_;
  uint8_t* data_;
  uint64_t size_;
};

}  // namespace kvtier::wire

#endif  // KVTIER_SRC_WIRE_REGION_H_
