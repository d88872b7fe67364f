#include "remote/shared_tier.h"

#include <algorithm>
#include <set>

#include "format/record.h"
#include "remote/rados_client.h"
#include "util/aligned_buffer.h"

namespace kvtier::remote {
namespace {

constexpr size_t kUploadBatch = 8;  // segments streamed through one window of writes
constexpr auto kMinBackoff = std::chrono::milliseconds(100);
constexpr auto kMaxBackoff = std::chrono::seconds(30);

// Tells the operator once when an operation starts failing and once when it
// works again, however many retries lie between (the stats count them).
class FailureStreak {
 public:
  FailureStreak(std::string what, const std::function<void(const std::string&)>& warn)
      : what_(std::move(what)), warn_(warn) {}
  void Failed(const Status& st) {
    if (failed_++ == 0 && warn_) warn_("shared tier: " + what_ + " failed, retrying with back-off: " + st.ToString());
  }
  void Worked() {
    if (failed_ > 0 && warn_)
      warn_("shared tier: " + what_ + " works again after " + std::to_string(failed_) + " failed attempts");
    failed_ = 0;
  }

 private:
  const std::string what_;
  const std::function<void(const std::string&)>& warn_;
  uint64_t failed_ = 0;
};

}  // namespace

SharedTier::SharedTier(const RemoteTierOptions& o, std::string store_id, Source source,
                       std::unique_ptr<RemoteIndex> index)
    : opt_(o), store_id_(std::move(store_id)), source_(std::move(source)), index_(std::move(index)) {}

Result<std::unique_ptr<SharedTier>> SharedTier::Start(const RemoteTierOptions& o, const RemoteIndexFiles& index_files,
                                                      const std::string& store_id, Source source) {
  if (o.pool.empty()) return Status::InvalidArgument("remote tier: pool is empty");
  if (o.object_bytes < (4u << 20) || o.object_bytes % (4u << 20) != 0)
    return Status::InvalidArgument("remote tier: object_bytes must be a multiple of 4 MiB");
  if (o.upload_write_bytes < (4u << 20) || o.upload_write_bytes % (4u << 20) != 0 ||
      o.upload_write_bytes > (64u << 20))
    return Status::InvalidArgument("remote tier: upload_write_bytes must be a multiple of 4 MiB, at most 64 MiB");
  if (o.read_deadline_ms == 0 || o.op_timeout_ms == 0 || o.poll_interval_ms == 0)
    return Status::InvalidArgument("remote tier: read_deadline_ms, op_timeout_ms and poll_interval_ms must be > 0");
  auto index = RemoteIndex::Open(index_files);
  if (!index.ok()) return index.status();
  std::unique_ptr<SharedTier> t(new SharedTier(o, store_id, std::move(source), std::move(index).value()));
  t->worker_ = std::thread([p = t.get()] { p->Run(); });
  return t;
}

SharedTier::~SharedTier() { Stop(); }

void SharedTier::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopped_) return;
    stopped_ = true;
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::shared_ptr<RadosClient> c;
  {
    std::unique_lock<std::shared_mutex> l(client_mu_);
    c = std::move(client_);
  }
  connected_ = false;
  // The last reference: the destructor cancels reads and waits for their
  // callbacks (readers copy the pointer only while issuing, under the lock).
  c.reset();
}

bool SharedTier::Stopping() {
  std::lock_guard<std::mutex> l(mu_);
  return stop_;
}

std::shared_ptr<RadosClient> SharedTier::client() {
  std::shared_lock<std::shared_mutex> l(client_mu_);
  return client_;
}

void SharedTier::NoteSealed(uint32_t seg, uint32_t gen) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return;
    uploads_.emplace_back(seg, gen);
  }
  cv_.notify_all();
}

bool SharedTier::WaitConnected(Clock::time_point deadline) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_until(l, deadline, [this] { return connected_.load() || connect_failed_.load() || stop_; });
  return connected_.load();
}

bool SharedTier::WaitUploaded(Clock::time_point deadline) {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_until(l, deadline, [this] { return uploads_.empty() || stop_; }) && uploads_.empty();
}

std::optional<Location> SharedTier::Lookup(NamespaceId ns, std::string_view key, const std::string& canonical) {
  auto loc = index_->Get(ns, key);
  if (!loc.ok() || !loc->has_value()) return std::nullopt;
  std::string remote_canonical;
  {
    std::lock_guard<std::mutex> l(spec_mu_);
    auto it = canonical_.find(ns);
    if (it != canonical_.end()) remote_canonical = it->second;
  }
  if (remote_canonical.empty()) {
    auto enc = index_->Spec(ns);
    if (!enc.ok() || !enc->has_value()) return std::nullopt;
    auto spec = NamespaceSpec::Decode(**enc);
    if (!spec.ok()) return std::nullopt;
    remote_canonical = spec->Canonical();
    std::lock_guard<std::mutex> l(spec_mu_);
    canonical_[ns] = remote_canonical;
  }
  if (remote_canonical != canonical) return std::nullopt;
  return std::move(**loc);
}

