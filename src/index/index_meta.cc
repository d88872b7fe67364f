// The index's namespaces, checkpoint and maintenance (index.h); the entries
// and lookups are in index.cc.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "format/coding.h"
#include "index/index_rep.h"

namespace kvtier {

using namespace index_internal;  // NOLINT: the room's own helpers

// ---- namespaces ----

Status Index::PutNamespace(NamespaceId id, const NamespaceSpec& spec, bool sync) {
  KVTIER_RETURN_IF_ERROR(rep_->CheckWritable("PutNamespace"));
  Status st = rep_->Written(rep_->db->Put(Rep::NoWal(), rep_->entries, NamespaceKey(id), spec.Encode()),
                            "put namespace " + NamespaceIdToHex(id));
  if (st.ok() && sync) st = FlushMemtables();
  return st;
}

Result<std::optional<NamespaceSpec>> Index::GetNamespace(NamespaceId id) {
  rocksdb::PinnableSlice value;
  rocksdb::Status rs = rep_->db->Get(rocksdb::ReadOptions(), rep_->entries, NamespaceKey(id), &value);
  if (rs.IsNotFound()) return std::optional<NamespaceSpec>();
  if (!rs.ok()) return FromRocks(rs, rep_->Context("get namespace " + NamespaceIdToHex(id)));
  auto spec = NamespaceSpec::Decode(View(value));
  if (!spec.ok()) {
    return Status::Corruption(rep_->Context("namespace " + NamespaceIdToHex(id) + ": " +
                                            spec.status().ToString()));
  }
  return std::optional<NamespaceSpec>(std::move(spec).value());
}

Result<std::vector<std::pair<NamespaceId, NamespaceSpec>>> Index::ListNamespaces() {
  const std::string lower(1, kNamespaceTag);
  const std::string upper(1, kNamespaceTag + 1);
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(rep_->db->NewIterator(ro, rep_->entries));
  std::vector<std::pair<NamespaceId, NamespaceSpec>> out;
  for (it->Seek(lower); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != 1 + 8) {
      return Status::Corruption(rep_->Context("bad namespace key " + Hex(View(k))));
    }
    const NamespaceId id = LoadBE64(k.data() + 1);
    auto spec = NamespaceSpec::Decode(View(it->value()));
    if (!spec.ok()) {
      return Status::Corruption(rep_->Context("namespace " + NamespaceIdToHex(id) + ": " +
                                              spec.status().ToString()));
    }
    out.emplace_back(id, std::move(spec).value());
  }
  KVTIER_RETURN_IF_ERROR(FromRocks(it->status(), rep_->Context("list namespaces")));
  return out;
}

Status Index::DeleteNamespace(NamespaceId id, bool sync) {
  KVTIER_RETURN_IF_ERROR(rep_->CheckWritable("DeleteNamespace"));
  Status st = rep_->Written(rep_->db->Delete(Rep::NoWal(), rep_->entries, NamespaceKey(id)),
                            "delete namespace " + NamespaceIdToHex(id));
  if (st.ok() && sync) st = FlushMemtables();
  return st;
}

// ---- checkpoint ----

Status Index::WriteCheckpoint(const Checkpoint& cp, CheckpointFlush flush) {
  KVTIER_RETURN_IF_ERROR(rep_->CheckWritable("WriteCheckpoint"));
  // Written after every entry it covers, into the same memtables: the flush
  // that makes it durable makes them durable too (atomic_flush), so no
  // checkpoint on disk ever claims entries a crash could still take.
  uint8_t buf[kCheckpointBytes] = {};
  format::PutFixed64(buf + 0, cp.epoch);
  format::PutFixed64(buf + 8, cp.offset);
  format::PutFixed64(buf + 16, cp.next_sequence);
  buf[24] = kCheckpointVersion;
  buf[25] = cp.clean ? 1 : 0;
  format::PutFixed64(buf + 32, format::Checksum(buf, 32));
  Status st = rep_->Written(rep_->db->Put(Rep::NoWal(), rep_->entries, CheckpointKey(),
                                          rocksdb::Slice(reinterpret_cast<const char*>(buf), sizeof(buf))),
                            "write checkpoint");
  if (!st.ok()) return st;
  switch (flush) {
    case CheckpointFlush::kNone: return st;
    case CheckpointFlush::kStart: return FlushMemtables(/*wait=*/false);
    case CheckpointFlush::kWait: return FlushMemtables(/*wait=*/true);
  }
  return st;
}

