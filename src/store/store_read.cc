// The read path: read threads with batched I/O, verification of every
// record, deadlines, and the index-only lookups.
#include <algorithm>
#include <cstring>
#include <future>

#include "index/presence_map.h"
#include "store/store_impl.h"
#include "util/checksum.h"

namespace kvtier {

void StoreImpl::GetAsync(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                         Clock::time_point deadline, GetCallback done) {
  c_.gets.Add();
  if (key.empty() || key.size() > format::kMaxKeyBytes) {
    done(Status::InvalidArgument("key length out of range"));
    return;
  }
  if (ram_ != nullptr) {
    // Served inline from host memory: no queue, no I/O, no deadline to race.
    auto r = ram_->Read(ns, key, out);
    if (r.ok()) {
      c_.hits_ram.Add();
      c_.bytes_read_ram.Add(*r);
      done(std::move(r));
      return;
    }
    if (r.status().code() == Code::kBufferTooSmall) {
      done(std::move(r));
      return;
    }
  }
  auto op = std::make_shared<ReadOp>();
  op->ns = ns;
  op->key.assign(key);
  op->out.assign(out.begin(), out.end());
  for (const MutableFragment& f : out) op->out_total += f.size;
  op->deadline = deadline;
  op->done = std::move(done);
  std::unique_lock<std::mutex> l(read_mu_);
  if (readers_stop_) {
    l.unlock();
    op->done(Status::Closed("store is closed"));
    return;
  }
  if (reads_.size() >= opt_.max_pending_reads) {
    l.unlock();
    c_.misses.Add();
    c_.get_deadline_misses.Add();
    op->done(Status::TimedOut("read queue full: treat as a miss"));
    return;
  }
  reads_.push_back(op);
  l.unlock();
  read_cv_.notify_one();
  if (deadline != kNoDeadline) {
    {
      std::lock_guard<std::mutex> tl(timer_mu_);
      timers_.push_back(Timed{deadline, op});
      std::push_heap(timers_.begin(), timers_.end(), std::greater<Timed>());
    }
    timer_cv_.notify_one();
  }
}

Result<size_t> StoreImpl::Get(NamespaceId ns, std::string_view key,
                              std::span<const MutableFragment> out) {
  std::promise<Result<size_t>> p;
  auto f = p.get_future();
  GetAsync(ns, key, out, kNoDeadline, [&p](Result<size_t> r) { p.set_value(std::move(r)); });
  return f.get();
}

Result<std::vector<uint8_t>> StoreImpl::GetVector(NamespaceId ns, std::string_view key) {
  // The size can change between Stat and Get only if the key is replaced by a
  // block of another size; retry once in that case.
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto info = Stat(ns, key);
    if (!info.ok()) return info.status();
    std::vector<uint8_t> v(info->payload_bytes);
    auto n = Get(ns, key, v.data(), v.size());
    if (n.ok()) {
      v.resize(*n);
      return v;
    }
    if (n.status().code() != Code::kBufferTooSmall) return n.status();
  }
  return Status::Aborted("block changed size while being read");
}

std::vector<Result<size_t>> StoreImpl::GetBatch(NamespaceId ns, std::span<const GetItem> items) {
  std::vector<Result<size_t>> out(items.size(), Result<size_t>(Status::Aborted("not run")));
  std::mutex m;
  std::condition_variable cv;
  size_t left = items.size();
  for (size_t i = 0; i < items.size(); ++i) {
    GetAsync(ns, items[i].key, items[i].out, kNoDeadline, [&, i](Result<size_t> r) {
      std::lock_guard<std::mutex> l(m);
      out[i] = std::move(r);
      if (--left == 0) cv.notify_one();
    });
  }
  std::unique_lock<std::mutex> l(m);
  cv.wait(l, [&] { return left == 0; });
  return out;
}

void StoreImpl::Complete(const std::shared_ptr<ReadOp>& op, Result<size_t> r) {
  int expected = 0;
  if (!op->state.compare_exchange_strong(expected, 1)) return;  // the deadline won
  op->done(std::move(r));
}

void StoreImpl::NoteHit(uint32_t seg, uint64_t offset) {
  std::lock_guard<std::mutex> l(hits_mu_);
  ++hits_[seg][offset];
}

