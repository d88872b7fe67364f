// The shared tier's segment summary (src/remote/summary.*): version 2 carries
// each record's flags (dense records, format 3), version 3 lets them mark a
// compact header (format 4); versions 1 and 2 are still read.
#include <gtest/gtest.h>

#ifdef KVTIER_WITH_CEPH

#include <string>

#include "format/coding.h"
#include "format/record.h"
#include "remote/summary.h"

namespace kvtier::remote {
namespace {

SegmentSummary TwoEntries() {
  SegmentSummary s;
  s.store_id = std::string(32, 'a');
  s.segment = 3;
  s.generation = 2;
  s.epoch = 9;
  s.bytes = 1 << 20;
  s.part_bytes = 4 << 20;
  s.uploaded_unix_ms = 1700000000000ull;
  s.namespaces.emplace_back(42, "spec");
  s.entries.push_back(SummaryEntry{42, "paged-key", 4096, 65536, 7, 1, 0});
  s.entries.push_back(SummaryEntry{42, "dense-key", 3 * 4096 + 40, 4096, 8, 2, format::kRecordDense});
  return s;
}

TEST(SegmentSummary, RecordFlagsRoundTrip) {
  auto r = DecodeSummary(EncodeSummary(TwoEntries()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->entries.size(), 2u);
  EXPECT_EQ(r->entries[0].flags, 0);
  EXPECT_EQ(r->entries[1].flags, format::kRecordDense);
  EXPECT_EQ(r->entries[1].offset, 3 * 4096u + 40);
}

TEST(SegmentSummary, MisplacedOrUnknownRecordsAreCorruption) {
  SegmentSummary s = TwoEntries();
  s.entries[1].flags = 0;  // a record with its own pages must start on one
  EXPECT_EQ(DecodeSummary(EncodeSummary(s)).status().code(), Code::kCorruption);
  s.entries[1].flags = 4;
  EXPECT_EQ(DecodeSummary(EncodeSummary(s)).status().code(), Code::kCorruption);
  s = TwoEntries();
  s.entries[1].offset += 4;  // not 8-byte aligned
  EXPECT_EQ(DecodeSummary(EncodeSummary(s)).status().code(), Code::kCorruption);
}

// Version 1, as builds before dense records wrote it: no flags per entry.
std::string EncodeV1(const SegmentSummary& s) {
  std::string out;
  auto str = [&](const std::string& v) {
    format::AppendFixed32(&out, static_cast<uint32_t>(v.size()));
    out.append(v);
  };
  format::AppendFixed32(&out, 0x5352564Bu);
  format::AppendFixed32(&out, 1);
  str(s.store_id);
  format::AppendFixed32(&out, s.segment);
  format::AppendFixed32(&out, s.generation);
  format::AppendFixed64(&out, s.epoch);
  format::AppendFixed64(&out, s.bytes);
  format::AppendFixed64(&out, s.part_bytes);
  format::AppendFixed64(&out, s.uploaded_unix_ms);
  format::AppendFixed32(&out, static_cast<uint32_t>(s.namespaces.size()));
  for (const auto& [id, spec] : s.namespaces) {
    format::AppendFixed64(&out, id);
    str(spec);
  }
  format::AppendFixed32(&out, static_cast<uint32_t>(s.entries.size()));
  for (const SummaryEntry& e : s.entries) {
    format::AppendFixed64(&out, e.ns);
    format::AppendFixed16(&out, static_cast<uint16_t>(e.key.size()));
    out.append(e.key);
    format::AppendFixed64(&out, e.offset);
    format::AppendFixed64(&out, e.payload_len);
    format::AppendFixed64(&out, e.checksum);
    format::AppendFixed64(&out, e.sequence);
  }
  format::AppendFixed64(&out, format::Checksum(out.data(), out.size()));
  return out;
}

TEST(SegmentSummary, VersionOneIsReadWithoutFlags) {
  SegmentSummary s = TwoEntries();
  s.entries.pop_back();  // version 1 had no dense records
  auto r = DecodeSummary(EncodeV1(s));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->entries.size(), 1u);
  EXPECT_EQ(r->entries[0].key, "paged-key");
  EXPECT_EQ(r->entries[0].flags, 0);
  // A version-2 body labelled 1 does not parse (trailing flag bytes).
  std::string v2 = EncodeSummary(s);
  format::PutFixed32(reinterpret_cast<uint8_t*>(v2.data()) + 4, 1);
  format::PutFixed64(reinterpret_cast<uint8_t*>(v2.data()) + v2.size() - 8, format::Checksum(v2.data(), v2.size() - 8));
  EXPECT_EQ(DecodeSummary(v2).status().code(), Code::kCorruption);
  format::PutFixed32(reinterpret_cast<uint8_t*>(v2.data()) + 4, 4);
  format::PutFixed64(reinterpret_cast<uint8_t*>(v2.data()) + v2.size() - 8, format::Checksum(v2.data(), v2.size() - 8));
  EXPECT_EQ(DecodeSummary(v2).status().code(), Code::kNotSupported);
}

// Relabels an encoded summary's version and re-signs it.
std::string WithVersion(std::string s, uint32_t version) {
  format::PutFixed32(reinterpret_cast<uint8_t*>(s.data()) + 4, version);
  format::PutFixed64(reinterpret_cast<uint8_t*>(s.data()) + s.size() - 8, format::Checksum(s.data(), s.size() - 8));
  return s;
}

TEST(SegmentSummary, CompactHeadersNeedVersionThree) {
  SegmentSummary s = TwoEntries();
  s.entries[1].flags = format::kRecordDense | format::kRecordCompact;
  const std::string v3 = EncodeSummary(s);
  auto r = DecodeSummary(v3);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->entries[1].flags, format::kRecordDense | format::kRecordCompact);
  EXPECT_EQ(DecodeSummary(WithVersion(v3, 2)).status().code(), Code::kCorruption) << "version 2 had no compact headers";
  s.entries[1].flags = format::kRecordCompact;  // never without kRecordDense
  EXPECT_EQ(DecodeSummary(EncodeSummary(s)).status().code(), Code::kCorruption);
  s.entries[1].flags = format::kRecordDense;
  EXPECT_TRUE(DecodeSummary(WithVersion(EncodeSummary(s), 2)).ok()) << "version 2 is still read";
}

}  // namespace
}  // namespace kvtier::remote

#endif  // KVTIER_WITH_CEPH
