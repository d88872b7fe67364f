"""Prefix KV blocks in kvtier: chained block hashes, block packing, save/load.

This module holds everything of the end-to-end driver that does not need
transformers, so it can be tested on a CPU with torch alone
(tests/e2e/test_kv_blocks.py).

Block format (one kvtier block per 16 prompt tokens):
  payload = tensor [layers, 2 (K, V), kv_heads, block_tokens, head_dim],
  C-contiguous, in the storage dtype: bf16 (2 bytes) or float8_e4m3fn
  (1 byte, a plain cast with scale 1.0 after clamping to +-448, as vLLM's
  uncalibrated fp8 KV does). The block key is
  sha256(parent_key || token ids as little-endian int32), a chain rooted at
  sha256("kvtier-e2e/v1" || hash seed), so a key names the whole prefix.

Layer KV tensors are transformers' layout [batch=1, kv_heads, seq, head_dim].
"""
import collections
import concurrent.futures
import hashlib
import struct
import time

import numpy as np
import torch

FP8_MAX = 448.0  # largest finite float8_e4m3fn value

STORAGE_DTYPES = {"bf16": 2, "fp8_e4m3": 1}


def fp8_supported():
    return hasattr(torch, "float8_e4m3fn")


def chain_hashes(tokens, block_tokens=16, seed=0):
    """Keys (32-byte sha256 digests) of every full block of `tokens`: each
    digest covers its parent's and the block's tokens as little-endian int32."""
    raw = np.asarray(tokens, dtype="<i4").tobytes()
    step = 4 * block_tokens
    parent = hashlib.sha256(b"kvtier-e2e/v1" + struct.pack("<Q", seed)).digest()
    keys = []
    for off in range(0, len(raw) // step * step, step):
        parent = hashlib.sha256(parent + raw[off:off + step]).digest()
        keys.append(parent)
    return keys


class KvLayout:
    """Shape of one block: [layers, 2, kv_heads, block_tokens, head_dim]."""

    def __init__(self, layers, kv_heads, head_dim, block_tokens=16, storage="bf16"):
        if storage not in STORAGE_DTYPES:
            raise ValueError(f"storage dtype {storage!r} is not one of {sorted(STORAGE_DTYPES)}")
        if storage == "fp8_e4m3" and not fp8_supported():
            raise ValueError(f"torch {torch.__version__} has no float8_e4m3fn")
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.block_tokens, self.storage = block_tokens, storage
        self.elem_bytes = STORAGE_DTYPES[storage]

    @property
    def block_shape(self):
        return (self.layers, 2, self.kv_heads, self.block_tokens, self.head_dim)

    @property
    def block_elems(self):
        return self.layers * 2 * self.kv_heads * self.block_tokens * self.head_dim

    @property
    def block_bytes(self):
        return self.block_elems * self.elem_bytes

    @property
    def bytes_per_token(self):
        return self.block_bytes // self.block_tokens

    def __repr__(self):
        return (f"KvLayout(layers={self.layers}, kv_heads={self.kv_heads}, head_dim={self.head_dim}, "
                f"block_tokens={self.block_tokens}, storage={self.storage})")


def pack_blocks(layer_kv, n_blocks, block_tokens=16):
    """Per-layer (K, V) of shape [1, H, S, D] (S >= n_blocks * block_tokens)
    -> blocks [n_blocks, L, 2, H, block_tokens, D] in the KV's dtype/device."""
    t = n_blocks * block_tokens
    if n_blocks == 0:
        k0 = layer_kv[0][0]
        return k0.new_empty((0, len(layer_kv), 2, k0.shape[1], block_tokens, k0.shape[3]))
    for i, (k, v) in enumerate(layer_kv):
        if k.shape[0] != 1 or k.shape[2] < t or v.shape != k.shape:
            raise ValueError(f"layer {i}: K {tuple(k.shape)} / V {tuple(v.shape)} cannot give {t} tokens "
                             "of batch 1")
    kv = torch.stack([torch.stack((k[0, :, :t], v[0, :, :t])) for k, v in layer_kv])  # [L,2,H,t,D]
    L, _, H, _, D = kv.shape
    return kv.view(L, 2, H, n_blocks, block_tokens, D).permute(3, 0, 1, 2, 4, 5).contiguous()


def unpack_blocks(blocks):
    """blocks [n, L, 2, H, bt, D] -> per-layer (K, V) of shape [1, H, n*bt, D]."""
    n, L, two, H, bt, D = blocks.shape
    if two != 2:
        raise ValueError(f"blocks have {two} K/V planes, expected 2")
    x = blocks.permute(1, 2, 3, 0, 4, 5).reshape(L, 2, H, n * bt, D)
    return [(x[i, 0].unsqueeze(0), x[i, 1].unsqueeze(0)) for i in range(L)]


def to_storage(blocks, storage):
    """Model-dtype blocks -> (uint8 bytes view [n, block_bytes], clamped count)."""
    n = blocks.shape[0]
    if storage == "bf16":
        b = blocks if blocks.dtype == torch.bfloat16 else blocks.to(torch.bfloat16)
        return b.contiguous().view(torch.uint8).reshape(n, -1), 0
    if storage == "fp8_e4m3":
        over = int((blocks.abs() > FP8_MAX).sum().item())
        q = blocks.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return q.contiguous().view(torch.uint8).reshape(n, -1), over
    raise ValueError(f"unknown storage dtype {storage!r}")


def from_storage(raw, layout, n, model_dtype):
    """uint8 [>= n * block_bytes] (any device) -> blocks [n, L, 2, H, bt, D] in model_dtype."""
    raw = raw.reshape(-1)[:n * layout.block_bytes]
    if layout.storage == "bf16":
        x = raw.view(torch.bfloat16)
    else:
        x = raw.view(torch.float8_e4m3fn)
    x = x.reshape((n,) + layout.block_shape)
    return x if x.dtype == model_dtype else x.to(model_dtype)


def quant_roundtrip(blocks, storage):
    """What a block becomes after a trip through storage (for references)."""
    if storage == "bf16":
        return blocks.to(torch.bfloat16).to(blocks.dtype)
    return blocks.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).to(blocks.dtype)


