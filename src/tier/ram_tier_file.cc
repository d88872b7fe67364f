// The RAM tier's mapping: anonymous memory or a shared-memory file (opened,
// checked and reserved through the I/O seam), its format, and the adoption of
// the blocks a previous process left in it.
#include <fcntl.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "tier/ram_tier_layout.h"

namespace kvtier {

using namespace ram_layout;  // NOLINT: the room's own layout

// Whether the file holds a tier this one can adopt: its size, and a header
// of this version, geometry and owner.
bool RamTier::IsAdoptable(File& f) const {
  auto size = f.Size();
  if (!size.ok() || *size != map_bytes_) return false;
  FileHeader h{};
  return f.ReadAt(0, &h, sizeof h).ok() && std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 &&
         h.version == kVersion && h.chunk_bytes == opt_.chunk_bytes && h.chunks == chunks_ &&
         h.shards == opt_.shards && h.meta_bytes == meta_bytes_ && h.map_bytes == map_bytes_ &&
         std::memcmp(h.owner, opt_.owner_id.data(), 16) == 0 && h.checksum == HeaderChecksum(h);
}

Status RamTier::Map(bool* adopt) {
  *adopt = false;
  base_.capacity_bytes = uint64_t{chunks_} * opt_.chunk_bytes;
  if (opt_.shm_path.empty()) {
    void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap of the RAM tier (" + std::to_string(map_bytes_) + " bytes)");
    map_ = static_cast<uint8_t*>(p);
    madvise(map_, map_bytes_, MADV_HUGEPAGE);  // best effort: THP may be off
    return Status::OK();
  }
  const std::string& path = opt_.shm_path;
  const std::shared_ptr<FileSystem> owned = opt_.fs ? opt_.fs : DefaultFileSystem(IoBackend::kPosix);
  FileSystem* fs = owned.get();
  OpenFlags flags;
  flags.create = true;
  flags.mode = opt_.file_mode;
  auto file = fs->Open(path, flags);
  if (!file.ok()) return file.status().WithContext("opening RAM tier file");
  File& f = **file;
  if (f.map_fd() < 0) {
    // Leave no empty file behind for the anonymous tier the store falls back to.
    auto size = f.Size();
    file->reset();
    if (size.ok() && *size == 0) fs->Remove(path).IgnoreError();
    return Status::NotSupported("RAM tier file " + path + " cannot be mapped through this file system");
  }
  bool reuse = IsAdoptable(f);
  if (!reuse) {
    // Discard whatever was there, then reserve the space so that running out
    // of /dev/shm is an error here rather than a SIGBUS on first touch.
    Status st = f.Truncate(0);
    if (st.ok()) st = f.Allocate(0, map_bytes_);
    if (!st.ok()) {
      file->reset();
      fs->Remove(path).IgnoreError();
      return st.WithContext("reserving " + std::to_string(map_bytes_) + " bytes for RAM tier file " + path);
    }
  }
  const int fd = f.map_fd();
  void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  file->reset();  // the mapping keeps the file
  if (p == MAP_FAILED) return Status::FromErrno(e, "mmap of RAM tier file " + path);
  map_ = static_cast<uint8_t*>(p);
  madvise(map_, map_bytes_, MADV_HUGEPAGE);
  base_.shared = true;
  *adopt = reuse;
  return Status::OK();
}

Result<std::unique_ptr<File>> RamTier::OpenFileReadOnly() const {
  if (!base_.shared) return Status::NotSupported("the RAM tier is in anonymous memory, not a shared-memory file");
  const std::shared_ptr<FileSystem> owned = opt_.fs ? opt_.fs : DefaultFileSystem(IoBackend::kPosix);
  OpenFlags flags;
  flags.read_only = true;
  auto file = owned->Open(opt_.shm_path, flags);
  if (!file.ok()) return file.status().WithContext("opening RAM tier file " + opt_.shm_path + " read-only");
  if ((*file)->map_fd() < 0) return Status::NotSupported("RAM tier file " + opt_.shm_path + " has no mappable descriptor");
  return file;
}

void RamTier::Format() {
  // The header is marked valid only after the metadata is cleared.
  std::memset(map_, 0, meta_bytes_);
  for (auto& s : shards_) {
    s->free.clear();
    for (uint32_t c = s->first + s->count; c-- > s->first;) s->free.push_back(c);
  }
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.chunk_bytes = opt_.chunk_bytes;
  h.chunks = chunks_;
  h.shards = opt_.shards;
  h.meta_bytes = meta_bytes_;
  h.map_bytes = map_bytes_;
  std::memcpy(h.owner, opt_.owner_id.data(), 16);
  h.checksum = HeaderChecksum(h);
  std::memcpy(map_, &h, sizeof h);
}

struct RamTier::AdoptCounts {
  std::atomic<uint64_t> dropped{0}, adopted{0}, adopted_bytes{0}, max_token{0};
};

void RamTier::Adopt(const RamAdoptFilter& filter) {
  base_.adopted_file = true;
  AdoptCounts n;
  // Shards are independent (a valid block lies wholly in its key's shard),
  // so they are checked in parallel: checksumming GiBs dominates.
  unsigned workers = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), shards_.size()));
  std::atomic<size_t> next_shard{0};
  auto work = [&] {
    for (size_t i; (i = next_shard.fetch_add(1)) < shards_.size();) AdoptShard(*shards_[i], filter, &n);
  };
  std::vector<std::thread> threads;
  for (unsigned w = 1; w < workers; ++w) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  next_token_.store(n.max_token.load() + 1);
  base_.adopted_blocks = n.adopted.load();
  base_.adopted_bytes = n.adopted_bytes.load();
  base_.adopt_dropped = n.dropped.load();
}

