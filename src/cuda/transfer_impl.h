// Inside the cuda room: TransferImpl, the GPU <-> pinned host <-> store data
// path behind kvtier::gpu::Transfer, and the copy-plan helpers its files
// share. transfer.cpp holds setup, staging, copies and completions;
// transfer_get.cpp the loads (GetToDevice); transfer_put.cpp the stores
// (PutFromDevice) and the checksums on the GPU.
#ifndef KVTIER_SRC_CUDA_TRANSFER_IMPL_H_
#define KVTIER_SRC_CUDA_TRANSFER_IMPL_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/service_store.h"
#include "cuda/copy_kernel.h"
#include "cuda/device_ranges.h"
#include "cuda/hash_kernel.h"
#include "cuda/tier_pins.h"
#include "kvtier/cuda.h"
#include "store/block_sink.h"
#include "wire/region.h"

namespace kvtier::gpu {

inline Status CudaError(cudaError_t e, const std::string& what) {
  return Status::IOError(what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline constexpr size_t kLargePiece = 256u << 10;  // copy engines reach the link from here up (limits.md)

// Pieces where both sides continue the previous piece become one copy.
inline void AddCopy(std::vector<CopyPiece>* v, void* dst, const void* src, size_t n) {
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

// Splits each copy whose host side runs past the end of its registration
// (`room(p)`: the bytes from p to that end, 0 where p is in none) into
// copies that each lie in one. Zip joins pieces that continue each other on
// both sides, and a block's last chunk of one RAM-tier region continues
// into the next region's first (as one block's end into the next block's
// start), but the driver copies from one registration at a time.
template <typename Room>
void SplitAtRegistrations(std::vector<CopyPiece>* copies, bool to_device, const Room& room) {
  std::vector<CopyPiece> out;
  for (size_t i = 0; i < copies->size(); ++i) {
    const CopyPiece c = (*copies)[i];
    const uint8_t* host = static_cast<const uint8_t*>(to_device ? c.src : c.dst);
    const size_t first = room(host);
    if (out.empty() && (first == 0 || first >= c.size)) continue;  // nothing split yet: leave it in place
    if (out.empty()) out.assign(copies->begin(), copies->begin() + static_cast<std::ptrdiff_t>(i));
    size_t at = 0;
    while (at < c.size) {
      size_t n = c.size - at;
      const size_t r = room(host + at);
      if (r != 0) n = std::min(n, r);
      out.push_back(CopyPiece{static_cast<uint8_t*>(c.dst) + at, static_cast<const uint8_t*>(c.src) + at, n});
      at += n;
    }
  }
  if (!out.empty()) *copies = std::move(out);
}

using Span = std::pair<void*, size_t>;

inline std::vector<Span> DeviceSpans(const DeviceBlock& b) {
  std::vector<Span> v;
  for (const DeviceFragment& f : b.fragments) v.push_back({f.ptr, f.size});
  return v;
}
inline std::vector<Span> PieceSpans(const std::vector<RamTier::Piece>& pieces) {
  std::vector<Span> v;
  for (const RamTier::Piece& p : pieces) v.push_back({p.data, p.size});
  return v;
}

inline size_t TotalBytes(const DeviceBlock& b, bool* bad) {
  size_t t = 0;
  for (const DeviceFragment& f : b.fragments) {
    if (f.ptr == nullptr && f.size != 0) *bad = true;
    t += f.size;
  }
  return t;
}

// Adds the first `len` bytes of `b`'s fragments to a hash plan, its 1 KiB
// blocks at scratch row `block_begin`; false, the plan unchanged, where the
// kernel cannot take them (GpuHashable). A get's payload may end inside a
// fragment.
inline bool PlanHash(const DeviceBlock& b, uint64_t len, uint64_t block_begin, std::vector<HashPayload>* payloads,
                     std::vector<HashFrag>* frags) {
  const size_t first = frags->size();
  uint64_t end = 0;
  for (const DeviceFragment& f : b.fragments) {
    if (end == len) break;
    if (f.size == 0) continue;
    end += std::min<uint64_t>(f.size, len - end);
    frags->push_back(HashFrag{static_cast<const uint8_t*>(f.ptr), end});
  }
  const uint32_t count = static_cast<uint32_t>(frags->size() - first);
  if (end != len || !GpuHashable(frags->data() + first, count, len)) {
    frags->resize(first);
    return false;
  }
  payloads->push_back(HashPayload{len, block_begin, static_cast<uint32_t>(first), count});
  return true;
}

// Block i's device bytes, or why the block is refused: an empty key, a null
// fragment, no bytes, or a fragment that is not wholly memory of the
// device `ranges` checks for (host memory or another GPU's would fault the
// copy kernel, and a fault poisons the caller's CUDA context).
Result<size_t> CheckBlock(size_t i, const DeviceBlock& b, DeviceRanges& ranges);

class TransferImpl final : public Transfer {
 public:
  TransferImpl(Store* store, BlockSink* sink, const TransferOptions& o)
      : store_(store), sink_(sink), ram_(sink != nullptr ? sink->ram_tier() : nullptr), opt_(o), method_(o.method) {}
  ~TransferImpl() override;

  Status Init();
  std::vector<Result<size_t>> GetToDevice(NamespaceId ns, std::span<const DeviceBlock> blocks, cudaStream_t stream,
                                          cudaEvent_t done_event, TransferDone done) override;
  std::vector<Status> PutFromDevice(NamespaceId ns, std::span<const DeviceBlock> blocks, cudaStream_t stream,
                                    bool wait_durable, TransferDone done) override;
  void SetCopyMethod(CopyMethod method) override { method_.store(method); }
  TransferStats GetStats() override {
    std::lock_guard<std::mutex> l(stats_mu_);
    TransferStats s = stats_;
    s.method = method_.load();
    if (pins_ != nullptr) {
      s.ram_tier_pinned = pins_->ok();
      s.ram_tier_regions = pins_->regions();
      s.ram_tier_regions_pinned = pins_->pinned();
    }
    return s;
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

  // GetToDevice's steps (transfer_get.cpp).
  struct GetCall;
  struct Landed;
  void CopyRamHits(GetCall& call, NamespaceId ns, std::span<const DeviceBlock> blocks, cudaStream_t stream,
                   std::vector<size_t>* misses);
  void ReadMisses(GetCall& call, NamespaceId ns, std::span<const DeviceBlock> blocks,
                  const std::vector<size_t>& misses, cudaStream_t stream);
  void LandMiss(GetCall& call, const Landed& landed, std::span<const DeviceBlock> blocks, cudaStream_t stream);
  // Queues the GPU's XXH3 of one group of RAM hits' landed bytes on
  // hash_stream_, after their copies on `stream`.
  void HashRamGroup(GetCall& call, std::vector<HashPayload>& payloads, const std::vector<HashFrag>& frags,
                    uint64_t rows, cudaStream_t stream);
  // Waits for those sums and compares them with the blocks' checksums (the
  // tier's copy hashed on the host where the kernel could not hash the
  // landed bytes); returns the blocks to load again (their results reset).
  std::vector<size_t> CheckRamHits(GetCall& call);
  void TimeRamHits(GetCall& call);
  // A service's client: the blocks the service pins for it in its lent RAM
  // tier, as this process's pieces of them (GetCall::lent).
  void LendRamHits(GetCall& call, NamespaceId ns, std::span<const DeviceBlock> blocks);
  // Maps the service's RAM tier read-only and registers it with CUDA
  // (tier_map_); NotSupported where the service or the platform cannot.
  Status MapServedTier();
  void UnmapServedTier();
  void RetryServedTier();
  // The completion thread's check, about once a second while idle: a tier
  // lent on a connection that is gone is unmapped without waiting for the
  // next load, so that an idle client does not keep a stopped (or not
  // adopted) service's memory pinned. Skipped while a call runs: that call
  // finds the connection gone itself.
  void ReleaseGoneTier();
  // Device and pinned host room for a get's hash plan: n payloads, f
  // fragments, `rows` scratch rows for each of two groups in flight.
  Status EnsureGetHashArea(size_t n, size_t f, uint64_t rows);

  // PutFromDevice's steps (transfer_put.cpp).
  struct PutCall;
  class GpuSums;
  void PutThroughRam(const std::shared_ptr<PutCall>& call, NamespaceId ns, std::span<const DeviceBlock> blocks,
                     cudaStream_t stream, GpuSums& sums, std::vector<size_t>* via_staging);
  void SubmitFromRam(const std::shared_ptr<PutCall>& call, NamespaceId ns, std::span<const DeviceBlock> blocks,
                     const std::vector<size_t>& via_ram, const std::vector<size_t>& group_of,
                     const std::vector<cudaEvent_t>& events, std::vector<RamTier::Pin>& reserved, GpuSums& sums);
  void PutThroughStaging(const std::shared_ptr<PutCall>& call, NamespaceId ns, std::span<const DeviceBlock> blocks,
                         const std::vector<size_t>& via_staging, cudaStream_t stream, GpuSums& sums);
  void PutSlotsThroughService(const std::shared_ptr<PutCall>& call, NamespaceId ns,
                              std::span<const DeviceBlock> blocks, std::span<const size_t> which);

  Status Register(uint8_t* p, size_t n, unsigned extra_flags = 0);
  // Bytes from p to the end of the registration (RAM-tier region, lent
  // tier region or staging) that holds it; 0 where none does.
  size_t RegisteredRoom(const void* p) const;
  // Unregisters every region registered within [base, base + len).
  void UnregisterWithin(uint8_t* base, size_t len);
  // Queues XXH3 of the first lens[i] bytes of each block's fragments on the
  // GPU (hash_stream_, after the work queued on `stream` so far; lens[i] 0:
  // not hashed) and the copy of the sums to h_sums_; (*slot)[i] is block i's
  // index in h_sums_, or -1 where the host must hash it. `*done` is recorded
  // after the copy. Any error: every slot is -1.
  void HashOnDevice(std::span<const DeviceBlock> blocks, const std::vector<size_t>& lens, cudaStream_t stream,
                    std::vector<int64_t>* slot, cudaEvent_t* done);
  // HashOnDevice's launch: device memory for the plan, then the kernel and
  // the copy of the sums, after `stream`'s work so far.
  cudaError_t LaunchHash(const std::vector<HashPayload>& payloads, const std::vector<HashFrag>& frags,
                         uint64_t total_blocks, cudaStream_t stream, cudaEvent_t* done);
  Status EnsureSlots(size_t slot_bytes);
  void FreeStaging();
  Status WaitSlot(Slot& s);
  // Enqueues the copies on `stream` with the configured method.
  Status Enqueue(std::vector<CopyPiece>& copies, bool to_device, cudaStream_t stream);
  // The copy engines' part of Enqueue: `copies` by batch or loop.
  Status EnqueueOn(std::span<const CopyPiece> copies, bool to_device, CopyMethod m, cudaStream_t stream);
  // Runs `fn` on the completion thread after the work queued on `stream` so
  // far. The stream does not wait for it: an event marks the point, where a
  // host function would hold the stream until a CPU thread had run it (on a
  // busy host, milliseconds later). `fn` runs exactly once: here, after
  // waiting for the stream, when no event can be recorded.
  void AfterStream(cudaStream_t stream, std::function<void()> fn);
  void CompletionLoop();
  void AddStats(const std::function<void(TransferStats&)>& f) {
    std::lock_guard<std::mutex> l(stats_mu_);
    f(stats_);
  }

  // A service's client: no sink and no RAM tier here; staging is a memfd
  // registered with the service, and puts go through the store's PutBatch.
  bool served() const { return sink_ == nullptr; }

  Store* store_;
  BlockSink* sink_;  // null for a service's client
  RamTier* ram_;     // null without a RAM tier, and for a service's client
  // served(): the service's client, and the service's RAM tier when it is
  // lent (mapped read-only here and registered with CUDA; null when not),
  // on the connection `tier_connection_` (ServiceStore::MapTier).
  client::ServiceStore* lender_ = nullptr;
  uint8_t* tier_map_ = nullptr;
  size_t tier_map_len_ = 0;
  uint64_t tier_connection_ = 0;
  std::chrono::steady_clock::time_point last_tier_try_{};  // RetryServedTier's last attempt
  TransferOptions opt_;
  std::atomic<CopyMethod> method_;  // opt_.method until SetCopyMethod
  std::mutex call_mu_;  // one call at a time: the staging area is shared
  std::vector<Region> regions_;  // registered with CUDA: staging, and a lent tier's regions
  std::unique_ptr<TierPins> pins_;  // the RAM tier's regions; null without one or pin_ram_tier
  uint8_t* staging_ = nullptr;
  size_t staging_len_ = 0, slot_bytes_ = 0;
  // served(): the sealed memfd staging_ maps, and whether the service maps
  // it too (registered with the store).
  std::shared_ptr<wire::SharedRegion> staging_region_;
  bool staging_registered_ = false;
  std::vector<Slot> slots_;
  // GPU hashing: one device allocation for descriptors, scratch and sums,
  // and the sums' pinned landing place; grown as calls need.
  bool gpu_hash_ = false;
  cudaStream_t hash_stream_ = nullptr;
  cudaStream_t hash_stream2_ = nullptr;  // a get's odd groups (beside hash_stream_'s even ones)
  uint8_t* d_hash_ = nullptr;
  size_t d_hash_len_ = 0;
  uint64_t* h_sums_ = nullptr;
  size_t h_sums_cap_ = 0;
  // A get's: [payloads][fragments][sums] pinned on the host, the same then
  // two groups' scratch on the device. A group's descriptors are uploaded from
  // their own slice, so that no upload waits for an earlier group's kernel.
  uint8_t* h_get_plan_ = nullptr;
  uint8_t* d_get_plan_ = nullptr;
  size_t get_n_ = 0, get_f_ = 0;
  uint64_t get_rows_ = 0;
  struct GetHashArea {
    HashPayload* payloads;
    HashFrag* frags;
    uint64_t* sums;  // get_n_ of them; on the device the scratch rows follow
  };
  // The three parts of h_get_plan_ or d_get_plan_ (EnsureGetHashArea sizes them).
  GetHashArea GetHashAreaAt(uint8_t* base) const;

  std::mutex done_mu_;
  std::condition_variable done_cv_;
  struct AfterEvent {
    cudaEvent_t event;
    std::function<void()> fn;
  };
  std::deque<AfterEvent> done_q_;      // in the order recorded
  std::vector<cudaEvent_t> spare_events_;
  uint64_t outstanding_ = 0;  // functions queued or running
  bool stop_ = false;
  std::thread completion_;

  std::mutex stats_mu_;
  TransferStats stats_;
};


}  // namespace kvtier::gpu

#endif  // KVTIER_SRC_CUDA_TRANSFER_IMPL_H_
