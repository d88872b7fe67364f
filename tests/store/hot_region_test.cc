// The hot region (Options::hot_region_fraction): blocks read again and again
// are rewritten once, into segments the puts' FIFO does not come round to,
// instead of at every pass of the log; the region keeps to its share; and
// what it holds reads back right after a clean reopen and after a kill,
// removed blocks included; a write into it torn by a kill is cut.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "format/record.h"
#include "kvtier/store.h"
#include "store/layout.h"
#include "store/store_test_util.h"

namespace kvtier {
namespace {

using testing::Key;
using testing::Payload;
using testing::TempDir;

constexpr size_t kSize = 60000;  // 15 pages a record: 17 to a 1 MiB segment

class HotRegionTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override {
    if (GetParam() == IoBackend::kIoUring && !IoUringAvailable()) GTEST_SKIP() << "io_uring unavailable";
    opt_ = testing::SmallOptions(GetParam());
    opt_.capacity_bytes = 8 << 20;  // 8 segments of 1 MiB
    // The region under FIFO reclaims, which move every hot block into it;
    // reclaim_choice_test covers passing over segments still read.
    opt_.reclaim_window_fraction = 0;
  }
  std::unique_ptr<Store> OpenStore() { return testing::OpenOrFail(dir_.Sub("store"), opt_); }
  static NamespaceId Ns(Store* s) { return testing::RegisterOrFail(s); }
  static void ExpectBlockAt(Store* s, NamespaceId ns, int key) {
    auto got = s->GetVector(ns, Key(key));
    ASSERT_TRUE(got.ok()) << key << ": " << got.status().ToString();
    EXPECT_EQ(*got, Payload(ns, Key(key), kSize)) << key;
  }
  static void Put(Store* s, NamespaceId ns, int key) {
    const auto p = Payload(ns, Key(key), kSize);
    ASSERT_TRUE(s->Put(ns, Key(key), p.data(), p.size()).ok()) << key;
  }
  // Keys [0, hot) are read twice (reinsert_min_hits) between every few puts
  // of new cold keys, numbered from 1000; the hot keys are spread, one in
  // every four puts of the fill, so no segment holds more of them than a
  // reclaim may rewrite. Returns the next cold key.
  static int Traffic(Store* s, NamespaceId ns, int hot, int rounds) {
    int cold = 1000;
    for (int i = 0; i < hot; ++i) {
      Put(s, ns, i);
      for (int j = 0; j < 3; ++j) Put(s, ns, cold++);
    }
    for (int r = 0; r < rounds; ++r) {
      for (int i = 0; i < hot; ++i)
        for (int twice = 0; twice < 2; ++twice) {
          auto got = s->GetVector(ns, Key(i));
          EXPECT_TRUE(got.ok()) << "hot key " << i << " in round " << r << ": " << got.status().ToString();
          if (got.ok()) {
            EXPECT_EQ(*got, Payload(ns, Key(i), kSize)) << i;
          }
        }
      for (int j = 0; j < 8; ++j) Put(s, ns, cold++);
    }
    return cold;
  }

