#include "format/record.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "format/coding.h"

namespace kvtier::format {
namespace {

std::array<uint8_t, 16> TestStoreId() {
  std::array<uint8_t, 16> id;
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(0xa0 + i);
  return id;
}

std::string Bytes(const uint8_t* p, size_t n) { return std::string(reinterpret_cast<const char*>(p), n); }

// ---------------------------------------------------------------------------
// Coding

TEST(CodingTest, FixedRoundTripAndLittleEndian) {
  uint8_t b[8];
  PutFixed16(b, 0x1234);
  EXPECT_EQ(b[0], 0x34);
  EXPECT_EQ(b[1], 0x12);
  EXPECT_EQ(GetFixed16(b), 0x1234);
  PutFixed32(b, 0xdeadbeef);
  EXPECT_EQ(b[0], 0xef);
  EXPECT_EQ(b[3], 0xde);
  EXPECT_EQ(GetFixed32(b), 0xdeadbeefu);
  PutFixed64(b, 0x0102030405060708ull);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(b[i], 8 - i);
  EXPECT_EQ(GetFixed64(b), 0x0102030405060708ull);
  for (uint64_t v : {0ull, 1ull, ~0ull, 1ull << 63, 0x8000000000000001ull}) {
    PutFixed64(b, v);
    EXPECT_EQ(GetFixed64(b), v);
  }
  std::string s;
  AppendFixed32(&s, 7);
  AppendFixed64(&s, 9);
  AppendFixed16(&s, 3);
  ASSERT_EQ(s.size(), 14u);
  EXPECT_EQ(GetFixed32(reinterpret_cast<const uint8_t*>(s.data())), 7u);
  EXPECT_EQ(GetFixed64(reinterpret_cast<const uint8_t*>(s.data()) + 4), 9u);
  EXPECT_EQ(GetFixed16(reinterpret_cast<const uint8_t*>(s.data()) + 12), 3u);
}

TEST(ChecksumTest, IsXxh3) {
  const std::string s = "kvtier";
  EXPECT_EQ(Checksum(s.data(), s.size()), XXH3_64bits(s.data(), s.size()));
}

TEST(StoreIdHexTest, LowercaseHex) {
  std::array<uint8_t, 16> id{};
  EXPECT_EQ(StoreIdHex(id), std::string(32, '0'));
  EXPECT_EQ(StoreIdHex(TestStoreId()), "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf");
}

// ---------------------------------------------------------------------------
// Superblock

Superblock TestSuperblock() {
  Superblock sb;
  sb.store_id = TestStoreId();
  sb.segment_size = 256ull << 20;
  sb.created_unix_ms = 1700000000123ull;
  sb.flags = 0;
  return sb;
}

TEST(SuperblockTest, RoundTrip) {
  std::array<uint8_t, kSuperblockEncodedBytes> buf;
  EncodeSuperblock(TestSuperblock(), buf);
  auto r = DecodeSuperblock(buf);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format_version, kFormatVersion);
  EXPECT_EQ(r->store_id, TestStoreId());
  EXPECT_EQ(r->segment_size, 256ull << 20);
  EXPECT_EQ(r->created_unix_ms, 1700000000123ull);
  EXPECT_EQ(r->flags, 0u);
}

TEST(SuperblockTest, GoldenLayout) {
  std::array<uint8_t, kSuperblockEncodedBytes> buf;
  EncodeSuperblock(TestSuperblock(), buf);
  EXPECT_EQ(Bytes(buf.data(), 4), "KVSB");
  EXPECT_EQ(GetFixed32(buf.data() + 4), kFormatVersion);
  EXPECT_EQ(std::memcmp(buf.data() + 8, TestStoreId().data(), 16), 0);
  EXPECT_EQ(GetFixed64(buf.data() + 24), 256ull << 20);
  EXPECT_EQ(GetFixed64(buf.data() + 32), 1700000000123ull);
  EXPECT_EQ(GetFixed64(buf.data() + 40), 0u);
  EXPECT_EQ(GetFixed64(buf.data() + 48), 0u);
  EXPECT_EQ(GetFixed64(buf.data() + 56), XXH3_64bits(buf.data(), 56));
}

TEST(SuperblockTest, DecodesFromLargerBuffer) {
  std::vector<uint8_t> page(kPage, 0);
  EncodeSuperblock(TestSuperblock(), std::span<uint8_t, kSuperblockEncodedBytes>(page.data(), 64));
  EXPECT_TRUE(DecodeSuperblock(page).ok());
}

TEST(SuperblockTest, EveryBitFlipDetected) {
  std::array<uint8_t, kSuperblockEncodedBytes> buf;
  EncodeSuperblock(TestSuperblock(), buf);
  for (size_t bit = 0; bit < buf.size() * 8; ++bit) {
    auto copy = buf;
    copy[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    auto r = DecodeSuperblock(copy);
    ASSERT_FALSE(r.ok()) << "bit " << bit;
    EXPECT_EQ(r.status().code(), Code::kCorruption) << "bit " << bit;
  }
}

TEST(SuperblockTest, TruncatedRejected) {
  std::array<uint8_t, kSuperblockEncodedBytes> buf;
  EncodeSuperblock(TestSuperblock(), buf);
  for (size_t n = 0; n < buf.size(); ++n) {
    auto r = DecodeSuperblock(std::span<const uint8_t>(buf.data(), n));
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), Code::kCorruption);
  }
}

