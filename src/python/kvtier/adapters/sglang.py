"""kvtier as an SGLang HiCache storage (L3) backend.

Targets SGLang's HiCacheStorage interface (sglang/srt/mem_cache/
hicache_storage.py) of SGLang 0.5.x, loaded with
`--hicache-storage-backend dynamic` and

    --hicache-storage-backend-extra-config '{"backend_name": "kvtier",
      "module_path": "kvtier.adapters.sglang", "class_name": "KvtierHiCacheStorage",
      "path": "/nvme/kvtier", "capacity_gb": 512}'

The namespace comes from the HiCacheStorageConfig: model_name, TP rank and
size (MLA models share one copy across ranks), and the host layout. SGLang
runs each TP / PP rank in a process of its own and a store folder has one
writing process, so with more than one rank each rank opens its own
sub-folder of `path` (`tp<r>-pp<p>`) with an even share of `capacity_gb`. The
zero-copy path (batch_get_v1 / batch_set_v1) reads and writes the host
pool's pages in place through pool.get_page_buffer_meta(); a page's
fragments (K and V for non-MLA) are stored as one kvtier block.
When SGLang is importable the class subclasses its HiCacheStorage.
"""
import dataclasses
import os

from .._errors import Code, KvtierError
from ._common import open_store

SGLANG_VERSION_TARGET = "0.5.x"

try:  # pragma: no cover - SGLang is not installed on CI machines
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig
    HAVE_SGLANG = True
except ImportError:
    HAVE_SGLANG = False

    class HiCacheStorage:  # stand-in for the engine's abstract base
        pass

    @dataclasses.dataclass
    class HiCacheStorageConfig:
        tp_rank: int = 0
        tp_size: int = 1
        pp_rank: int = 0
        pp_size: int = 1
        is_mla_model: bool = False
        is_page_first_layout: bool = True
        model_name: str = ""
        extra_config: dict = None


_LOADER_KEYS = ("backend_name", "module_path", "class_name", "interface_v1")


def store_config(cfg, storage_config):
    """The store options of this rank: with several TP / PP ranks (one
    process each, and a store folder admits one writing process) the folder
    is `path`/tp<r>-pp<p> and capacity_gb is split evenly among the ranks."""
    cfg = dict(cfg)
    tp_rank = int(getattr(storage_config, "tp_rank", 0) or 0)
    tp_size = int(getattr(storage_config, "tp_size", 1) or 1)
    pp_rank = int(getattr(storage_config, "pp_rank", 0) or 0)
    pp_size = int(getattr(storage_config, "pp_size", 1) or 1)
    ranks = tp_size * pp_size
    path = cfg.get("path")
    if ranks > 1 and path:
        if not (0 <= tp_rank < tp_size and 0 <= pp_rank < pp_size):
            raise ValueError(f"rank tp{tp_rank}/{tp_size} pp{pp_rank}/{pp_size} is out of range")
        os.makedirs(path, mode=0o700, exist_ok=True)
        cfg["path"] = os.path.join(path, f"tp{tp_rank}-pp{pp_rank}")
        if cfg.get("capacity_gb") is not None:
            cfg["capacity_gb"] = float(cfg["capacity_gb"]) / ranks
    return cfg


def namespace_spec(storage_config, overrides=None):
    mla = bool(getattr(storage_config, "is_mla_model", False))
    page_first = bool(getattr(storage_config, "is_page_first_layout", True))
    tp_rank = 0 if mla else int(getattr(storage_config, "tp_rank", 0) or 0)
    tp_size = 1 if mla else int(getattr(storage_config, "tp_size", 1) or 1)
    pp_rank = int(getattr(storage_config, "pp_rank", 0) or 0)
    model = str(getattr(storage_config, "model_name", "") or "")
    layout = ("sglang-page-first" if page_first else "sglang-layer-first") + ("-mla" if mla else "")
    if int(getattr(storage_config, "pp_size", 1) or 1) > 1:
        layout += f"-pp{pp_rank}"
    spec = {"name": f"sglang/{model}/tp{tp_rank}of{tp_size}/{layout}", "model_id": model,
            "layout": layout, "tp_rank": tp_rank, "tp_size": tp_size, "hash_scheme": "sha256-chain"}
    spec.update(overrides or {})
    return spec


def _target(loc, size):
    """A destination/source for kvtier: a tensor, buffer or raw address."""
    if isinstance(loc, int) and size is None:
        raise KvtierError(Code.INVALID_ARGUMENT, "a raw target_location needs target_sizes")
    return loc if size is None else ((loc, int(size)) if isinstance(loc, int) else loc)


