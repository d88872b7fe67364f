#include "remote/rados_client.h"

#include <rados/librados.h>
#include <rados/librados.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>

namespace kvtier::remote {
namespace {

Status ErrnoStatus(int r, const std::string& what) {
  const int e = -r;
  if (e == ENOENT) return Status::NotFound(what + ": no such object");
  if (e == ETIMEDOUT || e == ECANCELED) return Status::TimedOut(what + ": Ceph did not answer in time");
  return Status::IOError(what + ": " + std::strerror(e));
}

std::string Seconds(uint32_t ms) { return std::to_string(std::max<uint32_t>(1, (ms + 999) / 1000)); }

// Signalled by a librados completion callback (blocking helpers).
struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};
void WaiterCallback(rados_completion_t, void* arg) {
  auto* holder = static_cast<std::shared_ptr<Waiter>*>(arg);
  {
    std::lock_guard<std::mutex> l((*holder)->mu);
    (*holder)->done = true;
  }
  (*holder)->cv.notify_all();
  delete holder;
}

}  // namespace

struct RadosClient::Impl {
  rados_t cluster = nullptr;
  rados_ioctx_t io = nullptr;
  librados::IoCtx cxx_io;  // the same pool context, for writes without a copy
  Config cfg;

  // Reads in flight, for deadlines and shutdown.
  struct ReadCtx {
    Impl* impl = nullptr;
    std::vector<uint8_t> buf;
    std::vector<Piece> pieces;
    std::vector<rados_completion_t> comps;  // released when the context goes
    std::vector<int> rvals;
    std::atomic<size_t> remaining{0};
    std::atomic<bool> finished{false};
    ReadDone done;
    ~ReadCtx() {
      for (rados_completion_t c : comps)
        if (c != nullptr) rados_aio_release(c);
    }
  };
  struct Hold {
    std::shared_ptr<ReadCtx> ctx;
    size_t index;
  };
  struct Timed {
    Clock::time_point when;
    std::weak_ptr<ReadCtx> ctx;
    bool operator>(const Timed& o) const { return when > o.when; }
  };
  std::mutex mu;
  std::condition_variable cv, idle_cv;
  std::vector<Timed> timers;  // min-heap
  bool stop = false;
  uint64_t in_flight = 0;  // librados completions not yet called back
  std::thread timer;

  static void ReadCallback(rados_completion_t c, void* arg) {
    auto* hold = static_cast<Hold*>(arg);
    std::shared_ptr<ReadCtx> ctx = std::move(hold->ctx);
    ctx->rvals[hold->index] = rados_aio_get_return_value(c);
    delete hold;
    Impl* impl = ctx->impl;
    if (ctx->remaining.fetch_sub(1) == 1) Finish(*ctx);
    ctx.reset();  // may release the completions (safe inside the callback)
    std::lock_guard<std::mutex> l(impl->mu);
    if (--impl->in_flight == 0) impl->idle_cv.notify_all();
  }

  static void Finish(ReadCtx& ctx) {
    Status st;
    for (size_t i = 0; i < ctx.pieces.size() && st.ok(); ++i) {
      const int r = ctx.rvals[i];
      if (r < 0) st = ErrnoStatus(r, "reading " + ctx.pieces[i].object);
      else if (static_cast<uint64_t>(r) != ctx.pieces[i].len)
        st = Status::Corruption("short read of " + ctx.pieces[i].object + ": " + std::to_string(r) + " of " +
                                std::to_string(ctx.pieces[i].len) + " bytes");
    }
    if (ctx.finished.exchange(true)) return;  // the deadline won
    ctx.done(st, ctx.buf.data(), ctx.buf.size());
    ctx.done = nullptr;
  }

  void TimerLoop() {
    std::unique_lock<std::mutex> l(mu);
    for (;;) {
      if (stop) return;
      if (timers.empty()) {
        cv.wait(l);
        continue;
      }
      const auto when = timers.front().when;
      if (Clock::now() < when) {
        cv.wait_until(l, when);
        continue;
      }
      std::pop_heap(timers.begin(), timers.end(), std::greater<Timed>());
      std::shared_ptr<ReadCtx> ctx = timers.back().ctx.lock();
      timers.pop_back();
      if (!ctx) continue;
      l.unlock();
      Expire(*ctx);
      ctx.reset();
      l.lock();
    }
  }

