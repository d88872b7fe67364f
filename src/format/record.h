// On-disk structures: superblock, segment header, record header, index value.
//
// Pure functions only (no I/O) so they can be fuzzed. All integers are
// little-endian on disk; the structs below are the in-memory form and their
// encoded sizes are fixed (checked with static_assert). Drawn in docs/format.md.
#ifndef KVTIER_SRC_FORMAT_RECORD_H_
#define KVTIER_SRC_FORMAT_RECORD_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::format {

// 2: a payload starts on its own page when that costs no space (PayloadOffset).
// 3: dense records (kRecordDense) share pages; written only in version-3 stores.
// 4: dense records carry a 48-byte header (kRecordCompact); written only in
//    version-4 stores, so a version-3 store stays readable by version-3 builds.
inline constexpr uint32_t kFormatVersion = 4;
// Oldest format this build reads (1 placed every payload right after its key).
inline constexpr uint32_t kMinFormatVersion = 2;
inline constexpr size_t kPage = 4096;           // alignment of every write and of non-dense records
inline constexpr size_t kDenseAlign = 8;        // alignment of dense records
inline constexpr size_t kMaxKeyBytes = 255;
inline constexpr uint64_t kMinSegmentBytes = 1ull << 20;
inline constexpr uint64_t kMaxSegmentBytes = 64ull << 30;

inline constexpr uint64_t AlignUp(uint64_t v, uint64_t a = kPage) { return (v + a - 1) / a * a; }

// ---- Superblock: file SUPERBLOCK, two identical 4 KiB copies at 0 and 4096 ----
inline constexpr uint32_t kSuperMagic = 0x4253564Bu;  // "KVSB"
inline constexpr size_t kSuperblockEncodedBytes = 64;
inline constexpr size_t kSuperblockFileBytes = 2 * kPage;

struct Superblock {
  uint32_t format_version = kFormatVersion;
  std::array<uint8_t, 16> store_id{};
  uint64_t segment_size = 0;
  uint64_t created_unix_ms = 0;
  uint64_t flags = 0;  // reserved, 0
};
// Writes one copy (kSuperblockEncodedBytes, checksummed) into out[0..64).
void EncodeSuperblock(const Superblock& sb, std::span<uint8_t, kSuperblockEncodedBytes> out);
// Corruption on bad magic/checksum; NotSupported on a newer format version.
Result<Superblock> DecodeSuperblock(std::span<const uint8_t> in);
std::string StoreIdHex(const std::array<uint8_t, 16>& id);

// ---- Segment header: first 4 KiB of every segment file ----
inline constexpr uint32_t kSegmentMagic = 0x4753564Bu;  // "KVSG"
inline constexpr size_t kSegmentHeaderEncodedBytes = 72;
inline constexpr uint64_t kSegmentDataStart = kPage;  // first record offset
// The format's bound on a stored payload: whatever fits in a segment's data
// area. Records on disk are judged by it, never by an opener's options, which
// bound only what that opener writes (a smaller write queue must not make
// acknowledged larger blocks look corrupt).
inline constexpr uint64_t MaxStoredPayload(uint64_t segment_size) { return segment_size - kSegmentDataStart; }

struct SegmentHeader {
  uint32_t segment_id = 0;
  uint32_t generation = 0;  // bumped each time the segment is reclaimed
  uint64_t epoch = 0;       // write order among segments; FIFO eviction key
  std::array<uint8_t, 16> store_id{};
  uint64_t segment_size = 0;
  uint64_t opened_unix_ms = 0;
};
void EncodeSegmentHeader(const SegmentHeader& h, std::span<uint8_t, kSegmentHeaderEncodedBytes> out);
Result<SegmentHeader> DecodeSegmentHeader(std::span<const uint8_t> in);

