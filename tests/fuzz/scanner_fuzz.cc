// libFuzzer target for the segment scanner (src/log/scanner.cc): the code
// that recovery, Verify and Repair run over whatever a crash or a bad disk
// left in a segment file. It must never crash, never read outside the file or
// its own buffers, and never hand out a record that is not really there.
//
// The segment lives in memory (MemFile below). The first input byte picks the
// mode; the rest is either
// - raw: the segment's bytes from offset 4096 on (optionally "re-signed": at
//   each page the record magic, segment, generation and both checksums are
//   made right, so the fuzzer gets past them), checked against invariants
//   only; or
// - structured: a list of operations (intact record, record with a damaged
//   header or payload, stale record of another generation or segment, zero
//   gap, garbage page) that are encoded with real checksums; then the exact
//   set of records the scanner must return is known and checked, with and
//   without resync.
//
// Build and run: tools/run_fuzzers.sh, or see tests/fuzz/CMakeLists.txt.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "format/coding.h"
#include "format/record.h"
#include "kvtier/io.h"
#include "log/scanner.h"

namespace kvtier {
namespace {

#define FUZZ_CHECK(cond)           \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

constexpr uint32_t kSeg = 7;
constexpr uint32_t kGen = 3;
constexpr size_t kPage = format::kPage;
// Large enough that a record can cross the scanner's 4 MiB read window.
constexpr size_t kMaxSegmentBytes = 10u << 20;

// A segment file in memory. Bytes past `data` up to `size` read as zeros (an
// allocated, never written tail); reads past `size` fail like a short read.
class MemFile final : public File {
 public:
  // `data` must outlive the file.
  MemFile(const std::vector<uint8_t>& data, uint64_t size) : data_(data), size_(size) {}
  const std::string& path() const override { return path_; }
  Status ReadAt(uint64_t offset, void* buf, size_t n) override {
    if (offset > size_ || n > size_ - offset) return Status::Corruption("short read");
    auto* out = static_cast<uint8_t*>(buf);
    const uint64_t have = offset < data_.size() ? std::min<uint64_t>(n, data_.size() - offset) : 0;
    if (have > 0) std::memcpy(out, data_.data() + offset, have);
    std::memset(out + have, 0, n - have);
    return Status::OK();
  }
  Status WriteAt(uint64_t, const void*, size_t) override { return Status::NotSupported("read only"); }
  Status Sync() override { return Status::OK(); }
  Status Allocate(uint64_t, uint64_t) override { return Status::NotSupported("read only"); }
  Status PunchHole(uint64_t, uint64_t) override { return Status::NotSupported("read only"); }
  Result<uint64_t> Size() override { return size_; }
  Status Truncate(uint64_t) override { return Status::NotSupported("read only"); }

