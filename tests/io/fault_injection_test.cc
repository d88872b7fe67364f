#include "doubles/fault_injection.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "io/io_test_util.h"
#include "io/posix_file_system.h"
#include "io/uring_queue.h"

namespace kvtier {
namespace {

using testing::TempDir;

class FaultInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    fs_ = std::make_shared<FaultInjectionFileSystem>(DefaultFileSystem(IoBackend::kPosix), /*seed=*/42);
  }

  std::unique_ptr<File> MustOpen(const std::string& name) {
    OpenFlags flags;
    flags.create = true;
    Result<std::unique_ptr<File>> f = fs_->Open(dir_.File(name), flags);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(f).value() : nullptr;
  }

  TempDir dir_;
  std::shared_ptr<FaultInjectionFileSystem> fs_;
};

TEST_F(FaultInjectionTest, NthWriteFailsWithNoSpace) {
  auto f = MustOpen("seg");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->fd(), -1);
  fs_->SetFault(FaultOp::kWrite, FaultSpec::Nth(3, ENOSPC));
  const char data[4] = {'a', 'b', 'c', 'd'};
  std::vector<Code> codes;
  for (int i = 0; i < 5; ++i) codes.push_back(f->WriteAt(i * 4, data, 4).code());
  EXPECT_EQ(codes, (std::vector<Code>{Code::kOk, Code::kOk, Code::kNoSpace, Code::kOk, Code::kOk}));
  EXPECT_EQ(fs_->Calls(FaultOp::kWrite), 5u);
  EXPECT_EQ(fs_->Faults(FaultOp::kWrite), 1u);

  // The failed write never reached the file: bytes 8..11 are a hole.
  char back[20];
  ASSERT_TRUE(f->ReadAt(0, back, sizeof(back)).ok());
  EXPECT_EQ(std::string(back + 8, 4), std::string(4, '\0'));
  EXPECT_EQ(std::string(back + 12, 4), "abcd");
}

TEST_F(FaultInjectionTest, MessageNamesOpPathAndErrno) {
  auto f = MustOpen("named");
  ASSERT_NE(f, nullptr);
  fs_->SetFault(FaultOp::kSync, FaultSpec::Nth(1, EIO));
  Status s = f->Sync();
  EXPECT_EQ(s.code(), Code::kIOError);
  EXPECT_EQ(s.message(), "injected fault: sync " + dir_.File("named") + ": " + std::strerror(EIO));
}

TEST_F(FaultInjectionTest, EveryCallAfterN) {
  auto f = MustOpen("after");
  ASSERT_NE(f, nullptr);
  fs_->SetFault(FaultOp::kSync, FaultSpec::After(2));
  EXPECT_TRUE(f->Sync().ok());
  EXPECT_TRUE(f->Sync().ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(f->Sync().code(), Code::kIOError);
  EXPECT_EQ(fs_->Faults(FaultOp::kSync), 3u);
  fs_->ClearFault(FaultOp::kSync);
  EXPECT_TRUE(f->Sync().ok());
  // After(0): every call.
  fs_->SetFault(FaultOp::kSync, FaultSpec::After(0, ENOSPC));
  EXPECT_EQ(f->Sync().code(), Code::kNoSpace);
}

TEST_F(FaultInjectionTest, RandomIsSeededAndDeterministic) {
  auto pattern = [&](uint64_t seed, double p) {
    FaultInjectionFileSystem fs(DefaultFileSystem(IoBackend::kPosix), seed);
    fs.SetFault(FaultOp::kExists, FaultSpec::Random(p));
    std::string out;
    for (int i = 0; i < 200; ++i) out += fs.Exists(dir_.path()).ok() ? '.' : 'X';
    return out;
  };
  const std::string a = pattern(7, 0.3);
  EXPECT_EQ(a, pattern(7, 0.3));
  EXPECT_NE(a, pattern(8, 0.3));
  const auto fails = std::count(a.begin(), a.end(), 'X');
  EXPECT_GT(fails, 30);
  EXPECT_LT(fails, 90);
  EXPECT_EQ(pattern(1, 0.0), std::string(200, '.'));
  EXPECT_EQ(pattern(1, 1.0), std::string(200, 'X'));

  // Reseed replays the sequence.
  fs_->SetFault(FaultOp::kExists, FaultSpec::Random(0.3));
  fs_->Reseed(7);
  std::string b;
  for (int i = 0; i < 200; ++i) b += fs_->Exists(dir_.path()).ok() ? '.' : 'X';
  EXPECT_EQ(a, b);
}

TEST_F(FaultInjectionTest, ShortWriteTransfersHalf) {
  auto f = MustOpen("short_write");
  ASSERT_NE(f, nullptr);
  fs_->SetFault(FaultOp::kWrite, FaultSpec::Nth(1, EIO).Short());
  std::vector<char> data(8192);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  EXPECT_EQ(f->WriteAt(0, data.data(), data.size()).code(), Code::kIOError);
  Result<uint64_t> size = f->Size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 4096u);
  std::vector<char> back(4096);
  ASSERT_TRUE(f->ReadAt(0, back.data(), back.size()).ok());
  EXPECT_TRUE(std::equal(back.begin(), back.end(), data.begin()));
}

