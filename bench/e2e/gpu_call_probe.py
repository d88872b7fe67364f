"""Where a get_to_device call's time goes, by call size (issue 20).

Stores `--blocks` blocks of each size in a RAM tier, then loads the first n
of them into device memory for several n, as the e2e's GPU arm does: one
call, (address, size) fragments, torch's stream. Per call it reports the
host time of the Python side (building the items), the host time of the C
call, the device time from an event recorded before the call to one after
it, and the same bytes copied by torch from one pinned buffer (the link).

    python3 bench/e2e/gpu_call_probe.py [--block-kib 512,1792] [--blocks 1024] [--json OUT]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--block-kib", default="512,1792")
    ap.add_argument("--blocks", type=int, default=1024)
    ap.add_argument("--counts", default="16,64,171,512,1024")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--ram-tier-gib", type=float, default=0, help="RAM tier size (default: just the blocks)")
    ap.add_argument("--json")
    a = ap.parse_args()

    import torch

    import kvtier
    from kvtier import _device
    from kvtier._lib import GetItem, lib

    dev = torch.device("cuda", 0)
    stream = torch.cuda.current_stream(dev)
    rows = []
    for kib in [int(x) for x in a.block_kib.split(",")]:
        bb = kib << 10
        n_max = a.blocks
        d = tempfile.mkdtemp(prefix="kvtier-gpu-probe-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        ram = int(a.ram_tier_gib * (1 << 30)) if a.ram_tier_gib > 0 else (n_max + 64) * bb
        store = kvtier.Store(d, ram_tier_bytes=ram, ram_tier_shared_memory=True,
                             capacity_bytes=max(4 * n_max * bb, 2 * ram))
        ns = store.register_namespace(name=f"probe{kib}", model_id="probe", dtype="u8", layout="flat",
                                      block_tokens=16, block_bytes=bb)
        src = torch.randint(0, 255, (n_max * bb,), dtype=torch.uint8, device=dev)
        keys = [f"k{kib}-{i}".encode() for i in range(n_max)]
        base = src.data_ptr()
        codes = ns.put_from_device(keys, [(base + i * bb, bb) for i in range(n_max)], stream=stream)
        assert all(c == kvtier.Code.OK for c in codes), set(codes)
        dst = torch.empty(n_max * bb, dtype=torch.uint8, device=dev)
        pinned = torch.empty(n_max * bb, dtype=torch.uint8, pin_memory=True)
        db = dst.data_ptr()
        for n in [int(x) for x in a.counts.split(",") if int(x) <= n_max]:
            py, call, gpu, link = [], [], [], []
            for rep in range(a.reps + 1):
                frags = [(db + i * bb, bb) for i in range(n)]
                torch.cuda.synchronize()
                e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                e0.record(stream)
                t0 = time.perf_counter()
                c = _device._Call(ns, GetItem, keys[:n], frags, None, stream)
                t1 = time.perf_counter()
                rc = lib.kvtier_get_to_device(store._handle(), ns.id, c.items, c.n, c.stream, 0, c.statuses, c.sizes)
                t2 = time.perf_counter()
                e1.record(stream)
                e1.synchronize()
                assert rc == 0 and all(c.sizes[i] == bb for i in range(n))
                if rep == 0:  # the warm-up checks the bytes
                    assert torch.equal(dst[:n * bb], src[:n * bb])
                e2.record(stream)
                dst[:n * bb].copy_(pinned[:n * bb], non_blocking=True)
                e3 = torch.cuda.Event(enable_timing=True)
                e3.record(stream)
                e3.synchronize()
                if rep == 0:
                    continue
                py.append((t1 - t0) * 1e3)
                call.append((t2 - t1) * 1e3)
                gpu.append(e0.elapsed_time(e1))
                link.append(e2.elapsed_time(e3))
            med = {k: round(statistics.median(v), 3) for k, v in
                   (("python_ms", py), ("c_call_ms", call), ("device_span_ms", gpu), ("link_ms", link))}
            row = dict(block_kib=kib, blocks=n, mb=round(n * bb / 1e6, 1), **med,
                       x_link=round(med["link_ms"] / med["device_span_ms"], 3))
            rows.append(row)
            print(json.dumps(row), flush=True)
        del dst, pinned, src
        store.close()
        kvtier.destroy_store(d)
    st = None
    print(f"{'block':>6} {'blocks':>6} {'MB':>7} {'python ms':>10} {'C call ms':>10} {'device ms':>10} "
          f"{'link ms':>8} {'x link':>7}")
    for r in rows:
        print(f"{r['block_kib']:>5}K {r['blocks']:>6} {r['mb']:>7} {r['python_ms']:>10} {r['c_call_ms']:>10} "
              f"{r['device_span_ms']:>10} {r['link_ms']:>8} {r['x_link']:>7}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "gpu": torch.cuda.get_device_name(0), "stats": st}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
