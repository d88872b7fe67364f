// IoQueue tests, run against both backends ("io_uring" and "posix").
#include "io/uring_queue.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "io/io_errors.h"
#include "io/io_test_util.h"
#include "io/posix_file_system.h"
#include "io/posix_io_queue.h"

namespace kvtier {
namespace {

using testing::AlignedBuffer;
using testing::FillRandom;
using testing::TempDir;

constexpr size_t kPage = 4096;

bool IsUring(const std::string& backend) { return backend == "io_uring"; }

#define SKIP_WITHOUT_URING(backend_name)               \
  if (IsUring(backend_name) && !IoUringAvailable()) \
  GTEST_SKIP() << "io_uring: " << IoUringUnavailableReason()

// A queue of the named backend, or null (with a test failure).
std::unique_ptr<IoQueue> MakeQueue(const std::string& backend_name, unsigned depth, size_t max_transfer) {
  Result<std::unique_ptr<IoQueue>> q =
      IsUring(backend_name) ? NewUringIoQueue(depth, max_transfer) : NewPosixIoQueue(depth);
  EXPECT_TRUE(q.ok()) << q.status().ToString();
  if (!q.ok()) return nullptr;
  EXPECT_EQ(std::string((*q)->backend()), backend_name);
  return std::move(q).value();
}

struct Extent {
  uint64_t offset;
  size_t len;
  size_t arena_offset;  // where its buffer lies in the arena
};

// `n` extents of 4 KiB..max_pages*4 KiB in random order along the file with
// random gaps, never overlapping. Sizes are skewed small (the exponent is
// geometric) so that a file stays near 6 MiB and the test quick, but the
// first extent takes the maximum and the second the minimum.
std::vector<Extent> Layout(std::mt19937_64& rng, int n, size_t max_pages, uint64_t* file_size) {
  std::vector<size_t> pages(n);
  const int max_shift = 63 - __builtin_clzll(max_pages);
  for (int i = 0; i < n; ++i) {
    int shift = 0;
    while (shift < max_shift && rng() % 5 < 2) ++shift;
    const size_t p = (size_t{1} << shift) + rng() % (size_t{1} << shift);
    pages[i] = std::min(p, max_pages);
  }
  pages[0] = max_pages;
  pages[1] = 1;
  pages[n / 2] = std::max<size_t>(pages[n / 2], 2);  // see the registered split below
  std::vector<Extent> ext(n);
  size_t arena = 0;
  for (int i = 0; i < n; ++i) {
    ext[i].len = pages[i] * kPage;
    ext[i].arena_offset = arena;
    arena += ext[i].len;
  }
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  uint64_t off = 0;
  for (int i : order) {
    off += (rng() % 3) * kPage;
    ext[i].offset = off;
    off += ext[i].len;
  }
  *file_size = off + kPage;
  return ext;
}

struct QueueParam {
  const char* backend;
  unsigned depth;
  bool direct;
  bool registered;
  size_t max_transfer;
};

std::string ParamName(const ::testing::TestParamInfo<QueueParam>& info) {
  const QueueParam& p = info.param;
  std::string name = std::string(IsUring(p.backend) ? "uring" : "posix") + "_depth" + std::to_string(p.depth);
  if (p.direct) name += "_direct";
  if (p.registered) name += "_registered";
  if (p.max_transfer != kUringMaxTransfer) name += "_split" + std::to_string(p.max_transfer / 1024) + "k";
  return name;
}

class QueueIntegrityTest : public ::testing::TestWithParam<QueueParam> {
 protected:
  TempDir dir_;
  PosixFileSystem fs_{IoBackend::kPosix};
};

// 256 requests of 4 KiB..2 MiB, mixed reads and writes, in one Submit, twice;
// every byte checked against a model of the file.
TEST_P(QueueIntegrityTest, MixedRandomBatch) {
  const QueueParam& p = GetParam();
  ASSERT_TRUE(dir_.ok());
  SKIP_WITHOUT_URING(p.backend);
  std::unique_ptr<IoQueue> qp = MakeQueue(p.backend, p.depth, p.max_transfer);
  ASSERT_NE(qp, nullptr);
  IoQueue& q = *qp;
  EXPECT_EQ(q.depth(), p.depth);

  OpenFlags flags;
  flags.create = true;
  flags.direct = p.direct;
  Result<std::unique_ptr<File>> fr = fs_.Open(dir_.File("data"), flags);
  ASSERT_TRUE(fr.ok()) << fr.status().ToString();
  File& f = **fr;

  std::mt19937_64 rng(1000 + p.depth + 7 * p.direct + 13 * p.registered);
  constexpr int kRequests = 256;
  uint64_t file_size = 0;
  const std::vector<Extent> ext = Layout(rng, kRequests, 512, &file_size);
  const size_t arena_size = ext.back().arena_offset + ext.back().len;
  AlignedBuffer arena(arena_size);
  AlignedBuffer model(file_size);
  ASSERT_NE(arena.data(), nullptr);
  ASSERT_NE(model.data(), nullptr);
  FillRandom(rng, model.data(), file_size);
  ASSERT_TRUE(f.WriteAt(0, model.data(), file_size).ok());

  bool fixed_expected = false;
  if (p.registered) {
    // Two regions split inside the middle request's buffer: that request
    // runs as two fixed parts, one per region; the others use theirs.
    const size_t split = ext[kRequests / 2].arena_offset + kPage;
    const iovec regions[2] = {{arena.data(), split}, {arena.data() + split, arena_size - split}};
    Status s = q.RegisterBuffers(regions);
    if (s.ok()) {
      fixed_expected = IsUring(p.backend);
    } else {
      // Allowed (e.g. RLIMIT_MEMLOCK); the queue must keep working.
      std::fprintf(stderr, "note: RegisterBuffers failed: %s\n", s.ToString().c_str());
    }
  }

  std::vector<IoRequest> reqs(kRequests);
  AlignedBuffer back(file_size);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kRequests; ++i) {
      IoRequest& r = reqs[i];
      r.op = (rng() & 1) ? IoRequest::Op::kWrite : IoRequest::Op::kRead;
      r.file = &f;
      r.offset = ext[i].offset;
      r.buf = arena.data() + ext[i].arena_offset;
      r.len = ext[i].len;
      r.status = Status::Aborted("not run");
      if (r.op == IoRequest::Op::kWrite) {
        FillRandom(rng, static_cast<char*>(r.buf), r.len);
      } else {
        std::memset(r.buf, 0x5a, r.len);
      }
    }
    Status s = q.Submit(reqs);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (int i = 0; i < kRequests; ++i) {
      const IoRequest& r = reqs[i];
      ASSERT_TRUE(r.status.ok()) << i << ": " << r.status.ToString();
      char* in_model = model.data() + r.offset;
      if (r.op == IoRequest::Op::kRead) {
        ASSERT_EQ(std::memcmp(r.buf, in_model, r.len), 0) << "read " << i << " round " << round;
      } else {
        std::memcpy(in_model, r.buf, r.len);
      }
    }
    ASSERT_TRUE(f.ReadAt(0, back.data(), file_size).ok());
    ASSERT_EQ(std::memcmp(back.data(), model.data(), file_size), 0) << "file differs after round " << round;
  }

