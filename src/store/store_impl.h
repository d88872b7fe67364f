// StoreImpl: the Store behind Store::Open. It validates and routes the
// public calls and wires the rooms together:
//
//   caller threads   validate, admit, reserve write-ring space, encode the
//                    record and its checksum (store_write.cc), queue it
//                    (log/op_queue.h)
//   writer (1)       places queued records in the open segment and writes
//                    contiguous runs with one I/O each; rolls over, reclaims
//                    and evicts segments; runs removes and seals
//                    (log/writer.h, log/reclaimer.h)
//   committer (1)    fdatasync, one index batch per pass, checkpoints,
//                    acknowledgement (log/committer.h)
//   readers (N)      gets from disk, verified (read/read_pool.h)
//   deadlines (1)    gets whose deadline passed complete as misses
//                    (read/deadline_timer.h)
//
// Every index mutation of the write path goes through the writer or the
// committer it drains first, so "read entry, then delete it if unchanged"
// needs no further locking.
#ifndef KVTIER_SRC_STORE_STORE_IMPL_H_
#define KVTIER_SRC_STORE_STORE_IMPL_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "format/record.h"
#include "index/index.h"
#include "kvtier/store.h"
#include "log/committer.h"
#include "log/put_plan.h"
#include "log/reinsertion.h"
#include "log/scanner.h"
#include "log/segment_table.h"
#include "log/write_op.h"
#include "log/op_queue.h"
#include "log/writer.h"
#include "read/deadline_timer.h"
#include "read/read_pool.h"
#include "store/admission.h"
#include "store/block_sink.h"
#include "store/namespace_registry.h"
#include "tier/ram_tier.h"
#include "util/counters.h"
#include "util/page_backing.h"

namespace kvtier {

namespace remote {
class SharedTier;  // src/remote/shared_tier.h (built only with librados)
}

class StoreImpl final : public Store, public BlockSink {
 public:
  StoreImpl(std::string dir, Options options);
  ~StoreImpl() override;

  // Opens or creates the store folder and runs recovery (store_open.cc).
  Status OpenImpl();

  using Store::Get;
  using Store::Put;

  Result<NamespaceId> RegisterNamespace(const NamespaceSpec& spec) override;
  Result<NamespaceId> FindNamespace(std::string_view name_or_hex) override;
  using Store::ListNamespaces;
  Result<std::vector<NamespaceInfo>> ListNamespaces(NamespaceListing listing,
                                                    const std::function<void(uint64_t, uint64_t)>& progress) override;
  Status RemoveNamespace(NamespaceId ns) override;

  Status Put(NamespaceId ns, std::string_view key, std::span<const Fragment> payload) override;
  std::vector<Status> PutBatch(NamespaceId ns, std::span<const PutItem> items) override;
  void PutAsync(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                PutCallback done) override;
  void PutAsyncBorrowed(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                        PutCallback done) override;

  Result<size_t> Get(NamespaceId ns, std::string_view key,
                     std::span<const MutableFragment> out) override;
  Result<std::vector<uint8_t>> GetVector(NamespaceId ns, std::string_view key) override;
  using Store::GetBatch;
  std::vector<Result<size_t>> GetBatch(NamespaceId ns, std::span<const GetItem> items,
                                       Clock::time_point deadline) override;
  void GetAsync(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                Clock::time_point deadline, GetCallback done) override;

  Result<bool> Contains(NamespaceId ns, std::string_view key) override;
  Status ContainsBatch(NamespaceId ns, std::span<const std::string_view> keys, std::vector<bool>* present) override;
  Status TouchBatch(NamespaceId ns, std::span<const std::string_view> keys, std::vector<bool>* present) override;
  Result<size_t> LookupPrefix(NamespaceId ns, std::span<const std::string_view> keys) override;
  Result<BlockInfo> Stat(NamespaceId ns, std::string_view key) override;
  using Store::ListBlocks;
  Status ListBlocks(NamespaceId ns, std::string_view key_prefix, const ListCursor* after,
                    const std::function<bool(const BlockInfo&)>& fn) override;

  Status Remove(NamespaceId ns, std::string_view key) override;
  Status RemoveBatch(NamespaceId ns, std::span<const std::string_view> keys, std::vector<bool>* present) override;
  Status Flush() override;
  Status EvictTo(uint64_t target_used_bytes) override;
  Status ShareNow(std::chrono::milliseconds timeout) override;

  Stats GetStats() override;
  std::vector<SegmentInfo> Segments() override;
  Result<VerifyReport> Verify(const VerifyOptions& options) override;
  Result<RecordInspection> InspectRecord(NamespaceId ns, std::string_view key) override;
  const std::string& dir() const override { return dir_; }
  StoreDescription Description() const override { return description_; }
  Status Close() override;