def stats_delta(before, after):
    keys = ("hits_ram", "hits_disk", "misses", "bytes_read_ram", "bytes_read_disk", "gets")
    return {k: int(after.get(k, 0)) - int(before.get(k, 0)) for k in keys}


class BlockIO:
    """Saves and loads prefix blocks of one kvtier namespace through pinned
    host buffers. Not thread-safe: one request at a time (the driver's
    requests are sequential, so store stats deltas are per request)."""

    def __init__(self, store, ns, layout, max_blocks, device, pin, chunk_blocks=32, threads=4):
        self.store, self.ns, self.layout = store, ns, layout
        self.max_blocks, self.device = max_blocks, device
        self.chunk_blocks = max(1, chunk_blocks) if chunk_blocks else max_blocks
        nbytes = max_blocks * layout.block_bytes
        self.load_buf = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
        self.save_buf = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, threads),
                                                          thread_name_prefix="kvtier-load")

    def close(self):
        self.pool.shutdown(wait=True)

    def lookup(self, keys):
        return self.ns.lookup_prefix(keys) if keys else 0

    def _get_chunk(self, keys, first, count):
        bb = self.layout.block_bytes
        base = self.load_buf.data_ptr() + first * bb
        outs = [(base + i * bb, bb) for i in range(count)]
        return self.ns.get_batch(keys, outs)

    def load(self, keys):
        """Reads the blocks of `keys` (in order). Returns (uint8 tensor on the
        device holding the leading blocks that were read, count read, info).
        A miss or a wrong size ends the prefix there (the caller recomputes
        the rest); blocks after it are still waited for, never used."""
        n = len(keys)
        if n > self.max_blocks:
            raise ValueError(f"{n} blocks exceed the buffer of {self.max_blocks}")
        bb = self.layout.block_bytes
        dst = torch.empty(n * bb, dtype=torch.uint8, device=self.device)
        if n == 0:
            return dst, 0, {"get_s": 0.0}
        t0 = time.perf_counter()
        futs = []
        for c0 in range(0, n, self.chunk_blocks):
            c1 = min(n, c0 + self.chunk_blocks)
            futs.append((c0, c1, self.pool.submit(self._get_chunk, keys[c0:c1], c0, c1 - c0)))
        good = 0
        broken = False
        for c0, c1, f in futs:
            sizes = f.result()  # raises KvtierError on a real I/O error
            if broken:
                continue
            ok = 0
            for s in sizes:
                if s != bb:
                    break
                ok += 1
            if ok:
                # Copy what arrived while later chunks are still being read.
                dst[c0 * bb:(c0 + ok) * bb].copy_(self.load_buf[c0 * bb:(c0 + ok) * bb],
                                                  non_blocking=True)
            good = c0 + ok
            if ok < c1 - c0:
                broken = True
        get_s = time.perf_counter() - t0
        if dst.is_cuda:
            torch.cuda.current_stream().synchronize()  # the pinned buffer is reused next time
        return dst[:good * bb], good, {"get_s": get_s}

    def save(self, keys, blocks):
        """Stores model-dtype blocks (any device) under keys. Returns a dict
        with counts by outcome, clamped fp8 values and seconds taken."""
        n = len(keys)
        if n == 0:
            return {"saved": 0, "declined": 0, "failed": 0, "clamped": 0, "save_s": 0.0}
        if n > self.max_blocks:
            raise ValueError(f"{n} blocks exceed the buffer of {self.max_blocks}")
        t0 = time.perf_counter()
        raw, clamped = to_storage(blocks, self.layout.storage)
        bb = self.layout.block_bytes
        if raw.shape[1] != bb:
            raise ValueError(f"block of {raw.shape[1]} bytes, layout says {bb}")
        host = self.save_buf[:n * bb]
        host.copy_(raw.reshape(-1))  # D2H (synchronous into pinned memory)
        base = host.data_ptr()
        codes = self.ns.put_batch(keys, [(base + i * bb, bb) for i in range(n)])
        out = {"saved": 0, "declined": 0, "failed": 0, "clamped": clamped}
        for c in codes:
            name = getattr(c, "name", str(c))
            if name == "OK":
                out["saved"] += 1
            elif name == "NOT_ADMITTED":
                out["declined"] += 1
            else:
                out["failed"] += 1
                out.setdefault("first_error", name)
        out["save_s"] = time.perf_counter() - t0
        return out


