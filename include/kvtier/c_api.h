/* kvtier C ABI: a stable C interface over kvtier::Store (libkvtier.so).
 *
 * Stability rules
 * - kvtier_abi_version() returns KVTIER_ABI_VERSION of the library actually
 *   loaded. Callers compare it with the KVTIER_ABI_VERSION they were compiled
 *   against: the major part (version >> 16) must be equal; the library's
 *   minor part (version & 0xffff) must be >= the caller's.
 * - Within one major version, functions are only added, never removed or
 *   changed; enum values are only added; structs passed in by the caller
 *   start with a `struct_size` field (set it to sizeof(the struct)) and only
 *   grow at the end, so an older caller's smaller struct stays valid.
 * - Structs the library fills in (kvtier_completion) never change layout
 *   within a major version.
 *
 * Errors
 * - Every fallible call returns an int status: KVTIER_OK (0) or a
 *   kvtier_code, equal to kvtier::Code of the C++ API.
 * - kvtier_last_error() returns the message of the last call that failed on
 *   the calling thread ("" after a success), e.g. "unknown namespace ...".
 * - No C++ exception and no abort crosses this boundary: running out of
 *   memory is reported as KVTIER_NO_SPACE ("out of memory").
 *
 * Thread safety
 * - A kvtier_store may be used from any number of threads at once, except
 *   kvtier_free(), which must be the last call on the handle.
 * - kvtier_close() may race with other calls: they return KVTIER_CLOSED.
 *
 * Buffers
 * - Puts copy the payload before they return (async ones too): the caller
 *   may reuse its buffers at once.
 * - Gets write into caller buffers; for kvtier_get_async they must stay
 *   valid until its completion has been returned by kvtier_poll().
 *
 * Keys are opaque byte strings of 1..255 bytes (not NUL-terminated).
 */
#ifndef KVTIER_C_API_H_
#define KVTIER_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVTIER_ABI_VERSION ((1u << 16) | 8u) /* 1.8: kvtier_get_batch_timeout; 1.7: kvtier_list_keys_after; 1.6: kvtier_touch_batch; 1.5: kvtier_remove_batch, kvtier_contains_batch; 1.4: kvtier_gpu_set_copy_method, kvtier_gpu_stats_json; 1.3: kvtier_destroy_store; 1.2: the GPU path; 1.1: kvtier_register_memory, unix:/auto: opens */
#define KVTIER_MAX_KEY_BYTES 255

/* Status codes: equal to kvtier::Code. */
enum kvtier_code {
  KVTIER_OK = 0,
  KVTIER_NOT_FOUND = 1,          /* key, namespace or file absent (a miss too) */
  KVTIER_CORRUPTION = 2,
  KVTIER_IO_ERROR = 3,
  KVTIER_NO_SPACE = 4,           /* also: out of memory */
  KVTIER_INVALID_ARGUMENT = 5,
  KVTIER_BUSY = 6,               /* store folder in use by another opener; a handle used after fork */
  KVTIER_NOT_SUPPORTED = 7,
  KVTIER_TIMED_OUT = 8,          /* get deadline passed: treat as a miss */
  KVTIER_NOT_ADMITTED = 9,       /* put declined (queue full, admission) */
  KVTIER_CLOSED = 10,
  KVTIER_BUFFER_TOO_SMALL = 11,
  KVTIER_ABORTED = 12
};

typedef struct kvtier_store kvtier_store; /* opaque */
typedef uint64_t kvtier_ns;               /* namespace id, never 0 */

/* A read-only piece of a payload (gathered in order on put). */
typedef struct kvtier_fragment {
  const void* data;
  size_t size;
} kvtier_fragment;

/* A writable piece of a destination (filled in order on get). */
typedef struct kvtier_mut_fragment {
  void* data;
  size_t size;
} kvtier_mut_fragment;

/* A key: `size` bytes at `data`. */
typedef struct kvtier_key {
  const void* data;
  size_t size;
} kvtier_key;

typedef struct kvtier_put_item {
  kvtier_key key;
  const kvtier_fragment* frags;
  size_t num_frags;
} kvtier_put_item;

