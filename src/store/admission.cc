#include "store/admission.h"

#include <algorithm>
#include <cstring>

#include "format/record.h"

namespace kvtier {

Admission::Admission(uint64_t bytes_per_day, bool second_put, uint32_t window)
    : bytes_per_day_(bytes_per_day), second_put_(second_put), window_(std::max<uint32_t>(window, 1)) {
  // Burst: an hour's worth, at least 1 GiB, so bursty prefill is not cut off
  // while the daily average still holds.
  burst_ = std::max<double>(static_cast<double>(bytes_per_day) / 24.0, double(1ull << 30));
  if (bytes_per_day_ != 0) burst_ = std::min<double>(burst_, static_cast<double>(bytes_per_day_));
  tokens_ = burst_;
  last_ = Clock::now();
}

bool Admission::Admit(NamespaceId ns, std::string_view key, uint64_t bytes, Clock::time_point now) {
  if (bytes_per_day_ == 0 && !second_put_) return true;
  std::lock_guard<std::mutex> l(mu_);
  if (second_put_) {
    std::string buf(sizeof ns, '\0');
    std::memcpy(buf.data(), &ns, sizeof ns);
    buf.append(key);
    uint64_t h = format::Checksum(buf.data(), buf.size());
    if (seen_.count(h) == 0) {
      seen_.insert(h);
      order_.push_back(h);
      if (order_.size() > window_) {
        seen_.erase(order_.front());
        order_.pop_front();
      }
      return false;
    }
  }
  if (bytes_per_day_ != 0) {
    double dt = std::chrono::duration<double>(now - last_).count();
    if (dt > 0) {
      tokens_ = std::min(burst_, tokens_ + dt * static_cast<double>(bytes_per_day_) / 86400.0);
      last_ = now;
    }
    if (tokens_ < static_cast<double>(bytes)) return false;
    tokens_ -= static_cast<double>(bytes);
  }
  return true;
}

void Admission::Refund(uint64_t bytes) {
  if (bytes_per_day_ == 0) return;
  std::lock_guard<std::mutex> l(mu_);
  tokens_ = std::min(burst_, tokens_ + static_cast<double>(bytes));
}

}  // namespace kvtier
