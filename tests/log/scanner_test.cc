// SegmentScanner over dense records (format 3, and format 4's compact
// headers): records back to back inside pages, zero padding to the end of a
// write, a torn or corrupt record in the middle of a page, a record in a
// segment's last bytes, and ZeroRange over ranges that do not start on a page.
#include "log/scanner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace kvtier {
namespace {

constexpr uint64_t kPage = format::kPage;
constexpr uint32_t kSeg = 3, kGen = 7;
constexpr uint64_t kSegmentBytes = 16 * kPage;

// A segment file in memory; PunchHole can be turned off to take ZeroRange's
// write path.
class VecFile final : public File {
 public:
  explicit VecFile(uint64_t size) : data_(size, 0) {}
  const std::string& path() const override { return path_; }
  Status ReadAt(uint64_t offset, void* buf, size_t n) override {
    if (offset % kPage != 0 || n % kPage != 0) return Status::InvalidArgument("unaligned read (O_DIRECT)");
    if (offset > data_.size() || n > data_.size() - offset) return Status::Corruption("short read");
    std::memcpy(buf, data_.data() + offset, n);
    return Status::OK();
  }
  Status WriteAt(uint64_t offset, const void* buf, size_t n) override {
    if (offset % kPage != 0 || n % kPage != 0) return Status::InvalidArgument("unaligned write (O_DIRECT)");
    std::memcpy(data_.data() + offset, buf, n);
    ++writes;
    return Status::OK();
  }
  Status Sync() override { return Status::OK(); }
  Status Allocate(uint64_t, uint64_t) override { return Status::OK(); }
  Status PunchHole(uint64_t offset, uint64_t len) override {
    if (!can_punch) return Status::NotSupported("no punch");
    std::memset(data_.data() + offset, 0, len);
    return Status::OK();
  }
  Result<uint64_t> Size() override { return data_.size(); }
  Status Truncate(uint64_t) override { return Status::NotSupported("fixed size"); }

  std::vector<uint8_t> data_;
  bool can_punch = true;
  int writes = 0;

