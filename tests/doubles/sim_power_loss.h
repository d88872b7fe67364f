// SimPowerLossFileSystem: a FileSystem wrapper that simulates losing power.
//
// The wrapped ("base") file system holds exactly the durable state: what a
// machine would find on its disk after a power cut. Everything else lives in
// a volatile layer kept in memory:
// - File::WriteAt and File::PunchHole (as a write of zeros) are recorded per
//   file and served to reads from memory; File::Sync moves them to the base.
// - Creating a file, Rename and Remove reach the base at once (so the names
//   behave normally while running) but are remembered as undoable until a
//   SyncDir of their folder makes them durable.
//
// Crash() then picks what survived, as a disk could have:
// - file data: per crash one mode is drawn - drop every unsynced write, keep
//   all of them (a process crash), keep a random subset of whole writes, or
//   tear every write at 4 KiB sector granularity (a random subset of its
//   sectors reaches the disk);
// - names: a random prefix of the unsynced creations/renames/removals (in the
//   order they were made) survives; the rest is undone, newest first (a
//   created file disappears, a rename is reversed, a removed file comes back
//   with its durable contents).
// After Crash() every file and call of the wrapper fails with IOError
// ("simulated power loss"); open a new store with a new wrapper (or the base).
//
// Not simulated (treated as durable at once): CreateDir, File::Allocate and
// File::Truncate (size changes), and any I/O that does not pass through this
// FileSystem. The store's RocksDB index does (index/rocks_fs.h), so its
// unsynced WAL is lost like any other unsynced write. Reads, Exists, ListDir,
// Lock and FreeSpace pass through. Files have no map_fd(): the RAM tier's
// shared memory, which a power cut would not keep, is never made through it.
//
// A crash can also be triggered from inside an operation: SetCrashAt(n, fn)
// calls fn (typically Crash() then _exit) when the n-th mutating operation
// (WriteAt, PunchHole, Sync, Allocate, Truncate, creating Open, Rename, Remove,
// SyncDir) is about to run, so the crash falls at an exact instant.
//
// Files report fd() == -1 and direct() == false; NewIoQueue hands out a posix
// queue so batched I/O goes through the wrapper. Thread-safe: one mutex guards
// all state. Deterministic for a seed and a sequence of calls.
#ifndef KVTIER_TESTS_DOUBLES_SIM_POWER_LOSS_H_
#define KVTIER_TESTS_DOUBLES_SIM_POWER_LOSS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/io.h"

namespace kvtier {

struct PowerLossReport {
  enum class Mode : uint8_t { kDropAll, kKeepAll, kKeepSubset, kTear };
  Mode mode = Mode::kDropAll;
  uint64_t writes_pending = 0;   // unsynced writes (and punches) at the crash
  uint64_t writes_kept = 0;      // applied whole
  uint64_t writes_torn = 0;      // applied in part (some 4 KiB sectors)
  uint64_t names_pending = 0;    // unsynced creations/renames/removals
  uint64_t names_undone = 0;
  // Unsynced writes to files whose path contains the watched substring
  // (SetWatchedPath), and of those the ones that did not survive whole.
  uint64_t watched_pending = 0;
  uint64_t watched_lost = 0;
};

const char* PowerLossModeName(PowerLossReport::Mode mode);

class SimPowerLossFileSystem final : public FileSystem {
 public:
  // `base` must not be null and should hold no unsynced state of its own
  // that matters (a DefaultFileSystem is fine: the simulation never loses
  // what reached it).
  SimPowerLossFileSystem(std::shared_ptr<FileSystem> base, uint64_t seed);
  ~SimPowerLossFileSystem() override;

  // Calls `at_crash` when mutating operation number `n` (1-based, counted
  // from construction) is about to run; the operation runs afterwards only
  // if `at_crash` returns (then it fails: the wrapper has crashed if
  // at_crash called Crash()). n = 0 disables.
  void SetCrashAt(uint64_t n, std::function<void()> at_crash);
  uint64_t MutatingOps() const;
  // Reports the unsynced writes of paths containing `substring` apart (the
  // store's "/index/": RocksDB's WAL), so a test can show they were lost.
  void SetWatchedPath(std::string substring);

  // Materialises a random survivable state in the base and disables the
  // wrapper. Idempotent (later calls report nothing pending).
  PowerLossReport Crash();

  Result<std::unique_ptr<File>> Open(const std::string& path, OpenFlags flags) override;
  Status CreateDir(const std::string& path, unsigned mode) override;
  Status SyncDir(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  Result<bool> Exists(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Result<std::unique_ptr<FileLock>> Lock(const std::string& path, bool exclusive, unsigned mode) override;
  Result<std::optional<long>> LockHolder(const std::string& path) override;
  Result<uint64_t> FreeSpace(const std::string& path) override;
  Result<std::unique_ptr<IoQueue>> NewIoQueue(unsigned depth) override;
  std::string IoBackendName() const override { return "posix"; }

  struct State;  // shared with the files; defined in the .cc

 private:
  std::shared_ptr<State> state_;
};

}  // namespace kvtier

#endif  // KVTIER_TESTS_DOUBLES_SIM_POWER_LOSS_H_
