"""The GPU path from Python: blocks between a Store and device memory
(include/kvtier/c_api.h, "GPU path"). Namespace.get_to_device and friends
call these.

Payloads are CUDA tensors, objects with __cuda_array_interface__ (CuPy,
Numba), raw device addresses with size=, or (address, size) pairs; a list is
one block's fragments in order (per-layer K and V). A Store serves one device:
the first tensor's device binds it. The stream defaults to torch's current
stream of that device when torch is in use, so work queued there afterwards
sees the loaded KV (and a put copies what was queued before it).
"""
import ctypes
import sys
import time

from . import _buffers
from ._errors import Code, KvtierError
from ._lib import GetItem, Key, PutItem, lib

_MISS = (Code.NOT_FOUND, Code.TIMED_OUT)


def _invalid(msg):
    return KvtierError(Code.INVALID_ARGUMENT, msg)


def status(store):
    """None when the GPU path can run on this store, else why not."""
    rc = lib.kvtier_gpu_status(store._handle())
    if rc == 0:
        return None
    msg = lib.kvtier_last_error()
    return msg.decode(errors="replace") if msg else Code.of(rc).name


def bind(store, devices):
    """Binds the store's GPU path to the one device the fragments are on."""
    if len(devices) > 1:
        raise _invalid(f"one call's blocks must be on one device, not {sorted(devices)}")
    if not devices:
        return None  # raw addresses: the library uses the thread's current device
    device = next(iter(devices))
    if store._gpu_device != device:
        rc = lib.kvtier_gpu_bind(store._handle(), device)
        if rc != 0:
            msg = lib.kvtier_last_error()
            raise KvtierError(rc, msg.decode(errors="replace") if msg else "")
        store._gpu_device = device
    return device


def stream_handle(stream, device):
    """A cudaStream_t as an int: given (an int, a torch.cuda.Stream, a CuPy
    stream), or torch's current stream on `device` when torch is loaded."""
    if stream is None:
        torch = sys.modules.get("torch")
        if torch is not None and device is not None and torch.cuda.is_available():
            return int(torch.cuda.current_stream(device).cuda_stream)
        return 0
    if isinstance(stream, bool):
        raise _invalid("stream must be a CUDA stream, not a bool")
    if isinstance(stream, int):
        if not 0 <= stream < 1 << 64:
            raise _invalid("stream handle must be a 64-bit value")
        return stream
    for attr in ("cuda_stream", "ptr"):
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h
    raise _invalid(f"{type(stream).__name__} is not a CUDA stream (an int handle, torch.cuda.Stream or CuPy stream)")


def _items(cls, keys, values, sizes):
    keys = list(keys)
    values = list(values)
    if len(values) != len(keys):
        raise _invalid("keys and device buffers differ in length")
    if sizes is None and keys:
        packed = _buffers.packed_items(cls, keys, values)
        if packed is not None:  # (address, size) pairs: no device to learn
            return packed[0], len(keys), packed[1], set()
    keys = [_buffers.key_bytes(k) for k in keys]
    sizes = list(sizes) if sizes is not None else [None] * len(keys)
    if len(sizes) != len(keys):
        raise _invalid("keys and sizes differ in length")
    items = (cls * max(1, len(keys)))()
    keep, devices = [keys], set()
    for i, (k, v, s) in enumerate(zip(keys, values, sizes)):
        frags, n, _, kl, devs = _buffers.device_fragments(v, s)
        keep.append((frags, kl))
        devices |= devs
        items[i].key = Key(_buffers.bytes_address(k), len(k))
        items[i].frags = frags
        items[i].num_frags = n
    return items, len(keys), keep, devices


def _raise_call(rc):
    msg = lib.kvtier_last_error()
    raise KvtierError(rc, msg.decode(errors="replace") if msg else "")


class _Call:
    """One GPU call's items and result arrays, kept alive until it is done."""

    def __init__(self, ns, cls, keys, values, sizes, stream):
        self.items, self.n, self.keep, devices = _items(cls, keys, values, sizes)
        device = bind(ns.store, devices)
        self.stream = stream_handle(stream, device)
        self.statuses = (ctypes.c_int32 * max(1, self.n))()
        self.sizes = (ctypes.c_uint64 * max(1, self.n))()

    def codes(self):
        return [Code.of(self.statuses[i]) for i in range(self.n)]

    def loaded(self, return_codes):
        if not any(self.statuses[:self.n]):  # every block loaded: no Code per block to look up
            got = self.sizes[:self.n]
            return (got, [Code.OK] * self.n) if return_codes else got
        codes = self.codes()
        got = [self.sizes[i] if codes[i] == Code.OK else None for i in range(self.n)]
        return (got, codes) if return_codes else got

    def resolve(self, status, value):
        """An async call's result once its completion arrives: the per-block
        results, unless the completion reports an error no block explains
        (a failed copy or a failed write after the call returned)."""
        if status != Code.OK and status not in self.codes() and status not in _MISS:
            raise KvtierError(status, "the GPU transfer failed after the call returned")
        return value()


# The last get_to_device's time in this process, in seconds: marshaling the
# arguments, the library's call, the results (a load's Python share, which the
# e2e driver reports beside the library's own split).
last_get_times = {"prepare_s": 0.0, "library_s": 0.0, "results_s": 0.0}


def get_to_device(ns, keys, outs, sizes, stream, return_codes):
    t0 = time.perf_counter()
    c = _Call(ns, GetItem, keys, outs, sizes, stream)
    h = ns.store._handle()
    t1 = time.perf_counter()
    rc = lib.kvtier_get_to_device(h, ns.id, c.items, c.n, c.stream, 0, c.statuses, c.sizes)
    t2 = time.perf_counter()
    if rc != 0:
        _raise_call(rc)
    got = c.loaded(return_codes)
    last_get_times.update(prepare_s=t1 - t0, library_s=t2 - t1, results_s=time.perf_counter() - t2)
    return got


def get_to_device_async(ns, keys, outs, sizes, stream, return_codes):
    c = _Call(ns, GetItem, keys, outs, sizes, stream)
    h = ns.store._handle()
    return ns.store._submit(
        "device", (lambda st: c.resolve(st, lambda: c.loaded(return_codes)), c, outs),
        lambda uid: lib.kvtier_get_to_device_async(h, ns.id, c.items, c.n, c.stream, c.statuses, c.sizes, uid))


def put_from_device(ns, keys, values, sizes, stream, wait_durable):
    c = _Call(ns, PutItem, keys, values, sizes, stream)
    rc = lib.kvtier_put_from_device(ns.store._handle(), ns.id, c.items, c.n, c.stream, int(bool(wait_durable)),
                                    c.statuses)
    if rc != 0:
        _raise_call(rc)
    return c.codes()


def put_from_device_async(ns, keys, values, sizes, stream):
    c = _Call(ns, PutItem, keys, values, sizes, stream)
    h = ns.store._handle()
    return ns.store._submit(
        "device", (lambda st: c.resolve(st, c.codes), c, values),
        lambda uid: lib.kvtier_put_from_device_async(h, ns.id, c.items, c.n, c.stream, c.statuses, uid))
