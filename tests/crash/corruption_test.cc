// Corruption and fault injection: damaged files and failing I/O must end in a
// miss, a clean open that drops what cannot be trusted, or a clear error -
// never wrong bytes. Every returned block is checked against its
// deterministic payload.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "crash/torture_util.h"
#include "format/record.h"
#include "doubles/fault_injection.h"
#include "store/store_test_util.h"

namespace kvtier::testing {
namespace {

constexpr int kBlocks = 40;

// KVTIER_DAMAGE_SCALE multiplies the bit-flip rounds and fault trials (CI: 1).
int Scale() { return static_cast<int>(RoundsFromEnv("KVTIER_DAMAGE_SCALE", 1)); }

size_t SizeOf(int i) { return 3000 + static_cast<size_t>(i) * 1117; }

class Damage : public ::testing::Test {
 protected:
  void SetUp() override {
    opt_ = SmallOptions(IoBackend::kPosix);
    auto s = Store::Open(Dir(), opt_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ns_ = *(*s)->RegisterNamespace(TestSpec());
    for (int i = 0; i < kBlocks; ++i) {
      auto p = Payload(ns_, Key(i), SizeOf(i));
      ASSERT_TRUE((*s)->Put(ns_, Key(i), p.data(), p.size()).ok());
    }
    ASSERT_TRUE((*s)->Close().ok());
  }
  std::string Dir() const { return dir_.Sub("store"); }
  std::vector<std::string> Segments() const {
    std::vector<std::string> out;
    for (auto& e : std::filesystem::directory_iterator(Dir() + "/segments")) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
  }
  // Reads every block: each is a miss or exact. Returns the number present.
  int CheckAll(Store* s, uint64_t* wrong) {
    int present = 0;
    for (int i = 0; i < kBlocks; ++i) {
      auto r = s->GetVector(ns_, Key(i));
      if (!r.ok()) {
        EXPECT_TRUE(r.status().IsNotFound() || r.status().code() == Code::kIOError) << r.status().ToString();
        continue;
      }
      ++present;
      if (*r != Payload(ns_, Key(i), SizeOf(i))) ++*wrong;
    }
    return present;
  }

  TempDir dir_;
  Options opt_;
  NamespaceId ns_ = 0;
};

// Random bit flips anywhere in the segment files (payloads, record headers,
// segment headers): never wrong bytes, with or without Repair.
TEST_F(Damage, RandomBitFlipsNeverReturnWrongBytes) {
  std::mt19937_64 rng(42);
  uint64_t tried = 0, wrong = 0, detected = 0;
  auto segs = Segments();
  ASSERT_FALSE(segs.empty());
  for (int round = 0; round < 6 * Scale(); ++round) {
    for (int f = 0; f < 8; ++f) {
      const std::string& seg = segs[rng() % segs.size()];
      uint64_t size = std::filesystem::file_size(seg);
      // Half the flips land in the first 64 KiB, where headers are dense.
      uint64_t off = (rng() % 2) ? rng() % std::min<uint64_t>(size, 65536) : rng() % size;
      FlipBit(seg, off, static_cast<int>(rng() % 8));
      ++tried;
    }
    auto s = Store::Open(Dir(), opt_);
    if (!s.ok()) {  // only a clear error is acceptable
      EXPECT_FALSE(s.status().message().empty());
      continue;
    }
    CheckAll(s->get(), &wrong);
    detected += (*s)->GetStats().checksum_failures;
    ASSERT_TRUE((*s)->Close().ok());
    auto rep = Store::Repair(Dir(), opt_);
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    auto s2 = Store::Open(Dir(), opt_);
    ASSERT_TRUE(s2.ok()) << s2.status().ToString();
    CheckAll(s2->get(), &wrong);
  }
  std::printf("[corruption] bit flips tried=%llu checksum failures detected on read=%llu wrong=%llu\n",
              static_cast<unsigned long long>(tried), static_cast<unsigned long long>(detected),
              static_cast<unsigned long long>(wrong));
  EXPECT_EQ(wrong, 0u);
}

TEST_F(Damage, TruncatedAndDeletedSegmentsAreDropped) {
  std::mt19937_64 rng(7);
  auto segs = Segments();
  ASSERT_GE(segs.size(), 1u);
  std::filesystem::resize_file(segs[0], rng() % std::filesystem::file_size(segs[0]));
  if (segs.size() > 1) std::filesystem::remove(segs.back());
  uint64_t wrong = 0;
  auto s = Store::Open(Dir(), opt_);
  if (s.ok()) {
    CheckAll(s->get(), &wrong);
    ASSERT_TRUE((*s)->Close().ok());
  } else {
    EXPECT_NE(s.status().message().find("seg-"), std::string::npos) << s.status().ToString();
  }
  auto rep = Store::Repair(Dir(), opt_);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  auto s2 = Store::Open(Dir(), opt_);
  ASSERT_TRUE(s2.ok()) << s2.status().ToString();
  CheckAll(s2->get(), &wrong);
  EXPECT_EQ(wrong, 0u);
  auto p = Payload(ns_, "after", 5000);
  EXPECT_TRUE((*s2)->Put(ns_, "after", p.data(), p.size()).ok());
}

TEST_F(Damage, DeletedOrCorruptIndexIsRebuiltByRepair) {
  uint64_t wrong = 0;
  std::filesystem::remove_all(Dir() + "/index");
  auto rep = Store::Repair(Dir(), opt_);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->records_indexed, static_cast<uint64_t>(kBlocks));
  {
    auto s = Store::Open(Dir(), opt_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(CheckAll(s->get(), &wrong), kBlocks);
  }
  // Garbage in every index file: open fails clearly or serves no wrong bytes;
  // Repair recovers everything from the segments.
  for (auto& e : std::filesystem::directory_iterator(Dir() + "/index"))
    if (e.is_regular_file() && std::filesystem::file_size(e.path()) > 64) FlipBit(e.path(), 40, 1);
  {
    auto s = Store::Open(Dir(), opt_);
    if (s.ok()) CheckAll(s->get(), &wrong);
    else EXPECT_NE(s.status().message().find("index"), std::string::npos) << s.status().ToString();
  }
  std::filesystem::remove_all(Dir() + "/index");
  rep = Store::Repair(Dir(), opt_);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  auto s = Store::Open(Dir(), opt_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(CheckAll(s->get(), &wrong), kBlocks);
  EXPECT_EQ(wrong, 0u);
}

// Failing I/O at random points: clear errors, no put acknowledged whose sync
// failed, and after a reopen without faults every present block is exact and
// every acknowledged one is present.
TEST_F(Damage, InjectedFaultsNeverAcknowledgeLostWrites) {
  uint64_t injected = 0, wrong = 0, acked_lost = 0;
  const FaultOp ops[] = {FaultOp::kWrite, FaultOp::kSync, FaultOp::kRead, FaultOp::kOpen};
  const int errs[] = {EIO, ENOSPC};
  for (int trial = 0; trial < 16 * Scale(); ++trial) {
    auto fs = std::make_shared<FaultInjectionFileSystem>(DefaultFileSystem(IoBackend::kPosix), trial);
    Options o = opt_;
    o.file_system = fs;
    auto s = Store::Open(Dir(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    FaultSpec spec = FaultSpec::Random(0.2, errs[trial % 2]);
    if (trial % 3 == 0) spec.Short();
    spec.OnPaths("seg-");
    fs->SetFault(ops[trial % 4], spec);
    std::vector<int> acked;
    for (int i = 0; i < 30; ++i) {
      const int k = 1000 + trial * 100 + i;
      auto p = Payload(ns_, Key(k), 4096 + i * 100);
      Status st = (*s)->Put(ns_, Key(k), p.data(), p.size());
      if (st.ok()) acked.push_back(k);
      else EXPECT_FALSE(st.message().empty());
      auto r = (*s)->GetVector(ns_, Key(k));
      if (r.ok() && *r != p) ++wrong;
    }
    CheckAll(s->get(), &wrong);
    for (FaultOp op : ops) injected += fs->Faults(op);
    fs->ClearAllFaults();
    s->reset();  // Close (its errors, if any, are dropped)
    auto again = Store::Open(Dir(), opt_);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    for (int k : acked) {
      auto r = (*again)->GetVector(ns_, Key(k));
      if (!r.ok()) ++acked_lost;
      else if (*r != Payload(ns_, Key(k), 4096 + (k % 100) * 100)) ++wrong;
    }
    CheckAll(again->get(), &wrong);
  }
  std::printf("[faults] injected=%llu wrong=%llu acked_lost=%llu\n", static_cast<unsigned long long>(injected),
              static_cast<unsigned long long>(wrong), static_cast<unsigned long long>(acked_lost));
  EXPECT_GT(injected, 0u);
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(acked_lost, 0u);
}

}  // namespace
}  // namespace kvtier::testing
