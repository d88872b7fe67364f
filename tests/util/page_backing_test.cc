// The kernel's answer to "is this memory on huge pages" (PAGEMAP_SCAN), which
// the store's zero-copy choice rests on.
#include "util/page_backing.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace kvtier {
namespace {

constexpr size_t kHuge = 2u << 20;

class PageBackingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    map_ = mmap(nullptr, kBytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(map_, MAP_FAILED);
    base_ = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(map_) + kHuge - 1) & ~(kHuge - 1));
    if (QueryPageBacking(base_, 4096) == PageBacking::kUnknown)
      GTEST_SKIP() << "no PAGEMAP_SCAN here (Linux < 6.7 or /proc/self/pagemap unreadable)";
  }
  void TearDown() override {
    if (map_ != MAP_FAILED) munmap(map_, kBytes + kHuge);
  }
  static constexpr size_t kBytes = 3 * kHuge;
  void* map_ = MAP_FAILED;
  uint8_t* base_ = nullptr;
};

TEST_F(PageBackingTest, SmallPagesAndUnmappedPagesAreSmall) {
  madvise(base_, kBytes, MADV_NOHUGEPAGE);
  EXPECT_EQ(QueryPageBacking(base_, kBytes), PageBacking::kSmall) << "not touched yet";
  std::memset(base_, 1, kBytes);
  EXPECT_EQ(QueryPageBacking(base_, kBytes), PageBacking::kSmall);
  EXPECT_EQ(QueryPageBacking(base_ + 100, 10), PageBacking::kSmall) << "unaligned start";
  EXPECT_EQ(QueryPageBacking(base_, 0), PageBacking::kHuge) << "an empty range has no small page";
}

TEST_F(PageBackingTest, HugePagesAreHugeAndOneSmallPageSpoilsARange) {
  if (!TransparentHugePagesUsable()) GTEST_SKIP() << "transparent huge pages are off";
  madvise(base_, 2 * kHuge, MADV_HUGEPAGE);
  madvise(base_ + 2 * kHuge, kHuge, MADV_NOHUGEPAGE);
  std::memset(base_, 1, kBytes);
  if (QueryPageBacking(base_, kHuge) != PageBacking::kHuge) GTEST_SKIP() << "the kernel had no free huge page";
  EXPECT_EQ(QueryPageBacking(base_ + 4096, 64 << 10), PageBacking::kHuge) << "inside a huge page";
  if (QueryPageBacking(base_, 2 * kHuge) == PageBacking::kHuge) {
    EXPECT_EQ(QueryPageBacking(base_, 2 * kHuge + 4096), PageBacking::kSmall) << "the last page is small";
    EXPECT_EQ(QueryPageBacking(base_ + kHuge, kHuge + 1), PageBacking::kSmall);
  }
  // Split back to small pages: the same range answers differently.
  madvise(base_, kHuge, MADV_DONTNEED);
  EXPECT_EQ(QueryPageBacking(base_, kHuge), PageBacking::kSmall) << "unmapped again";
}

TEST_F(PageBackingTest, AForkedChildAsksAboutItsOwnMemory) {
  if (!TransparentHugePagesUsable()) GTEST_SKIP() << "transparent huge pages are off";
  madvise(base_, kHuge, MADV_HUGEPAGE);
  std::memset(base_, 1, kHuge);
  if (QueryPageBacking(base_, kHuge) != PageBacking::kHuge) GTEST_SKIP() << "no free huge page";
  fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Dropped in the child only: the parent's pagemap would still say huge.
    madvise(base_, kHuge, MADV_DONTNEED);
    _exit(QueryPageBacking(base_, kHuge) == PageBacking::kSmall ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child asked about the parent's memory";
  EXPECT_EQ(QueryPageBacking(base_, kHuge), PageBacking::kHuge) << "the parent's page is untouched";
}

}  // namespace
}  // namespace kvtier