 private:
  std::string path_ = "mem://segment";
  const std::vector<uint8_t>& data_;
  uint64_t size_;
};

// Reads little-endian integers from the input; zeros once it runs out.
class Bytes {
 public:
  explicit Bytes(std::span<const uint8_t> in) : in_(in) {}
  bool empty() const { return pos_ >= in_.size(); }
  uint8_t U8() { return pos_ < in_.size() ? in_[pos_++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
  uint32_t U24() { return U16() | (static_cast<uint32_t>(U8()) << 16); }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

bool AllZero(const uint8_t* p, size_t n) {
  return std::all_of(p, p + n, [](uint8_t b) { return b == 0; });
}

struct Found {
  uint64_t offset, record_bytes, payload_len;
  std::string key;
};

struct Scan {
  Status status;
  ScanResult result;
  std::vector<Found> found;
};

// Runs the scanner and checks what holds for any file contents.
Scan RunScanner(const std::vector<uint8_t>& data, uint64_t file_size, uint64_t segment_size,
                uint64_t max_payload, uint64_t start, bool verify, bool resync, size_t stop_after) {
  MemFile file(data, file_size);
  SegmentScanner scanner(&file, kSeg, kGen, segment_size, max_payload);
  Scan s;
  uint64_t next = kPage;
  s.status = scanner.Scan(
      start, verify, resync,
      [&](const ScannedRecord& r) {
        // Only dense records start off a page boundary.
        FUZZ_CHECK(r.offset % (format::IsDense(r.header.flags) ? format::kDenseAlign : kPage) == 0 && r.offset >= next);
        FUZZ_CHECK(r.header.segment_id == kSeg && r.header.generation == kGen);
        FUZZ_CHECK(r.header.payload_len >= 1 && r.header.payload_len <= max_payload);
        FUZZ_CHECK(r.record_bytes == format::RecordBytes(r.header.key_len, r.header.payload_len, r.header.flags));
        FUZZ_CHECK(r.offset + r.record_bytes <= segment_size);
        FUZZ_CHECK(r.key.size() == r.header.key_len);
        // The key handed out is the one in the file.
        for (size_t i = 0; i < r.key.size(); ++i) {
          const uint64_t at = r.offset + format::HeaderBytes(r.header.flags) + i;
          FUZZ_CHECK(static_cast<uint8_t>(r.key[i]) == (at < data.size() ? data[at] : 0));
        }
        if (verify) {
          FUZZ_CHECK(r.payload.size() == r.header.payload_len);
          FUZZ_CHECK(format::Checksum(r.payload.data(), r.payload.size()) ==
                     r.header.payload_checksum);
          const uint64_t at = r.offset + format::PayloadOffset(r.header.key_len, r.header.payload_len, r.header.flags);
          const uint64_t have = at < data.size() ? std::min<uint64_t>(data.size() - at, r.payload.size()) : 0;
          FUZZ_CHECK(std::memcmp(r.payload.data(), data.data() + at, have) == 0);
          FUZZ_CHECK(AllZero(r.payload.data() + have, r.payload.size() - have));
        } else {
          FUZZ_CHECK(r.payload.empty());
        }
        next = r.offset + r.record_bytes;
        s.found.push_back({r.offset, r.record_bytes, r.header.payload_len, std::string(r.key)});
        return s.found.size() < stop_after;
      },
      &s.result);
  if (!s.status.ok()) return s;
  FUZZ_CHECK(s.result.records == s.found.size());
  // A start past the end is returned as is (nothing to scan there).
  FUZZ_CHECK(s.result.end <= std::max({segment_size, format::AlignUp(start), uint64_t{kPage}}));
  if (!s.found.empty()) {
    FUZZ_CHECK(s.result.end == s.found.back().offset + s.found.back().record_bytes);
  }
  return s;
}

// Makes the record header at page `p` verify: magic, version, our segment and
// generation, header checksum, and (when the payload fits) payload checksum.
void Resign(std::vector<uint8_t>* d, size_t p, uint64_t max_payload) {
  uint8_t* h = d->data() + p;
  format::PutFixed32(h + 0, format::kRecordMagic);
  format::PutFixed16(h + 4, static_cast<uint16_t>(format::kFormatVersion));
  uint16_t key_len = static_cast<uint16_t>(format::GetFixed16(h + 8) % format::kMaxKeyBytes + 1);
  format::PutFixed16(h + 8, key_len);
  format::PutFixed16(h + 10, 0);
  format::PutFixed32(h + 12, kSeg);
  format::PutFixed32(h + 16, kGen);
  format::PutFixed32(h + 20, 0);
  uint64_t payload_len = format::GetFixed64(h + 40) % (max_payload + 1);
  format::PutFixed64(h + 40, payload_len);
  const size_t poff = p + format::PayloadOffset(key_len, payload_len, 0);
  if (poff + payload_len <= d->size()) {
    format::PutFixed64(h + 48, format::Checksum(d->data() + poff, payload_len));
  }
  if (p + format::kRecordHeaderBytes + key_len > d->size()) return;
  // The header checksum covers bytes [0, 64) and the key (see EncodeRecordHeader).
  std::vector<uint8_t> covered(h, h + 64);
  covered.insert(covered.end(), h + format::kRecordHeaderBytes,
                 h + format::kRecordHeaderBytes + key_len);
  format::PutFixed64(h + 64, format::Checksum(covered.data(), covered.size()));
}

void FuzzRaw(uint8_t mode, Bytes& b, std::span<const uint8_t> rest) {
  const bool verify = mode & 1, resync = mode & 2, resign = mode & 8;
  const uint64_t max_payload = 1 + (b.U16() << 4);
  const uint64_t start = b.U16();  // any byte offset: the scanner aligns it
  const uint8_t tail_pages = b.U8();
  rest = rest.subspan(std::min<size_t>(rest.size(), 5));
  std::vector<uint8_t> data(kPage + rest.size());
  std::copy(rest.begin(), rest.end(), data.begin() + kPage);
  if (resign) {
    for (size_t p = kPage; p + format::kRecordHeaderBytes <= data.size(); p += kPage) {
      Resign(&data, p, max_payload);
    }
  }
  // Segment size: the data rounded up plus 0-3 zero pages, or (high bits) a
  // file shorter than the segment claims, which must fail cleanly.
  const uint64_t segment_size = format::AlignUp(data.size()) + (tail_pages & 3) * kPage;
  const uint64_t file_size = (tail_pages & 0x80) ? data.size() : segment_size;
  (void)RunScanner(data, file_size, segment_size, max_payload, start, verify, resync, SIZE_MAX);
}

// One element of a structured segment.
struct Element {
  enum Kind : uint8_t { kRecord, kZero, kGarbage } kind;
  uint64_t offset, bytes;
  // Records only:
  bool header_ok = true;  // decodes with our segment/generation
  bool stale = false;     // decodes, but another segment or generation
  bool payload_ok = true;
  bool dense = false;     // format 3: 8-byte aligned, back to back within a write
  bool compact = false;   // format 4: a dense record with the 48-byte header
  bool magic_ok = true;   // its first four bytes are intact
  uint64_t payload_len = 0;
  std::string key;
};

void FuzzStructured(uint8_t mode, Bytes& b) {
  const bool verify = mode & 1, resync = mode & 2;
  const uint64_t max_payload = (b.U8() & 1) ? (6u << 20) : 1 + b.U16();
  std::vector<uint8_t> data(kPage);  // the segment header page: unread by the scanner
  std::vector<Element> elems;
  while (!b.empty() && data.size() < kMaxSegmentBytes) {
    Element e{};
    const uint8_t kind = b.U8() % 6;
    // Dense records (kinds 4, 5) follow a dense record back to back, or start
    // a write inside its first page after zeros; anything else starts on a
    // page after the zero padding that ends the write before it.
    const bool dense = kind >= 4;
    const bool continues = dense && !elems.empty() && elems.back().dense && data.size() % kPage != 0;
    if (!continues) data.resize(format::AlignUp(data.size()));
    if (dense && !continues) data.resize(data.size() + (b.U8() % 8) * 64);
    e.offset = data.size();
    switch (kind) {
      case 0:
      case 1:
      case 4:
      case 5: {
        const size_t key_len = 1 + b.U8() % format::kMaxKeyBytes;
        const uint8_t size_class = b.U8();
        // Mostly small; 1 in 128 large enough to cross the 4 MiB read window
        // (rare: megabyte inputs cost the fuzzer a second each).
        uint64_t payload_len = 1 + (size_class >= 254 ? b.U24() % (5u << 20) : b.U16());
        const uint8_t damage = b.U8();
        const uint16_t damage_at = b.U16();
        const uint8_t fill = b.U8();
        // The damage byte's high bit, unused by the damage kinds, picks the
        // compact header for a dense record.
        e.dense = dense;
        e.compact = dense && (damage & 0x80) != 0;
        const uint16_t flags = e.compact ? format::kRecordDense | format::kRecordCompact
                                         : dense ? format::kRecordDense : 0;
        if (format::AlignUp(data.size() + format::RecordBytes(key_len, payload_len, flags)) > kMaxSegmentBytes) {
          payload_len = 1;
        }
        for (size_t i = 0; i < key_len; ++i) e.key.push_back(static_cast<char>(b.U8()));
        e.kind = Element::kRecord;
        e.payload_len = payload_len;
        e.bytes = format::RecordBytes(key_len, payload_len, flags);
        data.resize(e.offset + e.bytes);
        uint8_t* rec = data.data() + e.offset;
        uint8_t* payload = rec + format::PayloadOffset(key_len, payload_len, flags);
        // A payload the fuzzer steers (fill 0 gives zero pages) without
        // copying megabytes out of the input; memset keeps it cheap.
        for (uint64_t i = 0; i < payload_len; i += 512) {
          std::memset(payload + i, static_cast<uint8_t>(fill * (i / 512 + 1)),
                      std::min<uint64_t>(512, payload_len - i));
        }
        format::RecordHeader h;
        h.flags = flags;
        h.key_len = static_cast<uint16_t>(key_len);
        h.segment_id = kSeg;
        h.generation = kGen;
        h.ns_id = damage_at;
        h.sequence = elems.size();
        h.payload_len = payload_len;
        h.payload_checksum = format::Checksum(payload, payload_len);
        switch (damage % 8) {
          case 1: h.generation = kGen + 1; e.stale = true; break;
          case 2: h.segment_id = kSeg + 1; e.stale = true; break;
          default: break;
        }
        format::EncodeRecordHeader(h, e.key, rec);
        switch (damage % 8) {
          case 3:  // one byte of the header or key
            rec[damage_at % (format::HeaderBytes(flags) + key_len)] ^= static_cast<uint8_t>(fill | 1);
            e.header_ok = false;
            e.magic_ok = damage_at % (format::HeaderBytes(flags) + key_len) >= 4;
            break;
          case 4:  // one byte of the payload
            payload[damage_at % payload_len] ^= static_cast<uint8_t>(fill | 1);
            e.payload_ok = false;
            break;
          default: break;
        }
        break;
      }
      case 2: {
        const uint8_t n = b.U8();
        e.kind = Element::kZero;
        // Mostly 1-4 pages; 1 in 256 is 5 MiB, to move the read window.
        e.bytes = (n == 0xff ? 1280 : n % 4 + 1) * kPage;
        data.resize(std::min<uint64_t>(e.offset + e.bytes, kMaxSegmentBytes));
        e.bytes = data.size() - e.offset;
        break;
      }
      default: {
        e.kind = Element::kGarbage;
        e.bytes = kPage;
        data.resize(e.offset + kPage);
        for (size_t i = 0; i < 16; ++i) data[e.offset + i] = b.U8();
        break;
      }
    }
    if (e.bytes > 0) elems.push_back(std::move(e));
  }
  data.resize(format::AlignUp(data.size()));  // the last write's padding
  if (data.size() < 2 * kPage) data.resize(2 * kPage);

  // Segment size: exact, or cut short so the last records do not fit.
  const uint8_t cut = b.U8();
  uint64_t segment_size = data.size();
  if (cut & 0x80) segment_size -= std::min<uint64_t>(segment_size - 2 * kPage, (cut & 0x7f) * kPage);
  const size_t stop_after = (cut & 0x40) ? 1 + b.U8() % 8 : SIZE_MAX;

  Scan s = RunScanner(data, data.size(), segment_size, max_payload, 0, verify, resync, stop_after);
  FUZZ_CHECK(s.status.ok());  // every read lies inside the file

  // What the scanner must return: the valid records, all of them with resync,
  // else those before the first element that is not one.
  std::vector<const Element*> want;
  bool torn = false;
  for (const Element& e : elems) {
    const bool valid = e.kind == Element::kRecord && e.header_ok && !e.stale &&
                       e.payload_len <= max_payload && e.offset + e.bytes <= segment_size &&
                       (!verify || e.payload_ok);
    if (valid) {
      want.push_back(&e);
      continue;
    }
    if (resync) continue;
    if (e.kind == Element::kRecord && e.stale && e.header_ok && e.payload_len <= max_payload &&
        e.offset + e.bytes <= segment_size) {
      torn = false;  // a whole record of another life: where this life's writes end
    } else if (e.dense) {
      // Its magic is never zero. Where a full header would not fit, only a
      // compact record's intact magic is read at all.
      torn = e.offset + format::kRecordHeaderBytes <= segment_size ||
             (e.compact && e.magic_ok && e.offset + format::kCompactHeaderBytes <= segment_size);
    } else if (e.offset + kPage <= segment_size) {
      torn = !AllZero(data.data() + e.offset, kPage);
    }
    break;
  }
  if (want.size() >= stop_after) {
    want.resize(stop_after);  // the visitor stopped the scan: what follows was not looked at
  } else if (!resync) {
    FUZZ_CHECK(s.result.torn == torn);
  }
  FUZZ_CHECK(s.found.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    FUZZ_CHECK(s.found[i].offset == want[i]->offset);
    FUZZ_CHECK(s.found[i].payload_len == want[i]->payload_len);
    FUZZ_CHECK(s.found[i].key == want[i]->key);
  }
  if (want.empty() && stop_after == SIZE_MAX) FUZZ_CHECK(s.result.end == kPage);
}

}  // namespace
}  // namespace kvtier

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::span<const uint8_t> rest(data + 1, size - 1);
  kvtier::Bytes b(rest);
  if (mode & 4) {
    kvtier::FuzzStructured(mode, b);
  } else {
    kvtier::FuzzRaw(mode, b, rest);
  }
  return 0;
}
