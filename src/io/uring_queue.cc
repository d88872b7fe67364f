#include "io/uring_queue.h"

#include <liburing.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <unordered_map>
#include <vector>

#include "io/io_errors.h"
#include "io/posix_io_queue.h"
#include "io/uring_queue_impl.h"

namespace kvtier {

using namespace uring_internal;  // NOLINT: the room's own constants

namespace uring_internal {

// Ring setup flags, best first. SINGLE_ISSUER|DEFER_TASKRUN (6.1) runs
// completion work only when we wait, in our thread; R_DISABLED delays binding
// the ring to a thread until its first user enables it. COOP_TASKRUN (5.19)
// at least avoids interrupting the thread for completions.
constexpr unsigned kSetupFlags[] = {
    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED,
    IORING_SETUP_COOP_TASKRUN,
    0,
};

// Creates `ring` with the best flags the kernel accepts. Returns 0 or -errno.
int InitRing(unsigned entries, io_uring* ring, unsigned* flags_used) {
  int ret = -EINVAL;
  for (unsigned flags : kSetupFlags) {
    io_uring_params params;
    std::memset(&params, 0, sizeof(params));
    params.flags = flags;
    ret = io_uring_queue_init_params(entries, ring, &params);
    if (ret == 0) {
      *flags_used = flags;
      return 0;
    }
    if (ret != -EINVAL) return ret;  // only "unknown flag" is worth another try
  }
  return ret;
}

// io_uring_enable_rings() is missing from liburing 2.3's shared-library
// exports, so issue the register call it wraps ourselves. Returns 0 or -errno.
int EnableRing(io_uring* ring) {
  const long r = ::syscall(__NR_io_uring_register, ring->ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0);
  return r < 0 ? -errno : 0;
}

bool TransientEnterError(int err) { return err == EINTR || err == EAGAIN || err == EBUSY; }

void UringIoQueue::Prep(io_uring_sqe* sqe, uint32_t slot) {
  Slot& st = slots_[slot];
  IoRequest& r = *st.r;
  const size_t done = st.done;
  if (r.iov != nullptr) {
    PrepVectored(sqe, slot);
    return;
  }
  size_t len = std::min(r.len - done, max_transfer_);
  char* p = static_cast<char*>(r.buf) + done;
  const uint64_t off = r.offset + done;
  const int fixed_file = FixedFile(*r.file);
  const int fd = fixed_file >= 0 ? fixed_file : r.file->fd();
  int fixed = FixedIndex(p, len);
  if (fixed < 0) {
    // Straddling the end of a registered region (a large buffer registered
    // in pieces): send the part inside it now, fixed, and the rest after it.
    const int at = FixedIndex(p, 1);
    if (at >= 0) {
      const size_t inside = static_cast<size_t>(static_cast<const char*>(regions_[at].iov_base) +
                                                regions_[at].iov_len - p);
      if (inside % kDirectAlign == 0) {
        len = inside;
        fixed = at;
      }
    }
  }
  const auto chunk = static_cast<unsigned>(len);
  if (r.op == IoRequest::Op::kRead) {
    if (fixed >= 0) {
      io_uring_prep_read_fixed(sqe, fd, p, chunk, off, fixed);
    } else {
      io_uring_prep_read(sqe, fd, p, chunk, off);
    }
  } else {
    if (fixed >= 0) {
      io_uring_prep_write_fixed(sqe, fd, p, chunk, off, fixed);
    } else {
      io_uring_prep_write(sqe, fd, p, chunk, off);
    }
  }
  if (fixed_file >= 0) {
    sqe->flags |= IOSQE_FIXED_FILE;
    ++stats_.fixed_file_sqes;
  }
  io_uring_sqe_set_data64(sqe, slot);
  ++stats_.sqes;
  if (fixed >= 0) ++stats_.fixed_sqes;
}

void UringIoQueue::PrepVectored(io_uring_sqe* sqe, uint32_t slot) {
  Slot& st = slots_[slot];
  IoRequest& r = *st.r;
  // The pieces from `done` on (a resubmission continues where the last read
  // stopped), at most max_transfer_ bytes of them.
  st.rest.clear();
  size_t skip = st.done, room = std::min(r.len - st.done, max_transfer_);
  for (unsigned i = 0; i < r.iovcnt && room > 0; ++i) {
    size_t n = r.iov[i].iov_len;
    if (skip >= n) {
      skip -= n;
      continue;
    }
    n = std::min(n - skip, room);
    if (n > 0) st.rest.push_back(iovec{static_cast<char*>(r.iov[i].iov_base) + skip, n});
    skip = 0;
    room -= n;
  }
  const int fixed_file = FixedFile(*r.file);
  io_uring_prep_readv(sqe, fixed_file >= 0 ? fixed_file : r.file->fd(), st.rest.data(),
                      static_cast<unsigned>(st.rest.size()), r.offset + st.done);
  if (fixed_file >= 0) {
    sqe->flags |= IOSQE_FIXED_FILE;
    ++stats_.fixed_file_sqes;
  }
  io_uring_sqe_set_data64(sqe, slot);
  ++stats_.sqes;
}

bool UringIoQueue::Settle(uint32_t slot, int res) {
  Slot& st = slots_[slot];
  IoRequest& r = *st.r;
  const bool write = r.op == IoRequest::Op::kWrite;
  if (res < 0) {
    const int err = -res;
    if ((err == EINTR || err == EAGAIN) && ++st.retries < kMaxRequestRetries) {
      work_.push_back(slot);
      ++stats_.resubmissions;
      return false;
    }
    r.status = TransferError(err, write, r.file->path(), r.offset, r.len);
  } else if (res == 0) {
    r.status = write ? StalledWriteError(r.file->path(), r.offset, r.len, st.done)
                     : ShortReadError(r.file->path(), r.offset, r.len, st.done);
  } else {
    st.done += static_cast<size_t>(res);
    if (st.done >= r.len) {
      r.status = Status::OK();
    } else if (!write && r.file->direct() && st.done % kDirectAlign != 0) {
      // A direct read stops short of a block boundary only at end of file;
      // asking for the rest at an unaligned offset would just fail EINVAL.
      r.status = ShortReadError(r.file->path(), r.offset, r.len, st.done);
    } else {
      work_.push_back(slot);
      ++stats_.resubmissions;
      return false;
    }
  }
  return true;
}

void UringIoQueue::Finish(uint32_t slot) {
  IoRequest* r = slots_[slot].r;
  slots_[slot].r = nullptr;
  free_.push_back(slot);
  --outstanding_;
  if (r->on_done != nullptr) r->on_done(*r);
}

void UringIoQueue::Issue() {
  while (in_flight_ < depth_ && work_head_ < work_.size()) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) break;  // cannot happen: the SQ holds >= depth_ entries
    Prep(sqe, work_[work_head_++]);
    ++in_flight_;
  }
  if (work_head_ == work_.size()) {
    work_.clear();
    work_head_ = 0;
  }
}

