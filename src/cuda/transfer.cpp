// kvtier::gpu::Transfer: setup, staging slots, the copies (kernel, batch or
// loop) and the completion thread. Host code compiled by the C++ compiler
// against the CUDA runtime headers; the device code is in the .cu files.
#include <sys/mman.h>

#include <cstring>

#include "cuda/transfer_impl.h"
#include "format/record.h"

namespace kvtier::gpu {

Status DeviceStatus() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return Status::NotSupported(std::string("no usable CUDA device: ") + cudaGetErrorName(e) + " (" +
                                cudaGetErrorString(e) + ")");
  if (n == 0) return Status::NotSupported("no CUDA device present");
  return Status::OK();
}

int CurrentDevice() {
  int d = 0;
  if (cudaGetDevice(&d) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return d;
}

Result<size_t> CheckBlock(size_t i, const DeviceBlock& b, DeviceRanges& ranges) {
  bool bad = false;
  const size_t total = TotalBytes(b, &bad);
  const std::string which = "block " + std::to_string(i) + ": ";
  if (b.key.empty()) return Status::InvalidArgument(which + "empty key");
  if (bad) return Status::InvalidArgument(which + "null device fragment");
  if (total == 0) return Status::InvalidArgument(which + "no device bytes");
  for (const DeviceFragment& f : b.fragments) {
    Status st = ranges.Check(f.ptr, f.size);
    if (!st.ok()) return Status::InvalidArgument(which + st.message());
  }
  return total;
}

Result<std::unique_ptr<Transfer>> Transfer::Create(Store* store, const TransferOptions& options) {
  KVTIER_RETURN_IF_ERROR(DeviceStatus());
  if (store == nullptr) return Status::InvalidArgument("no store");
  // Null for a service's client: its RAM tier lives in the service, and its
  // blocks reach the GPU through staging the service reads and writes.
  BlockSink* sink = BlockSinkOf(store);
  if (options.pipeline_depth == 0) return Status::InvalidArgument("pipeline_depth must be > 0");
  auto t = std::make_unique<TransferImpl>(store, sink, options);
  KVTIER_RETURN_IF_ERROR(t->Init());
  return std::unique_ptr<Transfer>(std::move(t));
}

Status TransferImpl::Init() {
  cudaError_t e = cudaSetDevice(opt_.device);
  if (e != cudaSuccess) return CudaError(e, "cudaSetDevice(" + std::to_string(opt_.device) + ")");
#if CUDART_VERSION >= 12080
  stats_.batch_api = true;
#endif
  stats_.through_service = served();
  if (served()) {
    lender_ = dynamic_cast<client::ServiceStore*>(store_);
    // Unlent (no RAM tier in the service, tenancy, or a platform that cannot
    // register read-only memory), every block goes through staging.
    if (lender_ != nullptr && opt_.pin_ram_tier) RetryServedTier();
  }
  completion_ = std::thread([this] { CompletionLoop(); });
  // Without it puts hash on the host, as before.
  gpu_hash_ = InitGpuHash() == cudaSuccess &&
              cudaStreamCreateWithFlags(&hash_stream_, cudaStreamNonBlocking) == cudaSuccess &&
              cudaStreamCreateWithFlags(&hash_stream2_, cudaStreamNonBlocking) == cudaSuccess;
  if (!gpu_hash_) cudaGetLastError();
  // Pinned region by region behind the prefault, by a thread of its own:
  // the bind returns at once, and a call pins a region it needs that the
  // thread has not reached. Unpinned, copies still work (through the
  // driver's bounce buffers, slowly).
  if (ram_ != nullptr && opt_.pin_ram_tier) pins_ = std::make_unique<TierPins>(ram_, opt_.device);
  return Status::OK();
}

TransferImpl::~TransferImpl() {
  {
    std::unique_lock<std::mutex> l(done_mu_);
    done_cv_.wait(l, [this] { return outstanding_ == 0 && done_q_.empty(); });
    stop_ = true;
  }
  done_cv_.notify_all();
  if (completion_.joinable()) completion_.join();
  for (cudaEvent_t ev : spare_events_) cudaEventDestroy(ev);
  FreeStaging();
  if (hash_stream_ != nullptr) cudaStreamSynchronize(hash_stream_);
  if (hash_stream2_ != nullptr) cudaStreamSynchronize(hash_stream2_);
  if (d_hash_ != nullptr) cudaFree(d_hash_);
  if (h_sums_ != nullptr) cudaFreeHost(h_sums_);
  if (h_get_plan_ != nullptr) cudaFreeHost(h_get_plan_);
  if (d_get_plan_ != nullptr) cudaFree(d_get_plan_);
  if (hash_stream_ != nullptr) cudaStreamDestroy(hash_stream_);
  if (hash_stream2_ != nullptr) cudaStreamDestroy(hash_stream2_);
  for (const Region& r : regions_) cudaHostUnregister(r.host);
  pins_.reset();
  if (tier_map_ != nullptr) munmap(tier_map_, tier_map_len_);
}

Status TransferImpl::MapServedTier() {
  int supported = 0;
  if (cudaDeviceGetAttribute(&supported, cudaDevAttrHostRegisterReadOnlySupported, opt_.device) != cudaSuccess ||
      supported == 0) {
    cudaGetLastError();
    return Status::NotSupported("this device cannot register read-only host memory");
  }
  auto m = lender_->MapTier();
  if (!m.ok()) return m.status();
  void* p = mmap(nullptr, m->map.file_bytes, PROT_READ, MAP_SHARED, m->fd.get(), 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mapping the service's RAM tier");
  uint8_t* base = static_cast<uint8_t*>(p);
  // Its blocks only (whole pages: the data area starts on one), region by
  // region as the service cut it (RamTier::Regions says why).
  Status st;
  for (uint64_t at = 0; at < m->map.data_bytes && st.ok(); at += m->map.region_bytes)
    st = Register(base + m->map.data_offset + at, std::min(m->map.region_bytes, m->map.data_bytes - at),
                  cudaHostRegisterReadOnly);
  if (!st.ok()) {
    UnregisterWithin(base, m->map.file_bytes);
    munmap(p, m->map.file_bytes);
    return st.WithContext("registering the service's RAM tier");
  }
  tier_map_ = base;
  tier_map_len_ = m->map.file_bytes;
  tier_connection_ = m->connection;
  AddStats([](TransferStats& s) { s.ram_tier_lent = true; });
  return Status::OK();
}

void TransferImpl::UnmapServedTier() {
  if (tier_map_ == nullptr) return;
  // No copy out of the old mapping may still run (a failed check's host
  // hashing does not wait for the copies).
  cudaDeviceSynchronize();
  UnregisterWithin(tier_map_, tier_map_len_);
  munmap(tier_map_, tier_map_len_);
  tier_map_ = nullptr;
  tier_map_len_ = 0;
  AddStats([](TransferStats& s) { s.ram_tier_lent = false; });
}

void TransferImpl::UnregisterWithin(uint8_t* base, size_t len) {
  std::erase_if(regions_, [&](const Region& r) {
    if (r.host < base || r.host >= base + len) return false;
    cudaHostUnregister(r.host);
    return true;
  });
}

Status TransferImpl::Register(uint8_t* p, size_t n, unsigned extra_flags) {
  cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterPortable | cudaHostRegisterMapped | extra_flags);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    return CudaError(e, "cudaHostRegister of " + std::to_string(n) + " bytes");
  }
  void* dev = nullptr;
  if (cudaHostGetDevicePointer(&dev, p, 0) != cudaSuccess) {
    cudaGetLastError();
    dev = nullptr;
  }
  regions_.push_back(Region{p, n, static_cast<uint8_t*>(dev)});
  return Status::OK();
}

