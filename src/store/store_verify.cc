// Verify (cross-check segments and index both ways) and Repair (rebuild the
// index from the segments).
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "log/reindexer.h"
#include "log/scanner.h"
#include "store/store_impl.h"

namespace kvtier {

namespace {
// Records start 8-byte aligned (dense) and segments hold at most 64 GiB.
uint64_t LocationKey(uint32_t seg, uint64_t offset) { return (uint64_t{seg} << 40) | (offset >> 3); }

uint64_t NameHash(NamespaceId ns, std::string_view key) {
  std::string buf(sizeof ns, '\0');
  std::memcpy(buf.data(), &ns, sizeof ns);
  buf.append(key);
  return format::Checksum(buf.data(), buf.size());
}

void Problem(VerifyReport* r, std::string msg) {
  if (r->problems.size() < 20) r->problems.push_back(std::move(msg));
}
}  // namespace

Result<VerifyReport> StoreImpl::Verify(const VerifyOptions& options) {
  VerifyReport rep;
  std::vector<SegmentInfo> segs = table_->Snapshot();
  std::erase_if(segs, [](const SegmentInfo& s) { return s.state == SegmentState::kFree; });
  std::sort(segs.begin(), segs.end(), [](const SegmentInfo& a, const SegmentInfo& b) { return a.epoch < b.epoch; });
  uint64_t total = 0, done = 0;
  for (const SegmentInfo& s : segs) total += s.used_bytes;
  // location -> (name hash, sequence) of every record that verifies
  std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>> records;
  for (const SegmentInfo& s : segs) {
    SegmentScanner scanner(table_->file(s.id), s.id, s.generation, description_.segment_size_bytes,
                           StoredPayloadLimit());
    ScanResult r;
    uint64_t seg_done = 0;
    Status st = scanner.Scan(format::kSegmentDataStart, options.deep, /*resync=*/true,
        [&](const ScannedRecord& rec) {
          ++rep.records_scanned;
          ++rep.records_ok;
          records[LocationKey(s.id, rec.offset)] = {NameHash(rec.header.ns_id, rec.key), rec.header.sequence};
          auto e = index_->Get(rec.header.ns_id, rec.key);
          const bool known_ns = namespaces_.Contains(rec.header.ns_id);
          if (known_ns && e.ok() && (!e->has_value() || (*e)->sequence < rec.header.sequence)) {
            ++rep.records_without_entry;
            Problem(&rep, "segment " + std::to_string(s.id) + " offset " + std::to_string(rec.offset) +
                              ": valid record has no index entry");
          }
          return true;
        },
        &r, [&](uint64_t n) {
          seg_done += n;
          if (options.progress) options.progress(std::min(done + seg_done, total), total);
        });
    if (!st.ok()) return st.WithContext("scanning segment " + std::to_string(s.id));
    rep.bytes_scanned += r.bytes_read;
    rep.records_corrupt += r.corrupt_regions;
    rep.stale_tail_bytes += r.stale_tail_bytes;
    if (r.corrupt_regions > 0)
      Problem(&rep, "segment " + std::to_string(s.id) + ": " + std::to_string(r.corrupt_regions) +
                        " region(s) fail verification" +
                        (r.corrupt.empty() ? std::string()
                                           : ", the first at offset " + std::to_string(r.corrupt[0].first) + " (" +
                                                 std::to_string(r.corrupt[0].second) + " bytes; records end at " +
                                                 std::to_string(r.end) + ")"));
    done += s.used_bytes;
    if (options.progress) options.progress(std::min(done, total), total);
  }
  for (const std::string& name : table_->Ignored())
    Problem(&rep, "segments/" + name + " is not a regular file: ignored (not counted as a problem)");
  Status st = index_->ForEach(0, "", [&](NamespaceId ns, std::string_view key, const format::IndexValue& v) {
    ++rep.index_entries;
    if (!table_->IsLive(v.segment, v.generation)) {
      ++rep.stale_entries;
      Problem(&rep, "entry in namespace " + NamespaceIdToHex(ns) + " names segment " +
                        std::to_string(v.segment) + " generation " + std::to_string(v.generation) +
                        ", which was reused");
      return true;
    }
    auto it = records.find(LocationKey(v.segment, v.offset));
    if (it == records.end() || it->second.first != NameHash(ns, key) || it->second.second != v.sequence) {
      ++rep.entries_without_record;
      Problem(&rep, "entry in namespace " + NamespaceIdToHex(ns) + " points at segment " +
                        std::to_string(v.segment) + " offset " + std::to_string(v.offset) +
                        " where no matching valid record is");
    }
    return true;
  });
  if (!st.ok()) return st;
  return rep;
}

Result<RepairReport> Store::Repair(const std::string& dir, const Options& options,
                                   std::function<void(uint64_t, uint64_t)> progress) {
  Options o = options;
  o.read_only = false;
  o.create_if_missing = false;
  auto s = std::make_unique<StoreImpl>(dir, o);
  s->set_repair_mode();
  KVTIER_RETURN_IF_ERROR(s->OpenImpl());
  auto r = s->RebuildIndex(progress);
  Status st = s->Close();
  if (!r.ok()) return r.status();
  if (!st.ok()) return st;
  r->damaged_index_moved_to = s->damaged_index_moved_to();
  return r;
}

Result<RepairReport> StoreImpl::RebuildIndex(const std::function<void(uint64_t, uint64_t)>& progress) {
  RepairReport rep;
  KVTIER_RETURN_IF_ERROR(index_->ForEach(0, "", [&](NamespaceId, std::string_view, const format::IndexValue&) {
    ++rep.entries_before;
    return true;
  }));
  KVTIER_RETURN_IF_ERROR(index_->DropAllEntries());
  // Remove marks survive the drop (a removed block stays removed) unless
  // they cannot be read: then the index is damaged and they are ignored.
  auto marks = index_->HasRemoveMarks();
  remove_marks_ = marks.ok() && *marks;
  std::vector<SegmentInfo> segs = table_->Snapshot();
  std::erase_if(segs, [](const SegmentInfo& s) { return s.state == SegmentState::kFree; });
  std::sort(segs.begin(), segs.end(), [](const SegmentInfo& a, const SegmentInfo& b) { return a.epoch < b.epoch; });
  uint64_t total = segs.size() * description_.segment_size_bytes, done = 0;
  uint64_t max_seq = 0;
  for (const SegmentInfo& s : segs) {
    SegmentScanner scanner(table_->file(s.id), s.id, s.generation, description_.segment_size_bytes,
                           StoredPayloadLimit());
    Reindexer reindex(index_.get(), remove_marks_);
    Status ist;
    ScanResult r;
    Status st = scanner.Scan(format::kSegmentDataStart, /*verify_payload=*/true, /*resync=*/true,
        [&](const ScannedRecord& rec) {
          ++rep.records_scanned;
          max_seq = std::max(max_seq, rec.header.sequence);
          if (!namespaces_.Contains(rec.header.ns_id)) {
            ++rep.records_dropped;
            return true;
          }
          auto taken = reindex.Offer(rec, s.id, s.generation);
          if (!taken.ok()) {
            ist = taken.status();
            return false;
          }
          if (*taken) ++rep.records_indexed;
          return true;
        },
        &r, [&](uint64_t n) {
          done += n;
          if (progress) progress(std::min(done, total), total);
        });
    if (!st.ok()) return st.WithContext("scanning segment " + std::to_string(s.id));
    if (!ist.ok()) return ist;
    rep.records_dropped += r.corrupt_regions;
    KVTIER_RETURN_IF_ERROR(reindex.Finish());
    // Zero what does not verify, so later scans and Verify see unused space
    // rather than the same damage again.
    if (!r.corrupt.empty()) {
      File* f = table_->file(s.id);
      for (const auto& [off, len] : r.corrupt) {
        Status ps = ZeroRange(f, off, len);
        if (!ps.ok()) return ps.WithContext("clearing a corrupt region of segment " + std::to_string(s.id));
        ++rep.regions_cleared;
      }
      KVTIER_RETURN_IF_ERROR(f->Sync());
    }
    table_->Seal(s.id, format::AlignUp(r.end));  // a dense record's page ends in zeros
  }
  // Records indexed twice (a key put again later) were replaced, not added.
  KVTIER_RETURN_IF_ERROR(index_->ForEach(0, "", [&](NamespaceId, std::string_view, const format::IndexValue&) {
    ++rep.entries_after;
    return true;
  }));
  AppendPosition& pos = writer_->position();
  pos.epoch = table_->MaxEpoch();
  pos.next_seq = std::max(pos.next_seq, max_seq + 1);
  pos.seg = UINT32_MAX;
  KVTIER_RETURN_IF_ERROR(writer_->CheckpointNow(false));
  if (remove_marks_) KVTIER_RETURN_IF_ERROR(index_->DropRemoveMarks());
  remove_marks_ = false;
  return rep;
}

}  // namespace kvtier
