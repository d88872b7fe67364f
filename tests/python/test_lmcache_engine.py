"""kvtier's LMCache connector inside LMCache's real L2 adapter wrapper.

Runs when KVTIER_LMCACHE_SRC names an LMCache checkout (see lmcache_source.py
for what is replaced to run it on CPU); skips otherwise. LMCache's
native_plugin factory builds KvtierL2Connector from the documented
--l2-adapter JSON and wraps it in its NativeConnectorL2Adapter, whose demux
thread drains our completions. A child process stores chunks through it and
is killed; a new process looks them up, loads them byte for byte, deletes
some, and finds them gone. Through a `kvtier serve` service, per-GPU worker
processes share one store and hit each other's chunks.
"""
import os
import subprocess
import sys
import time

import pytest

SRC = os.environ.get("KVTIER_LMCACHE_SRC", "")
pytestmark = pytest.mark.skipif(not SRC, reason="KVTIER_LMCACHE_SRC does not name an LMCache checkout")

HERE = os.path.dirname(os.path.abspath(__file__))
N, CHUNK_BYTES = 6, 96 * 1024


def _lmcache():
    sys.path.insert(0, HERE)
    import lmcache_source

    lmcache_source.load(SRC)
    if not lmcache_source.has_route("native_plugin"):
        pytest.skip("the LMCache checkout has no native_plugin loader")
    from lmcache.v1.distributed import api
    from lmcache.v1.distributed.l2_adapters import factory

    return lmcache_source, api, factory


@pytest.fixture(autouse=True)
def _native_route():
    _lmcache()  # skips where the checkout lacks the native_plugin loader


def _adapter(path, **params):
    _, _, factory = _lmcache()
    spec = {"type": "native_plugin", "module_path": "kvtier.adapters.lmcache", "class_name": "KvtierL2Connector",
            "max_capacity_gb": 1,
            "adapter_params": dict({"path": path, "capacity_gb": 0.25, "model": "Qwen/Qwen3-0.6B",
                                    "dtype": "bfloat16", "chunk_tokens": 256,
                                    "options": {"segment_size_bytes": 1 << 20}}, **params)}
    return factory.create_l2_adapter(spec)


def _keys(n=N, salt="", rank=0, world=1):
    _, api, _ = _lmcache()
    rank = api.ObjectKey.ComputeKVRank(world_size=world, global_rank=rank, local_world_size=world, local_rank=rank)
    return [api.ObjectKey(chunk_hash=bytes([i]) * 32, model_name="Qwen/Qwen3-0.6B", kv_rank=rank, cache_salt=salt)
            for i in range(n)]


def _objects(seed=None, n=N, size=CHUNK_BYTES):
    src, _, _ = _lmcache()
    return src.memory_objects(n, size, seed)


def _wait(fd, query, timeout=30):
    src, _, _ = _lmcache()
    return src.wait_for(fd, query, timeout)


def _bits(bitmap, n):
    return [bool(bitmap.test(i)) for i in range(n)]


def store_and_die(path, out):
    """Child process: store N chunks through LMCache's wrapper, save their
    bytes, then die without closing anything."""
    import torch

    adapter = _adapter(path)
    objs = _objects(seed=100)
    task = adapter.submit_store_task(_keys(), objs)
    done = _wait(adapter.get_store_event_fd(), lambda: adapter.pop_completed_store_tasks().get(task))
    assert done.is_successful() and done.bytes_transferred() == N * CHUNK_BYTES, int(done)
    assert adapter.get_usage().total_bytes_used == N * CHUNK_BYTES
    torch.save([o.tensor.clone() for o in objs], out)
    os.kill(os.getpid(), 9)


