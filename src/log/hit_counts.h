// Reads per block since written, for hot-block reinsertion (log/reinsertion.h).
//
// Thread safety: every method from any thread. Segments are spread over
// stripes, each with its own lock, so that reads of different segments
// (every disk read notes one) do not queue on one mutex.
#ifndef KVTIER_SRC_LOG_HIT_COUNTS_H_
#define KVTIER_SRC_LOG_HIT_COUNTS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "log/segment_reads.h"
#include "util/thread_annotations.h"

namespace kvtier {

// Reads since written, per (segment, record offset), and per segment the
// bytes of its records read at least `hot_reads` times (what reclaiming it
// would rewrite, which the writer weighs when it chooses a victim) and the
// writer's epoch at its last read (SetEpoch), to tell blocks still read from
// blocks that were. Counts saturate at SegmentReads::kMaxReads.
class HitCounts {
 public:
  // `hot_reads`: Options::reinsert_min_hits (0 counts as 1; above
  // SegmentReads::kMaxReads as that).
  explicit HitCounts(uint32_t hot_reads);
  // A read of the record of `bytes` (whole pages) at `offset`.
  void Note(uint32_t seg, uint64_t offset, uint64_t bytes);
  // The writer's epoch (a count of segments activated): reads from now on
  // are noted with it.
  void SetEpoch(uint64_t epoch) { epoch_.store(epoch, std::memory_order_relaxed); }
  // For a reader that reports a block's reads once per epoch past the first
  // few (RamTierOptions::read_epoch): all the counts above need.
  const std::atomic<uint64_t>* epoch() const { return &epoch_; }
  uint32_t hot_reads() const { return hot_reads_; }
  uint32_t Of(uint32_t seg, uint64_t offset);
  // Bytes of the segment's records read at least hot_reads times (records
  // replaced since included: an estimate), or 0 when none of its records was
  // read since epoch `since`.
  uint64_t HotBytes(uint32_t seg, uint64_t since = 0);
  // Hands over a segment's counts and forgets them (it is being reclaimed).
  SegmentReads Take(uint32_t seg);
  // Memory the counts take, tables of every segment together.
  size_t MemoryBytes();

 private:
  static constexpr size_t kStripes = 16;
  struct SegmentHits {
    SegmentReads reads;
    uint64_t hot_bytes = 0;
    uint64_t last_read_epoch = 0;
  };
  struct Stripe {
    Mutex mu;
    std::unordered_map<uint32_t, SegmentHits> segments GUARDED_BY(mu);
  };
  Stripe& StripeOf(uint32_t seg) { return stripes_[seg % kStripes]; }

  const uint32_t hot_reads_;
  std::atomic<uint64_t> epoch_{0};
  std::array<Stripe, kStripes> stripes_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_HIT_COUNTS_H_
