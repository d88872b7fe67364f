// The service's request parser (src/wire/requests.h) and the client's reply
// decoders (src/wire/messages.h) on arbitrary bytes: the service reads
// frames from any process that can reach its socket, and a client trusts no
// reply. Input: a 2-byte selector, then a frame body; the first 24 bytes are
// also tried as a frame header. Whatever parses must encode back to bytes
// that parse to the same request.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "wire/messages.h"
#include "wire/requests.h"
#include "wire/wire.h"

namespace {

using namespace kvtier;
using namespace kvtier::wire;

template <typename R>
void RoundTrip(std::string_view body) {
  R req;
  if (!Parse(body, &req).ok()) return;
  WireWriter w;
  Encode(w, req);
  R again;
  if (!Parse(w.body(), &again).ok()) __builtin_trap();
  WireWriter w2;
  Encode(w2, again);
  if (w.body() != w2.body()) __builtin_trap();
}

template <typename T>
void DecodeReply(std::string_view body) {
  WireReader r(body);
  T v{};
  Decode(r, &v);
  (void)r.Finish("reply");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= kHeaderBytes) (void)DecodeHeader(data);
  if (size < 2) return 0;
  const unsigned selector = data[0] | (data[1] << 8);
  const std::string_view body(reinterpret_cast<const char*>(data + 2), size - 2);
  switch (selector % 24) {
    case 0: RoundTrip<HelloRequest>(body); break;
    case 1: RoundTrip<RegisterRegionRequest>(body); break;
    case 2: RoundTrip<RegionRequest>(body); break;
    case 3: RoundTrip<SpecRequest>(body); break;
    case 4: RoundTrip<NameRequest>(body); break;
    case 5: RoundTrip<NamespaceRequest>(body); break;
    case 6: RoundTrip<PutRequest>(body); break;
    case 7: RoundTrip<GetRequest>(body); break;
    case 8: RoundTrip<KeyRequest>(body); break;
    case 9: RoundTrip<LookupRequest>(body); break;
    case 10: RoundTrip<ListBlocksRequest>(body); break;
    case 11: RoundTrip<U64Request>(body); break;
    case 12: RoundTrip<VerifyRequest>(body); break;
    case 13: DecodeReply<Stats>(body); break;
    case 14: DecodeReply<BlockInfo>(body); break;
    case 15: DecodeReply<VerifyReport>(body); break;
    case 16: DecodeReply<RecordInspection>(body); break;
    case 17: DecodeReply<NamespaceInfo>(body); break;
    case 18: DecodeReply<SegmentInfo>(body); break;
    case 20: {
      RoundTrip<GetBatchRequest>(body);
      WireReader r(body);
      std::vector<Result<size_t>> got;
      DecodeGetBatchReply(r, body.empty() ? 0 : static_cast<uint8_t>(body[0]), &got);
      (void)r.Finish("get_batch reply");
      break;
    }
    case 21: DecodeReply<TierMap>(body); break;
    case 22: DecodeReply<TierLease>(body); break;
    case 23: {
      WireReader r(body);
      std::vector<bool> present;
      DecodeKeyFlagsReply(r, body.empty() ? 0 : static_cast<uint8_t>(body[0]), &present);
      (void)r.Finish("key flags reply");
      break;
    }
    default: {
      WireReader r(body);
      (void)r.Status();
      (void)r.Fragments();
      (void)r.Finish("status");
    }
  }
  return 0;
}
