// The copy kernel of the GPU path: copies a list of pieces where one side is
// device memory and the other pinned host memory mapped into the device's
// address space. It is for pieces of a few KiB, where the copy engines pay
// one descriptor each; from 256 KiB up the copy engines win (docs/e2e.md).
// $KVTIER_GPU_COPY_BLOCKS sets the thread blocks a launch uses (default 32),
// for measurements.
#ifndef KVTIER_SRC_CUDA_COPY_KERNEL_H_
#define KVTIER_SRC_CUDA_COPY_KERNEL_H_

#include <cuda_runtime_api.h>

#include <cstddef>

namespace kvtier::gpu {

struct CopyPiece {
  void* dst;        // device-accessible address
  const void* src;  // device-accessible address
  size_t size;
};

// Enqueues the copies on `stream`. `pieces` is host memory that may be
// reused when the call returns (it is staged to the device first).
cudaError_t LaunchCopyKernel(const CopyPiece* pieces, size_t count, cudaStream_t stream);

}  // namespace kvtier::gpu

#endif  // KVTIER_SRC_CUDA_COPY_KERNEL_H_
