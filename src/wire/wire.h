// The service's wire protocol: frames on a Unix stream socket between a
// client (client/service_store.h) and `kvtier serve` (service/server.h).
//
// A frame is a fixed header and a body:
//
//   [0,4)   magic 0x5653564B ("KVSV")
//   [4,6)   protocol version (kWireVersion)
//   [6,8)   opcode (Op)
//   [8,16)  request id: chosen by the client, carried back by the reply
//   [16,20) body bytes, at most kMaxBodyBytes
//   [20,24) zero
//
// All integers little-endian. A body is a sequence of fields read in a fixed
// order per opcode (docs/service.md draws each): fixed-width integers, and
// byte strings as a u32 length then the bytes, each length bounded by what
// its field may hold. A reply has the request's opcode with kReplyBit set and
// starts with a status (u8 code, string message).
//
// Payload bytes never travel in frames: a request names them as fragments of
// shared-memory regions (memfds) the client registered; a region's file
// descriptor travels once, as SCM_RIGHTS ancillary data of the frame that
// registers it.
//
// Decoding never trusts a length: WireReader fails (and stays failed) on any
// read past the body or over a bound, and the frame is answered with
// InvalidArgument or the connection closed.
#ifndef KVTIER_SRC_WIRE_WIRE_H_
#define KVTIER_SRC_WIRE_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::wire {

inline constexpr uint32_t kWireMagic = 0x5653564B;
// 2: Stats carries the lookup map's state; 3: get_batch; 4: Stats carries
// the hot region's segments and the disk reads' phase times; 5: and the
// puts' phase times; 7: map_tier, pin_tier and unpin_tier; 8: remove_batch
// and contains_batch; 9: touch_batch; 10: Stats carries touches,
// list_blocks resumes after a (namespace, key), list_namespaces says
// whether to count blocks; 11: put and get carry a start deadline, after
// which the service no longer starts reading or writing the client's memory;
// 12: hello carries a memory probe and its reply whether the service reads
// the client's own memory, and a put's fragments may lie there; 13: Stats
// says whether the index refuses writes; 14: Stats counts reclaims that
// passed over the oldest segment; 15: and the RAM tier's payload
// and prefaulted bytes.
inline constexpr uint16_t kWireVersion = 16;
inline constexpr size_t kHeaderBytes = 24;
inline constexpr uint32_t kMaxBodyBytes = 4u << 20;
inline constexpr uint32_t kMaxFragments = 64;     // per put or get
inline constexpr uint32_t kMaxBatchKeys = 4096;   // per lookup
inline constexpr uint32_t kMaxBatchGets = 1024;   // per get_batch
inline constexpr uint32_t kMaxMessageBytes = 4096;  // a status message
inline constexpr uint16_t kReplyBit = 0x8000;

enum class Op : uint16_t {
  kHello = 1,             // client name, staging region (fd) -> server version, store description
  kRegisterRegion = 2,    // (fd) size -> region id
  kUnregisterRegion = 3,  // region id
  kRegisterNamespace = 10,
  kFindNamespace = 11,
  kListNamespaces = 12,
  kRemoveNamespace = 13,
  kPut = 20,              // ns, key, flags, fragments -> status
  kGet = 21,              // ns, key, deadline, fragments -> size
  kContains = 22,
  kLookupPrefix = 23,
  kStat = 24,
  kListBlocks = 25,       // a page of entries after a key
  kRemove = 26,
  kGetBatch = 27,         // ns, deadline, [key, fragments] -> [status, size]
  kRemoveBatch = 28,      // ns, keys -> [present]
  kContainsBatch = 29,    // ns, keys -> [present]
  kFlush = 30,
  kEvictTo = 31,
  kShareNow = 32,
  kTouchBatch = 33,       // ns, keys -> [present]
  kGetStats = 40,
  kSegments = 41,
  kVerify = 42,
  kInspectRecord = 43,
  // The RAM tier lent to a client for copies straight out of it (a GPU
  // load): map_tier's reply carries the tier file's descriptor, read-only;
  // pin_tier pins blocks there until unpin_tier or the connection ends.
  kMapTier = 50,          // -> file bytes, data offset, data bytes (fd)
  kPinTier = 51,          // ns, keys -> lease, [pinned, size, checksum, pieces]
  kUnpinTier = 52,        // lease
};
const char* OpName(uint16_t op);

struct FrameHeader {
  uint16_t version = kWireVersion;
  uint16_t op = 0;
  uint64_t id = 0;
  uint32_t body_bytes = 0;
};
void EncodeHeader(const FrameHeader& h, uint8_t out[kHeaderBytes]);
// InvalidArgument for a bad magic, an unknown version or an oversized body.
Result<FrameHeader> DecodeHeader(const uint8_t in[kHeaderBytes]);

// The region of a put's fragments that lie in the client's own memory (the
// offset is the address), read by the service with process_vm_readv; only
// after hello's reply said it can (PeerMemory), and never mixed with others.
inline constexpr uint32_t kClientMemoryRegion = 0xFFFFFFFFu;

// A piece of a payload in a registered region.
struct WireFragment {
  uint32_t region = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

class WireWriter {
 public:
  void U8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v);
  void U32(uint32_t v);
  void U64(uint64_t v);
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F64(double v);
  void Bool(bool v) { U8(v ? 1 : 0); }
  void Bytes(std::string_view b);
  void Status(const kvtier::Status& st);
  void Fragments(const std::vector<WireFragment>& frags);
  // A frame: header then the body written so far.
  std::string Frame(uint16_t op, uint64_t id) const;
  const std::string& body() const { return buf_; }

 private:
  std::string buf_;
};

class WireReader {
 public:
  WireReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  explicit WireReader(std::string_view body)
      : WireReader(reinterpret_cast<const uint8_t*>(body.data()), body.size()) {}
  uint8_t U8();
  uint16_t U16();
  uint32_t U32();
  uint64_t U64();
  int64_t I64() { return static_cast<int64_t>(U64()); }
  double F64();
  bool Bool();
  // A byte string of at most `max` bytes (views into the body).
  std::string_view Bytes(size_t max);
  std::string String(size_t max) { return std::string(Bytes(max)); }
  kvtier::Status Status();
  std::vector<WireFragment> Fragments();
  // What is left of the body (consumed).
  std::string_view Rest();
  // Count for a list of at most `max` items, each at least `min_item_bytes`.
  uint32_t Count(uint32_t max, size_t min_item_bytes);
  bool ok() const { return ok_; }
  // Marks the body malformed (a value out of its field's range).
  void Fail() { ok_ = false; }
  // OK when every read stayed in bounds and the body was read to its end.
  kvtier::Status Finish(std::string_view what) const;

 private:
  const uint8_t* Take(size_t n);
  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

}  // namespace kvtier::wire

#endif  // KVTIER_SRC_WIRE_WIRE_H_
