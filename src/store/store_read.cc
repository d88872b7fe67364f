// The read path's entry: gets handed to the read pool (src/read) with their
// deadlines, and the index-only lookups.
#include <algorithm>
#include <cstring>

#include "index/presence_map.h"
#include "store/store_impl.h"
#include "util/handoff.h"

namespace kvtier {

void StoreImpl::GetAsync(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                         Clock::time_point deadline, GetCallback done) {
  if (StartGet(ns, key, out, done)) return;
  ReadFromDisk(ns, key, out, deadline, std::move(done));
}

void StoreImpl::GetStartingBy(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                              Clock::time_point start_by, GetCallback done) {
  if (StartGet(ns, key, out, done)) return;
  auto op = NewReadOp(ns, key, out, kNoDeadline, std::move(done));
  op->start_by = start_by;  // once started, a read may land straight in `out`
  SubmitRead(op);
}

bool StoreImpl::StartGet(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                         GetCallback& done) {
  c_.gets.Add();
  if (key.empty() || key.size() > format::kMaxKeyBytes) {
    done(Status::InvalidArgument("key length out of range"));
    return true;
  }
  if (ram_ == nullptr) return false;
  // Served inline from host memory: no queue, no I/O, no deadline to race.
  auto r = ram_->Read(ns, key, out);
  return FinishRamRead(r, done);
}

bool StoreImpl::FinishRamRead(Result<size_t>& r, GetCallback& done) {
  if (r.ok()) {
    c_.hits_ram.Add();
    c_.bytes_read_ram.Add(*r);
    done(std::move(r));
    return true;
  }
  if (r.status().code() == Code::kBufferTooSmall) {
    done(std::move(r));
    return true;
  }
  return false;  // a miss, or a copy that no longer verified (dropped): disk has it
}

std::shared_ptr<ReadOp> StoreImpl::NewReadOp(NamespaceId ns, std::string_view key,
                                             std::span<const MutableFragment> out, Clock::time_point deadline,
                                             GetCallback done) {
  auto op = std::make_shared<ReadOp>();
  op->ns = ns;
  op->key.assign(key);
  op->out.assign(out.begin(), out.end());
  for (const MutableFragment& f : out) op->out_total += f.size;
  op->deadline = deadline;
  op->done = std::move(done);
  return op;
}

void StoreImpl::ReadFromDisk(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                             Clock::time_point deadline, GetCallback done, ReadPool::WhenFull when_full) {
  SubmitRead(NewReadOp(ns, key, out, deadline, std::move(done)), when_full);
}

void StoreImpl::SubmitRead(const std::shared_ptr<ReadOp>& op, ReadPool::WhenFull when_full) {
  const Clock::time_point deadline = op->deadline;
  switch (reads_->Submit(op, when_full)) {
    case ReadPool::Admit::kClosed:
      op->done(Status::Closed("store is closed"));
      return;
    case ReadPool::Admit::kFull:
      c_.misses.Add();
      c_.get_deadline_misses.Add();
      op->done(Status::TimedOut(op->start_by <= Clock::now() ? "the get's start deadline passed while the read queue was full"
                                                             : "read queue full: treat as a miss"));
      return;
    case ReadPool::Admit::kQueued:
      break;
  }
  if (deadline != kNoDeadline) deadlines_->Add(deadline, op);
  else if (op->start_by != kNoDeadline) deadlines_->Add(op->start_by, op);  // expires it only while it waits
}

Result<size_t> StoreImpl::Get(NamespaceId ns, std::string_view key,
                              std::span<const MutableFragment> out) {
  Handoff<Result<size_t>> answer;
  GetCallback done = [&answer](Result<size_t> r) { answer.Set(std::move(r)); };
  // A blocking get waits for room in a full read queue: it would wait for
  // its answer anyway (an async get is refused at once instead: a miss).
  if (StartGet(ns, key, out, done)) return answer.Wait();
  if (!opt_.read_on_caller_thread) {
    ReadFromDisk(ns, key, out, kNoDeadline, std::move(done), ReadPool::WhenFull::kWait);
    return answer.Wait();
  }
  auto op = NewReadOp(ns, key, out, kNoDeadline, std::move(done));
  if (!reads_->ReadOnCaller(op)) SubmitRead(op, ReadPool::WhenFull::kWait);
  return answer.Wait();
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

std::vector<Result<size_t>> StoreImpl::GetBatch(NamespaceId ns, std::span<const GetItem> items,
                                                Clock::time_point deadline) {
  std::vector<Result<size_t>> out(items.size(), Result<size_t>(Status::Aborted("not run")));
  auto too_late = [&](size_t i) {
    c_.gets.Add();
    c_.misses.Add();
    c_.get_deadline_misses.Add();
    out[i] = Status::TimedOut("get_batch deadline passed before the read started");
  };
  if (deadline != kNoDeadline && Clock::now() >= deadline) {
    for (size_t i = 0; i < items.size(); ++i) too_late(i);
    return out;
  }
  // RAM hits first, all together, so the tier can copy them on several
  // threads; the rest go to disk as GetAsync would send them.
  std::vector<Result<size_t>> ram(ram_ != nullptr ? items.size() : 0, Result<size_t>(Status::NotFound("")));
  if (ram_ != nullptr) ram_->ReadBatch(ns, items, ram);
  // A blocking batch waits for room instead of overflowing the read queue
  // (max_pending_reads): it keeps at most a quarter of it in flight, leaving
  // room for others' async gets, and waits where other callers filled it.
  const size_t window = std::max<size_t>(1, opt_.max_pending_reads / 4);
  std::mutex m;
  std::condition_variable cv;
  size_t left = items.size(), running = 0;
  auto to_disk = [&](size_t i, GetCallback done) {
    auto op = NewReadOp(ns, items[i].key, items[i].out, kNoDeadline, std::move(done));
    op->start_by = deadline;  // once started, a read may land straight in `out`
    SubmitRead(op, ReadPool::WhenFull::kWait);
  };
  for (size_t i = 0; i < items.size(); ++i) {
    {
      std::unique_lock<std::mutex> l(m);
      const bool room = deadline == kNoDeadline ? (cv.wait(l, [&] { return running < window; }), true)
                                                : cv.wait_until(l, deadline, [&] { return running < window; });
      if (!room) {  // the rest would start after the deadline
        for (size_t k = i; k < items.size(); ++k) too_late(k);
        left -= items.size() - i;
        break;
      }
      ++running;
    }
    GetCallback done = [&, i](Result<size_t> r) {
      std::lock_guard<std::mutex> l(m);
      out[i] = std::move(r);
      const bool made_room = running-- == window;
      if (--left == 0 || made_room) cv.notify_one();
    };
    if (ram_ == nullptr) {
      if (!StartGet(ns, items[i].key, items[i].out, done)) to_disk(i, std::move(done));
      continue;
    }
    c_.gets.Add();
    if (items[i].key.empty() || items[i].key.size() > format::kMaxKeyBytes)
      done(Status::InvalidArgument("key length out of range"));
    else if (!FinishRamRead(ram[i], done))
      to_disk(i, std::move(done));
  }
  std::unique_lock<std::mutex> l(m);
  cv.wait(l, [&] { return left == 0; });
  return out;
}

RamPlacement StoreImpl::PlacementOf(const format::IndexValue& v) {
  return RamPlacement{v.segment, v.offset, format::AlignUp(v.RecordBytes())};
}

void StoreImpl::NoteHit(const format::IndexValue& v) {
  const RamPlacement p = PlacementOf(v);
  hits_.Note(p.segment, p.offset, p.bytes);
}

ReadPool::Deps StoreImpl::ReadDeps() {
  ReadPool::Deps d;
  d.fs = fs_.get();
  d.index = index_.get();
  d.table = table_.get();
  d.ram = ram_.get();
  d.counters = &c_;
  d.stored_payload_limit = StoredPayloadLimit();
  d.threads = opt_.read_threads;
  d.queue_depth = opt_.queue_depth;
  d.zero_copy_min_bytes = opt_.zero_copy_min_bytes;
  d.zero_copy_small_pages = opt_.zero_copy_small_pages;
  d.max_pending = opt_.max_pending_reads;
  d.remote_get = [this](const std::shared_ptr<ReadOp>& op) { return RemoteGet(op); };  // store_remote.cc
  d.drop = [this](NamespaceId ns, std::string_view key, uint64_t seq) { RequestDrop(ns, key, seq); };
  d.note_hit = [this](const format::IndexValue& v) { NoteHit(v); };
  return d;
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

Status StoreImpl::ContainsBatch(NamespaceId ns, std::span<const std::string_view> keys, std::vector<bool>* present) {
  if (present == nullptr) return Status::InvalidArgument("ContainsBatch needs somewhere to answer");
  present->assign(keys.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto c = Contains(ns, keys[i]);
    if (!c.ok()) return c.status();
    (*present)[i] = *c;
  }
  return Status::OK();
}

Status StoreImpl::TouchBatch(NamespaceId ns, std::span<const std::string_view> keys, std::vector<bool>* present) {
  if (present != nullptr) present->assign(keys.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].empty() || keys[i].size() > format::kMaxKeyBytes) return Status::InvalidArgument("key length out of range");
    auto e = index_->Get(ns, keys[i]);
    if (!e.ok()) return e.status();
    if (!e->has_value() || !table_->IsLive((*e)->segment, (*e)->generation)) continue;
    NoteHit(**e);  // where the reclaim of its segment looks
    c_.touches.Add();
    if (present != nullptr) (*present)[i] = true;
  }
  return Status::OK();
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
  b.hits = hits_.Of(v.segment, v.offset);
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

Status StoreImpl::ListBlocks(NamespaceId ns, std::string_view key_prefix, const ListCursor* after,
                             const std::function<bool(const BlockInfo&)>& fn) {
  return index_->ForEach(ns, key_prefix, after, [&](NamespaceId n, std::string_view key, const format::IndexValue& v) {
    return fn(ToBlockInfo(n, key, v));
  });
}

}  // namespace kvtier