typedef struct kvtier_get_item {
  kvtier_key key;
  const kvtier_mut_fragment* frags; /* total size must hold the payload */
  size_t num_frags;
} kvtier_get_item;

/* What a namespace's bytes mean (see kvtier/namespace.h). NULL strings are
 * empty. Every field but `name` is part of the namespace's identity. */
typedef struct kvtier_namespace_spec {
  uint32_t struct_size; /* sizeof(kvtier_namespace_spec) */
  uint32_t block_tokens;
  const char* name;
  const char* model_id;
  const char* model_revision;
  const char* weights_fingerprint;
  const char* tokenizer;
  const char* adapter;
  const char* dtype;
  const char* layout;
  uint64_t block_bytes; /* exact payload size, 0 = variable */
  uint32_t tp_rank;
  uint32_t tp_size;     /* 0 is taken as 1 */
  const char* hash_scheme;
  uint64_t hash_seed;
  const char* tenant_salt;
} kvtier_namespace_spec;

enum kvtier_op { KVTIER_OP_PUT = 1, KVTIER_OP_GET = 2, KVTIER_OP_GET_TO_DEVICE = 3, KVTIER_OP_PUT_FROM_DEVICE = 4 };

/* One finished async operation, returned by kvtier_poll(). */
typedef struct kvtier_completion {
  uint64_t user_data; /* as passed at submission */
  uint64_t size;      /* get: payload bytes written; put: payload bytes */
  int32_t status;     /* kvtier_code */
  uint32_t op;        /* kvtier_op */
} kvtier_completion;

/* ---- Library ------------------------------------------------------------ */
uint32_t kvtier_abi_version(void);
/* Short stable name of a code ("NotFound"); "Unknown" outside the enum. */
const char* kvtier_code_name(int code);
/* Message of the last failed call on this thread; valid until the thread's
 * next kvtier call. Never NULL. */
const char* kvtier_last_error(void);

/* ---- Open / close ---------------------------------------------------------
 * options_json: NULL or a JSON object whose keys are kvtier::Options field
 * names (e.g. {"capacity_bytes": 1073741824, "io_backend": "posix"});
 * io_backend is "auto", "io_uring" or "posix"; "remote" is an object of
 * kvtier::RemoteTierOptions fields (e.g. {"remote": {"enabled": true,
 * "ceph_conf": "/etc/ceph/ceph.conf", "pool": "kvtier"}}). Unknown keys and
 * wrong types are KVTIER_INVALID_ARGUMENT naming the key. A folder opened elsewhere
 * (this process included) is KVTIER_BUSY.
 * `dir` may also name a kvtier service: "unix:/path/to.sock" connects to one,
 * "auto:/store/folder" connects to the folder's service, starting one when
 * none runs (docs/service.md); every call below works the same. "client" is
 * then an object of kvtier::ServiceClientOptions fields (e.g. {"client":
 * {"staging_bytes": 268435456}}). */
int kvtier_open(const char* dir, const char* options_json, kvtier_store** out);
/* A handle belongs to the process that opened it. In a child forked after
 * the open, every call on it is KVTIER_BUSY (the store's threads stayed in
 * the parent; its eventfd and service connection are the parent's too) and
 * kvtier_event_fd is -1; kvtier_close and kvtier_free there let go of the
 * child's copy without touching the parent's store. Open the store in the
 * child instead (through a service when the parent keeps the folder). */
/* Completes queued work, checkpoints, releases the folder. The handle stays
 * valid: later calls return KVTIER_CLOSED. Closing twice is OK. Completions
 * of async calls already submitted can still be polled. */
int kvtier_close(kvtier_store* s);
/* Closes if needed, waits for outstanding async calls and frees the handle.
 * NULL is ignored. */
void kvtier_free(kvtier_store* s);
/* Removes the store in `dir`, its shared-memory RAM tier included
 * (kvtier::Store::Destroy): KVTIER_BUSY while any process has it open,
 * KVTIER_NOT_FOUND when `dir` holds no store. Since 1.3. */
int kvtier_destroy_store(const char* dir);

