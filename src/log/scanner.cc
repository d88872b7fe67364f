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

Result<SegmentScanner::Candidate> SegmentScanner::ReadCandidate(uint64_t off, bool verify_payload) {
  Candidate c;
  const bool aligned = off % format::kPage == 0;
  const uint64_t avail = std::min<uint64_t>(format::kPage, segment_size_ - off);
  auto page = Window(off, avail);
  if (!page.ok()) return page.status();
  c.header = format::DecodeRecordHeader({*page, avail}, max_payload_, &c.key);
  if (!c.header.ok()) return c;
  const format::RecordHeader& h = *c.header;
  c.own_life = h.segment_id == segment_ && h.generation == generation_;
  c.rec_bytes = format::RecordBytes(h.key_len, h.payload_len, h.flags);
  const bool fits = off + c.rec_bytes <= segment_size_;
  c.earlier_life = !c.own_life && fits;
  // Only dense records may start off a page boundary.
  c.valid = c.own_life && (aligned || format::IsDense(h.flags)) && fits;
  if (!c.valid) return c;
  const uint64_t head = format::HeaderBytes(h.flags);
  auto w = Window(off, verify_payload ? c.rec_bytes : head + h.key_len);
  if (!w.ok()) return w.status();
  c.rec = *w;
  // The key view must point into the current window (it may have moved).
  c.key = std::string_view(reinterpret_cast<const char*>(c.rec) + head, h.key_len);
  if (verify_payload) {
    const uint8_t* payload = c.rec + format::PayloadOffset(h.key_len, h.payload_len, h.flags);
    c.valid = format::Checksum(payload, h.payload_len) == h.payload_checksum;
  }
  return c;
}

Result<uint64_t> SegmentScanner::NextStart(uint64_t off) {
  uint64_t next = off + format::kDenseAlign;
  for (; next % format::kPage != 0 && next + format::kCompactHeaderBytes <= segment_size_;
       next += format::kDenseAlign) {
    auto m = Window(next, 4);
    if (!m.ok()) return m.status();
    const uint32_t magic = format::GetFixed32(*m);
    if (magic == format::kRecordMagic || magic == format::kCompactRecordMagic) break;
  }
  return std::min(next, segment_size_);
}

void SegmentScanner::MarkCorrupt(ScanState* st, uint64_t from, uint64_t to, bool own_life) {
  ScanResult* r = st->r;
  if (!st->in_bad_run) {
    ++r->corrupt_regions;
    ++st->trailing.regions;
    if (r->corrupt.size() < 1000) r->corrupt.emplace_back(from, 0);
  }
  if (!r->corrupt.empty() && r->corrupt.back().first + r->corrupt.back().second == from)
    r->corrupt.back().second += to - from;
  st->trailing.bytes += to - from;
  st->trailing.own_life |= own_life;
  st->in_bad_run = true;
}

Status SegmentScanner::Scan(uint64_t start, bool verify_payload, bool resync,
                            const std::function<bool(const ScannedRecord&)>& fn, ScanResult* r,
                            const std::function<void(uint64_t)>& progress) {
  *r = ScanResult{};
  ScanState st;
  st.r = r;
  uint64_t off = std::max<uint64_t>(format::AlignUp(start), format::kSegmentDataStart);
  r->end = off;
  uint64_t last_progress = off;
  // The smallest header bounds where a record can start.
  while (off + format::kCompactHeaderBytes <= segment_size_) {
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
      st.in_bad_run = false;
      off += format::kPage;
      continue;
    }
    off = *nz;
    if (off + format::kRecordHeaderBytes > segment_size_) {
      // Only a compact header fits this close to the end.
      auto m = Window(off, 4);
      if (!m.ok()) return m.status();
      if (format::GetFixed32(*m) != format::kCompactRecordMagic) break;
    }
    auto c = ReadCandidate(off, verify_payload);
    if (!c.ok()) return c.status();
    if (!c->valid && resync && c->earlier_life) {
      // A whole record of an earlier life of this segment (space not
      // punched): stale, not corrupt. Skip it.
      st.in_bad_run = false;
      off += c->rec_bytes;
      continue;
    }
    if (!c->valid) {
      // A whole record of an earlier life: where this life's writes end in
      // a segment reused without punching. Else the word at `off` is not
      // zero (above): damage or a torn write.
      if (!resync) {
        r->torn = !c->earlier_life;
        break;
      }
      auto next = NextStart(off);
      if (!next.ok()) return next.status();
      MarkCorrupt(&st, off, *next, c->header.ok() && c->own_life);
      off = *next;
      continue;
    }
    st.in_bad_run = false;
    st.trailing = Trailing{0, 0, r->corrupt.size(), false};
    const format::RecordHeader& h = *c->header;
    ScannedRecord sr;
    sr.offset = off;
    sr.record_bytes = c->rec_bytes;
    sr.header = h;
    sr.key = c->key;
    if (verify_payload) sr.payload = {c->rec + format::PayloadOffset(h.key_len, h.payload_len, h.flags), h.payload_len};
    ++r->records;
    off += c->rec_bytes;
    r->end = off;
    if (!fn(sr)) break;
    if (progress && off - last_progress >= (64ull << 20)) {
      progress(off - last_progress);
      last_progress = off;
    }
  }
  if (progress && off > last_progress) progress(std::min(off, segment_size_) - last_progress);
  if (resync && st.trailing.regions > 0 && !st.trailing.own_life) {
    r->corrupt_regions -= st.trailing.regions;
    r->stale_tail_bytes = st.trailing.bytes;
    r->corrupt.resize(std::min(r->corrupt.size(), st.trailing.first_listed));
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
