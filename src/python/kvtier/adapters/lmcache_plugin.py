"""kvtier as an LMCache L2 adapter of MP mode's `plugin` type.

LMCache's multiprocess server loads Python L2 stores with its `plugin`
adapter type (lmcache/v1/distributed/l2_adapters/plugin_l2_adapter.py): it
imports `module_path.class_name`, checks that the class is an
L2AdapterInterface, finds its config class by the name `<class>Config`, and
builds it from `adapter_params`. Enable it with

    --l2-adapter '{"type": "plugin", "module_path": "kvtier.adapters.lmcache_plugin",
      "class_name": "KvtierL2Adapter",
      "adapter_params": {"path": "/nvme/kvtier", "capacity_gb": 512, "model": "Qwen/Qwen3-0.6B",
                         "dtype": "bfloat16", "chunk_tokens": 256}}'

`adapter_params` are those of the `native_plugin` route (kvtier.adapters.
lmcache.PARAM_KEYS), and both routes name a chunk by the same string
(LMCache's native key format), so one store serves either route.

The transfers are KvtierL2Connector's (kvtier's async puts and gets, exists
and delete as one batch call each); one thread routes its completions to the
three eventfds LMCache's store and prefetch controllers poll. A store task
succeeds when every chunk of it is durable; a lookup or load reports each key
in a Bitmap; a loaded chunk must fill its buffer exactly. kvtier does not pin
what a lookup found (no lock): a chunk evicted in between fails its load, which
LMCache allows. kvtier evicts at capacity_gb on its own, so the adapter
declares no capacity to LMCache's global eviction; `delete` removes a batch
with one index flush.
"""
import logging
import os
import select
import threading

from lmcache.v1.distributed.api import EncodedObjectKey, KeyEntry, KeyListPage
from lmcache.v1.distributed.internal_api import L2StoreResult
from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface
from lmcache.v1.distributed.l2_adapters.config import L2AdapterConfigBase

try:
    from lmcache.native_storage_ops import Bitmap
except ImportError:  # releases before the extension was renamed
    from lmcache.lmcache_native import Bitmap

from ._common import check_config_keys
from .lmcache import PARAM_KEYS, KvtierL2Connector

logger = logging.getLogger(__name__)

_SEP = "@"


def object_key_string(key):
    """LMCache's native key format: model@kv_rank@group@chunk_hash[@salt],
    rank in 8 hex digits, group in hex, hash in hex."""
    s = f"{key.model_name}{_SEP}{key.kv_rank:08x}{_SEP}{key.object_group_id:x}{_SEP}{key.chunk_hash.hex()}"
    return f"{s}{_SEP}{key.cache_salt}" if key.cache_salt else s


def parse_key_string(s):
    """object_key_string's inverse as an EncodedObjectKey, or None for a
    string of another shape (a key kvtier stored under its SHA-256)."""
    parts = s.split(_SEP)
    if len(parts) not in (4, 5):
        return None
    try:
        return EncodedObjectKey(chunk_hash_hex=bytes.fromhex(parts[3]).hex(), model_name=parts[0],
                                kv_rank=int(parts[1], 16), object_group_id=int(parts[2], 16),
                                cache_salt=parts[4] if len(parts) == 5 else "")
    except ValueError:
        return None


class KvtierL2AdapterConfig(L2AdapterConfigBase):
    """adapter_params, checked: an unknown key or a missing path fails the
    server's start naming it."""

    def __init__(self, params):
        self.params = dict(params)

    @classmethod
    def from_dict(cls, d):
        d = dict(d or {})
        check_config_keys(d, PARAM_KEYS, "kvtier L2 adapter", "adapter_params")
        return cls(d)

    @classmethod
    def help(cls):
        return "kvtier L2 adapter adapter_params:\n" + "\n".join(f"- {k}: {v}" for k, v in PARAM_KEYS.items())


