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


def open_or_disable(opts, log, what, spec=None):
    """Opens the store of `opts` (see open_store) and registers namespace
    `spec` in it. When either fails, logs one line ("<what> disabled: cannot
    open store ...") and returns (None, None): the engine then runs without
    the tier rather than failing."""
    store = None
    try:
        store = open_store(opts)
        return store, (store.register_namespace(**spec) if spec is not None else None)
    except Exception as e:
        log.error("%s disabled: cannot open store %s: %s", what, opts.get("path"), e)
        if store is not None:
            store.close()
        return None, None


def view_address(view):
    """Base address of a writable, C-contiguous memoryview (no copy)."""
    mv = memoryview(view)
    if mv.readonly or not mv.c_contiguous:
        raise ValueError("the primary KV view must be a writable C-contiguous buffer")
    arr = (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B"))
    return ctypes.addressof(arr), arr
