// The read path: read threads with batched I/O, verification of every
// record, deadlines, and the index-only lookups.
#include <algorithm>
#include <cstring>
#include <future>

#include "index/presence_map.h"
#include "store/store_impl.h"

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
  std::vector<AlignedBuffer> bufs;
  std::vector<std::shared_ptr<ReadOp>> batch;
  for (;;) {
    batch.clear();
    {
      std::unique_lock<std::mutex> l(read_mu_);
      read_cv_.wait(l, [this] { return !reads_.empty() || readers_stop_; });
      if (reads_.empty() && readers_stop_) return;
      // Share the waiting reads among the threads (each keeps its own ring
      // busy) rather than letting one thread take them all.
      const size_t share = std::max<size_t>(
          1, std::min<size_t>(opt_.queue_depth, (reads_.size() + opt_.read_threads - 1) / opt_.read_threads));
      while (!reads_.empty() && batch.size() < share) {
        batch.push_back(std::move(reads_.front()));
        reads_.pop_front();
      }
    }
    if (!q.ok()) {
      for (auto& op : batch) Complete(op, q.status());
      continue;
    }
    ExecuteReads(q->get(), batch, bufs);
  }
}

void StoreImpl::ExecuteReads(IoQueue* queue, std::vector<std::shared_ptr<ReadOp>>& ops,
                             std::vector<AlignedBuffer>& bufs) {
  // Each read completes on its own (IoRequest::on_done) as soon as its I/O
  // does, not when the whole batch has.
  struct Pending {
    StoreImpl* self;
    std::shared_ptr<ReadOp> op;
    format::IndexValue v;
  };
  std::vector<Pending> pending;
  pending.reserve(ops.size());
  std::vector<IoRequest> reqs;
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
      c_.misses.Add();
      RequestDrop(op->ns, op->key, v.sequence);
      Complete(op, Status::NotFound("block was evicted"));
      continue;
    }
    size_t b = pending.size();
    if (bufs.size() <= b) bufs.emplace_back();
    uint64_t bytes = v.RecordBytes();
    if (bufs[b].size() < bytes && !bufs[b].Reset(bytes)) {
      table_->Unpin(v.segment);
      Complete(op, Status::NoSpace("out of memory for a read buffer"));
      continue;
    }
    pending.push_back(Pending{this, op, v});
    IoRequest rq;
    rq.op = IoRequest::Op::kRead;
    rq.file = file;
    rq.offset = v.offset;
    rq.buf = bufs[b].data();
    rq.len = bytes;
    reqs.push_back(rq);
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].user = &pending[i];
    reqs[i].on_done = [](IoRequest& rq) {
      auto* p = static_cast<Pending*>(rq.user);
      p->self->FinishRead(p->op, p->v, rq);
    };
  }
  if (!reqs.empty()) queue->Submit(reqs).IgnoreError();  // each finished in on_done
}

void StoreImpl::FinishRead(const std::shared_ptr<ReadOp>& op, const format::IndexValue& v,
                           const IoRequest& rq) {
  table_->Unpin(v.segment);
  if (!rq.status.ok()) {
    c_.misses.Add();
    if (rq.status.code() == Code::kCorruption) {  // short read: truncated segment
      c_.checksum_failures.Add();
      RequestDrop(op->ns, op->key, v.sequence);
      Complete(op, Status::NotFound("record unreadable: " + rq.status.message()));
    } else {
      Complete(op, rq.status);
    }
    return;
  }
  c_.device_bytes_read.Add(rq.len);
  // Verify everything the record says against what the index expects.
  const uint8_t* rec = static_cast<const uint8_t*>(rq.buf);
  std::string_view key;
  auto h = format::DecodeRecordHeader({rec, rq.len}, opt_.max_payload_bytes, &key);
  const uint8_t* payload = rec + format::kRecordHeaderBytes + (h.ok() ? h->key_len : 0);
  bool good = h.ok() && key == op->key && h->ns_id == op->ns &&
              h->segment_id == v.segment && h->generation == v.generation &&
              h->payload_len == v.payload_len && h->payload_checksum == v.payload_checksum &&
              format::Checksum(payload, h->payload_len) == h->payload_checksum;
  if (!good) {
    c_.checksum_failures.Add();
    c_.misses.Add();
    RequestDrop(op->ns, op->key, v.sequence);
    Complete(op, Status::NotFound("record failed verification (counted, entry dropped)"));
    return;
  }
  int expected = 0;
  if (!op->state.compare_exchange_strong(expected, 1)) return;  // deadline won
  uint64_t left = h->payload_len;
  for (const MutableFragment& f : op->out) {
    if (left == 0) break;
    size_t n = std::min<uint64_t>(left, f.size);
    std::memcpy(f.data, payload, n);
    payload += n;
    left -= n;
  }
  c_.hits_disk.Add();
  c_.bytes_read_disk.Add(h->payload_len);
  NoteHit(v.segment, v.offset);
  op->done(static_cast<size_t>(h->payload_len));
  if (ram_ != nullptr) {
    // Admit after the caller has its bytes. A Remove (or disk eviction) that
    // ran since the index lookup would not have seen this copy, so look
    // again and take it back if the entry changed.
    Fragment whole{rec + format::kRecordHeaderBytes + h->key_len, h->payload_len};
    uint64_t token = ram_->Insert(op->ns, op->key, {&whole, 1}, h->payload_checksum,
                                  /*only_if_absent=*/true);
    if (token != 0) {
      auto again = index_->Get(op->ns, op->key);
      if (!again.ok() || !again->has_value() || (*again)->sequence != v.sequence)
        ram_->EraseIf(op->ns, op->key, token);
    }
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
  if (index_->FindLocations(ns, {&key, 1}, &locs))
    return locs[0] != PresenceMap::kAbsent &&
           table_->IsLive(static_cast<uint32_t>(locs[0] >> 32), static_cast<uint32_t>(locs[0]));
  auto e = index_->Get(ns, key);
  if (!e.ok()) return e.status();
  return e->has_value() && table_->IsLive((*e)->segment, (*e)->generation);
}

Result<size_t> StoreImpl::LookupPrefix(NamespaceId ns, std::span<const std::string_view> keys) {
  c_.lookups.Add();
  thread_local std::vector<uint64_t> locs;
  if (index_->FindLocations(ns, keys, &locs)) {
    size_t n = 0;
    while (n < locs.size() && locs[n] != PresenceMap::kAbsent &&
           table_->IsLive(static_cast<uint32_t>(locs[n] >> 32), static_cast<uint32_t>(locs[n])))
      ++n;
    return n;
  }
  std::vector<std::optional<format::IndexValue>> vals;
  Status st = index_->MultiGet(ns, keys, &vals);
  if (!st.ok()) return st;
  size_t n = 0;
  while (n < vals.size() && vals[n].has_value() && table_->IsLive(vals[n]->segment, vals[n]->generation))
    ++n;
  return n;
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
  if (!e->has_value() || !table_->IsLive((*e)->segment, (*e)->generation))
    return Status::NotFound("no such key");
  return ToBlockInfo(ns, key, **e);
}

Status StoreImpl::ListBlocks(NamespaceId ns, std::string_view key_prefix,
                             const std::function<bool(const BlockInfo&)>& fn) {
  return index_->ForEach(ns, key_prefix, [&](NamespaceId n, std::string_view key, const format::IndexValue& v) {
    return fn(ToBlockInfo(n, key, v));
  });
}

}  // namespace kvtier
