// Hot-block reinsertion (after CacheLib Navy's reinsertion policies): when a
// segment is reclaimed, which of its blocks are written again at the start
// of its new life instead of being evicted.
//
// HitCounts records reads per block since written; the policy decides from
// them. Thread safety: HitCounts from any thread; a policy is used by the
// writer thread only.
#ifndef KVTIER_SRC_LOG_REINSERTION_H_
#define KVTIER_SRC_LOG_REINSERTION_H_

#include <cstdint>
#include <string_view>
#include <unordered_map>

#include "kvtier/namespace.h"
#include "util/thread_annotations.h"

namespace kvtier {

// Reads since written, per (segment, record offset).
class HitCounts {
 public:
  using Segment = std::unordered_map<uint64_t, uint32_t>;  // offset -> reads
  void Note(uint32_t seg, uint64_t offset) {
    MutexLock l(&mu_);
    ++hits_[seg][offset];
  }
  uint32_t Of(uint32_t seg, uint64_t offset) {
    MutexLock l(&mu_);
    auto it = hits_.find(seg);
    if (it == hits_.end()) return 0;
    auto h = it->second.find(offset);
    return h == it->second.end() ? 0 : h->second;
  }
  // Hands over a segment's counts and forgets them (it is being reclaimed).
  Segment Take(uint32_t seg) {
    MutexLock l(&mu_);
    Segment out;
    auto it = hits_.find(seg);
    if (it != hits_.end()) {
      out.swap(it->second);
      hits_.erase(it);
    }
    return out;
  }

 private:
  Mutex mu_;
  std::unordered_map<uint32_t, Segment> hits_ GUARDED_BY(mu_);
};

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