 private:
  std::string path_ = "mem://segment";
};

struct Placed {
  uint64_t offset, bytes;
  std::string key;
};

// Writes a record at `off` (dense or not) and returns where it lies.
Placed PutRecord(VecFile* f, uint64_t off, const std::string& key, uint64_t payload_len, bool dense,
                 uint8_t fill, bool compact = false) {
  const uint16_t flags = dense ? (compact ? format::kRecordDense | format::kRecordCompact : format::kRecordDense) : 0;
  const uint64_t bytes = format::RecordBytes(key.size(), payload_len, flags);
  uint8_t* rec = f->data_.data() + off;
  uint8_t* payload = rec + format::PayloadOffset(key.size(), payload_len, flags);
  for (uint64_t i = 0; i < payload_len; ++i) payload[i] = static_cast<uint8_t>(fill + i * 7);
  format::RecordHeader h;
  h.flags = flags;
  h.key_len = static_cast<uint16_t>(key.size());
  h.segment_id = kSeg;
  h.generation = kGen;
  h.ns_id = 42;
  h.payload_len = payload_len;
  h.payload_checksum = format::Checksum(payload, payload_len);
  format::EncodeRecordHeader(h, key, rec);
  return {off, bytes, key};
}

// Three dense records in the first write (padded to its page end), a
// non-dense record on the next page, zeros after. The dense run may start
// `skew` bytes into its page, after zeros (where it lay in the write ring).
struct Layout {
  VecFile file{kSegmentBytes};
  std::vector<Placed> recs;
  explicit Layout(uint64_t skew = 0) {
    uint64_t off = format::kSegmentDataStart + skew;
    for (int i = 0; i < 3; ++i) {
      recs.push_back(PutRecord(&file, off, "dense-" + std::to_string(i), 3000 + 1000 * i, true, uint8_t(i)));
      off += recs.back().bytes;
    }
    off = format::AlignUp(off);
    recs.push_back(PutRecord(&file, off, "paged", 5000, false, 9));
  }
};

std::vector<ScannedRecord> ScanAll(File* f, bool resync, ScanResult* r) {
  std::vector<ScannedRecord> out;
  SegmentScanner s(f, kSeg, kGen, kSegmentBytes, 1 << 20);
  Status st = s.Scan(0, /*verify_payload=*/true, resync, [&](const ScannedRecord& rec) {
    out.push_back(rec);
    out.back().key = {};  // views die with the callback
    out.back().payload = {};
    return true;
  }, r);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

TEST(ScannerDense, FindsRecordsInsidePagesAndStepsOverPadding) {
  Layout l;
  // The dense records share pages: 3 records of 3-5 KiB in 4 pages, not 6.
  EXPECT_NE(l.recs[1].offset % kPage, 0u);
  EXPECT_EQ(l.recs[3].offset, format::kSegmentDataStart + 3 * kPage);
  ScanResult r;
  auto found = ScanAll(&l.file, false, &r);
  ASSERT_EQ(found.size(), 4u);
  for (size_t i = 0; i < found.size(); ++i) {
    EXPECT_EQ(found[i].offset, l.recs[i].offset) << i;
    EXPECT_EQ(found[i].record_bytes, l.recs[i].bytes) << i;
    EXPECT_EQ(format::IsDense(found[i].header.flags), i < 3) << i;
  }
  EXPECT_FALSE(r.torn);
  EXPECT_EQ(r.end, l.recs[3].offset + l.recs[3].bytes);
}

// Compact records of 64 bytes (48-byte header, 8-byte key and payload) from
// the first data page to the segment's end: the last starts 64 bytes before
// it, closer than a full header is long.
struct CompactLayout {
  VecFile file{kSegmentBytes};
  std::vector<Placed> recs;
  CompactLayout() {
    for (uint64_t off = format::kSegmentDataStart; off < kSegmentBytes; off += 64) {
      std::string key(8, '\0');
      const uint64_t i = recs.size();
      std::memcpy(key.data(), &i, 8);
      recs.push_back(PutRecord(&file, off, key, 8, true, uint8_t(i), /*compact=*/true));
    }
  }
};

TEST(ScannerCompact, FindsTheRecordInTheSegmentsLastBytes) {
  for (bool resync : {false, true}) {
    CompactLayout l;
    ASSERT_EQ(l.recs.back().bytes, 64u);
    ASSERT_EQ(l.recs.back().offset, kSegmentBytes - 64);
    ScanResult r;
    auto found = ScanAll(&l.file, resync, &r);
    ASSERT_EQ(found.size(), l.recs.size()) << "resync " << resync;
    EXPECT_EQ(found.back().offset, kSegmentBytes - 64);
    EXPECT_TRUE(format::IsCompact(found.back().header.flags));
    EXPECT_EQ(r.end, kSegmentBytes);
    EXPECT_EQ(r.corrupt_regions, 0u);
  }
}

TEST(ScannerCompact, ResyncFindsTheCompactRecordAfterACorruptOne) {
  CompactLayout l;
  l.file.data_[l.recs[5].offset + 30] ^= 1;  // inside record 5's header
  ScanResult r;
  auto found = ScanAll(&l.file, /*resync=*/true, &r);
  ASSERT_EQ(found.size(), l.recs.size() - 1);
  EXPECT_EQ(found[5].offset, l.recs[6].offset);
  EXPECT_EQ(r.corrupt_regions, 1u);
  // Without resync the scan ends at the damage, as for a torn write.
  ScanResult plain;
  EXPECT_EQ(ScanAll(&l.file, /*resync=*/false, &plain).size(), 5u);
  EXPECT_TRUE(plain.torn);
}

TEST(ScannerDense, ARunMayStartInsideItsPageAfterZeros) {
  Layout l(1000);
  EXPECT_EQ(l.recs[0].offset, format::kSegmentDataStart + 1000);
  for (bool resync : {false, true}) {
    ScanResult r;
    auto found = ScanAll(&l.file, resync, &r);
    ASSERT_EQ(found.size(), 4u) << resync;
    EXPECT_EQ(found[0].offset, l.recs[0].offset);
    EXPECT_EQ(found[3].offset, l.recs[3].offset);
    EXPECT_FALSE(r.torn);
    EXPECT_EQ(r.corrupt_regions, 0u);
  }
  // Garbage in that gap is damage, not padding.
  l.file.data_[format::kSegmentDataStart + 8] = 0x5a;
  ScanResult r;
  EXPECT_TRUE(ScanAll(&l.file, false, &r).empty());
  EXPECT_TRUE(r.torn);
  auto found = ScanAll(&l.file, true, &r);
  EXPECT_EQ(found.size(), 4u);
  EXPECT_EQ(r.corrupt_regions, 1u);
}

TEST(ScannerDense, ATornRecordInsideAPageEndsTheScanThere) {
  Layout l;
  l.file.data_[l.recs[1].offset + 500] ^= 0x10;  // the middle record's payload
  ScanResult r;
  auto found = ScanAll(&l.file, false, &r);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(r.torn);
  EXPECT_EQ(r.end, l.recs[0].offset + l.recs[0].bytes);  // not page aligned
  EXPECT_NE(r.end % kPage, 0u);
}

TEST(ScannerDense, ResyncFindsTheRecordsAfterACorruptOneInTheSamePage) {
  Layout l;
  l.file.data_[l.recs[1].offset + 30] ^= 0x01;  // the middle record's header
  ScanResult r;
  auto found = ScanAll(&l.file, true, &r);
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].offset, l.recs[0].offset);
  EXPECT_EQ(found[1].offset, l.recs[2].offset);
  EXPECT_EQ(found[2].offset, l.recs[3].offset);
  ASSERT_EQ(r.corrupt_regions, 1u);
  ASSERT_EQ(r.corrupt.size(), 1u);
  EXPECT_EQ(r.corrupt[0].first, l.recs[1].offset);
  EXPECT_EQ(r.corrupt[0].second, l.recs[2].offset - l.recs[1].offset);
}

