#include "log/reclaimer.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "format/record.h"
#include "util/aligned_buffer.h"
#include "util/copy_checksum.h"

namespace kvtier {

struct Reclaimer::Row {
  uint64_t offset;
  NamespaceId ns;
  std::string key;
};

struct Reclaimer::Reinsert {
  uint8_t* rec;    // in the arena: the record at its start, zero padded to a page
  uint64_t bytes;  // on-disk bytes when rewritten: whole pages
  NamespaceId ns;
  std::string key;
  format::RecordHeader h;
};

Status Reclaimer::Reclaim(uint32_t seg, bool reuse, AppendPosition* pos, AppendPosition* hot) {
  struct TrimAtEnd {
    Reclaimer* r;
    ~TrimAtEnd() { r->TrimArena(); }
  } trim{this};
  const SegmentInfo info = d_.table->Info(seg);
  const uint32_t old_gen = info.generation;
  d_.table->BeginReclaim(seg);
  std::vector<Row> rows;
  Status st = d_.index->ForEachInSegment(seg, old_gen, [&](uint64_t off, NamespaceId ns, std::string_view key) {
    rows.push_back(Row{off, ns, std::string(key)});
    return true;
  });
  if (!st.ok()) {
    d_.table->Seal(seg, info.used_bytes);  // un-mark: stays readable
    return st;
  }
  // Read the hot records back before the space is reused.
  std::vector<Reinsert> reinserts;
  if (reuse && d_.reinsert) reinserts = GatherReinserts(seg, old_gen, rows);
  else d_.hits->Take(seg);

  File* file = d_.table->file(seg);
  uint32_t new_gen = 0;
  if (reuse) {
    auto g = d_.table->Activate(seg, ++pos->epoch);  // durable new generation first
    if (!g.ok()) return g.status();
    new_gen = *g;
    d_.committer->Unpoison(seg);  // a new life: what failed before is gone
  } else {
    AlignedBuffer zero(format::kPage);
    std::memset(zero.data(), 0, zero.size());
    st = file->WriteAt(0, zero.data(), zero.size());
    if (st.ok()) st = file->Sync();
    if (!st.ok()) {
      d_.table->Seal(seg, info.used_bytes);
      return st.WithContext("invalidating segment header");
    }
    d_.table->MarkFree(seg);
  }
  DropEntries(seg, old_gen, new_gen, reuse, rows, reinserts);
  if (!reuse) {
    // Left free: its space goes back to the device. A segment reused now is
    // not punched: its pages are written again at once, and punching them
    // first cost the writer 3-6 ms a reclaim and made every write after it
    // allocate again (its stale bytes are harmless: the generation rule).
    if (d_.punch_holes) {
      file->PunchHole(format::kSegmentDataStart, d_.table->segment_size() - format::kSegmentDataStart)
          .IgnoreError();  // NotSupported on some file systems
    }
    return Status::OK();
  }
  if (hot == nullptr) {
    pos->seg = seg;
    pos->gen = new_gen;
    pos->off = format::kSegmentDataStart;
    WriteReinserts(reinserts, 0, pos);
    return Status::OK();
  }
  size_t next = hot->seg == UINT32_MAX ? 0 : WriteReinserts(reinserts, 0, hot);
  if (next == reinserts.size()) {
    pos->seg = seg;
    pos->gen = new_gen;
    pos->off = format::kSegmentDataStart;
    return Status::OK();
  }
  // The hot region's open segment is full: this one takes over from it.
  if (hot->seg != UINT32_MAX) d_.table->Seal(hot->seg, format::AlignUp(hot->off));
  hot->seg = seg;
  hot->gen = new_gen;
  hot->off = format::kSegmentDataStart;
  d_.table->MarkHot(seg);
  d_.index->WriteHotSegments(d_.table->HotSegments()).IgnoreError();  // a hint for the next open
  WriteReinserts(reinserts, next, hot);
  return Status::OK();
}

uint8_t* Reclaimer::ArenaFor(uint64_t bytes) {
  if (arena_.size() < bytes) {
    // Fresh memory costs a fault per page on first touch, which was most of
    // a 2 MiB reclaim's time (a VM's faults are dear); huge pages and reuse
    // across reclaims take that away.
    if (!arena_.ResetHuge(bytes)) return nullptr;
  }
  return arena_.data();
}

void Reclaimer::TrimArena() {
  if (arena_.size() > kArenaKeepBytes) arena_ = AlignedBuffer();
}

std::vector<Reclaimer::Reinsert> Reclaimer::GatherReinserts(uint32_t seg, uint32_t old_gen,
                                                            const std::vector<Row>& rows) {
  std::vector<Reinsert> out;
  const SegmentReads hot = d_.hits->Take(seg);
  if (hot.empty() && d_.ram == nullptr) return out;
  Counters& c = *d_.counters;
  File* file = d_.table->file(seg);
  d_.policy->BeginSegment(d_.table->segment_size());
  // What to read back: the policy decides from the index and the reads.
  struct Wanted {
    format::IndexValue v;
    uint64_t first, paged;  // the pages the record touches
    uint64_t at;            // its place in the arena
  };
  std::vector<Wanted> wanted;
  uint64_t arena_bytes = 0;
  for (const Row& r : rows) {
    ReinsertCandidate cand;
    cand.ns = r.ns;
    cand.key = r.key;
    cand.hits = hot.Of(r.offset);
    if (cand.hits == 0 && d_.ram == nullptr) continue;
    auto e = d_.index->Get(r.ns, r.key);
    if (!e.ok() || !e->has_value()) continue;
    const format::IndexValue& v = **e;
    // A stale row (the key lives elsewhere now) has no reads of its own.
    if (v.segment != seg || v.generation != old_gen || v.offset != r.offset) continue;
    // Reads the RAM tier served count as the disk's do. Only reads: every
    // block written lately is in the tier (it is the write-through front),
    // and counting presence rewrote blocks never read.
    if (d_.ram != nullptr) cand.hits += d_.ram->TakeReads(r.ns, r.key);
    if (cand.hits == 0) continue;
    // A dense record may share its pages: read them all, then move the
    // record to the front. It is rewritten alone, padded to a page.
    const uint64_t rec_bytes = v.RecordBytes();
    cand.bytes = format::AlignUp(rec_bytes);
    if (!d_.policy->Wants(cand)) continue;
    d_.policy->Taken(cand);
    const uint64_t first = format::PageStart(v.offset), paged = format::PagedBytes(v.offset, rec_bytes);
    out.push_back(Reinsert{nullptr, cand.bytes, r.ns, r.key, {}});
    wanted.push_back(Wanted{v, first, paged, arena_bytes});
    arena_bytes += paged;  // >= bytes
  }
  if (out.empty()) return out;
  uint8_t* arena = ArenaFor(arena_bytes);
  if (arena == nullptr) return {};  // no memory: nothing is reinserted
  // A block read again is usually still in the RAM tier: its copy there
  // (verified below, as a read from the disk is) spares the disk a read.
  // The rest are read all in flight at once: one at a time, a segment with
  // many hot blocks held the writer, and every put behind it, for tens of ms.
  std::vector<IoRequest> reads;
  std::vector<size_t> read_of(out.size(), SIZE_MAX);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].rec = arena + wanted[i].at;
    if (d_.ram != nullptr && CopyFromRam(wanted[i].v, &out[i])) continue;  // else read it from the disk
    read_of[i] = reads.size();
    IoRequest rd;
    rd.op = IoRequest::Op::kRead;
    rd.file = file;
    rd.offset = wanted[i].first;
    rd.buf = out[i].rec;
    rd.len = wanted[i].paged;
    reads.push_back(rd);
  }
  if (!reads.empty()) d_.io->Submit(reads).IgnoreError();  // per-request statuses below
  size_t kept = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    Reinsert& ri = out[i];
    const format::IndexValue& v = wanted[i].v;
    if (read_of[i] == SIZE_MAX) {
      c.reinserted_from_ram.Add();  // copied and verified by CopyFromRam
    } else {
      if (!reads[read_of[i]].status.ok()) continue;
      c.device_bytes_read.Add(wanted[i].paged);
      const uint64_t rec_bytes = v.RecordBytes();
      if (v.offset != wanted[i].first) std::memmove(ri.rec, ri.rec + (v.offset - wanted[i].first), rec_bytes);
      std::memset(ri.rec + rec_bytes, 0, ri.bytes - rec_bytes);
      std::string_view k;
      auto hdr = format::DecodeRecordHeader({ri.rec, rec_bytes}, d_.stored_payload_limit, &k);
      if (!hdr.ok() || format::RecordAgainstEntry(*hdr, k, ri.ns, ri.key, v) != 0 ||
          format::Checksum(ri.rec + v.PayloadOffset(), hdr->payload_len) != hdr->payload_checksum)
        continue;
      ri.h = *hdr;
    }
    if (kept != i) out[kept] = std::move(ri);
    ++kept;
  }
  out.resize(kept);
  return out;
}

