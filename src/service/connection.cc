#include "service/connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

#include "format/record.h"
#include "util/clock.h"
#include "wire/messages.h"
#include "wire/requests.h"

namespace kvtier::service {

namespace {
constexpr uint32_t kSocketTimeoutMs = 10000;  // a peer stalled inside a frame, or not reading its replies
constexpr size_t kMaxSendBatch = 1 << 20;
}  // namespace

void ServerCore::Log(const std::string& line) const {
  if (opt.log) {
    opt.log(line);
  } else {
    std::fprintf(stderr, "kvtier serve: %s\n", line.c_str());
  }
}

Connection::Connection(ServerCore* core, wire::UniqueFd sock, Peer peer, uint64_t id)
    : core_(core), sock_(std::move(sock)), frames_(sock_.get(), /*idle_forever=*/true), peer_(peer), id_(id) {}

Connection::~Connection() { Join(); }

void Connection::Start() {
  wire::SetTimeouts(sock_.get(), kSocketTimeoutMs, kSocketTimeoutMs).IgnoreError();
  reader_ = std::thread([this] { ReadLoop(); });
  writer_ = std::thread([this] { WriteLoop(); });
}

void Connection::Shutdown() { ::shutdown(sock_.get(), SHUT_RDWR); }

void Connection::Join() {
  if (reader_.joinable()) reader_.join();
  if (writer_.joinable()) writer_.join();
}

void Connection::ReadLoop() {
  reader_id_ = std::this_thread::get_id();
  std::string why = "closed the connection";
  for (;;) {
    // Idle clients may wait as long as they like between frames; inside a
    // frame the socket's timeout applies.
    wire::Frame f;
    Status st;
    if (!PollForNext(&f, &st)) st = frames_.Next(&f);
    if (st.code() == Code::kClosed) break;
    if (!st.ok()) {
      if (st.code() == Code::kInvalidArgument || st.code() == Code::kNotSupported) ++core_->malformed;
      why = st.ToString();
      break;
    }
    ++requests_;
    ++core_->requests;
    st = Handle(f);
    if (!st.ok()) {
      why = st.ToString();
      break;
    }
  }
  ::shutdown(sock_.get(), SHUT_RDWR);
  // Wait for what the store still does for this client: its callbacks write
  // into this client's regions and queue replies.
  {
    MutexLock l(&inflight_mu_);
    while (inflight_requests_ > 0) l.Wait(idle_cv_);
  }
  ReleaseLeases();
  {
    MutexLock l(&out_mu_);
    out_closed_ = true;
  }
  out_cv_.notify_all();
  {
    MutexLock l(&regions_mu_);
    core_->regions -= regions_.size();
    regions_.clear();
  }
  core_->Log("client " + std::to_string(id_) + " (" + name_ + ", pid " + std::to_string(peer_.creds.pid) +
             ") disconnected after " + std::to_string(requests_) + " requests: " + why);
  finished_.store(true);
}

namespace {
// How long after a reply the client's next request is still expected soon:
// a few of its round trips.
constexpr auto kAnsweredWindow = std::chrono::microseconds(200);

int64_t SteadyNs() { return MonotonicNs(Clock::now()); }

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  for (int i = 0; i < 16; ++i) __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}
}  // namespace

bool Connection::PollForNext(wire::Frame* f, Status* st) {
  if (core_->spin_us == 0) return false;
  auto expected = [&](int64_t now_ns) {
    return busy_.load(std::memory_order_relaxed) > 0 ||
           now_ns - answered_ns_.load(std::memory_order_relaxed) <
               std::chrono::duration_cast<std::chrono::nanoseconds>(kAnsweredWindow).count();
  };
  if (!expected(SteadyNs())) return false;
  if (core_->spinning.fetch_add(1) >= core_->max_spinning) {  // enough cores poll already
    core_->spinning.fetch_sub(1);
    return false;
  }
  const int64_t until = SteadyNs() + int64_t{core_->spin_us} * 1000;
  bool got = false;
  for (;;) {
    Result<bool> r = frames_.TryNext(f);
    if (!r.ok() || *r) {
      *st = r.ok() ? Status::OK() : r.status();
      if (r.ok()) ++core_->polled;
      got = true;
      break;
    }
    const int64_t now = SteadyNs();
    if (now >= until || !expected(now)) break;
    CpuRelax();
  }
  core_->spinning.fetch_sub(1);
  return got;
}

