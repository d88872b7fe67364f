#!/usr/bin/env python3
"""End-to-end prefix reuse through kvtier with a real transformer (docs/e2e.md).

    prefix_reuse.py OUT_DIR [options]        # the run: spawns worker processes
    prefix_reuse.py --worker SPEC.json       # one serving process (internal)

For each model and repetition it runs a chain of fresh processes, in
alternating order: (a) recompute, and the kvtier chain (b) RAM tier ->
killed with SIGKILL -> (c) restart with the RAM tier adopted from shared
memory -> (d) restart with the RAM tier off, reading the disk with O_DIRECT.
Each kvtier process serves every KV storage dtype (bf16, fp8_e4m3) in turn.
Writes OUT_DIR/results.json and OUT_DIR/results.md after every process
(partial results survive a failure), OUT_DIR/log.txt, and each worker's
output under OUT_DIR/workers/.

The orchestrator itself needs no torch: it loads kvtier only to probe the
RAM tier option, and times O_DIRECT reads of the store's segment files.
"""
import argparse
import ctypes
import datetime
import glob
import json
import mmap
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import report  # noqa: E402
import workload as wl  # noqa: E402

# Config fields every transformers version since 4.45 accepts; the RoPE base
# is passed in whichever form the installed version takes (worker.py).
MODELS = {
    "qwen3-0.6b": {
        "family": "qwen3", "model_id": "Qwen/Qwen3-0.6B (shape, random weights)", "rope_theta": 1000000.0,
        "config": dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       max_position_embeddings=40960, rms_norm_eps=1e-6, tie_word_embeddings=True)},
    "llama70b-shape": {
        "family": "llama", "model_id": "meta-llama/Llama-3.1-70B (layer shape, reduced depth, random weights)",
        "rope_theta": 500000.0,
        "config": dict(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_hidden_layers=8,
                       num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                       max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False)},
}

ARMS = ("recompute", "ram", "ram_restart", "disk_restart")
# First guesses of a worker's wall time (s), replaced by measurements.
DEFAULT_EST = {"recompute": 45, "ram": 70, "ram_restart": 50, "disk_restart": 55}


class Log:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def __call__(self, msg):
        line = f"[e2e {time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        self.f.write(line + "\n")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="output folder (results.json, results.md, log.txt, workers/)")
    p.add_argument("--models", default="qwen3-0.6b,llama70b-shape",
                   help=f"comma list of {sorted(MODELS)}")
    p.add_argument("--llama-layers", type=int, default=8, help="layers of the Llama-70B-shaped model")
    p.add_argument("--kv-dtypes", default="bf16,fp8_e4m3", help="KV storage dtypes: bf16, fp8_e4m3")
    p.add_argument("--reps", type=int, default=2, help="repetitions; odd ones run the recompute arm last")
    p.add_argument("--arms", default=",".join(ARMS), help=f"subset of {ARMS}")
    p.add_argument("--docs", type=int, default=6)
    p.add_argument("--doc-tokens", type=int, default=2750)
    p.add_argument("--doc-jitter", type=int, default=50, help="document length +- this many tokens")
    p.add_argument("--question-tokens", type=int, default=24)
    p.add_argument("--rounds", type=int, default=3, help="rounds in (a) and (b); round 0 = first visits")
    p.add_argument("--restart-rounds", type=int, default=2, help="rounds in (c) and (d)")
    p.add_argument("--gpu-cache-tokens", type=int, default=9362,
                   help="simulated GPU prefix cache (9362 = 1 GiB of Qwen3-0.6B bf16 KV)")
    p.add_argument("--check-docs", type=int, default=2, help="documents whose logits are checked per pass")
    p.add_argument("--ram-tier-gib", type=float, default=8.0)
    p.add_argument("--store-capacity-gib", type=float, default=24.0)
    p.add_argument("--store-root", default=os.path.join(REPO, "build-e2e-run"),
                   help="folder for the stores (must be on the disk under test, not tmpfs)")
    p.add_argument("--load-chunk-blocks", type=int, default=32, help="blocks per get_batch (0: one batch)")
    p.add_argument("--load-threads", type=int, default=4, help="get_batch calls in flight")
    p.add_argument("--read-threads", type=int, default=8, help="kvtier read_threads")
    p.add_argument("--queue-depth", type=int, default=32, help="kvtier queue_depth")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--budget-s", type=float, default=430,
                   help="stop starting workers when they would end after this many seconds")
    p.add_argument("--worker-timeout-s", type=float, default=240)
    p.add_argument("--disk-read-gib", type=float, default=1.0, help="bytes read for the O_DIRECT figure")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu only tests the driver (tests/e2e); its timings mean nothing")
    p.add_argument("--keep-stores", action="store_true", help="leave the store folders in place")
    return p.parse_args(argv)


