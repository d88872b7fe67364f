"""Drives KvtierTierManager the way vLLM's offloading scheduler does."""
import dataclasses
import time
import types

import numpy as np

from kvtier.adapters import vllm as adapter
from kvtier.adapters.vllm import LookupResult
from conftest import SMALL

ROWS, ROW_BYTES = 16, 8192


@dataclasses.dataclass
class Job:
    job_id: int
    keys: list
    chunk_ids: np.ndarray
    is_promotion: bool = False
    req_context: object = None


def vllm_config():
    return types.SimpleNamespace(
        model_config=types.SimpleNamespace(model="Qwen/Qwen3-0.6B", revision="main", dtype="torch.bfloat16"),
        cache_config=types.SimpleNamespace(block_size=16, prefix_caching_hash_algo="sha256_cbor"),
        parallel_config=types.SimpleNamespace(tensor_parallel_size=1))


def make_tier(store_dir, primary):
    cfg = dict(SMALL, path=store_dir, workers=2)
    return adapter.KvtierTierManager(vllm_config(), memoryview(primary), **cfg)


def wait_jobs(tier, n, timeout=10):
    done, deadline = [], time.monotonic() + timeout
    while len(done) < n and time.monotonic() < deadline:
        done += tier.get_finished_jobs()
        time.sleep(0.002)
    return done


def lookup_settled(tier, key, req):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = tier.lookup(key, req)
        if r not in (LookupResult.RETRY, LookupResult.HIT_PENDING):
            return r
        time.sleep(0.002)
    raise AssertionError("lookup never settled")


def test_scheduler_cycle_with_restart(store_dir):
    primary = np.zeros((ROWS, ROW_BYTES), dtype=np.uint8)
    for i in range(ROWS):
        primary[i] = np.random.default_rng(i).integers(0, 256, ROW_BYTES, dtype=np.uint8)
    expected = primary.copy()
    keys = [i.to_bytes(16, "little") + b"\0\0\0\0" for i in range(8)]  # block hash + group index
    req = types.SimpleNamespace(req_id="r1")

    tier = make_tier(store_dir, primary)
    assert tier.get_tier_type() == "kvtier"
    tier.on_new_request(req)
    assert lookup_settled(tier, keys[0], req) == LookupResult.MISS
    # write-through from the CPU tier: rows 0..7 under keys 0..7
    tier.submit_store(Job(1, keys[:4], np.arange(4)))
    tier.submit_store(Job(2, keys[4:], np.arange(4, 8)))
    assert tier.lookup(keys[0], req) in (LookupResult.HIT_PENDING, LookupResult.HIT)
    done = wait_jobs(tier, 2)
    assert sorted(r.job_id for r in done) == [1, 2] and all(r.success for r in done)
    assert set(done[0].successful_keys) | set(done[1].successful_keys) == set(keys)
    assert lookup_settled(tier, keys[3], req) == LookupResult.HIT
    events = tier.take_events()
    assert len(events) == 8 and tier.take_events() == []
    tier.on_request_finished(req)
    tier.shutdown()  # the engine restarts here

    primary2 = np.zeros_like(primary)
    tier = make_tier(store_dir, primary2)
    req2 = types.SimpleNamespace(req_id="r2")
    tier.on_new_request(req2)
    assert tier.lookup(keys[5], req2) == LookupResult.RETRY  # answered off-thread
    assert lookup_settled(tier, keys[5], req2) == LookupResult.HIT
    assert lookup_settled(tier, b"never-stored", req2) == LookupResult.MISS
    tier.touch([keys[5]], req2)
    # promote blocks 5,6 into rows 10,11 and a missing one into row 12
    tier.submit_load(Job(3, [keys[5], keys[6]], np.array([10, 11]), is_promotion=True))
    tier.submit_load(Job(4, [b"never-stored"], np.array([12])))
    done = {r.job_id: r for r in wait_jobs(tier, 2)}
    assert done[3].success and not done[4].success
    assert np.array_equal(primary2[10], expected[5]) and np.array_equal(primary2[11], expected[6])
    assert not primary2[12].any()
    stats = tier.get_stats()
    assert stats["load_jobs"] == 2 and stats["store"]["puts"] >= 0
    tier.drain_jobs()
    tier.on_request_finished(req2)
    tier.shutdown()
    tier.shutdown()


def test_bad_rows_fail_the_job(store_dir):
    primary = np.zeros((4, ROW_BYTES), dtype=np.uint8)
    tier = make_tier(store_dir, primary)
    tier.submit_store(Job(7, [b"k"], np.array([99])))  # row out of range
    (res,) = wait_jobs(tier, 1)
    assert res.job_id == 7 and not res.success
    tier.shutdown()
