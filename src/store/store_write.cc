// The write path: admission, ring reservation, the writer thread's group
// commit, segment rollover and reclaim, removes and checkpoints.
#include <algorithm>
#include <cstring>

#include "log/put_plan.h"
#include "log/write_runs.h"
#include "store/store_impl.h"
#include "util/checksum.h"
#include "util/clock.h"
#include "util/handoff.h"
#include "util/copy_checksum.h"

namespace kvtier {

Status StoreImpl::Validate(NamespaceId ns, std::string_view key, uint64_t payload_len) {
  if (key.empty() || key.size() > format::kMaxKeyBytes)
    return Status::InvalidArgument("key length " + std::to_string(key.size()) +
                                   " is outside 1.." + std::to_string(format::kMaxKeyBytes));
  if (payload_len == 0 || payload_len > opt_.max_payload_bytes)
    return Status::InvalidArgument("payload of " + std::to_string(payload_len) +
                                   " bytes is outside 1.." + std::to_string(opt_.max_payload_bytes));
  const std::optional<uint64_t> block_bytes = namespaces_.BlockBytes(ns);
  if (!block_bytes) return Status::NotFound("unknown namespace " + NamespaceIdToHex(ns));
  if (*block_bytes != 0 && *block_bytes != payload_len)
    return Status::InvalidArgument("namespace " + namespaces_.Get(ns).value_or(NamespaceSpec{}).DisplayName() +
                                   " takes blocks of " + std::to_string(*block_bytes) + " bytes, got " +
                                   std::to_string(payload_len));
  return Status::OK();
}

namespace {
constexpr uint64_t kPage = format::kPage;

// Copies `payload` (gathered in order) to dst.
void Gather(std::span<const Fragment> payload, uint8_t* dst) {
  for (const Fragment& f : payload) {
    if (f.size != 0) std::memcpy(dst, f.data, f.size);
    dst += f.size;
  }
}

// Copies `payload` into the pieces of a RAM-tier reservation of its size
// and returns its checksum, hashed on the way through (util/copy_checksum.h),
// recording the hash's states every RamTier::kMarkBytes in *marks when given.
uint64_t ScatterHashed(std::span<const Fragment> payload, uint64_t payload_len,
                       const std::vector<RamTier::Piece>& pieces, std::vector<Xxh3Mark>* marks) {
  Xxh3Copy sum(payload_len);
  if (marks != nullptr) sum.RecordMarks(RamTier::kMarkBytes, marks);
  size_t pi = 0, po = 0;
  for (const Fragment& f : payload) {
    const uint8_t* src = static_cast<const uint8_t*>(f.data);
    size_t left = f.size;
    while (left > 0) {
      const RamTier::Piece& p = pieces[pi];
      const size_t n = std::min(left, p.size - po);
      sum.Copy(p.data + po, src, n);
      src += n;
      left -= n;
      po += n;
      if (po == p.size) ++pi, po = 0;
    }
  }
  return sum.Digest();
}

uint64_t ChecksumOf(std::span<const Fragment> payload) {
  if (payload.size() == 1) return format::Checksum(payload[0].data, payload[0].size);
  Xxh3Stream st;
  for (const Fragment& f : payload) st.Update(f.data, f.size);
  return st.Digest();
}
}  // namespace

void StoreImpl::SubmitPut(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                          bool blocking, bool borrow, PutCallback done, RamTier::Pin* reserved,
                          const uint64_t* checksum, Clock::time_point start_by) {
  if (opt_.read_only) return FinishPut(done, Status::NotSupported("store opened read-only"));
  const Clock::time_point submitted = Clock::now();
  if (submitted >= start_by) return FinishPut(done, Status::TimedOut("the put's start deadline passed before it started"));
  uint64_t payload_len = 0;
  for (const Fragment& f : payload) {
    if (f.data == nullptr && f.size != 0)
      return FinishPut(done, Status::InvalidArgument("fragment with null data"));
    payload_len += f.size;
  }
  Status st = Validate(ns, key, payload_len);
  if (!st.ok()) {
    c_.puts_failed.Add();
    return FinishPut(done, st);
  }
  if (ram_ != nullptr) NoteRamBlockSize(payload_len);
  if (!admission_->Admit(ns, key, payload_len)) {
    c_.puts_not_admitted.Add();
    return FinishPut(done, Status::NotAdmitted("declined by the admission policy"));
  }
  const RecordPlan plan = PlanRecord({key.size(), payload_len, DenseOk(), CompactOk(), opt_.dense_record_max_bytes,
                                      opt_.zero_copy_min_bytes, ram_ != nullptr,
                                      reserved != nullptr && static_cast<bool>(*reserved)});
  RamTier::Pin pin;
  bool ram_copy = false;
  if (reserved != nullptr && *reserved) {
    pin = std::move(*reserved);
  } else if (plan.reserve_ram_copy) {
    pin = ram_->Reserve(ns, key, payload_len);
    ram_copy = static_cast<bool>(pin);
  }
  std::span<const Fragment> source = payload;
  std::vector<Fragment> pin_frags;
  if (pin) {
    for (const RamTier::Piece& p : pin.pieces()) pin_frags.push_back(Fragment{p.data, p.size});
    source = pin_frags;
  }
  WritePlanInput wi{payload_len, opt_.zero_copy_min_bytes, static_cast<bool>(pin), borrow, PageRun(source.data(), source.size(), payload_len),
                    /*small_pages=*/false};
  WritePlan w = PlanWrite(plan, wi);
  // Asked of the kernel only where it decides (a direct write from the
  // caller's memory).
  if (w.direct && !pin && !ZeroCopyPagesOk(source.data(), source.size(), payload_len, opt_.zero_copy_small_pages)) {
    wi.small_pages = true;
    w = PlanWrite(plan, wi);
    c_.small_page_copies.Add();
  }
  WriteOp op;
  op.flags = plan.flags;
  op.rec_bytes = plan.rec_bytes;
  st = ops_.Reserve(&op, w.ring_bytes, w.borrowed, blocking, start_by);
  if (!st.ok()) {
    admission_->Refund(payload_len);
    if (st.code() == Code::kNotAdmitted) c_.puts_not_admitted.Add();
    if (st.code() == Code::kTimedOut) c_.puts_failed.Add();
    return FinishPut(done, st);
  }
  // Fill and checksum outside the lock: on the caller's thread, in parallel
  // with other callers and the writer. Padding never leaks old memory.
  uint64_t scattered_sum = 0;
  if (ram_copy) {
    // The states between pieces, recorded as the copy is hashed: the
    // block's first read can then be shared out (RamTier::WantsMarks).
    std::vector<Xxh3Mark> marks;
    const bool want_marks = ram_->WantsMarks(payload_len);
    scattered_sum = ScatterHashed(payload, payload_len, pin.pieces(), want_marks ? &marks : nullptr);
    if (checksum == nullptr) checksum = &scattered_sum;  // the caller's, if given, is the one to store
    if (want_marks && !marks.empty() && *checksum == scattered_sum) ram_->SetMarks(pin, std::move(marks));
  }
  FillRecord(&op, key.size(), source, plan, w, checksum);
  op.kind = WriteOp::Kind::kRecord;
  op.ns = ns;
  op.key.assign(key);
  op.payload_len = payload_len;
  op.written_ms = NowUnixMs();
  op.done = std::move(done);
  if (ram_ != nullptr) {
    // Write-through: the RAM copy is visible at once; the committer undoes
    // it (by token) if the record cannot be made durable.
    if (pin) {
      op.ram_token = ram_->CommitKeepPin(pin, op.checksum);
      if (w.direct) op.hold = std::move(pin);  // the device write reads these chunks
    } else {
      Fragment whole_payload{op.alloc.data + plan.payload_offset, payload_len};
      op.ram_token = ram_->Insert(ns, key, {&whole_payload, 1}, op.checksum);
    }
  }
  op.times.submitted = submitted;
  op.times.pushed = Clock::now();
  ops_.PushRecord(std::move(op));
}

void StoreImpl::FillRecord(WriteOp* op, size_t key_len, std::span<const Fragment> source, const RecordPlan& plan,
                           const WritePlan& w, const uint64_t* checksum) {
  uint8_t* rec = op->alloc.data;
  const size_t head = format::HeaderBytes(plan.flags) + key_len;
  const uint64_t payload_len = w.whole + w.tail;
  if (!w.direct) {
    std::memset(rec + head, 0, plan.payload_offset - head);
    Gather(source, rec + plan.payload_offset);
    std::memset(rec + plan.payload_offset + payload_len, 0, w.ring_bytes - plan.payload_offset - payload_len);
    op->checksum = checksum != nullptr ? *checksum : format::Checksum(rec + plan.payload_offset, payload_len);
    return;
  }
  // Header page, the payload's whole pages where they are, tail page.
  std::memset(rec + head, 0, kPage - head);
  op->pieces.push_back(iovec{rec, kPage});
  uint64_t left = w.whole;
  for (const Fragment& f : source) {
    const uint64_t n = std::min<uint64_t>(left, f.size / kPage * kPage);
    if (n == 0) break;
    op->pieces.push_back(iovec{const_cast<void*>(f.data), n});
    left -= n;
  }
  if (w.tail != 0) {
    // The tail page holds the payload's last `tail` bytes.
    uint8_t* t = rec + kPage;
    uint64_t skip = w.whole;
    uint8_t* out = t;
    for (const Fragment& f : source) {
      if (skip >= f.size) {
        skip -= f.size;
        continue;
      }
      std::memcpy(out, static_cast<const uint8_t*>(f.data) + skip, f.size - skip);
      out += f.size - skip;
      skip = 0;
    }
    std::memset(out, 0, t + kPage - out);
    op->pieces.push_back(iovec{t, kPage});
  }
  op->checksum = checksum != nullptr ? *checksum : ChecksumOf(source);
}

Status StoreImpl::Put(NamespaceId ns, std::string_view key, std::span<const Fragment> payload) {
  Handoff<Status> answer;
  SubmitPut(ns, key, payload, /*blocking=*/true, /*borrow=*/true, [&answer](Status st) { answer.Set(std::move(st)); });
  return answer.Wait();
}

std::vector<Status> StoreImpl::PutBatch(NamespaceId ns, std::span<const PutItem> items) {
  std::vector<Status> out(items.size());
  std::mutex m;
  std::condition_variable cv;
  size_t left = items.size();
  for (size_t i = 0; i < items.size(); ++i) {
    SubmitPut(ns, items[i].key, items[i].payload, /*blocking=*/true, /*borrow=*/true, [&, i](Status st) {
      std::lock_guard<std::mutex> l(m);
      out[i] = std::move(st);
      if (--left == 0) cv.notify_one();
    });
  }
  std::unique_lock<std::mutex> l(m);
  cv.wait(l, [&] { return left == 0; });
  return out;
}

void StoreImpl::PutAsync(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                         PutCallback done) {
  SubmitPut(ns, key, payload, /*blocking=*/false, /*borrow=*/false, std::move(done));
}

void StoreImpl::PutAsyncBorrowed(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                                 PutCallback done) {
  SubmitPut(ns, key, payload, /*blocking=*/false, /*borrow=*/true, std::move(done));
}

void StoreImpl::PutInternal(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                            RamTier::Pin reservation, bool blocking, PutCallback done,
                            const uint64_t* checksum, bool borrow, Clock::time_point start_by) {
  if (!reservation) return SubmitPut(ns, key, payload, blocking, borrow, std::move(done), nullptr, checksum, start_by);
  std::vector<Fragment> frags;
  for (const RamTier::Piece& p : reservation.pieces()) frags.push_back(Fragment{p.data, p.size});
  SubmitPut(ns, key, frags, blocking, /*borrow=*/false, std::move(done), &reservation, checksum, start_by);
}

Status StoreImpl::RunOnWriter(WriteOp op) {
  if (opt_.read_only) return Status::NotSupported("store opened read-only");
  Handoff<Status> answer;
  op.done = [&answer](Status st) { answer.Set(std::move(st)); };
  KVTIER_RETURN_IF_ERROR(ops_.Push(std::move(op)));
  return answer.Wait();
}

Status StoreImpl::Flush() {
  WriteOp op;
  op.kind = WriteOp::Kind::kFlush;
  return RunOnWriter(std::move(op));
}

Status StoreImpl::Remove(NamespaceId ns, std::string_view key) {
  return RemoveBatch(ns, std::span<const std::string_view>(&key, 1), nullptr);
}

Status StoreImpl::RemoveBatch(NamespaceId ns, std::span<const std::string_view> keys, std::vector<bool>* present) {
  for (std::string_view key : keys)
    if (key.empty() || key.size() > format::kMaxKeyBytes) return Status::InvalidArgument("key length out of range");
  c_.removes.Add(keys.size());
  if (present != nullptr) present->clear();
  // A long list goes to the writer in pieces, a flush each: in one pass its
  // index lookups would hold every put queued behind it.
  constexpr size_t kRemovesPerPass = 4096;
  for (size_t at = 0; at < keys.size(); at += kRemovesPerPass) {
    const auto piece = keys.subspan(at, std::min(kRemovesPerPass, keys.size() - at));
    std::vector<bool> found;
    WriteOp op;
    op.kind = WriteOp::Kind::kRemove;
    op.ns = ns;
    op.keys.assign(piece.begin(), piece.end());
    op.present = present != nullptr ? &found : nullptr;
    KVTIER_RETURN_IF_ERROR(RunOnWriter(std::move(op)));
    if (present != nullptr) present->insert(present->end(), found.begin(), found.end());
  }
  return Status::OK();
}

Status StoreImpl::RemoveNamespace(NamespaceId ns) {
  WriteOp op;
  op.kind = WriteOp::Kind::kTask;
  op.task = [this, ns] { return RemoveNamespaceOnWriter(ns); };
  return RunOnWriter(std::move(op));
}

// On the writer thread, with every earlier put committed: its entries, its
// file, its index row, then a checkpoint past it all.
Status StoreImpl::RemoveNamespaceOnWriter(NamespaceId ns) {
  if (!namespaces_.Contains(ns)) return Status::NotFound("unknown namespace " + NamespaceIdToHex(ns));
  Status st;
  for (;;) {
    IndexBatch b;
    st = index_->ForEach(ns, "", [&](NamespaceId entry_ns, std::string_view key, const format::IndexValue& v) {
      b.Delete(entry_ns, key, v);
      return b.count() < 10000;
    });
    if (!st.ok() || b.empty()) break;
    st = index_->Commit(b, false);
    if (!st.ok()) break;
  }
  // While a failed write holds the checkpoint back, recovery rescans records
  // written since: should the namespace be registered again, a mark keeps
  // its old records out (as a Remove's does a key's).
  if (st.ok() && committer_->HoldsFailedWrite()) {
    IndexBatch mark;
    mark.MarkRemoved(ns, "", writer_->position().next_seq);
    st = index_->Commit(mark, false);
  }
  // The file goes first: once it is gone a crash cannot resurrect the
  // namespace's records through recovery or repair.
  if (st.ok()) st = RemoveNamespaceFile(ns);
  if (st.ok()) st = index_->DeleteNamespace(ns, false);
  if (st.ok()) st = writer_->CheckpointNow(false);
  if (st.ok()) namespaces_.Erase(ns);
  if (ram_ != nullptr) ram_->EraseNamespace(ns);
  return st;
}

Status StoreImpl::EvictTo(uint64_t target_used_bytes) {
  WriteOp op;
  op.kind = WriteOp::Kind::kEvictTo;
  op.arg = target_used_bytes;
  return RunOnWriter(std::move(op));
}

void StoreImpl::RequestDrop(NamespaceId ns, std::string_view key, uint64_t sequence) {
  if (opt_.read_only) return;
  WriteOp op;
  op.kind = WriteOp::Kind::kDrop;
  op.ns = ns;
  op.key.assign(key);
  op.arg = sequence;
  ops_.Push(std::move(op)).IgnoreError();  // closing: the entry is dropped next open, if still stale
}

void StoreImpl::ReleaseCommitted(std::span<const WriteOp> ops) {
  ops_.Release(ops);
  // A put that did not become durable takes its RAM copy back; one that did
  // tells the copy where its record lies, so that its reads from the RAM
  // tier count for that segment when the reclaim picks a victim.
  if (ram_ != nullptr)
    for (const WriteOp& op : ops) {
      if (op.ram_token == 0) continue;
      if (!op.status.ok()) ram_->EraseIf(op.ns, op.key, op.ram_token);
      else ram_->NotePlaced(op.ns, op.key, op.checksum, PlacementOf(IndexValueOf(op)));
    }
}

Status StoreImpl::ShareNow(std::chrono::milliseconds timeout) {
  if (!remote_ || opt_.read_only) return Status::OK();
  const Clock::time_point deadline = Clock::now() + timeout;
  WriteOp op;
  op.kind = WriteOp::Kind::kSeal;
  KVTIER_RETURN_IF_ERROR(RunOnWriter(std::move(op)));
  if (!RemoteWaitUploaded(deadline))
    return Status::TimedOut("shared tier uploads still running after " + std::to_string(timeout.count()) + " ms");
  return Status::OK();
}

}  // namespace kvtier