void TransferImpl::FreeStaging() {
  for (Slot& s : slots_) {
    if (s.busy) cudaEventSynchronize(s.ev);
    cudaEventDestroy(s.ev);
  }
  slots_.clear();
  if (staging_ != nullptr) {
    for (size_t i = 0; i < regions_.size(); ++i)
      if (regions_[i].host == staging_) {
        cudaHostUnregister(staging_);
        regions_.erase(regions_.begin() + static_cast<long>(i));
        break;
      }
    // Before the mapping goes: the service must not write into an address
    // a later mapping may reuse.
    if (staging_registered_) (void)store_->UnregisterMemory(staging_);
    if (staging_region_ == nullptr) munmap(staging_, staging_len_);
  }
  staging_region_.reset();  // unmaps a service client's staging
  staging_registered_ = false;
  staging_ = nullptr;
  staging_len_ = 0;
  slot_bytes_ = 0;
}

Status TransferImpl::EnsureSlots(size_t slot_bytes) {
  slot_bytes = format::AlignUp(std::max<size_t>(slot_bytes, 1), size_t{2} << 20);
  if (slot_bytes <= slot_bytes_ && !slots_.empty()) return Status::OK();
  FreeStaging();
  size_t count = std::clamp<size_t>(opt_.staging_bytes / slot_bytes, 2, opt_.pipeline_depth);
  size_t len = count * slot_bytes;
  // Anonymous memory, then cudaHostRegister: quick to pin and accepted by
  // io_uring buffer registration, unlike cudaHostAlloc memory (limits.md).
  // A service's client shares it instead (a memfd the service maps), so the
  // service copies each block straight into or out of it.
  void* p = MAP_FAILED;
  if (served()) {
    auto r = wire::SharedRegion::CreateMemfd("kvtier-gpu-staging", len);
    if (!r.ok()) return r.status().WithContext("staging shared with the service");
    staging_region_ = std::move(r).value();
    p = staging_region_->data();
  } else {
    p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap of " + std::to_string(len) + " bytes of staging");
    madvise(p, len, MADV_HUGEPAGE);
  }
  staging_ = static_cast<uint8_t*>(p);
  staging_len_ = len;
  Status st = Register(staging_, len);
  if (!st.ok()) {
    FreeStaging();
    return st.WithContext("pinning staging");
  }
  // Unregistered, the client copies through its own staging: slower, the
  // same bytes.
  if (served()) {
    staging_registered_ = store_->RegisterMemory(staging_, len, staging_region_->fd(), 0).ok();
    AddStats([&](TransferStats& s) { s.staging_shared_with_service = staging_registered_; });
  }
  slot_bytes_ = slot_bytes;
  for (size_t i = 0; i < count; ++i) {
    Slot s{i * slot_bytes, nullptr, false};
    cudaError_t e = cudaEventCreateWithFlags(&s.ev, cudaEventDisableTiming);
    if (e != cudaSuccess) return CudaError(e, "cudaEventCreate");
    slots_.push_back(s);
  }
  return Status::OK();
}