// 8 bytes per pair (segment, generation; fixed32 each), then an XXH3-64 of them.
Status Index::WriteHotSegments(const std::vector<std::pair<uint32_t, uint32_t>>& segments) {
  KVTIER_RETURN_IF_ERROR(rep_->CheckWritable("WriteHotSegments"));
  std::string v(segments.size() * 8 + 8, '\0');
  auto* p = reinterpret_cast<uint8_t*>(v.data());
  for (size_t i = 0; i < segments.size(); ++i) {
    format::PutFixed32(p + 8 * i, segments[i].first);
    format::PutFixed32(p + 8 * i + 4, segments[i].second);
  }
  format::PutFixed64(p + 8 * segments.size(), format::Checksum(p, 8 * segments.size()));
  return rep_->Written(rep_->db->Put(Rep::NoWal(), rep_->entries, HotSegmentsKey(), v),
                      "write hot segments");
}

std::vector<std::pair<uint32_t, uint32_t>> Index::ReadHotSegments() {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  rocksdb::PinnableSlice value;
  if (!rep_->db->Get(rocksdb::ReadOptions(), rep_->entries, HotSegmentsKey(), &value).ok()) return out;
  const auto* p = reinterpret_cast<const uint8_t*>(value.data());
  if (value.size() < 8 || value.size() % 8 != 0) return out;
  const size_t n = value.size() / 8 - 1;
  if (format::GetFixed64(p + 8 * n) != format::Checksum(p, 8 * n)) return out;
  for (size_t i = 0; i < n; ++i) out.emplace_back(format::GetFixed32(p + 8 * i), format::GetFixed32(p + 8 * i + 4));
  return out;
}

Result<std::optional<Checkpoint>> Index::ReadCheckpoint() {
  rocksdb::PinnableSlice value;
  rocksdb::Status rs = rep_->db->Get(rocksdb::ReadOptions(), rep_->entries, CheckpointKey(), &value);
  if (rs.IsNotFound()) return std::optional<Checkpoint>();
  if (!rs.ok()) return FromRocks(rs, rep_->Context("read checkpoint"));
  if (value.size() != kCheckpointBytes) {
    return Status::Corruption(rep_->Context("checkpoint record has " + std::to_string(value.size()) +
                                            " bytes, expected " + std::to_string(kCheckpointBytes)));
  }
  const auto* p = reinterpret_cast<const uint8_t*>(value.data());
  if (format::GetFixed64(p + 32) != format::Checksum(p, 32)) {
    return Status::Corruption(rep_->Context("checkpoint record checksum mismatch"));
  }
  if (p[24] != kCheckpointVersion) {
    return Status::NotSupported(rep_->Context("checkpoint record version " + std::to_string(p[24])));
  }
  bool reserved_zero = true;
  for (int i = 26; i < 32; ++i) reserved_zero = reserved_zero && p[i] == 0;
  if (p[25] > 1 || !reserved_zero) {
    return Status::Corruption(rep_->Context("checkpoint record has bad flag bytes"));
  }
  Checkpoint cp;
  cp.epoch = format::GetFixed64(p + 0);
  cp.offset = format::GetFixed64(p + 8);
  cp.next_sequence = format::GetFixed64(p + 16);
  cp.clean = p[25] == 1;
  return std::optional<Checkpoint>(cp);
}

// ---- remove marks ----

Result<std::optional<uint64_t>> Index::RemovedBelow(NamespaceId ns, std::string_view key) {
  std::optional<uint64_t> below;
  // The key's own mark, then its namespace's (the empty key: no block has one).
  for (std::string_view name : {key, std::string_view()}) {
    std::string k;
    AppendRemovedKey(&k, ns, name);
    rocksdb::PinnableSlice value;
    rocksdb::Status rs = rep_->db->Get(rocksdb::ReadOptions(), rep_->entries, k, &value);
    if (rs.IsNotFound()) continue;
    if (!rs.ok()) return FromRocks(rs, rep_->Context("get remove mark"));
    if (value.size() != 8)
      return Status::Corruption(rep_->Context("remove mark " + Hex(k.substr(1, 8)) + "/" + Hex(name) + " has " +
                                              std::to_string(value.size()) + " bytes, not 8"));
    const uint64_t v = format::GetFixed64(reinterpret_cast<const uint8_t*>(value.data()));
    below = std::max(below.value_or(0), v);
  }
  return below;
}

