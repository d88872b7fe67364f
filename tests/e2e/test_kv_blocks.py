"""CPU tests of the end-to-end driver's kvtier parts (bench/e2e): chained block
hashes, block packing, save/load through a real store, the simulated GPU
cache, the workload, and the worker's request path with a tiny stand-in
model (transformers is not needed). Skips when torch is missing.

Run: PYTHONPATH=src/python KVTIER_LIB=build/lib/libkvtier.so \
     /usr/bin/python3 -m pytest tests/e2e -q
"""
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "bench", "e2e"))
sys.path.insert(0, os.path.join(REPO, "src", "python"))

torch = pytest.importorskip("torch")

import kv_blocks as kb  # noqa: E402
import workload as wl  # noqa: E402

SMALL_STORE = dict(segment_size_bytes=4 << 20, capacity_bytes=64 << 20, write_queue_bytes=8 << 20,
                   group_commit_bytes=2 << 20, read_threads=2, queue_depth=8)


def kvtier_or_skip():
    try:
        import kvtier
    except ImportError as e:
        pytest.skip(f"libkvtier not loadable (set KVTIER_LIB): {e}")
    return kvtier


# ---- hashes -------------------------------------------------------------------
def test_chain_hashes_are_prefix_keys():
    toks = list(range(100))
    keys = kb.chain_hashes(toks, 16, seed=7)
    assert len(keys) == 6 and all(len(k) == 32 for k in keys)
    assert len(set(keys)) == 6
    # A prompt that shares the first 40 tokens shares exactly its 2 full blocks.
    other = toks[:40] + [999] * 60
    k2 = kb.chain_hashes(other, 16, seed=7)
    assert k2[:2] == keys[:2] and all(a != b for a, b in zip(k2[2:], keys[2:]))
    # Changing the first token changes every key (the chain covers the prefix).
    k3 = kb.chain_hashes([1] + toks[1:], 16, seed=7)
    assert all(a != b for a, b in zip(k3, keys))
    assert kb.chain_hashes(toks, 16, seed=8)[0] != keys[0]
    assert kb.chain_hashes(np.asarray(toks), 16, seed=7) == keys
    assert kb.chain_hashes(toks[:15], 16) == []


# ---- packing -------------------------------------------------------------------
def layer_kv(L=3, H=2, S=40, D=8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(1, H, S, D, generator=g).to(dtype), torch.randn(1, H, S, D, generator=g).to(dtype))
            for _ in range(L)]


def test_pack_unpack_roundtrip():
    kv = layer_kv()
    blocks = kb.pack_blocks(kv, 2, 16)
    assert blocks.shape == (2, 3, 2, 2, 16, 8) and blocks.is_contiguous()
    # Block 1, layer 2, V, head 1 holds tokens 16..31 of that layer's V.
    assert torch.equal(blocks[1, 2, 1, 1], kv[2][1][0, 1, 16:32])
    back = kb.unpack_blocks(blocks)
    assert len(back) == 3
    for (k, v), (k2, v2) in zip(kv, back):
        assert k2.shape == (1, 2, 32, 8)
        assert torch.equal(k[:, :, :32], k2) and torch.equal(v[:, :, :32], v2)
    assert kb.pack_blocks(kv, 0, 16).shape[0] == 0
    with pytest.raises(ValueError):
        kb.pack_blocks(kv, 3, 16)  # 48 tokens from 40


def test_layout_sizes_match_reference_table():
    # limits.md: Qwen3-0.6B 16-token block 1.75 MiB bf16, 896 KiB fp8; 70B 5 MiB.
    assert kb.KvLayout(28, 8, 128, 16, "bf16").block_bytes == 1792 * 1024
    assert kb.KvLayout(28, 8, 128, 16, "bf16").bytes_per_token == 114688
    assert kb.KvLayout(80, 8, 128, 16, "bf16").block_bytes == 5 << 20
    if kb.fp8_supported():
        assert kb.KvLayout(28, 8, 128, 16, "fp8_e4m3").block_bytes == 896 * 1024
    with pytest.raises(ValueError):
        kb.KvLayout(1, 1, 1, 16, "int4")