  if (IsUring(p.backend)) {
    const UringQueueStats st = GetUringQueueStats(q);
    EXPECT_GE(st.sqes, 2u * kRequests);
    if (fixed_expected) {
      EXPECT_EQ(st.fixed_sqes, st.sqes);  // the straddling request too, in two parts
      EXPECT_GE(st.resubmissions, 2u);   // its second part, in each round
    } else {
      EXPECT_EQ(st.fixed_sqes, 0u);
    }
    if (p.max_transfer < (2u << 20)) {
      EXPECT_GT(st.resubmissions, 0u);  // continued partial transfers
    }
  }
}

// Vectored reads (IoRequest::iov): each request reads one extent into
// three to five pieces of different buffers (as a direct get reads a record:
// header page, the caller's pages, tail page), every byte checked; with a
// small max transfer each continues where the last part stopped, inside a
// piece or at its edge. One request per extent reaches the ring.
TEST_P(QueueIntegrityTest, VectoredReadsScatterEveryByte) {
  const QueueParam& p = GetParam();
  ASSERT_TRUE(dir_.ok());
  SKIP_WITHOUT_URING(p.backend);
  std::unique_ptr<IoQueue> qp = MakeQueue(p.backend, p.depth, p.max_transfer);
  ASSERT_NE(qp, nullptr);
  OpenFlags flags;
  flags.create = true;
  flags.direct = p.direct;
  Result<std::unique_ptr<File>> fr = fs_.Open(dir_.File("vdata"), flags);
  ASSERT_TRUE(fr.ok()) << fr.status().ToString();
  File& f = **fr;
  std::mt19937_64 rng(77 + p.depth);
  constexpr int kRequests = 32;
  uint64_t file_size = 0;
  const std::vector<Extent> ext = Layout(rng, kRequests, 64, &file_size);
  AlignedBuffer model(file_size);
  ASSERT_NE(model.data(), nullptr);
  FillRandom(rng, model.data(), file_size);
  ASSERT_TRUE(f.WriteAt(0, model.data(), file_size).ok());
  // Each extent cut into pieces of whole pages, each piece in a buffer of
  // its own (out of order in one arena, so no two pieces are adjacent).
  // Pieces never outnumber pages, so twice the data (with a gap page after
  // every piece) always fits.
  const size_t arena_size = 2 * (ext.back().arena_offset + ext.back().len) + kPage;
  AlignedBuffer arena(arena_size);
  ASSERT_NE(arena.data(), nullptr);
  std::memset(arena.data(), 0x5a, arena_size);
  std::vector<std::vector<iovec>> pieces(kRequests);
  std::vector<IoRequest> reqs(kRequests);
  size_t at = arena_size;
  for (int i = 0; i < kRequests; ++i) {
    const size_t pages = ext[i].len / kPage;
    size_t left = pages;
    while (left > 0) {
      const size_t n = pieces[i].size() == 0 ? 1 : std::min<size_t>(left, 1 + rng() % std::max<size_t>(pages / 2, 1));
      at -= (n + 1) * kPage;  // a gap page between pieces, growing down
      pieces[i].push_back(iovec{arena.data() + at, n * kPage});
      left -= std::min(n, left);
    }
    IoRequest& r = reqs[i];
    r.op = IoRequest::Op::kRead;
    r.file = &f;
    r.offset = ext[i].offset;
    r.len = ext[i].len;
    r.iov = pieces[i].data();
    r.iovcnt = static_cast<unsigned>(pieces[i].size());
  }
  Status s = qp->Submit(reqs);
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(reqs[i].status.ok()) << i << ": " << reqs[i].status.ToString();
    uint64_t off = ext[i].offset;
    for (const iovec& v : pieces[i]) {
      ASSERT_EQ(std::memcmp(v.iov_base, model.data() + off, v.iov_len), 0) << "request " << i;
      off += v.iov_len;
    }
  }
  if (IsUring(p.backend)) {
    const UringQueueStats st = GetUringQueueStats(*qp);
    if (p.max_transfer >= (2u << 20)) EXPECT_EQ(st.sqes, static_cast<uint64_t>(kRequests));
    else EXPECT_GT(st.resubmissions, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, QueueIntegrityTest,
    ::testing::Values(QueueParam{"io_uring", 1, false, false, kUringMaxTransfer},
                      QueueParam{"io_uring", 64, false, false, kUringMaxTransfer},
                      QueueParam{"io_uring", 64, true, false, kUringMaxTransfer},
                      QueueParam{"io_uring", 64, true, true, kUringMaxTransfer},
                      QueueParam{"io_uring", 8, false, true, 64 * 1024},
                      QueueParam{"io_uring", 16, true, false, 64 * 1024},
                      QueueParam{"posix", 1, false, false, kUringMaxTransfer},
                      QueueParam{"posix", 64, false, false, kUringMaxTransfer},
                      QueueParam{"posix", 64, true, false, kUringMaxTransfer},
                      QueueParam{"posix", 64, true, true, kUringMaxTransfer}),
    ParamName);

// A File whose descriptor is not open: every transfer fails EBADF.
// A File whose housekeeping calls do nothing: the tests' stand-ins below
// differ only in their descriptor and transfers.
class TestFileBase : public File {
 public:
  Status Sync() override { return Status::OK(); }
  Status Allocate(uint64_t, uint64_t) override { return Status::OK(); }
  Status PunchHole(uint64_t, uint64_t) override { return Status::OK(); }
  Result<uint64_t> Size() override { return uint64_t{0}; }
  Status Truncate(uint64_t) override { return Status::OK(); }
};

class BadFdFile final : public TestFileBase {
 public:
  const std::string& path() const override { return path_; }
  int fd() const override { return kFd; }
  Status ReadAt(uint64_t offset, void* buf, size_t n) override {
    if (::pread(kFd, buf, n, static_cast<off_t>(offset)) < 0) return Status::FromErrno(errno, "read " + path_);
    return Status::OK();
  }
  Status WriteAt(uint64_t offset, const void* buf, size_t n) override {
    if (::pwrite(kFd, buf, n, static_cast<off_t>(offset)) < 0) return Status::FromErrno(errno, "write " + path_);
    return Status::OK();
  }

 private:
  static constexpr int kFd = 1 << 20;  // above any RLIMIT_NOFILE: never open
  const std::string path_ = "/bad-fd-file";
};

// An in-memory File without a descriptor (like a simulation).
class MemFile final : public File {
 public:
  explicit MemFile(size_t size) : data_(size) {}
  const std::string& path() const override { return path_; }
  Status ReadAt(uint64_t offset, void* buf, size_t n) override {
    if (offset + n > data_.size()) return Status::Corruption("short read " + path_);
    std::memcpy(buf, data_.data() + offset, n);
    return Status::OK();
  }
  Status WriteAt(uint64_t offset, const void* buf, size_t n) override {
    if (offset + n > data_.size()) data_.resize(offset + n);
    std::memcpy(data_.data() + offset, buf, n);
    return Status::OK();
  }
  Status Sync() override { return Status::OK(); }
  Status Allocate(uint64_t, uint64_t) override { return Status::OK(); }
  Status PunchHole(uint64_t, uint64_t) override { return Status::NotSupported("mem"); }
  Result<uint64_t> Size() override { return static_cast<uint64_t>(data_.size()); }
  Status Truncate(uint64_t size) override {
    data_.resize(size);
    return Status::OK();
  }
  std::vector<char> data_;

 private:
  const std::string path_ = "mem://file";
};

TEST(VectoredRead, PiecesMustAddUpAndOnlyReadsTakeThem) {
  MemFile file(8192);
  char a[4096], b[4096];
  iovec v[2] = {{a, sizeof a}, {b, sizeof b}};
  IoRequest r;
  r.file = &file;
  r.iov = v;
  r.iovcnt = 2;
  r.len = 4096;  // the pieces hold 8192
  Status s = ValidateRequest(r);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("8192"), std::string::npos) << s.ToString();
  r.len = 8192;
  EXPECT_TRUE(ValidateRequest(r).ok());
  r.op = IoRequest::Op::kWrite;
  EXPECT_EQ(ValidateRequest(r).code(), Code::kInvalidArgument);
  r.op = IoRequest::Op::kRead;
  v[1].iov_base = nullptr;
  EXPECT_EQ(ValidateRequest(r).code(), Code::kInvalidArgument);
  // Through a queue, a file without a descriptor reads piece by piece.
  v[1].iov_base = b;
  std::memset(file.data_.data(), 'x', 4096);
  std::memset(file.data_.data() + 4096, 'y', 4096);
  std::unique_ptr<IoQueue> q = NewPosixIoQueue(1);
  ASSERT_TRUE(q->Submit({&r, 1}).ok()) << r.status.ToString();
  EXPECT_EQ(a[0], 'x');
  EXPECT_EQ(a[4095], 'x');
  EXPECT_EQ(b[0], 'y');
  EXPECT_EQ(b[4095], 'y');
}

class QueueErrorTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }
  std::unique_ptr<File> MakeFile(const std::string& name, size_t size) {
    OpenFlags flags;
    flags.create = true;
    Result<std::unique_ptr<File>> f = fs_.Open(dir_.File(name), flags);
    EXPECT_TRUE(f.ok());
    std::vector<char> data(size, 'z');
    EXPECT_TRUE((*f)->WriteAt(0, data.data(), size).ok());
    return std::move(f).value();
  }
  TempDir dir_;
  PosixFileSystem fs_{IoBackend::kPosix};
};

TEST_P(QueueErrorTest, ReadPastEndIsCorruptionOthersSucceed) {
  SKIP_WITHOUT_URING(GetParam());
  std::unique_ptr<IoQueue> qp = MakeQueue(GetParam(), 4, kUringMaxTransfer);
  ASSERT_NE(qp, nullptr);
  IoQueue& q = *qp;
  auto f = MakeFile("small", 10000);
  std::vector<char> a(4096), b(8192), c(100), w(4096, 'w');
  IoRequest reqs[4];
  reqs[0] = {IoRequest::Op::kRead, f.get(), 0, a.data(), a.size(), {}};
  reqs[1] = {IoRequest::Op::kRead, f.get(), 8192, b.data(), b.size(), {}};  // ends past 10000
  reqs[2] = {IoRequest::Op::kRead, f.get(), 20000, c.data(), c.size(), {}};  // wholly past the end
  reqs[3] = {IoRequest::Op::kWrite, f.get(), 4096, w.data(), w.size(), {}};
  Status s = q.Submit(reqs);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_TRUE(reqs[0].status.ok());
  EXPECT_EQ(reqs[1].status.code(), Code::kCorruption);
  EXPECT_NE(reqs[1].status.message().find("short read " + f->path()), std::string::npos)
      << reqs[1].status.ToString();
  EXPECT_EQ(reqs[2].status.code(), Code::kCorruption);
  EXPECT_TRUE(reqs[3].status.ok());
  EXPECT_EQ(a, std::vector<char>(4096, 'z'));
  // The valid part of the short read was delivered.
  EXPECT_EQ(std::vector<char>(b.begin(), b.begin() + 1808), std::vector<char>(1808, 'z'));
  // The message is the same whichever backend ran it.
  EXPECT_EQ(s.message(), "short read " + f->path() + ": wanted 8192 bytes at offset 8192, end of file after 1808");
}

