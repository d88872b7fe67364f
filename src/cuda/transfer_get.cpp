// Loads: blocks from the store into device memory. RAM-tier hits are copied
// from the tier's pinned chunks in one enqueue, then hashed on the device
// while the rest are read from disk into staging slots, each copied to the
// device as soon as its read lands while the others are still being read.
#include "cuda/transfer_impl.h"
#include "util/checksum.h"

namespace kvtier::gpu {

// One GetToDevice call's results and counts.
struct TransferImpl::GetCall {
  explicit GetCall(size_t n)
      : results(n, Result<size_t>(Status::Aborted("not run"))), totals(n), sums(n), pin_of(n, -1), sum_slot(n, -1) {}
  void Fail(size_t i, Status st) {
    if (first_error.ok()) first_error = st;
    results[i] = std::move(st);
  }
  std::vector<Result<size_t>> results;
  std::vector<size_t> totals;  // device bytes per block
  Status first_error;
  uint64_t ram_blocks = 0, ram_bytes = 0, disk_blocks = 0, disk_bytes = 0, missing = 0;
  // The RAM hits' check: each one's checksum, its pin (held until the
  // copies have run) and its sum's index in the plan (-1: hashed on the host).
  std::vector<uint64_t> sums;
  std::vector<int64_t> pin_of;
  std::vector<int64_t> sum_slot;
  std::shared_ptr<std::vector<RamTier::Pin>> pins = std::make_shared<std::vector<RamTier::Pin>>();
  // A service's client with the service's RAM tier lent (LendRamHits): per
  // block, the pieces the service pinned for it in this process's mapping
  // of the tier (empty: not pinned, read through staging), with their size
  // and checksum; and the leases to release once the copies have run.
  std::vector<std::vector<RamTier::Piece>> lent;
  std::vector<uint64_t> lent_size, lent_sum;
  std::vector<uint64_t> leases;
  uint64_t lease_connection = 0;
  std::vector<size_t> checked;    // the RAM hits to check, in order
  size_t planned = 0, planned_frags = 0;  // payloads and fragments in the plan so far
  size_t groups = 0;                      // hashed so far
  cudaEvent_t sums_ready = nullptr;  // after the last group's sums
  // Timing (TransferStats::last_get_*): on the call's stream at its start
  // and after the last RAM hit's copy; the host's time to queue them.
  cudaEvent_t started = nullptr, copied = nullptr;
  double enqueue_ms = 0, copy_ms = 0, hash_tail_ms = 0;
  bool hash_failed = false;          // a group could not be hashed: the host checks every hit
  uint64_t verified = 0, reloaded = 0;
  uint64_t pointer_queries = 0;  // the driver's, checking the fragments
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
  const auto call_start = std::chrono::steady_clock::now();
  GetCall call(blocks.size());
  std::vector<size_t> misses;
  if (lender_ != nullptr && opt_.pin_ram_tier && tier_map_ == nullptr) RetryServedTier();
  if (tier_map_ != nullptr) LendRamHits(call, ns, blocks);
  CopyRamHits(call, ns, blocks, stream, &misses);
  call.enqueue_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - call_start).count();
  if (!misses.empty()) ReadMisses(call, ns, blocks, misses, stream);
  const std::vector<size_t> again = CheckRamHits(call);
  TimeRamHits(call);  // releases the timing events where CheckRamHits did not
  if (!again.empty()) ReadMisses(call, ns, blocks, again, stream);
  if (!call.pins->empty()) AfterStream(stream, [pins = call.pins] { pins->clear(); });
  if (!call.leases.empty())
    AfterStream(stream, [this, conn = call.lease_connection, leases = std::move(call.leases)] {
      for (uint64_t l : leases) lender_->UnpinTier(conn, l);
    });
  // The store's own counters: hits verified here (a reloaded one was
  // counted by the store's read); a lent tier's hits its service counts.
  if (sink_ != nullptr && call.lent.empty() && call.ram_blocks > 0)
    sink_->CountRamHits(call.ram_blocks, call.ram_bytes);
  const double call_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - call_start).count();
  AddStats([&](TransferStats& s) {
    if (call.ram_blocks > 0) {
      s.last_get_call_ms = call_ms;
      s.last_get_enqueue_ms = call.enqueue_ms;
      s.last_get_copy_ms = call.copy_ms;
      s.last_get_hash_tail_ms = call.hash_tail_ms;
    }
    s.ram_hits_verified_on_device += call.verified;
    s.ram_hits_reloaded += call.reloaded;
    s.pointer_queries += call.pointer_queries;
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
// device idle for all of that; docs/e2e.md). Each flush is hashed on the
// device as soon as its copies have run (HashRamGroup), beside the later
// copies, on two streams in turn: a group's hash takes the H200 about 0.1 ms
// whatever its size (XXH3's last step is a chain over the payload's 1 KiB
// blocks), about as long as an 8 MiB flush's copy, so one stream fell behind
// the copies; two keep up, and only the last flush's hash is left when the
// copies end. Their pins go to call.pins, released after the copies have
// run. Blocks the tier does not hold go to `misses`.
void TransferImpl::CopyRamHits(GetCall& call, NamespaceId ns, std::span<const DeviceBlock> blocks,
                               cudaStream_t stream, std::vector<size_t>* misses) {
  constexpr uint64_t kFlushBytes = 8u << 20;
  std::vector<RamTier::Pin>* pins = call.pins.get();
  // A lent tier's hits are always checked: the service's memory is not this
  // process's to trust.
  const bool lent = !call.lent.empty();
  const bool verify = lent || (ram_ != nullptr && ram_->verifies_reads());
  size_t frag_count = 0, largest = 0;
  DeviceRanges ranges(opt_.device);
  for (size_t i = 0; i < blocks.size(); ++i) {
    Result<size_t> total = CheckBlock(i, blocks[i], ranges);
    if (!total.ok()) {
      call.Fail(i, total.status());
      continue;
    }
    call.totals[i] = *total;
    frag_count += blocks[i].fragments.size();
    largest = std::max(largest, *total);
  }
  call.pointer_queries = ranges.queries();
  // Room for every block's plan and a group's scratch rows: a group ends
  // with the block that takes it past kFlushBytes.
  const bool on_device = verify && gpu_hash_ &&
                         EnsureGetHashArea(blocks.size(), frag_count, (kFlushBytes + largest) / 1024 + 1).ok();
  // Timed only where the call will wait for the hits' sums on the device.
  if (on_device &&
      (cudaEventCreate(&call.started) != cudaSuccess || cudaEventRecord(call.started, stream) != cudaSuccess)) {
    cudaGetLastError();
    if (call.started != nullptr) cudaEventDestroy(call.started);
    call.started = nullptr;  // untimed; the load itself goes on
  }
  std::vector<CopyPiece> copies;
  std::vector<size_t> hits;        // of the copies not yet enqueued
  std::vector<HashPayload> group;  // the plan of the copies not yet hashed: scratch rows from 0
  std::vector<HashFrag> frags;     // the call's, in order
  uint64_t pending_bytes = 0, rows = 0;
  auto flush = [&] {
    if (copies.empty()) return;
    Status st = Enqueue(copies, /*to_device=*/true, stream);
    if (!st.ok())
      for (size_t i : hits) call.Fail(i, st);  // not checked: the result is the error
    if (!group.empty()) HashRamGroup(call, group, frags, rows, stream);
    copies.clear();
    hits.clear();
    group.clear();
    pending_bytes = 0;
    rows = 0;
  };
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (call.totals[i] == 0) continue;  // refused above
    RamTier::Pin pin;
    const std::vector<RamTier::Piece>* pieces = nullptr;
    uint64_t size = 0, checksum = 0;
    if (lent) {
      pieces = &call.lent[i];
      size = call.lent_size[i];
      checksum = call.lent_sum[i];
    } else if (ram_ != nullptr && (pin = ram_->Acquire(ns, blocks[i].key))) {
      pieces = &pin.pieces();
      size = pin.size();
      checksum = pin.checksum();
    }
    if (pieces == nullptr || pieces->empty()) {
      misses->push_back(i);
      continue;
    }
    if (size > call.totals[i]) {
      call.Fail(i, Status::BufferTooSmall("block has " + std::to_string(size) + " bytes, device fragments " +
                                          std::to_string(call.totals[i])));
      continue;
    }
    Zip(PieceSpans(*pieces), DeviceSpans(blocks[i]), size, &copies);
    call.results[i] = static_cast<size_t>(size);
    call.ram_bytes += size;
    ++call.ram_blocks;
    hits.push_back(i);
    pending_bytes += size;
    if (verify) {
      call.sums[i] = checksum;
      call.checked.push_back(i);
      if (on_device && PlanHash(blocks[i], size, rows, &group, &frags)) {
        call.sum_slot[i] = static_cast<int64_t>(call.planned + group.size() - 1);
        rows += (size - 1) / 1024;
      }
    }
    if (!lent) {
      call.pin_of[i] = static_cast<int64_t>(pins->size());
      pins->push_back(std::move(pin));
    }
    if (pending_bytes >= kFlushBytes) flush();
  }
  flush();
  if (call.started != nullptr && call.ram_blocks > 0 &&
      (cudaEventCreate(&call.copied) != cudaSuccess || cudaEventRecord(call.copied, stream) != cudaSuccess)) {
    cudaGetLastError();
    if (call.copied != nullptr) cudaEventDestroy(call.copied);
    call.copied = nullptr;
  }
  if (call.planned > 0 && !call.hash_failed) {
    // hash_stream_ waits for hash_stream2_'s groups; the event follows both.
    cudaEvent_t odd = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&odd, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(odd, hash_stream2_);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(hash_stream_, odd, 0);
    if (odd != nullptr) cudaEventDestroy(odd);
    if (e == cudaSuccess) e = cudaEventCreate(&call.sums_ready);  // timed: the hashing's tail
    if (e == cudaSuccess) e = cudaEventRecord(call.sums_ready, hash_stream_);
    if (e != cudaSuccess) call.hash_failed = true;
  }
}

// A service's client: asks the service to pin the blocks its RAM tier
// holds, and finds each pinned block's pieces in this process's mapping of
// the tier. A block outside the mapping is treated as not pinned (read
// through staging). When the connection the tier was lent on is gone (the
// service restarted), the tier is mapped again once; failing that, every
// block goes through staging.
void TransferImpl::LendRamHits(GetCall& call, NamespaceId ns, std::span<const DeviceBlock> blocks) {
  std::vector<std::vector<RamTier::Piece>> lent(blocks.size());
  std::vector<uint64_t> sizes(blocks.size()), sums(blocks.size()), leases;
  bool any = false;
  std::vector<size_t> named;  // blocks with a key (CopyRamHits refuses the rest)
  for (size_t i = 0; i < blocks.size(); ++i)
    if (!blocks[i].key.empty()) named.push_back(i);
  for (size_t at = 0; at < named.size(); at += wire::kMaxBatchGets) {
    const size_t n = std::min<size_t>(named.size() - at, wire::kMaxBatchGets);
    std::vector<std::string_view> keys;
    keys.reserve(n);
    for (size_t i = 0; i < n; ++i) keys.push_back(blocks[named[at + i]].key);
    Result<wire::TierLease> got = lender_->PinTier(tier_connection_, ns, keys);
    if (!got.ok() && got.status().code() == Code::kAborted && at == 0) {
      UnmapServedTier();
      if (MapServedTier().ok()) got = lender_->PinTier(tier_connection_, ns, keys);
    }
    if (!got.ok() || tier_map_ == nullptr) break;  // the rest through staging
    if (got->lease != 0) leases.push_back(got->lease);
    for (size_t j = 0; j < n; ++j) {
      const size_t i = named[at + j];
      const wire::TierPinned& b = got->blocks[j];
      if (!b.pinned) continue;
      lent[i] = client::PinnedPieces<RamTier::Piece>(b, tier_map_, tier_map_len_);
      sizes[i] = b.size;
      sums[i] = b.checksum;
      any = true;
    }
  }
  call.leases = std::move(leases);
  call.lease_connection = tier_connection_;
  if (!any) return;  // nothing lent: the staging path, as without the tier
  call.lent = std::move(lent);
  call.lent_size = std::move(sizes);
  call.lent_sum = std::move(sums);
}

// A service's client whose tier is not mapped (the service was down when a
// load found its old connection gone, or never lent it): asks again, at
// most once a second, so that loads copy from the tier once the service is
// back instead of going through staging for the rest of this Transfer.
void TransferImpl::RetryServedTier() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_tier_try_ < std::chrono::seconds(1)) return;
  last_tier_try_ = now;
  MapServedTier().IgnoreError();
}

