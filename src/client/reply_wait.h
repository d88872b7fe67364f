// ReplyWait: one blocking call's wait for its reply, set once by the
// channel's reader thread (or its timer, or inline on a send failure).
//
// The waiter spins for a bounded time before it sleeps: a service reply
// takes one socket round trip, and sleeping on a futex then being woken
// costs the caller a scheduler wake-up on top of it. While it spins it may
// run `poll` (the channel reads its socket there, so the reply needs no
// other thread). Past the spin, given the socket, it sleeps in poll(2) on the
// socket and on an eventfd of its own that Set writes: the reply then costs
// one wake-up, of this thread, whether it reads the reply itself or the
// reader thread does and sets it (without the socket: two, the reader
// thread's and then this one's). Else, and on hosts where callers do not
// spin, it waits on a condition variable.
//
// Thread safety: Set from any thread, once; Wait from one thread. Shared by
// pointer, so the setter may still hold it after the waiter has returned.
#ifndef KVTIER_SRC_CLIENT_REPLY_WAIT_H_
#define KVTIER_SRC_CLIENT_REPLY_WAIT_H_

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

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
      const uint64_t one = 1;
      // Under the lock: the waiter closes the eventfd under it too.
      if (wake_fd_ >= 0 && ::write(wake_fd_, &one, sizeof one) < 0) {}  // EAGAIN: already woken
    }
    cv_.notify_one();
  }

  // Spins up to `spin_us` microseconds, running `poll` (when given) on
  // each turn, then sleeps until Set: on `sock` (when >= 0, running `poll`
  // each time it is readable) and its own eventfd, else on a condition
  // variable. `sock` must stay open until Wait returns.
  T Wait(uint32_t spin_us, const std::function<void()>& poll = nullptr, int sock = -1) {
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
    // Only where callers spin (hosts with cores to spare): on a 2-core VM the
    // reader thread and the caller both waking for every reply cost a
    // lookup 10 us more than the hand-over did.
    if (spin_us > 0 && sock >= 0 && poll) SleepOnSocket(sock, poll);
    MutexLock l(&mu_);
    while (!value_.has_value()) l.Wait(cv_);
    return std::move(*value_);
  }

 private:
  // One eventfd per waiting thread, kept for its next waits.
  static int ThreadWakeFd() {
    struct Fd {
      int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      ~Fd() {
        if (fd >= 0) ::close(fd);
      }
    };
    thread_local Fd f;
    return f.fd;
  }

  void SleepOnSocket(int sock, const std::function<void()>& poll) {
    const int efd = ThreadWakeFd();
    if (efd < 0) return;  // the condition variable, then
    {
      MutexLock l(&mu_);
      if (value_.has_value()) return;
      wake_fd_ = efd;
    }
    while (!done_.load(std::memory_order_acquire)) {
      pollfd p[2] = {{sock, POLLIN, 0}, {efd, POLLIN, 0}};
      if (::poll(p, 2, -1) <= 0) continue;  // EINTR
      // Readable, hung up or failed: reading it completes the reply or
      // fails the connection, which fails every waiter.
      if (p[0].revents != 0 && !done_.load(std::memory_order_acquire)) poll();
    }
    {
      MutexLock l(&mu_);
      wake_fd_ = -1;  // no Set writes it after this
    }
    uint64_t n;
    if (::read(efd, &n, sizeof n) < 0) {}  // EAGAIN: Set came before the sleep; leave it empty for the next wait
  }

  Mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};  // value_ is set: what the spin reads
  std::optional<T> value_ GUARDED_BY(mu_);
  int wake_fd_ GUARDED_BY(mu_) = -1;  // the eventfd a waiter sleeping on the socket polls
};

}  // namespace kvtier::client

#endif  // KVTIER_SRC_CLIENT_REPLY_WAIT_H_