TEST(SuperblockTest, BadMagic) {
  std::array<uint8_t, kSuperblockEncodedBytes> buf{};
  auto r = DecodeSuperblock(buf);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_EQ(r.status().message(), "not a kvtier superblock");
}

TEST(SuperblockTest, NewerVersionNotSupported) {
  Superblock sb = TestSuperblock();
  sb.format_version = kFormatVersion + 1;
  std::array<uint8_t, kSuperblockEncodedBytes> buf;
  EncodeSuperblock(sb, buf);
  auto r = DecodeSuperblock(buf);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotSupported);
  EXPECT_EQ(r.status().message(), "format version " + std::to_string(kFormatVersion + 1) +
                                      " is newer than this build supports (" + std::to_string(kFormatVersion) + ")");
}

TEST(SuperblockTest, OlderLayoutNotSupported) {
  // Format 1 placed every payload right after its key; reading it with
  // today's layout would find no payload where it looks.
  Superblock sb = TestSuperblock();
  sb.format_version = 1;
  std::array<uint8_t, kSuperblockEncodedBytes> buf;
  EncodeSuperblock(sb, buf);
  auto r = DecodeSuperblock(buf);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotSupported);
  EXPECT_NE(r.status().message().find("older kvtier"), std::string::npos) << r.status().ToString();
}

TEST(SuperblockTest, VersionZeroIsCorruption) {
  Superblock sb = TestSuperblock();
  sb.format_version = 0;
  std::array<uint8_t, kSuperblockEncodedBytes> buf;
  EncodeSuperblock(sb, buf);
  EXPECT_EQ(DecodeSuperblock(buf).status().code(), Code::kCorruption);
}

TEST(SuperblockTest, SegmentSizeChecked) {
  for (uint64_t size : std::initializer_list<uint64_t>{0ull, kMinSegmentBytes - 1, kMinSegmentBytes + 4096, (3ull << 19),
                        kMaxSegmentBytes + (1ull << 20), ~0ull}) {
    Superblock sb = TestSuperblock();
    sb.segment_size = size;
    std::array<uint8_t, kSuperblockEncodedBytes> buf;
    EncodeSuperblock(sb, buf);
    auto r = DecodeSuperblock(buf);
    ASSERT_FALSE(r.ok()) << size;
    EXPECT_EQ(r.status().code(), Code::kCorruption) << size;
  }
  for (uint64_t size : std::initializer_list<uint64_t>{kMinSegmentBytes, 3ull << 20, kMaxSegmentBytes}) {
    Superblock sb = TestSuperblock();
    sb.segment_size = size;
    std::array<uint8_t, kSuperblockEncodedBytes> buf;
    EncodeSuperblock(sb, buf);
    EXPECT_TRUE(DecodeSuperblock(buf).ok()) << size;
  }
}

TEST(SuperblockTest, NonZeroReservedRejectedEvenWithValidChecksum) {
  std::array<uint8_t, kSuperblockEncodedBytes> buf;
  EncodeSuperblock(TestSuperblock(), buf);
  PutFixed64(buf.data() + 48, 1);
  PutFixed64(buf.data() + 56, XXH3_64bits(buf.data(), 56));
  EXPECT_EQ(DecodeSuperblock(buf).status().code(), Code::kCorruption);
}

// ---------------------------------------------------------------------------
// Segment header

SegmentHeader TestSegmentHeader() {
  SegmentHeader h;
  h.segment_id = 42;
  h.generation = 7;
  h.epoch = 123456789;
  h.store_id = TestStoreId();
  h.segment_size = 64ull << 20;
  h.opened_unix_ms = 1700000000999ull;
  return h;
}

TEST(SegmentHeaderTest, RoundTrip) {
  std::array<uint8_t, kSegmentHeaderEncodedBytes> buf;
  EncodeSegmentHeader(TestSegmentHeader(), buf);
  EXPECT_EQ(Bytes(buf.data(), 4), "KVSG");
  EXPECT_EQ(GetFixed16(buf.data() + 4), kFormatVersion);
  EXPECT_EQ(GetFixed32(buf.data() + 8), 42u);
  EXPECT_EQ(GetFixed32(buf.data() + 12), 7u);
  EXPECT_EQ(GetFixed64(buf.data() + 16), 123456789u);
  EXPECT_EQ(GetFixed64(buf.data() + 40), 64ull << 20);
  EXPECT_EQ(GetFixed64(buf.data() + 64), XXH3_64bits(buf.data(), 64));
  auto r = DecodeSegmentHeader(buf);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->segment_id, 42u);
  EXPECT_EQ(r->generation, 7u);
  EXPECT_EQ(r->epoch, 123456789u);
  EXPECT_EQ(r->store_id, TestStoreId());
  EXPECT_EQ(r->segment_size, 64ull << 20);
  EXPECT_EQ(r->opened_unix_ms, 1700000000999ull);
}

// A segment of an older format (still opened) decodes, and is written back
// as the current format with every field kept: what the record fuzzer's
// round-trip property says (tests/fuzz/corpus/record_regress).
TEST(SegmentHeaderTest, AnOlderFormatDecodesAndReencodesAsTheCurrentOne) {
  std::array<uint8_t, kSegmentHeaderEncodedBytes> old;
  EncodeSegmentHeader(TestSegmentHeader(), old);
  PutFixed16(old.data() + 4, static_cast<uint16_t>(kMinFormatVersion));
  PutFixed64(old.data() + 64, XXH3_64bits(old.data(), 64));
  auto r = DecodeSegmentHeader(old);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::array<uint8_t, kSegmentHeaderEncodedBytes> again;
  EncodeSegmentHeader(*r, again);
  EXPECT_EQ(GetFixed16(again.data() + 4), kFormatVersion);
  EXPECT_EQ(std::memcmp(again.data() + 6, old.data() + 6, 64 - 6), 0);
  EXPECT_EQ(std::memcmp(again.data(), old.data(), 4), 0);
}

