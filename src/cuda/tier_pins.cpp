// TierPins: the RAM tier's regions pinned behind its prefault (tier_pins.h).
#include "cuda/tier_pins.h"

#include <cuda_runtime_api.h>

#include <chrono>

namespace kvtier::gpu {

TierPins::TierPins(RamTier* ram, int device)
    : ram_(ram),
      regions_(ram->Regions()),
      base_(regions_.empty() ? nullptr : static_cast<uint8_t*>(regions_.front().iov_base)),
      bytes_([&] {
        uint64_t n = 0;
        for (const iovec& r : regions_) n += r.iov_len;
        return n;
      }()),
      region_bytes_(ram->region_bytes()),
      slots_(regions_.size()) {
  if (!regions_.empty()) thread_ = std::thread([this, device] { Run(device); });
}

TierPins::~TierPins() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (size_t i = 0; i < regions_.size(); ++i)
    if (slots_[i].state.load(std::memory_order_relaxed) == State::kPinned) cudaHostUnregister(regions_[i].iov_base);
}

void TierPins::Run(int device) {
  if (cudaSetDevice(device) != cudaSuccess) cudaGetLastError();  // registration is portable: any context will do
  for (size_t i = 0; i < regions_.size(); ++i) {
    const uint64_t end = static_cast<uint64_t>(static_cast<uint8_t*>(regions_[i].iov_base) - base_) +
                         regions_[i].iov_len;
    {
      MutexLock l(&mu_);
      // Behind the prefault: its pages are there, so the registration is
      // short and so is its hold on the process's mmap lock.
      while (!stop_ && !ram_->PrefaultOver() && ram_->PrefaultedBytes() < end)
        l.WaitUntil(stop_cv_, std::chrono::steady_clock::now() + std::chrono::milliseconds(5));
      if (stop_) return;
    }
    Pin(i);
  }
}

void TierPins::Pin(size_t i) {
  Slot& s = slots_[i];
  MutexLock l(&s.mu);
  if (s.state.load(std::memory_order_relaxed) != State::kWaiting) return;
  void* host = regions_[i].iov_base;
  cudaError_t e = cudaHostRegister(host, regions_[i].iov_len, cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it for the calls that follow
    s.state.store(State::kFailed, std::memory_order_release);
    failed_.store(true, std::memory_order_relaxed);
    return;
  }
  void* dev = nullptr;
  if (cudaHostGetDevicePointer(&dev, host, 0) != cudaSuccess) {
    cudaGetLastError();
    dev = nullptr;
  }
  s.dev = static_cast<uint8_t*>(dev);
  s.state.store(State::kPinned, std::memory_order_release);
  pinned_.fetch_add(1, std::memory_order_relaxed);
}

std::optional<TierPins::Pinned> TierPins::Ensure(const void* p, size_t n) {
  if (!Covers(p)) return std::nullopt;
  const uint8_t* at = static_cast<const uint8_t*>(p);
  const size_t i = static_cast<size_t>(static_cast<uint64_t>(at - base_) / region_bytes_);
  uint8_t* host = static_cast<uint8_t*>(regions_[i].iov_base);
  if (n > static_cast<size_t>(host + regions_[i].iov_len - at)) return std::nullopt;
  Slot& s = slots_[i];
  State st = s.state.load(std::memory_order_acquire);
  if (st == State::kWaiting) {
    Pin(i);
    st = s.state.load(std::memory_order_acquire);
  }
  if (st != State::kPinned) return std::nullopt;
  return Pinned{host, regions_[i].iov_len, s.dev};
}

}  // namespace kvtier::gpu
