// Stores: blocks from device memory into the store. Blocks the RAM tier can
// take are copied straight into its pinned chunks, in groups with an event
// after each, and put from there (the disk write reads the same chunks: no
// host copy at all); the rest go through staging slots. Checksums are
// computed on the GPU, from the device's bytes, alongside the copies. A
// service's client puts every block from staging the service reads, which
// checksums them itself.
#include <chrono>

#include "cuda/transfer_impl.h"

namespace kvtier::gpu {

// One PutFromDevice call, shared with the put callbacks, which may run after
// the call returned.
struct TransferImpl::PutCall {
  std::mutex m;
  std::condition_variable cv;
  std::vector<Status> statuses;
  size_t left = 0;
  Status first_error;
  TransferDone done;
  std::vector<size_t> totals;  // device bytes per block (0: refused)
  std::vector<Status> refusals;  // why a block with total 0 was refused
  uint64_t bytes = 0;          // payload bytes handed to the store (the calling thread's)

  // Completes block i; the last one runs `done` with the first error.
  void Finish(size_t i, Status st) {
    TransferDone cb;
    Status fe;
    {
      std::lock_guard<std::mutex> l(m);
      if (!st.ok() && first_error.ok()) first_error = st;
      statuses[i] = std::move(st);
      if (--left == 0) {
        cb = std::move(done);
        fe = first_error;
      }
    }
    cv.notify_all();
    if (cb) cb(fe);
  }
};

// The GPU's checksums of a call's blocks, waited for once, when the first
// put needs one.
class TransferImpl::GpuSums {
 public:
  GpuSums(const uint64_t* sums, std::vector<int64_t> slot, cudaEvent_t ready)
      : sums_(sums), slot_(std::move(slot)), ready_(ready) {}
  ~GpuSums() {
    if (ready_ == nullptr) return;
    cudaEventSynchronize(ready_);  // the landing place is reused by the next call
    cudaEventDestroy(ready_);
  }
  GpuSums(const GpuSums&) = delete;
  GpuSums& operator=(const GpuSums&) = delete;

  // Block i's checksum, or null: the host hashes it.
  const uint64_t* Of(size_t i) {
    if (slot_[i] < 0) return nullptr;
    std::call_once(waited_, [&] { ok_ = cudaEventSynchronize(ready_) == cudaSuccess; });
    return ok_ ? sums_ + slot_[i] : nullptr;
  }
  bool Hashed(size_t i) const { return ok_ && slot_[i] >= 0; }

 private:
  const uint64_t* sums_;
  std::vector<int64_t> slot_;
  cudaEvent_t ready_;
  std::once_flag waited_;
  bool ok_ = true;
};

std::vector<Status> TransferImpl::PutFromDevice(NamespaceId ns, std::span<const DeviceBlock> blocks,
                                                cudaStream_t stream, bool wait_durable, TransferDone done) {
  std::lock_guard<std::mutex> lock(call_mu_);
  auto call = std::make_shared<PutCall>();
  call->statuses.resize(blocks.size());
  call->left = blocks.size();
  call->done = std::move(done);
  call->totals.resize(blocks.size());
  call->refusals.resize(blocks.size());
  DeviceRanges ranges(opt_.device);
  for (size_t i = 0; i < blocks.size(); ++i) {
    Result<size_t> total = CheckBlock(i, blocks[i], ranges);
    call->totals[i] = total.ok() ? *total : 0;  // refused below
    if (!total.ok()) call->refusals[i] = total.status();
  }
  std::vector<int64_t> sum_slot(blocks.size(), -1);
  cudaEvent_t sums_ready = nullptr;
  if (!served()) HashOnDevice(blocks, call->totals, stream, &sum_slot, &sums_ready);
  GpuSums sums(h_sums_, std::move(sum_slot), sums_ready);
  std::vector<size_t> via_staging;
  PutThroughRam(call, ns, blocks, stream, sums, &via_staging);
  if (!via_staging.empty()) PutThroughStaging(call, ns, blocks, via_staging, stream, sums);
  size_t put = 0, gpu_hashed = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (call->totals[i] == 0) continue;
    ++put;
    gpu_hashed += sums.Hashed(i);
  }
  AddStats([&](TransferStats& s) {
    s.blocks_from_device += put;
    s.bytes_from_device += call->bytes;
    s.gpu_hashed_blocks += gpu_hashed;
    s.pointer_queries += ranges.queries();
  });
  std::unique_lock<std::mutex> l(call->m);
  if (wait_durable) call->cv.wait(l, [&] { return call->left == 0; });
  return call->statuses;
}