bool Reclaimer::CopyFromRam(const format::IndexValue& v, Reinsert* ri) {
  RamTier::Pin pin = d_.ram->Peek(ri->ns, ri->key);
  if (!pin || pin.size() != v.payload_len || pin.checksum() != v.payload_checksum) return false;
  format::RecordHeader& h = ri->h;
  h.flags = v.flags;
  h.key_len = v.key_len;
  h.ns_id = ri->ns;
  h.payload_len = v.payload_len;
  h.payload_checksum = v.payload_checksum;
  h.sequence = v.sequence;
  h.written_unix_ms = v.written_unix_ms;
  // The header is written again with its new place (WriteReinserts); the
  // gap after the key and the tail of the last page are zeros, as a put
  // leaves them.
  uint8_t* rec = ri->rec;
  const uint64_t payload_at = v.PayloadOffset();
  std::memset(rec, 0, payload_at);
  // Hashed as it is copied, one pass, and checked against the index's
  // checksum as a read from the disk is.
  Xxh3Copy sum(v.payload_len);
  uint64_t at = payload_at;
  for (const RamTier::Piece& p : pin.pieces()) {
    sum.Copy(rec + at, p.data, p.size);
    at += p.size;
  }
  std::memset(rec + at, 0, ri->bytes - at);
  return sum.Digest() == v.payload_checksum;
}

