"""A serving engine's forward for the end-to-end run (docs/e2e.md): a decoder
(Qwen3 or Llama layer shape) over a paged KV cache, captured as CUDA graphs
per shape bucket, so that a step costs what its tokens cost and not what its
kernel launches cost.

The KV cache is one tensor of cross-layer blocks, the layout vLLM's KV
offloading uses: [num_blocks, layers, 2, block_tokens, kv_heads, head_dim],
so one block is one contiguous piece of memory (kvtier moves it in one
fragment). Block 0 is scratch: padding tokens write there and padded block
table entries read from there (masked).

The same forward serves a full prefill (recompute) and a suffix over loaded
blocks: the caller gives, per sequence, the tokens to run, their positions,
the block table of the whole context and the slots the new tokens' KV goes
to. Attention reads the context through the block table; the mask keeps each
query to keys at or before its position.

Weights are random (a seed), shaped like the real model: the cost of a
forward depends on shapes, not values. check_against_transformers() shows
that this forward computes what transformers' implementation of the same
architecture computes.
"""
import math

import torch
import torch.nn.functional as F

BLOCK_TOKENS = 16

MODELS = {
    "qwen3-0.6b": dict(family="qwen3", vocab=151936, hidden=1024, intermediate=3072, layers=28, heads=16,
                       kv_heads=8, head_dim=128, rope_theta=1000000.0, eps=1e-6, tied=True,
                       model_id="Qwen/Qwen3-0.6B (shape, random weights)"),
    "llama70b-shape": dict(family="llama", vocab=128256, hidden=8192, intermediate=28672, layers=8, heads=64,
                           kv_heads=8, head_dim=128, rope_theta=500000.0, eps=1e-5, tied=False,
                           model_id="meta-llama/Llama-3.1-70B (layer shape, 8 layers, random weights)"),
}


def round_up(n, m):
    return (n + m - 1) // m * m


def kv_bytes_per_token(cfg, dtype_bytes=2):
    return cfg["layers"] * 2 * cfg["kv_heads"] * cfg["head_dim"] * dtype_bytes


def rms_norm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def prefill_attention(q, k, v):
    """A prefill from position 0: q [B, H, S, D], k/v [B, H, S, D], causal
    from the top left, which lets SDPA take its flash kernel, as an engine's
    prefill does."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    w = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])  # torch < 2.0 (CPU tests)
    S, T = q.shape[-2], k.shape[-2]
    w = w.masked_fill(~torch.ones(S, T, dtype=torch.bool, device=q.device).tril(), float("-inf")).softmax(-1)
    return (w @ v.float()).to(q.dtype)


def _scores_f32(a, b):
    """a @ b with fp32 output: on CUDA from bf16/fp16 operands (cuBLAS
    accumulates in fp32 and keeps it), else by converting."""
    if a.dtype != torch.float32 and a.is_cuda:
        try:
            return torch.bmm(a, b, torch.float32)  # torch >= 2.8: out_dtype
        except TypeError:
            pass
    return torch.bmm(a.float(), b.float())


def paged_attention(q, k, v, mask):
    """A step over cached context: q [B, Hq, S, D]; k/v [B, Hk, T, D] (the
    context gathered through the block table); mask [B, 1, S, T] (True:
    attend). The G = Hq/Hk query heads that share a KV head are folded into
    one product against it, as engines' decode kernels do: K and V are read
    once, never repeated per query head, and the products have G*S rows
    rather than S. Scores and softmax in fp32; probabilities are rounded to
    the cache's dtype for the product with V (as flash kernels do)."""
    B, Hq, S, D = q.shape
    Hk, T = k.shape[1], k.shape[2]
    G = Hq // Hk
    qf = (q * (1.0 / math.sqrt(D))).reshape(B * Hk, G * S, D)
    w = _scores_f32(qf, k.reshape(B * Hk, T, D).transpose(1, 2)).view(B, Hk, G, S, T)
    w = w.masked_fill(~mask[:, :, None], float("-inf")).softmax(-1)
    o = torch.bmm(w.view(B * Hk, G * S, T).to(v.dtype), v.reshape(B * Hk, T, D))
    return o.view(B, Hq, S, D)