TEST_P(QueueErrorTest, InvalidDescriptorIsIOError) {
  SKIP_WITHOUT_URING(GetParam());
  std::unique_ptr<IoQueue> qp = MakeQueue(GetParam(), 4, kUringMaxTransfer);
  ASSERT_NE(qp, nullptr);
  IoQueue& q = *qp;
  BadFdFile bad;
  std::vector<char> buf(4096);
  IoRequest reqs[2];
  reqs[0] = {IoRequest::Op::kRead, &bad, 0, buf.data(), buf.size(), {}};
  reqs[1] = {IoRequest::Op::kWrite, &bad, 0, buf.data(), buf.size(), {}};
  Status s = q.Submit(reqs);
  EXPECT_EQ(s.code(), Code::kIOError) << s.ToString();
  for (const IoRequest& r : reqs) {
    EXPECT_EQ(r.status.code(), Code::kIOError) << r.status.ToString();
    EXPECT_NE(r.status.message().find(bad.path()), std::string::npos) << r.status.ToString();
    EXPECT_NE(r.status.message().find(std::strerror(EBADF)), std::string::npos) << r.status.ToString();
  }
}

TEST_P(QueueErrorTest, WriteToReadOnlyFileFails) {
  SKIP_WITHOUT_URING(GetParam());
  std::unique_ptr<IoQueue> qp = MakeQueue(GetParam(), 4, kUringMaxTransfer);
  ASSERT_NE(qp, nullptr);
  IoQueue& q = *qp;
  auto created = MakeFile("ro", 4096);
  OpenFlags ro;
  ro.read_only = true;
  Result<std::unique_ptr<File>> f = fs_.Open(created->path(), ro);
  ASSERT_TRUE(f.ok());
  std::vector<char> buf(4096, 'q');
  IoRequest r{IoRequest::Op::kWrite, f->get(), 0, buf.data(), buf.size(), {}};
  Status s = q.Submit(std::span<IoRequest>(&r, 1));
  EXPECT_EQ(s.code(), Code::kIOError) << s.ToString();
  EXPECT_NE(s.message().find("write " + created->path()), std::string::npos) << s.ToString();
}

TEST_P(QueueErrorTest, DegenerateRequests) {
  SKIP_WITHOUT_URING(GetParam());
  std::unique_ptr<IoQueue> qp = MakeQueue(GetParam(), 2, kUringMaxTransfer);
  ASSERT_NE(qp, nullptr);
  IoQueue& q = *qp;
  EXPECT_TRUE(q.Submit({}).ok());
  auto f = MakeFile("degenerate", 4096);
  char byte = 0;
  IoRequest reqs[3];
  reqs[0] = {IoRequest::Op::kRead, f.get(), 100000, &byte, 0, {}};  // empty: OK anywhere
  reqs[1] = {IoRequest::Op::kRead, nullptr, 0, &byte, 1, {}};
  reqs[2] = {IoRequest::Op::kRead, f.get(), 0, nullptr, 1, {}};
  Status s = q.Submit(reqs);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(reqs[0].status.ok());
  EXPECT_EQ(reqs[1].status.code(), Code::kInvalidArgument);
  EXPECT_EQ(reqs[2].status.code(), Code::kInvalidArgument);
}

// Files without a descriptor run through File::ReadAt/WriteAt, mixed with
// real files in the same batch.
TEST_P(QueueErrorTest, FilesWithoutDescriptor) {
  SKIP_WITHOUT_URING(GetParam());
  std::unique_ptr<IoQueue> qp = MakeQueue(GetParam(), 4, kUringMaxTransfer);
  ASSERT_NE(qp, nullptr);
  IoQueue& q = *qp;
  MemFile mem(8192);
  auto real = MakeFile("real", 8192);
  std::vector<char> w(4096, 'm'), r1(4096), r2(4096);
  IoRequest reqs[3];
  reqs[0] = {IoRequest::Op::kWrite, &mem, 4096, w.data(), w.size(), {}};
  reqs[1] = {IoRequest::Op::kRead, real.get(), 0, r1.data(), r1.size(), {}};
  reqs[2] = {IoRequest::Op::kRead, &mem, 100000, r2.data(), r2.size(), {}};
  Status s = q.Submit(reqs);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_TRUE(reqs[0].status.ok());
  EXPECT_TRUE(reqs[1].status.ok());
  EXPECT_EQ(reqs[2].status.code(), Code::kCorruption);
  EXPECT_EQ(std::vector<char>(mem.data_.begin() + 4096, mem.data_.end()), w);
  EXPECT_EQ(r1, std::vector<char>(4096, 'z'));
  if (IsUring(GetParam())) {
    EXPECT_EQ(GetUringQueueStats(q).sync_fallbacks, 2u);
  }
}

