// PutPool: threads that submit clients' blocking puts. A blocking put waits
// for room in the store's write queue; the connection's reader must never
// wait (other requests of the client are behind it), so the wait happens
// here. The store acknowledges durability on its own threads afterwards.
//
// Thread safety: Submit from any thread; the destructor drains and joins.
#ifndef KVTIER_SRC_SERVICE_PUT_POOL_H_
#define KVTIER_SRC_SERVICE_PUT_POOL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "util/thread_annotations.h"

namespace kvtier::service {

class PutPool {
 public:
  explicit PutPool(unsigned threads);
  ~PutPool();
  PutPool(const PutPool&) = delete;
  PutPool& operator=(const PutPool&) = delete;
  void Submit(std::function<void()> job);

 private:
  void Loop();
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvtier::service

#endif  // KVTIER_SRC_SERVICE_PUT_POOL_H_