# ---- machine facts ------------------------------------------------------------------
def fs_type(path):
    path = os.path.realpath(path)
    best, fstype = "", "?"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and (path == parts[1] or path.startswith(parts[1].rstrip("/") + "/")):
                    if len(parts[1]) > len(best):
                        best, fstype = parts[1], parts[2]
    except OSError:
        pass
    return f"{fstype} on {best or '?'}"


def shm_free_bytes():
    try:
        v = os.statvfs("/dev/shm")
        return v.f_bavail * v.f_frsize
    except OSError:
        return 0


def run_cmd(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:
        return f"({cmd[0]}: {e})"


def probe_ram_tier(root, log):
    """Whether this libkvtier accepts ram_tier_bytes (a tiny store, no shared memory)."""
    try:
        import kvtier
    except Exception as e:
        return f"kvtier does not load: {e}"
    d = os.path.join(root, "probe")
    shutil.rmtree(d, ignore_errors=True)
    try:
        s = kvtier.Store(d, ram_tier_bytes=64 << 20, ram_tier_shared_memory=False,
                         segment_size_bytes=1 << 20, capacity_bytes=8 << 20)
        st = s.stats()
        s.close()
        return "supported" + ("" if "ram_capacity_bytes" in st else " (stats lack ram_* fields)")
    except Exception as e:
        return f"not supported ({e}): the RAM arms use the OS page cache"
    finally:
        shutil.rmtree(d, ignore_errors=True)


def written_bytes(path):
    """The bytes up to the file's first hole. kvtier preallocates its segment
    files, and reads of extents never written return zeros without touching
    the disk: counting them would put the disk's limit too high."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_HOLE)
    except OSError:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


class HugeBuffer:
    """`n` bytes of anonymous memory at a 2 MiB boundary, asked for huge pages
    (as kvtier's staging is): an O_DIRECT read into 4 KiB pages pins every
    one of them, which on a VM can cost more than the disk, and the limit
    would then be the pinning's. `view` is the buffer; close() frees it."""

    def __init__(self, n):
        huge = 2 << 20
        self._map = mmap.mmap(-1, n + huge)
        if hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                self._map.madvise(mmap.MADV_HUGEPAGE)
            except OSError:
                pass  # a hint: 4 KiB pages still read correctly
        anchor = ctypes.c_char.from_buffer(self._map)
        start = (-ctypes.addressof(anchor)) % huge
        del anchor  # releases its export of the mapping
        self.view = memoryview(self._map)[start:start + n]

    def close(self):
        self.view.release()
        self._map.close()


def odirect_read(paths, max_bytes, threads=8, chunk=2 << 20):
    """Times reads of `paths` with O_DIRECT; returns (GB/s, bytes, s)."""
    jobs = []
    total = 0
    for p in paths:
        size = written_bytes(p) // chunk * chunk
        off = 0
        while off < size and total < max_bytes:
            jobs.append((p, off))
            off += chunk
            total += chunk
    if not jobs:
        return None, 0, 0.0
    lock = threading.Lock()
    done = [0]
    errors = []

    def run(idx):
        buf = HugeBuffer(chunk)
        fds = {}
        try:
            for i in range(idx, len(jobs), threads):
                p, off = jobs[i]
                fd = fds.get(p)
                if fd is None:
                    fd = fds[p] = os.open(p, os.O_RDONLY | os.O_DIRECT)
                n = os.preadv(fd, [buf.view], off)
                with lock:
                    done[0] += n
        except OSError as e:
            errors.append(str(e))
        finally:
            for fd in fds.values():
                os.close(fd)
            buf.close()

    t0 = time.perf_counter()
    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    if errors:
        raise OSError(errors[0])
    return done[0] / dt / 1e9, done[0], dt


def write_probe_file(path, nbytes, chunk=2 << 20):
    """Writes nbytes of non-zero data with O_DIRECT and fsyncs it, so a later
    O_DIRECT read must come from the device (not zeros of unwritten extents,
    not the page cache)."""
    buf = mmap.mmap(-1, chunk)
    buf.write(os.urandom(chunk))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
    try:
        off = 0
        while off < nbytes:
            off += os.pwritev(fd, [buf], off)
        os.fsync(fd)
    finally:
        os.close(fd)
        buf.close()


# ---- the run ----------------------------------------------------------------------------
class Runner:
    def __init__(self, args):
        self.args = args
        self.out = os.path.abspath(args.out)
        os.makedirs(os.path.join(self.out, "workers"), exist_ok=True)
        self.log = Log(os.path.join(self.out, "log.txt"))
        self.t0 = time.perf_counter()
        self.results = {"meta": {}, "args": vars(args), "workers": [], "disk_reads": [], "links": {},
                        "notes": []}
        self.durations = {}
        self.abort = None          # a reason no further worker can succeed
        self.dead_models = set()   # models whose setup failed

    def elapsed(self):
        return time.perf_counter() - self.t0

    def save(self):
        h2d = [w["h2d"]["gbps_median"] for w in self.results["workers"]
               if isinstance(w.get("h2d"), dict) and "gbps_median" in w["h2d"]]
        self.results["links"]["h2d_gbps_median"] = wl.median(h2d) and round(wl.median(h2d), 2)
        dr = [d["gbps"] for d in self.results["disk_reads"] if d.get("gbps")]
        self.results["links"]["disk_read_gbps"] = wl.median(dr) and round(wl.median(dr), 2)
        self.results["links"]["disk_read_threads"] = 8
        self.results["meta"]["elapsed_s"] = round(self.elapsed(), 1)
        tmp = os.path.join(self.out, "results.json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.results, f, indent=1, default=str)
        os.replace(tmp, os.path.join(self.out, "results.json"))
        try:
            md = report.markdown(self.results)
        except Exception as e:
            md = f"# report failed: {e}\n\n```\n{traceback.format_exc()}\n```\n"
        with open(os.path.join(self.out, "results.md"), "w") as f:
            f.write(md)

    def meta(self):
        a = self.args
        os.makedirs(a.store_root, exist_ok=True)
        m = self.results["meta"]
        m["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        m["host"] = socket.gethostname()
        m["kernel"] = platform.release()
        m["gpu"] = run_cmd(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,pcie.link.gen.max,"
                                          "pcie.link.width.max", "--format=csv,noheader"])
        m["cpus"] = os.cpu_count()
        m["store_root"] = os.path.abspath(a.store_root)
        m["store_fs"] = fs_type(a.store_root)
        m["shm_free_gib"] = round(shm_free_bytes() / 2**30, 1)
        m["kvtier_lib"] = os.environ.get("KVTIER_LIB", "(default search)")
        m["ram_tier_probe"] = probe_ram_tier(a.store_root, self.log)
        self.log(f"machine: {m['gpu']}; store {m['store_fs']}; /dev/shm free {m['shm_free_gib']} GiB; "
                 f"RAM tier: {m['ram_tier_probe']}")
        if m["store_fs"].startswith("tmpfs"):
            self.results["notes"].append("store root is on tmpfs: the 'disk' arm reads RAM; pass --store-root")
        need = a.ram_tier_gib * 2**30
        if shm_free_bytes() < need * 1.05:
            self.results["notes"].append(
                f"/dev/shm has {m['shm_free_gib']} GiB free, less than the {a.ram_tier_gib} GiB RAM tier: "
                "the tier falls back to anonymous memory and (c) cannot adopt it after the restart")

    def spec(self, model, rep, arm, store_dir, die):
        a = self.args
        ms = json.loads(json.dumps(MODELS[model]))
        if ms["family"] == "llama":
            ms["config"]["num_hidden_layers"] = a.llama_layers
        name = f"r{rep}-{model}-{arm}"
        restart = arm in ("ram_restart", "disk_restart")
        return {
            "name": name, "model": model, "model_spec": ms, "rep": rep, "arm": arm, "seed": a.seed,
            "kv_dtypes": [d for d in a.kv_dtypes.split(",") if d],
            "store_dir": store_dir, "ram_tier_bytes": int(a.ram_tier_gib * 2**30),
            "store_options": {"capacity_bytes": int(a.store_capacity_gib * 2**30),
                              "read_threads": a.read_threads, "queue_depth": a.queue_depth},
            "docs": a.docs, "doc_tokens": a.doc_tokens, "doc_jitter": a.doc_jitter,
            "question_tokens": a.question_tokens,
            "rounds": a.restart_rounds if restart else a.rounds,
            "first_visit": a.rounds if restart else 0,
            "gpu_cache_tokens": a.gpu_cache_tokens, "check_docs": a.check_docs,
            "load_chunk_blocks": a.load_chunk_blocks, "load_threads": a.load_threads,
            "result_path": os.path.join(self.out, "workers", name + ".json"), "die": die,
            "device": a.device,
        }

    def estimate(self, model, arm):
        d = self.durations.get((model, arm))
        return d * 1.15 + 5 if d else DEFAULT_EST[arm]

    def run_worker(self, spec):
        name = spec["name"]
        spec_path = os.path.join(self.out, "workers", name + ".spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f, indent=1)
        timeout = max(10.0, min(self.args.worker_timeout_s, self.args.budget_s + 60 - self.elapsed()))
        entry = {"name": name, "model": spec["model"], "arm": spec["arm"], "rep": spec["rep"]}
        self.log(f"start {name} (timeout {timeout:.0f} s)")
        t = time.perf_counter()
        with open(os.path.join(self.out, "workers", name + ".log"), "w") as lf:
            proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", spec_path],
                                    stdout=lf, stderr=subprocess.STDOUT, cwd=REPO)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
                entry["problem"] = f"timed out after {timeout:.0f} s"
        dur = time.perf_counter() - t
        entry["rc"], entry["wall_s"] = rc, round(dur, 1)
        self.durations[(spec["model"], spec["arm"])] = dur
        res = None
        try:
            with open(spec["result_path"]) as f:
                res = json.load(f)
        except (OSError, ValueError) as e:
            entry.setdefault("problem", f"no result file ({e}); see workers/{name}.log")
        if res is not None:
            for k in ("versions", "gpu", "model_info", "h2d", "timings", "store_mode", "store_open_stats",
                      "ram_tier_note", "errors", "phase"):
                if k in res:
                    entry[k] = res[k]
            entry["summary"] = [report.summarize_pass(p) for p in res.get("passes", [])]
            if res.get("errors"):
                entry.setdefault("problem", "; ".join(e["error"] if isinstance(e, dict) else str(e)
                                                      for e in res["errors"])[:600])
            if res.get("phase") != "done":
                entry.setdefault("problem", f"stopped in phase {res.get('phase')}")
        expected = -signal.SIGKILL if spec["die"] else 0
        if rc != expected and "problem" not in entry:
            entry["problem"] = f"exit status {rc} (expected {expected}); see workers/{name}.log"
        if "versions" in entry and "versions" not in self.results["meta"]:
            self.results["meta"]["versions"] = entry["versions"]
        self.results["workers"].append(entry)
        if entry.get("problem") and entry.get("phase") in (None, "start", "setup"):
            text = entry["problem"]
            if any(x in text for x in ("No module named", "CUDA", "cuda", "libkvtier", "kvtier does not")):
                self.abort = f"{name} failed in setup ({text[:200]}); no further worker can succeed"
            else:
                self.dead_models.add(spec["model"])
        line = f"end {name}: rc={rc} {dur:.1f} s"
        for s in entry.get("summary", []):
            line += (f" | {s['kv_dtype']}: first {s.get('first_ttft_ms_median')} ms, revisit "
                     f"{s.get('revisit_ttft_ms_median')} ms, tokens {s.get('revisit_tokens')}")
            if s.get("check_summary"):
                line += f", check: {s['check_summary']}"
        if entry.get("problem"):
            line += f" | PROBLEM: {entry['problem']}"
        self.log(line)
        self.save()
        return entry

    def measure_disk(self, label):
        """O_DIRECT 2 MiB reads, 8 threads, of a file written (O_DIRECT) beside the stores."""
        path = os.path.join(self.args.store_root, "odirect-probe.bin")
        nbytes = int(self.args.disk_read_gib * 2**30) // (2 << 20) * (2 << 20)
        try:
            t = time.perf_counter()
            write_probe_file(path, nbytes)
            wdt = time.perf_counter() - t
            gbps, n, dt = odirect_read([path], nbytes)
            rec = {"label": label, "gbps": gbps and round(gbps, 3), "bytes": n, "s": round(dt, 3),
                   "write_gbps_qd1": round(nbytes / wdt / 1e9, 3)}
        except OSError as e:
            rec = {"label": label, "error": f"{path}: {e}"}
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
        self.results["disk_reads"].append(rec)
        self.log(f"disk O_DIRECT read ({label}): {rec}")

    def chain(self, model, rep):
        a = self.args
        arms = [x for x in a.arms.split(",") if x]
        kv_chain = [x for x in ("ram", "ram_restart", "disk_restart") if x in arms]
        order = (["recompute"] if "recompute" in arms else []) + kv_chain
        if rep % 2 == 1:
            order = kv_chain + (["recompute"] if "recompute" in arms else [])
        for why in ([self.abort] if self.abort else []) + (
                [f"{model} failed to build earlier"] if model in self.dead_models else []):
            self.results["notes"].append(f"skipped rep {rep} of {model}: {why}")
            self.log(self.results["notes"][-1])
            return
        need = sum(self.estimate(model, x) for x in order)
        left = a.budget_s - self.elapsed()
        if need > left:
            # Without the whole kvtier chain the restart arms mean nothing; try recompute alone.
            note = f"skipped rep {rep} of {model}: needs ~{need:.0f} s, {left:.0f} s of budget left"
            self.results["notes"].append(note)
            self.log(note)
            return
        store_dir = os.path.join(a.store_root, f"{model}-r{rep}")
        shutil.rmtree(store_dir, ignore_errors=True)
        shm_before = set(glob.glob("/dev/shm/kvtier-*"))
        chain_ok = True
        try:
            for arm in order:
                if self.abort or model in self.dead_models:
                    self.results["notes"].append(f"rep {rep} {model}: {arm} not started: "
                                                 f"{self.abort or 'the model failed to build'}")
                    continue
                if arm != "recompute" and not chain_ok:
                    self.results["notes"].append(f"rep {rep} {model}: {arm} skipped, an earlier kvtier arm failed")
                    continue
                die = arm == "ram" and len(kv_chain) > 1  # killed while serving, before (c)/(d)
                e = self.run_worker(self.spec(model, rep, arm, store_dir, die))
                if arm != "recompute" and (e.get("problem") or not e.get("summary")):
                    chain_ok = False
            if "disk_restart" in order:
                self.measure_disk(f"after {model} rep {rep}")
        finally:
            if not a.keep_stores:
                shutil.rmtree(store_dir, ignore_errors=True)
                for f in set(glob.glob("/dev/shm/kvtier-*")) - shm_before:
                    try:
                        os.unlink(f)
                    except OSError:
                        pass
            self.save()

    def run(self):
        try:
            self.meta()
            self.save()
            models = [m for m in self.args.models.split(",") if m]
            for m in models:
                if m not in MODELS:
                    raise SystemExit(f"unknown model {m!r}; choose from {sorted(MODELS)}")
            for rep in range(self.args.reps):
                for m in models:
                    self.chain(m, rep)
        except KeyboardInterrupt:
            self.results["notes"].append("interrupted")
        except Exception as e:
            self.results["notes"].append(f"orchestrator error: {type(e).__name__}: {e}")
            self.log(traceback.format_exc())
        finally:
            self.save()
            bad = [w["name"] for w in self.results["workers"] if w.get("problem")]
            self.log(f"done in {self.elapsed():.0f} s: {len(self.results['workers'])} workers, "
                     f"{len(bad)} with problems {bad}; results in {self.out}/results.md")
        return 1 if not self.results["workers"] or bad else 0


def main(argv):
    if len(argv) >= 2 and argv[0] == "--worker":
        import worker
        return worker.main(argv[1])
    return Runner(parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
