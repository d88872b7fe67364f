// The RAM tier's CUDA registrations, one per region (RamTier::Regions),
// made by a background thread that follows the tier's prefault, and by a
// call itself for a region it needs before the thread got there.
//
// Why in the background: pinning faults in every page not yet there while
// the kernel holds the process's mmap lock, so pinning a fresh 48 GiB tier
// whole took seconds on the bind's thread (docs/ram_tier.md). Behind the
// prefault each region's pages are already there and pinning it is about a
// tenth of that; a call waits at most for the regions its copies touch.
//
// Thread safety: every method may be called from any thread. Ensure waits
// at most for the registration of the region it needs (the thread's, or
// its own).
#ifndef KVTIER_SRC_CUDA_TIER_PINS_H_
#define KVTIER_SRC_CUDA_TIER_PINS_H_

#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "store/block_sink.h"  // RamTier, as the store lends it to the GPU path
#include "util/thread_annotations.h"

namespace kvtier::gpu {

class TierPins {
 public:
  struct Pinned {
    uint8_t* host;
    size_t len;
    uint8_t* dev;  // its mapped device alias; null where the driver gives none
  };
  // Starts the thread, which pins `ram`'s regions in address order on
  // `device`'s context as the prefault passes them (all at once when the
  // prefault is over or off). `ram` must outlive this object.
  TierPins(RamTier* ram, int device);
  // Stops the thread (after the registration under way) and unregisters
  // every region it or a call pinned.
  ~TierPins();
  TierPins(const TierPins&) = delete;
  TierPins& operator=(const TierPins&) = delete;

  // Whether p lies in the tier's data area.
  bool Covers(const void* p) const { return p >= base_ && p < base_ + bytes_; }
  // Bytes from p to the end of its region; 0 outside the tier.
  size_t RoomInRegion(const void* p) const {
    if (!Covers(p)) return 0;
    const uint64_t off = static_cast<uint64_t>(static_cast<const uint8_t*>(p) - base_);
    return static_cast<size_t>(std::min(bytes_, (off / region_bytes_ + 1) * region_bytes_) - off);
  }
  // The pinned region holding [p, p + n), pinned now if it was not yet;
  // nullopt when [p, p + n) is not inside one region or the region could
  // not be pinned (copies from it then go through the driver's bounce
  // buffers, as from any unpinned memory).
  std::optional<Pinned> Ensure(const void* p, size_t n) EXCLUDES(mu_);

  size_t regions() const { return regions_.size(); }
  size_t pinned() const { return pinned_.load(std::memory_order_relaxed); }
  // No region failed to pin (those not yet pinned are on their way).
  bool ok() const { return !failed_.load(std::memory_order_relaxed); }

 private:
  enum class State : uint8_t { kWaiting, kPinned, kFailed };
  // A region's registration, made under its own lock: a call that needs
  // one region waits for that one only, not for the thread's pass over
  // the others. `dev` is written once before `state` becomes kPinned
  // (release); a reader that sees kPinned (acquire) sees it, so the calls'
  // fast path takes no lock.
  struct Slot {
    Mutex mu;
    std::atomic<State> state{State::kWaiting};
    uint8_t* dev = nullptr;
  };
  void Run(int device) EXCLUDES(mu_);
  // Pins region i unless it is pinned or failed already.
  void Pin(size_t i);

  RamTier* const ram_;
  const std::vector<iovec> regions_;
  uint8_t* const base_;
  const uint64_t bytes_, region_bytes_;
  Mutex mu_;  // the thread's wait for the prefault, and its end
  std::condition_variable stop_cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<Slot> slots_;  // one per region
  std::atomic<size_t> pinned_{0};
  std::atomic<bool> failed_{false};
  std::thread thread_;
};

}  // namespace kvtier::gpu

#endif  // KVTIER_SRC_CUDA_TIER_PINS_H_
