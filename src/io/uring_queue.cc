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

namespace kvtier {

namespace {

constexpr unsigned kMaxDepth = 32768;         // IORING_MAX_ENTRIES
constexpr unsigned kMaxRequestRetries = 1000;  // -EINTR/-EAGAIN completions of one request
constexpr unsigned kMaxEnterRetries = 100000;  // transient io_uring_enter failures in a row
constexpr size_t kDirectAlign = 4096;
// User data of the cancel the destructor issues (slot indices are 32-bit).
constexpr uint64_t kCancelTag = ~uint64_t{0};

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

Status UringIoQueue::Bind() {
  if (!broken_.ok()) return broken_;
  const std::thread::id me = std::this_thread::get_id();
  const bool single_issuer = (stats_.setup_flags & IORING_SETUP_SINGLE_ISSUER) != 0;
  if (enabled_ && (owner_ == me || !single_issuer)) return Status::OK();
  bool rebuilt = false;
  if (enabled_) {
    // A single-issuer ring refuses every thread but its owner (-EEXIST).
    // With nothing in flight a fresh ring is equivalent.
    if (in_flight_ > 0) {
      return Status::InvalidArgument("io_uring queue used from a second thread while requests are in flight");
    }
    io_uring_queue_exit(&ring_);
    ring_live_ = false;
    Status s = CreateRing();
    if (!s.ok()) {
      broken_ = s;
      return s;
    }
    ++stats_.ring_rebuilds;
    rebuilt = true;
  }
  if (stats_.setup_flags & IORING_SETUP_R_DISABLED) {
    const int ret = EnableRing(&ring_);
    if (ret < 0) {
      broken_ = Status::FromErrno(-ret, "io_uring enable rings");
      return broken_;
    }
  }
  enabled_ = true;
  owner_ = me;
  SetUpFileTable();
  if (rebuilt && !regions_.empty()) {
    // Best effort, as RegisterBuffers promises: without them requests simply
    // run unregistered.
    sparse_slots_ = 0;
    if (io_uring_register_buffers(&ring_, regions_.data(), static_cast<unsigned>(regions_.size())) < 0) {
      regions_.clear();
      by_base_.clear();
    }
  }
  return Status::OK();
}

void UringIoQueue::SetUpFileTable() {
  // A fresh ring: whatever the old one had registered is gone with it.
  file_slot_.clear();
  slot_file_.clear();
  slot_used_.clear();
  stats_.file_slots = 0;
  if (want_file_slots_ == 0) return;
  // The table counts against RLIMIT_NOFILE; ask for less where it is low.
  unsigned n = want_file_slots_;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    n = static_cast<unsigned>(std::min<rlim_t>(n, lim.rlim_cur / 4));
  if (n == 0 || io_uring_register_files_sparse(&ring_, n) < 0) return;  // plain descriptors then
  stats_.file_slots = n;
  slot_file_.assign(n, 0);
  slot_used_.assign(n, 0);
}

int UringIoQueue::FixedFile(const File& f) {
  if (stats_.file_slots == 0) return -1;
  auto it = file_slot_.find(f.uid());
  if (it != file_slot_.end()) {
    slot_used_[it->second] = ++use_clock_;
    return static_cast<int>(it->second);
  }
  // A free slot, else (only with nothing in flight, so that no request
  // already prepared can see its slot change) the least recently used.
  uint32_t slot = UINT32_MAX;
  for (uint32_t i = 0; i < slot_file_.size() && slot == UINT32_MAX; ++i) {
    if (slot_file_[i] == 0) slot = i;
  }
  if (slot == UINT32_MAX) {
    if (in_flight_ > 0) return -1;
    slot = static_cast<uint32_t>(std::min_element(slot_used_.begin(), slot_used_.end()) - slot_used_.begin());
  }
  int fd = f.fd();
  if (io_uring_register_files_update(&ring_, slot, &fd, 1) != 1) return -1;
  if (slot_file_[slot] != 0) file_slot_.erase(slot_file_[slot]);
  slot_file_[slot] = f.uid();
  slot_used_[slot] = ++use_clock_;
  file_slot_[f.uid()] = slot;
  ++stats_.file_registrations;
  return static_cast<int>(slot);
}

namespace {
bool SameRegion(const iovec& a, const iovec& b) { return a.iov_base == b.iov_base && a.iov_len == b.iov_len; }
// io_uring's limit on registered buffers (IORING_MAX_REG_BUFFERS).
constexpr size_t kMaxBufferSlots = 16384;
}  // namespace

void UringIoQueue::SetRegions(std::span<const iovec> regions) {
  regions_.assign(regions.begin(), regions.end());
  by_base_.resize(regions_.size());
  for (uint32_t i = 0; i < by_base_.size(); ++i) by_base_[i] = i;
  std::sort(by_base_.begin(), by_base_.end(), [this](uint32_t a, uint32_t b) {
    return regions_[a].iov_base < regions_[b].iov_base;
  });
}

Status UringIoQueue::RegisterBuffers(std::span<const iovec> regions) {
  KVTIER_RETURN_IF_ERROR(Bind());
  // The registered regions followed by new ones: register only the new ones
  // in the free slots of the sparse table. Pinning is what registration
  // costs (all of a RAM tier's pages), so memory already registered is not
  // unpinned and pinned again when a caller's set grows.
  const size_t old_n = regions_.size();
  if (sparse_slots_ > 0 && old_n > 0 && regions.size() > old_n && regions.size() <= sparse_slots_ &&
      std::equal(regions_.begin(), regions_.end(), regions.begin(), SameRegion)) {
    const unsigned add = static_cast<unsigned>(regions.size() - old_n);
    const int ret = io_uring_register_buffers_update_tag(&ring_, static_cast<unsigned>(old_n),
                                                         regions.data() + old_n, nullptr, add);
    if (ret == static_cast<int>(add)) {
      ++stats_.buffer_appends;
      SetRegions(regions);
      return Status::OK();
    }
    // Refused or partly done: register everything again below.
  }
  if (!regions_.empty() || sparse_slots_ > 0) {
    (void)io_uring_unregister_buffers(&ring_);
    regions_.clear();
    by_base_.clear();
    sparse_slots_ = 0;
  }
  if (regions.empty()) return Status::OK();
  // A sparse table with room to grow, where the kernel has them (5.19+).
  const auto slots = static_cast<unsigned>(std::min(kMaxBufferSlots, std::max<size_t>(64, 2 * regions.size())));
  if (regions.size() <= slots && io_uring_register_buffers_sparse(&ring_, slots) == 0) {
    const auto n = static_cast<unsigned>(regions.size());
    if (io_uring_register_buffers_update_tag(&ring_, 0, regions.data(), nullptr, n) == static_cast<int>(n)) {
      sparse_slots_ = slots;
      SetRegions(regions);
      return Status::OK();
    }
    (void)io_uring_unregister_buffers(&ring_);
  }
  const int ret = io_uring_register_buffers(&ring_, regions.data(), static_cast<unsigned>(regions.size()));
  if (ret < 0) {
    uint64_t bytes = 0;
    for (const iovec& v : regions) bytes += v.iov_len;
    std::string context = "io_uring_register_buffers (" + std::to_string(regions.size()) + " regions, " +
                          std::to_string(bytes) + " bytes)";
    if (ret == -ENOMEM) context += " [RLIMIT_MEMLOCK too low?]";
    return Status::FromErrno(-ret, context);
  }
  SetRegions(regions);
  return Status::OK();
}

// The registered region holding [buf, buf+len), found by the nearest base at
// or below buf. Overlapping regions may hide a match; the request then just
// runs unregistered.
int UringIoQueue::FixedIndex(const void* buf, size_t len) const {
  if (by_base_.empty()) return -1;
  const auto* p = static_cast<const char*>(buf);
  auto it = std::upper_bound(by_base_.begin(), by_base_.end(), p, [this](const char* q, uint32_t idx) {
    return q < static_cast<const char*>(regions_[idx].iov_base);
  });
  if (it == by_base_.begin()) return -1;
  const uint32_t idx = *(it - 1);
  const auto* base = static_cast<const char*>(regions_[idx].iov_base);
  const size_t offset = static_cast<size_t>(p - base);
  if (offset > regions_[idx].iov_len || len > regions_[idx].iov_len - offset) return -1;
  return static_cast<int>(idx);
}

void UringIoQueue::Prep(io_uring_sqe* sqe, uint32_t slot) {
  const Slot& st = slots_[slot];
  IoRequest& r = *st.r;
  const size_t done = st.done;
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
  slots_[slot] = Slot{r, 0, 0};
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