TEST(ScannerDense, ARecordWithItsOwnPagesMustStartOnOne) {
  Layout l;
  // Overwrite the second dense record with a valid non-dense one at the same
  // (unaligned) place: no writer puts it there, so it is damage.
  PutRecord(&l.file, l.recs[1].offset, "dense-1", 100, false, 1);
  ScanResult r;
  auto found = ScanAll(&l.file, false, &r);
  EXPECT_EQ(found.size(), 1u);
  EXPECT_TRUE(r.torn);
}

TEST(ScannerDense, ZeroRangeCutsATailThatStartsInsideAPage) {
  for (bool punch : {true, false}) {
    Layout l;
    l.file.can_punch = punch;
    const uint64_t cut = l.recs[0].offset + l.recs[0].bytes;
    ASSERT_TRUE(ZeroRange(&l.file, cut, kSegmentBytes - cut).ok());
    EXPECT_EQ(l.file.writes > 0, !punch);
    EXPECT_TRUE(std::all_of(l.file.data_.begin() + static_cast<long>(cut), l.file.data_.end(),
                            [](uint8_t b) { return b == 0; }));
    ScanResult r;
    auto found = ScanAll(&l.file, false, &r);
    ASSERT_EQ(found.size(), 1u) << punch;  // the first record survives the cut
    EXPECT_FALSE(r.torn);
    EXPECT_EQ(r.end, cut);
  }
}

TEST(ScannerDense, ZeroRangeKeepsBytesOnBothSidesOfAnInnerRange) {
  VecFile f(4 * kPage);
  std::fill(f.data_.begin(), f.data_.end(), uint8_t{0xab});
  f.can_punch = false;
  ASSERT_TRUE(ZeroRange(&f, kPage + 100, 2 * kPage).ok());
  for (uint64_t i = 0; i < f.data_.size(); ++i) {
    const bool zeroed = i >= kPage + 100 && i < 3 * kPage + 100;
    ASSERT_EQ(f.data_[i], zeroed ? 0 : 0xab) << i;
  }
}

}  // namespace
}  // namespace kvtier
