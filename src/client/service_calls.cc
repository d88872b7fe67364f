// ServiceStore's calls that carry no payload: lookups, removal, capacity,
// inspection, registered memory, and opening and closing.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "client/service_store.h"
#include "format/record.h"
#include "wire/messages.h"
#include "wire/requests.h"

extern char** environ;

namespace kvtier::client {

namespace {
constexpr auto kVerifyTimeout = std::chrono::hours(1);
constexpr uint32_t kListPage = 1024;

template <typename T>
Result<T> DecodeOne(const Result<std::string>& body, const char* what) {
  if (!body.ok()) return body.status();
  wire::WireReader r(*body);
  T v{};
  wire::Decode(r, &v);
  KVTIER_RETURN_IF_ERROR(r.Finish(what));
  return v;
}

// A piece of a key list (lookup_prefix, remove_batch): n keys from `at`.
wire::WireWriter KeyListCall(NamespaceId ns, std::span<const std::string_view> keys, size_t at, size_t n) {
  wire::LookupRequest req;
  req.ns = ns;
  for (size_t i = 0; i < n; ++i) req.keys.emplace_back(keys[at + i]);
  wire::WireWriter w;
  wire::Encode(w, req);
  return w;
}

wire::WireWriter KeyCall(NamespaceId ns, std::string_view key) {
  wire::WireWriter w;
  wire::Encode(w, wire::KeyRequest{ns, std::string(key)});
  return w;
}
}  // namespace

Result<bool> ServiceStore::Contains(NamespaceId ns, std::string_view key) {
  auto body = Call(wire::Op::kContains, KeyCall(ns, key), OpDeadline());
  if (!body.ok()) return body.status();
  wire::WireReader r(*body);
  const bool v = r.Bool();
  KVTIER_RETURN_IF_ERROR(r.Finish("contains reply"));
  return v;
}

Result<size_t> ServiceStore::LookupPrefix(NamespaceId ns, std::span<const std::string_view> keys) {
  // Longer lists go in pieces; a piece that is not all present ends it.
  size_t hits = 0;
  for (size_t at = 0; at < keys.size() || at == 0; at += wire::kMaxBatchKeys) {
    const size_t n = std::min<size_t>(keys.size() - at, wire::kMaxBatchKeys);
    auto body = Call(wire::Op::kLookupPrefix, KeyListCall(ns, keys, at, n), OpDeadline());
    if (!body.ok()) return body.status();
    wire::WireReader r(*body);
    const uint64_t got = r.U64();
    KVTIER_RETURN_IF_ERROR(r.Finish("lookup_prefix reply"));
    hits += got;
    if (got < n || keys.empty()) break;
  }
  return hits;
}

Result<BlockInfo> ServiceStore::Stat(NamespaceId ns, std::string_view key) {
  return DecodeOne<BlockInfo>(Call(wire::Op::kStat, KeyCall(ns, key), OpDeadline()), "stat reply");
}

Status ServiceStore::ListBlocks(NamespaceId ns, std::string_view key_prefix, const ListCursor* from,
                                const std::function<bool(const BlockInfo&)>& fn) {
  ListCursor after = from != nullptr ? *from : ListCursor{};
  bool has_after = from != nullptr;
  for (;;) {
    wire::WireWriter w;
    wire::Encode(w, wire::ListBlocksRequest{ns, std::string(key_prefix), has_after, after.ns, after.key, kListPage});
    auto body = Call(wire::Op::kListBlocks, w, OpDeadline());
    if (!body.ok()) return body.status();
    wire::WireReader r(*body);
    const uint32_t n = r.Count(kListPage, 8);
    std::vector<BlockInfo> page(n);
    for (BlockInfo& b : page) wire::Decode(r, &b);
    const bool more = r.Bool();
    KVTIER_RETURN_IF_ERROR(r.Finish("list_blocks reply"));
    for (const BlockInfo& b : page)
      if (!fn(b)) return Status::OK();
    if (!more || page.empty()) return Status::OK();
    after = ListCursor{page.back().ns, page.back().key};
    has_after = true;
  }
}

Status ServiceStore::Remove(NamespaceId ns, std::string_view key) {
  if (key.empty() || key.size() > format::kMaxKeyBytes) return Status::InvalidArgument("key length out of range");
  return Call(wire::Op::kRemove, KeyCall(ns, key), OpDeadline()).status();
}

Status ServiceStore::RemoveBatch(NamespaceId ns, std::span<const std::string_view> keys, std::vector<bool>* present) {
  return KeyFlagsCalls(wire::Op::kRemoveBatch, ns, keys, present);
}

Status ServiceStore::ContainsBatch(NamespaceId ns, std::span<const std::string_view> keys, std::vector<bool>* present) {
  if (present == nullptr) return Status::InvalidArgument("ContainsBatch needs somewhere to answer");
  return KeyFlagsCalls(wire::Op::kContainsBatch, ns, keys, present);
}

Status ServiceStore::TouchBatch(NamespaceId ns, std::span<const std::string_view> keys, std::vector<bool>* present) {
  return KeyFlagsCalls(wire::Op::kTouchBatch, ns, keys, present);
}

// Longer lists go in pieces of kMaxBatchKeys (for removes, a flush each).
Status ServiceStore::KeyFlagsCalls(wire::Op op, NamespaceId ns, std::span<const std::string_view> keys,
                                   std::vector<bool>* flags) {
  for (std::string_view key : keys)
    if (key.empty() || key.size() > format::kMaxKeyBytes) return Status::InvalidArgument("key length out of range");
  if (flags != nullptr) flags->clear();
  for (size_t at = 0; at < keys.size(); at += wire::kMaxBatchKeys) {
    const size_t n = std::min<size_t>(keys.size() - at, wire::kMaxBatchKeys);
    auto body = Call(op, KeyListCall(ns, keys, at, n), OpDeadline());
    if (!body.ok()) return body.status();
    wire::WireReader r(*body);
    std::vector<bool> piece;
    wire::DecodeKeyFlagsReply(r, n, &piece);
    KVTIER_RETURN_IF_ERROR(r.Finish(std::string(wire::OpName(static_cast<uint16_t>(op))) + " reply"));
    if (flags != nullptr) flags->insert(flags->end(), piece.begin(), piece.end());
  }
  return Status::OK();
}

Status ServiceStore::Flush() { return Call(wire::Op::kFlush, wire::WireWriter(), OpDeadline()).status(); }

Status ServiceStore::EvictTo(uint64_t target_used_bytes) {
  wire::WireWriter w;
  wire::Encode(w, wire::U64Request{target_used_bytes});
  return Call(wire::Op::kEvictTo, w, OpDeadline()).status();
}

Status ServiceStore::ShareNow(std::chrono::milliseconds timeout) {
  wire::WireWriter w;
  wire::Encode(w, wire::U64Request{static_cast<uint64_t>(timeout.count())});
  return Call(wire::Op::kShareNow, w, Clock::now() + timeout + std::chrono::milliseconds(opt_.client.op_timeout_ms))
      .status();
}

Stats ServiceStore::GetStats() {
  auto s = DecodeOne<Stats>(Call(wire::Op::kGetStats, wire::WireWriter(), OpDeadline()), "get_stats reply");
  return s.ok() ? *s : Stats{};
}

std::vector<SegmentInfo> ServiceStore::Segments() {
  auto body = Call(wire::Op::kSegments, wire::WireWriter(), OpDeadline());
  if (!body.ok()) return {};
  wire::WireReader r(*body);
  std::vector<SegmentInfo> out(r.Count(wire::kMaxListItems, 8));
  for (SegmentInfo& g : out) wire::Decode(r, &g);
  if (!r.Finish("segments reply").ok()) return {};
  return out;
}

Result<VerifyReport> ServiceStore::Verify(const VerifyOptions& options) {
  wire::WireWriter w;
  wire::Encode(w, wire::VerifyRequest{options.deep});
  return DecodeOne<VerifyReport>(Call(wire::Op::kVerify, w, Clock::now() + kVerifyTimeout), "verify reply");
}

Result<RecordInspection> ServiceStore::InspectRecord(NamespaceId ns, std::string_view key) {
  return DecodeOne<RecordInspection>(Call(wire::Op::kInspectRecord, KeyCall(ns, key), OpDeadline()),
                                     "inspect_record reply");
}

StoreDescription ServiceStore::Description() const {
  MutexLock l(&mu_);
  return description_;
}

Status ServiceStore::RegisterMemory(void* base, size_t len, int fd, uint64_t offset) {
  if (base == nullptr || len == 0 || fd < 0) return Status::InvalidArgument("RegisterMemory needs memory and its file");
  wire::UniqueFd own(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!own) return Status::FromErrno(errno, "RegisterMemory");
  auto ch = Live();
  if (!ch.ok()) return ch.status();
  wire::WireWriter w;
  wire::Encode(w, wire::RegisterRegionRequest{len});
  auto body = (*ch)->CallSync(wire::Op::kRegisterRegion, w, OpDeadline(), {own.get()});
  if (!body.ok()) return body.status().WithContext("registering memory with the service");
  wire::WireReader r(*body);
  const uint32_t id = r.U32();
  KVTIER_RETURN_IF_ERROR(r.Finish("register_region reply"));
  (*ch)->AddRegion(base, len, offset, id);
  MutexLock l(&mu_);
  memory_.push_back(Memory{base, len, std::move(own), offset});
  return Status::OK();
}

Status ServiceStore::UnregisterMemory(void* base) {
  {
    MutexLock l(&mu_);
    std::erase_if(memory_, [base](const Memory& m) { return m.base == base; });
    if (ch_ != nullptr) ch_->RemoveRegion(base);
  }
  // The service keeps the mapping while requests that use it are in flight;
  // forgetting the region there is a courtesy (it goes with the connection).
  return Status::OK();
}

Status ServiceStore::Close() {
  if (closed_.exchange(true)) return Status::Closed("store already closed");
  // Async gets copying out of the lent tier end first (their pins' and
  // reads' requests go on the channel).
  if (lent_ != nullptr) lent_->AwaitReads(OpDeadline());
  // The watcher first: it may be connecting, and nothing may connect after.
  std::thread watcher;
  {
    MutexLock l(&mu_);
    watcher = std::move(watcher_);
  }
  {
    MutexLock l(&watch_mu_);
    watch_cv_.notify_all();
  }
  if (watcher.joinable()) watcher.join();
  std::shared_ptr<Channel> ch;
  {
    MutexLock l(&mu_);
    ch = std::move(ch_);
  }
  if (ch == nullptr) return Status::OK();
  // Let what is in flight finish, within the per-call bound.
  const Clock::time_point until = OpDeadline();
  while (ch->alive() && ch->waiting() > 0 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return Status::OK();
}

}  // namespace kvtier::client
