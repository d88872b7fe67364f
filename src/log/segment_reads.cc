#include "log/segment_reads.h"

namespace kvtier {

namespace {
constexpr size_t kFirstSlots = 16;
}  // namespace

// Linear probing from a multiplicative hash: offsets of one segment are
// evenly spaced (records of one size), which a plain modulo would cluster.
size_t SegmentReads::SlotOf(uint64_t key) const {
  const size_t mask = slots_.size() - 1;
  size_t i = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
  while (slots_[i] != 0 && (slots_[i] & kKeyMask) != key) i = (i + 1) & mask;
  return i;
}

void SegmentReads::Grow() {
  std::vector<uint64_t> old;
  old.swap(slots_);
  slots_.assign(old.empty() ? kFirstSlots : old.size() * 2, 0);
  for (uint64_t s : old)
    if (s != 0) slots_[SlotOf(s & kKeyMask)] = s;
}

uint32_t SegmentReads::Add(uint64_t offset) {
  const uint64_t key = (offset >> 3) + 1;
  if ((used_ + 1) * 4 > slots_.size() * 3) Grow();
  uint64_t& s = slots_[SlotOf(key)];
  if (s == 0) {
    s = key;
    ++used_;
  }
  uint32_t reads = static_cast<uint32_t>(s >> kCountShift);
  if (reads == kMaxReads) return kMaxReads + 1;
  ++reads;
  s = key | (static_cast<uint64_t>(reads) << kCountShift);
  return reads;
}

uint32_t SegmentReads::Of(uint64_t offset) const {
  if (slots_.empty()) return 0;
  return static_cast<uint32_t>(slots_[SlotOf((offset >> 3) + 1)] >> kCountShift);
}

}  // namespace kvtier
