// Connection: one client of the service. Its reader thread takes frames off
// the socket and answers them (lookups and namespace calls at once; puts and
// gets by handing them to the store, whose callbacks queue the replies), and
// its writer thread sends the queued replies, so that no store thread ever
// waits on a client's socket.
//
// A client that goes away (EOF, error, a malformed header) ends the reader;
// the connection then waits for its requests still in the store, and only
// after that unmaps its regions: the store never writes into memory that is
// gone.
//
// Thread safety: Start, Shutdown and Join from the service's thread; the
// rest runs on the connection's own threads and the store's callbacks.
#ifndef KVTIER_SRC_SERVICE_CONNECTION_H_
#define KVTIER_SRC_SERVICE_CONNECTION_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvtier/service.h"
#include "kvtier/store.h"
#include "service/namespace_access.h"
#include "service/work_pool.h"
#include "store/block_sink.h"
#include "tier/ram_tier.h"
#include "util/copy_checksum.h"
#include "util/thread_annotations.h"
#include "util/worker_pool.h"
#include "wire/frame_reader.h"
#include "wire/peer_memory.h"
#include "wire/region.h"
#include "wire/requests.h"
#include "wire/socket_io.h"
#include "wire/wire.h"

namespace kvtier::service {

// What every connection shares.
struct ServerCore {
  Store* store = nullptr;
  BlockSink* sink = nullptr;  // null: blocking puts fall back to PutAsyncBorrowed
  ServiceOptions opt;
  NamespaceAccess access;
  WorkPool puts{4};  // blocking puts waiting for the write queue
  WorkPool gets;     // gets of large blocks (their copies out of the RAM tier)
  // ServiceOptions::reader_spin_us resolved, and how many readers may poll
  // at once; `spinning` counts those that do.
  const uint32_t spin_us;
  const uint32_t max_spinning;
  std::atomic<uint32_t> spinning{0};
  std::atomic<uint64_t> polled{0};  // frames a polling reader caught
  std::atomic<uint64_t> requests{0}, malformed{0}, over_cap{0}, regions{0}, pooled_gets{0},
      pooled_puts{0}, client_memory_puts{0}, client_memory_split_puts{0};
  std::atomic<uint64_t> populated{0};  // bytes of clients' regions mapped ahead of use
  std::atomic<uint64_t> tier_maps{0}, tier_lent_blocks{0}, tier_pinned_bytes{0};
  // Maps a region's present pages ahead of its first copy, on `populate`,
  // step by step while the region is still mapped by someone (`owner`: the
  // connection, for the pool's turns).
  void PopulateAhead(const std::shared_ptr<wire::SharedRegion>& region, uint64_t owner);
  void PopulateFrom(std::weak_ptr<wire::SharedRegion> weak, uint64_t offset, uint64_t owner);
  void Log(const std::string& line) const;

  ServerCore(Store* s, const ServiceOptions& o, uid_t self)
      : store(s), sink(BlockSinkOf(s)), opt(o), access(o.tenancy, self), gets(GetThreads()),
        spin_us(SpinMicros(o.reader_spin_us)), max_spinning(std::clamp(Cores() / 8, 1u, 4u)) {}
  // One per core, at most 16: a copy out of memory takes one core.
  static unsigned GetThreads();
  static unsigned Cores();
  static uint32_t SpinMicros(int32_t asked);
  // Helpers that read one put's payload from a client's memory beside the
  // thread that took it, while few such reads run (ReadsToSplit): the kernel
  // pins each 4 KiB page it reads, so one thread reads at about 0.4x of a
  // memcpy (bench/peer_read_bench.cc).
  WorkerPool client_reads{ClientReadHelpers(opt.client_read_threads), "kvtier-peerread"};
  std::atomic<uint32_t> client_reads_running{0};
  static unsigned ClientReadHelpers(int32_t threads);
  // Last: stopped first, before the counters its jobs add to.
  WorkPool populate{1};
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ServerCore* core, wire::UniqueFd sock, Peer peer, uint64_t id);
  ~Connection();
  void Start();
  // Ends the connection: the reader stops at once, the rest follows.
  void Shutdown();
  void Join();
  bool finished() const { return finished_.load(); }

 private:
  // Payload bytes of a request, resolved into this connection's regions.
  struct Resolved {
    std::vector<Fragment> in;
    std::vector<MutableFragment> out;
    std::vector<std::shared_ptr<wire::SharedRegion>> keep;  // mapped while the store uses them
    uint64_t bytes = 0;
  };

  void ReadLoop();
  // The next frame polled for while this client waits for a reply or was
  // just answered (ServiceOptions::reader_spin_us): true with `*st` set when
  // the poll ended on a frame or an error, false to wait for it asleep.
  bool PollForNext(wire::Frame* f, Status* st);
  void WriteLoop();
  // Answers one frame; a non-OK status closes the connection.
  Status Handle(wire::Frame& f);
  void Reply(const wire::FrameHeader& req, const Status& st, const wire::WireWriter* body = nullptr);
  void Send(std::string frame);
  // A reply carrying a descriptor: sent by the reader itself, after what is
  // queued before it.
  void ReplyWithFd(const wire::FrameHeader& req, const wire::WireWriter& body, int fd);

