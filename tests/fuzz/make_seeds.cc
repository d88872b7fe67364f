// Writes the seed corpora committed under tests/fuzz/corpus/<target>/: a few
// small valid and nearly valid inputs per fuzz target, so each run starts
// past the magic numbers and checksums instead of rediscovering them.
//
//   kvtier_fuzz_seeds tests/fuzz/corpus
//
// Deterministic: rerunning it rewrites the same files. The layouts it writes
// follow the input formats documented at the top of each *_fuzz.cc.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "format/coding.h"
#include "format/record.h"
#include "kvtier/namespace.h"

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

namespace {

void Write(const fs::path& dir, const std::string& name, const Bytes& b) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
    std::exit(1);
  }
}

Bytes FromString(std::string_view s) { return Bytes(s.begin(), s.end()); }

void PutU16(Bytes* b, uint16_t v) {
  b->push_back(static_cast<uint8_t>(v));
  b->push_back(static_cast<uint8_t>(v >> 8));
}

// ---- scanner_fuzz: segment images ----
// Segment 7, generation 3 (the ids scanner_fuzz.cc scans for).
Bytes Record(uint32_t seg, uint32_t gen, std::string_view key, size_t payload_len, uint8_t fill, uint16_t flags = 0) {
  Bytes rec(kvtier::format::RecordBytes(key.size(), payload_len, flags), 0);
  uint8_t* payload = rec.data() + kvtier::format::PayloadOffset(key.size(), payload_len, flags);
  for (size_t i = 0; i < payload_len; ++i) payload[i] = static_cast<uint8_t>(fill + i);
  kvtier::format::RecordHeader h;
  h.flags = flags;
  h.key_len = static_cast<uint16_t>(key.size());
  h.segment_id = seg;
  h.generation = gen;
  h.ns_id = 42;
  h.sequence = fill;
  h.payload_len = payload_len;
  h.payload_checksum = kvtier::format::Checksum(payload, payload_len);
  kvtier::format::EncodeRecordHeader(h, key, rec.data());
  return rec;
}

// Raw mode: [mode][max_payload u16][start u16][tail u8][segment bytes from 4096].
Bytes RawScannerSeed(uint8_t mode, const std::vector<Bytes>& records) {
  Bytes b{mode};
  PutU16(&b, 0xffff);  // max_payload = 1 + (0xffff << 4)
  PutU16(&b, 0);
  b.push_back(0);
  for (const Bytes& r : records) b.insert(b.end(), r.begin(), r.end());
  return b;
}

void ScannerSeeds(const fs::path& dir) {
  const Bytes a = Record(7, 3, "block-a", 100, 1);
  const Bytes b = Record(7, 3, "block-b", 3000, 2);
  const Bytes stale = Record(7, 2, "old", 10, 3);
  Write(dir, "raw_two_records", RawScannerSeed(0x01, {a, b}));
  Write(dir, "raw_stale_resync", RawScannerSeed(0x03, {stale, a}));
  Bytes torn = RawScannerSeed(0x00, {a, b});
  torn[6 + 4096 + 80] ^= 0x40;  // inside the second record's header
  Write(dir, "raw_torn", torn);

  // Structured mode (mode bit 2). Record op: [0][key_len-1][size class]
  // [payload_len-1 u16][damage][damage_at u16][fill][key bytes...]
  auto rec = [](Bytes* s, uint8_t damage, uint16_t payload_len_minus_1, std::string_view key) {
    s->push_back(0);
    s->push_back(static_cast<uint8_t>(key.size() - 1));
    s->push_back(0);
    PutU16(s, payload_len_minus_1);
    s->push_back(damage);
    PutU16(s, 77);
    s->push_back(0x5a);
    s->insert(s->end(), key.begin(), key.end());
  };
  for (uint8_t mode : {0x04, 0x05, 0x06, 0x07}) {
    Bytes s{mode, 0};   // max_payload = 1 + next u16
    PutU16(&s, 60000);
    rec(&s, 0, 100, "k1");
    rec(&s, 0, 5000, "k2");
    s.push_back(2);     // zero gap of 2 pages
    s.push_back(1);
    rec(&s, 4, 300, "k3");  // damaged payload
    rec(&s, 1, 50, "k4");   // stale generation
    s.push_back(3);     // garbage page
    for (int i = 0; i < 16; ++i) s.push_back(static_cast<uint8_t>(0x11 * i + 1));
    rec(&s, 3, 20, "k5");   // damaged header
    rec(&s, 0, 10, "k6");
    Write(dir, "structured_mode" + std::to_string(mode), s);
  }
}

