#include "io/posix_file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "io/io_test_util.h"
#include "io/uring_queue.h"

namespace kvtier {
namespace {

using testing::AlignedBuffer;
using testing::FillRandom;
using testing::TempDir;

class PosixFileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }

  std::unique_ptr<File> MustOpen(const std::string& path, OpenFlags flags) {
    Result<std::unique_ptr<File>> f = fs_.Open(path, flags);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(f).value() : nullptr;
  }

  static OpenFlags Create(bool direct = false) {
    OpenFlags f;
    f.create = true;
    f.direct = direct;
    return f;
  }

  TempDir dir_;
  PosixFileSystem fs_{IoBackend::kPosix};
};

TEST_F(PosixFileSystemTest, RoundTripBuffered) {
  const std::string path = dir_.File("data");
  auto f = MustOpen(path, Create());
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(f->direct());
  EXPECT_GE(f->fd(), 0);
  EXPECT_EQ(f->path(), path);

  std::mt19937_64 rng(1);
  std::vector<char> in(1 << 20), out(1 << 20);
  FillRandom(rng, in.data(), in.size());
  ASSERT_TRUE(f->WriteAt(12345, in.data(), in.size()).ok());
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(f->ReadAt(12345, out.data(), out.size()).ok());
  EXPECT_EQ(in, out);
  Result<uint64_t> size = f->Size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 12345u + in.size());

  // A second handle sees the same bytes.
  OpenFlags ro;
  ro.read_only = true;
  auto g = MustOpen(path, ro);
  ASSERT_NE(g, nullptr);
  std::vector<char> again(in.size());
  ASSERT_TRUE(g->ReadAt(12345, again.data(), again.size()).ok());
  EXPECT_EQ(in, again);
}

TEST_F(PosixFileSystemTest, RoundTripDirect) {
  const std::string path = dir_.File("direct");
  auto f = MustOpen(path, Create(/*direct=*/true));
  ASSERT_NE(f, nullptr);
  // /tmp here is a disk file system, which takes O_DIRECT; where it does not,
  // the fallback must still give a working file.
  if (!f->direct()) std::fprintf(stderr, "note: O_DIRECT refused on /tmp, testing the buffered fallback\n");

  constexpr size_t kSize = 256 * 1024;
  AlignedBuffer in(kSize), out(kSize);
  std::mt19937_64 rng(2);
  FillRandom(rng, in.data(), kSize);
  ASSERT_TRUE(f->WriteAt(8 * 4096, in.data(), kSize).ok());
  ASSERT_TRUE(f->Sync().ok());
  std::memset(out.data(), 0, kSize);
  ASSERT_TRUE(f->ReadAt(8 * 4096, out.data(), kSize).ok());
  EXPECT_EQ(std::memcmp(in.data(), out.data(), kSize), 0);

  // Buffered readers see what the direct writer wrote.
  auto g = MustOpen(path, OpenFlags{});
  ASSERT_NE(g, nullptr);
  std::vector<char> buffered(kSize);
  ASSERT_TRUE(g->ReadAt(8 * 4096, buffered.data(), kSize).ok());
  EXPECT_EQ(std::memcmp(in.data(), buffered.data(), kSize), 0);
}

