// Opening the host RAM tier of a store (Options::ram_tier_bytes).
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "store/store_impl.h"
#include "util/cpu_caches.h"

namespace kvtier {

namespace {
// Whether /dev/shm can take a tier file of `bytes` (counting the space an
// existing file of this store already holds).
bool ShmHasRoom(const std::string& path, uint64_t bytes) {
  struct statvfs vfs {};
  if (statvfs("/dev/shm", &vfs) != 0) return false;
  uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) free_bytes += static_cast<uint64_t>(st.st_blocks) * 512;
  return free_bytes >= bytes + (64u << 20);  // and slack
}
}  // namespace

Status StoreImpl::OpenRamTier() {
  if (opt_.ram_tier_bytes == 0) return Status::OK();
  RamTierOptions o;
  o.capacity_bytes = opt_.ram_tier_bytes;
  o.verify_reads = opt_.verify_ram_hits;
  o.prefault = opt_.ram_tier_prefault;
  o.chunk_bytes = opt_.ram_tier_chunk_bytes;
  o.streaming_copy_min_bytes =
      opt_.ram_streaming_copy_min_bytes != 0 ? opt_.ram_streaming_copy_min_bytes : LastLevelCacheBytes() / 2;
  o.split_copy_min_bytes = opt_.ram_split_copy_min_bytes;
  o.copy_threads = opt_.ram_copy_threads != 0
                       ? opt_.ram_copy_threads
                       : std::clamp(std::thread::hardware_concurrency(), 1u, 32u);
  o.copy_spin_us = opt_.ram_copy_spin_us;
  o.on_placed_read = [this](uint32_t seg, uint64_t offset, uint64_t bytes) { hits_.Note(seg, offset, bytes); };
  o.placed_reads_reported = hits_.hot_reads();
  o.read_epoch = hits_.epoch();
  o.owner_id = store_id_;
  o.file_mode = opt_.group_access ? 0660 : 0600;
  o.fs = fs_;
  // A read-only open runs beside a writer process: it never touches the file.
  if (opt_.ram_tier_shared_memory && !opt_.read_only) {
    std::string path = RamTierShmPath(description_.store_id);
    if (ShmHasRoom(path, RamTier::MappingBytes(o.capacity_bytes, o.chunk_bytes))) o.shm_path = std::move(path);
  }
  // Adopt only blocks the index still names with the same size and checksum.
  // Those adopted know where their records lie, so their reads count for
  // the reclaim as a put's copy's do.
  auto filter = [this](NamespaceId ns, std::string_view key, uint64_t len, uint64_t checksum, RamPlacement* placed) {
    if (!namespaces_.Contains(ns)) return false;
    auto e = index_->Get(ns, key);
    if (!e.ok() || !e->has_value() || (*e)->payload_len != len || (*e)->payload_checksum != checksum ||
        !table_->IsLive((*e)->segment, (*e)->generation))
      return false;
    *placed = PlacementOf(**e);
    return true;
  };
  auto t = RamTier::Open(o, filter);
  if (!t.ok() && !o.shm_path.empty()) {
    // /dev/shm refused (full, permissions): anonymous memory still serves.
    o.shm_path.clear();
    t = RamTier::Open(o, filter);
  }
  if (!t.ok()) return t.status().WithContext("opening the RAM tier");
  ram_ = std::move(t).value();
  if (!ram_->shm_path().empty()) NoteRamTierFolder(o.file_mode);
  return Status::OK();
}

void StoreImpl::NoteRamBlockSize(uint64_t payload_len) {
  const uint64_t chunk = opt_.ram_tier_chunk_bytes;
  if (payload_len == 0 || payload_len * 4 > chunk || warned_small_ram_blocks_.load(std::memory_order_relaxed) ||
      warned_small_ram_blocks_.exchange(true))
    return;
  Warn("RAM tier: a block of " + std::to_string(payload_len) + " bytes takes a whole chunk of " +
       std::to_string(chunk) + " bytes, so blocks of that size fill the tier " + std::to_string(chunk / payload_len) +
       "x faster than their bytes; set ram_tier_chunk_bytes (kvtier serve --ram-chunk) to about the blocks' size "
       "(docs/ram_tier.md, \"Chunk size\")");
}

// The folder beside the tier file, for kvtier shm to tell a tier kept for
// this store from one whose folder was deleted by hand. Written whole
// (renamed into place); a note that cannot be written only leaves the tier
// unclassified, so it is not an error.
void StoreImpl::NoteRamTierFolder(unsigned mode) {
  std::error_code ec;
  const std::string folder = std::filesystem::absolute(dir_, ec).lexically_normal().string();
  if (ec) return;
  const std::string note = RamTierFolderNotePath(description_.store_id), tmp = note + ".tmp";
  OpenFlags of;
  of.create = true;
  of.mode = mode;
  auto f = fs_->Open(tmp, of);
  if (!f.ok()) return;
  const std::string text = folder + "\n";
  if ((*f)->Truncate(0).ok() && (*f)->WriteAt(0, text.data(), text.size()).ok()) {
    f->reset();
    if (fs_->Rename(tmp, note).ok()) return;
  }
  fs_->Remove(tmp).IgnoreError();
}

}  // namespace kvtier
