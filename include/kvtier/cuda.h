// kvtier GPU data path: moves KV blocks between device memory and a Store.
//
// Built into libkvtier_cuda only when the CUDA toolkit is found at build
// time; it links the static CUDA runtime, so it loads on machines without a
// driver, where every call returns NotSupported naming the cause.
//
// Data path (no GPUDirect): device <-> pinned host memory <-> store.
// - With a RAM tier (Options::ram_tier_bytes), its memory is registered with
//   CUDA (cudaHostRegister), so RAM hits are copied straight to the device
//   and puts are copied from the device straight into RAM-tier chunks, which
//   are then written through to the log.
// - Blocks not in RAM are read from disk into pinned staging buffers; every
//   read that completes is copied to the device at once while later reads
//   are still running, so disk and PCIe overlap.
// - Copies use cudaMemcpyBatchAsync (CUDA >= 12.8) or a cudaMemcpyAsync loop,
//   or a copy kernel reading mapped host memory for small fragments (see
//   CopyMethod).
//
// A block is a list of device fragments, in payload order: one fragment for
// a cross-layer contiguous block, 2 x layers fragments for per-layer layouts.
//
// Thread safety: a Transfer may be used from several threads; its calls are
// serialized (one staging area). Use one Transfer per thread for overlap.
// The Transfer must be destroyed before its Store is closed.
#ifndef KVTIER_CUDA_H_
#define KVTIER_CUDA_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/store.h"

// The CUDA runtime's opaque handles, declared as cuda_runtime_api.h does.
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

namespace kvtier::gpu {

// A piece of device memory (cudaMalloc, or any pointer the device can read
// and write with cudaMemcpy). Every byte of it must be memory of the
// Transfer's device: a block with a fragment that is not, or that runs past
// its allocation into memory that is not, is refused with InvalidArgument
// before any copy.
struct DeviceFragment {
  void* ptr = nullptr;
  size_t size = 0;
};

struct DeviceBlock {
  std::string_view key;
  std::span<const DeviceFragment> fragments;
};

enum class CopyMethod : uint8_t {
  kAuto,    // batch API for pieces >= 256 KiB; kernel below when host memory is mapped; else batch/loop
  kBatch,   // cudaMemcpyBatchAsync (falls back to kLoop before CUDA 12.8 or on the legacy stream)
  kLoop,    // one cudaMemcpyAsync per piece
  kKernel,  // a copy kernel over mapped pinned host memory (uses SMs)
};

struct TransferOptions {
  int device = 0;
  // Pinned staging for disk reads (and for puts when the RAM tier is off or
  // full). Grown when one block needs more than a slot.
  size_t staging_bytes = 256ull << 20;
  // Disk reads in flight per GetToDevice.
  unsigned pipeline_depth = 32;
  CopyMethod method = CopyMethod::kAuto;
  // Register the store's RAM tier with CUDA (needed for full-speed copies).
  bool pin_ram_tier = true;
};

struct TransferStats {
  uint64_t blocks_to_device = 0, bytes_to_device = 0;
  uint64_t blocks_from_device = 0, bytes_from_device = 0;
  uint64_t ram_hits = 0, disk_reads = 0, misses = 0;
  uint64_t copies = 0;           // host<->device pieces after merging
  uint64_t batch_calls = 0, loop_calls = 0, kernel_calls = 0;
  // Puts whose checksum was computed on the GPU from the device's bytes
  // (the rest: on the host, e.g. payloads of <= 240 bytes or unaligned
  // fragments).
  uint64_t gpu_hashed_blocks = 0;
  // RAM hits checked on the device after their copy (XXH3 of the bytes that
  // landed, against the block's checksum), and those that failed the check
  // and were loaded again through the store's verified read path.
  uint64_t ram_hits_verified_on_device = 0, ram_hits_reloaded = 0;
  // Driver queries that checked the calls' fragments: one per device
  // allocation a call's fragments lie in, not one per block.
  uint64_t pointer_queries = 0;
  // The RAM tier is registered with CUDA, one region (1 GiB) at a time: a
  // thread pins them behind the tier's prefault from the bind on, and a
  // call pins a region it needs first. ram_tier_pinned: no region failed
  // (false without a RAM tier, or when registration failed: copies then go
  // through the driver's bounce buffers). The counts say how far it is.
  bool ram_tier_pinned = false;
  uint64_t ram_tier_regions = 0, ram_tier_regions_pinned = 0;
  // The store is a service's client: every block moves through staging
  // that the service reads and writes directly (one host copy, made and
  // verified by the service), and disk_reads counts those gets.
  bool through_service = false;
  // ... and the service maps that staging (from the first call that made
  // it), so it copies each block straight into or out of it (false: the
  // client copies through its own staging as well, a second host copy; the
  // bytes are the same).
  bool staging_shared_with_service = false;
  // ... and the service lends this client its RAM tier (mapped read-only
  // here, registered with CUDA): a hit is copied straight from the
  // service's memory to the device, with no host copy, and checked on the
  // device as an embedded RAM hit is (ram_hits counts them). False: the
  // service has no RAM tier in shared memory, it serves with tenancy, or
  // the device cannot register read-only memory.
  bool ram_tier_lent = false;
  bool batch_api = false;        // cudaMemcpyBatchAsync is compiled in
  CopyMethod method = CopyMethod::kAuto;  // as set now (TransferOptions, SetCopyMethod)
  // The last PutFromDevice that went through the RAM tier, in milliseconds:
  // the whole call, the part spent reserving chunks and queuing the copies,
  // and the device's time for the copies (CUDA events), so a slow put can be
  // told apart from a slow link.
  double last_put_call_ms = 0, last_put_enqueue_ms = 0, last_put_copy_ms = 0;
  // The last GetToDevice that copied RAM-tier hits, in milliseconds: the
  // whole call; the part spent finding, pinning and queuing the hits'
  // copies; the device's time from the call's start on the stream (once the
  // stream's earlier work was done) to the end of the last hit's copy; and
  // from there to the hits' checksums being ready (the hashing's tail). A
  // slow load is thus told apart into host work, the link and the check.
  double last_get_call_ms = 0, last_get_enqueue_ms = 0, last_get_copy_ms = 0, last_get_hash_tail_ms = 0;
};

// OK when a CUDA device can be used here; else NotSupported with the reason
// ("no CUDA driver", "no CUDA device", ...).
Status DeviceStatus();
// The calling thread's current CUDA device (0 when it cannot be asked).
int CurrentDevice();

// Called once when the work of a call has completed on the device (Get) or
// every put is durable (Put), on a kvtier thread, with the first error.
using TransferDone = std::function<void(Status)>;

class Transfer {
 public:
  // `store` must outlive the Transfer: an embedded store, or a service's
  // client (Store::Open("unix:...")), whose blocks then go through staging
  // registered with the service (TransferStats::through_service). Errors:
  // NotSupported (no device), InvalidArgument (no store), CUDA failures as
  // IOError.
  [[nodiscard]] static Result<std::unique_ptr<Transfer>> Create(Store* store,
                                                                const TransferOptions& options = {});
  virtual ~Transfer() = default;