// ---- Record: header, key, payload, zero padding ----
// Three layouts. Two are chosen by (key_len, payload_len) alone, so that every
// reader knows where the payload is before reading it:
//   aligned  header + key, zeros to 4096, payload, zeros to a page boundary
//   packed   header + key, payload right after the key, zeros to a page
// Aligned is used whenever it takes no more pages than packed (every payload
// that is a multiple of 4 KiB, and most others); then writes can come
// straight from page-aligned caller memory and reads can land in it.
// The third, flagged kRecordDense in the header and in the index value:
//   dense    header + key + payload, zeros to an 8-byte boundary
// Dense records start on an 8-byte boundary and are written back to back in
// one write, whose last page is zero-padded: small records then share pages
// instead of each wasting most of one (a 4 KiB payload took 8 KiB).
// In a version-4 store a dense record has the compact header instead
// (kRecordCompact, magic "KVTD", 48 bytes): the same fields, with the
// sequence in 48 bits, the payload length in 32, the time in seconds and a
// 32-bit header checksum. On a 4 KiB block the full header was a third of
// the bytes written beyond the payload (issue 21).
inline constexpr uint32_t kRecordMagic = 0x5254564Bu;         // "KVTR"
inline constexpr uint32_t kCompactRecordMagic = 0x4454564Bu;  // "KVTD"
inline constexpr size_t kRecordHeaderBytes = 72;
inline constexpr size_t kCompactHeaderBytes = 48;
inline constexpr uint16_t kRecordDense = 1;    // flags bit: dense layout
inline constexpr uint16_t kRecordCompact = 2;  // flags bit: compact header (always with kRecordDense)
inline constexpr uint64_t kCompactMaxSequence = (1ull << 48) - 1;
inline constexpr uint64_t kCompactMaxPayload = UINT32_MAX;

struct RecordHeader {
  uint16_t flags = 0;  // 0, kRecordDense, or kRecordDense | kRecordCompact
  uint16_t key_len = 0;
  uint32_t segment_id = 0;
  uint32_t generation = 0;
  uint64_t ns_id = 0;
  uint64_t sequence = 0;
  uint64_t payload_len = 0;
  uint64_t payload_checksum = 0;  // XXH3-64 of the payload
  uint64_t written_unix_ms = 0;   // whole seconds in a compact header
};

// The flag sets a record may carry: none, dense, dense with a compact header.
inline bool KnownRecordFlags(uint16_t flags) {
  return flags == 0 || flags == kRecordDense || flags == (kRecordDense | kRecordCompact);
}
inline bool IsCompact(uint16_t flags) { return (flags & kRecordCompact) != 0; }
inline size_t HeaderBytes(uint16_t flags) { return IsCompact(flags) ? kCompactHeaderBytes : kRecordHeaderBytes; }
inline bool IsDense(uint16_t flags) { return (flags & kRecordDense) != 0; }
// Bytes a record occupies on disk: header + key + payload, page aligned (the
// same for the aligned and packed layouts), or 8-byte aligned when dense.
inline uint64_t RecordBytes(size_t key_len, uint64_t payload_len, uint16_t flags) {
  return IsDense(flags) ? AlignUp(HeaderBytes(flags) + key_len + payload_len, kDenseAlign)
                        : AlignUp(kRecordHeaderBytes + key_len + payload_len);
}
// True when the payload starts at kPage (the aligned layout).
inline bool PayloadAligned(size_t key_len, uint64_t payload_len, uint16_t flags) {
  return !IsDense(flags) && kPage + AlignUp(payload_len) <= RecordBytes(key_len, payload_len, 0);
}
// Offset of the payload from the start of the record.
inline uint64_t PayloadOffset(size_t key_len, uint64_t payload_len, uint16_t flags) {
  return PayloadAligned(key_len, payload_len, flags) ? kPage : HeaderBytes(flags) + key_len;
}
// The pages a record at `offset` touches: [AlignDown(offset), AlignUp(end)).
// With a smaller granule (a power of two dividing kPage: a device's sector
// where it takes direct reads of sectors), the granules it touches instead.
inline uint64_t PageStart(uint64_t offset, uint64_t granule = kPage) { return offset & ~(granule - 1); }
inline uint64_t PagedBytes(uint64_t offset, uint64_t record_bytes, uint64_t granule = kPage) {
  return ((offset + record_bytes + granule - 1) & ~(granule - 1)) - PageStart(offset, granule);
}

