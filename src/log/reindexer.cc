#include "log/reindexer.h"

namespace kvtier {

Result<bool> Reindexer::Offer(const ScannedRecord& rec, uint32_t segment, uint32_t generation) {
  const format::RecordHeader& h = rec.header;
  if (remove_marks_) {
    auto mark = index_->RemovedBelow(h.ns_id, rec.key);
    if (!mark.ok()) return mark.status();
    if (mark->has_value() && h.sequence < **mark) return false;
  }
  std::string name(reinterpret_cast<const char*>(&h.ns_id), sizeof(h.ns_id));
  name.append(rec.key);
  auto p = pending_.find(name);
  if (p != pending_.end()) {
    if (p->second >= h.sequence) return false;
  } else {
    auto e = index_->Get(h.ns_id, rec.key);
    if (!e.ok()) return e.status();
    if (e->has_value() && (*e)->sequence >= h.sequence) return false;
  }
  batch_.Put(h.ns_id, rec.key, IndexValueOf(rec, segment, generation));
  pending_[std::move(name)] = h.sequence;
  if (batch_.count() >= commit_every_) KVTIER_RETURN_IF_ERROR(Commit());
  return true;
}

Status Reindexer::Finish() { return batch_.empty() ? Status::OK() : Commit(); }

Status Reindexer::Commit() {
  Status st = index_->Commit(batch_, /*sync=*/false);
  batch_ = IndexBatch();
  pending_.clear();  // committed: the index's Get sees them now
  return st;
}

}  // namespace kvtier
