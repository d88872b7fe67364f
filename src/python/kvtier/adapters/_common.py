"""Helpers shared by the adapters."""
import ctypes

from .. import Store


def open_store(cfg):
    """Opens a Store from an adapter config dict: path (required),
    capacity_gb, and any kvtier Options field under its own name."""
    cfg = dict(cfg)
    path = cfg.pop("path", None)
    if not path:
        raise ValueError("kvtier adapter config needs 'path' (the store folder)")
    cap = cfg.pop("capacity_gb", None)
    if cap is not None:
        cfg["capacity_bytes"] = int(float(cap) * (1 << 30))
    return Store(path, **cfg)


def view_address(view):
    """Base address of a writable, C-contiguous memoryview (no copy)."""
    mv = memoryview(view)
    if mv.readonly or not mv.c_contiguous:
        raise ValueError("the primary KV view must be a writable C-contiguous buffer")
    arr = (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B"))
    return ctypes.addressof(arr), arr
