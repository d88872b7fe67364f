"""kvtier as a vLLM secondary offloading tier.

Targets vLLM's tiering interface (vllm/v1/kv_offload/tiering/base.py,
SecondaryTierManager) of vLLM 0.25-0.32. Enable it with the
OffloadingConnector and a secondary tier entry (see docs/engines.md):

    {"type": "kvtier", "module_path": "kvtier.adapters.vllm",
     "path": "/nvme/kvtier", "capacity_gb": 512}

Every scheduler-facing method returns at once: index lookups, stores and
loads run on this tier's worker threads (kvtier releases the GIL), and
results are collected by get_finished_jobs(). A store copies rows
`job.chunk_ids` (or `job.block_ids`) of the pinned CPU tier's memoryview
(num_chunks, row_bytes) into kvtier; a load copies blocks back into rows.
When vLLM is importable the class subclasses its SecondaryTierManager;
otherwise minimal stand-ins with the same names are defined here.
"""
import collections
import concurrent.futures
import dataclasses
import enum
import threading
import time

from .._errors import Code
from ._common import open_store, view_address

VLLM_VERSION_TARGET = "0.25-0.32"

try:  # pragma: no cover - vLLM is not installed on CI machines
    from vllm.v1.kv_offload.tiering import base as _vbase

    SecondaryTierManager = _vbase.SecondaryTierManager
    JobResult = _vbase.JobResult
    LookupResult = getattr(_vbase, "LookupResult", None)
    HAVE_VLLM = True
except ImportError:
    _vbase = None
    HAVE_VLLM = False

    class SecondaryTierManager:  # stand-in for the engine's abstract base
        def __init__(self, offloading_spec=None, primary_kv_view=None):
            self._offloading_spec = offloading_spec
            self._primary_kv_view = primary_kv_view

    @dataclasses.dataclass
    class JobResult:
        job_id: int
        success: bool
        successful_keys: list = dataclasses.field(default_factory=list)
        transfer_time: float = 0.0
        transfer_bytes: int = 0

    LookupResult = None

if LookupResult is None:
    class LookupResult(enum.Enum):
        MISS = 0
        HIT = 1
        HIT_PENDING = 2
        RETRY = 3


def _job_result(**kw):
    """Builds a JobResult with the fields this vLLM's JobResult has."""
    if dataclasses.is_dataclass(JobResult):
        names = {f.name for f in dataclasses.fields(JobResult)}
        kw = {k: v for k, v in kw.items() if k in names}
    return JobResult(**kw)


def namespace_spec(spec_or_config, row_bytes, overrides=None):
    """The kvtier namespace of a vLLM deployment: model, revision, dtype,
    block size, TP size and hash algorithm (rows cover every TP rank)."""
    vc = getattr(spec_or_config, "vllm_config", spec_or_config)
    mc = getattr(vc, "model_config", None)
    cc = getattr(vc, "cache_config", None)
    pc = getattr(vc, "parallel_config", None)
    model = str(getattr(mc, "model", "") or "")
    dtype = str(getattr(mc, "dtype", "") or "").replace("torch.", "")
    tp = int(getattr(pc, "tensor_parallel_size", 1) or 1)
    block = int(getattr(spec_or_config, "block_size", 0) or getattr(cc, "block_size", 0) or 0)
    spec = {
        "name": f"vllm/{model}/{dtype}/tp{tp}",
        "model_id": model,
        "model_revision": str(getattr(mc, "revision", "") or ""),
        "dtype": dtype,
        "layout": "vllm-cpu-tier-row",
        "block_tokens": block,
        "block_bytes": int(row_bytes),
        "tp_rank": 0,
        "tp_size": tp,
        "hash_scheme": str(getattr(cc, "prefix_caching_hash_algo", "") or ""),
    }
    spec.update(overrides or {})
    return spec


def _rows(job):
    ids = getattr(job, "chunk_ids", None)
    if ids is None:
        ids = getattr(job, "block_ids")
    return [int(i) for i in ids]


