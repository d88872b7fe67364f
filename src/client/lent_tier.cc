#include "client/lent_tier.h"

#include <sys/mman.h>

#include <algorithm>
#include <string>
#include <string_view>

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

void Run(Copy& c, std::span<const MutableFragment> out) {
  Xxh3Copy sum(c.size);
  ForEachOverlap(std::span<const Fragment>(c.pieces), out, SIZE_MAX,
                 [&sum](uint8_t* dst, const uint8_t* src, size_t n) { sum.Copy(dst, src, n); });
  c.ok = sum.Digest() == c.checksum;
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
      const wire::TierPinned& b = lease->blocks[j];
      const size_t i = at + j;
      uint64_t cap = 0;
      for (const MutableFragment& f : items[i].out) cap += f.size;
      Copy c{i, PinnedPieces<Fragment>(b, m->base, m->len), b.size, b.checksum};
      if (!b.pinned || c.pieces.empty()) {
        rest.push_back(i);
      } else if (cap < b.size) {
        results[i] = Status::BufferTooSmall("block has " + std::to_string(b.size) + " bytes, buffer " +
                                            std::to_string(cap));
      } else {
        copies.push_back(std::move(c));
      }
    }
    auto one = [&](size_t k) { Run(copies[k], items[copies[k].item].out); };
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

}  // namespace kvtier::client
