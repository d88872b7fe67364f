"""kvtier as an LMCache L2 store, through MP mode's `native_plugin` adapter.

LMCache's multiprocess server loads third-party L2 stores with its
`native_plugin` adapter (lmcache/v1/distributed/l2_adapters/
native_plugin_l2_adapter.py): it imports `module_path.class_name`, builds it
with `adapter_params` as keyword arguments, and wraps it in its
NativeConnectorL2Adapter, which submits batches and drains completions from
a thread of its own whenever the client's eventfd is readable. Enable it
with

    --l2-adapter '{"type": "native_plugin", "module_path": "kvtier.adapters.lmcache",
      "class_name": "KvtierL2Connector", "max_capacity_gb": 0,
      "adapter_params": {"path": "/nvme/kvtier", "capacity_gb": 512,
                         "dtype": "bfloat16", "chunk_tokens": 256}}'

Every submit returns at once with a future id: sets and gets are kvtier's
async puts and gets (the payload is copied, or read, by kvtier's own threads;
completions arrive on its eventfd, through one poller thread per store, and
no kvtier call holds the GIL); exists and delete run on a small worker pool.
A finished batch is queued and this client's eventfd written;
drain_completions() empties both. A set is acknowledged only when every
block of it is durable. A get succeeds per key only when the stored block
fills the buffer exactly.

A store that cannot be opened is logged once; the connector then answers
misses and failed transfers, and the server runs without this L2.

LMCache's keys carry the model name, the KV rank (world size and worker),
the object group and the cache salt, but not the dtype, the object layout or
the chunk size, so those come from adapter_params and pin the namespace.
"""
import collections
import concurrent.futures
import hashlib
import logging
import os
import threading

from .._errors import Code, KvtierError
from ._common import check_config_keys, open_or_disable

logger = logging.getLogger(__name__)

# adapter_params keys. Anything else is refused by name when LMCache builds
# the client.
PARAM_KEYS = {
    "path": "store folder (required), or a service (unix:SOCKET or auto:FOLDER) every worker shares",
    "capacity_gb": "byte budget of the store, in GiB (keep it at or above LMCache's max_capacity_gb)",
    "model": "model the server serves (its keys name it too): part of the namespace",
    "model_revision": "model revision or commit: part of the namespace",
    "dtype": "KV dtype, e.g. bfloat16: part of the namespace (LMCache's keys do not carry it)",
    "layout": "object layout, e.g. kv-layer-token-hidden: part of the namespace",
    "chunk_tokens": "LMCache's chunk size in tokens: part of the namespace",
    "salt": "tenant salt: deployments with different salts never share blocks",
    "workers": "threads for exists and delete batches (default 2)",
    "options": "dict of further kvtier Options fields (include/kvtier/options.h)",
}

MAX_KEY_BYTES = 255  # kvtier's key limit; longer LMCache keys are stored under their SHA-256


def namespace_spec(params):
    model = str(params.get("model", ""))
    layout = f"lmcache-object/{params.get('layout', '')}/chunk{int(params.get('chunk_tokens', 0) or 0)}"
    return {"name": f"lmcache/{model}/{params.get('dtype', '')}" if model else f"lmcache/{params.get('dtype', '')}",
            "model_id": model, "model_revision": str(params.get("model_revision", "")),
            "dtype": str(params.get("dtype", "")), "layout": layout,
            "block_tokens": int(params.get("chunk_tokens", 0) or 0),
            "hash_scheme": "lmcache-object-key", "tenant_salt": str(params.get("salt", ""))}


def store_key(key):
    k = key.encode() if isinstance(key, str) else bytes(key)
    if len(k) > MAX_KEY_BYTES:
        k = b"sha256:" + hashlib.sha256(k).hexdigest().encode()
    return k