void Reclaimer::DropEntries(uint32_t seg, uint32_t old_gen, uint32_t new_gen, bool reuse,
                            const std::vector<Row>& rows, const std::vector<Reinsert>& reinserts) {
  // The old generation's entries are now stale whatever happens next; drop
  // them (a crash here leaves stale entries that reads detect and drop).
  Counters& c = *d_.counters;
  IndexBatch batch;
  uint64_t evicted = 0, evicted_bytes = 0;
  for (const Row& r : rows) {
    auto e = d_.index->Get(r.ns, r.key);
    if (e.ok() && e->has_value() && (*e)->segment == seg && (*e)->generation == old_gen &&
        (*e)->offset == r.offset) {
      batch.Delete(r.ns, r.key, **e);
      // The RAM tier holds only what the disk has (reinserted blocks stay,
      // below, unless their write fails).
      if (d_.ram != nullptr && std::none_of(reinserts.begin(), reinserts.end(), [&](const Reinsert& ri) {
            return ri.ns == r.ns && ri.key == r.key;
          }))
        d_.ram->Erase(r.ns, r.key);
      ++evicted;
      evicted_bytes += (*e)->payload_len;
    } else {
      batch.DeleteSegmentRow(seg, old_gen, r.offset);
    }
  }
  if (!batch.empty()) d_.index->Commit(batch, false).IgnoreError();
  d_.index->DropSegmentRowsBelow(seg, reuse ? new_gen : old_gen + 1).IgnoreError();
  c.evictions.Add();
  c.evicted_blocks.Add(evicted);
  c.evicted_bytes.Add(evicted_bytes);
}

size_t Reclaimer::WriteReinserts(std::vector<Reinsert>& reinserts, size_t next, AppendPosition* at) {
  // A block keeps the sequence number it was put with: the copy is no newer
  // than its data. A fresh number let an older version outrank a newer put
  // still in flight at the reclaim, in recovery's comparison (the kill
  // torture: "version 2 is not allowed (last acked 3)"). In memory, an entry
  // written meanwhile by a newer put wins below.
  Counters& c = *d_.counters;
  File* file = d_.table->file(at->seg);
  const size_t begin = next;
  std::vector<IoRequest> writes;
  std::vector<format::IndexValue> values;
  for (uint64_t off = at->off; next < reinserts.size(); ++next) {
    Reinsert& ri = reinserts[next];
    if (off + ri.bytes > d_.table->segment_size()) break;
    format::RecordHeader h = ri.h;
    h.segment_id = at->seg;
    h.generation = at->gen;
    format::EncodeRecordHeader(h, ri.key, ri.rec);
    IoRequest w;
    w.op = IoRequest::Op::kWrite;
    w.file = file;
    w.offset = off;
    w.buf = ri.rec;
    w.len = ri.bytes;
    writes.push_back(w);
    values.push_back(format::IndexValueOf(h, off));
    off += ri.bytes;
  }
  if (!writes.empty()) d_.io->Submit(writes).IgnoreError();  // per-request statuses below
  size_t good = 0;  // the writes before the first failed one
  while (good < writes.size() && writes[good].status.ok()) ++good;
  uint64_t written = 0;
  IndexBatch re;
  for (size_t i = 0; i < good; ++i) {
    Reinsert& ri = reinserts[begin + i];
    auto e = d_.index->Get(ri.ns, ri.key);
    if (e.ok() && !e->has_value()) re.Put(ri.ns, ri.key, values[i]);  // not replaced or removed meanwhile
    written += ri.bytes;
    c.reinsertions.Add();
    c.reinserted_bytes.Add(ri.h.payload_len);
  }
  c.device_bytes_written.Add(written);
  at->off += written;
  if (good < writes.size()) {
    // A write failed: what it and the rest held leaves the RAM tier too,
    // and nothing more goes to this segment.
    if (d_.ram != nullptr)
      for (size_t j = begin + good; j < reinserts.size(); ++j) d_.ram->Erase(reinserts[j].ns, reinserts[j].key);
    next = reinserts.size();
    at->off = d_.table->segment_size();
  }
  if (written > 0) {
    Status s = file->Sync();
    c.syncs.Add();
    if (s.ok() && !re.empty() && d_.index->Commit(re, false).ok() && d_.ram != nullptr) {
      // The RAM tier's copies count their reads for the new place.
      for (size_t i = 0; i < good; ++i) {
        const Reinsert& ri = reinserts[begin + i];
        d_.ram->NotePlaced(ri.ns, ri.key, ri.h.payload_checksum, RamPlacement{at->seg, values[i].offset, ri.bytes});
      }
    }
  }
  d_.table->SetUsed(at->seg, at->off);
  return next;
}

}  // namespace kvtier
