#include "doubles/sim_power_loss.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include "io/posix_io_queue.h"

namespace kvtier {

namespace {
constexpr uint64_t kSector = 4096;

Status Dead(const std::string& path) {
  return Status::IOError("simulated power loss: " + path + " is gone with the crashed process");
}

std::string ParentOf(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}
}  // namespace

const char* PowerLossModeName(PowerLossReport::Mode mode) {
  switch (mode) {
    case PowerLossReport::Mode::kDropAll: return "drop-all";
    case PowerLossReport::Mode::kKeepAll: return "keep-all";
    case PowerLossReport::Mode::kKeepSubset: return "keep-subset";
    case PowerLossReport::Mode::kTear: return "tear";
  }
  return "?";
}

// One file (inode) seen through the wrapper: its base handle and the writes
// that have not reached the base yet.
struct SimNode {
  std::unique_ptr<File> base;
  bool base_read_only = false;
  struct Write {
    uint64_t offset;
    std::vector<uint8_t> data;
  };
  std::vector<Write> pending;

  uint64_t PendingEnd() const {
    uint64_t end = 0;
    for (const Write& w : pending) end = std::max<uint64_t>(end, w.offset + w.data.size());
    return end;
  }
};

struct SimPowerLossFileSystem::State {
  std::shared_ptr<FileSystem> base;
  mutable std::mutex mu;
  std::mt19937_64 rng;
  bool crashed = false;
  uint64_t ops = 0;
  uint64_t crash_at = 0;
  std::function<void()> at_crash;
  std::map<std::string, std::shared_ptr<SimNode>> nodes;  // by current path
  std::string watched;  // SetWatchedPath

  // A name change not yet made durable by SyncDir.
  struct NameOp {
    enum class Kind : uint8_t { kCreate, kRename, kRemove } kind;
    std::string path;                 // created / removed path, or rename source
    std::string to;                   // rename target
    bool had_old = false;             // rename replaced / remove deleted a file
    std::vector<uint8_t> old_bytes;   // its durable contents
  };
  std::vector<NameOp> names;

  // Counts a mutating operation and fires the crash hook at its number.
  Status Tick(const std::string& path) {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> l(mu);
      if (crashed) return Dead(path);
      ++ops;
      if (crash_at != 0 && ops == crash_at) fn = at_crash;
    }
    if (fn) fn();
    std::lock_guard<std::mutex> l(mu);
    return crashed ? Dead(path) : Status::OK();
  }

  // Durable bytes of `path` in the base (empty when it does not exist).
  Result<std::vector<uint8_t>> ReadBase(const std::string& path) {
    OpenFlags f;
    f.read_only = true;
    auto file = base->Open(path, f);
    if (!file.ok()) return file.status();
    auto size = (*file)->Size();
    if (!size.ok()) return size.status();
    std::vector<uint8_t> bytes(*size);
    if (!bytes.empty()) KVTIER_RETURN_IF_ERROR((*file)->ReadAt(0, bytes.data(), bytes.size()));
    return bytes;
  }

  Status WriteBase(const std::string& path, const std::vector<uint8_t>& bytes) {
    OpenFlags f;
    f.create = true;
    auto file = base->Open(path, f);
    if (!file.ok()) return file.status();
    KVTIER_RETURN_IF_ERROR((*file)->Truncate(0));
    if (!bytes.empty()) KVTIER_RETURN_IF_ERROR((*file)->WriteAt(0, bytes.data(), bytes.size()));
    return Status::OK();
  }
};

namespace {

class SimFile final : public File {
 public:
  using State = SimPowerLossFileSystem::State;
  SimFile(std::shared_ptr<State> st, std::shared_ptr<SimNode> node, std::string path)
      : st_(std::move(st)), node_(std::move(node)), path_(std::move(path)) {}

  const std::string& path() const override { return path_; }

