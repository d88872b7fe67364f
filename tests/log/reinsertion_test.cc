// HitCounts and the default reinsertion policy: read-since-written or
// RAM-held blocks, within a fraction of the segment.
#include "log/reinsertion.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace kvtier {
namespace {

TEST(HitCounts, CountsPerRecordAndHandsASegmentOverOnce) {
  HitCounts h(2);
  h.Note(3, 4096, 4096);
  h.Note(3, 4096, 4096);
  h.Note(3, 8192, 4096);
  h.Note(4, 4096, 4096);
  EXPECT_EQ(h.Of(3, 4096), 2u);
  EXPECT_EQ(h.Of(3, 12288), 0u);
  auto seg = h.Take(3);
  EXPECT_EQ(seg.size(), 2u);
  EXPECT_EQ(seg.Of(4096), 2u);
  EXPECT_EQ(seg.Of(8192), 1u);
  EXPECT_EQ(h.Of(3, 4096), 0u);  // forgotten: the segment is being reclaimed
  EXPECT_TRUE(h.Take(3).empty());
  EXPECT_EQ(h.Of(4, 4096), 1u);
}

TEST(HitCounts, SumsTheBytesOfRecordsReadEnoughTimesPerSegment) {
  HitCounts h(2);
  h.Note(1, 0, 8192);
  EXPECT_EQ(h.HotBytes(1), 0u) << "read once";
  h.Note(1, 0, 8192);
  EXPECT_EQ(h.HotBytes(1), 8192u);
  h.Note(1, 0, 8192);
  EXPECT_EQ(h.HotBytes(1), 8192u) << "counted once, when it became hot";
  h.Note(1, 65536, 4096);
  h.Note(1, 65536, 4096);
  h.Note(2, 0, 4096);
  EXPECT_EQ(h.HotBytes(1), 12288u);
  EXPECT_EQ(h.HotBytes(2), 0u);
  h.Take(1);
  EXPECT_EQ(h.HotBytes(1), 0u) << "reclaimed: written afresh";
  HitCounts once(0);  // 0 counts as 1
  once.Note(5, 0, 4096);
  EXPECT_EQ(once.HotBytes(5), 4096u);
}

TEST(SegmentReads, CountsEveryOffsetOfAFullSegmentApart) {
  // Offsets as records lie: multiples of 8 up to a 64 GiB segment, in
  // runs of one size (which a poor hash would pile up) and scattered.
  SegmentReads r;
  std::map<uint64_t, uint32_t> want;
  std::mt19937_64 g(7);
  for (uint64_t i = 0; i < 20000; ++i) {
    const uint64_t off = i < 10000 ? i * 4168 : (g() % (uint64_t{64} << 30)) / 8 * 8;
    const uint32_t times = 1 + static_cast<uint32_t>(g() % 3);
    for (uint32_t t = 0; t < times; ++t) EXPECT_EQ(r.Add(off), ++want[off]);
  }
  EXPECT_EQ(r.size(), want.size());
  for (const auto& [off, n] : want) ASSERT_EQ(r.Of(off), n) << off;
  EXPECT_EQ(r.Of(8), 0u);
  EXPECT_EQ(r.Add((uint64_t{64} << 30) - 8), want[(uint64_t{64} << 30) - 8] + 1) << "the last offset";
}

TEST(SegmentReads, TakesAtMostTwentyOneBytesARecordRead) {
  // 8-byte slots at a load of 3/8 to 3/4: the node-based map this replaced
  // took 42.6 bytes a record.
  SegmentReads r;
  EXPECT_EQ(r.MemoryBytes(), 0u);
  for (uint64_t i = 1; i <= 100000; ++i) {
    r.Add(i * 4096);
    ASSERT_LE(r.MemoryBytes(), std::max<size_t>(128, i * 64 / 3)) << i;
  }
  EXPECT_LE(r.MemoryBytes(), 100000u * 64 / 3);
}

TEST(SegmentReads, CountsStopAtTheirMaximum) {
  SegmentReads r;
  for (uint32_t i = 0; i < SegmentReads::kMaxReads; ++i) r.Add(4096);
  EXPECT_EQ(r.Of(4096), SegmentReads::kMaxReads);
  EXPECT_EQ(r.Add(4096), SegmentReads::kMaxReads + 1) << "past the end";
  EXPECT_EQ(r.Of(4096), SegmentReads::kMaxReads);
  r.Add(0);
  EXPECT_EQ(r.Of(0), 1u) << "a neighbour is not disturbed";
  EXPECT_EQ(r.Of(4096), SegmentReads::kMaxReads);
}

TEST(HitCounts, AThresholdAboveTheMaximumCountIsReachable) {
  HitCounts h(1u << 20);
  EXPECT_EQ(h.hot_reads(), SegmentReads::kMaxReads);
  for (uint32_t i = 0; i < SegmentReads::kMaxReads; ++i) h.Note(1, 0, 4096);
  EXPECT_EQ(h.HotBytes(1), 4096u);
  for (int i = 0; i < 10; ++i) h.Note(1, 0, 4096);
  EXPECT_EQ(h.HotBytes(1), 4096u) << "counted once, past the count's end too";
  EXPECT_EQ(h.Of(1, 0), SegmentReads::kMaxReads);
}

TEST(HitCounts, ManySegmentsFromManyThreadsAllCount) {
  HitCounts h(2);
  std::vector<std::thread> ts;
  for (uint32_t t = 0; t < 4; ++t)
    ts.emplace_back([&h, t] {
      for (uint32_t seg = 0; seg < 64; ++seg)
        for (uint64_t off = 0; off < 100; ++off) h.Note(seg, (off * 4 + t) * 4096, 4096);
    });
  for (auto& t : ts) t.join();
  for (uint32_t seg = 0; seg < 64; ++seg) {
    EXPECT_EQ(h.HotBytes(seg), 0u) << "each record read once";
    EXPECT_EQ(h.Take(seg).size(), 400u) << seg;
  }
  EXPECT_EQ(h.MemoryBytes(), 0u) << "all taken";
}

TEST(HitReinsertion, TakesReadBlocksWithinItsBudget) {
  HitReinsertion p(0.25, 1);
  p.BeginSegment(64 * 4096);  // budget: 16 pages
  ReinsertCandidate cold{1, "k", 0, 4096};
  EXPECT_FALSE(p.Wants(cold));
  ReinsertCandidate read{1, "k", 2, 8 * 4096};
  ReinsertCandidate once{1, "k", 1, 8 * 4096};
  ASSERT_TRUE(p.Wants(read));
  p.Taken(read);
  ASSERT_TRUE(p.Wants(once));
  p.Taken(once);
  EXPECT_FALSE(p.Wants(ReinsertCandidate{1, "k", 5, 4096})) << "budget spent";
  p.BeginSegment(64 * 4096);  // a new segment, a new budget
  EXPECT_TRUE(p.Wants(ReinsertCandidate{1, "k", 5, 4096}));
  EXPECT_FALSE(p.Wants(ReinsertCandidate{1, "k", 5, 17 * 4096})) << "larger than the budget";
  HitReinsertion off(0, 1);
  off.BeginSegment(64 * 4096);
  EXPECT_FALSE(off.Wants(read));
}

TEST(HitReinsertion, AMinimumOfReadsLeavesBlocksReadOnce) {
  HitReinsertion p(1.0, 2);
  p.BeginSegment(64 * 4096);
  EXPECT_FALSE(p.Wants(ReinsertCandidate{1, "k", 1, 4096})) << "read once";
  EXPECT_TRUE(p.Wants(ReinsertCandidate{1, "k", 2, 4096}));
  EXPECT_FALSE(p.Wants(ReinsertCandidate{1, "k", 0, 4096})) << "never read";
}

}  // namespace
}  // namespace kvtier
