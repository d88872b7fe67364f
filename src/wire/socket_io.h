// Frames over a Unix stream socket: whole frames out (with file descriptors
// as SCM_RIGHTS; FrameReader takes them in), and the peer's credentials.
// Every call is bounded: a peer that stops reading mid-frame fails the call
// at the socket's timeout, never hangs it.
//
// Thread safety: one sender and one receiver at a time per socket (the
// callers serialise their own side).
#ifndef KVTIER_SRC_WIRE_SOCKET_IO_H_
#define KVTIER_SRC_WIRE_SOCKET_IO_H_

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"
#include "wire/wire.h"

namespace kvtier::wire {

// Owns a file descriptor; closes it when destroyed.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd();
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.Release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  int Release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct Frame {
  FrameHeader header;
  std::string body;
  std::vector<UniqueFd> fds;  // at most kMaxFdsPerFrame
};
inline constexpr size_t kMaxFdsPerFrame = 4;

// Sends whole frames (one after the other, as one writev where they fit),
// `fds` with the first byte. IOError when the peer is gone ("EPIPE"), TimedOut
// at the socket's send timeout.
Status SendFrames(int sock, std::string_view frames, const std::vector<int>& fds = {});
// Sends what the socket takes now, without waiting: the bytes sent (0 when
// its buffer is full), or IOError when the peer is gone. For a thread that
// must never wait on a peer; the caller queues the rest.
Result<size_t> SendNow(int sock, std::string_view bytes);
// Frames are received by a FrameReader (wire/frame_reader.h).

// Sets send and receive timeouts (0: none).
Status SetTimeouts(int sock, uint32_t send_ms, uint32_t recv_ms);

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};
Result<PeerCredentials> PeerOf(int sock);

// A connected Unix stream socket to `path` (AF_UNIX, SOCK_CLOEXEC).
Result<UniqueFd> ConnectUnix(const std::string& path);

}  // namespace kvtier::wire

#endif  // KVTIER_SRC_WIRE_SOCKET_IO_H_
