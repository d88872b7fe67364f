"""Where a get_to_device call's time goes, by call size (issue 20).

Stores `--blocks` blocks of each size in a RAM tier, then loads the first n
of them into device memory for several n, as the e2e's GPU arm does: one
call, (address, size) fragments, torch's stream. Per call it reports the
host time of the Python side (building the items), the host time of the C
call, the device time from an event recorded before the call to one after
it, and the same bytes copied by torch from one pinned buffer (the link).

    python3 bench/e2e/gpu_call_probe.py [--block-kib 512,1792] [--blocks 1024]
        [--methods auto,kernel,batch,loop] [--sets 4] [--json OUT]

--methods repeats each call with each copy method (Store.gpu_set_copy_method);
--sets K rotates the calls over K disjoint sets of blocks, as the e2e driver
cycles over its documents (a set then is not warm in the host's caches).
--serve KVTIER starts `KVTIER serve` on the store (its RAM tier in the service)
and makes every call as that service's client, whose blocks go through its
GPU staging (docs/service.md).
Each row also carries the GPU path's counters per call (copies, calls by
method), from Store.gpu_stats().
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
    ap.add_argument("--methods", default="auto", help="copy methods, e.g. auto,kernel,batch,loop")
    ap.add_argument("--gemm-ms", type=float, default=0,
                    help="run about this many ms of bf16 GEMMs before each call and each link copy, as a "
                         "serving step does before a load (0: the GPU is idle)")
    ap.add_argument("--weights-gib", type=float, default=0,
                    help="before each call and each link copy, read this many GiB of device memory (a "
                         "small-batch forward over a model's weights), as a serving step does")
    ap.add_argument("--cpu-op", action="store_true",
                    help="a small multi-threaded CPU matmul just before each call, as a serving step's host "
                         "work leaves torch's CPU threads spinning")
    ap.add_argument("--stream", choices=["side", "default"], default="side")
    ap.add_argument("--sets", type=int, default=1, help="disjoint block sets the calls rotate over")
    ap.add_argument("--serve", metavar="KVTIER", help="the kvtier program: load through `kvtier serve`")
    ap.add_argument("--json")
    a = ap.parse_args()

    import torch

    import kvtier
    from kvtier import _device
    from kvtier._lib import GetItem, lib

    dev = torch.device("cuda", 0)
    # A stream of its own, as the e2e driver and engines use: the legacy
    # default stream (--stream default) cannot take the batch API.
    stream = torch.cuda.Stream(dev) if a.stream == "side" else torch.cuda.default_stream(dev)
    torch.cuda.set_stream(stream)
    rows = []
    gemm = None
    if a.gemm_ms > 0:  # calibrate: how many 8192^3 bf16 GEMMs take gemm_ms
        x = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(10):
            x @ x
        torch.cuda.synchronize()
        reps = max(1, round(a.gemm_ms / ((time.perf_counter() - t) * 1e3 / 10)))

        def gemm():
            for _ in range(reps):
                x @ x
            torch.cuda.synchronize()
    if a.weights_gib > 0:
        mats = [torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
                for _ in range(max(1, round(a.weights_gib * (1 << 30) / (8192 * 8192 * 2))))]
        act = torch.randn(16, 8192, device=dev, dtype=torch.bfloat16)

        def gemm():  # noqa: F811 (replaces the GEMM warm-up: a walk over the weights)
            for m in mats:
                act @ m
            torch.cuda.synchronize()
    cpu_a = torch.randn(512, 512)
    for kib in [int(x) for x in a.block_kib.split(",")]:
        bb = kib << 10
        n_max = a.blocks
        d = tempfile.mkdtemp(prefix="kvtier-gpu-probe-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        # A service lends at most half its tier to pins: twice the room there.
        ram = int(a.ram_tier_gib * (1 << 30)) if a.ram_tier_gib > 0 else (2 if a.serve else 1) * (n_max + 64) * bb
        server = None
        if a.serve:
            import subprocess
            sock = d + "/kvtier.sock"
            server = subprocess.Popen([a.serve, "serve", d, "--socket", sock, "--ram-tier", str(ram),
                                       "--capacity", str(max(4 * n_max * bb, 2 * ram)), "--metrics-listen", "off",
                                       "--log", d + ".serve.log"])
            until = time.time() + 60
            while not os.path.exists(sock) and server.poll() is None and time.time() < until:
                time.sleep(0.05)
            store = kvtier.Store("unix:" + sock)
        else:
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
        counts = [int(x) for x in a.counts.split(",") if int(x) * a.sets <= n_max]
        for method, n in [(m, n) for m in a.methods.split(",") for n in counts]:
            store.gpu_set_copy_method(method)
            py, call, gpu, link = [], [], [], []
            stats0 = None
            for rep in range(a.reps + 1):
                k = rep % a.sets  # the block set this call loads
                frags = [(db + i * bb, bb) for i in range(n)]
                torch.cuda.synchronize()
                if gemm:
                    gemm()
                if a.cpu_op:
                    cpu_a @ cpu_a
                e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                e0.record(stream)
                t0 = time.perf_counter()
                c = _device._Call(ns, GetItem, keys[k * n:(k + 1) * n], frags, None, stream)
                t1 = time.perf_counter()
                rc = lib.kvtier_get_to_device(store._handle(), ns.id, c.items, c.n, c.stream, 0, c.statuses, c.sizes)
                t2 = time.perf_counter()
                e1.record(stream)
                e1.synchronize()
                assert rc == 0 and all(c.sizes[i] == bb for i in range(n))
                if rep == 0:  # the warm-up checks the bytes
                    assert torch.equal(dst[:n * bb], src[k * n * bb:(k + 1) * n * bb])
                if gemm:
                    gemm()
                e2.record(stream)
                dst[:n * bb].copy_(pinned[:n * bb], non_blocking=True)
                e3 = torch.cuda.Event(enable_timing=True)
                e3.record(stream)
                e3.synchronize()
                if rep == 0:
                    stats0 = store.gpu_stats()
                    continue
                py.append((t1 - t0) * 1e3)
                call.append((t2 - t1) * 1e3)
                gpu.append(e0.elapsed_time(e1))
                link.append(e2.elapsed_time(e3))
            stats1 = store.gpu_stats()
            per_call = {f"{c}_per_call": round((stats1[c] - stats0[c]) / a.reps, 1)
                        for c in ("copies", "batch_calls", "loop_calls", "kernel_calls")}
            med = {k: round(statistics.median(v), 3) for k, v in
                   (("python_ms", py), ("c_call_ms", call), ("device_span_ms", gpu), ("link_ms", link))}
            row = dict(block_kib=kib, method=method, stream=a.stream, gemm_ms=a.gemm_ms, weights_gib=a.weights_gib,
                       cpu_op=a.cpu_op, sets=a.sets, served=bool(a.serve),
                       tier_lent=bool(stats1.get("ram_tier_lent")), blocks=n, mb=round(n * bb / 1e6, 1), **med,
                       x_link=round(med["link_ms"] / med["device_span_ms"], 3), **per_call)
            rows.append(row)
            print(json.dumps(row), flush=True)
        del dst, pinned, src
        store.close()
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
        kvtier.destroy_store(d)
    print(f"{'block':>6} {'method':>7} {'blocks':>6} {'MB':>7} {'python ms':>10} {'C call ms':>10} "
          f"{'device ms':>10} {'link ms':>8} {'x link':>7} {'copies':>7}")
    for r in rows:
        print(f"{r['block_kib']:>5}K {r['method']:>7} {r['blocks']:>6} {r['mb']:>7} {r['python_ms']:>10} "
              f"{r['c_call_ms']:>10} {r['device_span_ms']:>10} {r['link_ms']:>8} {r['x_link']:>7} "
              f"{r['copies_per_call']:>7}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "gpu": torch.cuda.get_device_name(0)}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