def test_storage_conversion():
    if not hasattr(torch, "bfloat16"):
        pytest.skip("no bf16")
    blocks = kb.pack_blocks(layer_kv(dtype=torch.bfloat16), 2, 16)
    lay = kb.KvLayout(3, 2, 8, 16, "bf16")
    raw, clamped = kb.to_storage(blocks, "bf16")
    assert raw.dtype == torch.uint8 and raw.shape == (2, lay.block_bytes) and clamped == 0
    assert torch.equal(kb.from_storage(raw.reshape(-1), lay, 2, torch.bfloat16), blocks)
    if not kb.fp8_supported():
        return
    lay8 = kb.KvLayout(3, 2, 8, 16, "fp8_e4m3")
    big = blocks.clone()
    big[0, 0, 0, 0, 0, 0] = 1000.0
    raw8, clamped8 = kb.to_storage(big, "fp8_e4m3")
    assert raw8.shape == (2, lay8.block_bytes) and clamped8 == 1
    back = kb.from_storage(raw8.reshape(-1), lay8, 2, torch.bfloat16)
    assert torch.equal(back, kb.quant_roundtrip(big, "fp8_e4m3"))
    assert back[0, 0, 0, 0, 0, 0].item() == kb.FP8_MAX


# ---- save / load through kvtier -------------------------------------------------------
def test_blockio_save_load_miss(tmp_path):
    kvtier = kvtier_or_skip()
    kv = layer_kv(S=16 * 6)
    blocks = kb.pack_blocks(kv, 6, 16)
    lay = kb.KvLayout(3, 2, 8, 16, "bf16")
    toks = list(range(16 * 6 + 5))
    keys = kb.chain_hashes(toks, 16, seed=1)
    with kvtier.Store(str(tmp_path / "s"), **SMALL_STORE) as store:
        ns = store.register_namespace(name="t", dtype="bf16", block_tokens=16, block_bytes=lay.block_bytes)
        bio = kb.BlockIO(store, ns, lay, max_blocks=8, device=torch.device("cpu"), pin=False,
                         chunk_blocks=2, threads=2)
        try:
            assert bio.lookup(keys) == 0
            out = bio.save(keys, blocks.to(torch.bfloat16))
            assert out["saved"] == 6 and out["failed"] == 0
            assert bio.lookup(keys) == 6
            before = store.stats()
            raw, n, info = bio.load(keys)
            d = kb.stats_delta(before, store.stats())
            assert n == 6 and raw.numel() == 6 * lay.block_bytes
            assert d["hits_ram"] + d["hits_disk"] == 6
            got = kb.from_storage(raw, lay, n, torch.bfloat16)
            assert torch.equal(got, blocks.to(torch.bfloat16))
            # A block missing in the middle ends the prefix there.
            ns.remove(keys[3])
            assert bio.lookup(keys) == 3
            raw, n, _ = bio.load(keys)
            assert n == 3
            assert torch.equal(kb.from_storage(raw, lay, n, torch.bfloat16), blocks[:3].to(torch.bfloat16))
            with pytest.raises(ValueError):
                bio.load(keys + keys)  # 12 blocks > the 8-block buffer
        finally:
            bio.close()


# ---- GPU prefix cache -----------------------------------------------------------------
def test_gpu_cache_lru_and_round_robin():
    c = kb.GpuPrefixCache(capacity_tokens=16 * 10, block_tokens=16)
    docs = [[bytes([d, i]) for i in range(4)] for d in range(4)]  # 4 docs x 4 blocks
    for d in docs[:2]:
        assert c.insert(d, torch.arange(4))
    blocks, n = c.match(docs[0][:3] + [b"x"])
    assert n == 3 and blocks.tolist() == [0, 1, 2]
    assert c.insert(docs[2], torch.arange(4))  # 12 blocks > 10: evicts docs[1] (LRU)
    assert c.match(docs[1])[1] == 0 and c.match(docs[0])[1] == 4
    assert not c.insert([b"y"] * 11, torch.arange(11))  # larger than the cache
    # Round-robin over a working set larger than the cache never hits.
    c = kb.GpuPrefixCache(capacity_tokens=16 * 10, block_tokens=16)
    hits = 0
    for _ in range(3):
        for d in docs:
            hits += c.match(d)[1]
            c.insert(d, torch.arange(4))
    assert hits == 0


