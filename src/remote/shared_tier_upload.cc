// Uploads: sealed segments go to RADOS as part objects, then a summary
// object, then a catalog entry.
//
// One upload waited for each write in turn, and each segment drained the
// writes before the next began: the cluster sat idle at every boundary
// (0.58-0.73x of `rados bench write` on the one-node cluster). Here the
// chunks of every part of a batch of segments stream through one ring of
// buffers: a few chunks are read back from the local segment (ChunkReader)
// while the writes before them are in flight, and a segment is published
// while the next one's writes keep the cluster busy. A chunk is one RADOS
// write of upload_write_bytes, the OSD pays per write, so fewer, larger
// writes go faster. Chunks are read into buffers librados sends from without
// a copy (RadosClient::WriteBuffer).
#include <algorithm>
#include <deque>

#include "remote/chunk_reader.h"
#include "remote/rados_client.h"
#include "remote/shared_tier.h"

namespace kvtier::remote {
namespace {
constexpr size_t kSummaryChunk = 4u << 20;     // a summary object's writes
constexpr unsigned kSummaryWindow = 16;
constexpr uint64_t kWindowBytes = 128u << 20;  // upload writes in flight
constexpr uint64_t kReadAheadBytes = 32u << 20;  // read back ahead of them
constexpr unsigned kReadThreads = 2;           // reads of them at once
}  // namespace

UploadShape UploadShape::Of(const RemoteTierOptions& o) {
  const uint64_t w = std::min(o.upload_write_bytes, o.object_bytes);
  // 8 writes of 16 MiB; at most 16 (as `rados bench -t 16`) of smaller ones.
  return UploadShape{w, static_cast<size_t>(std::clamp<uint64_t>(kWindowBytes / w, 4, 16)),
                     static_cast<size_t>(std::clamp<uint64_t>(kReadAheadBytes / w, 2, 4))};
}

struct SharedTier::PendingUpload {
  uint32_t seg = 0, gen = 0;
  SegmentSummary summary;
  std::string base;
  std::vector<uint64_t> tickets;  // its writes
  bool share = false;             // false: nothing to share (done already)
};

Result<bool> SharedTier::PrepareUpload(PendingUpload* u) {
  if (index_->IsUploaded(u->seg, u->gen)) return false;
  SegmentSummary& s = u->summary;
  Status st = source_.summarize(u->seg, u->gen, &s);
  if (st.code() == Code::kNotFound) {
    counters_.uploads_skipped.fetch_add(1);
    return false;
  }
  KVTIER_RETURN_IF_ERROR(st);
  if (s.entries.empty()) {  // every record was replaced or removed: nothing to share
    index_->MarkUploaded(u->seg, u->gen, "").IgnoreError();
    counters_.uploads_skipped.fetch_add(1);
    return false;
  }
  s.store_id = store_id_;
  s.part_bytes = opt_.object_bytes;
  s.uploaded_unix_ms = NowUnixMs();
  u->base = s.ObjectBase();
  return true;
}

Status SharedTier::PublishUpload(PendingUpload& u) {
  auto c = client();
  if (!c) return Status::Closed("shared tier is not connected");
  const SegmentSummary& s = u.summary;
  const std::string summary = EncodeSummary(s);
  KVTIER_RETURN_IF_ERROR(c->WriteObject(SummaryObject(u.base), reinterpret_cast<const uint8_t*>(summary.data()),
                                        summary.size(), kSummaryChunk, kSummaryWindow));
  CatalogEntry e{CatalogKey(s.uploaded_unix_ms, u.base), u.base, s.bytes, s.part_bytes, summary.size()};
  KVTIER_RETURN_IF_ERROR(c->OmapSet(kCatalogObject, e.key, EncodeCatalogValue(e)));
  auto added = index_->Import(s, e.key);
  if (added.ok()) counters_.imported.fetch_add(1);
  index_->MarkUploaded(u.seg, u.gen, u.base).IgnoreError();  // at worst uploaded again after a restart
  counters_.uploads.fetch_add(1);
  counters_.upload_bytes.fetch_add(s.bytes);
  return Status::OK();
}

Status SharedTier::UploadBatch(const std::vector<std::pair<uint32_t, uint32_t>>& batch, size_t* finished) {
  *finished = 0;
  auto c = client();
  if (!c) return Status::Closed("shared tier is not connected");
  std::vector<PendingUpload> ups(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    ups[i].seg = batch[i].first;
    ups[i].gen = batch[i].second;
  }
  struct Slot {
    RadosClient::WriteBuffer buf;
    uint64_t ticket = 0;  // its write in flight, 0: none
  };
  // One chunk of a part to upload, planned; then read into its slot.
  struct Chunk {
    size_t up = 0;  // index in ups
    uint32_t part = 0;
    uint64_t off = 0;  // within the part
    size_t len = 0;
    bool last = false;  // the segment's last chunk
    Slot* slot = nullptr;
    uint64_t read = 0;  // its read's ticket
  };
  const UploadShape shape = UploadShape::Of(opt_);
  // Room for the writes in flight, the reads ahead of them, and the next
  // read while the window is full. Declared before the writes and the reads:
  // both drain before the buffers go.
  std::vector<Slot> ring(shape.writes_in_flight + shape.reads_ahead + 1);
  RadosClient::AsyncWrites writes(c.get());
  ChunkReader reader(source_.read, kReadThreads);
  std::deque<uint64_t> window;  // write tickets in flight, oldest first
  std::deque<Chunk> planned, reading;
  size_t next_slot = 0;
  size_t next_plan = 0;  // the next segment to plan
  // Publishes the segments from *finished up to `end` (exclusive), whose
  // writes are all issued, in order.
  auto publish_through = [&](size_t end) -> Status {
    for (; *finished < end; ++*finished) {
      PendingUpload& u = ups[*finished];
      if (!u.share) continue;
      for (uint64_t t : u.tickets) KVTIER_RETURN_IF_ERROR(writes.Wait(t));
      KVTIER_RETURN_IF_ERROR(PublishUpload(u));
    }
    return Status::OK();
  };
  // Plans segment i's chunks in stripes across its parts (chunk 0 of every
  // part, then chunk 1, ...): RADOS applies the writes of one object one
  // after the other, so a window of chunks of one object would keep one
  // placement group busy and leave the rest of the cluster idle.
  auto plan = [&](size_t i) -> Status {
    PendingUpload& u = ups[i];
    auto share = PrepareUpload(&u);
    if (!share.ok()) return share.status();
    u.share = *share;
    if (!u.share) return Status::OK();
    const SegmentSummary& s = u.summary;
    const size_t first = planned.size();
    for (uint64_t off = 0; off < s.part_bytes; off += shape.write_bytes) {
      for (uint32_t p = 0; p < s.Parts(); ++p) {
        const uint64_t part_off = static_cast<uint64_t>(p) * s.part_bytes;
        const uint64_t part_len = std::min(s.part_bytes, s.bytes - part_off);
        if (off >= part_len) break;  // only the last part is short
        planned.push_back(Chunk{i, p, off, static_cast<size_t>(std::min<uint64_t>(shape.write_bytes, part_len - off))});
      }
    }
    if (planned.size() > first) planned.back().last = true;
    return Status::OK();
  };
  // Starts reads until shape.reads_ahead are under way, planning segments
  // as they are needed.
  auto read_ahead = [&]() -> Status {
    while (reading.size() < shape.reads_ahead) {
      if (planned.empty()) {
        if (next_plan == ups.size() || Stopping()) return Status::OK();
        KVTIER_RETURN_IF_ERROR(plan(next_plan++));
        continue;
      }
      Chunk k = planned.front();
      planned.pop_front();
      if (!ups[k.up].share) continue;  // dropped: its segment was reclaimed
      Slot& slot = ring[next_slot];
      next_slot = (next_slot + 1) % ring.size();
      if (slot.ticket != 0) KVTIER_RETURN_IF_ERROR(writes.Wait(slot.ticket));
      slot.ticket = 0;
      if (slot.buf.data() == nullptr || slot.buf.HeldByCluster()) {
        auto fresh = RadosClient::WriteBuffer::Allocate(shape.write_bytes);
        if (!fresh.ok()) return fresh.status();
        slot.buf = std::move(*fresh);
      }
      const PendingUpload& u = ups[k.up];
      k.slot = &slot;
      k.read = reader.Start(u.seg, u.gen, static_cast<uint64_t>(k.part) * u.summary.part_bytes + k.off,
                            slot.buf.data(), k.len);
      reading.push_back(k);
    }
    return Status::OK();
  };
  for (;;) {
    KVTIER_RETURN_IF_ERROR(read_ahead());
    if (reading.empty()) break;
    const Chunk k = reading.front();
    reading.pop_front();
    Status st = reader.Wait(k.read);
    PendingUpload& u = ups[k.up];
    if (!u.share) continue;  // dropped after this read was started
    if (st.code() == Code::kNotFound) {  // reclaimed meanwhile: drop what went up
      for (uint64_t t : u.tickets) writes.Wait(t).IgnoreError();
      for (uint32_t q = 0; q < u.summary.Parts(); ++q) c->Remove(PartObject(u.base, q)).IgnoreError();
      counters_.uploads_skipped.fetch_add(1);
      u.share = false;
      continue;
    }
    KVTIER_RETURN_IF_ERROR(st);
    if (window.size() == shape.writes_in_flight) {
      KVTIER_RETURN_IF_ERROR(writes.Wait(window.front()));
      window.pop_front();
    }
    // A part's first write replaces any older copy. The rest need not wait
    // for it: RADOS applies one client's writes to an object in the order
    // they were sent, in flight together or not.
    auto t = writes.Start(PartObject(u.base, k.part), k.slot->buf, k.len, k.off, /*replace=*/k.off == 0);
    if (!t.ok()) return t.status();
    k.slot->ticket = *t;
    window.push_back(*t);
    u.tickets.push_back(*t);
    // The segments before this one are written by now or soon: publish
    // them while this one's writes are in flight.
    if (k.last) KVTIER_RETURN_IF_ERROR(publish_through(k.up));
  }
  return publish_through(next_plan);
}

}  // namespace kvtier::remote
