// ReadPool: the reader threads that serve gets from disk. Each takes reads
// from one shared queue while it has free slots, looks each up in the index,
// reads its record with its own IoQueue (straight into the caller's pages
// where the layout allows), verifies header, key and checksum against the
// entry, and completes it. A record that fails verification is a miss, never
// wrong bytes, and its entry is handed to `drop`.
//
// Thread safety: Submit and Stop from any thread. The callbacks in Deps run
// on reader threads.
#ifndef KVTIER_SRC_READ_READ_POOL_H_
#define KVTIER_SRC_READ_READ_POOL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

#include "index/index.h"
#include "kvtier/io.h"
#include "log/segment_table.h"
#include "read/read_op.h"
#include "tier/ram_tier.h"
#include "util/counters.h"
#include "util/thread_annotations.h"

namespace kvtier {

class ReadPool {
 public:
  // What the readers use; every pointer must outlive the pool.
  struct Deps {
    FileSystem* fs = nullptr;      // for each reader's IoQueue
    Index* index = nullptr;
    SegmentTable* table = nullptr;
    RamTier* ram = nullptr;        // verified disk hits are admitted to it (may be null)
    Counters* counters = nullptr;
    uint64_t stored_payload_limit = 0;  // format::MaxStoredPayload of the store
    unsigned threads = 1;
    unsigned queue_depth = 1;           // reads in flight per thread
    uint64_t zero_copy_min_bytes = 0;   // Options: smaller records are read whole
    bool zero_copy_small_pages = false;
    size_t max_pending = 0;             // queued reads beyond which Submit refuses
    // On a local miss: true when the shared tier took the op (it completes it).
    std::function<bool(const std::shared_ptr<ReadOp>&)> remote_get;
    // An entry whose record failed verification or is gone: drop it if the
    // index still holds that sequence.
    std::function<void(NamespaceId, std::string_view, uint64_t)> drop;
    // A verified disk hit on the record `v` names, for hot-block reinsertion.
    std::function<void(const format::IndexValue&)> note_hit;
  };
  enum class Admit { kQueued, kClosed, kFull };

  explicit ReadPool(Deps deps);  // starts the threads
  ~ReadPool();                    // stops
  ReadPool(const ReadPool&) = delete;
  ReadPool& operator=(const ReadPool&) = delete;

  // How Submit meets a full queue: refuse at once (kFull: an async get's
  // back-pressure), or wait until the readers have taken some (a blocking
  // caller, which would only wait for its answer anyway), until the op's
  // start_by at the latest.
  enum class WhenFull { kRefuse, kWait };
  // Queues `op`; on kClosed or kFull it is not taken (the caller completes it).
  Admit Submit(std::shared_ptr<ReadOp> op, WhenFull when_full = WhenFull::kRefuse);
  // Serves `op` on the calling thread with one blocking read and no thread
  // hand-over, for a caller that would only wait for a reader (a blocking
  // Get without a deadline): a small record through a bounce buffer, a
  // large one (zero_copy_min_bytes or more) straight into the caller's pages
  // as one read of the record's pages. Returns false, `op` untouched, for a
  // large record whose destination cannot take the read (not page-aligned,
  // or 4 KiB pages where those are copied): Submit it, a reader copies it.
  // Thread-safe. When it returns true, `op` has completed on this thread,
  // or the shared tier has taken it (a local miss), as after Submit; once
  // Stop has begun it returns false.
  bool ReadOnCaller(const std::shared_ptr<ReadOp>& op);
  // Serves what is queued, then joins the threads.
  void Stop();

 private:
  class Reader;  // one thread's state (read_pool.cc)
  // Waits for reads: up to `room` of them, this thread's share of the queue.
  // Returns false when stopping and nothing is left.
  bool Take(size_t room, bool idle, std::vector<std::shared_ptr<ReadOp>>* batch,
            const std::function<void()>& on_idle);

  bool ServeOnCaller(const std::shared_ptr<ReadOp>& op);  // ReadOnCaller's read
  // ServeOnCaller's read of a large record found at `v` in `file` (pinned):
  // false, nothing read and still pinned, when the destination cannot take it.
  bool ReadDirectOnCaller(const std::shared_ptr<ReadOp>& op, const format::IndexValue& v, File* file,
                          const ReadTimes& times);

  const Deps d_;
  Mutex mu_;
  std::condition_variable cv_;
  std::condition_variable callers_cv_;  // on_callers_ fell to 0 while stopping
  std::condition_variable room_cv_;     // the queue fell below max_pending, or stopping
  int room_waiters_ GUARDED_BY(mu_) = 0;  // Submit calls waiting on room_cv_
  int on_callers_ GUARDED_BY(mu_) = 0;  // ReadOnCaller calls under way
  std::deque<std::shared_ptr<ReadOp>> queue_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Reader>> readers_;
  std::vector<std::thread> threads_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_READ_READ_POOL_H_
