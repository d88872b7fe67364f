#include "doubles/fault_injection.h"

#include <array>
#include <mutex>
#include <random>

#include "io/posix_io_queue.h"

namespace kvtier {

const char* FaultOpName(FaultOp op) {
  switch (op) {
    case FaultOp::kOpen: return "open";
    case FaultOp::kRead: return "read";
    case FaultOp::kWrite: return "write";
    case FaultOp::kSync: return "sync";
    case FaultOp::kAllocate: return "allocate";
    case FaultOp::kPunchHole: return "punch hole";
    case FaultOp::kTruncate: return "truncate";
    case FaultOp::kSize: return "size";
    case FaultOp::kCreateDir: return "create dir";
    case FaultOp::kSyncDir: return "sync dir";
    case FaultOp::kRename: return "rename";
    case FaultOp::kRemove: return "remove";
    case FaultOp::kExists: return "exists";
    case FaultOp::kListDir: return "list dir";
    case FaultOp::kLock: return "lock";
    case FaultOp::kFreeSpace: return "free space";
  }
  return "unknown";
}

struct FaultInjectionFileSystem::State {
  struct Decision {
    bool fail = false;
    bool short_transfer = false;
    int error = 0;
  };

  State(std::shared_ptr<FileSystem> b, uint64_t seed) : base(std::move(b)), rng(seed) {}

  // Counts one call of `op` on `path` and decides whether it fails.
  Decision Check(FaultOp op, const std::string& path) {
    std::lock_guard<std::mutex> lock(mu);
    PerOp& o = ops[static_cast<size_t>(op)];
    ++o.calls;
    if (!o.armed) return {};
    const FaultSpec& s = o.spec;
    if (!s.path_substring.empty() && path.find(s.path_substring) == std::string::npos) return {};
    const uint64_t call = ++o.seen;
    bool fail = false;
    switch (s.when) {
      case FaultSpec::When::kNth: fail = call == s.n; break;
      case FaultSpec::When::kAfter: fail = call > s.n; break;
      case FaultSpec::When::kRandom:
        // 53 random bits as a double in [0, 1): the same on every platform,
        // unlike std::uniform_real_distribution.
        fail = static_cast<double>(rng() >> 11) * 0x1.0p-53 < s.probability;
        break;
    }
    if (!fail) return {};
    ++o.faults;
    return {true, s.short_transfer, s.error};
  }

  static Status Injected(FaultOp op, const std::string& path, int error) {
    return Status::FromErrno(error, std::string("injected fault: ") + FaultOpName(op) + " " + path);
  }

  struct PerOp {
    bool armed = false;
    FaultSpec spec;
    uint64_t seen = 0;    // matching calls since SetFault
    uint64_t calls = 0;   // all calls since ResetCounts
    uint64_t faults = 0;  // injected failures since ResetCounts
  };

  const std::shared_ptr<FileSystem> base;
  mutable std::mutex mu;
  std::optional<uint64_t> free_space;  // guarded by mu
  std::function<void(const std::string&)> before_read;  // guarded by mu
  std::function<void(const std::string&)> before_write;  // guarded by mu
  std::array<PerOp, kNumFaultOps> ops;
  std::mt19937_64 rng;
};

namespace {

using State = FaultInjectionFileSystem::State;

class FaultInjectionFile final : public File {
 public:
  FaultInjectionFile(std::shared_ptr<State> state, std::unique_ptr<File> base)
      : state_(std::move(state)), base_(std::move(base)) {}

  const std::string& path() const override { return base_->path(); }
  // No descriptor: io_uring queues then route our requests through ReadAt /
  // WriteAt, where the faults are.
  int fd() const override { return -1; }
  int map_fd() const override { return base_->map_fd(); }
  bool direct() const override { return base_->direct(); }
  uint32_t read_align() const override { return base_->read_align(); }

