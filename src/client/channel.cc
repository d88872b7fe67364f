#include "client/channel.h"

#include <poll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/reply_wait.h"
#include "wire/messages.h"
#include "wire/requests.h"

namespace kvtier::client {

namespace {
constexpr uint32_t kSocketTimeoutMs = 10000;  // a service that stops reading mid-frame
}

Channel::Channel(wire::UniqueFd sock, std::shared_ptr<wire::SharedRegion> staging)
    : sock_(std::move(sock)),
      frames_(sock_.get(), /*idle_forever=*/false),
      wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      staging_(std::make_unique<Staging>(std::move(staging))) {}

Result<std::unique_ptr<Channel>> Channel::Open(const std::string& socket_path, const ServiceClientOptions& o) {
  auto sock = wire::ConnectUnix(socket_path);
  if (!sock.ok()) return sock.status();
  auto staging = wire::SharedRegion::CreateMemfd("kvtier-staging", o.staging_bytes);
  if (!staging.ok()) return staging.status().WithContext("client staging");
  std::unique_ptr<Channel> ch(new Channel(std::move(sock).value(), std::move(staging).value()));
  if (!ch->wake_fd_) return Status::FromErrno(errno, "creating the client's eventfd");
  ch->reply_spin_us_ = o.reply_spin_us >= 0 ? static_cast<uint32_t>(o.reply_spin_us)
                     : std::thread::hardware_concurrency() >= 8 ? 50 : 0;
  KVTIER_RETURN_IF_ERROR(wire::SetTimeouts(ch->sock_.get(), kSocketTimeoutMs, o.connect_timeout_ms));
  KVTIER_RETURN_IF_ERROR(ch->Hello(o, Clock::now() + std::chrono::milliseconds(o.connect_timeout_ms)));
  // From here on replies come whenever they are ready: no receive timeout.
  KVTIER_RETURN_IF_ERROR(wire::SetTimeouts(ch->sock_.get(), kSocketTimeoutMs, 0));
  ch->reader_ = std::thread([p = ch.get()] { p->ReadLoop(); });
  ch->timer_ = std::thread([p = ch.get()] { p->TimerLoop(); });
  return ch;
}

Status Channel::Hello(const ServiceClientOptions& o, Clock::time_point) {
  wire::HelloRequest req;
  req.client_name = o.client_name.empty() ? "pid " + std::to_string(::getpid()) : o.client_name;
  req.staging_bytes = staging_->region()->size();
  if (o.service_reads_memory) OfferMemoryProbe(&req);
  wire::WireWriter w;
  wire::Encode(w, req);
  KVTIER_RETURN_IF_ERROR(wire::SendFrames(sock_.get(), w.Frame(static_cast<uint16_t>(wire::Op::kHello), 0),
                                          {staging_->region()->fd()}));
  wire::Frame f;
  Status st;
  {
    MutexLock l(&read_mu_);
    st = frames_.Next(&f);
  }
  if (!st.ok()) return st.WithContext("waiting for the service's hello");
  if (f.header.op != (static_cast<uint16_t>(wire::Op::kHello) | wire::kReplyBit))
    return Status::InvalidArgument("the service answered hello with " + std::string(wire::OpName(f.header.op)));
  wire::WireReader r(f.body);
  st = r.Status();
  if (!st.ok()) return st.WithContext("the service refused this client");
  (void)r.U64();  // our client id, for its log
  staging_region_ = r.U32();
  wire::Decode(r, &description_);
  reads_memory_ = r.Bool();
  return r.Finish("hello reply");
}

// Under Yama's ptrace_scope 1 only a process this one names may read its
// memory: the service, whose pid the socket tells. Elsewhere (no Yama:
// EINVAL) the same user may anyway.
void Channel::OfferMemoryProbe(wire::HelloRequest* req) {
  if (::getrandom(probe_.data(), probe_.size(), 0) != static_cast<ssize_t>(probe_.size())) return;
  auto server = wire::PeerOf(sock_.get());
  if (server.ok() && server->pid > 0) (void)::prctl(PR_SET_PTRACER, static_cast<unsigned long>(server->pid), 0, 0, 0);
  req->probe_address = reinterpret_cast<uintptr_t>(probe_.data());
  req->probe.assign(probe_.data(), probe_.size());
}

Channel::~Channel() {
  Fail(Status::IOError("the client closed its connection to the service"));
  ::shutdown(sock_.get(), SHUT_RDWR);
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  timer_cv_.notify_all();
  if (reader_.joinable()) reader_.join();
  if (timer_.joinable()) timer_.join();
}

size_t Channel::waiting() const {
  MutexLock l(&mu_);
  return pending_.size();
}

void Channel::Call(wire::Op op, const wire::WireWriter& body, Clock::time_point deadline, Done done,
                   Staging::Extent hold, const std::vector<int>& fds) {
  Send(op, body, deadline, std::move(done), hold, fds, /*sync=*/false);
}

void Channel::Send(wire::Op op, const wire::WireWriter& body, Clock::time_point deadline, Done done,
                   Staging::Extent hold, const std::vector<int>& fds, bool sync,
                   std::shared_ptr<std::vector<wire::UniqueFd>> fds_out) {
  uint64_t id;
  bool wake_timer = false;
  {
    MutexLock l(&mu_);
    if (!dead_.ok()) {
      Status why = dead_;
      l.Unlock();
      staging_->Free(hold);
      return done(why, nullptr);
    }
    id = next_id_++;
    pending_[id] = Pending{std::move(done), deadline, hold, false, sync, std::move(fds_out)};
    // The timer sleeps until the first deadline: wake it only when this one
    // comes sooner (waking it on every call costs each call a thread wake-up).
    if (deadline != kNoDeadline) {
      wake_timer = deadlines_.empty() || deadline < deadlines_.begin()->first;
      deadlines_.emplace(deadline, id);
    }
  }
  if (wake_timer) timer_cv_.notify_one();
  Status st;
  {
    MutexLock l(&send_mu_);
    st = wire::SendFrames(sock_.get(), body.Frame(static_cast<uint16_t>(op), id), fds);
  }
  if (!st.ok()) Fail(st.WithContext("sending to the service"));
}

Result<std::string> Channel::CallSyncTakingFds(wire::Op op, const wire::WireWriter& body,
                                               Clock::time_point deadline, std::vector<wire::UniqueFd>* fds) {
  auto w = ReplyWait<Result<std::string>>::Make();
  auto got = std::make_shared<std::vector<wire::UniqueFd>>();
  Send(op, body, deadline, [w](Status st, wire::WireReader* r) {
    if (!st.ok()) return w->Set(st);
    w->Set(std::string(r != nullptr ? r->Rest() : std::string_view()));
  }, {}, {}, /*sync=*/true, got);
  Result<std::string> r = Await(*w);
  // The reply has been dispatched (Await returned its result), so `got` is
  // written; a reply that timed out on this side leaves it empty.
  if (r.ok()) *fds = std::move(*got);
  return r;
}

Result<std::string> Channel::CallSync(wire::Op op, const wire::WireWriter& body, Clock::time_point deadline,
                                      const std::vector<int>& fds) {
  auto w = ReplyWait<Result<std::string>>::Make();
  Send(op, body, deadline, [w](Status st, wire::WireReader* r) {
    if (!st.ok()) return w->Set(st);
    // The rest of the body, for the caller to read.
    w->Set(std::string(r != nullptr ? r->Rest() : std::string_view()));
  }, {}, fds, /*sync=*/true);
  // The caller reads the socket itself while it waits, so that its reply
  // needs no wake-up of the reader thread and no hand-over from it.
  return Await(*w);  // Call always completes by its deadline
}

void Channel::CallForWaiter(wire::Op op, const wire::WireWriter& body, Clock::time_point deadline, Done done,
                            Staging::Extent hold) {
  Send(op, body, deadline, std::move(done), hold, {}, /*sync=*/true);
}

void Channel::ReadLoop() {
  for (;;) {
    pollfd p[2] = {{sock_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      Fail(Status::FromErrno(errno, "waiting for the service's replies"));
      return;
    }
    if (p[1].revents & POLLIN) DispatchDeferred();
    if (p[0].revents != 0 && !Pump(/*on_caller=*/false)) return;
  }
}

bool Channel::Pump(bool on_caller) {
  std::vector<wire::Frame> frames;
  Status st;
  if (!on_caller) {
    read_mu_.Lock();
  } else if (!read_mu_.TryLock()) {
    return true;
  }
  for (;;) {
    wire::Frame f;
    auto got = frames_.TryNext(&f);
    if (!got.ok()) {
      st = got.status();
      break;
    }
    if (!*got) break;
    frames.push_back(std::move(f));
  }
  read_mu_.Unlock();
  // Completions run outside the lock: one may issue a request of its own.
  for (wire::Frame& f : frames)
    if (!Dispatch(f, on_caller)) return false;
  if (!st.ok()) {
    Fail(st.code() == Code::kClosed ? Status::IOError("the service closed the connection")
                                    : st.WithContext("reading from the service"));
    return false;
  }
  return true;
}

bool Channel::Dispatch(wire::Frame& f, bool on_caller) {
  if (!(f.header.op & wire::kReplyBit)) {
    Fail(Status::IOError("the service sent a request frame"));
    return false;
  }
  Pending p;
  {
    MutexLock l(&mu_);
    auto it = pending_.find(f.header.id);
    if (it == pending_.end()) return true;  // not ours any more
    if (on_caller && !it->second.sync && !it->second.answered) {
      deferred_.push_back(std::move(f));
      l.Unlock();
      const uint64_t one = 1;
      if (::write(wake_fd_.get(), &one, sizeof one) < 0) {}  // EAGAIN: the reader is woken already
      return true;
    }
    p = std::move(it->second);
    pending_.erase(it);
  }
  if (!p.answered) {  // else it timed out on this side earlier
    if (p.fds_out != nullptr) *p.fds_out = std::move(f.fds);
    wire::WireReader r(f.body);
    Status reply = r.Status();
    if (!r.ok()) reply = Status::IOError("malformed reply from the service");
    p.done(reply, &r);
  }
  // Only now: a get's completion copies its bytes out of this staging, and
  // once freed the extent may take another get's bytes.
  staging_->Free(p.hold);
  return true;
}

void Channel::DispatchDeferred() {
  uint64_t n;
  if (::read(wake_fd_.get(), &n, sizeof n) < 0) {}  // EAGAIN: a previous turn took it
  std::vector<wire::Frame> frames;
  {
    MutexLock l(&mu_);
    frames.swap(deferred_);
  }
  for (wire::Frame& f : frames) Dispatch(f, /*on_caller=*/false);
}

void Channel::TimerLoop() {
  MutexLock l(&mu_);
  while (!stop_) {
    if (deadlines_.empty()) {
      l.Wait(timer_cv_);
      continue;
    }
    const Clock::time_point first = deadlines_.begin()->first;
    if (Clock::now() < first) {
      l.WaitUntil(timer_cv_, first);
      continue;
    }
    const uint64_t id = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = pending_.find(id);
    if (it == pending_.end() || it->second.answered) continue;
    it->second.answered = true;  // keeps its staging until the service answers
    Done done = std::move(it->second.done);
    l.Unlock();
    done(Status::TimedOut("the service did not answer in time"), nullptr);
    l.Lock();
  }
}

void Channel::Fail(const Status& why) {
  std::vector<Pending> failed;
  {
    MutexLock l(&mu_);
    if (!dead_.ok()) return;
    dead_ = why;
    alive_.store(false);
    for (auto& [id, p] : pending_) failed.push_back(std::move(p));
    pending_.clear();
    deadlines_.clear();
  }
  ::shutdown(sock_.get(), SHUT_RDWR);
  // The staging memfd dies with this channel, so holds need no freeing.
  for (Pending& p : failed)
    if (!p.answered) p.done(why, nullptr);
}

void Channel::AddRegion(const void* base, uint64_t len, uint64_t file_offset, uint32_t id) {
  MutexLock l(&mu_);
  regions_[reinterpret_cast<uintptr_t>(base)] = Region{len, file_offset, id};
}

void Channel::RemoveRegion(const void* base) {
  MutexLock l(&mu_);
  regions_.erase(reinterpret_cast<uintptr_t>(base));
}

bool Channel::Locate(const void* p, uint64_t n, wire::WireFragment* out) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  MutexLock l(&mu_);
  auto it = regions_.upper_bound(a);
  if (it == regions_.begin()) return false;
  --it;
  const uint64_t off = a - it->first;
  if (off > it->second.len || n > it->second.len - off) return false;
  out->region = it->second.id;
  out->offset = it->second.file_offset + off;
  out->size = n;
  return true;
}

}  // namespace kvtier::client
