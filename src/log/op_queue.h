// OpQueue: where caller threads hand operations to the writer thread, and the
// write ring their records are encoded into.
//
// A put reserves ring space (waiting for it, or answered NotAdmitted),
// fills it on its own thread and pushes the record; other operations are
// pushed as they are. The writer takes them in queue order, a group of
// records at a time, and once the committer is done with a record its ring
// space comes back here, strictly in allocation order. Bytes written from
// outside the ring (borrowed payloads) count against the same budget.
//
// Thread safety: every method is thread-safe. The ring's memory is written
// by the caller that reserved it and read by the writer after the push.
#ifndef KVTIER_SRC_LOG_OP_QUEUE_H_
#define KVTIER_SRC_LOG_OP_QUEUE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <vector>

#include "log/write_op.h"
#include "log/write_ring.h"
#include "util/thread_annotations.h"

namespace kvtier {

class OpQueue {
 public:
  // `budget_bytes`: ring capacity, and the cap on ring plus borrowed bytes
  // in flight (Options::write_queue_bytes).
  explicit OpQueue(uint64_t budget_bytes) : budget_(budget_bytes) {}
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  Status Init();  // maps the ring
  // Reserves `ring_bytes` of the ring for `op` (op->dense picks the
  // alignment) and counts `borrowed` payload bytes in flight. Waits for
  // room when `blocking` (TimedOut once `room_by` passes), else answers
  // NotAdmitted; Closed once closing.
  Status Reserve(WriteOp* op, uint64_t ring_bytes, uint64_t borrowed, bool blocking,
                 Clock::time_point room_by = kNoDeadline);
  // True when a put of `payload_bytes` (ring or borrowed, with room for its
  // header and tail pages) would be reserved now without waiting. A hint:
  // another put may take the room first.
  bool HasRoomFor(uint64_t payload_bytes);
  // Queues a reserved record: always accepted (Close lets reserved records
  // through, so that every reservation completes).
  void PushRecord(WriteOp op);
  // Queues any other operation; Closed (and `op` dropped) once closing.
  Status Push(WriteOp op);
  // Gives back what committed or failed records held.
  void Release(std::span<const WriteOp> ops);
  // Refuses new operations and wakes waiting reservations; the writer stops
  // once the queue is drained.
  void Close();

  // Writer thread: fills `group` with the next operations in order (records
  // up to `group_bytes`, or one other operation) and returns true; false
  // when closed and drained. When the queue is empty, `idle` runs first,
  // without the lock, with the bytes of the ring touched so far.
  bool NextGroup(uint64_t group_bytes, const std::function<void(uint64_t touched)>& idle,
                 std::vector<WriteOp>* group);

  // The ring's mapping (fixed once Init returned): for registering it.
  uint8_t* ring_base() const { return ring_base_; }
  uint64_t ring_capacity() const { return ring_capacity_; }

 private:
  void ReleaseSlot(uint64_t alloc_id) REQUIRES(mu_);

  const uint64_t budget_;
  uint8_t* ring_base_ = nullptr;
  uint64_t ring_capacity_ = 0;
  Mutex mu_;
  std::condition_variable work_cv_, space_cv_;
  std::deque<WriteOp> queue_ GUARDED_BY(mu_);
  WriteRing ring_ GUARDED_BY(mu_);
  struct Slot {
    uint64_t id;
    WriteRing::Allocation alloc;
    bool freed;
  };
  std::deque<Slot> slots_ GUARDED_BY(mu_);  // ring allocations in allocation order
  uint64_t next_alloc_id_ GUARDED_BY(mu_) = 1;
  uint64_t borrowed_inflight_ GUARDED_BY(mu_) = 0;  // payload bytes queued from outside the ring
  bool closing_ GUARDED_BY(mu_) = false;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_OP_QUEUE_H_
