#include "store/namespace_registry.h"

namespace kvtier {

bool NamespaceRegistry::Contains(NamespaceId id) const {
  ReaderLock l(&mu_);
  return specs_.count(id) != 0;
}

std::optional<NamespaceSpec> NamespaceRegistry::Get(NamespaceId id) const {
  ReaderLock l(&mu_);
  auto it = specs_.find(id);
  if (it == specs_.end()) return std::nullopt;
  return it->second;
}

std::optional<uint64_t> NamespaceRegistry::BlockBytes(NamespaceId id) const {
  ReaderLock l(&mu_);
  auto it = specs_.find(id);
  if (it == specs_.end()) return std::nullopt;
  return it->second.block_bytes;
}

std::optional<NamespaceId> NamespaceRegistry::Find(std::string_view name_or_hex) const {
  ReaderLock l(&mu_);
  auto id = NamespaceIdFromHex(name_or_hex);
  if (id.ok() && specs_.count(*id)) return *id;
  for (const auto& [nid, spec] : specs_)
    if (spec.DisplayName() == name_or_hex) return nid;
  return std::nullopt;
}

std::vector<std::pair<NamespaceId, NamespaceSpec>> NamespaceRegistry::List() const {
  ReaderLock l(&mu_);
  return {specs_.begin(), specs_.end()};
}

void NamespaceRegistry::Set(NamespaceId id, NamespaceSpec spec) {
  WriterLock l(&mu_);
  specs_[id] = std::move(spec);
}

void NamespaceRegistry::Erase(NamespaceId id) {
  WriterLock l(&mu_);
  specs_.erase(id);
}

Status NamespaceRegistry::AddIfAbsent(NamespaceId id, const NamespaceSpec& spec,
                                      const std::function<Status()>& persist) {
  WriterLock l(&mu_);
  if (specs_.count(id)) return Status::OK();
  KVTIER_RETURN_IF_ERROR(persist());
  specs_[id] = spec;
  return Status::OK();
}

}  // namespace kvtier
