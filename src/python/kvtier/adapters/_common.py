"""Helpers shared by the adapters."""
import ctypes
import os

from .. import Store


def is_service(path):
    """Whether `path` names a kvtier service ("unix:/path/to.sock", or
    "auto:/store/folder") rather than a store folder: then every process of
    the engine shares the one store the service holds."""
    return isinstance(path, str) and path.startswith(("unix:", "auto:"))


def open_store(cfg):
    """Opens a Store from an adapter config dict: path (required),
    capacity_gb, and any kvtier Options field under its own name. For a
    service, the capacity is the service's (kvtier serve --capacity)."""
    cfg = dict(cfg)
    path = cfg.pop("path", None)
    if not path:
        raise ValueError("kvtier adapter config needs 'path' (the store folder)")
    cap = cfg.pop("capacity_gb", None)
    if cap is not None and not is_service(path):
        cfg["capacity_bytes"] = int(float(cap) * (1 << 30))
    return Store(path, **cfg)


def shared_mapping(address, size):
    """(path, file offset) of the MAP_SHARED file mapping holding
    [address, address+size) in this process (/proc/self/maps), or None: the
    memory a service can be handed (vLLM's CPU tier is such a file in
    /dev/shm)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) < 6 or "s" not in parts[1]:
                    continue
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                path = parts[5].strip()
                if lo <= address and address + size <= hi and path.startswith("/") and not path.endswith("(deleted)"):
                    return path, int(parts[2], 16) + (address - lo)
    except OSError:
        pass
    return None


def register_shared(store, address, size, log):
    """Hands the service the shared file under [address, address+size) when
    there is one, so payloads there move without staging; a no-op for an
    embedded store and for private memory."""
    if store is None or not is_service(getattr(store, "path", "")):
        return False
    found = shared_mapping(address, size)
    if found is None:
        return False
    path, offset = found
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        log.info("kvtier: %s stays staged: %s", path, e)
        return False
    try:
        store.register_memory((address, size), fd, offset)
        return True
    except Exception as e:  # the service refused it: the staging path still works
        log.info("kvtier: the service did not take %s: %s", path, e)
        return False
    finally:
        os.close(fd)


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