size_t UringIoQueue::FailQueued(const Status& why) {
  // Every slot still held is either queued or was never seen by the kernel.
  size_t n = 0;
  work_.clear();
  work_head_ = 0;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].r == nullptr) continue;
    slots_[i].r->status = why;
    Finish(i);
    ++n;
  }
  return n;
}

size_t UringIoQueue::Abandon(const Status& why) {
  // Entries still in the SQ were never seen by the kernel and never will be
  // (the queue is broken from now on); wait for those it did take so that no
  // buffer is in use when we return.
  broken_ = why;
  size_t taken = in_flight_ - std::min<size_t>(in_flight_, io_uring_sq_ready(&ring_));
  final_.clear();
  while (taken > 0) {
    io_uring_cqe* cqe = nullptr;
    const int w = io_uring_wait_cqe(&ring_, &cqe);
    if (w == -EINTR) continue;
    if (w < 0) break;  // nothing more we can do; the ring is abandoned
    const auto slot = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    --taken;
    if (Settle(slot, res)) final_.push_back(slot);
  }
  in_flight_ = 0;
  for (uint32_t slot : final_) Finish(slot);
  return final_.size() + FailQueued(why);
}

void UringIoQueue::Enqueue(IoRequest* r) {
  ++outstanding_;
  r->status = ValidateRequest(*r);
  if (!r->status.ok() || r->len == 0) {
    direct_.push_back(Direct{r, false});
    return;
  }
  if (r->file->fd() < 0) {
    direct_.push_back(Direct{r, true});
    return;
  }
  if (!broken_.ok()) {
    r->status = broken_;
    direct_.push_back(Direct{r, false});
    return;
  }
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  slots_[slot] = Slot{r, 0, 0, {}};
  work_.push_back(slot);
}