class KvtierL2Connector:
    """LMCache native-plugin client over a kvtier store (see PARAM_KEYS).
    Thread-safe: LMCache submits from its store and prefetch controllers
    and drains from its demux thread."""

    def __init__(self, **params):
        check_config_keys(params, PARAM_KEYS, "kvtier L2 connector", "adapter_params")
        opts = dict(params.get("options") or {})
        opts["path"] = params["path"]
        if params.get("capacity_gb") is not None:
            opts["capacity_gb"] = params["capacity_gb"]
        # Without a store the server runs on without this L2: every key misses.
        self._store, self._ns = open_or_disable(opts, logger, "kvtier L2 connector", namespace_spec(params))
        if self._ns is not None and os.environ.get("PYTHONHASHSEED") is None:
            # LMCache asks for a fixed seed in the server and in the engine:
            # chunk hashes then stay the same across restarts.
            logger.warning("kvtier L2 connector: PYTHONHASHSEED is not set; LMCache's chunk hashes are only "
                           "stable across restarts with one fixed value (e.g. 0) in the LMCache server and "
                           "every engine process, and without it stored chunks may never be found again")
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._lock = threading.Lock()
        self._done = collections.deque()   # (future_id, ok, error, per_key) of finished batches
        self._inflight = set()             # future ids not finished
        self._next_id = 1
        self._closed = False
        self._pool = concurrent.futures.ThreadPoolExecutor(int(params.get("workers", 2)),
                                                           thread_name_prefix="kvtier-lmcache")

    # ---- the native-plugin interface ------------------------------------------------
    def event_fd(self):
        return self._efd

    def submit_batch_set(self, keys, bufs):
        if self._ns is None:
            return self._refuse(keys)
        return self._submit_each(keys, bufs, lambda k, b: self._ns.put_async(k, b), lambda r, b: r is True)

    def submit_batch_get(self, keys, bufs):
        if self._ns is None:
            return self._refuse(keys)
        return self._submit_each(keys, bufs, lambda k, b: self._ns.get_async(k, b),
                                 lambda r, b: r is not None and r == memoryview(b).nbytes)

    def submit_batch_exists(self, keys):
        if self._ns is None:
            return self._refuse(keys, lookup=True)
        return self._submit_on_pool(keys, self._ns.contains_batch)  # one request per 4,096 keys through a service

    def submit_batch_delete(self, keys):
        if self._ns is None:
            return self._refuse(keys, lookup=True)
        # One index flush for the batch: LMCache's L2 eviction deletes many
        # keys at once, and a remove per key would flush per key.
        return self._submit_on_pool(keys, self._ns.remove_batch)

    def drain_completions(self):
        try:
            os.eventfd_read(self._efd)
        except (BlockingIOError, OSError):
            pass
        with self._lock:
            out = list(self._done)
            self._done.clear()
        return out

    def close(self):
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pool.shutdown(wait=True)
        if self._store is not None:
            self._store.close()  # waits for kvtier's async operations in flight
        os.close(self._efd)

    # ---- batches ---------------------------------------------------------------------------
    def _new_batch(self):
        with self._lock:
            if self._closed:
                raise KvtierError(Code.CLOSED, "kvtier L2 connector is closed")
            fid = self._next_id
            self._next_id += 1
            self._inflight.add(fid)
        return fid

    def _finish(self, fid, per_key, error="", ok=None):
        # ok: the batch as a whole. For sets and gets, every key; for exists
        # and delete, that the lookups ran (per_key says what was found).
        if ok is None:
            ok = all(per_key) and not error
        with self._lock:
            self._inflight.discard(fid)
            self._done.append((fid, bool(ok), error, list(per_key)))
        os.eventfd_write(self._efd, 1)

    def _refuse(self, keys, lookup=False):
        """A batch on a disabled connector: lookups find nothing, transfers fail."""
        fid = self._new_batch()
        self._finish(fid, [False] * len(list(keys)), "" if lookup else "kvtier store is not open", ok=lookup)
        return fid

    def _submit_each(self, keys, bufs, submit, succeeded):
        keys, bufs = list(keys), list(bufs)
        fid = self._new_batch()
        if len(keys) != len(bufs):
            self._finish(fid, [False] * len(keys), "keys and buffers differ in length")
            return fid
        if not keys:
            self._finish(fid, [])
            return fid
        results = [False] * len(keys)
        left = [len(keys)]
        errors = []
        guard = threading.Lock()

        def settle(i, ok, err=None):
            with guard:
                results[i] = ok
                if err:
                    errors.append(err)
                left[0] -= 1
                last = left[0] == 0
            if last:
                self._finish(fid, results, "; ".join(errors[:3]))

        for i, (k, b) in enumerate(zip(keys, bufs)):
            try:
                fut = submit(store_key(k), b)
            except Exception as e:  # a full queue, a closed store, a bad buffer: that key fails, never the caller
                settle(i, False, str(e))
                continue
            fut.add_done_callback(lambda f, i=i, b=b: self._settle_future(f, i, b, succeeded, settle))
        return fid

    @staticmethod
    def _settle_future(fut, i, buf, succeeded, settle):
        try:
            settle(i, bool(succeeded(fut.result(), buf)))
        except Exception as e:
            settle(i, False, str(e))

    def _submit_on_pool(self, keys, answer):
        """answer(keys) -> a bool per key, run on the pool."""
        keys = list(keys)
        fid = self._new_batch()

        def run():
            try:
                out, err = [bool(x) for x in answer([store_key(k) for k in keys])], ""
            except Exception as e:  # reported in the completion: LMCache's threads never see it raised
                out, err = [False] * len(keys), str(e)
            self._finish(fid, out, err, ok=not err)

        try:
            self._pool.submit(run)
        except RuntimeError as e:  # the pool is shut down: closing
            self._finish(fid, [False] * len(keys), str(e), ok=False)
        return fid
