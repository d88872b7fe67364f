#include "index/presence_map.h"

#include <xxhash.h>

namespace kvtier {

uint64_t PresenceMap::Hash(NamespaceId ns, std::string_view key) {
  return XXH3_64bits_withSeed(key.data(), key.size(), ns);
}

PresenceMap::PresenceMap() {
  for (Shard& s : shards_) {
    s.hashes.assign(64, 0);
    s.locs.assign(64, 0);
  }
}

// Linear probing over a power-of-two table indexed by the hash's low bits
// (the top 6 bits chose the shard).
void PresenceMap::InsertLocked(Shard& s, uint64_t h, uint64_t loc, bool only_if_absent) {
  if ((s.count + 1) * 2 > s.hashes.size()) Grow(s);
  const size_t mask = s.hashes.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    if (s.hashes[i] == h) {
      if (!only_if_absent) s.locs[i] = loc;
      return;
    }
    if (s.hashes[i] == 0) {
      s.hashes[i] = h;
      s.locs[i] = loc;
      ++s.count;
      return;
    }
  }
}

void PresenceMap::Grow(Shard& s) {
  std::vector<uint64_t> hashes(s.hashes.size() * 2, 0), locs(s.hashes.size() * 2, 0);
  hashes.swap(s.hashes);
  locs.swap(s.locs);
  s.count = 0;
  for (size_t i = 0; i < hashes.size(); ++i)
    if (hashes[i] != 0) InsertLocked(s, hashes[i], locs[i], false);
}

// Backward-shift deletion keeps probe chains intact without tombstones.
void PresenceMap::EraseLocked(Shard& s, uint64_t h) {
  const size_t mask = s.hashes.size() - 1;
  size_t i = h & mask;
  for (;; i = (i + 1) & mask) {
    if (s.hashes[i] == 0) return;
    if (s.hashes[i] == h) break;
  }
  size_t hole = i;
  for (size_t j = (hole + 1) & mask; s.hashes[j] != 0; j = (j + 1) & mask) {
    size_t home = s.hashes[j] & mask;
    // Move j into the hole unless its home lies cyclically in (hole, j].
    bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!stays) {
      s.hashes[hole] = s.hashes[j];
      s.locs[hole] = s.locs[j];
      hole = j;
    }
  }
  s.hashes[hole] = 0;
  --s.count;
}

void PresenceMap::Set(uint64_t hash, uint64_t location) {
  hash = Norm(hash);
  Shard& s = ShardOf(hash);
  std::lock_guard<std::mutex> l(s.mu);
  if (s.loading) s.erased_during_load.erase(hash);
  InsertLocked(s, hash, location, false);
}

void PresenceMap::Erase(uint64_t hash) {
  hash = Norm(hash);
  Shard& s = ShardOf(hash);
  std::lock_guard<std::mutex> l(s.mu);
  if (s.loading) s.erased_during_load.insert(hash);
  EraseLocked(s, hash);
}

void PresenceMap::LoadIfAbsent(uint64_t hash, uint64_t location) {
  hash = Norm(hash);
  Shard& s = ShardOf(hash);
  std::lock_guard<std::mutex> l(s.mu);
  if (s.erased_during_load.count(hash)) return;
  InsertLocked(s, hash, location, true);
}

void PresenceMap::Clear() {
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> l(s.mu);
    s.hashes.assign(64, 0);
    s.locs.assign(64, 0);
    s.count = 0;
    s.erased_during_load.clear();
  }
}

void PresenceMap::BeginLoad() {
  ready_.store(false, std::memory_order_release);
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> l(s.mu);
    s.loading = true;
  }
}

void PresenceMap::FinishLoad() {
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> l(s.mu);
    s.loading = false;
    s.erased_during_load.clear();
  }
  ready_.store(true, std::memory_order_release);
}

uint64_t PresenceMap::Find(uint64_t hash) const {
  hash = Norm(hash);
  const Shard& s = ShardOf(hash);
  std::lock_guard<std::mutex> l(s.mu);
  const size_t mask = s.hashes.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    if (s.hashes[i] == hash) return s.locs[i];
    if (s.hashes[i] == 0) return kAbsent;
  }
}

uint64_t PresenceMap::size() const {
  uint64_t n = 0;
  for (const Shard& s : shards_) {
    std::lock_guard<std::mutex> l(s.mu);
    n += s.count;
  }
  return n;
}

}  // namespace kvtier
