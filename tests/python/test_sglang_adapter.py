"""Drives KvtierHiCacheStorage the way SGLang's HiCacheController does.

With KVTIER_SGLANG_SRC set these run against SGLang's real types and host
pool (sglang_source.py); otherwise against the stand-ins in standins/, which
test_sglang_standins.py holds to the real ones.
"""
import logging
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("KVTIER_SGLANG_SRC"):
    import sglang_source

    sglang_source.load(os.environ["KVTIER_SGLANG_SRC"])
else:
    sys.path.insert(0, os.path.join(HERE, "standins"))

from sglang.srt.mem_cache.hicache_storage import (HiCacheStorage, HiCacheStorageConfig,  # noqa: E402
                                                  PoolHitPolicy, PoolName, PoolTransfer)
from sglang.srt.mem_cache.memory_pool_host import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.observability.metrics_collector import StorageMetrics  # noqa: E402

from kvtier.adapters import sglang as adapter  # noqa: E402
from conftest import SMALL  # noqa: E402

PAGE, LAYERS, HEADS, DIM = 4, 3, 2, 8
LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")


class DevicePool:
    """What the host pools read of SGLang's device pool (GPU memory)."""

    def __init__(self, dtype=torch.bfloat16, layers=LAYERS, size=64, heads=HEADS):
        self.store_dtype = dtype
        self.size = size
        self.head_num, self.head_dim, self.layer_num = heads, DIM, layers
        self.start_layer, self.end_layer = 0, layers - 1
        self.device = "cpu"


def host_pool(layout="page_first", dtype=torch.bfloat16, layers=LAYERS, seed=None, heads=HEADS):
    pool = MHATokenToKVPoolHost(DevicePool(dtype, layers, heads=heads), host_to_device_ratio=2.0, host_size=0, page_size=PAGE,
                                layout=layout, pin_memory=False, device="cpu")
    if seed is None:
        pool.kv_buffer.zero_()
    else:
        g = torch.Generator().manual_seed(seed)
        pool.kv_buffer.view(torch.int16).copy_(
            torch.randint(-2000, 2000, pool.kv_buffer.shape, generator=g, dtype=torch.int16))
    return pool


def storage_config(extra, model="Qwen/Qwen3-0.6B", tp=(0, 1), mla=False, layout="page_first", tp_lcm=None):
    # As SGLang's cache controller fills it: it splits heads only where the
    # least common TP size is above this one's, on page_head, without MLA.
    split = bool(tp_lcm) and not mla and layout == "page_head" and tp_lcm > tp[1]
    return HiCacheStorageConfig(tp_rank=tp[0], tp_size=tp[1], pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                                is_mla_model=mla, enable_storage_metrics=True,
                                is_page_first_layout=layout == "page_first", model_name=model,
                                tp_lcm_size=tp_lcm, should_split_heads=split, extra_config=extra)


def extra_config(path, v1=True, **more):
    cfg = {"backend_name": "kvtier", "module_path": "kvtier.adapters.sglang", "class_name": "KvtierHiCacheStorage",
           "path": path, "capacity_gb": 0.0625, "options": dict(SMALL)}
    if v1:
        cfg["interface_v1"] = 1
    cfg.update(more)
    return cfg


def backend(path, pool, v1=True, model="Qwen/Qwen3-0.6B", tp=(0, 1), mla=False, tp_lcm=None, **more):
    # As SGLang's StorageBackendFactory builds a dynamic backend, then attaches the pool.
    b = adapter.KvtierHiCacheStorage(storage_config(extra_config(path, v1, **more), model, tp, mla,
                                                    layout=pool.layout, tp_lcm=tp_lcm), {})
    b.register_mem_pool_host(pool)
    return b


def keys(n, tag="k"):
    return [f"{tag}{i:04d}" * 4 for i in range(n)]


def pages(pool, n):
    return pool.alloc(n * PAGE)