void TransferImpl::HashRamGroup(GetCall& call, std::vector<HashPayload>& payloads, const std::vector<HashFrag>& frags,
                                uint64_t rows, cudaStream_t stream) {
  if (call.hash_failed) return;
  const GetHashArea h = GetHashAreaAt(h_get_plan_), d = GetHashAreaAt(d_get_plan_);
  HashPayload *h_pay = h.payloads, *d_pay = d.payloads;
  HashFrag *h_frag = h.frags, *d_frag = d.frags;
  uint64_t *h_sums = h.sums, *d_sums = d.sums;
  // Groups alternate between the two streams, each with scratch rows of its
  // own: a stream's groups run one after another and share them.
  const bool odd = call.groups++ % 2 == 1;
  cudaStream_t hs = odd ? hash_stream2_ : hash_stream_;
  auto* d_scratch = d_sums + get_n_ + (odd ? get_rows_ * 8 : 0);
  const size_t p0 = call.planned, f0 = call.planned_frags, n = payloads.size(), nf = frags.size() - f0;
  std::copy(payloads.begin(), payloads.end(), h_pay + p0);
  std::copy(frags.begin() + static_cast<std::ptrdiff_t>(f0), frags.end(), h_frag + f0);
  call.planned += n;
  call.planned_frags = frags.size();
  cudaEvent_t copied = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&copied, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(copied, stream);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(hs, copied, 0);
  if (copied != nullptr) cudaEventDestroy(copied);  // released once it has completed
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(d_pay + p0, h_pay + p0, n * sizeof(HashPayload), cudaMemcpyHostToDevice, hs);
  if (e == cudaSuccess && nf > 0)
    e = cudaMemcpyAsync(d_frag + f0, h_frag + f0, nf * sizeof(HashFrag), cudaMemcpyHostToDevice, hs);
  if (e == cudaSuccess) e = LaunchGpuHash(d_pay + p0, n, d_frag, rows, d_scratch, d_sums + p0, hs);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(h_sums + p0, d_sums + p0, n * sizeof(uint64_t), cudaMemcpyDeviceToHost, hs);
  if (e != cudaSuccess) {
    cudaGetLastError();
    call.hash_failed = true;
  }
}

