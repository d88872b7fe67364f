// libFuzzer target for the two fixed-size checksummed headers that say what a
// store and a segment are: the superblock copy (DecodeSuperblock) and the
// segment header (DecodeSegmentHeader). record_fuzz.cc feeds them too, among
// other decoders; this target keeps a corpus of its own and adds what only a
// dedicated target can afford per input:
// - the input read as a superblock copy and as a segment header, raw and with
//   magic, version, reserved fields and checksum made right ("re-signed"), so
//   the segment-size and version checks are reached;
// - single-bit flips of a valid encoding built from the input must be
//   rejected: a damaged copy must never be believed. Each input tries 32 of
//   the 512 (576) bit positions, chosen by the input, so that the loop does
//   not slow the raw decoding down; the corpus covers all of them.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "format/coding.h"
#include "format/record.h"

namespace kvtier::format {
namespace {

#define FUZZ_CHECK(cond)           \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

bool ValidSize(uint64_t s) {
  return s >= kMinSegmentBytes && s <= kMaxSegmentBytes && s % (1u << 20) == 0;
}

void CheckSuperblock(std::span<const uint8_t> in) {
  auto r = DecodeSuperblock(in);
  if (!r.ok()) return;
  FUZZ_CHECK(in.size() >= kSuperblockEncodedBytes);
  FUZZ_CHECK(r->format_version >= 1 && r->format_version <= kFormatVersion);
  FUZZ_CHECK(ValidSize(r->segment_size));
  std::array<uint8_t, kSuperblockEncodedBytes> out;
  EncodeSuperblock(*r, out);
  FUZZ_CHECK(std::memcmp(out.data(), in.data(), out.size()) == 0);
}

void CheckSegmentHeader(std::span<const uint8_t> in) {
  auto r = DecodeSegmentHeader(in);
  if (!r.ok()) return;
  FUZZ_CHECK(in.size() >= kSegmentHeaderEncodedBytes);
  FUZZ_CHECK(ValidSize(r->segment_size));
  std::array<uint8_t, kSegmentHeaderEncodedBytes> out;
  EncodeSegmentHeader(*r, out);
  if (GetFixed16(in.data() + 4) == kFormatVersion) {
    FUZZ_CHECK(std::memcmp(out.data(), in.data(), out.size()) == 0);
  } else {
    // An older version still read: the encoder writes today's version, so
    // the version and the checksum over it differ; nothing else.
    FUZZ_CHECK(std::memcmp(out.data(), in.data(), 4) == 0);
    FUZZ_CHECK(std::memcmp(out.data() + 6, in.data() + 6, kSegmentHeaderEncodedBytes - 6 - 8) == 0);
  }
}

// An exactly sized copy of the first `n` bytes (zero padded) so ASan sees the end.
std::vector<uint8_t> Prefix(std::span<const uint8_t> in, size_t n) {
  std::vector<uint8_t> v(n, 0);
  if (n > 0 && !in.empty()) std::memcpy(v.data(), in.data(), std::min(n, in.size()));
  return v;
}

// Fixes magic, version and reserved fields, keeps the fuzzed size only when
// `keep_size` (else picks a valid one from it), and recomputes the checksum.
std::vector<uint8_t> ResignedSuperblock(std::span<const uint8_t> in, bool keep_size) {
  std::vector<uint8_t> v = Prefix(in, kSuperblockEncodedBytes);
  PutFixed32(v.data() + 0, kSuperMagic);
  PutFixed32(v.data() + 4, GetFixed32(v.data() + 4) % (kFormatVersion + 2));
  if (!keep_size) PutFixed64(v.data() + 24, (GetFixed64(v.data() + 24) % 70) << 20);
  PutFixed64(v.data() + 48, 0);
  PutFixed64(v.data() + 56, Checksum(v.data(), 56));
  return v;
}

std::vector<uint8_t> ResignedSegmentHeader(std::span<const uint8_t> in, bool keep_size) {
  std::vector<uint8_t> v = Prefix(in, kSegmentHeaderEncodedBytes);
  PutFixed32(v.data() + 0, kSegmentMagic);
  PutFixed16(v.data() + 4, static_cast<uint16_t>(GetFixed16(v.data() + 4) % (kFormatVersion + 2)));
  PutFixed16(v.data() + 6, 0);
  if (!keep_size) PutFixed64(v.data() + 40, (GetFixed64(v.data() + 40) % 70) << 20);
  PutFixed64(v.data() + 56, 0);
  PutFixed64(v.data() + 64, Checksum(v.data(), 64));
  return v;
}

// Flipping any one of 32 consecutive bits (from `first`, wrapping) of a valid
// encoding must make it fail to decode.
template <size_t N, typename Decode>
void BitFlipsRejected(std::array<uint8_t, N> enc, size_t first, Decode decode) {
  FUZZ_CHECK(decode(std::span<const uint8_t>(enc)).ok());
  for (size_t i = 0; i < 32; ++i) {
    const size_t bit = (first + i) % (N * 8);
    enc[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    FUZZ_CHECK(!decode(std::span<const uint8_t>(enc)).ok());
    enc[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
}

void BitFlips(std::span<const uint8_t> in) {
  std::vector<uint8_t> v = Prefix(in, 64);
  Superblock sb;
  std::memcpy(sb.store_id.data(), v.data(), 16);
  sb.segment_size = (1 + GetFixed16(v.data() + 16) % (kMaxSegmentBytes >> 20)) << 20;
  sb.created_unix_ms = GetFixed64(v.data() + 24);
  sb.flags = GetFixed64(v.data() + 32);
  std::array<uint8_t, kSuperblockEncodedBytes> sbe;
  EncodeSuperblock(sb, sbe);
  const size_t first = GetFixed16(v.data() + 62);
  BitFlipsRejected(sbe, first, [](std::span<const uint8_t> s) { return DecodeSuperblock(s); });

  SegmentHeader sh;
  sh.segment_id = GetFixed32(v.data() + 40);
  sh.generation = GetFixed32(v.data() + 44);
  sh.epoch = GetFixed64(v.data() + 48);
  sh.store_id = sb.store_id;
  sh.segment_size = sb.segment_size;
  sh.opened_unix_ms = GetFixed64(v.data() + 56);
  std::array<uint8_t, kSegmentHeaderEncodedBytes> she;
  EncodeSegmentHeader(sh, she);
  BitFlipsRejected(she, first, [](std::span<const uint8_t> s) { return DecodeSegmentHeader(s); });
  auto back = DecodeSegmentHeader(she);
  FUZZ_CHECK(back.ok() && back->segment_id == sh.segment_id &&
             back->generation == sh.generation && back->epoch == sh.epoch &&
             back->store_id == sh.store_id && back->opened_unix_ms == sh.opened_unix_ms);
}

}  // namespace
}  // namespace kvtier::format

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier::format;
  const std::span<const uint8_t> in(data, size);
  CheckSuperblock(Prefix(in, size));  // the raw input, exactly sized
  CheckSegmentHeader(Prefix(in, size));
  const bool keep = size > 0 && (data[size - 1] & 1);
  CheckSuperblock(ResignedSuperblock(in, keep));
  CheckSegmentHeader(ResignedSegmentHeader(in, keep));
  BitFlips(in);
  return 0;
}
