"""What a host-path load costs, part by part (docs/e2e.md, "The host path"):
Namespace.get_batch of RAM-tier hits into caller memory, against the best
memcpy between the same kinds of memory, measured in the same process.

The variables are the ones that differ between kvtier-host-bench and an
engine process: where the tier lives (/dev/shm, as a store that survives a
restart keeps it, or anonymous memory), what the destination is (pinned
memory from torch, as an engine's CPU tier uses, or pageable), and how many
threads copy. Blocks are the e2e's Qwen3-0.6B cross-layer blocks (1.75 MiB).

    python3 host_probe.py [--blocks N] [--block-kib K] [--reps R] [--json]
"""
import argparse
import ctypes
import json
import os
import shutil
import tempfile
import threading
import time

import numpy as np

import kvtier


def memcpy_rate(dst, src, nbytes, threads, piece=2 << 20, reps=3):
    """Best GB/s of `threads` threads moving `nbytes` from src to dst, as 2
    MiB pieces dealt round robin ("pieces") or as one contiguous range per
    thread ("ranges": one ctypes call each, so the GIL is taken once).
    Returns (GB/s, how)."""
    n = nbytes // piece

    def pieces(i):
        for j in range(i, n, threads):
            ctypes.memmove(dst + j * piece, src + j * piece, piece)

    def ranges(i):
        lo, hi = n * i // threads * piece, n * (i + 1) // threads * piece
        ctypes.memmove(dst + lo, src + lo, hi - lo)

    best = (0.0, "")
    for how, fn in (("pieces", pieces), ("ranges", ranges)):
        for _ in range(reps):
            t0 = time.perf_counter()
            ts = [threading.Thread(target=fn, args=(i,)) for i in range(threads)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            best = max(best, (n * piece / (time.perf_counter() - t0) / 1e9, how))
    return best


def memcpy_best(dst, src, nbytes):
    """The host's best memcpy from src to dst over thread counts and ways of
    dealing the bytes out: {"gbps", "threads", "how"}."""
    cores = os.cpu_count() or 1
    best = (0.0, 0, "")
    for t in sorted({1, 2, 4, 8, 16, cores, 2 * cores}):
        g, how = memcpy_rate(dst, src, nbytes, t)
        best = max(best, (g, t, how))
    return {"gbps": round(best[0], 2), "threads": best[1], "how": best[2]}


def destinations(nbytes):
    """name -> (address, keepalive)."""
    out = {}
    a = np.zeros(nbytes, dtype=np.uint8)
    out["pageable"] = (a.ctypes.data, a)
    try:
        import torch
        if torch.cuda.is_available():
            p = torch.zeros(nbytes, dtype=torch.uint8, pin_memory=True)
            out["pinned"] = (p.data_ptr(), p)
    except ImportError:
        pass
    return out


def probe(a):
    block = a.block_kib << 10
    nbytes = a.blocks * block
    rng = np.random.default_rng(1)
    payload = [rng.integers(0, 255, block, dtype=np.uint8) for _ in range(a.blocks)]
    keys = [b"probe-%06d" % i for i in range(a.blocks)]
    src = np.concatenate(payload)
    dsts = destinations(nbytes)
    cores = os.cpu_count() or 1
    rows = []
    limits = {}
    for dname, (addr, _) in dsts.items():
        limits[dname] = memcpy_best(addr, src.ctypes.data, nbytes)
    for shm in (True, False):
        for copy_threads in sorted({0, 1, min(cores, 16)}):
            d = tempfile.mkdtemp(prefix="kvtier-host-probe-")
            try:
                st = kvtier.Store(d, ram_tier_bytes=4 * nbytes + (256 << 20), ram_tier_shared_memory=shm,
                                  ram_copy_threads=copy_threads, capacity_bytes=4 * nbytes + (1 << 30))
                ns = st.register_namespace(name="probe", model_id="probe", dtype="u8", layout="bytes",
                                           block_tokens=16, block_bytes=block, hash_scheme="probe")
                ns.put_batch(keys, payload)
                shared = bool(st.stats().get("ram_shared_memory"))
                for dname, (addr, _) in dsts.items():
                    outs = [(addr + i * block, block) for i in range(a.blocks)]
                    times = []
                    for _ in range(a.reps):
                        t0 = time.perf_counter()
                        got = ns.get_batch(keys, outs)
                        times.append(time.perf_counter() - t0)
                        if any(g != block for g in got):
                            raise RuntimeError(f"get_batch returned {sorted(set(got))[:3]}")
                    g = nbytes / min(times) / 1e9
                    rows.append({"tier": "shm" if shared else "anonymous", "copy_threads": copy_threads,
                                 "destination": dname, "gbps": round(g, 2),
                                 "x_memcpy": round(g / limits[dname]["gbps"], 2)})
                st.close()
                kvtier.destroy_store(d)  # its /dev/shm tier goes too
            finally:
                shutil.rmtree(d, ignore_errors=True)
    return {"blocks": a.blocks, "block_bytes": block, "cores": cores, "memcpy_best": limits, "rows": rows}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blocks", type=int, default=171)
    p.add_argument("--block-kib", type=int, default=1792)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    r = probe(a)
    if a.json:
        print(json.dumps(r, indent=1))
        return
    print(f"get_batch of {r['blocks']} RAM hits of {r['block_bytes'] >> 10} KiB, {r['cores']} cores; "
          f"best memcpy: " + ", ".join(f"{k} {v['gbps']} GB/s ({v['threads']} thr, {v['how']})"
                                       for k, v in r["memcpy_best"].items()))
    print("| tier | copy threads (0: default) | destination | GB/s | x memcpy |\n|---|---|---|---|---|")
    for x in r["rows"]:
        print(f"| {x['tier']} | {x['copy_threads']} | {x['destination']} | {x['gbps']} | {x['x_memcpy']} |")


if __name__ == "__main__":
    main()
