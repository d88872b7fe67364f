#include "log/scanner.h"

#include <algorithm>
#include <cstring>

#include "format/coding.h"

namespace kvtier {

namespace {
constexpr uint64_t kWindow = 4ull << 20;
}  // namespace

Result<const uint8_t*> SegmentScanner::Window(uint64_t off, uint64_t len) {
  if (off >= buf_off_ && off + len <= buf_off_ + buf_len_) return buf_.data() + (off - buf_off_);
  // O_DIRECT reads start on a page: dense records need not.
  const uint64_t base = format::PageStart(off);
  uint64_t want = std::max<uint64_t>(off - base + len, kWindow);
  want = std::min<uint64_t>(want, segment_size_ - base);
  want = format::AlignUp(want);
  if (base + want < off + len) return Status::Corruption("record extends past segment end");
  if (buf_.size() < want && !buf_.Reset(want)) return Status::NoSpace("out of memory for scan buffer");
  buf_len_ = 0;
  Status st = file_->ReadAt(base, buf_.data(), want);
  if (!st.ok()) return st;
  bytes_read_ += want;
  buf_off_ = base;
  buf_len_ = want;
  return buf_.data() + (off - base);
}

Result<uint64_t> SegmentScanner::NonZeroInPage(uint64_t off) {
  const uint64_t end = std::min(format::AlignUp(off + 1), segment_size_);
  auto w = Window(off, end - off);
  if (!w.ok()) return w.status();
  for (uint64_t i = 0; i + format::kDenseAlign <= end - off; i += format::kDenseAlign) {
    uint64_t word;
    std::memcpy(&word, *w + i, sizeof word);
    if (word != 0) return off + i;
  }
  return UINT64_MAX;
}

Status SegmentScanner::Scan(uint64_t start, bool verify_payload, bool resync,
                            const std::function<bool(const ScannedRecord&)>& fn, ScanResult* r,
                            const std::function<void(uint64_t)>& progress) {
  *r = ScanResult{};
  uint64_t off = std::max<uint64_t>(format::AlignUp(start), format::kSegmentDataStart);
  r->end = off;
  bool in_bad_run = false;
  uint64_t last_progress = off;
  // Regions found since the last valid record: corrupt if a valid record
  // follows them or one of them starts with a header of this life.
  struct Trailing {
    uint64_t regions = 0, bytes = 0;
    size_t first_listed = 0;
    bool own_life = false;
  } trailing;
  // Marks [from, to) as part of a corrupt region (resync only).
  auto corrupt = [&](uint64_t from, uint64_t to, bool own_life) {
    if (!in_bad_run) {
      ++r->corrupt_regions;
      ++trailing.regions;
      if (r->corrupt.size() < 1000) r->corrupt.emplace_back(from, 0);
    }
    if (!r->corrupt.empty() && r->corrupt.back().first + r->corrupt.back().second == from)
      r->corrupt.back().second += to - from;
    trailing.bytes += to - from;
    trailing.own_life |= own_life;
    in_bad_run = true;
  };
  while (off + format::kRecordHeaderBytes <= segment_size_) {
    // Zeros up to the page end are padding: after the last record of a
    // write, or before a dense run that starts inside its page. A page of
    // zeros is where the written part ends.
    auto nz = NonZeroInPage(off);
    if (!nz.ok()) return nz.status();
    if (*nz == UINT64_MAX) {
      if (off % format::kPage != 0) {
        off = format::AlignUp(off);
        continue;
      }
      if (!resync) break;
      in_bad_run = false;
      off += format::kPage;
      continue;
    }
    off = *nz;
    const bool aligned = off % format::kPage == 0;
    const uint64_t avail = std::min<uint64_t>(format::kPage, segment_size_ - off);
    auto page = Window(off, avail);
    if (!page.ok()) return page.status();
    std::string_view key;
    auto h = format::DecodeRecordHeader({*page, avail}, max_payload_, &key);
    // Only dense records may start off a page boundary.
    bool valid = h.ok() && h->segment_id == segment_ && h->generation == generation_ &&
                 (aligned || format::IsDense(h->flags));
    const uint64_t rec_bytes = h.ok() ? format::RecordBytes(h->key_len, h->payload_len, h->flags) : 0;
    if (valid && off + rec_bytes > segment_size_) valid = false;
    const uint8_t* rec = nullptr;
    if (valid) {
      auto w = Window(off, verify_payload ? rec_bytes : format::kRecordHeaderBytes + h->key_len);
      if (!w.ok()) return w.status();
      rec = *w;
      // The key view must point into the current window (it may have moved).
      key = std::string_view(reinterpret_cast<const char*>(rec) + format::kRecordHeaderBytes,
                             h->key_len);
      if (verify_payload) {
        const uint8_t* payload = rec + format::PayloadOffset(h->key_len, h->payload_len, h->flags);
        valid = format::Checksum(payload, h->payload_len) == h->payload_checksum;
      }
    }
    if (!valid && resync && h.ok() && (h->segment_id != segment_ || h->generation != generation_) &&
        off + rec_bytes <= segment_size_) {
      // A whole record of an earlier life of this segment (space not punched):
      // stale, not corrupt. Skip it.
      in_bad_run = false;
      off += rec_bytes;
      continue;
    }
    if (!valid) {
      // The word at `off` is not zero (above): damage or a torn write.
      if (!resync) {
        r->torn = true;
        break;
      }
      // Step to the next place a record could start: an 8-byte position
      // holding the record magic (a dense record), or the next page.
      uint64_t next = off + format::kDenseAlign;
      for (; next % format::kPage != 0 && next + format::kRecordHeaderBytes <= segment_size_;
           next += format::kDenseAlign) {
        auto m = Window(next, 4);
        if (!m.ok()) return m.status();
        if (format::GetFixed32(*m) == format::kRecordMagic) break;
      }
      corrupt(off, std::min(next, segment_size_),
              h.ok() && h->segment_id == segment_ && h->generation == generation_);
      off = next;
      continue;
    }
    in_bad_run = false;
    trailing = Trailing{0, 0, r->corrupt.size(), false};
    ScannedRecord sr;
    sr.offset = off;
    sr.record_bytes = rec_bytes;
    sr.header = *h;
    sr.key = key;
    if (verify_payload) sr.payload = {rec + format::PayloadOffset(h->key_len, h->payload_len, h->flags), h->payload_len};
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
  if (resync && trailing.regions > 0 && !trailing.own_life) {
    r->corrupt_regions -= trailing.regions;
    r->stale_tail_bytes = trailing.bytes;
    r->corrupt.resize(std::min(r->corrupt.size(), trailing.first_listed));
  }
  r->bytes_read = bytes_read_;
  return Status::OK();
}

Status ZeroRange(File* file, uint64_t off, uint64_t len) {
  if (len == 0) return Status::OK();
  Status st = file->PunchHole(off, len);
  if (st.code() != Code::kNotSupported) return st;
  const uint64_t end = off + len;
  AlignedBuffer buf(1 << 20);
  if (buf.size() == 0) return Status::NoSpace("out of memory zeroing a region");
  for (uint64_t at = format::PageStart(off); at < end;) {
    const uint64_t n = std::min<uint64_t>(buf.size(), format::AlignUp(end) - at);
    // Keep what lies outside [off, end) in the first and last page.
    if (at < off || at + n > end) KVTIER_RETURN_IF_ERROR(file->ReadAt(at, buf.data(), n));
    const uint64_t zfrom = std::max(off, at), zto = std::min(end, at + n);
    std::memset(buf.data() + (zfrom - at), 0, zto - zfrom);
    KVTIER_RETURN_IF_ERROR(file->WriteAt(at, buf.data(), n));
    at += n;
  }
  return Status::OK();
}

}  // namespace kvtier
