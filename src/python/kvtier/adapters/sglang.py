"""kvtier as an SGLang HiCache storage (L3) backend.

Targets SGLang's HiCacheStorage (sglang/srt/mem_cache/hicache_storage.py) as
run by HiCacheController, tested against the commit named in docs/engines.md.
Enable it with

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "kvtier",
      "module_path": "kvtier.adapters.sglang", "class_name": "KvtierHiCacheStorage",
      "interface_v1": 1, "path": "/nvme/kvtier", "capacity_gb": 512}'

"interface_v1": 1 makes SGLang use the zero-copy path (batch_get_v1 /
batch_set_v1): a page moves between the host pool and kvtier in place, its
fragments (from pool.get_page_buffer_meta) stored as one block. Without it
SGLang copies each page through a flat tensor (the generic get/set).

The two paths lay a page's bytes out differently, and each host layout
(--hicache-mem-layout) orders them differently again, so the namespace pins
the mode and the host pool's exact geometry: pool class, layout, dtype, page
size, layers, heads (or MLA's latent dims) and the page's fragment sizes. It
is registered when SGLang hands over the host pool (register_mem_pool_host),
so a store written one way is a miss read any other way, never wrong bytes.

Ranks: each TP / PP / attention-CP rank runs in a process of its own. Given a
service (`path` "unix:SOCKET" or "auto:FOLDER"), every rank shares its one
store: DP-attention ranks (all attention TP rank 0) share their blocks, and
for MLA models, where SGLang backs up only from TP rank 0 and takes the
minimum hit count over the TP group, every rank hits what rank 0 wrote. Given
a folder, which admits one process, several ranks each open `path`/tp<r>-
pp<p>[-cp<c>] with an even share of capacity_gb: DP-attention ranks then
collide and MLA with TP > 1 never hits, so use a service for those.

Deployments of different TP sizes (tp_lcm_size, page_head, interface_v1):
where SGLang splits a rank's heads, each piece of a page is stored as the
rank of a TP-tp_lcm_size deployment holding those heads stores its page, so
deployments share pages through a service (SplitHeadsNamespace).

Hybrid models (Mamba / SWA / DSA / DeepSeek V4 pools beside the KV pool):
SGLang hands each extra host pool over with register_mem_host_pool_v2 and
moves its pages with the _v2 calls, the KV pages still through the calls
above. Each extra pool gets a namespace of its own, pinned to that pool's
geometry, and its pages move as flat pages (get_data_page /
set_from_flat_data_page, which every pool class has). batch_exists_v2
answers as SGLang's own file backend does: the KV prefix, shortened to what
every extra pool holds by its hit policy (all pages, or the trailing ones).

A store that cannot be opened is logged once and the backend then answers
misses and failed writes: the server runs without L3.
"""
import functools
import logging
import os
import threading
import time

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, PoolHitPolicy, PoolName, PoolTransferResult
from sglang.srt.observability.metrics_collector import StorageMetrics

from .._errors import Code, KvtierError
from ._common import check_config_keys, is_service, open_or_disable

logger = logging.getLogger(__name__)

# Keys of the extra config that SGLang itself reads (the loader and the
# zero-copy switch); SGLang pops its prefetch_* and tp_lcm_size keys first.
LOADER_KEYS = ("backend_name", "module_path", "class_name", "interface_v1")

# The backend's own keys. Anything else is refused by name at start.
CONFIG_KEYS = {
    "path": "store folder (required; with several ranks each uses path/tp<r>-pp<p>), or a service: "
            "unix:SOCKET or auto:FOLDER, shared by every rank",
    "capacity_gb": "byte budget of all ranks' stores together, in GiB",
    "model_revision": "model revision or commit: part of the namespace",
    "salt": "tenant salt: deployments with different salts never share blocks",
    "options": "dict of further kvtier Options fields (include/kvtier/options.h)",
}

# Page size per key of SGLang's get_hash_str (sha256 over the token ids,
# chained through the previous page's hash).
HASH_SCHEME = "sglang-sha256-chain"