TEST(SegmentHeaderTest, EveryBitFlipDetected) {
  std::array<uint8_t, kSegmentHeaderEncodedBytes> buf;
  EncodeSegmentHeader(TestSegmentHeader(), buf);
  for (size_t bit = 0; bit < buf.size() * 8; ++bit) {
    auto copy = buf;
    copy[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    auto r = DecodeSegmentHeader(copy);
    ASSERT_FALSE(r.ok()) << "bit " << bit;
    EXPECT_EQ(r.status().code(), Code::kCorruption) << "bit " << bit;
  }
}

TEST(SegmentHeaderTest, TruncatedAndZeroRejected) {
  std::array<uint8_t, kSegmentHeaderEncodedBytes> buf;
  EncodeSegmentHeader(TestSegmentHeader(), buf);
  for (size_t n = 0; n < buf.size(); ++n) {
    EXPECT_EQ(DecodeSegmentHeader(std::span<const uint8_t>(buf.data(), n)).status().code(),
              Code::kCorruption)
        << n;
  }
  std::vector<uint8_t> zero(kPage, 0);
  EXPECT_EQ(DecodeSegmentHeader(zero).status().code(), Code::kCorruption);
}

TEST(SegmentHeaderTest, NewerVersionNotSupported) {
  std::array<uint8_t, kSegmentHeaderEncodedBytes> buf;
  EncodeSegmentHeader(TestSegmentHeader(), buf);
  PutFixed16(buf.data() + 4, static_cast<uint16_t>(kFormatVersion + 1));
  PutFixed64(buf.data() + 64, XXH3_64bits(buf.data(), 64));
  EXPECT_EQ(DecodeSegmentHeader(buf).status().code(), Code::kNotSupported);
}

TEST(SegmentHeaderTest, BadSegmentSizeRejected) {
  SegmentHeader h = TestSegmentHeader();
  h.segment_size = (1ull << 20) + 1;
  std::array<uint8_t, kSegmentHeaderEncodedBytes> buf;
  EncodeSegmentHeader(h, buf);
  EXPECT_EQ(DecodeSegmentHeader(buf).status().code(), Code::kCorruption);
}

// ---------------------------------------------------------------------------
// Record header

RecordHeader TestRecordHeader(uint64_t payload_len) {
  RecordHeader h;
  h.segment_id = 3;
  h.generation = 9;
  h.ns_id = 0x1122334455667788ull;
  h.sequence = 1000;
  h.payload_len = payload_len;
  h.payload_checksum = 0xabcdef;
  h.written_unix_ms = 1700000001000ull;
  return h;
}

std::vector<uint8_t> EncodeRecord(const RecordHeader& h, std::string_view key) {
  std::vector<uint8_t> rec(RecordBytes(key.size(), h.payload_len, h.flags), 0);
  EncodeRecordHeader(h, key, rec.data());
  return rec;
}

// The documented definition, computed independently with XXH3's streaming API.
uint64_t ReferenceHeaderChecksum(const uint8_t* rec, size_t key_len) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, rec, 64);
  XXH3_64bits_update(st, rec + kRecordHeaderBytes, key_len);
  const uint64_t v = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return v;
}

constexpr uint64_t kMaxPayload = 64ull << 20;

TEST(RecordHeaderTest, RoundTrip) {
  const std::string key = "block/0001";
  const RecordHeader h = TestRecordHeader(12345);
  std::vector<uint8_t> rec = EncodeRecord(h, key);
  std::string_view key_out;
  auto r = DecodeRecordHeader(rec, kMaxPayload, &key_out);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(key_out, key);
  EXPECT_EQ(static_cast<const void*>(key_out.data()),
            static_cast<const void*>(rec.data() + kRecordHeaderBytes));
  EXPECT_EQ(r->key_len, key.size());
  EXPECT_EQ(r->flags, 0u);
  EXPECT_EQ(r->segment_id, 3u);
  EXPECT_EQ(r->generation, 9u);
  EXPECT_EQ(r->ns_id, 0x1122334455667788ull);
  EXPECT_EQ(r->sequence, 1000u);
  EXPECT_EQ(r->payload_len, 12345u);
  EXPECT_EQ(r->payload_checksum, 0xabcdefu);
  EXPECT_EQ(r->written_unix_ms, 1700000001000ull);
  // key_out may be null.
  EXPECT_TRUE(DecodeRecordHeader(rec, kMaxPayload, nullptr).ok());
}

