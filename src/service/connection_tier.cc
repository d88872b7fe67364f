// The RAM tier lent to a client: map_tier hands it the tier's file,
// read-only; pin_tier pins blocks there and says where they lie, so the
// client copies them out itself (a GPU load: straight from the tier to the
// device, no copy on the host). The client checks each block against the
// checksum the reply carries, as every read of a RAM hit is checked.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "service/connection.h"
#include "wire/messages.h"
#include "wire/requests.h"

namespace kvtier::service {

void Connection::OnTier(const wire::FrameHeader& h, std::string_view body) {
  switch (static_cast<wire::Op>(h.op)) {
    case wire::Op::kMapTier: {
      if (!Parsed(h, wire::ParseEmpty(body, "map_tier"))) return;
      wire::WireWriter w;
      wire::UniqueFd fd;
      Status st = MapTierFor(&w, &fd);
      if (!st.ok()) return Reply(h, st);
      return ReplyWithFd(h, w, fd.get());
    }
    case wire::Op::kPinTier: return PinTier(h, body);
    default: {
      wire::U64Request req;
      if (!Parsed(h, wire::Parse(body, &req))) return;
      auto it = leases_.find(req.value);
      if (it == leases_.end()) return Reply(h, Status::NotFound("no lease " + std::to_string(req.value)));
      pinned_bytes_ -= it->second.bytes;
      core_->tier_pinned_bytes -= it->second.bytes;
      leases_.erase(it);  // releases its pins
      return Reply(h, Status::OK());
    }
  }
}

Status Connection::MapTierFor(wire::WireWriter* w, wire::UniqueFd* fd) {
  RamTier* tier = core_->sink != nullptr ? core_->sink->ram_tier() : nullptr;
  if (tier == nullptr) return Status::NotSupported("the served store has no RAM tier");
  if (core_->opt.tenancy != ServiceOptions::Tenancy::kNone && !peer_.admin)
    return Status::NotSupported("the RAM tier is lent only without tenancy: its file holds every tenant's blocks");
  auto file = tier->OpenFileReadOnly();
  if (!file.ok()) return file.status();
  const int dup = ::fcntl((*file)->map_fd(), F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return Status::FromErrno(errno, "duplicating the RAM tier file's descriptor");
  *fd = wire::UniqueFd(dup);
  const std::vector<iovec> regions = tier->Regions();
  wire::TierMap m;
  m.file_bytes = tier->file_bytes();
  m.data_offset = tier->FileOffsetOf(static_cast<const uint8_t*>(regions.front().iov_base));
  m.data_bytes = static_cast<const uint8_t*>(regions.back().iov_base) + regions.back().iov_len -
                 static_cast<const uint8_t*>(regions.front().iov_base);
  m.region_bytes = tier->region_bytes();
  wire::Encode(*w, m);
  tier_mapped_ = true;
  ++core_->tier_maps;
  return Status::OK();
}

void Connection::PinTier(const wire::FrameHeader& h, std::string_view body) {
  wire::LookupRequest req;
  Status st = wire::Parse(body, &req);
  if (st.ok() && (req.keys.empty() || req.keys.size() > wire::kMaxBatchGets))
    st = Status::InvalidArgument("pin_tier takes 1 to " + std::to_string(wire::kMaxBatchGets) + " keys");
  if (!Parsed(h, st)) return;
  if (!tier_mapped_) return Reply(h, Status::InvalidArgument("pin_tier before map_tier"));
  st = CheckNamespace(req.ns);
  if (!st.ok()) return Reply(h, st);
  RamTier* tier = core_->sink->ram_tier();
  // Leases a client has not released yet are bounded too (each costs the
  // service memory): past the bound nothing more is pinned for it.
  constexpr size_t kMaxLeases = 4096;
  const bool leases_full = leases_.size() >= kMaxLeases;
  // Past the client's cap, past half the tier pinned by all clients (the
  // rest stays for new blocks), or where the reply would outgrow a frame, a
  // block is answered as not pinned: the client reads it the usual way, and
  // that read is the one counted. Hence Peek, and a pinned block's read
  // counted only once it is lent.
  const uint64_t all_cap = tier->capacity_bytes() / 2;
  constexpr size_t kReplyBudget = wire::kMaxBodyBytes - 4096;
  size_t reply_bytes = 8 + 4;
  Lease lease;
  wire::TierLease out;
  out.blocks.resize(req.keys.size());
  for (size_t i = 0; i < req.keys.size() && !leases_full; ++i) {
    RamTier::Pin pin = tier->Peek(req.ns, req.keys[i]);
    if (!pin) {
      reply_bytes += 1;
      continue;
    }
    const auto& pieces = pin.pieces();
    const size_t need = 1 + 8 + 8 + 4 + 16 * pieces.size();
    if (pieces.size() > wire::kMaxTierPieces || reply_bytes + need > kReplyBudget ||
        pinned_bytes_ + lease.bytes + pin.size() > core_->opt.max_client_pinned_bytes ||
        core_->tier_pinned_bytes.load() + lease.bytes + pin.size() > all_cap) {
      reply_bytes += 1;
      continue;  // the pin goes; the block stays in the tier
    }
    wire::TierPinned& b = out.blocks[i];
    b.pinned = true;
    b.size = pin.size();
    b.checksum = pin.checksum();
    for (const RamTier::Piece& p : pieces) b.pieces.emplace_back(tier->FileOffsetOf(p.data), p.size);
    reply_bytes += need;
    lease.bytes += pin.size();
    core_->access.CountGet(req.ns, /*hit=*/true, pin.size());
    tier->CountRead(pin);
    lease.pins.push_back(std::move(pin));
  }
  if (!lease.pins.empty()) {
    core_->sink->CountRamHits(lease.pins.size(), lease.bytes);
    out.lease = next_lease_++;
    pinned_bytes_ += lease.bytes;
    core_->tier_pinned_bytes += lease.bytes;
    core_->tier_lent_blocks += lease.pins.size();
    leases_.emplace(out.lease, std::move(lease));
  }
  wire::WireWriter w;
  wire::Encode(w, out);
  Reply(h, Status::OK(), &w);
}

void Connection::ReleaseLeases() {
  core_->tier_pinned_bytes -= pinned_bytes_;
  pinned_bytes_ = 0;
  leases_.clear();
}

}  // namespace kvtier::service
