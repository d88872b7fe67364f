// ServiceStore: the Store a client gets from Store::Open("unix:...") or
// Store::Open("auto:..."): every call goes to a kvtier service over its
// socket, payloads through shared memory (client/channel.h).
//
// It keeps what a new connection needs and replays it after the service
// restarted: the namespaces it registered and the memory registered with
// RegisterMemory. While the service is unreachable, calls fail at once with
// IOError (gets: a miss), and a new connection is tried at most every
// kRetryMs. For auto: a thread of its own watches the connection while no
// call does, so that a service that went is started again (and this
// client's namespaces and memory replayed) before the next call needs it.
//
// Thread safety: as Store.
#ifndef KVTIER_SRC_CLIENT_SERVICE_STORE_H_
#define KVTIER_SRC_CLIENT_SERVICE_STORE_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/channel.h"
#include "client/lent_tier.h"
#include "wire/messages.h"
#include "kvtier/store.h"
#include "util/thread_annotations.h"
#include "util/worker_pool.h"

namespace kvtier::client {

// "unix:PATH" -> PATH; "auto:DIR" -> DIR/kvtier.sock (starting a service
// for DIR when none answers). Anything else: NotFound.
Result<std::unique_ptr<Store>> OpenServiceStore(const std::string& target, const Options& options);

class ServiceStore final : public Store {
 public:
  // auto_dir: the folder of an auto: address (its service is started again
  // when found gone), empty for unix:.
  ServiceStore(std::string target, std::string socket_path, Options options, std::string auto_dir = "");
  ~ServiceStore() override;
  // The first connection; an error when the service cannot be reached.
  Status Connect();

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
  void PutAsync(NamespaceId ns, std::string_view key, std::span<const Fragment> payload, PutCallback done) override;
  void PutAsyncBorrowed(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                        PutCallback done) override;
  Result<size_t> Get(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out) override;
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
  Status RegisterMemory(void* base, size_t len, int fd, uint64_t offset) override;
  Status UnregisterMemory(void* base) override;
  Status Remove(NamespaceId ns, std::string_view key) override;
  Status RemoveBatch(NamespaceId ns, std::span<const std::string_view> keys, std::vector<bool>* present) override;
  Status Flush() override;
  Status EvictTo(uint64_t target_used_bytes) override;
  Status ShareNow(std::chrono::milliseconds timeout) override;
  Stats GetStats() override;
  std::vector<SegmentInfo> Segments() override;
  Result<VerifyReport> Verify(const VerifyOptions& options) override;
  Result<RecordInspection> InspectRecord(NamespaceId ns, std::string_view key) override;
  const std::string& dir() const override { return target_; }
  StoreDescription Description() const override;
  Status Close() override;

  // The service's RAM tier, lent for copies straight out of it (the GPU
  // path, src/cuda): its file's descriptor (read-only), where the blocks lie
  // in it, and the connection it was lent on. NotSupported where the
  // service does not lend it (no RAM tier, anonymous memory, tenancy).
  struct TierMapping {
    wire::UniqueFd fd;
    wire::TierMap map;
    uint64_t connection = 0;
  };
  Result<TierMapping> MapTier();
  // Pins blocks for the caller's copies, on `connection` (MapTier's):
  // Aborted when that connection is gone (the service restarted: map the
  // tier again). The caller checks each block against its checksum.
  Result<wire::TierLease> PinTier(uint64_t connection, NamespaceId ns, std::span<const std::string_view> keys);
  // PinTier of one key without waiting: `done` runs once, on the channel's
  // thread, with the lease (or why there is none) and the channel the pin
  // went on, which lives while `done` runs (for the unpin, or a read from
  // the service instead). `deadline` (kNoDeadline: the reply timeout) bounds
  // the reply as a get's does. False, with nothing sent and `done` not
  // taken, when `connection` is gone.
  using PinDone = std::function<void(Result<wire::TierLease>, Channel&)>;
  bool PinTierAsync(uint64_t connection, NamespaceId ns, std::string_view key, Clock::time_point deadline,
                    PinDone& done);
  // Releases a lease without waiting for the reply; a lease of a gone
  // connection was released with it.
  void UnpinTier(uint64_t connection, uint64_t lease);
  // The same on the channel a lease came on (PinTierAsync's).
  void UnpinTierOn(Channel& ch, uint64_t lease);
  // False once `connection` is gone (the service stopped or restarted, or
  // this client reconnected): a mapping of the tier lent on it should go.
  bool TierConnectionAlive(uint64_t connection);

 private:
  // A get's reply may trail its deadline by the time the service takes to
  // say TimedOut; past that the client says it.
  static constexpr auto kGetGrace = std::chrono::milliseconds(50);

  struct Memory {
    void* base;
    size_t len;
    wire::UniqueFd fd;
    uint64_t offset;
  };