TEST_F(FaultInjectionTest, ShortReadTransfersHalf) {
  auto f = MustOpen("short_read");
  ASSERT_NE(f, nullptr);
  std::vector<char> data(8192, 'r');
  ASSERT_TRUE(f->WriteAt(0, data.data(), data.size()).ok());
  fs_->SetFault(FaultOp::kRead, FaultSpec::Nth(1, ENOSPC).Short());
  std::vector<char> back(8192, '?');
  EXPECT_EQ(f->ReadAt(0, back.data(), back.size()).code(), Code::kNoSpace);
  EXPECT_EQ(std::string(back.begin(), back.begin() + 4096), std::string(4096, 'r'));
  EXPECT_EQ(std::string(back.begin() + 4096, back.end()), std::string(4096, '?'));
}

TEST_F(FaultInjectionTest, PathFilter) {
  auto seg = MustOpen("segment-1");
  auto idx = MustOpen("index");
  ASSERT_NE(seg, nullptr);
  ASSERT_NE(idx, nullptr);
  fs_->SetFault(FaultOp::kSync, FaultSpec::Nth(2).OnPaths("segment"));
  EXPECT_TRUE(seg->Sync().ok());
  EXPECT_TRUE(idx->Sync().ok());  // not counted
  EXPECT_TRUE(idx->Sync().ok());
  EXPECT_EQ(seg->Sync().code(), Code::kIOError);  // the 2nd matching call
  EXPECT_EQ(fs_->Calls(FaultOp::kSync), 4u);
  EXPECT_EQ(fs_->Faults(FaultOp::kSync), 1u);
}

// Each operation kind fails on exactly its configured call, with the code
// its errno maps to, and then works again.
TEST_F(FaultInjectionTest, EveryOperationKind) {
  auto f = MustOpen("ops");
  ASSERT_NE(f, nullptr);
  char buf[4096] = {};
  ASSERT_TRUE(f->WriteAt(0, buf, sizeof(buf)).ok());
  ASSERT_TRUE(fs_->CreateDir(dir_.File("d"), 0700).ok());
  auto St = [](auto&& r) { return Status(r.status()); };
  struct Case {
    FaultOp op;
    std::function<Status()> call;
  };
  const std::vector<Case> cases = {
      {FaultOp::kOpen, [&] { return St(fs_->Open(dir_.File("ops"), OpenFlags{})); }},
      {FaultOp::kRead, [&] { return f->ReadAt(0, buf, sizeof(buf)); }},
      {FaultOp::kWrite, [&] { return f->WriteAt(0, buf, sizeof(buf)); }},
      {FaultOp::kSync, [&] { return f->Sync(); }},
      {FaultOp::kAllocate, [&] { return f->Allocate(0, 8192); }},
      {FaultOp::kPunchHole,
       [&] {
         Status s = f->PunchHole(0, 4096);
         return s.code() == Code::kNotSupported ? Status::OK() : s;
       }},
      {FaultOp::kTruncate, [&] { return f->Truncate(8192); }},
      {FaultOp::kSize, [&] { return St(f->Size()); }},
      {FaultOp::kCreateDir, [&] { return fs_->CreateDir(dir_.File("d"), 0700); }},
      {FaultOp::kSyncDir, [&] { return fs_->SyncDir(dir_.path()); }},
      {FaultOp::kRename,
       [&] {
         Status s = fs_->Rename(dir_.File("ops"), dir_.File("ops2"));
         if (s.ok()) s = fs_->base()->Rename(dir_.File("ops2"), dir_.File("ops"));
         return s;
       }},
      {FaultOp::kRemove,
       [&] {
         Status s = fs_->Remove(dir_.File("d"));
         if (s.ok()) s = fs_->CreateDir(dir_.File("d"), 0700);
         return s;
       }},
      {FaultOp::kExists, [&] { return St(fs_->Exists(dir_.path())); }},
      {FaultOp::kListDir, [&] { return St(fs_->ListDir(dir_.path())); }},
      {FaultOp::kLock, [&] { return St(fs_->Lock(dir_.File("LOCK"), true, 0600)); }},
      {FaultOp::kFreeSpace, [&] { return St(fs_->FreeSpace(dir_.path())); }},
  };
  ASSERT_EQ(cases.size(), kNumFaultOps);
  int i = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(FaultOpName(c.op));
    const int err = (i++ % 2 == 0) ? EIO : ENOSPC;
    const Code want = err == EIO ? Code::kIOError : Code::kNoSpace;
    fs_->ResetCounts();
    fs_->SetFault(c.op, FaultSpec::Nth(2, err));
    EXPECT_TRUE(c.call().ok());
    Status s = c.call();
    EXPECT_EQ(s.code(), want) << s.ToString();
    EXPECT_NE(s.message().find(std::string("injected fault: ") + FaultOpName(c.op)), std::string::npos);
    EXPECT_TRUE(c.call().ok());
    EXPECT_EQ(fs_->Calls(c.op), 3u);
    EXPECT_EQ(fs_->Faults(c.op), 1u);
    // Only this kind was touched by the spec.
    for (size_t k = 0; k < kNumFaultOps; ++k) {
      if (static_cast<FaultOp>(k) != c.op) {
        EXPECT_EQ(fs_->Faults(static_cast<FaultOp>(k)), 0u);
      }
    }
    fs_->ClearFault(c.op);
  }
}

