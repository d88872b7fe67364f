"""kvtier's vLLM tier inside vLLM's real offloading code.

Runs when KVTIER_VLLM_SRC names a vLLM checkout (see vllm_source.py for what
is replaced to run it on CPU); skips otherwise. vLLM's own spec factory reads
the documented kv_connector_extra_config, its TieringOffloadingSpec builds the
CPU primary tier over a real /dev/shm region and our tier through its
SecondaryTierFactory, and its TieringOffloadingManager drives stores,
cascades, lookups and promotions as the scheduler would.
"""
import glob
import logging
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest

SRC = os.environ.get("KVTIER_VLLM_SRC", "")
pytestmark = pytest.mark.skipif(not SRC, reason="KVTIER_VLLM_SRC does not name a vLLM checkout")

# vLLM's CPU tier is a file in /dev/shm named by the engine id; the engines
# these tests kill (and some they shut down) leave theirs behind.
_REGIONS = "/dev/shm/vllm_offload_test-*.mmap"


@pytest.fixture(autouse=True, scope="module")
def _remove_vllm_regions():
    before = set(glob.glob(_REGIONS))
    yield
    for path in set(glob.glob(_REGIONS)) - before:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK_TOKENS = 16
KV_BYTES_PER_BLOCK = 8192  # per worker
N_BLOCKS = 6


def _vllm():
    import vllm_source

    vllm_source.load(SRC)
    from vllm.v1.kv_offload import base, config, factory

    return base, config, factory


def _spec(path, model="Qwen/Qwen3-0.6B", tier_extra=None, events=False, dp=(0, 1)):
    base, config, factory = _vllm()
    tier = {"type": "KvtierTierManager", "module_path": "kvtier.adapters.vllm", "path": path, "capacity_gb": 1}
    tier.update(tier_extra or {})
    extra = {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 64 * 65536, "secondary_tiers": [tier]}
    oc = config.OffloadingConfig(
        groups=(config.OffloadingGroupConfig(tokens_per_block=BLOCK_TOKENS, layer_names=("l0", "l1")),),
        worker_kv_bytes_per_block=KV_BYTES_PER_BLOCK,
        enable_kv_cache_events=events,
        extra_config=extra,
        engine_id=f"test-{uuid.uuid4().hex[:8]}",
        model=config.OffloadingModelConfig(name=model, dtype="bfloat16"),
        cache=config.OffloadingCacheConfig(tokens_per_hash=BLOCK_TOKENS, blocks_per_chunk=1),
        parallel=config.OffloadingParallelConfig(rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
                                                 data_parallel_index=dp[0], data_parallel_size=dp[1],
                                                 data_parallel_rank_local=None, is_parallelism_agnostic=False),
    )
    return factory.OffloadingSpecFactory.create_spec(oc)


def _keys(n, tag=b"blk"):
    base, _, _ = _vllm()
    return [base.make_offload_key(tag + b"%04d" % i, 0) for i in range(n)]


