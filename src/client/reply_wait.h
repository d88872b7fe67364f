// ReplyWait: one blocking call's wait for its reply, set once by the
// channel's reader thread (or its timer, or inline on a send failure).
//
// The waiter spins for a bounded time before it sleeps: a service reply
// takes one socket round trip, and sleeping on a futex then being woken
// costs the caller a scheduler wake-up on top of it. While it spins it may
// run `poll` (the channel reads its socket there, so the reply needs no
// other thread). Past the spin it waits on a condition variable like any
// other.
//
// Thread safety: Set from any thread, once; Wait from one thread. Shared by
// pointer, so the setter may still hold it after the waiter has returned.
#ifndef KVTIER_SRC_CLIENT_REPLY_WAIT_H_
#define KVTIER_SRC_CLIENT_REPLY_WAIT_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <optional>

#include "util/thread_annotations.h"

namespace kvtier::client {

template <typename T>
class ReplyWait {
 public:
  static std::shared_ptr<ReplyWait> Make() { return std::make_shared<ReplyWait>(); }

  void Set(T value) {
    {
      MutexLock l(&mu_);
      value_.emplace(std::move(value));
      done_.store(true, std::memory_order_release);
    }
    cv_.notify_one();
  }

  // Spins up to `spin_us` microseconds, running `poll` (when given) on
  // each turn, then sleeps until Set.
  T Wait(uint32_t spin_us, const std::function<void()>& poll = nullptr) {
    if (spin_us > 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
      while (!done_.load(std::memory_order_acquire)) {
        if (std::chrono::steady_clock::now() >= until) break;
        if (poll) {
          poll();
          continue;
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
    }
    MutexLock l(&mu_);
    while (!value_.has_value()) l.Wait(cv_);
    return std::move(*value_);
  }

 private:
  Mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};  // value_ is set: what the spin reads
  std::optional<T> value_ GUARDED_BY(mu_);
};

}  // namespace kvtier::client

#endif  // KVTIER_SRC_CLIENT_REPLY_WAIT_H_
