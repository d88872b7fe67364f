// Encoding and validation of the fixed on-disk structures (see record.h and
// docs/format.md for the layouts).
//
// Validation order matters and is the same for every structure:
//   1. enough bytes, 2. magic, 3. checksum, 4. version, 5. field ranges.
// Fields are interpreted only after the checksum has passed, so a random bit
// flip is always reported as Corruption and never as, say, "newer version".
// The envelope (magic @0, version @4, checksum placement) is frozen across
// format versions so that an older build can still tell "newer" from "bad".
#include "format/record.h"

#include <xxhash.h>

#include <cassert>
#include <cstring>

#include "format/coding.h"
#include "util/checksum.h"

namespace kvtier::format {

namespace {

// ---- Superblock copy (64 bytes) ----
constexpr size_t kSbMagic = 0;
constexpr size_t kSbVersion = 4;
constexpr size_t kSbStoreId = 8;
constexpr size_t kSbSegmentSize = 24;
constexpr size_t kSbCreated = 32;
constexpr size_t kSbFlags = 40;
constexpr size_t kSbReserved = 48;
constexpr size_t kSbChecksum = 56;
static_assert(kSbChecksum + 8 == kSuperblockEncodedBytes);
static_assert(kSuperblockEncodedBytes <= kPage, "a copy must fit its 4 KiB slot");
static_assert(kSuperblockFileBytes == 2 * kPage);

// ---- Segment header (72 bytes) ----
constexpr size_t kShMagic = 0;
constexpr size_t kShVersion = 4;
constexpr size_t kShReserved16 = 6;
constexpr size_t kShSegmentId = 8;
constexpr size_t kShGeneration = 12;
constexpr size_t kShEpoch = 16;
constexpr size_t kShStoreId = 24;
constexpr size_t kShSegmentSize = 40;
constexpr size_t kShOpened = 48;
constexpr size_t kShReserved64 = 56;
constexpr size_t kShChecksum = 64;
static_assert(kShChecksum + 8 == kSegmentHeaderEncodedBytes);
static_assert(kSegmentHeaderEncodedBytes <= kSegmentDataStart);
static_assert(kSegmentDataStart % kPage == 0, "records start on a page boundary");

// ---- Record header (72 bytes, then the key, then the payload) ----
constexpr size_t kRhMagic = 0;
constexpr size_t kRhVersion = 4;
constexpr size_t kRhFlags = 6;
constexpr size_t kRhKeyLen = 8;
constexpr size_t kRhReserved16 = 10;
constexpr size_t kRhSegmentId = 12;
constexpr size_t kRhGeneration = 16;
constexpr size_t kRhReserved32 = 20;
constexpr size_t kRhNs = 24;
constexpr size_t kRhSequence = 32;
constexpr size_t kRhPayloadLen = 40;
constexpr size_t kRhPayloadChecksum = 48;
constexpr size_t kRhWritten = 56;
constexpr size_t kRhChecksum = 64;
static_assert(kRhChecksum + 8 == kRecordHeaderBytes);

// The compact header (dense records of version-4 stores).
constexpr size_t kChMagic = 0;
constexpr size_t kChKeyLen = 4;     // u8
constexpr size_t kChFlags = 5;      // u8: kRecordDense | kRecordCompact
constexpr size_t kChSeqHigh = 6;    // u16: sequence bits 32..47
constexpr size_t kChSeqLow = 8;     // u32: sequence bits 0..31
constexpr size_t kChSegmentId = 12;
constexpr size_t kChGeneration = 16;
constexpr size_t kChPayloadLen = 20;  // u32
constexpr size_t kChNs = 24;
constexpr size_t kChPayloadChecksum = 32;
constexpr size_t kChWritten = 40;   // u32: Unix seconds
constexpr size_t kChChecksum = 44;  // u32: the low half of XXH3-64 over bytes 0..44 and the key
static_assert(kChChecksum + 4 == kCompactHeaderBytes);
static_assert(kChNs % 8 == 0 && kChPayloadChecksum % 8 == 0, "8-byte fields stay 8-byte aligned");
static_assert(kMaxKeyBytes <= UINT8_MAX, "key_len is a u8 in the compact header");
static_assert(kCompactHeaderBytes % kDenseAlign == 0);
static_assert(kCompactHeaderBytes < kRecordHeaderBytes);
// The scanner reads one page at a record boundary and must find the whole
// header and key in it.
static_assert(kRecordHeaderBytes + kMaxKeyBytes <= kPage);
static_assert(kMaxKeyBytes <= UINT16_MAX, "key_len is a u16 on disk");
// RecordBytes() is not constexpr; check the AlignUp it is built on instead.
static_assert(AlignUp(kRecordHeaderBytes + 1 + 1) == kPage);
static_assert(AlignUp(kPage) == kPage);
static_assert(AlignUp(kPage + 1) == 2 * kPage);
static_assert(AlignUp(kRecordHeaderBytes + kMaxKeyBytes + (1ull << 20)) % kPage == 0);

// ---- Index value (56 bytes, field order of IndexValue) ----
constexpr size_t kIvSegment = 0;
constexpr size_t kIvGeneration = 4;
constexpr size_t kIvOffset = 8;
constexpr size_t kIvPayloadLen = 16;
constexpr size_t kIvPayloadChecksum = 24;
constexpr size_t kIvSequence = 32;
constexpr size_t kIvWritten = 40;
constexpr size_t kIvKeyLen = 48;
constexpr size_t kIvFlags = 50;
constexpr size_t kIvReserved = 52;
static_assert(kIvReserved + 4 == kIndexValueBytes);

constexpr uint64_t kMiB = 1ull << 20;

bool ValidSegmentSize(uint64_t s) {
  return s >= kMinSegmentBytes && s <= kMaxSegmentBytes && s % kMiB == 0;
}

std::string SegmentSizeError(uint64_t s) {
  return "segment size " + std::to_string(s) + " is not a multiple of 1 MiB in [" +
         std::to_string(kMinSegmentBytes) + ", " + std::to_string(kMaxSegmentBytes) + "]";
}

// The record header checksum is XXH3-64 over the byte string
// header[0,64) || key[0,key_len). Both parts are bounded (64 + 255 bytes), so
// they are concatenated in a stack buffer and hashed in one call: this is the
// same value XXH3's streaming API would give, without its heap-allocated state.
// XXH3-64 of the header's first `covered` bytes followed by the key.
uint64_t RecordHeaderChecksum(const uint8_t* header, const uint8_t* key, size_t key_len,
                              size_t covered = kRhChecksum) {
  assert(key_len <= kMaxKeyBytes && covered <= kRhChecksum);
  uint8_t buf[kRhChecksum + kMaxKeyBytes];
  std::memcpy(buf, header, covered);
  if (key_len > 0) std::memcpy(buf + covered, key, key_len);
  return XXH3_64bits(buf, covered + key_len);
}

uint32_t CompactHeaderChecksum(const uint8_t* header, const uint8_t* key, size_t key_len) {
  return static_cast<uint32_t>(RecordHeaderChecksum(header, key, key_len, kChChecksum));
}

void EncodeCompactHeader(const RecordHeader& h, uint16_t key_len, std::string_view key, uint8_t* dst) {
  assert(h.sequence <= kCompactMaxSequence && h.payload_len <= kCompactMaxPayload);
  dst[kChKeyLen] = static_cast<uint8_t>(key_len);
  dst[kChFlags] = static_cast<uint8_t>(kRecordDense | kRecordCompact);
  PutFixed32(dst + kChMagic, kCompactRecordMagic);
  PutFixed16(dst + kChSeqHigh, static_cast<uint16_t>(h.sequence >> 32));
  PutFixed32(dst + kChSeqLow, static_cast<uint32_t>(h.sequence));
  PutFixed32(dst + kChSegmentId, h.segment_id);
  PutFixed32(dst + kChGeneration, h.generation);
  PutFixed32(dst + kChPayloadLen, static_cast<uint32_t>(h.payload_len));
  PutFixed64(dst + kChNs, h.ns_id);
  PutFixed64(dst + kChPayloadChecksum, h.payload_checksum);
  PutFixed32(dst + kChWritten, static_cast<uint32_t>(h.written_unix_ms / 1000));
  if (!key.empty()) std::memcpy(dst + kCompactHeaderBytes, key.data(), key.size());
  PutFixed32(dst + kChChecksum, CompactHeaderChecksum(dst, dst + kCompactHeaderBytes, key_len));
}

Result<RecordHeader> DecodeCompactHeader(std::span<const uint8_t> in, uint64_t max_payload,
                                         std::string_view* key_out) {
  if (in.size() < kCompactHeaderBytes) {
    return Status::Corruption("record header truncated: " + std::to_string(in.size()) + " bytes");
  }
  const uint8_t* p = in.data();
  // key_len is bounds-checked before it sizes the checksum (as below).
  const uint16_t key_len = p[kChKeyLen];
  if (key_len == 0) return Status::Corruption("bad record key length 0");
  if (in.size() - kCompactHeaderBytes < key_len) {
    return Status::Corruption("record truncated: key of " + std::to_string(key_len) + " bytes extends past the " +
                              std::to_string(in.size()) + " bytes read");
  }
  const uint8_t* key = p + kCompactHeaderBytes;
  if (GetFixed32(p + kChChecksum) != CompactHeaderChecksum(p, key, key_len)) {
    return Status::Corruption("record header checksum mismatch");
  }
  RecordHeader h;
  h.flags = p[kChFlags];
  if (h.flags != (kRecordDense | kRecordCompact)) {
    return Status::Corruption("compact record header has flags " + std::to_string(h.flags));
  }
  h.key_len = key_len;
  h.sequence = (uint64_t{GetFixed16(p + kChSeqHigh)} << 32) | GetFixed32(p + kChSeqLow);
  h.segment_id = GetFixed32(p + kChSegmentId);
  h.generation = GetFixed32(p + kChGeneration);
  h.payload_len = GetFixed32(p + kChPayloadLen);
  h.ns_id = GetFixed64(p + kChNs);
  h.payload_checksum = GetFixed64(p + kChPayloadChecksum);
  h.written_unix_ms = uint64_t{GetFixed32(p + kChWritten)} * 1000;
  if (h.payload_len == 0 || h.payload_len > max_payload) {
    return Status::Corruption("bad record payload length " + std::to_string(h.payload_len) + " (limit " +
                              std::to_string(max_payload) + ")");
  }
  if (key_out != nullptr) *key_out = std::string_view(reinterpret_cast<const char*>(key), key_len);
  return h;
}

}  // namespace

uint64_t Checksum(const void* data, size_t n) { return Xxh3(data, n); }  // XXH3_64bits, widest SIMD

// ---------------------------------------------------------------------------
// Superblock

void EncodeSuperblock(const Superblock& sb, std::span<uint8_t, kSuperblockEncodedBytes> out) {
  uint8_t* p = out.data();
  PutFixed32(p + kSbMagic, kSuperMagic);
  PutFixed32(p + kSbVersion, sb.format_version);
  std::memcpy(p + kSbStoreId, sb.store_id.data(), sb.store_id.size());
  PutFixed64(p + kSbSegmentSize, sb.segment_size);
  PutFixed64(p + kSbCreated, sb.created_unix_ms);
  PutFixed64(p + kSbFlags, sb.flags);
  PutFixed64(p + kSbReserved, 0);
  PutFixed64(p + kSbChecksum, Checksum(p, kSbChecksum));
}

Result<Superblock> DecodeSuperblock(std::span<const uint8_t> in) {
  if (in.size() < kSuperblockEncodedBytes) {
    return Status::Corruption("superblock truncated: " + std::to_string(in.size()) + " bytes");
  }
  const uint8_t* p = in.data();
  if (GetFixed32(p + kSbMagic) != kSuperMagic) {
    return Status::Corruption("not a kvtier superblock");
  }
  if (GetFixed64(p + kSbChecksum) != Checksum(p, kSbChecksum)) {
    return Status::Corruption("superblock checksum mismatch");
  }
  Superblock sb;
  sb.format_version = GetFixed32(p + kSbVersion);
  if (sb.format_version > kFormatVersion) {
    return Status::NotSupported("format version " + std::to_string(sb.format_version) +
                                " is newer than this build supports (" +
                                std::to_string(kFormatVersion) + ")");
  }
  if (sb.format_version == 0) return Status::Corruption("superblock format version 0");
  if (sb.format_version < kMinFormatVersion) {
    return Status::NotSupported("format version " + std::to_string(sb.format_version) +
                                " was written by an older kvtier (payload layout changed); this build reads " +
                                std::to_string(kMinFormatVersion) + ".." + std::to_string(kFormatVersion));
  }
  if (GetFixed64(p + kSbReserved) != 0) {
    return Status::Corruption("superblock reserved field is not zero");
  }
  std::memcpy(sb.store_id.data(), p + kSbStoreId, sb.store_id.size());
  sb.segment_size = GetFixed64(p + kSbSegmentSize);
  sb.created_unix_ms = GetFixed64(p + kSbCreated);
  sb.flags = GetFixed64(p + kSbFlags);
  if (!ValidSegmentSize(sb.segment_size)) {
    return Status::Corruption("superblock: " + SegmentSizeError(sb.segment_size));
  }
  return sb;
}

std::string StoreIdHex(const std::array<uint8_t, 16>& id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(32, '0');
  for (size_t i = 0; i < id.size(); ++i) {
    s[2 * i] = kHex[id[i] >> 4];
    s[2 * i + 1] = kHex[id[i] & 0xf];
  }
  return s;
}

// ---------------------------------------------------------------------------
// Segment header

void EncodeSegmentHeader(const SegmentHeader& h,
                         std::span<uint8_t, kSegmentHeaderEncodedBytes> out) {
  uint8_t* p = out.data();
  PutFixed32(p + kShMagic, kSegmentMagic);
  PutFixed16(p + kShVersion, static_cast<uint16_t>(kFormatVersion));
  PutFixed16(p + kShReserved16, 0);
  PutFixed32(p + kShSegmentId, h.segment_id);
  PutFixed32(p + kShGeneration, h.generation);
  PutFixed64(p + kShEpoch, h.epoch);
  std::memcpy(p + kShStoreId, h.store_id.data(), h.store_id.size());
  PutFixed64(p + kShSegmentSize, h.segment_size);
  PutFixed64(p + kShOpened, h.opened_unix_ms);
  PutFixed64(p + kShReserved64, 0);
  PutFixed64(p + kShChecksum, Checksum(p, kShChecksum));
}

Result<SegmentHeader> DecodeSegmentHeader(std::span<const uint8_t> in) {
  if (in.size() < kSegmentHeaderEncodedBytes) {
    return Status::Corruption("segment header truncated: " + std::to_string(in.size()) +
                              " bytes");
  }
  const uint8_t* p = in.data();
  if (GetFixed32(p + kShMagic) != kSegmentMagic) {
    return Status::Corruption("not a kvtier segment header");
  }
  if (GetFixed64(p + kShChecksum) != Checksum(p, kShChecksum)) {
    return Status::Corruption("segment header checksum mismatch");
  }
  const uint16_t version = GetFixed16(p + kShVersion);
  if (version > kFormatVersion) {
    return Status::NotSupported("segment format version " + std::to_string(version) +
                                " is newer than this build supports (" +
                                std::to_string(kFormatVersion) + ")");
  }
  if (version == 0) return Status::Corruption("segment header format version 0");
  if (version < kMinFormatVersion) {
    return Status::NotSupported("segment format version " + std::to_string(version) +
                                " is older than this build reads (" + std::to_string(kMinFormatVersion) + ")");
  }
  if (GetFixed16(p + kShReserved16) != 0 || GetFixed64(p + kShReserved64) != 0) {
    return Status::Corruption("segment header reserved field is not zero");
  }
  SegmentHeader h;
  h.segment_id = GetFixed32(p + kShSegmentId);
  h.generation = GetFixed32(p + kShGeneration);
  h.epoch = GetFixed64(p + kShEpoch);
  std::memcpy(h.store_id.data(), p + kShStoreId, h.store_id.size());
  h.segment_size = GetFixed64(p + kShSegmentSize);
  h.opened_unix_ms = GetFixed64(p + kShOpened);
  if (!ValidSegmentSize(h.segment_size)) {
    return Status::Corruption("segment header: " + SegmentSizeError(h.segment_size));
  }
  return h;
}

// ---------------------------------------------------------------------------
// Record header

void EncodeRecordHeader(const RecordHeader& h, std::string_view key, uint8_t* dst) {
  // A key outside [1, kMaxKeyBytes] is a caller bug. Rather than hash an
  // unbounded key, record key_len 0, which no decoder accepts: such a record
  // can never be read back as something else.
  assert(!key.empty() && key.size() <= kMaxKeyBytes);
  const bool key_ok = !key.empty() && key.size() <= kMaxKeyBytes;
  const uint16_t key_len = key_ok ? static_cast<uint16_t>(key.size()) : 0;
  if (IsCompact(h.flags)) return EncodeCompactHeader(h, key_len, key_ok ? key : std::string_view(), dst);

  PutFixed32(dst + kRhMagic, kRecordMagic);
  PutFixed16(dst + kRhVersion, static_cast<uint16_t>(kFormatVersion));
  PutFixed16(dst + kRhFlags, h.flags);
  PutFixed16(dst + kRhKeyLen, key_len);
  PutFixed16(dst + kRhReserved16, 0);
  PutFixed32(dst + kRhSegmentId, h.segment_id);
  PutFixed32(dst + kRhGeneration, h.generation);
  PutFixed32(dst + kRhReserved32, 0);
  PutFixed64(dst + kRhNs, h.ns_id);
  PutFixed64(dst + kRhSequence, h.sequence);
  PutFixed64(dst + kRhPayloadLen, h.payload_len);
  PutFixed64(dst + kRhPayloadChecksum, h.payload_checksum);
  PutFixed64(dst + kRhWritten, h.written_unix_ms);
  if (key_ok) std::memcpy(dst + kRecordHeaderBytes, key.data(), key.size());
  PutFixed64(dst + kRhChecksum,
             RecordHeaderChecksum(dst, dst + kRecordHeaderBytes, key_len));
}

Result<RecordHeader> DecodeRecordHeader(std::span<const uint8_t> in, uint64_t max_payload,
                                        std::string_view* key_out) {
  if (in.size() >= 4 && GetFixed32(in.data()) == kCompactRecordMagic) return DecodeCompactHeader(in, max_payload, key_out);
  if (in.size() < kRecordHeaderBytes) {
    return Status::Corruption("record header truncated: " + std::to_string(in.size()) +
                              " bytes");
  }
  const uint8_t* p = in.data();
  if (GetFixed32(p + kRhMagic) != kRecordMagic) {
    return Status::Corruption("bad record magic");
  }
  // key_len has to be trusted before the checksum can be computed (it says
  // how many bytes the checksum covers), so it is bounds-checked first. A
  // corrupt key_len then fails here or in the checksum; it is never used to
  // read outside `in`.
  const uint16_t key_len = GetFixed16(p + kRhKeyLen);
  if (key_len == 0 || key_len > kMaxKeyBytes) {
    return Status::Corruption("bad record key length " + std::to_string(key_len));
  }
  if (in.size() - kRecordHeaderBytes < key_len) {
    return Status::Corruption("record truncated: key of " + std::to_string(key_len) +
                              " bytes extends past the " + std::to_string(in.size()) +
                              " bytes read");
  }
  const uint8_t* key = p + kRecordHeaderBytes;
  if (GetFixed64(p + kRhChecksum) != RecordHeaderChecksum(p, key, key_len)) {
    return Status::Corruption("record header checksum mismatch");
  }
  const uint16_t version = GetFixed16(p + kRhVersion);
  if (version > kFormatVersion) {
    return Status::NotSupported("record format version " + std::to_string(version) +
                                " is newer than this build supports (" +
                                std::to_string(kFormatVersion) + ")");
  }
  if (version == 0) return Status::Corruption("record format version 0");
  if (version < kMinFormatVersion) {
    return Status::NotSupported("record format version " + std::to_string(version) +
                                " is older than this build reads (" + std::to_string(kMinFormatVersion) + ")");
  }
  if (GetFixed16(p + kRhReserved16) != 0 || GetFixed32(p + kRhReserved32) != 0) {
    return Status::Corruption("record header reserved field is not zero");
  }
  RecordHeader h;
  h.flags = GetFixed16(p + kRhFlags);
  if ((h.flags & ~kRecordDense) != 0 || (IsDense(h.flags) && version < 3)) {
    return Status::Corruption("record header has unknown flags " + std::to_string(h.flags));
  }
  h.key_len = key_len;
  h.segment_id = GetFixed32(p + kRhSegmentId);
  h.generation = GetFixed32(p + kRhGeneration);
  h.ns_id = GetFixed64(p + kRhNs);
  h.sequence = GetFixed64(p + kRhSequence);
  h.payload_len = GetFixed64(p + kRhPayloadLen);
  h.payload_checksum = GetFixed64(p + kRhPayloadChecksum);
  h.written_unix_ms = GetFixed64(p + kRhWritten);
  if (h.payload_len == 0 || h.payload_len > max_payload) {
    return Status::Corruption("bad record payload length " + std::to_string(h.payload_len) +
                              " (limit " + std::to_string(max_payload) + ")");
  }
  if (key_out != nullptr) *key_out = std::string_view(reinterpret_cast<const char*>(key), key_len);
  return h;
}

// ---------------------------------------------------------------------------
// Index value. No checksum of its own: RocksDB checksums its blocks, and every
// read re-verifies the record the value points at.

std::string EncodeIndexValue(const IndexValue& v) {
  std::string s(kIndexValueBytes, '\0');
  uint8_t* p = reinterpret_cast<uint8_t*>(s.data());
  PutFixed32(p + kIvSegment, v.segment);
  PutFixed32(p + kIvGeneration, v.generation);
  PutFixed64(p + kIvOffset, v.offset);
  PutFixed64(p + kIvPayloadLen, v.payload_len);
  PutFixed64(p + kIvPayloadChecksum, v.payload_checksum);
  PutFixed64(p + kIvSequence, v.sequence);
  PutFixed64(p + kIvWritten, v.written_unix_ms);
  PutFixed16(p + kIvKeyLen, v.key_len);
  PutFixed16(p + kIvFlags, v.flags);
  PutFixed32(p + kIvReserved, v.reserved);
  return s;
}

Result<IndexValue> DecodeIndexValue(std::string_view in) {
  if (in.size() != kIndexValueBytes) {
    return Status::Corruption("index value has " + std::to_string(in.size()) +
                              " bytes, expected " + std::to_string(kIndexValueBytes));
  }
  const uint8_t* p = reinterpret_cast<const uint8_t*>(in.data());
  IndexValue v;
  v.segment = GetFixed32(p + kIvSegment);
  v.generation = GetFixed32(p + kIvGeneration);
  v.offset = GetFixed64(p + kIvOffset);
  v.payload_len = GetFixed64(p + kIvPayloadLen);
  v.payload_checksum = GetFixed64(p + kIvPayloadChecksum);
  v.sequence = GetFixed64(p + kIvSequence);
  v.written_unix_ms = GetFixed64(p + kIvWritten);
  v.key_len = GetFixed16(p + kIvKeyLen);
  v.flags = GetFixed16(p + kIvFlags);
  v.reserved = GetFixed32(p + kIvReserved);
  if (!KnownRecordFlags(v.flags)) {
    return Status::Corruption("index value has unknown flags " + std::to_string(v.flags));
  }
  if (v.offset % (IsDense(v.flags) ? kDenseAlign : kPage) != 0) {
    return Status::Corruption("index value offset " + std::to_string(v.offset) + " is misaligned");
  }
  return v;
}

uint32_t RecordAgainstEntry(const RecordHeader& h, std::string_view record_key, uint64_t ns,
                            std::string_view key, const IndexValue& v) {
  uint32_t m = 0;
  if (record_key != key) m |= kMismatchKey;
  if (h.ns_id != ns) m |= kMismatchNamespace;
  if (h.segment_id != v.segment) m |= kMismatchSegment;
  if (h.generation != v.generation) m |= kMismatchGeneration;
  if (h.payload_len != v.payload_len) m |= kMismatchPayloadLength;
  if (h.payload_checksum != v.payload_checksum) m |= kMismatchChecksum;
  if (h.flags != v.flags) m |= kMismatchFlags;
  if (h.sequence != v.sequence) m |= kMismatchSequence;
  return m;
}

std::vector<std::string> DescribeMismatches(uint32_t m) {
  static constexpr std::pair<uint32_t, const char*> kLines[] = {
      {kMismatchKey, "record key differs from the index key"},
      {kMismatchNamespace, "record namespace differs from the index entry's"},
      {kMismatchSegment, "record segment differs from the index entry's"},
      {kMismatchGeneration, "record generation differs from the index entry (stale)"},
      {kMismatchPayloadLength, "payload length differs from the index entry"},
      {kMismatchChecksum, "payload checksum differs from the index entry"},
      {kMismatchFlags, "record flags differ from the index entry's"},
      {kMismatchSequence, "sequence differs from the index entry"},
  };
  std::vector<std::string> out;
  for (const auto& [bit, line] : kLines)
    if (m & bit) out.emplace_back(line);
  return out;
}

}  // namespace kvtier::format
