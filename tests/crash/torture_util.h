// The crash-torture harness shared by the kill -9 and simulated power-loss
// tests.
//
// Each round forks a child (from a driver process that never opens a store)
// that opens the store, checks every key against the driver's model of what
// must (and may) be there, reports what it found, and
// then runs a mixed workload (puts, PutBatch, PutAsync, removes, gets, Flush,
// EvictTo), logging each operation to an O_APPEND file before it is submitted
// and again after it is acknowledged. The child dies either by the driver's
// SIGKILL after a random delay, or (power loss) inside the I/O call at which a
// SimPowerLossFileSystem was told to crash. The driver folds the log into its
// model and starts the next round.
//
// Model: payloads are Payload(ns, key, PayloadSize(key, version), version).
// After a crash, a key may hold the outcome of its last acknowledged
// operation or of any later operation that was submitted but not
// acknowledged. Checks:
// - acked_lost: a key whose only allowed outcome is "present" is absent;
// - wrong_bytes: returned bytes match no version ever put for the key;
// - unexpected: bytes of a real version that the model does not allow (an
//   older version, or a removed block come back);
// - reopen failures.
// With eviction (a small budget) absence is always allowed.
#ifndef KVTIER_TESTS_CRASH_TORTURE_UTIL_H_
#define KVTIER_TESTS_CRASH_TORTURE_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

namespace kvtier::testing {

struct TortureConfig {
  enum class Crash : uint8_t { kKill, kPowerLoss };
  Crash crash = Crash::kKill;
  bool eviction = false;          // small budget: blocks may vanish
  uint32_t rounds = 100;
  uint64_t seed = 1;
  uint32_t keys = 400;
  uint32_t max_payload = 24 << 10;  // payload sizes 1 .. max_payload
  uint32_t max_kill_delay_ms = 60;  // kill: delay after the child is ready
  uint64_t max_crash_op = 120;      // power loss: crash at mutating op 1..max
  uint32_t fresh_store_every = 25;  // no eviction: new store every N rounds (space)
  double index_loss_probability = 0;  // power loss: delete the index folder before a round
  // Half the rounds reopen with a smaller max_payload_bytes and write queue
  // than the blocks already stored (they must all survive; puts over the
  // smaller limit are refused and count as declined).
  bool vary_opener_limits = false;
  // After each recovery, run a deep Verify: it must find no corrupt region
  // (a torn tail recovery left behind, in any segment).
  bool verify_after_recovery = false;
  // Power loss: half the rounds fail one sync of a segment (EIO) during the
  // workload, before the crash: the failed write then holds the checkpoint
  // back, and later removes and overwrites must still hold across the crash.
  bool fail_a_sync = false;
};

struct TortureResult {
  uint64_t rounds = 0;
  uint64_t crashes = 0;             // SIGKILLs delivered / power losses simulated
  uint64_t crashes_in_open = 0;     // power loss fell inside Open (recovery)
  uint64_t verified_rounds = 0;
  uint64_t blocks_checked = 0, blocks_present = 0;
  uint64_t acked_puts = 0, acked_removes = 0;
  uint64_t acked_lost = 0, wrong_bytes = 0, unexpected = 0;
  uint64_t reopen_failures = 0, child_failures = 0;
  uint64_t index_losses = 0;
  uint64_t writes_pending = 0, writes_torn = 0, names_undone = 0;
  // Of the unsynced writes, those to the RocksDB index's files, and those of
  // them the power cut did not keep whole (its WAL lost or torn).
  uint64_t index_writes_pending = 0, index_writes_lost = 0;
  uint64_t mode_counts[4] = {0, 0, 0, 0};
  uint64_t small_limit_rounds = 0;        // reopened with smaller limits (vary_opener_limits)
  uint64_t verifies = 0, corrupt_after_recovery = 0;  // verify_after_recovery
  uint64_t injected_sync_failures = 0, put_io_errors = 0;  // fail_a_sync: syncs failed on purpose; puts that said IOError
  std::vector<std::string> problems;  // first few, human-readable
  bool ok() const {
    return acked_lost == 0 && wrong_bytes == 0 && unexpected == 0 && reopen_failures == 0 &&
           child_failures == 0 && corrupt_after_recovery == 0;
  }
  std::string Summary() const;
};

// Runs the torture in `dir` (created; stores live in subfolders). The rounds
// run in a fresh process (this binary re-executed through /proc/self/exe
// with a filter selecting TortureDriver.DISABLED_Run), so the caller may have
// opened stores before: a child forked from such a process would inherit
// RocksDB's thread-pool state without its threads and hang. A driver that
// dies counts as a child failure, with its output in `problems`.
TortureResult RunTorture(const std::string& dir, const TortureConfig& config);

// The driver's entry point: runs the rounds described by the files RunTorture
// left in $KVTIER_TORTURE_DRIVER and writes the result there. False (with
// `error`) when not started by RunTorture.
bool RunTortureDriver(std::string* error);

// Rounds from an environment variable (e.g. KVTIER_TORTURE_KILLS), else `fallback`.
uint32_t RoundsFromEnv(const char* name, uint32_t fallback);

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_CRASH_TORTURE_UTIL_H_