void StoreImpl::ReaderLoop(unsigned index) {
  (void)index;
  auto q = fs_->NewIoQueue(opt_.queue_depth);
  // A slot per read in flight, big enough for every record a get reads
  // whole (below zero_copy_min_bytes, plus the page a dense record may start
  // inside; direct reads need two pages).
  ReadBuffers bufs(opt_.queue_depth,
                   format::RecordBytes(format::kMaxKeyBytes, std::min<uint64_t>(opt_.zero_copy_min_bytes, 1u << 20), 0) +
                       format::kPage);
  ReadSlots slots(this, opt_.queue_depth);
  std::vector<std::shared_ptr<ReadOp>> batch;
  // Streaming: take reads while this thread has free slots, and come back
  // for more as soon as any read in flight is done, so one large read never
  // holds up the small ones behind it.
  for (;;) {
    batch.clear();
    const size_t busy = slots.busy();
    if (busy < slots.size()) {
      std::unique_lock<std::mutex> l(read_mu_);
      if (busy == 0) {
        if (reads_.empty() && q.ok() && bufs.NeedsRegister()) {  // idle: register what was used
          l.unlock();
          bufs.Register(q->get());
          l.lock();
        }
        read_cv_.wait(l, [this] { return !reads_.empty() || readers_stop_; });
        if (reads_.empty() && readers_stop_) return;
      }
      // Share the waiting reads among the threads (each keeps its own ring
      // busy) rather than letting one thread take them all.
      const size_t share = std::min<size_t>(slots.size() - busy,
                                            (reads_.size() + opt_.read_threads - 1) / opt_.read_threads);
      while (!reads_.empty() && batch.size() < share) {
        batch.push_back(std::move(reads_.front()));
        reads_.pop_front();
      }
    }
    if (!q.ok()) {
      for (auto& op : batch) Complete(op, q.status());
      continue;
    }
    StartReads(q->get(), batch, bufs, slots);
    if ((*q)->Outstanding() > 0) (*q)->Reap(/*wait=*/true);  // runs FinishRead of what is done
  }
}

namespace {
constexpr uint64_t kPage = format::kPage;
// Heap bounce buffers a read thread keeps for reads it could have made
// direct (caller memory on 4 KiB pages): 32 x 2 MiB blocks.
constexpr size_t kChosenBounceBytes = 64u << 20;

bool PageAligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & (kPage - 1)) == 0; }

// Whether the whole pages of a payload, [0, whole), can be read straight
// into `out`: each fragment they touch starts on a page boundary and all but
// the last of them are whole pages.
bool DirectTarget(std::span<const MutableFragment> out, uint64_t whole) {
  uint64_t done = 0;
  for (const MutableFragment& f : out) {
    if (done == whole) break;
    if (f.size == 0) continue;
    if (!PageAligned(f.data)) return false;
    if (done + f.size < whole && f.size % kPage != 0) return false;
    done += std::min<uint64_t>(f.size, whole - done);
  }
  return done == whole;
}

// Copies n bytes from src into `out` starting at payload position `at`.
void ScatterAt(std::span<const MutableFragment> out, uint64_t at, const uint8_t* src, uint64_t n) {
  for (const MutableFragment& f : out) {
    if (n == 0) break;
    if (at >= f.size) {
      at -= f.size;
      continue;
    }
    const uint64_t k = std::min<uint64_t>(n, f.size - at);
    std::memcpy(static_cast<uint8_t*>(f.data) + at, src, k);
    src += k;
    n -= k;
    at = 0;
  }
}
}  // namespace

