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

Result<wire::TierLease> ServiceStore::PinTier(uint64_t connection, NamespaceId ns,
                                              std::span<const std::string_view> keys) {
  if (keys.empty() || keys.size() > wire::kMaxBatchGets)
    return Status::InvalidArgument("pin_tier takes 1 to " + std::to_string(wire::kMaxBatchGets) + " keys");
  std::shared_ptr<Channel> ch;
  {
    MutexLock l(&mu_);
    if (ch_ == nullptr || !ch_->alive() || connections_ != connection)
      return Status::Aborted("the RAM tier was lent on a connection that is gone");
    ch = ch_;
  }
  wire::LookupRequest req;
  req.ns = ns;
  for (std::string_view k : keys) req.keys.emplace_back(k);
  wire::WireWriter w;
  wire::Encode(w, req);
  auto body = ch->CallSync(wire::Op::kPinTier, w, OpDeadline());
  if (!body.ok()) return body.status();
  wire::WireReader r(*body);
  wire::TierLease lease;
  wire::Decode(r, &lease);
  KVTIER_RETURN_IF_ERROR(r.Finish("pin_tier reply"));
  if (lease.blocks.size() != keys.size()) return Status::IOError("pin_tier's reply does not answer every key");
  return lease;
}

bool ServiceStore::TierConnectionAlive(uint64_t connection) {
  MutexLock l(&mu_);
  return ch_ != nullptr && ch_->alive() && connections_ == connection;
}

void ServiceStore::UnpinTier(uint64_t connection, uint64_t lease) {
  std::shared_ptr<Channel> ch;
  {
    MutexLock l(&mu_);
    if (ch_ == nullptr || connections_ != connection) return;  // released with its connection
    ch = ch_;
  }
  wire::WireWriter w;
  wire::Encode(w, wire::U64Request{lease});
  ch->Call(wire::Op::kUnpinTier, w, OpDeadline(), [](Status, wire::WireReader*) {});
}

}  // namespace kvtier::client
