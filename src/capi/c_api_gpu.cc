// The C ABI's GPU path: kvtier_get_to_device and friends over
// kvtier::gpu::Transfer (include/kvtier/cuda.h). Compiled with
// KVTIER_WITH_CUDA when the library carries the GPU path (the CUDA toolkit was
// found at build time); without it every call answers NotSupported saying so.
#include <vector>

#include "capi/c_api_internal.h"
#include "capi/json_config.h"

using namespace kvtier::capi;  // NOLINT: the room's own helpers

namespace kvtier::capi {

namespace {

#ifdef KVTIER_WITH_CUDA
// Makes the handle's Transfer for `device` (-1: the calling thread's current
// one). Caller holds s->gpu_mu alone.
void MakeGpu(kvtier_store* s, int device) {
  Status why = gpu::DeviceStatus();
  if (why.ok()) {
    gpu::TransferOptions o;
    o.device = device >= 0 ? device : gpu::CurrentDevice();
    auto t = gpu::Transfer::Create(s->store.get(), o);
    if (t.ok()) {
      s->gpu = std::move(t).value();
      s->gpu_device = o.device;
      return;
    }
    why = t.status();
  }
  s->gpu_error = Status(Code::kNotSupported, "the GPU path cannot run here: " + why.message());
}

// The handle's Transfer, made on first use. Caller holds s->gpu_mu shared;
// making it takes the lock alone.
Result<gpu::Transfer*> GpuOf(kvtier_store* s, std::shared_lock<std::shared_mutex>* shared) {
  if (s->gpu) return s->gpu.get();
  if (!s->gpu_error.ok()) return s->gpu_error;
  shared->unlock();
  {
    std::unique_lock<std::shared_mutex> alone(s->gpu_mu);
    if (!s->gpu && s->gpu_error.ok()) MakeGpu(s, -1);
  }
  shared->lock();
  if (s->gpu) return s->gpu.get();
  return s->gpu_error;
}

Status Bind(kvtier_store* s, int device) {
  std::unique_lock<std::shared_mutex> alone(s->gpu_mu);
  if (!s->gpu && s->gpu_error.ok()) MakeGpu(s, device);
  if (!s->gpu) return s->gpu_error;
  if (s->gpu_device != device) {
    return Status::InvalidArgument("this handle's GPU path serves device " + std::to_string(s->gpu_device) +
                                   ", not " + std::to_string(device) + " (open one handle per device)");
  }
  return Status::OK();
}

Status SetMethod(kvtier_store* s, gpu::CopyMethod method) {
  std::shared_lock<std::shared_mutex> l(s->gpu_mu);
  auto t = GpuOf(s, &l);
  if (!t.ok()) return t.status();
  (*t)->SetCopyMethod(method);
  return Status::OK();
}

Result<std::string> GpuStatsJson(kvtier_store* s) {
  std::shared_lock<std::shared_mutex> l(s->gpu_mu);
  auto t = GpuOf(s, &l);
  if (!t.ok()) return t.status();
  const gpu::TransferStats st = (*t)->GetStats();
  return GpuStatsToJson(st, s->gpu_device);
}
#else
Status NoCuda() {
  return Status::NotSupported("this libkvtier was built without CUDA: the GPU path is not in it "
                              "(build where the CUDA toolkit is installed)");
}
Result<gpu::Transfer*> GpuOf(kvtier_store*, std::shared_lock<std::shared_mutex>*) { return NoCuda(); }
Status Bind(kvtier_store*, int) { return NoCuda(); }
Status SetMethod(kvtier_store*, gpu::CopyMethod) { return NoCuda(); }
Result<std::string> GpuStatsJson(kvtier_store*) { return NoCuda(); }
#endif

// Blocks whose fragments are device memory, with their keys checked.
template <typename Item>
Status DeviceBlocks(const Item* items, size_t n, std::vector<std::vector<gpu::DeviceFragment>>* frags,
                    std::vector<gpu::DeviceBlock>* blocks) {
  if (items == nullptr && n != 0) return Status::InvalidArgument("null item list");
  frags->resize(n);
  blocks->resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Item& it = items[i];
    if (it.key.data == nullptr || it.key.size == 0 || it.key.size > KVTIER_MAX_KEY_BYTES)
      return Status::InvalidArgument("item " + std::to_string(i) + ": key length is outside 1..255");
    if (it.frags == nullptr && it.num_frags != 0)
      return Status::InvalidArgument("item " + std::to_string(i) + ": null fragment list");
    for (size_t f = 0; f < it.num_frags; ++f) {
      void* p = const_cast<void*>(static_cast<const void*>(it.frags[f].data));
      if (p == nullptr && it.frags[f].size != 0)
        return Status::InvalidArgument("item " + std::to_string(i) + ": null device pointer");
      (*frags)[i].push_back(gpu::DeviceFragment{p, it.frags[f].size});
    }
    (*blocks)[i] = gpu::DeviceBlock{Key(it.key.data, it.key.size), (*frags)[i]};
  }
  return Status::OK();
}

// What every transfer call does after checking its arguments: the blocks
// from the caller's items, then the handle's Transfer under `l` (taken
// here, held by the caller for the call). Returns KVTIER_OK or the error.
template <typename Item>
int StartTransfer(kvtier_store* s, const Item* items, size_t n, std::vector<std::vector<gpu::DeviceFragment>>* frags,
                  std::vector<gpu::DeviceBlock>* blocks, std::shared_lock<std::shared_mutex>* l, gpu::Transfer** out) {
  if (Status st = DeviceBlocks(items, n, frags, blocks); !st.ok()) return Report(st);
  l->lock();
  if (s->closed.load()) return SetError(KVTIER_CLOSED, "store is closed");
  auto t = GpuOf(s, l);
  if (!t.ok()) return Report(t.status());
  *out = *t;
  return KVTIER_OK;
}

int GetToDevice(kvtier_store* s, kvtier_ns ns, const kvtier_get_item* items, size_t n, uint64_t stream,
                uint64_t event, int32_t* statuses, uint64_t* sizes, bool async, uint64_t user_data) {
  if (int rc = CheckStore(s)) return rc;
  if ((statuses == nullptr || sizes == nullptr) && n != 0) return Invalid("null statuses or sizes array");
  std::vector<std::vector<gpu::DeviceFragment>> frags;
  std::vector<gpu::DeviceBlock> blocks;
  std::shared_lock<std::shared_mutex> l(s->gpu_mu, std::defer_lock);
  gpu::Transfer* t = nullptr;
  if (int rc = StartTransfer(s, items, n, &frags, &blocks, &l, &t)) return rc;
  // Per block: its status and the bytes it loaded; returns their sum.
  auto report = [&](const std::vector<Result<uint64_t>>& results) {
    uint64_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      statuses[i] = static_cast<int32_t>(results[i].status().code());
      sizes[i] = results[i].ok() ? *results[i] : 0;
      total += sizes[i];
    }
    return total;
  };
  if (async) {
    // The completion carries the bytes loaded, known when the call returns;
    // the copies may finish before that: whichever comes second completes.
    struct Pending {
      std::mutex mu;
      int left = 2;
      Status st;
      uint64_t bytes = 0;
    };
    auto p = std::make_shared<Pending>();
    auto arrive = [s, user_data, p](const Status* st, uint64_t bytes) {
      std::lock_guard<std::mutex> g(p->mu);
      if (st != nullptr) p->st = *st;
      p->bytes += bytes;
      if (--p->left == 0) Complete(s, user_data, KVTIER_OP_GET_TO_DEVICE, p->st, p->bytes);
    };
    Begin(s);
    arrive(nullptr, report(t->GetToDevice(ns, blocks, reinterpret_cast<cudaStream_t>(stream),
                                          reinterpret_cast<cudaEvent_t>(event),
                                          [arrive](Status st) { arrive(&st, 0); })));
    return Report(Status::OK());
  }
  report(t->GetToDevice(ns, blocks, reinterpret_cast<cudaStream_t>(stream), reinterpret_cast<cudaEvent_t>(event),
                        nullptr));
  return Report(Status::OK());
}

