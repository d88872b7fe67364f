"""One serving process of the end-to-end run (needs CUDA, torch, transformers).

Started by prefix_reuse.py as `python3 prefix_reuse.py --worker SPEC.json`.
It builds a model with random weights from a config, then serves the
workload's requests one at a time: each request looks its prompt's block
keys up in a simulated GPU prefix cache, then in kvtier, loads what it finds
into pinned host memory and on to the GPU, rebuilds a DynamicCache and runs
the model on the remaining tokens only. Time to first token runs from the
prompt's token ids to the next-token logits on the host. Stores of new
blocks happen after that, untimed, as an engine overlaps them.

The result JSON (spec["result_path"]) is rewritten after every pass, so a
crash leaves what was measured; errors are recorded in it, never raised.
"""
import hashlib
import json
import os
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import workload as wl  # noqa: E402

BLOCK_TOKENS = 16


class Worker:
    def __init__(self, spec):
        self.spec = spec
        self.name = spec["name"]
        self.res = {"name": self.name, "arm": spec["arm"], "model": spec["model"], "rep": spec["rep"],
                    "pid": os.getpid(), "passes": [], "errors": [], "timings": {}, "phase": "start"}
        self.t_start = time.perf_counter()

    def flush(self):
        self.res["elapsed_s"] = round(time.perf_counter() - self.t_start, 3)
        wl.write_json(self.spec["result_path"], self.res)

    def error(self, where, exc):
        msg = f"{where}: {type(exc).__name__}: {exc}"
        self.res["errors"].append({"where": where, "error": msg, "trace": traceback.format_exc(limit=6)})
        wl.log(self.name, "ERROR " + msg)
        self.flush()

    # ---- setup ----------------------------------------------------------------
    def setup(self):
        t = time.perf_counter()
        import torch
        import transformers
        self.torch, self.transformers = torch, transformers
        torch.set_grad_enabled(False)  # inference only: no autograd graphs
        from transformers import DynamicCache
        self.DynamicCache = DynamicCache
        import kv_blocks
        self.kb = kv_blocks
        self.res["versions"] = {"python": sys.version.split()[0], "torch": torch.__version__,
                                "transformers": transformers.__version__,
                                "cuda": getattr(torch.version, "cuda", None)}
        self.res["timings"]["import_s"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        if self.spec.get("device", "cuda") == "cpu":
            # For tests of the driver itself; nothing measured this way means anything.
            self.dev = torch.device("cpu")
            self.res["gpu"] = "none (--device cpu)"
        else:
            if not torch.cuda.is_available():
                raise RuntimeError("torch.cuda.is_available() is False: this driver needs a GPU")
            torch.cuda.init()
            self.dev = torch.device("cuda")
            torch.zeros(1, device=self.dev)
            self.res["gpu"] = torch.cuda.get_device_name(0)
        self.res["timings"]["cuda_init_s"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        self.build_model()
        self.res["timings"]["build_s"] = round(time.perf_counter() - t, 3)
        if self.dev.type == "cuda":
            self.res["h2d"] = self.measure_h2d()
        t = time.perf_counter()
        self.warmup()
        self.res["timings"]["warmup_s"] = round(time.perf_counter() - t, 3)
        self.flush()

    def build_model(self):
        torch, transformers = self.torch, self.transformers
        m = self.spec["model_spec"]
        cfg_cls = {"qwen3": "Qwen3Config", "llama": "LlamaConfig"}[m["family"]]
        cfg = None
        tried = []
        # transformers 5 configs are strict dataclasses with rope_parameters;
        # 4.x takes rope_theta. The RoPE base does not change the cost.
        for extra in ({"rope_parameters": {"rope_type": "default", "rope_theta": m["rope_theta"]}},
                      {"rope_theta": m["rope_theta"]}, {}):
            try:
                cfg = getattr(transformers, cfg_cls)(**m["config"], **extra)
                self.res["config_variant"] = sorted(extra) or "no rope base"
                break
            except Exception as e:
                tried.append(f"{sorted(extra)}: {type(e).__name__}: {e}")
        if cfg is None:
            raise RuntimeError(f"{cfg_cls} rejected the model shape: " + " | ".join(tried))
        for k, v in m["config"].items():
            if getattr(cfg, k, None) != v:
                raise RuntimeError(f"{cfg_cls}.{k} is {getattr(cfg, k, None)!r}, expected {v!r}")
        torch.manual_seed(self.spec["seed"])
        if self.dev.type == "cuda":
            torch.cuda.manual_seed_all(self.spec["seed"])
        from transformers import AutoModelForCausalLM
        model = None
        last = None
        for kw in ({"dtype": torch.bfloat16}, {"torch_dtype": torch.bfloat16}, {}):
            try:
                if self.dev.type == "cuda":
                    with torch.device("cuda"):  # weights initialised on the GPU: fast
                        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", **kw)
                else:
                    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", **kw)
                break
            except TypeError as e:
                last = e
        if model is None:
            raise RuntimeError(f"AutoModelForCausalLM.from_config failed: {last}")
        model.eval()
        p = next(model.parameters())
        if p.dtype != torch.bfloat16 or p.device.type != self.dev.type:
            model.to(device=self.dev, dtype=torch.bfloat16)
        self.model = model
        self.model_dtype = torch.bfloat16
        c = model.config
        self.layers = c.num_hidden_layers
        self.kv_heads = c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.vocab = c.vocab_size
        h = hashlib.sha256()
        nparams = 0
        for name, prm in sorted(model.named_parameters()):
            nparams += prm.numel()
            h.update(name.encode())
            h.update(prm.detach().reshape(-1)[:4096].float().cpu().numpy().tobytes())
        self.fingerprint = h.hexdigest()[:32]
        self.res["model_info"] = {
            "config_class": cfg_cls, "layers": self.layers, "kv_heads": self.kv_heads,
            "head_dim": self.head_dim, "hidden": c.hidden_size, "heads": c.num_attention_heads,
            "vocab": self.vocab, "params": nparams,
            "attn_implementation": getattr(c, "_attn_implementation", None),
            "kv_bytes_per_token_bf16": 2 * self.layers * self.kv_heads * self.head_dim * 2,
            "weights_fingerprint": self.fingerprint}
        wl.log(self.name, f"model {self.spec['model']}: {nparams / 1e9:.2f}B params, "
                        f"attn={self.res['model_info']['attn_implementation']}, fp={self.fingerprint[:12]}")

    def measure_h2d(self, nbytes=256 << 20, reps=6):
        torch = self.torch
        try:
            src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            dst = torch.empty(nbytes, dtype=torch.uint8, device=self.dev)
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize()
            rates = []
            for _ in range(reps):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                dst.copy_(src, non_blocking=True)
                e1.record()
                e1.synchronize()
                rates.append(nbytes / (e0.elapsed_time(e1) / 1e3) / 1e9)
            del src, dst
            return {"bytes": nbytes, "gbps_best": round(max(rates), 2),
                    "gbps_median": round(wl.median(rates), 2)}
        except Exception as e:  # a measurement, not a reason to stop
            return {"error": f"{type(e).__name__}: {e}"}

    # ---- model calls ------------------------------------------------------------
    _logits_kw = "logits_to_keep"

    def forward(self, ids, cache):
        """Runs ids [1, S] on top of cache; returns last-position logits (fp32) and the cache."""
        kw = {self._logits_kw: 1} if self._logits_kw else {}
        try:
            out = self.model(input_ids=ids, past_key_values=cache, use_cache=True, **kw)
        except TypeError:
            if not self._logits_kw:
                raise
            # Older transformers: num_logits_to_keep, or nothing.
            Worker._logits_kw = "num_logits_to_keep" if self._logits_kw == "logits_to_keep" else None
            return self.forward(ids, cache)
        return out.logits[0, -1].float(), out.past_key_values

    def new_cache(self, blocks=None):
        cache = self.DynamicCache()
        if blocks is not None and blocks.shape[0]:
            for i, (k, v) in enumerate(self.kb.unpack_blocks(blocks)):
                cache.update(k, v, i)
        return cache

    @staticmethod
    def cache_layers(cache):
        if hasattr(cache, "layers"):
            return [(layer.keys, layer.values) for layer in cache.layers]
        if hasattr(cache, "key_cache"):
            return list(zip(cache.key_cache, cache.value_cache))
        return [(x[0], x[1]) for x in cache]

    def sync(self):
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize()

    def ids(self, tokens):
        return self.torch.as_tensor(tokens, dtype=self.torch.long).to(self.dev).unsqueeze(0)

    def prompt(self, doc, visit):
        s = self.spec
        return wl.prompt(s["seed"], doc, visit, s["doc_tokens"], s["doc_jitter"], s["question_tokens"],
                         self.vocab)

    def warmup(self):
        kb = self.kb
        p = self.prompt(wl.WARMUP_DOC, 0)
        for _ in range(2):
            logits, cache = self.forward(self.ids(p), self.new_cache())
            nb = (len(p) - 1) // BLOCK_TOKENS
            blocks = kb.pack_blocks(self.cache_layers(cache), nb, BLOCK_TOKENS)
            for storage in self.spec["kv_dtypes"]:
                if storage == "fp8_e4m3" and not kb.fp8_supported():
                    continue
                raw, _ = kb.to_storage(blocks, storage)
                lay = kb.KvLayout(self.layers, self.kv_heads, self.head_dim, BLOCK_TOKENS, storage)
                back = kb.from_storage(raw.reshape(-1), lay, nb, self.model_dtype)
                self.forward(self.ids(p[nb * BLOCK_TOKENS:]), self.new_cache(back))
            int(logits.argmax().item())
        self.sync()

    # ---- kvtier ------------------------------------------------------------------
    def open_store(self):
        import kvtier
        s = self.spec
        base = dict(s["store_options"])
        arm = s["arm"]
        ram = s["ram_tier_bytes"] if arm in ("ram", "ram_restart") else 0
        t = time.perf_counter()
        mode = "disk (O_DIRECT)"
        if ram:
            try:
                store = kvtier.Store(s["store_dir"], ram_tier_bytes=ram, ram_tier_shared_memory=True, **base)
                mode = "kvtier RAM tier"
            except kvtier.KvtierError as e:
                if "ram_tier" not in str(e):
                    raise
                # This libkvtier has no RAM tier option: buffered segment I/O
                # makes the OS page cache the RAM tier instead.
                self.res["ram_tier_note"] = f"store refused ram_tier_bytes ({e}); using the OS page cache"
                wl.log(self.name, self.res["ram_tier_note"])
                store = kvtier.Store(s["store_dir"], use_direct_io=False, **base)
                mode = "OS page cache (buffered I/O)"
        else:
            store = kvtier.Store(s["store_dir"], use_direct_io=True, **base)
        self.res["timings"]["store_open_s"] = round(time.perf_counter() - t, 3)
        st = store.stats()
        self.res["store_mode"] = mode
        self.res["store_open_stats"] = {k: st.get(k) for k in (
            "recovered_from_crash", "recovery_scanned_bytes", "recovery_reindexed", "open_seconds",
            "io_backend", "ram_capacity_bytes", "ram_blocks", "ram_adopted_blocks", "ram_adopt_dropped",
            "ram_shared_memory", "used_bytes", "blocks_estimate") if k in st}
        wl.log(self.name, f"store open in {self.res['timings']['store_open_s']} s, mode={mode}, "
                        f"{self.res['store_open_stats']}")
        return store

    def namespace(self, store, layout):
        s = self.spec
        return store.register_namespace(
            name=f"e2e/{s['model']}/{layout.storage}", model_id=s["model_spec"]["model_id"],
            model_revision=f"random-init-seed{s['seed']}", weights_fingerprint=self.fingerprint,
            tokenizer="random-token-ids", dtype=layout.storage, layout="L,2,Hkv,16,D",
            block_tokens=BLOCK_TOKENS, block_bytes=layout.block_bytes, hash_scheme="sha256-chain-int32",
            hash_seed=s["seed"])

    # ---- one request -----------------------------------------------------------------
    def serve(self, prompt, gpu_cache, bio, store):
        torch, kb = self.torch, self.kb
        seed = self.spec["seed"]
        self.sync()
        before = store.stats() if store is not None else None
        t0 = time.perf_counter()
        keys_full = kb.chain_hashes(prompt, BLOCK_TOKENS, seed)
        keys = keys_full[:(len(prompt) - 1) // BLOCK_TOKENS]  # at least one token is computed
        gblocks, g = gpu_cache.match(keys)
        n_kv, load_s, get_s, looked = 0, 0.0, 0.0, None
        parts = [gblocks] if g else []
        if bio is not None and g < len(keys):
            looked = bio.lookup(keys)
            if looked > g:
                tl = time.perf_counter()
                raw, n_kv, info = bio.load(keys[g:looked])
                load_s, get_s = time.perf_counter() - tl, info["get_s"]
                if n_kv:
                    parts.append(kb.from_storage(raw, bio.layout, n_kv, self.model_dtype))
        blocks = None
        if parts:
            blocks = parts[0] if len(parts) == 1 else torch.cat(parts)
        P = (g + n_kv) * BLOCK_TOKENS
        tf = time.perf_counter()
        logits, cache = self.forward(self.ids(prompt[P:]), self.new_cache(blocks))
        next_token = int(logits.argmax().item())
        t1 = time.perf_counter()
        rec = {"prompt_tokens": int(len(prompt)), "gpu_tokens": g * BLOCK_TOKENS,
               "kvtier_tokens": n_kv * BLOCK_TOKENS, "computed_tokens": int(len(prompt) - P),
               "ttft_ms": (t1 - t0) * 1e3, "load_ms": load_s * 1e3, "get_ms": get_s * 1e3,
               "forward_ms": (t1 - tf) * 1e3, "next_token": next_token, "lookup_blocks": looked}
        if store is not None:
            d = kb.stats_delta(before, store.stats())
            rec["ram_tokens"] = d["hits_ram"] * BLOCK_TOKENS
            rec["disk_tokens"] = d["hits_disk"] * BLOCK_TOKENS
            rec["bytes_loaded"] = n_kv * bio.layout.block_bytes
            rec["store_bytes_read"] = d["bytes_read_ram"] + d["bytes_read_disk"]
            rec["store_misses"] = d["misses"]
            # Tokens by source must add up to the prompt, and kvtier's own
            # counters must agree with the blocks this request used.
            rec["reconciled"] = (rec["computed_tokens"] + rec["gpu_tokens"] + rec["ram_tokens"]
                                 + rec["disk_tokens"] == rec["prompt_tokens"]
                                 and rec["bytes_loaded"] % bio.layout.bytes_per_token == 0)
        else:
            rec["ram_tokens"] = rec["disk_tokens"] = rec["bytes_loaded"] = 0
            rec["reconciled"] = rec["computed_tokens"] + rec["gpu_tokens"] == rec["prompt_tokens"]
        # After the first token: keep the prompt's full blocks on the GPU and in kvtier.
        n_full = len(keys_full)
        all_blocks = kb.pack_blocks(self.cache_layers(cache), n_full, BLOCK_TOKENS)
        gpu_cache.insert(keys_full, all_blocks)
        if bio is not None:
            have = bio.lookup(keys_full)
            rec["save"] = bio.save(keys_full[have:], all_blocks[have:])
            rec["save"]["blocks_present"] = have
        return rec

    # ---- correctness -------------------------------------------------------------------
    @staticmethod
    def compare(a, b):
        torch = sys.modules["torch"]
        d = (a - b).abs()
        ref = b.abs().max().item()
        cos = torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=0).item()
        return {"bitexact": bool(torch.equal(a, b)), "max_abs": float(d.max().item()),
                "rel_to_max": float(d.max().item() / ref) if ref else None, "cosine": cos,
                "argmax_equal": int(a.argmax()) == int(b.argmax())}

    def check(self, doc, bio, storage):
        """Logits after loading doc's prefix from kvtier versus recomputing it."""
        kb = self.kb
        seed = self.spec["seed"]
        p = self.prompt(doc, wl.CHECK_VISIT)
        keys = kb.chain_hashes(p, BLOCK_TOKENS, seed)[:(len(p) - 1) // BLOCK_TOKENS]
        n = bio.lookup(keys)
        raw, n, _ = bio.load(keys[:n])
        out = {"doc": doc, "prefix_tokens": n * BLOCK_TOKENS, "prompt_tokens": int(len(p))}
        if n == 0:
            out["error"] = "no prefix blocks found in kvtier"
            return out
        P = n * BLOCK_TOKENS
        loaded = kb.from_storage(raw, bio.layout, n, self.model_dtype)
        logits_l, _ = self.forward(self.ids(p[P:]), self.new_cache(loaded))
        # The stored blocks came from the first visit's one-pass prefill of
        # doc + question 0: recompute exactly that (same kernels and shapes).
        first = self.prompt(doc, 0)
        _, c = self.forward(self.ids(first), self.new_cache())
        ref = kb.pack_blocks(self.cache_layers(c), n, BLOCK_TOKENS)
        ref_q = kb.quant_roundtrip(ref, storage)
        out["kv_vs_first_visit_recompute"] = {
            "bitexact": bool(self.torch.equal(loaded, ref_q)),
            "max_abs": float((loaded.float() - ref_q.float()).abs().max().item())}
        logits_r, _ = self.forward(self.ids(p[P:]), self.new_cache(ref_q))
        out["logits_vs_same_kernels"] = self.compare(logits_l, logits_r)
        if storage != "bf16":
            logits_bf, _ = self.forward(self.ids(p[P:]), self.new_cache(ref))
            out["logits_vs_bf16_kv"] = self.compare(logits_l, logits_bf)
        # Prefix-only prefill then the suffix: a different GEMM shape for the prefix.
        _, c2 = self.forward(self.ids(p[:P]), self.new_cache())
        logits_p, _ = self.forward(self.ids(p[P:]), c2)
        out["logits_vs_prefix_then_suffix"] = self.compare(logits_l, logits_p)
        logits_f, _ = self.forward(self.ids(p), self.new_cache())
        out["logits_vs_one_pass_prefill"] = self.compare(logits_l, logits_f)
        return out

    # ---- a pass: all requests of one KV storage dtype ------------------------------------
    def run_pass(self, store, storage):
        kb, s = self.kb, self.spec
        res = {"kv_dtype": storage or "-", "requests": [], "checks": [], "errors": []}
        self.res["passes"].append(res)
        gpu_cache = kb.GpuPrefixCache(s["gpu_cache_tokens"], BLOCK_TOKENS)
        bio = None
        try:
            if store is not None:
                layout = kb.KvLayout(self.layers, self.kv_heads, self.head_dim, BLOCK_TOKENS, storage)
                ns = self.namespace(store, layout)
                max_tokens = s["doc_tokens"] + s["doc_jitter"] + s["question_tokens"]
                bio = kb.BlockIO(store, ns, layout, max_tokens // BLOCK_TOKENS + 1, self.dev,
                                 pin=self.dev.type == "cuda", chunk_blocks=s["load_chunk_blocks"],
                                 threads=s["load_threads"])
                res["block_bytes"] = layout.block_bytes
                res["kv_bytes_per_token"] = layout.bytes_per_token
                res["namespace"] = f"{ns.id:016x}"
            for r in range(s["rounds"]):
                for d in range(s["docs"]):
                    visit = s["first_visit"] + r
                    rec = self.serve(self.prompt(d, visit), gpu_cache, bio, store)
                    rec.update(doc=d, round=r, visit=visit, kind="first" if visit == 0 else "revisit")
                    res["requests"].append(rec)
                if store is not None:
                    store.flush()
                last = res["requests"][-1]
                wl.log(self.name, f"{storage or 'recompute'} round {r}: last TTFT {last['ttft_ms']:.1f} ms "
                                f"(computed {last['computed_tokens']}, gpu {last['gpu_tokens']}, "
                                f"ram {last['ram_tokens']}, disk {last['disk_tokens']})")
                self.flush()
            if bio is not None:
                for d in range(min(s["check_docs"], s["docs"])):
                    try:
                        res["checks"].append(self.check(d, bio, storage))
                    except Exception as e:
                        res["errors"].append(f"check doc {d}: {type(e).__name__}: {e}")
                        wl.log(self.name, "ERROR " + res["errors"][-1])
            if store is not None:
                st = store.stats()
                res["store_stats_end"] = {k: st.get(k) for k in (
                    "hits_ram", "hits_disk", "misses", "bytes_read_ram", "bytes_read_disk", "puts",
                    "put_bytes", "puts_not_admitted", "ram_blocks", "ram_used_bytes", "ram_evictions",
                    "evictions", "used_bytes", "checksum_failures") if k in st}
        except Exception as e:
            res["errors"].append(f"{type(e).__name__}: {e}")
            self.error(f"pass {storage}", e)
        finally:
            if bio is not None:
                bio.close()
            self.flush()

    def run(self):
        s = self.spec
        store = None
        try:
            self.res["phase"] = "setup"
            self.setup()
            self.res["phase"] = "serve"
            if s["arm"] == "recompute":
                with self.torch.inference_mode():
                    self.run_pass(None, None)
            else:
                store = self.open_store()
                for storage in s["kv_dtypes"]:
                    if storage == "fp8_e4m3" and not self.kb.fp8_supported():
                        self.res["errors"].append({"where": "fp8", "error": "torch has no float8_e4m3fn"})
                        continue
                    with self.torch.inference_mode():
                        self.run_pass(store, storage)
            self.res["phase"] = "done"
        except Exception as e:
            self.error(f"phase {self.res['phase']}", e)
        finally:
            self.flush()
        if s.get("die"):
            # Killed while serving: the store is not closed, its RAM tier
            # stays in shared memory for the next process to adopt.
            wl.log(self.name, "results written; killing this serving process (SIGKILL)")
            os.kill(os.getpid(), signal.SIGKILL)
        if store is not None:
            t = time.perf_counter()
            try:
                store.close()
            except Exception as e:
                self.error("store close", e)
            self.res["timings"]["store_close_s"] = round(time.perf_counter() - t, 3)
            self.flush()
        return 0 if not self.res["errors"] else 1


def main(spec_path):
    with open(spec_path) as f:
        spec = json.load(f)
    return Worker(spec).run()