TEST(RecordHeaderTest, GoldenLayout) {
  const std::string key = "abc";
  std::vector<uint8_t> rec = EncodeRecord(TestRecordHeader(4096), key);
  const uint8_t* p = rec.data();
  EXPECT_EQ(Bytes(p, 4), "KVTR");
  EXPECT_EQ(GetFixed16(p + 4), kFormatVersion);
  EXPECT_EQ(GetFixed16(p + 6), 0u);
  EXPECT_EQ(GetFixed16(p + 8), 3u);
  EXPECT_EQ(GetFixed16(p + 10), 0u);
  EXPECT_EQ(GetFixed32(p + 12), 3u);
  EXPECT_EQ(GetFixed32(p + 16), 9u);
  EXPECT_EQ(GetFixed32(p + 20), 0u);
  EXPECT_EQ(GetFixed64(p + 24), 0x1122334455667788ull);
  EXPECT_EQ(GetFixed64(p + 32), 1000u);
  EXPECT_EQ(GetFixed64(p + 40), 4096u);
  EXPECT_EQ(GetFixed64(p + 48), 0xabcdefu);
  EXPECT_EQ(GetFixed64(p + 56), 1700000001000ull);
  EXPECT_EQ(GetFixed64(p + 64), ReferenceHeaderChecksum(p, key.size()));
  EXPECT_EQ(Bytes(p + 72, 3), "abc");
  EXPECT_EQ(PayloadOffset(key.size(), 1000, 0), 75u);  // aligned would take a second page
}

TEST(RecordLayoutTest, PayloadOnItsOwnPageWhenThatIsFree) {
  // Multiples of 4 KiB always start on the second page.
  for (uint64_t p : {uint64_t{4096}, uint64_t{65536}, uint64_t{2} << 20})
    for (size_t k : {size_t{1}, size_t{40}, kMaxKeyBytes}) {
      EXPECT_TRUE(PayloadAligned(k, p, 0));
      EXPECT_EQ(PayloadOffset(k, p, 0), kPage);
      EXPECT_EQ(RecordBytes(k, p, 0), kPage + p);
    }
  // Packed when aligning would cost a page: 3 + 4000 fits one page with the header.
  EXPECT_EQ(PayloadOffset(3, 4000, 0), kRecordHeaderBytes + 3);
  EXPECT_EQ(RecordBytes(3, 4000, 0), kPage);
  // 4050 spills into a second page either way, so it is aligned.
  EXPECT_EQ(PayloadOffset(3, 4050, 0), kPage);
  EXPECT_EQ(RecordBytes(3, 4050, 0), 2 * kPage);
  // Either way the payload ends inside the record.
  for (uint64_t p = 1; p < 3 * kPage; p += 97)
    for (size_t k : {size_t{1}, size_t{16}, size_t{40}, kMaxKeyBytes}) {
      EXPECT_LE(PayloadOffset(k, p, 0) + p, RecordBytes(k, p, 0));
      EXPECT_GE(PayloadOffset(k, p, 0), kRecordHeaderBytes + k);
    }
}

TEST(RecordHeaderTest, KeyLengthBounds) {
  for (size_t n : {size_t{1}, size_t{2}, size_t{128}, kMaxKeyBytes}) {
    const std::string key(n, 'k');
    std::vector<uint8_t> rec = EncodeRecord(TestRecordHeader(1), key);
    std::string_view key_out;
    auto r = DecodeRecordHeader(rec, kMaxPayload, &key_out);
    ASSERT_TRUE(r.ok()) << n << ": " << r.status().ToString();
    EXPECT_EQ(key_out, key);
  }
}

TEST(RecordHeaderTest, EveryBitFlipInHeaderAndKeyDetected) {
  for (const std::string& key : {std::string("k"), std::string("namespace/key/0042"),
                                std::string(kMaxKeyBytes, 'x')}) {
    const std::vector<uint8_t> rec = EncodeRecord(TestRecordHeader(5000), key);
    const size_t covered = kRecordHeaderBytes + key.size();
    for (size_t bit = 0; bit < covered * 8; ++bit) {
      std::vector<uint8_t> copy = rec;
      copy[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      auto r = DecodeRecordHeader(copy, kMaxPayload, nullptr);
      ASSERT_FALSE(r.ok()) << "key " << key.size() << " bit " << bit;
      EXPECT_EQ(r.status().code(), Code::kCorruption) << "bit " << bit;
    }
  }
}

TEST(RecordHeaderTest, TruncatedRejected) {
  const std::string key(100, 'q');
  const std::vector<uint8_t> rec = EncodeRecord(TestRecordHeader(7), key);
  for (size_t n = 0; n < kRecordHeaderBytes + key.size(); ++n) {
    auto r = DecodeRecordHeader(std::span<const uint8_t>(rec.data(), n), kMaxPayload, nullptr);
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), Code::kCorruption) << n;
  }
  EXPECT_TRUE(DecodeRecordHeader(std::span<const uint8_t>(rec.data(), kRecordHeaderBytes + 100),
                                 kMaxPayload, nullptr)
                  .ok());
}