  // For Repair (store_verify.cc): drops every entry and re-indexes every
  // record that verifies. Must be called before any I/O threads start.
  Result<RepairReport> RebuildIndex(const std::function<void(uint64_t, uint64_t)>& progress);
  // Open without recovery or threads, for Repair.
  void set_repair_mode() { repair_mode_ = true; }
  // Where a repair-mode open moved an index it could not open ("" if none).
  const std::string& damaged_index_moved_to() const { return damaged_index_moved_to_; }

  // BlockSink (src/store/block_sink.h), for the GPU path.
  RamTier* ram_tier() override { return ram_.get(); }
  void PutInternal(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                   RamTier::Pin reservation, bool blocking, PutCallback done,
                   const uint64_t* checksum = nullptr, bool borrow = false,
                   Clock::time_point start_by = kNoDeadline) override;
  void GetStartingBy(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                     Clock::time_point start_by, GetCallback done) override;
  bool WriteQueueHasRoom(uint64_t payload_bytes) override { return ops_.HasRoomFor(payload_bytes); }
  void CountRamHits(uint64_t blocks, uint64_t bytes) override {
    c_.gets.Add(blocks);
    c_.hits_ram.Add(blocks);
    c_.bytes_read_ram.Add(bytes);
  }

 private:
  // Bound on payloads of records already on disk (format::MaxStoredPayload);
  // opt_.max_payload_bytes bounds only what this opener writes.
  uint64_t StoredPayloadLimit() const { return format::MaxStoredPayload(description_.segment_size_bytes); }

  // ---- Write path (store_write.cc; the writer thread: log/writer.h) ----
  Status Validate(NamespaceId ns, std::string_view key, uint64_t payload_len);
  // With `reserved`, the payload was written into that RAM-tier reservation
  // (payload must describe its pieces), which is committed instead of copied.
  // `borrow`: the caller keeps the payload valid until `done` runs, so it
  // may be written from where it is.
  // A blocking put waits for room in the write queue until `start_by`.
  void SubmitPut(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                 bool blocking, bool borrow, PutCallback done, RamTier::Pin* reserved = nullptr,
                 const uint64_t* checksum = nullptr, Clock::time_point start_by = kNoDeadline);
  // The record filled in and checksummed, on the caller's thread.
  void FillRecord(WriteOp* op, size_t key_len, std::span<const Fragment> source, const RecordPlan& plan,
                  const WritePlan& w, const uint64_t* checksum);
  bool DenseOk() const { return description_.format_version >= 3 && opt_.dense_record_max_bytes > 0; }
  // Compact headers on dense records: only in stores created at format 4, so
  // that a format-3 store stays readable by the builds that made it.
  bool CompactOk() const { return description_.format_version >= 4; }
  Status OpenRamTier();
  // Notes the folder beside the shared-memory tier file (store_ram.cc).
  void NoteRamTierFolder(unsigned mode);
  // Warns once per open when a put into the RAM tier is a quarter of a chunk
  // or less: such blocks fill the tier faster than their bytes.
  void NoteRamBlockSize(uint64_t payload_len);
  // Queues a non-record op and waits for its status.
  Status RunOnWriter(WriteOp op);
  Status RemoveNamespaceOnWriter(NamespaceId ns);
  // What the committer (log/committer.h) calls back into: gives back ring
  // space and failed puts' RAM copies.
  void ReleaseCommitted(std::span<const WriteOp> ops);

  // ---- Read path (the reader threads and deadlines live in src/read) ----
  ReadPool::Deps ReadDeps();
  // A RAM tier's answer that ends a get (a hit, or a buffer too small for
  // it): counted and handed to `done`. False: the get goes to disk.
  bool FinishRamRead(Result<size_t>& r, GetCallback& done);
  // A get's start, counted: a bad key or a RAM-tier answer completes it
  // (true); false: it goes to disk.
  bool StartGet(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out, GetCallback& done);
  // A get the RAM tier did not serve: queued for the read pool (a blocking
  // caller's waits for room in a full queue; an async one's is a miss).
  void ReadFromDisk(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                    Clock::time_point deadline, GetCallback done,
                    ReadPool::WhenFull when_full = ReadPool::WhenFull::kRefuse);
  std::shared_ptr<ReadOp> NewReadOp(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                                    Clock::time_point deadline, GetCallback done);
  // Hands `op` to the read threads, adding its deadline to the timer.
  void SubmitRead(const std::shared_ptr<ReadOp>& op, ReadPool::WhenFull when_full = ReadPool::WhenFull::kRefuse);
  void RequestDrop(NamespaceId ns, std::string_view key, uint64_t sequence);
  void NoteHit(const format::IndexValue& v);
  // Where `v`'s record lies, as HitCounts and the RAM tier count it.
  static RamPlacement PlacementOf(const format::IndexValue& v);
  BlockInfo ToBlockInfo(NamespaceId ns, std::string_view key, const format::IndexValue& v);

