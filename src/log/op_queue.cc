#include "log/op_queue.h"

#include <utility>

namespace kvtier {

Status OpQueue::Init() {
  MutexLock l(&mu_);
  KVTIER_RETURN_IF_ERROR(ring_.Init(budget_));
  ring_base_ = ring_.base();
  ring_capacity_ = ring_.capacity();
  return Status::OK();
}

Status OpQueue::Reserve(WriteOp* op, uint64_t ring_bytes, uint64_t borrowed, bool blocking,
                        Clock::time_point room_by) {
  MutexLock l(&mu_);
  for (;;) {
    if (closing_) return Status::Closed("store is closing");
    // Borrowed bytes count against the budget like ring bytes, but one put
    // is always let through so that no size can starve.
    const bool fits =
        borrowed == 0 || borrowed_inflight_ == 0 || borrowed_inflight_ + borrowed + ring_.used() <= budget_;
    if (fits) {
      op->alloc = ring_.Allocate(ring_bytes, op->dense() ? format::kDenseAlign : format::kPage);
      if (op->alloc.data != nullptr) break;
    }
    if (!blocking) return Status::NotAdmitted("write queue full");
    if (room_by == kNoDeadline) {
      l.Wait(space_cv_);
    } else {
      if (Clock::now() >= room_by) return Status::TimedOut("no room in the write queue before the put's start deadline");
      (void)l.WaitUntil(space_cv_, room_by);  // then looks for room once more
    }
  }
  op->alloc_id = next_alloc_id_++;
  slots_.push_back(Slot{op->alloc_id, op->alloc, false});
  borrowed_inflight_ += borrowed;
  op->borrowed = borrowed;
  return Status::OK();
}

bool OpQueue::HasRoomFor(uint64_t payload_bytes) {
  constexpr uint64_t kRecordPages = 4 * format::kPage;  // header and key, tail, alignment
  MutexLock l(&mu_);
  return !closing_ && ring_.used() + borrowed_inflight_ + payload_bytes + kRecordPages <= budget_;
}

void OpQueue::PushRecord(WriteOp op) {
  {
    MutexLock l(&mu_);
    queue_.push_back(std::move(op));
  }
  work_cv_.notify_one();
}

Status OpQueue::Push(WriteOp op) {
  {
    MutexLock l(&mu_);
    if (closing_) return Status::Closed("store is closing");
    queue_.push_back(std::move(op));
  }
  work_cv_.notify_one();
  return Status::OK();
}

void OpQueue::ReleaseSlot(uint64_t alloc_id) {
  for (Slot& s : slots_)
    if (s.id == alloc_id) {
      s.freed = true;
      break;
    }
  while (!slots_.empty() && slots_.front().freed) {
    ring_.Release(slots_.front().alloc);
    slots_.pop_front();
  }
}

void OpQueue::Release(std::span<const WriteOp> ops) {
  {
    MutexLock l(&mu_);
    for (const WriteOp& op : ops) {
      ReleaseSlot(op.alloc_id);
      borrowed_inflight_ -= op.borrowed;
    }
  }
  space_cv_.notify_all();
}

void OpQueue::Close() {
  {
    MutexLock l(&mu_);
    closing_ = true;
  }
  work_cv_.notify_all();
  space_cv_.notify_all();
}

bool OpQueue::NextGroup(uint64_t group_bytes, const std::function<void(uint64_t)>& idle,
                        std::vector<WriteOp>* group) {
  group->clear();
  MutexLock l(&mu_);
  if (queue_.empty() && !closing_) {
    const uint64_t touched = ring_.touched();
    l.Unlock();
    idle(touched);
    l.Lock();
  }
  while (queue_.empty() && !closing_) l.Wait(work_cv_);
  if (queue_.empty()) return false;  // closing, and drained
  // Records up to group_bytes, ended early by any other op (which then runs
  // after the records before it, keeping queue order).
  uint64_t bytes = 0;
  while (!queue_.empty()) {
    WriteOp& front = queue_.front();
    if (front.kind != WriteOp::Kind::kRecord) {
      if (group->empty()) {
        group->push_back(std::move(front));
        queue_.pop_front();
      }
      break;
    }
    if (!group->empty() && bytes + front.rec_bytes > group_bytes) break;
    bytes += front.rec_bytes;
    group->push_back(std::move(front));
    queue_.pop_front();
  }
  return true;
}

}  // namespace kvtier
