// Records on disk are judged by the format's limits, never by the options of
// the process that opens the store (issue 16, D1), and Verify and recovery
// tell an earlier segment life's bytes and torn tails apart (D2).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "kvtier/store.h"
#include "store/store_test_util.h"

namespace kvtier {
namespace {

using testing::Key;
using testing::Payload;
using testing::TempDir;

class OpenerLimitsTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override {
    if (GetParam() == IoBackend::kIoUring && !IoUringAvailable()) GTEST_SKIP() << "io_uring unavailable";
    writer_ = testing::SmallOptions(GetParam());
    writer_.segment_size_bytes = 8 << 20;
    writer_.capacity_bytes = 64 << 20;
    writer_.write_queue_bytes = 32 << 20;
    // An opener with a 2 MiB write queue and a 1 MiB payload limit: it may not
    // write a 3 MiB block, but it must read, recover and verify one.
    small_ = writer_;
    small_.write_queue_bytes = 2 << 20;
    small_.group_commit_bytes = 1 << 20;
    small_.max_payload_bytes = 1 << 20;
  }
  std::string Dir() const { return dir_.Sub("store"); }
  NamespaceId Ns() {
    auto s = Store::Open(Dir(), writer_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    auto id = (*s)->RegisterNamespace(testing::TestSpec());
    EXPECT_TRUE(id.ok());
    return id.value_or(0);
  }
  // Puts a 3 MiB block between two small ones.
  static bool PutBlocks(Store* s, NamespaceId ns) {
    for (auto [i, size] : {std::pair{0, 5000}, std::pair{1, 3 << 20}, std::pair{2, 7000}}) {
      auto p = Payload(ns, Key(i), size);
      if (!s->Put(ns, Key(i), p.data(), p.size()).ok()) return false;
    }
    return true;
  }
  static void ExpectBlocks(Store* s, NamespaceId ns) {
    for (auto [i, size] : {std::pair{0, 5000}, std::pair{1, 3 << 20}, std::pair{2, 7000}}) {
      auto got = s->GetVector(ns, Key(i));
      ASSERT_TRUE(got.ok()) << "block " << i << ": " << got.status().ToString();
      EXPECT_EQ(*got, Payload(ns, Key(i), size)) << "block " << i;
    }
  }
  static void ExpectVerifies(Store* s) {
    VerifyOptions vo;
    vo.deep = true;
    auto rep = s->Verify(vo);
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    EXPECT_TRUE(rep->ok()) << (rep->problems.empty() ? "" : rep->problems[0]);
    EXPECT_EQ(rep->records_corrupt, 0u);
  }

  TempDir dir_;
  Options writer_, small_;
};

TEST_P(OpenerLimitsTest, RecoveryWithSmallerLimitsKeepsEveryAcknowledgedBlock) {
  const NamespaceId ns = Ns();
  testing::InKilledChild([&] {
    auto s = Store::Open(Dir(), writer_);
    if (!s.ok()) _exit(2);
    if (!PutBlocks(s->get(), ns)) _exit(3);
    testing::KillSelf();
  });
  auto s = Store::Open(Dir(), small_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE((*s)->GetStats().recovered_from_crash);
  EXPECT_EQ((*s)->GetStats().recovery_torn_bytes, 0u);
  ExpectBlocks(s->get(), ns);
  ExpectVerifies(s->get());
  // This opener's own limit still bounds what it writes.
  auto big = Payload(ns, "big", 3 << 20);
  EXPECT_EQ((*s)->Put(ns, "big", big.data(), big.size()).code(), Code::kInvalidArgument);
  ASSERT_TRUE((*s)->Close().ok());
  // And the writer's options find the blocks again.
  s = Store::Open(Dir(), writer_);
  ASSERT_TRUE(s.ok());
  ExpectBlocks(s->get(), ns);
}

TEST_P(OpenerLimitsTest, CleanReopenWithSmallerLimitsReadsAndKeepsLargeBlocks) {
  const NamespaceId ns = Ns();
  {
    auto s = Store::Open(Dir(), writer_);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(PutBlocks(s->get(), ns));
  }
  {
    auto s = Store::Open(Dir(), small_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ExpectBlocks(s->get(), ns);
    EXPECT_EQ((*s)->GetStats().checksum_failures, 0u);
    ExpectVerifies(s->get());
  }
  // Nothing was dropped on the way.
  auto s = Store::Open(Dir(), writer_);
  ASSERT_TRUE(s.ok());
  ExpectBlocks(s->get(), ns);
}

TEST_P(OpenerLimitsTest, RepairWithSmallerLimitsIndexesLargeBlocks) {
  const NamespaceId ns = Ns();
  {
    auto s = Store::Open(Dir(), writer_);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(PutBlocks(s->get(), ns));
  }
  auto rep = Store::Repair(Dir(), small_);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->records_indexed, 3u);
  EXPECT_EQ(rep->records_dropped, 0u);
  EXPECT_EQ(rep->regions_cleared, 0u);
  auto s = Store::Open(Dir(), writer_);
  ASSERT_TRUE(s.ok());
  ExpectBlocks(s->get(), ns);
}

// Segments reused without hole punching keep an earlier life's bytes behind
// the new end: Verify must not call a healthy store corrupt (D2a).
TEST_P(OpenerLimitsTest, VerifyIsCleanOnSegmentsReusedWithoutHolePunching) {
  Options o = testing::SmallOptions(GetParam());
  o.capacity_bytes = 4 << 20;  // 4 segments of 1 MiB: every few puts evict one
  o.punch_holes = false;
  o.reinsert_hot_blocks = false;
  auto s = Store::Open(Dir(), o);
  ASSERT_TRUE(s.ok());
  auto ns = (*s)->RegisterNamespace(testing::TestSpec());
  ASSERT_TRUE(ns.ok());
  std::mt19937_64 rng(7);
  for (int i = 0; i < 400; ++i) {
    // Sizes that end a new life in the middle of an old record.
    auto p = Payload(*ns, Key(i), 3000 + rng() % 60000);
    ASSERT_TRUE((*s)->Put(*ns, Key(i), p.data(), p.size()).ok());
  }
  EXPECT_GT((*s)->GetStats().evictions, 4u);
  VerifyOptions vo;
  vo.deep = true;
  auto rep = (*s)->Verify(vo);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok()) << (rep->problems.empty() ? "" : rep->problems[0]);
  EXPECT_GT(rep->stale_tail_bytes, 0u) << "the test no longer leaves old bytes behind a segment's end";
  // Repair zeroes nothing that is not damage.
  ASSERT_TRUE((*s)->Close().ok());
  auto r = Store::Repair(Dir(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->regions_cleared, 0u);
}

// A torn record at the end of a segment that is not the newest (a group
// commit spanning two segments) is cut by recovery, not left to repair (D2b).
// Here the index is lost too, so recovery rescans every segment from its
// start: the older segment's tail is then one recovery must cut.
TEST_P(OpenerLimitsTest, RecoveryCutsTheTornTailOfAnOlderSegment) {
  Options o = testing::SmallOptions(GetParam());
  const NamespaceId ns = [&] {
    auto s = Store::Open(Dir(), o);
    EXPECT_TRUE(s.ok());
    return (*s)->RegisterNamespace(testing::TestSpec()).value_or(0);
  }();
  testing::InKilledChild([&] {
    auto s = Store::Open(Dir(), o);
    if (!s.ok()) _exit(2);
    // 30 KiB blocks until the second segment has a few.
    uint32_t first_seg = UINT32_MAX, last_in_first = 0;
    uint64_t last_off = 0;
    for (int i = 0; i < 200; ++i) {
      auto p = Payload(ns, Key(i), 30000);
      if (!(*s)->Put(ns, Key(i), p.data(), p.size()).ok()) _exit(3);
      auto info = (*s)->Stat(ns, Key(i));
      if (!info.ok()) _exit(4);
      if (first_seg == UINT32_MAX) first_seg = info->segment;
      if (info->segment == first_seg) {
        last_in_first = static_cast<uint32_t>(i);
        last_off = info->offset;
      } else if (i > static_cast<int>(last_in_first) + 3) {
        std::ofstream(dir_.Sub("last")) << first_seg << " " << last_off << " " << last_in_first;
        testing::KillSelf();
      }
    }
    _exit(5);
  });
  uint32_t seg = 0, last = 0;
  uint64_t off = 0;
  std::ifstream(dir_.Sub("last")) >> seg >> off >> last;
  const std::string path = dir_.Sub("store/segments/seg-" + std::string(6 - std::to_string(seg).size(), '0') +
                                    std::to_string(seg) + ".kvs");
  testing::FlipBit(path, off + 20000, 0);  // the older segment's last record is torn
  std::filesystem::remove_all(dir_.Sub("store/index"));
  auto s = Store::Open(Dir(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE((*s)->GetStats().recovered_from_crash);
  EXPECT_GT((*s)->GetStats().recovery_torn_bytes, 0u);
  EXPECT_TRUE((*s)->GetVector(ns, Key(last)).status().IsNotFound());
  for (uint32_t i = 0; i < last; ++i) EXPECT_TRUE((*s)->GetVector(ns, Key(i)).ok()) << i;
  for (uint32_t i = last + 1; i < last + 4; ++i) EXPECT_TRUE((*s)->GetVector(ns, Key(i)).ok()) << i;
  ExpectVerifies(s->get());
}

INSTANTIATE_TEST_SUITE_P(Backends, OpenerLimitsTest, ::testing::Values(IoBackend::kIoUring, IoBackend::kPosix),
                         testing::BackendName);

}  // namespace
}  // namespace kvtier
