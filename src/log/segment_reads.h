// Reads since written of one segment's records, keyed by record offset.
//
// Kept for every block read, so at 100M blocks its size matters (docs/
// benchmarks.md, "Scale"): 8-byte slots in an open-addressing table, kept
// between 3/8 and 3/4 full, instead of a hash-map node per record.
//
// Thread safety: none; HitCounts locks around it.
#ifndef KVTIER_SRC_LOG_SEGMENT_READS_H_
#define KVTIER_SRC_LOG_SEGMENT_READS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvtier {

class SegmentReads {
 public:
  // Counts stop here: enough for any reinsertion threshold worth setting.
  static constexpr uint32_t kMaxReads = 0xffff;

  // One more read of the record at `offset` (a multiple of 8, below 2^51,
  // as every record offset is); returns its reads since written, or
  // kMaxReads + 1 once they are past what the count holds (so a threshold
  // is reached by one read only).
  uint32_t Add(uint64_t offset);
  // Reads of the record at `offset` (0 when never read).
  uint32_t Of(uint64_t offset) const;
  // Records read at least once.
  size_t size() const { return used_; }
  bool empty() const { return used_ == 0; }
  // What the table takes in memory.
  size_t MemoryBytes() const { return slots_.capacity() * sizeof(uint64_t); }

 private:
  // A slot: offset / 8 + 1 in the low 48 bits (0: empty), reads in the high 16.
  static constexpr int kCountShift = 48;
  static constexpr uint64_t kKeyMask = (uint64_t{1} << kCountShift) - 1;

  size_t SlotOf(uint64_t key) const;
  void Grow();

  std::vector<uint64_t> slots_;  // a power of two in size, or empty
  size_t used_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_SEGMENT_READS_H_
