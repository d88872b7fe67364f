// kvtier::Service: one process serves one store to every process on a node
// (`kvtier serve`, docs/service.md).
//
// Clients open the service with Store::Open("unix:/path/to.sock", options)
// (or "auto:DIR", below) and get the same Store interface as an embedded
// store. Requests travel on the Unix socket; payloads never do: they move
// through shared memory the client registered (a sealed memfd staging area of
// Options::client.staging_bytes, or the client's own shareable mappings), and
// the service reads or writes them there, so a put or a get copies its bytes
// at most once on the host where the client's buffer is shared memory, twice
// where the client has to stage them.
//
// Contract
// - Every acknowledged put is durable in the served store: killing the
//   service with SIGKILL loses nothing acknowledged (the embedded contract).
//   Clients then see errors or misses, never a hang (every wait is bounded),
//   and reconnect when the service is back.
// - A client that dies mid-request leaves nothing half-visible; its
//   in-flight requests complete inside the service and its regions are
//   unmapped once they have.
// - Each client may have at most max_client_inflight_bytes of puts and
//   max_client_requests requests in flight; beyond them a put is answered
//   NotAdmitted and other requests InvalidArgument.
// - A client may borrow the RAM tier for copies straight out of it (a GPU
//   load: map_tier hands it the tier's file read-only, pin_tier pins blocks
//   there until it unpins them or goes). Only without tenancy, or to the
//   service's own uid and root: the file holds every tenant's blocks. Each
//   client may pin at most max_client_pinned_bytes, and all clients together
//   half the tier; blocks past either are answered as not pinned and read
//   the usual way.
// - Malformed, truncated or hostile frames get an error reply or a closed
//   connection; the service carries on.
// - Peers are identified by SO_PEERCRED. With tenancy by uid (gid), a
//   namespace a peer registers is salted with its uid (gid) and only peers of
//   that uid (gid), and the service's own uid and root, can use it.
//
// Thread safety: Start/Stop from one thread; GetStats from any.
#ifndef KVTIER_SERVICE_H_
#define KVTIER_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/store.h"

namespace kvtier {

// The names a service started for a store folder (`kvtier serve DIR`,
// "auto:DIR") uses inside it: its socket and, when auto: started it, its log.
inline constexpr const char* kServiceSocketName = "kvtier.sock";
inline constexpr const char* kServiceLogName = "kvtier-serve.log";

struct ServiceOptions {
  // The socket to listen on. A stale socket file (nobody answers) is
  // replaced; a live one is an error (Busy).
  std::string socket_path;
  // Permissions and group of the socket file (the group by name or number;
  // empty keeps the process's).
  unsigned socket_mode = 0660;
  std::string socket_group;
  enum class Tenancy : uint8_t { kNone, kUid, kGid };
  Tenancy tenancy = Tenancy::kNone;
  uint64_t max_client_inflight_bytes = 1ull << 30;
  uint32_t max_client_requests = 4096;
  // RAM-tier bytes one client may hold pinned (pin_tier): pinned blocks
  // cannot be evicted, so this bounds what one client keeps from the others.
  uint64_t max_client_pinned_bytes = 4ull << 30;
  uint32_t max_clients = 256;
  // Largest region a client may register.
  uint64_t max_region_bytes = 64ull << 30;
  // While a client waits for a reply, or has just been answered, its next
  // request is a round trip away: the connection's reader polls the socket
  // for it up to this long instead of sleeping, so that the request finds it
  // awake (waking a sleeping thread costs a virtual machine's host 70-110
  // us, a share of a 2 ms put). At most one reader per 8 cores polls at
  // once, and never more than 4. 0 (the default): always sleep. -1: 3,000
  // on hosts of 8 cores or more, else 0 (where a polling reader would take
  // a core the store and its clients need).
  int32_t reader_spin_us = 0;
  // Threads that read one put's payload from a client's own memory, the
  // connection's included (where the client did not register it): the
  // kernel pins each 4 KiB page it reads, so one thread reads at about 0.4x
  // of a memcpy, and a lone client's put waits on it. A put is split only
  // while at most as many such reads run as there are threads beside the
  // connection's. -1 (default): the connection's and a quarter of the cores
  // beside it, at most 4, and 1 (never split) below 8 cores, where the store
  // and its clients need them.
  int32_t client_read_threads = -1;
  // One line per event an operator should see (a client connects or goes, a
  // frame is refused). Null: stderr.
  std::function<void(const std::string&)> log;
};

// What the service counts per namespace (of what passed through it).
struct ServiceNamespaceStats {
  NamespaceId id = 0;
  std::string name;
  uint32_t block_tokens = 0;  // from the spec: tokens = blocks x block_tokens
  uint64_t puts = 0, put_bytes = 0;
  uint64_t gets = 0, hits = 0, hit_bytes = 0, misses = 0;
  uint64_t lookups = 0, lookup_keys = 0, lookup_hits = 0;
};

struct ServiceStats {
  uint32_t clients = 0;
  uint64_t connections = 0;     // accepted since start
  uint64_t disconnects = 0;
  uint64_t requests = 0;
  uint64_t malformed = 0;       // frames refused as malformed
  uint64_t over_cap = 0;        // puts answered NotAdmitted for a client's cap
  uint64_t regions = 0;         // mapped now
  // Bytes of clients' regions (staging, registered memory) whose pages the
  // service mapped ahead of the first copy into or out of them, since start.
  uint64_t region_bytes_populated = 0;
  uint64_t pooled_gets = 0;     // gets and get_batch requests run on the service's get threads
  uint64_t pooled_puts = 0;     // blocking puts that waited for write-queue room on a service thread
  // Puts whose payload the service read from the client's own memory
  // (process_vm_readv, one copy) instead of the client's staging.
  uint64_t client_memory_puts = 0;
  // Of them, those read by several threads at once (client_read_threads).
  uint64_t client_memory_split_puts = 0;
  uint64_t polled_requests = 0;  // requests a connection's reader found while polling (reader_spin_us)
  uint64_t tier_maps = 0;          // RAM tier files handed to clients (map_tier), since start
  uint64_t tier_lent_blocks = 0;   // blocks pinned for clients' own copies (pin_tier), since start
  uint64_t tier_pinned_bytes = 0;  // RAM-tier bytes clients hold pinned now
  std::vector<ServiceNamespaceStats> namespaces;
};

class Service {
 public:
  // Serves `store` (which must outlive the service) on options.socket_path.
  [[nodiscard]] static Result<std::unique_ptr<Service>> Start(Store* store, const ServiceOptions& options);
  virtual ~Service() = default;  // stops
  // Stops accepting, disconnects every client after its in-flight requests
  // completed, and removes the socket file.
  virtual void Stop() = 0;
  virtual ServiceStats GetStats() = 0;
};

}  // namespace kvtier

#endif  // KVTIER_SERVICE_H_