Result<bool> Index::HasRemoveMarks() {
  const std::string lower(1, kRemovedTag), upper(1, kRemovedTag + 1);
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(rep_->db->NewIterator(ro, rep_->entries));
  it->Seek(lower);
  const bool any = it->Valid();
  KVTIER_RETURN_IF_ERROR(FromRocks(it->status(), rep_->Context("look for remove marks")));
  return any;
}

Status Index::DropRemoveMarks() {
  KVTIER_RETURN_IF_ERROR(rep_->CheckWritable("DropRemoveMarks"));
  const std::string begin(1, kRemovedTag), end(1, kRemovedTag + 1);
  return rep_->Written(rep_->db->DeleteRange(Rep::NoWal(), rep_->entries, begin, end), "drop remove marks");
}

// ---- maintenance ----

Status Index::DropAllEntries() {
  KVTIER_RETURN_IF_ERROR(rep_->CheckWritable("DropAllEntries"));
  const std::string k_begin(1, kEntryTag), k_end(1, kEntryTag + 1);
  // by_segment keys are 16 bytes; 17 0xff bytes sort after all of them.
  const std::string s_begin, s_end(kSegmentRowKeyBytes + 1, '\xff');
  rocksdb::WriteBatch wb;
  KVTIER_RETURN_IF_ERROR(FromRocks(wb.DeleteRange(rep_->entries, k_begin, k_end),
                                   rep_->Context("drop entries")));
  KVTIER_RETURN_IF_ERROR(FromRocks(wb.DeleteRange(rep_->by_segment, s_begin, s_end),
                                   rep_->Context("drop by_segment rows")));
  // The background loader may still be filling the map from an older view:
  // stop it; the now empty map is complete.
  rep_->stop_loader.store(true);
  if (rep_->loader.joinable()) rep_->loader.join();
  KVTIER_RETURN_IF_ERROR(rep_->Written(rep_->db->Write(Rep::NoWal(), &wb), "drop all entries"));
  KVTIER_RETURN_IF_ERROR(FlushMemtables());
  rep_->presence.Clear();
  rep_->presence.FinishLoad();

  // Range tombstones hide the old entries at once; compacting the ranges
  // reclaims their space and spares later reads from skipping them.
  rocksdb::CompactRangeOptions cro;
  cro.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForceOptimized;
  const rocksdb::Slice kb(k_begin), ke(k_end);
  KVTIER_RETURN_IF_ERROR(rep_->Written(rep_->db->CompactRange(cro, rep_->entries, &kb, &ke), "compact entries"));
  return rep_->Written(rep_->db->CompactRange(cro, rep_->by_segment, nullptr, nullptr), "compact by_segment");
}

// RocksDB's own estimate for the default column family: it counts namespace
// and metadata records too, and is off (either way) after deletes and range
// deletes until compaction. Good for sizing and progress, not for accounting.
uint64_t Index::ApproximateEntries() {
  uint64_t n = 0;
  if (!rep_->db->GetIntProperty(rep_->entries, "rocksdb.estimate-num-keys", &n)) return 0;
  return n;
}

Index::Footprint Index::GetFootprint() {
  Footprint f;
  for (rocksdb::ColumnFamilyHandle* cf : {rep_->entries, rep_->by_segment}) {
    uint64_t v = 0;
    if (rep_->db->GetIntProperty(cf, "rocksdb.total-sst-files-size", &v)) f.sst_bytes += v;
    if (rep_->db->GetIntProperty(cf, "rocksdb.cur-size-all-mem-tables", &v)) f.memtable_bytes += v;
    // Per level and summed: flushes land in L0, compactions below it.
    std::map<std::string, std::string> stats;
    if (rep_->db->GetMapProperty(cf, "rocksdb.cfstats", &stats)) {
      auto it = stats.find("compaction.Sum.WriteGB");
      if (it != stats.end()) f.written_bytes += static_cast<uint64_t>(std::strtod(it->second.c_str(), nullptr) * (1ull << 30));
    }
  }
  f.lookup_map_ready = rep_->presence.Ready();
  f.lookup_map_entries = rep_->presence.size();
  f.writes_refused = rep_->reopen_needed.load();
  return f;
}

Status Index::FlushMemtables(bool wait) {
  KVTIER_RETURN_IF_ERROR(rep_->CheckWritable("FlushMemtables"));
  rocksdb::FlushOptions fo;
  fo.wait = wait;
  fo.allow_write_stall = true;
  return rep_->Written(rep_->db->Flush(fo, {rep_->entries, rep_->by_segment}), "flush memtables");
}

}  // namespace kvtier