/* ---- Namespaces ----------------------------------------------------------- */
int kvtier_register_namespace(kvtier_store* s, const kvtier_namespace_spec* spec, kvtier_ns* out);
/* spec_json: an object with the kvtier_namespace_spec field names. */
int kvtier_register_namespace_json(kvtier_store* s, const char* spec_json, kvtier_ns* out);
/* By display name or by the 16-hex-digit id. */
int kvtier_find_namespace(kvtier_store* s, const char* name_or_hex, kvtier_ns* out);
/* Drops every block of the namespace and the namespace. */
int kvtier_remove_namespace(kvtier_store* s, kvtier_ns ns);

/* ---- Blocking I/O ----------------------------------------------------------- */
/* OK when durable. */
int kvtier_put(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len, const void* data,
               size_t size);
int kvtier_putv(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len,
                const kvtier_fragment* frags, size_t num_frags);
/* Writes the payload into buf; *out_size (may be NULL) gets its size. A miss
 * is KVTIER_NOT_FOUND; a buffer too small is KVTIER_BUFFER_TOO_SMALL. */
int kvtier_get(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len, void* buf,
               size_t cap, uint64_t* out_size);
int kvtier_getv(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len,
                const kvtier_mut_fragment* frags, size_t num_frags, uint64_t* out_size);
/* Batches: statuses[i] (and sizes[i] for gets; either may be NULL) per item.
 * Returns KVTIER_OK when every item succeeded, else the first failed item's
 * code (a miss is KVTIER_NOT_FOUND). Argument errors (NULL items with n > 0)
 * fill nothing. */
int kvtier_put_batch(kvtier_store* s, kvtier_ns ns, const kvtier_put_item* items, size_t n,
                     int32_t* statuses);
int kvtier_get_batch(kvtier_store* s, kvtier_ns ns, const kvtier_get_item* items, size_t n,
                     int32_t* statuses, uint64_t* sizes);
/* kvtier_get_batch whose reads start within timeout_us from now (0: no
 * deadline): an item not started by then is KVTIER_TIMED_OUT (a miss) and
 * its fragments are never touched. Reads already on the device complete, so
 * it returns up to one device read after the deadline; once it has
 * returned, nothing writes any item's fragments. (ABI 1.8) */
int kvtier_get_batch_timeout(kvtier_store* s, kvtier_ns ns, const kvtier_get_item* items, size_t n,
                             uint64_t timeout_us, int32_t* statuses, uint64_t* sizes);

/* ---- Lookups (index only) ------------------------------------------------------ */
int kvtier_contains(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len,
                    int* out_present);
/* out_present[i] (not NULL): 1 when keys[i] is present, else 0. Through a
 * service one request per 4,096 keys instead of one per key. */
int kvtier_contains_batch(kvtier_store* s, kvtier_ns ns, const kvtier_key* keys, size_t n,
                          uint8_t* out_present);
/* Counts a use of each present key as a read does, for the reinsertion of hot
 * blocks when their segment is reclaimed: for blocks an engine's upper tier
 * served without reading them here. out_present may be NULL, else
 * out_present[i] is 1 when keys[i] is present. Index only. */
int kvtier_touch_batch(kvtier_store* s, kvtier_ns ns, const kvtier_key* keys, size_t n,
                       uint8_t* out_present);
/* *out_count: how many leading keys are present. */
int kvtier_lookup_prefix(kvtier_store* s, kvtier_ns ns, const kvtier_key* keys, size_t n,
                         size_t* out_count);
/* Payload size of a present key (KVTIER_NOT_FOUND when absent). */
int kvtier_block_size(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len,
                      uint64_t* out_size);

/* Visits the keys of namespace ns (0: every namespace) that start with
 * prefix (prefix_len 0: all), in key order. fn gets each key and its payload
 * size; returning non-zero stops the walk. fn must not call into the store. */
typedef int (*kvtier_key_visitor)(void* ctx, kvtier_ns ns, const void* key, size_t key_len,
                                  uint64_t payload_size);
int kvtier_list_keys(kvtier_store* s, kvtier_ns ns, const void* prefix, size_t prefix_len,
                     kvtier_key_visitor fn, void* ctx);
/* The same walk, resumed strictly after the key (after_ns, after) in
 * (namespace, key) order, whether or not that key is still stored: a caller
 * pages through a large store by passing the last key it was given. The walk
 * seeks there; its cost is the keys it visits. (ABI 1.7) */