void Connection::WriteLoop() {
  for (;;) {
    std::string batch;
    {
      MutexLock l(&out_mu_);
      while (sending_ || (out_.empty() && !out_closed_)) l.Wait(out_cv_);
      if (out_.empty()) return;
      while (!out_.empty() && batch.size() < kMaxSendBatch) {
        batch += out_.front();
        out_.pop_front();
      }
      sending_ = true;
    }
    Status sent = wire::SendFrames(sock_.get(), batch);
    MutexLock l(&out_mu_);
    sending_ = false;
    if (fd_waiting_) fd_cv_.notify_all();
    if (!sent.ok()) {
      // The client is gone or not reading: end the connection; replies still
      // queued are dropped.
      ::shutdown(sock_.get(), SHUT_RDWR);
      out_.clear();
      while (!out_closed_) l.Wait(out_cv_);
      return;
    }
  }
}

void Connection::Send(std::string frame) {
  if (core_->spin_us != 0) answered_ns_.store(SteadyNs(), std::memory_order_relaxed);
  {
    MutexLock l(&out_mu_);
    if (out_closed_) return;
    // Replies may go in any order (each names its request), but frames
    // never interleave: one sender at a time.
    if (sending_ || !out_.empty()) {
      out_.push_back(std::move(frame));
      l.Unlock();
      out_cv_.notify_all();
      return;
    }
    sending_ = true;
  }
  size_t sent = 0;
  Status st;
  if (std::this_thread::get_id() == reader_id_) {
    st = wire::SendFrames(sock_.get(), frame);  // the reader may wait on its own client
    if (st.ok()) sent = frame.size();
  } else {
    Result<size_t> n = wire::SendNow(sock_.get(), frame);  // a store thread never waits
    if (n.ok()) sent = *n;
    else st = n.status();
  }
  bool wake;
  {
    MutexLock l(&out_mu_);
    sending_ = false;
    if (!st.ok()) {
      ::shutdown(sock_.get(), SHUT_RDWR);  // the reader sees the end next
      out_.clear();
    } else if (sent < frame.size()) {
      out_.push_front(frame.substr(sent));
    }
    wake = !out_.empty();
    if (fd_waiting_ && !wake) fd_cv_.notify_all();
  }
  if (wake) out_cv_.notify_all();
}

void Connection::ReplyWithFd(const wire::FrameHeader& req, const wire::WireWriter& body, int fd) {
  wire::WireWriter w;
  w.Status(Status::OK());
  std::string frame = w.Frame(req.op | wire::kReplyBit, req.id) + body.body();
  wire::FrameHeader h;
  h.op = req.op | wire::kReplyBit;
  h.id = req.id;
  h.body_bytes = static_cast<uint32_t>(frame.size() - wire::kHeaderBytes);
  wire::EncodeHeader(h, reinterpret_cast<uint8_t*>(frame.data()));
  {
    // The writer (or a store thread) sends what is queued first; it wakes
    // this reader once the queue is empty.
    MutexLock l(&out_mu_);
    fd_waiting_ = true;
    while (!out_closed_ && (sending_ || !out_.empty())) l.Wait(fd_cv_);
    fd_waiting_ = false;
    if (out_closed_) return;
    sending_ = true;
  }
  Status st = wire::SendFrames(sock_.get(), frame, {fd});
  bool wake;
  {
    MutexLock l(&out_mu_);
    sending_ = false;
    if (!st.ok()) {
      ::shutdown(sock_.get(), SHUT_RDWR);
      out_.clear();
    }
    wake = !out_.empty();
  }
  if (wake) out_cv_.notify_all();
}

