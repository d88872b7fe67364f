// Hot-block reinsertion (after CacheLib Navy's reinsertion policies): when a
// segment is reclaimed, which of its blocks are written again at the start
// of its new life instead of being evicted.
//
// HitCounts records reads per block since written; the policy decides from
// them. Thread safety: HitCounts from any thread; a policy is used by the
// writer thread only.
#ifndef KVTIER_SRC_LOG_REINSERTION_H_
#define KVTIER_SRC_LOG_REINSERTION_H_

#include <atomic>
#include <cstdint>
#include <string_view>
#include <unordered_map>

#include "kvtier/namespace.h"
#include "util/thread_annotations.h"

namespace kvtier {

// Reads since written, per (segment, record offset), and per segment the
// bytes of its records read at least `hot_reads` times (what reclaiming it
// would rewrite, which the writer weighs when it chooses a victim) and the
// writer's epoch at its last read (SetEpoch), to tell blocks still read from
// blocks that were.
class HitCounts {
 public:
  using Segment = std::unordered_map<uint64_t, uint32_t>;  // offset -> reads
  // `hot_reads`: Options::reinsert_min_hits (0 counts as 1).
  explicit HitCounts(uint32_t hot_reads) : hot_reads_(hot_reads == 0 ? 1 : hot_reads) {}
  // A read of the record of `bytes` (whole pages) at `offset`.
  void Note(uint32_t seg, uint64_t offset, uint64_t bytes) {
    MutexLock l(&mu_);
    SegmentHits& s = hits_[seg];
    if (++s.reads[offset] == hot_reads_) s.hot_bytes += bytes;
    s.last_read_epoch = epoch_.load(std::memory_order_relaxed);
  }
  // The writer's epoch (a count of segments activated): reads from now on
  // are noted with it.
  void SetEpoch(uint64_t epoch) { epoch_.store(epoch, std::memory_order_relaxed); }
  // For a reader that reports a block's reads once per epoch past the first
  // few (RamTierOptions::read_epoch): all the counts above need.
  const std::atomic<uint64_t>* epoch() const { return &epoch_; }
  uint32_t hot_reads() const { return hot_reads_; }
  uint32_t Of(uint32_t seg, uint64_t offset) {
    MutexLock l(&mu_);
    auto it = hits_.find(seg);
    if (it == hits_.end()) return 0;
    auto h = it->second.reads.find(offset);
    return h == it->second.reads.end() ? 0 : h->second;
  }
  // Bytes of the segment's records read at least hot_reads times (records
  // replaced since included: an estimate), or 0 when none of its records was
  // read since epoch `since`.
  uint64_t HotBytes(uint32_t seg, uint64_t since = 0) {
    MutexLock l(&mu_);
    auto it = hits_.find(seg);
    if (it == hits_.end() || it->second.last_read_epoch < since) return 0;
    return it->second.hot_bytes;
  }
  // Hands over a segment's counts and forgets them (it is being reclaimed).
  Segment Take(uint32_t seg) {
    MutexLock l(&mu_);
    Segment out;
    auto it = hits_.find(seg);
    if (it != hits_.end()) {
      out.swap(it->second.reads);
      hits_.erase(it);
    }
    return out;
  }

 private:
  struct SegmentHits {
    Segment reads;
    uint64_t hot_bytes = 0;
    uint64_t last_read_epoch = 0;
  };
  const uint32_t hot_reads_;
  Mutex mu_;
  std::atomic<uint64_t> epoch_{0};
  std::unordered_map<uint32_t, SegmentHits> hits_ GUARDED_BY(mu_);
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