def test_workload_is_deterministic():
    a = wl.prompt(5, 1, 0, 100, 10, 8, 1000)
    assert np.array_equal(a, wl.prompt(5, 1, 0, 100, 10, 8, 1000))
    b = wl.prompt(5, 1, 1, 100, 10, 8, 1000)
    assert len(a) == len(b) and np.array_equal(a[:-8], b[:-8]) and not np.array_equal(a[-8:], b[-8:])
    assert not np.array_equal(wl.doc_tokens(5, 2, 100, 10, 1000)[:50], a[:50])
    assert wl.percentile([5, 1, 3, 2, 4], 90) == 5 and wl.percentile([], 50) is None
    assert wl.median([1, 3]) == 2.0


# ---- the worker's request path with a stand-in model -------------------------------------
class TinyLayer:
    def __init__(self):
        self.keys = None
        self.values = None


class TinyCache:
    """The part of transformers' DynamicCache the worker uses."""

    def __init__(self):
        self.layers = []

    def update(self, k, v, i):
        while len(self.layers) <= i:
            self.layers.append(TinyLayer())
        lay = self.layers[i]
        lay.keys = k if lay.keys is None else torch.cat([lay.keys, k], dim=-2)
        lay.values = v if lay.values is None else torch.cat([lay.values, v], dim=-2)
        return lay.keys, lay.values

    def get_seq_length(self):
        return 0 if not self.layers else self.layers[0].keys.shape[-2]


class TinyOut:
    def __init__(self, logits, cache):
        self.logits, self.past_key_values = logits, cache


class TinyModel:
    """Causal stand-in: K/V of a token depend on it, its position and the
    previous layer's output; logits attend over the whole cache."""

    def __init__(self, L=2, H=2, D=8, V=50):
        g = torch.Generator().manual_seed(3)
        self.emb = torch.randn(V, H * D, generator=g).to(torch.bfloat16)
        self.wk = [torch.randn(H * D, H * D, generator=g).to(torch.bfloat16) / 4 for _ in range(L)]
        self.wv = [torch.randn(H * D, H * D, generator=g).to(torch.bfloat16) / 4 for _ in range(L)]
        self.out = torch.randn(H * D, V, generator=g).to(torch.bfloat16)
        self.L, self.H, self.D = L, H, D

    def __call__(self, input_ids, past_key_values, use_cache=True, logits_to_keep=0):
        cache = past_key_values
        start = cache.get_seq_length()
        S = input_ids.shape[1]
        x = self.emb[input_ids[0]] + torch.arange(start, start + S).unsqueeze(1).to(torch.bfloat16) / 100
        for i in range(self.L):
            k = (x @ self.wk[i]).view(S, self.H, self.D).transpose(0, 1).unsqueeze(0)
            v = (x @ self.wv[i]).view(S, self.H, self.D).transpose(0, 1).unsqueeze(0)
            K, Vv = cache.update(k, v, i)
            q = k[0].float()
            scores = (q @ K[0].float().transpose(1, 2)) / 4  # [H, S, start + S]
            causal = torch.arange(K.shape[-2]).unsqueeze(0) > (start + torch.arange(S)).unsqueeze(1)
            att = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
            x = (att @ Vv[0].float()).transpose(0, 1).reshape(S, -1).to(torch.bfloat16) + x
        return TinyOut((x[-1:] @ self.out).unsqueeze(0), cache)