// ReadAtV: the bytes at an offset, one after another into pieces of
// separate buffers (a header page, payload pages, a tail page), direct and
// buffered; past the end it fails as ReadAt does, naming a short read.
TEST_F(PosixFileSystemTest, VectoredReadsFillEachPiece) {
  for (bool direct : {true, false}) {
    const std::string path = dir_.File(direct ? "vec_direct" : "vec_buffered");
    auto f = MustOpen(path, Create(direct));
    ASSERT_NE(f, nullptr);
    constexpr size_t kSize = 64 * 4096;
    AlignedBuffer in(kSize);
    std::mt19937_64 rng(3);
    FillRandom(rng, in.data(), kSize);
    ASSERT_TRUE(f->WriteAt(0, in.data(), kSize).ok());
    AlignedBuffer a(4096), b(40 * 4096), c(4096);
    std::memset(b.data(), 0, 40 * 4096);
    const iovec pieces[3] = {{a.data(), 4096}, {b.data(), 40 * 4096}, {c.data(), 4096}};
    ASSERT_TRUE(f->ReadAtV(4 * 4096, pieces).ok());
    EXPECT_EQ(std::memcmp(a.data(), in.data() + 4 * 4096, 4096), 0);
    EXPECT_EQ(std::memcmp(b.data(), in.data() + 5 * 4096, 40 * 4096), 0);
    EXPECT_EQ(std::memcmp(c.data(), in.data() + 45 * 4096, 4096), 0);
    Status s = f->ReadAtV(60 * 4096, pieces);  // 42 pages from page 60 of 64
    EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find("short read"), std::string::npos) << s.ToString();
  }
}

// read_align(): the granule a file's reads may use. Direct files report
// the file system's (statx STATX_DIOALIGN; 512 on a disk of 512-byte
// sectors), buffered ones 512; reads of that granule land every byte.
TEST_F(PosixFileSystemTest, ReadsOfTheReportedGranuleWork) {
  const std::string path = dir_.File("granule");
  auto f = MustOpen(path, Create(/*direct=*/true));
  ASSERT_NE(f, nullptr);
  const uint32_t g = f->read_align();
  EXPECT_TRUE(g >= 512 && g <= 4096 && (g & (g - 1)) == 0) << g;
  // What the kernel says, where it says it (Linux 6.1 on): the same.
  struct statx sx {};
  if (f->direct() && ::statx(f->fd(), "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
      (sx.stx_mask & STATX_DIOALIGN) != 0 && sx.stx_dio_offset_align >= 512 &&
      std::max(sx.stx_dio_offset_align, sx.stx_dio_mem_align) <= 4096) {
    EXPECT_EQ(g, std::max(sx.stx_dio_offset_align, sx.stx_dio_mem_align));
  }
  constexpr size_t kSize = 4 * 4096;
  AlignedBuffer in(kSize), out(kSize);
  std::mt19937_64 rng(3);
  FillRandom(rng, in.data(), kSize);
  ASSERT_TRUE(f->WriteAt(0, in.data(), kSize).ok());
  ASSERT_TRUE(f->Sync().ok());
  // Three granules from the second one: inside a page where g < 4096.
  std::memset(out.data(), 0, kSize);
  Status st = f->ReadAt(g, out.data(), 3 * g);
  ASSERT_TRUE(st.ok()) << st.ToString() << " (granule " << g << ")";
  EXPECT_EQ(std::memcmp(in.data() + g, out.data(), 3 * g), 0);

  auto b = MustOpen(path, OpenFlags{});
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->read_align(), 512u);
}

TEST_F(PosixFileSystemTest, ShortReadAtEofIsCorruption) {
  const std::string path = dir_.File("short");
  auto f = MustOpen(path, Create());
  ASSERT_NE(f, nullptr);
  std::vector<char> buf(200, 'x');
  ASSERT_TRUE(f->WriteAt(0, buf.data(), 100).ok());
  Status s = f->ReadAt(0, buf.data(), 200);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("short read"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
  // Entirely past the end too.
  s = f->ReadAt(4096, buf.data(), 1);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  // Exactly up to the end is fine.
  EXPECT_TRUE(f->ReadAt(0, buf.data(), 100).ok());
}

TEST_F(PosixFileSystemTest, ShortDirectReadAtEofIsCorruption) {
  const std::string path = dir_.File("short_direct");
  {
    auto w = MustOpen(path, Create());
    ASSERT_NE(w, nullptr);
    std::vector<char> data(10000, 'd');  // not a multiple of 4096
    ASSERT_TRUE(w->WriteAt(0, data.data(), data.size()).ok());
  }
  OpenFlags flags;
  flags.direct = true;
  auto f = MustOpen(path, flags);
  ASSERT_NE(f, nullptr);
  AlignedBuffer buf(3 * 4096);
  Status s = f->ReadAt(0, buf.data(), buf.size());
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("short read"), std::string::npos) << s.ToString();
}