  // Loads blocks into their device fragments. Copies are enqueued on
  // `stream` (not the legacy default stream for the batch API): RAM hits at
  // once, disk reads as they complete. Every block is verified before the
  // call returns: a disk read on the host before its copy, a RAM hit on the
  // device after its copy (a kernel hashes the bytes that landed while the
  // disk reads run; one that fails is loaded again through the store's
  // verified read, which drops the changed RAM copy). So the call returns
  // once the RAM hits' copies have run and every other copy is enqueued, and
  // work queued on `stream` afterwards sees verified data; results[i] is the
  // payload size, NotFound (miss), BufferTooSmall, or an error. When given,
  // `done_event` is recorded after the last copy and `done` runs once the
  // copies have finished.
  virtual std::vector<Result<size_t>> GetToDevice(NamespaceId ns, std::span<const DeviceBlock> blocks,
                                                  cudaStream_t stream, cudaEvent_t done_event = nullptr,
                                                  TransferDone done = nullptr) = 0;

  // Stores blocks from device memory. The device-to-host copies run on
  // `stream` after the work already queued there (the producer of the KV).
  // Returns when every block has left the device and is in the RAM tier (or
  // the write queue); statuses[i] reports what failed by then. The puts are
  // written through to the log; `done` runs when all are durable. With
  // wait_durable the call itself returns only then, with the final statuses.
  virtual std::vector<Status> PutFromDevice(NamespaceId ns, std::span<const DeviceBlock> blocks,
                                            cudaStream_t stream, bool wait_durable = true,
                                            TransferDone done = nullptr) = 0;

  // Changes TransferOptions::method for the copies of calls that start
  // after it returns. Thread-safe.
  virtual void SetCopyMethod(CopyMethod method) = 0;

  virtual TransferStats GetStats() = 0;
};

// "auto", "batch", "loop", "kernel" (inline: the C ABI checks names in
// builds without the GPU path too).
inline const char* CopyMethodName(CopyMethod method) {
  switch (method) {
    case CopyMethod::kAuto: return "auto";
    case CopyMethod::kBatch: return "batch";
    case CopyMethod::kLoop: return "loop";
    case CopyMethod::kKernel: return "kernel";
  }
  return "unknown";
}

// The method with that name; InvalidArgument naming the choices otherwise.
[[nodiscard]] inline Result<CopyMethod> ParseCopyMethod(std::string_view name) {
  for (CopyMethod m : {CopyMethod::kAuto, CopyMethod::kBatch, CopyMethod::kLoop, CopyMethod::kKernel})
    if (name == CopyMethodName(m)) return m;
  return Status::InvalidArgument("copy method '" + std::string(name) + "' is not one of auto, batch, loop, kernel");
}

}  // namespace kvtier::gpu

#endif  // KVTIER_CUDA_H_
