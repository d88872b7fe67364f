"""Store and Namespace: the Python face of kvtier.

Thread safety: a Store may be used from any number of threads. Blocking
calls release the GIL while kvtier works. Async calls return
concurrent.futures.Future objects completed by one poller thread per Store,
which sleeps on the store's eventfd.

Errors: every failure raises KvtierError carrying a Code; bad Python input
(wrong types, sizes, read-only destinations) is Code.INVALID_ARGUMENT.
A miss is not an error: get()/get_into() return None.

Fork: a Store belongs to the process that opened it. In a child forked
after the open (multiprocessing's "fork" start method), its calls raise
KvtierError BUSY and close() lets go of the child's copy only; open the
store in the child instead (through a service when the parent keeps it).
"""
import concurrent.futures
import ctypes
import itertools
import json
import os
import select
import threading
import weakref

from . import _buffers, _device
from ._errors import Code, KvtierError
from ._lib import GetItem, Key, Completion, KEY_VISITOR, PutItem, lib

_MISS = (Code.NOT_FOUND, Code.TIMED_OUT)


def _raise(rc):
    msg = lib.kvtier_last_error()
    raise KvtierError(rc, msg.decode(errors="replace") if msg else "")


def _check(rc):
    if rc != 0:
        _raise(rc)


def destroy_store(path):
    """Removes the store in `path`, its shared-memory RAM tier included (a
    folder deleted by hand leaves that tier's /dev/shm file holding memory
    until reboot). Raises KvtierError BUSY while any process has it open,
    NOT_FOUND when `path` holds no store."""
    _check(lib.kvtier_destroy_store(os.fsencode(path)))


_open_stores = weakref.WeakSet()