bool SharedTier::Read(const Location& loc, NamespaceId ns, std::string_view key, Clock::time_point deadline,
                      ReadDone done) {
  std::shared_lock<std::shared_mutex> l(client_mu_);
  if (!client_) return false;
  // Header, key and payload; the padding is not needed.
  const uint64_t total = loc.PayloadOffset() + loc.payload_len;
  std::vector<RadosClient::Piece> pieces;
  for (uint64_t at = 0; at < total;) {
    const uint64_t off = loc.offset + at;
    const uint32_t part = static_cast<uint32_t>(off / loc.part_bytes);
    const uint64_t in_part = off % loc.part_bytes;
    const uint64_t n = std::min(total - at, loc.part_bytes - in_part);
    pieces.push_back(RadosClient::Piece{PartObject(loc.base, part), in_part, n, at});
    at += n;
  }
  client_->ReadAsync(
      std::move(pieces), total, deadline,
      [this, loc, ns, key = std::string(key), done = std::move(done)](Status st, const uint8_t* data, size_t len) {
        if (st.ok()) {
          std::string_view k;
          auto h = format::DecodeRecordHeader({data, len}, loc.payload_len, &k);
          const uint8_t* payload = data + loc.PayloadOffset();
          const bool good = h.ok() && k == key && h->ns_id == ns && h->segment_id == loc.segment &&
                            h->generation == loc.generation && h->payload_len == loc.payload_len &&
                            h->payload_checksum == loc.checksum &&
                            format::Checksum(payload, loc.payload_len) == loc.checksum;
          if (good) {
            counters_.hits.fetch_add(1);
            counters_.bytes_read.fetch_add(loc.payload_len);
            done(Status::OK(), payload, loc.payload_len);
            return;
          }
          st = Status::Corruption("shared tier record of " + loc.base + " failed verification");
        }
        counters_.misses.fetch_add(1);
        if (st.code() == Code::kTimedOut) counters_.deadline_misses.fetch_add(1);
        if (st.code() == Code::kCorruption) counters_.checksum_failures.fetch_add(1);
        // A vanished object or a bad record will not get better: forget it.
        if (st.code() == Code::kNotFound || st.code() == Code::kCorruption)
          index_->DropEntry(ns, key, loc.base).IgnoreError();
        done(st, nullptr, 0);
      });
  return true;
}

void SharedTier::Run() {
  auto connect_backoff = std::chrono::milliseconds(200);
  auto upload_backoff = std::chrono::milliseconds(kMinBackoff);
  FailureStreak connecting("connecting to Ceph", source_.warn), uploading("uploading", source_.warn),
      polling("reading the catalog", source_.warn);
  Clock::time_point next_upload = Clock::now(), next_poll = Clock::now();
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (!connected_) {
      l.unlock();
      RadosClient::Config cfg{opt_.ceph_conf, opt_.client_id, opt_.pool, opt_.rados_namespace, opt_.op_timeout_ms};
      auto c = RadosClient::Connect(cfg);
      if (c.ok()) {  // the operator's lines go out without the lock held
        connecting.Worked();
      } else {
        connecting.Failed(c.status());
      }
      l.lock();
      if (c.ok()) {
        std::unique_lock<std::shared_mutex> cl(client_mu_);
        client_ = std::shared_ptr<RadosClient>(std::move(c).value());
        connected_ = true;
        connect_failed_ = false;
        next_poll = Clock::now();
        cv_.notify_all();  // WaitConnected
      } else {
        connect_failed_ = true;
        cv_.notify_all();
        cv_.wait_for(l, connect_backoff, [this] { return stop_; });
        connect_backoff = std::min<std::chrono::milliseconds>(connect_backoff * 2, std::chrono::seconds(5));
      }
      continue;
    }
    auto now = Clock::now();
    if (!uploads_.empty() && now >= next_upload) {
      const size_t n = std::min(uploads_.size(), kUploadBatch);
      std::vector<std::pair<uint32_t, uint32_t>> batch(uploads_.begin(), uploads_.begin() + static_cast<ptrdiff_t>(n));
      l.unlock();
      size_t finished = 0;
      Status st = UploadBatch(batch, &finished);
      if (st.ok()) {
        uploading.Worked();
      } else {
        uploading.Failed(st);
      }
      l.lock();
      // Only NoteSealed adds to the queue, at its back: the front is the batch.
      uploads_.erase(uploads_.begin(), uploads_.begin() + static_cast<ptrdiff_t>(finished));
      if (uploads_.empty()) cv_.notify_all();  // WaitUploaded
      if (finished > 0) next_poll = Clock::now();  // enforce the budget now
      if (st.ok()) {
        upload_backoff = kMinBackoff;
      } else {
        counters_.upload_retries.fetch_add(1);
        next_upload = Clock::now() + upload_backoff;
        upload_backoff = std::min<std::chrono::milliseconds>(upload_backoff * 2, kMaxBackoff);
      }
      continue;
    }
    if (now >= next_poll) {
      l.unlock();
      const Status st = Poll();  // retried at the next interval
      if (st.ok()) {
        polling.Worked();
      } else {
        polling.Failed(st);
      }
      l.lock();
      next_poll = Clock::now() + std::chrono::milliseconds(opt_.poll_interval_ms);
      continue;
    }
    auto wake = next_poll;
    if (!uploads_.empty()) wake = std::min(wake, next_upload);
    cv_.wait_until(l, wake);
  }
}

