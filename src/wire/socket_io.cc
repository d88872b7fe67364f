#include "wire/socket_io.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvtier::wire {

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.Release();
  }
  return *this;
}

namespace {

Status SocketError(int err, const char* what) {
  if (err == EAGAIN || err == EWOULDBLOCK) return Status::TimedOut(std::string(what) + ": the peer did not respond in time");
  return Status::FromErrno(err, what);
}

}  // namespace

Status SendFrames(int sock, std::string_view frames, const std::vector<int>& fds) {
  if (fds.size() > kMaxFdsPerFrame) return Status::InvalidArgument("too many file descriptors for one frame");
  size_t sent = 0;
  bool fds_sent = fds.empty();
  while (sent < frames.size()) {
    iovec iov{const_cast<char*>(frames.data()) + sent, frames.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)];
    if (!fds_sent) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t r = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EINTR) continue;
      return SocketError(errno, "sending to the service socket");
    }
    fds_sent = true;
    sent += static_cast<size_t>(r);
  }
  return Status::OK();
}

Result<size_t> SendNow(int sock, std::string_view bytes) {
  for (;;) {
    const ssize_t r = ::send(sock, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r >= 0) return static_cast<size_t>(r);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    return Status::FromErrno(errno, "sending to the service socket");
  }
}

Status SetTimeouts(int sock, uint32_t send_ms, uint32_t recv_ms) {
  auto tv = [](uint32_t ms) {
    timeval t{};
    t.tv_sec = ms / 1000;
    t.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
    return t;
  };
  const timeval s = tv(send_ms), r = tv(recv_ms);
  if (::setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &s, sizeof s) != 0 ||
      ::setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof r) != 0)
    return Status::FromErrno(errno, "setting socket timeouts");
  return Status::OK();
}

Result<PeerCredentials> PeerOf(int sock) {
  ucred c{};
  socklen_t len = sizeof c;
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0) return Status::FromErrno(errno, "SO_PEERCRED");
  return PeerCredentials{c.pid, c.uid, c.gid};
}

Result<UniqueFd> ConnectUnix(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return Status::InvalidArgument("service socket path '" + path + "' is empty or longer than " +
                                   std::to_string(sizeof addr.sun_path - 1) + " bytes");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return Status::FromErrno(errno, "socket");
  int r;
  do {
    r = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  } while (r != 0 && errno == EINTR);
  if (r != 0) {
    const int err = errno;
    if (err == ENOENT || err == ECONNREFUSED)
      return Status::NotFound("no kvtier service listens on " + path + " (" + std::strerror(err) + ")");
    return Status::FromErrno(err, "connecting to " + path);
  }
  return fd;
}

}  // namespace kvtier::wire
