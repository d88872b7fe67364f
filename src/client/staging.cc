#include "client/staging.h"

namespace kvtier::client {

namespace {
constexpr uint64_t kPage = 4096;
}

Staging::Staging(std::shared_ptr<wire::SharedRegion> region) : region_(std::move(region)) {
  MutexLock l(&mu_);
  free_[0] = region_->size();
}

Staging::Extent Staging::Allocate(uint64_t bytes, Clock::time_point deadline) {
  bytes = (std::max<uint64_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  if (bytes > region_->size()) return {};
  MutexLock l(&mu_);
  for (;;) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      Extent e{it->first, bytes};
      const uint64_t left = it->second - bytes;
      const uint64_t rest_at = it->first + bytes;
      free_.erase(it);
      if (left > 0) free_[rest_at] = left;
      return e;
    }
    if (Clock::now() >= deadline) return {};
    if (deadline == kNoDeadline) {
      l.Wait(cv_);
    } else {
      l.WaitUntil(cv_, deadline);
    }
  }
}

void Staging::Free(const Extent& e) {
  if (!e) return;
  {
    MutexLock l(&mu_);
    auto [it, inserted] = free_.emplace(e.offset, e.bytes);
    (void)inserted;
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }
  cv_.notify_all();
}

}  // namespace kvtier::client
