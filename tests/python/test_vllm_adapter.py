"""Drives KvtierTierManager the way vLLM's TieringOffloadingManager does.

With KVTIER_VLLM_SRC set these run against vLLM's real types (vllm_source.py);
otherwise against the stand-ins in standins/, which test_vllm_standins.py
holds to the real signatures.
"""
import collections
import gc
import logging
import mmap
import os
import sys
import time
import types

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("KVTIER_VLLM_SRC"):
    import vllm_source

    vllm_source.load(os.environ["KVTIER_VLLM_SRC"])
else:
    sys.path.insert(0, os.path.join(HERE, "standins"))

from vllm.v1.kv_offload import base, config  # noqa: E402
from vllm.v1.kv_offload.tiering.base import TransferJob  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import OffloadingConnectorStats  # noqa: E402

from kvtier.adapters import vllm as adapter  # noqa: E402
from conftest import SMALL  # noqa: E402

ROWS, ROW_BYTES = 16, 8192
LR = base.LookupResult


def offloading_spec(model="Qwen/Qwen3-0.6B", dtype="bfloat16", events=False, dp=(0, 1)):
    oc = config.OffloadingConfig(
        groups=(config.OffloadingGroupConfig(tokens_per_block=16, layer_names=("l0",)),),
        worker_kv_bytes_per_block=ROW_BYTES,
        enable_kv_cache_events=events,
        extra_config={},
        engine_id="e0",
        model=config.OffloadingModelConfig(name=model, dtype=dtype),
        cache=config.OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=config.OffloadingParallelConfig(rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
                                                 data_parallel_index=dp[0], data_parallel_size=dp[1],
                                                 data_parallel_rank_local=None, is_parallelism_agnostic=False),
    )
    # What the tier reads of vLLM's OffloadingSpec: .config and .kv_events_config.
    return types.SimpleNamespace(config=oc, kv_events_config=base.OffloadingKVEventsConfig(
        enable_kv_cache_events=events, self_describing_kv_events=False))


def make_tier(store_dir, primary, spec=None, **cfg):
    # As vLLM's SecondaryTierFactory builds a tier: keyword arguments, the
    # tier dict's keys less "type" and "module_path".
    cfg = dict({"path": store_dir, "workers": 2, "options": SMALL}, **cfg)
    return adapter.KvtierTierManager(offloading_spec=spec or offloading_spec(), primary_kv_view=memoryview(primary),
                                     tier_type="KvtierTierManager", **cfg)


def keys_of(n, tag=b"h"):
    return [base.make_offload_key(tag + i.to_bytes(16, "little"), 0) for i in range(n)]


def job(job_id, keys, rows, promotion, req):
    return TransferJob(job_id=job_id, keys=keys, block_ids=np.array(rows, dtype=np.int64), is_promotion=promotion,
                       req_context=req)


def wait_jobs(tier, n, timeout=10):
    done, deadline = [], time.monotonic() + timeout
    while len(done) < n and time.monotonic() < deadline:
        done += list(tier.get_finished_jobs())
        time.sleep(0.002)
    return done


STEP_END = base.ScheduleEndContext(new_req_ids=(), preempted_req_ids=())


def lookup_settled(tier, key, req):
    """Asks as vLLM's scheduler does: once per step, the step's end between."""
    first = tier.lookup(key, req)
    deadline = time.monotonic() + 10
    r = first
    while r is LR.RETRY and time.monotonic() < deadline:
        tier.on_schedule_end(STEP_END)
        time.sleep(0.002)
        r = tier.lookup(key, req)
    return first, r


class CountingNamespace:
    """The tier's namespace, with its calls counted by name."""

    def __init__(self, ns):
        self._ns, self.calls, self.args = ns, collections.Counter(), collections.defaultdict(list)

    def __getattr__(self, name):
        attr = getattr(self._ns, name)
        if not callable(attr):
            return attr

        def counted(*a, **kw):
            self.calls[name] += 1
            self.args[name].append(a)
            return attr(*a, **kw)
        return counted


def test_a_steps_lookups_go_as_one_batch_after_the_step(store_dir):
    primary = np.random.default_rng(3).integers(0, 256, (ROWS, ROW_BYTES), dtype=np.uint8)
    keys = keys_of(12)
    req = base.ReqContext(req_id="w")
    tier = make_tier(store_dir, primary)
    tier.submit_store(job(1, keys[:6], list(range(6)), False, req))
    wait_jobs(tier, 1)
    tier.shutdown()

    tier = make_tier(store_dir, primary)
    counting = tier._ns = CountingNamespace(tier._ns)
    a, b = base.ReqContext(req_id="a"), base.ReqContext(req_id="b")
    # One step: two prompts scanned in full (RETRY keeps vLLM scanning).
    assert [tier.lookup(k, a) for k in keys[:8]] == [LR.RETRY] * 8
    assert [tier.lookup(k, b) for k in keys[4:]] == [LR.RETRY] * 8
    assert tier.has_pending_work()  # keeps vLLM stepping until the answers are in
    assert sum(counting.calls.values()) == 0  # nothing crosses to kvtier inside the step
    tier.on_schedule_end(STEP_END)
    tier.drain_jobs()
    assert dict(counting.calls) == {"contains_batch": 1}
    # The next step reads the answers.
    assert [tier.lookup(k, a) for k in keys[:8]] == [LR.HIT] * 6 + [LR.MISS] * 2
    assert [tier.lookup(k, b) for k in keys[4:]] == [LR.HIT] * 2 + [LR.MISS] * 6
    tier.on_schedule_end(STEP_END)
    assert dict(counting.calls) == {"contains_batch": 1} and not tier.has_pending_work()
    stats = tier.get_stats().reduce()
    assert [v for k, v in stats.items() if k.startswith(adapter.METRIC_LOOKUP_HITS)] == [6], stats
    assert [v for k, v in stats.items() if k.startswith(adapter.METRIC_LOOKUP_MISSES)] == [6], stats
    tier.shutdown()


def test_uses_vllms_cpu_tier_served_are_counted_in_kvtier_once_per_request(store_dir):
    primary = np.random.default_rng(4).integers(0, 256, (ROWS, ROW_BYTES), dtype=np.uint8)
    keys = keys_of(6)
    tier = make_tier(store_dir, primary)
    tier.submit_store(job(1, keys, list(range(6)), False, base.ReqContext(req_id="s")))
    wait_jobs(tier, 1)
    tier.shutdown()

    tier = make_tier(store_dir, primary)
    counting = tier._ns = CountingNamespace(tier._ns)
    a, b = base.ReqContext(req_id="a"), base.ReqContext(req_id="b")
    assert tier.lookup(keys[0], a) is LR.RETRY  # key 0 comes from kvtier for request a: its read counts
    tier.touch(keys, a)
    tier.touch(keys, a)  # vLLM touches again on later steps: counted once
    tier.touch(keys[:2], b)
    assert "touch_batch" not in counting.calls  # nothing crosses inside the step
    tier.on_schedule_end(STEP_END)
    tier.drain_jobs()
    assert counting.args["touch_batch"] == [(keys[1:] + keys[:2],)]
    tier.on_request_finished(a)  # a later request of the same id counts again
    tier.touch(keys[1:2], a)
    tier.on_schedule_end(STEP_END)
    tier.drain_jobs()
    assert counting.args["touch_batch"][-1] == (keys[1:2],) and not tier.has_pending_work()
    tier.shutdown()


def test_a_failed_batch_lookup_answers_miss(store_dir, caplog):
    primary = np.zeros((ROWS, ROW_BYTES), dtype=np.uint8)
    tier = make_tier(store_dir, primary)
    tier.submit_store(job(1, keys_of(2), [0, 1], False, base.ReqContext(req_id="s")))
    wait_jobs(tier, 1)
    tier.shutdown()
    tier = make_tier(store_dir, primary)  # knows nothing yet
    tier._store.close()  # every call from here on fails
    req = base.ReqContext(req_id="r")
    with caplog.at_level(logging.WARNING):
        assert lookup_settled(tier, keys_of(1)[0], req) == (LR.RETRY, LR.MISS)
    assert any("kvtier lookup of 1 keys failed" in r.getMessage() for r in caplog.records)
    tier.shutdown()


