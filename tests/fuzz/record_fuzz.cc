// libFuzzer target for every decoder that reads bytes from disk or the index:
// DecodeSuperblock, DecodeSegmentHeader, DecodeRecordHeader, DecodeIndexValue,
// NamespaceSpec::Decode, and NamespaceIdFromHex (which parses user input).
// They must never crash, never read outside their input, and whatever they
// accept must re-encode to the same bytes.
//
// Random bytes almost never pass a 64-bit checksum, so each input is also fed
// in "re-signed" form (the checksum recomputed over the fuzzed fields); this
// lets the fuzzer reach the field checks that sit behind the checksum.
//
// Build and run (see tests/fuzz/CMakeLists.txt):
//   cmake -S . -B /tmp/build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
//     -DCMAKE_C_COMPILER=clang -DKVTIER_BUILD_FUZZ=ON -DKVTIER_BUILD_TESTS=OFF \
//     -DKVTIER_BUILD_BENCH=OFF && cmake --build /tmp/build-fuzz --target kvtier_record_fuzz
//   /tmp/build-fuzz/bin/kvtier_record_fuzz -max_total_time=30 -max_len=8192
#include <xxhash.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/coding.h"
#include "format/record.h"
#include "kvtier/namespace.h"

namespace kvtier::format {
namespace {

constexpr uint64_t kFuzzMaxPayload = 64ull << 20;

// A failed property: crash so libFuzzer saves the input.
#define FUZZ_CHECK(cond)         \
  do {                           \
    if (!(cond)) __builtin_trap(); \
  } while (0)

void FuzzSuperblock(std::span<const uint8_t> in) {
  auto r = DecodeSuperblock(in);
  if (!r.ok()) return;
  FUZZ_CHECK(in.size() >= kSuperblockEncodedBytes);
  std::array<uint8_t, kSuperblockEncodedBytes> out;
  EncodeSuperblock(*r, out);
  FUZZ_CHECK(std::memcmp(out.data(), in.data(), out.size()) == 0);
}

void FuzzSegmentHeader(std::span<const uint8_t> in) {
  auto r = DecodeSegmentHeader(in);
  if (!r.ok()) return;
  FUZZ_CHECK(in.size() >= kSegmentHeaderEncodedBytes);
  std::array<uint8_t, kSegmentHeaderEncodedBytes> out;
  EncodeSegmentHeader(*r, out);
  // An older format version decodes too (older stores open) and is written
  // back as the current one: every byte but the version and the checksum
  // comes back, and all of them for a header of the current version.
  constexpr size_t kVersionAt = 4, kChecksumAt = kSegmentHeaderEncodedBytes - 8;
  FUZZ_CHECK(GetFixed16(out.data() + kVersionAt) == kFormatVersion);
  FUZZ_CHECK(std::memcmp(out.data(), in.data(), kVersionAt) == 0);
  FUZZ_CHECK(std::memcmp(out.data() + kVersionAt + 2, in.data() + kVersionAt + 2, kChecksumAt - kVersionAt - 2) == 0);
  if (GetFixed16(in.data() + kVersionAt) == kFormatVersion)
    FUZZ_CHECK(std::memcmp(out.data(), in.data(), out.size()) == 0);
}

void FuzzRecordHeader(std::span<const uint8_t> in) {
  std::string_view key;
  auto r = DecodeRecordHeader(in, kFuzzMaxPayload, &key);
  if (!r.ok()) return;
  // The key must lie inside the input.
  const auto* k = reinterpret_cast<const uint8_t*>(key.data());
  const size_t head = HeaderBytes(r->flags);
  FUZZ_CHECK(key.size() == r->key_len && key.size() >= 1 && key.size() <= kMaxKeyBytes);
  FUZZ_CHECK(k == in.data() + head);
  FUZZ_CHECK(head + key.size() <= in.size());
  FUZZ_CHECK(r->payload_len >= 1 && r->payload_len <= kFuzzMaxPayload);
  FUZZ_CHECK(KnownRecordFlags(r->flags));
  FUZZ_CHECK(IsCompact(r->flags) == (GetFixed32(in.data()) == kCompactRecordMagic));
  FUZZ_CHECK(RecordBytes(key.size(), r->payload_len, r->flags) % (IsDense(r->flags) ? kDenseAlign : kPage) == 0);
  std::vector<uint8_t> out(head + key.size());
  EncodeRecordHeader(*r, key, out.data());
  // A compact header has one encoding of its fields: it re-encodes exactly.
  if (IsCompact(r->flags) || GetFixed16(in.data() + 4) == kFormatVersion) {
    FUZZ_CHECK(std::memcmp(out.data(), in.data(), out.size()) == 0);
  } else {
    // An older version still read: the encoder writes today's version, so
    // the version and the header checksum over it differ; nothing else.
    FUZZ_CHECK(std::memcmp(out.data(), in.data(), 4) == 0);
    FUZZ_CHECK(std::memcmp(out.data() + 6, in.data() + 6, 58) == 0);
    FUZZ_CHECK(std::memcmp(out.data() + kRecordHeaderBytes, in.data() + kRecordHeaderBytes, key.size()) == 0);
  }
}

void FuzzIndexValue(std::string_view in) {
  auto r = DecodeIndexValue(in);
  if (!r.ok()) return;
  FUZZ_CHECK(EncodeIndexValue(*r) == in);
  (void)r->RecordBytes();
}

void FuzzNamespaceSpec(std::string_view in) {
  auto r = NamespaceSpec::Decode(in);
  if (!r.ok()) return;
  FUZZ_CHECK(r->Validate().ok());
  const std::string enc = r->Encode();
  FUZZ_CHECK(enc == in);  // the encoding is canonical
  auto again = NamespaceSpec::Decode(enc);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->Fingerprint() == r->Fingerprint());
  FUZZ_CHECK(r->Fingerprint() != 0);
  (void)r->DisplayName();
}

void FuzzNamespaceIdHex(std::string_view in) {
  auto r = NamespaceIdFromHex(in);
  if (!r.ok()) return;
  const std::string hex = NamespaceIdToHex(*r);
  FUZZ_CHECK(hex.size() == in.size());
  for (size_t i = 0; i < hex.size(); ++i) {
    const char c = (in[i] >= 'A' && in[i] <= 'F') ? static_cast<char>(in[i] - 'A' + 'a') : in[i];
    FUZZ_CHECK(hex[i] == c);
  }
}

// Builds a spec from the input and checks that the stored form keeps its id.
void FuzzSpecFingerprint(std::string_view in) {
  NamespaceSpec s;
  const size_t half = in.size() / 2;
  s.model_id = std::string(in.substr(0, half));
  s.tenant_salt = std::string(in.substr(half));
  if (!in.empty()) s.tp_size = static_cast<uint8_t>(in[0]) % 8 + 1;
  if (!s.Validate().ok()) return;
  auto r = NamespaceSpec::Decode(s.Encode());
  FUZZ_CHECK(r.ok());
  FUZZ_CHECK(r->Fingerprint() == s.Fingerprint());
}

// Copies `in` into an exactly sized heap buffer (so ASan sees its end), with
// the checksum at `sum_at` recomputed over [0, sum_at).
std::vector<uint8_t> Resigned(std::span<const uint8_t> in, size_t sum_at) {
  std::vector<uint8_t> v(in.begin(), in.end());
  if (v.size() >= sum_at + 8) PutFixed64(v.data() + sum_at, XXH3_64bits(v.data(), sum_at));
  return v;
}

std::vector<uint8_t> ResignedRecord(std::span<const uint8_t> in) {
  std::vector<uint8_t> v(in.begin(), in.end());
  if (v.size() >= kCompactHeaderBytes && GetFixed32(v.data()) == kCompactRecordMagic) {
    const size_t key_len = v[4];
    if (v.size() < kCompactHeaderBytes + key_len) return v;
    std::vector<uint8_t> covered(v.begin(), v.begin() + 44);
    covered.insert(covered.end(), v.begin() + kCompactHeaderBytes, v.begin() + kCompactHeaderBytes + key_len);
    PutFixed32(v.data() + 44, static_cast<uint32_t>(XXH3_64bits(covered.data(), covered.size())));
    return v;
  }
  if (v.size() < kRecordHeaderBytes) return v;
  const size_t key_len = GetFixed16(v.data() + 8);
  if (key_len > kMaxKeyBytes || v.size() < kRecordHeaderBytes + key_len) return v;
  std::vector<uint8_t> covered(v.begin(), v.begin() + 64);
  covered.insert(covered.end(), v.begin() + kRecordHeaderBytes,
                 v.begin() + kRecordHeaderBytes + key_len);
  PutFixed64(v.data() + 64, XXH3_64bits(covered.data(), covered.size()));
  return v;
}

// Structure-aware path: fields taken from the input, encoded, optionally
// damaged at one input-chosen byte, decoded. Reaches the success paths that
// raw bytes rarely hit (a valid segment size, a matching checksum) and checks
// that an undamaged encoding decodes to the same fields.
class Bytes {
 public:
  explicit Bytes(std::span<const uint8_t> in) : in_(in) {}
  uint64_t U64() {
    uint8_t b[8] = {};
    for (auto& x : b) x = pos_ < in_.size() ? in_[pos_++] : 0;
    return GetFixed64(b);
  }
  std::span<const uint8_t> Rest() { return in_.subspan(pos_); }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

void FuzzStructured(std::span<const uint8_t> in) {
  Bytes b(in);
  const uint64_t damage = b.U64();  // low 16 bits: byte to flip, 0 = none
  const size_t flip_at = damage & 0xffff;
  const auto flip_mask = static_cast<uint8_t>(damage >> 16);
  auto damaged = [&](std::vector<uint8_t>* v) {
    if (flip_at == 0 || flip_mask == 0 || flip_at > v->size()) return false;
    (*v)[flip_at - 1] ^= flip_mask;
    return true;
  };

  Superblock sb;
  sb.format_version = static_cast<uint32_t>(b.U64() % 3);
  for (size_t i = 0; i < 16; ++i) sb.store_id[i] = static_cast<uint8_t>(b.U64());
  sb.segment_size = (b.U64() % 70) << 30 >> (b.U64() % 11);
  sb.created_unix_ms = b.U64();
  sb.flags = b.U64();
  {
    std::vector<uint8_t> v(kSuperblockEncodedBytes);
    EncodeSuperblock(sb, std::span<uint8_t, kSuperblockEncodedBytes>(v.data(), v.size()));
    const bool hit = damaged(&v);
    auto r = DecodeSuperblock(v);
    if (hit) FUZZ_CHECK(!r.ok());
    if (r.ok()) {
      FUZZ_CHECK(r->format_version == sb.format_version && r->store_id == sb.store_id &&
                 r->segment_size == sb.segment_size && r->flags == sb.flags &&
                 r->created_unix_ms == sb.created_unix_ms);
    }
    FuzzSuperblock(v);
  }

  SegmentHeader sh;
  sh.segment_id = static_cast<uint32_t>(b.U64());
  sh.generation = static_cast<uint32_t>(b.U64());
  sh.epoch = b.U64();
  sh.store_id = sb.store_id;
  sh.segment_size = sb.segment_size;
  sh.opened_unix_ms = b.U64();
  {
    std::vector<uint8_t> v(kSegmentHeaderEncodedBytes);
    EncodeSegmentHeader(sh, std::span<uint8_t, kSegmentHeaderEncodedBytes>(v.data(), v.size()));
    const bool hit = damaged(&v);
    auto r = DecodeSegmentHeader(v);
    if (hit) FUZZ_CHECK(!r.ok());
    if (r.ok()) {
      FUZZ_CHECK(r->segment_id == sh.segment_id && r->generation == sh.generation &&
                 r->epoch == sh.epoch && r->segment_size == sh.segment_size);
    }
    FuzzSegmentHeader(v);
  }

  RecordHeader rh;
  rh.flags = static_cast<uint16_t>(b.U64());
  rh.segment_id = sh.segment_id;
  rh.generation = sh.generation;
  rh.ns_id = b.U64();
  rh.sequence = b.U64();
  rh.payload_len = b.U64() % (kFuzzMaxPayload + 2);
  rh.payload_checksum = b.U64();
  rh.written_unix_ms = b.U64();
  const size_t truncate = static_cast<size_t>(b.U64() % 512);  // bytes cut off the end
  std::span<const uint8_t> rest = b.Rest();
  if (rest.empty() || rest.size() > kMaxKeyBytes) return;
  const std::string key(reinterpret_cast<const char*>(rest.data()), rest.size());
  if (IsCompact(rh.flags)) {
    // What the writer guarantees before it encodes a compact header.
    rh.flags = kRecordDense | kRecordCompact;
    rh.sequence &= kCompactMaxSequence;
    rh.payload_len = std::min<uint64_t>(rh.payload_len, kCompactMaxPayload);
    rh.written_unix_ms = rh.written_unix_ms % (uint64_t{UINT32_MAX} + 1) * 1000;
  }
  std::vector<uint8_t> v(HeaderBytes(rh.flags) + key.size());
  EncodeRecordHeader(rh, key, v.data());
  const bool hit = damaged(&v);
  const bool cut = truncate > 0 && truncate <= v.size();
  if (cut) v.resize(v.size() - truncate);
  std::string_view key_out;
  auto r = DecodeRecordHeader(v, kFuzzMaxPayload, &key_out);
  if (hit || cut) FUZZ_CHECK(!r.ok());
  if (r.ok()) {
    FUZZ_CHECK(key_out == key && r->payload_len == rh.payload_len && r->flags == rh.flags &&
               r->ns_id == rh.ns_id && r->sequence == rh.sequence && r->written_unix_ms == rh.written_unix_ms);
  } else if (!hit && !cut) {
    FUZZ_CHECK(rh.payload_len == 0 || rh.payload_len > kFuzzMaxPayload ||
               (!IsCompact(rh.flags) && (rh.flags & ~kRecordDense) != 0));
  }
  FuzzRecordHeader(v);
}

}  // namespace
}  // namespace kvtier::format

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier::format;
  const std::span<const uint8_t> in(data, size);
  const std::string_view sv(reinterpret_cast<const char*>(data), size);

  FuzzSuperblock(in);
  FuzzSegmentHeader(in);
  FuzzRecordHeader(in);
  FuzzIndexValue(sv);
  FuzzNamespaceSpec(sv);
  FuzzSpecFingerprint(sv);
  FuzzNamespaceIdHex(sv);
  if (size > 16) FuzzNamespaceIdHex(sv.substr(size - 16));

  FuzzSuperblock(Resigned(in, kSuperblockEncodedBytes - 8));
  FuzzSegmentHeader(Resigned(in, kSegmentHeaderEncodedBytes - 8));
  FuzzRecordHeader(ResignedRecord(in));

  FuzzStructured(in);
  return 0;
}