  TempDir dir_;
  Options opt_;
};

// 16 hot blocks (a quarter of the budget) while the log comes round about
// six times: with the region each is rewritten once; without it, at every
// pass.
TEST_P(HotRegionTest, HotBlocksAreRewrittenOnceNotAtEveryPassOfTheLog) {
  opt_.hot_region_fraction = 0.5;
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  Traffic(s.get(), ns, 16, 50);
  const Stats with = s->GetStats();
  EXPECT_GE(with.evicted_blocks, 300u);
  EXPECT_GE(with.reinsertions, 16u);
  EXPECT_LE(with.reinsertions, 20u);
  EXPECT_LE(with.used_bytes, with.capacity_bytes);
  EXPECT_GE(with.segments_hot, 1u);
  EXPECT_LE(with.segments_hot, 4u);
  ASSERT_TRUE(s->Close().ok());
  s.reset();

  TempDir other;
  opt_.hot_region_fraction = 0;
  auto f = Store::Open(other.Sub("store"), opt_);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ns = Ns(f->get());
  Traffic(f->get(), ns, 16, 50);
  const Stats without = (*f)->GetStats();
  EXPECT_EQ(without.segments_hot, 0u);
  EXPECT_GE(without.reinsertions, 2 * with.reinsertions);  // 3x here: one per pass
}

// A hot set larger than the region's share: its oldest segment is reclaimed
// (blocks read since they went there are rewritten within it, the rest
// leave), the budget holds, and nothing read back is wrong.
// A block written again by a reclaim keeps the sequence number of its put:
// the copy is no newer than its data, so after a crash recovery can never
// rank it above a later put of the same key.
TEST_P(HotRegionTest, AReinsertedBlockKeepsItsPutsSequenceNumber) {
  for (double fraction : {0.5, 0.0}) {
    TempDir dir;
    opt_.hot_region_fraction = fraction;
    auto s = testing::OpenOrFail(dir.Sub("store"), opt_);
    const NamespaceId ns = Ns(s.get());
    Put(s.get(), ns, 0);
    auto first = s->Stat(ns, Key(0));
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    // Key 0 is read twice between every 8 puts of new keys, while the log
    // comes round several times.
    for (int r = 0, cold = 1000; r < 40; ++r) {
      ExpectBlockAt(s.get(), ns, 0);
      ExpectBlockAt(s.get(), ns, 0);
      for (int j = 0; j < 8; ++j) Put(s.get(), ns, cold++);
    }
    ASSERT_GE(s->GetStats().reinsertions, 1u) << fraction;
    auto now = s->Stat(ns, Key(0));
    ASSERT_TRUE(now.ok()) << now.status().ToString();
    EXPECT_TRUE(now->segment != first->segment || now->generation != first->generation) << "rewritten";
    EXPECT_EQ(now->sequence, first->sequence) << fraction;
    ExpectBlockAt(s.get(), ns, 0);
  }
}

TEST_P(HotRegionTest, TheRegionKeepsToItsShare) {
  opt_.hot_region_fraction = 0.25;  // 2 of 8 segments
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  int cold = Traffic(s.get(), ns, 28, 0);  // more than two segments' worth
  for (int r = 0; r < 30; ++r) {
    // A different third of the hot keys each round.
    for (int i = r % 3; i < 28; i += 3)
      for (int twice = 0; twice < 2; ++twice) (void)s->GetVector(ns, Key(i));
    for (int j = 0; j < 8; ++j) Put(s.get(), ns, cold++);
  }
  const Stats st = s->GetStats();
  EXPECT_LE(st.used_bytes, st.capacity_bytes);
  EXPECT_LE(st.segments_total, 8u);
  EXPECT_LE(st.segments_hot, 3u);  // its share, and the open one taking over
  EXPECT_GT(st.reinsertions, 28u);  // the region came round too
  int present = 0;
  for (int i = 0; i < 28; ++i) {
    auto got = s->GetVector(ns, Key(i));
    if (!got.ok()) {
      EXPECT_TRUE(got.status().IsNotFound()) << got.status().ToString();
      continue;
    }
    ++present;
    EXPECT_EQ(*got, Payload(ns, Key(i), kSize)) << i;
  }
  EXPECT_GT(present, 0);
  EXPECT_LT(present, 28);  // more than the share holds
  ExpectBlockAt(s.get(), ns, cold - 1);
}

// The region's open segment has an epoch below the puts' segment, so a
// checkpoint taken for a remove is past it: recovery after a kill never
// scans a removed block back into the index. Clean or killed, the hot
// blocks read back right.
TEST_P(HotRegionTest, HotBlocksSurviveReopenAndKillAndRemovesStay) {
  opt_.hot_region_fraction = 0.5;
  NamespaceId ns;
  uint32_t hot = 0;
  {
    auto s = OpenStore();
    ns = Ns(s.get());
    Traffic(s.get(), ns, 16, 20);
    ASSERT_GE(s->GetStats().reinsertions, 16u);
    hot = s->GetStats().segments_hot;
    ASSERT_GE(hot, 1u);
    ASSERT_TRUE(s->Close().ok());
  }
  {
    auto s = OpenStore();
    EXPECT_EQ(s->GetStats().segments_hot, hot);  // kept apart after the reopen
    for (int i = 0; i < 16; ++i) ExpectBlockAt(s.get(), ns, i);
  }
  testing::InKilledChild([&] {
    auto s = Store::Open(dir_.Sub("store"), opt_);
    if (!s.ok()) _exit(2);
    // New hot keys 100-115, spread among cold puts, are promoted into a
    // fresh open segment of the region; then some of each set go.
    const uint64_t before = (*s)->GetStats().reinsertions;
    int cold = 5000;
    auto put = [&](int key) {
      const auto p = Payload(ns, Key(key), kSize);
      if (!(*s)->Put(ns, Key(key), p.data(), p.size()).ok()) _exit(3);
    };
    for (int i = 100; i < 116; ++i) {
      put(i);
      for (int j = 0; j < 3; ++j) put(cold++);
    }
    for (int r = 0; r < 24; ++r) {
      for (int i : {0, 100})
        for (int k = i; k < i + 16; ++k) {
          (void)(*s)->GetVector(ns, Key(k));
          (void)(*s)->GetVector(ns, Key(k));
        }
      for (int j = 0; j < 8; ++j) put(cold++);
    }
    if ((*s)->GetStats().reinsertions < before + 16) _exit(4);
    for (int i : {0, 1, 2, 3, 100, 101, 102, 103})
      if (!(*s)->Remove(ns, Key(i)).ok()) _exit(5);
    testing::KillSelf();  // no Close
  });
  auto s = OpenStore();
  EXPECT_TRUE(s->GetStats().recovered_from_crash);
  for (int i : {0, 1, 2, 3, 100, 101, 102, 103})
    EXPECT_TRUE(s->GetVector(ns, Key(i)).status().IsNotFound()) << i;
  for (int i = 4; i < 16; ++i) ExpectBlockAt(s.get(), ns, i);
  for (int i = 104; i < 116; ++i) ExpectBlockAt(s.get(), ns, i);
  VerifyOptions vo;
  vo.deep = true;
  auto rep = s->Verify(vo);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->ok()) << (rep->problems.empty() ? "" : rep->problems[0]);
}

