#include "wire/frame_reader.h"

#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kvtier::wire {

bool CarriesFds(uint16_t op) {
  return op == static_cast<uint16_t>(Op::kHello) || op == static_cast<uint16_t>(Op::kRegisterRegion) ||
         op == (static_cast<uint16_t>(Op::kMapTier) | kReplyBit);
}

Status FrameReader::Next(Frame* out) {
  out->fds.clear();
  while (buffered() < kHeaderBytes) KVTIER_RETURN_IF_ERROR(Fill(/*inside_frame=*/buffered() > 0));
  const uint64_t at = stream_ - buffered();
  auto h = DecodeHeader(&buf_[begin_]);
  if (!h.ok()) return h.status();
  out->header = *h;
  begin_ += kHeaderBytes;
  const size_t body = h->body_bytes;
  out->body.resize(body);
  if (body <= buf_.size()) {
    while (buffered() < body) KVTIER_RETURN_IF_ERROR(Fill(/*inside_frame=*/true));
    std::memcpy(out->body.data(), &buf_[begin_], body);
    begin_ += body;
  } else {
    const size_t have = buffered();
    std::memcpy(out->body.data(), &buf_[begin_], have);
    begin_ = end_;
    KVTIER_RETURN_IF_ERROR(ReadExact(reinterpret_cast<uint8_t*>(out->body.data()) + have, body - have));
  }
  return ClaimFds(at, h->op, &out->fds);
}

Result<bool> FrameReader::TryNext(Frame* out) {
  if (!NextIsReady()) {
    Compact();
    auto r = Receive(&buf_[end_], buf_.size() - end_, MSG_DONTWAIT);
    if (!r.ok()) {
      if (r.status().code() == Code::kTimedOut) return false;
      return r.status();
    }
    if (*r == 0) {
      if (buffered() == 0) return Status::Closed("the peer closed the connection");
      return Status::IOError("the peer closed the connection inside a frame");
    }
    end_ += *r;
    if (!NextIsReady()) return false;
  }
  KVTIER_RETURN_IF_ERROR(Next(out));
  return true;
}

bool FrameReader::NextIsReady() const {
  if (buffered() < kHeaderBytes) return false;
  auto h = DecodeHeader(&buf_[begin_]);
  if (!h.ok()) return true;
  return h->body_bytes > buf_.size() - kHeaderBytes || buffered() >= kHeaderBytes + h->body_bytes;
}

void FrameReader::Compact() {
  if (begin_ == end_) {
    begin_ = end_ = 0;
  } else if (buf_.size() - end_ < 4096 && begin_ > 0) {
    std::memmove(buf_.data(), &buf_[begin_], buffered());
    end_ -= begin_;
    begin_ = 0;
  }
}

Status FrameReader::Fill(bool inside_frame) {
  Compact();
  for (;;) {
    auto r = Receive(&buf_[end_], buf_.size() - end_);
    if (r.ok()) {
      if (*r == 0) {
        if (!inside_frame) return Status::Closed("the peer closed the connection");
        return Status::IOError("the peer closed the connection inside a frame");
      }
      end_ += *r;
      return Status::OK();
    }
    // The socket's receive timeout bounds waits inside a frame only.
    if (r.status().code() == Code::kTimedOut && !inside_frame && idle_forever_) continue;
    return r.status();
  }
}

Status FrameReader::ReadExact(uint8_t* dst, size_t n) {
  while (n > 0) {
    auto r = Receive(dst, n);
    if (!r.ok()) return r.status();
    if (*r == 0) return Status::IOError("the peer closed the connection inside a frame");
    dst += *r;
    n -= *r;
  }
  return Status::OK();
}

Result<size_t> FrameReader::Receive(uint8_t* dst, size_t cap, int flags) {
  for (;;) {
    iovec iov{dst, cap};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t r = ::recvmsg(sock_, &msg, MSG_CMSG_CLOEXEC | flags);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return Status::TimedOut("receiving from the socket: the peer did not send in time");
      return Status::FromErrno(errno, "receiving from the socket");
    }
    std::vector<UniqueFd> fds;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds.emplace_back(fd);
      }
    }
    if (msg.msg_flags & MSG_CTRUNC) return Status::InvalidArgument("too many file descriptors with one frame");
    const uint64_t begin = stream_;
    stream_ += static_cast<uint64_t>(r);
    if (!fds.empty()) {
      if (fd_reads_.size() == kMaxFdReads)
        return Status::InvalidArgument("file descriptors came with frames that take none");
      fd_reads_.push_back(FdRead{begin, stream_, std::move(fds)});
    }
    return static_cast<size_t>(r);
  }
}

Status FrameReader::ClaimFds(uint64_t at, uint16_t op, std::vector<UniqueFd>* out) {
  // A read that ended before this frame began brought descriptors for a
  // frame that takes none.
  if (!fd_reads_.empty() && fd_reads_.front().end <= at)
    return Status::InvalidArgument("file descriptors came with frames that take none");
  if (!CarriesFds(op) || fd_reads_.empty() || fd_reads_.front().begin > at) return Status::OK();
  *out = std::move(fd_reads_.front().fds);
  fd_reads_.pop_front();
  return Status::OK();
}

bool FrameReader::MoreWaiting() const {
  if (buffered() != 0) return true;
  int n = 0;
  return ::ioctl(sock_, FIONREAD, &n) == 0 && n > 0;
}

}  // namespace kvtier::wire