def _after_fork_in_child():
    # The parent's poller thread did not come along and may have held the
    # lock at the fork; its futures are the parent's to complete.
    for store in list(_open_stores):
        store._lock = threading.Lock()
        store._poller = None
        store._inflight = {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Store:
    """An open kvtier store folder. Options are kvtier::Options field names,
    e.g. Store(path, capacity_bytes=1 << 30, io_backend="posix")."""

    def __init__(self, path, **options):
        handle = ctypes.c_void_p()
        try:
            opts = json.dumps(options).encode()
        except (TypeError, ValueError) as e:
            raise KvtierError(Code.INVALID_ARGUMENT, f"options: {e}") from None
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise KvtierError(Code.INVALID_ARGUMENT, "path must be a str or path")
        if b"\0" in os.fsencode(path):
            # C would stop at the NUL and open another folder.
            raise KvtierError(Code.INVALID_ARGUMENT, "path contains a NUL byte")
        self._h = None
        self._gpu_device = None  # the device the GPU path serves, once bound
        self._lock = threading.Lock()
        self._inflight = {}  # user_data -> (future, kind, keepalive)
        self._ids = itertools.count(1)
        self._poller = None
        self._stop = False
        _check(lib.kvtier_open(os.fsencode(path), opts, ctypes.byref(handle)))
        self._h = handle.value
        self.path = os.fsdecode(path)
        _open_stores.add(self)

    # ---- lifetime -------------------------------------------------------
    def _handle(self):
        h = self._h
        if h is None:
            raise KvtierError(Code.CLOSED, "store is closed")
        return h

    def close(self):
        """Completes queued work, checkpoints and releases the folder."""
        h = self._h
        if h is None:
            return
        rc = lib.kvtier_close(h)
        poller = self._poller
        self._stop = True
        if poller is not None:
            poller.join()
        self._drain(h)
        with self._lock:
            left, self._inflight = self._inflight, {}
        for fut, _, _ in left.values():
            if not fut.done():
                fut.set_exception(KvtierError(Code.CLOSED, "store closed"))
        self._h = None
        lib.kvtier_free(h)
        self._registered = {}  # the memory's owners may release it now
        if rc != 0:
            _raise(rc)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def closed(self):
        return self._h is None

    # ---- namespaces -----------------------------------------------------
    def register_namespace(self, **spec):
        """Registers (idempotently) the namespace of a NamespaceSpec's fields:
        name, model_id, model_revision, weights_fingerprint, tokenizer, adapter,
        dtype, layout, block_tokens, block_bytes, tp_rank, tp_size,
        hash_scheme, hash_seed, tenant_salt."""
        try:
            text = json.dumps(spec).encode()
        except (TypeError, ValueError) as e:
            raise KvtierError(Code.INVALID_ARGUMENT, f"namespace spec: {e}") from None
        out = ctypes.c_uint64()
        _check(lib.kvtier_register_namespace_json(self._handle(), text, ctypes.byref(out)))
        return Namespace(self, out.value, spec.get("name", ""))

    def namespace(self, name_or_hex):
        """Finds a registered namespace by display name or 16-hex-digit id."""
        if not isinstance(name_or_hex, str):
            raise KvtierError(Code.INVALID_ARGUMENT, "namespace name must be a str")
        out = ctypes.c_uint64()
        _check(lib.kvtier_find_namespace(self._handle(), name_or_hex.encode(), ctypes.byref(out)))
        return Namespace(self, out.value, name_or_hex)

    def remove_namespace(self, ns):
        _check(lib.kvtier_remove_namespace(self._handle(), _ns_id(ns)))

    # ---- store-wide -------------------------------------------------------
    def flush(self):
        """Returns when every put submitted before it has completed and its
        index entry is durable (a read-only open then sees it)."""
        _check(lib.kvtier_flush(self._handle()))

    def share_now(self, timeout=30.0):
        """Shared tier: seals the open segment and waits (up to timeout
        seconds) until every sealed segment is uploaded, so other nodes serve
        what this one wrote. Raises KvtierError(TIMED_OUT) when they are not
        done by then; returns at once without a shared tier."""
        _check(lib.kvtier_share_now(self._handle(), max(0, int(timeout * 1000))))

    def register_memory(self, buffer, fd, offset=0):
        """Says that `buffer` (a writable buffer, or an (address, size) pair)
        is a shared mapping of file descriptor `fd` at file offset `offset`
        (an mmap of a memfd or of a file in /dev/shm, such as vLLM's CPU
        tier). With a store served by `kvtier serve` ("unix:" or "auto:"
        paths), puts and gets of payloads in it then move between the service
        and that memory without the staging copy. An embedded store ignores
        it. The mapping must stay until unregister_memory() or close()."""
        addr, n, keep = _buffers.one(buffer, writable=True)
        if not isinstance(fd, int) or fd < 0:
            raise KvtierError(Code.INVALID_ARGUMENT, "fd must be an open file descriptor")
        _check(lib.kvtier_register_memory(self._handle(), addr, n, fd, int(offset)))
        with self._lock:
            self._registered = getattr(self, "_registered", {})
            self._registered[addr] = keep
        return addr

    def unregister_memory(self, address):
        """Forgets memory registered at `address` (what register_memory returned)."""
        _check(lib.kvtier_unregister_memory(self._handle(), address))
        with self._lock:
            getattr(self, "_registered", {}).pop(address, None)

    def stats(self):
        """kvtier::Stats as a dict."""
        return self._json(lib.kvtier_stats_json)

    def gpu_stats(self):
        """The GPU path's counters as a dict (device, method, ram_hits,
        disk_reads, copies, batch_calls, kernel_calls, ...). Raises
        KvtierError(NOT_SUPPORTED) where the GPU path cannot run."""
        return self._json(lib.kvtier_gpu_stats_json)

    def gpu_set_copy_method(self, method):
        """How the GPU path copies from the next call on: "auto" (default),
        "batch", "loop" or "kernel" (include/kvtier/c_api.h)."""
        if not isinstance(method, str):
            raise KvtierError(Code.INVALID_ARGUMENT, f"copy method must be a str, not {type(method).__name__}")
        _check(lib.kvtier_gpu_set_copy_method(self._handle(), method.encode()))

    def _json(self, fn):
        h = self._handle()
        need = ctypes.c_size_t()
        cap = 4096
        while True:
            buf = ctypes.create_string_buffer(cap)
            rc = fn(h, buf, cap, ctypes.byref(need))
            if rc == Code.BUFFER_TOO_SMALL:
                cap = need.value + 1
                continue
            _check(rc)
            return json.loads(buf.value.decode())

    def gpu_status(self):
        """None when the GPU path (Namespace.get_to_device ...) can run on
        this store; else why not (no CUDA in the library, no device, a store
        reached through `kvtier serve`)."""
        return _device.status(self)

    def pending(self):
        """Async operations not yet completed."""
        with self._lock:
            return len(self._inflight)

    # ---- async machinery ---------------------------------------------------
    def _submit(self, kind, keepalive, submit):
        fut = concurrent.futures.Future()
        fut.set_running_or_notify_cancel()
        uid = next(self._ids)
        with self._lock:
            self._inflight[uid] = (fut, kind, keepalive)
            if self._poller is None:
                self._poller = threading.Thread(target=self._poll_loop, args=(self._h,),
                                                name="kvtier-poller", daemon=True)
                self._poller.start()
        rc = submit(uid)
        if rc != 0:
            with self._lock:
                self._inflight.pop(uid, None)
            _raise(rc)
        return fut

    def _poll_loop(self, h):
        fd = lib.kvtier_event_fd(h)
        if fd < 0:  # a handle of the process this one forked from: nothing to wait for
            return
        p = select.poll()
        p.register(fd, select.POLLIN)
        while not self._stop:
            p.poll(100)
            self._drain(h)

    def _drain(self, h):
        batch = (Completion * 64)()
        while True:
            n = lib.kvtier_poll(h, batch, 64, 0)
            if n <= 0:
                return
            for i in range(n):
                c = batch[i]
                with self._lock:
                    entry = self._inflight.pop(c.user_data, None)
                if entry is None:
                    continue
                fut, kind, keep = entry
                status = Code.of(c.status)
                if kind == "device":
                    try:
                        fut.set_result(keep[0](status))
                    except KvtierError as e:
                        fut.set_exception(e)
                elif kind == "put":
                    if status == Code.OK:
                        fut.set_result(True)
                    elif status == Code.NOT_ADMITTED:
                        fut.set_result(False)
                    else:
                        fut.set_exception(KvtierError(status, "async put failed"))
                else:
                    if status == Code.OK:
                        fut.set_result(c.size)
                    elif status in _MISS:
                        fut.set_result(None)
                    else:
                        fut.set_exception(KvtierError(status, "async get failed"))
            if n < 64:
                return


def _batch_items(item_type, keys, bufs, sizes, writable):
    """The items of a batch call (PutItem or GetItem) for keys and their
    buffers: packed when every buffer is an (address, size) pair, else one
    ctypes item per block. Returns (items, keepalive)."""
    packed = _buffers.packed_items(item_type, keys, bufs) if sizes is None and keys else None
    if packed is not None:
        return packed
    keys = [_buffers.key_bytes(k) for k in keys]
    sizes = list(sizes) if sizes is not None else [None] * len(keys)
    if len(sizes) != len(keys):
        raise KvtierError(Code.INVALID_ARGUMENT, "keys and sizes differ in length")
    items = (item_type * max(1, len(keys)))()
    keep = [keys]  # the items point into these bytes objects
    for i, (k, b, s) in enumerate(zip(keys, bufs, sizes)):
        frags, n, _, kl = _buffers.fragments(b, writable, s)
        keep.append((frags, kl))
        items[i].key = Key(_buffers.bytes_address(k), len(k))
        items[i].frags = frags
        items[i].num_frags = n
    return items, keep


def _ns_id(ns):
    if isinstance(ns, Namespace):
        return ns.id
    if isinstance(ns, int) and not isinstance(ns, bool) and 0 <= ns < 1 << 64:
        return ns
    raise KvtierError(Code.INVALID_ARGUMENT, "namespace must be a Namespace or an id")


class Namespace:
    """Blocks of one namespace of a Store. Keys are str (UTF-8) or bytes of
    1..255 bytes. Payloads: see kvtier._buffers (buffers, tensors via
    data_ptr(), raw addresses with size=, or lists of them as fragments)."""

    def __init__(self, store, ns_id, name=""):
        self.store = store
        self.id = ns_id
        self.name = name

    def __repr__(self):
        return f"Namespace({self.name!r}, id={self.id:016x})"

    # ---- writes -------------------------------------------------------------
    def put(self, key, value, size=None):
        """Stores value under key; returns when durable. Returns False when
        the put was declined (admission policy or full queue), else True."""
        k = _buffers.key_bytes(key)
        frags, n, _, keep = _buffers.fragments(value, False, size)
        rc = lib.kvtier_putv(self.store._handle(), self.id, k, len(k), frags, n)
        if rc == Code.NOT_ADMITTED:
            return False
        _check(rc)
        del keep
        return True

    def put_batch(self, keys, values, sizes=None):
        """Stores many blocks, committed in groups. Returns a Code per item."""
        keys = list(keys)
        values = list(values)
        if len(values) != len(keys):
            raise KvtierError(Code.INVALID_ARGUMENT, "keys and values differ in length")
        items, keep = _batch_items(PutItem, keys, values, sizes, writable=False)
        st = (ctypes.c_int32 * max(1, len(keys)))()
        rc = lib.kvtier_put_batch(self.store._handle(), self.id, items, len(keys), st)
        if rc == Code.CLOSED or (rc == Code.INVALID_ARGUMENT and not keys):
            _raise(rc)
        return [Code.of(st[i]) for i in range(len(keys))]

    def put_async(self, key, value, size=None):
        """Queues a put (the payload is copied before this returns). The
        Future's result is True when durable, False when declined."""
        k = _buffers.key_bytes(key)
        frags, n, _, keep = _buffers.fragments(value, False, size)
        h = self.store._handle()
        return self.store._submit("put", None, lambda uid: lib.kvtier_put_async(h, self.id, k, len(k), frags, n, uid))

    # ---- reads ----------------------------------------------------------------
    def get_into(self, key, out, size=None):
        """Reads the block into out (buffer, tensor, address with size=, or a
        list of them). Returns the payload size, or None on a miss."""
        k = _buffers.key_bytes(key)
        frags, n, _, keep = _buffers.fragments(out, True, size)
        got = ctypes.c_uint64()
        rc = lib.kvtier_getv(self.store._handle(), self.id, k, len(k), frags, n, ctypes.byref(got))
        del keep
        if rc in _MISS:
            return None
        _check(rc)
        return got.value

    def get(self, key):
        """Returns the block as bytes, or None on a miss."""
        k = _buffers.key_bytes(key)
        for _ in range(3):  # the block may be replaced between size and read
            size = self.block_size(k)
            if size is None:
                return None
            buf = bytearray(size)
            try:
                got = self.get_into(k, buf)
            except KvtierError as e:
                if e.code == Code.BUFFER_TOO_SMALL:
                    continue
                raise
            return None if got is None else bytes(buf[:got])
        raise KvtierError(Code.ABORTED, "block kept changing size during get")

    def get_batch(self, keys, outs, sizes=None, return_codes=False, timeout=None):
        """Reads many blocks (issued together). Returns a list of payload
        sizes, None for misses (and, with return_codes, the Codes too).
        timeout (seconds): reads not started by then are misses
        (Code.TIMED_OUT) whose outs are left untouched; reads already on the
        device finish first, and nothing writes any out after the call."""
        keys = list(keys)
        outs = list(outs)
        if len(outs) != len(keys):
            raise KvtierError(Code.INVALID_ARGUMENT, "keys and outs differ in length")
        if timeout is not None and timeout < 0:
            raise KvtierError(Code.INVALID_ARGUMENT, "timeout must be >= 0")
        us = 0 if timeout is None else max(1, int(timeout * 1e6))
        items, keep = _batch_items(GetItem, keys, outs, sizes, writable=True)
        st = (ctypes.c_int32 * max(1, len(keys)))()
        got = (ctypes.c_uint64 * max(1, len(keys)))()
        rc = lib.kvtier_get_batch_timeout(self.store._handle(), self.id, items, len(keys), us, st, got)
        if rc == Code.CLOSED:
            _raise(rc)
        codes = [Code.of(st[i]) for i in range(len(keys))]
        result = [got[i] if codes[i] == Code.OK else None for i in range(len(keys))]
        return (result, codes) if return_codes else result

    def get_async(self, key, out, size=None, timeout=None):
        """Queues a read into out, which must stay alive and untouched until
        the Future completes (the Future keeps a reference). Result: payload
        size, or None on a miss or when `timeout` seconds pass first."""
        k = _buffers.key_bytes(key)
        frags, n, _, keep = _buffers.fragments(out, True, size)
        if timeout is not None and timeout < 0:
            raise KvtierError(Code.INVALID_ARGUMENT, "timeout must be >= 0")
        us = 0 if timeout is None else max(1, int(timeout * 1e6))
        h = self.store._handle()
        return self.store._submit(
            "get", (frags, keep, out),
            lambda uid: lib.kvtier_get_async(h, self.id, k, len(k), frags, n, us, uid))

    # ---- the GPU path (kvtier._device) -------------------------------------------
    def get_to_device(self, keys, outs, sizes=None, stream=None, return_codes=False):
        """Loads blocks into device memory (CUDA tensors, __cuda_array_interface__
        arrays, or (address, size) pairs; a list per block for fragments). The
        copies are queued on `stream` (default: torch's current stream of the
        tensors' device): work queued there afterwards sees the data. Every
        block is verified before the call returns (RAM hits by hashing the
        landed bytes on the device). Returns payload sizes, None for misses
        (and, with return_codes, the Codes)."""
        return _device.get_to_device(self, keys, outs, sizes, stream, return_codes)

    def get_to_device_async(self, keys, outs, sizes=None, stream=None, return_codes=False):
        """As get_to_device; the Future's result (the same list) is set once the
        copies have run on the device. `outs` must stay alive until then."""
        return _device.get_to_device_async(self, keys, outs, sizes, stream, return_codes)

    def put_from_device(self, keys, values, sizes=None, stream=None, wait_durable=True):
        """Stores blocks from device memory after the work already queued on
        `stream`. Returns once each block is durable (or, without
        wait_durable, once it has left the device). A Code per block."""
        return _device.put_from_device(self, keys, values, sizes, stream, wait_durable)

    def put_from_device_async(self, keys, values, sizes=None, stream=None):
        """As put_from_device; the Future's result (a Code per block) is set
        once every block is durable. The device memory may be reused once the
        stream has passed the copies."""
        return _device.put_from_device_async(self, keys, values, sizes, stream)

    # ---- lookups --------------------------------------------------------------
    def contains(self, key):
        k = _buffers.key_bytes(key)
        present = ctypes.c_int()
        _check(lib.kvtier_contains(self.store._handle(), self.id, k, len(k), ctypes.byref(present)))
        return bool(present.value)

    def __contains__(self, key):
        return self.contains(key)

    def contains_batch(self, keys):
        """contains() for each key, as a list of bools: through a service one
        request per 4,096 keys instead of one per key."""
        return self._key_flags(lib.kvtier_contains_batch, keys)

    def touch_batch(self, keys):
        """Counts a use of each present key, as a read does, for kvtier's
        hot-block reinsertion (blocks an engine's upper tier served without
        reading them here); a bool per key: present."""
        return self._key_flags(lib.kvtier_touch_batch, keys)

    def _key_flags(self, call, keys):
        """call(store, ns, keys, n, flags) over `keys`: a bool per key."""
        arr, n, keep = _buffers.packed_keys(keys)
        if n == 0:
            return []
        flags = (ctypes.c_uint8 * n)()
        _check(call(self.store._handle(), self.id, arr, n, flags))
        del keep
        return [bool(f) for f in flags]

    def lookup_prefix(self, keys):
        """How many leading keys are present (index only)."""
        arr, n, keep = _buffers.packed_keys(keys)
        if n == 0:
            return 0
        out = ctypes.c_size_t()
        _check(lib.kvtier_lookup_prefix(self.store._handle(), self.id, arr, n, ctypes.byref(out)))
        del keep
        return out.value

    def block_size(self, key):
        """Payload size of a present key, or None."""
        k = _buffers.key_bytes(key)
        out = ctypes.c_uint64()
        rc = lib.kvtier_block_size(self.store._handle(), self.id, k, len(k), ctypes.byref(out))
        if rc == Code.NOT_FOUND:
            return None
        _check(rc)
        return out.value

    def keys(self, prefix=b""):
        """Keys (bytes) starting with prefix, in key order."""
        return [k for k, _ in self.keys_with_sizes(prefix)]

    def keys_with_sizes(self, prefix=b"", after=None, limit=None):
        """(key, payload bytes) of each key starting with prefix, in key order:
        with `after`, only keys past it (a page of a listing resumes after the
        last key of the one before, found by a seek, not a scan), and with
        `limit`, at most that many."""
        if isinstance(prefix, str):
            prefix = prefix.encode()
        if limit is not None and limit <= 0:
            raise ValueError(f"limit must be positive, got {limit}")
        found = []

        def visit(ctx, ns, key, key_len, size):
            found.append((ctypes.string_at(key, key_len), int(size)))
            return 1 if limit is not None and len(found) >= limit else 0

        cb = KEY_VISITOR(visit)
        if after is None:
            _check(lib.kvtier_list_keys(self.store._handle(), self.id, prefix or None, len(prefix), cb, None))
        else:
            a = _buffers.key_bytes(after)
            _check(lib.kvtier_list_keys_after(self.store._handle(), self.id, prefix or None, len(prefix),
                                              self.id, a, len(a), cb, None))
        return found

    # ---- removal --------------------------------------------------------------
    def remove(self, key):
        """Removes key (no error when absent)."""
        k = _buffers.key_bytes(key)
        _check(lib.kvtier_remove(self.store._handle(), self.id, k, len(k)))

    def remove_batch(self, keys):
        """Removes every key with one index flush per 4,096 of them (remove()
        costs a flush per key). Returns a list of bools: which keys had a block."""
        return self._key_flags(lib.kvtier_remove_batch, keys)
