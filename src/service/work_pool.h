// WorkPool: threads for the work a connection's reader must not do itself.
// The reader must never wait or run long, because the client's other
// requests queue behind it:
//   - a blocking put waits for room in the store's write queue;
//   - a get of a large block copies it out of the RAM tier, one core's
//     worth of memory bandwidth: a client's batch of such gets would run one
//     at a time on its reader, but runs on every thread of the pool here.
//
// Fairness: jobs queue per owner (a connection), and the threads take one
// job from each owner in turn, so a client that queues a thousand gets
// delays another client's get by at most one job per thread.
//
// Thread safety: Submit from any thread; the destructor runs every queued
// job, then joins.
#ifndef KVTIER_SRC_SERVICE_WORK_POOL_H_
#define KVTIER_SRC_SERVICE_WORK_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "util/thread_annotations.h"

namespace kvtier::service {

class WorkPool {
 public:
  explicit WorkPool(unsigned threads);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;
  void Submit(uint64_t owner, std::function<void()> job);
  unsigned threads() const { return static_cast<unsigned>(threads_.size()); }

 private:
  void Loop();
  Mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<uint64_t, std::deque<std::function<void()>>> queues_ GUARDED_BY(mu_);
  std::deque<uint64_t> turns_ GUARDED_BY(mu_);  // owners with queued jobs, next first
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvtier::service

#endif  // KVTIER_SRC_SERVICE_WORK_POOL_H_
