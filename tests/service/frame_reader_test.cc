// FrameReader: buffered frames, their descriptors, and the ways a peer can
// end or stall a frame (src/wire/frame_reader.h).
#include "wire/frame_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "wire/socket_io.h"
#include "wire/wire.h"

namespace kvtier::testing {
namespace {

struct Pair {
  Pair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    a = wire::UniqueFd(sv[0]);
    b = wire::UniqueFd(sv[1]);
  }
  wire::UniqueFd a, b;
};

std::string FrameOf(wire::Op op, uint64_t id, size_t body_bytes, char fill = 'x') {
  wire::WireWriter w;
  if (body_bytes > 0) w.Bytes(std::string(body_bytes - 4, fill));  // u32 length + bytes
  return w.Frame(static_cast<uint16_t>(op), id);
}

ino_t InodeOf(int fd) {
  struct stat st {};
  EXPECT_EQ(::fstat(fd, &st), 0);
  return st.st_ino;
}

TEST(FrameReader, SplitsABurstIntoItsFramesInOrder) {
  Pair p;
  std::string burst;
  for (uint64_t id = 1; id <= 50; ++id) burst += FrameOf(wire::Op::kLookupPrefix, id, id * 7);
  burst += FrameOf(wire::Op::kGet, 51, 0);
  ASSERT_TRUE(wire::SendFrames(p.a.get(), burst).ok());
  wire::FrameReader r(p.b.get(), false);
  for (uint64_t id = 1; id <= 51; ++id) {
    wire::Frame f;
    ASSERT_TRUE(r.Next(&f).ok()) << id;
    EXPECT_EQ(f.header.id, id);
    EXPECT_EQ(f.body.size(), id <= 50 ? id * 7 : 0);
    EXPECT_TRUE(f.fds.empty());
  }
}

TEST(FrameReader, SaysWhenMoreFramesWaitBehindTheOneReturned) {
  Pair p;
  wire::FrameReader r(p.b.get(), false);
  EXPECT_FALSE(r.MoreWaiting());
  ASSERT_TRUE(wire::SendFrames(p.a.get(), FrameOf(wire::Op::kGet, 1, 0) + FrameOf(wire::Op::kGet, 2, 0)).ok());
  wire::Frame f;
  ASSERT_TRUE(r.Next(&f).ok());
  EXPECT_TRUE(r.MoreWaiting());  // frame 2, buffered or still on the socket
  ASSERT_TRUE(r.Next(&f).ok());
  EXPECT_FALSE(r.MoreWaiting());
  // Bytes on the socket that the reader has not taken yet count too.
  ASSERT_TRUE(wire::SendFrames(p.a.get(), FrameOf(wire::Op::kGet, 3, 0)).ok());
  EXPECT_TRUE(r.MoreWaiting());
  ASSERT_TRUE(r.Next(&f).ok());
  EXPECT_EQ(f.header.id, 3u);
  EXPECT_FALSE(r.MoreWaiting());
}

TEST(FrameReader, FramesLargerThanItsBufferArriveWhole) {
  Pair p;
  const size_t big = 3 * wire::FrameReader::kBufferBytes + 123;
  std::thread writer([&] {
    std::string s = FrameOf(wire::Op::kPut, 1, 100, 'a') + FrameOf(wire::Op::kPut, 2, big, 'b') +
                    FrameOf(wire::Op::kPut, 3, wire::FrameReader::kBufferBytes, 'c');
    EXPECT_TRUE(wire::SendFrames(p.a.get(), s).ok());
  });
  wire::FrameReader r(p.b.get(), false);
  wire::Frame f;
  ASSERT_TRUE(r.Next(&f).ok());
  EXPECT_EQ(f.body.size(), 100u);
  ASSERT_TRUE(r.Next(&f).ok());
  ASSERT_EQ(f.body.size(), big);
  EXPECT_EQ(f.body.substr(4), std::string(big - 4, 'b'));
  ASSERT_TRUE(r.Next(&f).ok());
  EXPECT_EQ(f.header.id, 3u);
  EXPECT_EQ(f.body.substr(4), std::string(wire::FrameReader::kBufferBytes - 4, 'c'));
  writer.join();
}

TEST(FrameReader, AHeaderDribbledByteByByteStillParses) {
  Pair p;
  const std::string s = FrameOf(wire::Op::kStat, 9, 40);
  std::thread writer([&] {
    for (char c : s) {
      ASSERT_EQ(::send(p.a.get(), &c, 1, 0), 1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  wire::FrameReader r(p.b.get(), false);
  wire::Frame f;
  ASSERT_TRUE(r.Next(&f).ok());
  EXPECT_EQ(f.header.id, 9u);
  EXPECT_EQ(f.body.size(), 40u);
  writer.join();
}

TEST(FrameReader, DescriptorsGoToTheFrameThatCarriesThem) {
  Pair p;
  const int memfd_a = ::memfd_create("a", MFD_CLOEXEC), memfd_b = ::memfd_create("b", MFD_CLOEXEC);
  ASSERT_GE(memfd_a, 0);
  ASSERT_GE(memfd_b, 0);
  // A lookup, then two registrations, before the reader reads anything: one
  // read may bring all three frames.
  ASSERT_TRUE(wire::SendFrames(p.a.get(), FrameOf(wire::Op::kLookupPrefix, 1, 30)).ok());
  ASSERT_TRUE(wire::SendFrames(p.a.get(), FrameOf(wire::Op::kRegisterRegion, 2, 12), {memfd_a}).ok());
  ASSERT_TRUE(wire::SendFrames(p.a.get(), FrameOf(wire::Op::kRegisterRegion, 3, 12), {memfd_b}).ok());
  ASSERT_TRUE(wire::SendFrames(p.a.get(), FrameOf(wire::Op::kGet, 4, 30)).ok());
  wire::FrameReader r(p.b.get(), false);
  wire::Frame f;
  ASSERT_TRUE(r.Next(&f).ok());
  EXPECT_TRUE(f.fds.empty());
  ASSERT_TRUE(r.Next(&f).ok());
  ASSERT_EQ(f.fds.size(), 1u);
  EXPECT_EQ(InodeOf(f.fds[0].get()), InodeOf(memfd_a));
  ASSERT_TRUE(r.Next(&f).ok());
  ASSERT_EQ(f.fds.size(), 1u);
  EXPECT_EQ(InodeOf(f.fds[0].get()), InodeOf(memfd_b));
  ASSERT_TRUE(r.Next(&f).ok());
  EXPECT_EQ(f.header.id, 4u);
  EXPECT_TRUE(f.fds.empty());
  ::close(memfd_a);
  ::close(memfd_b);
}

TEST(FrameReader, DescriptorsWithAFrameThatTakesNoneFailTheConnection) {
  Pair p;
  const int memfd = ::memfd_create("stray", MFD_CLOEXEC);
  ASSERT_TRUE(wire::SendFrames(p.a.get(), FrameOf(wire::Op::kGet, 1, 30), {memfd}).ok());
  ASSERT_TRUE(wire::SendFrames(p.a.get(), FrameOf(wire::Op::kGet, 2, 30)).ok());
  ::close(memfd);
  wire::FrameReader r(p.b.get(), false);
  wire::Frame f;
  ASSERT_TRUE(r.Next(&f).ok());  // the get itself never sees them
  EXPECT_TRUE(f.fds.empty());
  EXPECT_EQ(r.Next(&f).code(), Code::kInvalidArgument);
}

TEST(FrameReader, ManyReadsOfStrayDescriptorsAreCut) {
  Pair p;
  const int memfd = ::memfd_create("stray", MFD_CLOEXEC);
  // One byte of a header per send, each with a descriptor: without a bound a
  // peer could make the reader hold thousands of them.
  const std::string s = FrameOf(wire::Op::kGet, 1, 0);
  for (size_t i = 0; i < wire::FrameReader::kMaxFdReads + 1; ++i)
    ASSERT_TRUE(wire::SendFrames(p.a.get(), s.substr(i, 1), {memfd}).ok());
  ::close(memfd);
  wire::FrameReader r(p.b.get(), false);
  wire::Frame f;
  Status st = r.Next(&f);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
}

TEST(FrameReader, TheEndOfTheStreamBetweenAndInsideFrames) {
  {
    Pair p;
    ASSERT_TRUE(wire::SendFrames(p.a.get(), FrameOf(wire::Op::kGet, 1, 10)).ok());
    p.a = wire::UniqueFd();
    wire::FrameReader r(p.b.get(), false);
    wire::Frame f;
    ASSERT_TRUE(r.Next(&f).ok());
    EXPECT_EQ(r.Next(&f).code(), Code::kClosed);
  }
  {
    Pair p;
    const std::string s = FrameOf(wire::Op::kGet, 1, 100);
    ASSERT_TRUE(wire::SendFrames(p.a.get(), s.substr(0, 60)).ok());
    p.a = wire::UniqueFd();
    wire::FrameReader r(p.b.get(), false);
    wire::Frame f;
    EXPECT_EQ(r.Next(&f).code(), Code::kIOError);
  }
  {  // A bad header: refused before its body is awaited.
    Pair p;
    std::string s = FrameOf(wire::Op::kGet, 1, 10);
    s[0] ^= 0xff;
    ASSERT_TRUE(wire::SendFrames(p.a.get(), s).ok());
    wire::FrameReader r(p.b.get(), false);
    wire::Frame f;
    EXPECT_EQ(r.Next(&f).code(), Code::kInvalidArgument);
  }
}

TEST(FrameReader, TheSocketTimeoutBoundsAFrameButNotTheWaitBetweenFrames) {
  Pair p;
  ASSERT_TRUE(wire::SetTimeouts(p.b.get(), 0, 30).ok());
  {  // Idle for several timeouts, then a frame: the idle reader waits for it.
    std::thread writer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      EXPECT_TRUE(wire::SendFrames(p.a.get(), FrameOf(wire::Op::kGet, 1, 10)).ok());
    });
    wire::FrameReader idle(p.b.get(), /*idle_forever=*/true);
    wire::Frame f;
    EXPECT_TRUE(idle.Next(&f).ok());
    writer.join();
  }
  {  // The same wait without idle_forever times out.
    wire::FrameReader r(p.b.get(), false);
    wire::Frame f;
    EXPECT_EQ(r.Next(&f).code(), Code::kTimedOut);
  }
  {  // Half a frame, then silence: TimedOut even when idle waits are endless.
    const std::string s = FrameOf(wire::Op::kGet, 2, 100);
    ASSERT_TRUE(wire::SendFrames(p.a.get(), s.substr(0, 30)).ok());
    wire::FrameReader r(p.b.get(), /*idle_forever=*/true);
    wire::Frame f;
    EXPECT_EQ(r.Next(&f).code(), Code::kTimedOut);
  }
}

TEST(SendNow, TakesWhatTheSocketHoldsThenNothingThenFailsOnceThePeerIsGone) {
  Pair p;
  const std::string big(4 << 20, 'q');  // far more than a socket buffers
  auto first = wire::SendNow(p.a.get(), big);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_GT(*first, 0u);
  EXPECT_LT(*first, big.size());  // a part, at once, without waiting
  auto full = wire::SendNow(p.a.get(), big);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(*full, 0u);
  // What was taken arrives as sent.
  std::string got(*first, '\0');
  size_t n = 0;
  while (n < got.size()) {
    const ssize_t r = ::read(p.b.get(), got.data() + n, got.size() - n);
    ASSERT_GT(r, 0);
    n += static_cast<size_t>(r);
  }
  EXPECT_EQ(got, big.substr(0, *first));
  p.b = wire::UniqueFd();
  auto gone = wire::SendNow(p.a.get(), "x");
  EXPECT_FALSE(gone.ok());
}

}  // namespace
}  // namespace kvtier::testing
