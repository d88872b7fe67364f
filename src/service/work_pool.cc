#include "service/work_pool.h"

namespace kvtier::service {

WorkPool::WorkPool(unsigned threads) {
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

WorkPool::~WorkPool() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkPool::Submit(uint64_t owner, std::function<void()> job) {
  {
    MutexLock l(&mu_);
    std::deque<std::function<void()>>& q = queues_[owner];
    if (q.empty()) turns_.push_back(owner);
    q.push_back(std::move(job));
  }
  cv_.notify_one();
}

void WorkPool::Loop() {
  for (;;) {
    std::function<void()> job;
    {
      MutexLock l(&mu_);
      while (turns_.empty() && !stop_) l.Wait(cv_);
      if (turns_.empty()) return;  // stopping, and drained
      const uint64_t owner = turns_.front();
      turns_.pop_front();
      auto it = queues_.find(owner);
      job = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) {
        queues_.erase(it);
      } else {
        turns_.push_back(owner);  // its next job waits for every other owner's
      }
    }
    job();
  }
}

}  // namespace kvtier::service