int kvtier_list_keys_after(kvtier_store* s, kvtier_ns ns, const void* prefix, size_t prefix_len,
                           kvtier_ns after_ns, const void* after, size_t after_len,
                           kvtier_key_visitor fn, void* ctx);

/* ---- Removal, durability, statistics -------------------------------------------- */
/* OK also when the key was absent. */
int kvtier_remove(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len);
/* Removes n keys with one index flush per 4,096 of them (kvtier_remove flushes
 * once per key): durable on return. out_present (may be NULL) gets 1 for each key
 * that had a block, 0 for an absent one; on an error it says nothing, and any
 * of the keys may be gone or still there. */
int kvtier_remove_batch(kvtier_store* s, kvtier_ns ns, const kvtier_key* keys, size_t n,
                        uint8_t* out_present);
/* Returns when every put submitted before it has completed and its index entry is
 * durable (a read-only open then sees it). */
int kvtier_flush(kvtier_store* s);
/* Shared tier: seals the open segment and waits up to timeout_ms for every
 * sealed segment to be uploaded (Store::ShareNow). KVTIER_TIMED_OUT when the
 * uploads outlast it; KVTIER_OK at once without a shared tier. */
int kvtier_share_now(kvtier_store* s, uint32_t timeout_ms);
/* Says that [base, base+len) is a MAP_SHARED mapping of `fd` at file offset
 * `offset` (a memfd, or a file in /dev/shm): a served store then moves
 * payloads in it straight between the service and that memory (no staging
 * copy). The mapping must stay until kvtier_unregister_memory or close. An
 * embedded store accepts and ignores it. */
int kvtier_register_memory(kvtier_store* s, void* base, size_t len, int fd, uint64_t offset);
int kvtier_unregister_memory(kvtier_store* s, void* base);
/* kvtier::Stats as a JSON object (field names as in kvtier/store.h), NUL
 * terminated. *out_len gets the length without the NUL; when cap is too
 * small the call returns KVTIER_BUFFER_TOO_SMALL and *out_len the length
 * needed. */
int kvtier_stats_json(kvtier_store* s, char* buf, size_t cap, size_t* out_len);

/* ---- Async ------------------------------------------------------------------------
 * Submissions never block the caller. Each one that returns KVTIER_OK yields
 * exactly one kvtier_completion carrying user_data (a rejection at once, e.g.
 * queue full, is a completion too, with its code). A non-OK return (bad
 * arguments, closed store) yields no completion. */
int kvtier_put_async(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len,
                     const kvtier_fragment* frags, size_t num_frags, uint64_t user_data);
/* timeout_us: 0 = no deadline; else a deadline that long from now, after
 * which the completion is KVTIER_TIMED_OUT and the buffers are untouched. */
int kvtier_get_async(kvtier_store* s, kvtier_ns ns, const void* key, size_t key_len,
                     const kvtier_mut_fragment* frags, size_t num_frags, uint64_t timeout_us,
                     uint64_t user_data);
/* Moves up to max finished completions into out[] and returns how many
 * (>= 0), or a negative -kvtier_code on error. timeout_ms: 0 returns at once,
 * > 0 waits up to that long for at least one, -1 waits without limit. */
int kvtier_poll(kvtier_store* s, kvtier_completion* out, size_t max, int timeout_ms);
/* An eventfd (non-blocking) that is readable while completions are waiting.
 * Wait on it with poll/epoll, then call kvtier_poll; kvtier_poll clears it.
 * Owned by the handle: do not close or read it. */
int kvtier_event_fd(kvtier_store* s);
/* Async operations submitted and not yet polled. */
uint64_t kvtier_pending(kvtier_store* s);