TEST_F(PosixFileSystemTest, OpenErrors) {
  const std::string path = dir_.File("missing");
  Result<std::unique_ptr<File>> f = fs_.Open(path, OpenFlags{});
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kNotFound);
  EXPECT_NE(f.status().message().find(path), std::string::npos);

  ASSERT_NE(MustOpen(path, Create()), nullptr);
  OpenFlags excl = Create();
  excl.exclusive = true;
  f = fs_.Open(path, excl);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kIOError);
  EXPECT_NE(f.status().message().find("File exists"), std::string::npos) << f.status().ToString();

  // Writing through a read-only handle fails with the path in the message.
  OpenFlags ro;
  ro.read_only = true;
  auto r = MustOpen(path, ro);
  ASSERT_NE(r, nullptr);
  char c = 'x';
  Status s = r->WriteAt(0, &c, 1);
  EXPECT_EQ(s.code(), Code::kIOError);
  EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
}

TEST_F(PosixFileSystemTest, ExclusiveCreateWithDirect) {
  OpenFlags flags = Create(/*direct=*/true);
  flags.exclusive = true;
  auto f = MustOpen(dir_.File("excl_direct"), flags);
  ASSERT_NE(f, nullptr);
  Result<uint64_t> size = f->Size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 0u);
}

TEST_F(PosixFileSystemTest, NoFollowRefusesSymlink) {
  const std::string target = dir_.File("target");
  const std::string link = dir_.File("link");
  ASSERT_NE(MustOpen(target, Create()), nullptr);
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  Result<std::unique_ptr<File>> f = fs_.Open(link, OpenFlags{});
  ASSERT_FALSE(f.ok());
  // Not an I/O fault: the path names something that is not a store file
  // (the segment table ignores such entries instead of refusing the store).
  EXPECT_EQ(f.status().code(), Code::kInvalidArgument) << f.status().ToString();
  EXPECT_NE(f.status().message().find(link), std::string::npos) << f.status().ToString();
  // A folder is refused the same way, also read-only (where open(2) succeeds).
  OpenFlags ro;
  ro.read_only = true;
  Result<std::unique_ptr<File>> d = fs_.Open(dir_.path(), ro);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kInvalidArgument) << d.status().ToString();
  // The lock file is not followed either.
  Result<std::unique_ptr<FileLock>> lock = fs_.Lock(link, true, 0600);
  EXPECT_FALSE(lock.ok());
  // The link itself exists.
  Result<bool> exists = fs_.Exists(link);
  ASSERT_TRUE(exists.ok());
  EXPECT_TRUE(*exists);
}

TEST_F(PosixFileSystemTest, LockHolderNamesTheExclusiveHolderAndChangesNothing) {
  const std::string path = dir_.File("LOCK");
  auto none = fs_.LockHolder(path);  // no file: nobody, and none is made
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());
  EXPECT_FALSE(*fs_.Exists(path));

  Result<std::unique_ptr<FileLock>> held = fs_.Lock(path, /*exclusive=*/true, 0600);
  ASSERT_TRUE(held.ok());
  auto who = fs_.LockHolder(path);
  ASSERT_TRUE(who.ok());
  ASSERT_TRUE(who->has_value());
  EXPECT_EQ(**who, static_cast<long>(::getpid()));
  // The probe took nothing: the holder still holds it, and a second
  // exclusive lock is still refused.
  EXPECT_EQ(fs_.Lock(path, true, 0600).status().code(), Code::kBusy);

  held.value().reset();
  auto free_now = fs_.LockHolder(path);
  ASSERT_TRUE(free_now.ok());
  EXPECT_FALSE(free_now->has_value());
  Result<std::unique_ptr<FileLock>> shared = fs_.Lock(path, /*exclusive=*/false, 0600);
  ASSERT_TRUE(shared.ok());
  auto with_shared = fs_.LockHolder(path);  // readers do not count as holding the store
  ASSERT_TRUE(with_shared.ok());
  EXPECT_FALSE(with_shared->has_value());
}

