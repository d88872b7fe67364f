// Simulated power loss: the workload runs on a SimPowerLossFileSystem that
// crashes at a random mutating I/O operation (including inside Open's
// recovery), keeping none, all, a random subset, or a 4 KiB-torn version of
// the unsynced writes and undoing unsynced creations/renames/removals.
//
// KVTIER_POWER_LOSS_POINTS crash points in all (default 2000). Each point costs
// one fork + Store::Open in a fresh child, ~85 ms of CPU on the 2-core dev VM
// (mostly opening RocksDB, see docs/reliability.md), so the default takes
// about three minutes of one core; long mode: KVTIER_POWER_LOSS_POINTS=10000.
#include <gtest/gtest.h>

#include "crash/torture_util.h"
#include "store/store_test_util.h"

namespace kvtier::testing {
namespace {

uint32_t Points() { return RoundsFromEnv("KVTIER_POWER_LOSS_POINTS", 2000); }

TortureConfig PowerLoss(bool eviction, uint64_t seed) {
  TortureConfig c;
  c.crash = TortureConfig::Crash::kPowerLoss;
  c.eviction = eviction;
  c.keys = 48;
  c.max_payload = 9000;
  c.max_crash_op = 80;
  c.fresh_store_every = 40;
  c.seed = RoundsFromEnv("KVTIER_TORTURE_SEED", 11) + seed;
  return c;
}

TEST(PowerLoss, NoEvictionEveryAckedBlockSurvives) {
  TempDir dir;
  TortureConfig c = PowerLoss(false, 0);
  c.rounds = Points() * 2 / 5;
  TortureResult r = RunTorture(dir.path(), c);
  std::printf("[power-loss/no-eviction] %s\n", r.Summary().c_str());
  EXPECT_TRUE(r.ok()) << r.Summary();
  EXPECT_EQ(r.crashes, c.rounds);
  EXPECT_GT(r.acked_puts, 0u);
  // One crash in four tears; with few rounds a tear may touch no pending write.
  if (c.rounds >= 80) {
    EXPECT_GT(r.writes_torn, 0u);
  }
}

TEST(PowerLoss, WithEvictionNeverWrongBytes) {
  TempDir dir;
  TortureConfig c = PowerLoss(true, 1);
  c.rounds = Points() * 2 / 5;
  TortureResult r = RunTorture(dir.path(), c);
  std::printf("[power-loss/eviction] %s\n", r.Summary().c_str());
  EXPECT_TRUE(r.ok()) << r.Summary();
  EXPECT_EQ(r.crashes, c.rounds);
}

// The index folder is deleted before some rounds (as if the RocksDB files
// were lost): recovery must rebuild from the segments without losing an
// acknowledged block or returning wrong bytes (removed blocks may return).
TEST(PowerLoss, IndexLossRebuildsFromSegments) {
  TempDir dir;
  TortureConfig c = PowerLoss(false, 2);
  c.rounds = Points() - 2 * (Points() * 2 / 5);
  c.index_loss_probability = 0.3;
  TortureResult r = RunTorture(dir.path(), c);
  std::printf("[power-loss/index-loss] %s\n", r.Summary().c_str());
  EXPECT_TRUE(r.ok()) << r.Summary();
  EXPECT_GT(r.index_losses, 0u);
}

}  // namespace
}  // namespace kvtier::testing
