// Which segment a reclaim takes (Options::reclaim_window_fraction): of the
// oldest segments, the one whose blocks are least read, so that hot blocks
// stay where they lie instead of being rewritten; a segment whose reads
// stopped a lap ago is taken like any other; reads the RAM tier serves
// count as the disk's do; a window of 0 is strict FIFO;
// and the reclaim's fractions outside their ranges are refused.
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <string>

#include "kvtier/store.h"
#include "store/store_test_util.h"

namespace kvtier {
namespace {

using testing::Key;
using testing::Payload;
using testing::TempDir;

constexpr size_t kSize = 60000;  // 15 pages a record: 17 to a 1 MiB segment
constexpr int kFirst = 17;       // keys [0, 17) fill the first segment
constexpr int kHot = 8;          // of them, keys [0, 8) are read: what a reclaim may rewrite (half a segment)

class ReclaimChoiceTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override {
    if (GetParam() == IoBackend::kIoUring && !IoUringAvailable()) GTEST_SKIP() << "io_uring unavailable";
    opt_ = testing::SmallOptions(GetParam());
    opt_.capacity_bytes = 8 << 20;  // 8 segments of 1 MiB: a lap is 8 segments
  }
  std::unique_ptr<Store> Open(double window) {
    opt_.reclaim_window_fraction = window;
    return testing::OpenOrFail(dirs_.emplace_back().Sub("store"), opt_);
  }
  static void Put(Store* s, NamespaceId ns, int key) {
    const auto p = Payload(ns, Key(key), kSize);
    ASSERT_TRUE(s->Put(ns, Key(key), p.data(), p.size()).ok()) << key;
  }
  // Reads every hot key twice (reinsert_min_hits), checking its bytes.
  static void ReadHotKeys(Store* s, NamespaceId ns) {
    for (int k = 0; k < kHot; ++k)
      for (int twice = 0; twice < 2; ++twice) {
        auto got = s->GetVector(ns, Key(k));
        ASSERT_TRUE(got.ok()) << k << ": " << got.status().ToString();
        EXPECT_EQ(*got, Payload(ns, Key(k), kSize)) << k;
      }
  }
  // Puts `puts` new keys from 1000,
  // reading the hot keys twice every 17 puts (a segment) while `reading`.
  static void Traffic(Store* s, NamespaceId ns, int puts, bool reading, int* cold) {
    for (int i = 0; i < puts; ++i) {
      if (reading && i % 17 == 0) ReadHotKeys(s, ns);
      Put(s, ns, (*cold)++);
    }
  }
  static Result<BlockInfo> Where(Store* s, NamespaceId ns, int key) { return s->Stat(ns, Key(key)); }

  std::deque<TempDir> dirs_;  // one store each
  Options opt_;
};

// The hot keys lie in the oldest segment and are read all along, while the
// log comes round twice: with a window the reclaims pass over their segment
// and never rewrite them, also when a RAM tier serves those reads (they never
// reach the disk); with FIFO they are rewritten.
TEST_P(ReclaimChoiceTest, ASegmentWhoseBlocksAreStillReadIsPassedOver) {
  const struct {
    double window;
    bool ram;
  } arms[] = {{0.5, false}, {0.5, true}, {0.0, false}};
  for (const auto& arm : arms) {
    SCOPED_TRACE(::testing::Message() << "window " << arm.window << (arm.ram ? ", RAM tier" : ""));
    opt_.ram_tier_bytes = arm.ram ? 8 << 20 : 0;
    opt_.ram_tier_shared_memory = false;
    auto s = Open(arm.window);
    const NamespaceId ns = testing::RegisterOrFail(s.get());
    for (int k = 0; k < kFirst; ++k) Put(s.get(), ns, k);
    auto before = Where(s.get(), ns, 0);
    ASSERT_TRUE(before.ok()) << before.status().ToString();
    int cold = 1000;
    Traffic(s.get(), ns, 2 * 8 * 17, /*reading=*/true, &cold);
    ReadHotKeys(s.get(), ns);
    const Stats st = s->GetStats();
    EXPECT_GE(st.evicted_blocks, 100u);  // the log came round
    if (arm.ram) {
      EXPECT_GE(st.hits_ram, 2u * kHot * 16) << "the RAM tier served the hot keys";
    }
    auto after = Where(s.get(), ns, 0);
    ASSERT_TRUE(after.ok()) << after.status().ToString();
    if (arm.window > 0) {
      EXPECT_EQ(st.reinsertions, 0u) << "nothing rewritten";
      EXPECT_GE(st.reclaims_not_oldest, 8u) << "passed over at every reclaim";
      EXPECT_EQ(after->segment, before->segment);
      EXPECT_EQ(after->generation, before->generation);
    } else {
      EXPECT_EQ(st.reclaims_not_oldest, 0u);
      EXPECT_GE(st.reinsertions, 8u) << "FIFO rewrites them";
      EXPECT_TRUE(after->segment != before->segment || after->generation != before->generation);
    }
  }
}

// Once its reads stop, the segment counts as cold a lap later and is taken
// in turn: blocks once hot do not hold the space for good.
TEST_P(ReclaimChoiceTest, ASegmentWhoseReadsStoppedIsTakenInTurn) {
  auto s = Open(0.5);
  const NamespaceId ns = testing::RegisterOrFail(s.get());
  for (int k = 0; k < kFirst; ++k) Put(s.get(), ns, k);
  auto before = Where(s.get(), ns, 0);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  int cold = 1000;
  Traffic(s.get(), ns, 8 * 17, /*reading=*/true, &cold);
  ASSERT_EQ(s->GetStats().reinsertions, 0u) << "passed over while read";
  Traffic(s.get(), ns, 3 * 8 * 17, /*reading=*/false, &cold);
  // Taken: its cold keys left, and its hot ones (read twice since written)
  // were rewritten elsewhere.
  auto cold_key = Where(s.get(), ns, kFirst - 1);
  EXPECT_EQ(cold_key.status().code(), Code::kNotFound) << cold_key.status().ToString();
  auto after = Where(s.get(), ns, 0);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_TRUE(after->segment != before->segment || after->generation != before->generation);
  EXPECT_GE(s->GetStats().reinsertions, 1u);
  ReadHotKeys(s.get(), ns);
  const Stats st = s->GetStats();
  EXPECT_LE(st.used_bytes, st.capacity_bytes);
}

// The reclaim's fractions, each outside its range: the hot region's in
// [0, 1), the window's in [0, 1].
TEST(ReclaimOptions, AFractionOutsideItsRangeIsRefused) {
  for (double bad : {-0.1, 1.0, 2.0}) {
    Options o = testing::SmallOptions();
    o.hot_region_fraction = bad;
    testing::ExpectOptionRefused(o, "hot_region_fraction");
  }
  for (double bad : {-0.1, 1.5}) {
    Options o = testing::SmallOptions();
    o.reclaim_window_fraction = bad;
    testing::ExpectOptionRefused(o, "reclaim_window_fraction");
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ReclaimChoiceTest, ::testing::Values(IoBackend::kIoUring, IoBackend::kPosix),
                         testing::BackendName);

}  // namespace
}  // namespace kvtier
