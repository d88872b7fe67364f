#include "tier/ram_tier.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "format/record.h"
#include "util/checksum.h"

namespace kvtier {

namespace {

constexpr char kMagic[8] = {'K', 'V', 'T', 'R', 'A', 'M', '0', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kEnd = UINT32_MAX;
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kDataAlign = 2u << 20;  // huge-page aligned data area
constexpr uint32_t kDescValid = 0x56414C44;  // "VALD"

// Persistent header at offset 0 of the mapping.
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t chunk_bytes;
  uint32_t chunks;
  uint32_t shards;
  uint64_t meta_bytes;
  uint64_t map_bytes;
  uint8_t owner[16];
  uint64_t checksum;  // of the bytes above
};

// One per chunk; meaningful only for a block's head chunk. `state` is
// written last on publish and first on erase, so a descriptor marked valid
// always describes a chain that was complete when it was published.
struct Desc {
  uint32_t state;
  uint16_t key_len;
  uint16_t pad;
  uint64_t ns;
  uint64_t len;
  uint64_t checksum;
  uint64_t token;
  char key[format::kMaxKeyBytes + 1];
  char pad2[320 - 40 - (format::kMaxKeyBytes + 1)];
};
static_assert(sizeof(Desc) == 320);

size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

std::string MapKey(NamespaceId ns, std::string_view key) {
  std::string k(sizeof ns + key.size(), '\0');
  std::memcpy(k.data(), &ns, sizeof ns);
  std::memcpy(k.data() + sizeof ns, key.data(), key.size());
  return k;
}

uint64_t HeaderChecksum(const FileHeader& h) { return format::Checksum(&h, offsetof(FileHeader, checksum)); }

}  // namespace

struct RamTier::Entry {
  PolicyNode node;  // first: the policy hands back PolicyNode*
  NamespaceId ns = 0;
  std::string map_key;
  uint64_t len = 0, checksum = 0, token = 0;
  std::vector<uint32_t> chunks;
  std::vector<Piece> pieces;
  bool published = false, dead = false;
};

struct RamTier::Shard {
  std::mutex mu;
  std::unordered_map<std::string, Entry*> map;
  std::unique_ptr<EvictionPolicy> policy;
  std::vector<uint32_t> free;  // stack; popped from the back
  uint32_t first = 0, count = 0;
  uint64_t hits = 0, misses = 0, inserts = 0, rejects = 0, evictions = 0, evicted_bytes = 0,
           erases = 0, payload_bytes = 0, used_chunks = 0;
  ~Shard() {
    for (auto& [k, e] : map) delete e;
  }
};

std::string RamTierShmPath(const std::string& store_id_hex) {
  return "/dev/shm/kvtier-" + store_id_hex + ".ram";
}

// ---- Pin ----

RamTier::Pin::Pin(Pin&& o) noexcept : tier_(o.tier_), entry_(o.entry_) { o.entry_ = nullptr; }
RamTier::Pin& RamTier::Pin::operator=(Pin&& o) noexcept {
  if (this != &o) {
    Release();
    tier_ = o.tier_;
    entry_ = o.entry_;
    o.entry_ = nullptr;
  }
  return *this;
}
uint64_t RamTier::Pin::size() const { return entry_->len; }
uint64_t RamTier::Pin::checksum() const { return entry_->checksum; }
uint64_t RamTier::Pin::token() const { return entry_->token; }
const std::vector<RamTier::Piece>& RamTier::Pin::pieces() const { return entry_->pieces; }
void RamTier::Pin::Release() {
  if (entry_ != nullptr) tier_->Unpin(entry_);
  entry_ = nullptr;
}

// ---- Open / mapping ----

RamTier::RamTier(const RamTierOptions& o) : opt_(o) {}

RamTier::~RamTier() {
  stop_prefault_ = true;
  if (prefault_.joinable()) prefault_.join();
  shards_.clear();
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

Result<std::unique_ptr<RamTier>> RamTier::Open(const RamTierOptions& options, const RamAdoptFilter& filter) {
  if (options.chunk_bytes < 4096 || options.chunk_bytes % 4096 != 0)
    return Status::InvalidArgument("ram tier chunk_bytes must be a positive multiple of 4096");
  const uint64_t chunks = options.capacity_bytes / options.chunk_bytes;
  if (chunks == 0 || chunks >= kEnd)
    return Status::InvalidArgument("ram tier capacity of " + std::to_string(options.capacity_bytes) +
                                   " bytes holds no chunk or too many");
  std::unique_ptr<RamTier> t(new RamTier(options));
  t->chunks_ = static_cast<uint32_t>(chunks);
  uint32_t shards = options.shards;
  if (shards == 0) shards = static_cast<uint32_t>(std::clamp<uint64_t>(chunks / 256, 1, 16));
  shards = std::min<uint32_t>(shards, t->chunks_);
  t->opt_.shards = shards;
  const size_t desc_off = AlignUp(kHeaderBytes + sizeof(uint32_t) * chunks, 64);
  t->meta_bytes_ = AlignUp(desc_off + sizeof(Desc) * chunks, kDataAlign);
  t->map_bytes_ = t->meta_bytes_ + chunks * options.chunk_bytes;
  for (uint32_t i = 0; i < shards; ++i) {
    auto s = std::make_unique<Shard>();
    s->first = static_cast<uint32_t>(chunks * i / shards);
    s->count = static_cast<uint32_t>(chunks * (i + 1) / shards) - s->first;
    s->policy = NewEvictionPolicy(options.policy, s->count);
    t->shards_.push_back(std::move(s));
  }
  bool adopt = false;
  KVTIER_RETURN_IF_ERROR(t->Map(&adopt));
  if (adopt) {
    t->Adopt(filter);
  } else {
    t->Format();
  }
  if (options.prefault) {
    RamTier* raw = t.get();
    t->prefault_ = std::thread([raw] { raw->Prefault(); });
  }
  return t;
}

void RamTier::Prefault() {
  // Steps of 64 MiB so that closing waits little; pages already present
  // (adopted blocks, or chunks filled meanwhile) are left as they are.
  constexpr size_t kStep = 64u << 20;
  uint8_t* const begin = map_ + meta_bytes_;
  const size_t total = map_bytes_ - meta_bytes_;
  for (size_t off = 0; off < total && !stop_prefault_.load(std::memory_order_relaxed); off += kStep) {
    const size_t n = std::min(kStep, total - off);
    if (madvise(begin + off, n, MADV_POPULATE_WRITE) != 0) return;  // unsupported or out of memory: fault lazily
    prefaulted_.fetch_add(n, std::memory_order_relaxed);
  }
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
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, opt_.file_mode);
  if (fd < 0) return Status::FromErrno(errno, "opening RAM tier file " + path);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return Status::FromErrno(e, "fstat " + path);
  }
  bool reuse = static_cast<uint64_t>(st.st_size) == map_bytes_;
  if (reuse) {
    FileHeader h{};
    reuse = pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) &&
            std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 && h.version == kVersion &&
            h.chunk_bytes == opt_.chunk_bytes && h.chunks == chunks_ && h.shards == opt_.shards &&
            h.meta_bytes == meta_bytes_ && h.map_bytes == map_bytes_ &&
            std::memcmp(h.owner, opt_.owner_id.data(), 16) == 0 && h.checksum == HeaderChecksum(h);
  }
  if (!reuse) {
    // Discard whatever was there, then reserve the space so that running out
    // of /dev/shm is an error here rather than a SIGBUS on first touch.
    int rc = ftruncate(fd, 0);
    if (rc == 0) rc = posix_fallocate(fd, 0, static_cast<off_t>(map_bytes_));
    else rc = errno;
    if (rc != 0) {
      close(fd);
      unlink(path.c_str());
      return Status::FromErrno(rc, "reserving " + std::to_string(map_bytes_) + " bytes for RAM tier file " + path);
    }
  }
  void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) return Status::FromErrno(e, "mmap of RAM tier file " + path);
  map_ = static_cast<uint8_t*>(p);
  madvise(map_, map_bytes_, MADV_HUGEPAGE);
  base_.shared = true;
  *adopt = reuse;
  return Status::OK();
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

