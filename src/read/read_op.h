// ReadOp: one get on its way from a caller to a reader thread (or the shared
// tier) and back. Whoever completes it first wins: the read, or its
// deadline; the loser does nothing, so `done` runs exactly once and a
// caller's buffers are never touched after a deadline miss.
#ifndef KVTIER_SRC_READ_READ_OP_H_
#define KVTIER_SRC_READ_READ_OP_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/store.h"

namespace kvtier {

struct ReadOp {
  NamespaceId ns = 0;
  std::string key;
  std::vector<MutableFragment> out;
  size_t out_total = 0;
  Clock::time_point deadline;
  // A batch's deadline (Store::GetBatch): not started after it, but once
  // started it completes, so it may still read straight into `out`.
  Clock::time_point start_by = kNoDeadline;
  Clock::time_point queued{};  // when it was handed to the read threads (Stats::disk_read_queue_ns)
  GetCallback done;
  std::atomic<int> state{0};  // 0 pending, 1 completing, 2 expired, 3 started (start_by: no longer expires)

  // Claims the op for its result; false when the deadline already won.
  bool Claim() {
    int expected = 0;
    if (state.compare_exchange_strong(expected, 1)) return true;
    expected = 3;
    return state.compare_exchange_strong(expected, 1);
  }
  // Claims the op for its deadline; false when a result already won, or a
  // start_by op has started.
  bool Expire() {
    int expected = 0;
    return state.compare_exchange_strong(expected, 2);
  }
  // A start_by op's read begins: from now on only its result completes it.
  // False when its deadline already won.
  bool Start() {
    int expected = 0;
    return state.compare_exchange_strong(expected, 3);
  }
  bool pending() const { return state.load() == 0; }
};

// When a read that reached the device was queued, taken by its thread and
// submitted (its index lookup done), for Stats::disk_read_*_ns.
struct ReadTimes {
  Clock::time_point queued, taken, submitted;
};

// Runs op->done(r) unless the deadline won.
inline void CompleteRead(const std::shared_ptr<ReadOp>& op, Result<size_t> r) {
  if (op->Claim()) op->done(std::move(r));
}

}  // namespace kvtier

#endif  // KVTIER_SRC_READ_READ_OP_H_