def _payload(i, row_bytes):
    return bytes((i * 7 + j) % 251 for j in range(256)) * (row_bytes // 256)


def _step(manager):
    base, _, _ = _vllm()
    manager.on_schedule_end(base.ScheduleEndContext(new_req_ids=(), preempted_req_ids=()))
    list(manager.take_events())


def _tier(manager):
    return manager.secondary_tiers[0]


def _rows(manager):
    """The CPU tier's rows as a (num_blocks, row_bytes) byte array (no copy)."""
    view = manager.primary_tier.get_kv_memoryview()
    return np.frombuffer(view.cast("B"), dtype=np.uint8).reshape(view.shape[0], -1)


def _store_blocks(manager, keys):
    """GPU -> CPU tier (the worker's copy, done by hand) -> cascade to kvtier."""
    base, _, _ = _vllm()
    ctx = base.ReqContext(req_id="store")
    manager.on_new_request(ctx)
    out = manager.prepare_store(keys, ctx)
    rows = _rows(manager)
    for key, row in zip(out.keys_to_store, out.store_spec.block_ids):
        rows[int(row)] = np.frombuffer(_payload(keys.index(key), rows.shape[1]), dtype=np.uint8)
    manager.complete_store(keys, ctx, success=True)
    manager.on_request_finished(ctx)
    _tier(manager).drain_jobs()
    _step(manager)


def child_store_then_die(path, dp=(0, 1)):
    """Run in a fresh process: store blocks through the real manager, then
    exit without shutdown (as if killed)."""
    spec = _spec(path, dp=tuple(dp))
    manager = spec.get_manager()
    _store_blocks(manager, _keys(N_BLOCKS))
    assert _tier(manager)._store.stats()["puts"] == N_BLOCKS
    os._exit(0)


def _load_until_hit(manager, key, steps=200):
    """Lookups as the scheduler makes them: RETRY / HIT_PENDING until HIT."""
    base, _, _ = _vllm()
    ctx = base.ReqContext(req_id="load")
    manager.on_new_request(ctx)
    seen = []
    for _ in range(steps):
        r = manager.lookup(key, ctx)
        if not seen or seen[-1] is not r:
            seen.append(r)
        if r is base.LookupResult.HIT:
            break
        if r is base.LookupResult.MISS:
            break
        _tier(manager).drain_jobs()
        _step(manager)
    return ctx, seen


def test_restart_cycle_through_vllms_manager(tmp_path):
    base, _, _ = _vllm()
    path = str(tmp_path / "kv")
    import kvtier

    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(kvtier.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, pkg_root]))
    if env.get("KVTIER_LIB"):  # the child runs in another folder
        env["KVTIER_LIB"] = os.path.abspath(env["KVTIER_LIB"])
    subprocess.run([sys.executable, "-c", f"import test_vllm_engine as t; t.child_store_then_die({path!r})"],
                   check=True, env=env, cwd=HERE, timeout=120)
    # A new process (this one): an empty CPU tier, kvtier holds the blocks.
    spec = _spec(path)
    manager = spec.get_manager()
    rows = _rows(manager)
    row_bytes = rows.shape[1]
    keys = _keys(N_BLOCKS)
    for i, key in enumerate(keys):
        ctx, seen = _load_until_hit(manager, key)
        assert seen[0] is base.LookupResult.RETRY, seen  # the first answer never blocks the scheduler
        assert seen[-1] is base.LookupResult.HIT, seen   # promoted into the CPU tier
        load = manager.prepare_load([key], ctx)
        row = int(load.block_ids[0])
        assert rows[row].tobytes() == _payload(i, row_bytes)
        manager.complete_load([key], ctx)
        manager.on_request_finished(ctx)
    stats = manager.get_stats()  # vLLM's own aggregation of the tier's stats
    assert stats is not None and not stats.is_empty()
    reduced = stats.reduce()
    assert any(k.startswith("vllm:kv_offload_kvtier_load_bytes") and v == N_BLOCKS * row_bytes
               for k, v in reduced.items()), reduced
    assert not _tier(manager).has_pending_work()
    manager.shutdown()


def test_vllms_touches_reach_kvtier_once_per_request(tmp_path):
    # Blocks vLLM's CPU tier serves are touched through vLLM's manager; the
    # tier counts their use in kvtier at the step's end, once per request.
    base, _, _ = _vllm()
    manager = _spec(str(tmp_path / "kv")).get_manager()
    keys = _keys(4)
    _store_blocks(manager, keys)
    tier = _tier(manager)
    sent = []
    touch_batch = tier._ns.touch_batch
    tier._ns = type("Spy", (), {"__getattr__": lambda self, n: getattr(touch_batch.__self__, n),
                                "touch_batch": lambda self, ks: sent.append(list(ks)) or touch_batch(ks)})()
    ctx = base.ReqContext(req_id="reuse")
    manager.on_new_request(ctx)
    manager.touch(keys, ctx)
    manager.touch(keys, ctx)
    _step(manager)
    tier.drain_jobs()
    assert sent == [keys]
    manager.on_request_finished(ctx)
    manager.shutdown()


