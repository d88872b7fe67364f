#include "wire/messages.h"

#include "format/record.h"

namespace kvtier::wire {
namespace {

// A new field in one of these structs must be added to its visitor below.
static_assert(sizeof(Stats) == 736, "Stats changed: list the new field in VisitStats");
static_assert(sizeof(BlockInfo) == 128, "BlockInfo changed: list the new field in VisitBlockInfo");
static_assert(sizeof(SegmentInfo) == 32, "SegmentInfo changed: list the new field in VisitSegmentInfo");
static_assert(sizeof(VerifyReport) == 96, "VerifyReport changed: list the new field in VisitVerifyReport");
static_assert(sizeof(RecordHeaderInfo) == 72, "RecordHeaderInfo changed: list it in VisitRecordHeaderInfo");
static_assert(sizeof(StoreDescription) == 56, "StoreDescription changed: list it in VisitStoreDescription");

template <typename V, typename T>
void VisitStats(T& s, V& v) {
  v(s.puts); v(s.put_bytes); v(s.puts_not_admitted); v(s.puts_failed); v(s.gets); v(s.hits_ram);
  v(s.hits_disk); v(s.misses); v(s.bytes_read_ram); v(s.bytes_read_disk); v(s.ram_capacity_bytes);
  v(s.ram_used_bytes); v(s.ram_blocks); v(s.ram_evictions); v(s.ram_evicted_bytes); v(s.ram_adopted_blocks);
  v(s.ram_adopt_dropped); v(s.ram_checksum_failures); v(s.ram_shared_memory); v(s.get_deadline_misses);
  v(s.checksum_failures); v(s.stale_entries_dropped); v(s.lookups); v(s.contains); v(s.removes); v(s.touches);
  v(s.device_bytes_written); v(s.device_bytes_read); v(s.zero_copy_put_bytes); v(s.direct_read_bytes);
  v(s.small_page_copies); v(s.registered_writes); v(s.syncs); v(s.group_commits); v(s.disk_reads_timed);
  v(s.disk_read_queue_ns); v(s.disk_read_index_ns); v(s.disk_read_device_ns); v(s.disk_read_finish_ns);
  v(s.puts_timed); v(s.put_encode_ns); v(s.put_queue_ns); v(s.put_place_ns); v(s.put_write_ns); v(s.put_sync_ns);
  v(s.put_commit_ns);
  v(s.write_amplification);
  v(s.evictions); v(s.evicted_blocks); v(s.evicted_bytes); v(s.capacity_configured_bytes);
  v(s.disk_full_events); v(s.reinsertions); v(s.reinserted_bytes); v(s.reinserted_from_ram); v(s.capacity_bytes); v(s.used_bytes);
  v(s.blocks_estimate); v(s.segments_total); v(s.segments_sealed); v(s.segments_free);
  v(s.segments_hot); v(s.segment_entries_ignored); v(s.recovered_from_crash); v(s.recovery_scanned_bytes);
  v(s.recovery_reindexed); v(s.recovery_torn_bytes); v(s.open_seconds); v(s.io_backend); v(s.remote_connected);
  v(s.hits_remote); v(s.bytes_read_remote); v(s.remote_misses); v(s.remote_deadline_misses);
  v(s.remote_checksum_failures); v(s.remote_uploads); v(s.remote_upload_bytes); v(s.remote_upload_retries);
  v(s.remote_uploads_skipped); v(s.remote_segments_imported); v(s.remote_objects_deleted);
  v(s.remote_uploads_deleted); v(s.remote_admitted_to_ram); v(s.remote_orphans_removed);
  v(s.index_sst_bytes); v(s.index_memtable_bytes); v(s.index_written_bytes); v(s.lookup_map_ready);
  v(s.lookup_map_entries); v(s.index_writes_refused); v(s.reclaims_not_oldest); v(s.ram_payload_bytes);
  v(s.ram_prefaulted_bytes);
}

template <typename V, typename T>
void VisitBlockInfo(T& b, V& v) {
  v(b.ns); v(b.key); v(b.tier); v(b.segment); v(b.generation); v(b.offset); v(b.payload_bytes);
  v(b.record_bytes); v(b.payload_offset); v(b.dense); v(b.payload_checksum); v(b.sequence);
  v(b.written_unix_ms); v(b.hits);
}

template <typename V, typename T>
void VisitSegmentInfo(T& g, V& v) {
  v(g.id); v(g.generation); v(g.epoch); v(g.state); v(g.used_bytes);
}

template <typename V, typename T>
void VisitVerifyReport(T& r, V& v) {
  v(r.records_scanned); v(r.records_ok); v(r.records_corrupt); v(r.index_entries); v(r.entries_without_record);
  v(r.records_without_entry); v(r.stale_entries); v(r.bytes_scanned); v(r.stale_tail_bytes);
}

template <typename V, typename T>
void VisitRecordHeaderInfo(T& h, V& v) {
  v(h.magic); v(h.format_version); v(h.flags); v(h.dense); v(h.key_len); v(h.segment); v(h.generation);
  v(h.ns); v(h.sequence); v(h.payload_len); v(h.payload_checksum); v(h.written_unix_ms);
}

template <typename V, typename T>
void VisitStoreDescription(T& d, V& v) {
  v(d.format_version); v(d.store_id); v(d.segment_size_bytes); v(d.created_unix_ms);
}

struct Writer {
  WireWriter& w;
  void operator()(uint64_t v) { w.U64(v); }
  void operator()(uint32_t v) { w.U32(v); }
  void operator()(bool v) { w.Bool(v); }
  void operator()(double v) { w.F64(v); }
  void operator()(const std::string& v) { w.Bytes(v); }
  void operator()(BlockTier v) { w.U8(static_cast<uint8_t>(v)); }
  void operator()(SegmentState v) { w.U8(static_cast<uint8_t>(v)); }
};

struct Reader {
  WireReader& r;
  void operator()(uint64_t& v) { v = r.U64(); }
  void operator()(uint32_t& v) { v = r.U32(); }
  void operator()(bool& v) { v = r.Bool(); }
  void operator()(double& v) { v = r.F64(); }
  void operator()(std::string& v) { v = r.String(kMaxTextBytes); }
  void operator()(BlockTier& v) {
    const uint8_t t = r.U8();
    if (t > static_cast<uint8_t>(BlockTier::kShared)) return Fail();
    v = static_cast<BlockTier>(t);
  }
  void operator()(SegmentState& v) {
    const uint8_t t = r.U8();
    if (t > static_cast<uint8_t>(SegmentState::kSealed)) return Fail();
    v = static_cast<SegmentState>(t);
  }
  void Fail() { r.Fail(); }
};

void EncodeStrings(WireWriter& w, const std::vector<std::string>& v) {
  w.U32(static_cast<uint32_t>(v.size()));
  for (const std::string& s : v) w.Bytes(s);
}
void DecodeStrings(WireReader& r, std::vector<std::string>* v) {
  const uint32_t n = r.Count(1024, 4);
  v->clear();
  for (uint32_t i = 0; i < n && r.ok(); ++i) v->push_back(r.String(kMaxTextBytes));
}

}  // namespace

void Encode(WireWriter& w, const Stats& s) {
  Writer v{w};
  VisitStats(s, v);
}
void Encode(WireWriter& w, const BlockInfo& b) {
  Writer v{w};
  VisitBlockInfo(b, v);
}
void Encode(WireWriter& w, const SegmentInfo& g) {
  Writer v{w};
  VisitSegmentInfo(g, v);
}
void Encode(WireWriter& w, const VerifyReport& r) {
  Writer v{w};
  VisitVerifyReport(r, v);
  EncodeStrings(w, r.problems);
}
void Encode(WireWriter& w, const RecordInspection& r) {
  Encode(w, r.entry);
  w.Bytes(r.segment_file);
  w.Bool(r.header.has_value());
  if (r.header) {
    Writer v{w};
    VisitRecordHeaderInfo(*r.header, v);
  }
  EncodeStrings(w, r.problems);
}
void Encode(WireWriter& w, const StoreDescription& d) {
  Writer v{w};
  VisitStoreDescription(d, v);
}
void Encode(WireWriter& w, const NamespaceInfo& n) {
  w.U64(n.id);
  w.Bytes(n.spec.Encode());
  w.U64(n.blocks);
  w.U64(n.payload_bytes);
}

void Decode(WireReader& r, Stats* s) {
  Reader v{r};
  VisitStats(*s, v);
}
void Decode(WireReader& r, BlockInfo* b) {
  Reader v{r};
  VisitBlockInfo(*b, v);
}
void Decode(WireReader& r, SegmentInfo* g) {
  Reader v{r};
  VisitSegmentInfo(*g, v);
}
void Decode(WireReader& r, VerifyReport* rep) {
  Reader v{r};
  VisitVerifyReport(*rep, v);
  DecodeStrings(r, &rep->problems);
}
void Decode(WireReader& r, RecordInspection* i) {
  Decode(r, &i->entry);
  i->segment_file = r.String(kMaxTextBytes);
  if (r.Bool()) {
    RecordHeaderInfo h;
    Reader v{r};
    VisitRecordHeaderInfo(h, v);
    i->header = h;
  }
  DecodeStrings(r, &i->problems);
}
void Decode(WireReader& r, StoreDescription* d) {
  Reader v{r};
  VisitStoreDescription(*d, v);
}
void Decode(WireReader& r, NamespaceInfo* n) {
  n->id = r.U64();
  auto spec = NamespaceSpec::Decode(r.Bytes(kMaxTextBytes));
  if (spec.ok()) {
    n->spec = std::move(spec).value();
  } else {
    r.Fail();
  }
  n->blocks = r.U64();
  n->payload_bytes = r.U64();
}

void EncodeGetBatchReply(WireWriter& w, const std::vector<Result<size_t>>& got) {
  w.U32(static_cast<uint32_t>(got.size()));
  for (const Result<size_t>& g : got) {
    w.Status(g.ok() ? Status::OK() : g.status());
    w.U64(g.ok() ? *g : 0);
  }
}
void DecodeGetBatchReply(WireReader& r, size_t n, std::vector<Result<size_t>>* got) {
  const uint32_t count = r.Count(kMaxBatchGets, 1 + 4 + 8);
  if (count != n) r.Fail();
  got->clear();
  for (uint32_t i = 0; i < count && r.ok(); ++i) {
    Status st = r.Status();
    const uint64_t size = r.U64();
    got->push_back(st.ok() ? Result<size_t>(static_cast<size_t>(size)) : Result<size_t>(std::move(st)));
  }
}

void EncodeKeyFlagsReply(WireWriter& w, const std::vector<bool>& present) {
  w.U32(static_cast<uint32_t>(present.size()));
  for (bool p : present) w.Bool(p);
}
void DecodeKeyFlagsReply(WireReader& r, size_t n, std::vector<bool>* present) {
  const uint32_t count = r.Count(kMaxBatchKeys, 1);
  if (count != n) r.Fail();
  present->clear();
  for (uint32_t i = 0; i < count && r.ok(); ++i) present->push_back(r.Bool());
}

void Encode(WireWriter& w, const TierMap& m) {
  w.U64(m.file_bytes);
  w.U64(m.data_offset);
  w.U64(m.data_bytes);
  w.U64(m.region_bytes);
}
void Decode(WireReader& r, TierMap* m) {
  m->file_bytes = r.U64();
  m->data_offset = r.U64();
  m->data_bytes = r.U64();
  m->region_bytes = r.U64();
  if (m->data_offset > m->file_bytes || m->data_bytes > m->file_bytes - m->data_offset) r.Fail();
  if (m->region_bytes == 0 || m->region_bytes % 4096 != 0) r.Fail();
}

void Encode(WireWriter& w, const TierLease& l) {
  w.U64(l.lease);
  w.U32(static_cast<uint32_t>(l.blocks.size()));
  for (const TierPinned& b : l.blocks) {
    w.Bool(b.pinned);
    if (!b.pinned) continue;
    w.U64(b.size);
    w.U64(b.checksum);
    w.U32(static_cast<uint32_t>(b.pieces.size()));
    for (const auto& [off, n] : b.pieces) {
      w.U64(off);
      w.U64(n);
    }
  }
}
void Decode(WireReader& r, TierLease* l) {
  l->lease = r.U64();
  const uint32_t n = r.Count(kMaxBatchKeys, 1);
  l->blocks.clear();
  l->blocks.reserve(n);
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    TierPinned b;
    b.pinned = r.Bool();
    if (b.pinned) {
      b.size = r.U64();
      b.checksum = r.U64();
      const uint32_t np = r.Count(kMaxTierPieces, 16);
      uint64_t total = 0;
      for (uint32_t j = 0; j < np && r.ok(); ++j) {
        const uint64_t off = r.U64(), len = r.U64();
        if (len == 0 || off + len < off || len > b.size - total) r.Fail();
        total += len;
        b.pieces.emplace_back(off, len);
      }
      if (total != b.size || np == 0) r.Fail();
    }
    l->blocks.push_back(std::move(b));
  }
}

}  // namespace kvtier::wire
