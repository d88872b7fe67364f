#include "index/rocks_threads.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace kvtier {
namespace {

// One priority's queue and threads. RocksDB's Schedule/UnSchedule contract:
// a job runs once on some thread, unless UnSchedule (by tag) takes it out of
// the queue first, which then calls its unschedule function.
class Pool {
 public:
  ~Pool() { Stop(); }

  void Schedule(void (*fn)(void*), void* arg, void* tag, void (*unsched)(void*)) {
    {
      std::lock_guard<std::mutex> l(mu_);
      queue_.push_back(Job{fn, arg, tag, unsched});
    }
    cv_.notify_one();
  }

  int UnSchedule(void* tag) {
    std::vector<Job> taken;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (it->tag == tag) {
          taken.push_back(*it);
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (const Job& j : taken)
      if (j.unsched != nullptr) j.unsched(j.arg);
    return static_cast<int>(taken.size());
  }

  unsigned QueueLen() const {
    std::lock_guard<std::mutex> l(mu_);
    return static_cast<unsigned>(queue_.size());
  }

  // Grows to `n` threads (never shrinks: RocksDB sizes pools up at open).
  void Grow(int n) {
    std::lock_guard<std::mutex> l(mu_);
    while (static_cast<int>(threads_.size()) < n && !stop_) threads_.emplace_back([this] { Run(); });
  }

  int Threads() const {
    std::lock_guard<std::mutex> l(mu_);
    return static_cast<int>(threads_.size());
  }

  void Stop() {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      threads.swap(threads_);
    }
    cv_.notify_all();
    for (std::thread& t : threads) t.join();
  }

 private:
  struct Job {
    void (*fn)(void*);
    void* arg;
    void* tag;
    void (*unsched)(void*);
  };

  void Run() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      Job j = queue_.front();
      queue_.pop_front();
      l.unlock();
      j.fn(j.arg);
      l.lock();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

class OwnThreadsEnv final : public rocksdb::EnvWrapper {
 public:
  explicit OwnThreadsEnv(std::unique_ptr<rocksdb::Env> base) : EnvWrapper(std::move(base)) {
    // At least one thread each for flushes (HIGH) and compactions (LOW)
    // before RocksDB asks; the rest as it asks.
    pools_[HIGH].Grow(1);
    pools_[LOW].Grow(1);
  }
  ~OwnThreadsEnv() override {
    for (Pool& p : pools_) p.Stop();
  }

  const char* Name() const override { return "KvtierOwnThreadsEnv"; }

  void Schedule(void (*fn)(void*), void* arg, Priority pri, void* tag, void (*unsched)(void*)) override {
    Pool& p = pools_[Slot(pri)];
    if (p.Threads() == 0) p.Grow(1);  // BOTTOM or USER, asked for without sizing
    p.Schedule(fn, arg, tag, unsched);
  }
  int UnSchedule(void* tag, Priority pri) override { return pools_[Slot(pri)].UnSchedule(tag); }
  unsigned int GetThreadPoolQueueLen(Priority pri) const override { return pools_[Slot(pri)].QueueLen(); }
  void SetBackgroundThreads(int num, Priority pri) override { pools_[Slot(pri)].Grow(num); }
  int GetBackgroundThreads(Priority pri) override { return pools_[Slot(pri)].Threads(); }
  void IncBackgroundThreadsIfNeeded(int num, Priority pri) override { pools_[Slot(pri)].Grow(num); }
  int ReserveThreads(int, Priority) override { return 0; }
  int ReleaseThreads(int, Priority) override { return 0; }
  void LowerThreadPoolIOPriority(Priority) override {}
  void LowerThreadPoolCPUPriority(Priority) override {}
  rocksdb::Status LowerThreadPoolCPUPriority(Priority, rocksdb::CpuPriority) override {
    return rocksdb::Status::OK();
  }

 private:
  static size_t Slot(Priority pri) { return std::min<size_t>(static_cast<size_t>(pri), TOTAL - 1); }
  Pool pools_[TOTAL];
};

}  // namespace

std::unique_ptr<rocksdb::Env> WithOwnThreads(std::unique_ptr<rocksdb::Env> base) {
  return std::make_unique<OwnThreadsEnv>(std::move(base));
}

}  // namespace kvtier