def test_put_get_exists_delete_across_a_restart(tmp_path):
    import torch

    path, saved = str(tmp_path / "store"), str(tmp_path / "chunks.pt")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(HERE, "..", "..", "src", "python"), HERE]))
    r = subprocess.run([sys.executable, __file__, path, saved], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == -9, r.stdout + r.stderr

    adapter = _adapter(path)
    keys = _keys()
    absent = _keys(1, salt="other-tenant")
    task = adapter.submit_lookup_and_lock_task(keys + absent, {})
    found = _wait(adapter.get_lookup_and_lock_event_fd(), lambda: adapter.query_lookup_and_lock_result(task))
    assert _bits(found, N + 1) == [True] * N + [False]
    adapter.submit_unlock(keys)

    objs = _objects()
    task = adapter.submit_load_task(keys, objs)
    loaded = _wait(adapter.get_load_event_fd(), lambda: adapter.query_load_result(task))
    assert _bits(loaded, N) == [True] * N
    for want, got in zip(torch.load(saved), objs):
        assert torch.equal(want, got.tensor)

    # A buffer of another size never takes a block's bytes.
    wrong = _objects(n=1, size=CHUNK_BYTES // 2)
    task = adapter.submit_load_task(keys[:1], wrong)
    assert _bits(_wait(adapter.get_load_event_fd(), lambda: adapter.query_load_result(task)), 1) == [False]

    adapter.delete(keys[:2])
    task = adapter.submit_lookup_and_lock_task(keys, {})
    found = _wait(adapter.get_lookup_and_lock_event_fd(), lambda: adapter.query_lookup_and_lock_result(task))
    assert _bits(found, N) == [False, False] + [True] * (N - 2)
    assert adapter.report_status()["is_healthy"]
    adapter.close()


def test_another_dtype_is_a_miss(tmp_path):
    path = str(tmp_path / "store")
    a = _adapter(path)
    task = a.submit_store_task(_keys(2), _objects(seed=1, n=2))
    assert _wait(a.get_store_event_fd(), lambda: a.pop_completed_store_tasks().get(task)).is_successful()
    a.close()
    b = _adapter(path, dtype="float16")
    task = b.submit_lookup_and_lock_task(_keys(2), {})
    found = _wait(b.get_lookup_and_lock_event_fd(), lambda: b.query_lookup_and_lock_result(task))
    assert _bits(found, 2) == [False, False]
    b.close()


def test_a_wrong_adapter_param_is_named(tmp_path):
    with pytest.raises(ValueError, match="'capacity'"):
        _adapter(str(tmp_path / "store"), capacity=5)


def _served(address, **params):
    # A client of the service: the store's own options (capacity, segment
    # size) belong to `kvtier serve`, not to its clients.
    _, _, factory = _lmcache()
    spec = {"type": "native_plugin", "module_path": "kvtier.adapters.lmcache", "class_name": "KvtierL2Connector",
            "max_capacity_gb": 0,
            "adapter_params": dict({"path": address, "model": "Qwen/Qwen3-0.6B", "dtype": "bfloat16",
                                    "chunk_tokens": 256}, **params)}
    return factory.create_l2_adapter(spec)


def _store(adapter, keys, objs):
    task = adapter.submit_store_task(keys, objs)
    done = _wait(adapter.get_store_event_fd(), lambda: adapter.pop_completed_store_tasks().get(task))
    assert done.is_successful(), "store failed"


def _lookup(adapter, keys):
    task = adapter.submit_lookup_and_lock_task(keys, {})
    found = _bits(_wait(adapter.get_lookup_and_lock_event_fd(), lambda: adapter.query_lookup_and_lock_result(task)),
                  len(keys))
    adapter.submit_unlock([k for k, f in zip(keys, found) if f])
    return found


def _load(adapter, keys, size=CHUNK_BYTES):
    objs = _objects(n=len(keys), size=size)
    task = adapter.submit_load_task(keys, objs)
    return _bits(_wait(adapter.get_load_event_fd(), lambda: adapter.query_load_result(task)), len(keys)), objs


def _rank_seed(rank):
    return 1000 * (rank + 1)


def worker_share_then_die(address, rank, world):
    """Child process: GPU worker `rank` of `world`, each its own process
    with the same config. It stores its rank's chunks, waits until every
    other worker's chunks are visible through the service, loads them byte
    for byte, then dies without closing anything."""
    import torch

    adapter = _served(address)
    _store(adapter, _keys(rank=rank, world=world), _objects(seed=_rank_seed(rank)))
    deadline = time.monotonic() + 60
    for other in range(world):
        keys = _keys(rank=other, world=world)
        while not all(_lookup(adapter, keys)):
            assert time.monotonic() < deadline, f"worker {rank} never saw worker {other}'s chunks"
            time.sleep(0.05)
        loaded, objs = _load(adapter, keys)
        assert loaded == [True] * N
        for want, got in zip(_objects(seed=_rank_seed(other)), objs):
            assert torch.equal(want.tensor, got.tensor), f"worker {rank}: wrong bytes from worker {other}"
    print(f"worker {rank} loaded every worker's chunks", flush=True)
    os.kill(os.getpid(), 9)


def test_per_gpu_workers_share_one_store_through_the_service(tmp_path, kvtier_service):
    # LMCache builds one connector per worker process from one config. With
    # `path` a kvtier service, every worker stores into and hits the same
    # store, while each process runs LMCache's own wrapper and demux thread.
    import torch

    world = 2
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(HERE, "..", "..", "src", "python"), HERE]))
    workers = [subprocess.Popen([sys.executable, __file__, "worker", kvtier_service, str(r), str(world)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for r in range(world)]
    for r, w in enumerate(workers):
        out, _ = w.communicate(timeout=300)
        assert w.returncode == -9 and f"worker {r} loaded every worker's chunks" in out, out

    # A later instance with the same config (the workers died with -9) hits
    # every rank's chunks; another tenant's salt and another dtype do not.
    adapter = _served(kvtier_service)
    for r in range(world):
        keys = _keys(rank=r, world=world)
        assert _lookup(adapter, keys) == [True] * N
        loaded, objs = _load(adapter, keys)
        assert loaded == [True] * N
        for want, got in zip(_objects(seed=_rank_seed(r)), objs):
            assert torch.equal(want.tensor, got.tensor)
    assert _lookup(adapter, _keys(2, salt="other-tenant", world=world)) == [False, False]
    adapter.close()
    other = _served(kvtier_service, dtype="float16")
    assert _lookup(other, _keys(rank=0, world=world)) == [False] * N
    other.close()


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker_share_then_die(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        store_and_die(sys.argv[1], sys.argv[2])