  Status ReadAt(uint64_t offset, void* buf, size_t n) override {
    std::lock_guard<std::mutex> l(st_->mu);
    if (st_->crashed) return Dead(path_);
    auto base_size = node_->base->Size();
    if (!base_size.ok()) return base_size.status();
    const uint64_t size = std::max<uint64_t>(*base_size, node_->PendingEnd());
    if (offset + n > size)
      return Status::Corruption("short read of " + path_ + " at " + std::to_string(offset));
    auto* out = static_cast<uint8_t*>(buf);
    uint64_t from_base = offset < *base_size ? std::min<uint64_t>(n, *base_size - offset) : 0;
    if (from_base > 0) KVTIER_RETURN_IF_ERROR(node_->base->ReadAt(offset, out, from_base));
    std::memset(out + from_base, 0, n - from_base);
    for (const SimNode::Write& w : node_->pending) {
      const uint64_t lo = std::max<uint64_t>(offset, w.offset);
      const uint64_t hi = std::min<uint64_t>(offset + n, w.offset + w.data.size());
      if (lo < hi) std::memcpy(out + (lo - offset), w.data.data() + (lo - w.offset), hi - lo);
    }
    return Status::OK();
  }

  Status WriteAt(uint64_t offset, const void* buf, size_t n) override {
    KVTIER_RETURN_IF_ERROR(st_->Tick(path_));
    std::lock_guard<std::mutex> l(st_->mu);
    if (st_->crashed) return Dead(path_);
    if (node_->base_read_only) return Status::IOError(path_ + ": opened read-only");
    const auto* p = static_cast<const uint8_t*>(buf);
    node_->pending.push_back(SimNode::Write{offset, std::vector<uint8_t>(p, p + n)});
    return Status::OK();
  }

  Status Sync() override {
    KVTIER_RETURN_IF_ERROR(st_->Tick(path_));
    std::lock_guard<std::mutex> l(st_->mu);
    if (st_->crashed) return Dead(path_);
    for (const SimNode::Write& w : node_->pending)
      KVTIER_RETURN_IF_ERROR(node_->base->WriteAt(w.offset, w.data.data(), w.data.size()));
    node_->pending.clear();
    return Status::OK();
  }

  Status Allocate(uint64_t offset, uint64_t len) override {
    KVTIER_RETURN_IF_ERROR(st_->Tick(path_));
    std::lock_guard<std::mutex> l(st_->mu);
    if (st_->crashed) return Dead(path_);
    return node_->base->Allocate(offset, len);
  }

  Status PunchHole(uint64_t offset, uint64_t len) override {
    KVTIER_RETURN_IF_ERROR(st_->Tick(path_));
    std::lock_guard<std::mutex> l(st_->mu);
    if (st_->crashed) return Dead(path_);
    // Zeros that may or may not reach the disk, like any unsynced write.
    node_->pending.push_back(SimNode::Write{offset, std::vector<uint8_t>(len, 0)});
    return Status::OK();
  }

  Result<uint64_t> Size() override {
    std::lock_guard<std::mutex> l(st_->mu);
    if (st_->crashed) return Dead(path_);
    auto base_size = node_->base->Size();
    if (!base_size.ok()) return base_size.status();
    return std::max<uint64_t>(*base_size, node_->PendingEnd());
  }

  Status Truncate(uint64_t size) override {
    KVTIER_RETURN_IF_ERROR(st_->Tick(path_));
    std::lock_guard<std::mutex> l(st_->mu);
    if (st_->crashed) return Dead(path_);
    // Pending bytes past the new end vanish with it.
    for (SimNode::Write& w : node_->pending)
      if (w.offset + w.data.size() > size) w.data.resize(w.offset >= size ? 0 : size - w.offset);
    std::erase_if(node_->pending, [](const SimNode::Write& w) { return w.data.empty(); });
    return node_->base->Truncate(size);
  }

 private:
  std::shared_ptr<State> st_;
  std::shared_ptr<SimNode> node_;
  std::string path_;
};

}  // namespace

SimPowerLossFileSystem::SimPowerLossFileSystem(std::shared_ptr<FileSystem> base, uint64_t seed)
    : state_(std::make_shared<State>()) {
  state_->base = std::move(base);
  state_->rng.seed(seed);
}

SimPowerLossFileSystem::~SimPowerLossFileSystem() = default;

void SimPowerLossFileSystem::SetCrashAt(uint64_t n, std::function<void()> at_crash) {
  std::lock_guard<std::mutex> l(state_->mu);
  state_->crash_at = n;
  state_->at_crash = std::move(at_crash);
}

void SimPowerLossFileSystem::SetWatchedPath(std::string substring) {
  std::lock_guard<std::mutex> l(state_->mu);
  state_->watched = std::move(substring);
}

uint64_t SimPowerLossFileSystem::MutatingOps() const {
  std::lock_guard<std::mutex> l(state_->mu);
  return state_->ops;
}