// Streaming: requests enqueued as earlier ones finish (on_done enqueues the
// next read of its chain), every on_done runs inside Reap and exactly once,
// Reap reports how many finished, and Outstanding() counts down to zero.
TEST_P(QueueErrorTest, StreamingRefillsFromOnDone) {
  SKIP_WITHOUT_URING(GetParam());
  std::unique_ptr<IoQueue> qp = MakeQueue(GetParam(), 4, kUringMaxTransfer);
  ASSERT_NE(qp, nullptr);
  IoQueue& q = *qp;
  constexpr size_t kChunks = 64;
  auto f = MakeFile("stream", kChunks * kPage);
  // Each chunk holds its own index, so a read that landed in the wrong
  // buffer shows.
  for (size_t i = 0; i < kChunks; ++i) {
    std::vector<char> c(kPage, static_cast<char>('A' + i % 50));
    ASSERT_TRUE(f->WriteAt(i * kPage, c.data(), c.size()).ok());
  }
  struct Chain {
    IoQueue* q;
    size_t next;   // next chunk this chain reads
    size_t step;   // chains interleave: chain k reads k, k+step, ...
    int* in_reap;  // 1 while the test is inside Reap
    std::vector<int>* seen;
    bool outside = false;  // an on_done ran outside Reap
    IoRequest rq;
    std::vector<char> buf = std::vector<char>(kPage);
  };
  int in_reap = 0;
  std::vector<int> seen(kChunks, 0);
  constexpr size_t kChains = 6;  // more chains than depth: some wait in the queue
  std::vector<Chain> chains(kChains);
  auto start = [&f](Chain& c) {
    c.rq = IoRequest{IoRequest::Op::kRead, f.get(), c.next * kPage, c.buf.data(), kPage, {}};
    c.rq.user = &c;
    c.rq.on_done = [](IoRequest& r) {
      auto* ch = static_cast<Chain*>(r.user);
      if (*ch->in_reap == 0) ch->outside = true;
      EXPECT_TRUE(r.status.ok()) << r.status.ToString();
      const size_t chunk = r.offset / kPage;
      EXPECT_EQ(ch->buf, std::vector<char>(kPage, static_cast<char>('A' + chunk % 50))) << chunk;
      ++(*ch->seen)[chunk];
      ch->next += ch->step;
      if (ch->next < kChunks) {
        r.offset = ch->next * kPage;  // the same request, again: it is ours once on_done runs
        ch->q->Enqueue(&r);
      }
    };
    c.q->Enqueue(&c.rq);
  };
  for (size_t k = 0; k < kChains; ++k) {
    chains[k].q = &q;
    chains[k].next = k;
    chains[k].step = kChains;
    chains[k].in_reap = &in_reap;
    chains[k].seen = &seen;
    start(chains[k]);
  }
  EXPECT_EQ(q.Outstanding(), kChains);
  size_t finished = 0;
  int reaps = 0;
  while (q.Outstanding() > 0 && reaps < 10000) {
    in_reap = 1;
    const size_t n = q.Reap(true);
    in_reap = 0;
    EXPECT_GT(n, 0u);
    finished += n;
    ++reaps;
  }
  EXPECT_EQ(finished, kChunks);
  EXPECT_EQ(seen, std::vector<int>(kChunks, 1));
  for (const Chain& c : chains) EXPECT_FALSE(c.outside);
  EXPECT_EQ(q.Reap(true), 0u);  // nothing outstanding: returns at once
  EXPECT_EQ(q.Reap(false), 0u);
  // Submit after streaming works as before.
  std::vector<char> b(kPage);
  IoRequest r{IoRequest::Op::kRead, f.get(), 3 * kPage, b.data(), b.size(), {}};
  EXPECT_TRUE(q.Submit(std::span<IoRequest>(&r, 1)).ok());
  EXPECT_EQ(b, std::vector<char>(kPage, 'D'));
}

// Failures reach on_done through Reap like successes, with the same statuses
// Submit gives, and invalid requests never block the valid ones.
TEST_P(QueueErrorTest, StreamingFailuresCompleteThroughReap) {
  SKIP_WITHOUT_URING(GetParam());
  std::unique_ptr<IoQueue> qp = MakeQueue(GetParam(), 2, kUringMaxTransfer);
  ASSERT_NE(qp, nullptr);
  IoQueue& q = *qp;
  auto f = MakeFile("streamfail", 10000);
  MemFile mem(4096);
  std::vector<char> a(4096), b(8192), c(4096);
  char byte = 0;
  IoRequest reqs[5];
  reqs[0] = {IoRequest::Op::kRead, f.get(), 0, a.data(), a.size(), {}};
  reqs[1] = {IoRequest::Op::kRead, f.get(), 8192, b.data(), b.size(), {}};  // short
  reqs[2] = {IoRequest::Op::kRead, nullptr, 0, &byte, 1, {}};               // invalid
  reqs[3] = {IoRequest::Op::kRead, &mem, 0, c.data(), c.size(), {}};        // no descriptor
  reqs[4] = {IoRequest::Op::kRead, f.get(), 0, &byte, 0, {}};               // empty
  int calls[5] = {0, 0, 0, 0, 0};
  for (int i = 0; i < 5; ++i) {
    reqs[i].user = &calls[i];
    reqs[i].on_done = [](IoRequest& r) { ++*static_cast<int*>(r.user); };
    q.Enqueue(&reqs[i]);
  }
  for (int i = 0; i < 5; ++i) EXPECT_EQ(calls[i], 0) << i;  // never inside Enqueue
  size_t finished = 0;
  for (int guard = 0; q.Outstanding() > 0 && guard < 100; ++guard) finished += q.Reap(true);
  EXPECT_EQ(finished, 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(calls[i], 1) << i;
  EXPECT_TRUE(reqs[0].status.ok());
  EXPECT_EQ(reqs[1].status.code(), Code::kCorruption) << reqs[1].status.ToString();
  EXPECT_EQ(reqs[2].status.code(), Code::kInvalidArgument);
  EXPECT_TRUE(reqs[3].status.ok());
  EXPECT_TRUE(reqs[4].status.ok());
  EXPECT_EQ(a, std::vector<char>(4096, 'z'));
}

INSTANTIATE_TEST_SUITE_P(Backends, QueueErrorTest, ::testing::Values("io_uring", "posix"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return IsUring(info.param) ? std::string("uring") : std::string("posix");
                         });

class UringQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!IoUringAvailable()) GTEST_SKIP() << "io_uring: " << IoUringUnavailableReason();
    ASSERT_TRUE(dir_.ok());
  }
  // A new file under dir_, opened for O_DIRECT I/O.
  std::unique_ptr<File> OpenDirect(const std::string& name) {
    OpenFlags flags;
    flags.create = true;
    flags.direct = true;
    Result<std::unique_ptr<File>> f = fs_.Open(dir_.File(name), flags);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(f).value() : nullptr;
  }
  TempDir dir_;
  PosixFileSystem fs_{IoBackend::kIoUring};
};

// A pipe's read end as a File: a read of it waits until the test writes.
class PipeFile final : public TestFileBase {
 public:
  explicit PipeFile(int fd) : fd_(fd) {}
  const std::string& path() const override { return path_; }
  int fd() const override { return fd_; }
  Status ReadAt(uint64_t, void*, size_t) override { return Status::NotSupported("pipe"); }
  Status WriteAt(uint64_t, const void*, size_t) override { return Status::NotSupported("pipe"); }

 private:
  const int fd_;
  const std::string path_ = "pipe:";
};