  void Expire(ReadCtx& ctx) {
    if (!ctx.finished.exchange(true)) {
      ctx.done(Status::TimedOut("shared tier read passed its deadline: treat as a miss"), nullptr, 0);
      ctx.done = nullptr;
    }
    // Completed ops are unknown to the objecter: cancelling them is a no-op.
    for (rados_completion_t c : ctx.comps)
      if (c != nullptr) rados_aio_cancel(io, c);
  }

  // Waits for `c` until the deadline, cancels it then, and returns its
  // value; the caller releases it.
  int WaitForValue(rados_completion_t c, const std::shared_ptr<Waiter>& w, Clock::time_point deadline) {
    std::unique_lock<std::mutex> l(w->mu);
    if (!w->cv.wait_until(l, deadline, [&] { return w->done; })) {
      l.unlock();
      rados_aio_cancel(io, c);
      l.lock();
      w->cv.wait(l, [&] { return w->done; });
    }
    l.unlock();
    return rados_aio_get_return_value(c);
  }
  // The same, releasing `c`.
  int WaitFor(rados_completion_t c, const std::shared_ptr<Waiter>& w, Clock::time_point deadline) {
    const int r = WaitForValue(c, w, deadline);
    rados_aio_release(c);
    return r;
  }

  // A completion that signals `w` (c is nullptr when librados refuses).
  // Its callback frees the holder; one that librados refused to start never
  // runs, so such a completion must be dropped with Drop().
  struct WaitCompletion {
    rados_completion_t c = nullptr;
    std::shared_ptr<Waiter>* holder = nullptr;
    void Drop() {
      rados_aio_release(c);
      delete holder;
    }
  };
  WaitCompletion NewWaitCompletion(const std::shared_ptr<Waiter>& w) {
    WaitCompletion wc;
    wc.holder = new std::shared_ptr<Waiter>(w);
    if (rados_aio_create_completion2(wc.holder, WaiterCallback, &wc.c) < 0) {
      delete wc.holder;
      return {};
    }
    return wc;
  }

  Clock::time_point OpDeadline() const { return Clock::now() + std::chrono::milliseconds(cfg.op_timeout_ms); }

  // Runs a prepared write op on `object` within op_timeout and releases it;
  // returns its result (negative errno on failure).
  int RunWriteOp(rados_write_op_t op, const std::string& object) {
    auto w = std::make_shared<Waiter>();
    WaitCompletion wc = NewWaitCompletion(w);
    int r = -ENOMEM;
    if (wc.c != nullptr) {
      r = rados_aio_write_op_operate(op, io, wc.c, object.c_str(), nullptr, 0);
      if (r < 0)
        wc.Drop();
      else
        r = WaitFor(wc.c, w, OpDeadline());
    }
    rados_release_write_op(op);
    return r;
  }
};

RadosClient::RadosClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->timer = std::thread([this] { impl_->TimerLoop(); });
}

Result<std::unique_ptr<RadosClient>> RadosClient::Connect(const Config& c) {
  auto impl = std::make_unique<Impl>();
  impl->cfg = c;
  const std::string where = "Ceph (" + (c.conf_path.empty() ? std::string("default ceph.conf") : c.conf_path) + ")";
  int r = rados_create(&impl->cluster, c.client_id.c_str());
  if (r < 0) return ErrnoStatus(r, "creating a Ceph client for client." + c.client_id);
  auto fail = [&](int rr, const std::string& what) -> Status {
    rados_shutdown(impl->cluster);
    impl->cluster = nullptr;
    return ErrnoStatus(rr, what);
  };
  r = rados_conf_read_file(impl->cluster, c.conf_path.empty() ? nullptr : c.conf_path.c_str());
  if (r < 0) return fail(r, "reading " + where);
  const std::string secs = Seconds(c.op_timeout_ms);
  for (const char* opt : {"client_mount_timeout", "rados_osd_op_timeout", "rados_mon_op_timeout"}) {
    r = rados_conf_set(impl->cluster, opt, secs.c_str());
    if (r < 0) return fail(r, std::string("setting ") + opt);
  }
  r = rados_connect(impl->cluster);
  if (r < 0) return fail(r, "connecting to " + where);
  r = rados_ioctx_create(impl->cluster, c.pool.c_str(), &impl->io);
  if (r < 0) {
    if (r == -ENOENT) {
      rados_shutdown(impl->cluster);
      impl->cluster = nullptr;
      return Status::NotFound("Ceph pool '" + c.pool + "' does not exist (" + where + ")");
    }
    return fail(r, "opening pool " + c.pool);
  }
  rados_ioctx_set_namespace(impl->io, c.rados_namespace.c_str());
  librados::IoCtx::from_rados_ioctx_t(impl->io, impl->cxx_io);  // shares io, namespace included
  return std::unique_ptr<RadosClient>(new RadosClient(std::move(impl)));
}

