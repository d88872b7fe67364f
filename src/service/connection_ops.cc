// The requests a Connection answers: puts and gets handed to the store, and
// the calls answered at once. Bodies are read by wire/requests.h; one that
// does not parse is answered InvalidArgument and counted as malformed.
#include <algorithm>

#include "format/record.h"
#include "service/connection.h"
#include "wire/messages.h"
#include "wire/requests.h"

namespace kvtier::service {

void ServerCore::PopulateAhead(const std::shared_ptr<wire::SharedRegion>& region, uint64_t owner) {
  PopulateFrom(region, 0, owner);
}

// One step per job, the next queued behind every other client's: a client's
// large region does not hold up another's. The region is held for the step
// only, so one unregistered meanwhile is unmapped after it.
void ServerCore::PopulateFrom(std::weak_ptr<wire::SharedRegion> weak, uint64_t offset, uint64_t owner) {
  populate.Submit(owner, [this, weak = std::move(weak), offset, owner] {
    std::shared_ptr<wire::SharedRegion> r = weak.lock();
    if (r == nullptr || offset >= r->size()) return;
    uint64_t n = 0;
    const bool ok = r->PopulateStep(offset, &n);
    populated += n;
    if (ok) PopulateFrom(weak, offset + wire::SharedRegion::kPopulateStep, owner);
  });
}

unsigned ServerCore::GetThreads() {
  return std::clamp(std::thread::hardware_concurrency(), 2u, 16u);
}

// ServiceOptions::client_read_threads, less the connection's own.
unsigned ServerCore::ClientReadHelpers(int32_t threads) {
  if (threads >= 1) return static_cast<unsigned>(std::min(threads, 64)) - 1;
  return Cores() >= 8 ? std::min(Cores() / 4, 4u) : 0;
}

unsigned ServerCore::Cores() {
  return std::max(1u, std::thread::hardware_concurrency());
}

uint32_t ServerCore::SpinMicros(int32_t asked) {
  if (asked >= 0) return static_cast<uint32_t>(asked);
  return Cores() >= 8 ? 3000 : 0;
}

namespace {
// Gets of at least this many bytes run on the pool (WorkPool): a copy of
// 64 KiB takes a few microseconds, about what handing it over costs.
constexpr uint64_t kPooledGetMinBytes = 64 << 10;

// At most an hour ahead: a hostile deadline must not overflow the clock.
Clock::time_point DeadlineOf(int64_t deadline_ns) {
  if (deadline_ns < 0) return kNoDeadline;
  // The client's steady-clock instant: one clock for every process here.
  const Clock::time_point at{std::chrono::nanoseconds(deadline_ns)};
  return std::min(at, Clock::now() + std::chrono::hours(1));
}
}  // namespace

bool Connection::Parsed(const wire::FrameHeader& h, const Status& st) {
  if (st.ok()) return true;
  ++core_->malformed;
  Reply(h, st);
  return false;
}

void Connection::OnPut(const wire::FrameHeader& h, std::string_view body) {
  wire::PutRequest req;
  if (!Parsed(h, wire::Parse(body, &req))) return;
  // Past it the client has stopped waiting and may reuse the payload's
  // memory: nothing may be read from it any more.
  const Clock::time_point start_by = DeadlineOf(req.start_by_ns);
  if (Clock::now() >= start_by) return Reply(h, Status::TimedOut("put deadline passed before the service reached it"));
  Status st = CheckNamespace(req.ns);
  if (!st.ok()) return Reply(h, st);
  if (!req.payload.empty() && req.payload[0].region == wire::kClientMemoryRegion)
    return PutFromClientMemory(h, std::move(req), start_by);
  auto res = Resolve(req.payload, /*for_output=*/false);
  if (!res.ok()) return Reply(h, res.status());
  const uint64_t bytes = res->bytes;
  if (!AdmitPut(h, bytes)) return;
  auto self = shared_from_this();
  auto resolved = std::make_shared<Resolved>(std::move(res).value());
  const NamespaceId ns = req.ns;
  PutCallback done = [self, h, ns, bytes, resolved](Status s) {
    if (s.ok()) self->core_->access.CountPut(ns, bytes);
    self->Reply(h, s);
    self->Finish(bytes);
  };
  if (req.blocking && core_->sink != nullptr) {
    BlockSink* sink = core_->sink;
    // With room in the write queue the put is queued here, as an embedded
    // caller's is: a pool thread would add a wake-up to every put. Without
    // room it waits on a pool thread, so that this client's other requests
    // are still read.
    if (sink->WriteQueueHasRoom(bytes)) {
      return sink->PutInternal(ns, req.key, resolved->in, RamTier::Pin(), /*blocking=*/true, std::move(done),
                               nullptr, /*borrow=*/true, start_by);
    }
    ++core_->pooled_puts;
    core_->puts.Submit(id_, [sink, ns, key = std::move(req.key), resolved, done = std::move(done), start_by]() mutable {
      sink->PutInternal(ns, key, resolved->in, RamTier::Pin(), /*blocking=*/true, std::move(done), nullptr,
                        /*borrow=*/true, start_by);
    });
    return;
  }
  core_->store->PutAsyncBorrowed(ns, req.key, resolved->in, std::move(done));
}

bool Connection::AdmitPut(const wire::FrameHeader& h, uint64_t bytes) {
  if (Admit(bytes, /*is_put=*/true)) return true;
  ++core_->over_cap;
  Reply(h, Status::NotAdmitted("client has " + std::to_string(core_->opt.max_client_inflight_bytes) + " bytes or " +
                               std::to_string(core_->opt.max_client_requests) + " requests in flight"));
  return false;
}

void Connection::OnGet(const wire::FrameHeader& h, std::string_view body) {
  wire::GetRequest req;
  if (!Parsed(h, wire::Parse(body, &req))) return;
  Status st = CheckNamespace(req.ns);
  auto res = st.ok() ? Resolve(req.out, /*for_output=*/true) : Result<Resolved>(st);
  if (!res.ok()) return Reply(h, res.status());
  if (!Admit(0, /*is_put=*/false)) {
    ++core_->over_cap;
    return Reply(h, Status::InvalidArgument("client has " + std::to_string(core_->opt.max_client_requests) +
                                            " requests in flight"));
  }
  auto self = shared_from_this();
  auto resolved = std::make_shared<Resolved>(std::move(res).value());
  const NamespaceId ns = req.ns;
  const Clock::time_point deadline = DeadlineOf(req.deadline_ns);
  const Clock::time_point start_by = DeadlineOf(req.start_by_ns);
  auto get = [self, h, ns, key = std::move(req.key), resolved, deadline, start_by] {
    GetCallback done = [self, h, ns, resolved](Result<size_t> got) {
      self->core_->access.CountGet(ns, got.ok(), got.ok() ? *got : 0);
      wire::WireWriter w;
      w.U64(got.ok() ? *got : 0);
      self->Reply(h, got.status(), &w);
      self->Finish(0);
    };
    // Past its deadline the client may have reused `out`: never touch it.
    if (Clock::now() >= std::min(deadline, start_by))
      return done(Status::TimedOut("get deadline passed before the service reached it"));
    // A start deadline alone lets a read under way land in `out` directly;
    // a store that cannot tell the two gets the stricter one.
    if (deadline == kNoDeadline && start_by != kNoDeadline && self->core_->sink != nullptr)
      return self->core_->sink->GetStartingBy(ns, key, resolved->out, start_by, std::move(done));
    self->core_->store->GetAsync(ns, key, resolved->out, std::min(deadline, start_by), std::move(done));
  };
  // A small get costs less than the hand-over; a large one is a copy that
  // would hold up this client's later requests, if it has sent any (a
  // batch). A lone blocking get is copied here: a pool thread would add
  // two wake-ups and a cold core to its latency.
  if (resolved->bytes < kPooledGetMinBytes || !frames_.MoreWaiting()) return get();
  ++core_->pooled_gets;
  core_->gets.Submit(id_, std::move(get));
}

void Connection::OnGetBatch(const wire::FrameHeader& h, std::string_view body) {
  auto req = std::make_shared<wire::GetBatchRequest>();
  if (!Parsed(h, wire::Parse(body, req.get()))) return;
  if (Status st = CheckNamespace(req->ns); !st.ok()) return Reply(h, st);
  // Every item's memory resolved up front: one that names memory the client
  // has not registered is a broken client, answered as a whole.
  auto resolved = std::make_shared<std::vector<Resolved>>();
  resolved->reserve(req->items.size());
  for (size_t i = 0; i < req->items.size(); ++i) {
    auto res = Resolve(req->items[i].out, /*for_output=*/true);
    if (!res.ok()) return Reply(h, Status::InvalidArgument("item " + std::to_string(i) + ": " + res.status().message()));
    resolved->push_back(std::move(res).value());
  }
  if (!Admit(0, /*is_put=*/false)) {
    ++core_->over_cap;
    return Reply(h, Status::InvalidArgument("client has " + std::to_string(core_->opt.max_client_requests) +
                                            " requests in flight"));
  }
  auto self = shared_from_this();
  const Clock::time_point deadline = DeadlineOf(req->deadline_ns);
  ++core_->pooled_gets;
  // On the pool as a whole: the store copies its RAM hits on several threads
  // and sends its misses to disk together (Store::GetBatch).
  core_->gets.Submit(id_, [self, h, req, resolved, deadline] {
    const NamespaceId ns = req->ns;
    // No read starts past the client's deadline, and the batch returns
    // once those under way have landed: nothing touches the client's
    // memory after this reply.
    std::vector<GetItem> items(req->items.size());
    for (size_t i = 0; i < items.size(); ++i) items[i] = GetItem{req->items[i].key, (*resolved)[i].out};
    std::vector<Result<size_t>> got = self->core_->store->GetBatch(ns, items, deadline);
    for (const Result<size_t>& g : got) self->core_->access.CountGet(ns, g.ok(), g.ok() ? *g : 0);
    wire::WireWriter w;
    wire::EncodeGetBatchReply(w, got);
    self->Reply(h, Status::OK(), &w);
    self->Finish(0);
  });
}

void Connection::OnNamespaceCall(const wire::FrameHeader& h, std::string_view body) {
  wire::WireWriter w;
  Status st;
  switch (static_cast<wire::Op>(h.op)) {
    case wire::Op::kUnregisterRegion: {
      wire::RegionRequest req;
      if (!Parsed(h, wire::Parse(body, &req))) return;
      MutexLock l(&regions_mu_);
      // Requests in flight keep their region mapped until they complete.
      if (regions_.erase(req.region) == 0) st = Status::NotFound("no region " + std::to_string(req.region));
      else --core_->regions;
      break;
    }
    case wire::Op::kRegisterNamespace: {
      wire::SpecRequest req;
      if (!Parsed(h, wire::Parse(body, &req))) return;
      const NamespaceSpec salted = core_->access.ForPeer(peer_, req.spec);
      auto id = core_->store->RegisterNamespace(salted);
      st = id.status();
      if (!st.ok()) break;
      core_->access.Registered(peer_, *id, salted);
      w.U64(*id);
      break;
    }
    case wire::Op::kFindNamespace: {
      wire::NameRequest req;
      if (!Parsed(h, wire::Parse(body, &req))) return;
      auto id = core_->store->FindNamespace(req.name);
      st = id.ok() ? CheckNamespace(*id) : id.status();
      if (st.ok()) w.U64(*id);
      break;
    }
    case wire::Op::kListNamespaces: {
      wire::ListNamespacesRequest req;
      if (!Parsed(h, wire::Parse(body, &req))) return;
      auto list = core_->store->ListNamespaces(req.counts ? NamespaceListing::kWithCounts : NamespaceListing::kSpecsOnly);
      st = list.status();
      if (!st.ok()) break;
      std::vector<const NamespaceInfo*> mine;
      for (const NamespaceInfo& n : *list)
        if (core_->access.Allowed(peer_, n.id)) mine.push_back(&n);
      w.U32(static_cast<uint32_t>(mine.size()));
      for (const NamespaceInfo* n : mine) wire::Encode(w, *n);
      break;
    }
    case wire::Op::kRemoveNamespace: {
      wire::NamespaceRequest req;
      if (!Parsed(h, wire::Parse(body, &req))) return;
      st = CheckNamespace(req.ns);
      if (st.ok()) st = core_->store->RemoveNamespace(req.ns);
      break;
    }
    default: st = Status::NotSupported("not a namespace call");
  }
  Reply(h, st, &w);
}

void Connection::OnLookup(const wire::FrameHeader& h, std::string_view body) {
  wire::WireWriter w;
  Status st;
  if (h.op == static_cast<uint16_t>(wire::Op::kLookupPrefix)) {
    wire::LookupRequest req;
    if (!Parsed(h, wire::Parse(body, &req))) return;
    st = CheckNamespace(req.ns);
    if (st.ok()) {
      std::vector<std::string_view> keys(req.keys.begin(), req.keys.end());
      auto hits = core_->store->LookupPrefix(req.ns, keys);
      st = hits.status();
      if (st.ok()) {
        core_->access.CountLookup(req.ns, keys.size(), *hits);
        w.U64(*hits);
      }
    }
    return Reply(h, st, &w);
  }
  if (h.op == static_cast<uint16_t>(wire::Op::kListBlocks)) {
    wire::ListBlocksRequest req;
    if (!Parsed(h, wire::Parse(body, &req))) return;
    if (req.ns == 0 && core_->opt.tenancy != ServiceOptions::Tenancy::kNone && !peer_.admin)
      return Reply(h, Status::InvalidArgument("listing every namespace needs the service's own user"));
    if (req.ns != 0) st = CheckNamespace(req.ns);
    if (!st.ok()) return Reply(h, st);
    std::vector<BlockInfo> page;
    bool more = false;
    const ListCursor after{req.after_ns, req.after};
    st = core_->store->ListBlocks(req.ns, req.prefix, req.has_after ? &after : nullptr, [&](const BlockInfo& b) {
      if (page.size() == req.max) {
        more = true;
        return false;
      }
      page.push_back(b);
      return true;
    });
    if (st.ok()) {
      w.U32(static_cast<uint32_t>(page.size()));
      for (const BlockInfo& b : page) wire::Encode(w, b);
      w.Bool(more);
    }
    return Reply(h, st, &w);
  }
  wire::KeyRequest req;
  if (!Parsed(h, wire::Parse(body, &req))) return;
  st = CheckNamespace(req.ns);
  if (!st.ok()) return Reply(h, st);
  switch (static_cast<wire::Op>(h.op)) {
    case wire::Op::kContains: {
      auto c = core_->store->Contains(req.ns, req.key);
      st = c.status();
      if (st.ok()) w.Bool(*c);
      break;
    }
    case wire::Op::kStat: {
      auto b = core_->store->Stat(req.ns, req.key);
      st = b.status();
      if (st.ok()) wire::Encode(w, *b);
      break;
    }
    case wire::Op::kInspectRecord: {
      auto i = core_->store->InspectRecord(req.ns, req.key);
      st = i.status();
      if (st.ok()) wire::Encode(w, *i);
      break;
    }
    default: st = core_->store->Remove(req.ns, req.key);
  }
  Reply(h, st, &w);
}

// remove_batch, contains_batch and touch_batch: the reply says, per key,
// whether it had (or has) a block, one byte each.
void Connection::OnKeyFlags(const wire::FrameHeader& h, std::string_view body) {
  wire::LookupRequest req;
  if (!Parsed(h, wire::Parse(body, &req))) return;
  if (Status st = CheckNamespace(req.ns); !st.ok()) return Reply(h, st);
  const std::vector<std::string_view> keys(req.keys.begin(), req.keys.end());
  std::vector<bool> present;
  Status st;
  switch (static_cast<wire::Op>(h.op)) {
    case wire::Op::kRemoveBatch: st = core_->store->RemoveBatch(req.ns, keys, &present); break;
    case wire::Op::kTouchBatch: st = core_->store->TouchBatch(req.ns, keys, &present); break;
    default: st = core_->store->ContainsBatch(req.ns, keys, &present); break;
  }
  wire::WireWriter w;
  if (st.ok()) wire::EncodeKeyFlagsReply(w, present);
  Reply(h, st, &w);
}

void Connection::OnAdmin(const wire::FrameHeader& h, std::string_view body) {
  wire::WireWriter w;
  Status st;
  const bool restricted = core_->opt.tenancy != ServiceOptions::Tenancy::kNone && !peer_.admin;
  switch (static_cast<wire::Op>(h.op)) {
    case wire::Op::kFlush:
      if (!Parsed(h, wire::ParseEmpty(body, "flush"))) return;
      st = core_->store->Flush();
      break;
    case wire::Op::kGetStats:
      if (!Parsed(h, wire::ParseEmpty(body, "get_stats"))) return;
      wire::Encode(w, core_->store->GetStats());
      break;
    case wire::Op::kSegments: {
      if (!Parsed(h, wire::ParseEmpty(body, "segments"))) return;
      const std::vector<SegmentInfo> segs = core_->store->Segments();
      w.U32(static_cast<uint32_t>(segs.size()));
      for (const SegmentInfo& g : segs) wire::Encode(w, g);
      break;
    }
    case wire::Op::kEvictTo: {
      wire::U64Request req;
      if (!Parsed(h, wire::Parse(body, &req))) return;
      st = restricted ? Status::InvalidArgument("evict_to needs the service's own user")
                      : core_->store->EvictTo(req.value);
      break;
    }
    case wire::Op::kShareNow: {
      wire::U64Request req;
      if (!Parsed(h, wire::Parse(body, &req))) return;
      st = core_->store->ShareNow(std::chrono::milliseconds(std::min<uint64_t>(req.value, 3600000)));
      break;
    }
    case wire::Op::kVerify: {
      wire::VerifyRequest req;
      if (!Parsed(h, wire::Parse(body, &req))) return;
      if (restricted) {
        st = Status::InvalidArgument("verify needs the service's own user");
        break;
      }
      VerifyOptions vo;
      vo.deep = req.deep;
      auto rep = core_->store->Verify(vo);
      st = rep.status();
      if (st.ok()) wire::Encode(w, *rep);
      break;
    }
    default: st = Status::NotSupported("not an admin call");
  }
  Reply(h, st, &w);
}

}  // namespace kvtier::service
