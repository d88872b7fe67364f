#include "log/put_plan.h"

#include "format/record.h"

namespace kvtier {

RecordPlan PlanRecord(const RecordPlanInput& in) {
  RecordPlan p;
  // Records below zero_copy_min_bytes are always copied into the ring; the
  // small ones among them go dense.
  p.dense = in.dense_ok && in.payload_len <= in.dense_record_max_bytes && in.payload_len < in.zero_copy_min_bytes;
  p.flags = p.dense ? format::kRecordDense : 0;
  if (p.dense && in.compact_ok && in.payload_len <= format::kCompactMaxPayload) p.flags |= format::kRecordCompact;
  p.rec_bytes = format::RecordBytes(in.key_len, in.payload_len, p.flags);
  p.payload_offset = format::PayloadOffset(in.key_len, in.payload_len, p.flags);
  p.aligned = format::PayloadAligned(in.key_len, in.payload_len, p.flags);
  // The device write reads the payload, in order of preference, from the
  // caller's RAM-tier reservation, a fresh RAM-tier copy, the caller's own
  // memory, or a copy in the ring.
  p.reserve_ram_copy = !in.has_reservation && in.ram_tier && p.aligned && in.payload_len >= in.zero_copy_min_bytes;
  return p;
}

WritePlan PlanWrite(const RecordPlan& record, const WritePlanInput& in) {
  constexpr uint64_t kPage = format::kPage;
  WritePlan w;
  w.direct = record.aligned && in.payload_len >= in.zero_copy_min_bytes && (in.from_ram || in.borrow) &&
             in.source_borrowable;
  if (w.direct && !in.from_ram && in.small_pages) {
    w.direct = false;  // the caller's 4 KiB pages: one copy into the huge-page ring is cheaper
    w.copy_small_pages = true;
  }
  w.whole = in.payload_len / kPage * kPage;
  w.tail = in.payload_len - w.whole;
  // A dense record takes exactly its bytes, so that dense records queued one
  // after another lie back to back in the ring as they will on disk.
  w.ring_bytes = w.direct ? kPage + (w.tail != 0 ? kPage : 0) : record.rec_bytes;
  w.borrowed = w.direct ? w.whole : 0;
  return w;
}

}  // namespace kvtier