RadosClient::~RadosClient() {
  std::vector<std::shared_ptr<Impl::ReadCtx>> live;
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->stop = true;
    for (const Impl::Timed& t : impl_->timers)
      if (auto ctx = t.ctx.lock()) live.push_back(std::move(ctx));
    impl_->timers.clear();
  }
  impl_->cv.notify_all();
  if (impl_->timer.joinable()) impl_->timer.join();
  for (auto& ctx : live) impl_->Expire(*ctx);
  live.clear();
  bool idle = false;
  {
    std::unique_lock<std::mutex> l(impl_->mu);
    idle = impl_->idle_cv.wait_for(l, std::chrono::milliseconds(impl_->cfg.op_timeout_ms) + std::chrono::seconds(5),
                                   [&] { return impl_->in_flight == 0; });
  }
  // With callbacks still owed, tearing the client down would free what they
  // use: leak it instead (only when Ceph ignores both cancel and timeout).
  if (!idle) {
    (void)impl_.release();
    return;
  }
  impl_->cxx_io.close();
  rados_ioctx_destroy(impl_->io);
  rados_shutdown(impl_->cluster);
}

void RadosClient::ReadAsync(std::vector<Piece> pieces, uint64_t total, Clock::time_point deadline, ReadDone done) {
  auto ctx = std::make_shared<Impl::ReadCtx>();
  ctx->impl = impl_.get();
  ctx->done = std::move(done);
  ctx->buf.resize(total);
  ctx->pieces = std::move(pieces);
  ctx->rvals.assign(ctx->pieces.size(), 0);
  ctx->comps.assign(ctx->pieces.size(), nullptr);
  ctx->remaining = ctx->pieces.size();
  for (const Piece& p : ctx->pieces) {
    if (p.dst_offset + p.len > total) {
      ctx->finished = true;
      ctx->done(Status::InvalidArgument("read piece outside its buffer"), nullptr, 0);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    if (impl_->stop) {
      ctx->finished = true;
      ctx->done(Status::Closed("shared tier client is closing"), nullptr, 0);
      return;
    }
    impl_->in_flight += ctx->pieces.size();
  }
  for (size_t i = 0; i < ctx->pieces.size(); ++i) {
    const Piece& p = ctx->pieces[i];
    auto* hold = new Impl::Hold{ctx, i};
    int r = rados_aio_create_completion2(hold, &Impl::ReadCallback, &ctx->comps[i]);
    if (r >= 0)
      r = rados_aio_read(impl_->io, p.object.c_str(), ctx->comps[i],
                         reinterpret_cast<char*>(ctx->buf.data() + p.dst_offset), p.len, p.offset);
    if (r < 0) {  // never submitted: account for it here
      if (ctx->comps[i] != nullptr) {
        rados_aio_release(ctx->comps[i]);
        ctx->comps[i] = nullptr;
      }
      delete hold;
      ctx->rvals[i] = r;
      if (ctx->remaining.fetch_sub(1) == 1) Impl::Finish(*ctx);
      std::lock_guard<std::mutex> l(impl_->mu);
      if (--impl_->in_flight == 0) impl_->idle_cv.notify_all();
    }
  }
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->timers.push_back(Impl::Timed{deadline, ctx});
    std::push_heap(impl_->timers.begin(), impl_->timers.end(), std::greater<Impl::Timed>());
  }
  impl_->cv.notify_one();
}