TransferImpl::GetHashArea TransferImpl::GetHashAreaAt(uint8_t* base) const {
  GetHashArea a;
  a.payloads = reinterpret_cast<HashPayload*>(base);
  a.frags = reinterpret_cast<HashFrag*>(base + get_n_ * sizeof(HashPayload));
  a.sums = reinterpret_cast<uint64_t*>(base + get_n_ * sizeof(HashPayload) + get_f_ * sizeof(HashFrag));
  return a;
}

Status TransferImpl::EnsureGetHashArea(size_t n, size_t f, uint64_t rows) {
  if (n <= get_n_ && f <= get_f_ && rows <= get_rows_) return Status::OK();
  // Grown only between calls' hashing (every call waits for its sums), so
  // nothing in flight uses the old areas.
  if (h_get_plan_ != nullptr) cudaFreeHost(h_get_plan_);
  if (d_get_plan_ != nullptr) cudaFree(d_get_plan_);
  h_get_plan_ = d_get_plan_ = nullptr;
  get_n_ = get_f_ = 0;
  get_rows_ = 0;
  n = std::max(n, size_t{256});
  f = std::max(f, size_t{1024});
  rows = std::max<uint64_t>(rows, 8u << 10);
  // GetHashAreaAt's parts; the device's adds two groups' scratch rows.
  const size_t host = n * sizeof(HashPayload) + f * sizeof(HashFrag) + n * sizeof(uint64_t);
  const size_t dev = host + 2 * rows * 8 * sizeof(uint64_t);
  cudaError_t e = cudaMallocHost(reinterpret_cast<void**>(&h_get_plan_), host);
  if (e != cudaSuccess) return CudaError(e, "pinned memory for the loads' hash plan");
  e = cudaMalloc(reinterpret_cast<void**>(&d_get_plan_), dev);
  if (e != cudaSuccess) {
    cudaFreeHost(h_get_plan_);
    h_get_plan_ = nullptr;
    return CudaError(e, "device memory for the loads' hash plan");
  }
  get_n_ = n;
  get_f_ = f;
  get_rows_ = rows;
  return Status::OK();
}