size_t UringIoQueue::Reap(bool wait) {
  size_t finished = 0;
  if (!direct_.empty()) {
    std::vector<Direct> now;
    now.swap(direct_);  // on_done may enqueue more
    for (const Direct& d : now) {
      --outstanding_;
      ++finished;
      if (d.run) {
        ++stats_.sync_fallbacks;
        (void)RunRequestSync(*d.r);  // calls on_done
      } else if (d.r->on_done != nullptr) {
        d.r->on_done(*d.r);
      }
    }
  }
  if (work_head_ == work_.size() && in_flight_ == 0) return finished;
  Status s = Bind();
  if (!s.ok()) {
    // A ring that could not be rebuilt is broken for good; a call from the
    // wrong thread fails only what was queued.
    return finished + (in_flight_ == 0 ? FailQueued(s) : 0);
  }
  unsigned enter_failures = 0;
  io_uring_cqe* cqes[64];
  for (;;) {
    Issue();
    const bool block = wait && finished == 0 && in_flight_ > 0;
    const int ret = block ? io_uring_submit_and_wait(&ring_, 1) : io_uring_submit_and_get_events(&ring_);
    if (ret < 0) {
      if (TransientEnterError(-ret) && ++enter_failures < kMaxEnterRetries) continue;
      return finished + Abandon(Status::FromErrno(-ret, "io_uring_enter"));
    }
    enter_failures = 0;
    final_.clear();
    unsigned got;
    while ((got = io_uring_peek_batch_cqe(&ring_, cqes, 64)) > 0) {
      for (unsigned k = 0; k < got; ++k) {
        const auto slot = static_cast<uint32_t>(io_uring_cqe_get_data64(cqes[k]));
        if (Settle(slot, cqes[k]->res)) final_.push_back(slot);
      }
      io_uring_cq_advance(&ring_, got);
      in_flight_ -= got;
    }
    if (!final_.empty()) {
      // Refill the ring before the callbacks run (they verify and copy), so
      // the device is not idle meanwhile.
      Issue();
      if (io_uring_sq_ready(&ring_) > 0) (void)io_uring_submit(&ring_);  // else at the next enter
      for (uint32_t slot : final_) Finish(slot);  // on_done may Enqueue, never Reap
      finished += final_.size();
    }
    if (!wait || finished > 0 || (in_flight_ == 0 && work_head_ == work_.size())) return finished;
  }
}

Status UringIoQueue::Submit(std::span<IoRequest> reqs) {
  for (IoRequest& r : reqs) Enqueue(&r);
  while (outstanding_ > 0) {
    if (Reap(true) == 0 && in_flight_ == 0 && work_head_ == work_.size() && direct_.empty()) break;
  }
  for (const IoRequest& r : reqs) {
    if (!r.status.ok()) return r.status;
  }
  return Status::OK();
}

}  // namespace uring_internal

namespace {

struct ProbeResult {
  bool ok = false;
  std::string reason;
};

ProbeResult RunProbe() {
  io_uring ring;
  int ret = io_uring_queue_init(2, &ring, 0);
  if (ret < 0) return {false, std::string("io_uring_setup: ") + std::strerror(-ret)};
  ProbeResult out{true, ""};
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  if (probe == nullptr) {
    out = {false, "no opcode probe (kernel older than 5.6)"};
  } else {
    for (int op : {IORING_OP_READ, IORING_OP_WRITE, IORING_OP_READ_FIXED, IORING_OP_WRITE_FIXED}) {
      if (!io_uring_opcode_supported(probe, op)) out = {false, "opcode " + std::to_string(op) + " unsupported"};
    }
    io_uring_free_probe(probe);
  }
  if (out.ok) {
    // A seccomp filter may allow io_uring_setup yet refuse io_uring_enter.
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_nop(sqe);
    do {
      ret = io_uring_submit_and_wait(&ring, 1);
    } while (ret == -EINTR);
    io_uring_cqe* cqe = nullptr;
    if (ret >= 0) {
      do {
        ret = io_uring_wait_cqe(&ring, &cqe);
      } while (ret == -EINTR);
    }
    if (ret < 0) {
      out = {false, std::string("io_uring_enter: ") + std::strerror(-ret)};
    } else {
      io_uring_cqe_seen(&ring, cqe);
    }
  }
  io_uring_queue_exit(&ring);
  return out;
}

const ProbeResult& Probe() {
  static const ProbeResult* const result = new ProbeResult(RunProbe());
  return *result;
}

}  // namespace

Result<std::unique_ptr<IoQueue>> NewUringIoQueue(unsigned depth, size_t max_transfer, unsigned file_slots) {
  if (depth == 0 || depth > kMaxDepth) {
    return Status::InvalidArgument("io_uring depth " + std::to_string(depth) + " outside [1, " +
                                   std::to_string(kMaxDepth) + "]");
  }
  if (max_transfer < kDirectAlign || max_transfer % kDirectAlign != 0 || max_transfer > kUringMaxTransfer) {
    return Status::InvalidArgument("io_uring max transfer " + std::to_string(max_transfer) +
                                   " must be a multiple of 4096 in [4096, 1 GiB]");
  }
  auto q = std::make_unique<UringIoQueue>(depth, max_transfer, file_slots);
  KVTIER_RETURN_IF_ERROR(q->CreateRing());
  return std::unique_ptr<IoQueue>(std::move(q));
}

UringQueueStats GetUringQueueStats(const IoQueue& queue) {
  const auto* q = dynamic_cast<const UringIoQueue*>(&queue);
  return q != nullptr ? q->uring_stats() : UringQueueStats{};
}

bool IoUringAvailable() { return Probe().ok; }

std::string IoUringUnavailableReason() { return Probe().reason; }

}  // namespace kvtier
