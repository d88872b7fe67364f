// The C ABI over kvtier::Store. Every entry point runs inside Guard(), so no
// exception (std::bad_alloc included) crosses into C.
#include "kvtier/c_api.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capi/c_api_internal.h"
#include "capi/json_config.h"
#include "kvtier/store.h"

using kvtier::Code;
using kvtier::Status;

using namespace kvtier::capi;  // NOLINT: the room's own helpers

namespace kvtier::capi {

std::atomic<uint64_t> g_forks{0};

int ForkedError(const kvtier_store* s) {
  const std::string msg = "this store handle was opened by process " + std::to_string(s->opener_pid) +
                          ", which has since forked: its threads did not come into this process (pid " +
                          std::to_string(::getpid()) +
                          "). Open the store in this process (a folder another process holds is Busy: share it "
                          "through a service, unix: or auto:)";
  return SetError(KVTIER_BUSY, msg.c_str());
}

namespace {
void CountForksFromNowOn() {
  static std::once_flag once;
  std::call_once(once, [] { ::pthread_atfork(nullptr, nullptr, [] { g_forks.fetch_add(1); }); });
}
}  // namespace

}  // namespace kvtier::capi

extern "C" {

uint32_t kvtier_abi_version(void) { return KVTIER_ABI_VERSION; }

const char* kvtier_code_name(int code) {
  if (code < 0 || code > KVTIER_ABORTED) return "Unknown";
  return kvtier::CodeName(static_cast<Code>(code));
}

const char* kvtier_last_error(void) { return t_error.c_str(); }

int kvtier_open(const char* dir, const char* options_json, kvtier_store** out) {
  return Guard([&]() -> int {
    if (out == nullptr) return Invalid("null output pointer");
    *out = nullptr;
    if (dir == nullptr || *dir == '\0') return Invalid("store folder path is empty");
    kvtier::Options opt;
    auto j = kvtier::capi::ParseObject(Str(options_json), "options");
    if (!j.ok()) return Report(j.status());
    Status st = kvtier::capi::OptionsFromJson(*j, &opt);
    if (!st.ok()) return Report(st);
    CountForksFromNowOn();
    auto handle = std::make_unique<kvtier_store>();
    handle->opener_pid = ::getpid();
    handle->forks_at_open = g_forks.load();
    handle->efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (handle->efd < 0) return Report(Status::FromErrno(errno, "eventfd"));
    auto store = kvtier::Store::Open(dir, opt);
    if (!store.ok()) {
      ::close(handle->efd);
      return Report(store.status());
    }
    handle->store = std::move(store).value();
    *out = handle.release();
    return Report(Status::OK());
  });
}

int kvtier_destroy_store(const char* dir) {
  return Guard([&]() -> int {
    if (dir == nullptr || *dir == '\0') return Invalid("store folder path is empty");
    return Report(kvtier::Store::Destroy(dir));
  });
}

int kvtier_close(kvtier_store* s) {
  return Guard([&]() -> int {
    if (s == nullptr) return Invalid("null kvtier_store handle");
    if (OpenedBeforeFork(s)) {  // the parent's store: this process only lets go of its copy
      s->closed.store(true);
      return Report(Status::OK());
    }
    if (s->closed.exchange(true)) return Report(Status::OK());
    kvtier::capi::DropGpu(s);  // the GPU path goes before its store
    return Report(s->store->Close());
  });
}

void kvtier_free(kvtier_store* s) {
  if (s == nullptr) return;
  Guard([&]() -> int {
    if (OpenedBeforeFork(s)) {
      // Its threads, queues and descriptors are the parent's: destroying
      // the store here would join threads this process does not have.
      // Left as they are; the process's exit reclaims them.
      (void)s->store.release();
      (void)s->gpu.release();
      ::close(s->efd);  // this process's descriptor only
      delete s;
      return KVTIER_OK;
    }
    if (!s->closed.exchange(true)) {
      kvtier::capi::DropGpu(s);
      s->store->Close().IgnoreError();
    }
    {
      std::unique_lock<std::mutex> l(s->mu);
      s->idle_cv.wait(l, [s] { return s->inflight == 0; });
    }
    s->store.reset();
    ::close(s->efd);
    delete s;
    return KVTIER_OK;
  });
}

int kvtier_register_namespace(kvtier_store* s, const kvtier_namespace_spec* spec, kvtier_ns* out) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (spec == nullptr || out == nullptr) return Invalid("null spec or output pointer");
    // Older callers pass a smaller struct: read only the fields it has.
    kvtier_namespace_spec c{};
    if (spec->struct_size < offsetof(kvtier_namespace_spec, tenant_salt) + sizeof(const char*))
      return Invalid("kvtier_namespace_spec.struct_size is too small (set it to sizeof)");
    std::memcpy(&c, spec, sizeof(c));
    kvtier::NamespaceSpec ns;
    ns.name = Str(c.name);
    ns.model_id = Str(c.model_id);
    ns.model_revision = Str(c.model_revision);
    ns.weights_fingerprint = Str(c.weights_fingerprint);
    ns.tokenizer = Str(c.tokenizer);
    ns.adapter = Str(c.adapter);
    ns.dtype = Str(c.dtype);
    ns.layout = Str(c.layout);
    ns.block_tokens = c.block_tokens;
    ns.block_bytes = c.block_bytes;
    ns.tp_rank = c.tp_rank;
    ns.tp_size = c.tp_size == 0 ? 1 : c.tp_size;
    ns.hash_scheme = Str(c.hash_scheme);
    ns.hash_seed = c.hash_seed;
    ns.tenant_salt = Str(c.tenant_salt);
    auto id = s->store->RegisterNamespace(ns);
    if (!id.ok()) return Report(id.status());
    *out = *id;
    return Report(Status::OK());
  });
}

