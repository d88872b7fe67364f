#include "cuda/device_ranges.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <string>

namespace kvtier::gpu {
namespace {

// cuPointerGetAttributes through the runtime's entry point, so the library
// needs no link against libcuda; null where the driver does not offer it.
PFN_cuPointerGetAttributes_v7000 PointerAttributesFn() {
  static const PFN_cuPointerGetAttributes_v7000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &f, 7000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return static_cast<PFN_cuPointerGetAttributes_v7000>(nullptr);
    }
    return reinterpret_cast<PFN_cuPointerGetAttributes_v7000>(f);
  }();
  return fn;
}

std::string Hex(uintptr_t a) {
  char buf[2 + 16 + 1];
  snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(a));
  return buf;
}

}  // namespace

const DeviceRanges::Range* DeviceRanges::Find(uintptr_t a) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), a,
                             [](uintptr_t x, const Range& r) { return x < r.begin; });
  if (it == ranges_.begin()) return nullptr;
  --it;
  return a < it->end ? &*it : nullptr;
}

Result<DeviceRanges::Range> DeviceRanges::Query(uintptr_t a) {
  ++queries_;
  cudaPointerAttributes attr{};
  cudaError_t e = cudaPointerGetAttributes(&attr, reinterpret_cast<const void*>(a));
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it for the caller's next check
    return Status::InvalidArgument("address " + Hex(a) + " is not CUDA memory (" + cudaGetErrorName(e) + ")");
  }
  const bool device_memory = attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
  if (!device_memory || attr.device != device_) {
    return Status::InvalidArgument("fragments must be memory of device " + std::to_string(device_) +
                                   (device_memory ? ", not of device " + std::to_string(attr.device)
                                                  : ", not host memory"));
  }
  Range r{a, a + 1};
  if (PointerAttributesFn() != nullptr) {
    CUpointer_attribute which[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    CUdeviceptr start = 0;
    size_t size = 0;
    void* data[2] = {&start, &size};
    if (PointerAttributesFn()(2, which, data, static_cast<CUdeviceptr>(a)) == CUDA_SUCCESS && size != 0 &&
        start <= a && a - start < size) {
      r = Range{static_cast<uintptr_t>(start), static_cast<uintptr_t>(start) + size};
    }
  }
  return r;
}

Status DeviceRanges::Check(const void* p, size_t n) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  if (n == 0) return Status::OK();
  if (begin + n < begin) return Status::InvalidArgument("fragment at " + Hex(begin) + " wraps the address space");
  const uintptr_t end = begin + n;
  for (uintptr_t a = begin; a < end;) {
    const Range* found = Find(a);
    Range r{};
    if (found != nullptr) {
      r = *found;
    } else {
      Result<Range> q = Query(a);
      if (!q.ok()) {
        if (a == begin) return q.status();
        return Status::InvalidArgument("fragment at " + Hex(begin) + " of " + std::to_string(n) +
                                       " bytes runs past its allocation's end at " + Hex(a) + ": " +
                                       q.status().message());
      }
      r = *q;
      if (r.end - r.begin == 1) return Status::OK();  // no range from the driver: the first byte decides
      auto at = std::upper_bound(ranges_.begin(), ranges_.end(), r.begin,
                                 [](uintptr_t x, const Range& y) { return x < y.begin; });
      ranges_.insert(at, r);
    }
    a = r.end;
  }
  return Status::OK();
}

}  // namespace kvtier::gpu