// A pipe whose read end is a File; both ends closed on destruction.
struct TestPipe {
  TestPipe() {
    if (::pipe(fds) != 0) fds[0] = fds[1] = -1;
    read_end = std::make_unique<PipeFile>(fds[0]);
  }
  ~TestPipe() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  bool ok() const { return fds[0] >= 0; }
  int fds[2];
  std::unique_ptr<PipeFile> read_end;
};

// The point of streaming: while one request waits (a pipe nobody has written
// to yet), Reap hands back the others as they finish, and requests enqueued
// meanwhile run too. A batch Submit could not return before the pipe read.
TEST_F(UringQueueTest, AWaitingRequestDoesNotHoldBackOthers) {
  Result<std::unique_ptr<IoQueue>> qr = NewUringIoQueue(4);
  ASSERT_TRUE(qr.ok());
  IoQueue& q = **qr;
  TestPipe pipe;
  ASSERT_TRUE(pipe.ok());
  auto f = OpenDirect("others");
  ASSERT_NE(f, nullptr);
  AlignedBuffer data(4 * kPage), got(4 * kPage);
  std::memset(data.data(), 'o', data.size());
  ASSERT_TRUE(f->WriteAt(0, data.data(), data.size()).ok());

  int done[5] = {0, 0, 0, 0, 0};
  auto count = [](IoRequest& r) { ++*static_cast<int*>(r.user); };
  char pipe_buf[16] = {};
  IoRequest slow{IoRequest::Op::kRead, pipe.read_end.get(), 0, pipe_buf, 5, {}};
  slow.user = &done[4];
  slow.on_done = count;
  q.Enqueue(&slow);
  IoRequest fast[4];
  for (int i = 0; i < 2; ++i) {
    fast[i] = {IoRequest::Op::kRead, f.get(), i * kPage, got.data() + i * kPage, kPage, {}};
    fast[i].user = &done[i];
    fast[i].on_done = count;
    q.Enqueue(&fast[i]);
  }
  size_t finished = 0;
  for (int guard = 0; finished < 2 && guard < 1000; ++guard) finished += q.Reap(true);
  EXPECT_EQ(finished, 2u);
  EXPECT_EQ(done[0] + done[1], 2);
  EXPECT_EQ(done[4], 0);
  EXPECT_EQ(q.Outstanding(), 1u);
  // More work joins while the pipe read still waits.
  for (int i = 2; i < 4; ++i) {
    fast[i] = {IoRequest::Op::kRead, f.get(), i * kPage, got.data() + i * kPage, kPage, {}};
    fast[i].user = &done[i];
    fast[i].on_done = count;
    q.Enqueue(&fast[i]);
  }
  for (int guard = 0; finished < 4 && guard < 1000; ++guard) finished += q.Reap(true);
  EXPECT_EQ(finished, 4u);
  EXPECT_EQ(done[4], 0);
  EXPECT_EQ(std::memcmp(got.data(), data.data(), data.size()), 0);
  // Now the pipe: its read completes through the same loop.
  ASSERT_EQ(::write(pipe.fds[1], "hello", 5), 5);
  for (int guard = 0; q.Outstanding() > 0 && guard < 1000; ++guard) finished += q.Reap(true);
  EXPECT_EQ(finished, 5u);
  EXPECT_EQ(done[4], 1);
  EXPECT_TRUE(slow.status.ok()) << slow.status.ToString();
  EXPECT_EQ(std::string(pipe_buf, 5), "hello");
}

// A queue destroyed with requests outstanding cancels what it can and waits
// for the rest: a read of a pipe nobody writes to does not hang it, and the
// disk reads beside it are done before it returns.
TEST_F(UringQueueTest, DestroyedWithRequestsOutstanding) {
  TestPipe pipe;
  ASSERT_TRUE(pipe.ok());
  auto f = OpenDirect("outstanding");
  ASSERT_NE(f, nullptr);
  AlignedBuffer data(2 * kPage), got(2 * kPage);
  std::memset(data.data(), 'x', data.size());
  std::memset(got.data(), 0, got.size());
  ASSERT_TRUE(f->WriteAt(0, data.data(), data.size()).ok());
  char pipe_buf[8];
  bool ran = false;
  {
    Result<std::unique_ptr<IoQueue>> qr = NewUringIoQueue(4);
    ASSERT_TRUE(qr.ok());
    IoQueue& q = **qr;
    IoRequest reqs[3];
    reqs[0] = {IoRequest::Op::kRead, pipe.read_end.get(), 0, pipe_buf, sizeof pipe_buf, {}};
    reqs[1] = {IoRequest::Op::kRead, f.get(), 0, got.data(), kPage, {}};
    reqs[2] = {IoRequest::Op::kRead, f.get(), kPage, got.data() + kPage, kPage, {}};
    for (IoRequest& r : reqs) {
      r.user = &ran;
      r.on_done = [](IoRequest& rq) { *static_cast<bool*>(rq.user) = true; };
      q.Enqueue(&r);
    }
    q.Reap(false);  // issues them (the disk reads may finish here already)
    EXPECT_GE(q.Outstanding(), 1u);  // the pipe read cannot have
    ran = false;  // what the destructor finishes runs no on_done
  }
  EXPECT_FALSE(ran);
}

// Files are registered on first use and named by slot from then on.
TEST_F(UringQueueTest, FilesAreRegisteredOnFirstUse) {
  Result<std::unique_ptr<IoQueue>> qr = NewUringIoQueue(4);
  ASSERT_TRUE(qr.ok());
  IoQueue& q = **qr;
  auto a = OpenDirect("reg_a");
  auto b = OpenDirect("reg_b");
  ASSERT_TRUE(a && b);
  AlignedBuffer wa(kPage), wb(kPage), ra(kPage), rb(kPage);
  std::memset(wa.data(), 'a', kPage);
  std::memset(wb.data(), 'b', kPage);
  IoRequest w[2] = {{IoRequest::Op::kWrite, a.get(), 0, wa.data(), kPage, {}},
                    {IoRequest::Op::kWrite, b.get(), 0, wb.data(), kPage, {}}};
  ASSERT_TRUE(q.Submit(w).ok());
  IoRequest r[2] = {{IoRequest::Op::kRead, a.get(), 0, ra.data(), kPage, {}},
                    {IoRequest::Op::kRead, b.get(), 0, rb.data(), kPage, {}}};
  ASSERT_TRUE(q.Submit(r).ok());
  EXPECT_EQ(std::memcmp(ra.data(), wa.data(), kPage), 0);
  EXPECT_EQ(std::memcmp(rb.data(), wb.data(), kPage), 0);
  const UringQueueStats st = GetUringQueueStats(q);
  if (st.file_slots == 0) GTEST_SKIP() << "the kernel refused a registered file table";
  EXPECT_EQ(st.file_registrations, 2u);
  EXPECT_EQ(st.fixed_file_sqes, st.sqes);
}

