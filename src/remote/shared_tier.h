// SharedTier: one node's side of the shared tier on Ceph (docs/shared-tier.md).
//
// - Uploads: NoteSealed() queues a sealed local segment; a background worker
//   asks the store for the segment's live records (Source::summarize), reads
//   the segment (Source::read) part by part, writes the parts, the summary
//   and finally the catalog entry. A failed attempt is retried with back-off
//   (100 ms doubling to 30 s); a segment reclaimed locally first is skipped.
//   Nothing here ever waits on a put.
// - Discovery: the worker lists the catalog every poll interval, imports new
//   summaries into the remote index, drops uploads that left the catalog, and
//   deletes the oldest uploads while the catalog is over budget.
// - Reads: Lookup() finds a block for a namespace only when the summary's
//   spec has the same canonical identity as the caller's; Read() fetches the
//   record with a deadline and verifies header, key, namespace, segment,
//   generation and payload checksum. Anything else is a miss.
//
// The worker connects in the background: Start never waits for Ceph.
// Thread-safe. Stop() (or the destructor) joins the worker and waits for
// every read callback before returning; none runs afterwards.
#ifndef KVTIER_SRC_REMOTE_SHARED_TIER_H_
#define KVTIER_SRC_REMOTE_SHARED_TIER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>

#include "kvtier/namespace.h"
#include "kvtier/options.h"
#include "kvtier/status.h"
#include "remote/remote_index.h"
#include "remote/summary.h"

namespace kvtier::remote {

class RadosClient;

// An upload's RADOS writes: pieces of upload_write_bytes (at most a part),
// about 128 MiB of them in flight (at least 4, at most 16 pieces), and 32
// MiB read back ahead of them (2 to 4 pieces).
struct UploadShape {
  uint64_t write_bytes;
  size_t writes_in_flight;
  size_t reads_ahead;
  static UploadShape Of(const RemoteTierOptions& o);
};

struct SharedTierCounters {
  std::atomic<uint64_t> hits{0}, bytes_read{0}, misses{0}, deadline_misses{0}, checksum_failures{0};
  std::atomic<uint64_t> uploads{0}, upload_bytes{0}, upload_retries{0}, uploads_skipped{0};
  std::atomic<uint64_t> imported{0}, orphans_removed{0};
  std::atomic<uint64_t> deleted{0};          // objects (parts and summaries) removed for the budget
  std::atomic<uint64_t> uploads_deleted{0};  // whole uploads (catalog entries) removed for the budget
};

class SharedTier {
 public:
  using Clock = std::chrono::steady_clock;
  // What the tier needs from the store. Both run on the worker thread.
  struct Source {
    // Fills segment, generation, epoch, bytes, namespaces and entries of the
    // sealed segment (seg, gen) once every record in it is durable and
    // indexed. NotFound when it is no longer that generation.
    std::function<Status(uint32_t seg, uint32_t gen, SegmentSummary* out)> summarize;
    // Reads bytes [off, off+len) of (seg, gen) into buf (page aligned).
    // NotFound when the segment was reclaimed.
    std::function<Status(uint32_t seg, uint32_t gen, uint64_t off, void* buf, size_t len)> read;
    // A line for the operator (uploads failing, and resuming); may be empty.
    std::function<void(const std::string&)> warn;
  };

  // Opens the remote index and starts the worker.
  static Result<std::unique_ptr<SharedTier>> Start(const RemoteTierOptions& o, const RemoteIndexFiles& index_files,
                                                   const std::string& store_id, Source source);
  ~SharedTier();
  void Stop();

  // Queues an upload of (seg, gen) unless it was uploaded before. Never blocks.
  void NoteSealed(uint32_t seg, uint32_t gen);
  // Waits until no upload is queued or running. False at the deadline, or
  // when the tier stopped with uploads left.
  bool WaitUploaded(Clock::time_point deadline);

  // Where (ns, key) is, if an upload holds it under a namespace whose
  // canonical identity equals `canonical` (the caller's spec).
  std::optional<Location> Lookup(NamespaceId ns, std::string_view key, const std::string& canonical);

  // Reads and verifies the record at `loc`. `done` runs once with OK and the
  // payload (valid during the call), NotFound (object gone: the entry is
  // dropped), Corruption (failed verification: dropped), TimedOut, or an
  // error. Returns false, running nothing, when the tier is not connected.
  using ReadDone = std::function<void(Status, const uint8_t* payload, size_t len)>;
  bool Read(const Location& loc, NamespaceId ns, std::string_view key, Clock::time_point deadline, ReadDone done);

  bool connected() const { return connected_.load(); }
  // Waits until the first connection attempt has ended: true once connected,
  // false when it failed (the tier retries in the background) or at the
  // deadline.
  bool WaitConnected(Clock::time_point deadline);
  SharedTierCounters& counters() { return counters_; }
  const RemoteTierOptions& options() const { return opt_; }

 private:
  SharedTier(const RemoteTierOptions& o, std::string store_id, Source source, std::unique_ptr<RemoteIndex> index);
  void Run();
  // Uploads the segments of `batch` in order, the writes of all their parts
  // streamed through one window (shared_tier_upload.cc). `finished` counts
  // the segments from the front that are done: shared, or found gone. An
  // error stops the batch at its segment (retried later from there).
  struct PendingUpload;
  Status UploadBatch(const std::vector<std::pair<uint32_t, uint32_t>>& batch, size_t* finished);
  // The segment's summary; false when it has nothing to share (gone, or
  // every record replaced).
  Result<bool> PrepareUpload(PendingUpload* u);
  // Its summary object and catalog entry, once every part is written: others
  // see an upload only once it is whole.
  Status PublishUpload(PendingUpload& u);
  // Imports new catalog entries, drops vanished ones, enforces the budget,
  // and now and then sweeps orphans. Its loops over entries and objects stop
  // at Stop and at the first operation that timed out: each waits up to
  // op_timeout_ms, so a cluster gone mid-poll would otherwise hold the
  // worker, and Close, for that long per entry.
  Status Poll();
  // Removes part and summary objects whose base no catalog entry names and
  // that are older than orphan_grace_ms.
  Status SweepOrphans(const std::set<std::string>& catalogued_bases);
  std::shared_ptr<RadosClient> client();
  bool Stopping();

  RemoteTierOptions opt_;
  std::string store_id_;
  Source source_;
  std::unique_ptr<RemoteIndex> index_;
  SharedTierCounters counters_;
  std::atomic<bool> connected_{false};
  std::atomic<bool> connect_failed_{false};  // the last connection attempt failed

  std::shared_mutex client_mu_;  // readers issue under shared, Stop replaces under unique
  std::shared_ptr<RadosClient> client_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint32_t, uint32_t>> uploads_;
  Clock::time_point next_sweep_;  // worker thread only
  bool stop_ = false, stopped_ = false;
  std::thread worker_;

  std::mutex spec_mu_;
  std::unordered_map<NamespaceId, std::string> canonical_;  // from summaries' specs
};

}  // namespace kvtier::remote

#endif  // KVTIER_SRC_REMOTE_SHARED_TIER_H_
