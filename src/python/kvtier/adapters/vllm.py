"""kvtier as a vLLM secondary offloading tier.

Targets vLLM's tiering interface, vllm/v1/kv_offload/tiering/base.py
(SecondaryTierManager), as tested against the commit named in
docs/engines.md. Enable it with the OffloadingConnector, the tiering spec and
a secondary tier whose "type" is this module's class name:

    --kv-transfer-config '{"kv_connector": "OffloadingConnector",
      "kv_role": "kv_both", "kv_connector_extra_config": {
        "spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 8e9,
        "secondary_tiers": [{"type": "KvtierTierManager",
                             "module_path": "kvtier.adapters.vllm",
                             "path": "/nvme/kvtier", "capacity_gb": 512}]}}'

and PYTHONHASHSEED pinned (vLLM seeds its block-hash chain from it: without
it nothing hits after a restart).

Every scheduler-facing method returns at once. Lookups, stores and loads run
on this tier's worker threads (kvtier's C calls release the GIL); results
are collected by get_finished_jobs(). A store copies rows `job.block_ids` of
the CPU tier's memoryview (num_blocks, row_bytes) into kvtier; a load copies
blocks back into rows. A store that cannot be opened is logged once and the
tier then answers MISS and fails its jobs: the engine runs without it.
"""
import collections
import concurrent.futures
import logging
import os
import threading
import time

from vllm.v1.kv_offload.base import (
    LookupResult,
    Medium,
    OffloadingCounterMetadata,
    OffloadingEvent,
    RequestOffloadingContext,
)
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import OffloadingConnectorStats

from .._errors import Code
from ._common import check_config_keys, is_service, open_or_disable, register_shared, view_address

logger = logging.getLogger(__name__)

# The tier's own config keys (beside "type" and "module_path", which vLLM's
# factory consumes). Anything else is refused by name at engine start.
CONFIG_KEYS = {
    "path": "store folder (required; with data parallelism each replica uses path/dp<index>), or a service: "
            "unix:SOCKET or auto:FOLDER, shared by every replica",
    "capacity_gb": "byte budget of the store, in GiB",
    "workers": "worker threads for lookups and transfers (default 4)",
    "hash_algo": "vLLM's --prefix-caching-hash-algo (default sha256): part of the namespace",
    "model_revision": "model revision or commit: part of the namespace",
    "salt": "tenant salt: deployments with different salts never share blocks",
    "options": "dict of further kvtier Options fields (include/kvtier/options.h)",
}

# Prometheus metrics this tier emits through vLLM's stats (labelled by tier).
METRIC_STORE_BYTES = "vllm:kv_offload_kvtier_store_bytes"
METRIC_LOAD_BYTES = "vllm:kv_offload_kvtier_load_bytes"
METRIC_LOOKUP_HITS = "vllm:kv_offload_kvtier_lookup_hits"
METRIC_LOOKUP_MISSES = "vllm:kv_offload_kvtier_lookup_misses"
METRIC_FAILED_KEYS = "vllm:kv_offload_kvtier_failed_keys"

# Bound on remembered lookup answers (keys): the scheduler asks again for a
# key it was told RETRY, and answers are dropped when their request finishes.
MAX_KNOWN_KEYS = 1 << 16


def namespace_spec(offloading_spec, row_bytes, config):
    """The kvtier namespace of a vLLM deployment, from its real OffloadingSpec
    (spec.config: model, cache, parallel, groups) and the tier config."""
    oc = offloading_spec.config
    par = oc.parallel
    tokens = "+".join(str(g.tokens_per_block) for g in oc.groups)
    layout = "/".join([
        "vllm-cpu-row",
        "canonical" if getattr(oc, "canonical_layout", False) else "direct",
        "replicated" if getattr(oc, "replicated_layout", False) else "per-worker",
        f"blocks{oc.cache.blocks_per_chunk}",
        f"hash{oc.cache.tokens_per_hash}",
        f"pp{par.pp_size}-pcp{par.pcp_size}-dcp{par.dcp_size}-ws{par.world_size}",
        f"kv{oc.worker_kv_bytes_per_block}",
    ])
    model = str(oc.model.name)
    return {
        "name": f"vllm/{model}/{oc.model.dtype}/tp{par.tp_size}",
        "model_id": model,
        "model_revision": str(config.get("model_revision", "")),
        "dtype": str(oc.model.dtype),
        "layout": layout,
        "block_tokens": int(oc.groups[0].tokens_per_block) * int(oc.cache.blocks_per_chunk) if oc.groups else 0,
        "block_bytes": int(row_bytes),
        "tp_rank": 0,  # rows hold what the scheduler gathers from every TP worker
        "tp_size": int(par.tp_size),
        "hash_scheme": f"vllm-{config.get('hash_algo', 'sha256')}/{tokens}",
        "tenant_salt": str(config.get("salt", "")),
    }