int kvtier_register_namespace_json(kvtier_store* s, const char* spec_json, kvtier_ns* out) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (spec_json == nullptr || out == nullptr) return Invalid("null spec or output pointer");
    auto j = kvtier::capi::ParseObject(spec_json, "namespace spec");
    if (!j.ok()) return Report(j.status());
    kvtier::NamespaceSpec ns;
    Status st = kvtier::capi::SpecFromJson(*j, &ns);
    if (!st.ok()) return Report(st);
    auto id = s->store->RegisterNamespace(ns);
    if (!id.ok()) return Report(id.status());
    *out = *id;
    return Report(Status::OK());
  });
}

int kvtier_find_namespace(kvtier_store* s, const char* name_or_hex, kvtier_ns* out) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (name_or_hex == nullptr || out == nullptr) return Invalid("null name or output pointer");
    auto id = s->store->FindNamespace(name_or_hex);
    if (!id.ok()) return Report(id.status());
    *out = *id;
    return Report(Status::OK());
  });
}

int kvtier_remove_namespace(kvtier_store* s, kvtier_ns ns) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    return Report(s->store->RemoveNamespace(ns));
  });
}

int kvtier_putv(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len,
                const kvtier_fragment* frags, size_t num_frags) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (int rc = CheckKey(key, key_len)) return rc;
    if (int rc = CheckFrags(frags, num_frags)) return rc;
    return Report(s->store->Put(ns, Key(key, key_len), Frags(frags, num_frags)));
  });
}

int kvtier_put(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len, const void* data,
               size_t size) {
  kvtier_fragment f{data, size};
  return kvtier_putv(s, ns, key, key_len, &f, 1);
}

int kvtier_getv(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len,
                const kvtier_mut_fragment* frags, size_t num_frags, uint64_t* out_size) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (int rc = CheckKey(key, key_len)) return rc;
    if (int rc = CheckFrags(frags, num_frags)) return rc;
    for (size_t i = 0; i < num_frags; ++i)
      if (frags[i].data == nullptr && frags[i].size != 0) return Invalid("fragment with null data");
    auto r = s->store->Get(ns, Key(key, key_len), MutFrags(frags, num_frags));
    if (!r.ok()) return Report(r.status());
    if (out_size != nullptr) *out_size = *r;
    return Report(Status::OK());
  });
}

int kvtier_get(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len, void* buf,
               size_t cap, uint64_t* out_size) {
  kvtier_mut_fragment f{buf, cap};
  return kvtier_getv(s, ns, key, key_len, &f, 1, out_size);
}

