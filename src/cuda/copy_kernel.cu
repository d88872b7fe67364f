#include <cstdint>

#include "cuda/copy_kernel.h"

namespace kvtier::gpu {

namespace {

// One thread block per piece at a time; 16-byte vectors when both ends and
// the size allow, bytes otherwise.
__global__ void CopyPiecesKernel(const CopyPiece* pieces, size_t count) {
  for (size_t i = blockIdx.x; i < count; i += gridDim.x) {
    const CopyPiece p = pieces[i];
    const uintptr_t a = reinterpret_cast<uintptr_t>(p.dst) | reinterpret_cast<uintptr_t>(p.src) | p.size;
    if ((a & 15) == 0) {
      const int4* s = static_cast<const int4*>(p.src);
      int4* d = static_cast<int4*>(p.dst);
      for (size_t j = threadIdx.x; j < p.size / 16; j += blockDim.x) d[j] = s[j];
    } else {
      const unsigned char* s = static_cast<const unsigned char*>(p.src);
      unsigned char* d = static_cast<unsigned char*>(p.dst);
      for (size_t j = threadIdx.x; j < p.size; j += blockDim.x) d[j] = s[j];
    }
  }
}

}  // namespace

cudaError_t LaunchCopyKernel(const CopyPiece* pieces, size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const size_t bytes = count * sizeof(CopyPiece);
  void* dev = nullptr;
  cudaError_t e = cudaMallocAsync(&dev, bytes, stream);
  if (e != cudaSuccess) return e;
  // From pageable memory: staged before the call returns, so `pieces` can go.
  e = cudaMemcpyAsync(dev, pieces, bytes, cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess) {
    // 16 blocks of 512 threads saturate the link (limits.md) without taking
    // many SMs from the model.
    const unsigned grid = static_cast<unsigned>(count < 16 ? count : 16);
    CopyPiecesKernel<<<grid, 512, 0, stream>>>(static_cast<const CopyPiece*>(dev), count);
    e = cudaGetLastError();
  }
  cudaError_t f = cudaFreeAsync(dev, stream);
  return e != cudaSuccess ? e : f;
}

}  // namespace kvtier::gpu