Status TransferImpl::WaitSlot(Slot& s) {
  if (!s.busy) return Status::OK();
  s.busy = false;
  cudaError_t e = cudaEventSynchronize(s.ev);
  return e == cudaSuccess ? Status::OK() : CudaError(e, "waiting for a staging copy");
}

size_t TransferImpl::RegisteredRoom(const void* p) const {
  if (pins_ != nullptr && pins_->Covers(p)) return pins_->RoomInRegion(p);
  const uint8_t* at = static_cast<const uint8_t*>(p);
  for (const Region& r : regions_)
    if (at >= r.host && at < r.host + r.len) return static_cast<size_t>(r.host + r.len - at);
  return 0;
}

Status TransferImpl::Enqueue(std::vector<CopyPiece>& copies, bool to_device, cudaStream_t stream) {
  if (copies.empty()) return Status::OK();
  SplitAtRegistrations(&copies, to_device, [this](const void* p) { return RegisteredRoom(p); });
  size_t total = 0;
  for (const CopyPiece& c : copies) total += c.size;
  const CopyMethod chosen = method_.load();
  // The tier's regions these copies touch are pinned before they are
  // queued: the pinning thread may not have reached them yet.
  if (pins_ != nullptr)
    for (const CopyPiece& c : copies) {
      const void* host = to_device ? c.src : c.dst;
      if (pins_->Covers(host)) (void)pins_->Ensure(host, c.size);
    }
  CopyMethod m = chosen;
  if (m == CopyMethod::kAuto) m = total / copies.size() >= kLargePiece ? CopyMethod::kBatch : CopyMethod::kKernel;
  if (m == CopyMethod::kKernel) {
    // The host side must be mapped: translate it to its device alias.
    std::vector<CopyPiece> mapped = copies;
    bool ok = true;
    for (CopyPiece& c : mapped) {
      uint8_t* host = static_cast<uint8_t*>(to_device ? const_cast<void*>(c.src) : c.dst);
      std::optional<TierPins::Pinned> r;
      if (pins_ != nullptr) r = pins_->Ensure(host, c.size);
      for (const Region& x : regions_)
        if (!r && host >= x.host && host + c.size <= x.host + x.len) r = TierPins::Pinned{x.host, x.len, x.dev};
      if (!r || r->dev == nullptr) {
        ok = false;
        break;
      }
      uint8_t* alias = r->dev + (host - r->host);
      if (to_device) c.src = alias; else c.dst = alias;
    }
    if (ok) {
      cudaError_t e = LaunchCopyKernel(mapped.data(), mapped.size(), stream);
      if (e != cudaSuccess) return CudaError(e, "copy kernel");
      AddStats([&](TransferStats& s) {
        s.kernel_calls++;
        s.copies += copies.size();
      });
      return Status::OK();
    }
    m = chosen == CopyMethod::kKernel ? CopyMethod::kLoop : CopyMethod::kBatch;
  }
  return EnqueueOn(copies, to_device, m, stream);
}