struct RadosClient::WriteBuffer::Rep {
  ceph::bufferptr ptr;
};

RadosClient::WriteBuffer::WriteBuffer() = default;
RadosClient::WriteBuffer::~WriteBuffer() = default;
RadosClient::WriteBuffer::WriteBuffer(WriteBuffer&&) noexcept = default;
RadosClient::WriteBuffer& RadosClient::WriteBuffer::operator=(WriteBuffer&&) noexcept = default;

Result<RadosClient::WriteBuffer> RadosClient::WriteBuffer::Allocate(size_t len) {
  if (len == 0 || len > UINT32_MAX) return Status::InvalidArgument("a write buffer holds 1 byte to 4 GiB");
  WriteBuffer b;
  try {  // librados reports a failed allocation by throwing
    b.rep_ = std::make_unique<Rep>(Rep{ceph::bufferptr(ceph::buffer::create_aligned(static_cast<unsigned>(len), 4096))});
  } catch (const std::bad_alloc&) {
    return Status::IOError("cannot allocate a " + std::to_string(len) + "-byte write buffer");
  }
  return b;
}

uint8_t* RadosClient::WriteBuffer::data() {
  return rep_ ? reinterpret_cast<uint8_t*>(rep_->ptr.c_str()) : nullptr;
}
size_t RadosClient::WriteBuffer::size() const { return rep_ ? rep_->ptr.length() : 0; }
bool RadosClient::WriteBuffer::HeldByCluster() const { return rep_ && rep_->ptr.raw_nref() > 1; }

struct RadosClient::AsyncWrites::Op {
  uint64_t ticket;
  std::string object;
  std::shared_ptr<Waiter> waiter;
  rados_completion_t completion = nullptr;
  librados::AioCompletion* cxx = nullptr;  // owns `completion` when set
  Clock::time_point deadline;
};

RadosClient::AsyncWrites::AsyncWrites(RadosClient* client) : c_(client) {}
RadosClient::AsyncWrites::~AsyncWrites() { Drain().IgnoreError(); }

Result<uint64_t> RadosClient::AsyncWrites::Start(const std::string& object, const uint8_t* data, size_t len,
                                                 uint64_t offset, bool replace) {
  if (!first_error_.ok()) return first_error_;
  auto op = std::make_unique<Op>(Op{next_, object, std::make_shared<Waiter>(), nullptr, nullptr,
                                    c_->impl_->OpDeadline()});
  auto wc = c_->impl_->NewWaitCompletion(op->waiter);
  if (wc.c == nullptr) return first_error_ = Status::IOError("librados: cannot create a completion");
  op->completion = wc.c;
  const char* bytes = reinterpret_cast<const char*>(data);
  const int r = replace ? rados_aio_write_full(c_->impl_->io, object.c_str(), op->completion, bytes, len)
                        : rados_aio_write(c_->impl_->io, object.c_str(), op->completion, bytes, len, offset);
  if (r < 0) {
    wc.Drop();
    return first_error_ = ErrnoStatus(r, "writing " + object);
  }
  ops_.push_back(std::move(op));
  return next_++;
}

Result<uint64_t> RadosClient::AsyncWrites::Start(const std::string& object, const WriteBuffer& buf, size_t len,
                                                 uint64_t offset, bool replace) {
  if (!first_error_.ok()) return first_error_;
  if (len == 0 || len > buf.size()) return Status::InvalidArgument("a write of " + std::to_string(len) +
                                                                   " bytes from a buffer of " +
                                                                   std::to_string(buf.size()));
  auto op = std::make_unique<Op>(Op{next_, object, std::make_shared<Waiter>(), nullptr, nullptr,
                                    c_->impl_->OpDeadline()});
  auto* holder = new std::shared_ptr<Waiter>(op->waiter);
  op->cxx = librados::Rados::aio_create_completion(holder, WaiterCallback);
  if (op->cxx == nullptr) {
    delete holder;
    return first_error_ = Status::IOError("librados: cannot create a completion");
  }
  op->completion = op->cxx->pc;  // the C API's handle of the same completion (for cancel and its value)
  ceph::bufferlist bl;
  bl.append(ceph::bufferptr(buf.rep_->ptr, 0, static_cast<unsigned>(len)));  // a reference, not a copy
  // librados caches a buffer's CRCs by range, and the bytes were written
  // behind its back: a stale CRC would have the OSD drop every try.
  bl.invalidate_crc();
  const int r = replace ? c_->impl_->cxx_io.aio_write_full(object, op->cxx, bl)
                        : c_->impl_->cxx_io.aio_write(object, op->cxx, bl, len, offset);
  if (r < 0) {  // never started: its callback will not free the holder
    op->cxx->release();
    delete holder;
    return first_error_ = ErrnoStatus(r, "writing " + object);
  }
  ops_.push_back(std::move(op));
  return next_++;
}

