#include "client/lent_tier.h"

#include <sys/mman.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <thread>

#include "client/service_store.h"
#include "util/copy_checksum.h"
#include "util/fragment_walk.h"

namespace kvtier::client {

struct LentTier::Mapping {
  Mapping(const uint8_t* b, size_t n, uint64_t c) : base(b), len(n), connection(c) {}
  ~Mapping() { munmap(const_cast<uint8_t*>(base), len); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const uint8_t* const base;
  const size_t len;
  const uint64_t connection;
};

std::shared_ptr<const LentTier::Mapping> LentTier::Current() {
  MutexLock l(&mu_);
  if (map_ != nullptr && store_->TierConnectionAlive(map_->connection)) return map_;
  map_.reset();
  const auto now = std::chrono::steady_clock::now();
  if (now < next_try_) return nullptr;
  next_try_ = now + std::chrono::seconds(1);
  auto t = store_->MapTier();
  if (!t.ok() || t->map.file_bytes == 0) return nullptr;
  void* p = mmap(nullptr, t->map.file_bytes, PROT_READ, MAP_SHARED, t->fd.get(), 0);
  if (p == MAP_FAILED) return nullptr;
  map_ = std::make_shared<const Mapping>(static_cast<const uint8_t*>(p), t->map.file_bytes, t->connection);
  return map_;
}

namespace {

// One pinned block to copy: its pieces in the mapping, where it goes, and
// what it must hash to.
struct Copy {
  size_t item;
  std::vector<Fragment> pieces;
  uint64_t size, checksum;
  bool ok = false;
};

void CopyVerified(Copy& c, std::span<const MutableFragment> out) {
  Xxh3Copy sum(c.size);
  ForEachOverlap(std::span<const Fragment>(c.pieces), out, SIZE_MAX,
                 [&sum](uint8_t* dst, const uint8_t* src, size_t n) { sum.Copy(dst, src, n); });
  c.ok = sum.Digest() == c.checksum;
}

enum class Plan { kFromService, kTooSmall, kCopy };

// What becomes of item `item`'s pinned block `b` in the tier mapped at
// [base, base + len): a copy into `out` (set in *c), BufferTooSmall (set in
// *small), or a read from the service.
Plan PlanFor(size_t item, const wire::TierPinned& b, const uint8_t* base, size_t len,
             std::span<const MutableFragment> out, Copy* c, Status* small) {
  if (!b.pinned) return Plan::kFromService;
  *c = Copy{item, PinnedPieces<Fragment>(b, base, len), b.size, b.checksum};
  if (c->pieces.empty()) return Plan::kFromService;
  uint64_t cap = 0;
  for (const MutableFragment& f : out) cap += f.size;
  if (cap >= b.size) return Plan::kCopy;
  *small = Status::BufferTooSmall("block has " + std::to_string(b.size) + " bytes, buffer " + std::to_string(cap));
  return Plan::kTooSmall;
}

}  // namespace

std::vector<size_t> LentTier::Read(NamespaceId ns, std::span<const GetItem> items, std::span<Result<size_t>> results,
                                   WorkerPool* copiers) {
  std::vector<size_t> rest;
  std::shared_ptr<const Mapping> m = Current();
  for (size_t at = 0; at < items.size(); at += wire::kMaxBatchGets) {
    const size_t n = std::min<size_t>(items.size() - at, wire::kMaxBatchGets);
    std::vector<std::string_view> keys;
    for (size_t i = at; i < at + n; ++i) keys.push_back(items[i].key);
    Result<wire::TierLease> lease =
        m != nullptr ? store_->PinTier(m->connection, ns, keys) : Status::NotSupported("the tier is not lent");
    if (!lease.ok()) {  // not lent, or its connection is gone: the rest from the service
      for (size_t i = at; i < items.size(); ++i) rest.push_back(i);
      break;
    }
    std::vector<Copy> copies;
    for (size_t j = 0; j < n; ++j) {
      const size_t i = at + j;
      Copy c{};
      Status small;
      switch (PlanFor(i, lease->blocks[j], m->base, m->len, items[i].out, &c, &small)) {
        case Plan::kFromService: rest.push_back(i); break;
        case Plan::kTooSmall: results[i] = std::move(small); break;
        case Plan::kCopy: copies.push_back(std::move(c)); break;
      }
    }
    auto one = [&](size_t k) { CopyVerified(copies[k], items[copies[k].item].out); };
    if (copiers != nullptr && copies.size() > 1) copiers->ForEach(copies.size(), one);
    else for (size_t k = 0; k < copies.size(); ++k) one(k);
    if (lease->lease != 0) store_->UnpinTier(m->connection, lease->lease);
    for (const Copy& c : copies) {
      if (c.ok) results[c.item] = static_cast<size_t>(c.size);
      else rest.push_back(c.item);  // the service's own read decides (and drops a bad copy)
    }
  }
  std::sort(rest.begin(), rest.end());
  return rest;
}

namespace {

// One async read's pinned block, from the pin's reply to its end: copied and
// released, then `done` or the read from the service.
struct AsyncCopy {
  ServiceStore* store;
  uint64_t connection, lease;
  Clock::time_point deadline;
  Copy copy;
  std::vector<MutableFragment> dst;
  std::shared_ptr<GetCallback> done;
  LentTier::NotServed not_served;
  std::shared_ptr<std::atomic<int64_t>> reads;

