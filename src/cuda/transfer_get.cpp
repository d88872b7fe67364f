// Loads: blocks from the store into device memory. RAM-tier hits are copied
// from the tier's pinned chunks in one enqueue; the rest are read from disk
// into staging slots, each copied to the device as soon as its read lands
// while the others are still being read.
#include "cuda/transfer_impl.h"

namespace kvtier::gpu {

// One GetToDevice call's results and counts.
struct TransferImpl::GetCall {
  explicit GetCall(size_t n) : results(n, Result<size_t>(Status::Aborted("not run"))), totals(n) {}
  void Fail(size_t i, Status st) {
    if (first_error.ok()) first_error = st;
    results[i] = std::move(st);
  }
  std::vector<Result<size_t>> results;
  std::vector<size_t> totals;  // device bytes per block
  Status first_error;
  uint64_t ram_blocks = 0, ram_bytes = 0, disk_blocks = 0, disk_bytes = 0, missing = 0;
};

// A disk read that finished, in the staging slot it landed in.
struct TransferImpl::Landed {
  size_t block, slot;
  Result<size_t> r;
};

std::vector<Result<size_t>> TransferImpl::GetToDevice(NamespaceId ns, std::span<const DeviceBlock> blocks,
                                                      cudaStream_t stream, cudaEvent_t done_event,
                                                      TransferDone done) {
  std::lock_guard<std::mutex> lock(call_mu_);
  GetCall call(blocks.size());
  std::vector<size_t> misses;
  CopyRamHits(call, ns, blocks, stream, &misses);
  if (!misses.empty()) ReadMisses(call, ns, blocks, misses, stream);
  AddStats([&](TransferStats& s) {
    s.ram_hits += call.ram_blocks;
    s.disk_reads += call.disk_blocks;
    s.misses += call.missing;
    s.blocks_to_device += call.ram_blocks + call.disk_blocks;
    s.bytes_to_device += call.ram_bytes + call.disk_bytes;
  });
  if (done_event != nullptr) {
    cudaError_t e = cudaEventRecord(done_event, stream);
    if (e != cudaSuccess && call.first_error.ok()) call.first_error = CudaError(e, "recording the done event");
  }
  if (done) {
    Status fe = call.first_error;
    AfterStream(stream, [done, fe] { done(fe); });
  }
  return std::move(call.results);
}

// RAM hits, enqueued a few MiB at a time: the device copies the first while
// this thread checks and pins the next (a single enqueue at the end left the
// device idle for all of that; docs/e2e.md). Their
// pins are released after the copies have run. Blocks the tier does not hold
// go to `misses`.
void TransferImpl::CopyRamHits(GetCall& call, NamespaceId ns, std::span<const DeviceBlock> blocks,
                               cudaStream_t stream, std::vector<size_t>* misses) {
  constexpr uint64_t kFlushBytes = 8u << 20;
  auto pins = std::make_shared<std::vector<RamTier::Pin>>();
  std::vector<CopyPiece> copies;
  std::vector<size_t> hits;      // of the copies not yet enqueued
  uint64_t pending_bytes = 0;
  auto flush = [&] {
    if (copies.empty()) return;
    Status st = Enqueue(copies, /*to_device=*/true, stream);
    if (!st.ok())
      for (size_t i : hits) call.Fail(i, st);
    copies.clear();
    hits.clear();
    pending_bytes = 0;
  };
  for (size_t i = 0; i < blocks.size(); ++i) {
    Result<size_t> total = CheckBlock(i, blocks[i], opt_.device);
    if (!total.ok()) {
      call.Fail(i, total.status());
      continue;
    }
    call.totals[i] = *total;
    RamTier::Pin pin = ram_ != nullptr ? ram_->Acquire(ns, blocks[i].key) : RamTier::Pin();
    if (!pin) {
      misses->push_back(i);
      continue;
    }
    if (pin.size() > call.totals[i]) {
      call.Fail(i, Status::BufferTooSmall("block has " + std::to_string(pin.size()) + " bytes, device fragments " +
                                          std::to_string(call.totals[i])));
      continue;
    }
    Zip(PieceSpans(pin.pieces()), DeviceSpans(blocks[i]), pin.size(), &copies);
    call.results[i] = static_cast<size_t>(pin.size());
    call.ram_bytes += pin.size();
    ++call.ram_blocks;
    hits.push_back(i);
    pending_bytes += pin.size();
    pins->push_back(std::move(pin));
    if (pending_bytes >= kFlushBytes) flush();
  }
  flush();
  if (!pins->empty()) AfterStream(stream, [pins] { pins->clear(); });
}

// Reads the misses into staging slots, keeping every slot busy, and lands
// each one as it completes.
void TransferImpl::ReadMisses(GetCall& call, NamespaceId ns, std::span<const DeviceBlock> blocks,
                              const std::vector<size_t>& misses, cudaStream_t stream) {
  size_t most = 0;
  for (size_t i : misses) most = std::max(most, call.totals[i]);
  Status st = EnsureSlots(most);
  if (!st.ok()) {
    for (size_t i : misses) call.Fail(i, st);
    return;
  }
  std::mutex m;
  std::condition_variable cv;
  std::deque<Landed> landed;
  // Taken oldest-freed first: the slot just landed still has its copy to the
  // device in flight, and taking it again at once waited for that copy
  // before the next read could be queued.
  std::deque<size_t> free_slots;
  for (size_t s = 0; s < slots_.size(); ++s) free_slots.push_back(s);
  size_t next = 0, inflight = 0;
  while (next < misses.size() || inflight > 0) {
    while (next < misses.size() && !free_slots.empty()) {
      const size_t s = free_slots.front();
      free_slots.pop_front();
      Status w = WaitSlot(slots_[s]);
      const size_t i = misses[next++];
      if (!w.ok()) {
        call.Fail(i, w);
        free_slots.push_back(s);
        continue;
      }
      ++inflight;
      MutableFragment out{staging_ + slots_[s].off, slot_bytes_};
      store_->GetAsync(ns, blocks[i].key, {&out, 1}, kNoDeadline, [&, i, s](Result<size_t> r) {
        {
          std::lock_guard<std::mutex> l(m);
          landed.push_back(Landed{i, s, std::move(r)});
        }
        cv.notify_one();
      });
    }
    if (inflight == 0) continue;
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return !landed.empty(); });
    Landed one = std::move(landed.front());
    landed.pop_front();
    l.unlock();
    --inflight;
    LandMiss(call, one, blocks, stream);
    free_slots.push_back(one.slot);
  }
}