class PagedModel:
    def __init__(self, cfg, num_blocks, device, seed=1234, dtype=torch.bfloat16):
        self.cfg, self.device, self.dtype = cfg, torch.device(device), dtype
        c = cfg
        # Drawn where they live: 9 GB of weights (70B layer shape) drawn on
        # the host took a minute per worker process.
        g = torch.Generator(device=self.device).manual_seed(seed)

        def w(*shape, scale=0.02):
            return (torch.randn(*shape, generator=g, device=self.device) * scale).to(dtype)

        def ones(n):
            return torch.ones(n, device=self.device, dtype=dtype)

        H, D = c["hidden"], c["head_dim"]
        self.embed = w(c["vocab"], H)
        self.layers = []
        for _ in range(c["layers"]):
            L = dict(in_norm=ones(H), q=w(c["heads"] * D, H), k=w(c["kv_heads"] * D, H), v=w(c["kv_heads"] * D, H),
                     o=w(H, c["heads"] * D), post_norm=ones(H), gate=w(c["intermediate"], H),
                     up=w(c["intermediate"], H), down=w(H, c["intermediate"]))
            if c["family"] == "qwen3":
                L["q_norm"], L["k_norm"] = ones(D), ones(D)
            self.layers.append(L)
        self.norm = ones(H)
        self.lm_head = self.embed if c["tied"] else w(c["vocab"], H)
        # The cache: [blocks, layers, 2, 16, kv_heads, head_dim].
        self.num_blocks = num_blocks
        self.cache = torch.zeros(num_blocks, c["layers"], 2, BLOCK_TOKENS, c["kv_heads"], D,
                                 device=self.device, dtype=dtype)
        self.block_bytes = self.cache[0].numel() * self.cache.element_size()
        self.cache_address = self.cache.data_ptr()  # the cache never moves
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
        self.inv_freq = inv.to(self.device)
        self.graphs = {}

    # ---- the forward ----------------------------------------------------------------
    def rope_tables(self, pos, dtype):
        """cos, sin [B, S, 1, D] for positions pos [B, S] (once per step,
        shared by every layer)."""
        f = pos.float()[..., None] * self.inv_freq  # [B, S, D/2]
        f = torch.cat([f, f], -1)[:, :, None, :]
        return f.cos().to(dtype), f.sin().to(dtype)

    @staticmethod
    def apply_rope(x, cos, sin):
        """x [B, S, h, D] (rotate_half convention, as Llama/Qwen)."""
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def rope(self, x, pos):
        return self.apply_rope(x, *self.rope_tables(pos, x.dtype))

    def forward(self, tokens, pos, table, slot_block, slot_off, mask, last):
        """tokens/pos/slot_block/slot_off [B, S] (long), table [B, nb] (long),
        mask [B, 1, S, nb*16] (bool; None: every sequence starts at position
        0), last [B] (long: the index of each sequence's last real token).
        Returns fp32 logits [B, vocab]."""
        c = self.cfg
        B, S = tokens.shape
        Hq, Hk, D = c["heads"], c["kv_heads"], c["head_dim"]
        h = F.embedding(tokens, self.embed)
        cos, sin = self.rope_tables(pos, h.dtype)
        for li, L in enumerate(self.layers):
            x = rms_norm(h, L["in_norm"], c["eps"])
            q = F.linear(x, L["q"]).view(B, S, Hq, D)
            k = F.linear(x, L["k"]).view(B, S, Hk, D)
            v = F.linear(x, L["v"]).view(B, S, Hk, D)
            if "q_norm" in L:
                q, k = rms_norm(q, L["q_norm"], c["eps"]), rms_norm(k, L["k_norm"], c["eps"])
            q, k = self.apply_rope(q, cos, sin), self.apply_rope(k, cos, sin)
            layer = self.cache[:, li]  # [blocks, 2, 16, Hk, D]
            layer[slot_block, 0, slot_off] = k
            layer[slot_block, 1, slot_off] = v
            if mask is None:  # a prefill: its own keys only (T == S keeps SDPA on flash)
                K = k.repeat_interleave(Hq // Hk, dim=2).transpose(1, 2)
                V = v.repeat_interleave(Hq // Hk, dim=2).transpose(1, 2)
                o = prefill_attention(q.transpose(1, 2), K, V)
            else:  # the context through the block table, K and V each gathered once
                flat = table.reshape(-1)
                T = table.shape[1] * BLOCK_TOKENS
                K = layer[:, 0].index_select(0, flat).view(B, T, Hk, D).transpose(1, 2)
                V = layer[:, 1].index_select(0, flat).view(B, T, Hk, D).transpose(1, 2)
                o = paged_attention(q.transpose(1, 2), K, V, mask)
            o = o.transpose(1, 2).reshape(B, S, Hq * D)
            h = h + F.linear(o, L["o"])
            x = rms_norm(h, L["post_norm"], c["eps"])
            h = h + F.linear(F.silu(F.linear(x, L["gate"])) * F.linear(x, L["up"]), L["down"])
        h = h[torch.arange(B, device=h.device), last]
        return F.linear(rms_norm(h, self.norm, c["eps"]), self.lm_head).float()

    # ---- requests -> padded inputs, and the graphs ---------------------------------------
    @staticmethod
    def bucket(n_tokens, n_blocks):
        """The (tokens, blocks) shape a step is padded to: few shapes, little padding."""
        s = 64 if n_tokens <= 64 else round_up(n_tokens, 512)
        return s, max(round_up(n_blocks, 32), (s + BLOCK_TOKENS - 1) // BLOCK_TOKENS)

    def inputs(self, seqs):
        """seqs: list of (tokens to run, their first position, block table of
        the whole context). Returns the padded input tensors and the bucket."""
        B = len(seqs)
        n_tok = max(len(t) for t, _, _ in seqs)
        n_blk = max(len(tb) for _, _, tb in seqs)
        S, NB = self.bucket(n_tok, n_blk)
        tokens = torch.zeros(B, S, dtype=torch.long)
        pos = torch.zeros(B, S, dtype=torch.long)
        sblk = torch.zeros(B, S, dtype=torch.long)  # padding writes to scratch block 0
        soff = torch.zeros(B, S, dtype=torch.long)
        table = torch.zeros(B, NB, dtype=torch.long)
        mask = torch.zeros(B, 1, S, NB * BLOCK_TOKENS, dtype=torch.bool)
        last = torch.zeros(B, dtype=torch.long)
        keys = torch.arange(NB * BLOCK_TOKENS)
        prefill = all(start == 0 for _, start, _ in seqs)
        for b, (toks, start, tb) in enumerate(seqs):
            n = len(toks)
            p = torch.arange(start, start + n)
            tokens[b, :n] = torch.as_tensor(toks, dtype=torch.long)
            pos[b, :n] = p
            table[b, :len(tb)] = torch.as_tensor(tb, dtype=torch.long)
            sblk[b, :n] = table[b, p // BLOCK_TOKENS]
            soff[b, :n] = p % BLOCK_TOKENS
            mask[b, 0, :n] = keys[None, :] <= p[:, None]
            mask[b, 0, n:, 0] = True  # padding queries see one key: no empty softmax
            last[b] = n - 1
        if prefill:  # padding sits after the real tokens: top-left causal is exact
            return (tokens, pos, table, sblk, soff, None, last), (B, S, NB, True)
        return (tokens, pos, table, sblk, soff, mask, last), (B, S, NB, False)

    def run(self, seqs, graphs=True):
        """One step over `seqs`; returns logits [B, vocab] (fp32, on the device).
        With graphs (CUDA only), each bucket is captured on first use."""
        args, key = self.inputs(seqs)
        if not graphs or self.device.type != "cuda":
            return self.forward(*[None if a is None else a.to(self.device) for a in args])
        entry = self.graphs.get(key)
        if entry is None:
            entry = self.capture(args)
            self.graphs[key] = entry
        static, out, graph = entry
        for dst, src in zip(static, args):
            if dst is not None:
                dst.copy_(src, non_blocking=True)
        graph.replay()
        return out

    def capture(self, args):
        static = [None if a is None else a.to(self.device) for a in args]
        # Warm up on a side stream (as torch's documentation prescribes); the
        # warm-up writes KV to the slots of `args`: captured runs are always
        # re-run by the caller after capture, so nothing stale stays.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                self.forward(*static)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self.forward(*static)
        return static, out, graph

    # ---- cross-layer blocks as kvtier fragments ------------------------------------------
    def block_fragment(self, block):
        """(device address, bytes) of cache block `block`."""
        return self.cache_address + block * self.block_bytes, self.block_bytes


def check_against_transformers(model, tokens):
    """Logits of transformers' own implementation of the architecture, with
    this model's weights, against this forward's (full prefill). Returns the
    largest absolute difference over the largest logit (relative)."""
    import transformers
    c = model.cfg
    kw = dict(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["intermediate"],
              num_hidden_layers=c["layers"], num_attention_heads=c["heads"], num_key_value_heads=c["kv_heads"],
              head_dim=c["head_dim"], rms_norm_eps=c["eps"], tie_word_embeddings=c["tied"],
              max_position_embeddings=65536)
    cls = {"qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}[c["family"]]
    cfg_cls = {"qwen3": "Qwen3Config", "llama": "LlamaConfig"}[c["family"]]
    cfg = None
    for extra in ({"rope_parameters": {"rope_type": "default", "rope_theta": c["rope_theta"]}},
                  {"rope_theta": c["rope_theta"]}):
        try:
            cfg = getattr(transformers, cfg_cls)(**kw, **extra)
            break
        except Exception:
            continue
    with torch.device(model.device):
        hf = getattr(transformers, cls)(cfg).to(model.dtype).eval()
    sd = {"model.embed_tokens.weight": model.embed, "model.norm.weight": model.norm}
    if not c["tied"]:
        sd["lm_head.weight"] = model.lm_head
    for i, L in enumerate(model.layers):
        p = f"model.layers.{i}."
        sd.update({p + "input_layernorm.weight": L["in_norm"], p + "post_attention_layernorm.weight": L["post_norm"],
                   p + "self_attn.q_proj.weight": L["q"], p + "self_attn.k_proj.weight": L["k"],
                   p + "self_attn.v_proj.weight": L["v"], p + "self_attn.o_proj.weight": L["o"],
                   p + "mlp.gate_proj.weight": L["gate"], p + "mlp.up_proj.weight": L["up"],
                   p + "mlp.down_proj.weight": L["down"]})
        if "q_norm" in L:
            sd[p + "self_attn.q_norm.weight"], sd[p + "self_attn.k_norm.weight"] = L["q_norm"], L["k_norm"]
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    missing = [m for m in missing if not m.endswith("lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"weights do not map: missing {missing[:4]}, unexpected {unexpected[:4]}")
    with torch.no_grad():
        ref = hf(input_ids=torch.as_tensor([tokens], device=model.device)).logits[0, -1].float()
    nblk = (len(tokens) + BLOCK_TOKENS - 1) // BLOCK_TOKENS
    ours = model.run([(tokens, 0, list(range(1, nblk + 1)))], graphs=False)[0]
    return float((ours - ref).abs().max() / ref.abs().max()), int(ours.argmax()) == int(ref.argmax())


if __name__ == "__main__":
    # python3 paged_model.py: this forward against transformers' own, per model.
    import sys
    for name in sys.argv[1:] or list(MODELS):
        cfg = dict(MODELS[name])
        if cfg["family"] == "llama":
            cfg["layers"] = 2  # the shape of a layer is what matters here
        toks = torch.randint(0, cfg["vocab"], (300,), generator=torch.Generator().manual_seed(3)).tolist()
        for dtype in (torch.bfloat16, torch.float32):  # fp32: what is left is not rounding
            m = PagedModel(cfg, 64, "cuda", dtype=dtype)
            rel, same = check_against_transformers(m, toks)
            print(f"{name} {str(dtype)[6:]}: largest logit difference to transformers {rel:.2e} of the largest "
                  f"logit; same next token: {same}", flush=True)
            del m
            torch.cuda.empty_cache()
