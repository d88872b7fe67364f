#include "log/committer.h"

#include <algorithm>
#include <chrono>
#include <type_traits>
#include <unordered_map>

#include "format/record.h"

namespace kvtier {

Committer::Committer(Deps deps) : d_(std::move(deps)) {}

Committer::~Committer() { Stop(); }

void Committer::Start() { thread_ = std::thread([this] { Loop(); }); }

void Committer::HandOff(CommitJob job) {
  MutexLock l(&mu_);
  while (queue_.size() >= kMaxPassesAhead) l.Wait(done_cv_);
  queue_.push_back(std::move(job));
  work_cv_.notify_one();
}

void Committer::Drain() {
  MutexLock l(&mu_);
  while (!queue_.empty() || busy_) l.Wait(done_cv_);
}

void Committer::Stop() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Committer::Loop() {
  for (;;) {
    CommitJob job;
    {
      MutexLock l(&mu_);
      while (queue_.empty() && !stop_) l.Wait(work_cv_);
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
      // Group commit across passes: their writes are all complete.
      while (!queue_.empty()) {
        CommitJob& next = queue_.front();
        for (WriteOp& op : next.ops) job.ops.push_back(std::move(op));
        for (uint32_t seg : next.touched)
          if (std::find(job.touched.begin(), job.touched.end(), seg) == job.touched.end()) job.touched.push_back(seg);
        job.sealed = job.sealed || next.sealed;
        job.frontier = next.frontier;  // the later pass's append position
        queue_.pop_front();
      }
      busy_ = true;
      done_cv_.notify_all();
    }
    CommitPass(job);
    {
      MutexLock l(&mu_);
      busy_ = false;
    }
    done_cv_.notify_all();
  }
}

void Committer::CommitPass(CommitJob& job) {
  Counters& c = *d_.counters;
  // 1. fdatasync each touched segment: the data is durable before its index
  //    entries exist. A failed sync poisons the segment: the writer seals it
  //    and every pass that wrote there fails (never reported durable).
  std::unordered_map<uint32_t, Status> failed;
  for (uint32_t seg : job.touched) {
    if (IsPoisoned(seg)) {
      failed[seg] = Status::IOError("segment " + std::to_string(seg) + " failed an earlier write or sync");
      continue;
    }
    Status s = d_.table->file(seg)->Sync();
    c.syncs.Add();
    if (!s.ok()) {
      Poison(seg);
      failed[seg] = s;
    }
  }
  for (WriteOp& op : job.ops) {
    if (!op.status.ok()) continue;
    auto f = failed.find(op.segment);
    if (f != failed.end()) op.status = f->second.WithContext("syncing record");
  }
  HoldCheckpointAtFailedWrites(job, /*index_failed=*/false);
  const Clock::time_point synced = Clock::now();
  // 2. Index entries in one batch.
  IndexBatch batch;
  for (WriteOp& op : job.ops) {
    if (!op.status.ok()) continue;
    batch.Put(op.ns, op.key, IndexValueOf(op));
  }
  if (!batch.empty()) {
    Status s = d_.index->Commit(batch, /*sync=*/false);
    if (!s.ok()) {
      for (WriteOp& op : job.ops)
        if (op.status.ok()) op.status = s.WithContext("committing index");
      HoldCheckpointAtFailedWrites(job, /*index_failed=*/true);
    }
  }
  c.group_commits.Add();
  uint64_t committed_bytes = 0;
  for (WriteOp& op : job.ops) {
    if (op.status.ok()) {
      c.puts.Add();
      c.put_bytes.Add(op.payload_len);
      c.zero_copy_put_bytes.Add(op.borrowed);
      committed_bytes += op.rec_bytes;
    } else {
      c.puts_failed.Add();
    }
  }
  // 3. A checkpoint after a seal, and every checkpoint_interval_bytes one
  // with a flush of the index that makes it durable (started, not waited
  // for: the next commits go on meanwhile).
  bool checkpoint, flush;
  {
    MutexLock l(&checkpoint_mu_);
    bytes_since_flush_ += committed_bytes;
    flush = bytes_since_flush_ >= d_.checkpoint_interval_bytes;
    checkpoint = job.sealed || flush;
  }
  if (checkpoint)  // a failed checkpoint only lengthens recovery
    CheckpointAt(job.frontier, flush ? Index::CheckpointFlush::kStart : Index::CheckpointFlush::kNone).IgnoreError();
  NotePutTimes(job.ops, synced);
  // 4. Acknowledge.
  d_.release(job.ops);
  for (WriteOp& op : job.ops) {
    op.hold.Release();  // written: the RAM tier may reuse these chunks
    FinishPut(op.done, op.status);
  }
}

void Committer::NotePutTimes(std::span<const WriteOp> ops, Clock::time_point synced) {
  Counters& c = *d_.counters;
  const Clock::time_point now = Clock::now();
  auto ns = [](Clock::duration d) { return static_cast<uint64_t>(std::max<int64_t>(0, d.count())); };
  static_assert(std::is_same_v<Clock::duration, std::chrono::nanoseconds>);
  for (const WriteOp& op : ops) {
    const WriteOp::Times& t = op.times;
    if (!op.status.ok() || t.submitted == Clock::time_point{}) continue;
    c.puts_timed.Add();
    c.put_encode_ns.Add(ns(t.pushed - t.submitted));
    c.put_queue_ns.Add(ns(t.pass - t.pushed));
    c.put_place_ns.Add(ns(t.placed - t.pass));
    c.put_write_ns.Add(ns(t.written - t.placed));
    c.put_sync_ns.Add(ns(synced - t.written));
    c.put_commit_ns.Add(ns(now - synced));
  }
}

void Committer::Poison(uint32_t seg) {
  MutexLock l(&poison_mu_);
  poisoned_.insert(seg);
}

bool Committer::IsPoisoned(uint32_t seg) {
  MutexLock l(&poison_mu_);
  return poisoned_.count(seg) != 0;
}

void Committer::Unpoison(uint32_t seg) {
  MutexLock l(&poison_mu_);
  poisoned_.erase(seg);
}

// A record whose write or sync failed may be torn on disk, and the segment is
// poisoned (nothing more is appended to it). Recovery cuts such tails, but
// only of segments after the checkpoint: a checkpoint written past the
// record (by a later pass, or by this one while the process is dying of the
// same fault) would leave its bytes behind for good.
// A record whose index commit failed is whole and durable but has no entry:
// held the same way, so that a Remove of its key knows to mark it
// (Writer::DoRemove), and recovery may index it (it was never acknowledged).
void Committer::HoldCheckpointAtFailedWrites(const CommitJob& job, bool index_failed) {
  for (const WriteOp& op : job.ops) {
    if (op.status.ok() || op.kind != WriteOp::Kind::kRecord || !(index_failed || IsPoisoned(op.segment))) continue;
    const SegmentInfo info = d_.table->Info(op.segment);
    const uint64_t page = format::PageStart(op.offset);  // recovery scans from a page; dense records start inside one
    MutexLock l(&checkpoint_mu_);
    if (!failed_write_at_ || info.epoch < failed_write_at_->epoch ||
        (info.epoch == failed_write_at_->epoch && page < failed_write_at_->offset)) {
      Checkpoint at;
      at.epoch = info.epoch;
      at.offset = page;
      failed_write_at_ = at;
    }
  }
}

bool Committer::HoldsFailedWrite() {
  MutexLock l(&checkpoint_mu_);
  return failed_write_at_.has_value();
}

Status Committer::CheckpointAt(const Checkpoint& cp, Index::CheckpointFlush flush) {
  MutexLock l(&checkpoint_mu_);
  Checkpoint to = cp;
  if (failed_write_at_) {
    to.epoch = failed_write_at_->epoch;
    to.offset = failed_write_at_->offset;
    to.clean = false;
  }
  Status st = d_.index->WriteCheckpoint(to, flush);
  if (st.ok() && flush != Index::CheckpointFlush::kNone) bytes_since_flush_ = 0;
  return st;
}

}  // namespace kvtier
