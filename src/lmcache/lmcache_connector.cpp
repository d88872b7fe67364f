// libkvtier_lmcache.so: LMCache's native remote connector ABI
// (rust/remote_backend/include/connector_api.h, LMCache >= 0.3.x
// "rust_remote" storage plugin) implemented over the kvtier C ABI.
//
// LMCache dlopens this library, strips the `rust_remote.connector.` prefix
// from its extra_config keys and passes them to connector_create as a JSON
// object. Keys understood (see docs/engines.md):
//   path (or base_path)   store folder, required
//   capacity_gb           capacity in GiB (or capacity_bytes)
//   any kvtier::Options field (io_backend, segment_size_bytes, ram_tier_bytes,
//   ...), as the C ABI's options JSON names it; an unknown key fails the open
//   namespace             namespace display name (default "lmcache")
//   any namespace identity field (model_id, dtype, layout, tp_rank, ...)
//   use_odirect, alignment: accepted and ignored (kvtier picks O_DIRECT).
// Problems are reported on stderr, prefixed "kvtier_lmcache:".
//
// Return conventions (LMCache's): exists 1/0; put 0 ok / -1; get 0 ok,
// 1 missing, -1 error (including a buffer too small, when *out_len gets the
// size needed); remove 1 removed, 0 absent, -1; file_size 0/1/-1;
// list_keys 0 ok / -1 (when out_cap is too small *out_len gets the bytes
// needed). Keys are NUL-terminated strings of 1..255 bytes.
// Thread-safe: every call may come from any thread.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "kvtier/c_api.h"

#define KVTIER_LMCACHE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct Connector {
  kvtier_store* store = nullptr;
  kvtier_ns ns = 0;
};

constexpr const char* kPrefix = "rust_remote.connector.";

void Log(const std::string& msg) { std::fprintf(stderr, "kvtier_lmcache: %s\n", msg.c_str()); }

void LogLast(const char* what, int rc) {
  Log(std::string(what) + ": " + kvtier_code_name(rc) + ": " + kvtier_last_error());
}

bool IsSpecField(const std::string& k) {
  static const char* kFields[] = {"model_id", "model_revision", "weights_fingerprint", "tokenizer",
                                  "adapter", "dtype", "layout", "block_tokens", "block_bytes",
                                  "tp_rank", "tp_size", "hash_scheme", "hash_seed", "tenant_salt"};
  for (const char* f : kFields)
    if (k == f) return true;
  return false;
}

Connector* Create(const char* cfg, size_t len) {
  using nlohmann::json;
  json j = json::object();
  if (cfg != nullptr && len > 0) {
    j = json::parse(cfg, cfg + len, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      Log("config is not a JSON object");
      return nullptr;
    }
  }
  std::string path;
  json options = json::object();
  json spec = {{"name", "lmcache"}, {"layout", "lmcache-chunk"}};
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string k = it.key();
    if (k.rfind(kPrefix, 0) == 0) k = k.substr(std::strlen(kPrefix));
    const json& v = it.value();
    if (k == "path" || k == "base_path") {
      if (!v.is_string() || v.get<std::string>().empty()) {
        Log("'" + k + "' must be a non-empty string");
        return nullptr;
      }
      path = v.get<std::string>();
    } else if (k == "capacity_gb") {
      if (!v.is_number() || v.get<double>() <= 0) {
        Log("'capacity_gb' must be a positive number");
        return nullptr;
      }
      options["capacity_bytes"] = static_cast<uint64_t>(v.get<double>() * double(1ull << 30));
    } else if (k == "namespace" || k == "name") {
      spec["name"] = v;
    } else if (IsSpecField(k)) {
      spec[k] = v;
    } else if (k == "use_odirect" || k == "alignment") {
      // Keys of LMCache's file-system connector; kvtier decides these itself.
    } else {
      // An Options field, or a mistake: kvtier_open knows every option (a
      // list here went stale) and refuses an unknown one by name.
      options[k] = v;
    }
  }
  if (path.empty()) {
    Log("config needs 'path' (rust_remote.connector.path: the store folder)");
    return nullptr;
  }
  auto c = new Connector();
  int rc = kvtier_open(path.c_str(), options.dump().c_str(), &c->store);
  if (rc != KVTIER_OK) {
    LogLast(("open " + path).c_str(), rc);
    delete c;
    return nullptr;
  }
  rc = kvtier_register_namespace_json(c->store, spec.dump().c_str(), &c->ns);
  if (rc != KVTIER_OK) {
    LogLast("register namespace", rc);
    kvtier_free(c->store);
    delete c;
    return nullptr;
  }
  return c;
}

// Runs f, turning a C++ exception (only std::bad_alloc can happen here)
// into `fail`.
template <typename F>
int32_t Guarded(int32_t fail, F&& f) noexcept {
  try {
    return f();
  } catch (const std::exception& e) {
    Log(e.what());
  } catch (...) {
    Log("unexpected error");
  }
  return fail;
}

bool KeyOk(const char* key) {
  if (key == nullptr) return false;
  size_t n = strnlen(key, KVTIER_MAX_KEY_BYTES + 1);
  if (n == 0 || n > KVTIER_MAX_KEY_BYTES) {
    Log("key length must be 1..255 bytes");
    return false;
  }
  return true;
}