def test_a_finished_requests_unread_answers_are_dropped(store_dir):
    primary = np.zeros((ROWS, ROW_BYTES), dtype=np.uint8)
    tier = make_tier(store_dir, primary)
    req = base.ReqContext(req_id="gone")
    for k in keys_of(5):
        assert tier.lookup(k, req) is LR.RETRY
    tier.on_schedule_end(STEP_END)
    tier.drain_jobs()
    tier.on_request_finished(req)  # aborted before it read them
    assert not tier._lookups and not tier._known
    tier.shutdown()


def test_store_restart_lookup_load_bytes_equal(store_dir):
    primary = np.random.default_rng(1).integers(0, 256, (ROWS, ROW_BYTES), dtype=np.uint8)
    expected = primary.copy()
    keys = keys_of(8)
    req = base.ReqContext(req_id="r1")
    tier = make_tier(store_dir, primary)
    assert isinstance(tier.on_new_request(req), base.RequestOffloadingContext)
    tier.submit_store(job(1, keys, list(range(8)), False, req))
    assert tier.has_pending_work()
    (res,) = wait_jobs(tier, 1)
    assert (res.job_id, res.success) == (1, True)
    tier.shutdown()

    primary[:] = 0
    tier = make_tier(store_dir, primary)  # a new engine process
    req2 = base.ReqContext(req_id="r2")
    tier.on_new_request(req2)
    for k in keys:
        first, last = lookup_settled(tier, k, req2)
        assert first is LR.RETRY and last is LR.HIT
    missing = keys_of(1, tag=b"x")[0]
    assert lookup_settled(tier, missing, req2) == (LR.RETRY, LR.MISS)
    tier.submit_load(job(2, keys, list(range(8, 16)), True, req2))
    (res,) = wait_jobs(tier, 1)
    assert res.success and res.successful_keys is None
    assert np.array_equal(primary[8:16], expected[:8])
    # A partly failed promotion names the keys that did arrive.
    tier.submit_load(job(3, [keys[0], missing], [0, 1], True, req2))
    (res,) = wait_jobs(tier, 1)
    assert not res.success and list(res.successful_keys) == [keys[0]]
    tier.on_request_finished(req2)
    assert not tier._known
    tier.shutdown()


def test_stats_are_vllms_type_and_reset_on_read(store_dir):
    primary = np.zeros((ROWS, ROW_BYTES), dtype=np.uint8)
    tier = make_tier(store_dir, primary)
    req = base.ReqContext(req_id="r")
    assert tier.get_stats() is None
    tier.submit_store(job(1, keys_of(3), [0, 1, 2], False, req))
    wait_jobs(tier, 1)
    stats = tier.get_stats()
    assert isinstance(stats, OffloadingConnectorStats)
    assert stats.reduce()[f"{adapter.METRIC_STORE_BYTES}:('KvtierTierManager',)"] == 3 * ROW_BYTES
    assert tier.get_stats() is None  # reset on read
    defs = adapter.KvtierTierManager.build_metric_definitions({})
    assert set(defs) >= {adapter.METRIC_STORE_BYTES, adapter.METRIC_LOAD_BYTES}
    assert all(isinstance(d, base.OffloadingCounterMetadata) for d in defs.values())
    tier.shutdown()


def test_events_only_when_vllm_publishes_them(store_dir, tmp_path):
    primary = np.zeros((ROWS, ROW_BYTES), dtype=np.uint8)
    req = base.ReqContext(req_id="r")
    quiet = make_tier(store_dir, primary)  # KV events off: vLLM never drains take_events()
    quiet.submit_store(job(1, keys_of(4), [0, 1, 2, 3], False, req))
    wait_jobs(quiet, 1)
    assert quiet._events == []
    quiet.shutdown()
    loud = make_tier(str(tmp_path / "s2"), primary, spec=offloading_spec(events=True))
    loud.submit_store(job(1, keys_of(4), [0, 1, 2, 3], False, req))
    wait_jobs(loud, 1)
    (ev,) = loud.take_events()
    assert isinstance(ev, base.OffloadingEvent)
    assert ev.medium is base.Medium.STORAGE and ev.removed is False and sorted(ev.keys) == sorted(keys_of(4))
    assert list(loud.take_events()) == []
    loud.shutdown()


