// NamespaceRegistry: the namespaces a store knows, by id, in memory. What is
// registered is persisted by the caller (a file under namespaces/ and a row
// in the index, store_open.cc); this map is what puts, gets, recovery and
// the RAM tier's adoption ask on every call.
//
// Thread safety: every method is thread-safe (readers share the lock).
#ifndef KVTIER_SRC_STORE_NAMESPACE_REGISTRY_H_
#define KVTIER_SRC_STORE_NAMESPACE_REGISTRY_H_

#include <functional>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvtier/namespace.h"
#include "kvtier/status.h"
#include "util/thread_annotations.h"

namespace kvtier {

class NamespaceRegistry {
 public:
  bool Contains(NamespaceId id) const;
  std::optional<NamespaceSpec> Get(NamespaceId id) const;
  // The namespace's fixed block size (0: any), or nullopt when unknown;
  // asked on every put, so it copies no spec.
  std::optional<uint64_t> BlockBytes(NamespaceId id) const;
  // By hex id or display name.
  std::optional<NamespaceId> Find(std::string_view name_or_hex) const;
  std::vector<std::pair<NamespaceId, NamespaceSpec>> List() const;

  void Set(NamespaceId id, NamespaceSpec spec);
  void Erase(NamespaceId id);
  // Adds `id` unless it is known, after `persist` succeeded; persist runs
  // under the registry's lock, so racing registrations persist it once.
  Status AddIfAbsent(NamespaceId id, const NamespaceSpec& spec, const std::function<Status()>& persist);

 private:
  mutable SharedMutex mu_;
  std::unordered_map<NamespaceId, NamespaceSpec> specs_ GUARDED_BY(mu_);
};

}  // namespace kvtier

#endif  // KVTIER_SRC_STORE_NAMESPACE_REGISTRY_H_