# Bound on StorageMetrics samples kept between two get_stats() calls
# (SGLang drains them each metrics interval; without --enable-metrics never).
MAX_METRIC_SAMPLES = 4096

# Host-pool attributes that decide where a page's bytes lie.
_GEOMETRY = ("layout", "page_size", "layer_num", "start_layer", "end_layer", "head_num", "head_dim",
             "kv_lora_rank", "qk_rope_head_dim", "kv_cache_dim", "index_head_dim",
             # a hybrid model's Mamba pool (a KV pool has none of these: its namespaces stay as they were)
             "num_mamba_layers", "conv_state_shapes", "temporal_state_shape", "temporal_dtype")


def _rank_info(storage_config):
    g = lambda name, default: int(getattr(storage_config, name, default) or default)  # noqa: E731
    return {"tp_rank": g("tp_rank", 0), "tp_size": g("tp_size", 1), "pp_rank": g("pp_rank", 0),
            "pp_size": g("pp_size", 1), "cp_rank": g("attn_cp_rank", 0), "cp_size": g("attn_cp_size", 1)}


def check_config(extra_config, storage_config):
    """The backend's own keys of SGLang's extra config. Raises ValueError
    naming a key that is unknown, missing or not supported."""
    cfg_all = dict(extra_config or {})
    cfg = {k: v for k, v in cfg_all.items() if k not in LOADER_KEYS}
    check_config_keys(cfg, CONFIG_KEYS, "kvtier backend", "extra-config")  # SGLang's LOADER_KEYS taken out above
    if split_factor(storage_config) > 1 and not cfg_all.get("interface_v1"):
        raise ValueError("kvtier backend: tp_lcm_size splits heads on the zero-copy path only: add "
                         "\"interface_v1\": 1 to the extra config, or drop 'tp_lcm_size'")
    return cfg


def split_factor(storage_config):
    """Into how many pieces SGLang splits a rank's heads (1: none). With
    tp_lcm_size above the TP size (page_head layout, not MLA: SGLang's
    should_split_heads), a page's heads go in tp_lcm_size / tp_size pieces,
    each stored as the rank of a TP-tp_lcm_size deployment holding just those
    heads stores its page, so deployments of different TP sizes share pages."""
    if not getattr(storage_config, "should_split_heads", False):
        return 1
    return int(storage_config.tp_lcm_size) // int(storage_config.tp_size)


