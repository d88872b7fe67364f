// Puts scanned records back into the index: recovery's records after the
// checkpoint and Repair's whole segments.
//
// A record goes in unless the index, or a record taken earlier and not yet
// committed, names the same key at a sequence at least as new. Scan order is
// not sequence order: a reinserted record keeps its put's sequence, so an
// older version can follow a newer one on disk, and an uncommitted batch is
// invisible to the index's Get.
//
// With `remove_marks`, a record a remove's mark covers (Index::RemovedBelow)
// stays out: the block was removed after it was written.
//
// Thread safety: one thread at a time (recovery and Repair run alone).
// Errors: the index's, from Offer and Finish; after one, stop scanning.
#ifndef KVTIER_SRC_LOG_REINDEXER_H_
#define KVTIER_SRC_LOG_REINDEXER_H_

#include <cstdint>
#include <string>
#include <unordered_map>

#include "index/index.h"
#include "kvtier/status.h"
#include "log/scanner.h"

namespace kvtier {

class Reindexer {
 public:
  // Commits (to the index's memtables, as every write since the WAL went)
  // every `commit_every` records taken. `index` must outlive this.
  explicit Reindexer(Index* index, bool remove_marks = false, size_t commit_every = 4096)
      : index_(index), remove_marks_(remove_marks), commit_every_(commit_every) {}

  // True if `rec` (of segment `segment`, generation `generation`) was taken.
  [[nodiscard]] Result<bool> Offer(const ScannedRecord& rec, uint32_t segment, uint32_t generation);
  // Commits what was taken and not yet committed.
  [[nodiscard]] Status Finish();

 private:
  [[nodiscard]] Status Commit();

  Index* const index_;
  const bool remove_marks_;
  const size_t commit_every_;
  IndexBatch batch_;
  // Namespace id and key -> the sequence taken for it in `batch_`.
  std::unordered_map<std::string, uint64_t> pending_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_REINDEXER_H_
