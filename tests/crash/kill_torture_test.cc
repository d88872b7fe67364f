// kill -9 torture: a child runs a mixed workload and is SIGKILLed at random
// moments; each reopen must keep every acknowledged block (no-eviction
// variant) and never return wrong bytes (both variants).
//
// Quick mode (CI): 200 kills in all. Long mode: KVTIER_TORTURE_KILLS=5000
// (split the same way between the variants).
#include <gtest/gtest.h>

#include "crash/torture_util.h"
#include "store/store_test_util.h"

namespace kvtier::testing {
namespace {

uint32_t Kills() { return RoundsFromEnv("KVTIER_TORTURE_KILLS", 200); }

TEST(KillTorture, NoEvictionEveryAckedBlockSurvives) {
  TempDir dir;
  TortureConfig c;
  c.crash = TortureConfig::Crash::kKill;
  c.eviction = false;
  c.fresh_store_every = 10;  // bounds the space a fast disk (tmpfs) fills
  c.rounds = Kills() / 2;
  c.seed = RoundsFromEnv("KVTIER_TORTURE_SEED", 7);
  c.vary_opener_limits = true;
  c.verify_after_recovery = true;
  TortureResult r = RunTorture(dir.path(), c);
  std::printf("[kill/no-eviction] %s\n", r.Summary().c_str());
  EXPECT_TRUE(r.ok()) << r.Summary();
  EXPECT_EQ(r.crashes, c.rounds);
  EXPECT_GT(r.acked_puts, 0u);
  EXPECT_GT(r.blocks_present, 0u);
  EXPECT_GT(r.small_limit_rounds, 0u);
  EXPECT_EQ(r.verifies, r.verified_rounds);
}

TEST(KillTorture, WithEvictionNeverWrongBytes) {
  TempDir dir;
  TortureConfig c;
  c.crash = TortureConfig::Crash::kKill;
  c.eviction = true;
  c.rounds = Kills() - Kills() / 2;
  c.seed = RoundsFromEnv("KVTIER_TORTURE_SEED", 7) + 1;
  c.vary_opener_limits = true;
  c.verify_after_recovery = true;
  TortureResult r = RunTorture(dir.path(), c);
  std::printf("[kill/eviction] %s\n", r.Summary().c_str());
  EXPECT_TRUE(r.ok()) << r.Summary();
  EXPECT_EQ(r.crashes, c.rounds);
  EXPECT_GT(r.acked_puts, 0u);
}

}  // namespace
}  // namespace kvtier::testing
