// DeadlineTimer: the thread that completes gets whose deadline passed as
// misses (TimedOut), whatever their read is doing.
//
// Thread safety: Add and Stop from any thread; the callbacks run on the
// timer's thread.
#ifndef KVTIER_SRC_READ_DEADLINE_TIMER_H_
#define KVTIER_SRC_READ_DEADLINE_TIMER_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "read/read_op.h"
#include "util/counters.h"
#include "util/thread_annotations.h"

namespace kvtier {

class DeadlineTimer {
 public:
  // Counts each expiry in `counters` (misses, get_deadline_misses), which
  // must outlive the timer.
  explicit DeadlineTimer(Counters* counters);
  ~DeadlineTimer();  // stops
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // Expires `op` at `when` unless it completes first (only a weak
  // reference is kept).
  void Add(Clock::time_point when, const std::shared_ptr<ReadOp>& op);
  // Joins the thread; pending deadlines are dropped.
  void Stop();

 private:
  struct Timed {
    Clock::time_point when;
    std::weak_ptr<ReadOp> op;
    bool operator>(const Timed& o) const { return when > o.when; }
  };
  void Loop();

  Counters* const c_;
  Mutex mu_;
  std::condition_variable cv_;
  std::vector<Timed> heap_ GUARDED_BY(mu_);  // min-heap on when
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_READ_DEADLINE_TIMER_H_