// The device's times of the hits' copies and of the hashing after them
// (TransferStats::last_get_*) when the call waited for their sums anyway (an
// unverified load returns before its copies have run, and is not timed);
// then the events go.
void TransferImpl::TimeRamHits(GetCall& call) {
  float ms = 0;
  if (call.sums_ready != nullptr && call.started != nullptr && call.copied != nullptr &&
      cudaEventSynchronize(call.copied) == cudaSuccess) {
    if (cudaEventElapsedTime(&ms, call.started, call.copied) == cudaSuccess) call.copy_ms = ms;
    if (cudaEventElapsedTime(&ms, call.copied, call.sums_ready) == cudaSuccess) call.hash_tail_ms = ms;
  }
  cudaGetLastError();  // an untimed load is still a load
  for (cudaEvent_t* ev : {&call.started, &call.copied}) {
    if (*ev != nullptr) cudaEventDestroy(*ev);
    *ev = nullptr;
  }
}

std::vector<size_t> TransferImpl::CheckRamHits(GetCall& call) {
  std::vector<size_t> again;
  if (call.sums_ready != nullptr) {
    if (cudaEventSynchronize(call.sums_ready) != cudaSuccess) call.hash_failed = true;
    TimeRamHits(call);
    cudaEventDestroy(call.sums_ready);
    call.sums_ready = nullptr;
  } else if (call.planned > 0) {
    call.hash_failed = true;
  }
  const uint64_t* h_sums = GetHashAreaAt(h_get_plan_).sums;
  for (size_t i : call.checked) {
    if (!call.results[i].ok()) continue;
    uint64_t sum = 0;
    if (call.sum_slot[i] >= 0 && !call.hash_failed) {
      sum = h_sums[call.sum_slot[i]];
    } else {
      // The kernel could not hash the landed bytes: the tier's copy, on the host.
      Xxh3Stream st;
      const std::vector<RamTier::Piece>& pieces =
          call.lent.empty() ? (*call.pins)[call.pin_of[i]].pieces() : call.lent[i];
      for (const RamTier::Piece& p : pieces) st.Update(p.data, p.size);
      sum = st.Digest();
    }
    ++call.verified;
    if (sum == call.sums[i]) continue;
    // The bytes that landed are not the block's: load it again through the
    // store's read, which verifies the tier's copy (dropping it when it
    // changed) or reads the disk. Its copy follows this one on the stream.
    ++call.reloaded;
    --call.ram_blocks;
    call.ram_bytes -= *call.results[i];
    call.results[i] = Status::Aborted("reloading");
    again.push_back(i);
  }
  return again;
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