// ---- superblock_fuzz: one superblock copy, one segment header ----
void SuperblockSeeds(const fs::path& dir) {
  kvtier::format::Superblock sb;
  for (size_t i = 0; i < sb.store_id.size(); ++i) sb.store_id[i] = static_cast<uint8_t>(i * 17);
  sb.segment_size = 256ull << 20;
  sb.created_unix_ms = 1764400000000ull;
  Bytes s(kvtier::format::kSuperblockEncodedBytes);
  kvtier::format::EncodeSuperblock(sb, std::span<uint8_t, kvtier::format::kSuperblockEncodedBytes>(s.data(), s.size()));
  Write(dir, "superblock", s);
  Bytes newer = s;
  newer.push_back(1);  // odd last byte: keep the fuzzed size when re-signing
  newer[4] = 2;        // format version 2: NotSupported once re-signed
  Write(dir, "superblock_v2", newer);

  kvtier::format::SegmentHeader h;
  h.segment_id = 5;
  h.generation = 9;
  h.epoch = 123456;
  h.store_id = sb.store_id;
  h.segment_size = sb.segment_size;
  h.opened_unix_ms = sb.created_unix_ms + 1000;
  Bytes g(kvtier::format::kSegmentHeaderEncodedBytes);
  kvtier::format::EncodeSegmentHeader(h, std::span<uint8_t, kvtier::format::kSegmentHeaderEncodedBytes>(g.data(), g.size()));
  Write(dir, "segment_header", g);
}

// ---- namespace_fuzz: encoded specs, ids, 0xff-separated fields ----
void NamespaceSeeds(const fs::path& dir) {
  kvtier::NamespaceSpec s;
  s.model_id = "Qwen/Qwen3-0.6B";
  s.model_revision = "main";
  s.dtype = "bf16";
  s.layout = "vllm-cross-layer";
  s.block_tokens = 16;
  s.block_bytes = 114688;
  s.tp_size = 2;
  s.tp_rank = 1;
  s.hash_scheme = "sha256_cbor";
  Write(dir, "spec_plain", FromString(s.Encode()));
  s.name = "qwen/bf16/tp1";
  s.tenant_salt = "tenant-a";
  s.adapter = "lora-7";
  Write(dir, "spec_salted", FromString(s.Encode()));
  Write(dir, "id_hex", FromString(kvtier::NamespaceIdToHex(s.Fingerprint())));
  const std::string sep = "\xff";
  Write(dir, "fields_pair",
        FromString("n" + sep + "model/a" + sep + "rev" + sep + sep + "tok" + sep + sep + "bf16" +
                   sep + "layout" + sep + "\x10" + sep + "\x01\x02" + sep + "\x01" + sep + sep +
                   "xxhash" + sep + "7" + sep + "salt" + sep + sep + "model/a" + sep + "rev"));
}

// ---- record_fuzz: each decoder's valid form ----
void RecordSeeds(const fs::path& dir) {
  const Bytes rec = Record(1, 1, "prefix-hash-0001", 4000, 9);
  Write(dir, "record_header", Bytes(rec.begin(), rec.begin() + kvtier::format::kRecordHeaderBytes + 16));
  const Bytes compact = Record(1, 1, "prefix-hash-0002", 4000, 9,
                               kvtier::format::kRecordDense | kvtier::format::kRecordCompact);
  Write(dir, "record_header_compact", Bytes(compact.begin(), compact.begin() + kvtier::format::kCompactHeaderBytes + 16));
  kvtier::format::IndexValue v;
  v.segment = 3;
  v.generation = 1;
  v.offset = 8192;
  v.payload_len = 4000;
  v.payload_checksum = 0x1234;
  v.key_len = 16;
  Write(dir, "index_value", FromString(kvtier::format::EncodeIndexValue(v)));
  kvtier::NamespaceSpec s;
  s.model_id = "m";
  s.dtype = "fp8_e4m3";
  Write(dir, "spec", FromString(s.Encode()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus-dir>\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  ScannerSeeds(root / "scanner");
  SuperblockSeeds(root / "superblock");
  NamespaceSeeds(root / "namespace");
  RecordSeeds(root / "record");
  return 0;
}
