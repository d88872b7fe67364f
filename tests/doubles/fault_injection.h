// FaultInjectionFileSystem: a FileSystem wrapper that makes chosen calls fail,
// for testing how every layer above the I/O seam handles errors.
//
//   auto fs = std::make_shared<FaultInjectionFileSystem>(DefaultFileSystem(), /*seed=*/42);
//   fs->SetFault(FaultOp::kWrite, FaultSpec::Nth(3, ENOSPC));       // 3rd write -> NoSpace
//   fs->SetFault(FaultOp::kSync, FaultSpec::After(0));              // every fdatasync -> IOError
//   fs->SetFault(FaultOp::kRead, FaultSpec::Random(0.01).Short());  // 1% of reads: half, then EIO
//   ... use fs wherever a FileSystem is taken ...
//   EXPECT_EQ(fs->Faults(FaultOp::kWrite), 1u);
//
// Each operation kind (FaultOp) has at most one FaultSpec. A spec counts the
// calls of its kind made after SetFault (only those whose path contains
// `path_substring`, when set) and decides on each whether it fails. A failing
// call does not reach the wrapped file system - except in short mode, where a
// read or write first transfers half of its bytes (rounded down to 4096 on
// direct files) and then fails. Failures are Status::FromErrno(error, ...), so
// ENOSPC surfaces as kNoSpace, EIO as kIOError, ENOENT as kNotFound; messages
// start with "injected fault: <op> <path>".
//
// Files opened through the wrapper report fd() == -1, so every transfer,
// including those batched through any IoQueue, goes through the wrapper's
// ReadAt/WriteAt. NewIoQueue hands out a posix queue (backend "posix").
//
// Thread-safe: one mutex guards the specs, counters and random generator
// (seeded std::mt19937_64, so a seed replays the same failures for the same
// sequence of calls). Files and locks may outlive the wrapper.
#ifndef KVTIER_TESTS_DOUBLES_FAULT_INJECTION_H_
#define KVTIER_TESTS_DOUBLES_FAULT_INJECTION_H_

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/io.h"

namespace kvtier {

enum class FaultOp : uint8_t {
  kOpen,       // FileSystem::Open
  kRead,       // File::ReadAt (also requests of NewIoQueue queues)
  kWrite,      // File::WriteAt (likewise)
  kSync,       // File::Sync
  kAllocate,   // File::Allocate
  kPunchHole,  // File::PunchHole
  kTruncate,   // File::Truncate
  kSize,       // File::Size
  kCreateDir,  // FileSystem::CreateDir
  kSyncDir,    // FileSystem::SyncDir
  kRename,     // FileSystem::Rename (path: `from`)
  kRemove,     // FileSystem::Remove
  kExists,     // FileSystem::Exists
  kListDir,    // FileSystem::ListDir
  kLock,       // FileSystem::Lock
  kFreeSpace,  // FileSystem::FreeSpace
};
inline constexpr size_t kNumFaultOps = static_cast<size_t>(FaultOp::kFreeSpace) + 1;

// "open", "read", "write", ...
const char* FaultOpName(FaultOp op);

// When and how calls of one kind fail.
struct FaultSpec {
  enum class When : uint8_t {
    kNth,     // only the n-th call (1-based) fails
    kAfter,   // the first n calls succeed, every later one fails
    kRandom,  // each call fails with `probability`
  };
  When when = When::kNth;
  uint64_t n = 1;
  double probability = 0.0;
  int error = EIO;              // errno reported
  bool short_transfer = false;  // reads/writes: move half the bytes first
  std::string path_substring;   // "" = every path; else only matching paths count

  static FaultSpec Nth(uint64_t n, int error = EIO) { return Make(When::kNth, n, 0.0, error); }
  static FaultSpec After(uint64_t n, int error = EIO) { return Make(When::kAfter, n, 0.0, error); }
  static FaultSpec Random(double probability, int error = EIO) {
    return Make(When::kRandom, 0, probability, error);
  }
  FaultSpec& Short() {
    short_transfer = true;
    return *this;
  }
  FaultSpec& OnPaths(std::string substring) {
    path_substring = std::move(substring);
    return *this;
  }

 private:
  static FaultSpec Make(When when, uint64_t n, double p, int error) {
    FaultSpec s;
    s.when = when;
    s.n = n;
    s.probability = p;
    s.error = error;
    return s;
  }
};

class FaultInjectionFileSystem final : public FileSystem {
 public:
  // `base` must not be null; it is shared with files opened through this.
  explicit FaultInjectionFileSystem(std::shared_ptr<FileSystem> base, uint64_t seed = 0);
  ~FaultInjectionFileSystem() override;

  // Replaces the spec for `op` and restarts its call count.
  void SetFault(FaultOp op, FaultSpec spec);
  void ClearFault(FaultOp op);
  void ClearAllFaults();
  // Restarts the random sequence.
  void Reseed(uint64_t seed);
  // FreeSpace reports `bytes` (a small or nearly full disk) instead of the
  // base's answer; nullopt restores the base's.
  void SetFreeSpace(std::optional<uint64_t> bytes);

  // Runs `hook` with the file's path before every read that is not made to
  // fail, on the reading thread (a test holds reads there to make a device
  // slow); nullptr removes it.
  void SetBeforeRead(std::function<void(const std::string&)> hook);
  // The same before every write that is not made to fail.
  void SetBeforeWrite(std::function<void(const std::string&)> hook);

  // Calls of `op` seen (failed or not) since construction or ResetCounts().
  uint64_t Calls(FaultOp op) const;
  // Of those, how many were made to fail.
  uint64_t Faults(FaultOp op) const;
  void ResetCounts();

  const std::shared_ptr<FileSystem>& base() const;

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
  std::string IoBackendName() const override;

  // Shared with the files; defined in the .cc.
  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace kvtier

#endif  // KVTIER_TESTS_DOUBLES_FAULT_INJECTION_H_