void Connection::Reply(const wire::FrameHeader& req, const Status& st, const wire::WireWriter* body) {
  wire::WireWriter w;
  w.Status(st);
  std::string frame = w.Frame(req.op | wire::kReplyBit, req.id);
  if (body != nullptr && st.ok()) {
    frame += body->body();
    // The header's length covers the status and the body.
    wire::FrameHeader h;
    h.op = req.op | wire::kReplyBit;
    h.id = req.id;
    h.body_bytes = static_cast<uint32_t>(frame.size() - wire::kHeaderBytes);
    wire::EncodeHeader(h, reinterpret_cast<uint8_t*>(frame.data()));
  }
  Send(std::move(frame));
}

bool Connection::Admit(uint64_t bytes, bool is_put) {
  MutexLock l(&inflight_mu_);
  if (inflight_requests_ >= core_->opt.max_client_requests) return false;
  // One put is always let through, so that no size can starve.
  if (is_put && inflight_bytes_ > 0 && inflight_bytes_ + bytes > core_->opt.max_client_inflight_bytes) return false;
  ++inflight_requests_;
  busy_.fetch_add(1, std::memory_order_relaxed);
  if (is_put) inflight_bytes_ += bytes;
  return true;
}

void Connection::Finish(uint64_t bytes) {
  MutexLock l(&inflight_mu_);
  inflight_bytes_ -= bytes;
  busy_.fetch_sub(1, std::memory_order_relaxed);
  if (--inflight_requests_ == 0) idle_cv_.notify_all();
}

Status Connection::CheckNamespace(NamespaceId ns) const {
  if (core_->access.Allowed(peer_, ns)) return Status::OK();
  return Status::NotFound("unknown namespace " + NamespaceIdToHex(ns));
}

Result<Connection::Resolved> Connection::Resolve(const std::vector<wire::WireFragment>& frags, bool for_output) {
  Resolved out;
  MutexLock l(&regions_mu_);
  for (const wire::WireFragment& f : frags) {
    auto it = regions_.find(f.region);
    if (it == regions_.end()) return Status::InvalidArgument("fragment names unknown region " + std::to_string(f.region));
    if (!it->second->Contains(f.offset, f.size))
      return Status::InvalidArgument("fragment [" + std::to_string(f.offset) + ", +" + std::to_string(f.size) +
                                     ") is outside region " + std::to_string(f.region));
    uint8_t* p = it->second->data() + f.offset;
    if (for_output) {
      out.out.push_back(MutableFragment{p, f.size});
    } else {
      out.in.push_back(Fragment{p, f.size});
    }
    out.bytes += f.size;
    if (out.keep.empty() || out.keep.back() != it->second) out.keep.push_back(it->second);
  }
  return out;
}

Status Connection::Handle(wire::Frame& f) {
  const wire::FrameHeader& h = f.header;
  if (h.op & wire::kReplyBit) return Status::InvalidArgument("a client sent a reply frame");
  if (!hello_ && h.op != static_cast<uint16_t>(wire::Op::kHello))
    return Status::InvalidArgument("the first frame must be hello, not " + std::string(wire::OpName(h.op)));
  // Descriptors reach hello and register_region only (wire::CarriesFds).
  const std::string_view body = f.body;
  switch (static_cast<wire::Op>(h.op)) {
    case wire::Op::kHello: return OnHello(f);
    case wire::Op::kRegisterRegion: return OnRegisterRegion(f);
    case wire::Op::kPut: OnPut(h, body); return Status::OK();
    case wire::Op::kGet: OnGet(h, body); return Status::OK();
    case wire::Op::kGetBatch: OnGetBatch(h, body); return Status::OK();
    case wire::Op::kUnregisterRegion:
    case wire::Op::kRegisterNamespace:
    case wire::Op::kFindNamespace:
    case wire::Op::kListNamespaces:
    case wire::Op::kRemoveNamespace: OnNamespaceCall(h, body); return Status::OK();
    case wire::Op::kContains:
    case wire::Op::kLookupPrefix:
    case wire::Op::kStat:
    case wire::Op::kListBlocks:
    case wire::Op::kRemove:
    case wire::Op::kInspectRecord: OnLookup(h, body); return Status::OK();
    case wire::Op::kRemoveBatch:
    case wire::Op::kContainsBatch:
    case wire::Op::kTouchBatch: OnKeyFlags(h, body); return Status::OK();
    case wire::Op::kFlush:
    case wire::Op::kEvictTo:
    case wire::Op::kShareNow:
    case wire::Op::kGetStats:
    case wire::Op::kSegments:
    case wire::Op::kVerify: OnAdmin(h, body); return Status::OK();
    case wire::Op::kMapTier:
    case wire::Op::kPinTier:
    case wire::Op::kUnpinTier: OnTier(h, body); return Status::OK();
  }
  ++core_->malformed;
  Reply(h, Status::NotSupported("unknown request " + std::to_string(h.op)));
  return Status::OK();
}

