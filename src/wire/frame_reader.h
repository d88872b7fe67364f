// FrameReader: whole frames off a Unix stream socket, buffered, so that a
// small frame costs one recvmsg instead of one for its header and one for
// its body, and a burst of frames one recvmsg for all of them.
//
// File descriptors: SCM_RIGHTS arrive with the first byte of the sendmsg
// that carried them, and the kernel ends a read after the message that
// holds them, so a read that brings descriptors also brings the first byte
// of the frame they belong to. The reader gives a read's descriptors to the
// first frame starting inside that read whose opcode takes descriptors
// (CarriesFds). Descriptors that no such frame claims (a broken or hostile
// peer) fail the next frame with InvalidArgument; the caller then closes the
// connection. At most kMaxFdReads reads' worth wait to be claimed.
//
// Waiting: between frames a read may wait as long as the caller asked (the
// socket's SO_RCVTIMEO expiring there is not an error when `idle_forever`);
// inside a frame the socket's timeout ends the call with TimedOut, so a peer
// that stalls mid-frame never holds the reader.
//
// Thread safety: one thread reads at a time (the caller's reader thread).
#ifndef KVTIER_SRC_WIRE_FRAME_READER_H_
#define KVTIER_SRC_WIRE_FRAME_READER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "kvtier/status.h"
#include "wire/socket_io.h"

namespace kvtier::wire {

// Whether frames of `op` may carry descriptors (hello, register_region and
// map_tier's reply).
bool CarriesFds(uint16_t op);

class FrameReader {
 public:
  static constexpr size_t kBufferBytes = 64u << 10;  // frames larger are read straight into their body
  static constexpr size_t kMaxFdReads = 8;

  // Does not own `sock`.
  FrameReader(int sock, bool idle_forever) : sock_(sock), idle_forever_(idle_forever), buf_(kBufferBytes) {}

  // The next frame. Closed when the peer closed between frames, IOError on a
  // short frame, InvalidArgument on a malformed header or stray descriptors,
  // TimedOut when the peer stalled (inside a frame, or between frames
  // unless idle_forever).
  [[nodiscard]] Status Next(Frame* out);
  // Like Next, but false at once when no whole frame is buffered and the
  // socket has no more bytes now (a caller that polls the socket itself).
  // A frame larger than the buffer, once begun, is finished as Next would.
  [[nodiscard]] Result<bool> TryNext(Frame* out);
  // True when bytes of another frame are buffered or waiting on the socket:
  // the peer has sent more requests behind the last one returned.
  bool MoreWaiting() const;

 private:
  struct FdRead {
    uint64_t begin, end;  // the stream offsets the read brought
    std::vector<UniqueFd> fds;
  };
  // Appends what the socket has (at least one byte) to the buffer.
  Status Fill(bool inside_frame);
  // Makes room at the buffer's end by moving what is unparsed to its start.
  void Compact();
  // Whether Next would return without waiting for more bytes (a malformed
  // header counts: Next reports it), or the frame is one Next reads straight
  // into its body.
  bool NextIsReady() const;
  // Reads straight into `dst` (a large body's tail), exactly n bytes.
  Status ReadExact(uint8_t* dst, size_t n);
  // One recvmsg into [dst, dst+cap); its descriptors, if any, queued.
  // TimedOut when nothing came in time (or at once, with MSG_DONTWAIT).
  Result<size_t> Receive(uint8_t* dst, size_t cap, int flags = 0);
  // The descriptors for the frame starting at stream offset `at`.
  Status ClaimFds(uint64_t at, uint16_t op, std::vector<UniqueFd>* out);
  size_t buffered() const { return end_ - begin_; }

  const int sock_;
  const bool idle_forever_;
  std::vector<uint8_t> buf_;
  size_t begin_ = 0, end_ = 0;  // unparsed bytes are buf_[begin_, end_)
  uint64_t stream_ = 0;         // stream offset of buf_[end_]
  std::deque<FdRead> fd_reads_;
};

}  // namespace kvtier::wire

#endif  // KVTIER_SRC_WIRE_FRAME_READER_H_
