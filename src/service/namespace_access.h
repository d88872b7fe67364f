// NamespaceAccess: which peer may use which namespace, and what the service
// counts per namespace.
//
// Without tenancy every peer may use every namespace. With tenancy by uid
// (gid), a spec a peer registers is salted with "uid:<n>/" ("gid:<n>/"), so
// two tenants registering the same model get two namespaces, and the service
// remembers which tenant each id belongs to: a request naming another
// tenant's id is answered as for an unknown namespace. Admins (the service's
// own uid, and root) may use every namespace.
//
// Thread safety: every method is thread-safe.
#ifndef KVTIER_SRC_SERVICE_NAMESPACE_ACCESS_H_
#define KVTIER_SRC_SERVICE_NAMESPACE_ACCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvtier/service.h"
#include "util/thread_annotations.h"
#include "wire/socket_io.h"

namespace kvtier::service {

struct Peer {
  wire::PeerCredentials creds;
  bool admin = false;
  uint64_t tenant = 0;  // uid or gid + 1 with tenancy; 0 without
};

class NamespaceAccess {
 public:
  NamespaceAccess(ServiceOptions::Tenancy tenancy, uid_t service_uid)
      : tenancy_(tenancy), service_uid_(service_uid) {}

  Peer PeerFor(const wire::PeerCredentials& c) const;
  // The spec as it is registered for `peer` (salted with its tenant).
  NamespaceSpec ForPeer(const Peer& peer, NamespaceSpec spec) const;
  // Records that `id` (registered from `spec`) belongs to the peer's tenant.
  void Registered(const Peer& peer, NamespaceId id, const NamespaceSpec& spec);
  // Whether the peer may use `id`.
  bool Allowed(const Peer& peer, NamespaceId id) const;

  // Counters (no-ops for ids never registered through the service).
  void CountPut(NamespaceId id, uint64_t bytes);
  void CountGet(NamespaceId id, bool hit, uint64_t bytes);
  void CountLookup(NamespaceId id, uint64_t keys, uint64_t hits);
  std::vector<ServiceNamespaceStats> Stats() const;

 private:
  struct Entry {
    uint64_t tenant = 0;
    ServiceNamespaceStats stats;
  };
  const ServiceOptions::Tenancy tenancy_;
  const uid_t service_uid_;
  mutable Mutex mu_;
  std::unordered_map<NamespaceId, Entry> entries_ GUARDED_BY(mu_);
};

}  // namespace kvtier::service

#endif  // KVTIER_SRC_SERVICE_NAMESPACE_ACCESS_H_