def store_path(path, ranks):
    """This rank's store folder: `path` itself with one rank or a service
    (every rank shares its store), else a sub-folder per rank (a store
    folder admits one process)."""
    if ranks["tp_size"] * ranks["pp_size"] * ranks["cp_size"] == 1 or is_service(path):
        return path
    for r, n in (("tp_rank", "tp_size"), ("pp_rank", "pp_size"), ("cp_rank", "cp_size")):
        if not 0 <= ranks[r] < ranks[n]:
            raise ValueError(f"kvtier backend: {r} {ranks[r]} is outside {n} {ranks[n]}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    name = f"tp{ranks['tp_rank']}-pp{ranks['pp_rank']}"
    if ranks["cp_size"] > 1:
        name += f"-cp{ranks['cp_rank']}"
    return os.path.join(path, name)


def anchor_pool(pool):
    """The KV pool itself: a hybrid model's host pool is a HostPoolGroup,
    which answers the KV calls for its anchor entry but lacks its geometry."""
    entry = getattr(pool, "anchor_entry", None)
    return entry.host_pool if entry is not None else pool


def pool_geometry(pool, head_num=None):
    """Where the host pool puts a page's bytes, as a string (`head_num`: of
    one piece of split heads)."""
    parts = [type(pool).__name__, str(getattr(pool, "dtype", ""))]
    for a in _GEOMETRY:
        v = head_num if a == "head_num" and head_num is not None else getattr(pool, a, None)
        if v is not None:
            parts.append(f"{a}={v}")
    return ",".join(parts)


def page_bytes_flat(pool):
    page = pool.get_dummy_flat_data_page()
    return int(page.numel()) * int(page.element_size())


def page_fragments_v1(pool, split=1):
    """Fragment sizes of one page on the zero-copy path (of one piece of its
    heads when SGLang splits them in `split`)."""
    import torch

    one_page = torch.arange(pool.page_size, dtype=torch.int64)
    if split == 1:
        _, sizes = pool.get_page_buffer_meta(one_page)
    else:
        _, sizes = pool.get_split_heads_page_buffer_meta(one_page, split)
        sizes = sizes[:len(sizes) // split]
    return [int(s) for s in sizes]


def namespace_spec(storage_config, pool, mode, config, piece=0):
    """The namespace of one rank's pages in one mode ("v1" zero-copy,
    "flat" generic, or "v2-<pool>" for a hybrid model's extra pool), pinned
    to the host pool's exact geometry; with split heads, that of piece
    `piece`, which is the page of rank tp_rank * split + piece of
    tp_lcm_size."""
    pool = anchor_pool(pool)
    ranks = _rank_info(storage_config)
    mla = bool(getattr(storage_config, "is_mla_model", False))
    tp_rank, tp_size = (0, 1) if mla else (ranks["tp_rank"], ranks["tp_size"])  # MLA: one copy for all ranks
    split = split_factor(storage_config) if mode == "v1" else 1
    heads = None
    if split > 1:
        if int(pool.head_num) % split:
            raise ValueError(f"kvtier backend: {pool.head_num} heads per rank do not split in {split} "
                             f"(tp_lcm_size {storage_config.tp_lcm_size}, TP {tp_size})")
        tp_rank, tp_size, heads = tp_rank * split + piece, tp_size * split, int(pool.head_num) // split
    if mode == "v1":
        frags = page_fragments_v1(pool, split)
        shape, size = f"frags={len(frags)}x{frags[0] if len(set(frags)) == 1 else '+'.join(map(str, frags))}", sum(frags)
    else:
        size = page_bytes_flat(pool)
        shape = f"flat={size}"
    layout = f"sglang-{mode}/{pool_geometry(pool, heads)}/{shape}"
    if ranks["cp_size"] > 1:
        layout += f"/cp{ranks['cp_rank']}of{ranks['cp_size']}"
    model = str(getattr(storage_config, "model_name", "") or "")
    return {
        "name": f"sglang/{model}/tp{tp_rank}of{tp_size}/pp{ranks['pp_rank']}/{mode}/{pool.layout}",
        "model_id": model,
        "model_revision": str(config.get("model_revision", "")),
        "dtype": str(getattr(pool, "dtype", "")),
        "layout": layout,
        "block_tokens": int(pool.page_size),
        "block_bytes": int(size),
        "tp_rank": tp_rank,
        "tp_size": tp_size,
        "hash_scheme": HASH_SCHEME,
        "tenant_salt": str(config.get("salt", "")),
    }


class SplitHeadsNamespace:
    """A page whose heads SGLang splits (split_factor): piece j of each page
    is a block of namespace j, so what a call says of a page is true of every
    piece. A page's fragments come as get_split_heads_page_buffer_meta lists
    them, the pieces one after another."""

    def __init__(self, pieces):
        self.pieces = pieces

    def _of_piece(self, frags, j):
        n = len(frags) // len(self.pieces)
        return frags[j * n:(j + 1) * n]

    def get_batch(self, keys, frags):
        total = [0] * len(keys)
        for j, ns in enumerate(self.pieces):
            mine = [self._of_piece(f, j) for f in frags]
            for i, (got, f) in enumerate(zip(ns.get_batch(keys, mine), mine)):
                if total[i] is not None and got is not None and got == sum(size for _, size in f):
                    total[i] += got
                else:
                    total[i] = None  # a page missing a piece is a miss
        return total

    def put_absent(self, keys, frags):
        """Puts every piece not stored yet, with one contains_batch and one
        put_batch per piece. Returns {page index: code} for the pages of which
        a piece was put (the worst of its pieces' codes)."""
        codes = {}
        for j, ns in enumerate(self.pieces):
            # A piece may be there already: another deployment's rank wrote it.
            new = [i for i, there in enumerate(ns.contains_batch(keys)) if not there]
            if not new:
                continue
            for i, c in zip(new, ns.put_batch([keys[i] for i in new], [self._of_piece(frags[i], j) for i in new])):
                if codes.get(i, Code.OK) == Code.OK:
                    codes[i] = c
        return codes

    def contains_batch(self, keys):
        flags = [True] * len(keys)
        for ns in self.pieces:
            flags = [a and b for a, b in zip(flags, ns.contains_batch(keys))]
        return flags

    def contains(self, key):
        return all(ns.contains(key) for ns in self.pieces)

    def lookup_prefix(self, keys):
        return min(ns.lookup_prefix(keys) for ns in self.pieces)


def _put_absent(ns, keys, frags):
    """Puts the pages a namespace does not hold yet (blocks are immutable, so
    one already there is done). Returns {page index: code} of those put."""
    if isinstance(ns, SplitHeadsNamespace):
        return ns.put_absent(keys, frags)
    new = [i for i, there in enumerate(ns.contains_batch(keys)) if not there]
    if not new:
        return {}
    return dict(zip(new, ns.put_batch([keys[i] for i in new], [frags[i] for i in new])))


def _contained(failed):
    """SGLang calls the backend from its prefetch and backup threads, which an
    exception would stop: an unexpected error is logged with its traceback
    and answered as failed(args) (misses, failed writes), never raised."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(self, *args, **kwargs):
            try:
                return fn(self, *args, **kwargs)
            except Exception:
                logger.exception("kvtier backend: %s failed; answered as a miss or a failed write", fn.__name__)
                return failed(*args)
        return call
    return wrap


def _each_key(value):
    return lambda keys, *_: [value] * len(keys)


def _each_transfer(transfers, *_):
    return {t.name: [False] * len(t.keys or []) for t in transfers}


def _nbytes(t):
    return int(t.numel()) * int(t.element_size())


class KvtierHiCacheStorage(HiCacheStorage):
    """SGLang HiCacheStorage backed by a kvtier store (see CONFIG_KEYS).
    SGLang calls it from its prefetch and backup threads at once: kvtier's
    calls are thread-safe and release the GIL; the metrics take a lock."""

    def __init__(self, storage_config, kwargs=None):
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        extra.update(kwargs or {})
        self._config = check_config(extra, storage_config)
        self._storage_config = storage_config
        self._v1 = bool(extra.get("interface_v1", 0))  # the test SGLang itself makes
        if not self._v1:
            logger.warning("kvtier backend: \"interface_v1\": 1 is not in the extra config, so SGLang copies "
                           "every page through a tensor; add it for the zero-copy path")
        self.mem_pool_host = None
        self._ns = {}  # mode ("v1" or "flat") -> Namespace, once the host pool is known
        self._pools = {}  # a hybrid model's extra pools: name -> (host pool, Namespace or None)
        self._lock = threading.Lock()
        self._metrics = StorageMetrics()
        self._store = None
        opts = dict(self._config.get("options") or {})
        ranks = _rank_info(storage_config)
        opts["path"] = store_path(self._config["path"], ranks)
        if self._config.get("capacity_gb") is not None and not is_service(self._config["path"]):
            opts["capacity_gb"] = float(self._config["capacity_gb"]) / (
                ranks["tp_size"] * ranks["pp_size"] * ranks["cp_size"])
        self._store, _ = open_or_disable(opts, logger, "kvtier backend")  # without it the server runs without L3

    # ---- host pools ---------------------------------------------------------------
    def register_mem_pool_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host
        if self._store is None:
            return
        modes = ["flat"] + (["v1"] if self._v1 else [])  # "flat" also carries SGLang's draft pages
        try:
            for mode in modes:
                self._ns[mode] = self._register(mem_pool_host, mode)
        except Exception as e:
            logger.error("kvtier backend disabled: cannot register the host pool's namespace: %s", e)
            self._ns = {}

    def _register(self, pool, mode):
        split = split_factor(self._storage_config) if mode == "v1" else 1
        specs = [namespace_spec(self._storage_config, pool, mode, self._config, j) for j in range(split)]
        if split == 1:
            return self._store.register_namespace(**specs[0])
        return SplitHeadsNamespace([self._store.register_namespace(**spec) for spec in specs])

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        super().register_mem_host_pool_v2(host_pool, host_pool_name)
        name = str(host_pool_name)
        if name == PoolName.KV.value:
            return  # the KV pages go through register_mem_pool_host's namespaces
        ns = None
        if self._store is not None:
            try:
                spec = namespace_spec(self._storage_config, host_pool, f"v2-{name}", self._config)
                ns = self._store.register_namespace(**spec)
            except Exception as e:  # its pages then miss, and so does every prefix that needs them
                logger.error("kvtier backend: cannot register the '%s' pool's namespace: %s", name, e)
        self._pools[name] = (host_pool, ns)

    # ---- metrics --------------------------------------------------------------------
    def _sample(self, kind, pages, nbytes, t0):
        if not pages:
            return
        dt = max(time.monotonic() - t0, 1e-9)
        with self._lock:
            pgs, bw = ((self._metrics.prefetch_pgs, self._metrics.prefetch_bandwidth) if kind == "get"
                       else (self._metrics.backup_pgs, self._metrics.backup_bandwidth))
            if len(pgs) < MAX_METRIC_SAMPLES:
                pgs.append(pages)
                bw.append(nbytes / dt / 1e9)

    def get_stats(self):
        with self._lock:
            out, self._metrics = self._metrics, StorageMetrics()
        return out

    # ---- zero-copy path (interface_v1) ----------------------------------------------
    def _page_frags(self, keys, host_indices):
        split = split_factor(self._storage_config)
        if split > 1:
            # A hybrid model's host pool is a group: its KV pool holds the heads.
            ptrs, sizes = anchor_pool(self.mem_pool_host).get_split_heads_page_buffer_meta(host_indices, split)
        else:
            ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if not keys or len(ptrs) % len(keys) or len(ptrs) != len(sizes):
            raise KvtierError(Code.INVALID_ARGUMENT, "page buffer meta does not match the keys")
        per = len(ptrs) // len(keys)
        return [[(int(ptrs[i * per + j]), int(sizes[i * per + j])) for j in range(per)]
                for i in range(len(keys))]

    @_contained(_each_key(False))
    def batch_get_v1(self, keys, host_indices, extra_info=None):
        ns = self._ns.get("v1")
        if ns is None or not keys:
            return [False] * len(keys)
        t0 = time.monotonic()
        try:
            frags = self._page_frags(keys, host_indices)
            got = ns.get_batch(keys, frags)
        except KvtierError as e:
            logger.warning("kvtier backend: batch_get_v1 of %d pages failed: %s", len(keys), e)
            return [False] * len(keys)
        ok = [g is not None and g == sum(s for _, s in f) for g, f in zip(got, frags)]
        self._sample("get", sum(ok), sum(g for g, o in zip(got, ok) if o), t0)
        return ok

    @_contained(_each_key(False))
    def batch_set_v1(self, keys, host_indices, extra_info=None):
        ns = self._ns.get("v1")
        if ns is None or not keys:
            return [False] * len(keys)
        t0 = time.monotonic()
        ok = [True] * len(keys)
        try:
            frags = self._page_frags(keys, host_indices)
            codes = _put_absent(ns, keys, frags)
        except KvtierError as e:
            logger.warning("kvtier backend: batch_set_v1 of %d pages failed: %s", len(keys), e)
            return [False] * len(keys)
        for i, c in codes.items():
            ok[i] = c == Code.OK
        written = [i for i, c in codes.items() if c == Code.OK]
        self._sample("set", len(written), sum(sum(s for _, s in frags[i]) for i in written), t0)
        return ok

    # ---- generic path (flat page tensors) ----------------------------------------------
    def get(self, key, target_location=None, target_sizes=None):
        got = self.batch_get([key], None if target_location is None else [target_location])
        return got[0] if got else None

    @_contained(_each_key(None))
    def batch_get(self, keys, target_locations=None, target_sizes=None):
        ns = self._ns.get("flat")
        if ns is None or not keys or target_locations is None:
            return [None] * len(keys)  # SGLang always hands targets: get_dummy_flat_data_page()
        t0 = time.monotonic()
        try:
            got = ns.get_batch(keys, list(target_locations))
        except KvtierError as e:
            logger.warning("kvtier backend: batch_get of %d pages failed: %s", len(keys), e)
            return [None] * len(keys)
        out = [t if g is not None and g == _nbytes(t) else None for t, g in zip(target_locations, got)]
        hits = [t for t in out if t is not None]
        self._sample("get", len(hits), sum(_nbytes(t) for t in hits), t0)
        return out

    def set(self, key, value=None, target_location=None, target_sizes=None):
        src = value if value is not None else target_location
        return src is not None and self.batch_set([key], [src])

    @_contained(lambda *_: False)
    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        ns = self._ns.get("flat")
        srcs = values if values is not None else target_locations
        if ns is None or srcs is None or not keys:
            return False
        t0 = time.monotonic()
        srcs = [s.contiguous() if hasattr(s, "contiguous") else s for s in srcs]
        try:
            codes = _put_absent(ns, keys, srcs)
        except KvtierError as e:
            logger.warning("kvtier backend: batch_set of %d pages failed: %s", len(keys), e)
            return False
        written = [i for i, c in codes.items() if c == Code.OK]
        self._sample("set", len(written), sum(_nbytes(srcs[i]) for i in written if hasattr(srcs[i], "numel")), t0)
        return len(written) == len(codes)

    # ---- lookups --------------------------------------------------------------------
    def _lookup_ns(self):
        return self._ns.get("v1" if self._v1 else "flat")

    @_contained(lambda *_: False)
    def exists(self, key):
        ns = self._lookup_ns()
        try:
            return ns is not None and ns.contains(key)
        except KvtierError:
            return False

    @_contained(lambda *_: 0)
    def batch_exists(self, keys, extra_info=None):
        """Number of consecutive present keys from the start."""
        ns = self._lookup_ns()
        if ns is None or not keys:
            return 0
        try:
            return ns.lookup_prefix(keys)
        except KvtierError as e:
            logger.warning("kvtier backend: batch_exists of %d keys failed: %s", len(keys), e)
            return 0

    # ---- hybrid models: the extra pools (register_mem_host_pool_v2) ------------------
    def _pool_hits(self, transfer, keys, kv_pages):
        """How many leading KV pages this pool backs, by its hit policy."""
        _, ns = self._pools.get(str(transfer.name), (None, None))
        if ns is None:
            return 0
        if transfer.hit_policy != PoolHitPolicy.TRAILING_PAGES:
            return ns.lookup_prefix(keys[:kv_pages])  # every page of the prefix
        # Only the last `trailing` pages of a prefix must be there (a Mamba
        # state, an SWA window): the longest prefix that ends in them.
        trailing = max(1, len(transfer.keys) if transfer.keys else 1)
        present = ns.contains_batch(keys[:kv_pages])
        for end in range(kv_pages, 0, -1):
            if all(present[max(0, end - trailing):end]):
                return end
        return 0

    @_contained(lambda *_: PoolTransferResult.empty())
    def batch_exists_v2(self, keys, pool_transfers=None, extra_info=None):
        kv_pages = self.batch_exists(keys, extra_info)
        hits = {PoolName.KV: kv_pages} if kv_pages else {}
        pages = kv_pages
        for transfer in pool_transfers or []:
            if pages == 0:
                break
            try:
                found = self._pool_hits(transfer, keys, kv_pages)
            except KvtierError as e:
                logger.warning("kvtier backend: batch_exists_v2 of the '%s' pool failed: %s", transfer.name, e)
                found = 0
            if found:
                hits[transfer.name] = found
            pages = min(pages, found)
        return PoolTransferResult(pages, hits)

    def _pool_pages(self, transfer, op):
        """(host pool, Namespace, keys, each key's page offset in the pool),
        or None when the transfer cannot be served (said in the log)."""
        pool, ns = self._pools.get(str(transfer.name), (None, None))
        keys = list(transfer.keys or [])
        if ns is None or not keys:
            return None
        page = int(getattr(pool, "page_size", 1) or 1)
        idx = transfer.host_indices
        if idx is None or int(idx.numel()) != len(keys) * page:
            logger.error("kvtier backend: %s of the '%s' pool: %d keys and %s host indices do not match",
                         op, transfer.name, len(keys), None if idx is None else int(idx.numel()))
            return None
        return pool, ns, keys, [int(idx[i * page]) for i in range(len(keys))]

    def _each_pool_transfer(self, transfers, op, move):
        """{pool name: per-key success} for `transfers`; move(pool, ns, keys,
        offsets, ok) moves one transfer's pages and fills `ok`."""
        out = {}
        for transfer in transfers:
            ok = [False] * len(transfer.keys or [])
            out[transfer.name] = ok
            found = self._pool_pages(transfer, op)
            if found is None:
                continue
            try:
                move(*found, ok)
            except KvtierError as e:
                logger.warning("kvtier backend: %s of %d '%s' pages failed: %s", op, len(ok), transfer.name, e)
                ok[:] = [False] * len(ok)
        return out

    @_contained(_each_transfer)
    def batch_get_v2(self, transfers, extra_info=None):
        def load(pool, ns, keys, offsets, ok):
            t0 = time.monotonic()
            pages = [pool.get_dummy_flat_data_page() for _ in keys]
            got = ns.get_batch(keys, pages)
            for i, (g, page, off) in enumerate(zip(got, pages, offsets)):
                if g is not None and g == _nbytes(page):  # a short block is a miss, never a partial page
                    pool.set_from_flat_data_page(off, page)
                    ok[i] = True
            self._sample("get", sum(ok), sum(_nbytes(p) for p, o in zip(pages, ok) if o), t0)

        return self._each_pool_transfer(transfers, "batch_get_v2", load)

    @_contained(_each_transfer)
    def batch_set_v2(self, transfers, extra_info=None):
        def store(pool, ns, keys, offsets, ok):
            t0 = time.monotonic()
            new = [i for i, there in enumerate(ns.contains_batch(keys)) if not there]  # blocks are immutable
            pages = {i: pool.get_data_page(offsets[i], flat=True).contiguous() for i in new}
            codes = ns.put_batch([keys[i] for i in new], [pages[i] for i in new])
            ok[:] = [True] * len(keys)
            for i, c in zip(new, codes):
                ok[i] = c == Code.OK
            written = [i for i, c in zip(new, codes) if c == Code.OK]
            self._sample("set", len(written), sum(_nbytes(pages[i]) for i in written), t0)

        return self._each_pool_transfer(transfers, "batch_set_v2", store)

    # ---- lifecycle ------------------------------------------------------------------------
    def clear(self):
        """Drops every block of this rank's namespaces (SGLang's
        /clear_hicache_storage_backend)."""
        if self._store is None:
            return False
        for mode, ns in list(self._ns.items()):
            for piece in ns.pieces if isinstance(ns, SplitHeadsNamespace) else [ns]:
                self._store.remove_namespace(piece)
            self._ns[mode] = self._register(self.mem_pool_host, mode)
        for name, (pool, ns) in list(self._pools.items()):
            if ns is not None:
                self._store.remove_namespace(ns)
                spec = namespace_spec(self._storage_config, pool, f"v2-{name}", self._config)
                self._pools[name] = (pool, self._store.register_namespace(**spec))
        return True

    def close(self):
        self._ns = {}
        self._pools = {}
        if self._store is not None and not self._store.closed:
            self._store.close()
