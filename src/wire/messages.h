// The service's structured replies (store.h's structs) in wire form. Each
// struct is written and read by one visitor that lists its fields once, so
// the two sides cannot drift; a static_assert on each struct's size makes a
// new field in store.h fail the build here until it is listed.
#ifndef KVTIER_SRC_WIRE_MESSAGES_H_
#define KVTIER_SRC_WIRE_MESSAGES_H_

#include <utility>
#include <vector>

#include "kvtier/store.h"
#include "wire/wire.h"

namespace kvtier::wire {

void Encode(WireWriter& w, const Stats& s);
void Encode(WireWriter& w, const BlockInfo& b);
void Encode(WireWriter& w, const SegmentInfo& g);
void Encode(WireWriter& w, const VerifyReport& r);
void Encode(WireWriter& w, const RecordInspection& r);
void Encode(WireWriter& w, const StoreDescription& d);
void Encode(WireWriter& w, const NamespaceInfo& n);

// Each reads one struct; on a malformed body `r` fails (WireReader::ok).
void Decode(WireReader& r, Stats* s);
void Decode(WireReader& r, BlockInfo* b);
void Decode(WireReader& r, SegmentInfo* g);
void Decode(WireReader& r, VerifyReport* v);
void Decode(WireReader& r, RecordInspection* i);
void Decode(WireReader& r, StoreDescription* d);
void Decode(WireReader& r, NamespaceInfo* n);

// get_batch's reply after its status: a count, then per item a status and a
// size. Decode fails `r` unless it holds exactly `n` items.
void EncodeGetBatchReply(WireWriter& w, const std::vector<Result<size_t>>& got);
void DecodeGetBatchReply(WireReader& r, size_t n, std::vector<Result<size_t>>* got);

// remove_batch's, contains_batch's and touch_batch's reply after its status:
// a count, then a byte per key (1: it had a block, or has one). Decode fails `r` unless it
// holds exactly `n` keys.
void EncodeKeyFlagsReply(WireWriter& w, const std::vector<bool>& present);
void DecodeKeyFlagsReply(WireReader& r, size_t n, std::vector<bool>* present);

// map_tier's reply (the tier file's descriptor travels with it): the file's
// size, where the tier's blocks lie in it, and the size of the regions the
// data area is registered in (RamTier::Regions: no lent piece crosses one's
// end; a multiple of 4096).
struct TierMap {
  uint64_t file_bytes = 0, data_offset = 0, data_bytes = 0, region_bytes = 0;
};
// pin_tier's reply: a lease on the blocks the service pinned in its RAM tier,
// and per key (in the request's order) whether it is pinned and, if so, its
// size, XXH3 and pieces as [offset, offset + size) of the tier file. Pins
// last until unpin_tier(lease) or the connection's end.
struct TierPinned {
  bool pinned = false;
  uint64_t size = 0, checksum = 0;
  std::vector<std::pair<uint64_t, uint64_t>> pieces;  // file offset, bytes
};
struct TierLease {
  uint64_t lease = 0;
  std::vector<TierPinned> blocks;
};
inline constexpr uint32_t kMaxTierPieces = 4096;  // per block
void Encode(WireWriter& w, const TierMap& m);
void Encode(WireWriter& w, const TierLease& l);
// Each fails `r` on a bound, a piece past the file, or pieces that do not
// add up to the block's size.
void Decode(WireReader& r, TierMap* m);
void Decode(WireReader& r, TierLease* l);

// Bounds on what one reply may carry.
inline constexpr uint32_t kMaxListItems = 65536;
inline constexpr size_t kMaxTextBytes = 64 << 10;

}  // namespace kvtier::wire

#endif  // KVTIER_SRC_WIRE_MESSAGES_H_