  Status ReadAt(uint64_t offset, void* buf, size_t n) override {
    const State::Decision d = state_->Check(FaultOp::kRead, path());
    if (!d.fail) {
      RunHook(&State::before_read);
      return base_->ReadAt(offset, buf, n);
    }
    if (d.short_transfer) KVTIER_RETURN_IF_ERROR(PartialRead(offset, buf, n));
    return State::Injected(FaultOp::kRead, path(), d.error);
  }

  Status WriteAt(uint64_t offset, const void* buf, size_t n) override {
    const State::Decision d = state_->Check(FaultOp::kWrite, path());
    if (!d.fail) {
      RunHook(&State::before_write);
      return base_->WriteAt(offset, buf, n);
    }
    if (d.short_transfer) {
      const size_t half = Half(n);
      if (half > 0) KVTIER_RETURN_IF_ERROR(base_->WriteAt(offset, buf, half));
    }
    return State::Injected(FaultOp::kWrite, path(), d.error);
  }

  Status Sync() override {
    if (Status s = Fault(FaultOp::kSync); !s.ok()) return s;
    return base_->Sync();
  }
  Status Allocate(uint64_t offset, uint64_t len) override {
    if (Status s = Fault(FaultOp::kAllocate); !s.ok()) return s;
    return base_->Allocate(offset, len);
  }
  Status PunchHole(uint64_t offset, uint64_t len) override {
    if (Status s = Fault(FaultOp::kPunchHole); !s.ok()) return s;
    return base_->PunchHole(offset, len);
  }
  Result<uint64_t> Size() override {
    if (Status s = Fault(FaultOp::kSize); !s.ok()) return s;
    return base_->Size();
  }
  Status Truncate(uint64_t size) override {
    if (Status s = Fault(FaultOp::kTruncate); !s.ok()) return s;
    return base_->Truncate(size);
  }

 private:
  // The test's hook before a read or write, if it set one; run outside the
  // lock, since it may hold the calling thread.
  void RunHook(std::function<void(const std::string&)> State::*which) {
    std::function<void(const std::string&)> hook;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      hook = state_.get()->*which;
    }
    if (hook) hook(path());
  }

  Status Fault(FaultOp op) {
    const State::Decision d = state_->Check(op, path());
    return d.fail ? State::Injected(op, path(), d.error) : Status::OK();
  }

  // Half of n, kept a multiple of the read granule for direct I/O.
  size_t Half(size_t n) const {
    size_t half = n / 2;
    if (base_->direct()) half &= ~size_t{base_->read_align() - 1};
    return half;
  }

  Status PartialRead(uint64_t offset, void* buf, size_t n) {
    const size_t half = Half(n);
    return half > 0 ? base_->ReadAt(offset, buf, half) : Status::OK();
  }

  const std::shared_ptr<State> state_;
  const std::unique_ptr<File> base_;
};

}  // namespace

FaultInjectionFileSystem::FaultInjectionFileSystem(std::shared_ptr<FileSystem> base, uint64_t seed)
    : state_(std::make_shared<State>(std::move(base), seed)) {}

FaultInjectionFileSystem::~FaultInjectionFileSystem() = default;

void FaultInjectionFileSystem::SetFault(FaultOp op, FaultSpec spec) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State::PerOp& o = state_->ops[static_cast<size_t>(op)];
  o.armed = true;
  o.spec = std::move(spec);
  o.seen = 0;
}

void FaultInjectionFileSystem::ClearFault(FaultOp op) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State::PerOp& o = state_->ops[static_cast<size_t>(op)];
  o.armed = false;
  o.seen = 0;
}

void FaultInjectionFileSystem::ClearAllFaults() {
  for (size_t i = 0; i < kNumFaultOps; ++i) ClearFault(static_cast<FaultOp>(i));
}

void FaultInjectionFileSystem::Reseed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->rng.seed(seed);
}

uint64_t FaultInjectionFileSystem::Calls(FaultOp op) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->ops[static_cast<size_t>(op)].calls;
}

uint64_t FaultInjectionFileSystem::Faults(FaultOp op) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->ops[static_cast<size_t>(op)].faults;
}

