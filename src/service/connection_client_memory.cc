// Puts whose payload lies in the client's own memory (wire::PeerMemory): the
// service reads it once, straight into the RAM-tier block the put commits
// (or into a buffer of its own where the tier is off or has no room), and
// the store writes the disk record from there. One copy on the host, as an
// embedded put's, where staging takes two (the client's into staging, then
// the service's out of it).
#include <cstdlib>

#include "service/connection.h"

namespace kvtier::service {

namespace {

// Page-aligned, so that the store writes it to the device as it is.
std::shared_ptr<uint8_t> AlignedBuffer(uint64_t bytes) {
  constexpr uint64_t kPage = 4096;
  void* p = std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

}  // namespace

void Connection::PutFromClientMemory(const wire::FrameHeader& h, wire::PutRequest req, Clock::time_point start_by) {
  if (peer_memory_ == nullptr || core_->sink == nullptr) {
    ++core_->malformed;
    return Reply(h, Status::InvalidArgument("a put names this client's own memory, which the service said at hello "
                                            "it does not read"));
  }
  std::vector<Fragment> remote;
  uint64_t bytes = 0;
  for (const wire::WireFragment& f : req.payload) {
    if (f.region != wire::kClientMemoryRegion || f.size > (uint64_t{1} << 40) || bytes + f.size < bytes) {
      ++core_->malformed;
      return Reply(h, Status::InvalidArgument("a put's pieces in the client's own memory are mixed with registered "
                                              "regions or oversized"));
    }
    remote.push_back(Fragment{reinterpret_cast<const void*>(static_cast<uintptr_t>(f.offset)), f.size});
    bytes += f.size;
  }
  // Admission bounds what a client makes the service allocate for it.
  if (!Admit(bytes, /*is_put=*/true)) {
    ++core_->over_cap;
    return Reply(h, Status::NotAdmitted("client has " + std::to_string(core_->opt.max_client_inflight_bytes) +
                                        " bytes or " + std::to_string(core_->opt.max_client_requests) +
                                        " requests in flight"));
  }
  auto self = shared_from_this();
  const NamespaceId ns = req.ns;
  const bool blocking = req.blocking;
  auto put = [self, h, ns, key = std::move(req.key), remote = std::move(remote), bytes, blocking, start_by] {
    PutCallback done = [self, h, ns, bytes](Status s) {
      if (s.ok()) self->core_->access.CountPut(ns, bytes);
      self->Reply(h, s);
      self->Finish(bytes);
    };
    // Past it the client may have stopped waiting and reused its memory.
    if (Clock::now() >= start_by) return done(Status::TimedOut("put deadline passed before the service reached it"));
    BlockSink* sink = self->core_->sink;
    RamTier* tier = sink->ram_tier();
    RamTier::Pin slot = tier != nullptr && bytes != 0 ? tier->Reserve(ns, key, bytes) : RamTier::Pin();
    std::shared_ptr<uint8_t> own;
    std::vector<MutableFragment> local;
    if (slot) {
      for (const RamTier::Piece& p : slot.pieces()) local.push_back(MutableFragment{p.data, p.size});
    } else {
      own = AlignedBuffer(bytes);
      if (own == nullptr && bytes != 0) return done(Status::NoSpace("no memory for a put of " + std::to_string(bytes)));
      local.push_back(MutableFragment{own.get(), bytes});
    }
    Status st = self->peer_memory_->Read(remote, local);
    if (!st.ok()) {
      slot.Release();
      // NotSupported tells the client to send it again through staging.
      return done(Status::NotSupported("the service cannot read this client's memory: " + st.message()));
    }
    ++self->core_->client_memory_puts;
    if (slot) return sink->PutInternal(ns, key, {}, std::move(slot), blocking, std::move(done), nullptr, false, start_by);
    const Fragment payload{own.get(), bytes};
    sink->PutInternal(ns, key, {&payload, 1}, RamTier::Pin(), blocking,
                      [own, done = std::move(done)](Status s) { done(std::move(s)); }, nullptr, /*borrow=*/true,
                      start_by);
  };
  // As OnPut: queued here when the write queue has room, else on a pool
  // thread, so that this client's other requests are still read.
  if (!blocking || core_->sink->WriteQueueHasRoom(bytes)) return put();
  ++core_->pooled_puts;
  core_->puts.Submit(id_, std::move(put));
}

}  // namespace kvtier::service
