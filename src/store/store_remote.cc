// The store's side of the shared tier on Ceph (docs/shared-tier.md): start
// and stop it, tell it about sealed segments, and fall back to it on a local
// miss. Every function is a no-op while Options::remote.enabled is false;
// without librados (no KVTIER_WITH_CEPH) enabling it fails the open.
#include <algorithm>
#include <cstring>
#include <set>

#include "store/store_impl.h"

#ifdef KVTIER_WITH_CEPH
#include "remote/shared_tier.h"
#endif

namespace kvtier {

#ifndef KVTIER_WITH_CEPH

Status StoreImpl::StartRemote() {
  if (!opt_.remote.enabled || opt_.read_only || repair_mode_) return Status::OK();
  return Status::NotSupported(
      "Options::remote.enabled is set but this kvtier was built without librados "
      "(install librados-dev and libradospp-dev and rebuild; docs/shared-tier.md)");
}
void StoreImpl::StopRemote() {}
void StoreImpl::ShareOnClose() {}
void StoreImpl::RemoteNoteSealed(uint32_t, uint32_t) {}
bool StoreImpl::RemoteGet(const std::shared_ptr<ReadOp>&) { return false; }
size_t StoreImpl::RemoteExtendPrefix(NamespaceId, std::span<const std::string_view>, size_t n) { return n; }
std::optional<uint64_t> StoreImpl::RemotePayloadBytes(NamespaceId, std::string_view) { return std::nullopt; }
bool StoreImpl::RemoteWaitUploaded(Clock::time_point) { return true; }
void StoreImpl::RemoteStats(Stats*) {}

#else

Status StoreImpl::StartRemote() {
  if (!opt_.remote.enabled || opt_.read_only || repair_mode_) return Status::OK();
  const std::string folder = dir_ + "/remote";
  auto exists = fs_->Exists(folder);
  if (!exists.ok()) return exists.status();
  if (!*exists) KVTIER_RETURN_IF_ERROR(fs_->CreateDir(folder, opt_.group_access ? 0770 : 0700));

  remote::SharedTier::Source src;
  // Runs on the tier's worker. Flush() first: every record placed in the
  // segment before it was sealed is then durable and indexed.
  src.summarize = [this](uint32_t seg, uint32_t gen, remote::SegmentSummary* out) -> Status {
    KVTIER_RETURN_IF_ERROR(Flush());
    const SegmentInfo info = table_->Info(seg);
    if (info.generation != gen || info.state != SegmentState::kSealed)
      return Status::NotFound("segment " + std::to_string(seg) + " was reclaimed before its upload");
    out->segment = seg;
    out->generation = gen;
    out->epoch = info.epoch;
    out->bytes = info.used_bytes;
    std::set<NamespaceId> seen;
    Status st = index_->ForEachInSegment(seg, gen, [&](uint64_t off, NamespaceId ns, std::string_view key) {
      auto e = index_->Get(ns, key);
      // Only live entries: a replaced or removed key is not shared.
      if (!e.ok() || !e->has_value() || (*e)->segment != seg || (*e)->generation != gen || (*e)->offset != off)
        return true;
      if (seen.insert(ns).second) {
        auto spec = SpecOf(ns);
        if (!spec.ok()) return true;  // namespace removed meanwhile
        out->namespaces.emplace_back(ns, spec->Encode());
      }
      out->entries.push_back(remote::SummaryEntry{ns, std::string(key), off, (*e)->payload_len,
                                                  (*e)->payload_checksum, (*e)->sequence, (*e)->flags});
      return true;
    });
    return st;
  };
  src.read = [this](uint32_t seg, uint32_t gen, uint64_t off, void* buf, size_t len) -> Status {
    File* f = table_->Pin(seg, gen);
    if (f == nullptr) return Status::NotFound("segment " + std::to_string(seg) + " was reclaimed");
    Status st = f->ReadAt(off, buf, len);
    table_->Unpin(seg);
    if (st.ok()) c_.device_bytes_read.Add(len);
    return st;
  };
  src.warn = [this](const std::string& line) { Warn(line); };
  remote::RemoteIndexFiles files;
  files.path = folder + "/index";
  files.fs = fs_;
  files.file_mode = opt_.group_access ? 0660 : 0600;
  files.dir_mode = opt_.group_access ? 0770 : 0700;
  auto tier = remote::SharedTier::Start(opt_.remote, files, description_.store_id, std::move(src));
  if (!tier.ok()) return tier.status().WithContext("starting the shared tier");
  remote_ = std::shared_ptr<remote::SharedTier>(std::move(tier).value());
  // Segments sealed before this open and not uploaded yet (the tier skips
  // those it uploaded).
  for (const SegmentInfo& s : table_->Snapshot())
    if (s.state == SegmentState::kSealed) remote_->NoteSealed(s.id, s.generation);
  return Status::OK();
}

void StoreImpl::StopRemote() {
  if (remote_) remote_->Stop();
}

void StoreImpl::ShareOnClose() {
  // Bounded, and skipped while the cluster is unreachable: a close must not
  // wait on a tier that cannot upload (the segment goes up after a reopen).
  if (!remote_ || opt_.remote.close_upload_timeout_ms == 0 || writer_ == nullptr || !writer_->running()) return;
  const auto timeout = std::chrono::milliseconds(opt_.remote.close_upload_timeout_ms);
  if (remote_->WaitConnected(Clock::now() + std::min(timeout, std::chrono::milliseconds(opt_.remote.op_timeout_ms))))
    ShareNow(timeout).IgnoreError();
}

bool StoreImpl::RemoteWaitUploaded(Clock::time_point deadline) {
  return !remote_ || remote_->WaitUploaded(deadline);
}

void StoreImpl::RemoteNoteSealed(uint32_t seg, uint32_t gen) {
  if (remote_) remote_->NoteSealed(seg, gen);
}

bool StoreImpl::RemoteGet(const std::shared_ptr<ReadOp>& op) {
  if (!remote_ || !remote_->connected()) return false;
  auto spec = SpecOf(op->ns);
  if (!spec.ok()) return false;
  auto loc = remote_->Lookup(op->ns, op->key, spec->Canonical());
  if (!loc) return false;
  if (loc->payload_len > op->out_total) {
    CompleteRead(op, Status::BufferTooSmall("block has " + std::to_string(loc->payload_len) + " bytes, buffer " +
                                            std::to_string(op->out_total)));
    return true;
  }
  const auto deadline =
      std::min(op->deadline, Clock::now() + std::chrono::milliseconds(opt_.remote.read_deadline_ms));
  const uint64_t checksum = loc->checksum;
  return remote_->Read(*loc, op->ns, op->key, deadline,
                       [this, op, checksum](Status st, const uint8_t* payload, size_t len) {
    if (!st.ok()) {
      c_.misses.Add();
      if (st.code() == Code::kTimedOut)
        CompleteRead(op, Status::TimedOut("shared tier read deadline passed: treat as a miss"));
      else
        CompleteRead(op, Status::NotFound("not in the local store; shared tier: " + st.message()));
      return;
    }
    // Verified bytes, late or not: a revisit is then served from host memory (the shared tier keeps the
    // copy that makes dropping it from RAM lossless). Admitted before the get completes, so a get that
    // has returned finds the block in RAM on the next call.
    if (ram_ != nullptr && opt_.remote.admit_to_ram) {
      const Fragment whole{payload, len};
      if (ram_->Insert(op->ns, op->key, {&whole, 1}, checksum, /*only_if_absent=*/true) != 0)
        c_.remote_admitted_to_ram.Add();
    }
    if (op->Claim()) {  // else the get's deadline won
      size_t left = len;
      for (const MutableFragment& f : op->out) {
        if (left == 0) break;
        const size_t n = std::min(left, f.size);
        std::memcpy(f.data, payload + (len - left), n);
        left -= n;
      }
      op->done(len);
    }
  });
}

size_t StoreImpl::RemoteExtendPrefix(NamespaceId ns, std::span<const std::string_view> keys, size_t n) {
  if (!remote_ || n >= keys.size()) return n;
  auto spec = SpecOf(ns);
  if (!spec.ok()) return n;
  const std::string canonical = spec->Canonical();
  while (n < keys.size() && remote_->Lookup(ns, keys[n], canonical)) ++n;
  return n;
}

std::optional<uint64_t> StoreImpl::RemotePayloadBytes(NamespaceId ns, std::string_view key) {
  if (!remote_) return std::nullopt;
  auto spec = SpecOf(ns);
  if (!spec.ok()) return std::nullopt;
  auto loc = remote_->Lookup(ns, key, spec->Canonical());
  if (!loc) return std::nullopt;
  return loc->payload_len;
}

void StoreImpl::RemoteStats(Stats* s) {
  if (!remote_) return;
  remote::SharedTierCounters& c = remote_->counters();
  s->remote_connected = remote_->connected();
  s->hits_remote = c.hits.load();
  s->bytes_read_remote = c.bytes_read.load();
  s->remote_misses = c.misses.load();
  s->remote_deadline_misses = c.deadline_misses.load();
  s->remote_checksum_failures = c.checksum_failures.load();
  s->remote_uploads = c.uploads.load();
  s->remote_upload_bytes = c.upload_bytes.load();
  s->remote_upload_retries = c.upload_retries.load();
  s->remote_uploads_skipped = c.uploads_skipped.load();
  s->remote_orphans_removed = c.orphans_removed.load();
  s->remote_segments_imported = c.imported.load();
  s->remote_objects_deleted = c.deleted.load();
  s->remote_uploads_deleted = c.uploads_deleted.load();
}

#endif  // KVTIER_WITH_CEPH

}  // namespace kvtier
