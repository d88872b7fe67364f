// Inside the capi room: the C ABI's handle and the helpers its files share
// (c_api.cc: the store; c_api_gpu.cc: the GPU path). Every entry point runs
// inside Guard(), so no exception crosses into C.
#ifndef KVTIER_SRC_CAPI_C_API_INTERNAL_H_
#define KVTIER_SRC_CAPI_C_API_INTERNAL_H_

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <vector>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/c_api.h"
#include "kvtier/cuda.h"
#include "kvtier/store.h"

struct kvtier_store {
  std::unique_ptr<kvtier::Store> store;
  int efd = -1;
  std::atomic<bool> closed{false};
  std::mutex mu;
  std::condition_variable idle_cv;
  std::deque<kvtier_completion> done;  // finished, not yet polled
  uint64_t inflight = 0;               // submitted, callback not yet run
  std::atomic<uint64_t> pending{0};    // submitted, not yet polled
  // The GPU path (c_api_gpu.cc): made on first use; GPU calls hold the lock
  // shared, close holds it alone to destroy the Transfer before the store.
  std::shared_mutex gpu_mu;
  std::unique_ptr<kvtier::gpu::Transfer> gpu;
  int gpu_device = -1;       // the device `gpu` serves
  kvtier::Status gpu_error;  // why the GPU path cannot run here, once tried
  // The process that opened it, and the forks it had seen then: a forked
  // child holds a copy of the handle without the store's threads (and shares
  // its eventfd and service connection with the parent), so it may not use it.
  long opener_pid = 0;
  uint64_t forks_at_open = 0;
};

namespace kvtier::capi {

using kvtier::Code;
using kvtier::Status;

static_assert(static_cast<int>(Code::kAborted) == KVTIER_ABORTED, "codes must match kvtier::Code");
static_assert(static_cast<int>(Code::kBufferTooSmall) == KVTIER_BUFFER_TOO_SMALL);
static_assert(sizeof(kvtier_fragment) == sizeof(kvtier::Fragment));
static_assert(sizeof(kvtier_mut_fragment) == sizeof(kvtier::MutableFragment));

inline thread_local std::string t_error;

inline int SetError(int code, const char* msg) noexcept {
  try {
    t_error = msg;
  } catch (...) {
    t_error.clear();
  }
  return code;
}

inline int Report(const Status& st) noexcept {
  if (st.ok()) {
    t_error.clear();
    return KVTIER_OK;
  }
  return SetError(static_cast<int>(st.code()), st.message().c_str());
}

template <typename F>
inline int Guard(F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return SetError(KVTIER_NO_SPACE, "out of memory");
  } catch (const std::exception& e) {
    return SetError(KVTIER_IO_ERROR, e.what());
  } catch (...) {
    return SetError(KVTIER_IO_ERROR, "unexpected internal error");
  }
}

inline int Invalid(const char* msg) { return SetError(KVTIER_INVALID_ARGUMENT, msg); }

// Forks this process has made (a pthread_atfork child handler counts them
// from the first open on): a handle opened before one is the parent's.
extern std::atomic<uint64_t> g_forks;
inline bool OpenedBeforeFork(const kvtier_store* s) {
  return s->forks_at_open != g_forks.load(std::memory_order_relaxed);
}
int ForkedError(const kvtier_store* s);

// Checks that the handle is usable (non-null, not closed, not the parent's).
inline int CheckStore(kvtier_store* s) {
  if (s == nullptr) return Invalid("null kvtier_store handle");
  if (OpenedBeforeFork(s)) return ForkedError(s);
  if (s->closed.load(std::memory_order_acquire)) return SetError(KVTIER_CLOSED, "store is closed");
  return KVTIER_OK;
}

inline int CheckKey(const void* key, size_t len) {
  if (key == nullptr && len != 0) return Invalid("null key pointer");
  if (len == 0 || len > KVTIER_MAX_KEY_BYTES)
    return SetError(KVTIER_INVALID_ARGUMENT,
                    ("key length " + std::to_string(len) + " is outside 1..255").c_str());
  return KVTIER_OK;
}

inline int CheckFrags(const void* frags, size_t n) {
  if (frags == nullptr && n != 0) return Invalid("null fragment list");
  return KVTIER_OK;
}