class KvtierTierManager(SecondaryTierManager):
    """Config keys (the tier's dict): path (required), capacity_gb, workers
    (default 4), sync_lookup (answer lookups inline from the index instead
    of RETRY-then-answer; default false), namespace (dict of spec overrides),
    and any kvtier Options field."""

    def __init__(self, offloading_spec=None, primary_kv_view=None, **config):
        try:
            super().__init__(offloading_spec, primary_kv_view)
        except TypeError:
            super().__init__()
        view = memoryview(primary_kv_view)
        if view.ndim == 2:
            self._row_bytes = view.shape[1] * view.itemsize
            self._num_rows = view.shape[0]
        else:
            self._row_bytes = int(config.pop("row_bytes"))
            self._num_rows = view.nbytes // self._row_bytes
        config.pop("row_bytes", None)
        config.pop("type", None)
        config.pop("module_path", None)
        self._base, self._view_keep = view_address(view)
        workers = int(config.pop("workers", 4))
        self._sync_lookup = bool(config.pop("sync_lookup", False))
        ns_over = config.pop("namespace", None)
        self._store = open_store(config)
        self._ns = self._store.register_namespace(**namespace_spec(offloading_spec, self._row_bytes, ns_over))
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="kvtier-vllm")
        self._lock = threading.Lock()
        self._known = {}            # key -> present (answers of finished lookups)
        self._lookups = {}          # key -> Future[bool]
        self._storing = collections.Counter()  # keys with a store in flight
        self._req_keys = collections.defaultdict(set)
        self._jobs = set()          # in-flight futures
        self._finished = collections.deque()
        self._events = []
        self._stats = collections.Counter()

    @staticmethod
    def get_tier_type():
        return "kvtier"

    # ---- lookups ------------------------------------------------------------
    def lookup(self, key, req_context=None):
        k = bytes(key)
        req = getattr(req_context, "req_id", None)
        with self._lock:
            self._stats["lookups"] += 1
            if req is not None:
                self._req_keys[req].add(k)
            if self._storing[k] > 0:
                return LookupResult.HIT_PENDING
            if k in self._known:
                return LookupResult.HIT if self._known[k] else LookupResult.MISS
            fut = self._lookups.get(k)
            if fut is None and not self._sync_lookup:
                self._lookups[k] = self._pool.submit(self._ns.contains, k)
                return LookupResult.RETRY
            if fut is not None and not fut.done():
                return LookupResult.RETRY
            if fut is not None:
                del self._lookups[k]
        try:
            present = fut.result() if fut is not None else self._ns.contains(k)
        except Exception:
            present = False
        with self._lock:
            self._known[k] = present
            self._stats["lookup_hits" if present else "lookup_misses"] += 1
        return LookupResult.HIT if present else LookupResult.MISS

    def touch(self, keys, req_context=None):
        # kvtier evicts oldest segments first and reinserts blocks read since
        # written; a touch without a read carries no information for it.
        with self._lock:
            self._stats["touches"] += len(list(keys))

    # ---- transfers -------------------------------------------------------------
    def _row(self, i):
        if not 0 <= i < self._num_rows:
            raise IndexError(f"row {i} outside the CPU tier's {self._num_rows} rows")
        return (self._base + i * self._row_bytes, self._row_bytes)

    def _track(self, fut):
        with self._lock:
            self._jobs.add(fut)
        fut.add_done_callback(lambda f: self._untrack(f))

    def _untrack(self, fut):
        with self._lock:
            self._jobs.discard(fut)

    def submit_store(self, job):
        keys = [bytes(k) for k in job.keys]
        rows = _rows(job)
        with self._lock:
            for k in keys:
                self._storing[k] += 1
        self._track(self._pool.submit(self._do_store, job.job_id, keys, rows))

    def _do_store(self, job_id, keys, rows):
        t0 = time.monotonic()
        ok_keys = []
        try:
            codes = self._ns.put_batch(keys, [self._row(r) for r in rows])
            ok_keys = [k for k, c in zip(keys, codes) if c == Code.OK]
        except Exception:
            codes = []
        dt = time.monotonic() - t0
        with self._lock:
            for k in keys:
                self._storing[k] -= 1
                if self._storing[k] <= 0:
                    del self._storing[k]
            for k in ok_keys:
                self._known[k] = True
                self._events.append(("stored", k))
            self._stats["store_jobs"] += 1
            self._stats["store_bytes"] += len(ok_keys) * self._row_bytes
            self._stats["store_time_us"] += int(dt * 1e6)
            self._finished.append(_job_result(job_id=job_id, success=len(ok_keys) == len(keys),
                                              successful_keys=ok_keys, transfer_time=dt,
                                              transfer_bytes=len(ok_keys) * self._row_bytes))

    def submit_load(self, job):
        keys = [bytes(k) for k in job.keys]
        rows = _rows(job)
        self._track(self._pool.submit(self._do_load, job.job_id, keys, rows))

    def _do_load(self, job_id, keys, rows):
        t0 = time.monotonic()
        ok_keys = []
        try:
            sizes = self._ns.get_batch(keys, [self._row(r) for r in rows])
            ok_keys = [k for k, s in zip(keys, sizes) if s == self._row_bytes]
        except Exception:
            pass
        dt = time.monotonic() - t0
        with self._lock:
            for k in keys:
                if k not in ok_keys:
                    self._known[k] = False  # evicted since the lookup
            self._stats["load_jobs"] += 1
            self._stats["load_bytes"] += len(ok_keys) * self._row_bytes
            self._stats["load_time_us"] += int(dt * 1e6)
            self._finished.append(_job_result(job_id=job_id, success=len(ok_keys) == len(keys),
                                              successful_keys=ok_keys, transfer_time=dt,
                                              transfer_bytes=len(ok_keys) * self._row_bytes))

    def get_finished_jobs(self):
        with self._lock:
            out = list(self._finished)
            self._finished.clear()
        return out

    get_finished = get_finished_jobs  # the name in earlier interface versions

    def drain_jobs(self, timeout=None):
        """Waits until every submitted job has finished (for shutdown and tests)."""
        with self._lock:
            jobs = list(self._jobs) + list(self._lookups.values())
        concurrent.futures.wait(jobs, timeout=timeout)

    # ---- requests, events, stats ---------------------------------------------------
    def on_new_request(self, req_context=None):
        return None

    def on_request_finished(self, req_context=None):
        req = getattr(req_context, "req_id", None)
        with self._lock:
            for k in self._req_keys.pop(req, ()):
                self._known.pop(k, None)  # answers are per request: drop them

    def take_events(self):
        with self._lock:
            out, self._events = self._events, []
        return out

    def get_stats(self):
        with self._lock:
            stats = dict(self._stats)
        stats["store"] = self._store.stats()
        return stats

    def shutdown(self):
        if self._store.closed:
            return
        self.drain_jobs()
        self._pool.shutdown(wait=True)
        self._store.close()


# The name vLLM's tier loader looks for may differ between versions.
KvtierSecondaryTier = KvtierTierManager