def test_another_model_never_hits(tmp_path):
    base, _, _ = _vllm()
    path = str(tmp_path / "kv")
    manager = _spec(path).get_manager()
    _store_blocks(manager, _keys(2))
    manager.shutdown()
    other = _spec(path, model="Qwen/Qwen3-1.7B").get_manager()
    _, seen = _load_until_hit(other, _keys(2)[0])
    assert seen[-1] is base.LookupResult.MISS, seen
    other.shutdown()
    same = _spec(path).get_manager()
    _, seen = _load_until_hit(same, _keys(2)[0])
    assert seen[-1] is base.LookupResult.HIT, seen
    same.shutdown()


def test_a_wrong_config_key_is_named_at_engine_start(tmp_path):
    with pytest.raises(ValueError, match="capacity_gib"):
        _spec(str(tmp_path / "kv"), tier_extra={"capacity_gib": 1}).get_manager()
    spec = _spec(str(tmp_path / "kv"), tier_extra={"path": ""})
    with pytest.raises(ValueError, match="path"):
        spec.get_manager()


def test_a_store_that_cannot_open_leaves_the_engine_running(tmp_path, caplog):
    base, _, _ = _vllm()
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with caplog.at_level(logging.ERROR):
        manager = _spec(str(blocker / "kv")).get_manager()
    assert any("kvtier tier disabled" in r.getMessage() for r in caplog.records)
    keys = _keys(2)
    _store_blocks(manager, keys)  # the cascade fails, the CPU tier keeps the blocks
    ctx = base.ReqContext(req_id="r")
    manager.on_new_request(ctx)
    assert manager.lookup(keys[0], ctx) is base.LookupResult.HIT
    assert _tier(manager).lookup(_keys(3)[2], ctx) is base.LookupResult.MISS
    manager.shutdown()


def test_events_only_when_vllm_drains_them(tmp_path):
    base, _, _ = _vllm()
    quiet = _spec(str(tmp_path / "a")).get_manager()
    _store_blocks(quiet, _keys(3))
    assert list(_tier(quiet).take_events()) == [] and _tier(quiet)._events == []
    quiet.shutdown()
    loud = _spec(str(tmp_path / "b"), events=True).get_manager()
    base_keys = _keys(3)
    ctx = base.ReqContext(req_id="s")
    loud.on_new_request(ctx)
    loud.prepare_store(base_keys, ctx)
    loud.complete_store(base_keys, ctx, success=True)
    _tier(loud).drain_jobs()
    events = list(_tier(loud).take_events())
    assert events and all(isinstance(e, base.OffloadingEvent) for e in events)
    assert sorted(k for e in events for k in e.keys) == sorted(base_keys)
    assert all(e.medium is base.Medium.STORAGE and e.removed is False for e in events)
    loud.shutdown()


def test_dp_replicas_hit_each_others_blocks_through_the_service(tmp_path, kvtier_service):
    # Replica 0 of 2 (a process of its own) stores blocks and dies; replica 1
    # finds them in the service's store and loads them into its CPU tier.
    base, _, _ = _vllm()
    import kvtier

    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(kvtier.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, pkg_root]))
    if env.get("KVTIER_LIB"):
        env["KVTIER_LIB"] = os.path.abspath(env["KVTIER_LIB"])
    subprocess.run([sys.executable, "-c",
                    f"import test_vllm_engine as t; t.child_store_then_die({kvtier_service!r}, (0, 2))"],
                   check=True, env=env, cwd=HERE, timeout=120)
    manager = _spec(kvtier_service, dp=(1, 2)).get_manager()
    # The CPU tier is a file in /dev/shm: the service reads and writes it in
    # place, no staging.
    assert _tier(manager)._shared
    rows = _rows(manager)
    for i, key in enumerate(_keys(N_BLOCKS)):
        ctx, seen = _load_until_hit(manager, key)
        assert seen[-1] is base.LookupResult.HIT, seen
        load = manager.prepare_load([key], ctx)
        assert rows[int(load.block_ids[0])].tobytes() == _payload(i, rows.shape[1])
        manager.complete_load([key], ctx)
        manager.on_request_finished(ctx)
    manager.shutdown()