TEST(RecordHeaderTest, TruncatedKeyNeverReadPastInput) {
  // key_len says 255 but only the header is in the buffer: must fail without
  // touching bytes beyond it (ASan checks the heap copy's bounds).
  const std::vector<uint8_t> rec = EncodeRecord(TestRecordHeader(7), std::string(255, 'z'));
  std::vector<uint8_t> exact(rec.begin(), rec.begin() + kRecordHeaderBytes + 10);
  auto r = DecodeRecordHeader(exact, kMaxPayload, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().message();
}

TEST(RecordHeaderTest, PayloadLengthBounds) {
  const std::string key = "k";
  EXPECT_EQ(DecodeRecordHeader(EncodeRecord(TestRecordHeader(0), key), kMaxPayload, nullptr)
                .status()
                .code(),
            Code::kCorruption);
  EXPECT_TRUE(
      DecodeRecordHeader(EncodeRecord(TestRecordHeader(kMaxPayload), key), kMaxPayload, nullptr)
          .ok());
  // Encode a header claiming more than the limit without allocating it.
  std::vector<uint8_t> big(kPage, 0);
  EncodeRecordHeader(TestRecordHeader(kMaxPayload + 1), key, big.data());
  EXPECT_EQ(DecodeRecordHeader(big, kMaxPayload, nullptr).status().code(), Code::kCorruption);
}

TEST(RecordHeaderTest, ZeroPageAndForeignBytesRejected) {
  std::vector<uint8_t> zero(kPage, 0);
  EXPECT_EQ(DecodeRecordHeader(zero, kMaxPayload, nullptr).status().code(), Code::kCorruption);
  std::array<uint8_t, kSuperblockEncodedBytes + 64> sb{};
  EncodeSuperblock(TestSuperblock(), std::span<uint8_t, 64>(sb.data(), 64));
  EXPECT_EQ(DecodeRecordHeader(sb, kMaxPayload, nullptr).status().code(), Code::kCorruption);
}

// Rewrites a header field and re-signs it, to reach the checks behind the
// checksum.
void Resign(std::vector<uint8_t>* rec) {
  const uint16_t key_len = GetFixed16(rec->data() + 8);
  PutFixed64(rec->data() + 64, ReferenceHeaderChecksum(rec->data(), key_len));
}

TEST(RecordHeaderTest, NewerVersionNotSupported) {
  std::vector<uint8_t> rec = EncodeRecord(TestRecordHeader(10), "key");
  PutFixed16(rec.data() + 4, static_cast<uint16_t>(kFormatVersion + 1));
  Resign(&rec);
  EXPECT_EQ(DecodeRecordHeader(rec, kMaxPayload, nullptr).status().code(), Code::kNotSupported);
  PutFixed16(rec.data() + 4, 0);
  Resign(&rec);
  EXPECT_EQ(DecodeRecordHeader(rec, kMaxPayload, nullptr).status().code(), Code::kCorruption);
}

TEST(RecordHeaderTest, ReservedFieldsMustBeZero) {
  for (size_t off : {size_t{10}, size_t{20}}) {
    std::vector<uint8_t> rec = EncodeRecord(TestRecordHeader(10), "key");
    rec[off] = 1;
    Resign(&rec);
    EXPECT_EQ(DecodeRecordHeader(rec, kMaxPayload, nullptr).status().code(), Code::kCorruption)
        << off;
  }
}

TEST(RecordHeaderTest, BadKeyLengthRejected) {
  for (uint16_t key_len : {uint16_t{0}, uint16_t{256}, uint16_t{0xffff}}) {
    std::vector<uint8_t> rec(kPage, 0);
    EncodeRecordHeader(TestRecordHeader(10), "key", rec.data());
    PutFixed16(rec.data() + 8, key_len);
    // Sign over what the key length claims (bounded by the buffer).
    PutFixed64(rec.data() + 64, ReferenceHeaderChecksum(rec.data(), std::min<size_t>(key_len, 1000)));
    EXPECT_EQ(DecodeRecordHeader(rec, kMaxPayload, nullptr).status().code(), Code::kCorruption)
        << key_len;
  }
}

TEST(RecordHeaderTest, KeyIsCoveredByChecksum) {
  std::vector<uint8_t> a = EncodeRecord(TestRecordHeader(10), "key-a");
  std::vector<uint8_t> b = EncodeRecord(TestRecordHeader(10), "key-b");
  EXPECT_NE(GetFixed64(a.data() + 64), GetFixed64(b.data() + 64));
  // Swapping the key under an intact header is detected.
  std::memcpy(a.data() + kRecordHeaderBytes, "key-b", 5);
  EXPECT_EQ(DecodeRecordHeader(a, kMaxPayload, nullptr).status().code(), Code::kCorruption);
}

TEST(RecordBytesTest, PageAligned) {
  for (size_t key_len : {size_t{1}, size_t{17}, kMaxKeyBytes}) {
    for (uint64_t payload : {1ull, 100ull, 4096ull - 73, 4096ull - 72, 4096ull, 4097ull,
                             (1ull << 20) - 1, 1ull << 20, (16ull << 20) + 5}) {
      const uint64_t n = RecordBytes(key_len, payload, 0);
      EXPECT_EQ(n % kPage, 0u) << key_len << " " << payload;
      EXPECT_GE(n, kRecordHeaderBytes + key_len + payload);
      EXPECT_LT(n, kRecordHeaderBytes + key_len + payload + kPage);
    }
  }
  EXPECT_EQ(RecordBytes(1, 4096 - 73, 0), kPage);
  EXPECT_EQ(RecordBytes(1, 4096 - 72, 0), 2 * kPage);
}

TEST(RecordBytesTest, DenseRecordsAreEightByteAlignedWithThePayloadAfterTheKey) {
  for (size_t key_len : {size_t{1}, size_t{17}, kMaxKeyBytes}) {
    for (uint64_t payload : {1ull, 100ull, 4096ull, 4097ull, 65536ull, 256ull << 10}) {
      const uint64_t n = RecordBytes(key_len, payload, kRecordDense);
      EXPECT_EQ(n % kDenseAlign, 0u);
      EXPECT_GE(n, kRecordHeaderBytes + key_len + payload);
      EXPECT_LT(n, kRecordHeaderBytes + key_len + payload + kDenseAlign);
      EXPECT_FALSE(PayloadAligned(key_len, payload, kRecordDense));
      EXPECT_EQ(PayloadOffset(key_len, payload, kRecordDense), kRecordHeaderBytes + key_len);
    }
  }
  // The shapes that motivated it: a 4 KiB payload took two pages, 64 KiB seventeen.
  EXPECT_EQ(RecordBytes(32, 4096, 0), 2 * kPage);
  EXPECT_EQ(RecordBytes(32, 4096, kRecordDense), 4200u);
  EXPECT_EQ(RecordBytes(32, 65536, 0), 17 * kPage);
  EXPECT_EQ(RecordBytes(32, 65536, kRecordDense), 65640u);
  // Pages a record at an offset touches.
  EXPECT_EQ(PageStart(3 * kPage + 8), 3 * kPage);
  EXPECT_EQ(PagedBytes(3 * kPage + 8, 4200), 2 * kPage);
  EXPECT_EQ(PagedBytes(3 * kPage + 4000, 4200), 3 * kPage);
  EXPECT_EQ(PagedBytes(3 * kPage, kPage), kPage);
}

TEST(RecordHeaderTest, DenseFlagRoundTripsAndUnknownFlagsAreCorruption) {
  RecordHeader h = TestRecordHeader(10);
  h.flags = kRecordDense;
  std::vector<uint8_t> rec = EncodeRecord(h, "key");
  auto r = DecodeRecordHeader(rec, kMaxPayload, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->flags, kRecordDense);
  // A flag this build does not know.
  PutFixed16(rec.data() + 6, 2);
  Resign(&rec);
  EXPECT_EQ(DecodeRecordHeader(rec, kMaxPayload, nullptr).status().code(), Code::kCorruption);
  // Version 2 had no dense records: a v2 header claiming one is damaged.
  PutFixed16(rec.data() + 6, kRecordDense);
  PutFixed16(rec.data() + 4, 2);
  Resign(&rec);
  EXPECT_EQ(DecodeRecordHeader(rec, kMaxPayload, nullptr).status().code(), Code::kCorruption);
  PutFixed16(rec.data() + 6, 0);
  Resign(&rec);
  EXPECT_TRUE(DecodeRecordHeader(rec, kMaxPayload, nullptr).ok());  // v2 records are still read
}

// ---------------------------------------------------------------------------
// Compact record header (format 4, dense records)

RecordHeader CompactHeader(uint64_t payload_len) {
  RecordHeader h = TestRecordHeader(payload_len);
  h.flags = kRecordDense | kRecordCompact;
  return h;
}

// The documented definition: the low 32 bits of XXH3-64 over the first 44
// bytes and the key.
uint32_t ReferenceCompactChecksum(const uint8_t* rec, size_t key_len) {
  std::vector<uint8_t> buf(rec, rec + 44);
  buf.insert(buf.end(), rec + kCompactHeaderBytes, rec + kCompactHeaderBytes + key_len);
  return static_cast<uint32_t>(XXH3_64bits(buf.data(), buf.size()));
}

TEST(CompactHeaderTest, GoldenLayoutAndRoundTrip) {
  const std::string key = "abc";
  RecordHeader h = CompactHeader(4096);
  h.sequence = 0x0000'BEEF'1234'5678ull;  // uses the 48th bit's neighbours
  const std::vector<uint8_t> rec = EncodeRecord(h, key);
  EXPECT_EQ(rec.size(), 4152u) << "48 + 3 + 4096, at 8 bytes";
  const uint8_t* p = rec.data();
  EXPECT_EQ(Bytes(p, 4), "KVTD");
  EXPECT_EQ(p[4], 3u);
  EXPECT_EQ(p[5], kRecordDense | kRecordCompact);
  EXPECT_EQ(GetFixed16(p + 6), 0xBEEFu);
  EXPECT_EQ(GetFixed32(p + 8), 0x12345678u);
  EXPECT_EQ(GetFixed32(p + 12), 3u);
  EXPECT_EQ(GetFixed32(p + 16), 9u);
  EXPECT_EQ(GetFixed32(p + 20), 4096u);
  EXPECT_EQ(GetFixed64(p + 24), 0x1122334455667788ull);
  EXPECT_EQ(GetFixed64(p + 32), 0xabcdefu);
  EXPECT_EQ(GetFixed32(p + 40), 1700000001u) << "whole seconds";
  EXPECT_EQ(GetFixed32(p + 44), ReferenceCompactChecksum(p, key.size()));
  EXPECT_EQ(Bytes(p + 48, 3), "abc");
  EXPECT_EQ(PayloadOffset(key.size(), 4096, h.flags), 51u);
  std::string_view key_out;
  auto r = DecodeRecordHeader(rec, kMaxPayload, &key_out);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(key_out, key);
  EXPECT_EQ(static_cast<const void*>(key_out.data()), static_cast<const void*>(p + kCompactHeaderBytes));
  EXPECT_EQ(r->flags, kRecordDense | kRecordCompact);
  EXPECT_EQ(r->key_len, 3u);
  EXPECT_EQ(r->segment_id, 3u);
  EXPECT_EQ(r->generation, 9u);
  EXPECT_EQ(r->ns_id, 0x1122334455667788ull);
  EXPECT_EQ(r->sequence, h.sequence);
  EXPECT_EQ(r->payload_len, 4096u);
  EXPECT_EQ(r->payload_checksum, 0xabcdefu);
  EXPECT_EQ(r->written_unix_ms, 1700000001000ull);
}

TEST(CompactHeaderTest, SavesTwentyFourBytesOnAFourKiBBlock) {
  const uint16_t compact = kRecordDense | kRecordCompact;
  EXPECT_EQ(RecordBytes(32, 4096, kRecordDense), 4200u);
  EXPECT_EQ(RecordBytes(32, 4096, compact), 4176u);
  EXPECT_EQ(PayloadOffset(32, 4096, compact), 80u);
  EXPECT_FALSE(PayloadAligned(32, 4096, compact));
}

TEST(CompactHeaderTest, LargestFieldsRoundTrip) {
  RecordHeader h = CompactHeader(kCompactMaxPayload);
  h.sequence = kCompactMaxSequence;
  h.segment_id = UINT32_MAX;
  h.generation = UINT32_MAX;
  h.written_unix_ms = uint64_t{UINT32_MAX} * 1000;
  std::vector<uint8_t> rec(kPage, 0);
  const std::string key(kMaxKeyBytes, 'k');
  EncodeRecordHeader(h, key, rec.data());
  auto r = DecodeRecordHeader(rec, UINT64_MAX, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sequence, kCompactMaxSequence);
  EXPECT_EQ(r->payload_len, kCompactMaxPayload);
  EXPECT_EQ(r->key_len, kMaxKeyBytes);
  EXPECT_EQ(r->written_unix_ms, h.written_unix_ms);
  // The store's bound still applies.
  EXPECT_EQ(DecodeRecordHeader(rec, kCompactMaxPayload - 1, nullptr).status().code(), Code::kCorruption);
}

TEST(CompactHeaderTest, EveryBitFlipInHeaderAndKeyDetected) {
  for (const std::string& key : {std::string("k"), std::string(32, 'x'), std::string(kMaxKeyBytes, 'y')}) {
    const std::vector<uint8_t> rec = EncodeRecord(CompactHeader(4096), key);
    for (size_t bit = 0; bit < (kCompactHeaderBytes + key.size()) * 8; ++bit) {
      std::vector<uint8_t> copy = rec;
      copy[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      auto r = DecodeRecordHeader(copy, kMaxPayload, nullptr);
      ASSERT_FALSE(r.ok()) << "key " << key.size() << " bit " << bit;
      EXPECT_EQ(r.status().code(), Code::kCorruption) << "bit " << bit;
    }
  }
}

TEST(CompactHeaderTest, TruncatedRejectedWithoutReadingPastTheInput) {
  const std::string key(100, 'q');
  const std::vector<uint8_t> rec = EncodeRecord(CompactHeader(7), key);
  for (size_t n = 0; n < kCompactHeaderBytes + key.size(); ++n) {
    // A heap copy of exactly n bytes: ASan catches a read past it.
    const std::vector<uint8_t> part(rec.begin(), rec.begin() + static_cast<std::ptrdiff_t>(n));
    auto r = DecodeRecordHeader(part, kMaxPayload, nullptr);
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), Code::kCorruption) << n;
  }
  EXPECT_TRUE(DecodeRecordHeader(std::span<const uint8_t>(rec.data(), kCompactHeaderBytes + 100), kMaxPayload,
                                 nullptr)
                  .ok());
}