def test_remembered_lookups_are_bounded(store_dir, monkeypatch):
    monkeypatch.setattr(adapter, "MAX_KNOWN_KEYS", 32)
    primary = np.zeros((ROWS, ROW_BYTES), dtype=np.uint8)
    tier = make_tier(store_dir, primary)
    req = base.ReqContext(req_id="long")
    for k in keys_of(200):
        lookup_settled(tier, k, req)
    assert len(tier._known) <= 32
    tier.shutdown()


def test_namespace_pins_model_dtype_salt_and_hash(store_dir):
    primary = np.random.default_rng(2).integers(0, 256, (ROWS, ROW_BYTES), dtype=np.uint8)
    req = base.ReqContext(req_id="r")
    keys = keys_of(2)
    tier = make_tier(store_dir, primary)
    tier.submit_store(job(1, keys, [0, 1], False, req))
    wait_jobs(tier, 1)
    tier.shutdown()
    for spec, extra in [(offloading_spec(model="other/model"), {}), (offloading_spec(dtype="float16"), {}),
                        (None, {"salt": "tenant-b"}), (None, {"hash_algo": "xxhash"})]:
        t = make_tier(store_dir, primary, spec=spec, **extra)
        assert lookup_settled(t, keys[0], req)[1] is LR.MISS, (spec, extra)
        t.shutdown()
    t = make_tier(store_dir, primary)
    assert lookup_settled(t, keys[0], req)[1] is LR.HIT
    t.shutdown()


def test_a_process_without_pythonhashseed_is_warned(store_dir, monkeypatch, caplog):
    primary = np.zeros((ROWS, ROW_BYTES), dtype=np.uint8)
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    with caplog.at_level(logging.WARNING):
        make_tier(store_dir, primary).shutdown()
    assert sum("PYTHONHASHSEED is not set" in r.getMessage() for r in caplog.records) == 1
    caplog.clear()
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    with caplog.at_level(logging.WARNING):
        make_tier(store_dir, primary).shutdown()
    assert not any("PYTHONHASHSEED" in r.getMessage() for r in caplog.records)


def test_config_errors_name_the_key(store_dir):
    primary = np.zeros((ROWS, ROW_BYTES), dtype=np.uint8)
    with pytest.raises(ValueError, match="capacity_gib"):
        make_tier(store_dir, primary, capacity_gib=1)
    with pytest.raises(ValueError, match="path"):
        make_tier("", primary)


def test_an_unopenable_store_is_logged_and_the_tier_misses(tmp_path, caplog):
    (tmp_path / "f").write_text("x")
    primary = np.zeros((ROWS, ROW_BYTES), dtype=np.uint8)
    with caplog.at_level(logging.ERROR):
        tier = make_tier(str(tmp_path / "f" / "kv"), primary)
    assert sum("kvtier tier disabled" in r.getMessage() for r in caplog.records) == 1
    req = base.ReqContext(req_id="r")
    assert tier.lookup(keys_of(1)[0], req) is LR.MISS
    tier.submit_store(job(7, keys_of(1), [0], False, req))
    (res,) = wait_jobs(tier, 1)
    assert (res.job_id, res.success) == (7, False)
    tier.shutdown()


def test_data_parallel_replicas_use_their_own_folders(store_dir):
    primary = np.zeros((ROWS, ROW_BYTES), dtype=np.uint8)
    a = make_tier(store_dir, primary, spec=offloading_spec(dp=(0, 2)))
    b = make_tier(store_dir, primary, spec=offloading_spec(dp=(1, 2)))  # would be Busy on one folder
    assert a._store is not None and b._store is not None
    assert a._store.path.endswith("/dp0") and b._store.path.endswith("/dp1")
    a.shutdown()
    b.shutdown()


def test_shutdown_releases_the_cpu_tiers_mapping(store_dir):
    # vLLM's CPU tier is an mmap of a /dev/shm file that it closes at shutdown;
    # an export left behind makes that fail ("Failed to close mmap_obj").
    mm = mmap.mmap(-1, ROWS * ROW_BYTES)
    view = memoryview(mm).cast("B", (ROWS, ROW_BYTES))
    tier = make_tier(store_dir, view)
    tier.submit_store(job(1, keys_of(2), [0, 1], False, base.ReqContext(req_id="r")))
    wait_jobs(tier, 1)
    tier.shutdown()
    del tier
    gc.collect()
    view.release()
    mm.close()  # BufferError while an export is alive