int PutFromDevice(kvtier_store* s, kvtier_ns ns, const kvtier_put_item* items, size_t n, uint64_t stream,
                  bool wait_durable, int32_t* statuses, bool async, uint64_t user_data) {
  if (int rc = CheckStore(s)) return rc;
  if (statuses == nullptr && n != 0) return Invalid("null statuses array");
  std::vector<std::vector<gpu::DeviceFragment>> frags;
  std::vector<gpu::DeviceBlock> blocks;
  std::shared_lock<std::shared_mutex> l(s->gpu_mu, std::defer_lock);
  gpu::Transfer* t = nullptr;
  if (int rc = StartTransfer(s, items, n, &frags, &blocks, &l, &t)) return rc;
  gpu::TransferDone done;
  if (async) {
    Begin(s);
    uint64_t total = 0;
    for (const auto& b : blocks)
      for (const auto& f : b.fragments) total += f.size;
    if (n == 0) {  // nothing will call back
      Complete(s, user_data, KVTIER_OP_PUT_FROM_DEVICE, Status::OK(), 0);
      return Report(Status::OK());
    }
    done = [s, user_data, total](Status st) { Complete(s, user_data, KVTIER_OP_PUT_FROM_DEVICE, st, total); };
  }
  auto results = t->PutFromDevice(ns, blocks, reinterpret_cast<cudaStream_t>(stream), wait_durable && !async,
                                     std::move(done));
  for (size_t i = 0; i < n; ++i) statuses[i] = static_cast<int32_t>(results[i].code());
  return Report(Status::OK());
}

}  // namespace

