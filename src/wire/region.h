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
// A fresh mapping has no page table entries: the service's first write to
// each 4 KiB page of a client's memory is a fault, paid by the first loads
// after a registration. PopulateStep maps the pages the file already holds
// ahead of them, a step at a time; it never allocates the file's holes (a
// client cannot make the service take memory it did not give).
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

  // Maps the pages the file holds in [offset, offset + kPopulateStep) into
  // this mapping (MADV_POPULATE_WRITE), adding their bytes to *populated.
  // False where the kernel cannot: the pages are then faulted in by use.
  static constexpr uint64_t kPopulateStep = 64ull << 20;
  bool PopulateStep(uint64_t offset, uint64_t* populated) const;

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