struct ListCtx {
  std::string out;
};

int AppendKey(void* ctx, kvtier_ns, const void* key, size_t key_len, uint64_t) {
  auto* l = static_cast<ListCtx*>(ctx);
  try {
    if (!l->out.empty()) l->out.push_back('\n');
    l->out.append(static_cast<const char*>(key), key_len);
  } catch (...) {
    return 1;  // out of memory: stop
  }
  return 0;
}

}  // namespace

KVTIER_LMCACHE_EXPORT void* connector_create(const char* config_json, size_t config_json_len) {
  try {
    return Create(config_json, config_json_len);
  } catch (...) {
    Log("connector_create failed: out of memory");
    return nullptr;
  }
}

KVTIER_LMCACHE_EXPORT void connector_destroy(void* handle) {
  auto* c = static_cast<Connector*>(handle);
  if (c == nullptr) return;
  kvtier_free(c->store);
  delete c;
}

KVTIER_LMCACHE_EXPORT int32_t connector_exists(void* handle, const char* key) {
  auto* c = static_cast<Connector*>(handle);
  if (c == nullptr || !KeyOk(key)) return 0;
  int present = 0;
  int rc = kvtier_contains(c->store, c->ns, key, std::strlen(key), &present);
  if (rc != KVTIER_OK) LogLast("exists", rc);
  return rc == KVTIER_OK && present ? 1 : 0;
}

KVTIER_LMCACHE_EXPORT int32_t connector_put(void* handle, const char* key, const uint8_t* data,
                                            size_t data_len) {
  auto* c = static_cast<Connector*>(handle);
  if (c == nullptr || !KeyOk(key) || (data == nullptr && data_len != 0)) return -1;
  int rc = kvtier_put(c->store, c->ns, key, std::strlen(key), data, data_len);
  if (rc != KVTIER_OK) {
    if (rc != KVTIER_NOT_ADMITTED) LogLast("put", rc);
    return -1;
  }
  return 0;
}

KVTIER_LMCACHE_EXPORT int32_t connector_get(void* handle, const char* key, uint8_t* out_buf,
                                            size_t out_cap, size_t* out_len) {
  auto* c = static_cast<Connector*>(handle);
  if (c == nullptr || !KeyOk(key) || out_len == nullptr || (out_buf == nullptr && out_cap != 0)) return -1;
  const size_t klen = std::strlen(key);
  uint64_t size = 0;
  int rc = kvtier_get(c->store, c->ns, key, klen, out_buf, out_cap, &size);
  if (rc == KVTIER_OK) {
    *out_len = size;
    return 0;
  }
  if (rc == KVTIER_NOT_FOUND || rc == KVTIER_TIMED_OUT) return 1;
  LogLast("get", rc);
  if (rc == KVTIER_BUFFER_TOO_SMALL && kvtier_block_size(c->store, c->ns, key, klen, &size) == KVTIER_OK)
    *out_len = size;
  return -1;
}

KVTIER_LMCACHE_EXPORT int32_t connector_remove(void* handle, const char* key) {
  auto* c = static_cast<Connector*>(handle);
  if (c == nullptr || !KeyOk(key)) return -1;
  const size_t klen = std::strlen(key);
  int present = 0;
  int rc = kvtier_contains(c->store, c->ns, key, klen, &present);
  if (rc == KVTIER_OK && !present) return 0;
  if (rc == KVTIER_OK) rc = kvtier_remove(c->store, c->ns, key, klen);
  if (rc != KVTIER_OK) {
    LogLast("remove", rc);
    return -1;
  }
  return 1;
}

KVTIER_LMCACHE_EXPORT int32_t connector_file_size(void* handle, const char* key, uint64_t* out_size) {
  auto* c = static_cast<Connector*>(handle);
  if (c == nullptr || !KeyOk(key) || out_size == nullptr) return -1;
  int rc = kvtier_block_size(c->store, c->ns, key, std::strlen(key), out_size);
  if (rc == KVTIER_OK) return 0;
  if (rc == KVTIER_NOT_FOUND) return 1;
  LogLast("file_size", rc);
  return -1;
}

KVTIER_LMCACHE_EXPORT int32_t connector_list_keys(void* handle, char* out_buf, size_t out_cap,
                                                  size_t* out_len) {
  auto* c = static_cast<Connector*>(handle);
  if (c == nullptr || out_len == nullptr || (out_buf == nullptr && out_cap != 0)) return -1;
  return Guarded(-1, [&]() -> int32_t {
    ListCtx l;
    int rc = kvtier_list_keys(c->store, c->ns, nullptr, 0, AppendKey, &l);
    if (rc != KVTIER_OK) {
      LogLast("list_keys", rc);
      return -1;
    }
    *out_len = l.out.size();
    if (l.out.size() > out_cap) return -1;  // *out_len says how much is needed
    std::memcpy(out_buf, l.out.data(), l.out.size());
    if (l.out.size() < out_cap) out_buf[l.out.size()] = '\0';
    return 0;
  });
}