// Reserves RAM-tier chunks block by block and queues the device-to-host
// copies into them in groups of about 32 MiB, each group on the stream as
// soon as its chunks are reserved (so the reservations, and the evictions
// they cause, of later groups overlap the copies of earlier ones), then puts
// them (SubmitFromRam). Blocks the tier cannot take go to `via_staging`.
void TransferImpl::PutThroughRam(const std::shared_ptr<PutCall>& call, NamespaceId ns,
                                 std::span<const DeviceBlock> blocks, cudaStream_t stream, GpuSums& sums,
                                 std::vector<size_t>* via_staging) {
  constexpr uint64_t kGroupBytes = 32ull << 20;
  const auto call_start = std::chrono::steady_clock::now();
  std::vector<RamTier::Pin> reserved(blocks.size());
  std::vector<size_t> via_ram, group_of;  // group_of: per via_ram entry
  std::vector<cudaEvent_t> events;
  std::vector<CopyPiece> copies;
  uint64_t group_bytes = 0;
  Status st;
  cudaEvent_t copy_start = nullptr, copy_end = nullptr;  // timing only
  auto close_group = [&]() {
    if (copies.empty()) return;
    if (st.ok() && copy_start == nullptr && cudaEventCreate(&copy_start) == cudaSuccess)
      cudaEventRecord(copy_start, stream);
    if (st.ok()) st = Enqueue(copies, /*to_device=*/false, stream);
    copies.clear();
    group_bytes = 0;
    cudaEvent_t ev = nullptr;
    cudaError_t e = st.ok() ? cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) : cudaSuccess;
    if (st.ok() && e == cudaSuccess) e = cudaEventRecord(ev, stream);
    if (st.ok() && e != cudaSuccess) st = CudaError(e, "recording a device-to-host copy event");
    events.push_back(ev);
  };
  for (size_t i = 0; i < blocks.size(); ++i) {
    const size_t total = call->totals[i];
    if (total == 0) {
      call->Finish(i, call->refusals[i]);
      continue;
    }
    if (ram_ != nullptr) reserved[i] = ram_->Reserve(ns, blocks[i].key, total);
    if (!reserved[i]) {
      via_staging->push_back(i);
      continue;
    }
    via_ram.push_back(i);
    Zip(DeviceSpans(blocks[i]), PieceSpans(reserved[i].pieces()), total, &copies);
    group_bytes += total;
    group_of.push_back(events.size());
    if (group_bytes >= kGroupBytes) close_group();
  }
  if (!via_ram.empty()) {
    close_group();
    if (st.ok() && cudaEventCreate(&copy_end) == cudaSuccess) cudaEventRecord(copy_end, stream);
    const auto enqueued = std::chrono::steady_clock::now();
    if (!st.ok()) {
      // Copies queued before the failure may still be writing into the
      // reserved chunks: let them end before the chunks go back.
      cudaStreamSynchronize(stream);
      for (size_t i : via_ram) {
        reserved[i].Release();
        call->Finish(i, st);
      }
    } else {
      SubmitFromRam(call, ns, blocks, via_ram, group_of, events, reserved, sums);
      float copy_ms = 0;
      if (copy_start != nullptr && copy_end != nullptr && cudaEventSynchronize(copy_end) == cudaSuccess &&
          cudaEventElapsedTime(&copy_ms, copy_start, copy_end) == cudaSuccess) {
        const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
        AddStats([&](TransferStats& s) {
          s.last_put_copy_ms = copy_ms;
          s.last_put_enqueue_ms = ms(enqueued - call_start);
          s.last_put_call_ms = ms(std::chrono::steady_clock::now() - call_start);
        });
      }
    }
  }
  for (cudaEvent_t ev : events)
    if (ev != nullptr) cudaEventDestroy(ev);
  if (copy_start != nullptr) cudaEventDestroy(copy_start);
  if (copy_end != nullptr) cudaEventDestroy(copy_end);
}