TEST_F(PosixFileSystemTest, LockTwiceInOneProcessIsBusy) {
  const std::string path = dir_.File("LOCK");
  Result<std::unique_ptr<FileLock>> first = fs_.Lock(path, /*exclusive=*/true, 0600);
  ASSERT_TRUE(first.ok()) << first.status().ToString();

  // flock belongs to the open file description, so a second Lock (a second
  // open) conflicts even within this process.
  Result<std::unique_ptr<FileLock>> second = fs_.Lock(path, true, 0600);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kBusy);
  const std::string pid = "pid " + std::to_string(::getpid());
  EXPECT_NE(second.status().message().find("store is in use by " + pid), std::string::npos)
      << second.status().ToString();
  EXPECT_NE(second.status().message().find(path), std::string::npos);

  Result<std::unique_ptr<FileLock>> shared = fs_.Lock(path, /*exclusive=*/false, 0600);
  ASSERT_FALSE(shared.ok());
  EXPECT_EQ(shared.status().code(), Code::kBusy);

  first.value().reset();  // release
  Result<std::unique_ptr<FileLock>> again = fs_.Lock(path, true, 0600);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  again.value().reset();

  // Shared locks coexist and keep an exclusive one out.
  Result<std::unique_ptr<FileLock>> s1 = fs_.Lock(path, false, 0600);
  Result<std::unique_ptr<FileLock>> s2 = fs_.Lock(path, false, 0600);
  ASSERT_TRUE(s1.ok());
  ASSERT_TRUE(s2.ok());
  Result<std::unique_ptr<FileLock>> x = fs_.Lock(path, true, 0600);
  ASSERT_FALSE(x.ok());
  EXPECT_EQ(x.status().code(), Code::kBusy);
}

TEST_F(PosixFileSystemTest, SyncDir) {
  EXPECT_TRUE(fs_.SyncDir(dir_.path()).ok());
  Status s = fs_.SyncDir(dir_.File("nope"));
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
}

TEST_F(PosixFileSystemTest, PunchHoleZerosRange) {
  auto f = MustOpen(dir_.File("holes"), Create());
  ASSERT_NE(f, nullptr);
  constexpr size_t kSize = 64 * 1024;
  std::vector<char> data(kSize, '\xab');
  ASSERT_TRUE(f->WriteAt(0, data.data(), kSize).ok());
  ASSERT_TRUE(f->Sync().ok());
  Status s = f->PunchHole(4096, 3 * 4096);
  if (s.code() == Code::kNotSupported) GTEST_SKIP() << s.ToString();
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<char> out(kSize);
  ASSERT_TRUE(f->ReadAt(0, out.data(), kSize).ok());
  for (size_t i = 0; i < kSize; ++i) {
    const char want = (i >= 4096 && i < 4 * 4096) ? '\0' : '\xab';
    ASSERT_EQ(out[i], want) << "at byte " << i;
  }
  Result<uint64_t> size = f->Size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, kSize);  // KEEP_SIZE
}

TEST_F(PosixFileSystemTest, AllocateAndTruncate) {
  auto f = MustOpen(dir_.File("alloc"), Create());
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->Allocate(0, 1 << 20).ok());
  Result<uint64_t> size = f->Size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 1u << 20);
  std::vector<char> zeros(4096, 'x');
  ASSERT_TRUE(f->ReadAt((1 << 20) - 4096, zeros.data(), zeros.size()).ok());
  EXPECT_EQ(zeros, std::vector<char>(4096, '\0'));
  ASSERT_TRUE(f->Truncate(5000).ok());
  size = f->Size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 5000u);
  EXPECT_TRUE(f->Allocate(0, 0).ok());
}

