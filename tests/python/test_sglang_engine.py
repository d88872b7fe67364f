"""kvtier's SGLang backend inside SGLang's real HiCache code.

Runs when KVTIER_SGLANG_SRC names an SGLang checkout (see sglang_source.py for
what is replaced to run it on CPU); skips otherwise. SGLang's own
HiCacheController builds the backend through its StorageBackendFactory from
the documented extra config, with SGLang's real host pools; its backup thread
writes pages to kvtier; the process is then killed. A new process's
controller prefetches the same prompt (its own page hashing, hit query and
zero-copy or generic page transfer), and the host pool's pages must equal the
written ones byte for byte.
"""
import os
import subprocess
import sys
import threading
import time

import pytest

SRC = os.environ.get("KVTIER_SGLANG_SRC", "")
pytestmark = pytest.mark.skipif(not SRC, reason="KVTIER_SGLANG_SRC does not name an SGLang checkout")

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE, LAYERS, HEADS, DIM, N_PAGES = 16, 3, 2, 16, 20  # 320 tokens: above the prefetch threshold


def _sglang():
    sys.path.insert(0, HERE)
    import sglang_source

    sglang_source.load(SRC)
    import torch
    from sglang.srt.managers import cache_controller
    from sglang.srt.mem_cache import memory_pool, memory_pool_host

    return torch, cache_controller, memory_pool, memory_pool_host


def _device_pool(mla, dtype, heads=HEADS):
    torch, _, memory_pool, _ = _sglang()
    # The GPU-resident pool: only the attributes the host pool and the
    # controller read (sglang_source.py replaces its module).
    cls = memory_pool.MLATokenToKVPool if mla else memory_pool.MHATokenToKVPool
    pool = cls()
    pool.store_dtype = getattr(torch, dtype)
    pool.size, pool.device, pool.layer_num = 400, "cpu", LAYERS
    pool.start_layer, pool.end_layer = 0, LAYERS - 1
    pool.head_num, pool.head_dim = heads, DIM
    pool.kv_lora_rank, pool.qk_rope_head_dim = 32, 16
    return pool


class _Allocator:
    def __init__(self, pool):
        self._pool = pool

    def get_kvcache(self):
        return self._pool


def _controller(path, layout, mla, v1, dtype="bfloat16", seed=None, model="Qwen/Qwen3-0.6B", heads=HEADS, more=None):
    torch, cache_controller, _, memory_pool_host = _sglang()
    device = _device_pool(mla, dtype, heads)
    cls = memory_pool_host.MLATokenToKVPoolHost if mla else memory_pool_host.MHATokenToKVPoolHost
    host = cls(device, 2.0, 0, PAGE, layout, pin_memory=False, device="cpu")
    g = torch.Generator().manual_seed(seed or 0)
    for buf in (host.kv_buffer,) if isinstance(host.kv_buffer, torch.Tensor) else host.kv_buffer:
        if seed is None:
            buf.zero_()  # the pools are torch.empty
        else:
            buf.view(torch.int16).copy_(torch.randint(-3000, 3000, buf.shape, generator=g, dtype=torch.int16))
    extra = {"backend_name": "kvtier", "module_path": "kvtier.adapters.sglang",
             "class_name": "KvtierHiCacheStorage", "path": path, "capacity_gb": 0.25}
    if v1:
        extra["interface_v1"] = 1
    extra.update(more or {})
    ctl = cache_controller.HiCacheController(
        token_to_kv_pool_allocator=_Allocator(device), mem_pool_host=host, page_size=PAGE, tp_group=None,
        load_cache_event=threading.Event(), storage_backend="dynamic", prefetch_threshold=PAGE,
        model_name=model, storage_backend_extra_config=extra, enable_storage_metrics=True)
    return torch, ctl, host


def _prompt():
    import random

    rng = random.Random(7)
    return [rng.randrange(150000) for _ in range(PAGE * N_PAGES)]


