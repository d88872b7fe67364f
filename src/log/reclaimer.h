// Reclaimer: takes a sealed segment back whole (FIFO eviction). Every entry
// of its old generation is dropped from the index; with `reuse` the segment
// gets a new generation and the blocks the reinsertion policy wants are
// verified and written again, with new sequence numbers; without, it is left
// free (its header zeroed).
//
// Where they are written again: without a hot region, at the start of the
// segment's new life, which then takes puts. With one (Options::
// hot_region_fraction), in the hot region's open segment, so that blocks read
// again and again gather where the puts' FIFO does not come round; when that
// segment is full the reclaimed one becomes the next (and the writer needs
// another segment for its puts).
//
// Thread safety: the writer thread only (it owns the append position).
#ifndef KVTIER_SRC_LOG_RECLAIMER_H_
#define KVTIER_SRC_LOG_RECLAIMER_H_

#include <memory>

#include "index/index.h"
#include "kvtier/io.h"
#include "log/committer.h"
#include "log/reinsertion.h"
#include "log/segment_table.h"
#include "log/write_op.h"
#include "tier/ram_tier.h"
#include "util/aligned_buffer.h"
#include "util/counters.h"

namespace kvtier {

class Reclaimer {
 public:
  struct Deps {
    Index* index = nullptr;
    SegmentTable* table = nullptr;
    Committer* committer = nullptr;  // a reused segment is no longer poisoned
    RamTier* ram = nullptr;          // evicted blocks leave it too (may be null)
    HitCounts* hits = nullptr;
    Counters* counters = nullptr;
    // The writer's queue (required): a segment's reinserted blocks are read
    // back, and written again, all in flight at once.
    IoQueue* io = nullptr;
    uint64_t stored_payload_limit = 0;
    bool reinsert = true;     // Options::reinsert_hot_blocks
    bool punch_holes = true;  // Options::punch_holes
    std::unique_ptr<ReinsertionPolicy> policy;
  };
  explicit Reclaimer(Deps deps) : d_(std::move(deps)) {}

  // Reclaims `seg`. With `reuse` and no `hot` region, `pos` then appends to
  // it after the reinserted blocks. With `hot`, the reinserted blocks go to
  // its open segment, and `seg` becomes either the open segment of `pos` or,
  // when they did not all fit, `hot`'s next one (pos->seg is then left
  // UINT32_MAX). pos's epoch and next sequence advance either way.
  Status Reclaim(uint32_t seg, bool reuse, AppendPosition* pos, AppendPosition* hot = nullptr);

 private:
  struct Row;
  struct Reinsert;
  // Reads back and verifies the blocks of `seg` the policy wants: copied
  // from the RAM tier where it holds them, else all read in flight together.
  std::vector<Reinsert> GatherReinserts(uint32_t seg, uint32_t old_gen, const std::vector<Row>& rows);
  // A buffer of `bytes` for this reclaim's records (nullptr: no memory),
  // kept for the next one when at most kArenaKeepBytes.
  uint8_t* ArenaFor(uint64_t bytes);
  void TrimArena();
  // Fills ri (record and header, but its place) from the RAM tier's copy
  // of the block `v` names, verified as it is copied; false when the tier
  // has no such copy or it does not match `v`'s checksum.
  bool CopyFromRam(const format::IndexValue& v, Reinsert* ri);
  // Drops the old generation's entries (and their RAM copies, but for
  // blocks about to be reinserted).
  void DropEntries(uint32_t seg, uint32_t old_gen, uint32_t new_gen, bool reuse, const std::vector<Row>& rows,
                   const std::vector<Reinsert>& reinserts);
  // Writes reinserted blocks from `next` on at `at` (its seg, gen and off)
  // while they fit in the segment, each with the sequence number its block
  // was put with, all writes in flight together; returns the index of the
  // first one not written. From the first failed write on, the blocks leave
  // the RAM tier too (unindexed), all count as handled, and the segment as
  // full.
  size_t WriteReinserts(std::vector<Reinsert>& reinserts, size_t next, AppendPosition* at);

  // What the writer keeps between reclaims for reinserted records: a 2 MiB
  // block store's reclaim rewrites up to reinsert_max_fraction of a
  // segment, and more than this is freed after each reclaim.
  static constexpr uint64_t kArenaKeepBytes = 64ull << 20;

  Deps d_;
  AlignedBuffer arena_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_RECLAIMER_H_