class KvtierL2Adapter(L2AdapterInterface):
    """LMCache L2AdapterInterface over a kvtier store. Thread-safe: LMCache's
    store and prefetch controllers call it at once."""

    def __init__(self, config, **_framework_kwargs):  # l1_memory_desc and later framework arguments: unused
        if not isinstance(config, KvtierL2AdapterConfig):
            config = KvtierL2AdapterConfig.from_dict(config)
        super().__init__()  # no capacity declared: kvtier evicts on its own
        self._conn = KvtierL2Connector(**config.params)
        self._efd = {op: os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) for op in ("store", "lookup", "load")}
        self._lock = threading.Lock()
        self._pending = {}    # connector future id -> (op, task id, keys, sizes)
        self._done = {"store": {}, "lookup": {}, "load": {}}  # task id -> result, until taken
        self._deletes = {}    # connector future id -> [threading.Event, per-key flags]
        self._sizes = {}      # key -> bytes, of what this adapter stored (the base's accounting)
        self._next_task = 0
        self._stop = threading.Event()
        self._router = threading.Thread(target=self._route, name="kvtier-lmcache-l2", daemon=True)
        self._router.start()

    # ---- eventfds ---------------------------------------------------------------------
    def get_store_event_fd(self):
        return self._efd["store"]

    def get_lookup_and_lock_event_fd(self):
        return self._efd["lookup"]

    def get_load_event_fd(self):
        return self._efd["load"]

    # ---- store, lookup, load ---------------------------------------------------------------
    def submit_store_task(self, keys, objects):
        bufs = [obj.byte_array for obj in objects]
        return self._submit("store", keys, [len(b) for b in bufs],
                            lambda: self._conn.submit_batch_set([object_key_string(k) for k in keys], bufs))

    def pop_completed_store_tasks(self):
        with self._lock:
            out, self._done["store"] = self._done["store"], {}
        return out

    def submit_lookup_and_lock_task(self, keys, group_layout_descs=None):
        # Later LMCache passes each object group's layout; kvtier's namespace
        # already pins the layout (adapter_params), so it is not needed here.
        return self._submit("lookup", keys, None,
                            lambda: self._conn.submit_batch_exists([object_key_string(k) for k in keys]))

    def query_lookup_and_lock_result(self, task_id):
        with self._lock:
            return self._done["lookup"].pop(task_id, None)

    def submit_unlock(self, keys):
        return None  # nothing is pinned (see the module's docstring)

    def submit_load_task(self, keys, objects):
        bufs = [obj.byte_array for obj in objects]
        return self._submit("load", keys, None,
                            lambda: self._conn.submit_batch_get([object_key_string(k) for k in keys], bufs))

    def query_load_result(self, task_id):
        with self._lock:
            return self._done["load"].pop(task_id, None)

    # ---- eviction, listing, status ------------------------------------------------------------
    def delete(self, keys):
        keys = list(keys)
        if not keys:
            return
        waiter = [threading.Event(), None]
        with self._lock:
            fid = self._conn.submit_batch_delete([object_key_string(k) for k in keys])
            self._deletes[fid] = waiter
        if not waiter[0].wait(timeout=60):
            logger.warning("kvtier L2 adapter: a delete of %d keys did not finish in 60 s", len(keys))
            return
        with self._lock:
            gone = [k for k, present in zip(keys, waiter[1] or []) if present and k in self._sizes]
            sizes = [self._sizes.pop(k) for k in gone]
        if gone:
            self._notify_keys_deleted(gone, sizes)

    def list_l2_keys(self, model_name=None, page_size=500, cursor=None):
        if page_size <= 0:
            raise ValueError(f"page_size must be positive, got {page_size}")
        ns = self._conn._ns
        if ns is None:
            return KeyListPage(entries=(), next_page_token=None)
        prefix = (model_name + _SEP).encode() if model_name is not None else b""
        last = bytes.fromhex(cursor) if cursor else None  # a cursor is the last key a page saw
        entries = []
        while True:
            want = page_size + 1 - len(entries)  # one more than the page holds: is there another page?
            chunk = ns.keys_with_sizes(prefix, after=last, limit=want)
            for k, size in chunk:
                if len(entries) == page_size:
                    return KeyListPage(entries=tuple(entries), next_page_token=last.hex())
                last = k
                enc = parse_key_string(k.decode(errors="replace"))
                if enc is not None:  # not a key stored under its SHA-256
                    entries.append(KeyEntry(key=enc, size_bytes=size))
            if len(chunk) < want:
                return KeyListPage(entries=tuple(entries), next_page_token=None)

    def report_status(self):
        store = self._conn._store
        status = {"is_healthy": store is not None and not store.closed, "type": "kvtier"}
        if status["is_healthy"]:
            try:
                stats = store.stats()
                status.update({k: stats[k] for k in ("puts", "gets", "hits", "misses") if k in stats})
            except Exception as e:  # a service that went away
                status.update(is_healthy=False, error=str(e))
        return status

    def close(self):
        self._stop.set()
        self._router.join()
        self._conn.close()
        for fd in self._efd.values():
            os.close(fd)

    # ---- routing ------------------------------------------------------------------------------------
    def _submit(self, op, keys, sizes, submit):
        keys = list(keys)
        with self._lock:  # held across the submit: its completion may be routed at once
            task = self._next_task
            self._next_task += 1
            self._pending[submit()] = (op, task, keys, sizes)
        return task

    def _route(self):
        poll = select.poll()
        poll.register(self._conn.event_fd(), select.POLLIN)
        while not self._stop.is_set():
            if not poll.poll(100):
                continue
            for fid, ok, error, per_key in self._conn.drain_completions():
                try:
                    self._complete(fid, ok, error, per_key)
                except Exception:  # a listener's error must not stop every later completion
                    logger.exception("kvtier L2 adapter: completing batch %d failed", fid)

    def _complete(self, fid, ok, error, per_key):
        with self._lock:
            waiter = self._deletes.pop(fid, None)
            if waiter is not None:
                waiter[1] = list(per_key)
                waiter[0].set()
                return
            entry = self._pending.pop(fid, None)
            if entry is None:
                return
            op, task, keys, sizes = entry
            done = [k for k, found in zip(keys, per_key) if found]
            if op == "store":
                done_sizes = [s for s, found in zip(sizes, per_key) if found]
                self._sizes.update(zip(done, done_sizes))
                result = L2StoreResult(bool(ok), sum(done_sizes) if ok else 0)
            else:
                result = Bitmap(len(keys))
                for i, found in enumerate(per_key):
                    if found:
                        result.set(i)
            self._done[op][task] = result
        if error and op != "lookup":
            logger.warning("kvtier L2 adapter: a %s of %d keys failed: %s", op, len(keys), error)
        try:
            if op == "store" and done:
                self._notify_keys_stored(done, done_sizes)  # the base's byte accounting, and LMCache's listeners
            elif op == "load" and done:
                self._notify_keys_accessed(done)
        finally:
            os.eventfd_write(self._efd[op], 1)  # the result is there: the controller must hear of it
