#include "service/namespace_access.h"

namespace kvtier::service {

Peer NamespaceAccess::PeerFor(const wire::PeerCredentials& c) const {
  Peer p;
  p.creds = c;
  p.admin = c.uid == 0 || c.uid == service_uid_;
  if (tenancy_ == ServiceOptions::Tenancy::kUid) p.tenant = uint64_t{c.uid} + 1;
  if (tenancy_ == ServiceOptions::Tenancy::kGid) p.tenant = uint64_t{c.gid} + 1;
  return p;
}

NamespaceSpec NamespaceAccess::ForPeer(const Peer& peer, NamespaceSpec spec) const {
  if (peer.tenant == 0) return spec;
  const char* kind = tenancy_ == ServiceOptions::Tenancy::kUid ? "uid:" : "gid:";
  spec.tenant_salt = kind + std::to_string(peer.tenant - 1) + "/" + spec.tenant_salt;
  return spec;
}

void NamespaceAccess::Registered(const Peer& peer, NamespaceId id, const NamespaceSpec& spec) {
  MutexLock l(&mu_);
  Entry& e = entries_[id];
  e.tenant = peer.tenant;
  e.stats.id = id;
  e.stats.name = spec.DisplayName();
  e.stats.block_tokens = spec.block_tokens;
}

bool NamespaceAccess::Allowed(const Peer& peer, NamespaceId id) const {
  if (tenancy_ == ServiceOptions::Tenancy::kNone || peer.admin) return true;
  MutexLock l(&mu_);
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.tenant == peer.tenant;
}

void NamespaceAccess::CountPut(NamespaceId id, uint64_t bytes) {
  MutexLock l(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  ++it->second.stats.puts;
  it->second.stats.put_bytes += bytes;
}

void NamespaceAccess::CountGet(NamespaceId id, bool hit, uint64_t bytes) {
  MutexLock l(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  ServiceNamespaceStats& s = it->second.stats;
  ++s.gets;
  if (hit) {
    ++s.hits;
    s.hit_bytes += bytes;
  } else {
    ++s.misses;
  }
}

void NamespaceAccess::CountLookup(NamespaceId id, uint64_t keys, uint64_t hits) {
  MutexLock l(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  ServiceNamespaceStats& s = it->second.stats;
  ++s.lookups;
  s.lookup_keys += keys;
  s.lookup_hits += hits;
}

std::vector<ServiceNamespaceStats> NamespaceAccess::Stats() const {
  MutexLock l(&mu_);
  std::vector<ServiceNamespaceStats> out;
  for (const auto& [id, e] : entries_) out.push_back(e.stats);
  return out;
}

}  // namespace kvtier::service
