"""A stand-in for the parts of Hugging Face transformers that bench/e2e uses,
so the driver's process chain can be tested on a CPU without transformers.
The model is causal and cheap: each layer's K/V of a token depend on the
token, its position and the previous layer's output (through a running mean
of V over the cache), and the logits on every cached value."""
import torch

__version__ = "0-fake"


class _Config:
    def __init__(self, **kw):
        self.__dict__.update(kw)
        self.num_key_value_heads = kw.get("num_key_value_heads", kw.get("num_attention_heads"))
        self._attn_implementation = None


class Qwen3Config(_Config):
    pass


class LlamaConfig(_Config):
    pass


class _Layer:
    def __init__(self):
        self.keys = None
        self.values = None


class DynamicCache:
    def __init__(self, *args, **kwargs):
        self.layers = []

    def update(self, k, v, i, cache_kwargs=None):
        while len(self.layers) <= i:
            self.layers.append(_Layer())
        lay = self.layers[i]
        lay.keys = k if lay.keys is None else torch.cat([lay.keys, k], dim=-2)
        lay.values = v if lay.values is None else torch.cat([lay.values, v], dim=-2)
        return lay.keys, lay.values

    def get_seq_length(self, layer_idx=0):
        return 0 if not self.layers or self.layers[0].keys is None else self.layers[0].keys.shape[-2]


class _Out:
    def __init__(self, logits, cache):
        self.logits, self.past_key_values = logits, cache


class _FakeModel(torch.nn.Module):
    def __init__(self, cfg, dtype):
        super().__init__()
        self.config = cfg
        self.config._attn_implementation = "fake"
        h, d = cfg.num_key_value_heads, cfg.head_dim
        self.mix = torch.nn.Parameter(torch.randn(cfg.num_hidden_layers, h, d).to(dtype))

    def forward(self, input_ids, past_key_values=None, use_cache=True, logits_to_keep=0, **kw):
        cache = past_key_values if past_key_values is not None else DynamicCache()
        cfg = self.config
        start = cache.get_seq_length()
        S = input_ids.shape[1]
        pos = torch.arange(start, start + S, dtype=torch.float32)
        x = (input_ids[0].float() * 0.001 + pos * 0.01)  # [S]
        carry = torch.zeros(S)
        for i in range(cfg.num_hidden_layers):
            base = (x + carry).view(1, 1, S, 1)
            k = torch.sin(base + self.mix[i].float().unsqueeze(1)).to(self.mix.dtype)
            v = torch.cos(base * 1.3 + self.mix[i].float().unsqueeze(1)).to(self.mix.dtype)
            K, V = cache.update(k, v, i)
            # causal running mean of V over positions <= each query
            csum = V.float().mean(dim=(1, 3)).cumsum(dim=-1)[0]  # [start + S]
            carry = (csum[start:] / torch.arange(start + 1, start + S + 1)).float()
        logits = torch.zeros(cfg.vocab_size)
        flat = torch.cat([lay.values.float().mean(dim=2).reshape(-1) for lay in cache.layers])
        n = min(cfg.vocab_size, flat.numel())
        logits[:n] = flat[:n] + carry[-1]
        return _Out(logits.view(1, 1, -1).to(self.mix.dtype), cache)


class AutoModelForCausalLM:
    @staticmethod
    def from_config(cfg, attn_implementation=None, dtype=None, **kw):
        if kw:
            raise TypeError(f"unexpected {sorted(kw)}")
        return _FakeModel(cfg, dtype or torch.float32)
