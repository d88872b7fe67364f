// Writer: the thread that appends records to the log. It takes groups of
// operations from the OpQueue in order, places each record in the open
// segment, writes contiguous runs with one I/O each and hands every pass to
// the committer; between passes it rolls segments over, reclaiming the
// oldest when the budget is reached (log/reclaimer.h). It also runs the
// operations that must see every earlier put committed: flush, remove,
// drop, evict-to, seal and the store's tasks.
//
// Thread safety: Start and Stop from the opening/closing thread. position()
// and CheckpointNow() belong to the writer thread while it runs, and to the
// opening thread before Start (recovery) and after Stop (a clean close).
#ifndef KVTIER_SRC_LOG_WRITER_H_
#define KVTIER_SRC_LOG_WRITER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "index/index.h"
#include "kvtier/io.h"
#include "log/committer.h"
#include "log/op_queue.h"
#include "log/reclaimer.h"
#include "log/reinsertion.h"
#include "log/segment_table.h"
#include "log/write_op.h"
#include "log/write_runs.h"
#include "tier/ram_tier.h"
#include "util/aligned_buffer.h"
#include "util/counters.h"

namespace kvtier {

class Writer {
 public:
  struct Deps {
    OpQueue* ops = nullptr;
    Index* index = nullptr;
    SegmentTable* table = nullptr;
    Committer* committer = nullptr;
    Counters* counters = nullptr;
    HitCounts* hits = nullptr;      // read counts, for reinsertion
    std::unique_ptr<IoQueue> io;    // the writer's own queue (one per thread)
    // Segment files the budget allows; lowered here when the disk fills first.
    std::atomic<uint64_t>* max_segments = nullptr;
    uint64_t group_commit_bytes = 0;     // Options::group_commit_bytes
    uint64_t max_write_chunk_bytes = 0;  // Options::max_write_chunk_bytes
    uint64_t stored_payload_limit = 0;   // format::MaxStoredPayload
    bool reinsert = true;                // Options::reinsert_hot_blocks
    bool punch_holes = true;             // Options::punch_holes
    double reinsert_max_fraction = 0;    // Options::reinsert_max_fraction
    uint32_t reinsert_min_hits = 1;      // Options::reinsert_min_hits
    double hot_region_fraction = 0;      // Options::hot_region_fraction
    double reclaim_window_fraction = 0;  // Options::reclaim_window_fraction
    std::string dir;                     // the store folder, for messages
    std::function<void(const std::string&)> warn;
    // A segment was sealed (seg, gen): the shared tier may upload it. Must
    // not block.
    std::function<void(uint32_t, uint32_t)> sealed;
  };

  explicit Writer(Deps deps);
  ~Writer();  // stops
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Starts the thread; `ram` (may be null) is the RAM tier opened after
  // recovery: its memory is registered for writes and reclaim evicts from it.
  void Start(RamTier* ram);
  // Returns once the OpQueue is closed and drained and the thread joined.
  void Stop();
  bool running() const { return thread_.joinable(); }

  AppendPosition& position() { return pos_; }
  // Checkpoints the append position through the committer, durable on
  // return unless `flush` says otherwise.
  Status CheckpointNow(bool clean, Index::CheckpointFlush flush = Index::CheckpointFlush::kWait);

 private:
  enum class Place : uint8_t { kPlaced, kEndGroup, kFailed };
  using Touched = std::unordered_set<uint32_t>;

  void Loop();
  void RegisterBuffers(uint64_t ring_bytes);
  void Run(WriteOp& op);

  // A group of records, in passes (write_pass.cc): place, queue the writes,
  // write, and hand to the committer.
  void WriteGroup(std::vector<WriteOp>& group);
  size_t PlacePass(std::vector<WriteOp>& group, size_t begin, Touched* touched);
  Place PlaceRecord(WriteOp& op, const Touched& touched);
  void QueueWrites(std::vector<WriteOp>& group, size_t begin, size_t end, WriteRuns* runs);
  void SubmitPass(std::vector<WriteOp>& group, size_t begin, size_t end, const Touched& touched, WriteRuns* runs);
  // Makes a segment ready for appending: a free one, a new file, or the
  // oldest sealed one reclaimed (more than one when the hot region takes
  // the first).
  Status OpenNextSegment(const Touched& touched);
  // The segment to reclaim next, or UINT32_MAX: the oldest sealed one, or
  // with a hot region the oldest outside it until the region holds its share.
  uint32_t ChooseVictim();
  // Of the oldest sealed segments (Options::reclaim_window_fraction; with
  // `hot`, of the hot region's or the rest), the one holding the fewest hot
  // bytes among those read within the last lap of the log; the oldest on a
  // tie.
  uint32_t LeastHotOfOldest(std::optional<bool> hot);
  // Flushes the index first when `seg` may hold records whose entries are
  // not durable (writer.cc says why).
  Status MakeEntriesDurableBeforeReclaim(uint32_t seg);
  void DoFlush(WriteOp& op);
  // Seals the hot region's open segment at the page after its last write
  // and leaves the region none open.
  void SealHotSegment();
  // Seals the open segment at the page after its last write, tells the
  // shared tier, and leaves no segment open.
  void SealOpenSegment();

  void DoRemove(WriteOp& op);
  void DoDrop(WriteOp& op);
  void DoEvictTo(WriteOp& op);
  void DoSeal(WriteOp& op);
  uint64_t UsedBytes() const;

  Deps d_;
  RamTier* ram_ = nullptr;
  std::unique_ptr<Reclaimer> reclaimer_;
  AppendPosition pos_;
  // The hot region's open segment (seg, gen, off only; epochs and sequence
  // numbers are pos_'s). Reinserted blocks only, written by the reclaimer.
  AppendPosition hot_;
  // Segments of a lower epoch hold no record whose index entry is not
  // durable (MakeEntriesDurableBeforeReclaim). The hot region's open
  // segment is written below it; its records are moved blocks whose newest
  // entries were durable before the move.
  uint64_t flushed_below_epoch_ = 0;
  // A remove deleted entries in the index's memtables and its flush has not
  // yet succeeded: a later remove that finds nothing to delete still flushes
  // before it answers, or it would acknowledge a delete a crash can undo.
  bool removes_not_flushed_ = false;
  // The RAM tier's io_uring registration: waiting for its prefault (and for
  // an idle moment), done, or refused by the kernel (not asked again).
  enum class RamRegistration : uint8_t { kWaiting, kDone, kRefused };
  RamRegistration ram_registration_ = RamRegistration::kWaiting;
  uint64_t registered_ = 0;        // ring bytes registered
  bool ever_registered_ = false;
  // The end in the ring of the last dense record placed, while the next one
  // may continue its run on disk (PlaceRecord).
  const uint8_t* dense_mem_end_ = nullptr;
  // Zero-padded copies of the first and last page of each dense run in a
  // pass (the rest of a run is written from the ring).
  AlignedBuffer staging_;
  static constexpr uint64_t kStagingBytes = 1ull << 20;
  bool pass_sealed_ = false;
  std::thread thread_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_WRITER_H_
