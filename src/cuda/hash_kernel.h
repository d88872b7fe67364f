// XXH3-64 of blocks still in device memory, computed on the GPU: a put from
// the device then needs no host pass over its bytes (on an H200 host that
// pass, reading every byte the link just wrote, was what held device -> RAM
// puts below the link's speed), and the checksum covers the PCIe copy too.
// The value is exactly XXH3_64bits' (the record format's payload checksum);
// tests/cuda checks it against the CPU for many lengths and layouts.
#ifndef KVTIER_SRC_CUDA_HASH_KERNEL_H_
#define KVTIER_SRC_CUDA_HASH_KERNEL_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvtier::gpu {

// One fragment of a payload in device memory; `end` is the payload offset
// where it ends (fragments in payload order).
struct HashFrag {
  const uint8_t* ptr;
  uint64_t end;
};
// A payload: its fragments are frags[frag_begin, frag_begin + frag_count);
// its full 1 KiB XXH3 blocks get scratch rows [block_begin, block_begin +
// (len - 1) / 1024).
struct HashPayload {
  uint64_t len;
  uint64_t block_begin;
  uint32_t frag_begin, frag_count;
};

// Whether the GPU can hash this payload: longer than 240 bytes (shorter
// inputs take other XXH3 code paths, hashed on the host), every fragment
// pointer 8-byte aligned and every fragment but the last a multiple of 8.
bool GpuHashable(const HashFrag* frags, uint32_t count, uint64_t len);

// Copies XXH3's default secret and constants to the device (once per
// process and device; cheap to call again).
cudaError_t InitGpuHash();

// Hashes payloads[0, n) into out[0, n) (device memory), on `stream`.
// `payloads`, `frags` and `scratch` are device memory; scratch holds 8
// uint64 per full 1 KiB block of all n payloads.
cudaError_t LaunchGpuHash(const HashPayload* payloads, size_t n, const HashFrag* frags, uint64_t total_blocks,
                          uint64_t* scratch, uint64_t* out, cudaStream_t stream);

}  // namespace kvtier::gpu

#endif  // KVTIER_SRC_CUDA_HASH_KERNEL_H_