PowerLossReport SimPowerLossFileSystem::Crash() {
  State& s = *state_;
  std::lock_guard<std::mutex> l(s.mu);
  PowerLossReport rep;
  if (s.crashed) return rep;
  s.crashed = true;
  rep.mode = static_cast<PowerLossReport::Mode>(s.rng() % 4);
  auto coin = [&] { return (s.rng() & 1) != 0; };
  // 1. File data.
  for (auto& [path, node] : s.nodes) {
    const bool watched = !s.watched.empty() && path.find(s.watched) != std::string::npos;
    for (const SimNode::Write& w : node->pending) {
      ++rep.writes_pending;
      if (watched) ++rep.watched_pending;
      const uint64_t kept_before = rep.writes_kept;
      bool keep_all = rep.mode == PowerLossReport::Mode::kKeepAll ||
                      (rep.mode == PowerLossReport::Mode::kKeepSubset && coin());
      if (keep_all) {
        node->base->WriteAt(w.offset, w.data.data(), w.data.size()).IgnoreError();
        ++rep.writes_kept;
        continue;
      }
      if (rep.mode != PowerLossReport::Mode::kTear) {
        if (watched) ++rep.watched_lost;
        continue;
      }
      // Sectors are aligned to the file, not to the write. A write of two
      // sectors or more is torn for sure (some kept, some not): coin flips
      // alone keep all or none of a short one half the time, and a suite's
      // tear-mode crashes caught no pending write of that kind often enough.
      std::vector<std::pair<uint64_t, uint64_t>> sectors;  // [lo, hi)
      for (uint64_t lo = w.offset; lo < w.offset + w.data.size();) {
        uint64_t hi = std::min<uint64_t>((lo / kSector + 1) * kSector, w.offset + w.data.size());
        sectors.emplace_back(lo, hi);
        lo = hi;
      }
      std::vector<bool> keep(sectors.size());
      for (size_t k = 0; k < sectors.size(); ++k) keep[k] = coin();
      if (sectors.size() >= 2 && std::find(keep.begin(), keep.end(), !keep[0]) == keep.end()) {
        const size_t flip = s.rng() % sectors.size();
        keep[flip] = !keep[flip];
      }
      uint64_t kept = 0;
      for (size_t k = 0; k < sectors.size(); ++k) {
        if (!keep[k]) continue;
        const auto [lo, hi] = sectors[k];
        node->base->WriteAt(lo, w.data.data() + (lo - w.offset), hi - lo).IgnoreError();
        kept += hi - lo;
      }
      if (kept == w.data.size()) ++rep.writes_kept;
      else if (kept > 0) ++rep.writes_torn;
      if (watched && rep.writes_kept == kept_before) ++rep.watched_lost;
    }
    node->pending.clear();
  }
  // 2. Names: a prefix survives, the rest is undone newest first.
  rep.names_pending = s.names.size();
  const size_t survive = s.names.empty() ? 0 : s.rng() % (s.names.size() + 1);
  for (size_t i = s.names.size(); i-- > survive;) {
    State::NameOp& op = s.names[i];
    ++rep.names_undone;
    switch (op.kind) {
      case State::NameOp::Kind::kCreate:
        s.base->Remove(op.path).IgnoreError();
        break;
      case State::NameOp::Kind::kRename:
        s.base->Rename(op.to, op.path).IgnoreError();
        if (op.had_old) s.WriteBase(op.to, op.old_bytes).IgnoreError();
        break;
      case State::NameOp::Kind::kRemove:
        if (op.had_old) s.WriteBase(op.path, op.old_bytes).IgnoreError();
        break;
    }
  }
  s.names.clear();
  s.nodes.clear();
  return rep;
}

Result<std::unique_ptr<File>> SimPowerLossFileSystem::Open(const std::string& path, OpenFlags flags) {
  State& s = *state_;
  if (flags.create) KVTIER_RETURN_IF_ERROR(s.Tick(path));
  std::lock_guard<std::mutex> l(s.mu);
  if (s.crashed) return Dead(path);
  auto existed = s.base->Exists(path);
  if (!existed.ok()) return existed.status();
  flags.direct = false;  // the overlay serves unaligned pieces
  auto file = s.base->Open(path, flags);
  if (!file.ok()) return file.status();
  if (flags.create && !*existed) s.names.push_back(State::NameOp{State::NameOp::Kind::kCreate, path, "", false, {}});
  std::shared_ptr<SimNode>& node = s.nodes[path];
  if (node == nullptr) {
    node = std::make_shared<SimNode>();
    node->base = std::move(file).value();
    node->base_read_only = flags.read_only;
  } else if (node->base_read_only && !flags.read_only) {
    node->base = std::move(file).value();  // same inode, now writable
    node->base_read_only = false;
  }
  return std::unique_ptr<File>(std::make_unique<SimFile>(state_, node, path));
}