def _store_path(path, offloading_spec):
    par = offloading_spec.config.parallel
    if is_service(path):
        return path  # every replica shares the service's store
    if int(par.data_parallel_size) > 1:
        # One process per replica, and a store folder has one writer: until
        # the node service, each replica keeps its own folder.
        os.makedirs(path, mode=0o700, exist_ok=True)
        return f"{path}/dp{int(par.data_parallel_index)}"
    return path


class KvtierTierManager(SecondaryTierManager):
    """vLLM SecondaryTierManager backed by a kvtier store (see CONFIG_KEYS)."""

    medium = Medium.STORAGE

    def __init__(self, offloading_spec, primary_kv_view, tier_type, **config):
        super().__init__(offloading_spec=offloading_spec, primary_kv_view=primary_kv_view, tier_type=tier_type)
        check_config_keys(config, CONFIG_KEYS, "kvtier tier", "config")
        view = memoryview(primary_kv_view)
        if view.ndim != 2:
            raise ValueError(f"kvtier tier: the primary view must be (num_blocks, row_bytes), got {view.ndim} dims")
        self._num_rows = view.shape[0]
        self._row_bytes = view.shape[1] * view.itemsize
        self._base, self._view_keep = view_address(view)
        self._events_on = bool(getattr(getattr(offloading_spec, "kv_events_config", None),
                                       "enable_kv_cache_events", False))
        self._pool = concurrent.futures.ThreadPoolExecutor(int(config.get("workers", 4)),
                                                           thread_name_prefix="kvtier-vllm")
        self._lock = threading.Lock()
        self._known = collections.OrderedDict()  # key -> present (finished lookups), bounded
        self._lookups = {}                       # key -> None (asked) or bool (answered)
        self._lookup_queue = []                  # keys asked this step, not yet sent
        self._lookup_runner = None               # Future of the batch runner, while it runs
        self._touched = collections.defaultdict(set)  # req id -> keys whose use was counted
        self._touch_queue = []                   # keys to count at the step's end
        self._storing = collections.Counter()    # keys with a store in flight
        self._req_keys = collections.defaultdict(set)
        self._jobs = set()                       # futures of transfers in flight
        self._finished = collections.deque()
        self._events = []
        self._stats = OffloadingConnectorStats()
        self._store = None
        self._ns = None
        opts = dict(config.get("options") or {})
        opts["path"] = _store_path(config["path"], offloading_spec)
        if "capacity_gb" in config:
            opts["capacity_gb"] = config["capacity_gb"]
        self._store, self._ns = open_or_disable(opts, logger, "kvtier tier",
                                                namespace_spec(offloading_spec, self._row_bytes, config))
        # Through a service, the CPU tier's rows (a file in /dev/shm) move
        # straight between the service and this mapping.
        self._shared = register_shared(self._store, self._base, self._num_rows * self._row_bytes, logger)
        if self._ns is not None and os.environ.get("PYTHONHASHSEED") is None:
            # vLLM then seeds its block-hash chain at random in each process
            # (init_none_hash): keys differ per process, so nothing stored
            # hits after a restart or from another replica (never wrongly).
            logger.warning("kvtier tier: PYTHONHASHSEED is not set, so vLLM's block hashes change with every "
                           "process and no block stored now will be found after a restart or by another "
                           "replica; set PYTHONHASHSEED to one fixed value (e.g. 0) for every vLLM process")

    @classmethod
    def build_metric_definitions(cls, extra_config):
        doc = {
            METRIC_STORE_BYTES: "Bytes stored into kvtier.",
            METRIC_LOAD_BYTES: "Bytes loaded from kvtier.",
            METRIC_LOOKUP_HITS: "kvtier lookups that found the block.",
            METRIC_LOOKUP_MISSES: "kvtier lookups that did not.",
            METRIC_FAILED_KEYS: "Keys whose store or load failed.",
        }
        return {name: OffloadingCounterMetadata(documentation=d, labelnames=("tier",)) for name, d in doc.items()}

    def _count(self, name, value):
        # Caller holds self._lock.
        if value:
            self._stats.increase_counter(name, value, (self.tier_type,))

    # ---- lookups ------------------------------------------------------------
    # vLLM's scheduler asks key by key and keeps scanning on RETRY, so a step
    # asks for whole prompts. The keys wait for the step's end
    # (on_schedule_end), then go as one contains_batch (through a service,
    # one request) on a worker while the model runs; the next step reads the
    # answers. This is the flush-per-step design of vLLM's own fs tier.
    def lookup(self, key, req_context):
        if self._ns is None:
            return LookupResult.MISS
        k = bytes(key)
        with self._lock:
            self._req_keys[req_context.req_id].add(k)
            if self._storing[k] > 0:
                return LookupResult.RETRY  # a store in flight: ask again
            if k in self._known:
                self._known.move_to_end(k)
                return LookupResult.HIT if self._known[k] else LookupResult.MISS
            if k not in self._lookups:
                self._queue_lookup(k)
                return LookupResult.RETRY
            present = self._lookups[k]
            if present is None:
                return LookupResult.RETRY
            del self._lookups[k]
            self._remember(k, present)
            self._count(METRIC_LOOKUP_HITS if present else METRIC_LOOKUP_MISSES, 1)
        return LookupResult.HIT if present else LookupResult.MISS

    def _queue_lookup(self, k):
        # Caller holds self._lock.
        self._lookups[k] = None
        self._lookup_queue.append(k)

    def on_schedule_end(self, context):
        with self._lock:
            if self._lookup_queue and self._lookup_runner is None:
                self._lookup_runner = self._pool.submit(self._run_lookups)
            touches, self._touch_queue = self._touch_queue, []
        if touches:
            self._submit(self._do_touch, touches)

    # ---- touches -------------------------------------------------------------
    # vLLM touches a request's blocks wherever they are. One its CPU tier
    # serves is never read from kvtier, whose reclaim would then take it for
    # cold: its use is counted in kvtier as a read is (touch_batch), once per
    # request. Keys the request looked up here are skipped: they come from
    # kvtier, and that read counts already.
    def touch(self, keys, req_context):
        if self._ns is None:
            return
        with self._lock:
            looked_up = self._req_keys.get(req_context.req_id, ())
            counted = self._touched[req_context.req_id]
            for key in keys:
                k = bytes(key)
                if k not in looked_up and k not in counted:
                    counted.add(k)
                    self._touch_queue.append(k)

    def _do_touch(self, keys):
        try:
            self._ns.touch_batch(keys)
        except Exception as e:  # a use not counted: at worst a block evicted sooner
            logger.warning("kvtier tier: counting the use of %d blocks failed: %s", len(keys), e)

    def _run_lookups(self):
        while True:
            with self._lock:
                keys, self._lookup_queue = self._lookup_queue, []
                if not keys:
                    self._lookup_runner = None
                    return
            try:
                flags = self._ns.contains_batch(keys)
            except Exception as e:
                logger.warning("kvtier lookup of %d keys failed: %s", len(keys), e)
                flags = [False] * len(keys)  # a miss recomputes; never a wrong hit
            with self._lock:
                for k, present in zip(keys, flags):
                    if k in self._lookups:
                        self._lookups[k] = bool(present)

    def _remember(self, k, present):
        # Caller holds self._lock.
        self._known[k] = present
        self._known.move_to_end(k)
        while len(self._known) > MAX_KNOWN_KEYS:
            self._known.popitem(last=False)

    # ---- transfers -------------------------------------------------------------
    def _row(self, i):
        if not 0 <= i < self._num_rows:
            raise IndexError(f"row {i} outside the CPU tier's {self._num_rows} rows")
        return (self._base + i * self._row_bytes, self._row_bytes)

    def _submit(self, fn, *args):
        fut = self._pool.submit(fn, *args)
        with self._lock:
            self._jobs.add(fut)
        fut.add_done_callback(self._untrack)

    def _untrack(self, fut):
        with self._lock:
            self._jobs.discard(fut)

    def submit_store(self, job_metadata):
        keys = [bytes(k) for k in job_metadata.keys]
        rows = [int(i) for i in job_metadata.block_ids]
        if self._ns is None:
            self._finished.append(JobResult(job_id=job_metadata.job_id, success=False))
            return
        with self._lock:
            for k in keys:
                self._storing[k] += 1
        self._submit(self._do_store, job_metadata.job_id, keys, rows)

    def _do_store(self, job_id, keys, rows):
        t0 = time.monotonic()
        ok_keys = []
        try:
            codes = self._ns.put_batch(keys, [self._row(r) for r in rows])
            ok_keys = [k for k, c in zip(keys, codes) if c == Code.OK]
        except Exception as e:
            logger.warning("kvtier store job %d failed: %s", job_id, e)
        dt = time.monotonic() - t0
        with self._lock:
            for k in keys:
                self._storing[k] -= 1
                if self._storing[k] <= 0:
                    del self._storing[k]
            for k in ok_keys:
                self._remember(k, True)
            if ok_keys and self._events_on:
                self._events.append(OffloadingEvent(keys=ok_keys, medium=self.medium, removed=False))
            self._count(METRIC_STORE_BYTES, len(ok_keys) * self._row_bytes)
            self._count(METRIC_FAILED_KEYS, len(keys) - len(ok_keys))
            # A cascade's keys share one fate: vLLM reads successful_keys
            # only for promotions.
            self._finished.append(JobResult(job_id=job_id, success=len(ok_keys) == len(keys), transfer_time=dt))

    def submit_load(self, job_metadata):
        keys = [bytes(k) for k in job_metadata.keys]
        rows = [int(i) for i in job_metadata.block_ids]
        if self._ns is None:
            self._finished.append(JobResult(job_id=job_metadata.job_id, success=False, successful_keys=[]))
            return
        self._submit(self._do_load, job_metadata.job_id, keys, rows)

    def _do_load(self, job_id, keys, rows):
        t0 = time.monotonic()
        ok_keys = []
        try:
            sizes = self._ns.get_batch(keys, [self._row(r) for r in rows])
            ok_keys = [k for k, s in zip(keys, sizes) if s == self._row_bytes]
        except Exception as e:
            logger.warning("kvtier load job %d failed: %s", job_id, e)
        dt = time.monotonic() - t0
        ok = set(ok_keys)
        with self._lock:
            for k in keys:
                if k not in ok:
                    self._remember(k, False)  # evicted since the lookup
            self._count(METRIC_LOAD_BYTES, len(ok_keys) * self._row_bytes)
            self._count(METRIC_FAILED_KEYS, len(keys) - len(ok_keys))
            self._finished.append(JobResult(job_id=job_id, success=len(ok_keys) == len(keys),
                                            successful_keys=None if len(ok_keys) == len(keys) else ok_keys,
                                            transfer_time=dt))

    def get_finished_jobs(self):
        with self._lock:
            out = list(self._finished)
            self._finished.clear()
        return out

    def has_pending_work(self):
        with self._lock:
            return bool(self._jobs or self._lookup_queue or self._lookup_runner or self._touch_queue or self._finished)

    def drain_jobs(self):
        with self._lock:
            jobs = list(self._jobs) + ([self._lookup_runner] if self._lookup_runner else [])
        concurrent.futures.wait(jobs)

    # ---- requests, events, stats ---------------------------------------------------
    def on_new_request(self, req_context):
        return RequestOffloadingContext()

    def on_request_finished(self, req_context):
        with self._lock:
            self._touched.pop(req_context.req_id, None)
            for k in self._req_keys.pop(req_context.req_id, ()):
                self._known.pop(k, None)  # answers are per request: a later one asks kvtier again
                self._lookups.pop(k, None)  # an answer nobody will read

    def take_events(self):
        with self._lock:
            out, self._events = self._events, []
        return out

    def get_stats(self):
        with self._lock:
            stats, self._stats = self._stats, OffloadingConnectorStats()
        return None if stats.is_empty() else stats

    def shutdown(self):
        if self._store is not None and not self._store.closed:
            self.drain_jobs()
            self._store.close()
        self._pool.shutdown(wait=True)
        # Our ctypes view of the CPU tier's mmap is an export that would keep
        # vLLM from closing the mapping.
        self._view_keep = None
        self._base = 0