TEST(CompactHeaderTest, FlagsOtherThanDenseAndCompactAreCorruption) {
  std::vector<uint8_t> rec = EncodeRecord(CompactHeader(10), "key");
  for (uint8_t flags : {uint8_t{0}, uint8_t{kRecordDense}, uint8_t{kRecordCompact}, uint8_t{7}}) {
    std::vector<uint8_t> copy = rec;
    copy[5] = flags;
    PutFixed32(copy.data() + 44, ReferenceCompactChecksum(copy.data(), 3));  // re-signed
    EXPECT_EQ(DecodeRecordHeader(copy, kMaxPayload, nullptr).status().code(), Code::kCorruption) << int(flags);
  }
  // And the full header never carries the compact bit.
  RecordHeader full = TestRecordHeader(10);
  full.flags = kRecordDense;
  std::vector<uint8_t> f = EncodeRecord(full, "key");
  PutFixed16(f.data() + 6, kRecordDense | kRecordCompact);
  Resign(&f);
  EXPECT_EQ(DecodeRecordHeader(f, kMaxPayload, nullptr).status().code(), Code::kCorruption);
}

TEST(CompactHeaderTest, KeyLengthZeroIsCorruption) {
  std::vector<uint8_t> rec = EncodeRecord(CompactHeader(10), "key");
  rec[4] = 0;
  PutFixed32(rec.data() + 44, ReferenceCompactChecksum(rec.data(), 0));
  EXPECT_EQ(DecodeRecordHeader(rec, kMaxPayload, nullptr).status().code(), Code::kCorruption);
}

