// Store::Destroy: removes a store, including what it keeps outside its
// folder. A store's shared-memory RAM tier (/dev/shm/kvtier-<id>.ram) outlives
// its process by design, so that the next open adopts it; a folder deleted by
// hand therefore leaves up to ram_tier_bytes of memory held until reboot.
#include <string>
#include <string_view>

#include "kvtier/store.h"
#include "store/layout.h"
#include "tier/ram_tier.h"

namespace kvtier {
namespace {

// Removes `path` and, for a folder, everything under it. Missing is fine.
Status RemoveTree(FileSystem* fs, const std::string& path) {
  Status st = fs->Remove(path);
  if (st.ok() || st.code() == Code::kNotFound) return Status::OK();
  auto names = fs->ListDir(path);
  if (!names.ok()) return st;  // not a folder: the first error stands
  for (const std::string& name : *names) KVTIER_RETURN_IF_ERROR(RemoveTree(fs, path + "/" + name));
  st = fs->Remove(path);
  return st.code() == Code::kNotFound ? Status::OK() : st;
}

// Names kvtier makes in a store folder (store/layout.h), but the superblock
// and the lock, which go last.
bool MadeByStore(std::string_view name) {
  return name == layout::kSegmentsDir || name == layout::kIndexDir || name == layout::kNamespacesDir ||
         name == std::string(layout::kSuperblock) + std::string(layout::kTempSuffix) ||
         name.starts_with(std::string(layout::kIndexDir) + ".damaged-") || name == kServiceSocketName ||
         name == kServiceLogName;
}

}  // namespace

Status Store::Destroy(const std::string& dir) {
  auto fs = DefaultFileSystem(IoBackend::kPosix);
  const std::string context = "destroying the store in " + dir;
  auto description = Describe(dir);
  if (!description.ok()) return description.status().WithContext(context);
  // Held until the end: no process opens the store while it goes.
  auto lock = fs->Lock(layout::LockPath(dir), /*exclusive=*/true, 0600);
  if (!lock.ok()) return lock.status().WithContext(context);
  // The RAM tier first: once the superblock is gone nothing names it.
  KVTIER_RETURN_IF_ERROR(
      RemoveTree(fs.get(), RamTierShmPath(description->store_id)).WithContext(context + " (its RAM tier)"));
  KVTIER_RETURN_IF_ERROR(
      RemoveTree(fs.get(), RamTierFolderNotePath(description->store_id)).WithContext(context + " (its RAM tier)"));
  auto names = fs->ListDir(dir);
  if (!names.ok()) return names.status().WithContext(context);
  for (const std::string& name : *names)
    if (MadeByStore(name)) KVTIER_RETURN_IF_ERROR(RemoveTree(fs.get(), layout::In(dir, name)).WithContext(context));
  // The superblock last: an interrupted Destroy leaves a store that opens
  // (empty or partial) and that Destroy can finish.
  KVTIER_RETURN_IF_ERROR(RemoveTree(fs.get(), layout::SuperblockPath(dir)).WithContext(context));
  KVTIER_RETURN_IF_ERROR(fs->SyncDir(dir).WithContext(context));
  lock->reset();
  KVTIER_RETURN_IF_ERROR(RemoveTree(fs.get(), layout::LockPath(dir)).WithContext(context));
  // The folder goes only when nothing of anyone else's is left in it.
  auto left = fs->ListDir(dir);
  if (left.ok() && left->empty()) fs->Remove(dir).IgnoreError();
  return Status::OK();
}

}  // namespace kvtier
