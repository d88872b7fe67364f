#include "client/service_store.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <thread>

#include "client/auto_start.h"
#include "format/record.h"
#include "util/clock.h"
#include "util/fragment_walk.h"
#include "wire/messages.h"
#include "wire/requests.h"

namespace kvtier::client {

namespace {
constexpr auto kRetry = std::chrono::milliseconds(200);
constexpr auto kWatch = std::chrono::milliseconds(250);  // auto: clients' look at an idle connection

uint64_t TotalOf(std::span<const Fragment> f) {
  uint64_t n = 0;
  for (const Fragment& x : f) n += x.size;
  return n;
}
uint64_t TotalOf(std::span<const MutableFragment> f) {
  uint64_t n = 0;
  for (const MutableFragment& x : f) n += x.size;
  return n;
}

// Completes `done` once, tolerating an empty callback.
void FinishPut(const PutCallback& done, Status st) {
  if (done) done(std::move(st));
}
}  // namespace

ServiceStore::ServiceStore(std::string target, std::string socket_path, Options options, std::string auto_dir)
    : target_(std::move(target)),
      socket_path_(std::move(socket_path)),
      auto_dir_(std::move(auto_dir)),
      opt_(std::move(options)) {
  if (opt_.client.read_lent_tier) lent_ = std::make_unique<LentTier>(this);
}

bool ServiceStore::Registered(std::span<const MutableFragment> out) {
  std::shared_ptr<Channel> ch;
  {
    MutexLock l(&mu_);
    ch = ch_;
  }
  if (ch == nullptr || out.empty()) return false;
  wire::WireFragment wf;
  for (const MutableFragment& f : out)
    if (!ch->Locate(f.data, f.size, &wf)) return false;
  return true;
}

ServiceStore::~ServiceStore() { Close().IgnoreError(); }

Status ServiceStore::Connect() {
  auto ch = Live();
  return ch.status();
}

Result<std::shared_ptr<Channel>> ServiceStore::Live() {
  if (closed_.load()) return Status::Closed("store is closed");
  MutexLock l(&mu_);
  if (ch_ != nullptr && ch_->alive()) return ch_;
  if (ch_ != nullptr) ch_.reset();  // its requests have all completed with errors
  const Clock::time_point now = Clock::now();
  if (now < next_try_)
    return Status::IOError("the kvtier service at " + socket_path_ + " is not reachable (retrying)");
  next_try_ = now + kRetry;
  auto opened = Channel::Open(socket_path_, opt_.client);
  if (!opened.ok()) {
    if (connections_ > 0 && opened.status().code() == Code::kNotFound) StartAutoServiceAgain();
    return opened.status().WithContext("connecting to the kvtier service at " + socket_path_);
  }
  std::shared_ptr<Channel> ch(std::move(opened).value());
  KVTIER_RETURN_IF_ERROR(Replay(*ch));
  description_ = ch->description();
  ch_ = ch;
  ++connections_;
  // Not once Close has begun: it takes the watcher under mu_ after closed_.
  if (!auto_dir_.empty() && !watcher_.joinable() && !closed_.load())
    watcher_ = std::thread([this] { WatchAutoService(); });
  return ch;
}

void ServiceStore::WatchAutoService() {
  for (;;) {
    {
      MutexLock l(&watch_mu_);
      if (!closed_.load()) l.WaitUntil(watch_cv_, Clock::now() + kWatch);
    }
    if (closed_.load()) return;
    bool gone = false;
    {
      MutexLock l(&mu_);
      gone = ch_ == nullptr || !ch_->alive();
    }
    if (gone) Live().status().IgnoreError();  // an error is retried at the next look, as a call would
  }
}

// An auto: service that has left (idle while this client was not calling,
// killed, or exited for a supervisor it does not have: `kvtier serve`'s
// --on-index-failure) is started again by the first client that finds it
// gone, as at open; the next tries connect to it. Not while the one this
// client started last is still running (starting up: opening the store).
void ServiceStore::StartAutoServiceAgain() {
  if (auto_dir_.empty()) return;
  if (auto_started_ != nullptr && !auto_started_->load()) return;
  auto started = StartService(auto_dir_, socket_path_, opt_.client);
  if (started.ok()) auto_started_ = std::move(started).value();
}

// A new connection knows nothing: register this client's namespaces (the
// service's tenancy needs them) and memory again.
Status ServiceStore::Replay(Channel& ch) {
  const Clock::time_point deadline = OpDeadline();
  for (const NamespaceSpec& spec : specs_) {
    wire::WireWriter w;
    wire::Encode(w, wire::SpecRequest{spec});
    KVTIER_RETURN_IF_ERROR(ch.CallSync(wire::Op::kRegisterNamespace, w, deadline).status());
  }
  for (const Memory& m : memory_) {
    wire::WireWriter w;
    wire::Encode(w, wire::RegisterRegionRequest{m.len});
    auto body = ch.CallSync(wire::Op::kRegisterRegion, w, deadline, {m.fd.get()});
    if (!body.ok()) return body.status().WithContext("registering memory with the service");
    wire::WireReader r(*body);
    const uint32_t id = r.U32();
    KVTIER_RETURN_IF_ERROR(r.Finish("register_region reply"));
    ch.AddRegion(m.base, m.len, m.offset, id);
  }
  return Status::OK();
}

Clock::time_point ServiceStore::OpDeadline() const {
  return Clock::now() + std::chrono::milliseconds(opt_.client.op_timeout_ms);
}

Clock::duration ServiceStore::LandingMargin() const {
  return std::min<Clock::duration>(std::chrono::seconds(5), std::chrono::milliseconds(opt_.client.op_timeout_ms) / 4);
}

Result<std::string> ServiceStore::Call(wire::Op op, const wire::WireWriter& body, Clock::time_point deadline) {
  auto ch = Live();
  if (!ch.ok()) return ch.status();
  return (*ch)->CallSync(op, body, deadline);
}

// ---- Namespaces ----

Result<NamespaceId> ServiceStore::RegisterNamespace(const NamespaceSpec& spec) {
  KVTIER_RETURN_IF_ERROR(spec.Validate());
  wire::WireWriter w;
  wire::Encode(w, wire::SpecRequest{spec});
  auto body = Call(wire::Op::kRegisterNamespace, w, OpDeadline());
  if (!body.ok()) return body.status();
  wire::WireReader r(*body);
  const NamespaceId id = r.U64();
  KVTIER_RETURN_IF_ERROR(r.Finish("register_namespace reply"));
  MutexLock l(&mu_);
  bool known = false;
  for (const NamespaceSpec& s : specs_) known |= s.Fingerprint() == spec.Fingerprint();
  if (!known) specs_.push_back(spec);
  return id;
}

Result<NamespaceId> ServiceStore::FindNamespace(std::string_view name_or_hex) {
  wire::WireWriter w;
  wire::Encode(w, wire::NameRequest{std::string(name_or_hex)});
  auto body = Call(wire::Op::kFindNamespace, w, OpDeadline());
  if (!body.ok()) return body.status();
  wire::WireReader r(*body);
  const NamespaceId id = r.U64();
  KVTIER_RETURN_IF_ERROR(r.Finish("find_namespace reply"));
  return id;
}

Result<std::vector<NamespaceInfo>> ServiceStore::ListNamespaces(NamespaceListing listing,
                                                                 const std::function<void(uint64_t, uint64_t)>&) {
  wire::WireWriter w;
  wire::Encode(w, wire::ListNamespacesRequest{listing == NamespaceListing::kWithCounts});
  auto body = Call(wire::Op::kListNamespaces, w, OpDeadline());
  if (!body.ok()) return body.status();
  wire::WireReader r(*body);
  const uint32_t n = r.Count(wire::kMaxListItems, 8);
  std::vector<NamespaceInfo> out(n);
  for (NamespaceInfo& i : out) wire::Decode(r, &i);
  KVTIER_RETURN_IF_ERROR(r.Finish("list_namespaces reply"));
  return out;
}

Status ServiceStore::RemoveNamespace(NamespaceId ns) {
  wire::WireWriter w;
  wire::Encode(w, wire::NamespaceRequest{ns});
  return Call(wire::Op::kRemoveNamespace, w, OpDeadline()).status();
}

// ---- Puts ----

Result<ServiceStore::Placed> ServiceStore::PlacePut(Channel& ch, std::span<const Fragment> payload, bool borrowed,
                                                    Clock::time_point room_deadline,
                                                    std::vector<wire::WireFragment>* frags, Staging::Extent* hold) {
  bool shared = !payload.empty() && payload.size() <= wire::kMaxFragments;
  for (const Fragment& f : payload) {
    wire::WireFragment wf;
    if (!shared || !ch.Locate(f.data, f.size, &wf)) {
      shared = false;
      break;
    }
    frags->push_back(wf);
  }
  if (shared) return Placed::kRegistered;
  frags->clear();
  if (borrowed && ch.service_reads_memory() && !payload.empty() && payload.size() <= wire::kMaxFragments) {
    for (const Fragment& f : payload)
      frags->push_back(wire::WireFragment{wire::kClientMemoryRegion, reinterpret_cast<uintptr_t>(f.data), f.size});
    return Placed::kClientMemory;
  }
  const uint64_t total = TotalOf(payload);
  *hold = ch.staging().Allocate(total, room_deadline);
  if (!*hold) return Status::NotAdmitted("the client's staging (" + std::to_string(opt_.client.staging_bytes) +
                                         " bytes) has no room for " + std::to_string(total) + " bytes");
  uint8_t* dst = ch.staging().data(*hold);
  for (const Fragment& f : payload) {
    if (f.size != 0) std::memcpy(dst, f.data, f.size);
    dst += f.size;
  }
  frags->push_back(wire::WireFragment{ch.staging_region(), hold->offset, total});
  return Placed::kStaging;
}

void ServiceStore::SubmitPut(NamespaceId ns, std::string_view key, std::span<const Fragment> payload, bool blocking,
                             bool borrowed, PutCallback done, std::shared_ptr<Channel>* waiter, bool from_reply) {
  if (opt_.read_only) return FinishPut(done, Status::NotSupported("store opened read-only"));
  for (const Fragment& f : payload)
    if (f.data == nullptr && f.size != 0) return FinishPut(done, Status::InvalidArgument("fragment with null data"));
  auto ch = Live();
  if (!ch.ok()) return FinishPut(done, ch.status());
  const Clock::time_point deadline = OpDeadline();
  std::vector<wire::WireFragment> frags;
  Staging::Extent hold;
  auto placed = PlacePut(**ch, payload, borrowed, blocking && !from_reply ? deadline : Clock::now(), &frags, &hold);
  if (!placed.ok()) return FinishPut(done, placed.status());
  if (*placed == Placed::kClientMemory) done = RetriedThroughStaging(*ch, ns, key, payload, blocking, std::move(done));
  wire::PutRequest req;
  req.ns = ns;
  req.key.assign(key);
  req.blocking = blocking;
  // The service reads registered memory itself: past this it starts no
  // longer, so a reply this client gave up on cannot be followed by a read of
  // memory its caller has reused.
  req.start_by_ns = MonotonicNs(deadline - LandingMargin());
  req.payload = std::move(frags);
  wire::WireWriter w;
  wire::Encode(w, req);
  Channel::Done finish = [done = std::move(done)](Status s, wire::WireReader*) { FinishPut(done, s); };
  if (waiter == nullptr) return (*ch)->Call(wire::Op::kPut, w, deadline, std::move(finish), hold);
  *waiter = *ch;
  (*ch)->CallForWaiter(wire::Op::kPut, w, deadline, std::move(finish), hold);
}

// A put the service could not read from this process's memory (it said
// NotSupported before reading anything) goes again through staging, and so
// do this connection's later puts. Sent from wherever the reply completes,
// so it never waits for staging room: none is NotAdmitted.
PutCallback ServiceStore::RetriedThroughStaging(const std::shared_ptr<Channel>& ch, NamespaceId ns,
                                                std::string_view key, std::span<const Fragment> payload,
                                                bool blocking, PutCallback done) {
  std::weak_ptr<Channel> weak = ch;
  return [this, weak, ns, key = std::string(key), payload = std::vector<Fragment>(payload.begin(), payload.end()),
          blocking, done = std::move(done)](Status s) mutable {
    if (s.code() != Code::kNotSupported) return FinishPut(done, s);
    if (auto c = weak.lock()) c->StopMemoryReads();
    SubmitPut(ns, key, payload, blocking, /*borrowed=*/false, std::move(done), nullptr, /*from_reply=*/true);
  };
}

Status ServiceStore::Put(NamespaceId ns, std::string_view key, std::span<const Fragment> payload) {
  auto w = ReplyWait<Status>::Make();
  std::shared_ptr<Channel> ch;
  SubmitPut(ns, key, payload, /*blocking=*/true, /*borrowed=*/true, [w](Status st) { w->Set(std::move(st)); }, &ch);
  return ch != nullptr ? ch->Await(*w) : w->Wait(0);  // no channel: it completed without being sent
}

std::vector<Status> ServiceStore::PutBatch(NamespaceId ns, std::span<const PutItem> items) {
  std::vector<std::promise<Status>> ps(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    SubmitPut(ns, items[i].key, items[i].payload, /*blocking=*/true, /*borrowed=*/true,
              [&ps, i](Status st) { ps[i].set_value(std::move(st)); });
  std::vector<Status> out;
  for (auto& p : ps) out.push_back(p.get_future().get());
  return out;
}

void ServiceStore::PutAsync(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                            PutCallback done) {
  SubmitPut(ns, key, payload, /*blocking=*/false, /*borrowed=*/false, std::move(done));
}

void ServiceStore::PutAsyncBorrowed(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                                    PutCallback done) {
  SubmitPut(ns, key, payload, /*blocking=*/false, /*borrowed=*/true, std::move(done));
}

// ---- Gets ----

void ServiceStore::GetAsync(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                            Clock::time_point deadline, GetCallback done) {
  // One copy from the lent tier instead of two through staging; what it
  // does not serve is read from the service on the channel the pin used.
  if (lent_ != nullptr && !Registered(out)) {
    LentTier::NotServed from_service = [this, ns, k = std::string(key), deadline](
                                           Channel* ch, std::span<const MutableFragment> dst, GetCallback cb) {
      if (ch == nullptr) return SubmitGet(ns, k, dst, deadline, /*blocking=*/false, std::move(cb));
      SubmitGetOn(*ch, ns, k, dst, deadline, /*blocking=*/false, std::move(cb), /*for_waiter=*/false);
    };
    if (lent_->ReadAsync(ns, key, out, deadline, &Copiers(), done, std::move(from_service))) return;
  }
  SubmitGet(ns, key, out, deadline, /*blocking=*/false, std::move(done));
}

void ServiceStore::SubmitGet(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                             Clock::time_point deadline, bool blocking, GetCallback done,
                             std::shared_ptr<Channel>* waiter) {
  auto ch = Live();
  if (!ch.ok()) {
    if (done) done(ch.status());
    return;
  }
  if (SubmitGetOn(**ch, ns, key, out, deadline, blocking, std::move(done), waiter != nullptr)) *waiter = *ch;
}

bool ServiceStore::SubmitGetOn(Channel& ch, NamespaceId ns, std::string_view key,
                               std::span<const MutableFragment> out, Clock::time_point deadline, bool blocking,
                               GetCallback done, bool for_waiter) {
  auto finish = [&done](Result<size_t> r) {
    if (done) done(std::move(r));
    return false;
  };
  const Clock::time_point now = Clock::now();
  // The service writes registered memory itself, so it must be done with
  // `out` before this client stops waiting for its reply: a caller's
  // deadline (after which the store never touches `out`) is kept before the
  // reply timeout, and without one the service starts no read after the
  // landing margin before it (a read under way then has the margin to land).
  const Clock::time_point reply_by = OpDeadline();
  if (deadline != kNoDeadline) deadline = std::min(deadline, reply_by - kGetGrace);
  if (deadline <= now) return finish(Status::TimedOut("get deadline passed before it was sent"));
  const Clock::time_point op_deadline = deadline == kNoDeadline ? reply_by : deadline + kGetGrace;
  const uint64_t cap = TotalOf(out);
  std::vector<wire::WireFragment> frags;
  bool shared = !out.empty() && out.size() <= wire::kMaxFragments;
  for (const MutableFragment& f : out) {
    wire::WireFragment wf;
    if (!shared || !ch.Locate(f.data, f.size, &wf)) {
      shared = false;
      break;
    }
    frags.push_back(wf);
  }
  Staging::Extent hold;
  if (!shared) {
    frags.clear();
    if (cap > opt_.client.staging_bytes) {
      return finish(Status::NotAdmitted("a get into " + std::to_string(cap) + " bytes of memory not registered with "
                                        "the store needs staging, and the client's staging holds " +
                                        std::to_string(opt_.client.staging_bytes) +
                                        " (register the memory, or raise client.staging_bytes)"));
    }
    hold = ch.staging().Allocate(cap, blocking ? op_deadline : now);
    if (!hold) return finish(Status::TimedOut("the client's staging has no room for this get"));
    frags.push_back(wire::WireFragment{ch.staging_region(), hold.offset, cap});
  }
  wire::GetRequest req;
  req.ns = ns;
  req.key.assign(key);
  // CLOCK_MONOTONIC is one clock for every process on the machine: the
  // service's store stops touching `out` at this very instant.
  req.deadline_ns = deadline == kNoDeadline ? -1 : MonotonicNs(deadline);
  req.start_by_ns = deadline == kNoDeadline ? MonotonicNs(reply_by - LandingMargin()) : -1;
  req.out = std::move(frags);
  wire::WireWriter w;
  wire::Encode(w, req);
  std::vector<MutableFragment> dst(out.begin(), out.end());
  // The staging stays mapped while the callback runs: the channel joins the
  // thread that runs it before it goes (so the callback must not own it).
  const uint8_t* src = shared ? nullptr : ch.staging().data(hold);
  Channel::Done complete = [done = std::move(done), dst = std::move(dst), src](Status st, wire::WireReader* r) {
    if (!st.ok()) {
      if (done) done(st);
      return;
    }
    const uint64_t n = r->U64();
    st = r->Finish("get reply");
    if (st.ok() && src != nullptr) {
      // Out of staging into the caller's buffers, in order.
      uint64_t left = n;
      const uint8_t* p = src;
      for (const MutableFragment& f : dst) {
        const uint64_t c = std::min<uint64_t>(left, f.size);
        if (c != 0) std::memcpy(f.data, p, c);
        p += c;
        left -= c;
      }
    }
    if (done) done(st.ok() ? Result<size_t>(static_cast<size_t>(n)) : Result<size_t>(st));
  };
  if (!for_waiter) {
    ch.Call(wire::Op::kGet, w, op_deadline, std::move(complete), hold);
    return false;
  }
  ch.CallForWaiter(wire::Op::kGet, w, op_deadline, std::move(complete), hold);
  return true;
}

Result<size_t> ServiceStore::Get(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out) {
  if (lent_ != nullptr && !Registered(out)) {  // one copy from the lent tier instead of two through staging
    const GetItem item{key, out};
    Result<size_t> r(Status::Aborted("not run"));
    if (lent_->Read(ns, std::span<const GetItem>(&item, 1), std::span<Result<size_t>>(&r, 1), nullptr).empty())
      return r;
  }
  auto w = ReplyWait<Result<size_t>>::Make();
  std::shared_ptr<Channel> ch;
  SubmitGet(ns, key, out, kNoDeadline, /*blocking=*/true, [w](Result<size_t> r) { w->Set(std::move(r)); }, &ch);
  return ch != nullptr ? ch->Await(*w) : w->Wait(0);  // no channel: it completed without being sent
}

namespace {

// One piece of a get_batch group's copy out of staging.
struct CopyOut {
  uint8_t* dst;
  const uint8_t* src;
  size_t n;
  void Run() const { std::memcpy(dst, src, n); }
};

// Cuts the copy of an `n`-byte block at `src` into the caller's fragments,
// in order, into pieces small enough to share out among the copy threads.
void CutCopyOut(const uint8_t* src, uint64_t n, std::span<const MutableFragment> out, std::vector<CopyOut>* pieces) {
  const Fragment block{src, n};
  ForEachOverlap(std::span<const Fragment>(&block, 1), out, size_t{1} << 20,
                 [pieces](uint8_t* dst, const uint8_t* from, size_t len) { pieces->push_back({dst, from, len}); });
}

}  // namespace

WorkerPool& ServiceStore::Copiers() {
  std::call_once(copiers_once_, [this] {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const unsigned threads = opt_.client.copy_threads != 0 ? opt_.client.copy_threads : std::min(cores, 8u);
    copiers_ = std::make_unique<WorkerPool>(threads - 1, "kvtier-copyout");
  });
  return *copiers_;
}

std::vector<Result<size_t>> ServiceStore::GetBatch(NamespaceId ns, std::span<const GetItem> items,
                                                   Clock::time_point deadline) {
  if (lent_ == nullptr || (deadline != kNoDeadline && Clock::now() >= deadline)) return GetBatchServed(ns, items, deadline);
  // Items into memory not registered: one copy each from the lent tier,
  // instead of two through staging; what it does not hold, and the items
  // in registered memory (which the service fills itself), from the service.
  std::vector<size_t> unregistered, served;
  for (size_t i = 0; i < items.size(); ++i) (Registered(items[i].out) ? served : unregistered).push_back(i);
  if (unregistered.empty()) return GetBatchServed(ns, items, deadline);
  std::vector<Result<size_t>> out(items.size(), Result<size_t>(Status::Aborted("not run")));
  std::vector<GetItem> sub;
  for (size_t i : unregistered) sub.push_back(items[i]);
  std::vector<Result<size_t>> got(sub.size(), Result<size_t>(Status::Aborted("not run")));
  std::vector<size_t> rest = lent_->Read(ns, sub, got, sub.size() > 1 ? &Copiers() : nullptr);
  for (size_t k = 0; k < sub.size(); ++k) out[unregistered[k]] = std::move(got[k]);
  for (size_t k : rest) served.push_back(unregistered[k]);
  if (served.empty()) return out;
  std::sort(served.begin(), served.end());
  sub.clear();
  for (size_t i : served) sub.push_back(items[i]);
  got = GetBatchServed(ns, sub, deadline);
  for (size_t k = 0; k < served.size(); ++k) out[served[k]] = std::move(got[k]);
  return out;
}

std::vector<Result<size_t>> ServiceStore::GetBatchServed(NamespaceId ns, std::span<const GetItem> items,
                                                         Clock::time_point deadline) {
  std::vector<Result<size_t>> out(items.size(), Result<size_t>(Status::Aborted("not run")));
  if (deadline != kNoDeadline && Clock::now() >= deadline) {
    out.assign(items.size(), Status::TimedOut("get_batch deadline passed before it was sent"));
    return out;
  }

  Mutex mu;
  std::condition_variable cv;
  size_t inflight = 0;
  auto arrive = [&](size_t i, Result<size_t> r) {
    MutexLock l(&mu);
    out[i] = std::move(r);
    --inflight;
    cv.notify_all();
  };
  auto ch = Live();
  // Items go to the service in get_batch requests, which it runs as the
  // store's GetBatch (RAM hits copied on several threads): those in
  // registered memory land there directly; the others land in a group's
  // extent of the staging and are copied out when the group is answered,
  // while the next group is served. What a request cannot carry goes alone.
  std::vector<size_t> direct, staged, single;
  std::vector<std::vector<wire::WireFragment>> located(items.size());
  std::vector<uint64_t> caps(items.size());  // each item's destination bytes
  const uint64_t staging_bytes = opt_.client.staging_bytes;
  for (size_t i = 0; i < items.size(); ++i) {
    const GetItem& it = items[i];
    const bool sendable = ch.ok() && !it.out.empty() && it.out.size() <= wire::kMaxFragments && !it.key.empty() &&
                          it.key.size() <= format::kMaxKeyBytes;
    bool shared = sendable;
    for (size_t f = 0; shared && f < it.out.size(); ++f) {
      wire::WireFragment wf;
      shared = (*ch)->Locate(it.out[f].data, it.out[f].size, &wf);
      located[i].push_back(wf);
    }
    caps[i] = TotalOf(it.out);
    if (shared) direct.push_back(i);
    else if (sendable && caps[i] != 0 && caps[i] <= staging_bytes) staged.push_back(i);
    else single.push_back(i);
  }
  // Sends one request for items [first, last) of `idx`; `hold` is the
  // group's staging extent (empty for registered memory).
  auto send = [&](const std::vector<size_t>& idx, size_t first, size_t last, Staging::Extent hold) {
    // The service starts no read after `start_by` and answers once those
    // under way have landed; the wait for that answer ends at `reply_by`.
    // Registered memory is written by the service itself, so the margin
    // between the two keeps a reply that trails a slow device from landing
    // after this call has handed the memory back to its caller.
    const Clock::time_point reply_by = OpDeadline();
    const Clock::time_point start_by = std::min(deadline, reply_by - LandingMargin());
    wire::GetBatchRequest req;
    req.ns = ns;
    req.deadline_ns = MonotonicNs(start_by);
    std::vector<size_t> which(idx.begin() + first, idx.begin() + last);
    std::vector<uint64_t> at;  // each staged item's offset in the extent
    uint64_t off = 0;
    for (size_t i : which) {
      wire::GetBatchRequest::Item it;
      it.key.assign(items[i].key);
      if (hold) {
        it.out.push_back(wire::WireFragment{(*ch)->staging_region(), hold.offset + off, caps[i]});
        at.push_back(off);
        off += caps[i];
      } else {
        it.out = located[i];
      }
      req.items.push_back(std::move(it));
    }
    wire::WireWriter w;
    wire::Encode(w, req);
    {
      MutexLock l(&mu);
      inflight += which.size();
    }
    // The staging stays mapped while the callback runs (see SubmitGet).
    const uint8_t* base = hold ? (*ch)->staging().data(hold) : nullptr;
    (*ch)->Call(
        wire::Op::kGetBatch, w, reply_by,
        [this, &arrive, &items, which = std::move(which), at = std::move(at), base](Status st,
                                                                                   wire::WireReader* r) {
          std::vector<Result<size_t>> got;
          if (st.ok()) {
            wire::DecodeGetBatchReply(*r, which.size(), &got);
            st = r->Finish("get_batch reply");
          }
          if (!st.ok()) {
            for (size_t i : which) arrive(i, st);
            return;
          }
          if (base != nullptr) {
            // Out of the group's extent into the caller's buffers, shared
            // out among the copy threads.
            std::vector<CopyOut> pieces;
            for (size_t k = 0; k < which.size(); ++k)
              if (got[k].ok()) CutCopyOut(base + at[k], *got[k], items[which[k]].out, &pieces);
            if (pieces.size() > 1) Copiers().ForEach(pieces.size(), [&pieces](size_t i) { pieces[i].Run(); });
            else if (pieces.size() == 1) pieces[0].Run();
          }
          for (size_t k = 0; k < which.size(); ++k) arrive(which[k], std::move(got[k]));
        },
        hold);
  };
  for (size_t first = 0; first < direct.size(); first += wire::kMaxBatchGets)
    send(direct, first, std::min(direct.size(), first + wire::kMaxBatchGets), {});
  // Groups of at most half the staging, so that one is served while the
  // previous one is copied out.
  for (size_t first = 0; first < staged.size();) {
    size_t last = first;
    uint64_t bytes = 0;
    while (last < staged.size() && last - first < wire::kMaxBatchGets &&
           (last == first || bytes + caps[staged[last]] <= staging_bytes / 2))
      bytes += caps[staged[last++]];
    Staging::Extent hold = (*ch)->staging().Allocate(bytes, std::min(deadline, OpDeadline()));
    if (!hold) {
      for (size_t k = first; k < last; ++k) out[staged[k]] = Status::TimedOut("the client's staging had no room");
    } else {
      send(staged, first, last, hold);
    }
    first = last;
  }
  // One at a time: keys or fragment lists a request cannot carry, memory
  // larger than the staging, a lost connection; SubmitGet reports each. At
  // most kSingleWindow in flight: the service caps a client's requests.
  constexpr size_t kSingleWindow = 1024;
  for (size_t i : single) {
    {
      MutexLock l(&mu);
      while (inflight >= kSingleWindow) l.Wait(cv);
      ++inflight;
    }
    SubmitGet(ns, items[i].key, items[i].out, deadline, /*blocking=*/true,
              [&arrive, i](Result<size_t> r) { arrive(i, std::move(r)); });
  }
  MutexLock l(&mu);
  while (inflight != 0) l.Wait(cv);
  return out;
}

Result<std::vector<uint8_t>> ServiceStore::GetVector(NamespaceId ns, std::string_view key) {
  // The size first; a block replaced by a larger one in between is asked
  // for once more.
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto info = Stat(ns, key);
    if (!info.ok()) return info.status();
    std::vector<uint8_t> buf(info->payload_bytes);
    auto n = Get(ns, key, buf.data(), buf.size());
    if (n.ok()) {
      buf.resize(*n);
      return buf;
    }
    if (n.status().code() != Code::kBufferTooSmall) return n.status();
  }
  return Status::Aborted("block changed size while being read");
}

}  // namespace kvtier::client