// The kernel hands a closed file's descriptor number to the next file
// opened; the queue still holds the closed file in its slot, so a request
// for the new file must not be routed there by number.
TEST_F(UringQueueTest, AReusedDescriptorNeverReachesTheOldFile) {
  Result<std::unique_ptr<IoQueue>> qr = NewUringIoQueue(4);
  ASSERT_TRUE(qr.ok());
  IoQueue& q = **qr;
  AlignedBuffer buf(kPage);
  auto fill = [&](File* f, char c) {
    std::memset(buf.data(), c, kPage);
    IoRequest w{IoRequest::Op::kWrite, f, 0, buf.data(), kPage, {}};
    return q.Submit(std::span<IoRequest>(&w, 1)).ok();
  };
  auto first_byte = [&](File* f) {
    std::memset(buf.data(), 0, kPage);
    IoRequest r{IoRequest::Op::kRead, f, 0, buf.data(), kPage, {}};
    return q.Submit(std::span<IoRequest>(&r, 1)).ok() ? buf.data()[0] : '?';
  };
  auto old_file = OpenDirect("old");
  ASSERT_NE(old_file, nullptr);
  ASSERT_TRUE(fill(old_file.get(), 'o'));
  ASSERT_EQ(first_byte(old_file.get()), 'o');
  const int old_fd = old_file->fd();
  old_file.reset();  // closes the descriptor; the ring's slot keeps the file alive
  auto new_file = OpenDirect("new");
  ASSERT_NE(new_file, nullptr);
  ASSERT_EQ(new_file->fd(), old_fd) << "the test needs the descriptor number reused";
  ASSERT_TRUE(fill(new_file.get(), 'n'));
  EXPECT_EQ(first_byte(new_file.get()), 'n');
  auto check = OpenDirect("old");  // what the old file holds: untouched by the writes to the new one
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(first_byte(check.get()), 'o');
}

// A full table: files beyond it use their descriptors while requests are in
// flight, and take the least recently used slot once the queue is idle.
TEST_F(UringQueueTest, FullFileTable) {
  Result<std::unique_ptr<IoQueue>> qr = NewUringIoQueue(8, kUringMaxTransfer, /*file_slots=*/2);
  ASSERT_TRUE(qr.ok());
  IoQueue& q = **qr;
  std::vector<std::unique_ptr<File>> files;
  AlignedBuffer data(4 * kPage), got(4 * kPage);
  for (int i = 0; i < 4; ++i) {
    files.push_back(OpenDirect("full_" + std::to_string(i)));
    ASSERT_NE(files.back(), nullptr);
    std::memset(data.data() + i * kPage, 'A' + i, kPage);
    ASSERT_TRUE(files.back()->WriteAt(0, data.data() + i * kPage, kPage).ok());
  }
  auto read_all = [&](std::vector<int> which) {
    std::vector<IoRequest> reqs;
    for (int i : which) reqs.push_back({IoRequest::Op::kRead, files[i].get(), 0, got.data() + i * kPage, kPage, {}});
    return q.Submit(reqs).ok();
  };
  std::memset(got.data(), 0, got.size());
  ASSERT_TRUE(read_all({0, 1, 2, 3}));  // all in flight together
  EXPECT_EQ(std::memcmp(got.data(), data.data(), data.size()), 0);
  UringQueueStats st = GetUringQueueStats(q);
  if (st.file_slots == 0) GTEST_SKIP() << "the kernel refused a registered file table";
  EXPECT_EQ(st.file_slots, 2u);
  EXPECT_EQ(st.file_registrations, 2u);
  EXPECT_EQ(st.fixed_file_sqes, 2u);  // files 2 and 3 went by descriptor
  std::memset(got.data(), 0, got.size());
  ASSERT_TRUE(read_all({3}));  // idle queue: file 3 takes file 0's slot (least recently used)
  ASSERT_TRUE(read_all({0}));  // and file 0 takes file 1's
  ASSERT_TRUE(read_all({3}));
  EXPECT_EQ(std::memcmp(got.data() + 3 * kPage, data.data() + 3 * kPage, kPage), 0);
  EXPECT_EQ(std::memcmp(got.data(), data.data(), kPage), 0);
  st = GetUringQueueStats(q);
  EXPECT_EQ(st.file_registrations, 4u);
  EXPECT_EQ(st.fixed_file_sqes, 5u);
}