Status Connection::OnHello(wire::Frame& f) {
  if (hello_) return Status::InvalidArgument("a second hello");
  wire::HelloRequest req;
  Status st = wire::Parse(f.body, &req);
  if (!st.ok()) {
    ++core_->malformed;
    Reply(f.header, st);
    return st;
  }
  name_ = req.client_name;
  const uint64_t staging = req.staging_bytes;
  if ((staging != 0) != (f.fds.size() == 1)) {
    st = Status::InvalidArgument("hello carries a staging size and exactly one descriptor, or neither");
    Reply(f.header, st);
    return st;
  }
  uint32_t region = 0;
  if (staging != 0) {
    auto mapped = wire::SharedRegion::Map(f.fds[0].get(), peer_.admin, core_->opt.max_region_bytes);
    if (!mapped.ok()) {
      Reply(f.header, mapped.status());
      return mapped.status();
    }
    core_->PopulateAhead(*mapped, id_);
    MutexLock l(&regions_mu_);
    region = next_region_++;
    regions_[region] = std::move(mapped).value();
    ++core_->regions;
  }
  // Puts from the client's own memory are read from it where the kernel
  // lets this process and it saves a copy: into the RAM tier. Without a
  // tier the store writes a staged put from staging, one copy already.
  std::string memory;
  if (req.probe_address != 0 && core_->sink != nullptr && core_->sink->ram_tier() == nullptr) {
    memory = ", puts through staging (no RAM tier: one copy that way)";
  } else if (req.probe_address != 0 && core_->sink != nullptr) {
    auto pm = wire::PeerMemory::Open(peer_.creds.pid, req.probe_address, req.probe);
    if (pm.ok()) {
      peer_memory_ = std::move(pm).value();
      memory = ", puts read from its memory";
    } else {
      memory = ", puts through staging (" + pm.status().ToString() + ")";
    }
  }
  hello_ = true;
  core_->Log("client " + std::to_string(id_) + " (" + name_ + ") connected: pid " + std::to_string(peer_.creds.pid) +
             ", uid " + std::to_string(peer_.creds.uid) + ", gid " + std::to_string(peer_.creds.gid) +
             (staging != 0 ? ", staging " + std::to_string(staging >> 20) + " MiB" : "") + memory);
  wire::WireWriter w;
  w.U64(id_);
  w.U32(region);
  wire::Encode(w, core_->store->Description());
  w.Bool(peer_memory_ != nullptr);
  Reply(f.header, Status::OK(), &w);
  return Status::OK();
}

Status Connection::OnRegisterRegion(wire::Frame& f) {
  wire::RegisterRegionRequest req;
  Status st = wire::Parse(f.body, &req);
  if (st.ok() && f.fds.size() != 1) st = Status::InvalidArgument("register_region carries exactly one descriptor");
  if (!st.ok()) {
    ++core_->malformed;
    Reply(f.header, st);
    return Status::OK();
  }
  auto mapped = wire::SharedRegion::Map(f.fds[0].get(), peer_.admin, core_->opt.max_region_bytes);
  if (!mapped.ok()) {
    Reply(f.header, mapped.status());
    return Status::OK();
  }
  core_->PopulateAhead(*mapped, id_);
  uint32_t region;
  {
    MutexLock l(&regions_mu_);
    region = next_region_++;
    regions_[region] = std::move(mapped).value();
  }
  ++core_->regions;
  wire::WireWriter w;
  w.U32(region);
  Reply(f.header, Status::OK(), &w);
  return Status::OK();
}

}  // namespace kvtier::service
