// ServiceStore's loan of the service's RAM tier: map_tier, pin_tier and
// unpin_tier, each on the connection the tier was lent on.
#include "client/service_store.h"
#include "wire/requests.h"

namespace kvtier::client {

Result<ServiceStore::TierMapping> ServiceStore::MapTier() {
  auto ch = Live();
  if (!ch.ok()) return ch.status();
  TierMapping m;
  {
    MutexLock l(&mu_);
    if (ch_ != *ch) return Status::Aborted("the connection to the service changed");
    m.connection = connections_;
  }
  std::vector<wire::UniqueFd> fds;
  auto body = (*ch)->CallSyncTakingFds(wire::Op::kMapTier, wire::WireWriter(), OpDeadline(), &fds);
  if (!body.ok()) return body.status();
  wire::WireReader r(*body);
  wire::Decode(r, &m.map);
  KVTIER_RETURN_IF_ERROR(r.Finish("map_tier reply"));
  if (fds.size() != 1) return Status::IOError("map_tier's reply carried no descriptor");
  m.fd = std::move(fds[0]);
  return m;
}

namespace {

// A pin_tier reply's lease, which must answer each of `keys` keys.
Result<wire::TierLease> LeaseOf(wire::WireReader& r, size_t keys) {
  wire::TierLease lease;
  wire::Decode(r, &lease);
  KVTIER_RETURN_IF_ERROR(r.Finish("pin_tier reply"));
  if (lease.blocks.size() != keys) return Status::IOError("pin_tier's reply does not answer every key");
  return lease;
}

wire::WireWriter PinRequest(NamespaceId ns, std::span<const std::string_view> keys) {
  wire::LookupRequest req;
  req.ns = ns;
  for (std::string_view k : keys) req.keys.emplace_back(k);
  wire::WireWriter w;
  wire::Encode(w, req);
  return w;
}

}  // namespace

std::shared_ptr<Channel> ServiceStore::TierChannel(uint64_t connection) {
  MutexLock l(&mu_);
  if (ch_ == nullptr || !ch_->alive() || connections_ != connection) return nullptr;
  return ch_;
}

Result<wire::TierLease> ServiceStore::PinTier(uint64_t connection, NamespaceId ns,
                                              std::span<const std::string_view> keys) {
  if (keys.empty() || keys.size() > wire::kMaxBatchGets)
    return Status::InvalidArgument("pin_tier takes 1 to " + std::to_string(wire::kMaxBatchGets) + " keys");
  std::shared_ptr<Channel> ch = TierChannel(connection);
  if (ch == nullptr) return Status::Aborted("the RAM tier was lent on a connection that is gone");
  auto body = ch->CallSync(wire::Op::kPinTier, PinRequest(ns, keys), OpDeadline());
  if (!body.ok()) return body.status();
  wire::WireReader r(*body);
  return LeaseOf(r, keys.size());
}

bool ServiceStore::PinTierAsync(uint64_t connection, NamespaceId ns, std::string_view key,
                                Clock::time_point deadline, PinDone& done) {
  std::shared_ptr<Channel> ch = TierChannel(connection);
  if (ch == nullptr) return false;
  // As a get's request: the caller's deadline, with the grace a reply that
  // says TimedOut may trail it by, within the reply timeout.
  const Clock::time_point reply_by = OpDeadline();
  const Clock::time_point by = deadline == kNoDeadline ? reply_by : std::min(reply_by, deadline + kGetGrace);
  // The completion runs on the channel's own threads (or here, when the
  // request cannot be sent), so the channel outlives it.
  Channel* on = ch.get();
  ch->Call(wire::Op::kPinTier, PinRequest(ns, std::span<const std::string_view>(&key, 1)), by,
           [on, done = std::move(done)](Status st, wire::WireReader* r) {
             if (!st.ok()) return done(st, *on);
             done(LeaseOf(*r, 1), *on);
           });
  return true;
}

bool ServiceStore::TierConnectionAlive(uint64_t connection) { return TierChannel(connection) != nullptr; }

void ServiceStore::UnpinTier(uint64_t connection, uint64_t lease) {
  std::shared_ptr<Channel> ch = TierChannel(connection);
  if (ch != nullptr) UnpinTierOn(*ch, lease);  // else released with its connection
}

void ServiceStore::UnpinTierOn(Channel& ch, uint64_t lease) {
  wire::WireWriter w;
  wire::Encode(w, wire::U64Request{lease});
  ch.Call(wire::Op::kUnpinTier, w, OpDeadline(), [](Status, wire::WireReader*) {});
}

}  // namespace kvtier::client