void RamTier::AdoptShard(Shard& s, const RamAdoptFilter& filter, AdoptCounts* n) {
  Desc* descs = DescArray(map_, chunks_);
  std::vector<bool> used(s.count, false);
  std::vector<Entry*> found;
  for (uint32_t i = s.first; i < s.first + s.count; ++i) {
    Desc& d = descs[i];
    if (__atomic_load_n(&d.state, __ATOMIC_ACQUIRE) != kDescValid) continue;
    Entry* e = AdoptBlock(s, i, used, filter);
    if (e == nullptr) {
      __atomic_store_n(&d.state, 0u, __ATOMIC_RELEASE);
      n->dropped.fetch_add(1);
      continue;
    }
    for (uint32_t c : e->chunks) used[c - s.first] = true;
    found.push_back(e);
  }
  PublishAdopted(s, found, used, n);
  s.free.clear();
  for (uint32_t c = s.first + s.count; c-- > s.first;)
    if (!used[c - s.first]) s.free.push_back(c);
}

RamTier::Entry* RamTier::AdoptBlock(Shard& s, uint32_t i, const std::vector<bool>& used,
                                    const RamAdoptFilter& filter) {
  const Desc& d = DescArray(map_, chunks_)[i];
  const uint32_t* next = NextArray(map_);
  if (d.key_len == 0 || d.key_len > format::kMaxKeyBytes || d.len == 0) return nullptr;
  std::string mk = MapKey(d.ns, std::string_view(d.key, d.key_len));
  if (&ShardFor(format::Checksum(mk.data(), mk.size())) != &s) return nullptr;
  // The chain: exactly its units of chunks, all in this shard, none taken.
  const uint64_t units = (d.len + opt_.chunk_bytes - 1) / opt_.chunk_bytes;
  std::vector<uint32_t> chain;
  bool ok = units <= s.count;
  for (uint32_t c = i; ok && c != kEnd; c = next[c]) {
    ok = c >= s.first && c < s.first + s.count && !used[c - s.first] && chain.size() < units;
    if (ok) chain.push_back(c);
  }
  if (!ok || chain.size() != units) return nullptr;
  auto* e = new Entry();
  e->ns = d.ns;
  e->map_key = std::move(mk);
  e->len = d.len;
  e->checksum = d.checksum;
  e->token = d.token;
  e->chunks = std::move(chain);
  BuildPieces(e->chunks, e->len, opt_.chunk_bytes, region_chunks_, [this](uint32_t c) { return ChunkData(c); },
              &e->pieces);
  // XXH3 over the pieces in order equals format::Checksum of the whole.
  Xxh3Stream xs;
  for (const Piece& p : e->pieces) xs.Update(p.data, p.size);
  RamPlacement placed;
  if (xs.Digest() != e->checksum ||
      (filter && !filter(e->ns, std::string_view(d.key, d.key_len), e->len, e->checksum, &placed))) {
    delete e;
    return nullptr;
  }
  e->placed = placed;
  return e;
}

// Oldest first, so FIFO order survives the restart; a key seen twice keeps
// its newest version.
void RamTier::PublishAdopted(Shard& s, std::vector<Entry*>& found, std::vector<bool>& used, AdoptCounts* n) {
  Desc* descs = DescArray(map_, chunks_);
  std::sort(found.begin(), found.end(), [](Entry* a, Entry* b) { return a->token < b->token; });
  for (Entry* e : found) {
    auto it = s.map.find(e->map_key);
    if (it != s.map.end()) {
      Entry* old = it->second;
      s.policy->OnErase(&old->node);
      __atomic_store_n(&descs[old->chunks[0]].state, 0u, __ATOMIC_RELEASE);
      for (uint32_t c : old->chunks) used[c - s.first] = false;
      s.payload_bytes -= old->len;
      s.used_chunks -= old->chunks.size();
      n->dropped.fetch_add(1);
      n->adopted.fetch_sub(1);
      n->adopted_bytes.fetch_sub(old->len);
      delete old;
      s.map.erase(it);
    }
    e->published = true;
    e->node.hash = format::Checksum(e->map_key.data(), e->map_key.size());
    e->node.units = static_cast<uint32_t>(e->chunks.size());
    s.map.emplace(e->map_key, e);
    s.policy->OnInsert(&e->node);
    s.payload_bytes += e->len;
    s.used_chunks += e->chunks.size();
    n->adopted.fetch_add(1);
    n->adopted_bytes.fetch_add(e->len);
    uint64_t m = n->max_token.load();
    while (e->token > m && !n->max_token.compare_exchange_weak(m, e->token)) {
    }
  }
}

// ---- Core ----

}  // namespace kvtier
