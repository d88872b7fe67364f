// Committer: the thread that makes written records durable and visible, in
// this order: fdatasync every segment a pass wrote, commit the pass's index
// entries in one batch, checkpoint now and then, then acknowledge each put.
// The writer runs up to kMaxPassesAhead passes ahead; waiting passes are
// committed together, with one fdatasync per segment.
//
// A failed write or sync poisons its segment (the writer appends no more to
// it, every record there fails) and holds every later checkpoint at the
// first failed record, so that recovery rescans and cuts from there.
//
// Thread safety: HandOff, Drain and Stop from the writer; Poison, IsPoisoned
// and CheckpointAt from any thread.
#ifndef KVTIER_SRC_LOG_COMMITTER_H_
#define KVTIER_SRC_LOG_COMMITTER_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <thread>
#include <unordered_set>

#include "index/index.h"
#include "log/segment_table.h"
#include "log/write_op.h"
#include "util/counters.h"
#include "util/thread_annotations.h"

namespace kvtier {

class Committer {
 public:
  struct Deps {
    Index* index = nullptr;
    SegmentTable* table = nullptr;
    Counters* counters = nullptr;
    uint64_t checkpoint_interval_bytes = 0;
    // Gives back what committed (or failed) ops held: their write-ring space,
    // and the RAM-tier copies of puts that failed. Runs before their callbacks.
    std::function<void(std::span<const WriteOp>)> release;
  };
  static constexpr size_t kMaxPassesAhead = 8;

  explicit Committer(Deps deps);
  ~Committer();  // stops
  Committer(const Committer&) = delete;
  Committer& operator=(const Committer&) = delete;

  void Start();  // the thread (a read-only store has none)
  // Queues a written pass; blocks while kMaxPassesAhead passes wait.
  void HandOff(CommitJob job);
  // Returns when every handed-off pass is committed and acknowledged.
  void Drain();
  // Commits what is queued, then joins the thread.
  void Stop();

  void Poison(uint32_t seg);
  bool IsPoisoned(uint32_t seg);
  void Unpoison(uint32_t seg);  // the segment starts a new life
  // Writes checkpoint `cp`, or the first failed write's position (unclean)
  // when one failed since open, made durable as `flush` says
  // (Index::WriteCheckpoint).
  Status CheckpointAt(const Checkpoint& cp, Index::CheckpointFlush flush);
  // True once a write failed since open (its write, its sync or its index
  // commit): checkpoints stay at it, and the next recovery rescans every
  // record written after it.
  bool HoldsFailedWrite();

 private:
  void Loop();
  void CommitPass(CommitJob& job);
  void HoldCheckpointAtFailedWrites(const CommitJob& job, bool index_failed);
  // Adds the phases of the acknowledged puts among `ops` (Stats::puts_timed),
  // their syncs having ended at `synced`.
  void NotePutTimes(std::span<const WriteOp> ops, Clock::time_point synced);

  const Deps d_;
  Mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<CommitJob> queue_ GUARDED_BY(mu_);
  bool busy_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  Mutex poison_mu_;
  std::unordered_set<uint32_t> poisoned_ GUARDED_BY(poison_mu_);  // a write or sync failed there
  Mutex checkpoint_mu_;
  // Record bytes committed since the last flush of the index: what a crash
  // now would make recovery scan (checkpoint_interval_bytes bounds it).
  uint64_t bytes_since_flush_ GUARDED_BY(checkpoint_mu_) = 0;
  // The earliest record whose write or sync failed (epoch of its segment,
  // offset): its bytes may be torn, so no checkpoint may pass it. Held until
  // the store is opened again.
  std::optional<Checkpoint> failed_write_at_ GUARDED_BY(checkpoint_mu_);
  std::thread thread_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_COMMITTER_H_