int kvtier_put_batch(kvtier_store* s, kvtier_ns ns, const kvtier_put_item* items, size_t n,
                     int32_t* statuses) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (items == nullptr && n != 0) return Invalid("null item list");
    std::vector<int32_t> pre(n, KVTIER_OK);  // per-item argument errors
    std::vector<size_t> idx;                  // items passed on to the store
    idx.reserve(n);
    std::vector<kvtier::PutItem> pass;
    pass.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const kvtier_put_item& it = items[i];
      if (CheckKey(it.key.data, it.key.size) != KVTIER_OK || CheckFrags(it.frags, it.num_frags) != KVTIER_OK) {
        pre[i] = KVTIER_INVALID_ARGUMENT;
        continue;
      }
      pass.push_back({Key(it.key.data, it.key.size), Frags(it.frags, it.num_frags)});
      idx.push_back(i);
    }
    std::vector<Status> st = s->store->PutBatch(ns, pass);
    std::vector<const Status*> by_item(n, nullptr);
    for (size_t j = 0; j < idx.size() && j < st.size(); ++j) {
      pre[idx[j]] = static_cast<int32_t>(st[j].code());
      by_item[idx[j]] = &st[j];
    }
    size_t first_i = n;
    for (size_t i = 0; i < n; ++i) {
      if (statuses != nullptr) statuses[i] = pre[i];
      if (first_i == n && pre[i] != KVTIER_OK) first_i = i;
    }
    if (first_i == n) return Report(Status::OK());
    const std::string where = "item " + std::to_string(first_i);
    if (by_item[first_i] != nullptr) return Report(by_item[first_i]->WithContext(where));
    return SetError(pre[first_i], (where + ": invalid key or fragments").c_str());
  });
}

int kvtier_get_batch(kvtier_store* s, kvtier_ns ns, const kvtier_get_item* items, size_t n,
                     int32_t* statuses, uint64_t* sizes) {
  return kvtier_get_batch_timeout(s, ns, items, n, 0, statuses, sizes);
}

int kvtier_get_batch_timeout(kvtier_store* s, kvtier_ns ns, const kvtier_get_item* items, size_t n,
                             uint64_t timeout_us, int32_t* statuses, uint64_t* sizes) {
  const kvtier::Clock::time_point deadline = DeadlineAfterUs(timeout_us);
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (items == nullptr && n != 0) return Invalid("null item list");
    std::vector<int32_t> code(n, KVTIER_OK);
    std::vector<uint64_t> size(n, 0);
    std::vector<size_t> idx;
    std::vector<kvtier::GetItem> pass;
    idx.reserve(n);
    pass.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const kvtier_get_item& it = items[i];
      bool ok = CheckKey(it.key.data, it.key.size) == KVTIER_OK && CheckFrags(it.frags, it.num_frags) == KVTIER_OK;
      for (size_t f = 0; ok && f < it.num_frags; ++f) ok = it.frags[f].data != nullptr || it.frags[f].size == 0;
      if (!ok) {
        code[i] = KVTIER_INVALID_ARGUMENT;
        continue;
      }
      pass.push_back({Key(it.key.data, it.key.size), MutFrags(it.frags, it.num_frags)});
      idx.push_back(i);
    }
    std::vector<kvtier::Result<size_t>> r = s->store->GetBatch(ns, pass, deadline);
    for (size_t j = 0; j < idx.size() && j < r.size(); ++j) {
      if (r[j].ok()) {
        size[idx[j]] = *r[j];
      } else {
        code[idx[j]] = static_cast<int32_t>(r[j].status().code());
      }
    }
    int first = KVTIER_OK;
    size_t first_i = 0;
    for (size_t i = 0; i < n; ++i) {
      if (statuses != nullptr) statuses[i] = code[i];
      if (sizes != nullptr) sizes[i] = size[i];
      if (first == KVTIER_OK && code[i] != KVTIER_OK) {
        first = code[i];
        first_i = i;
      }
    }
    if (first == KVTIER_OK) return Report(Status::OK());
    for (size_t j = 0; j < idx.size() && j < r.size(); ++j)
      if (idx[j] == first_i) return Report(r[j].status().WithContext("item " + std::to_string(first_i)));
    return SetError(first, ("item " + std::to_string(first_i) + ": invalid key or fragments").c_str());
  });
}

