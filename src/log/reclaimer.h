// Reclaimer: takes a sealed segment back whole (FIFO eviction). Every entry
// of its old generation is dropped from the index; with `reuse` the segment
// becomes the open one in a new generation and the blocks the reinsertion
// policy wants are verified and written again at its start, with new
// sequence numbers; without, it is left free (its header zeroed).
//
// Thread safety: the writer thread only (it owns the append position).
#ifndef KVTIER_SRC_LOG_RECLAIMER_H_
#define KVTIER_SRC_LOG_RECLAIMER_H_

#include <memory>

#include "index/index.h"
#include "log/committer.h"
#include "log/reinsertion.h"
#include "log/segment_table.h"
#include "log/write_op.h"
#include "tier/ram_tier.h"
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
    uint64_t stored_payload_limit = 0;
    bool reinsert = true;     // Options::reinsert_hot_blocks
    bool punch_holes = true;  // Options::punch_holes
    std::unique_ptr<ReinsertionPolicy> policy;
  };
  explicit Reclaimer(Deps deps) : d_(std::move(deps)) {}

  // Reclaims `seg`; with `reuse`, `pos` then appends to it after the
  // reinserted blocks (its epoch and next sequence advanced).
  Status Reclaim(uint32_t seg, bool reuse, AppendPosition* pos);

 private:
  struct Row;
  struct Reinsert;
  // Reads back and verifies the blocks of `seg` the policy wants.
  std::vector<Reinsert> GatherReinserts(uint32_t seg, uint32_t old_gen, const std::vector<Row>& rows);
  // Drops the old generation's entries (and their RAM copies, but for
  // blocks about to be reinserted).
  void DropEntries(uint32_t seg, uint32_t old_gen, uint32_t new_gen, bool reuse, const std::vector<Row>& rows,
                   const std::vector<Reinsert>& reinserts);
  // Writes the reinserted blocks at the start of the segment's new life.
  void WriteReinserts(uint32_t seg, uint32_t new_gen, std::vector<Reinsert>& reinserts, AppendPosition* pos);

  Deps d_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_RECLAIMER_H_