TEST_F(UringQueueTest, RejectsBadArguments) {
  EXPECT_EQ(NewUringIoQueue(0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(NewUringIoQueue(1u << 20).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(NewUringIoQueue(4, 1000).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(fs_.NewIoQueue(0).status().code(), Code::kInvalidArgument);
}

// Registered buffers within a small arena (fits the default 8 MiB
// RLIMIT_MEMLOCK), fixed path confirmed through the counters.
TEST_F(UringQueueTest, RegisteredBuffersSmallArena) {
  Result<std::unique_ptr<IoQueue>> qr = fs_.NewIoQueue(8);
  ASSERT_TRUE(qr.ok()) << qr.status().ToString();
  IoQueue& q = **qr;
  std::unique_ptr<File> f = OpenDirect("fixed");
  ASSERT_NE(f, nullptr);

  constexpr size_t kArena = 1 << 20;
  AlignedBuffer arena(kArena), outside(64 * 1024);
  const iovec region{arena.data(), kArena};
  Status s = q.RegisterBuffers(std::span<const iovec>(&region, 1));
  if (!s.ok()) GTEST_SKIP() << "cannot register 1 MiB here: " << s.ToString();

  std::mt19937_64 rng(5);
  FillRandom(rng, arena.data(), kArena);
  FillRandom(rng, outside.data(), outside.size());
  // 16 writes of 64 KiB from the arena, one from unregistered memory.
  std::vector<IoRequest> reqs;
  for (size_t i = 0; i < 16; ++i) {
    reqs.push_back({IoRequest::Op::kWrite, f.get(), i * 65536, arena.data() + i * 65536, 65536, {}});
  }
  reqs.push_back({IoRequest::Op::kWrite, f.get(), kArena, outside.data(), outside.size(), {}});
  ASSERT_TRUE(q.Submit(reqs).ok());
  UringQueueStats st = GetUringQueueStats(q);
  EXPECT_EQ(st.fixed_sqes, 16u);
  EXPECT_EQ(st.sqes, 17u);

  // Read everything back into the (cleared) arena with fixed reads.
  std::vector<char> expect(arena.data(), arena.data() + kArena);
  std::memset(arena.data(), 0, kArena);
  reqs.clear();
  for (size_t i = 0; i < 4; ++i) {
    reqs.push_back({IoRequest::Op::kRead, f.get(), i * (kArena / 4), arena.data() + i * (kArena / 4), kArena / 4, {}});
  }
  ASSERT_TRUE(q.Submit(reqs).ok());
  EXPECT_EQ(std::memcmp(expect.data(), arena.data(), kArena), 0);
  st = GetUringQueueStats(q);
  EXPECT_EQ(st.fixed_sqes, 20u);

  // Unregistering (an empty set) turns the fixed path off again.
  ASSERT_TRUE(q.RegisterBuffers({}).ok());
  ASSERT_TRUE(q.Submit(std::span<IoRequest>(reqs.data(), 1)).ok());
  EXPECT_EQ(GetUringQueueStats(q).fixed_sqes, 20u);
}

// Registering the same regions plus new ones adds the new ones (no unpinning
// and pinning again of the old); any other set replaces the registration.
TEST_F(UringQueueTest, AddedRegionsAreAppended) {
  Result<std::unique_ptr<IoQueue>> qr = NewUringIoQueue(4);
  ASSERT_TRUE(qr.ok()) << qr.status().ToString();
  IoQueue& q = **qr;
  std::unique_ptr<File> f = OpenDirect("append");
  ASSERT_NE(f, nullptr);
  AlignedBuffer a(1 << 20), b(1 << 20);
  std::mt19937_64 rng(9);
  FillRandom(rng, a.data(), 1 << 20);
  FillRandom(rng, b.data(), 1 << 20);
  const iovec ra{a.data(), 1 << 20}, rb{b.data(), 1 << 20};
  auto write_both = [&] {
    std::vector<IoRequest> reqs;
    reqs.push_back({IoRequest::Op::kWrite, f.get(), 0, a.data(), 1 << 20, {}});
    reqs.push_back({IoRequest::Op::kWrite, f.get(), 1 << 20, b.data(), 1 << 20, {}});
    const uint64_t before = GetUringQueueStats(q).fixed_sqes;
    EXPECT_TRUE(q.Submit(reqs).ok());
    return GetUringQueueStats(q).fixed_sqes - before;
  };
  Status s = q.RegisterBuffers({&ra, 1});
  if (!s.ok()) GTEST_SKIP() << "cannot register 1 MiB here: " << s.ToString();
  EXPECT_EQ(write_both(), 1u);  // only a is registered
  const iovec both[2] = {ra, rb};
  ASSERT_TRUE(q.RegisterBuffers(both).ok());
  EXPECT_EQ(GetUringQueueStats(q).buffer_appends, 1u);
  EXPECT_EQ(write_both(), 2u);
  ASSERT_TRUE(q.RegisterBuffers({&rb, 1}).ok());  // not an extension: replaced
  EXPECT_EQ(GetUringQueueStats(q).buffer_appends, 1u);
  EXPECT_EQ(write_both(), 1u);
  // What was written is in the file.
  AlignedBuffer back(2 << 20);
  ASSERT_TRUE(f->ReadAt(0, back.data(), 2 << 20).ok());
  EXPECT_EQ(std::memcmp(back.data(), a.data(), 1 << 20), 0);
  EXPECT_EQ(std::memcmp(back.data() + (1 << 20), b.data(), 1 << 20), 0);
}

// A queue made on one thread and used on others keeps working (the
// single-issuer ring binds to its first user and is rebuilt on hand-off).
TEST_F(UringQueueTest, HandOffBetweenThreads) {
  Result<std::unique_ptr<IoQueue>> qr = NewUringIoQueue(4);
  ASSERT_TRUE(qr.ok());
  IoQueue& q = **qr;
  OpenFlags flags;
  flags.create = true;
  Result<std::unique_ptr<File>> f = fs_.Open(dir_.File("handoff"), flags);
  ASSERT_TRUE(f.ok());
  AlignedBuffer buf(8192);
  const iovec region{buf.data(), buf.size()};
  ASSERT_TRUE(q.RegisterBuffers(std::span<const iovec>(&region, 1)).ok());

  auto write_and_check = [&](char fill) {
    std::memset(buf.data(), fill, 4096);
    IoRequest w{IoRequest::Op::kWrite, f->get(), 0, buf.data(), 4096, {}};
    if (!q.Submit(std::span<IoRequest>(&w, 1)).ok()) return false;
    IoRequest r{IoRequest::Op::kRead, f->get(), 0, buf.data() + 4096, 4096, {}};
    if (!q.Submit(std::span<IoRequest>(&r, 1)).ok()) return false;
    return std::memcmp(buf.data(), buf.data() + 4096, 4096) == 0 && buf.data()[4096] == fill;
  };
  EXPECT_TRUE(write_and_check('a'));
  bool other_ok = false;
  std::thread t([&] { other_ok = write_and_check('b'); });
  t.join();
  EXPECT_TRUE(other_ok);
  EXPECT_TRUE(write_and_check('c'));
  const UringQueueStats st = GetUringQueueStats(q);
  if (st.setup_flags & IORING_SETUP_SINGLE_ISSUER) {
    EXPECT_EQ(st.ring_rebuilds, 2u);
  }
  EXPECT_EQ(st.fixed_sqes, 6u);  // registration survived the rebuilds
}

}  // namespace
}  // namespace kvtier
