// PlanRecord and PlanWrite: a put's record layout and the source of its
// payload, from sizes and options alone.
#include "log/put_plan.h"

#include <gtest/gtest.h>

#include "format/record.h"

namespace kvtier {
namespace {

constexpr uint64_t kPage = format::kPage;
constexpr uint64_t kZeroCopyMin = 64 * 1024;

RecordPlanInput In(uint64_t payload, bool ram = false, bool reservation = false) {
  return RecordPlanInput{32, payload, /*dense_ok=*/true, /*compact_ok=*/true, /*dense_record_max_bytes=*/16 * 1024,
                         kZeroCopyMin, ram, reservation};
}

TEST(PutPlan, SmallRecordsGoDenseAndAreCopied) {
  const RecordPlan p = PlanRecord(In(4000, /*ram=*/true));
  EXPECT_TRUE(p.dense);
  EXPECT_EQ(p.flags, format::kRecordDense | format::kRecordCompact);
  EXPECT_EQ(p.rec_bytes, 4080u) << "a 48-byte header, the key and the payload, at 8 bytes";
  EXPECT_EQ(p.payload_offset, 80u);
  EXPECT_FALSE(p.reserve_ram_copy);  // below zero_copy_min_bytes: the ring's copy is the RAM tier's source
  const WritePlan w = PlanWrite(p, {4000, kZeroCopyMin, false, /*borrow=*/true, true, false});
  EXPECT_FALSE(w.direct);
  EXPECT_EQ(w.ring_bytes, p.rec_bytes);
  EXPECT_EQ(w.borrowed, 0u);
}

TEST(PutPlan, FormatThreeStoresKeepTheFullHeader) {
  RecordPlanInput in = In(4000);
  in.compact_ok = false;
  const RecordPlan p = PlanRecord(in);
  EXPECT_TRUE(p.dense);
  EXPECT_EQ(p.flags, format::kRecordDense);
  EXPECT_EQ(p.rec_bytes, 4104u) << "a 72-byte header, the key and the payload, at 8 bytes";
  EXPECT_EQ(p.payload_offset, 104u);
}

TEST(PutPlan, OnlyDenseRecordsGetACompactHeader) {
  EXPECT_EQ(PlanRecord(In(64 * 1024)).flags, 0) << "at zero_copy_min_bytes: page-aligned, full header";
  EXPECT_EQ(PlanRecord(In(16 * 1024 + 8)).flags, 0) << "above dense_record_max_bytes";
}

TEST(PutPlan, AShortTailPacksTheHeaderBesideIt) {
  const RecordPlan p = PlanRecord(In(2 * 1024 * 1024 + 100));
  EXPECT_FALSE(p.aligned);
  EXPECT_FALSE(PlanWrite(p, {2 * 1024 * 1024 + 100, kZeroCopyMin, false, true, true, false}).direct);
}

TEST(PutPlan, FormatsWithoutDenseRecordsKeepPageAlignment) {
  RecordPlanInput in = In(4000);
  in.dense_ok = false;
  const RecordPlan p = PlanRecord(in);
  EXPECT_FALSE(p.dense);
  EXPECT_EQ(p.rec_bytes % kPage, 0u);
}

TEST(PutPlan, LargeBorrowedPagesAreWrittenWhereTheyAre) {
  // Whole pages and a tail too long to share a page with the header (the
  // aligned layout; shorter tails pack the header beside them).
  const uint64_t n = 2 * 1024 * 1024 + 4000;
  const RecordPlan p = PlanRecord(In(n));
  ASSERT_TRUE(p.aligned);
  const WritePlan w = PlanWrite(p, {n, kZeroCopyMin, false, /*borrow=*/true, /*borrowable=*/true, false});
  EXPECT_TRUE(w.direct);
  EXPECT_EQ(w.whole, n / kPage * kPage);
  EXPECT_EQ(w.tail, 4000u);
  EXPECT_EQ(w.ring_bytes, 2 * kPage);  // header page and tail page only
  EXPECT_EQ(w.borrowed, w.whole);
  // Whole pages only: no tail page.
  const WritePlan exact = PlanWrite(PlanRecord(In(2 * 1024 * 1024)), {2 * 1024 * 1024, kZeroCopyMin, false, true, true, false});
  EXPECT_EQ(exact.ring_bytes, kPage);
}

TEST(PutPlan, CopiesWhenTheCallerCannotLendOrItsPagesAreSmall) {
  const uint64_t n = 1 << 20;
  const RecordPlan p = PlanRecord(In(n));
  EXPECT_FALSE(PlanWrite(p, {n, kZeroCopyMin, false, /*borrow=*/false, true, false}).direct) << "PutAsync copies";
  EXPECT_FALSE(PlanWrite(p, {n, kZeroCopyMin, false, true, /*borrowable=*/false, false}).direct) << "misaligned pieces";
  const WritePlan small = PlanWrite(p, {n, kZeroCopyMin, false, true, true, /*small_pages=*/true});
  EXPECT_FALSE(small.direct);
  EXPECT_TRUE(small.copy_small_pages);
  EXPECT_EQ(small.ring_bytes, p.rec_bytes);
  // From a RAM-tier reservation the pages are kvtier's own: always direct.
  EXPECT_TRUE(PlanWrite(p, {n, kZeroCopyMin, /*from_ram=*/true, false, true, true}).direct);
}

TEST(PutPlan, ARamTierTakesAWriteThroughCopyOfLargeBlocks) {
  EXPECT_TRUE(PlanRecord(In(1 << 20, /*ram=*/true)).reserve_ram_copy);
  EXPECT_FALSE(PlanRecord(In(1 << 20, /*ram=*/false)).reserve_ram_copy);
  EXPECT_FALSE(PlanRecord(In(1 << 20, true, /*reservation=*/true)).reserve_ram_copy) << "the caller's reservation is used";
}

}  // namespace
}  // namespace kvtier
