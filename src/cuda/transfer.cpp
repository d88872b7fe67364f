// kvtier::gpu::Transfer: the GPU <-> pinned host <-> store data path.
// Host code compiled by the C++ compiler against the CUDA runtime headers;
// the only device code is copy_kernel.cu.
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "cuda/copy_kernel.h"
#include "cuda/hash_kernel.h"
#include "format/record.h"
#include "kvtier/cuda.h"
#include "store/block_sink.h"

namespace kvtier::gpu {

namespace {

Status CudaError(cudaError_t e, const std::string& what) {
  return Status::IOError(what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

constexpr size_t kLargePiece = 256u << 10;  // copy engines reach the link from here up (limits.md)

// Pieces where both sides continue the previous piece become one copy.
void AddCopy(std::vector<CopyPiece>* v, void* dst, const void* src, size_t n) {
  if (n == 0) return;
  if (!v->empty()) {
    CopyPiece& b = v->back();
    if (static_cast<uint8_t*>(b.dst) + b.size == dst && static_cast<const uint8_t*>(b.src) + b.size == src) {
      b.size += n;
      return;
    }
  }
  v->push_back(CopyPiece{dst, src, n});
}

// Copies that move `total` bytes from a list of (ptr, size) sources to a
// list of destinations, both in payload order.
template <typename Src, typename Dst>
void Zip(const Src& src, const Dst& dst, size_t total, std::vector<CopyPiece>* out) {
  size_t si = 0, so = 0, di = 0, dof = 0;
  while (total > 0 && si < src.size() && di < dst.size()) {
    size_t n = std::min({src[si].second - so, dst[di].second - dof, total});
    AddCopy(out, static_cast<uint8_t*>(dst[di].first) + dof, static_cast<const uint8_t*>(src[si].first) + so, n);
    so += n;
    dof += n;
    total -= n;
    if (so == src[si].second) ++si, so = 0;
    if (dof == dst[di].second) ++di, dof = 0;
  }
}

using Span = std::pair<void*, size_t>;

std::vector<Span> DeviceSpans(const DeviceBlock& b) {
  std::vector<Span> v;
  for (const DeviceFragment& f : b.fragments) v.push_back({f.ptr, f.size});
  return v;
}
std::vector<Span> PieceSpans(const std::vector<RamTier::Piece>& pieces) {
  std::vector<Span> v;
  for (const RamTier::Piece& p : pieces) v.push_back({p.data, p.size});
  return v;
}

size_t TotalBytes(const DeviceBlock& b, bool* bad) {
  size_t t = 0;
  for (const DeviceFragment& f : b.fragments) {
    if (f.ptr == nullptr && f.size != 0) *bad = true;
    t += f.size;
  }
  return t;
}

class TransferImpl final : public Transfer {
 public:
  TransferImpl(Store* store, BlockSink* sink, const TransferOptions& o)
      : store_(store), sink_(sink), ram_(sink->ram_tier()), opt_(o) {}
  ~TransferImpl() override;

  Status Init();
  std::vector<Result<size_t>> GetToDevice(NamespaceId ns, std::span<const DeviceBlock> blocks, cudaStream_t stream,
                                          cudaEvent_t done_event, TransferDone done) override;
  std::vector<Status> PutFromDevice(NamespaceId ns, std::span<const DeviceBlock> blocks, cudaStream_t stream,
                                    bool wait_durable, TransferDone done) override;
  TransferStats GetStats() override {
    std::lock_guard<std::mutex> l(stats_mu_);
    return stats_;
  }

 private:
  struct Region {
    uint8_t* host;
    size_t len;
    uint8_t* dev;  // mapped alias, or null
  };
  struct Slot {
    size_t off;
    cudaEvent_t ev;
    bool busy;  // ev recorded after a copy out of / into the slot
  };

  Status Register(uint8_t* p, size_t n);
  // Queues XXH3 of the blocks on the GPU (hash_stream_, after the work
  // queued on `stream` so far) and the copy of the sums to h_sums_;
  // (*slot)[i] is block i's index in h_sums_, or -1 where the host must hash
  // it. `*done` is recorded after the copy. Any error: every slot is -1.
  void HashOnDevice(std::span<const DeviceBlock> blocks, const std::vector<size_t>& totals, cudaStream_t stream,
                    std::vector<int64_t>* slot, cudaEvent_t* done);
  Status EnsureSlots(size_t slot_bytes);
  void FreeStaging();
  Status WaitSlot(Slot& s);
  // Enqueues the copies on `stream` with the configured method.
  Status Enqueue(std::vector<CopyPiece>& copies, bool to_device, cudaStream_t stream);
  // Runs `fn` on the completion thread after the work queued on `stream` so far.
  Status AfterStream(cudaStream_t stream, std::function<void()> fn);
  static void CUDART_CB HostFunc(void* arg);
  void CompletionLoop();
  void AddStats(const std::function<void(TransferStats&)>& f) {
    std::lock_guard<std::mutex> l(stats_mu_);
    f(stats_);
  }

  Store* store_;
  BlockSink* sink_;
  RamTier* ram_;
  TransferOptions opt_;
  std::mutex call_mu_;  // one call at a time: the staging area is shared
  std::vector<Region> regions_;  // registered with CUDA
  uint8_t* staging_ = nullptr;
  size_t staging_len_ = 0, slot_bytes_ = 0;
  std::vector<Slot> slots_;
  // GPU hashing: one device allocation for descriptors, scratch and sums,
  // and the sums' pinned landing place; grown as calls need.
  bool gpu_hash_ = false;
  cudaStream_t hash_stream_ = nullptr;
  uint8_t* d_hash_ = nullptr;
  size_t d_hash_len_ = 0;
  uint64_t* h_sums_ = nullptr;
  size_t h_sums_cap_ = 0;

  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::deque<std::function<void()>> done_q_;
  uint64_t outstanding_ = 0;  // host functions not yet run
  bool stop_ = false;
  std::thread completion_;

  std::mutex stats_mu_;
  TransferStats stats_;
};

struct HostFuncArg {
  TransferImpl* self;
  std::function<void()> fn;
};

}  // namespace

Status DeviceStatus() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return Status::NotSupported(std::string("no usable CUDA device: ") + cudaGetErrorName(e) + " (" +
                                cudaGetErrorString(e) + ")");
  if (n == 0) return Status::NotSupported("no CUDA device present");
  return Status::OK();
}

Result<std::unique_ptr<Transfer>> Transfer::Create(Store* store, const TransferOptions& options) {
  KVTIER_RETURN_IF_ERROR(DeviceStatus());
  BlockSink* sink = BlockSinkOf(store);
  if (sink == nullptr) return Status::NotSupported("the GPU path needs a Store made by Store::Open");
  if (options.pipeline_depth == 0) return Status::InvalidArgument("pipeline_depth must be > 0");
  auto t = std::make_unique<TransferImpl>(store, sink, options);
  KVTIER_RETURN_IF_ERROR(t->Init());
  return std::unique_ptr<Transfer>(std::move(t));
}

namespace {

Status TransferImpl::Init() {
  cudaError_t e = cudaSetDevice(opt_.device);
  if (e != cudaSuccess) return CudaError(e, "cudaSetDevice(" + std::to_string(opt_.device) + ")");
#if CUDART_VERSION >= 12080
  stats_.batch_api = true;
#endif
  completion_ = std::thread([this] { CompletionLoop(); });
  // Without it puts hash on the host, as before.
  gpu_hash_ = InitGpuHash() == cudaSuccess &&
              cudaStreamCreateWithFlags(&hash_stream_, cudaStreamNonBlocking) == cudaSuccess;
  if (!gpu_hash_) cudaGetLastError();
  if (ram_ != nullptr && opt_.pin_ram_tier) {
    bool all = true;
    for (const iovec& r : ram_->Regions())
      if (!Register(static_cast<uint8_t*>(r.iov_base), r.iov_len).ok()) all = false;
    // Unpinned, copies still work (through the driver's bounce buffers, slowly).
    stats_.ram_tier_pinned = all;
  }
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
  FreeStaging();
  if (hash_stream_ != nullptr) cudaStreamSynchronize(hash_stream_);
  if (d_hash_ != nullptr) cudaFree(d_hash_);
  if (h_sums_ != nullptr) cudaFreeHost(h_sums_);
  if (hash_stream_ != nullptr) cudaStreamDestroy(hash_stream_);
  for (const Region& r : regions_) cudaHostUnregister(r.host);
}

Status TransferImpl::Register(uint8_t* p, size_t n) {
  cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterPortable | cudaHostRegisterMapped);
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
    munmap(staging_, staging_len_);
  }
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
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap of " + std::to_string(len) + " bytes of staging");
  madvise(p, len, MADV_HUGEPAGE);
  staging_ = static_cast<uint8_t*>(p);
  staging_len_ = len;
  Status st = Register(staging_, len);
  if (!st.ok()) {
    munmap(staging_, len);
    staging_ = nullptr;
    staging_len_ = 0;
    return st.WithContext("pinning staging");
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

Status TransferImpl::Enqueue(std::vector<CopyPiece>& copies, bool to_device, cudaStream_t stream) {
  if (copies.empty()) return Status::OK();
  const cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  size_t total = 0;
  for (const CopyPiece& c : copies) total += c.size;
  CopyMethod m = opt_.method;
  if (m == CopyMethod::kAuto) m = total / copies.size() >= kLargePiece ? CopyMethod::kBatch : CopyMethod::kKernel;
  if (m == CopyMethod::kKernel) {
    // The host side must be mapped: translate it to its device alias.
    std::vector<CopyPiece> mapped = copies;
    bool ok = true;
    for (CopyPiece& c : mapped) {
      uint8_t* host = static_cast<uint8_t*>(to_device ? const_cast<void*>(c.src) : c.dst);
      const Region* r = nullptr;
      for (const Region& x : regions_)
        if (host >= x.host && host + c.size <= x.host + x.len) r = &x;
      if (r == nullptr || r->dev == nullptr) {
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
    m = opt_.method == CopyMethod::kKernel ? CopyMethod::kLoop : CopyMethod::kBatch;
  }
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

void CUDART_CB TransferImpl::HostFunc(void* arg) {
  // Runs on a CUDA thread, which must not call CUDA: hand over and return.
  auto* a = static_cast<HostFuncArg*>(arg);
  TransferImpl* self = a->self;
  {
    std::lock_guard<std::mutex> l(self->done_mu_);
    self->done_q_.push_back(std::move(a->fn));
    --self->outstanding_;
  }
  self->done_cv_.notify_all();
  delete a;
}

Status TransferImpl::AfterStream(cudaStream_t stream, std::function<void()> fn) {
  auto* a = new HostFuncArg{this, std::move(fn)};
  {
    std::lock_guard<std::mutex> l(done_mu_);
    ++outstanding_;
  }
  cudaError_t e = cudaLaunchHostFunc(stream, &TransferImpl::HostFunc, a);
  if (e == cudaSuccess) return Status::OK();
  // Could not chain it: wait for the stream here instead.
  cudaError_t w = cudaStreamSynchronize(stream);
  {
    std::lock_guard<std::mutex> l(done_mu_);
    --outstanding_;
  }
  a->fn();
  delete a;
  if (w != cudaSuccess) return CudaError(w, "cudaStreamSynchronize");
  return Status::OK();
}

void TransferImpl::CompletionLoop() {
  std::unique_lock<std::mutex> l(done_mu_);
  for (;;) {
    done_cv_.wait(l, [this] { return stop_ || !done_q_.empty(); });
    if (done_q_.empty()) return;
    std::function<void()> fn = std::move(done_q_.front());
    done_q_.pop_front();
    l.unlock();
    fn();
    l.lock();
    done_cv_.notify_all();
  }
}

std::vector<Result<size_t>> TransferImpl::GetToDevice(NamespaceId ns, std::span<const DeviceBlock> blocks,
                                                      cudaStream_t stream, cudaEvent_t done_event,
                                                      TransferDone done) {
  std::lock_guard<std::mutex> call(call_mu_);
  std::vector<Result<size_t>> results(blocks.size(), Result<size_t>(Status::Aborted("not run")));
  std::vector<size_t> totals(blocks.size());
  Status first_error;
  auto fail = [&](size_t i, Status st) {
    if (first_error.ok()) first_error = st;
    results[i] = std::move(st);
  };
  // 1. RAM hits: one enqueue for all of them; their pins are released after
  //    the copies have run.
  auto pins = std::make_shared<std::vector<RamTier::Pin>>();
  std::vector<CopyPiece> copies;
  std::vector<size_t> ram_blocks, misses;
  uint64_t ram_bytes = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    bool bad = false;
    totals[i] = TotalBytes(blocks[i], &bad);
    if (bad || blocks[i].key.empty()) {
      fail(i, Status::InvalidArgument("block " + std::to_string(i) + ": empty key or null device fragment"));
      continue;
    }
    RamTier::Pin pin = ram_ != nullptr ? ram_->Acquire(ns, blocks[i].key) : RamTier::Pin();
    if (!pin) {
      misses.push_back(i);
      continue;
    }
    if (pin.size() > totals[i]) {
      fail(i, Status::BufferTooSmall("block has " + std::to_string(pin.size()) + " bytes, device fragments " +
                                     std::to_string(totals[i])));
      continue;
    }
    Zip(PieceSpans(pin.pieces()), DeviceSpans(blocks[i]), pin.size(), &copies);
    results[i] = static_cast<size_t>(pin.size());
    ram_bytes += pin.size();
    ram_blocks.push_back(i);
    pins->push_back(std::move(pin));
  }
  if (!copies.empty()) {
    Status st = Enqueue(copies, /*to_device=*/true, stream);
    if (!st.ok())
      for (size_t i : ram_blocks) fail(i, st);
  }
  if (!pins->empty()) AfterStream(stream, [pins] { pins->clear(); }).IgnoreError();
  AddStats([&](TransferStats& s) { s.ram_hits += ram_blocks.size(); });

  // 2. The rest from disk through staging slots: each read that completes is
  //    copied to the device while the others are still being read.
  uint64_t disk_bytes = 0, disk_blocks = 0, missing = 0;
  if (!misses.empty()) {
    size_t most = 0;
    for (size_t i : misses) most = std::max(most, totals[i]);
    Status st = EnsureSlots(most);
    if (!st.ok()) {
      for (size_t i : misses) fail(i, st);
      misses.clear();
    }
    struct Completed {
      size_t block, slot;
      Result<size_t> r;
    };
    std::mutex m;
    std::condition_variable cv;
    std::deque<Completed> completed;
    std::vector<size_t> free_slots;
    for (size_t s = slots_.size(); s-- > 0;) free_slots.push_back(s);
    size_t next = 0, inflight = 0;
    while (next < misses.size() || inflight > 0) {
      while (next < misses.size() && !free_slots.empty()) {
        size_t s = free_slots.back();
        free_slots.pop_back();
        Status w = WaitSlot(slots_[s]);
        size_t i = misses[next++];
        if (!w.ok()) {
          fail(i, w);
          free_slots.push_back(s);
          continue;
        }
        ++inflight;
        MutableFragment out{staging_ + slots_[s].off, slot_bytes_};
        store_->GetAsync(ns, blocks[i].key, {&out, 1}, kNoDeadline, [&, i, s](Result<size_t> r) {
          {
            std::lock_guard<std::mutex> l(m);
            completed.push_back(Completed{i, s, std::move(r)});
          }
          cv.notify_one();
        });
      }
      if (inflight == 0) continue;
      std::unique_lock<std::mutex> l(m);
      cv.wait(l, [&] { return !completed.empty(); });
      Completed c = std::move(completed.front());
      completed.pop_front();
      l.unlock();
      --inflight;
      const size_t i = c.block;
      if (!c.r.ok()) {
        if (c.r.status().IsNotFound() || c.r.status().code() == Code::kTimedOut) {
          ++missing;
          results[i] = c.r.status();  // a miss is not an error of the call
        } else {
          fail(i, c.r.status());
        }
      } else if (*c.r > totals[i]) {
        fail(i, Status::BufferTooSmall("block has " + std::to_string(*c.r) + " bytes, device fragments " +
                                       std::to_string(totals[i])));
      } else {
        std::vector<CopyPiece> cp;
        std::vector<Span> src = {{staging_ + slots_[c.slot].off, *c.r}};
        Zip(src, DeviceSpans(blocks[i]), *c.r, &cp);
        Status e = Enqueue(cp, /*to_device=*/true, stream);
        cudaError_t r = e.ok() ? cudaEventRecord(slots_[c.slot].ev, stream) : cudaSuccess;
        if (!e.ok()) {
          fail(i, e);
        } else if (r != cudaSuccess) {
          fail(i, CudaError(r, "cudaEventRecord"));
        } else {
          slots_[c.slot].busy = true;
          results[i] = *c.r;
          disk_bytes += *c.r;
          ++disk_blocks;
        }
      }
      free_slots.push_back(c.slot);
    }
  }
  AddStats([&](TransferStats& s) {
    s.disk_reads += disk_blocks;
    s.misses += missing;
    s.blocks_to_device += ram_blocks.size() + disk_blocks;
    s.bytes_to_device += ram_bytes + disk_bytes;
  });
  if (done_event != nullptr) {
    cudaError_t e = cudaEventRecord(done_event, stream);
    if (e != cudaSuccess && first_error.ok()) first_error = CudaError(e, "recording the done event");
  }
  if (done) {
    Status fe = first_error;
    Status st = AfterStream(stream, [done, fe] { done(fe); });
    if (!st.ok()) done(st);
  }
  return results;
}

void TransferImpl::HashOnDevice(std::span<const DeviceBlock> blocks, const std::vector<size_t>& totals,
                                cudaStream_t stream, std::vector<int64_t>* slot, cudaEvent_t* done) {
  slot->assign(blocks.size(), -1);
  *done = nullptr;
  if (!gpu_hash_) return;
  std::vector<HashPayload> payloads;
  std::vector<HashFrag> frags;
  uint64_t total_blocks = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (totals[i] == 0) continue;
    const size_t first = frags.size();
    uint64_t end = 0;
    for (const DeviceFragment& f : blocks[i].fragments) {
      if (f.size == 0) continue;
      end += f.size;
      frags.push_back(HashFrag{static_cast<const uint8_t*>(f.ptr), end});
    }
    const uint32_t count = static_cast<uint32_t>(frags.size() - first);
    if (!GpuHashable(frags.data() + first, count, totals[i])) {
      frags.resize(first);
      continue;
    }
    (*slot)[i] = static_cast<int64_t>(payloads.size());
    payloads.push_back(HashPayload{totals[i], total_blocks, static_cast<uint32_t>(first), count});
    total_blocks += (totals[i] - 1) / 1024;
  }
  auto fail = [&](cudaError_t) {
    cudaGetLastError();
    slot->assign(blocks.size(), -1);
    if (*done != nullptr) cudaEventDestroy(*done);
    *done = nullptr;
  };
  if (payloads.empty()) return;
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
    if (e != cudaSuccess) return fail(e);
    d_hash_len_ = need;
  }
  if (payloads.size() > h_sums_cap_) {
    if (h_sums_ != nullptr) cudaFreeHost(h_sums_);
    h_sums_ = nullptr;
    h_sums_cap_ = 0;
    e = cudaMallocHost(reinterpret_cast<void**>(&h_sums_), payloads.size() * sizeof(uint64_t));
    if (e != cudaSuccess) return fail(e);
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
  if (e == cudaSuccess)
    e = LaunchGpuHash(d_pay, payloads.size(), d_frag, total_blocks, d_scratch, d_sums, hash_stream_);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(h_sums_, d_sums, sum_bytes, cudaMemcpyDeviceToHost, hash_stream_);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(done, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(*done, hash_stream_);
  if (e != cudaSuccess) return fail(e);
}

std::vector<Status> TransferImpl::PutFromDevice(NamespaceId ns, std::span<const DeviceBlock> blocks,
                                                cudaStream_t stream, bool wait_durable, TransferDone done) {
  std::lock_guard<std::mutex> call(call_mu_);
  // Shared with the put callbacks, which may run after this call returns.
  struct State {
    std::mutex m;
    std::condition_variable cv;
    std::vector<Status> statuses;
    size_t left = 0;
    Status first_error;
    TransferDone done;
  };
  auto state = std::make_shared<State>();
  state->statuses.resize(blocks.size());
  state->left = blocks.size();
  state->done = std::move(done);
  auto finish = [state](size_t i, Status st) {
    TransferDone cb;
    Status fe;
    {
      std::lock_guard<std::mutex> l(state->m);
      if (!st.ok() && state->first_error.ok()) state->first_error = st;
      state->statuses[i] = std::move(st);
      if (--state->left == 0) {
        cb = std::move(state->done);
        fe = state->first_error;
      }
    }
    state->cv.notify_all();
    if (cb) cb(fe);
  };
  const auto call_start = std::chrono::steady_clock::now();
  std::vector<size_t> totals(blocks.size());
  std::vector<RamTier::Pin> reserved(blocks.size());
  std::vector<size_t> via_staging, via_ram;
  uint64_t bytes = 0;
  // 1. Straight into pinned RAM-tier chunks, in groups of about 32 MiB with
  //    an event after each: while the link copies group g+1, host threads
  //    checksum group g and queue its puts (the disk write reads the same
  //    chunks: no host copy at all). Each group goes on the stream as soon as
  //    its chunks are reserved, so the reservations (and the RAM evictions
  //    they cause) of later groups overlap the copies of earlier ones.
  constexpr uint64_t kGroupBytes = 32ull << 20;
  std::vector<size_t> group_of;  // per via_ram entry
  std::vector<cudaEvent_t> events;
  Status st;
  std::vector<CopyPiece> copies;
  uint64_t group_bytes = 0;
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
    bool bad = false;
    totals[i] = TotalBytes(blocks[i], &bad);
    if (bad || blocks[i].key.empty()) totals[i] = 0;  // refused below
  }
  // Checksums on the GPU, from the device's bytes, alongside the copies.
  std::vector<int64_t> sum_slot;
  cudaEvent_t sums_ready = nullptr;
  HashOnDevice(blocks, totals, stream, &sum_slot, &sums_ready);
  std::once_flag sums_waited;
  bool sums_ok = true;
  // The GPU's checksum of block i, or null (the host hashes it).
  auto gpu_sum = [&](size_t i) -> const uint64_t* {
    if (sum_slot[i] < 0) return nullptr;
    std::call_once(sums_waited, [&] { sums_ok = cudaEventSynchronize(sums_ready) == cudaSuccess; });
    return sums_ok ? h_sums_ + sum_slot[i] : nullptr;
  };
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (totals[i] == 0) {
      finish(i, Status::InvalidArgument("block " + std::to_string(i) + ": empty key, no bytes or null fragment"));
      continue;
    }
    if (ram_ != nullptr) reserved[i] = ram_->Reserve(ns, blocks[i].key, totals[i]);
    if (!reserved[i]) {
      via_staging.push_back(i);
      continue;
    }
    via_ram.push_back(i);
    std::vector<Span> dst = PieceSpans(reserved[i].pieces());
    Zip(DeviceSpans(blocks[i]), dst, totals[i], &copies);
    group_bytes += totals[i];
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
        finish(i, st);
      }
    } else {
      for (size_t i : via_ram) bytes += totals[i];
      auto wait_group = [&](size_t g) -> Status {
        cudaError_t e = cudaEventSynchronize(events[g]);
        return e == cudaSuccess ? Status::OK() : CudaError(e, "waiting for device-to-host copies");
      };
      // Each put checksums its block on the submitting thread; several
      // threads keep up with the link.
      auto submit = [&](size_t first, size_t step) {
        for (size_t k = first; k < via_ram.size(); k += step) {
          size_t i = via_ram[k];
          Status w = wait_group(group_of[k]);
          if (!w.ok()) {
            reserved[i].Release();
            finish(i, w);
            continue;
          }
          sink_->PutInternal(ns, blocks[i].key, {}, std::move(reserved[i]), /*blocking=*/true,
                              [finish, i](Status s) { finish(i, std::move(s)); }, gpu_sum(i));
        }
      };
      // Most cores: the checksum of every byte is the work left once the
      // copy is on the link (the store's writer and committer need little CPU).
      const unsigned cores = std::thread::hardware_concurrency();
      const size_t threads = std::clamp<size_t>(cores > 2 ? cores - 2 : 1, 1, 16);
      const size_t step = std::min(threads, via_ram.size());
      std::vector<std::thread> pool;
      for (size_t t = 1; t < step; ++t) pool.emplace_back(submit, t, step);
      submit(0, step);
      for (std::thread& t : pool) t.join();
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
    for (cudaEvent_t ev : events)
      if (ev != nullptr) cudaEventDestroy(ev);
  }
  if (copy_start != nullptr) cudaEventDestroy(copy_start);
  if (copy_end != nullptr) cudaEventDestroy(copy_end);
  // 2. The others through staging, a slot-full at a time; the put copies the
  //    bytes into the write queue (and RAM tier) before it returns.
  if (!via_staging.empty()) {
    size_t most = 0;
    for (size_t i : via_staging) most = std::max(most, totals[i]);
    Status st = EnsureSlots(most);
    for (size_t at = 0; at < via_staging.size();) {
      size_t n = st.ok() ? std::min(slots_.size(), via_staging.size() - at) : via_staging.size() - at;
      std::vector<CopyPiece> cp;
      if (st.ok()) {
        for (size_t k = 0; k < n; ++k) {
          size_t i = via_staging[at + k];
          std::vector<Span> dst = {{staging_ + slots_[k].off, totals[i]}};
          Zip(DeviceSpans(blocks[i]), dst, totals[i], &cp);
        }
        Status e = Enqueue(cp, /*to_device=*/false, stream);
        if (e.ok()) {
          cudaError_t w = cudaStreamSynchronize(stream);
          if (w != cudaSuccess) e = CudaError(w, "waiting for device-to-host copies");
        }
        st = e;
      }
      for (size_t k = 0; k < n; ++k) {
        size_t i = via_staging[at + k];
        if (!st.ok()) {
          finish(i, st);
          continue;
        }
        bytes += totals[i];
        Fragment f{staging_ + slots_[k].off, totals[i]};
        sink_->PutInternal(ns, blocks[i].key, {&f, 1}, RamTier::Pin(), /*blocking=*/true,
                            [finish, i](Status s) { finish(i, std::move(s)); }, gpu_sum(i));
      }
      at += n;
    }
  }
  size_t gpu_hashed = 0;
  if (sums_ok)
    for (size_t i : via_ram) gpu_hashed += sum_slot[i] >= 0;
  if (sums_ok)
    for (size_t i : via_staging) gpu_hashed += sum_slot[i] >= 0;
  if (sums_ready != nullptr) {
    cudaEventSynchronize(sums_ready);  // h_sums_ is reused by the next call
    cudaEventDestroy(sums_ready);
  }
  AddStats([&](TransferStats& s) {
    s.blocks_from_device += via_ram.size() + via_staging.size();
    s.bytes_from_device += bytes;
    s.gpu_hashed_blocks += gpu_hashed;
  });
  std::unique_lock<std::mutex> l(state->m);
  if (wait_durable) state->cv.wait(l, [&] { return state->left == 0; });
  return state->statuses;
}

}  // namespace

}  // namespace kvtier::gpu
