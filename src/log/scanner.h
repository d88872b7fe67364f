// Walks the records of one segment generation, verifying each.
//
// Used by recovery (from the checkpoint to the torn tail), by Verify and by
// Repair. Reads through a window of large aligned reads so that small records
// do not cost one I/O each.
//
// Stopping rule: a page whose header does not verify, or that belongs to
// another segment or generation, ends the written part of the segment (a
// torn tail after a crash, or space never written). Zeros inside a page are
// padding, which the scanner steps over: after the last record of a write,
// or before a dense record that starts a write inside its page. With `resync` the scanner instead keeps looking
// (at the next 8-byte position holding the record magic, or the next page),
// counting the non-zero bytes it had to skip as corrupt, so one bad record
// does not hide the rest. What follows the last valid record is corrupt only
// if it starts with a header of this life (a torn record recovery should have
// cut); otherwise it is an earlier life's bytes (ScanResult::stale_tail_bytes).
#ifndef KVTIER_SRC_LOG_SCANNER_H_
#define KVTIER_SRC_LOG_SCANNER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "format/record.h"
#include "kvtier/io.h"
#include "util/aligned_buffer.h"

namespace kvtier {

struct ScannedRecord {
  uint64_t offset = 0;
  uint64_t record_bytes = 0;
  format::RecordHeader header;
  std::string_view key;               // valid during the callback
  std::span<const uint8_t> payload;   // valid during the callback (empty if !verify_payload)
};

// The index entry that names a scanned record.
// A scanned record's header names its own segment and generation; the
// segment table's are used, which recovery has checked they equal.
inline format::IndexValue IndexValueOf(const ScannedRecord& rec, uint32_t segment, uint32_t generation) {
  format::IndexValue v = format::IndexValueOf(rec.header, rec.offset);
  v.segment = segment;
  v.generation = generation;
  return v;
}

struct ScanResult {
  uint64_t end = 0;             // offset after the last valid record (8-byte aligned when dense)
  uint64_t records = 0;         // valid records visited
  uint64_t corrupt_regions = 0; // runs of non-zero pages that did not verify (resync only)
  uint64_t bytes_read = 0;
  // Stopped at non-zero bytes that did not verify and are not a whole record
  // of an earlier life (where a reused segment's new writes end).
  bool torn = false;
  // Non-zero bytes after the last valid record that hold no header of this
  // segment's life (resync only): an earlier life's bytes behind the new end
  // where holes are not punched. Not corruption: nothing can point there.
  uint64_t stale_tail_bytes = 0;
  // (offset, bytes) of each corrupt region (resync only; the first 1000).
  std::vector<std::pair<uint64_t, uint64_t>> corrupt;
};

class SegmentScanner {
 public:
  SegmentScanner(File* file, uint32_t segment, uint32_t generation, uint64_t segment_size,
                 uint64_t max_payload)
      : file_(file), segment_(segment), generation_(generation), segment_size_(segment_size),
        max_payload_(max_payload) {}

  // Visits valid records from `start` in offset order. `fn` returns false to
  // stop. I/O errors are returned; verification failures are not errors.
  Status Scan(uint64_t start, bool verify_payload, bool resync,
              const std::function<bool(const ScannedRecord&)>& fn, ScanResult* result,
              const std::function<void(uint64_t)>& progress = nullptr);

 private:
  // Makes [off, off+len) readable and returns a pointer to it.
  Result<const uint8_t*> Window(uint64_t off, uint64_t len);
  // The first 8-byte position in [off, next page boundary) whose word is not
  // zero, or UINT64_MAX (off is 8-byte aligned).
  Result<uint64_t> NonZeroInPage(uint64_t off);

  // What lies at a non-zero offset: a record of this life that verifies, a
  // whole record of an earlier life, or neither.
  struct Candidate {
    Result<format::RecordHeader> header = Status::Corruption("not decoded");
    std::string_view key;
    const uint8_t* rec = nullptr;  // in the window, when valid
    uint64_t rec_bytes = 0;
    bool valid = false;
    bool own_life = false;      // its header names this segment and generation
    bool earlier_life = false;  // a whole record of an earlier life
  };
  Result<Candidate> ReadCandidate(uint64_t off, bool verify_payload);
  // The next place a record could start after damage at `off`: an 8-byte
  // position holding the record magic (a dense record), or the next page.
  Result<uint64_t> NextStart(uint64_t off);

  // Corrupt regions found since the last valid record: corrupt only if a
  // valid record follows them or one of them starts with a header of this
  // life; else (resync) they are an earlier life's stale tail.
  struct Trailing {
    uint64_t regions = 0, bytes = 0;
    size_t first_listed = 0;
    bool own_life = false;
  };
  struct ScanState {
    ScanResult* r = nullptr;
    bool in_bad_run = false;
    Trailing trailing;
  };
  // Marks [from, to) as part of a corrupt region (resync only).
  static void MarkCorrupt(ScanState* st, uint64_t from, uint64_t to, bool own_life);

  File* file_;
  uint32_t segment_, generation_;
  uint64_t segment_size_, max_payload_;
  AlignedBuffer buf_;
  uint64_t buf_off_ = 0, buf_len_ = 0;
  uint64_t bytes_read_ = 0;
};

// Zeroes [off, off + len) of a segment file, which need not be page aligned
// (a torn tail or a corrupt region can start after a dense record): a punched
// hole, or where the file system cannot punch, zero pages written (a partial
// page is read, cleared and written back).
Status ZeroRange(File* file, uint64_t off, uint64_t len);

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_SCANNER_H_