Status SharedTier::Poll() {
  auto c = client();
  if (!c) return Status::Closed("shared tier is not connected");
  auto listed = c->OmapList(kCatalogObject);
  if (!listed.ok()) return listed.status();
  std::vector<CatalogEntry> entries;  // in key order: oldest upload first
  for (const auto& [k, v] : *listed) {
    auto e = DecodeCatalogValue(k, v);
    if (e.ok()) entries.push_back(std::move(*e));
  }
  // Budget first, so that nothing about to go is imported.
  if (opt_.budget_bytes != 0) {
    uint64_t total = 0;
    for (const CatalogEntry& e : entries) total += e.bytes;
    size_t drop = 0;
    while (drop < entries.size() && total > opt_.budget_bytes) total -= entries[drop++].bytes;
    for (size_t i = 0; i < drop; ++i) {
      const CatalogEntry& e = entries[i];
      // Out of the catalog first: from then on nobody imports it, and
      // readers that did treat the vanishing objects as misses.
      if (Stopping() || !c->OmapRemove(kCatalogObject, {e.key}).ok()) break;
      const uint32_t parts = static_cast<uint32_t>((e.bytes + e.part_bytes - 1) / e.part_bytes);
      // An object that fails to go is an orphan now: the sweeper takes it.
      bool unreachable = false;
      for (uint32_t p = 0; p < parts && !unreachable; ++p) {
        const Status st = c->Remove(PartObject(e.base, p));
        if (st.ok()) counters_.deleted.fetch_add(1);
        unreachable = st.code() == Code::kTimedOut;
      }
      if (!unreachable && c->Remove(SummaryObject(e.base)).ok()) counters_.deleted.fetch_add(1);
      counters_.uploads_deleted.fetch_add(1);
      if (unreachable) break;
    }
    entries.erase(entries.begin(), entries.begin() + static_cast<ptrdiff_t>(drop));
  }
  std::set<std::string> present, bases;
  Status first;
  bool unreachable = false;
  for (const CatalogEntry& e : entries) {
    present.insert(e.key);
    bases.insert(e.base);
    if (index_->IsImported(e.key)) continue;
    if (unreachable || Stopping()) continue;  // imported at a later poll
    auto raw = c->ReadWhole(SummaryObject(e.base), e.summary_bytes);
    if (!raw.ok()) {
      if (raw.status().code() != Code::kNotFound && first.ok()) first = raw.status();
      unreachable = raw.status().code() == Code::kTimedOut;
      continue;  // NotFound: being deleted
    }
    auto s = DecodeSummary(*raw);
    if (!s.ok() || s->ObjectBase() != e.base || s->bytes != e.bytes || s->part_bytes != e.part_bytes) continue;
    if (index_->Import(*s, e.key).ok()) counters_.imported.fetch_add(1);
  }
  auto imported = index_->Imported();
  if (!imported.ok()) return imported.status();
  for (const auto& [key, base] : *imported)
    if (!present.count(key)) index_->Drop(key, base).IgnoreError();
  if (opt_.orphan_sweep_interval_ms != 0 && Clock::now() >= next_sweep_) {
    next_sweep_ = Clock::now() + std::chrono::milliseconds(opt_.orphan_sweep_interval_ms);
    Status st = SweepOrphans(bases);
    if (first.ok()) first = st;
  }
  return first;
}

Status SharedTier::SweepOrphans(const std::set<std::string>& catalogued_bases) {
  auto c = client();
  if (!c) return Status::Closed("shared tier is not connected");
  // Listed after the catalog was read: an upload whose catalog entry came in
  // between has only fresh objects, which the grace protects.
  auto names = c->ListObjects();
  if (!names.ok()) return names.status();
  const int64_t grace_s = (static_cast<int64_t>(opt_.orphan_grace_ms) + 999) / 1000;
  for (const std::string& name : *names) {
    const std::string base = BaseOfObject(name);
    if (base.empty() || catalogued_bases.count(base)) continue;
    if (Stopping()) break;
    auto mtime = c->ModifiedUnixSeconds(name);
    if (mtime.status().code() == Code::kTimedOut) return mtime.status();  // unreachable: next sweep
    if (!mtime.ok()) continue;  // gone meanwhile
    if (static_cast<int64_t>(NowUnixMs() / 1000) - *mtime < grace_s) continue;
    const Status st = c->Remove(name);
    if (st.ok()) counters_.orphans_removed.fetch_add(1);
    if (st.code() == Code::kTimedOut) return st;
  }
  return Status::OK();
}

}  // namespace kvtier::remote