// A kill inside a reclaim's write into the hot region's open segment, which
// is older than the checkpoint: recovery must cut the torn record there as
// it does in the segments after the checkpoint, so that nothing after the
// last good record is left to fail a verify (found by the kill torture).
TEST_P(HotRegionTest, ATornWriteInTheHotRegionIsCutAfterAKill) {
  opt_.hot_region_fraction = 0.5;
  NamespaceId ns;
  {
    auto s = OpenStore();
    ns = Ns(s.get());
  }
  testing::InKilledChild([&] {
    auto s = Store::Open(dir_.Sub("store"), opt_);
    if (!s.ok()) _exit(2);
    Traffic(s->get(), ns, 16, 20);
    if ((*s)->GetStats().reinsertions < 16) _exit(3);
    // The index and a checkpoint past the hot segment's epoch made durable.
    if (!(*s)->Flush().ok()) _exit(4);
    // Two open segments: the puts' (the newest epoch) and the hot region's.
    std::vector<SegmentInfo> open;
    for (const SegmentInfo& g : (*s)->Segments())
      if (g.state == SegmentState::kOpen) open.push_back(g);
    if (open.size() != 2) _exit(5);
    const SegmentInfo hot = open[0].epoch < open[1].epoch ? open[0] : open[1];
    // A record of the hot segment's own life at its append point, of which
    // only the first page reached the file: a torn write.
    const std::string key = Key(9999);
    const size_t rec_bytes = format::RecordBytes(key.size(), kSize, 0);
    if (hot.used_bytes % format::kPage != 0 || hot.used_bytes + rec_bytes > opt_.segment_size_bytes) _exit(6);
    std::vector<uint8_t> rec(rec_bytes, 0);
    const size_t at = format::PayloadOffset(key.size(), kSize, 0);
    const auto payload = Payload(ns, key, kSize);
    std::copy(payload.begin(), payload.end(), rec.begin() + static_cast<std::ptrdiff_t>(at));
    format::RecordHeader h;
    h.key_len = static_cast<uint16_t>(key.size());
    h.segment_id = hot.id;
    h.generation = hot.generation;
    h.ns_id = ns;
    h.sequence = 1ull << 40;
    h.payload_len = kSize;
    h.payload_checksum = format::Checksum(payload.data(), kSize);
    format::EncodeRecordHeader(h, key, rec.data());
    const int fd = ::open(layout::SegmentPath(dir_.Sub("store"), hot.id).c_str(), O_WRONLY);
    if (fd < 0 || ::pwrite(fd, rec.data(), format::kPage, static_cast<off_t>(hot.used_bytes)) != format::kPage) _exit(7);
    ::close(fd);
    testing::KillSelf();  // no Close
  });
  auto s = OpenStore();
  EXPECT_TRUE(s->GetStats().recovered_from_crash);
  EXPECT_TRUE(s->GetVector(ns, Key(9999)).status().IsNotFound());
  for (int i = 0; i < 16; ++i) ExpectBlockAt(s.get(), ns, i);
  VerifyOptions vo;
  vo.deep = true;
  auto rep = s->Verify(vo);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->records_corrupt, 0u) << (rep->problems.empty() ? "" : rep->problems[0]);
  EXPECT_TRUE(rep->ok()) << (rep->problems.empty() ? "" : rep->problems[0]);
}

INSTANTIATE_TEST_SUITE_P(Backends, HotRegionTest, ::testing::Values(IoBackend::kIoUring, IoBackend::kPosix),
                         testing::BackendName);

}  // namespace
}  // namespace kvtier
