"""kvtier's LMCache L2 adapter of the `plugin` type (kvtier.adapters.lmcache_plugin).

With KVTIER_LMCACHE_SRC naming an LMCache checkout that has the plugin loader,
LMCache's own `plugin` factory builds the adapter from the documented
--l2-adapter JSON, on LMCache's real L2AdapterInterface and key types (see
lmcache_source.py); otherwise on CI's stand-ins (standins/lmcache), which
test_lmcache_standins.py compares with the real modules. The adapter is
driven as LMCache's store and prefetch controllers drive one: submit, wait on
the task's eventfd, take the result once.
"""
import os
import select
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("KVTIER_LMCACHE_SRC", "")
sys.path.insert(0, HERE)
import lmcache_source  # noqa: E402

if SRC:
    lmcache_source.load(SRC)
else:
    sys.path.insert(0, os.path.join(HERE, "standins"))

from lmcache.v1.distributed import api  # noqa: E402
from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface  # noqa: E402

from kvtier.adapters import lmcache as native_route  # noqa: E402
from kvtier.adapters import lmcache_plugin  # noqa: E402

N, CHUNK_BYTES, MODEL = 6, 64 * 1024, "Qwen/Qwen3-0.6B"


def params(path, **more):
    return dict({"path": path, "capacity_gb": 0.25, "model": MODEL, "dtype": "bfloat16", "chunk_tokens": 256,
                 "options": {"segment_size_bytes": 1 << 20}}, **more)


def build(path, **more):
    """As LMCache's MP server builds it from --l2-adapter: through its own
    plugin loader when the checkout has one; else as that loader does (the
    config class found by name, built from adapter_params)."""
    spec = {"type": "plugin", "module_path": "kvtier.adapters.lmcache_plugin", "class_name": "KvtierL2Adapter",
            "adapter_params": params(path, **more)}
    if SRC:
        if not lmcache_source.has_route("plugin"):
            pytest.skip("the LMCache checkout has no plugin loader")
        from lmcache.v1.distributed.l2_adapters import factory

        return factory.create_l2_adapter(spec)
    cfg = getattr(lmcache_plugin, spec["class_name"] + "Config").from_dict(spec["adapter_params"])
    return lmcache_plugin.KvtierL2Adapter(cfg)


def keys(n=N, salt="", rank=0, group=0):
    kv_rank = api.ObjectKey.ComputeKVRank(world_size=2, global_rank=rank, local_world_size=2, local_rank=rank)
    return [api.ObjectKey(chunk_hash=bytes([i + 1]) * 32, model_name=MODEL, kv_rank=kv_rank, object_group_id=group,
                          cache_salt=salt) for i in range(n)]


def objects(seed=None, n=N, size=CHUNK_BYTES):
    return lmcache_source.memory_objects(n, size, seed)


wait = lmcache_source.wait_for


def store(adapter, ks, objs):
    task = adapter.submit_store_task(ks, objs)
    return wait(adapter.get_store_event_fd(), lambda: adapter.pop_completed_store_tasks().get(task))


def lookup(adapter, ks):
    task = adapter.submit_lookup_and_lock_task(ks, {})
    bits = wait(adapter.get_lookup_and_lock_event_fd(), lambda: adapter.query_lookup_and_lock_result(task))
    return [bool(bits.test(i)) for i in range(len(ks))]


def load(adapter, ks, objs):
    task = adapter.submit_load_task(ks, objs)
    bits = wait(adapter.get_load_event_fd(), lambda: adapter.query_load_result(task))
    return [bool(bits.test(i)) for i in range(len(ks))]


class Listener:
    """What LMCache's L2 eviction policy hears."""

    def __init__(self):
        self.stored, self.accessed, self.deleted = [], [], []

    def on_l2_keys_stored(self, keys, sizes=None):
        self.stored += list(zip(keys, sizes))

    def on_l2_keys_accessed(self, keys):
        self.accessed += list(keys)

    def on_l2_keys_deleted(self, keys):
        self.deleted += list(keys)


def store_and_die(path, out):
    """Child process: store N chunks, save their bytes, die without closing."""
    adapter = build(path)
    objs = objects(seed=7)
    done = store(adapter, keys(), objs)
    assert done.is_successful() and done.bytes_transferred() == N * CHUNK_BYTES, int(done)
    torch.save([o.tensor.clone() for o in objs], out)
    os.kill(os.getpid(), 9)


def test_is_an_l2_adapter_with_three_distinct_eventfds(tmp_path):
    adapter = build(str(tmp_path / "s"))
    assert isinstance(adapter, L2AdapterInterface)
    fds = {adapter.get_store_event_fd(), adapter.get_lookup_and_lock_event_fd(), adapter.get_load_event_fd()}
    assert len(fds) == 3
    assert not adapter.supports_global_eviction  # kvtier evicts at capacity_gb itself
    adapter.close()