// Writes header + key at dst (dst must hold HeaderBytes(h.flags) + key.size()
// bytes), in the compact layout when h.flags has kRecordCompact. The header
// checksum covers the header fields and the key. A compact header needs
// sequence <= kCompactMaxSequence and payload_len <= kCompactMaxPayload (the
// writer checks both before it places the record).
void EncodeRecordHeader(const RecordHeader& h, std::string_view key, uint8_t* dst);

// Parses and checks the header at in[0..), either layout (magic, version,
// header checksum, key length, payload length <= max_payload, flags known).
// `in` must hold the whole header; the key is checked only if it fits in
// `in`, otherwise Corruption. On success `key_out` views the key inside `in`.
Result<RecordHeader> DecodeRecordHeader(std::span<const uint8_t> in, uint64_t max_payload,
                                        std::string_view* key_out);

// XXH3-64 helpers (the one checksum used everywhere).
uint64_t Checksum(const void* data, size_t n);

// ---- Index value (RocksDB), 56 bytes ----
inline constexpr size_t kIndexValueBytes = 56;
struct IndexValue {
  uint32_t segment = 0;
  uint32_t generation = 0;
  uint64_t offset = 0;        // record start within the segment file
  uint64_t payload_len = 0;
  uint64_t payload_checksum = 0;
  uint64_t sequence = 0;
  uint64_t written_unix_ms = 0;
  uint16_t key_len = 0;       // to derive the record size
  uint16_t flags = 0;         // the record's flags (kRecordDense)
  uint32_t reserved = 0;
  uint64_t RecordBytes() const { return format::RecordBytes(key_len, payload_len, flags); }
  uint64_t PayloadOffset() const { return format::PayloadOffset(key_len, payload_len, flags); }
};
// The index entry naming a record with header `h` (its segment, generation
// and key length included) at byte `offset` of its segment file.
inline IndexValue IndexValueOf(const RecordHeader& h, uint64_t offset) {
  IndexValue v;
  v.segment = h.segment_id;
  v.generation = h.generation;
  v.offset = offset;
  v.payload_len = h.payload_len;
  v.payload_checksum = h.payload_checksum;
  v.sequence = h.sequence;
  v.written_unix_ms = h.written_unix_ms;
  v.key_len = h.key_len;
  v.flags = h.flags;
  return v;
}
std::string EncodeIndexValue(const IndexValue& v);
Result<IndexValue> DecodeIndexValue(std::string_view in);

// Where a decoded record header (and the key it carries) disagrees with the
// index entry that points at it: one bit per field, 0 when they agree. The
// one check the read path, reclaim's reinsertion and `kvtier show` make.
enum EntryMismatch : uint32_t {
  kMismatchKey = 1u << 0,
  kMismatchNamespace = 1u << 1,
  kMismatchSegment = 1u << 2,
  kMismatchGeneration = 1u << 3,  // a stale entry: the segment was reused
  kMismatchPayloadLength = 1u << 4,
  kMismatchChecksum = 1u << 5,
  kMismatchFlags = 1u << 6,
  kMismatchSequence = 1u << 7,
};
uint32_t RecordAgainstEntry(const RecordHeader& h, std::string_view record_key, uint64_t ns,
                            std::string_view key, const IndexValue& v);
// One line per bit set, for reports.
std::vector<std::string> DescribeMismatches(uint32_t mismatches);

}  // namespace kvtier::format

#endif  // KVTIER_SRC_FORMAT_RECORD_H_
