#include "util/worker_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>

namespace kvtier {

struct WorkerPool::Call {
  Call(size_t count, const std::function<void(size_t)>* f) : n(count), fn(f) {}
  explicit Call(std::function<void()> posted)
      : n(1), owned([p = std::move(posted)](size_t) { p(); }), fn(&owned) {}
  const size_t n;
  const std::function<void(size_t)> owned;  // a posted call's
  const std::function<void(size_t)>* fn;  // the caller's (alive until done == n), or &owned
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  // ForEachInOrder's: item i has returned (waited on by the caller).
  std::unique_ptr<std::atomic<uint32_t>[]> item_done;
  std::mutex m;
  std::condition_variable all_done;
};

WorkerPool::WorkerPool(unsigned helpers, const std::string& name, uint32_t spin_us)
    : spin_ns_(int64_t{spin_us} * 1000) {
  for (unsigned i = 0; i < helpers; ++i) {
    threads_.emplace_back([this] { HelperLoop(); });
    pthread_setname_np(threads_.back().native_handle(), name.substr(0, 15).c_str());
  }
}

WorkerPool::~WorkerPool() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

// Claims and runs items until none are left; the one that finishes the last
// item wakes the caller.
void WorkerPool::Work(Call& c) {
  for (size_t i = c.next.fetch_add(1); i < c.n; i = c.next.fetch_add(1)) RunItem(c, i);
}

void WorkerPool::RunItem(Call& c, size_t i) {
  (*c.fn)(i);
  if (c.item_done != nullptr) {
    c.item_done[i].store(1, std::memory_order_release);
    c.item_done[i].notify_one();
  }
  if (c.done.fetch_add(1) + 1 == c.n) {
    std::lock_guard<std::mutex> g(c.m);
    c.all_done.notify_all();
  }
}

namespace {
int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// Yields the core: a thread woken on it (a service's reader, a client)
// runs at once instead of waiting out a poller's time slice.
inline void Pause() { sched_yield(); }
}  // namespace

void WorkerPool::SpinForCall(uint64_t seen) const {
  const int64_t until = NowNs() + spin_ns_;
  for (unsigned turn = 0; posted_.load(std::memory_order_acquire) == seen; ++turn) {
    Pause();
    if (turn % 8 == 7 && NowNs() >= until) return;
  }
}

bool WorkerPool::SpinForDone(const Call& c) const {
  const int64_t until = NowNs() + spin_ns_;
  for (unsigned turn = 0; c.done.load(std::memory_order_acquire) != c.n; ++turn) {
    Pause();
    if (turn % 8 == 7 && NowNs() >= until) return false;
  }
  return true;
}

void WorkerPool::HelperLoop() {
  MutexLock l(&mu_);
  for (;;) {
    if (spin_ns_ > 0 && !stop_ && calls_.empty()) {
      const uint64_t seen = posted_.load(std::memory_order_acquire);
      l.Unlock();
      SpinForCall(seen);
      l.Lock();
    }
    while (!stop_ && calls_.empty()) l.Wait(wake_);
    if (calls_.empty()) return;  // stopping, and every posted call has run
    std::shared_ptr<Call> c = calls_.front();
    if (c->next.load() >= c->n) {  // every item handed out: the next call
      calls_.pop_front();
      continue;
    }
    l.Unlock();
    Work(*c);
    l.Lock();
  }
}

void WorkerPool::Post(std::function<void()> fn) {
  if (threads_.empty()) return fn();
  {
    MutexLock l(&mu_);
    calls_.push_back(std::make_shared<Call>(std::move(fn)));
  }
  posted_.fetch_add(1, std::memory_order_release);
  wake_.notify_one();
}

void WorkerPool::Offer(const std::shared_ptr<Call>& c) {
  {
    MutexLock l(&mu_);
    calls_.push_back(c);
  }
  posted_.fetch_add(1, std::memory_order_release);
  // As many helpers as there are items beyond the caller's first: waking
  // every helper for a call of a few items sets the idle ones fighting over
  // mu_ while the others copy.
  const size_t wake = std::min<size_t>(c->n - 1, threads_.size());
  if (wake == threads_.size()) {
    wake_.notify_all();
  } else {
    for (size_t i = 0; i < wake; ++i) wake_.notify_one();
  }
}

void WorkerPool::Retire(const std::shared_ptr<Call>& c) {
  if (spin_ns_ == 0 || !SpinForDone(*c)) {
    std::unique_lock<std::mutex> g(c->m);
    c->all_done.wait(g, [&] { return c->done.load() == c->n; });
  }
  MutexLock l(&mu_);
  for (auto it = calls_.begin(); it != calls_.end(); ++it)
    if (*it == c) {
      calls_.erase(it);
      break;
    }
}

void WorkerPool::ForEach(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (threads_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  auto c = std::make_shared<Call>(n, &fn);
  Offer(c);
  Work(*c);
  Retire(c);
}

void WorkerPool::ForEachInOrder(size_t n, const std::function<void(size_t)>& fn,
                                const std::function<void(size_t)>& then) {
  if (threads_.empty() || n <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i), then(i);
    return;
  }
  auto c = std::make_shared<Call>(n, &fn);
  c->item_done = std::make_unique<std::atomic<uint32_t>[]>(n);
  Offer(c);
  for (size_t in_order = 0; in_order < n;) {
    if (c->item_done[in_order].load(std::memory_order_acquire) != 0) {
      then(in_order++);
      continue;
    }
    const size_t i = c->next.fetch_add(1);
    if (i < n) {
      RunItem(*c, i);
    } else {
      c->item_done[in_order].wait(0, std::memory_order_acquire);  // a helper has it
    }
  }
  Retire(c);
}

}  // namespace kvtier