def _page_words(torch, host, indices):
    return [host.get_data_page(int(indices[i]), flat=True).clone().view(torch.int16)
            for i in range(0, len(indices), PAGE)]


def _set_ranks(ranks):
    """Acts as one rank of several (sglang_source.RANKS: SGLang's process
    groups, stood in for in one process)."""
    _sglang()
    import sglang_source

    sglang_source.RANKS.update(ranks or {})


def write_and_die(path, layout, mla, v1, out, ranks=None):
    """Child process: back a prompt's pages up through the controller, save
    their bytes, then die without closing anything."""
    _set_ranks(ranks)
    torch, ctl, host = _controller(path, layout, mla, v1, seed=11)
    indices = _backup(ctl, host)
    torch.save(_page_words(torch, host, indices), out)
    os.kill(os.getpid(), 9)


def _backup(ctl, host):
    """Backs the prompt's pages up through the controller; returns their host indices."""
    from sglang.srt.mem_cache.utils import get_hash_str

    tokens = _prompt()
    hashes, last = [], None
    for i in range(0, len(tokens), PAGE):
        last = get_hash_str(tokens[i:i + PAGE], last)
        hashes.append(last)
    indices = host.alloc(len(tokens))
    assert indices is not None
    op_id = ctl.write_storage(indices, tokens, hash_value=hashes)
    ack = ctl.ack_backup_queue.get(timeout=60)
    assert ack.id == op_id and ack.completed_tokens == len(tokens), (ack.completed_tokens, len(tokens))
    return indices


