// Inside the io room: the io_uring queue's class, shared by uring_queue.cc
// (setup, submission, completion, the probe) and uring_registration.cc (the
// thread binding and the registered files and buffers). Not for other rooms.
#ifndef KVTIER_SRC_IO_URING_QUEUE_IMPL_H_
#define KVTIER_SRC_IO_URING_QUEUE_IMPL_H_

#include <liburing.h>
#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "io/uring_queue.h"

namespace kvtier {
namespace uring_internal {

inline constexpr unsigned kMaxDepth = 32768;         // IORING_MAX_ENTRIES
inline constexpr unsigned kMaxRequestRetries = 1000;  // -EINTR/-EAGAIN completions of one request
inline constexpr unsigned kMaxEnterRetries = 100000;  // transient io_uring_enter failures in a row
inline constexpr size_t kDirectAlign = 4096;
// User data of the cancel the destructor issues (slot indices are 32-bit).
inline constexpr uint64_t kCancelTag = ~uint64_t{0};

// Creates `ring` with the best flags the kernel accepts. Returns 0 or -errno.
int InitRing(unsigned entries, io_uring* ring, unsigned* flags_used);
// Enables a ring set up disabled (R_DISABLED). Returns 0 or -errno.
int EnableRing(io_uring* ring);
bool TransientEnterError(int err);


class UringIoQueue final : public IoQueue {
 public:
  UringIoQueue(unsigned depth, size_t max_transfer, unsigned file_slots)
      : depth_(depth), max_transfer_(max_transfer), want_file_slots_(file_slots) {}

  ~UringIoQueue() override {
    if (!ring_live_) return;
    // The kernel may still be writing into the buffers of requests in
    // flight: cancel what can be cancelled (a read that would wait forever,
    // e.g. on a pipe) and wait for the rest before the ring (and the caller's
    // memory) goes. Entries the kernel never took are dropped with the ring.
    if (in_flight_ > 0 && broken_.ok()) {
      (void)io_uring_submit(&ring_);
      size_t taken = in_flight_ - std::min<size_t>(in_flight_, io_uring_sq_ready(&ring_));
      if (taken > 0 && io_uring_sq_space_left(&ring_) > 0) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
        io_uring_sqe_set_data64(sqe, kCancelTag);
        (void)io_uring_submit(&ring_);
      }
      while (taken > 0) {
        io_uring_cqe* cqe = nullptr;
        const int w = io_uring_wait_cqe(&ring_, &cqe);
        if (w == -EINTR) continue;
        if (w < 0) break;
        if (io_uring_cqe_get_data64(cqe) != kCancelTag) --taken;
        io_uring_cqe_seen(&ring_, cqe);
      }
    }
    io_uring_queue_exit(&ring_);
  }

  UringIoQueue(const UringIoQueue&) = delete;
  UringIoQueue& operator=(const UringIoQueue&) = delete;

  Status CreateRing() {
    const int ret = InitRing(depth_, &ring_, &stats_.setup_flags);
    if (ret < 0) return Status::FromErrno(-ret, "io_uring_setup (" + std::to_string(depth_) + " entries)");
    ring_live_ = true;
    enabled_ = false;
    return Status::OK();
  }

  Status Submit(std::span<IoRequest> requests) override;
  void Enqueue(IoRequest* request) override;
  size_t Reap(bool wait) override;
  size_t Outstanding() const override { return outstanding_; }
  Status RegisterBuffers(std::span<const iovec> regions) override;
  unsigned depth() const override { return depth_; }
  const char* backend() const override { return "io_uring"; }

  const UringQueueStats& uring_stats() const { return stats_; }
  IoQueueStats stats() const override { return {stats_.sqes, stats_.fixed_sqes}; }

 private:
  // A request the ring is working on; its index is the SQE's user data.
  struct Slot {
    IoRequest* r = nullptr;  // null: free
    size_t done = 0;         // bytes transferred so far
    unsigned retries = 0;    // -EINTR/-EAGAIN completions seen
    std::vector<iovec> rest;  // a vectored read's pieces from `done` on, as last issued
  };
  // A request settled without the ring: invalid or empty (status final), or
  // on a file without a descriptor (run synchronously in Reap).
  struct Direct {
    IoRequest* r;
    bool run;
  };

  Status Bind();
  // Registers the sparse file table (best effort) on a ring just enabled.
  void SetUpFileTable();
  // The registered-file slot of `f`, registering it if a slot can be had;
  // -1: name its descriptor.
  int FixedFile(const File& f);
  int FixedIndex(const void* buf, size_t len) const;
  void Prep(io_uring_sqe* sqe, uint32_t slot);
  // Prep for a request with pieces (IoRequest::iov): one readv of the rest.
  void PrepVectored(io_uring_sqe* sqe, uint32_t slot);
  // Applies a completion; true when the request is final (else it was queued
  // to be issued again).
  bool Settle(uint32_t slot, int res);
  // Frees a final request's slot and runs its on_done.
  void Finish(uint32_t slot);
  // Preps SQEs from work_ while fewer than depth_ are in flight.
  void Issue();
  // The ring broke: settles what the kernel took, fails everything else.
  size_t Abandon(const Status& why);
  size_t FailQueued(const Status& why);

  const unsigned depth_;
  const size_t max_transfer_;
  const unsigned want_file_slots_;
  io_uring ring_;
  bool ring_live_ = false;
  bool enabled_ = false;
  std::thread::id owner_;
  // Once the ring fails in a way we cannot recover from, every later call
  // reports this.
  Status broken_;

  void SetRegions(std::span<const iovec> regions);

  std::vector<iovec> regions_;    // registered, in registration order (= buffer index)
  std::vector<uint32_t> by_base_;  // indices into regions_, sorted by base address
  unsigned sparse_slots_ = 0;      // size of a sparse buffer table, 0 when registered plainly

  // The registered file table (stats_.file_slots entries).
  std::unordered_map<uint64_t, uint32_t> file_slot_;  // File::uid -> slot
  std::vector<uint64_t> slot_file_;                   // slot -> File::uid (0: free)
  std::vector<uint64_t> slot_used_;                   // slot -> use_clock_ at its last use
  uint64_t use_clock_ = 0;

  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;   // free slot indices
  std::vector<uint32_t> work_;   // slots to (re)issue, consumed from work_head_
  size_t work_head_ = 0;
  std::vector<Direct> direct_;   // settled without the ring, delivered by Reap
  std::vector<uint32_t> final_;  // scratch: slots that became final in one pass
  size_t in_flight_ = 0;         // SQEs prepared and not yet completed
  size_t outstanding_ = 0;       // enqueued, on_done not yet run

  UringQueueStats stats_;
};

}  // namespace uring_internal
}  // namespace kvtier

#endif  // KVTIER_SRC_IO_URING_QUEUE_IMPL_H_
