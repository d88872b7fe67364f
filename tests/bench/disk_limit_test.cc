// The disk limit of bench/gpu (bench/harness/disk_limit.h): it reads only
// what a preallocated segment file holds, and its sweep returns a rate and
// the point that gave it.
#include "harness/disk_limit.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

namespace kvbench {
namespace {

constexpr size_t kMiB = 1u << 20;

class DiskLimitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) / ("disk_limit_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A file of `size` bytes allocated up front, `written` of them written.
  std::string Preallocated(const std::string& name, size_t size, size_t written) {
    const std::string path = (dir_ / name).string();
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::posix_fallocate(fd, 0, static_cast<off_t>(size)), 0);
    const std::vector<char> data(written, 'k');
    EXPECT_EQ(::pwrite(fd, data.data(), data.size(), 0), static_cast<ssize_t>(written));
    EXPECT_EQ(::fsync(fd), 0);
    ::close(fd);
    return path;
  }
  static uint64_t Written(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    const uint64_t n = fd >= 0 ? WrittenBytes(fd) : 0;
    if (fd >= 0) ::close(fd);
    return n;
  }

  std::filesystem::path dir_;
};

TEST_F(DiskLimitTest, CountsAPreallocatedFileUpToItsFirstHole) {
  const std::string path = Preallocated("seg-000000.kvs", 16 * kMiB, 4 * kMiB);
  ASSERT_EQ(std::filesystem::file_size(path), 16 * kMiB);
  const uint64_t n = Written(path);
  if (n == 16 * kMiB) GTEST_SKIP() << "this file system keeps no unwritten extents (tmpfs?)";
  EXPECT_EQ(n, 4 * kMiB);
}

TEST_F(DiskLimitTest, AFileWithoutHolesCountsWhole) {
  const std::string path = Preallocated("full.kvs", 3 * kMiB, 3 * kMiB);
  EXPECT_EQ(Written(path), 3 * kMiB);
}

TEST_F(DiskLimitTest, TheSweepReadsAndNamesItsBest) {
  const std::string path = Preallocated("seg-000001.kvs", 8 * kMiB, 8 * kMiB);
  const int probe = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  if (probe < 0) GTEST_SKIP() << "no O_DIRECT here";
  ::close(probe);
  const ReadLimit best = BestRead({path}, 1 * kMiB, 8 * kMiB);
  EXPECT_GT(best.gbps, 0.0);
  EXPECT_TRUE(best.qd == 1 || best.qd == 4 || best.qd == 16 || best.qd == 64) << best.qd;
  // Nothing to read: no limit, rather than a rate of zeros.
  const std::string empty = Preallocated("seg-000002.kvs", 8 * kMiB, 0);
  if (Written(empty) == 0) {
    EXPECT_EQ(UringRead({empty}, 1 * kMiB, 4, 8 * kMiB, false), 0.0);
  }
}

// A store's reads replayed: every extent read once, whatever the depth; an
// extent past the file's end (a short read) gives no rate, not a wrong one.
TEST_F(DiskLimitTest, TheReplayReadsEachExtentAndRefusesShortReads) {
  const std::string path = Preallocated("seg-000003.kvs", 8 * kMiB, 8 * kMiB);
  const int probe = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  if (probe < 0) GTEST_SKIP() << "no O_DIRECT here";
  ::close(probe);
  std::vector<Extent> extents;
  for (uint64_t off = 0; off + 516 * 1024 <= 8 * kMiB; off += 516 * 1024) extents.push_back({path, off, 516 * 1024});
  for (unsigned qd : {1u, 4u, 32u}) EXPECT_GT(ReplayReads(extents, qd), 0.0) << qd;
  const ReadLimit best = BestReplay(extents);
  EXPECT_GT(best.gbps, 0.0);
  EXPECT_TRUE(best.qd >= 1 && best.qd <= 32) << best.qd;
  extents.push_back({path, 8 * kMiB - 4096, 2 * 4096});  // half of it past the end
  EXPECT_EQ(ReplayReads(extents, 4), 0.0);
  EXPECT_EQ(ReplayReads({{(dir_ / "missing.kvs").string(), 0, 4096}}, 1), 0.0);
  EXPECT_EQ(ReplayReads({}, 1), 0.0);
}

}  // namespace
}  // namespace kvbench