def _child(path, layout, mla, v1, tmp, ranks=None):
    import json

    out = os.path.join(tmp, "pages.pt")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(HERE, "..", "..", "src", "python"), HERE]),
               KVTIER_TEST_RANKS=json.dumps(ranks or {}))
    r = subprocess.run([sys.executable, __file__, path, layout, str(int(mla)), str(int(v1)), out], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == -9, r.stdout + r.stderr
    return out


_COLLECTOR = None


def _prefetch(ctl, host, tokens, timeout=60):
    indices = host.alloc(len(tokens))
    assert indices is not None
    op = ctl.prefetch("req-1", indices, tokens)
    deadline = time.monotonic() + timeout
    while op.completed_tokens < len(tokens) and time.monotonic() < deadline:
        if not ctl.prefetch_revoke_queue.empty():
            break
        time.sleep(0.01)
    return op, indices


@pytest.mark.parametrize("layout, mla, v1", [
    ("page_first", False, True), ("page_first_direct", False, True), ("layer_first", False, True),
    ("page_head", False, True), ("page_first", False, False), ("layer_first", False, False),
    ("page_first", True, True), ("layer_first", True, True), ("page_first_direct", True, True),
    ("page_first", True, False),
])
def test_restart_cycle_through_the_real_controller(tmp_path, layout, mla, v1):
    path = str(tmp_path / "store")
    saved = _child(path, layout, mla, v1, str(tmp_path))
    torch, ctl, host = _controller(path, layout, mla, v1)
    tokens = _prompt()
    op, indices = _prefetch(ctl, host, tokens)
    assert op.completed_tokens == len(tokens)
    want = torch.load(saved)
    got = _page_words(torch, host, indices[:op.completed_tokens])
    assert len(got) == N_PAGES
    for w, g in zip(want, got):
        assert torch.equal(w, g)

    # SGLang's metrics collector takes the backend's stats as they are.
    from sglang.srt.observability.metrics_collector import StorageMetrics, StorageMetricsCollector

    stats = ctl.storage_backend.get_stats()
    assert isinstance(stats, StorageMetrics) and sum(stats.prefetch_pgs) == N_PAGES
    global _COLLECTOR
    _COLLECTOR = _COLLECTOR or StorageMetricsCollector(labels={"backend": "kvtier"})  # one per process
    _COLLECTOR.log_storage_metrics(stats)
    ctl.detach_storage_backend()


@pytest.mark.parametrize("change", [{"layout": "page_first_direct"}, {"layout": "page_head"}, {"v1": False},
                                    {"from": "page_first_direct", "layout": "page_head"},
                                    {"from": "layer_first", "layout": "layer_first", "v1": False},
                                    {"dtype": "float16"}, {"model": "Qwen/Qwen3-1.7B"}])
def test_a_changed_layout_mode_dtype_or_model_prefetches_nothing(tmp_path, change):
    path = str(tmp_path / "store")
    _child(path, change.get("from", "page_first"), False, True, str(tmp_path))
    torch, ctl, host = _controller(path, change.get("layout", "page_first"), False, change.get("v1", True),
                                   dtype=change.get("dtype", "bfloat16"), model=change.get("model", "Qwen/Qwen3-0.6B"))
    op, _ = _prefetch(ctl, host, _prompt(), timeout=5)
    assert op.completed_tokens == 0
    assert not ctl.prefetch_revoke_queue.empty()  # SGLang saw no hits and revoked the prefetch
    assert not host.kv_buffer.any()
    ctl.detach_storage_backend()


def test_a_wrong_key_fails_the_attach_naming_it(tmp_path):
    torch, cache_controller, _, memory_pool_host = _sglang()
    device = _device_pool(False, "bfloat16")
    host = memory_pool_host.MHATokenToKVPoolHost(device, 2.0, 0, PAGE, "page_first", pin_memory=False, device="cpu")
    extra = {"backend_name": "kvtier", "module_path": "kvtier.adapters.sglang",
             "class_name": "KvtierHiCacheStorage", "path": str(tmp_path), "capacity": 1, "interface_v1": 1}
    with pytest.raises(ValueError, match="'capacity'"):
        cache_controller.HiCacheController(
            token_to_kv_pool_allocator=_Allocator(device), mem_pool_host=host, page_size=PAGE, tp_group=None,
            load_cache_event=threading.Event(), storage_backend="dynamic", model_name="m",
            storage_backend_extra_config=extra)


# ---- Several ranks, one store: the node service (issue 19) -------------------------


def _prefetched_pages_equal(saved, ctl, host):
    torch, _, _, _ = _sglang()
    tokens = _prompt()
    op, indices = _prefetch(ctl, host, tokens)
    assert op.completed_tokens == len(tokens), op.completed_tokens
    want = torch.load(saved)
    got = _page_words(torch, host, indices[:op.completed_tokens])
    assert len(got) == N_PAGES and all(torch.equal(w, g) for w, g in zip(want, got))


def test_dp_attention_ranks_share_one_store_through_the_service(tmp_path, kvtier_service):
    # With DP attention every DP rank has attention TP rank 0 (of 1): DP rank 0
    # backs a prompt up and dies; DP rank 1, another process, prefetches it.
    dp = {"dp_attention": True, "attn_tp_rank": 0, "attn_tp_size": 1}
    saved = _child(kvtier_service, "page_first", False, True, str(tmp_path), dict(dp, attn_dp_rank=0))
    _set_ranks(dict(dp, attn_dp_rank=1))
    try:
        torch, ctl, host = _controller(kvtier_service, "page_first", False, True)
        _prefetched_pages_equal(saved, ctl, host)
        ctl.detach_storage_backend()
    finally:
        _set_ranks({"dp_attention": False, "attn_dp_rank": 0})


def test_mla_rank_zero_writes_and_every_rank_hits_through_the_service(tmp_path, kvtier_service):
    # MLA with TP 2: SGLang backs up from TP rank 0 only; rank 1 (another
    # process, which backs nothing up itself) must find every page.
    saved = _child(kvtier_service, "page_first", True, True, str(tmp_path), {"tp_rank": 0, "tp_size": 2})
    _set_ranks({"tp_rank": 1, "tp_size": 2})
    try:
        torch, ctl, host = _controller(kvtier_service, "page_first", True, True)
        assert ctl.backup_skip  # SGLang's own rule: rank 1 of an MLA model writes nothing
        _prefetched_pages_equal(saved, ctl, host)
        ctl.detach_storage_backend()
    finally:
        _set_ranks({"tp_rank": 0, "tp_size": 1})


def test_split_heads_pages_move_between_deployments_of_different_tp_sizes(tmp_path, kvtier_service):
    # tp_lcm_size 4: a TP-2 deployment (4 of 8 heads per rank, page_head)
    # backs a prompt up, SGLang splitting each rank's heads in two; each rank
    # of a TP-4 deployment (2 heads) prefetches its own heads' pages.
    total, lcm = 8, {"tp_lcm_size": 4}
    written = []
    try:
        for r in range(2):
            _set_ranks({"tp_rank": r, "tp_size": 2})
            torch, ctl, host = _controller(kvtier_service, "page_head", False, True, seed=20 + r, heads=4, more=lcm)
            assert ctl.storage_backend._storage_config.should_split_heads  # SGLang's own decision
            written.append(_page_words(torch, host, _backup(ctl, host)))
            ctl.detach_storage_backend()
        for r in range(4):
            _set_ranks({"tp_rank": r, "tp_size": 4})
            torch, ctl, host = _controller(kvtier_service, "page_head", False, True, heads=2, more=lcm)
            assert not ctl.storage_backend._storage_config.should_split_heads  # TP 4 is the lcm: whole pages
            op, indices = _prefetch(ctl, host, _prompt())
            assert op.completed_tokens == PAGE * N_PAGES, (r, op.completed_tokens)
            got = _page_words(torch, host, indices)
            for p in range(N_PAGES):
                heads = written[r // 2][p].view(2, total // 2, -1)[:, (r % 2) * 2:(r % 2) * 2 + 2]
                assert torch.equal(got[p], heads.reshape(-1)), (r, p)
            ctl.detach_storage_backend()
    finally:
        _set_ranks({"tp_rank": 0, "tp_size": 1})


# ---- Hybrid models: an extra pool beside the KV pool (SGLang's _v2 storage API) ------


MAMBA_LAYERS, MAMBA_CONV, MAMBA_STATE = 2, (6, 3), (2, 4, 4)


def _mamba_device_pool(layers=MAMBA_LAYERS, state=MAMBA_STATE):
    torch, _, _, _ = _sglang()
    # What MambaPoolHost reads of the GPU-resident Mamba pool: its state
    # tensors' shapes and dtypes (per layer, per slot), size and device.
    size = 8
    cache = type("MambaCache", (), {})()
    cache.conv = [torch.zeros((layers, size) + MAMBA_CONV, dtype=torch.bfloat16)]
    cache.temporal = torch.zeros((layers, size) + state, dtype=torch.float32)
    pool = type("MambaPool", (), {})()
    pool.num_mamba_layers, pool.mamba_cache, pool.size, pool.device = layers, cache, size, "cpu"
    return pool


def _hybrid_controller(path, seed=None, state=MAMBA_STATE, layout="page_first", heads=HEADS, more=None):
    """SGLang's HybridCacheController over a real HostPoolGroup: the KV host
    pool (the anchor) and a real MambaPoolHost, as for a Mamba-hybrid model."""
    torch, _, _, memory_pool_host = _sglang()
    from sglang.srt.mem_cache.hicache_storage import PoolName
    from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController

    device = _device_pool(False, "bfloat16", heads)
    kv = memory_pool_host.MHATokenToKVPoolHost(device, 2.0, 0, PAGE, layout, pin_memory=False, device="cpu")
    mamba_device = _mamba_device_pool(state=state)
    mamba = memory_pool_host.MambaPoolHost(mamba_device, 2.0, 0, pin_memory=False, device="cpu",
                                           layout="page_first")
    g = torch.Generator().manual_seed(seed or 0)
    for buf in (kv.kv_buffer, mamba.temporal_buffer, *mamba.conv_buffer):
        if seed is None:
            buf.zero_()
        else:
            buf.view(torch.int16).copy_(torch.randint(-3000, 3000, buf.view(torch.int16).shape, generator=g,
                                                      dtype=torch.int16))
    group = memory_pool_host.HostPoolGroup([
        memory_pool_host.PoolEntry(PoolName.KV, kv, device, lambda i: i, is_primary_index_anchor=True),
        memory_pool_host.PoolEntry(PoolName.MAMBA, mamba, mamba_device, lambda i: i)])
    extra = {"backend_name": "kvtier", "module_path": "kvtier.adapters.sglang",
             "class_name": "KvtierHiCacheStorage", "path": path, "capacity_gb": 0.25, "interface_v1": 1}
    extra.update(more or {})
    ctl = HybridCacheController(
        token_to_kv_pool_allocator=_Allocator(device), mem_pool_host=group, page_size=PAGE, tp_group=None,
        load_cache_event=threading.Event(), storage_backend="dynamic", prefetch_threshold=PAGE,
        model_name="Qwen/Qwen3-Next-80B-A3B-Instruct", storage_backend_extra_config=extra,
        enable_storage_metrics=True)
    return torch, ctl, kv, mamba


def _mamba_transfer(slots, keys):
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer

    return PoolTransfer(name=PoolName.MAMBA, host_indices=slots, keys=keys, hit_policy=PoolHitPolicy.TRAILING_PAGES)


def _hashes(tokens):
    from sglang.srt.mem_cache.utils import get_hash_str

    out, last = [], None
    for i in range(0, len(tokens), PAGE):
        last = get_hash_str(tokens[i:i + PAGE], last)
        out.append(last)
    return out


def write_hybrid_and_die(path, out):
    """Child process: back a prompt's KV pages and the Mamba state at its end
    up through SGLang's hybrid controller, save their bytes, die."""
    torch, ctl, kv, mamba = _hybrid_controller(path, seed=13)
    tokens = _prompt()
    hashes = _hashes(tokens)
    indices, slot = kv.alloc(len(tokens)), mamba.alloc(1)
    op_id = ctl.write_storage(indices, tokens, hash_value=hashes, extra_pools=[_mamba_transfer(slot, hashes[-1:])])
    ack = ctl.ack_backup_queue.get(timeout=60)
    assert ack.id == op_id and ack.completed_tokens == len(tokens), (ack.completed_tokens, len(tokens))
    torch.save({"kv": _page_words(torch, kv, indices), "mamba": mamba.get_data_page(int(slot[0])).clone()}, out)
    os.kill(os.getpid(), 9)


def _hybrid_child(path, tmp):
    out = os.path.join(tmp, "hybrid.pt")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(HERE, "..", "..", "src", "python"), HERE]))
    r = subprocess.run([sys.executable, __file__, "hybrid", path, out], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == -9, r.stdout + r.stderr
    return out


def _hybrid_prefetch(ctl, kv, mamba, tokens, timeout=60):
    indices, slot = kv.alloc(len(tokens)), mamba.alloc(1)
    op = ctl.prefetch("req-h", indices, tokens, extra_pools=[_mamba_transfer(slot, _hashes(tokens)[-1:])])
    deadline = time.monotonic() + timeout
    while op.completed_tokens < len(tokens) and time.monotonic() < deadline:
        if not ctl.prefetch_revoke_queue.empty():
            break
        time.sleep(0.01)
    return op, indices, slot


def test_a_hybrid_models_kv_pages_and_mamba_state_survive_a_restart(tmp_path):
    path = str(tmp_path / "store")
    saved = _hybrid_child(path, str(tmp_path))
    torch, ctl, kv, mamba = _hybrid_controller(path)
    # The prompt runs two pages past what was stored: SGLang's hit query
    # (batch_exists_v2) cuts it to the stored prefix, whose end holds the
    # stored Mamba state, and re-aligns the state's key to that end.
    tokens = _prompt() + list(range(2 * PAGE))
    op, indices, slot = _hybrid_prefetch(ctl, kv, mamba, tokens)
    want = torch.load(saved)
    assert op.completed_tokens == PAGE * N_PAGES, op.completed_tokens
    assert op.pool_storage_result.extra_pool_hit_pages == {"mamba": 1}
    got = _page_words(torch, kv, indices[:op.completed_tokens])
    assert len(got) == N_PAGES and all(torch.equal(w, g) for w, g in zip(want["kv"], got))
    assert torch.equal(mamba.get_data_page(int(slot[0])), want["mamba"])
    ctl.detach_storage_backend()


def test_a_hybrid_models_split_heads_come_back_through_its_pool_group(tmp_path, kvtier_service):
    # Rank 0 of TP 2 with tp_lcm_size 4, page_head: SGLang splits the KV
    # pool's heads while the host pool it hands over is a HostPoolGroup.
    try:
        _set_ranks({"tp_rank": 0, "tp_size": 2})
        torch, ctl, kv, mamba = _hybrid_controller(kvtier_service, seed=17, layout="page_head", heads=4,
                                                   more={"tp_lcm_size": 4})
        assert ctl.storage_backend._storage_config.should_split_heads
        tokens = _prompt()
        indices, slot = kv.alloc(len(tokens)), mamba.alloc(1)
        hashes = _hashes(tokens)
        op_id = ctl.write_storage(indices, tokens, hash_value=hashes,
                                  extra_pools=[_mamba_transfer(slot, hashes[-1:])])
        ack = ctl.ack_backup_queue.get(timeout=60)
        assert ack.id == op_id and ack.completed_tokens == len(tokens), ack.completed_tokens
        want = _page_words(torch, kv, indices)
        ctl.detach_storage_backend()

        torch, ctl, kv, mamba = _hybrid_controller(kvtier_service, layout="page_head", heads=4,
                                                   more={"tp_lcm_size": 4})
        op, got_indices, _ = _hybrid_prefetch(ctl, kv, mamba, tokens)
        assert op.completed_tokens == len(tokens), op.completed_tokens
        got = _page_words(torch, kv, got_indices)
        assert all(torch.equal(w, g) for w, g in zip(want, got))
        ctl.detach_storage_backend()
    finally:
        _set_ranks({"tp_rank": 0, "tp_size": 1})


def test_a_hybrid_prefix_without_its_mamba_state_or_of_another_state_shape_prefetches_nothing(tmp_path):
    path = str(tmp_path / "store")
    _hybrid_child(path, str(tmp_path))
    # A shorter prompt: its KV pages are stored, but no Mamba state at its end.
    torch, ctl, kv, mamba = _hybrid_controller(path)
    op, _, slot = _hybrid_prefetch(ctl, kv, mamba, _prompt()[:PAGE * (N_PAGES - 2)], timeout=5)
    assert op.completed_tokens == 0 and not ctl.prefetch_revoke_queue.empty()
    assert not mamba.get_data_page(int(slot[0])).any()
    ctl.detach_storage_backend()
    # The whole prompt, on a model whose Mamba state has another shape.
    torch, ctl, kv, mamba = _hybrid_controller(path, state=(2, 4, 8))
    op, _, slot = _hybrid_prefetch(ctl, kv, mamba, _prompt(), timeout=5)
    assert op.completed_tokens == 0 and not ctl.prefetch_revoke_queue.empty()
    assert not kv.kv_buffer.any() and not mamba.get_data_page(int(slot[0])).any()
    ctl.detach_storage_backend()


if __name__ == "__main__":
    import json

    SRC = SRC or sys.argv[0]
    if sys.argv[1] == "hybrid":
        write_hybrid_and_die(sys.argv[2], sys.argv[3])
    write_and_die(sys.argv[1], sys.argv[2], bool(int(sys.argv[3])), bool(int(sys.argv[4])), sys.argv[5],
                  json.loads(os.environ.get("KVTIER_TEST_RANKS", "{}")))
