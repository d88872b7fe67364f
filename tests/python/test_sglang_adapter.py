"""Drives KvtierHiCacheStorage the way SGLang's HiCache controller does."""
import hashlib
import os

import numpy as np
import pytest

from kvtier.adapters import sglang as adapter
from conftest import SMALL

PAGE = 4096  # bytes per K (or V) page buffer in this harness


class HostPool:
    """A page_first host pool: K and V buffers per page, like SGLang's
    MHATokenToKVPoolHost.get_page_buffer_meta for non-MLA models."""

    def __init__(self, pages):
        self.k = np.zeros((pages, PAGE), dtype=np.uint8)
        self.v = np.zeros((pages, PAGE), dtype=np.uint8)

    def get_page_buffer_meta(self, indices):
        ptrs, sizes = [], []
        for i in indices:
            ptrs += [self.k[i].ctypes.data, self.v[i].ctypes.data]
            sizes += [PAGE, PAGE]
        return ptrs, sizes


def page_keys(n, salt=b""):
    keys, h = [], b""
    for i in range(n):
        h = hashlib.sha256(h + salt + i.to_bytes(4, "little")).hexdigest().encode()
        keys.append(h.decode())
    return keys


def make(store_dir, tp_rank=0):
    cfg = adapter.HiCacheStorageConfig(tp_rank=tp_rank, tp_size=2, is_mla_model=False,
                                       is_page_first_layout=True, model_name="Qwen/Qwen3-0.6B",
                                       extra_config=dict(SMALL, path=store_dir, backend_name="kvtier"))
    return adapter.KvtierHiCacheStorage(cfg)


def test_zero_copy_pages_with_restart(store_dir):
    pool = HostPool(16)
    rng = np.random.default_rng(1)
    pool.k[:] = rng.integers(0, 256, pool.k.shape, dtype=np.uint8)
    pool.v[:] = rng.integers(0, 256, pool.v.shape, dtype=np.uint8)
    keys = page_keys(8)
    be = make(store_dir)
    be.register_mem_pool_host(pool)
    assert be.batch_exists(keys) == 0
    assert be.batch_set_v1(keys[:6], list(range(6))) == [True] * 6
    assert be.batch_set_v1(keys[:2], [0, 1]) == [True, True]  # already there
    assert be.batch_exists(keys) == 6
    assert be.exists(keys[5]) and not be.exists(keys[6])
    k_before, v_before = pool.k.copy(), pool.v.copy()
    be.close()  # restart

    pool2 = HostPool(16)
    be = make(store_dir)
    be.register_mem_pool_host(pool2)
    assert be.batch_exists(keys) == 6
    got = be.batch_get_v1(keys[:7], list(range(8, 15)))
    assert got == [True] * 6 + [False]
    assert np.array_equal(pool2.k[8:14], k_before[:6]) and np.array_equal(pool2.v[8:14], v_before[:6])
    # another TP rank is another namespace
    be.close()
    other = make(store_dir, tp_rank=1)
    assert other.batch_exists(keys) == 0
    other.close()


def test_plain_get_set(store_dir):
    be = make(store_dir)
    a = np.arange(2048, dtype=np.float32)
    assert be.set("p0", a)
    assert be.set("p1", target_location=a.ctypes.data, target_sizes=a.nbytes)
    out = np.zeros_like(a)
    assert be.get("p0", out) is out and np.array_equal(out, a)
    assert be.get("p1") == a.tobytes()
    assert be.get("missing", np.zeros_like(a)) is None
    outs = [np.zeros_like(a), np.zeros_like(a)]
    res = be.batch_get(["p0", "missing"], outs)
    assert res[0] is outs[0] and res[1] is None
    assert be.batch_set(["q0", "q1"], [a, a])
    assert be.batch_exists(["q0", "q1", "zz"]) == 2
    assert not be.set("bad", 3.5)  # bad input: False, no crash
    assert be.get_stats()["sets"] >= 4
    be.clear()
    assert be.batch_exists(["q0"]) == 0
    be.close()


def test_needs_path():
    with pytest.raises(ValueError):
        adapter.KvtierHiCacheStorage(adapter.HiCacheStorageConfig(extra_config={}))


def test_ranks_share_a_path_without_sharing_a_store(store_dir):
    """SGLang runs each TP rank in its own process against one extra config:
    every rank must open (a store folder has one writer), keep its own
    blocks, and find them again after a restart."""
    pool = HostPool(4)
    pool.k[:] = 7
    pool.v[:] = 9
    keys = page_keys(3)
    ranks = [make(store_dir, tp_rank=r) for r in (0, 1)]  # same path: both must open
    for be in ranks:
        be.register_mem_pool_host(pool)
    assert ranks[0].batch_set_v1(keys[:2], [0, 1]) == [True, True]
    assert ranks[1].batch_set_v1(keys[:1], [2]) == [True]
    assert ranks[0].batch_exists(keys) == 2
    assert ranks[1].batch_exists(keys) == 1  # each rank sees only its own pages
    for be in ranks:
        be.close()
    assert sorted(os.listdir(store_dir)) == ["tp0-pp0", "tp1-pp0"]
    again = make(store_dir, tp_rank=1)
    assert again.batch_exists(keys) == 1
    again.close()


def test_rank_config_splits_capacity(tmp_path):
    d = str(tmp_path / "kv")
    cfg = adapter.HiCacheStorageConfig(tp_rank=3, tp_size=4, pp_rank=1, pp_size=2)
    out = adapter.store_config({"path": d, "capacity_gb": 64}, cfg)
    assert out["path"] == os.path.join(d, "tp3-pp1")
    assert out["capacity_gb"] == 8.0
    assert os.path.isdir(d)
    single = adapter.store_config({"path": d, "capacity_gb": 64}, adapter.HiCacheStorageConfig())
    assert single == {"path": d, "capacity_gb": 64}
    with pytest.raises(ValueError):
        adapter.store_config({"path": d}, adapter.HiCacheStorageConfig(tp_rank=2, tp_size=2))