void StoreImpl::StartReads(IoQueue* queue, std::vector<std::shared_ptr<ReadOp>>& ops, ReadBuffers& bufs,
                           ReadSlots& slots) {
  // Each read completes on its own (IoRequest::on_done, inside Reap) as soon
  // as its I/O does.
  const auto now = Clock::now();
  for (auto& op : ops) {
    if (op->state.load() != 0) continue;  // expired while queued
    if (op->deadline <= now) {
      int expected = 0;
      if (op->state.compare_exchange_strong(expected, 2)) {
        c_.misses.Add();
        c_.get_deadline_misses.Add();
        op->done(Status::TimedOut("deadline passed before the read started"));
      }
      continue;
    }
    auto e = index_->Get(op->ns, op->key);
    if (!e.ok()) {
      Complete(op, e.status());
      continue;
    }
    if (!e->has_value()) {
      if (RemoteGet(op)) continue;  // store_remote.cc
      c_.misses.Add();
      Complete(op, Status::NotFound("no such key"));
      continue;
    }
    const format::IndexValue v = **e;
    if (v.payload_len > op->out_total) {
      Complete(op, Status::BufferTooSmall("block has " + std::to_string(v.payload_len) +
                                          " bytes, buffer " + std::to_string(op->out_total)));
      continue;
    }
    File* file = table_->Pin(v.segment, v.generation);
    if (file == nullptr) {  // segment reused or missing: the entry is stale
      RequestDrop(op->ns, op->key, v.sequence);
      if (RemoteGet(op)) continue;  // store_remote.cc
      c_.misses.Add();
      Complete(op, Status::NotFound("block was evicted"));
      continue;
    }
    // Straight into the caller's pages when the layout allows and nothing
    // can complete the op early: a deadline miss promises `out` is never
    // touched afterwards, which an in-flight read could not keep.
    const uint64_t whole = v.payload_len / kPage * kPage;
    bool direct = op->deadline == kNoDeadline && whole > 0 && v.payload_len >= opt_.zero_copy_min_bytes &&
                  format::PayloadAligned(v.key_len, v.payload_len, v.flags) && DirectTarget(op->out, whole);
    const size_t b = slots.Acquire();  // the caller took no more ops than free slots
    // A whole read covers the record's pages (a dense one may share them).
    const uint64_t paged = format::PagedBytes(v.offset, v.RecordBytes());
    if (direct && bufs.BounceFits(b, paged, kChosenBounceBytes) &&
        !ZeroCopyPagesOk(std::span<const MutableFragment>(op->out), whole)) {
      direct = false;  // 4 KiB pages: read into a huge-page bounce buffer and copy
      c_.small_page_copies.Add();
    }
    uint8_t* const bounce = bufs.Get(b, direct ? 2 * kPage : paged);
    if (bounce == nullptr) {
      slots.Release(b);
      table_->Unpin(v.segment);
      Complete(op, Status::NoSpace("out of memory for a read buffer"));
      continue;
    }
    ReadIo& io = slots.at(b);
    io.op = op;
    io.v = v;
    io.bounce = bounce;
    io.direct = direct;
    io.status = Status::OK();
    io.device_bytes = 0;
    auto add = [&](uint64_t offset, void* buf, uint64_t len) {
      IoRequest rq;
      rq.op = IoRequest::Op::kRead;
      rq.file = file;
      rq.offset = offset;
      rq.buf = buf;
      rq.len = len;
      rq.user = &io;
      rq.on_done = [](IoRequest& r) {
        auto* done_io = static_cast<ReadIo*>(r.user);
        if (r.status.ok()) {
          done_io->device_bytes += r.len;
        } else if (done_io->status.ok()) {
          done_io->status = r.status;
        }
        if (--done_io->left == 0) {
          done_io->self->FinishRead(*done_io);
          done_io->slots->Release(done_io->slot);
        }
      };
      io.reqs.push_back(rq);
    };
    if (!direct) {
      add(format::PageStart(v.offset), io.bounce, paged);
    } else {
      add(v.offset, io.bounce, kPage);  // header and key
      uint64_t done = 0;
      for (const MutableFragment& f : op->out) {
        if (done == whole) break;
        const uint64_t n = std::min<uint64_t>(f.size, whole - done);
        if (n == 0) continue;
        add(v.offset + kPage + done, f.data, n);
        done += n;
      }
      if (v.payload_len > whole) add(v.offset + kPage + whole, io.bounce + kPage, kPage);  // tail
    }
    // Enqueued once complete: the vector no longer moves, and on_done runs
    // only inside Reap.
    io.left = static_cast<int>(io.reqs.size());
    for (IoRequest& rq : io.reqs) queue->Enqueue(&rq);
  }
}