Status SimPowerLossFileSystem::CreateDir(const std::string& path, unsigned mode) {
  KVTIER_RETURN_IF_ERROR(state_->Tick(path));
  std::lock_guard<std::mutex> l(state_->mu);
  if (state_->crashed) return Dead(path);
  return state_->base->CreateDir(path, mode);
}

Status SimPowerLossFileSystem::SyncDir(const std::string& path) {
  State& s = *state_;
  KVTIER_RETURN_IF_ERROR(s.Tick(path));
  std::lock_guard<std::mutex> l(s.mu);
  if (s.crashed) return Dead(path);
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::erase_if(s.names, [&](const State::NameOp& op) {
    return ParentOf(op.path) == dir || (!op.to.empty() && ParentOf(op.to) == dir);
  });
  return Status::OK();
}

Status SimPowerLossFileSystem::Rename(const std::string& from, const std::string& to) {
  State& s = *state_;
  KVTIER_RETURN_IF_ERROR(s.Tick(from));
  std::lock_guard<std::mutex> l(s.mu);
  if (s.crashed) return Dead(from);
  State::NameOp op{State::NameOp::Kind::kRename, from, to, false, {}};
  auto had = s.base->Exists(to);
  if (!had.ok()) return had.status();
  if (*had) {
    auto bytes = s.ReadBase(to);
    if (!bytes.ok()) return bytes.status();
    op.had_old = true;
    op.old_bytes = std::move(bytes).value();
  }
  KVTIER_RETURN_IF_ERROR(s.base->Rename(from, to));
  s.names.push_back(std::move(op));
  auto it = s.nodes.find(from);
  std::shared_ptr<SimNode> node;
  if (it != s.nodes.end()) {
    node = it->second;
    s.nodes.erase(it);
  }
  s.nodes.erase(to);
  if (node != nullptr) s.nodes[to] = node;
  return Status::OK();
}

Status SimPowerLossFileSystem::Remove(const std::string& path) {
  State& s = *state_;
  KVTIER_RETURN_IF_ERROR(s.Tick(path));
  std::lock_guard<std::mutex> l(s.mu);
  if (s.crashed) return Dead(path);
  State::NameOp op{State::NameOp::Kind::kRemove, path, "", false, {}};
  auto had = s.base->Exists(path);
  if (!had.ok()) return had.status();
  if (*had) {
    auto bytes = s.ReadBase(path);
    if (bytes.ok()) {
      op.had_old = true;
      op.old_bytes = std::move(bytes).value();
    }
  }
  KVTIER_RETURN_IF_ERROR(s.base->Remove(path));
  s.nodes.erase(path);
  if (op.had_old) s.names.push_back(std::move(op));
  return Status::OK();
}

Result<bool> SimPowerLossFileSystem::Exists(const std::string& path) {
  std::lock_guard<std::mutex> l(state_->mu);
  if (state_->crashed) return Dead(path);
  return state_->base->Exists(path);
}

Result<std::vector<std::string>> SimPowerLossFileSystem::ListDir(const std::string& path) {
  std::lock_guard<std::mutex> l(state_->mu);
  if (state_->crashed) return Dead(path);
  return state_->base->ListDir(path);
}

Result<std::unique_ptr<FileLock>> SimPowerLossFileSystem::Lock(const std::string& path, bool exclusive, unsigned mode) {
  return state_->base->Lock(path, exclusive, mode);
}

Result<std::optional<long>> SimPowerLossFileSystem::LockHolder(const std::string& path) {
  return state_->base->LockHolder(path);
}

Result<uint64_t> SimPowerLossFileSystem::FreeSpace(const std::string& path) {
  return state_->base->FreeSpace(path);
}

Result<std::unique_ptr<IoQueue>> SimPowerLossFileSystem::NewIoQueue(unsigned depth) {
  return NewPosixIoQueue(depth);
}

}  // namespace kvtier
