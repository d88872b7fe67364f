// The shared-memory RAM tier files of every store on the machine
// (Store::ListRamTierFiles, RemoveOrphanRamTier; kvtier shm). A tier file
// outlives its process by design, so that the next open adopts it; the note
// beside it names the folder of its store, and a tier whose folder is gone
// or holds another store is an orphan nothing will open again.
#include <string>
#include <string_view>

#include "kvtier/store.h"
#include "store/layout.h"
#include "tier/ram_tier.h"

namespace kvtier {

namespace {

// Whether `s` names a store the way a tier file's name does.
bool IsStoreId(const std::string& s) {
  const std::string path = RamTierShmPath(s);
  return !s.empty() && RamTierStoreIdOf(std::string_view(path).substr(kRamTierShmDir.size() + 1)) == s;
}

// The whole of a small file; empty when it cannot be read.
std::string ReadSmallFile(FileSystem* fs, const std::string& path) {
  OpenFlags of;
  of.read_only = true;
  auto f = fs->Open(path, of);
  if (!f.ok()) return {};
  auto n = (*f)->Size();
  if (!n.ok() || *n == 0 || *n > 8192) return {};
  std::string s(*n, '\0');
  if (!(*f)->ReadAt(0, s.data(), s.size()).ok()) return {};
  return s;
}

// What became of the store of tier file `t` (store_id and path set).
void Classify(FileSystem* fs, RamTierFile* t) {
  std::string note = ReadSmallFile(fs, RamTierFolderNotePath(t->store_id));
  while (!note.empty() && note.back() == '\n') note.pop_back();
  t->folder = note;
  if (t->folder.empty()) {
    t->state = RamTierFile::State::kUnknown;
    return;
  }
  auto holder = fs->LockHolder(layout::LockPath(t->folder));
  if (holder.ok() && holder->has_value()) {
    t->state = RamTierFile::State::kOpen;
    t->holder_pid = **holder;
    return;
  }
  auto d = Store::Describe(t->folder);
  if (d.ok() && d->store_id == t->store_id) {
    t->state = RamTierFile::State::kKept;
    return;
  }
  auto exists = fs->Exists(t->folder);
  if (!exists.ok()) {  // cannot tell (permissions): not an orphan for us to remove
    t->state = RamTierFile::State::kUnknown;
    return;
  }
  t->state = RamTierFile::State::kOrphan;
  t->why = !*exists ? "the folder is gone"
           : d.ok() ? "the folder holds store " + d->store_id
                    : "the folder holds no store (" + d.status().ToString() + ")";
}

Result<RamTierFile> Tier(FileSystem* fs, const std::string& store_id) {
  RamTierFile t;
  t.store_id = store_id;
  t.path = RamTierShmPath(store_id);
  OpenFlags of;
  of.read_only = true;
  auto f = fs->Open(t.path, of);
  if (!f.ok()) return f.status();
  auto n = (*f)->Size();
  if (!n.ok()) return n.status();
  t.bytes = *n;
  Classify(fs, &t);
  return t;
}

}  // namespace

Result<std::vector<RamTierFile>> Store::ListRamTierFiles() {
  auto fs = DefaultFileSystem(IoBackend::kPosix);
  auto names = fs->ListDir(std::string(kRamTierShmDir));
  if (!names.ok()) return names.status().WithContext("listing " + std::string(kRamTierShmDir));
  std::vector<RamTierFile> out;
  for (const std::string& name : *names) {
    const std::string id = RamTierStoreIdOf(name);
    if (id.empty()) continue;
    auto t = Tier(fs.get(), id);
    if (t.ok()) out.push_back(std::move(t).value());  // else gone since the listing
  }
  return out;
}

Status Store::RemoveOrphanRamTier(const std::string& store_id) {
  if (!IsStoreId(store_id)) return Status::InvalidArgument("not a store id (32 hex digits): " + store_id);
  auto fs = DefaultFileSystem(IoBackend::kPosix);
  auto t = Tier(fs.get(), store_id);
  if (!t.ok()) return t.status().WithContext("the RAM tier of store " + store_id);
  switch (t->state) {
    case RamTierFile::State::kOpen:
      return Status::Busy("the RAM tier of store " + store_id + " is in use: its store in " + t->folder +
                          " is open in pid " + std::to_string(t->holder_pid));
    case RamTierFile::State::kKept:
      return Status::InvalidArgument("the RAM tier of store " + store_id + " is not an orphan: its store in " +
                                     t->folder + " adopts it at its next open (kvtier destroy removes both)");
    case RamTierFile::State::kUnknown:
      return Status::InvalidArgument("the RAM tier of store " + store_id +
                                     " names no folder that can be checked: not removed");
    case RamTierFile::State::kOrphan: break;
  }
  KVTIER_RETURN_IF_ERROR(fs->Remove(t->path).WithContext("removing " + t->path));
  Status st = fs->Remove(RamTierFolderNotePath(store_id));
  return st.ok() || st.code() == Code::kNotFound ? Status::OK() : st;
}

}  // namespace kvtier