class KvtierHiCacheStorage(HiCacheStorage):
    """Extra-config keys: path (required), capacity_gb (for all ranks
    together), namespace (dict of spec overrides, e.g. {"dtype": "bf16"}),
    and any kvtier Options field."""

    def __init__(self, storage_config=None, kwargs=None, **extra):
        cfg = dict(getattr(storage_config, "extra_config", None) or {})
        cfg.update(kwargs or {})
        cfg.update(extra)
        for k in _LOADER_KEYS:
            cfg.pop(k, None)
        self._spec = namespace_spec(storage_config, cfg.pop("namespace", None))
        self._store = open_store(store_config(cfg, storage_config))
        self._ns = self._store.register_namespace(**self._spec)
        self.mem_pool_host = None
        self._stats = {"gets": 0, "hits": 0, "sets": 0, "exists": 0}

    # ---- required interface ---------------------------------------------------
    def get(self, key, target_location=None, target_sizes=None):
        self._stats["gets"] += 1
        try:
            if target_location is None:
                data = self._ns.get(key)
                self._stats["hits"] += data is not None
                return data
            got = self._ns.get_into(key, _target(target_location, target_sizes))
        except KvtierError:
            return None
        self._stats["hits"] += got is not None
        return None if got is None else target_location

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        if target_locations is None:
            return [self.get(k) for k in keys]
        sizes = target_sizes if target_sizes is not None else [None] * len(keys)
        try:
            got = self._ns.get_batch(keys, [_target(t, s) for t, s in zip(target_locations, sizes)])
        except KvtierError:
            return [None] * len(keys)
        self._stats["gets"] += len(keys)
        self._stats["hits"] += sum(g is not None for g in got)
        return [t if g is not None else None for t, g in zip(target_locations, got)]

    def set(self, key, value=None, target_location=None, target_sizes=None):
        src = value if value is not None else target_location
        if src is None:
            return False
        self._stats["sets"] += 1
        try:
            return self._ns.put(key, _target(src, target_sizes if value is None else None))
        except KvtierError:
            return False

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        srcs = values if values is not None else target_locations
        if srcs is None:
            return False
        sizes = target_sizes if (values is None and target_sizes is not None) else [None] * len(keys)
        self._stats["sets"] += len(keys)
        try:
            codes = self._ns.put_batch(keys, [_target(s, z) for s, z in zip(srcs, sizes)])
        except KvtierError:
            return False
        return all(c == Code.OK for c in codes)

    def exists(self, key):
        self._stats["exists"] += 1
        try:
            return self._ns.contains(key)
        except KvtierError:
            return False

    # ---- used by current HiCache ------------------------------------------------
    def batch_exists(self, keys, extra_info=None):
        """Number of consecutive present keys from the start."""
        try:
            return self._ns.lookup_prefix(keys)
        except KvtierError:
            return 0

    def register_mem_pool_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host

    def _page_frags(self, keys, host_indices):
        if self.mem_pool_host is None:
            raise KvtierError(Code.INVALID_ARGUMENT, "register_mem_pool_host was not called")
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if not keys or len(ptrs) % len(keys) or len(ptrs) != len(sizes):
            raise KvtierError(Code.INVALID_ARGUMENT, "page buffer meta does not match the keys")
        per = len(ptrs) // len(keys)
        return [[(int(ptrs[i * per + j]), int(sizes[i * per + j])) for j in range(per)]
                for i in range(len(keys))]

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        try:
            frags = self._page_frags(keys, host_indices)
            got = self._ns.get_batch(keys, frags)
        except KvtierError:
            return [False] * len(keys)
        self._stats["gets"] += len(keys)
        self._stats["hits"] += sum(g is not None for g in got)
        return [g is not None for g in got]

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        try:
            frags = self._page_frags(keys, host_indices)
            absent = [i for i, k in enumerate(keys) if not self._ns.contains(k)]
            codes = self._ns.put_batch([keys[i] for i in absent], [frags[i] for i in absent])
        except KvtierError:
            return [False] * len(keys)
        self._stats["sets"] += len(absent)
        ok = [True] * len(keys)
        for i, c in zip(absent, codes):
            ok[i] = c == Code.OK
        return ok

    def clear(self):
        """Drops every block of this backend's namespace."""
        self._store.remove_namespace(self._ns)
        self._ns = self._store.register_namespace(**self._spec)

    def get_stats(self):
        stats = dict(self._stats)
        stats["store"] = self._store.stats()
        return stats

    def close(self):
        self._store.close()
