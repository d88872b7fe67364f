#include "read/deadline_timer.h"

#include <algorithm>
#include <functional>

namespace kvtier {

DeadlineTimer::DeadlineTimer(Counters* counters) : c_(counters) { thread_ = std::thread([this] { Loop(); }); }

DeadlineTimer::~DeadlineTimer() { Stop(); }

void DeadlineTimer::Add(Clock::time_point when, const std::shared_ptr<ReadOp>& op) {
  {
    MutexLock l(&mu_);
    heap_.push_back(Timed{when, op});
    std::push_heap(heap_.begin(), heap_.end(), std::greater<Timed>());
  }
  cv_.notify_one();
}

void DeadlineTimer::Stop() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DeadlineTimer::Loop() {
  MutexLock l(&mu_);
  for (;;) {
    if (stop_) return;
    if (heap_.empty()) {
      l.Wait(cv_);
      continue;
    }
    const Clock::time_point when = heap_.front().when;
    if (Clock::now() < when) {
      l.WaitUntil(cv_, when);
      continue;
    }
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<Timed>());
    std::shared_ptr<ReadOp> op = heap_.back().op.lock();
    heap_.pop_back();
    if (op == nullptr || !op->Expire()) continue;
    c_->misses.Add();
    c_->get_deadline_misses.Add();
    l.Unlock();
    op->done(Status::TimedOut("deadline passed: treat as a miss"));
    l.Lock();
  }
}

}  // namespace kvtier
