// PresenceMap: an in-memory map from a 64-bit hash of (namespace, key) to the
// entry's (segment, generation), kept in step with every index commit.
//
// Why: engines ask "how many leading blocks of this prompt are cached?" for
// every request. RocksDB answers ~0.3-0.5M keys/s per thread; this map answers
// several million, so LookupPrefix and Contains never wait on the LSM.
//
// Exactness: a hash collision can only make a key look present that is not
// (probability ~n^2/2^65, 3e-8 at a million keys); the following Get then
// misses. It can never make a read return wrong bytes, because reads go
// through the index and verify the record.
//
// Loading: after open, a background thread fills the map from a RocksDB
// snapshot while commits keep applying. Deletes that happen during the load
// are remembered so the loader cannot resurrect them; entries the writer
// already set win over the loader's older view. Until loading is done,
// Ready() is false and callers use RocksDB.
//
// Thread-safe: 64 shards, one mutex each. ~32 bytes of memory per entry.
#ifndef KVTIER_SRC_INDEX_PRESENCE_MAP_H_
#define KVTIER_SRC_INDEX_PRESENCE_MAP_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "kvtier/namespace.h"

namespace kvtier {

class PresenceMap {
 public:
  static constexpr uint64_t kAbsent = UINT64_MAX;
  static uint64_t Hash(NamespaceId ns, std::string_view key);
  static uint64_t Location(uint32_t segment, uint32_t generation) {
    return (uint64_t{segment} << 32) | generation;
  }

  PresenceMap();
  // Writer side (applied after a successful commit).
  void Set(uint64_t hash, uint64_t location);
  void Erase(uint64_t hash);
  void Clear();
  // Loader side: inserts unless the writer already set or erased the key.
  void LoadIfAbsent(uint64_t hash, uint64_t location);
  void BeginLoad();
  void FinishLoad();  // Ready() from now on
  bool Ready() const { return ready_.load(std::memory_order_acquire); }

  // The location, or kAbsent.
  uint64_t Find(uint64_t hash) const;
  uint64_t size() const;

 private:
  struct Shard {
    mutable std::mutex mu;
    std::vector<uint64_t> hashes;  // 0 = empty slot (hash 0 is remapped to 1)
    std::vector<uint64_t> locs;
    uint64_t count = 0;
    bool loading = false;
    std::unordered_set<uint64_t> erased_during_load;
  };
  static uint64_t Norm(uint64_t h) { return h == 0 ? 1 : h; }
  Shard& ShardOf(uint64_t h) { return shards_[h >> 58]; }
  const Shard& ShardOf(uint64_t h) const { return shards_[h >> 58]; }
  static void Grow(Shard& s);
  static void InsertLocked(Shard& s, uint64_t h, uint64_t loc, bool only_if_absent);
  static void EraseLocked(Shard& s, uint64_t h);

  std::array<Shard, 64> shards_;
  std::atomic<bool> ready_{false};
};

}  // namespace kvtier

#endif  // KVTIER_SRC_INDEX_PRESENCE_MAP_H_