Status RadosClient::AsyncWrites::Wait(uint64_t ticket) {
  auto it = std::find_if(ops_.begin(), ops_.end(), [&](const auto& op) { return op->ticket == ticket; });
  if (it == ops_.end()) return first_error_;
  Op& op = **it;
  const int r = c_->impl_->WaitForValue(op.completion, op.waiter, op.deadline);
  if (op.cxx != nullptr)
    op.cxx->release();
  else
    rados_aio_release(op.completion);
  if (r < 0 && first_error_.ok()) first_error_ = ErrnoStatus(r, "writing " + op.object);
  ops_.erase(it);
  return first_error_;
}

Status RadosClient::AsyncWrites::Drain() {
  while (!ops_.empty()) Wait(ops_.front()->ticket).IgnoreError();
  return first_error_;
}

Status RadosClient::WriteObject(const std::string& object, const uint8_t* data, size_t len, size_t chunk,
                                unsigned window) {
  chunk = std::max<size_t>(chunk, 4096);
  window = std::max(1u, window);
  AsyncWrites writes(this);
  // The first chunk replaces the object (a retry may find an older copy);
  // the rest may only follow it.
  const size_t first = std::min(len, chunk);
  auto t = writes.Start(object, data, first, 0, /*replace=*/true);
  if (!t.ok()) return t.status();
  KVTIER_RETURN_IF_ERROR(writes.Wait(*t));
  std::vector<uint64_t> in_flight;
  for (size_t off = first; off < len; off += chunk) {
    if (in_flight.size() == window) {
      KVTIER_RETURN_IF_ERROR(writes.Wait(in_flight.front()));
      in_flight.erase(in_flight.begin());
    }
    t = writes.Start(object, data + off, std::min(chunk, len - off), off, /*replace=*/false);
    if (!t.ok()) return t.status();
    in_flight.push_back(*t);
  }
  return writes.Drain();
}

Result<std::string> RadosClient::ReadWhole(const std::string& object, uint64_t size) {
  std::string out(size, '\0');
  auto w = std::make_shared<Waiter>();
  auto wc = impl_->NewWaitCompletion(w);
  if (wc.c == nullptr) return Status::IOError("librados: cannot create a completion");
  rados_completion_t c = wc.c;
  int r = rados_aio_read(impl_->io, object.c_str(), c, out.data(), size, 0);
  if (r < 0) {
    wc.Drop();
    return ErrnoStatus(r, "reading " + object);
  }
  r = impl_->WaitFor(c, w, impl_->OpDeadline());
  if (r < 0) return ErrnoStatus(r, "reading " + object);
  if (static_cast<uint64_t>(r) != size)
    return Status::Corruption("short read of " + object + ": " + std::to_string(r) + " of " + std::to_string(size));
  return out;
}

Status RadosClient::Remove(const std::string& object) {
  auto w = std::make_shared<Waiter>();
  auto wc = impl_->NewWaitCompletion(w);
  if (wc.c == nullptr) return Status::IOError("librados: cannot create a completion");
  rados_completion_t c = wc.c;
  int r = rados_aio_remove(impl_->io, object.c_str(), c);
  if (r < 0) {
    wc.Drop();
    return ErrnoStatus(r, "removing " + object);
  }
  r = impl_->WaitFor(c, w, impl_->OpDeadline());
  if (r < 0 && r != -ENOENT) return ErrnoStatus(r, "removing " + object);
  return Status::OK();
}