uint8_t* RamTier::ChunkData(uint32_t c) const { return map_ + meta_bytes_ + uint64_t{c} * opt_.chunk_bytes; }

namespace {
uint32_t* NextArray(uint8_t* map) { return reinterpret_cast<uint32_t*>(map + kHeaderBytes); }
Desc* DescArray(uint8_t* map, uint32_t chunks) {
  return reinterpret_cast<Desc*>(map + AlignUp(kHeaderBytes + sizeof(uint32_t) * chunks, 64));
}
void BuildPieces(const std::vector<uint32_t>& chunks, uint64_t len, uint32_t chunk_bytes,
                 const std::function<uint8_t*(uint32_t)>& data, std::vector<RamTier::Piece>* out) {
  out->clear();
  uint64_t left = len;
  for (uint32_t c : chunks) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(left, chunk_bytes));
    uint8_t* p = data(c);
    if (!out->empty() && out->back().data + out->back().size == p) {
      out->back().size += n;
    } else {
      out->push_back(RamTier::Piece{p, n});
    }
    left -= n;
  }
}
}  // namespace

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
  BuildPieces(e->chunks, e->len, opt_.chunk_bytes, [this](uint32_t c) { return ChunkData(c); }, &e->pieces);
  // XXH3 over the pieces in order equals format::Checksum of the whole.
  Xxh3Stream xs;
  for (const Piece& p : e->pieces) xs.Update(p.data, p.size);
  if (xs.Digest() != e->checksum || (filter && !filter(e->ns, std::string_view(d.key, d.key_len), e->len, e->checksum))) {
    delete e;
    return nullptr;
  }
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