TEST(CompactHeaderTest, IndexValuesCarryTheFlag) {
  IndexValue v;
  v.offset = 3 * kPage + 40;
  v.payload_len = 4096;
  v.key_len = 32;
  v.flags = kRecordDense | kRecordCompact;
  auto r = DecodeIndexValue(EncodeIndexValue(v));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->RecordBytes(), 4176u);
  EXPECT_EQ(r->PayloadOffset(), kCompactHeaderBytes + 32);
  v.flags = kRecordCompact;  // never without kRecordDense
  EXPECT_EQ(DecodeIndexValue(EncodeIndexValue(v)).status().code(), Code::kCorruption);
}

// ---------------------------------------------------------------------------
// Index value

TEST(IndexValueTest, DenseOffsetsAndFlagsAreChecked) {
  IndexValue v;
  v.offset = 3 * kPage + 40;
  v.payload_len = 4096;
  v.key_len = 32;
  v.flags = kRecordDense;
  auto r = DecodeIndexValue(EncodeIndexValue(v));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->flags, kRecordDense);
  EXPECT_EQ(r->RecordBytes(), 4200u);
  EXPECT_EQ(r->PayloadOffset(), kRecordHeaderBytes + 32);
  v.offset = 3 * kPage + 4;  // not 8-byte aligned
  EXPECT_EQ(DecodeIndexValue(EncodeIndexValue(v)).status().code(), Code::kCorruption);
  v.offset = 3 * kPage + 40;
  v.flags = 0;  // a record with its own pages starts on one
  EXPECT_EQ(DecodeIndexValue(EncodeIndexValue(v)).status().code(), Code::kCorruption);
  v.offset = 3 * kPage;
  v.flags = 4;
  EXPECT_EQ(DecodeIndexValue(EncodeIndexValue(v)).status().code(), Code::kCorruption);
}

