#!/usr/bin/env python3
"""End-to-end prefix reuse with a serving engine's forward (docs/e2e.md).

    engine_run.py OUT_DIR [options]       # the run: spawns the serving processes
    engine_run.py --worker SPEC.json      # one serving process (internal)

The KV cache lives in preallocated GPU memory as cross-layer paged blocks
(bench/e2e/paged_model.py); the forward is captured as CUDA graphs per shape
bucket. Per model and repetition, one fresh process per phase:

  warm      a new store with the RAM tier in /dev/shm: first visits compute
            and store every document (put_from_device), then revisits
            alternate the arms: recompute / GPU path / host path; then the
            process is killed with SIGKILL
  restart   a new process on the same store: recovery adopts the RAM tier;
            the same arms
  disk      a new process with the RAM tier off: every load reads the
            segment files with O_DIRECT
  service   a store served by `kvtier serve` (started here, RAM tier in the
            service): the engine connects with "unix:", first visits store
            every document, revisits, then the engine is killed with SIGKILL
  service-restart
            a new engine process connects to the same service, whose RAM
            tier outlived the engine; the service stops after it

  recompute  prefill of the whole prompt (flash attention, as an engine's)
  gpu        lookup_prefix, get_to_device straight into the cache blocks, the
             suffix forward over them
  host       lookup_prefix, get_batch into a pinned host buffer (as vLLM's
             CPU tier holds blocks) in chunks, each copied to the GPU and
             scattered into the cache blocks while the next chunk is read,
             the suffix forward. Through the service the buffer is a memfd
             registered with it, so a RAM hit is one host copy.

TTFT runs from the prompt's tokens to the first token's id on the host.
Beside it: the load and the forward, each timed on the device (CUDA events),
and the links measured in the same process: pinned host-to-device copies,
host memcpy (best over thread counts) and O_DIRECT reads (best over thread
counts) of the store's own segment files; and, in a process of its own,
kvtier-host-bench's best host copy at the model's block size (streaming
AVX-512 stores, which Python's memmove cannot use). Correctness: for two documents per
arm and process, the logits after a load equal, bit for bit, those of the
same forward over KV computed afresh (same kernels), and the tokens by
source add up to the prompt.
"""
import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import workload as wl  # noqa: E402

# Every phase runs every arm: through the service the GPU arm's get_to_device
# copies RAM hits straight from the tier the service lends (docs/service.md).
ARMS = ("recompute", "gpu", "host")
PHASES = ("warm", "restart", "disk", "service", "service-restart")
SERVED = ("service", "service-restart")