  Status OnHello(wire::Frame& f);
  Status OnRegisterRegion(wire::Frame& f);
  void OnPut(const wire::FrameHeader& h, std::string_view body);
  // A put whose payload lies in the client's own memory: read once, into a
  // RAM-tier reservation (connection_client_memory.cc).
  void PutFromClientMemory(const wire::FrameHeader& h, wire::PutRequest req, Clock::time_point start_by);
  // Such a put once admitted: what the reader hands to the thread that reads it.
  struct ClientMemoryPut {
    wire::FrameHeader h;
    NamespaceId ns = 0;
    std::string key;
    std::vector<Fragment> remote;  // addresses in the client's process
    uint64_t bytes = 0;
    bool blocking = false;
    Clock::time_point start_by;
  };
  void ReadClientMemoryAndPut(const ClientMemoryPut& p);
  // Reads it into `local`, hashing it into `sum` (its marks included).
  Status ReadPayload(std::span<const Fragment> remote, std::span<const MutableFragment> local, Xxh3Copy* sum);
  void OnGet(const wire::FrameHeader& h, std::string_view body);
  void OnGetBatch(const wire::FrameHeader& h, std::string_view body);
  void OnNamespaceCall(const wire::FrameHeader& h, std::string_view body);
  void OnLookup(const wire::FrameHeader& h, std::string_view body);
  void OnKeyFlags(const wire::FrameHeader& h, std::string_view body);
  void OnAdmin(const wire::FrameHeader& h, std::string_view body);
  // map_tier, pin_tier, unpin_tier (connection_tier.cc).
  void OnTier(const wire::FrameHeader& h, std::string_view body);
  Status MapTierFor(wire::WireWriter* w, wire::UniqueFd* fd);
  void PinTier(const wire::FrameHeader& h, std::string_view body);
  // Releases every lease (the connection's end).
  void ReleaseLeases();
  // True when the body parsed; else answers InvalidArgument (malformed).
  bool Parsed(const wire::FrameHeader& h, const Status& st);
  Result<Resolved> Resolve(const std::vector<wire::WireFragment>& frags, bool for_output);
  // A namespace id the peer may use, or NotFound as for an unknown one.
  Status CheckNamespace(NamespaceId ns) const;

  // Requests handed to the store and not yet answered.
  bool Admit(uint64_t bytes, bool is_put);
  // Admit for a put of `bytes`; over the client's caps, answers NotAdmitted.
  bool AdmitPut(const wire::FrameHeader& h, uint64_t bytes);
  void Finish(uint64_t bytes);

  ServerCore* const core_;
  wire::UniqueFd sock_;
  wire::FrameReader frames_;  // reader thread only; waits between frames without end
  const Peer peer_;
  const uint64_t id_;
  std::string name_;
  bool hello_ = false;  // reader thread only
  // Set by hello on the reader thread before any put is read, constant
  // after: null where the service cannot read this client's memory.
  std::shared_ptr<const wire::PeerMemory> peer_memory_;

  // The RAM tier lent to this client: reader thread only (its requests are
  // answered there; ReadLoop releases the leases when the client goes).
  struct Lease {
    std::vector<RamTier::Pin> pins;
    uint64_t bytes = 0;
  };
  bool tier_mapped_ = false;
  std::unordered_map<uint64_t, Lease> leases_;
  uint64_t next_lease_ = 1, pinned_bytes_ = 0;
  uint64_t requests_ = 0;

  Mutex regions_mu_;
  std::unordered_map<uint32_t, std::shared_ptr<wire::SharedRegion>> regions_ GUARDED_BY(regions_mu_);
  uint32_t next_region_ GUARDED_BY(regions_mu_) = 1;

  Mutex inflight_mu_;
  std::condition_variable idle_cv_;
  uint64_t inflight_bytes_ GUARDED_BY(inflight_mu_) = 0;
  uint64_t inflight_requests_ GUARDED_BY(inflight_mu_) = 0;
  // For the reader's poll, without the lock: requests in the store, and
  // when the last reply was sent (steady clock, ns).
  std::atomic<uint64_t> busy_{0};
  std::atomic<int64_t> answered_ns_{0};

  // One sender at a time on the socket, claimed with `sending_`. A reply
  // with nothing queued before it goes out on the thread that made it: the
  // reader sends its own (a lookup then costs no hand-over), and a store
  // callback sends what the socket takes without waiting (a put or get then
  // costs no wake-up of the writer thread). The writer thread sends the
  // queue: what came while another sent, and the rest of a frame the socket
  // did not take at once, kept at the queue's front.
  std::thread::id reader_id_;
  Mutex out_mu_;
  std::condition_variable out_cv_;
  std::deque<std::string> out_ GUARDED_BY(out_mu_);
  bool sending_ GUARDED_BY(out_mu_) = false;
  bool out_closed_ GUARDED_BY(out_mu_) = false;
  // ReplyWithFd's wait for the socket to itself (the senders wake it).
  std::condition_variable fd_cv_;
  bool fd_waiting_ GUARDED_BY(out_mu_) = false;

  std::atomic<bool> finished_{false};
  std::thread reader_, writer_;
};

}  // namespace kvtier::service

#endif  // KVTIER_SRC_SERVICE_CONNECTION_H_
