// LentTier: a client's read-only mapping of the service's RAM tier, for
// gets into memory not registered with the service. Without it such a get
// is two copies (the service into staging, the client out of it); from the
// lent tier it is one: the service pins the blocks (pin_tier, one round
// trip) and the client copies them out itself, each verified against the
// checksum the service gave, as every RAM hit is.
//
// What it cannot read from the tier (not held there, not lent: no RAM tier,
// anonymous memory, tenancy; or a copy that fails its checksum) it leaves
// to the caller, who reads it from the service the usual way; that read
// verifies the tier's copy again and drops it if bad.
//
// Thread safety: any thread. A mapping stays until the last copy from it
// ends; a mapping of a connection that is gone is dropped and the tier
// asked for again (at most once a second).
#ifndef KVTIER_SRC_CLIENT_LENT_TIER_H_
#define KVTIER_SRC_CLIENT_LENT_TIER_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/store.h"
#include "util/thread_annotations.h"
#include "wire/messages.h"
#include "util/worker_pool.h"

namespace kvtier::client {

class Channel;
class ServiceStore;

// A block pinned in a lent tier that is mapped at [base, base + len), as
// Piece{base + offset, bytes} per piece; empty where a piece lies outside
// the mapping (the reply is checked against the file's size, and the
// mapping is that file's: a guard, not an expected case).
template <typename Piece, typename Byte>
std::vector<Piece> PinnedPieces(const wire::TierPinned& b, Byte* base, size_t len) {
  std::vector<Piece> out;
  for (const auto& [off, n] : b.pieces) {
    if (off > len || n > len - off) return {};
    out.push_back(Piece{base + off, n});
  }
  return out;
}

class LentTier {
 public:
  explicit LentTier(ServiceStore* store) : store_(store) {}

  // Reads the items the lent tier holds into their memory, on the caller's
  // thread and `copiers`' (when there is more than one); sets results[i]
  // (the size, or BufferTooSmall) for those, and returns the indices of the
  // rest, ascending, for the caller to get from the service.
  std::vector<size_t> Read(NamespaceId ns, std::span<const GetItem> items, std::span<Result<size_t>> results,
                           WorkerPool* copiers);

  // Reads one block into `out` without waiting: pins it, and on the pin's
  // reply copies it on a thread of `copiers` (on the reply's thread, the
  // channel's, when it has no helpers), then releases the pin. `done` gets
  // the size, BufferTooSmall, the pin's error, or TimedOut, with `out`
  // untouched, when `deadline` passed before the copy began. What the tier
  // does not serve (not held there, a copy that fails its check) goes to
  // `not_served` instead, with `out` and `done`, and the channel the pin
  // went on when it runs on that channel's thread (else null: read it
  // from the live one). False, with nothing sent and `done` not taken, when
  // the tier is not lent now.
  using NotServed = std::function<void(Channel*, std::span<const MutableFragment>, GetCallback)>;
  bool ReadAsync(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                 Clock::time_point deadline, WorkerPool* copiers, GetCallback& done, NotServed not_served);
  // Waits until every ReadAsync has handed its get on, or `until`.
  void AwaitReads(Clock::time_point until) const;

 private:
  struct Mapping;
  // The live connection's mapping, mapping the tier when there is none;
  // null when the service does not lend it.
  std::shared_ptr<const Mapping> Current();

  ServiceStore* const store_;
  std::shared_ptr<std::atomic<int64_t>> reads_ = std::make_shared<std::atomic<int64_t>>(0);  // ReadAsync's in flight
  Mutex mu_;
  std::shared_ptr<const Mapping> map_ GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point next_try_ GUARDED_BY(mu_){};
};

}  // namespace kvtier::client

#endif  // KVTIER_SRC_CLIENT_LENT_TIER_H_
