// ReadBuffers: slab slots for small records, heap buffers for the rest, and
// reads into a registered slot are fixed-buffer reads.
#include "read/read_buffers.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "io/posix_file_system.h"
#include "io/uring_queue.h"
#include "io/io_test_util.h"
#include "util/aligned_buffer.h"

namespace kvtier {
namespace {

constexpr size_t kPage = 4096;

TEST(ReadBuffers, SlotsForSmallRecordsHeapForLargeOnes) {
  ReadBuffers b(4, 68 * 1024 + 100);  // rounded up to 72 KiB
  std::set<uint8_t*> seen;
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(b.InSlab(i, 72 * 1024));
    uint8_t* p = b.Get(i, 72 * 1024);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kPage, 0u);
    std::memset(p, static_cast<int>(i), 72 * 1024);  // the whole slot is writable
    seen.insert(p);
  }
  EXPECT_EQ(seen.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(b.Get(i, 100)[72 * 1024 - 1], static_cast<uint8_t>(i)) << "slots overlap";
  // Too large for a slot, or beyond the slots: heap buffers, kept for reuse.
  EXPECT_FALSE(b.InSlab(0, 72 * 1024 + 1));
  EXPECT_FALSE(b.InSlab(4, 100));
  uint8_t* big = b.Get(0, 1 << 20);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(seen.count(big), 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big) % kPage, 0u);
  std::memset(big, 1, 1 << 20);
  EXPECT_EQ(b.Get(0, 1 << 19), big);
  uint8_t* extra = b.Get(9, 100);
  ASSERT_NE(extra, nullptr);
  EXPECT_EQ(seen.count(extra), 0u);
}

TEST(ReadBuffers, ChosenBouncesStayWithinABudget) {
  ReadBuffers b(2, 64 * 1024);
  const size_t budget = 8u << 20;
  EXPECT_TRUE(b.BounceFits(0, 64 * 1024, 0)) << "a slot costs no heap";
  // 2 MiB buffers are huge-page aligned and rounded to 2 MiB.
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(b.BounceFits(i, (2u << 20) + 4096, 2 * budget)) << i;
  }
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(b.BounceFits(i, (2u << 20) + 4096, budget)) << i;
    uint8_t* p = b.Get(i, (2u << 20) + 4096);  // 4 MiB each
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (2u << 20), 0u);
  }
  EXPECT_FALSE(b.BounceFits(2, 4096 * 3 + (64 * 1024), budget)) << "8 MiB kept: the budget is spent";
  EXPECT_TRUE(b.BounceFits(1, 4u << 20, budget)) << "reusing a kept buffer costs nothing";
  EXPECT_FALSE(b.BounceFits(1, (4u << 20) + 1, budget)) << "growing one past the budget";
  EXPECT_TRUE(b.BounceFits(1, (4u << 20) + 1, budget + (2u << 20)));
}

TEST(ReadBuffers, ReadsIntoARegisteredSlotAreFixed) {
  const std::string why = IoUringUnavailableReason();
  if (!why.empty()) GTEST_SKIP() << "io_uring: " << why;
  testing::TempDir dir;  // removed with its contents
  PosixFileSystem fs(IoBackend::kIoUring);
  OpenFlags flags;
  flags.create = true;
  flags.direct = true;
  auto f = fs.Open(dir.File("data"), flags);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::vector<uint8_t> want(64 * 1024);
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<uint8_t>(i * 7 + 3);
  AlignedBuffer w(want.size());  // O_DIRECT: page-aligned source
  std::memcpy(w.data(), want.data(), want.size());
  ASSERT_TRUE((*f)->WriteAt(0, w.data(), want.size()).ok());

  auto q = NewUringIoQueue(4);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  ReadBuffers b(4, 64 * 1024);
  EXPECT_FALSE(b.NeedsRegister());  // nothing used yet
  std::vector<IoRequest> reqs(2);
  for (size_t i = 0; i < 2; ++i) {
    reqs[i].op = IoRequest::Op::kRead;
    reqs[i].file = f->get();
    reqs[i].offset = 0;
    reqs[i].buf = b.Get(i, want.size());
    reqs[i].len = want.size();
  }
  ASSERT_TRUE(b.NeedsRegister());
  b.Register(q->get());
  EXPECT_FALSE(b.NeedsRegister());
  ASSERT_TRUE((*q)->Submit(reqs).ok());
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(std::memcmp(reqs[i].buf, want.data(), want.size()), 0);
  const UringQueueStats st = GetUringQueueStats(**q);
  EXPECT_EQ(st.fixed_sqes, st.sqes);
  EXPECT_GE(st.fixed_sqes, 2u);
}

}  // namespace
}  // namespace kvtier