  void Finish(Result<size_t> r) const {
    if (*done) (*done)(std::move(r));
    reads->fetch_sub(1);
  }
  // `ch`: the channel's own thread runs this, on that channel.
  void Run(Channel* ch) {
    if (deadline != kNoDeadline && Clock::now() >= deadline) {
      Release(ch);
      return Finish(Status::TimedOut("get deadline passed before its copy began"));
    }
    CopyVerified(copy, dst);
    Release(ch);
    if (copy.ok) return Finish(static_cast<size_t>(copy.size));
    NotServed(ch);  // a bad copy, which the service's read drops
  }
  void Release(Channel* ch) const {
    if (lease == 0) return;
    if (ch != nullptr) store->UnpinTierOn(*ch, lease);
    else store->UnpinTier(connection, lease);
  }
  void NotServed(Channel* ch) const {
    not_served(ch, dst, std::move(*done));
    reads->fetch_sub(1);
  }
};

}  // namespace

bool LentTier::ReadAsync(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                         Clock::time_point deadline, WorkerPool* copiers, GetCallback& done, NotServed not_served) {
  if (deadline != kNoDeadline && Clock::now() >= deadline) return false;  // the service's path says TimedOut
  std::shared_ptr<const Mapping> m = Current();
  if (m == nullptr) return false;
  auto cb = std::make_shared<GetCallback>(std::move(done));  // handed back when nothing is sent
  // `out`'s fragments are the caller's only until this returns.
  ServiceStore::PinDone pinned = [store = store_, m, dst = std::vector<MutableFragment>(out.begin(), out.end()),
                                  deadline, copiers, cb, not_served = std::move(not_served),
                                  reads = reads_](Result<wire::TierLease> lease, Channel& ch) mutable {
    auto job = std::make_shared<AsyncCopy>(AsyncCopy{store, m->connection, 0, deadline, Copy{}, std::move(dst), cb,
                                                     std::move(not_served), reads});
    if (!lease.ok()) return job->Finish(lease.status());
    job->lease = lease->lease;
    Status small;
    const Plan plan = PlanFor(0, lease->blocks[0], m->base, m->len, job->dst, &job->copy, &small);
    if (plan != Plan::kCopy) {
      job->Release(&ch);
      if (plan == Plan::kTooSmall) return job->Finish(std::move(small));
      return job->NotServed(&ch);
    }
    // Off the channel's thread, which has other replies to deliver; the
    // mapping stays while the copy runs.
    if (copiers != nullptr && copiers->helpers() > 0) return copiers->Post([job, m] { job->Run(nullptr); });
    job->Run(&ch);
  };
  reads_->fetch_add(1);
  if (store_->PinTierAsync(m->connection, ns, key, deadline, pinned)) return true;
  reads_->fetch_sub(1);
  done = std::move(*cb);
  return false;
}

void LentTier::AwaitReads(Clock::time_point until) const {
  while (reads_->load() > 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace kvtier::client
