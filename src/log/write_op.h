// WriteOp: one operation on its way through the writer thread (a record, or
// a flush, remove, drop, eviction, seal or task), and CommitJob, a pass of
// written records on its way through the committer.
#ifndef KVTIER_SRC_LOG_WRITE_OP_H_
#define KVTIER_SRC_LOG_WRITE_OP_H_

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/record.h"
#include "index/index.h"
#include "kvtier/store.h"
#include "log/write_ring.h"
#include "tier/ram_tier.h"

namespace kvtier {

struct WriteOp {
  enum class Kind : uint8_t { kRecord, kFlush, kRemove, kDrop, kEvictTo, kSeal, kTask };
  Kind kind = Kind::kRecord;
  NamespaceId ns = 0;
  std::string key;
  uint64_t alloc_id = 0;
  WriteRing::Allocation alloc;  // the whole record, or its header (+ tail) pages
  uint64_t rec_bytes = 0;       // on-disk size of the record (8-byte aligned when dense)
  uint16_t flags = 0;           // the record's flags (RecordPlan::flags)
  // kRecordDense: the record is at alloc.data, 8-byte aligned.
  bool dense() const { return format::IsDense(flags); }
  // The record in disk order: ring memory, or header page + the payload's
  // whole pages where they already are (caller or RAM-tier memory) + tail
  // page. Empty means the whole record is in `alloc`.
  std::vector<iovec> pieces;
  uint64_t borrowed = 0;  // payload bytes written from outside the ring
  RamTier::Pin hold;      // RAM-tier chunks being written from
  uint64_t payload_len = 0, checksum = 0, written_ms = 0;
  uint64_t arg = 0;        // kDrop: the entry's sequence; kEvictTo: target bytes
  // kRemove: the keys, and where to say which of them had an entry (may be
  // null; it outlives the op, whose caller waits for it).
  std::vector<std::string> keys;
  std::vector<bool>* present = nullptr;
  uint64_t ram_token = 0;  // kRecord: the RAM-tier copy to undo if the put fails
  PutCallback done;
  // kTask: runs on the writer thread once every earlier pass is committed
  // (the store's namespace removal); its status completes `done`.
  std::function<Status()> task;
  // When a put reached each stage (Stats::puts_timed); `submitted` is unset
  // for records that are not puts (reinsertions).
  struct Times {
    Clock::time_point submitted{}, pushed{}, pass{}, placed{}, written{};
  } times;
  // Filled in by the writer.
  uint32_t segment = 0, generation = 0;
  uint64_t offset = 0, sequence = 0;
  Status status;
};

// A pass of written records on its way through fdatasync and the index.
struct CommitJob {
  std::vector<WriteOp> ops;
  std::vector<uint32_t> touched;  // segments written: each is synced once
  bool sealed = false;            // a segment was sealed in this pass
  Checkpoint frontier;            // append position after this pass
};

// Where the writer appends: the open segment (none: seg == UINT32_MAX), its
// generation and append offset, the epoch of the newest segment and the next
// sequence number. Writer-thread state.
struct AppendPosition {
  uint32_t seg = UINT32_MAX;
  uint32_t gen = 0;
  uint64_t off = 0;  // page aligned between passes; 8-byte aligned after a dense record
  uint64_t epoch = 0;
  uint64_t next_seq = 1;
};

// The checkpoint that says everything before `pos` is indexed.
inline Checkpoint CheckpointOf(const AppendPosition& pos, uint64_t segment_size, bool clean) {
  Checkpoint cp;
  cp.epoch = pos.epoch;
  cp.offset = pos.seg == UINT32_MAX ? segment_size : pos.off;
  cp.next_sequence = pos.next_seq;
  cp.clean = clean;
  return cp;
}

// The header of a placed record, and its index entry.
inline format::RecordHeader HeaderOf(const WriteOp& op) {
  format::RecordHeader h;
  h.flags = op.flags;
  h.key_len = static_cast<uint16_t>(op.key.size());
  h.segment_id = op.segment;
  h.generation = op.generation;
  h.ns_id = op.ns;
  h.sequence = op.sequence;
  h.payload_len = op.payload_len;
  h.payload_checksum = op.checksum;
  // A compact header keeps whole seconds: the entry says what the record says.
  h.written_unix_ms = format::IsCompact(op.flags) ? op.written_ms / 1000 * 1000 : op.written_ms;
  return h;
}
inline format::IndexValue IndexValueOf(const WriteOp& op) { return format::IndexValueOf(HeaderOf(op), op.offset); }

// Completes `done` exactly once, tolerating an empty callback.
inline void FinishPut(const PutCallback& done, Status st) {
  if (done) done(std::move(st));
}

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_WRITE_OP_H_
