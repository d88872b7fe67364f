#include "remote/summary.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>

#include "format/coding.h"
#include "format/record.h"

namespace kvtier::remote {
namespace {

constexpr uint32_t kSummaryMagic = 0x5352564Bu;  // "KVRS"
constexpr uint32_t kCatalogMagic = 0x4352564Bu;  // "KVRC"
constexpr uint32_t kCatalogVersion = 1;
// 2 added each entry's record flags (dense records, format 3); 3 lets those
// flags mark a compact header (format 4), which a version-2 reader refuses.
// 1 and 2 are still read.
constexpr uint32_t kSummaryVersion = 3;
constexpr size_t kMaxStringBytes = 1u << 20;

void PutString(std::string* out, std::string_view s) {
  format::AppendFixed32(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}

// Bounds-checked reader over an encoded buffer.
class Reader {
 public:
  explicit Reader(std::string_view in) : p_(in) {}
  bool U16(uint16_t* v) { return Take(2, [&](const uint8_t* b) { *v = format::GetFixed16(b); }); }
  bool U32(uint32_t* v) { return Take(4, [&](const uint8_t* b) { *v = format::GetFixed32(b); }); }
  bool U64(uint64_t* v) { return Take(8, [&](const uint8_t* b) { *v = format::GetFixed64(b); }); }
  bool Str(std::string* s) {
    uint32_t n = 0;
    return U32(&n) && n <= kMaxStringBytes && Bytes(n, s);
  }
  bool Bytes(size_t n, std::string* s) {
    if (n > p_.size()) return false;
    s->assign(p_.data(), n);
    p_.remove_prefix(n);
    return true;
  }
  bool done() const { return p_.empty(); }

 private:
  template <typename F>
  bool Take(size_t n, F f) {
    if (p_.size() < n) return false;
    f(reinterpret_cast<const uint8_t*>(p_.data()));
    p_.remove_prefix(n);
    return true;
  }
  std::string_view p_;
};

// Magic, version, body, then XXH3-64 of everything before it. Versions 1 to
// `max_version` are accepted; `version` (if not null) says which.
Result<std::string_view> CheckEnvelope(std::string_view in, uint32_t magic, const char* what, uint32_t max_version,
                                       uint32_t* version = nullptr) {
  if (in.size() < 16) return Status::Corruption(std::string(what) + ": too short");
  const auto* b = reinterpret_cast<const uint8_t*>(in.data());
  if (format::GetFixed32(b) != magic) return Status::Corruption(std::string(what) + ": bad magic");
  if (format::Checksum(b, in.size() - 8) != format::GetFixed64(b + in.size() - 8))
    return Status::Corruption(std::string(what) + ": checksum mismatch");
  const uint32_t v = format::GetFixed32(b + 4);
  if (v == 0 || v > max_version)
    return Status::NotSupported(std::string(what) + ": unknown version " + std::to_string(v));
  if (version != nullptr) *version = v;
  return in.substr(8, in.size() - 16);
}

void Seal(std::string* out) { format::AppendFixed64(out, format::Checksum(out->data(), out->size())); }

}  // namespace

std::string ObjectBase(std::string_view store_id, uint32_t segment, uint32_t generation) {
  char tail[32];
  std::snprintf(tail, sizeof(tail), ".%06u.%u", segment, generation);
  return "kvtier." + std::string(store_id) + tail;
}
std::string PartObject(std::string_view base, uint32_t part) {
  return std::string(base) + ".p" + std::to_string(part);
}
std::string SummaryObject(std::string_view base) { return std::string(base) + ".sum"; }
std::string BaseOfObject(std::string_view object) {
  if (!object.starts_with("kvtier.")) return "";
  if (object.ends_with(".sum")) return std::string(object.substr(0, object.size() - 4));
  const size_t dot = object.rfind('.');
  if (dot == std::string_view::npos || dot + 2 > object.size() || object[dot + 1] != 'p') return "";
  for (size_t i = dot + 2; i < object.size(); ++i)
    if (object[i] < '0' || object[i] > '9') return "";
  return dot + 2 == object.size() ? "" : std::string(object.substr(0, dot));
}
std::string SegmentSummary::ObjectBase() const { return remote::ObjectBase(store_id, segment, generation); }

std::string EncodeSummary(const SegmentSummary& s) {
  std::string out;
  out.reserve(64 + s.entries.size() * 64);
  format::AppendFixed32(&out, kSummaryMagic);
  format::AppendFixed32(&out, kSummaryVersion);
  PutString(&out, s.store_id);
  format::AppendFixed32(&out, s.segment);
  format::AppendFixed32(&out, s.generation);
  format::AppendFixed64(&out, s.epoch);
  format::AppendFixed64(&out, s.bytes);
  format::AppendFixed64(&out, s.part_bytes);
  format::AppendFixed64(&out, s.uploaded_unix_ms);
  format::AppendFixed32(&out, static_cast<uint32_t>(s.namespaces.size()));
  for (const auto& [id, spec] : s.namespaces) {
    format::AppendFixed64(&out, id);
    PutString(&out, spec);
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
    format::AppendFixed16(&out, e.flags);
  }
  Seal(&out);
  return out;
}

Result<SegmentSummary> DecodeSummary(std::string_view in) {
  uint32_t version = 0;
  auto body = CheckEnvelope(in, kSummaryMagic, "segment summary", kSummaryVersion, &version);
  if (!body.ok()) return body.status();
  Reader r(*body);
  SegmentSummary s;
  uint32_t nns = 0, nent = 0;
  const auto bad = [](const char* why) { return Status::Corruption(std::string("segment summary: ") + why); };
  if (!r.Str(&s.store_id) || !r.U32(&s.segment) || !r.U32(&s.generation) || !r.U64(&s.epoch) ||
      !r.U64(&s.bytes) || !r.U64(&s.part_bytes) || !r.U64(&s.uploaded_unix_ms) || !r.U32(&nns))
    return bad("truncated header");
  if (s.store_id.size() != 32) return bad("bad store id");
  if (s.part_bytes == 0 || s.bytes > format::kMaxSegmentBytes) return bad("bad sizes");
  for (uint32_t i = 0; i < nns; ++i) {
    std::pair<NamespaceId, std::string> ns;
    if (!r.U64(&ns.first) || !r.Str(&ns.second)) return bad("truncated namespaces");
    s.namespaces.push_back(std::move(ns));
  }
  if (!r.U32(&nent)) return bad("truncated entry count");
  for (uint32_t i = 0; i < nent; ++i) {
    SummaryEntry e;
    uint16_t klen = 0;
    if (!r.U64(&e.ns) || !r.U16(&klen)) return bad("truncated entry");
    if (klen == 0 || klen > format::kMaxKeyBytes) return bad("bad key length");
    if (!r.Bytes(klen, &e.key)) return bad("truncated key");
    if (!r.U64(&e.offset) || !r.U64(&e.payload_len) || !r.U64(&e.checksum) || !r.U64(&e.sequence) ||
        (version >= 2 && !r.U16(&e.flags)))
      return bad("truncated entry");
    if (!format::KnownRecordFlags(e.flags) || (version < 3 && format::IsCompact(e.flags)))
      return bad("unknown record flags");
    if (e.offset < format::kSegmentDataStart || e.payload_len == 0 ||
        e.offset % (format::IsDense(e.flags) ? format::kDenseAlign : format::kPage) != 0 ||
        e.offset + format::RecordBytes(klen, e.payload_len, e.flags) > s.bytes)
      return bad("entry outside the segment");
    s.entries.push_back(std::move(e));
  }
  if (!r.done()) return bad("trailing bytes");
  return s;
}

std::string CatalogKey(uint64_t uploaded_unix_ms, std::string_view base) {
  char head[24];
  std::snprintf(head, sizeof(head), "%016" PRIx64 ".", uploaded_unix_ms);
  return head + std::string(base);
}

std::string EncodeCatalogValue(const CatalogEntry& e) {
  std::string out;
  format::AppendFixed32(&out, kCatalogMagic);
  format::AppendFixed32(&out, kCatalogVersion);
  PutString(&out, e.base);
  format::AppendFixed64(&out, e.bytes);
  format::AppendFixed64(&out, e.part_bytes);
  format::AppendFixed64(&out, e.summary_bytes);
  Seal(&out);
  return out;
}

Result<CatalogEntry> DecodeCatalogValue(std::string_view key, std::string_view value) {
  auto body = CheckEnvelope(value, kCatalogMagic, "catalog entry", kCatalogVersion);
  if (!body.ok()) return body.status();
  Reader r(*body);
  CatalogEntry e;
  e.key.assign(key);
  if (!r.Str(&e.base) || !r.U64(&e.bytes) || !r.U64(&e.part_bytes) || !r.U64(&e.summary_bytes) || !r.done())
    return Status::Corruption("catalog entry " + std::string(key) + ": truncated");
  if (e.part_bytes == 0 || e.base.empty() || key.size() <= 17 || key.substr(17) != e.base)
    return Status::Corruption("catalog entry " + std::string(key) + ": inconsistent fields");
  return e;
}

uint64_t NowUnixMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace kvtier::remote