int kvtier_contains(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len, int* out_present) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (int rc = CheckKey(key, key_len)) return rc;
    if (out_present == nullptr) return Invalid("null output pointer");
    auto r = s->store->Contains(ns, Key(key, key_len));
    if (!r.ok()) return Report(r.status());
    *out_present = *r ? 1 : 0;
    return Report(Status::OK());
  });
}

int kvtier_touch_batch(kvtier_store* s, kvtier_ns ns, const kvtier_key* keys, size_t n, uint8_t* out_present) {
  return KeyFlagsCall(s, keys, n, out_present, false, [&](auto v, std::vector<bool>* present) {
    return s->store->TouchBatch(ns, v, present);
  });
}

int kvtier_contains_batch(kvtier_store* s, kvtier_ns ns, const kvtier_key* keys, size_t n, uint8_t* out_present) {
  return KeyFlagsCall(s, keys, n, out_present, true, [&](auto v, std::vector<bool>* present) {
    return s->store->ContainsBatch(ns, v, present);
  });
}

int kvtier_lookup_prefix(kvtier_store* s, kvtier_ns ns, const kvtier_key* keys, size_t n, size_t* out_count) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if ((keys == nullptr && n != 0) || out_count == nullptr) return Invalid("null key list or output pointer");
    std::vector<std::string_view> v;
    if (int rc = KeyList(keys, n, &v)) return rc;
    auto r = s->store->LookupPrefix(ns, v);
    if (!r.ok()) return Report(r.status());
    *out_count = *r;
    return Report(Status::OK());
  });
}

int kvtier_block_size(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len, uint64_t* out_size) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (int rc = CheckKey(key, key_len)) return rc;
    if (out_size == nullptr) return Invalid("null output pointer");
    auto r = s->store->Stat(ns, Key(key, key_len));
    if (!r.ok()) return Report(r.status());
    *out_size = r->payload_bytes;
    return Report(Status::OK());
  });
}

namespace {
int ListKeys(kvtier_store* s, kvtier_ns ns, const void* prefix, size_t prefix_len, const kvtier::ListCursor* after,
             kvtier_key_visitor fn, void* ctx) {
  if (int rc = CheckStore(s)) return rc;
  if (fn == nullptr || (prefix == nullptr && prefix_len != 0)) return Invalid("null visitor or prefix");
  std::string_view p = prefix_len == 0 ? std::string_view() : Key(prefix, prefix_len);
  return Report(s->store->ListBlocks(ns, p, after, [&](const kvtier::BlockInfo& b) {
    return fn(ctx, b.ns, b.key.data(), b.key.size(), b.payload_bytes) == 0;
  }));
}
}  // namespace

int kvtier_list_keys(kvtier_store* s, kvtier_ns ns, const void* prefix, size_t prefix_len,
                     kvtier_key_visitor fn, void* ctx) {
  return Guard([&]() -> int { return ListKeys(s, ns, prefix, prefix_len, nullptr, fn, ctx); });
}

int kvtier_list_keys_after(kvtier_store* s, kvtier_ns ns, const void* prefix, size_t prefix_len,
                           kvtier_ns after_ns, const void* after, size_t after_len,
                           kvtier_key_visitor fn, void* ctx) {
  return Guard([&]() -> int {
    if (int rc = CheckKey(after, after_len)) return rc;
    const kvtier::ListCursor cursor{after_ns, std::string(Key(after, after_len))};
    return ListKeys(s, ns, prefix, prefix_len, &cursor, fn, ctx);
  });
}

int kvtier_remove(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (int rc = CheckKey(key, key_len)) return rc;
    return Report(s->store->Remove(ns, Key(key, key_len)));
  });
}

int kvtier_remove_batch(kvtier_store* s, kvtier_ns ns, const kvtier_key* keys, size_t n, uint8_t* out_present) {
  return KeyFlagsCall(s, keys, n, out_present, false, [&](auto v, std::vector<bool>* present) {
    return s->store->RemoveBatch(ns, v, present);
  });
}

int kvtier_flush(kvtier_store* s) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    return Report(s->store->Flush());
  });
}

int kvtier_share_now(kvtier_store* s, uint32_t timeout_ms) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    return Report(s->store->ShareNow(std::chrono::milliseconds(timeout_ms)));
  });
}

int kvtier_register_memory(kvtier_store* s, void* base, size_t len, int fd, uint64_t offset) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    return Report(s->store->RegisterMemory(base, len, fd, offset));
  });
}

