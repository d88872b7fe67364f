// Uploads: sealed segments go to RADOS as part objects, then a summary
// object, then a catalog entry.
//
// One upload waited for each write in turn, and each segment drained the
// writes before the next began: the cluster sat idle at every boundary
// (0.58-0.73x of `rados bench write` on the one-node cluster). Here the
// chunks of every part of a batch of segments stream through one ring of
// kWriteWindow buffers: a chunk is read back from the local segment while
// the writes before it are in flight, and a segment is published while the
// next one's writes keep the cluster busy.
#include <algorithm>
#include <deque>

#include "remote/rados_client.h"
#include "remote/shared_tier.h"
#include "util/aligned_buffer.h"

namespace kvtier::remote {
namespace {
constexpr size_t kWriteChunk = 4u << 20;  // one RADOS write
constexpr unsigned kWriteWindow = 16;     // writes in flight, as `rados bench -t 16`
}  // namespace

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
                                        summary.size(), kWriteChunk, kWriteWindow));
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
    AlignedBuffer buf;
    uint64_t ticket = 0;  // its write in flight, 0: none
  };
  // One buffer more than writes in flight: the next chunk is read back
  // while the window is full, and goes out the moment a write completes.
  std::vector<Slot> ring(kWriteWindow + 1);
  std::deque<uint64_t> window;  // tickets in flight, oldest first
  RadosClient::AsyncWrites writes(c.get());  // drains before the ring goes
  size_t next_slot = 0;
  size_t issued = 0;  // segments whose writes are all issued (or that need none)
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
  for (size_t i = 0; i < ups.size(); ++i) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) break;
    }
    PendingUpload& u = ups[i];
    auto share = PrepareUpload(&u);
    if (!share.ok()) return share.status();
    u.share = *share;
    const SegmentSummary& s = u.summary;
    // Chunks in stripes across the parts (chunk 0 of every part, then chunk
    // 1, ...): RADOS applies the writes of one object one after the other,
    // so a window of chunks of one object would keep one placement group
    // busy and leave the rest of the cluster idle.
    const uint32_t parts = s.Parts();
    std::vector<uint64_t> replacing(parts, 0);  // each part's first write: it replaces any older copy, the rest follow
    for (uint64_t off = 0; u.share && off < s.part_bytes; off += kWriteChunk) {
      for (uint32_t p = 0; p < parts; ++p) {
        const uint64_t part_off = static_cast<uint64_t>(p) * s.part_bytes;
        const uint64_t part_len = std::min(s.part_bytes, s.bytes - part_off);
        if (off >= part_len) break;  // only the last part is short
        Slot& slot = ring[next_slot];
        next_slot = (next_slot + 1) % ring.size();
        if (slot.ticket != 0) KVTIER_RETURN_IF_ERROR(writes.Wait(slot.ticket));
        if (slot.buf.data() == nullptr) slot.buf = AlignedBuffer(kWriteChunk);
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kWriteChunk, part_len - off));
        Status st = source_.read(u.seg, u.gen, part_off + off, slot.buf.data(), n);
        if (st.code() == Code::kNotFound) {  // reclaimed meanwhile: drop what went up
          for (uint64_t t : u.tickets) writes.Wait(t).IgnoreError();
          for (uint32_t q = 0; q < parts; ++q) c->Remove(PartObject(u.base, q)).IgnoreError();
          counters_.uploads_skipped.fetch_add(1);
          u.share = false;
          break;
        }
        KVTIER_RETURN_IF_ERROR(st);
        if (off > 0 && replacing[p] != 0) {
          KVTIER_RETURN_IF_ERROR(writes.Wait(replacing[p]));
          replacing[p] = 0;
        }
        if (window.size() == kWriteWindow) {
          KVTIER_RETURN_IF_ERROR(writes.Wait(window.front()));
          window.pop_front();
        }
        auto t = writes.Start(PartObject(u.base, p), slot.buf.data(), n, off, /*replace=*/off == 0);
        if (!t.ok()) return t.status();
        slot.ticket = *t;
        window.push_back(*t);
        u.tickets.push_back(*t);
        if (off == 0) replacing[p] = *t;
      }
    }
    // The segment before this one is written by now or soon: publish it
    // while this one's writes are in flight.
    KVTIER_RETURN_IF_ERROR(publish_through(i));
    issued = i + 1;
  }
  return publish_through(issued);
}

}  // namespace kvtier::remote
