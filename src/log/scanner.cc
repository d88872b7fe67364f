#include "log/scanner.h"

#include <algorithm>
#include <cstring>

namespace kvtier {

namespace {
constexpr uint64_t kWindow = 4ull << 20;

bool AllZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}
}  // namespace

Result<const uint8_t*> SegmentScanner::Window(uint64_t off, uint64_t len) {
  if (off >= buf_off_ && off + len <= buf_off_ + buf_len_) return buf_.data() + (off - buf_off_);
  uint64_t want = std::max<uint64_t>(len, kWindow);
  want = std::min<uint64_t>(want, segment_size_ - off);
  want = format::AlignUp(want);
  if (want < len) return Status::Corruption("record extends past segment end");
  if (buf_.size() < want && !buf_.Reset(want)) return Status::NoSpace("out of memory for scan buffer");
  buf_len_ = 0;
  Status st = file_->ReadAt(off, buf_.data(), want);
  if (!st.ok()) return st;
  bytes_read_ += want;
  buf_off_ = off;
  buf_len_ = want;
  return buf_.data();
}

Status SegmentScanner::Scan(uint64_t start, bool verify_payload, bool resync,
                            const std::function<bool(const ScannedRecord&)>& fn, ScanResult* r,
                            const std::function<void(uint64_t)>& progress) {
  *r = ScanResult{};
  uint64_t off = std::max<uint64_t>(format::AlignUp(start), format::kSegmentDataStart);
  r->end = off;
  bool in_bad_run = false;
  uint64_t last_progress = off;
  while (off + format::kPage <= segment_size_) {
    auto page = Window(off, format::kPage);
    if (!page.ok()) return page.status();
    std::string_view key;
    auto h = format::DecodeRecordHeader({*page, format::kPage}, max_payload_, &key);
    bool valid = h.ok() && h->segment_id == segment_ && h->generation == generation_;
    uint64_t rec_bytes = valid ? format::RecordBytes(h->key_len, h->payload_len) : 0;
    if (valid && off + rec_bytes > segment_size_) valid = false;
    const uint8_t* rec = nullptr;
    if (valid) {
      auto w = Window(off, verify_payload ? rec_bytes : format::kPage);
      if (!w.ok()) return w.status();
      rec = *w;
      // The key view must point into the current window (it may have moved).
      key = std::string_view(reinterpret_cast<const char*>(rec) + format::kRecordHeaderBytes,
                             h->key_len);
      if (verify_payload) {
        const uint8_t* payload = rec + format::PayloadOffset(h->key_len, h->payload_len);
        valid = format::Checksum(payload, h->payload_len) == h->payload_checksum;
      }
    }
    if (!valid && resync && h.ok() && (h->segment_id != segment_ || h->generation != generation_)) {
      // A whole record of an earlier life of this segment (space not punched):
      // stale, not corrupt. Skip it.
      in_bad_run = false;
      off += format::RecordBytes(h->key_len, h->payload_len);
      continue;
    }
    if (!valid) {
      // Reading the whole record above may have moved or reallocated the
      // window, so `page` can be stale: look the page up again (no I/O).
      page = Window(off, format::kPage);
      if (!page.ok()) return page.status();
      bool zero = AllZero(*page, format::kPage);
      if (!resync) {
        r->torn = !zero;
        break;
      }
      if (!zero && !in_bad_run) {
        ++r->corrupt_regions;
        if (r->corrupt.size() < 1000) r->corrupt.emplace_back(off, 0);
      }
      if (!zero && !r->corrupt.empty() && r->corrupt.back().first + r->corrupt.back().second == off)
        r->corrupt.back().second += format::kPage;
      in_bad_run = !zero;
      off += format::kPage;
      continue;
    }
    in_bad_run = false;
    ScannedRecord sr;
    sr.offset = off;
    sr.record_bytes = rec_bytes;
    sr.header = *h;
    sr.key = key;
    if (verify_payload) sr.payload = {rec + format::PayloadOffset(h->key_len, h->payload_len), h->payload_len};
    ++r->records;
    off += rec_bytes;
    r->end = off;
    if (!fn(sr)) break;
    if (progress && off - last_progress >= (64ull << 20)) {
      progress(off - last_progress);
      last_progress = off;
    }
  }
  if (progress && off > last_progress) progress(std::min(off, segment_size_) - last_progress);
  r->bytes_read = bytes_read_;
  return Status::OK();
}

}  // namespace kvtier