TEST_F(FaultInjectionTest, OpenFaultWithEnoentIsNotFound) {
  fs_->SetFault(FaultOp::kOpen, FaultSpec::Nth(1, ENOENT));
  OpenFlags flags;
  flags.create = true;
  EXPECT_EQ(fs_->Open(dir_.File("x"), flags).status().code(), Code::kNotFound);
  Result<bool> exists = fs_->Exists(dir_.File("x"));
  ASSERT_TRUE(exists.ok());
  EXPECT_FALSE(*exists);  // the failed open never reached the disk
}

// Faults apply to batched I/O: the wrapper's own queue, and an io_uring
// queue too (wrapped files have no descriptor, so it calls ReadAt/WriteAt).
TEST_F(FaultInjectionTest, BatchedIo) {
  auto f = MustOpen("batch");
  ASSERT_NE(f, nullptr);
  std::vector<char> data(4 * 4096, 'b');
  ASSERT_TRUE(f->WriteAt(0, data.data(), data.size()).ok());

  std::vector<std::unique_ptr<IoQueue>> queues;
  Result<std::unique_ptr<IoQueue>> own = fs_->NewIoQueue(4);
  ASSERT_TRUE(own.ok());
  EXPECT_STREQ((*own)->backend(), "posix");
  EXPECT_EQ(fs_->IoBackendName(), "posix");
  queues.push_back(std::move(own).value());
  if (IoUringAvailable()) {
    Result<std::unique_ptr<IoQueue>> uring = NewUringIoQueue(4);
    ASSERT_TRUE(uring.ok());
    queues.push_back(std::move(uring).value());
  }
  for (auto& q : queues) {
    SCOPED_TRACE(q->backend());
    fs_->SetFault(FaultOp::kRead, FaultSpec::Nth(2, ENOSPC));
    std::vector<char> out(4 * 4096);
    std::vector<IoRequest> reqs(4);
    for (int i = 0; i < 4; ++i) reqs[i] = {IoRequest::Op::kRead, f.get(), i * 4096u, out.data() + i * 4096, 4096, {}};
    Status s = q->Submit(reqs);
    EXPECT_EQ(s.code(), Code::kNoSpace) << s.ToString();
    EXPECT_TRUE(reqs[0].status.ok());
    EXPECT_EQ(reqs[1].status.code(), Code::kNoSpace);
    EXPECT_TRUE(reqs[2].status.ok());
    EXPECT_TRUE(reqs[3].status.ok());

    fs_->SetFault(FaultOp::kWrite, FaultSpec::After(0, EIO));
    IoRequest w{IoRequest::Op::kWrite, f.get(), 0, data.data(), 4096, {}};
    EXPECT_EQ(q->Submit(std::span<IoRequest>(&w, 1)).code(), Code::kIOError);
    fs_->ClearAllFaults();
  }
}

TEST_F(FaultInjectionTest, ThreadSafeCounting) {
  auto f = MustOpen("threads");
  ASSERT_NE(f, nullptr);
  fs_->SetFault(FaultOp::kWrite, FaultSpec::Random(0.25));
  constexpr int kThreads = 4, kPerThread = 250;
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      char c = static_cast<char>('0' + t);
      for (int i = 0; i < kPerThread; ++i) {
        if (!f->WriteAt(t * kPerThread + i, &c, 1).ok()) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  int total = 0;
  for (int n : failures) total += n;
  EXPECT_EQ(fs_->Calls(FaultOp::kWrite), uint64_t{kThreads * kPerThread});
  EXPECT_EQ(fs_->Faults(FaultOp::kWrite), static_cast<uint64_t>(total));
  EXPECT_GT(total, 0);
}

TEST_F(FaultInjectionTest, FilesOutliveTheWrapper) {
  auto f = MustOpen("outlive");
  ASSERT_NE(f, nullptr);
  fs_.reset();
  char c = 'o';
  EXPECT_TRUE(f->WriteAt(0, &c, 1).ok());
}

}  // namespace
}  // namespace kvtier
