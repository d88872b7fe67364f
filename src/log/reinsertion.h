// Hot-block reinsertion (after CacheLib Navy's reinsertion policies): when a
// segment is reclaimed, which of its blocks are written again at the start
// of its new life instead of being evicted.
//
// HitCounts (log/hit_counts.h) records reads per block since written; the
// policy decides from them. Thread safety: a policy is used by the writer
// thread only.
#ifndef KVTIER_SRC_LOG_REINSERTION_H_
#define KVTIER_SRC_LOG_REINSERTION_H_

#include <cstdint>
#include <string_view>

#include "kvtier/namespace.h"
#include "log/hit_counts.h"

namespace kvtier {

// A block of a segment being reclaimed.
struct ReinsertCandidate {
  NamespaceId ns = 0;
  std::string_view key;
  uint32_t hits = 0;     // reads since written, from the disk and the RAM tier
  uint64_t bytes = 0;    // what rewriting it costs: its record in whole pages
};

class ReinsertionPolicy {
 public:
  virtual ~ReinsertionPolicy() = default;
  // A reclaim of a segment of `segment_bytes` begins.
  virtual void BeginSegment(uint64_t segment_bytes) = 0;
  // Whether to rewrite `c`; asked before its record is read back.
  virtual bool Wants(const ReinsertCandidate& c) = 0;
  // `c` was read back, verified, and will be rewritten.
  virtual void Taken(const ReinsertCandidate& c) = 0;
};

// Rewrites blocks read at least `min_hits` times since written, wherever the
// reads were served, up to `max_fraction` of the segment
// (Options::reinsert_min_hits, reinsert_max_fraction).
class HitReinsertion final : public ReinsertionPolicy {
 public:
  HitReinsertion(double max_fraction, uint32_t min_hits)
      : max_fraction_(max_fraction), min_hits_(min_hits == 0 ? 1 : min_hits) {}
  void BeginSegment(uint64_t segment_bytes) override {
    budget_ = static_cast<uint64_t>(max_fraction_ * static_cast<double>(segment_bytes));
  }
  bool Wants(const ReinsertCandidate& c) override { return c.hits >= min_hits_ && c.bytes <= budget_; }
  void Taken(const ReinsertCandidate& c) override { budget_ -= c.bytes; }

 private:
  const double max_fraction_;
  const uint32_t min_hits_;
  uint64_t budget_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_REINSERTION_H_
