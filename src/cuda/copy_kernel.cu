#include <cstdint>
#include <cstdlib>
#include <vector>

#include "cuda/copy_kernel.h"

namespace kvtier::gpu {

namespace {

// A piece is cut into tiles of at most kTileBytes on the host; each thread
// block copies one tile at a time. Reading host memory over PCIe takes a few
// microseconds per load, so the link is only full with many loads in flight:
// each thread issues kUnroll independent 16-byte loads before its stores
// (one load in flight per thread left most of the link idle; docs/e2e.md).
constexpr size_t kTileBytes = 64u << 10;
constexpr int kThreads = 256;
constexpr int kUnroll = 4;

__global__ void __launch_bounds__(kThreads) CopyTilesKernel(const CopyPiece* __restrict__ tiles, size_t count) {
  for (size_t i = blockIdx.x; i < count; i += gridDim.x) {
    const CopyPiece p = tiles[i];
    const uintptr_t a = reinterpret_cast<uintptr_t>(p.dst) | reinterpret_cast<uintptr_t>(p.src) | p.size;
    if ((a & 15) == 0) {
      const int4* __restrict__ s = static_cast<const int4*>(p.src);
      int4* __restrict__ d = static_cast<int4*>(p.dst);
      const size_t n = p.size / 16;
      size_t j = threadIdx.x;
      for (; j + (kUnroll - 1) * kThreads < n; j += kUnroll * kThreads) {
        int4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) v[u] = s[j + u * kThreads];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) d[j + u * kThreads] = v[u];
      }
      for (; j < n; j += kThreads) d[j] = s[j];
    } else {
      const unsigned char* s = static_cast<const unsigned char*>(p.src);
      unsigned char* d = static_cast<unsigned char*>(p.dst);
      for (size_t j = threadIdx.x; j < p.size; j += kThreads) d[j] = s[j];
    }
  }
}

unsigned CopyBlocks() {
  // Tuning knob for measurements (gpu_call_probe.py): the thread blocks one
  // launch uses, i.e. the SMs a load takes from the model while it runs.
  static const unsigned blocks = [] {
    const char* e = std::getenv("KVTIER_GPU_COPY_BLOCKS");
    const long v = e != nullptr ? std::strtol(e, nullptr, 10) : 0;
    return v > 0 && v <= 1024 ? static_cast<unsigned>(v) : 32u;
  }();
  return blocks;
}

}  // namespace

cudaError_t LaunchCopyKernel(const CopyPiece* pieces, size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  std::vector<CopyPiece> tiles;
  tiles.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const CopyPiece& p = pieces[i];
    for (size_t off = 0; off < p.size; off += kTileBytes)
      tiles.push_back({static_cast<uint8_t*>(p.dst) + off, static_cast<const uint8_t*>(p.src) + off,
                       p.size - off < kTileBytes ? p.size - off : kTileBytes});
  }
  const size_t bytes = tiles.size() * sizeof(CopyPiece);
  void* dev = nullptr;
  cudaError_t e = cudaMallocAsync(&dev, bytes, stream);
  if (e != cudaSuccess) return e;
  // From pageable memory: staged before the call returns, so `tiles` can go.
  e = cudaMemcpyAsync(dev, tiles.data(), bytes, cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess) {
    const unsigned grid = static_cast<unsigned>(tiles.size() < CopyBlocks() ? tiles.size() : CopyBlocks());
    CopyTilesKernel<<<grid, kThreads, 0, stream>>>(static_cast<const CopyPiece*>(dev), tiles.size());
    e = cudaGetLastError();
  }
  cudaError_t f = cudaFreeAsync(dev, stream);
  return e != cudaSuccess ? e : f;
}

}  // namespace kvtier::gpu