  // ---- Shared tier on Ceph (store_remote.cc); no-ops while it is off ----
  Status StartRemote();
  void StopRemote();  // before the writer stops: an upload may wait on Flush
  void RemoteNoteSealed(uint32_t seg, uint32_t gen);  // writer thread, never blocks
  // On a local miss: true when the shared tier took `op` (it completes it).
  bool RemoteGet(const std::shared_ptr<ReadOp>& op);
  // Extends a local prefix match of `n` keys with blocks the tier holds.
  size_t RemoteExtendPrefix(NamespaceId ns, std::span<const std::string_view> keys, size_t n);
  // Waits until the shared tier has no upload left (false at the deadline).
  bool RemoteWaitUploaded(Clock::time_point deadline);
  // A clean close seals and uploads the open segment (bounded wait).
  void ShareOnClose();
  // The payload size of a block the shared tier holds, if it holds one.
  std::optional<uint64_t> RemotePayloadBytes(NamespaceId ns, std::string_view key);
  void RemoteStats(Stats* s);
  std::shared_ptr<remote::SharedTier> remote_;  // set at open, then only read

  // ---- Open / recovery (store_open.cc) ----
  // OpenImpl's steps, in order.
  Status OpenFolder();
  Status CreateOrLoadSuperblock(bool* created);
  Status OpenIndex();
  Status OpenSegments();
  Status OpenWritePath();
  void LoadUsageReadOnly();
  uint64_t CapacityBytes() const;  // Options::capacity_bytes, 8 GiB when 0
  Status LoadNamespaces();
  Status WriteNamespaceFile(NamespaceId id, const NamespaceSpec& spec);
  Status RemoveNamespaceFile(NamespaceId id);
  Status Recover();
  Status RecoverSegment(const SegmentInfo& s, uint64_t start, uint64_t min_sequence, uint64_t* max_seq);
  Status RecoverHotTail(const std::vector<SegmentInfo>& segs, const Checkpoint& cp, uint64_t* max_seq);
  void StartThreads();
  Result<NamespaceSpec> SpecOf(NamespaceId ns);

  std::string dir_;
  Options opt_;
  std::shared_ptr<FileSystem> fs_;
  std::unique_ptr<FileLock> lock_;
  std::unique_ptr<Index> index_;
  std::unique_ptr<SegmentTable> table_;
  std::unique_ptr<Admission> admission_;
  std::unique_ptr<RamTier> ram_;  // host RAM tier (Options::ram_tier_bytes), may be null
  StoreDescription description_;
  std::string damaged_index_moved_to_;
  std::array<uint8_t, 16> store_id_{};
  // Segment files the budget allows; lowered when the disk cannot hold more
  // (writer-owned after open; read by GetStats).
  std::atomic<uint64_t> max_segments_{0};
  uint64_t configured_segments_ = 0;  // from Options::capacity_bytes
  void Warn(const std::string& line) const;
  // Lowers max_segments_ to what the segments already held plus the disk's
  // free space can hold (store_open.cc).
  void CapCapacityToDisk();
  Counters c_;
  bool repair_mode_ = false;
  // Recovery and Repair: the index holds remove marks, which the re-index
  // consults (Index::RemovedBelow).
  bool remove_marks_ = false;

  NamespaceRegistry namespaces_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> warned_small_ram_blocks_{false};  // NoteRamBlockSize
  // Hot blocks: reads per (segment, offset) since written, for reinsertion.
  HitCounts hits_{opt_.reinsert_min_hits};

  // The rooms, each with its own thread. Made before recovery (which appends
  // and checkpoints through them), started by StartThreads, stopped by Close;
  // declared in the order they must be destroyed last to first.
  OpQueue ops_{opt_.write_queue_bytes};  // callers -> writer, and the write ring
  std::unique_ptr<Committer> committer_;  // fdatasync, index, checkpoints, acks
  std::unique_ptr<Writer> writer_;        // placement, writes, rollover, reclaim
  std::unique_ptr<ReadPool> reads_;       // gets from disk
  std::unique_ptr<DeadlineTimer> deadlines_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_STORE_STORE_IMPL_H_