void DropGpu(kvtier_store* s) {
  std::unique_lock<std::shared_mutex> alone(s->gpu_mu);
  s->gpu.reset();
}

}  // namespace kvtier::capi

extern "C" {

int kvtier_gpu_status(kvtier_store* s) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    std::shared_lock<std::shared_mutex> l(s->gpu_mu);
    return Report(kvtier::capi::GpuOf(s, &l).status());
  });
}

int kvtier_gpu_bind(kvtier_store* s, int device) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    // Argument errors first, with or without the GPU path in the build.
    if (device < 0) return Report(Status::InvalidArgument("device must be a CUDA ordinal >= 0"));
    return Report(kvtier::capi::Bind(s, device));
  });
}

int kvtier_gpu_set_copy_method(kvtier_store* s, const char* method) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (method == nullptr) return Report(Status::InvalidArgument("null copy method"));
    auto m = kvtier::gpu::ParseCopyMethod(method);
    if (!m.ok()) return Report(m.status());
    return Report(kvtier::capi::SetMethod(s, *m));
  });
}

int kvtier_gpu_stats_json(kvtier_store* s, char* buf, size_t cap, size_t* out_len) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (out_len == nullptr || (buf == nullptr && cap != 0)) return Invalid("null buffer or output pointer");
    auto j = kvtier::capi::GpuStatsJson(s);
    if (!j.ok()) return Report(j.status());
    return CopyOut(*j, buf, cap, out_len, "GPU stats");
  });
}

int kvtier_get_to_device(kvtier_store* s, kvtier_ns ns, const kvtier_get_item* items, size_t n, uint64_t stream,
                         uint64_t event, int32_t* statuses, uint64_t* sizes) {
  return Guard([&] { return kvtier::capi::GetToDevice(s, ns, items, n, stream, event, statuses, sizes, false, 0); });
}

int kvtier_get_to_device_async(kvtier_store* s, kvtier_ns ns, const kvtier_get_item* items, size_t n,
                               uint64_t stream, int32_t* statuses, uint64_t* sizes, uint64_t user_data) {
  return Guard([&] { return kvtier::capi::GetToDevice(s, ns, items, n, stream, 0, statuses, sizes, true, user_data); });
}

int kvtier_put_from_device(kvtier_store* s, kvtier_ns ns, const kvtier_put_item* items, size_t n, uint64_t stream,
                           int wait_durable, int32_t* statuses) {
  return Guard(
      [&] { return kvtier::capi::PutFromDevice(s, ns, items, n, stream, wait_durable != 0, statuses, false, 0); });
}

int kvtier_put_from_device_async(kvtier_store* s, kvtier_ns ns, const kvtier_put_item* items, size_t n,
                                 uint64_t stream, int32_t* statuses, uint64_t user_data) {
  return Guard(
      [&] { return kvtier::capi::PutFromDevice(s, ns, items, n, stream, false, statuses, true, user_data); });
}

}  // extern "C"
