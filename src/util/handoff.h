// Handoff<T>: the result of a blocking call, handed from the call's
// completion callback to the caller waiting for it.
//
// Why not std::promise: its set_value runs a once-flag whose slow path makes
// a futex system call every time, even when nobody waits. A blocking get
// read on the caller's own thread completes before the caller waits, so
// there a Handoff costs no system call; a result set from another thread
// wakes the waiter as a promise would.
//
// Thread safety: Set exactly once, from any thread; Wait from one thread.
// The object may be destroyed as soon as Wait has returned (Set touches
// nothing after it lets go of the lock).
#ifndef KVTIER_SRC_UTIL_HANDOFF_H_
#define KVTIER_SRC_UTIL_HANDOFF_H_

#include <condition_variable>
#include <optional>
#include <utility>

#include "util/thread_annotations.h"

namespace kvtier {

template <typename T>
class Handoff {
 public:
  void Set(T value) {
    MutexLock l(&mu_);
    value_.emplace(std::move(value));
    cv_.notify_one();  // under the lock: the waiter cannot return, and free this, before it is done
  }
  T Wait() {
    MutexLock l(&mu_);
    while (!value_.has_value()) l.Wait(cv_);
    return std::move(*value_);
  }

 private:
  Mutex mu_;
  std::condition_variable cv_;
  std::optional<T> value_ GUARDED_BY(mu_);
};

}  // namespace kvtier

#endif  // KVTIER_SRC_UTIL_HANDOFF_H_