Status TransferImpl::EnqueueOn(std::span<const CopyPiece> copies, bool to_device, CopyMethod m,
                               cudaStream_t stream) {
  if (copies.empty()) return Status::OK();
  const cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
#if CUDART_VERSION >= 12080
  // The batch API rejects the legacy default stream.
  if (m == CopyMethod::kBatch && stream != nullptr && stream != cudaStreamLegacy) {
    constexpr size_t kMaxBatch = 4096;
    std::vector<void*> dsts;
    std::vector<const void*> srcs;
    std::vector<size_t> sizes;
    for (size_t i = 0; i < copies.size(); i += kMaxBatch) {
      size_t n = std::min(kMaxBatch, copies.size() - i);
      dsts.resize(n);
      srcs.resize(n);
      sizes.resize(n);
      for (size_t j = 0; j < n; ++j) {
        dsts[j] = copies[i + j].dst;
        srcs[j] = copies[i + j].src;
        sizes[j] = copies[i + j].size;
      }
      cudaMemcpyAttributes attr{};
      attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
      attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
      size_t attr_idx = 0;
#if CUDART_VERSION >= 13000
      cudaError_t e = cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), n, &attr, &attr_idx, 1, stream);
#else
      // 12.8 / 12.9: non-const source array and a failIdx argument.
      size_t fail_idx = 0;
      cudaError_t e = cudaMemcpyBatchAsync(dsts.data(), const_cast<void**>(srcs.data()), sizes.data(), n, &attr,
                                           &attr_idx, 1, &fail_idx, stream);
#endif
      if (e != cudaSuccess) return CudaError(e, "cudaMemcpyBatchAsync");
      AddStats([&](TransferStats& s) { s.batch_calls++; });
    }
    AddStats([&](TransferStats& s) { s.copies += copies.size(); });
    return Status::OK();
  }
#endif
  for (const CopyPiece& c : copies) {
    cudaError_t e = cudaMemcpyAsync(c.dst, c.src, c.size, kind, stream);
    if (e != cudaSuccess) return CudaError(e, "cudaMemcpyAsync");
  }
  AddStats([&](TransferStats& s) {
    s.loop_calls++;
    s.copies += copies.size();
  });
  return Status::OK();
}

void TransferImpl::AfterStream(cudaStream_t stream, std::function<void()> fn) {
  cudaEvent_t ev = nullptr;
  {
    std::lock_guard<std::mutex> l(done_mu_);
    if (!spare_events_.empty()) {
      ev = spare_events_.back();
      spare_events_.pop_back();
    }
  }
  cudaError_t e = cudaSuccess;
  // Blocking sync: the completion thread sleeps while it waits.
  if (ev == nullptr) e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventBlockingSync);
  if (e == cudaSuccess) e = cudaEventRecord(ev, stream);
  if (e == cudaSuccess) {
    {
      std::lock_guard<std::mutex> l(done_mu_);
      done_q_.push_back(AfterEvent{ev, std::move(fn)});
      ++outstanding_;
    }
    done_cv_.notify_all();
    return;
  }
  if (ev != nullptr) cudaEventDestroy(ev);
  cudaGetLastError();
  // Could not mark the point: wait for the stream here instead.
  cudaStreamSynchronize(stream);
  fn();
}

void TransferImpl::ReleaseGoneTier() {
  std::unique_lock<std::mutex> call(call_mu_, std::try_to_lock);
  if (!call.owns_lock() || tier_map_ == nullptr || lender_->TierConnectionAlive(tier_connection_)) return;
  if (cudaSetDevice(opt_.device) != cudaSuccess) {  // this thread's device, for the synchronization
    cudaGetLastError();
    return;
  }
  UnmapServedTier();
}

void TransferImpl::CompletionLoop() {
  std::unique_lock<std::mutex> l(done_mu_);
  for (;;) {
    const auto ready = [this] { return stop_ || !done_q_.empty(); };
    if (lender_ == nullptr) {
      done_cv_.wait(l, ready);
    } else if (!done_cv_.wait_for(l, std::chrono::seconds(1), ready)) {
      l.unlock();
      ReleaseGoneTier();
      l.lock();
      continue;
    }
    if (done_q_.empty()) return;
    AfterEvent a = std::move(done_q_.front());
    done_q_.pop_front();
    l.unlock();
    // An error here (a failed device) still runs fn: it releases what the
    // copies held, which is all it does.
    cudaEventSynchronize(a.event);
    a.fn();
    l.lock();
    spare_events_.push_back(a.event);
    --outstanding_;
    done_cv_.notify_all();
  }
}

}  // namespace kvtier::gpu