RamTier::Shard& RamTier::ShardFor(uint64_t hash) const {
  return *shards_[(hash >> 32) % shards_.size()];
}

void RamTier::WriteDescriptor(const Entry* e, bool valid) {
  Desc& d = DescArray(map_, chunks_)[e->chunks[0]];
  if (!valid) {
    __atomic_store_n(&d.state, 0u, __ATOMIC_RELEASE);
    return;
  }
  uint32_t* next = NextArray(map_);
  for (size_t i = 0; i < e->chunks.size(); ++i)
    next[e->chunks[i]] = i + 1 < e->chunks.size() ? e->chunks[i + 1] : kEnd;
  std::string_view key(e->map_key.data() + sizeof(NamespaceId), e->map_key.size() - sizeof(NamespaceId));
  d.key_len = static_cast<uint16_t>(key.size());
  d.ns = e->ns;
  d.len = e->len;
  d.checksum = e->checksum;
  d.token = e->token;
  std::memcpy(d.key, key.data(), key.size());
  __atomic_store_n(&d.state, kDescValid, __ATOMIC_RELEASE);
}

RamTier::Entry* RamTier::AllocateLocked(Shard& s, NamespaceId ns, std::string_view key, uint64_t hash,
                                        uint64_t len) {
  const uint64_t units = std::max<uint64_t>(1, (len + opt_.chunk_bytes - 1) / opt_.chunk_bytes);
  if (units > s.count) return nullptr;
  while (s.free.size() < units) {
    PolicyNode* v = s.policy->Victim();
    if (v == nullptr) return nullptr;
    Entry* ve = reinterpret_cast<Entry*>(v);
    s.evictions++;
    s.evicted_bytes += ve->len;
    UnlinkLocked(s, ve);
    FreeLocked(s, ve);  // unpinned: Victim never returns a pinned node
  }
  auto* e = new Entry();
  e->ns = ns;
  e->map_key = MapKey(ns, key);
  e->len = len;
  e->node.hash = hash;
  e->node.units = static_cast<uint32_t>(units);
  e->node.pins = 1;  // the reservation
  for (uint64_t i = 0; i < units; ++i) {
    e->chunks.push_back(s.free.back());
    s.free.pop_back();
  }
  s.used_chunks += units;
  BuildPieces(e->chunks, len, opt_.chunk_bytes, [this](uint32_t c) { return ChunkData(c); }, &e->pieces);
  return e;
}

// Removes a published entry from the map and the file (not from the policy:
// callers do that, or the policy already did when it chose a victim).
void RamTier::UnlinkLocked(Shard& s, Entry* e) {
  s.map.erase(e->map_key);
  WriteDescriptor(e, false);
  e->published = false;
  e->dead = true;
  s.payload_bytes -= e->len;
}

void RamTier::FreeLocked(Shard& s, Entry* e) {
  for (size_t i = e->chunks.size(); i-- > 0;) s.free.push_back(e->chunks[i]);
  s.used_chunks -= e->chunks.size();
  delete e;
}

void RamTier::PublishLocked(Shard& s, Entry* e, uint64_t checksum) {
  auto it = s.map.find(e->map_key);
  if (it != s.map.end()) {
    Entry* old = it->second;
    s.policy->OnErase(&old->node);
    UnlinkLocked(s, old);
    if (old->node.pins == 0) FreeLocked(s, old);
  }
  e->checksum = checksum;
  e->token = next_token_.fetch_add(1);
  e->published = true;
  s.map.emplace(e->map_key, e);
  WriteDescriptor(e, true);
  s.policy->OnInsert(&e->node);
  s.payload_bytes += e->len;
  s.inserts++;
}

void RamTier::Unpin(Entry* e) {
  Shard& s = ShardFor(e->node.hash);
  std::lock_guard<std::mutex> l(s.mu);
  if (--e->node.pins == 0 && !e->published) FreeLocked(s, e);  // erased meanwhile, or an unused reservation
}

RamTier::Pin RamTier::Reserve(NamespaceId ns, std::string_view key, uint64_t len) {
  if (len == 0 || key.empty() || key.size() > format::kMaxKeyBytes) return Pin();
  std::string mk = MapKey(ns, key);
  uint64_t hash = format::Checksum(mk.data(), mk.size());
  Shard& s = ShardFor(hash);
  std::lock_guard<std::mutex> l(s.mu);
  Entry* e = AllocateLocked(s, ns, key, hash, len);
  if (e == nullptr) {
    s.rejects++;
    return Pin();
  }
  return Pin(this, e);
}

uint64_t RamTier::Commit(Pin reservation, uint64_t checksum) {
  Entry* e = reservation.entry_;
  if (e == nullptr) return 0;
  reservation.entry_ = nullptr;
  Shard& s = ShardFor(e->node.hash);
  std::lock_guard<std::mutex> l(s.mu);
  --e->node.pins;
  PublishLocked(s, e, checksum);
  return e->token;
}

uint64_t RamTier::CommitKeepPin(Pin& reservation, uint64_t checksum) {
  Entry* e = reservation.entry_;
  if (e == nullptr) return 0;
  Shard& s = ShardFor(e->node.hash);
  std::lock_guard<std::mutex> l(s.mu);
  PublishLocked(s, e, checksum);  // the reservation's pin count carries over
  return e->token;
}

uint64_t RamTier::Insert(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                         uint64_t checksum, bool only_if_absent) {
  uint64_t len = 0;
  for (const Fragment& f : payload) len += f.size;
  if (only_if_absent && Contains(ns, key)) return 0;
  Pin r = Reserve(ns, key, len);
  if (!r) return 0;
  // Scatter the fragments into the chunk runs (outside the lock: the
  // reservation is invisible to everyone else).
  size_t pi = 0, po = 0;
  for (const Fragment& f : payload) {
    const uint8_t* src = static_cast<const uint8_t*>(f.data);
    size_t left = f.size;
    while (left > 0) {
      const Piece& p = r.pieces()[pi];
      size_t n = std::min(left, p.size - po);
      std::memcpy(p.data + po, src, n);
      src += n;
      left -= n;
      po += n;
      if (po == p.size) ++pi, po = 0;
    }
  }
  if (only_if_absent && Contains(ns, key)) return 0;  // lost a race: keep the other copy
  return Commit(std::move(r), checksum);
}

RamTier::Pin RamTier::Acquire(NamespaceId ns, std::string_view key) {
  std::string mk = MapKey(ns, key);
  Shard& s = ShardFor(format::Checksum(mk.data(), mk.size()));
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.map.find(mk);
  if (it == s.map.end()) {
    s.misses++;
    return Pin();
  }
  s.hits++;
  s.policy->OnHit(&it->second->node);
  it->second->node.pins++;
  return Pin(this, it->second);
}

Result<size_t> RamTier::Read(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out) {
  Pin p = Acquire(ns, key);
  if (!p) return Status::NotFound("not in the RAM tier");
  uint64_t cap = 0;
  for (const MutableFragment& f : out) cap += f.size;
  if (cap < p.size())
    return Status::BufferTooSmall("block has " + std::to_string(p.size()) + " bytes, buffer " +
                                  std::to_string(cap));
  size_t oi = 0, oo = 0;
  Xxh3Stream sum;  // of the bytes handed out, read back while still in cache
  for (const Piece& piece : p.pieces()) {
    const uint8_t* src = piece.data;
    size_t left = piece.size;
    while (left > 0) {
      const MutableFragment& f = out[oi];
      size_t n = std::min(left, f.size - oo);
      uint8_t* dst = static_cast<uint8_t*>(f.data) + oo;
      std::memcpy(dst, src, n);
      if (opt_.verify_reads) sum.Update(dst, n);
      src += n;
      left -= n;
      oo += n;
      if (oo == f.size) ++oi, oo = 0;
    }
  }
  if (opt_.verify_reads && sum.Digest() != p.checksum()) {
    const uint64_t token = p.token();
    p.Release();
    EraseIf(ns, key, token);
    checksum_failures_.fetch_add(1);
    return Status::Corruption("the RAM tier's copy of the block no longer matches its checksum (dropped)");
  }
  return static_cast<size_t>(p.size());
}

bool RamTier::Contains(NamespaceId ns, std::string_view key) {
  std::string mk = MapKey(ns, key);
  Shard& s = ShardFor(format::Checksum(mk.data(), mk.size()));
  std::lock_guard<std::mutex> l(s.mu);
  return s.map.count(mk) != 0;
}

void RamTier::EraseIf(NamespaceId ns, std::string_view key, uint64_t token) {
  std::string mk = MapKey(ns, key);
  Shard& s = ShardFor(format::Checksum(mk.data(), mk.size()));
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.map.find(mk);
  if (it == s.map.end() || (token != 0 && it->second->token != token)) return;
  Entry* e = it->second;
  s.policy->OnErase(&e->node);
  UnlinkLocked(s, e);
  s.erases++;
  if (e->node.pins == 0) FreeLocked(s, e);
}

void RamTier::Erase(NamespaceId ns, std::string_view key) { EraseIf(ns, key, 0); }

void RamTier::EraseNamespace(NamespaceId ns) {
  for (auto& sp : shards_) {
    Shard& s = *sp;
    std::lock_guard<std::mutex> l(s.mu);
    std::vector<Entry*> victims;
    for (auto& [k, e] : s.map)
      if (e->ns == ns) victims.push_back(e);
    for (Entry* e : victims) {
      s.policy->OnErase(&e->node);
      UnlinkLocked(s, e);
      s.erases++;
      if (e->node.pins == 0) FreeLocked(s, e);
    }
  }
}

RamTierStats RamTier::GetStats() const {
  RamTierStats st = base_;
  st.checksum_failures = checksum_failures_.load();
  for (auto& sp : shards_) {
    Shard& s = *sp;
    std::lock_guard<std::mutex> l(s.mu);
    st.hits += s.hits;
    st.misses += s.misses;
    st.inserts += s.inserts;
    st.insert_rejects += s.rejects;
    st.evictions += s.evictions;
    st.evicted_bytes += s.evicted_bytes;
    st.erases += s.erases;
    st.blocks += s.map.size();
    st.payload_bytes += s.payload_bytes;
    st.used_bytes += s.used_chunks * opt_.chunk_bytes;
  }
  st.prefaulted_bytes = prefaulted_.load(std::memory_order_relaxed);
  return st;
}

std::vector<iovec> RamTier::Regions() const {
  return {iovec{map_ + meta_bytes_, map_bytes_ - meta_bytes_}};
}

}  // namespace kvtier
