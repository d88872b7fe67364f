// HitCounts and the default reinsertion policy: read-since-written or
// RAM-held blocks, within a fraction of the segment.
#include "log/reinsertion.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(HitCounts, CountsPerRecordAndHandsASegmentOverOnce) {
  HitCounts h;
  h.Note(3, 4096);
  h.Note(3, 4096);
  h.Note(3, 8192);
  h.Note(4, 4096);
  EXPECT_EQ(h.Of(3, 4096), 2u);
  EXPECT_EQ(h.Of(3, 12288), 0u);
  auto seg = h.Take(3);
  EXPECT_EQ(seg.size(), 2u);
  EXPECT_EQ(seg[4096], 2u);
  EXPECT_EQ(h.Of(3, 4096), 0u);  // forgotten: the segment is being reclaimed
  EXPECT_TRUE(h.Take(3).empty());
  EXPECT_EQ(h.Of(4, 4096), 1u);
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