void FaultInjectionFileSystem::ResetCounts() {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (State::PerOp& o : state_->ops) {
    o.calls = 0;
    o.faults = 0;
  }
}

const std::shared_ptr<FileSystem>& FaultInjectionFileSystem::base() const { return state_->base; }

Result<std::unique_ptr<File>> FaultInjectionFileSystem::Open(const std::string& path, OpenFlags flags) {
  const State::Decision d = state_->Check(FaultOp::kOpen, path);
  if (d.fail) return State::Injected(FaultOp::kOpen, path, d.error);
  Result<std::unique_ptr<File>> f = state_->base->Open(path, flags);
  if (!f.ok()) return f.status();
  return std::unique_ptr<File>(new FaultInjectionFile(state_, std::move(f).value()));
}

#define KVTIER_FAULT_(op, path)                                    \
  do {                                                             \
    const State::Decision _d = state_->Check(op, path);            \
    if (_d.fail) return State::Injected(op, path, _d.error);       \
  } while (0)

Status FaultInjectionFileSystem::CreateDir(const std::string& path, unsigned mode) {
  KVTIER_FAULT_(FaultOp::kCreateDir, path);
  return state_->base->CreateDir(path, mode);
}

Status FaultInjectionFileSystem::SyncDir(const std::string& path) {
  KVTIER_FAULT_(FaultOp::kSyncDir, path);
  return state_->base->SyncDir(path);
}

Status FaultInjectionFileSystem::Rename(const std::string& from, const std::string& to) {
  KVTIER_FAULT_(FaultOp::kRename, from);
  return state_->base->Rename(from, to);
}

Status FaultInjectionFileSystem::Remove(const std::string& path) {
  KVTIER_FAULT_(FaultOp::kRemove, path);
  return state_->base->Remove(path);
}

Result<bool> FaultInjectionFileSystem::Exists(const std::string& path) {
  KVTIER_FAULT_(FaultOp::kExists, path);
  return state_->base->Exists(path);
}

Result<std::vector<std::string>> FaultInjectionFileSystem::ListDir(const std::string& path) {
  KVTIER_FAULT_(FaultOp::kListDir, path);
  return state_->base->ListDir(path);
}

Result<std::unique_ptr<FileLock>> FaultInjectionFileSystem::Lock(const std::string& path, bool exclusive, unsigned mode) {
  KVTIER_FAULT_(FaultOp::kLock, path);
  return state_->base->Lock(path, exclusive, mode);
}

Result<std::optional<long>> FaultInjectionFileSystem::LockHolder(const std::string& path) {
  KVTIER_FAULT_(FaultOp::kLock, path);
  return state_->base->LockHolder(path);
}

Result<uint64_t> FaultInjectionFileSystem::FreeSpace(const std::string& path) {
  KVTIER_FAULT_(FaultOp::kFreeSpace, path);
  {
    std::lock_guard<std::mutex> l(state_->mu);
    if (state_->free_space) return *state_->free_space;
  }
  return state_->base->FreeSpace(path);
}

void FaultInjectionFileSystem::SetFreeSpace(std::optional<uint64_t> bytes) {
  std::lock_guard<std::mutex> l(state_->mu);
  state_->free_space = bytes;
}

void FaultInjectionFileSystem::SetBeforeRead(std::function<void(const std::string&)> hook) {
  std::lock_guard<std::mutex> l(state_->mu);
  state_->before_read = std::move(hook);
}

void FaultInjectionFileSystem::SetBeforeWrite(std::function<void(const std::string&)> hook) {
  std::lock_guard<std::mutex> l(state_->mu);
  state_->before_write = std::move(hook);
}

#undef KVTIER_FAULT_

Result<std::unique_ptr<IoQueue>> FaultInjectionFileSystem::NewIoQueue(unsigned depth) {
  if (depth == 0) return Status::InvalidArgument("io queue depth 0");
  return NewPosixIoQueue(depth);
}

std::string FaultInjectionFileSystem::IoBackendName() const { return "posix"; }

}  // namespace kvtier
