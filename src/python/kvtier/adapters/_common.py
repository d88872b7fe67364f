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


def check_config_keys(cfg, known, who, where):
    """Refuses, naming the key, an adapter config with a key not in `known`,
    without 'path', or with an 'options' that is not a dict (kvtier Options):
    at engine start, never as a silent no-op tier."""
    unknown = sorted(set(cfg) - set(known))
    if unknown:
        raise ValueError(f"{who}: unknown {where} key(s) {unknown}; known: {sorted(known)}")
    if not cfg.get("path"):
        raise ValueError(f"{who}: {where} needs 'path' (the store folder)")
    if cfg.get("options") is not None and not isinstance(cfg["options"], dict):
        raise ValueError(f"{who}: {where} key 'options' must be a dict of kvtier Options")


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
