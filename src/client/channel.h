// Channel: one connection of a client to the service, and what lives exactly
// as long as it: the socket, the staging memfd the service has mapped, the
// requests waiting for a reply, and the ids the service gave this
// connection's regions.
//
// Every request has a deadline. When it passes, the request completes with
// TimedOut at once, but the staging it holds stays reserved until the service
// answers or the connection is gone: the service may still be writing there.
// When the connection ends, every waiting request completes with IOError.
//
// Thread safety: every method is thread-safe. Completions run on the
// channel's reader or timer thread (or inline when a request cannot be sent)
// and must not block. A caller waiting in CallSync or Await reads the socket
// itself and completes only blocking calls' replies there (they only wake
// their waiter); every other reply it hands to the reader thread, so a
// completion never runs on a thread that may hold the caller's locks.
#ifndef KVTIER_SRC_CLIENT_CHANNEL_H_
#define KVTIER_SRC_CLIENT_CHANNEL_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "client/reply_wait.h"
#include "client/staging.h"
#include "kvtier/options.h"
#include "kvtier/store.h"
#include "util/thread_annotations.h"
#include "wire/frame_reader.h"
#include "wire/requests.h"
#include "wire/socket_io.h"
#include "wire/wire.h"

namespace kvtier::client {

class Channel {
 public:
  // The reply's status, and its body after the status (null when the
  // request failed on this side: timed out, connection lost).
  using Done = std::function<void(Status, wire::WireReader*)>;

  static Result<std::unique_ptr<Channel>> Open(const std::string& socket_path, const ServiceClientOptions& o);
  ~Channel();  // ends the connection; waiting requests complete with IOError
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Sends a request; `done` runs exactly once. `hold` is freed (back to
  // staging) when the service has answered or the channel is gone.
  void Call(wire::Op op, const wire::WireWriter& body, Clock::time_point deadline, Done done,
            Staging::Extent hold = {}, const std::vector<int>& fds = {});
  // Waits for the reply; its body (after the status) when OK.
  Result<std::string> CallSync(wire::Op op, const wire::WireWriter& body, Clock::time_point deadline,
                               const std::vector<int>& fds = {});
  // CallSync for a reply that carries descriptors (map_tier's): they are
  // moved to *fds when the reply is OK.
  Result<std::string> CallSyncTakingFds(wire::Op op, const wire::WireWriter& body, Clock::time_point deadline,
                                        std::vector<wire::UniqueFd>* fds);
  // Call for a caller that waits on `done`'s result right after, in Await (a
  // blocking Get or Put): `done` may run on that caller's thread while it
  // waits, so it must do no more than hand the result over.
  void CallForWaiter(wire::Op op, const wire::WireWriter& body, Clock::time_point deadline, Done done,
                     Staging::Extent hold = {});
  // Blocks until `w` is set, reading the socket itself meanwhile
  // (ReplyWait::Wait). `w` must be set by a CallForWaiter's or CallSync's
  // completion, which completes by the call's deadline.
  template <typename T>
  T Await(ReplyWait<T>& w) {
    return w.Wait(reply_spin_us_, [this] { Pump(/*on_caller=*/true); }, sock_.get());
  }

  bool alive() const { return alive_.load(); }
  uint32_t reply_spin_us() const { return reply_spin_us_; }
  size_t waiting() const;
  Staging& staging() { return *staging_; }
  uint32_t staging_region() const { return staging_region_; }
  const StoreDescription& description() const { return description_; }
  // Whether the service reads puts' payloads straight from this process's
  // memory (wire/peer_memory.h): what hello's reply said, until a put finds
  // that it no longer can (another library in this process named another
  // tracer, say) and StopMemoryReads sends the rest through staging.
  bool service_reads_memory() const { return reads_memory_.load(std::memory_order_relaxed); }
  void StopMemoryReads() { reads_memory_.store(false, std::memory_order_relaxed); }

  // A region the service mapped for this connection, by the client's address.
  void AddRegion(const void* base, uint64_t len, uint64_t file_offset, uint32_t id);
  void RemoveRegion(const void* base);
  // The region fragment for [p, p+n) when it lies in one registered region.
  bool Locate(const void* p, uint64_t n, wire::WireFragment* out) const;

 private:
  Channel(wire::UniqueFd sock, std::shared_ptr<wire::SharedRegion> staging);
  Status Hello(const ServiceClientOptions& o, Clock::time_point deadline);
  // Fills hello's memory probe, and names the service as this process's
  // tracer where Yama asks for one.
  void OfferMemoryProbe(wire::HelloRequest* req);
  // Call, `sync`: the completion only wakes a CallSync waiter.
  void Send(wire::Op op, const wire::WireWriter& body, Clock::time_point deadline, Done done,
            Staging::Extent hold, const std::vector<int>& fds, bool sync,
            std::shared_ptr<std::vector<wire::UniqueFd>> fds_out = nullptr);
  void ReadLoop();
  // Reads the replies the socket holds now and completes their requests.
  // `on_caller`: a spinning caller's turn, which returns at once when
  // another thread reads and defers all but blocking calls' replies to the
  // reader thread; else waits for the socket. False when the connection
  // failed (Fail has run).
  bool Pump(bool on_caller);
  // Completes the request a reply answers (or, `on_caller` and not a
  // blocking call's, defers it); false for a frame no service sends.
  bool Dispatch(wire::Frame& f, bool on_caller);
  // The replies a caller deferred, completed on the reader thread.
  void DispatchDeferred();
  void TimerLoop();
  // Ends the connection once: fails what waits.
  void Fail(const Status& why);

  struct Pending {
    Done done;
    Clock::time_point deadline;
    Staging::Extent hold;
    bool answered = false;  // done already ran (timed out); waiting only to free `hold`
    bool sync = false;      // CallSync's: its completion may run on any thread
    std::shared_ptr<std::vector<wire::UniqueFd>> fds_out;  // takes the reply's descriptors
  };

  wire::UniqueFd sock_;
  // Hello's reply, then replies, read by whichever thread holds read_mu_:
  // the reader thread when the socket is readable, or a caller spinning for
  // its reply (no receive timeout after hello).
  Mutex read_mu_;
  wire::FrameReader frames_ GUARDED_BY(read_mu_);
  wire::UniqueFd wake_fd_;  // an eventfd: deferred replies wait in deferred_
  uint32_t reply_spin_us_ = 0;  // set once by Open
  std::unique_ptr<Staging> staging_;
  uint32_t staging_region_ = 0;
  StoreDescription description_;
  std::atomic<bool> alive_{true};
  // Random bytes hello names for the service to read back: proof that the
  // pid it sees is this process. Lives as long as the connection.
  std::array<char, 16> probe_{};
  std::atomic<bool> reads_memory_{false};

  Mutex send_mu_;  // one frame at a time on the socket
  mutable Mutex mu_;
  std::condition_variable timer_cv_;
  std::unordered_map<uint64_t, Pending> pending_ GUARDED_BY(mu_);
  std::vector<wire::Frame> deferred_ GUARDED_BY(mu_);
  std::multimap<Clock::time_point, uint64_t> deadlines_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  bool stop_ GUARDED_BY(mu_) = false;
  Status dead_ GUARDED_BY(mu_);
  struct Region {
    uint64_t len, file_offset;
    uint32_t id;
  };
  std::map<uintptr_t, Region> regions_ GUARDED_BY(mu_);  // by base address
  std::thread reader_, timer_;
};

}  // namespace kvtier::client

#endif  // KVTIER_SRC_CLIENT_CHANNEL_H_