inline std::string_view Key(const void* key, size_t len) {
  return std::string_view(static_cast<const char*>(key), len);
}

// The n keys of a kvtier_key list, each checked, into `out`.
inline int KeyList(const kvtier_key* keys, size_t n, std::vector<std::string_view>* out) {
  out->clear();
  out->reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (int rc = CheckKey(keys[i].data, keys[i].size)) return rc;
    out->push_back(Key(keys[i].data, keys[i].size));
  }
  return KVTIER_OK;
}

// remove_batch, contains_batch, touch_batch: call(keys, flags) over the
// checked key list, then a byte per key into `out` (flags is null when out
// is; only contains needs an answer).
template <typename F>
int KeyFlagsCall(kvtier_store* s, const kvtier_key* keys, size_t n, uint8_t* out, bool out_required, F&& call) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (keys == nullptr && n != 0) return Invalid("null key list");
    if (out_required && out == nullptr) return Invalid("null output pointer");
    std::vector<std::string_view> v;
    if (int rc = KeyList(keys, n, &v)) return rc;
    std::vector<bool> flags;
    kvtier::Status st = call(std::span<const std::string_view>(v), out != nullptr ? &flags : nullptr);
    if (st.ok() && out != nullptr)
      for (size_t i = 0; i < n; ++i) out[i] = flags[i] ? 1 : 0;
    return Report(st);
  });
}

inline std::span<const kvtier::Fragment> Frags(const kvtier_fragment* f, size_t n) {
  return {reinterpret_cast<const kvtier::Fragment*>(f), n};
}
inline std::span<const kvtier::MutableFragment> MutFrags(const kvtier_mut_fragment* f, size_t n) {
  return {reinterpret_cast<const kvtier::MutableFragment*>(f), n};
}

// Copies `text` with its NUL into buf (cap bytes) and its length to *out_len;
// BUFFER_TOO_SMALL saying how many bytes `what` needs.
inline int CopyOut(const std::string& text, char* buf, size_t cap, size_t* out_len, const char* what) {
  *out_len = text.size();
  if (cap < text.size() + 1)
    return SetError(KVTIER_BUFFER_TOO_SMALL,
                    (std::string(what) + " need " + std::to_string(text.size() + 1) + " bytes").c_str());
  std::memcpy(buf, text.c_str(), text.size() + 1);
  return Report(Status::OK());
}

inline const char* Str(const char* p) { return p == nullptr ? "" : p; }

// A timeout_us argument as a deadline: 0, or one too far to add to the
// clock (2^50 us is 35 years), is none.
inline kvtier::Clock::time_point DeadlineAfterUs(uint64_t timeout_us) {
  if (timeout_us == 0 || timeout_us >= (uint64_t{1} << 50)) return kvtier::kNoDeadline;
  return kvtier::Clock::now() + std::chrono::microseconds(timeout_us);
}

// Called on kvtier's threads (or inline) when an async operation finishes.
inline void Complete(kvtier_store* s, uint64_t user_data, uint32_t op, const Status& st, uint64_t size) noexcept {
  kvtier_completion c{user_data, size, static_cast<int32_t>(st.code()), op};
  std::lock_guard<std::mutex> l(s->mu);
  try {
    s->done.push_back(c);
  } catch (...) {
    // Out of memory: the completion is lost, which would hang a waiter;
    // nothing better can be done here without allocating.
  }
  if (s->done.size() == 1) {
    const uint64_t one = 1;
    ssize_t w = ::write(s->efd, &one, sizeof(one));
    (void)w;  // the counter cannot overflow: it is cleared when drained
  }
  if (--s->inflight == 0) s->idle_cv.notify_all();
}

// Registers an async submission; undone by Complete().
inline void Begin(kvtier_store* s) {
  std::lock_guard<std::mutex> l(s->mu);
  ++s->inflight;
  s->pending.fetch_add(1, std::memory_order_relaxed);
}

// Destroys the handle's GPU path, if it has one (c_api_gpu.cc): waits for
// its copies in flight; the store may close after.
void DropGpu(kvtier_store* s);

}  // namespace kvtier::capi

#endif  // KVTIER_SRC_CAPI_C_API_INTERNAL_H_