/* ---- GPU path (include/kvtier/cuda.h) -------------------------------------------------
 * Blocks move between the store and device memory through pinned host memory: the
 * RAM tier (registered with CUDA, so a hit is one copy over the link) and pinned
 * staging for disk reads, which overlap the copies. The items are the kvtier_get_item
 * / kvtier_put_item of the host calls with DEVICE pointers in their fragments (a
 * cross-layer block: one fragment; per-layer K and V: 2 x layers). `stream` is a
 * cudaStream_t as an integer (torch: torch.cuda.current_stream().cuda_stream); 0 is
 * the legacy default stream, on which copies cannot be batched. A handle serves one
 * device: the one given to kvtier_gpu_bind, else the calling thread's current CUDA
 * device at the first GPU call. Every byte of every fragment must be memory of that
 * device (a fragment running past its allocation is refused).
 * Errors: KVTIER_NOT_SUPPORTED naming why the GPU path cannot run (a library built
 * without CUDA, no driver or device, a store served by `kvtier serve`), at every call;
 * KVTIER_INVALID_ARGUMENT for bad items. Per-item results go to statuses[i]
 * (KVTIER_OK, KVTIER_NOT_FOUND for a miss, KVTIER_BUFFER_TOO_SMALL, or an error) and,
 * for gets, sizes[i] (payload bytes). */

/* KVTIER_OK when the GPU path can run on this handle; else why not. */
int kvtier_gpu_status(kvtier_store* s);
/* Binds the handle's GPU path to `device` (its CUDA ordinal). KVTIER_OK if it already
 * is; KVTIER_INVALID_ARGUMENT if it is bound to another device. */
int kvtier_gpu_bind(kvtier_store* s, int device);
/* How the GPU path copies between host and device from the next call on: "auto"
 * (the default: the copy engines' batch API for pieces of 256 KiB and more, a copy
 * kernel below), "batch", "loop" (one cudaMemcpyAsync per piece) or "kernel" (SMs
 * reading mapped pinned host memory; "loop" where the host side is not mapped). Calls
 * in flight keep theirs. KVTIER_INVALID_ARGUMENT for another name, checked first. */
int kvtier_gpu_set_copy_method(kvtier_store* s, const char* method);
/* The GPU path's counters since the handle's first GPU call, as one JSON object
 * (device, method, blocks and bytes each way, ram_hits, disk_reads, misses, copies,
 * batch_calls, loop_calls, kernel_calls, ...), copied as kvtier_stats_json does. */
int kvtier_gpu_stats_json(kvtier_store* s, char* buf, size_t cap, size_t* out_len);
/* Enqueues every block's copies on `stream` and returns: work queued on the stream
 * afterwards sees the data. With event != 0 (a cudaEvent_t) it is recorded after the
 * last copy. RAM hits are copied at once, disk reads as they complete. Every block is
 * verified before the call returns: disk reads on the host, RAM hits by hashing the
 * bytes that landed on the device (a block that fails is loaded again from disk), so
 * the call waits for the RAM hits' copies. */
int kvtier_get_to_device(kvtier_store* s, kvtier_ns ns, const kvtier_get_item* items, size_t n, uint64_t stream,
                         uint64_t event, int32_t* statuses, uint64_t* sizes);
/* Copies the blocks off the device after the work queued on `stream` (the KV's
 * producer) and puts them. Returns once every block has left the device, or, with
 * wait_durable, once every put is durable; statuses[i] as known by then. */
int kvtier_put_from_device(kvtier_store* s, kvtier_ns ns, const kvtier_put_item* items, size_t n, uint64_t stream,
                           int wait_durable, int32_t* statuses);
/* Async forms: the call enqueues as above and returns; one completion (kvtier_poll,
 * the eventfd) carries user_data when the copies to the device have run
 * (KVTIER_OP_GET_TO_DEVICE; size: bytes loaded) or every put is durable
 * (KVTIER_OP_PUT_FROM_DEVICE), with the first error. statuses/sizes are filled
 * before the call returns, as far as known then. */
int kvtier_get_to_device_async(kvtier_store* s, kvtier_ns ns, const kvtier_get_item* items, size_t n,
                               uint64_t stream, int32_t* statuses, uint64_t* sizes, uint64_t user_data);
int kvtier_put_from_device_async(kvtier_store* s, kvtier_ns ns, const kvtier_put_item* items, size_t n,
                                 uint64_t stream, int32_t* statuses, uint64_t user_data);

#ifdef __cplusplus
}
#endif

#endif /* KVTIER_C_API_H_ */
