// The requests a client sends, each as a struct with one Encode (the
// client's) and one Parse (the service's), so that both sides read a body in
// the same order and the service's parser can be fuzzed on its own
// (tests/fuzz/wire_fuzz.cc). Parse checks every bound and that the body was
// read to its end; it never trusts a length or a count.
#ifndef KVTIER_SRC_WIRE_REQUESTS_H_
#define KVTIER_SRC_WIRE_REQUESTS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/namespace.h"
#include "kvtier/status.h"
#include "wire/wire.h"

namespace kvtier::wire {

inline constexpr size_t kMaxClientName = 256;
inline constexpr size_t kMaxSpecBytes = 64 << 10;
inline constexpr size_t kMaxNameBytes = 4096;
inline constexpr uint32_t kMaxListPage = 4096;

inline constexpr size_t kMaxProbeBytes = 64;

struct HelloRequest {
  std::string client_name;
  uint64_t staging_bytes = 0;  // 0: no staging region (then no descriptor)
  // Where the client holds `probe` (random bytes) for the service to read
  // back (wire/peer_memory.h); 0: puts never name the client's memory.
  uint64_t probe_address = 0;
  std::string probe;
};
struct RegisterRegionRequest {
  uint64_t bytes = 0;  // informational: the file's own size is what counts
};
struct RegionRequest {  // unregister_region
  uint32_t region = 0;
};
struct SpecRequest {  // register_namespace
  NamespaceSpec spec;
};
struct NameRequest {  // find_namespace
  std::string name;
};
struct NamespaceRequest {  // remove_namespace
  NamespaceId ns = 0;
};
struct PutRequest {
  NamespaceId ns = 0;
  std::string key;
  bool blocking = false;  // wait for room in the write queue (else NotAdmitted)
  // CLOCK_MONOTONIC instant after which the service no longer starts reading
  // `payload` (the put completes TimedOut); -1: none.
  int64_t start_by_ns = -1;
  std::vector<WireFragment> payload;
};
struct GetRequest {
  NamespaceId ns = 0;
  std::string key;
  int64_t deadline_ns = -1;  // CLOCK_MONOTONIC instant; -1: none
  // As GetBatchRequest's deadline: no read starts after it, and one under
  // way completes (it may write `out` directly); -1: none.
  int64_t start_by_ns = -1;
  std::vector<WireFragment> out;
};
struct GetBatchRequest {
  struct Item {
    std::string key;
    std::vector<WireFragment> out;
  };
  NamespaceId ns = 0;
  int64_t deadline_ns = -1;  // as GetRequest's, for every item
  std::vector<Item> items;   // 1..kMaxBatchGets
};
struct KeyRequest {  // contains, stat, remove, inspect_record
  NamespaceId ns = 0;
  std::string key;
};
struct LookupRequest {  // lookup_prefix, remove_batch, contains_batch, touch_batch (up to kMaxBatchKeys), pin_tier (up to kMaxBatchGets)
  NamespaceId ns = 0;
  std::vector<std::string> keys;
};
struct ListBlocksRequest {
  NamespaceId ns = 0;
  std::string prefix;
  bool has_after = false;
  NamespaceId after_ns = 0;  // the page starts after this entry
  std::string after;
  uint32_t max = 0;
};
struct U64Request {  // evict_to (bytes), share_now (ms), unpin_tier (lease)
  uint64_t value = 0;
};
struct VerifyRequest {
  bool deep = false;
};
struct ListNamespacesRequest {
  bool counts = true;  // each namespace's blocks and bytes (a walk of the index)
};

void Encode(WireWriter& w, const HelloRequest& r);
void Encode(WireWriter& w, const RegisterRegionRequest& r);
void Encode(WireWriter& w, const RegionRequest& r);
void Encode(WireWriter& w, const SpecRequest& r);
void Encode(WireWriter& w, const NameRequest& r);
void Encode(WireWriter& w, const NamespaceRequest& r);
void Encode(WireWriter& w, const PutRequest& r);
void Encode(WireWriter& w, const GetRequest& r);
void Encode(WireWriter& w, const GetBatchRequest& r);
void Encode(WireWriter& w, const KeyRequest& r);
void Encode(WireWriter& w, const LookupRequest& r);
void Encode(WireWriter& w, const ListBlocksRequest& r);
void Encode(WireWriter& w, const U64Request& r);
void Encode(WireWriter& w, const ListNamespacesRequest& r);
void Encode(WireWriter& w, const VerifyRequest& r);

// InvalidArgument naming the request when the body is malformed.
Status Parse(std::string_view body, HelloRequest* r);
Status Parse(std::string_view body, RegisterRegionRequest* r);
Status Parse(std::string_view body, RegionRequest* r);
Status Parse(std::string_view body, SpecRequest* r);
Status Parse(std::string_view body, NameRequest* r);
Status Parse(std::string_view body, NamespaceRequest* r);
Status Parse(std::string_view body, PutRequest* r);
Status Parse(std::string_view body, GetRequest* r);
Status Parse(std::string_view body, GetBatchRequest* r);
Status Parse(std::string_view body, KeyRequest* r);
Status Parse(std::string_view body, LookupRequest* r);
Status Parse(std::string_view body, ListBlocksRequest* r);
Status Parse(std::string_view body, U64Request* r);
Status Parse(std::string_view body, VerifyRequest* r);
Status Parse(std::string_view body, ListNamespacesRequest* r);
// An empty body (flush, get_stats, segments).
Status ParseEmpty(std::string_view body, const char* what);

}  // namespace kvtier::wire

#endif  // KVTIER_SRC_WIRE_REQUESTS_H_
