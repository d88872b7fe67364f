"""What the GPU path's first call pays for a fresh RAM tier (issue 20).

The GPU path pins the store's RAM tier with cudaHostRegister when it is
bound to a device (Store's first GPU call, or kvtier_gpu_bind). Pinning
faults in every page not yet there, and the tier's own prefault thread is
doing the same after open. For each tier size and each moment of binding
(at once after open, or once the prefault is over) this reports: the open,
the first put, the prefault's time (from the process's resident anonymous
memory), the bind, the first load after it, how long from the bind until
the pinning thread has pinned every region, and the longest any 4 MiB
mmap + munmap of another thread of the process waited meanwhile (an
engine's allocator and thread stacks wait on the same lock).

    python3 bench/e2e/bind_probe.py [--tier-gib 16,48] [--raw] [--json OUT]
"""
import argparse
import json
import mmap
import os
import platform
import shutil
import tempfile
import threading
import time


def resident_anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


class MmapWatch:
    """Maps, touches and unmaps 4 MiB in a loop; keeps the worst wait per phase."""

    def __init__(self):
        self.worst = 0.0
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            t0 = time.perf_counter()
            m = mmap.mmap(-1, 4 << 20)
            m[0] = 1
            m.close()
            self.worst = max(self.worst, time.perf_counter() - t0)
            time.sleep(0.001)

    def take(self):
        w, self.worst = self.worst, 0.0
        return w

    def close(self):
        self.stop = True
        self.t.join()


def one(kvtier, torch, base, gib, when, watch):
    d = tempfile.mkdtemp(dir=base)
    row = {"tier_gib": gib, "bind": when}
    try:
        anon0 = resident_anon()
        watch.take()
        t0 = time.perf_counter()
        s = kvtier.Store(d, ram_tier_bytes=int(gib * (1 << 30)), ram_tier_shared_memory=False)
        row["open_s"] = time.perf_counter() - t0
        ns = s.register_namespace(name="probe", model_id="m", dtype="bf16", layout="probe", block_tokens=16)
        block = torch.randint(0, 255, (2 << 20,), dtype=torch.uint8)
        t1 = time.perf_counter()
        assert ns.put("b0", block.numpy())
        row["first_put_s"] = time.perf_counter() - t1
        row["mmap_worst_open_ms"] = watch.take() * 1e3
        tier_bytes = int(gib * (1 << 30))
        if when == "after_prefault":
            while resident_anon() - anon0 < tier_bytes * 0.98 and time.perf_counter() - t0 < 300:
                time.sleep(0.05)
        row["resident_before_bind_gib"] = (resident_anon() - anon0) / (1 << 30)
        row["since_open_before_bind_s"] = time.perf_counter() - t0
        watch.take()
        out = torch.empty(2 << 20, dtype=torch.uint8, device="cuda:0")
        t2 = time.perf_counter()
        from kvtier import _device
        _device.bind(s, {0})
        row["bind_s"] = time.perf_counter() - t2
        row["mmap_worst_bind_ms"] = watch.take() * 1e3
        t3 = time.perf_counter()
        got = ns.get_to_device(["b0"], [out])
        torch.cuda.synchronize()
        row["first_load_ms"] = (time.perf_counter() - t3) * 1e3
        assert got == [2 << 20] and torch.equal(out.cpu(), block)
        st = s.gpu_stats()
        row["ram_tier_pinned"] = st.get("ram_tier_pinned")
        # The regions are pinned by a thread behind the prefault: how long
        # until the last one, counted from the bind, and the worst mmap wait
        # meanwhile.
        while (st.get("ram_tier_regions_pinned", 0) < st.get("ram_tier_regions", 0)
               and time.perf_counter() - t2 < 300):
            time.sleep(0.01)
            st = s.gpu_stats()
        row["all_pinned_s"] = time.perf_counter() - t2
        row["mmap_worst_pinning_ms"] = watch.take() * 1e3
        # How long until the whole tier is resident, counted from open.
        while resident_anon() - anon0 < tier_bytes * 0.98 and time.perf_counter() - t0 < 300:
            time.sleep(0.05)
        row["prefault_done_s"] = time.perf_counter() - t0
        t4 = time.perf_counter()
        s.close()
        row["close_s"] = time.perf_counter() - t4
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return row


def raw_register(torch, gib, pieces_gib, faulted, watch):
    """cudaHostRegister of a plain anonymous mapping of `gib` GiB, fresh or
    faulted in, in one call or in pieces: the mechanism alone, beside the
    store, with the same mmap watcher."""
    import ctypes
    import numpy as np
    n = int(gib * (1 << 30))
    m = mmap.mmap(-1, n)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    if faulted:
        np.frombuffer(m, dtype=np.uint8)[::4096] = 1
    rt = torch.cuda.cudart()
    step = int(pieces_gib * (1 << 30)) if pieces_gib else n
    watch.take()
    t0 = time.perf_counter()
    regs = []
    for off in range(0, n, step):
        e = rt.cudaHostRegister(addr + off, min(step, n - off), 0)
        assert int(e) == 0, e
        regs.append(addr + off)
    row = {"tier_gib": gib, "bind": f"raw, {'faulted' if faulted else 'fresh'}, "
           + (f"{pieces_gib:g} GiB pieces" if pieces_gib else "one call"),
           "bind_s": time.perf_counter() - t0, "mmap_worst_bind_ms": watch.take() * 1e3}
    for r in regs:
        rt.cudaHostUnregister(r)
    m.close()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tier-gib", default="16,48")
    ap.add_argument("--dir", default=None, help="folder for the stores (default: a temporary one)")
    ap.add_argument("--json")
    ap.add_argument("--raw", action="store_true",
                    help="also register plain mappings of the same sizes in one call and in 1 GiB pieces")
    a = ap.parse_args()
    import torch

    import kvtier
    torch.cuda.init()
    torch.empty(1, device="cuda:0")
    base = a.dir or tempfile.mkdtemp()
    watch = MmapWatch()
    rows = []
    for gib in [float(x) for x in a.tier_gib.split(",")]:
        for when in ("at_open", "after_prefault"):
            r = one(kvtier, torch, base, gib, when, watch)
            rows.append(r)
            print(json.dumps(r), flush=True)
    if a.raw:
        for gib in [float(x) for x in a.tier_gib.split(",")]:
            for faulted in (False, True):
                for pieces in (0, 1):
                    r = raw_register(torch, gib, pieces, faulted, watch)
                    rows.append(r)
                    print(json.dumps(r), flush=True)
    watch.close()
    cols = ["tier_gib", "bind", "open_s", "first_put_s", "since_open_before_bind_s", "bind_s", "first_load_ms",
            "all_pinned_s", "prefault_done_s", "mmap_worst_open_ms", "mmap_worst_bind_ms", "mmap_worst_pinning_ms"]
    print("| " + " | ".join(cols) + " |")
    print("|" + " --- |" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r.get(c, "-")) for c in cols) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"host": platform.node(), "gpu": torch.cuda.get_device_name(0), "cpus": os.cpu_count(),
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
