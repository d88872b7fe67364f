// The plan of a put: its record's layout and where the device write reads
// the payload from. Pure functions of sizes and options, unit-tested on their
// own (tests/log/put_plan_test.cc); the store carries the plan out.
#ifndef KVTIER_SRC_LOG_PUT_PLAN_H_
#define KVTIER_SRC_LOG_PUT_PLAN_H_

#include <cstdint>

namespace kvtier {

// The record, decided from sizes and options.
struct RecordPlan {
  bool dense = false;          // packed at 8 bytes (small records below zero_copy_min_bytes)
  uint16_t flags = 0;          // 0, format::kRecordDense, or with format::kRecordCompact
  uint64_t rec_bytes = 0;      // on-disk size
  uint64_t payload_offset = 0;
  bool aligned = false;        // the payload starts at a page (the aligned layout)
  bool reserve_ram_copy = false;  // reserve a RAM-tier copy and write from it (write-through, one copy)
};

struct RecordPlanInput {
  uint64_t key_len = 0;
  uint64_t payload_len = 0;
  bool dense_ok = false;             // the store's format has dense records
  bool compact_ok = false;           // and compact headers for them (format 4)
  uint64_t dense_record_max_bytes = 0;
  uint64_t zero_copy_min_bytes = 0;
  bool ram_tier = false;             // a RAM tier is on
  bool has_reservation = false;      // the caller filled a RAM-tier reservation (GPU path)
};
RecordPlan PlanRecord(const RecordPlanInput& in);

// How the payload reaches the device, once its memory is known.
struct WritePlan {
  bool direct = false;          // header page + the payload's whole pages where they are + tail page
  bool copy_small_pages = false;  // direct was possible but the caller's 4 KiB pages make a copy cheaper
  uint64_t ring_bytes = 0;      // write-ring space: the record, or (direct) its header and tail pages
  uint64_t borrowed = 0;        // payload bytes written from outside the ring
  uint64_t whole = 0;           // the payload's whole pages
  uint64_t tail = 0;            // bytes after them
};

struct WritePlanInput {
  uint64_t payload_len = 0;
  uint64_t zero_copy_min_bytes = 0;
  bool from_ram = false;         // the payload is in a RAM-tier reservation
  bool borrow = false;           // the caller keeps its payload valid until the put completes
  bool source_borrowable = false;  // the source's pieces keep page boundaries (each page aligned, whole but the last)
  bool small_pages = false;      // the caller's memory is on 4 KiB pages and the options say copy
};
WritePlan PlanWrite(const RecordPlan& record, const WritePlanInput& in);

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_PUT_PLAN_H_