class GpuPrefixCache:
    """A simulated GPU prefix cache: LRU over requests' block lists, bounded
    in tokens. match() finds the longest run of leading keys held by one
    entry (prefix blocks with equal keys hold equal KV)."""

    def __init__(self, capacity_tokens, block_tokens=16):
        self.capacity_blocks = max(0, capacity_tokens // block_tokens)
        self.entries = collections.OrderedDict()  # id -> (keys, blocks)
        self.used_blocks = 0
        self._ids = 0

    def match(self, keys):
        best, best_n = None, 0
        for eid, (ekeys, _) in self.entries.items():
            n = 0
            for a, b in zip(keys, ekeys):
                if a != b:
                    break
                n += 1
            if n > best_n:
                best, best_n = eid, n
        if best is None:
            return None, 0
        self.entries.move_to_end(best)
        return self.entries[best][1][:best_n], best_n

    def insert(self, keys, blocks):
        n = len(keys)
        if n == 0 or n > self.capacity_blocks:
            return False
        while self.used_blocks + n > self.capacity_blocks:
            _, (ek, _) = self.entries.popitem(last=False)
            self.used_blocks -= len(ek)
        self._ids += 1
        self.entries[self._ids] = (list(keys), blocks)
        self.used_blocks += n
        return True

    def clear(self):
        self.entries.clear()
        self.used_blocks = 0