TEST(IndexValueTest, RoundTripAndLayout) {
  IndexValue v;
  v.segment = 0x01020304;
  v.generation = 5;
  v.offset = 3 * kPage;
  v.payload_len = 99999;
  v.payload_checksum = 0xfeedfacecafebeefull;
  v.sequence = 77;
  v.written_unix_ms = 1700000002000ull;
  v.key_len = 200;
  v.flags = 0;
  v.reserved = 0;
  const std::string enc = EncodeIndexValue(v);
  ASSERT_EQ(enc.size(), kIndexValueBytes);
  const auto* p = reinterpret_cast<const uint8_t*>(enc.data());
  EXPECT_EQ(GetFixed32(p + 0), 0x01020304u);
  EXPECT_EQ(GetFixed32(p + 4), 5u);
  EXPECT_EQ(GetFixed64(p + 8), 3 * kPage);
  EXPECT_EQ(GetFixed64(p + 16), 99999u);
  EXPECT_EQ(GetFixed64(p + 24), 0xfeedfacecafebeefull);
  EXPECT_EQ(GetFixed64(p + 32), 77u);
  EXPECT_EQ(GetFixed64(p + 40), 1700000002000ull);
  EXPECT_EQ(GetFixed16(p + 48), 200u);
  auto r = DecodeIndexValue(enc);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->segment, v.segment);
  EXPECT_EQ(r->generation, v.generation);
  EXPECT_EQ(r->offset, v.offset);
  EXPECT_EQ(r->payload_len, v.payload_len);
  EXPECT_EQ(r->payload_checksum, v.payload_checksum);
  EXPECT_EQ(r->sequence, v.sequence);
  EXPECT_EQ(r->written_unix_ms, v.written_unix_ms);
  EXPECT_EQ(r->key_len, v.key_len);
  EXPECT_EQ(r->RecordBytes(), RecordBytes(200, 99999, 0));
}

TEST(IndexValueTest, WrongSizeRejected) {
  const std::string enc = EncodeIndexValue(IndexValue{});
  for (size_t n : {size_t{0}, size_t{1}, size_t{55}}) {
    EXPECT_EQ(DecodeIndexValue(std::string_view(enc).substr(0, n)).status().code(),
              Code::kCorruption);
  }
  EXPECT_EQ(DecodeIndexValue(enc + "x").status().code(), Code::kCorruption);
}

}  // namespace
TEST(RecordAgainstEntryTest, EachFieldHasItsBitAndLine) {
  RecordHeader h;
  h.flags = kRecordDense;
  h.key_len = 3;
  h.segment_id = 4;
  h.generation = 5;
  h.ns_id = 6;
  h.sequence = 7;
  h.payload_len = 8192;
  h.payload_checksum = 9;
  const IndexValue v = IndexValueOf(h, 4096);
  EXPECT_EQ(v.offset, 4096u);
  EXPECT_EQ(v.key_len, 3u);
  EXPECT_EQ(RecordAgainstEntry(h, "abc", 6, "abc", v), 0u);
  EXPECT_TRUE(DescribeMismatches(0).empty());
  struct Case {
    uint32_t bit;
    void (*change)(RecordHeader&);
  };
  const Case cases[] = {
      {kMismatchSegment, [](RecordHeader& r) { r.segment_id++; }},
      {kMismatchGeneration, [](RecordHeader& r) { r.generation++; }},
      {kMismatchPayloadLength, [](RecordHeader& r) { r.payload_len++; }},
      {kMismatchChecksum, [](RecordHeader& r) { r.payload_checksum++; }},
      {kMismatchFlags, [](RecordHeader& r) { r.flags = 0; }},
      {kMismatchSequence, [](RecordHeader& r) { r.sequence++; }},
  };
  for (const Case& c : cases) {
    RecordHeader changed = h;
    c.change(changed);
    EXPECT_EQ(RecordAgainstEntry(changed, "abc", 6, "abc", v), c.bit);
  }
  EXPECT_EQ(RecordAgainstEntry(h, "abd", 6, "abc", v), uint32_t{kMismatchKey});
  EXPECT_EQ(RecordAgainstEntry(h, "abc", 7, "abc", v), uint32_t{kMismatchNamespace});
  const auto lines = DescribeMismatches(kMismatchGeneration | kMismatchKey);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("stale"), std::string::npos);
}

}  // namespace kvtier::format