// Several threads wait group by group and put the blocks from their chunks:
// each put checksums its block on the submitting thread where the GPU did
// not, and the checksum of every byte is the work left once the copy is on
// the link (the store's writer and committer need little CPU).
void TransferImpl::SubmitFromRam(const std::shared_ptr<PutCall>& call, NamespaceId ns,
                                 std::span<const DeviceBlock> blocks, const std::vector<size_t>& via_ram,
                                 const std::vector<size_t>& group_of, const std::vector<cudaEvent_t>& events,
                                 std::vector<RamTier::Pin>& reserved, GpuSums& sums) {
  for (size_t i : via_ram) call->bytes += call->totals[i];
  auto submit = [&](size_t first, size_t step) {
    for (size_t k = first; k < via_ram.size(); k += step) {
      const size_t i = via_ram[k];
      cudaError_t e = cudaEventSynchronize(events[group_of[k]]);
      if (e != cudaSuccess) {
        reserved[i].Release();
        call->Finish(i, CudaError(e, "waiting for device-to-host copies"));
        continue;
      }
      sink_->PutInternal(ns, blocks[i].key, {}, std::move(reserved[i]), /*blocking=*/true,
                          [call, i](Status s) { call->Finish(i, std::move(s)); }, sums.Of(i));
    }
  };
  const unsigned cores = std::thread::hardware_concurrency();
  const size_t threads = std::clamp<size_t>(cores > 2 ? cores - 2 : 1, 1, 16);
  const size_t step = std::min(threads, via_ram.size());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < step; ++t) pool.emplace_back(submit, t, step);
  submit(0, step);
  for (std::thread& t : pool) t.join();
}

// The others through staging, a slot-full at a time; the put copies the
// bytes into the write queue (and RAM tier) before it returns.
void TransferImpl::PutThroughStaging(const std::shared_ptr<PutCall>& call, NamespaceId ns,
                                     std::span<const DeviceBlock> blocks, const std::vector<size_t>& via_staging,
                                     cudaStream_t stream, GpuSums& sums) {
  size_t most = 0;
  for (size_t i : via_staging) most = std::max(most, call->totals[i]);
  Status st = EnsureSlots(most);
  for (size_t at = 0; at < via_staging.size();) {
    const size_t n = st.ok() ? std::min(slots_.size(), via_staging.size() - at) : via_staging.size() - at;
    if (st.ok()) {
      std::vector<CopyPiece> cp;
      for (size_t k = 0; k < n; ++k) {
        const size_t i = via_staging[at + k];
        std::vector<Span> dst = {{staging_ + slots_[k].off, call->totals[i]}};
        Zip(DeviceSpans(blocks[i]), dst, call->totals[i], &cp);
      }
      st = Enqueue(cp, /*to_device=*/false, stream);
      if (st.ok()) {
        cudaError_t w = cudaStreamSynchronize(stream);
        if (w != cudaSuccess) st = CudaError(w, "waiting for device-to-host copies");
      }
    }
    if (served() && st.ok()) {
      PutSlotsThroughService(call, ns, blocks, std::span<const size_t>(via_staging).subspan(at, n));
      at += n;
      continue;
    }
    for (size_t k = 0; k < n; ++k) {
      const size_t i = via_staging[at + k];
      if (!st.ok()) {
        call->Finish(i, st);
        continue;
      }
      call->bytes += call->totals[i];
      Fragment f{staging_ + slots_[k].off, call->totals[i]};
      sink_->PutInternal(ns, blocks[i].key, {&f, 1}, RamTier::Pin(), /*blocking=*/true,
                          [call, i](Status s) { call->Finish(i, std::move(s)); }, sums.Of(i));
    }
    at += n;
  }
}

// A slot-full of blocks copied off the device, put through the service in
// one blocking PutBatch: it returns once each is durable (or refused), so
// the slots are free again after it (the service may write them to disk
// straight from this shared memory).
void TransferImpl::PutSlotsThroughService(const std::shared_ptr<PutCall>& call, NamespaceId ns,
                                          std::span<const DeviceBlock> blocks, std::span<const size_t> which) {
  std::vector<Fragment> frags(which.size());
  std::vector<PutItem> items(which.size());
  for (size_t k = 0; k < which.size(); ++k) {
    const size_t i = which[k];
    frags[k] = Fragment{staging_ + slots_[k].off, call->totals[i]};
    items[k] = PutItem{blocks[i].key, {&frags[k], 1}};
    call->bytes += call->totals[i];
  }
  std::vector<Status> st = store_->PutBatch(ns, items);
  for (size_t k = 0; k < which.size(); ++k)
    call->Finish(which[k], k < st.size() ? std::move(st[k]) : Status::IOError("the service gave no status"));
}