  // The live channel, connecting (and replaying) when there is none.
  Result<std::shared_ptr<Channel>> Live();
  Status Replay(Channel& ch) REQUIRES(mu_);
  void StartAutoServiceAgain() REQUIRES(mu_);
  // auto: only, on watcher_: every kWatch, reconnects (Live) when the
  // connection is gone; returns when the store closes.
  void WatchAutoService();
  Clock::time_point OpDeadline() const;
  // How long before the reply to a request that reads or writes the
  // client's memory (put, get, get_batch) is given up the service must stop
  // starting on that memory: the time left for work under way to land.
  Clock::duration LandingMargin() const;
  Result<std::string> Call(wire::Op op, const wire::WireWriter& body, Clock::time_point deadline);
  // remove_batch, contains_batch or touch_batch over `keys`, in pieces;
  // `flags` (may be null for removes and touches) gets a flag per key.
  Status KeyFlagsCalls(wire::Op op, NamespaceId ns, std::span<const std::string_view> keys, std::vector<bool>* flags);
  // How a put's payload reaches the service.
  enum class Placed { kRegistered, kClientMemory, kStaging };
  // A put's payload as fragments of registered memory, of this process's
  // own memory where the service reads it and the payload is `borrowed`
  // (valid until the put completes), or, copied, of staging (waiting for
  // room until `room_deadline`).
  Result<Placed> PlacePut(Channel& ch, std::span<const Fragment> payload, bool borrowed,
                          Clock::time_point room_deadline, std::vector<wire::WireFragment>* frags,
                          Staging::Extent* hold);
  // `waiter`: a blocking caller's; when the request went out, the channel
  // it waits on with Channel::Await (its completion may then run on the
  // caller's thread). Null: an asynchronous call. `borrowed`: as PlacePut.
  // `from_reply`: sent while a reply completes, so it never waits for
  // staging room (blocking or not).
  void SubmitPut(NamespaceId ns, std::string_view key, std::span<const Fragment> payload, bool blocking,
                 bool borrowed, PutCallback done, std::shared_ptr<Channel>* waiter = nullptr,
                 bool from_reply = false);
  PutCallback RetriedThroughStaging(const std::shared_ptr<Channel>& ch, NamespaceId ns, std::string_view key,
                                    std::span<const Fragment> payload, bool blocking, PutCallback done);
  // `blocking`: a payload that needs staging waits for room in it (until
  // the request's deadline); an asynchronous get never waits: no room is a
  // miss.
  void SubmitGet(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                 Clock::time_point deadline, bool blocking, GetCallback done,
                 std::shared_ptr<Channel>* waiter = nullptr);
  // SubmitGet on `ch`; true when the request went out for a waiter (Await).
  bool SubmitGetOn(Channel& ch, NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                   Clock::time_point deadline, bool blocking, GetCallback done, bool for_waiter);
  // The live channel when it is `connection` (the one the tier was lent on).
  std::shared_ptr<Channel> TierChannel(uint64_t connection);
  // The helpers that copy get_batch groups out of staging (and hits out of
  // the lent tier), started on first use.
  WorkerPool& Copiers();
  // Whether every fragment lies in memory registered on the live channel
  // (the service then writes it itself).
  bool Registered(std::span<const MutableFragment> out);
  // GetBatch through the service: registered memory directly, the rest
  // through staging.
  std::vector<Result<size_t>> GetBatchServed(NamespaceId ns, std::span<const GetItem> items, Clock::time_point deadline);

  const std::string target_, socket_path_, auto_dir_;
  const Options opt_;
  std::once_flag copiers_once_;
  std::unique_ptr<WorkerPool> copiers_;  // set once under copiers_once_, then only read
  std::unique_ptr<LentTier> lent_;  // ServiceClientOptions::read_lent_tier; set at construction
  std::atomic<bool> closed_{false};
  mutable Mutex mu_;
  std::shared_ptr<Channel> ch_ GUARDED_BY(mu_);
  uint64_t connections_ GUARDED_BY(mu_) = 0;  // ch_'s serial number (MapTier's `connection`)
  Clock::time_point next_try_ GUARDED_BY(mu_){};
  std::shared_ptr<std::atomic<bool>> auto_started_ GUARDED_BY(mu_);  // left yet? (StartAutoServiceAgain)
  std::thread watcher_ GUARDED_BY(mu_);  // auto: only, from the first connection; joined by Close
  Mutex watch_mu_;
  std::condition_variable watch_cv_;  // Close wakes the watcher
  std::vector<NamespaceSpec> specs_ GUARDED_BY(mu_);
  std::vector<Memory> memory_ GUARDED_BY(mu_);
  StoreDescription description_ GUARDED_BY(mu_);
};

}  // namespace kvtier::client

#endif  // KVTIER_SRC_CLIENT_SERVICE_STORE_H_
