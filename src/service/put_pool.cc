#include "service/put_pool.h"

namespace kvtier::service {

PutPool::PutPool(unsigned threads) {
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

PutPool::~PutPool() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void PutPool::Submit(std::function<void()> job) {
  {
    MutexLock l(&mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void PutPool::Loop() {
  for (;;) {
    std::function<void()> job;
    {
      MutexLock l(&mu_);
      while (jobs_.empty() && !stop_) l.Wait(cv_);
      if (jobs_.empty()) return;  // stopping, and drained
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace kvtier::service