void StoreImpl::FinishRead(ReadIo& io) {
  const std::shared_ptr<ReadOp>& op = io.op;
  const format::IndexValue& v = io.v;
  table_->Unpin(v.segment);
  if (!io.status.ok()) {
    c_.misses.Add();
    if (io.status.code() == Code::kCorruption) {  // short read: truncated segment
      c_.checksum_failures.Add();
      RequestDrop(op->ns, op->key, v.sequence);
      Complete(op, Status::NotFound("record unreadable: " + io.status.message()));
    } else {
      Complete(op, io.status);
    }
    return;
  }
  c_.device_bytes_read.Add(io.device_bytes);
  // Verify everything the record says against what the index expects.
  const uint8_t* rec = io.bounce + (io.direct ? 0 : v.offset - format::PageStart(v.offset));
  const uint64_t have = io.direct ? kPage : v.RecordBytes();
  std::string_view key;
  auto h = format::DecodeRecordHeader({rec, have}, StoredPayloadLimit(), &key);
  bool good = h.ok() && format::RecordAgainstEntry(*h, key, op->ns, op->key, v) == 0;
  const uint64_t whole = v.payload_len / kPage * kPage;
  const uint8_t* payload = rec + v.PayloadOffset();
  if (good) {
    if (io.direct) {
      // The payload's whole pages are in the caller's fragments, the rest in
      // the bounce page after the header.
      Xxh3Stream st;
      uint64_t left = whole;
      for (const MutableFragment& f : op->out) {
        if (left == 0) break;
        const uint64_t n = std::min<uint64_t>(left, f.size);
        st.Update(f.data, n);
        left -= n;
      }
      st.Update(rec + kPage, v.payload_len - whole);
      good = st.Digest() == h->payload_checksum;
    } else {
      good = format::Checksum(payload, h->payload_len) == h->payload_checksum;
    }
  }
  if (!good) {
    c_.checksum_failures.Add();
    c_.misses.Add();
    RequestDrop(op->ns, op->key, v.sequence);
    Complete(op, Status::NotFound("record failed verification (counted, entry dropped)"));
    return;
  }
  int expected = 0;
  if (!op->state.compare_exchange_strong(expected, 1)) return;  // deadline won
  if (io.direct) {
    ScatterAt(op->out, whole, rec + kPage, v.payload_len - whole);
  } else {
    ScatterAt(op->out, 0, payload, v.payload_len);
  }
  c_.hits_disk.Add();
  c_.bytes_read_disk.Add(v.payload_len);
  if (io.direct) c_.direct_read_bytes.Add(whole);
  NoteHit(v.segment, v.offset);
  std::vector<Fragment> admit;
  if (ram_ != nullptr) {
    // The copy to admit, gathered before `done` lets the caller reuse `out`.
    if (io.direct) {
      uint64_t left = v.payload_len;
      for (const MutableFragment& f : op->out) {
        if (left == 0) break;
        const uint64_t n = std::min<uint64_t>(left, f.size);
        admit.push_back(Fragment{f.data, n});
        left -= n;
      }
    } else {
      admit.push_back(Fragment{payload, v.payload_len});
    }
  }
  // Admit before completing: the caller may change its buffer at once, and a
  // get that has returned must find the block in RAM on the next call.
  if (ram_ != nullptr) AdmitToRam(op->ns, op->key, admit, v);
  op->done(static_cast<size_t>(v.payload_len));
}

void StoreImpl::AdmitToRam(NamespaceId ns, const std::string& key, std::span<const Fragment> payload,
                           const format::IndexValue& v) {
  // A Remove (or disk eviction) that ran since the index lookup would not
  // have seen this copy, so look again and take it back if the entry changed.
  uint64_t token = ram_->Insert(ns, key, payload, v.payload_checksum, /*only_if_absent=*/true);
  if (token != 0) {
    auto again = index_->Get(ns, key);
    if (!again.ok() || !again->has_value() || (*again)->sequence != v.sequence) ram_->EraseIf(ns, key, token);
  }
}

void StoreImpl::TimerLoop() {
  std::unique_lock<std::mutex> l(timer_mu_);
  for (;;) {
    if (timer_stop_) return;
    if (timers_.empty()) {
      timer_cv_.wait(l);
      continue;
    }
    auto when = timers_.front().when;
    if (Clock::now() < when) {
      timer_cv_.wait_until(l, when);
      continue;
    }
    std::pop_heap(timers_.begin(), timers_.end(), std::greater<Timed>());
    std::shared_ptr<ReadOp> op = timers_.back().op.lock();
    timers_.pop_back();
    if (!op) continue;
    int expected = 0;
    if (op->state.compare_exchange_strong(expected, 2)) {
      c_.misses.Add();
      c_.get_deadline_misses.Add();
      l.unlock();
      op->done(Status::TimedOut("deadline passed: treat as a miss"));
      l.lock();
    }
  }
}