Status RadosClient::OmapSet(const std::string& object, const std::string& key, const std::string& value) {
  rados_write_op_t op = rados_create_write_op();
  const char* keys[] = {key.c_str()};
  const char* vals[] = {value.data()};
  const size_t lens[] = {value.size()};
  rados_write_op_omap_set(op, keys, vals, lens, 1);
  const int r = impl_->RunWriteOp(op, object);
  return r < 0 ? ErrnoStatus(r, "updating the omap of " + object) : Status::OK();
}

Status RadosClient::OmapRemove(const std::string& object, const std::vector<std::string>& keys) {
  if (keys.empty()) return Status::OK();
  std::vector<const char*> k;
  for (const std::string& s : keys) k.push_back(s.c_str());
  rados_write_op_t op = rados_create_write_op();
  rados_write_op_omap_rm_keys(op, k.data(), k.size());
  const int r = impl_->RunWriteOp(op, object);
  if (r == -ENOENT) return Status::OK();
  return r < 0 ? ErrnoStatus(r, "updating the omap of " + object) : Status::OK();
}

Result<std::vector<std::pair<std::string, std::string>>> RadosClient::OmapList(const std::string& object) {
  std::vector<std::pair<std::string, std::string>> out;
  std::string after;
  const auto deadline = impl_->OpDeadline();
  for (;;) {
    rados_read_op_t op = rados_create_read_op();
    rados_omap_iter_t iter = nullptr;
    unsigned char more = 0;
    int prval = 0;
    rados_read_op_omap_get_vals2(op, after.c_str(), "", 1024, &iter, &more, &prval);
    auto w = std::make_shared<Waiter>();
    auto wc = impl_->NewWaitCompletion(w);
    if (wc.c == nullptr) {
      rados_release_read_op(op);
      return Status::IOError("librados: cannot create a completion");
    }
    int r = rados_aio_read_op_operate(op, impl_->io, wc.c, object.c_str(), 0);
    if (r < 0) {
      wc.Drop();
    } else {
      r = impl_->WaitFor(wc.c, w, deadline);
    }
    if (r >= 0 && prval < 0) r = prval;
    if (r < 0) {
      if (iter != nullptr) rados_omap_get_end(iter);
      rados_release_read_op(op);
      if (r == -ENOENT) return out;
      return ErrnoStatus(r, "listing the omap of " + object);
    }
    char *k = nullptr, *v = nullptr;
    size_t klen = 0, vlen = 0;
    while (rados_omap_get_next2(iter, &k, &v, &klen, &vlen) == 0 && k != nullptr)
      out.emplace_back(std::string(k, klen), std::string(v, vlen));
    rados_omap_get_end(iter);
    rados_release_read_op(op);
    if (!more || out.empty()) return out;
    after = out.back().first;
  }
}

Result<std::vector<std::string>> RadosClient::ListObjects() {
  std::vector<std::string> out;
  rados_list_ctx_t ctx = nullptr;
  int r = rados_nobjects_list_open(impl_->io, &ctx);
  if (r < 0) return ErrnoStatus(r, "listing the objects of the pool");
  for (;;) {
    const char* entry = nullptr;
    r = rados_nobjects_list_next(ctx, &entry, nullptr, nullptr);
    if (r == -ENOENT) break;  // the end
    if (r < 0) {
      rados_nobjects_list_close(ctx);
      return ErrnoStatus(r, "listing the objects of the pool");
    }
    out.emplace_back(entry);
  }
  rados_nobjects_list_close(ctx);
  return out;
}

Result<int64_t> RadosClient::ModifiedUnixSeconds(const std::string& object) {
  auto w = std::make_shared<Waiter>();
  auto wc = impl_->NewWaitCompletion(w);
  if (wc.c == nullptr) return Status::IOError("librados: cannot create a completion");
  rados_completion_t c = wc.c;
  uint64_t size = 0;
  time_t mtime = 0;
  int r = rados_aio_stat(impl_->io, object.c_str(), c, &size, &mtime);
  if (r < 0) {
    wc.Drop();
    return ErrnoStatus(r, "stat of " + object);
  }
  r = impl_->WaitFor(c, w, impl_->OpDeadline());
  if (r < 0) return ErrnoStatus(r, "stat of " + object);
  return static_cast<int64_t>(mtime);
}

}  // namespace kvtier::remote