void TransferImpl::HashOnDevice(std::span<const DeviceBlock> blocks, const std::vector<size_t>& lens,
                                cudaStream_t stream, std::vector<int64_t>* slot, cudaEvent_t* done) {
  slot->assign(blocks.size(), -1);
  *done = nullptr;
  if (!gpu_hash_) return;
  std::vector<HashPayload> payloads;
  std::vector<HashFrag> frags;
  uint64_t total_blocks = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (lens[i] == 0 || !PlanHash(blocks[i], lens[i], total_blocks, &payloads, &frags)) continue;
    (*slot)[i] = static_cast<int64_t>(payloads.size() - 1);
    total_blocks += (lens[i] - 1) / 1024;
  }
  if (payloads.empty()) return;
  if (LaunchHash(payloads, frags, total_blocks, stream, done) != cudaSuccess) {
    cudaGetLastError();
    slot->assign(blocks.size(), -1);
    if (*done != nullptr) cudaEventDestroy(*done);
    *done = nullptr;
  }
}

cudaError_t TransferImpl::LaunchHash(const std::vector<HashPayload>& payloads, const std::vector<HashFrag>& frags,
                                     uint64_t total_blocks, cudaStream_t stream, cudaEvent_t* done) {
  auto up = [](size_t n) { return (n + 255) / 256 * 256; };
  const size_t pay_bytes = up(payloads.size() * sizeof(HashPayload)), frag_bytes = up(frags.size() * sizeof(HashFrag));
  const size_t scratch_bytes = up(total_blocks * 8 * sizeof(uint64_t)), sum_bytes = payloads.size() * sizeof(uint64_t);
  const size_t need = pay_bytes + frag_bytes + scratch_bytes + sum_bytes;
  cudaError_t e = cudaSuccess;
  if (need > d_hash_len_) {
    if (d_hash_ != nullptr) cudaFree(d_hash_);
    d_hash_ = nullptr;
    d_hash_len_ = 0;
    e = cudaMalloc(reinterpret_cast<void**>(&d_hash_), need);
    if (e != cudaSuccess) return e;
    d_hash_len_ = need;
  }
  if (payloads.size() > h_sums_cap_) {
    if (h_sums_ != nullptr) cudaFreeHost(h_sums_);
    h_sums_ = nullptr;
    h_sums_cap_ = 0;
    e = cudaMallocHost(reinterpret_cast<void**>(&h_sums_), payloads.size() * sizeof(uint64_t));
    if (e != cudaSuccess) return e;
    h_sums_cap_ = payloads.size();
  }
  auto* d_pay = reinterpret_cast<HashPayload*>(d_hash_);
  auto* d_frag = reinterpret_cast<HashFrag*>(d_hash_ + pay_bytes);
  auto* d_scratch = reinterpret_cast<uint64_t*>(d_hash_ + pay_bytes + frag_bytes);
  auto* d_sums = reinterpret_cast<uint64_t*>(d_hash_ + pay_bytes + frag_bytes + scratch_bytes);
  // The caller's stream may still be producing the blocks.
  cudaEvent_t ready = nullptr;
  e = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(ready, stream);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(hash_stream_, ready, 0);
  if (ready != nullptr) cudaEventDestroy(ready);  // released once it has completed
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(d_pay, payloads.data(), payloads.size() * sizeof(HashPayload), cudaMemcpyHostToDevice,
                        hash_stream_);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(d_frag, frags.data(), frags.size() * sizeof(HashFrag), cudaMemcpyHostToDevice, hash_stream_);
  if (e == cudaSuccess) e = LaunchGpuHash(d_pay, payloads.size(), d_frag, total_blocks, d_scratch, d_sums, hash_stream_);
  if (e == cudaSuccess) e = cudaMemcpyAsync(h_sums_, d_sums, sum_bytes, cudaMemcpyDeviceToHost, hash_stream_);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(done, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(*done, hash_stream_);
  return e;
}

}  // namespace kvtier::gpu