def test_stored_chunks_survive_a_kill_and_load_byte_for_byte(tmp_path):
    path, saved = str(tmp_path / "store"), str(tmp_path / "chunks.pt")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(HERE, "..", "..", "src", "python"), HERE]))
    r = subprocess.run([sys.executable, __file__, path, saved], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == -9, r.stdout + r.stderr

    adapter = build(path)
    heard = Listener()
    adapter.register_listener(heard)
    ks = keys()
    assert lookup(adapter, ks + keys(1, salt="other-tenant")) == [True] * N + [False]
    adapter.submit_unlock(ks)
    objs = objects()
    assert load(adapter, ks, objs) == [True] * N
    for want, got in zip(torch.load(saved), objs):
        assert torch.equal(want, got.tensor)
    assert heard.accessed == ks
    # A buffer of another size never takes a chunk's bytes.
    assert load(adapter, ks[:1], objects(n=1, size=CHUNK_BYTES // 2)) == [False]
    assert adapter.report_status()["is_healthy"]
    adapter.close()


def test_stores_feed_lmcaches_accounting_and_deletes_take_it_back(tmp_path):
    adapter = build(str(tmp_path / "s"))
    heard = Listener()
    adapter.register_listener(heard)
    ks = keys(4, salt="tenant-a")
    done = store(adapter, ks, objects(seed=1, n=4))
    assert done.is_successful() and done.bytes_transferred() == 4 * CHUNK_BYTES
    assert heard.stored == [(k, CHUNK_BYTES) for k in ks]
    usage = adapter.get_usage()
    assert usage.total_bytes_used == 4 * CHUNK_BYTES and dict(usage.bytes_by_cache_salt) == {"tenant-a": 4 * CHUNK_BYTES}

    adapter.delete(ks[:3] + keys(1, salt="never-stored"))
    assert heard.deleted == ks[:3]
    assert adapter.get_usage().total_bytes_used == CHUNK_BYTES
    assert lookup(adapter, ks) == [False, False, False, True]
    adapter.close()


def test_a_failing_listener_stops_no_later_completion(tmp_path):
    class Broken(Listener):
        def on_l2_keys_stored(self, keys, sizes=None):
            raise RuntimeError("listener bug")

    adapter = build(str(tmp_path / "s"))
    adapter.register_listener(Broken())
    ks = keys(2)
    task = adapter.submit_store_task(ks[:1], objects(seed=5, n=1))  # its listener raises on the router thread
    assert select.select([adapter.get_store_event_fd()], [], [], 30)[0], "the store's eventfd was never written"
    assert adapter.pop_completed_store_tasks()[task].is_successful()
    assert store(adapter, ks[1:], objects(seed=6, n=1)).is_successful()
    assert lookup(adapter, ks) == [True, True]
    adapter.close()


def test_lists_its_chunks_as_lmcache_keys_page_by_page(tmp_path):
    adapter = build(str(tmp_path / "s"))
    ks = keys(5) + keys(2, salt="t", group=3)
    assert store(adapter, ks, objects(seed=2, n=7)).is_successful()
    # Keys of the model that are no chunk's name are passed over, not listed.
    for junk in ("0", "00000000@0", "zz"):
        adapter._conn._ns.put(f"{MODEL}@{junk}", b"x" * 4096)
    seen, cursor, sizes = [], None, []
    while True:
        page = adapter.list_l2_keys(model_name=MODEL, page_size=3, cursor=cursor)
        assert isinstance(page, api.KeyListPage) and len(page.entries) <= 3
        seen += page.entries
        sizes.append(len(page.entries))
        cursor = page.next_page_token
        if cursor is None:
            break
    assert sizes[:2] == [3, 3] and sum(sizes) == 7
    assert sorted(e.key.to_object_key().chunk_hash + e.key.cache_salt.encode() for e in seen) == \
        sorted(k.chunk_hash + k.cache_salt.encode() for k in ks)
    assert {e.key.to_object_key() for e in seen} == set(ks)
    assert all(isinstance(e, api.KeyEntry) and e.size_bytes == CHUNK_BYTES for e in seen)
    assert adapter.list_l2_keys(model_name="other/model").entries == ()
    with pytest.raises(ValueError):
        adapter.list_l2_keys(page_size=0)
    adapter.close()


def test_chunks_stored_through_the_native_route_are_found(tmp_path):
    # The native_plugin route's wrapper names a chunk model@rank@group@hash[@salt]
    # (rank 8 hex digits): both routes read one store.
    path = str(tmp_path / "s")
    ks = keys(2, salt="s1", group=1)
    names = [f"{k.model_name}@{k.kv_rank:08x}@{k.object_group_id:x}@{k.chunk_hash.hex()}@{k.cache_salt}" for k in ks]
    assert names == [lmcache_plugin.object_key_string(k) for k in ks]
    conn = native_route.KvtierL2Connector(**params(path))
    src = objects(seed=3, n=2)
    fid = conn.submit_batch_set(names, [o.byte_array for o in src])
    done = wait(conn.event_fd(), lambda: next((c for c in conn.drain_completions() if c[0] == fid), None))
    assert done[1], done
    conn.close()
    adapter = build(path)
    dst = objects(n=2)
    assert load(adapter, ks, dst) == [True, True]
    assert all(torch.equal(a.tensor, b.tensor) for a, b in zip(src, dst))
    adapter.close()


def test_two_servers_share_chunks_through_the_service(kvtier_service):
    one, two = build(kvtier_service), build(kvtier_service)
    src = objects(seed=4)
    assert store(one, keys(rank=1), src).is_successful()
    dst = objects()
    assert load(two, keys(rank=1), dst) == [True] * N
    assert all(torch.equal(a.tensor, b.tensor) for a, b in zip(src, dst))
    assert lookup(two, keys(rank=0)) == [False] * N  # another worker's slice
    one.close()
    two.close()


@pytest.mark.parametrize("where, bad, named", [("store", {"capacity": 1}, "capacity"), ("", {}, "path")])
def test_a_wrong_adapter_param_fails_naming_it(tmp_path, where, bad, named):
    with pytest.raises(ValueError, match=named):
        build(str(tmp_path / where) if where else "", **bad)


def test_an_unopenable_store_misses_and_fails_transfers(tmp_path):
    (tmp_path / "f").write_text("x")
    adapter = build(str(tmp_path / "f" / "kv"))
    assert lookup(adapter, keys(2)) == [False, False]
    assert not store(adapter, keys(1), objects(n=1)).is_successful()
    assert not adapter.report_status()["is_healthy"]
    adapter.close()


if __name__ == "__main__":
    store_and_die(sys.argv[1], sys.argv[2])
