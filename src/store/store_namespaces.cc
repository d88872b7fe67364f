// Namespaces: registered, found, listed and removed; persisted as one file
// each under namespaces/ and a row in the index.
#include <algorithm>

#include "format/coding.h"
#include "store/layout.h"
#include "store/store_impl.h"

namespace kvtier {

// Namespaces live in the index and, so that the index can be rebuilt from
// the store folder alone, in one small checksummed file each under
// namespaces/. The files are authoritative; the index copy serves listing.
Status StoreImpl::LoadNamespaces() {
  auto list = index_->ListNamespaces();
  if (!list.ok()) return list.status();
  for (auto& [id, spec] : *list) namespaces_.Set(id, std::move(spec));
  const std::string nsdir = layout::NamespacesDir(dir_);
  auto names = fs_->ListDir(nsdir);
  if (!names.ok()) return names.status().IsNotFound() ? Status::OK() : names.status();
  for (const std::string& n : *names) {
    if (n.size() != 19 || n.substr(16) != ".ns") continue;
    OpenFlags f;
    f.read_only = true;
    auto file = fs_->Open(nsdir + "/" + n, f);
    if (!file.ok()) return file.status();
    auto size = (*file)->Size();
    if (!size.ok()) return size.status();
    if (*size < 8 || *size > (1u << 20)) return Status::Corruption(nsdir + "/" + n + ": bad size");
    std::string buf(*size, '\0');
    KVTIER_RETURN_IF_ERROR((*file)->ReadAt(0, buf.data(), buf.size()));
    uint64_t sum = format::GetFixed64(reinterpret_cast<const uint8_t*>(buf.data() + buf.size() - 8));
    buf.resize(buf.size() - 8);
    if (format::Checksum(buf.data(), buf.size()) != sum)
      return Status::Corruption(nsdir + "/" + n + ": checksum mismatch");
    auto spec = NamespaceSpec::Decode(buf);
    if (!spec.ok()) return spec.status().WithContext(nsdir + "/" + n);
    NamespaceId id = spec->Fingerprint();
    if (NamespaceIdToHex(id) != n.substr(0, 16))
      return Status::Corruption(nsdir + "/" + n + ": file name does not match its spec");
    if (!namespaces_.Contains(id) && !opt_.read_only) {
      KVTIER_RETURN_IF_ERROR(index_->PutNamespace(id, *spec, false));
    }
    namespaces_.Set(id, std::move(spec).value());
  }
  return Status::OK();
}

Status StoreImpl::WriteNamespaceFile(NamespaceId id, const NamespaceSpec& spec) {
  const std::string nsdir = layout::NamespacesDir(dir_);
  KVTIER_RETURN_IF_ERROR(fs_->CreateDir(nsdir, opt_.group_access ? 0770 : 0700));
  std::string buf = spec.Encode();
  uint64_t sum = format::Checksum(buf.data(), buf.size());
  format::AppendFixed64(&buf, sum);
  const std::string path = layout::NamespacePath(dir_, id);
  OpenFlags f;
  f.create = true;
  f.mode = opt_.group_access ? 0660 : 0600;
  const std::string tmp = path + std::string(layout::kTempSuffix);
  auto file = fs_->Open(tmp, f);
  if (!file.ok()) return file.status();
  KVTIER_RETURN_IF_ERROR((*file)->Truncate(0));
  KVTIER_RETURN_IF_ERROR((*file)->WriteAt(0, buf.data(), buf.size()));
  KVTIER_RETURN_IF_ERROR((*file)->Sync());
  file->reset();
  KVTIER_RETURN_IF_ERROR(fs_->Rename(tmp, path));
  return fs_->SyncDir(nsdir);
}

Status StoreImpl::RemoveNamespaceFile(NamespaceId id) {
  const std::string nsdir = layout::NamespacesDir(dir_);
  Status st = fs_->Remove(layout::NamespacePath(dir_, id));
  if (!st.ok() && !st.IsNotFound()) return st;
  return fs_->SyncDir(nsdir);
}

Result<NamespaceId> StoreImpl::RegisterNamespace(const NamespaceSpec& spec) {
  KVTIER_RETURN_IF_ERROR(spec.Validate());
  NamespaceId id = spec.Fingerprint();
  if (namespaces_.Contains(id)) return id;
  if (opt_.read_only) return Status::NotSupported("store opened read-only: cannot register namespaces");
  NamespaceSpec stored = spec;
  if (stored.name.empty()) stored.name = spec.DisplayName();
  // Keep the decoded form (salt replaced by its hash), as a reopen would see it.
  auto round = NamespaceSpec::Decode(stored.Encode());
  KVTIER_RETURN_IF_ERROR(namespaces_.AddIfAbsent(id, round.ok() ? *round : stored, [&] {
    KVTIER_RETURN_IF_ERROR(WriteNamespaceFile(id, stored));
    return index_->PutNamespace(id, stored, /*sync=*/false);
  }));
  return id;
}

Result<NamespaceSpec> StoreImpl::SpecOf(NamespaceId ns) {
  auto spec = namespaces_.Get(ns);
  if (!spec) return Status::NotFound("unknown namespace " + NamespaceIdToHex(ns));
  return *std::move(spec);
}

Result<NamespaceId> StoreImpl::FindNamespace(std::string_view name_or_hex) {
  if (auto id = namespaces_.Find(name_or_hex)) return *id;
  return Status::NotFound("no namespace named '" + std::string(name_or_hex) + "'");
}

Result<std::vector<NamespaceInfo>> StoreImpl::ListNamespaces(NamespaceListing listing,
                                                              const std::function<void(uint64_t, uint64_t)>& progress) {
  std::vector<NamespaceInfo> out;
  for (auto& [id, spec] : namespaces_.List()) out.push_back(NamespaceInfo{id, std::move(spec), 0, 0});
  std::sort(out.begin(), out.end(), [](const NamespaceInfo& a, const NamespaceInfo& b) { return a.id < b.id; });
  if (listing == NamespaceListing::kSpecsOnly) return out;
  // The estimate can be below the count (RocksDB's, from its files): the
  // total shown never is.
  const uint64_t estimate = progress ? index_->ApproximateEntries() : 0;
  uint64_t counted = 0;
  for (NamespaceInfo& info : out) {
    Status st = index_->ForEach(info.id, "", [&](NamespaceId, std::string_view, const format::IndexValue& v) {
      ++info.blocks;
      info.payload_bytes += v.payload_len;
      if (progress && ++counted % 65536 == 0) progress(counted, std::max(counted, estimate));
      return true;
    });
    if (!st.ok()) return st;
  }
  if (progress) progress(counted, counted);
  return out;
}

}  // namespace kvtier
