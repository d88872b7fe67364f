// The io_uring queue's binding to its thread and its registered files and
// buffers (fixed descriptors and fixed buffers spare the kernel a lookup and
// a page pin per request).
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "io/io_errors.h"
#include "io/uring_queue_impl.h"

namespace kvtier {

namespace uring_internal {

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

}  // namespace uring_internal
}  // namespace kvtier