// ---- Index-only lookups ----

Result<bool> StoreImpl::Contains(NamespaceId ns, std::string_view key) {
  c_.contains.Add();
  thread_local std::vector<uint64_t> locs;
  bool local = false;
  if (index_->FindLocations(ns, {&key, 1}, &locs)) {
    local = locs[0] != PresenceMap::kAbsent &&
            table_->IsLive(static_cast<uint32_t>(locs[0] >> 32), static_cast<uint32_t>(locs[0]));
  } else {
    auto e = index_->Get(ns, key);
    if (!e.ok()) return e.status();
    local = e->has_value() && table_->IsLive((*e)->segment, (*e)->generation);
  }
  // As LookupPrefix: a block the shared tier holds counts as present.
  return local || RemoteExtendPrefix(ns, {&key, 1}, 0) == 1;  // store_remote.cc
}

Result<size_t> StoreImpl::LookupPrefix(NamespaceId ns, std::span<const std::string_view> keys) {
  c_.lookups.Add();
  thread_local std::vector<uint64_t> locs;
  if (index_->FindLocations(ns, keys, &locs)) {
    size_t n = 0;
    while (n < locs.size() && locs[n] != PresenceMap::kAbsent &&
           table_->IsLive(static_cast<uint32_t>(locs[n] >> 32), static_cast<uint32_t>(locs[n])))
      ++n;
    return RemoteExtendPrefix(ns, keys, n);  // store_remote.cc
  }
  std::vector<std::optional<format::IndexValue>> vals;
  Status st = index_->MultiGet(ns, keys, &vals);
  if (!st.ok()) return st;
  size_t n = 0;
  while (n < vals.size() && vals[n].has_value() && table_->IsLive(vals[n]->segment, vals[n]->generation))
    ++n;
  return RemoteExtendPrefix(ns, keys, n);  // store_remote.cc
}

BlockInfo StoreImpl::ToBlockInfo(NamespaceId ns, std::string_view key, const format::IndexValue& v) {
  BlockInfo b;
  b.ns = ns;
  b.key.assign(key);
  b.segment = v.segment;
  b.generation = v.generation;
  b.offset = v.offset;
  b.payload_bytes = v.payload_len;
  b.record_bytes = v.RecordBytes();
  b.payload_offset = v.offset + v.PayloadOffset();
  b.dense = format::IsDense(v.flags);
  b.payload_checksum = v.payload_checksum;
  b.sequence = v.sequence;
  b.written_unix_ms = v.written_unix_ms;
  std::lock_guard<std::mutex> l(hits_mu_);
  auto it = hits_.find(v.segment);
  if (it != hits_.end()) {
    auto h = it->second.find(v.offset);
    if (h != it->second.end()) b.hits = h->second;
  }
  return b;
}

Result<BlockInfo> StoreImpl::Stat(NamespaceId ns, std::string_view key) {
  auto e = index_->Get(ns, key);
  if (!e.ok()) return e.status();
  if (e->has_value() && table_->IsLive((*e)->segment, (*e)->generation)) return ToBlockInfo(ns, key, **e);
  // Not on local disk: a shared-tier hit admitted to RAM, or one only Ceph
  // holds, is still a block a get returns (callers size buffers from this).
  BlockInfo b;
  b.ns = ns;
  b.key.assign(key);
  if (ram_ != nullptr) {
    if (RamTier::Pin pin = ram_->Acquire(ns, key)) {
      b.tier = BlockTier::kRam;
      b.payload_bytes = pin.size();
      b.payload_checksum = pin.checksum();
      return b;
    }
  }
  if (std::optional<uint64_t> n = RemotePayloadBytes(ns, key)) {  // store_remote.cc
    b.tier = BlockTier::kShared;
    b.payload_bytes = *n;
    return b;
  }
  return Status::NotFound("no such key");
}

Status StoreImpl::ListBlocks(NamespaceId ns, std::string_view key_prefix,
                             const std::function<bool(const BlockInfo&)>& fn) {
  return index_->ForEach(ns, key_prefix, [&](NamespaceId n, std::string_view key, const format::IndexValue& v) {
    return fn(ToBlockInfo(n, key, v));
  });
}

}  // namespace kvtier
