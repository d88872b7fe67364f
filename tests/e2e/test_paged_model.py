"""The e2e run's serving forward (bench/e2e/paged_model.py) on a CPU, in fp32
with a tiny shape: a prefill and a suffix over paged blocks compute what a
plain dense causal decoder computes; padding and batching change nothing;
blocks that went out as bytes and came back in other slots give the same
logits, bit for bit (what the e2e run checks after a load through kvtier).
On the H200 run the same forward is checked against transformers' own
Qwen3 and Llama (paged_model.check_against_transformers)."""
import math
import os
import sys

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "e2e"))

import paged_model as pm  # noqa: E402

TINY = {
    "qwen3": dict(family="qwen3", vocab=101, hidden=64, intermediate=96, layers=2, heads=4, kv_heads=2,
                  head_dim=16, rope_theta=10000.0, eps=1e-6, tied=True),
    "llama": dict(family="llama", vocab=97, hidden=64, intermediate=80, layers=3, heads=8, kv_heads=2,
                  head_dim=8, rope_theta=500000.0, eps=1e-5, tied=False),
}


def dense_logits(m, tokens):
    """A plain decoder over the whole sequence, no cache: the reference."""
    c = m.cfg
    F = torch.nn.functional
    t = torch.as_tensor(tokens)[None]
    S = t.shape[1]
    pos = torch.arange(S)[None]
    h = F.embedding(t, m.embed)
    for L in m.layers:
        x = pm.rms_norm(h, L["in_norm"], c["eps"])
        q = F.linear(x, L["q"]).view(1, S, c["heads"], c["head_dim"])
        k = F.linear(x, L["k"]).view(1, S, c["kv_heads"], c["head_dim"])
        v = F.linear(x, L["v"]).view(1, S, c["kv_heads"], c["head_dim"])
        if "q_norm" in L:
            q, k = pm.rms_norm(q, L["q_norm"], c["eps"]), pm.rms_norm(k, L["k_norm"], c["eps"])
        q, k = m.rope(q, pos), m.rope(k, pos)
        rep = c["heads"] // c["kv_heads"]
        k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
        w = torch.einsum("bshd,bthd->bhst", q, k) / math.sqrt(c["head_dim"])
        w = w.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
        o = torch.einsum("bhst,bthd->bshd", w, v).reshape(1, S, -1)
        h = h + F.linear(o, L["o"])
        x = pm.rms_norm(h, L["post_norm"], c["eps"])
        h = h + F.linear(F.silu(F.linear(x, L["gate"])) * F.linear(x, L["up"]), L["down"])
    return F.linear(pm.rms_norm(h[0, -1], m.norm, c["eps"]), m.lm_head)


def model(family, blocks=64):
    return pm.PagedModel(TINY[family], blocks, "cpu", seed=7, dtype=torch.float32)


def toks(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 90, (n,), generator=g).tolist()


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_prefill_and_suffix_match_a_dense_decoder(family):
    m = model(family)
    p = toks(53, 1)
    ref = dense_logits(m, p)
    table = [5, 9, 2, 30]  # 4 blocks anywhere in the cache
    full = m.run([(p, 0, table)])[0]
    assert torch.allclose(full, ref, atol=1e-4, rtol=1e-4)
    # The first 3 blocks (48 tokens) as a cached prefix, then the suffix.
    m2 = model(family)
    m2.run([(p[:48], 0, table[:3])])
    suffix = m2.run([(p[48:], 48, table)])[0]
    assert torch.allclose(suffix, ref, atol=1e-4, rtol=1e-4)


def test_batching_and_padding_change_nothing():
    m = model("qwen3")
    a, b = toks(40, 2), toks(21, 3)
    ta, tb = [1, 2, 3], [4, 5]
    one_a = m.run([(a, 0, ta)])[0]
    one_b = m.run([(b, 0, tb)])[0]
    both = m.run([(a, 0, ta), (b, 0, tb)])
    assert torch.allclose(both[0], one_a, atol=1e-5) and torch.allclose(both[1], one_b, atol=1e-5)
    # Suffixes of different lengths in one step.
    qa, qb = toks(7, 4), toks(3, 5)
    sa = m.run([(qa, 40, ta + [6])])[0]
    sb = m.run([(qb, 21, tb)])[0]
    both = m.run([(qa, 40, ta + [6]), (qb, 21, tb)])
    assert torch.allclose(both[0], sa, atol=1e-5) and torch.allclose(both[1], sb, atol=1e-5)


def test_blocks_moved_as_bytes_give_identical_logits():
    src, dst = model("llama"), model("llama")
    p = toks(64 + 9, 6)
    src.run([(p[:64], 0, [3, 4, 5, 6])])
    want = src.run([(p[64:], 64, [3, 4, 5, 6, 7])])[0]
    # Out as bytes (as kvtier stores a block), back into other blocks.
    for s_blk, d_blk in zip([3, 4, 5, 6], [40, 12, 33, 8]):
        raw = src.cache[s_blk].numpy().tobytes()
        assert len(raw) == src.block_bytes
        dst.cache[d_blk].copy_(torch.frombuffer(bytearray(raw), dtype=torch.float32).view_as(dst.cache[d_blk]))
    got = dst.run([(p[64:], 64, [40, 12, 33, 8, 9])])[0]
    assert torch.equal(got, want)
    # A wrong block is not silently the same.
    dst.cache[12].add_(1.0)
    assert not torch.equal(dst.run([(p[64:], 64, [40, 12, 33, 8, 9])])[0], want)


def test_buckets_are_few_and_cover_the_step():
    for n_tok, n_blk in [(1, 1), (38, 172), (64, 1030), (65, 4), (2774, 174), (16408, 1026)]:
        s, nb = pm.PagedModel.bucket(n_tok, n_blk)
        assert s >= n_tok and nb >= n_blk and nb * pm.BLOCK_TOKENS >= s
    assert pm.PagedModel.bucket(38, 171) == pm.PagedModel.bucket(40, 172)
