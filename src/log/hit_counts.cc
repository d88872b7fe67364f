#include "log/hit_counts.h"

#include <algorithm>

namespace kvtier {

HitCounts::HitCounts(uint32_t hot_reads)
    : hot_reads_(std::clamp<uint32_t>(hot_reads, 1, SegmentReads::kMaxReads)) {}

void HitCounts::Note(uint32_t seg, uint64_t offset, uint64_t bytes) {
  Stripe& st = StripeOf(seg);
  MutexLock l(&st.mu);
  SegmentHits& s = st.segments[seg];
  if (s.reads.Add(offset) == hot_reads_) s.hot_bytes += bytes;
  s.last_read_epoch = epoch_.load(std::memory_order_relaxed);
}

uint32_t HitCounts::Of(uint32_t seg, uint64_t offset) {
  Stripe& st = StripeOf(seg);
  MutexLock l(&st.mu);
  auto it = st.segments.find(seg);
  return it == st.segments.end() ? 0 : it->second.reads.Of(offset);
}

uint64_t HitCounts::HotBytes(uint32_t seg, uint64_t since) {
  Stripe& st = StripeOf(seg);
  MutexLock l(&st.mu);
  auto it = st.segments.find(seg);
  if (it == st.segments.end() || it->second.last_read_epoch < since) return 0;
  return it->second.hot_bytes;
}

SegmentReads HitCounts::Take(uint32_t seg) {
  Stripe& st = StripeOf(seg);
  MutexLock l(&st.mu);
  auto it = st.segments.find(seg);
  if (it == st.segments.end()) return SegmentReads();
  SegmentReads out = std::move(it->second.reads);
  st.segments.erase(it);
  return out;
}

size_t HitCounts::MemoryBytes() {
  size_t n = 0;
  for (Stripe& st : stripes_) {
    MutexLock l(&st.mu);
    for (const auto& [seg, s] : st.segments) n += s.reads.MemoryBytes() + sizeof(s) + sizeof(seg);
  }
  return n;
}

}  // namespace kvtier