TEST_F(PosixFileSystemTest, DirectoriesAndNames) {
  const std::string sub = dir_.File("sub");
  ASSERT_TRUE(fs_.CreateDir(sub, 0700).ok());
  EXPECT_TRUE(fs_.CreateDir(sub, 0700).ok());  // exists: fine
  ASSERT_NE(MustOpen(dir_.File("b"), Create()), nullptr);
  ASSERT_NE(MustOpen(dir_.File("a"), Create()), nullptr);
  Status s = fs_.CreateDir(dir_.File("a"), 0700);  // exists as a file
  EXPECT_EQ(s.code(), Code::kIOError) << s.ToString();
  EXPECT_EQ(fs_.CreateDir(dir_.File("x/y"), 0700).code(), Code::kNotFound);

  Result<std::vector<std::string>> names = fs_.ListDir(dir_.path());
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b", "sub"}));
  EXPECT_EQ(fs_.ListDir(dir_.File("none")).status().code(), Code::kNotFound);

  // Rename replaces the target atomically.
  ASSERT_TRUE(fs_.Rename(dir_.File("a"), dir_.File("b")).ok());
  names = fs_.ListDir(dir_.path());
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"b", "sub"}));
  EXPECT_EQ(fs_.Rename(dir_.File("a"), dir_.File("c")).code(), Code::kNotFound);

  ASSERT_TRUE(fs_.Remove(dir_.File("b")).ok());
  ASSERT_TRUE(fs_.Remove(sub).ok());  // empty directory
  EXPECT_EQ(fs_.Remove(sub).code(), Code::kNotFound);
  Result<bool> exists = fs_.Exists(sub);
  ASSERT_TRUE(exists.ok());
  EXPECT_FALSE(*exists);
  exists = fs_.Exists(dir_.path());
  ASSERT_TRUE(exists.ok());
  EXPECT_TRUE(*exists);
  names = fs_.ListDir(dir_.path());
  ASSERT_TRUE(names.ok());
  EXPECT_TRUE(names->empty());
}

TEST_F(PosixFileSystemTest, FreeSpace) {
  Result<uint64_t> free = fs_.FreeSpace(dir_.path());
  ASSERT_TRUE(free.ok()) << free.status().ToString();
  EXPECT_GT(*free, 0u);
  EXPECT_EQ(fs_.FreeSpace(dir_.File("none")).status().code(), Code::kNotFound);
}

TEST(DefaultFileSystemTest, BackendSelection) {
  std::shared_ptr<FileSystem> posix = DefaultFileSystem(IoBackend::kPosix);
  ASSERT_NE(posix, nullptr);
  EXPECT_EQ(posix, DefaultFileSystem(IoBackend::kPosix));  // shared instance
  EXPECT_EQ(posix->IoBackendName(), "posix");
  Result<std::unique_ptr<IoQueue>> q = posix->NewIoQueue(8);
  ASSERT_TRUE(q.ok());
  EXPECT_STREQ((*q)->backend(), "posix");
  EXPECT_EQ((*q)->depth(), 8u);
  EXPECT_EQ(posix->NewIoQueue(0).status().code(), Code::kInvalidArgument);

  std::shared_ptr<FileSystem> autofs = DefaultFileSystem();
  const std::string want = IoUringAvailable() ? "io_uring" : "posix";
  EXPECT_EQ(autofs->IoBackendName(), want);
  q = autofs->NewIoQueue(4);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(std::string((*q)->backend()), want);

  std::shared_ptr<FileSystem> uring = DefaultFileSystem(IoBackend::kIoUring);
  EXPECT_EQ(uring->IoBackendName(), "io_uring");
  q = uring->NewIoQueue(4);
  if (IoUringAvailable()) {
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    EXPECT_STREQ((*q)->backend(), "io_uring");
    EXPECT_EQ(IoUringUnavailableReason(), "");
  } else {
    ASSERT_FALSE(q.ok());
    EXPECT_EQ(q.status().code(), Code::kNotSupported);
    EXPECT_NE(q.status().message().find("io_uring unavailable"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvtier
