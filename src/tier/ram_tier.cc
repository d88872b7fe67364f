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
#include <utility>

#include "format/record.h"
#include "tier/ram_tier_layout.h"
#include "util/fragment_walk.h"
#include "util/checksum.h"
#include "util/copy_checksum.h"

namespace kvtier {

using namespace ram_layout;  // NOLINT: the room's own layout

namespace {
constexpr std::string_view kTierPrefix = "kvtier-", kTierSuffix = ".ram", kNoteSuffix = ".dir";
}  // namespace

std::string RamTierShmPath(const std::string& store_id_hex) {
  return std::string(kRamTierShmDir) + "/" + std::string(kTierPrefix) + store_id_hex + std::string(kTierSuffix);
}

std::string RamTierStoreIdOf(std::string_view name) {
  if (!name.starts_with(kTierPrefix) || !name.ends_with(kTierSuffix)) return {};
  const std::string_view id = name.substr(kTierPrefix.size(), name.size() - kTierPrefix.size() - kTierSuffix.size());
  if (id.size() != 32) return {};
  for (char c : id)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return {};
  return std::string(id);
}

std::string RamTierFolderNotePath(const std::string& store_id_hex) {
  return std::string(kRamTierShmDir) + "/" + std::string(kTierPrefix) + store_id_hex + std::string(kNoteSuffix);
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

RamTier::RamTier(const RamTierOptions& o) : opt_(o) {
  if (o.copy_threads > 1) copiers_ = std::make_unique<WorkerPool>(o.copy_threads - 1, "kvtier-ramcopy", o.copy_spin_us);
}

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
  t->region_chunks_ = static_cast<uint32_t>(std::max<uint64_t>(1, kRegionBytes / options.chunk_bytes));
  uint32_t shards = options.shards;
  if (shards == 0) shards = static_cast<uint32_t>(std::clamp<uint64_t>(chunks / 256, 1, 16));
  shards = std::min<uint32_t>(shards, t->chunks_);
  t->opt_.shards = shards;
  t->map_bytes_ = MappingBytes(options.capacity_bytes, options.chunk_bytes);
  t->meta_bytes_ = t->map_bytes_ - chunks * options.chunk_bytes;
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
    t->prefault_over_ = false;
    t->prefault_ = std::thread([raw] {
      raw->Prefault();
      raw->prefault_over_.store(true, std::memory_order_release);
    });
  }
  return t;
}

uint64_t RamTier::MappingBytes(uint64_t capacity_bytes, uint32_t chunk_bytes) {
  if (chunk_bytes < 4096 || chunk_bytes % 4096 != 0) return 0;
  const uint64_t chunks = capacity_bytes / chunk_bytes;
  if (chunks == 0 || chunks >= kEnd) return 0;
  const size_t desc_off = AlignUp(kHeaderBytes + sizeof(uint32_t) * chunks, 64);
  return AlignUp(desc_off + sizeof(Desc) * chunks, kDataAlign) + chunks * chunk_bytes;
}

void RamTier::Prefault() {
  // Small steps: each holds the process's mmap lock, which every mmap and
  // munmap of the process (a thread's stack, RocksDB's files, a buffer)
  // waits for, and closing waits for the step under way. Pages already
  // present (adopted blocks, or chunks filled meanwhile) are left as they are.
  constexpr size_t kStep = 8u << 20;
  uint8_t* const begin = map_ + meta_bytes_;
  const size_t total = map_bytes_ - meta_bytes_;
  for (size_t off = 0; off < total && !stop_prefault_.load(std::memory_order_relaxed); off += kStep) {
    const size_t n = std::min(kStep, total - off);
    if (madvise(begin + off, n, MADV_POPULATE_WRITE) != 0) return;  // unsupported or out of memory: fault lazily
    prefaulted_.fetch_add(n, std::memory_order_release);
  }
}

namespace ram_layout {
void BuildPieces(const std::vector<uint32_t>& chunks, uint64_t len, uint32_t chunk_bytes, uint32_t region_chunks,
                 const std::function<uint8_t*(uint32_t)>& data, std::vector<RamTier::Piece>* out) {
  out->clear();
  uint64_t left = len;
  uint32_t prev = 0;
  for (uint32_t c : chunks) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(left, chunk_bytes));
    uint8_t* p = data(c);
    if (!out->empty() && out->back().data + out->back().size == p && c / region_chunks == prev / region_chunks) {
      out->back().size += n;
    } else {
      out->push_back(RamTier::Piece{p, n});
    }
    prev = c;
    left -= n;
  }
}

}  // namespace ram_layout

uint8_t* RamTier::ChunkData(uint32_t c) const { return map_ + meta_bytes_ + uint64_t{c} * opt_.chunk_bytes; }

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
  // In address order, chunks freed by different blocks that happen to lie
  // side by side merge into one piece: one copy instead of several.
  if (!std::is_sorted(e->chunks.begin(), e->chunks.end())) std::sort(e->chunks.begin(), e->chunks.end());
  s.used_chunks += units;
  BuildPieces(e->chunks, len, opt_.chunk_bytes, region_chunks_, [this](uint32_t c) { return ChunkData(c); },
              &e->pieces);
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

RamPlacement RamTier::CountReadLocked(Shard& s, Entry* e) {
  s.hits++;
  s.policy->OnHit(&e->node);
  if (e->placed.segment == UINT32_MAX || !opt_.on_placed_read) {
    if (e->reads != UINT32_MAX) e->reads++;
    return RamPlacement{};
  }
  if (e->placed_reads != UINT32_MAX) e->placed_reads++;
  const uint64_t epoch = opt_.read_epoch != nullptr ? opt_.read_epoch->load(std::memory_order_relaxed) : 0;
  if (e->placed_reads > opt_.placed_reads_reported && epoch == e->placed_epoch) return RamPlacement{};
  e->placed_epoch = epoch;
  return e->placed;
}

void RamTier::ReportPlacedRead(const RamPlacement& r) {
  if (r.segment != UINT32_MAX) opt_.on_placed_read(r.segment, r.offset, r.bytes);
}

void RamTier::CountRead(const Pin& pin) {
  Entry* e = pin.entry_;
  if (e == nullptr) return;
  Shard& s = ShardFor(e->node.hash);
  RamPlacement placed;
  {
    std::lock_guard<std::mutex> l(s.mu);
    if (!e->published) return;
    placed = CountReadLocked(s, e);
  }
  ReportPlacedRead(placed);
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
  ForEachOverlap(payload, std::span<const Piece>(r.pieces()), SIZE_MAX,
                 [](uint8_t* dst, const uint8_t* src, size_t n) { std::memcpy(dst, src, n); });
  if (only_if_absent && Contains(ns, key)) return 0;  // lost a race: keep the other copy
  return Commit(std::move(r), checksum);
}

RamTier::Pin RamTier::PinEntry(NamespaceId ns, std::string_view key, Count count) {
  std::string mk = MapKey(ns, key);
  Shard& s = ShardFor(format::Checksum(mk.data(), mk.size()));
  RamPlacement placed;
  Entry* e = nullptr;
  {
    std::lock_guard<std::mutex> l(s.mu);
    auto it = s.map.find(mk);
    if (it == s.map.end()) {
      if (count == Count::kHitOrMiss) s.misses++;
      return Pin();
    }
    e = it->second;
    if (count != Count::kNothing) placed = CountReadLocked(s, e);
    e->node.pins++;
  }
  ReportPlacedRead(placed);
  return Pin(this, e);
}

namespace {
// A shared copy's piece, and the distance between the hash states a block's
// first read (or its put) records: 8 pieces for a 2 MiB block, each a few
// tens of microseconds of copying, long beside handing it out.
constexpr uint64_t kMarkBytes = RamTier::kMarkBytes;

// ForEachOverlap cut to the payload's bytes [begin, end).
template <class Fn>
void ForEachOverlapIn(std::span<const RamTier::Piece> from, std::span<const MutableFragment> to, uint64_t begin,
                      uint64_t end, Fn&& fn) {
  uint64_t at = 0;
  ForEachOverlap(from, to, SIZE_MAX, [&](uint8_t* dst, const uint8_t* src, size_t n) {
    const uint64_t lo = std::max(at, begin), hi = std::min(at + n, end);
    if (lo < hi) fn(dst + (lo - at), src + (lo - at), static_cast<size_t>(hi - lo));
    at += n;
  });
}

// How many marks a full read of `total` bytes records.
size_t MarksFor(uint64_t total) {
  size_t n = 0;
  for (uint64_t off = kMarkBytes; Xxh3Copy::MarkOffsetOk(total, off); off += kMarkBytes) ++n;
  return n;
}
}  // namespace

// Counts a read (a lone one, or a batch) and its bytes in RamTier::reads_
// and copying_ while it copies.
struct RamTier::Copying {
  Copying(RamTier* t, uint64_t n) : tier(t), bytes(n) {
    if (bytes == 0) return;
    tier->copying_.fetch_add(bytes, std::memory_order_relaxed);
    tier->reads_.fetch_add(1, std::memory_order_relaxed);
  }
  ~Copying() {
    if (bytes == 0) return;
    tier->copying_.fetch_sub(bytes, std::memory_order_relaxed);
    tier->reads_.fetch_sub(1, std::memory_order_relaxed);
  }
  Copying(const Copying&) = delete;
  Copying& operator=(const Copying&) = delete;
  RamTier* tier;
  uint64_t bytes;
};

std::shared_ptr<const std::vector<Xxh3Mark>> RamTier::MarksOf(const Pin& p) {
  Shard& s = ShardFor(p.entry_->node.hash);
  std::lock_guard<std::mutex> l(s.mu);
  return p.entry_->marks;
}

void RamTier::SetMarks(const Pin& p, std::vector<Xxh3Mark> marks) {
  auto shared = std::make_shared<const std::vector<Xxh3Mark>>(std::move(marks));
  Shard& s = ShardFor(p.entry_->node.hash);
  std::lock_guard<std::mutex> l(s.mu);
  p.entry_->marks = std::move(shared);
}

bool RamTier::CopyMarkedUnit(const Pin& p, std::span<const MutableFragment> out, const std::vector<Xxh3Mark>& marks,
                             size_t unit, CopyStores stores) {
  const uint64_t total = p.size();
  const size_t units = marks.size() + 1;
  const uint64_t begin = unit * kMarkBytes;
  const uint64_t end = unit + 1 < units ? begin + kMarkBytes : total;
  Xxh3Copy sum = unit == 0 ? Xxh3Copy(total, stores) : Xxh3Copy(total, begin, marks[unit - 1], stores);
  ForEachOverlapIn(std::span<const Piece>(p.pieces()), out, begin, end,
                   [&sum](uint8_t* dst, const uint8_t* src, size_t n) { sum.Copy(dst, src, n); });
  // Each piece must carry the hash from its start state to the next: the
  // chain is then the one pass's, ending at the block's checksum.
  return unit + 1 < units ? sum.State() == marks[unit] : sum.Digest() == p.checksum();
}

bool RamTier::CopyShared(const Pin& p, std::span<const MutableFragment> out, const std::vector<Xxh3Mark>& marks,
                         bool stream) {
  if (marks.size() != MarksFor(p.size()) || marks.empty()) return false;
  const CopyStores stores = stream ? CopyStores::kStreaming : CopyStores::kCached;
  std::vector<uint8_t> ok(marks.size() + 1, 0);
  copiers_->ForEach(ok.size(), [&](size_t i) { ok[i] = CopyMarkedUnit(p, out, marks, i, stores); });
  if (std::find(ok.begin(), ok.end(), 0) != ok.end()) return false;
  split_copies_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool RamTier::Splittable(uint64_t bytes) const {
  return copiers_ != nullptr && opt_.verify_reads && opt_.split_copy_min_bytes != 0 &&
         bytes >= opt_.split_copy_min_bytes && MarksFor(bytes) > 0;
}

Result<size_t> RamTier::CopyVerified(Pin& p, NamespaceId ns, std::string_view key,
                                     std::span<const MutableFragment> out, bool stream, bool record) {
  // Verified as it is copied: each stripe is hashed on its way through the
  // core, one pass over memory (util/copy_checksum.h).
  Xxh3Copy sum(p.size(), stream ? CopyStores::kStreaming : CopyStores::kCached);
  std::vector<Xxh3Mark> marks;
  if (record) sum.RecordMarks(kMarkBytes, &marks);
  ForEachOverlap(std::span<const Piece>(p.pieces()), out, SIZE_MAX, [&](uint8_t* dst, const uint8_t* src, size_t n) {
    if (opt_.verify_reads) sum.Copy(dst, src, n);
    else std::memcpy(dst, src, n);
  });
  if (opt_.verify_reads && sum.Digest() != p.checksum()) {
    const uint64_t token = p.token();
    p.Release();
    // Readers that pinned the copy before it was dropped find it bad too;
    // the one that drops it counts it.
    if (EraseIf(ns, key, token)) checksum_failures_.fetch_add(1);
    return Status::Corruption("the RAM tier's copy of the block no longer matches its checksum (dropped)");
  }
  if (record && !marks.empty()) SetMarks(p, std::move(marks));
  return static_cast<size_t>(p.size());
}

Result<size_t> RamTier::ReadAs(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                               uint64_t copy_bytes, bool may_split) {
  Pin p = Acquire(ns, key);
  if (!p) return Status::NotFound("not in the RAM tier");
  uint64_t cap = 0;
  for (const MutableFragment& f : out) cap += f.size;
  if (cap < p.size())
    return Status::BufferTooSmall("block has " + std::to_string(p.size()) + " bytes, buffer " +
                                  std::to_string(cap));
  const Copying lone(this, copy_bytes == 0 ? p.size() : 0);  // a batch's bytes are counted by ReadBatch
  const bool stream = StreamsCopy(std::max<uint64_t>(copy_bytes, p.size()), copying_.load(std::memory_order_relaxed),
                                  opt_.streaming_copy_min_bytes);
  // One block, large enough to share out: the copy threads copy its pieces
  // at once, each verified in the same pass. The states between pieces come
  // from an earlier read; without them, or if a piece fails (the tier's
  // copy gone bad), the one pass below decides and records them.
  const bool splittable = may_split && Splittable(p.size());
  bool record = splittable;
  if (splittable) {
    auto have = MarksOf(p);
    if (have != nullptr) {
      if (!SharesCopy(reads_.load(std::memory_order_relaxed), opt_.copy_threads, opt_.copy_spin_us > 0)) record = false;
      else if (CopyShared(p, out, *have, stream)) return static_cast<size_t>(p.size());
    }
  }
  return CopyVerified(p, ns, key, out, stream, record);
}

void RamTier::ReadBatch(NamespaceId ns, std::span<const GetItem> items, std::span<Result<size_t>> results) {
  // Below this a batch's copies are over before helpers could wake.
  constexpr uint64_t kSplitBytes = 1u << 20;
  uint64_t asked = 0;
  for (const GetItem& it : items)
    for (const MutableFragment& f : it.out) asked += f.size;
  const Copying batch(this, asked);
  if (copiers_ != nullptr && items.size() > 1 && asked >= kSplitBytes) return ReadBatchShared(ns, items, results, asked);
  // On the caller's thread alone: a large block may still share its copy out.
  for (size_t i = 0; i < items.size(); ++i) results[i] = ReadAs(ns, items[i].key, items[i].out, asked, true);
}

void RamTier::ReadBatchShared(NamespaceId ns, std::span<const GetItem> items, std::span<Result<size_t>> results,
                              uint64_t asked) {
  const bool stream = StreamsCopy(asked, copying_.load(std::memory_order_relaxed), opt_.streaming_copy_min_bytes);
  const CopyStores stores = stream ? CopyStores::kStreaming : CopyStores::kCached;
  struct Block {
    Pin pin;
    std::shared_ptr<const std::vector<Xxh3Mark>> marks;  // set: copied as pieces
    bool record = false;                                // whole: record the states between pieces
    std::vector<uint8_t> ok;                            // per piece
  };
  std::vector<Block> blocks(items.size());
  constexpr size_t kWhole = SIZE_MAX;
  struct Job {
    size_t item, unit;  // unit: a piece of a block with marks, or kWhole
  };
  std::vector<Job> whole, pieces;
  for (size_t i = 0; i < items.size(); ++i) {
    Block& b = blocks[i];
    b.pin = Acquire(ns, items[i].key);
    if (!b.pin) {
      results[i] = Status::NotFound("not in the RAM tier");
      continue;
    }
    uint64_t cap = 0;
    for (const MutableFragment& f : items[i].out) cap += f.size;
    const uint64_t size = b.pin.size();
    if (cap < size) {
      results[i] = Status::BufferTooSmall("block has " + std::to_string(size) + " bytes, buffer " + std::to_string(cap));
      b.pin.Release();
      continue;
    }
    const bool splittable = Splittable(size);
    if (splittable) b.marks = MarksOf(b.pin);
    if (b.marks != nullptr && b.marks->size() == MarksFor(size)) {
      b.ok.assign(b.marks->size() + 1, 0);
      for (size_t u = 0; u < b.ok.size(); ++u) pieces.push_back(Job{i, u});
    } else {
      b.marks.reset();
      b.record = splittable;
      whole.push_back(Job{i, kWhole});
    }
  }
  // Whole blocks first, largest first, and the pieces after them: the end
  // of the batch is then small pieces on every thread, not one thread's last
  // block while the rest wait.
  std::stable_sort(whole.begin(), whole.end(),
                   [&](const Job& x, const Job& y) { return blocks[x.item].pin.size() > blocks[y.item].pin.size(); });
  std::vector<Job> jobs = std::move(whole);
  jobs.insert(jobs.end(), pieces.begin(), pieces.end());
  copiers_->ForEach(jobs.size(), [&](size_t j) {
    const Job job = jobs[j];
    Block& b = blocks[job.item];
    if (job.unit == kWhole) {
      results[job.item] = CopyVerified(b.pin, ns, items[job.item].key, items[job.item].out, stream, b.record);
    } else {
      b.ok[job.unit] = CopyMarkedUnit(b.pin, items[job.item].out, *b.marks, job.unit, stores);
    }
  });
  for (size_t i = 0; i < items.size(); ++i) {
    Block& b = blocks[i];
    if (b.marks == nullptr) continue;
    if (std::find(b.ok.begin(), b.ok.end(), 0) == b.ok.end()) {
      split_copies_.fetch_add(1, std::memory_order_relaxed);
      results[i] = static_cast<size_t>(b.pin.size());
    } else {
      // A piece off its recorded state: one pass decides (and drops a copy
      // gone bad), recording the states afresh.
      results[i] = CopyVerified(b.pin, ns, items[i].key, items[i].out, stream, /*record=*/true);
    }
  }
}

bool RamTier::Contains(NamespaceId ns, std::string_view key) {
  std::string mk = MapKey(ns, key);
  Shard& s = ShardFor(format::Checksum(mk.data(), mk.size()));
  std::lock_guard<std::mutex> l(s.mu);
  return s.map.count(mk) != 0;
}

void RamTier::NotePlaced(NamespaceId ns, std::string_view key, uint64_t checksum, const RamPlacement& placed) {
  std::string mk = MapKey(ns, key);
  Shard& s = ShardFor(format::Checksum(mk.data(), mk.size()));
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.map.find(mk);
  if (it == s.map.end() || it->second->checksum != checksum) return;
  it->second->placed = placed;
  it->second->placed_reads = 0;
}

uint32_t RamTier::TakeReads(NamespaceId ns, std::string_view key) {
  std::string mk = MapKey(ns, key);
  Shard& s = ShardFor(format::Checksum(mk.data(), mk.size()));
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.map.find(mk);
  if (it == s.map.end()) return 0;
  return std::exchange(it->second->reads, 0);
}

bool RamTier::EraseIf(NamespaceId ns, std::string_view key, uint64_t token) {
  std::string mk = MapKey(ns, key);
  Shard& s = ShardFor(format::Checksum(mk.data(), mk.size()));
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.map.find(mk);
  if (it == s.map.end() || (token != 0 && it->second->token != token)) return false;
  Entry* e = it->second;
  s.policy->OnErase(&e->node);
  UnlinkLocked(s, e);
  s.erases++;
  if (e->node.pins == 0) FreeLocked(s, e);
  return true;
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
  st.split_copies = split_copies_.load(std::memory_order_relaxed);
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
  std::vector<iovec> out;
  const uint64_t step = uint64_t{region_chunks_} * opt_.chunk_bytes, data = map_bytes_ - meta_bytes_;
  for (uint64_t at = 0; at < data; at += step)
    out.push_back(iovec{map_ + meta_bytes_ + at, static_cast<size_t>(std::min(step, data - at))});
  return out;
}

}  // namespace kvtier
