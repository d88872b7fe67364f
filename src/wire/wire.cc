#include "wire/wire.h"

#include <cstring>

#include "format/coding.h"

namespace kvtier::wire {

const char* OpName(uint16_t op) {
  switch (static_cast<Op>(op & ~kReplyBit)) {
    case Op::kHello: return "hello";
    case Op::kRegisterRegion: return "register_region";
    case Op::kUnregisterRegion: return "unregister_region";
    case Op::kRegisterNamespace: return "register_namespace";
    case Op::kFindNamespace: return "find_namespace";
    case Op::kListNamespaces: return "list_namespaces";
    case Op::kRemoveNamespace: return "remove_namespace";
    case Op::kPut: return "put";
    case Op::kGet: return "get";
    case Op::kContains: return "contains";
    case Op::kLookupPrefix: return "lookup_prefix";
    case Op::kStat: return "stat";
    case Op::kListBlocks: return "list_blocks";
    case Op::kRemove: return "remove";
    case Op::kGetBatch: return "get_batch";
    case Op::kRemoveBatch: return "remove_batch";
    case Op::kContainsBatch: return "contains_batch";
    case Op::kTouchBatch: return "touch_batch";
    case Op::kFlush: return "flush";
    case Op::kEvictTo: return "evict_to";
    case Op::kShareNow: return "share_now";
    case Op::kGetStats: return "get_stats";
    case Op::kSegments: return "segments";
    case Op::kVerify: return "verify";
    case Op::kInspectRecord: return "inspect_record";
    case Op::kMapTier: return "map_tier";
    case Op::kPinTier: return "pin_tier";
    case Op::kUnpinTier: return "unpin_tier";
  }
  return "unknown";
}

void EncodeHeader(const FrameHeader& h, uint8_t out[kHeaderBytes]) {
  format::PutFixed32(out, kWireMagic);
  format::PutFixed16(out + 4, h.version);
  format::PutFixed16(out + 6, h.op);
  format::PutFixed64(out + 8, h.id);
  format::PutFixed32(out + 16, h.body_bytes);
  format::PutFixed32(out + 20, 0);
}

Result<FrameHeader> DecodeHeader(const uint8_t in[kHeaderBytes]) {
  if (format::GetFixed32(in) != kWireMagic) return Status::InvalidArgument("not a kvtier service frame (bad magic)");
  FrameHeader h;
  h.version = format::GetFixed16(in + 4);
  h.op = format::GetFixed16(in + 6);
  h.id = format::GetFixed64(in + 8);
  h.body_bytes = format::GetFixed32(in + 16);
  if (h.version != kWireVersion)
    return Status::NotSupported("service protocol version " + std::to_string(h.version) + ", this side speaks " +
                                std::to_string(kWireVersion));
  if (h.body_bytes > kMaxBodyBytes)
    return Status::InvalidArgument("frame body of " + std::to_string(h.body_bytes) + " bytes is over the limit of " +
                                   std::to_string(kMaxBodyBytes));
  if (format::GetFixed32(in + 20) != 0) return Status::InvalidArgument("frame header: reserved bytes are not zero");
  return h;
}

void WireWriter::U16(uint16_t v) { format::AppendFixed16(&buf_, v); }
void WireWriter::U32(uint32_t v) { format::AppendFixed32(&buf_, v); }
void WireWriter::U64(uint64_t v) { format::AppendFixed64(&buf_, v); }

void WireWriter::F64(double v) {
  uint64_t bits;
  static_assert(sizeof bits == sizeof v);
  std::memcpy(&bits, &v, sizeof v);
  U64(bits);
}

void WireWriter::Bytes(std::string_view b) {
  U32(static_cast<uint32_t>(b.size()));
  buf_.append(b.data(), b.size());
}

void WireWriter::Status(const kvtier::Status& st) {
  U8(static_cast<uint8_t>(st.code()));
  const std::string& m = st.message();
  Bytes(std::string_view(m).substr(0, kMaxMessageBytes));
}

void WireWriter::Fragments(const std::vector<WireFragment>& frags) {
  U32(static_cast<uint32_t>(frags.size()));
  for (const WireFragment& f : frags) {
    U32(f.region);
    U64(f.offset);
    U64(f.size);
  }
}

std::string WireWriter::Frame(uint16_t op, uint64_t id) const {
  std::string out(kHeaderBytes, '\0');
  FrameHeader h;
  h.op = op;
  h.id = id;
  h.body_bytes = static_cast<uint32_t>(buf_.size());
  EncodeHeader(h, reinterpret_cast<uint8_t*>(out.data()));
  out += buf_;
  return out;
}

const uint8_t* WireReader::Take(size_t n) {
  if (!ok_ || static_cast<size_t>(end_ - p_) < n) {
    ok_ = false;
    return nullptr;
  }
  const uint8_t* at = p_;
  p_ += n;
  return at;
}

uint8_t WireReader::U8() {
  const uint8_t* p = Take(1);
  return p ? p[0] : 0;
}
uint16_t WireReader::U16() {
  const uint8_t* p = Take(2);
  return p ? format::GetFixed16(p) : 0;
}
uint32_t WireReader::U32() {
  const uint8_t* p = Take(4);
  return p ? format::GetFixed32(p) : 0;
}
uint64_t WireReader::U64() {
  const uint8_t* p = Take(8);
  return p ? format::GetFixed64(p) : 0;
}

double WireReader::F64() {
  const uint64_t bits = U64();
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

bool WireReader::Bool() {
  const uint8_t v = U8();
  if (v > 1) ok_ = false;
  return v == 1;
}

std::string_view WireReader::Bytes(size_t max) {
  const uint32_t n = U32();
  if (n > max) {
    ok_ = false;
    return {};
  }
  const uint8_t* p = Take(n);
  return p ? std::string_view(reinterpret_cast<const char*>(p), n) : std::string_view();
}

kvtier::Status WireReader::Status() {
  const uint8_t code = U8();
  std::string msg = String(kMaxMessageBytes);
  if (code > static_cast<uint8_t>(Code::kAborted)) {
    ok_ = false;
    return kvtier::Status::InvalidArgument("unknown status code in a reply");
  }
  if (code == 0) return kvtier::Status::OK();
  return kvtier::Status(static_cast<Code>(code), std::move(msg));
}

uint32_t WireReader::Count(uint32_t max, size_t min_item_bytes) {
  const uint32_t n = U32();
  // A count the rest of the body cannot hold is a lie: refuse it before
  // anyone reserves memory for it.
  if (n > max || (min_item_bytes != 0 && n > static_cast<size_t>(end_ - p_) / min_item_bytes)) {
    ok_ = false;
    return 0;
  }
  return n;
}

std::vector<WireFragment> WireReader::Fragments() {
  const uint32_t n = Count(kMaxFragments, 4 + 8 + 8);
  std::vector<WireFragment> out(n);
  for (WireFragment& f : out) {
    f.region = U32();
    f.offset = U64();
    f.size = U64();
  }
  if (!ok_) out.clear();
  return out;
}

std::string_view WireReader::Rest() {
  if (!ok_) return {};
  std::string_view r(reinterpret_cast<const char*>(p_), static_cast<size_t>(end_ - p_));
  p_ = end_;
  return r;
}

kvtier::Status WireReader::Finish(std::string_view what) const {
  if (ok_ && p_ == end_) return kvtier::Status::OK();
  return kvtier::Status::InvalidArgument(std::string("malformed ") + std::string(what) +
                                         (ok_ ? " message: bytes left over" : " message: a field is out of bounds"));
}

}  // namespace kvtier::wire
