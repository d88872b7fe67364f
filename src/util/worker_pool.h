// WorkerPool: a fixed set of helper threads that join a caller in running
// the items of one call (ForEach), for work that is split finely enough
// that handing out indices costs nothing beside it: the RAM tier's copies of
// one batch of hits.
//
// Thread-safe: any number of threads may call ForEach at once; the helpers
// serve the calls in the order they came, and each caller works on its own
// call too, so a call never waits for helpers that are busy elsewhere.
// Destruction joins the helpers; no ForEach may be running then.
#ifndef KVTIER_SRC_UTIL_WORKER_POOL_H_
#define KVTIER_SRC_UTIL_WORKER_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "util/thread_annotations.h"

namespace kvtier {

class WorkerPool {
 public:
  // `helpers` threads beside the callers (0: ForEach runs on the caller
  // alone), named `name` for debuggers and top. With `spin_us` > 0 an idle
  // helper polls for the next call that long before it sleeps, and a caller
  // polls for its call's end before it sleeps: on hosts where a thread's
  // wake-up costs tens of microseconds, as long as a piece's copy.
  WorkerPool(unsigned helpers, const std::string& name, uint32_t spin_us = 0);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs fn(i) once for each i in [0, n) and returns when every one has
  // returned. fn must not throw and must not call ForEach.
  void ForEach(size_t n, const std::function<void(size_t)>& fn);
  // As ForEach, and then(i) runs on the caller for i = 0, 1, ... in order,
  // each as soon as fn(i) has returned, while the helpers run later items:
  // for work whose tail must be sequential (a hash over pieces read in
  // parallel). The caller runs an item itself only while the next one in
  // order is not done. Returns after the last then(). then must not throw.
  void ForEachInOrder(size_t n, const std::function<void(size_t)>& fn, const std::function<void(size_t)>& then);
  // Runs fn once on a helper, without waiting (inline when there are no
  // helpers); helpers run every posted fn before the pool goes. fn must not
  // throw.
  void Post(std::function<void()> fn);
  unsigned helpers() const { return static_cast<unsigned>(threads_.size()); }

 private:
  struct Call;
  void HelperLoop();
  static void Work(Call& c);
  static void RunItem(Call& c, size_t i);
  // Queues c and wakes as many helpers as it has items beyond one.
  void Offer(const std::shared_ptr<Call>& c);
  // Waits for every item of c, then takes it off the queue.
  void Retire(const std::shared_ptr<Call>& c);
  // Polls until a call is posted after `seen` or spin_ns_ has passed.
  void SpinForCall(uint64_t seen) const;
  bool SpinForDone(const Call& c) const;

  const int64_t spin_ns_;
  std::atomic<uint64_t> posted_{0};  // calls posted so far: what a polling helper watches

  Mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Call>> calls_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_UTIL_WORKER_POOL_H_
