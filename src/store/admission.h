// Admission control: which puts reach the SSD at all.
//
// Flash endurance, not bandwidth, is a KV tier's real write limit, so two
// optional policies decline puts before any byte is written:
// - a write budget in bytes per day (a token bucket refilled continuously);
// - admit-on-second-put: a key is stored only the second time it is put
//   within a window of recent first puts (one-hit prefixes never wear the
//   drive).
// Thread-safe.
#ifndef KVTIER_SRC_STORE_ADMISSION_H_
#define KVTIER_SRC_STORE_ADMISSION_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string_view>
#include <unordered_set>

#include "kvtier/namespace.h"

namespace kvtier {

class Admission {
 public:
  using Clock = std::chrono::steady_clock;
  Admission(uint64_t bytes_per_day, bool second_put, uint32_t window);

  // True when a put of `bytes` under (ns, key) may be written now; charges the
  // budget when it returns true. `now` is injectable for tests.
  bool Admit(NamespaceId ns, std::string_view key, uint64_t bytes, Clock::time_point now = Clock::now());
  // Returns budget bytes taken by an admitted put that was not written after all.
  void Refund(uint64_t bytes);

 private:
  uint64_t bytes_per_day_;
  bool second_put_;
  uint32_t window_;
  std::mutex mu_;
  double tokens_ = 0, burst_ = 0;
  Clock::time_point last_;
  std::unordered_set<uint64_t> seen_;
  std::deque<uint64_t> order_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_STORE_ADMISSION_H_