# ==== the serving process ===============================================================
class Worker:
    def __init__(self, spec):
        import torch
        import kvtier
        import kv_blocks
        import paged_model as pm
        self.torch, self.kvtier, self.kb, self.pm = torch, kvtier, kv_blocks, pm
        torch.set_grad_enabled(False)
        self.spec = spec
        self.name = f"{spec['model']}/{spec['phase']}/rep{spec['rep']}"
        self.res = {"spec": spec, "requests": [], "checks": [], "errors": [], "links": {}, "pid": os.getpid()}
        self.cfg = pm.MODELS[spec["model"]]
        self.dev = torch.device("cuda")
        # A stream of its own, as an engine has: kvtier batches its copies on
        # it (the legacy default stream cannot batch them).
        self.stream = torch.cuda.Stream()
        torch.cuda.set_stream(self.stream)
        self.q_tokens = spec["question_tokens"]
        longest = max(spec["doc_tokens"]) + self.q_tokens + pm.BLOCK_TOKENS
        self.per_slot = (longest + pm.BLOCK_TOKENS - 1) // pm.BLOCK_TOKENS
        # Slots: 4 for a batch of requests, 1 for the checks' fresh KV.
        self.slots = spec["max_batch"] + 1
        t = time.perf_counter()
        self.model = pm.PagedModel(self.cfg, 1 + self.slots * self.per_slot, "cuda", seed=spec["seed"])
        self.res["build_s"] = round(time.perf_counter() - t, 2)
        self.bb = self.model.block_bytes
        host_blocks = max(max(self.batches(n)) * ((n + self.q_tokens + 15) // 16) for n in spec["doc_tokens"])
        self.served = spec["phase"] in SERVED
        self.host_chunk_bytes = int(spec.get("host_chunk_mib", 112)) << 20
        self.pinned, self.pinned_fd = self.host_buffer(host_blocks * self.bb)
        self.res["machine"] = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                               "cuda": torch.version.cuda, "python": platform.python_version(),
                               "cpus": os.cpu_count(), "kernel": platform.release()}

    def flush(self):
        wl.write_json(self.spec["result_path"], self.res)

    def slot_table(self, slot, n_blocks):
        first = 1 + slot * self.per_slot
        return list(range(first, first + n_blocks))

    def host_buffer(self, nbytes):
        """The host arm's pinned buffer. Through the service: a memfd mapping,
        pinned with cudaHostRegister, that the service can map too
        (Store.register_memory), as an engine's CPU tier in /dev/shm would
        be; else torch's pinned memory."""
        torch = self.torch
        if not self.served:
            return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True), None
        import mmap
        fd = os.memfd_create("kvtier-e2e-host", os.MFD_CLOEXEC)
        os.ftruncate(fd, nbytes)
        self._host_map = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        buf = torch.frombuffer(self._host_map, dtype=torch.uint8)
        buf.fill_(0)  # fault the pages in before pinning them
        rc = torch.cuda.cudart().cudaHostRegister(buf.data_ptr(), nbytes, 0)
        if int(rc) != 0:
            raise RuntimeError(f"cudaHostRegister of the host buffer failed: {rc}")
        return buf, fd

    # ---- links -------------------------------------------------------------------------
    def measure_links(self):
        torch = self.torch
        n = 256 << 20
        src = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        dst = torch.empty(n, dtype=torch.uint8, device=self.dev)
        rates = []
        for _ in range(8):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            dst.copy_(src, non_blocking=True)
            e1.record()
            e1.synchronize()
            rates.append(n / (e0.elapsed_time(e1) / 1e3) / 1e9)
        self.res["links"]["h2d_pinned_gbps"] = round(max(rates), 2)
        # Host memcpy into pinned memory (what the host arm's get_batch
        # fills), the best over thread counts and ways of dealing it out.
        import host_probe
        a = torch.full((1 << 30,), 1, dtype=torch.uint8)
        b = torch.full((1 << 30,), 2, dtype=torch.uint8, pin_memory=True)
        best = host_probe.memcpy_best(b.data_ptr(), a.data_ptr(), a.numel())
        self.res["links"]["host_memcpy_best_gbps"] = best["gbps"]
        self.res["links"]["host_memcpy_best_threads"] = best["threads"]
        self.res["links"]["host_memcpy_best_how"] = best["how"]
        del a, b, src, dst

    # ---- the store -----------------------------------------------------------------------
    def open_store(self):
        s = self.spec
        ram = s["ram_tier_bytes"] if s["phase"] in ("warm", "restart") else 0
        t = time.perf_counter()
        if self.served:
            store = self.kvtier.Store("unix:" + s["socket"], client={"client_name": self.name})
        else:
            extra = {}
            if s.get("ram_streaming_min_kib") is not None and s["ram_streaming_min_kib"] >= 0:
                extra["ram_streaming_copy_min_bytes"] = s["ram_streaming_min_kib"] << 10
            if s.get("ram_copy_threads"):
                extra["ram_copy_threads"] = s["ram_copy_threads"]
            store = self.kvtier.Store(s["store_dir"], ram_tier_bytes=ram, ram_tier_shared_memory=True,
                                      capacity_bytes=s["capacity_bytes"], read_threads=8, queue_depth=32, **extra)
        self.res["store_open_s"] = round(time.perf_counter() - t, 3)
        st = store.stats()
        self.res["store_open_stats"] = {k: st.get(k) for k in (
            "recovered_from_crash", "ram_capacity_bytes", "ram_blocks", "ram_adopted_blocks", "ram_shared_memory",
            "used_bytes") if k in st}
        if self.served:
            store.register_memory((self.pinned.data_ptr(), self.pinned.numel()), self.pinned_fd)
        else:
            why = store.gpu_status()
            if why is not None:
                raise RuntimeError("the GPU path cannot run: " + why)
            store.gpu_set_copy_method(s.get("copy_method", "auto"))
        self.store = store
        self.ns = store.register_namespace(
            name=f"e2e-engine/{s['model']}", model_id=self.cfg["model_id"], weights_fingerprint=f"seed{s['seed']}",
            tokenizer="random-token-ids", dtype="bf16", layout="cross-layer [layers,2,16,kv_heads,head_dim]",
            block_tokens=self.pm.BLOCK_TOKENS, block_bytes=self.bb, hash_scheme="sha256-chain-int32",
            hash_seed=s["seed"])
        wl.log(self.name, f"store open in {self.res['store_open_s']} s: {self.res['store_open_stats']}")

    # ---- requests --------------------------------------------------------------------------
    def prompt(self, length, doc, visit):
        s = self.spec
        return wl.prompt(s["seed"], doc + 1000 * length, visit, length, 0, self.q_tokens,
                         self.cfg["vocab"]).tolist()

    def keys(self, prompt):
        n = (len(prompt) - 1) // self.pm.BLOCK_TOKENS  # the last token is always computed
        return self.kb.chain_hashes(prompt[:n * self.pm.BLOCK_TOKENS], self.pm.BLOCK_TOKENS, self.spec["seed"])

    def first_visit(self, length, doc):
        p = self.prompt(length, doc, 0)
        nblk = (len(p) + 15) // 16
        table = self.slot_table(0, nblk)
        self.model.run([(p, 0, table)])
        keys = self.keys(p)
        if self.served:
            codes = self.put_through_host(keys, table[:len(keys)])
        else:
            codes = self.ns.put_from_device(keys, [self.model.block_fragment(b) for b in table[:len(keys)]],
                                            stream=self.stream)
        bad = [c for c in codes if c != self.kvtier.Code.OK]
        if bad:
            raise RuntimeError(f"first visit: {len(bad)} blocks not stored ({bad[0]})")

    def put_through_host(self, keys, blocks):
        """Stores blocks from the cache through the registered host buffer,
        in chunks (a service caps each client's bytes in flight)."""
        torch = self.torch
        cache, base, codes = self.model.cache, self.pinned.data_ptr(), []
        per = max(1, (256 << 20) // self.bb)
        for lo in range(0, len(keys), per):
            hi = min(len(keys), lo + per)
            ids = torch.as_tensor(blocks[lo:hi], device=self.dev)
            self.pinned[:(hi - lo) * self.bb].copy_(cache.index_select(0, ids).view(torch.uint8).view(-1))
            torch.cuda.synchronize()
            codes += self.ns.put_batch(keys[lo:hi], [(base + j * self.bb, self.bb) for j in range(hi - lo)])
        return codes

    def host_load(self, keys, block_ids):
        """The host arm's load: get_batch into the pinned buffer in chunks of
        host_chunk_bytes; each chunk's copy to the GPU and scatter into its
        cache blocks is queued on the stream as soon as it has landed, so it
        runs while the next chunk is read. Returns (sizes, seconds in
        get_batch, chunks)."""
        torch = self.torch
        cache, base, n = self.model.cache, self.pinned.data_ptr(), len(keys)
        # Chunks of nearly equal size, at most host_chunk_bytes each: the copy
        # to the GPU of the last chunk is what the load does not overlap, so a
        # short tail after one large chunk would leave most of it exposed.
        most = max(1, self.host_chunk_bytes // self.bb) if self.host_chunk_bytes else max(1, n)
        per = -(-n // -(-n // most)) if n else 1
        # Pinned, so that its copy does not wait for the stream.
        ids = torch.tensor(block_ids, dtype=torch.long).pin_memory().to(self.dev, non_blocking=True)
        got, t_get, chunks = [], 0.0, 0
        for lo in range(0, n, per):
            hi = min(n, lo + per)
            t = time.perf_counter()
            got += self.ns.get_batch(keys[lo:hi], [(base + j * self.bb, self.bb) for j in range(lo, hi)])
            t_get += time.perf_counter() - t
            staged = self.pinned[lo * self.bb:hi * self.bb].to(self.dev, non_blocking=True)
            cache.index_copy_(0, ids[lo:hi], staged.view(cache.dtype).view(-1, *cache.shape[1:]))
            chunks += 1
        return got, t_get, chunks

    def request(self, arm, prompts):
        """Serves `prompts` together (one step); returns the record."""
        torch, pm = self.torch, self.pm
        self.torch.cuda.synchronize()
        e = [torch.cuda.Event(enable_timing=True) for _ in range(4)]  # start, load start, load end, end
        t0 = time.perf_counter()
        e[0].record()
        tables, hits, seqs = [], [], []
        for i, p in enumerate(prompts):
            tables.append(self.slot_table(i, (len(p) + 15) // 16))
        load_call = get_s = 0.0
        chunks = 0
        if arm == "recompute":
            hits = [0] * len(prompts)
        else:
            all_keys, frags = [], []
            for i, p in enumerate(prompts):
                keys = self.keys(p)
                n = self.ns.lookup_prefix(keys)
                hits.append(n)
                all_keys += keys[:n]
                frags += [self.model.block_fragment(b) for b in tables[i][:n]]
            tl = time.perf_counter()
            e[1].record()
            if arm == "gpu":
                got = self.ns.get_to_device(all_keys, frags, stream=self.stream)
            else:
                got, get_s, chunks = self.host_load(
                    all_keys, [b for i in range(len(prompts)) for b in tables[i][:hits[i]]])
            load_call = time.perf_counter() - tl
            if any(g != self.bb for g in got):
                raise RuntimeError(f"{arm}: a load returned {sorted(set(map(str, got)))[:3]} (want {self.bb} each)")
        if arm == "recompute":
            tl = time.perf_counter()
            e[1].record()
        e[2].record()
        for i, p in enumerate(prompts):
            start = hits[i] * pm.BLOCK_TOKENS
            seqs.append((p[start:], start, tables[i]))
        logits = self.model.run(seqs)
        first = logits.argmax(-1).tolist()  # on the host: the first token
        t1 = time.perf_counter()
        e[3].record()
        e[3].synchronize()
        logits = logits.clone()  # the graph's output buffer is reused by the next step
        rec = {"arm": arm, "batch": len(prompts), "tokens": [len(p) for p in prompts],
               "loaded_tokens": [h * pm.BLOCK_TOKENS for h in hits],
               "computed_tokens": [len(p) - h * pm.BLOCK_TOKENS for h in hits],
               "ttft_ms": round((t1 - t0) * 1e3, 3), "lookup_ms": round((tl - t0) * 1e3, 3),
               "load_ms": round(e[1].elapsed_time(e[2]), 3), "load_call_ms": round(load_call * 1e3, 3),
               "get_batch_ms": round(get_s * 1e3, 3), "host_chunks": chunks,
               "forward_ms": round(e[2].elapsed_time(e[3]), 3),
               "loaded_bytes": sum(hits) * self.bb, "first_token": first}
        return rec, logits

    def check(self, arm, length, doc, prompt, loaded_tokens, logits):
        """The KV computed afresh, by the same step that made the stored
        blocks (the first visit's prefill, into other blocks), then the same
        suffix step as the request: the logits must be bit for bit the
        request's. And the whole prompt recomputed (other kernels: close)."""
        first = self.prompt(length, doc, 0)
        table = self.slot_table(self.slots - 1, (max(len(first), len(prompt)) + 15) // 16)
        self.model.run([(first, 0, table[:(len(first) + 15) // 16])])
        tb = table[:(len(prompt) + 15) // 16]
        want = self.model.run([(prompt[loaded_tokens:], loaded_tokens, tb)])[0].clone()
        full = self.model.run([(prompt, 0, tb)])[0]
        got = logits[0]
        scale = full.abs().max()
        rel = float((got - full).abs().max() / scale)
        top2 = full.topk(2).values
        self.res["checks"].append({"arm": arm, "tokens": len(prompt), "bit_exact": bool(self.torch.equal(got, want)),
                                   "vs_full_prefill_rel_diff": rel,
                                   "full_prefill_top2_gap_rel": float((top2[0] - top2[1]) / scale),
                                   "same_token_as_full_prefill": int(got.argmax()) == int(full.argmax())})

    # ---- the phase ----------------------------------------------------------------------------
    def warm_up(self):
        """Captures every graph bucket the timed requests use (untimed)."""
        s = self.spec
        for length in s["doc_tokens"]:
            p = self.prompt(length, -1, 0)
            for b in self.batches(length):
                prompts = [p] * b
                self.request("recompute", prompts)
                seqs = []
                for i in range(b):
                    n = len(self.keys(p))
                    seqs.append((p[n * 16:], n * 16, self.slot_table(i, (len(p) + 15) // 16)))
                self.model.run(seqs)
        self.torch.cuda.synchronize()

    def probe_host_path(self):
        """get_batch of one document's blocks, untimed by the table: into the
        pinned buffer the host arm uses and into fresh pageable memory, with
        the GPU idle, so that the host arm's rate can be told apart from its
        destination and from what runs beside it (docs/e2e.md)."""
        import numpy as np
        length = self.spec["doc_tokens"][0]
        keys = self.keys(self.prompt(length, 0, 1))
        n = self.ns.lookup_prefix(keys)
        keys = keys[:n]
        page = np.ones(n * self.bb, dtype=np.uint8)
        out = {}
        self.torch.cuda.synchronize()
        for name, base in (("pinned", self.pinned.data_ptr()), ("pageable", page.ctypes.data)):
            best = None
            for _ in range(5):
                t = time.perf_counter()
                got = self.ns.get_batch(keys, [(base + j * self.bb, self.bb) for j in range(n)])
                dt = time.perf_counter() - t
                if any(g != self.bb for g in got):
                    raise RuntimeError(f"probe: get_batch returned {sorted(set(map(str, got)))[:3]}")
                best = dt if best is None else min(best, dt)
            out[name + "_gbps"] = round(n * self.bb / best / 1e9, 2)
        out["blocks"] = n
        self.res["host_path_probe"] = out
        wl.log(self.name, f"host path probe: {out}")

    def batches(self, length):
        s = self.spec
        return [1] + ([s["max_batch"]] if length <= s["batch_max_doc_tokens"] else [])

    def run(self):
        s = self.spec
        self.measure_links()
        self.open_store()
        t = time.perf_counter()
        self.warm_up()
        self.res["warmup_s"] = round(time.perf_counter() - t, 2)
        self.res["graphs"] = len(self.model.graphs)
        if s["phase"] in ("warm", "service"):
            t = time.perf_counter()
            for length in s["doc_tokens"]:
                for d in range(s["docs"][str(length)]):
                    self.first_visit(length, d)
            self.store.flush()
            self.res["first_visits_s"] = round(time.perf_counter() - t, 2)
        arms = list(ARMS)
        arms = arms if s["rep"] % 2 == 0 else list(reversed(arms))
        for rnd in range(1, s["rounds"] + 1):
            for length in s["doc_tokens"]:
                ndocs = s["docs"][str(length)]
                for b in self.batches(length):
                    groups = [[d] for d in range(ndocs)] if b == 1 else [list(range(b))]
                    for g in groups:
                        prompts = [self.prompt(length, d % ndocs, rnd) for d in g]
                        for arm in arms:
                            g0 = self.store.gpu_stats()
                            rec, logits = self.request(arm, prompts)
                            if g0 is not None:
                                g1 = self.store.gpu_stats()
                                # How the load was copied (outside the timed span).
                                rec["gpu_path"] = {k: g1[k] - g0[k] for k in (
                                    "ram_hits", "disk_reads", "copies", "batch_calls", "loop_calls",
                                    "kernel_calls")}
                                if arm == "gpu" and rec["gpu_path"]["ram_hits"] > 0 and "last_get_call_ms" in g1:
                                    # The load's split: host queuing, the copies on the device
                                    # from the call's start, the check's tail after them.
                                    rec["gpu_load_split"] = {k[len("last_get_"):]: g1[k] for k in (
                                        "last_get_call_ms", "last_get_enqueue_ms", "last_get_copy_ms",
                                        "last_get_hash_tail_ms")}
                                    # The Python package's share around the library's call.
                                    py = getattr(self.kvtier._device, "last_get_times", None)
                                    if py:
                                        rec["gpu_load_split"].update(
                                            {k[:-2] + "_ms": round(v * 1e3, 4) for k, v in py.items()})
                            rec.update(round=rnd, doc_tokens=length, docs=g)
                            self.res["requests"].append(rec)
                            if arm != "recompute" and b == 1 and rnd == 1 and g[0] < s["check_docs"]:
                                self.check(arm, length, g[0], prompts[0], rec["loaded_tokens"][0], logits)
                        arms = arms[1:] + arms[:1]  # rotate the order between requests
            wl.log(self.name, f"round {rnd} done ({len(self.res['requests'])} requests)")
            self.flush()
        if s["phase"] != "disk":
            self.probe_host_path()
        self.res["store_stats"] = self.store.stats()
        self.res["done"] = True
        self.flush()


def worker_main(spec_path):
    with open(spec_path) as f:
        spec = json.load(f)
    w = None
    try:
        w = Worker(spec)
        w.run()
    except Exception as e:
        res = w.res if w is not None else {"spec": spec, "errors": []}
        res.setdefault("errors", []).append(f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}")
        wl.write_json(spec["result_path"], res)
        print(traceback.format_exc(), flush=True)
        return 1
    if spec["phase"] in ("warm", "service"):
        os.kill(os.getpid(), signal.SIGKILL)  # the crash: no close, no flush
    w.store.close()
    return 0


# ==== the orchestrator =====================================================================
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--models", default="qwen3-0.6b,llama70b-shape")
    p.add_argument("--doc-tokens", default="2750,16384", help="document lengths (each its own row)")
    p.add_argument("--docs", default="4,2", help="documents per length")
    p.add_argument("--question-tokens", type=int, default=24)
    p.add_argument("--rounds", type=int, default=2, help="revisit rounds per process")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--max-batch", type=int, default=4, help="requests served together")
    p.add_argument("--batch-max-doc-tokens", type=int, default=4096,
                   help="batched revisits for documents up to this length")
    p.add_argument("--check-docs", type=int, default=2)
    p.add_argument("--ram-tier-gib", type=float, default=24.0)
    p.add_argument("--capacity-gib", type=float, default=40.0)
    p.add_argument("--store-root", default=os.path.join(REPO, "build-e2e-engine"))
    p.add_argument("--phases", default=",".join(PHASES))
    p.add_argument("--copy-method", default="auto", choices=["auto", "batch", "loop", "kernel"],
                   help="how the GPU path copies (Store.gpu_set_copy_method)")
    p.add_argument("--host-chunk-mib", type=int, default=112,
                   help="the host arm's largest get_batch chunk (a load is split into equal chunks no larger), "
                        "each copied to the GPU while the next is read "
                        "(0: one get_batch, then one copy)")
    p.add_argument("--ram-streaming-min-kib", type=int, default=1024,
                   help="RAM-tier copies of at least this many KiB use streaming stores, in the store and the "
                        "service; the host arm's buffer is read next by the GPU, not the CPU, so its chunks "
                        "stream (-1: the library's default, half the last-level cache)")
    p.add_argument("--ram-copy-threads", type=int, default=0,
                   help="the embedded store's RAM-tier copy threads, the caller's included (0: the library's "
                        "default, one per core)")
    p.add_argument("--kvtier-bin", default=os.environ.get("KVTIER_BIN", os.path.join(REPO, ".gpu", "bin", "kvtier")),
                   help="the kvtier command, for the service phases")
    p.add_argument("--host-bench", default=os.path.join(REPO, ".gpu", "bin", "kvtier-host-bench"),
                   help="kvtier-host-bench, for the best host copy at each model's block size (skipped when absent)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--worker-timeout-s", type=float, default=420)
    return p.parse_args(argv)


def remove_store(store_dir):
    """The store and its RAM tier: a 24 GiB /dev/shm file outlives a folder
    removed by hand."""
    if os.path.exists(os.path.join(store_dir, "SUPERBLOCK")):
        import kvtier
        try:
            kvtier.destroy_store(store_dir)
        except kvtier.KvtierError as e:
            wl.log("e2e", f"could not destroy {store_dir}: {e}")
    shutil.rmtree(store_dir, ignore_errors=True)


# Reader threads the disk limit sweeps, each one read in flight: from one up,
# since a virtio disk can read fastest with one read at a time (kvtier_gpu_bench's
# sweep found its best at QD 1 on the H200's machine).
DISK_LIMIT_THREADS = (1, 2, 4, 8, 16, 32)


def odirect_rate(store_dir):
    """The best O_DIRECT read rate of the store's segment files over DISK_LIMIT_THREADS."""
    import prefix_reuse
    seg = os.path.join(store_dir, "segments")
    paths = sorted(os.path.join(seg, f) for f in os.listdir(seg) if f.endswith(".kvs")) if os.path.isdir(seg) else []
    best = (0.0, 0)
    rates = {}
    for threads in DISK_LIMIT_THREADS:
        g, n, _ = prefix_reuse.odirect_read(paths, 4 << 30, threads=threads)
        rates[threads] = round(g or 0.0, 2)
        if g and g > best[0]:
            best = (g, threads)
    return {"gbps": round(best[0], 2), "threads": best[1], "files": len(paths), "by_threads": rates}


def host_copy_limit(bench, block_bytes, batch_bytes, out):
    """The best host copy for this block size (kvtier-host-bench's sweep of
    copy kernels and threads), and its own get_batch, in a process of its
    own: Python's memmove cannot use the streaming AVX-512 stores that win
    past the cache, so the in-process limit alone sits too low."""
    if not os.path.exists(bench):
        return {"skipped": f"{bench} is missing (tools/gpu_pack.sh packs it)"}
    cmd = [bench, "--dir", "/dev/shm/kvtier-e2e-host-bench", "--block-kib", str(block_bytes >> 10),
           "--batch-mib", str(max(64, batch_bytes >> 20)), "--working-set-mib", "4096", "--seconds", "1",
           "--shared-memory", "--json"]
    with open(out, "w") as log:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True, timeout=600)
    try:
        row = json.loads(p.stdout)["rows"][0]
    except (ValueError, KeyError, IndexError):
        return {"error": f"rc={p.returncode}; see {out}", "cmd": " ".join(cmd)}
    return {"cmd": " ".join(cmd), **row}


class Service:
    """`kvtier serve` over one store for the service phases; stopped with
    SIGTERM (a clean close) after the last of them."""

    def __init__(self, program, store_dir, a, log_path):
        self.socket = f"/tmp/kvtier-e2e-{os.getpid()}.sock"
        cmd = [program, "serve", store_dir, "--socket", self.socket, "--ram-tier", f"{int(a.ram_tier_gib)}G",
               "--capacity", f"{int(a.capacity_gib)}G", "--metrics-listen", "off", "--client-inflight", "1G"]
        if a.ram_streaming_min_kib is not None and a.ram_streaming_min_kib >= 0:
            cmd += ["--ram-streaming-min", f"{a.ram_streaming_min_kib}K"]
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"kvtier serve did not listen (rc {self.proc.poll()}; see {log_path})")
            time.sleep(0.05)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "killed after 120 s"
        self.log.close()
        return rc


def main(argv):
    a = parse_args(argv)
    out = os.path.abspath(a.out)
    os.makedirs(os.path.join(out, "workers"), exist_ok=True)
    lengths = [int(x) for x in a.doc_tokens.split(",")]
    docs = [int(x) for x in a.docs.split(",")]
    docs = dict(zip(map(str, lengths), docs + [docs[-1]] * (len(lengths) - len(docs))))
    results = {"args": vars(a), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "workers": [],
               "disk": {}}
    os.makedirs(a.store_root, exist_ok=True)
    phases = a.phases.split(",")
    if any(p in SERVED for p in phases) and not os.path.exists(a.kvtier_bin):
        wl.log("e2e", f"no kvtier command at {a.kvtier_bin}: skipping the service phases")
        phases = [p for p in phases if p not in SERVED]
    results["host_bench"] = {}
    import paged_model
    for model in a.models.split(","):
        cfg = paged_model.MODELS[model]
        bb = paged_model.kv_bytes_per_token(cfg) * paged_model.BLOCK_TOKENS
        batch = (lengths[0] + paged_model.BLOCK_TOKENS - 1) // paged_model.BLOCK_TOKENS * bb
        results["host_bench"][model] = host_copy_limit(a.host_bench, bb, batch,
                                                       os.path.join(out, "workers", f"{model}-host-bench.log"))
        wl.log("e2e", f"{model}: host copy limit {results['host_bench'][model]}")
        for rep in range(a.reps):
            store_dir = os.path.join(a.store_root, f"{model}-rep{rep}")
            remove_store(store_dir)
            service = None
            for phase in phases:
                if phase == "disk":
                    results["disk"][f"{model}/rep{rep}"] = odirect_rate(store_dir)
                if phase in SERVED and service is None:
                    remove_store(store_dir)
                    service = Service(a.kvtier_bin, store_dir, a,
                                      os.path.join(out, "workers", f"{model}-rep{rep}-serve.log"))
                name = f"{model}-rep{rep}-{phase}"
                spec = dict(model=model, rep=rep, phase=phase, store_dir=store_dir, seed=a.seed,
                            doc_tokens=lengths, docs=docs, question_tokens=a.question_tokens, rounds=a.rounds,
                            max_batch=a.max_batch, batch_max_doc_tokens=a.batch_max_doc_tokens,
                            check_docs=a.check_docs, ram_tier_bytes=int(a.ram_tier_gib * (1 << 30)),
                            copy_method=a.copy_method, host_chunk_mib=a.host_chunk_mib,
                            ram_streaming_min_kib=a.ram_streaming_min_kib, ram_copy_threads=a.ram_copy_threads,
                            socket=service.socket if service else None,
                            capacity_bytes=int(a.capacity_gib * (1 << 30)),
                            result_path=os.path.join(out, "workers", name + ".json"))
                spec_path = os.path.join(out, "workers", name + ".spec.json")
                wl.write_json(spec_path, spec)
                t = time.perf_counter()
                with open(os.path.join(out, "workers", name + ".log"), "w") as logf:
                    try:
                        rc = subprocess.run([sys.executable, __file__, "--worker", spec_path], stdout=logf,
                                            stderr=subprocess.STDOUT, timeout=a.worker_timeout_s).returncode
                    except subprocess.TimeoutExpired:
                        rc = "timeout"
                res = json.load(open(spec["result_path"])) if os.path.exists(spec["result_path"]) else {}
                res["rc"], res["wall_s"] = rc, round(time.perf_counter() - t, 1)
                results["workers"].append(res)
                wl.log("e2e", f"{name}: rc={rc} in {res['wall_s']} s, {len(res.get('requests', []))} requests, "
                            f"errors: {[e.splitlines()[0] for e in res.get('errors', [])]}")
                wl.write_json(os.path.join(out, "results.json"), results)
                write_report(out, results)  # a run cut short still reports what finished
            if service is not None:
                results.setdefault("service_rc", {})[f"{model}/rep{rep}"] = service.stop()
            remove_store(store_dir)
    write_report(out, results)
    print(open(os.path.join(out, "results.md")).read())
    return 0


def write_report(out, results):
    """results.md from the phases run so far."""
    import engine_report
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(engine_report.markdown(results))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        sys.exit(worker_main(sys.argv[2]))
    sys.exit(main(sys.argv[1:]))
