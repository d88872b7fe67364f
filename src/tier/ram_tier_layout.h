// Inside the tier room: the RAM tier's mapping (header, chunk links, block
// descriptors: the layout a shared-memory file keeps across processes) and
// the in-memory state behind RamTier, shared by ram_tier.cc (the cache) and
// ram_tier_file.cc (mapping, formatting, adoption). Not for other rooms.
#ifndef KVTIER_SRC_TIER_RAM_TIER_LAYOUT_H_
#define KVTIER_SRC_TIER_RAM_TIER_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "format/record.h"
#include "tier/ram_tier.h"
#include "util/checksum.h"
#include "util/copy_checksum.h"

namespace kvtier {
namespace ram_layout {

inline constexpr char kMagic[8] = {'K', 'V', 'T', 'R', 'A', 'M', '0', '1'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kEnd = UINT32_MAX;
inline constexpr size_t kHeaderBytes = 4096;
inline constexpr size_t kDataAlign = 2u << 20;  // huge-page aligned data area
inline constexpr uint32_t kDescValid = 0x56414C44;  // "VALD"

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

inline size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

inline std::string MapKey(NamespaceId ns, std::string_view key) {
  std::string k(sizeof ns + key.size(), '\0');
  std::memcpy(k.data(), &ns, sizeof ns);
  std::memcpy(k.data() + sizeof ns, key.data(), key.size());
  return k;
}

inline uint64_t HeaderChecksum(const FileHeader& h) { return format::Checksum(&h, offsetof(FileHeader, checksum)); }

inline uint32_t* NextArray(uint8_t* map) { return reinterpret_cast<uint32_t*>(map + kHeaderBytes); }
inline Desc* DescArray(uint8_t* map, uint32_t chunks) {
  return reinterpret_cast<Desc*>(map + AlignUp(kHeaderBytes + sizeof(uint32_t) * chunks, 64));
}
// The pieces of a block's chunk chain, merged where contiguous within one
// region of `region_chunks` chunks (RamTier::Regions).
void BuildPieces(const std::vector<uint32_t>& chunks, uint64_t len, uint32_t chunk_bytes, uint32_t region_chunks,
                 const std::function<uint8_t*(uint32_t)>& data, std::vector<RamTier::Piece>* out);

}  // namespace ram_layout

struct RamTier::Entry {
  PolicyNode node;  // first: the policy hands back PolicyNode*
  NamespaceId ns = 0;
  std::string map_key;
  uint64_t len = 0, checksum = 0, token = 0;
  std::vector<uint32_t> chunks;
  std::vector<Piece> pieces;
  bool published = false, dead = false;
  uint32_t reads = 0;  // hits since inserted or since TakeReads, while not placed: the disk's reclaim asks
  // Where the disk holds this version (NotePlaced; segment UINT32_MAX: not known).
  // Its reads since, and the read epoch of the last one reported.
  RamPlacement placed;
  uint32_t placed_reads = 0;
  uint64_t placed_epoch = 0;
  // The payload's hash state every 256 KiB, recorded by a verified one-pass
  // read, so that later reads can share the copy out
  // (RamTierOptions::split_copy_min_bytes). Replaced whole, under the shard's
  // mutex, when a shared copy failed and the one pass recorded them again.
  std::shared_ptr<const std::vector<Xxh3Mark>> marks;
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

}  // namespace kvtier

#endif  // KVTIER_SRC_TIER_RAM_TIER_LAYOUT_H_