def page_bytes(pool, idx):
    # As raw 16-bit words: random bits hold NaNs, which torch.equal never matches.
    return [pool.get_data_page(int(idx[i * PAGE]), flat=True).clone().view(torch.int16)
            for i in range(len(idx) // PAGE)]


def test_is_an_sglang_storage_backend():
    assert issubclass(adapter.KvtierHiCacheStorage, HiCacheStorage)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_zero_copy_pages_survive_a_restart_byte_for_byte(store_dir, layout):
    src = host_pool(layout, seed=1)
    idx = pages(src, 5)
    b = backend(store_dir, src)
    assert b.batch_set_v1(keys(5), idx) == [True] * 5
    want = page_bytes(src, idx)
    b.close()

    dst = host_pool(layout)
    b = backend(store_dir, dst)
    assert b.batch_exists(keys(5) + ["absent" * 8]) == 5
    didx = pages(dst, 5)
    assert b.batch_get_v1(keys(5), didx) == [True] * 5
    for w, g in zip(want, page_bytes(dst, didx)):
        assert torch.equal(w, g)
    b.close()


@pytest.mark.parametrize("layout", ("layer_first", "page_first"))
def test_generic_path_round_trips_flat_pages(store_dir, layout):
    src = host_pool(layout, seed=2)
    idx = pages(src, 3)
    b = backend(store_dir, src, v1=False)
    data = [src.get_data_page(int(idx[i * PAGE])) for i in range(3)]
    assert b.batch_set(keys(3), data)
    assert b.exists(keys(3)[0]) and b.batch_exists(keys(3)) == 3
    b.close()

    dst = host_pool(layout)
    b = backend(store_dir, dst, v1=False)
    didx = pages(dst, 3)
    got = b.batch_get(keys(3), [dst.get_dummy_flat_data_page() for _ in range(3)])
    assert all(g is not None for g in got)
    for i, g in enumerate(got):
        dst.set_from_flat_data_page(int(didx[i * PAGE]), g)
    for w, g in zip(page_bytes(src, idx), page_bytes(dst, didx)):
        assert torch.equal(w, g)
    assert b.get(keys(1, "absent")[0], dst.get_dummy_flat_data_page()) is None
    b.close()


def write_pages(store_dir, layout="page_first", v1=True, dtype=torch.bfloat16, model="Qwen/Qwen3-0.6B", **more):
    src = host_pool(layout, dtype=dtype, seed=3)
    idx = pages(src, 4)
    b = backend(store_dir, src, v1=v1, model=model, **more)
    if v1:
        assert all(b.batch_set_v1(keys(4), idx))
    else:
        assert b.batch_set(keys(4), [src.get_data_page(int(idx[i * PAGE])) for i in range(4)])
    b.close()


@pytest.mark.parametrize("change", [
    {"layout": "page_first_direct"}, {"layout": "layer_first"}, {"layout": "page_head"}, {"v1": False},
    {"dtype": torch.float16}, {"model": "Qwen/Qwen3-1.7B"}, {"salt": "tenant-b"}, {"layers": LAYERS + 1},
])
def test_a_store_written_one_way_is_a_miss_read_any_other_way(store_dir, change):
    # The layouts' pages have the same size: only the namespace tells them apart.
    write_pages(store_dir)
    layout, v1 = change.get("layout", "page_first"), change.get("v1", True)
    dst = host_pool(layout, dtype=change.get("dtype", torch.bfloat16), layers=change.get("layers", LAYERS))
    more = {"salt": change["salt"]} if "salt" in change else {}
    b = backend(store_dir, dst, v1=v1, model=change.get("model", "Qwen/Qwen3-0.6B"), **more)
    assert b.batch_exists(keys(4)) == 0
    didx = pages(dst, 4)
    if v1:
        assert b.batch_get_v1(keys(4), didx) == [False] * 4
    else:
        assert b.batch_get(keys(4), [dst.get_dummy_flat_data_page() for _ in range(4)]) == [None] * 4
    assert not dst.kv_buffer.any()
    b.close()


def test_get_stats_is_storage_metrics_and_drains(store_dir):
    src = host_pool(seed=4)
    b = backend(store_dir, src)
    assert isinstance(b.get_stats(), StorageMetrics)
    idx = pages(src, 3)
    b.batch_set_v1(keys(3), idx)
    b.batch_get_v1(keys(3), idx)
    s = b.get_stats()
    assert isinstance(s, StorageMetrics)
    assert s.backup_pgs == [3] and s.prefetch_pgs == [3]
    assert len(s.backup_bandwidth) == 1 and s.backup_bandwidth[0] > 0
    assert b.get_stats() == StorageMetrics()
    for _ in range(adapter.MAX_METRIC_SAMPLES + 10):  # never drained: bounded
        b.batch_get_v1(keys(1), idx[:PAGE])
    assert len(b.get_stats().prefetch_pgs) == adapter.MAX_METRIC_SAMPLES
    b.close()


def test_a_page_already_stored_is_not_rewritten(store_dir):
    src = host_pool(seed=5)
    idx = pages(src, 2)
    b = backend(store_dir, src)
    assert b.batch_set_v1(keys(2), idx) == [True, True]
    b.get_stats()
    assert b.batch_set_v1(keys(2), idx) == [True, True]
    assert b.get_stats().backup_pgs == []
    b.close()


@pytest.mark.parametrize("bad, named", [
    ({"capacity": 1}, "capacity"), ({"path": ""}, "path"), ({"options": 5}, "options"),
])
def test_a_wrong_config_key_is_named_at_start(store_dir, bad, named):
    bad = dict(bad)
    with pytest.raises(ValueError, match=named):
        backend(bad.pop("path", store_dir), host_pool(), **bad)


def test_an_unexpected_error_is_logged_and_answered_never_raised(store_dir, caplog):
    # SGLang's prefetch and backup threads would stop on an exception.
    pool = host_pool(seed=8)
    b = backend(store_dir, pool)
    idx = pages(pool, 2)
    assert b.batch_set_v1(keys(2), idx) == [True, True]

    def broken(*_):
        raise RuntimeError("host pool bug")

    pool.get_page_buffer_meta = broken
    with caplog.at_level(logging.ERROR, logger="kvtier.adapters.sglang"):
        assert b.batch_get_v1(keys(2), idx) == [False, False]
        assert b.batch_set_v1(keys(2, "n"), idx) == [False, False]
    assert caplog.text.count("RuntimeError: host pool bug") == 2  # each with its traceback
    b._ns["flat"] = None  # anything the calls below touch fails
    b._lookup_ns = broken
    assert b.batch_exists(keys(2)) == 0 and b.exists(keys(1)[0]) is False
    result = b.batch_exists_v2(keys(2))
    assert (result.kv_hit_pages, result.extra_pool_hit_pages) == (0, {})
    b._each_pool_transfer = broken
    t = PoolTransfer(name=PoolName.SWA, host_indices=idx, keys=keys(2), hit_policy=PoolHitPolicy.ALL_PAGES)
    assert b.batch_get_v2([t]) == {PoolName.SWA: [False, False]} == b.batch_set_v2([t])
    b.close()


def test_split_heads_off_the_zero_copy_path_are_refused_by_name(store_dir):
    cfg = storage_config(extra_config(store_dir, v1=False), tp=(0, 2), layout="page_head", tp_lcm=4)
    with pytest.raises(ValueError, match="tp_lcm_size.*interface_v1"):
        adapter.KvtierHiCacheStorage(cfg, {})


# ---- Split heads: deployments of different TP sizes share pages (tp_lcm_size) ----


def _deployment(addr, tp, tp_lcm, heads_total, seed=None):
    """One backend and page_head host pool per rank of a TP-`tp` deployment."""
    out = []
    for r in range(tp):
        pool = host_pool("page_head", heads=heads_total // tp, seed=None if seed is None else seed + r)
        out.append((pool, backend(addr, pool, tp=(r, tp), tp_lcm=tp_lcm)))
    return out


def _heads(page, heads, first, count):
    """Heads [first, first + count) of a page_head flat page (K, then V)."""
    return page.view(2, heads, -1)[:, first:first + count].reshape(-1)


@pytest.mark.parametrize("writer_tp, reader_tp", [(2, 4), (4, 2), (1, 4), (2, 2)])
def test_split_heads_pages_written_at_one_tp_size_load_at_another(kvtier_service, writer_tp, reader_tp):
    total, lcm, n = 8, 4, 3
    writers = _deployment(kvtier_service, writer_tp, lcm, total, seed=30)
    want = []  # per global head: its bytes in each page
    for pool, b in writers:
        idx = pages(pool, n)
        assert b.batch_set_v1(keys(n), idx) == [True] * n
        mine = total // writer_tp
        for p in page_bytes(pool, idx):
            want.append([_heads(p, mine, h, 1) for h in range(mine)])
    want = [[want[r * n + p][h] for r in range(writer_tp) for h in range(total // writer_tp)] for p in range(n)]
    for _, b in writers:
        b.close()

    readers = _deployment(kvtier_service, reader_tp, lcm, total)
    mine = total // reader_tp
    for r, (pool, b) in enumerate(readers):
        assert b.batch_exists(keys(n) + ["absent" * 8]) == n
        idx = pages(pool, n)
        assert b.batch_get_v1(keys(n), idx) == [True] * n
        for p, got in enumerate(page_bytes(pool, idx)):
            for h in range(mine):
                assert torch.equal(_heads(got, mine, h, 1), want[p][r * mine + h]), (r, p, h)
        b.close()


def test_split_heads_without_every_piece_are_a_miss(kvtier_service):
    # Only rank 0 of a TP-4 deployment wrote: a TP-2 rank 0 needs the pieces
    # of ranks 0 and 1 of 4, and finds half a page.
    (pool, b), *_ = _deployment(kvtier_service, 4, 4, 8, seed=40)
    assert b.batch_set_v1(keys(2), pages(pool, 2)) == [True, True]
    b.close()
    (pool, b), _ = _deployment(kvtier_service, 2, 4, 8)
    assert b.batch_exists(keys(2)) == 0 and not b.exists(keys(1)[0])
    assert b.batch_get_v1(keys(2), pages(pool, 2)) == [False, False]
    b.close()


def test_split_heads_backup_asks_each_piece_once(kvtier_service):
    # A backup batch of a TP-2 rank with tp_lcm_size 4 (two pieces a page):
    # each piece's namespace is asked once what it holds and written once,
    # and a page whose piece another deployment already wrote gets only the
    # piece it lacks.
    (pool, b), _ = _deployment(kvtier_service, 2, 4, 8, seed=60)
    (pool4, b4), *_ = _deployment(kvtier_service, 4, 4, 8, seed=61)
    assert b4.batch_set_v1(keys(1), pages(pool4, 1)) == [True]  # rank 0 of 4: piece 0 of page 0
    b4.close()
    calls = []
    for j, piece in enumerate(b._ns["v1"].pieces):
        for name in ("contains_batch", "put_batch"):
            def counted(*args, _f=getattr(piece, name), _tag=(name, j)):
                calls.append((_tag, len(args[0])))
                return _f(*args)
            setattr(piece, name, counted)
    assert b.batch_set_v1(keys(3), pages(pool, 3)) == [True] * 3
    assert sorted(calls) == [(("contains_batch", 0), 3), (("contains_batch", 1), 3),
                             (("put_batch", 0), 2), (("put_batch", 1), 3)]
    calls.clear()
    assert b.batch_set_v1(keys(3), pages(pool, 3)) == [True] * 3  # all there: nothing written
    assert sorted(calls) == [(("contains_batch", 0), 3), (("contains_batch", 1), 3)]
    b.close()


def test_split_heads_of_another_head_count_never_meet(kvtier_service):
    # A model with 16 heads in all is another geometry than one with 8.
    (pool, b), *_ = _deployment(kvtier_service, 2, 4, 8, seed=50)
    assert b.batch_set_v1(keys(2), pages(pool, 2)) == [True, True]
    b.close()
    (pool, b), *_ = _deployment(kvtier_service, 2, 4, 16)
    assert b.batch_exists(keys(2)) == 0
    b.close()


def hybrid_backend(path, kv, swa, swa_name=None):
    # As SGLang's HybridCacheController attaches a hybrid model's pools: the
    # KV pool first, then every entry of its host pool group through _v2.
    b = backend(path, kv)
    b.register_mem_host_pool_v2(kv, PoolName.KV)
    b.register_mem_host_pool_v2(swa, swa_name or PoolName.SWA)
    return b


def swa_transfer(pool, ks, n_pages=None, policy=None):
    idx = None if n_pages is None else pages(pool, n_pages)
    return PoolTransfer(name=PoolName.SWA, host_indices=idx, keys=list(ks),
                        hit_policy=policy or PoolHitPolicy.TRAILING_PAGES)


def test_a_hybrid_models_extra_pool_pages_survive_a_restart_byte_for_byte(store_dir):
    # An SWA model: the KV pool and a sliding-window pool of other layers,
    # whose last two pages a prefix needs (SGLang's TRAILING_PAGES policy).
    kv, swa = host_pool(seed=1), host_pool(layers=2, seed=2)
    b = hybrid_backend(store_dir, kv, swa)
    ks = keys(6)
    kv_idx = pages(kv, 6)
    assert b.batch_set_v1(ks, kv_idx) == [True] * 6
    t = swa_transfer(swa, ks[-2:], n_pages=2)
    want = page_bytes(swa, t.host_indices)
    assert b.batch_set_v2([t]) == {PoolName.SWA: [True, True]}
    assert b.batch_set_v2([t]) == {PoolName.SWA: [True, True]}  # already there: not written again
    b.close()

    kv2, swa2 = host_pool(), host_pool(layers=2)
    b = hybrid_backend(store_dir, kv2, swa2)
    # The prompt asks for three pages more than were stored: the KV prefix is 6
    # pages, and the SWA window that ends there is stored too.
    longer = ks + keys(3, "x")
    hit = b.batch_exists_v2(longer, [swa_transfer(swa2, longer[-2:])])
    assert (hit.kv_hit_pages, hit.extra_pool_hit_pages) == (6, {PoolName.KV: 6, PoolName.SWA: 6})
    t2 = swa_transfer(swa2, ks[-2:], n_pages=2)  # SGLang re-aligns the window to the hit
    assert b.batch_get_v2([t2]) == {PoolName.SWA: [True, True]}
    assert all(torch.equal(a, w) for a, w in zip(page_bytes(swa2, t2.host_indices), want))
    # Every page of the prefix must be there under ALL_PAGES: only two are.
    hit = b.batch_exists_v2(ks, [swa_transfer(swa2, ks, policy=PoolHitPolicy.ALL_PAGES)])
    assert (hit.kv_hit_pages, hit.extra_pool_hit_pages) == (0, {PoolName.KV: 6})
    # A window that ends earlier than the stored one is a shorter prefix.
    hit = b.batch_exists_v2(ks[:5], [swa_transfer(swa2, ks[3:5])])
    assert hit.kv_hit_pages == 0
    b.close()


def stored_hybrid(path, n, window):
    """A backend that stored n KV pages and the SWA pages of the last
    `window` of them."""
    kv, swa = host_pool(seed=1), host_pool(layers=2, seed=2)
    b = hybrid_backend(path, kv, swa)
    ks = keys(n)
    assert b.batch_set_v1(ks, pages(kv, n)) == [True] * n
    assert b.batch_set_v2([swa_transfer(swa, ks[-window:], n_pages=window)]) == {PoolName.SWA: [True] * window}
    return b, swa, ks


def test_an_extra_pool_of_another_geometry_or_name_misses_every_prefix(store_dir):
    b, _, ks = stored_hybrid(store_dir, 4, 1)
    b.close()
    for other, name in ((host_pool(layers=1), None), (host_pool(layers=2, dtype=torch.float16), None),
                        (host_pool(layers=2), PoolName.INDEXER)):
        b = hybrid_backend(store_dir, host_pool(), other, name)
        t = swa_transfer(other, ks[-1:], n_pages=1)
        t.name = name or PoolName.SWA
        hit = b.batch_exists_v2(ks, [t])
        assert (hit.kv_hit_pages, hit.extra_pool_hit_pages) == (0, {PoolName.KV: 4})
        assert b.batch_get_v2([t]) == {t.name: [False]}
        b.close()


def test_extra_pool_transfers_that_do_not_add_up_fail_alone(store_dir, caplog):
    kv, swa = host_pool(seed=1), host_pool(layers=2, seed=2)
    b = hybrid_backend(store_dir, kv, swa)
    ks = keys(3)
    bad = swa_transfer(swa, ks, n_pages=2)  # three keys, two pages of indices
    with caplog.at_level(logging.ERROR):
        assert b.batch_set_v2([bad]) == {PoolName.SWA: [False] * 3}
    assert "do not match" in caplog.text
    # A pool SGLang never registered answers nothing.
    unknown = PoolTransfer(name=PoolName.MAMBA, host_indices=pages(swa, 1), keys=ks[:1])
    assert b.batch_set_v2([unknown]) == {PoolName.MAMBA: [False]}
    assert b.batch_get_v2([unknown]) == {PoolName.MAMBA: [False]}
    assert b.batch_exists_v2(ks, [unknown]).kv_hit_pages == 0
    b.close()


def test_clear_drops_the_extra_pools_pages_too(store_dir):
    b, swa, ks = stored_hybrid(store_dir, 2, 2)
    assert b.clear()
    assert b.batch_exists_v2(ks, [swa_transfer(swa, ks)]).kv_hit_pages == 0
    assert b.batch_get_v2([swa_transfer(swa, ks, n_pages=2)]) == {PoolName.SWA: [False, False]}
    b.close()


def test_a_store_that_cannot_open_leaves_the_server_without_l3(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    pool = host_pool(seed=6)
    with caplog.at_level(logging.ERROR, logger="kvtier.adapters.sglang"):
        b = backend(str(blocker), pool)
    assert [r.levelno for r in caplog.records].count(logging.ERROR) == 1
    assert "kvtier backend disabled" in caplog.text
    idx = pages(pool, 2)
    assert b.batch_exists(keys(2)) == 0
    assert b.batch_set_v1(keys(2), idx) == [False, False]
    assert b.batch_get_v1(keys(2), idx) == [False, False]
    assert not b.batch_set(keys(1), [pool.get_data_page(0)])
    assert isinstance(b.get_stats(), StorageMetrics)
    b.close()


def test_each_tp_rank_opens_its_own_folder_with_a_share_of_capacity(store_dir):
    b = backend(store_dir, host_pool(), tp=(1, 2))
    assert os.path.isdir(os.path.join(store_dir, "tp1-pp0"))
    assert b._store.stats()["capacity_bytes"] == int(0.0625 / 2 * (1 << 30))
    assert b._ns["v1"].name.startswith("sglang/Qwen/Qwen3-0.6B/tp1of2/")
    b.close()
    with pytest.raises(ValueError, match="tp_rank"):
        backend(store_dir, host_pool(), tp=(2, 2))


def test_mla_ranks_share_one_namespace(store_dir):
    spec = adapter.namespace_spec(storage_config({}, tp=(1, 4), mla=True), host_pool(), "v1", {})
    assert (spec["tp_rank"], spec["tp_size"]) == (0, 1)
    plain = adapter.namespace_spec(storage_config({}, tp=(1, 4)), host_pool(), "v1", {})
    assert (plain["tp_rank"], plain["tp_size"]) == (1, 4)


def test_clear_drops_this_backends_pages(store_dir):
    src = host_pool(seed=7)
    b = backend(store_dir, src)
    idx = pages(src, 2)
    b.batch_set_v1(keys(2), idx)
    assert b.clear()
    assert b.batch_exists(keys(2)) == 0
    assert b.batch_set_v1(keys(2), idx) == [True, True]
    b.close()
