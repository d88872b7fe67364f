// HitCounts and the default reinsertion policy: read-since-written or
// RAM-held blocks, within a fraction of the segment.
#include "log/reinsertion.h"

#include <gtest/gtest.h>

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
  EXPECT_EQ(seg[4096], 2u);
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