// A finished read: a miss, an error, or bytes copied on to the device (the
// slot's event says when it may be reused).
void TransferImpl::LandMiss(GetCall& call, const Landed& landed, std::span<const DeviceBlock> blocks,
                            cudaStream_t stream) {
  const size_t i = landed.block;
  if (!landed.r.ok()) {
    if (landed.r.status().IsNotFound() || landed.r.status().code() == Code::kTimedOut) {
      ++call.missing;
      call.results[i] = landed.r.status();  // a miss is not an error of the call
    } else {
      call.Fail(i, landed.r.status());
    }
    return;
  }
  const size_t n = *landed.r;
  if (n > call.totals[i]) {
    call.Fail(i, Status::BufferTooSmall("block has " + std::to_string(n) + " bytes, device fragments " +
                                        std::to_string(call.totals[i])));
    return;
  }
  Slot& slot = slots_[landed.slot];
  std::vector<CopyPiece> cp;
  std::vector<Span> src = {{staging_ + slot.off, n}};
  Zip(src, DeviceSpans(blocks[i]), n, &cp);
  Status e = Enqueue(cp, /*to_device=*/true, stream);
  if (!e.ok()) return call.Fail(i, e);
  cudaError_t r = cudaEventRecord(slot.ev, stream);
  if (r != cudaSuccess) return call.Fail(i, CudaError(r, "cudaEventRecord"));
  slot.busy = true;
  call.results[i] = n;
  call.disk_bytes += n;
  ++call.disk_blocks;
}

}  // namespace kvtier::gpu
