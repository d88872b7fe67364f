"""What a RAM-tier block's pieces cost the GPU path.

A block takes the chunks that evicted blocks freed, so once blocks of mixed
sizes have passed through the tier a 2 MiB block lies in several runs of
chunks, and each run is one device copy (ram_tier_churn_bench counts them
on the host: 8.3 per 2 MiB block after mixed churn). For each churn (2 MiB
blocks only, or 64 KiB / 512 KiB / 2 MiB mixed) this fills a 1 GiB tier
with 64 KiB chunks, puts 256 probe blocks of 2 MiB, then loads them to the
GPU in calls of 32 and reports the best and the median rate, the device
copies per block (gpu_stats), and the rate over the link's limit: the best
plain copy of 64 MiB of pinned host memory to the device (torch), swept
over 8 tries in the same run.

    python3 bench/e2e/pieces_probe.py [--dir DIR] [--rounds 2] [--json OUT]
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time

MIB = 1 << 20


def link_limit(torch):
    host = torch.empty(64 * MIB, dtype=torch.uint8).pin_memory()
    dev = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda:0")
    best = 0.0
    for _ in range(8):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        best = max(best, host.numel() / (time.perf_counter() - t0))
    return best


def one(kvtier, torch, base, mixed, limit):
    import numpy as np
    d = tempfile.mkdtemp(dir=base)
    row = {"churn": "64K/512K/2M mixed" if mixed else "2M only"}
    try:
        s = kvtier.Store(d, ram_tier_bytes=1 << 30, ram_tier_chunk_bytes=64 << 10, ram_tier_shared_memory=False,
                         capacity_bytes=8 << 30)
        ns = s.register_namespace(name="pieces", model_id="m", dtype="bf16", layout="probe", block_tokens=16)
        src = np.random.default_rng(5).integers(0, 256, 2 * MIB, dtype=np.uint8)
        sizes = [64 << 10, 512 << 10, 2 * MIB] if mixed else [2 * MIB]
        passed, i = 0, 0
        t0 = time.perf_counter()
        while passed < 3 << 30:  # three tiers' worth through it
            n = sizes[(i * 2654435761 >> 7) % len(sizes)]
            assert ns.put(f"churn{i}", src[:n])
            passed += n
            i += 1
        probes = [f"probe{j}" for j in range(256)]
        for j, k in enumerate(probes):
            src[:8] = j  # distinct blocks
            assert ns.put(k, src)
        row["fill_s"] = time.perf_counter() - t0
        outs = [torch.empty(2 * MIB, dtype=torch.uint8, device="cuda:0") for _ in range(32)]
        ns.get_to_device(probes[:32], outs)  # binds the GPU path
        torch.cuda.synchronize()
        st0 = s.gpu_stats()
        rates, blocks = [], 0
        for rep in range(16):
            batch = probes[(rep % 8) * 32:(rep % 8 + 1) * 32]
            t1 = time.perf_counter()
            got = ns.get_to_device(batch, outs)
            torch.cuda.synchronize()
            rates.append(32 * 2 * MIB / (time.perf_counter() - t1))
            assert got == [2 * MIB] * 32, got
            blocks += 32
        st1 = s.gpu_stats()
        assert torch.equal(outs[-1][8:].cpu(), torch.from_numpy(src[8:].copy()))
        row["copies_per_block"] = (st1.get("copies", 0) - st0.get("copies", 0)) / blocks
        row["ram_hits"] = st1.get("ram_hits", 0) - st0.get("ram_hits", 0)
        row["best_gbs"] = max(rates) / 1e9
        row["median_gbs"] = statistics.median(rates) / 1e9
        row["best_x_link"] = max(rates) / limit
        row["median_x_link"] = statistics.median(rates) / limit
        s.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None, help="folder for the stores (default: a temporary one)")
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the two churns, alternated (default 2)")
    a = ap.parse_args()
    import torch
    import kvtier
    limit = link_limit(torch)
    rows = []
    for mixed in [False, True] * a.rounds:  # alternated
        r = one(kvtier, torch, a.dir, mixed, limit)
        print(json.dumps(r), flush=True)
        rows.append(r)
    out = {"host": platform.node(), "gpu": torch.cuda.get_device_name(0), "link_limit_gbs": limit / 1e9,
           "rows": rows}
    print(f"link limit (best of 8 pinned 64 MiB copies): {limit / 1e9:.1f} GB/s on {out['gpu']}")
    cols = ["churn", "copies_per_block", "best_gbs", "median_gbs", "best_x_link", "median_x_link", "fill_s"]
    print("| " + " | ".join(cols) + " |")
    print("| " + " | ".join("---" for _ in cols) + " |")
    for r in rows:
        print("| " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