int kvtier_unregister_memory(kvtier_store* s, void* base) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    return Report(s->store->UnregisterMemory(base));
  });
}

int kvtier_stats_json(kvtier_store* s, char* buf, size_t cap, size_t* out_len) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (out_len == nullptr || (buf == nullptr && cap != 0)) return Invalid("null buffer or output pointer");
    return CopyOut(kvtier::capi::StatsToJson(s->store->GetStats()), buf, cap, out_len, "stats");
  });
}

int kvtier_put_async(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len,
                     const kvtier_fragment* frags, size_t num_frags, uint64_t user_data) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (int rc = CheckKey(key, key_len)) return rc;
    if (int rc = CheckFrags(frags, num_frags)) return rc;
    uint64_t total = 0;
    for (size_t i = 0; i < num_frags; ++i) total += frags[i].size;
    // Build the callback before counting the operation, so that a failed
    // allocation leaves no phantom in-flight operation behind.
    kvtier::PutCallback cb = [s, user_data, total](Status st) { Complete(s, user_data, KVTIER_OP_PUT, st, total); };
    Begin(s);
    s->store->PutAsync(ns, Key(key, key_len), Frags(frags, num_frags), std::move(cb));
    return Report(Status::OK());
  });
}

int kvtier_get_async(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len,
                     const kvtier_mut_fragment* frags, size_t num_frags, uint64_t timeout_us,
                     uint64_t user_data) {
  return Guard([&]() -> int {
    if (int rc = CheckStore(s)) return rc;
    if (int rc = CheckKey(key, key_len)) return rc;
    if (int rc = CheckFrags(frags, num_frags)) return rc;
    for (size_t i = 0; i < num_frags; ++i)
      if (frags[i].data == nullptr && frags[i].size != 0) return Invalid("fragment with null data");
    const kvtier::Clock::time_point deadline = DeadlineAfterUs(timeout_us);
    kvtier::GetCallback cb = [s, user_data](kvtier::Result<size_t> r) {
      Complete(s, user_data, KVTIER_OP_GET, r.status(), r.ok() ? *r : 0);
    };
    Begin(s);
    s->store->GetAsync(ns, Key(key, key_len), MutFrags(frags, num_frags), deadline, std::move(cb));
    return Report(Status::OK());
  });
}

int kvtier_poll(kvtier_store* s, kvtier_completion* out, size_t max, int timeout_ms) {
  int rc = Guard([&]() -> int {
    if (s == nullptr) return Invalid("null kvtier_store handle");
    if (OpenedBeforeFork(s)) return ForkedError(s);  // its eventfd is the parent's too: never read it here
    if (out == nullptr && max != 0) return Invalid("null completion array");
    auto drain = [&]() -> int {
      std::lock_guard<std::mutex> l(s->mu);
      size_t n = 0;
      while (n < max && !s->done.empty()) {
        out[n++] = s->done.front();
        s->done.pop_front();
      }
      if (s->done.empty()) {
        uint64_t v;
        ssize_t r = ::read(s->efd, &v, sizeof(v));  // clears the counter (EAGAIN if already 0)
        (void)r;
      }
      s->pending.fetch_sub(n, std::memory_order_relaxed);
      return static_cast<int>(n);
    };
    if (max > static_cast<size_t>(INT32_MAX)) max = INT32_MAX;
    int n = drain();
    if (n > 0 || timeout_ms == 0 || max == 0) {
      t_error.clear();
      return -n;  // negated back below: Guard's results are codes
    }
    pollfd p{s->efd, POLLIN, 0};
    int pr = ::poll(&p, 1, timeout_ms < 0 ? -1 : timeout_ms);
    if (pr < 0 && errno != EINTR) return Report(Status::FromErrno(errno, "poll on eventfd"));
    t_error.clear();
    return -drain();
  });
  // The lambda returns error codes (> 0) or negated counts (<= 0); both
  // flip to this function's convention: -code on error, else the count.
  return -rc;
}

int kvtier_event_fd(kvtier_store* s) { return s == nullptr || OpenedBeforeFork(s) ? -1 : s->efd; }

uint64_t kvtier_pending(kvtier_store* s) {
  return s == nullptr ? 0 : s->pending.load(std::memory_order_relaxed);
}

}  // extern "C"