def make_worker(tmp_path, arm, storage):
    import worker as wk
    spec = {"name": "t", "arm": arm, "model": "tiny", "rep": 0, "seed": 11, "kv_dtypes": [storage],
            "doc_tokens": 60, "doc_jitter": 4, "question_tokens": 5, "docs": 3, "rounds": 3,
            "first_visit": 0, "gpu_cache_tokens": 64, "check_docs": 2, "load_chunk_blocks": 2,
            "load_threads": 2, "result_path": str(tmp_path / "res.json"), "store_dir": str(tmp_path / "st"),
            "ram_tier_bytes": 0, "store_options": dict(SMALL_STORE), "model_spec": {"model_id": "tiny"}}
    w = wk.Worker(spec)
    w.torch, w.kb, w.DynamicCache = torch, kb, TinyCache
    w.model = TinyModel()
    w.model_dtype = torch.bfloat16
    w.dev = torch.device("cpu")
    w.layers, w.kv_heads, w.head_dim, w.vocab = 2, 2, 8, 50
    w.fingerprint = "tiny"
    return w


@pytest.mark.parametrize("storage", ["bf16", "fp8_e4m3"])
def test_worker_passes_and_restart(tmp_path, storage):
    kvtier_or_skip()
    if storage == "fp8_e4m3" and not kb.fp8_supported():
        pytest.skip("torch has no float8_e4m3fn")
    # (b): first visits compute and store, revisits load the documents' blocks.
    w = make_worker(tmp_path, "disk_restart", storage)  # disk mode: no RAM tier option needed
    store = w.open_store()
    w.run_pass(store, storage)
    p = w.res["passes"][0]
    assert not p["errors"], p["errors"]
    reqs = p["requests"]
    assert len(reqs) == 9 and all(r["reconciled"] for r in reqs)
    first = [r for r in reqs if r["kind"] == "first"]
    rev = [r for r in reqs if r["kind"] == "revisit"]
    assert all(r["computed_tokens"] == r["prompt_tokens"] for r in first)
    # 3 docs of ~65 tokens > the 64-token GPU cache: revisits load from kvtier.
    assert all(r["gpu_tokens"] == 0 for r in rev)
    for r in rev:
        doc_len = r["prompt_tokens"] - 5
        assert r["kvtier_tokens"] == doc_len // 16 * 16
        assert r["ram_tokens"] + r["disk_tokens"] == r["kvtier_tokens"]
        assert r["bytes_loaded"] == r["kvtier_tokens"] // 16 * p["block_bytes"]
    # Loaded-prefix logits equal recomputation on the same kernels, bit for bit.
    assert len(p["checks"]) == 2
    for c in p["checks"]:
        assert c["kv_vs_first_visit_recompute"]["bitexact"], c
        assert c["logits_vs_same_kernels"]["bitexact"], c
    store.close()
    # (d): a new process's view: reopen and revisit, every prefix from the store.
    w2 = make_worker(tmp_path, "disk_restart", storage)
    w2.spec["first_visit"] = 3
    w2.spec["rounds"] = 1
    store = w2.open_store()
    w2.run_pass(store, storage)
    p2 = w2.res["passes"][0]
    assert not p2["errors"], p2["errors"]
    assert all(r["kind"] == "revisit" and r["kvtier_tokens"] > 0 and r["reconciled"] for r in p2["requests"])
    assert all(c["logits_vs_same_kernels"]["bitexact"] for c in p2["checks"])
    store.close()
    import report
    s = report.summarize_pass(p2)
    assert s["revisit_tokens"]["kvtier_tokens"] == sum(r["kvtier_tokens"] for r in p2["requests"])
    md = report.markdown({"workers": [{"name": "t", "model": "tiny", "arm": "disk_restart", "rep": 0,
                                       "summary": [s]}]})
    assert "| tiny |" in md


def test_recompute_pass_uses_gpu_cache_when_it_fits(tmp_path):
    w = make_worker(tmp_path, "recompute", "bf16")
    w.spec["gpu_cache_tokens"] = 16 * 100  # everything fits: revisits hit the GPU cache
    w.run_pass(None, None)
    reqs = w.res["passes"][0]["requests"]
    rev = [r for r in reqs if r["kind"] == "revisit"]
    assert rev and all(r["gpu_tokens"] > 0 and r["reconciled"] for r in rev)
