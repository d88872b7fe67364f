#!/usr/bin/env python3
"""How long vLLM waits for the kvtier tier to answer one prompt's lookups.

vLLM's scheduler asks the tier key by key, steps every few milliseconds, and
admits the request once no answer is RETRY. This runs the tier as vLLM builds
it (CI's stand-ins, or vLLM's own modules with KVTIER_VLLM_SRC), stores a
prompt's blocks, then times the scan from its first lookup to its last
answer, embedded and through a `kvtier serve` it starts.

  KVTIER_BIN=build/bin/kvtier KVTIER_LIB=build/lib/libkvtier.so \\
    /usr/bin/python3 bench/adapters/vllm_lookups.py [--keys 172,1024] [--json]
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "tests/python"), os.path.join(ROOT, "src/python")]
if os.environ.get("KVTIER_VLLM_SRC"):
    import vllm_source
    vllm_source.load(os.environ["KVTIER_VLLM_SRC"])
else:
    sys.path.insert(0, os.path.join(ROOT, "tests/python/standins"))

import numpy as np  # noqa: E402
import test_vllm_adapter as t  # noqa: E402  (the tier as vLLM's factory builds it)
from vllm.v1.kv_offload import base  # noqa: E402

LR = base.LookupResult
STEP_END = base.ScheduleEndContext(new_req_ids=(), preempted_req_ids=())


def scan(path, n, reps, step_ms):
    primary = np.random.default_rng(1).integers(0, 256, (t.ROWS, t.ROW_BYTES), dtype=np.uint8)
    keys = t.keys_of(n)
    tier = t.make_tier(path, primary, workers=4)
    writer = base.ReqContext(req_id="writer")
    for i in range(0, n, t.ROWS):
        chunk = keys[i:i + t.ROWS]
        tier.submit_store(t.job(i, chunk, list(range(len(chunk))), False, writer))
    t.wait_jobs(tier, (n + t.ROWS - 1) // t.ROWS, timeout=120)
    tier.on_request_finished(writer)
    times, steps = [], []
    for r in range(reps):
        req = base.ReqContext(req_id=f"r{r}")
        t0, s = time.perf_counter(), 0
        while True:
            answers = [tier.lookup(k, req) for k in keys]
            if LR.RETRY not in answers:
                break
            tier.on_schedule_end(STEP_END)
            s += 1
            time.sleep(step_ms / 1e3)
        times.append(time.perf_counter() - t0)
        steps.append(s)
        if answers != [LR.HIT] * n:
            raise SystemExit(f"wrong answers at {path}: {answers.count(LR.HIT)} of {n} hits")
        tier.on_request_finished(req)
    tier.shutdown()
    return {"p50_ms": round(sorted(times)[reps // 2] * 1e3, 2), "steps": sorted(steps)[reps // 2]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", default="172,1024", help="prompt lengths in blocks (172 = 2,750 tokens of 16)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--step-ms", type=float, default=0.5, help="time between vLLM's steps")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    binary = os.environ.get("KVTIER_BIN")
    if not binary:
        raise SystemExit("set KVTIER_BIN to the kvtier program (and KVTIER_LIB to libkvtier.so)")
    d = tempfile.mkdtemp(prefix="kvtier-vllm-lookups-")
    sock = os.path.join(d, "kvtier.sock")
    serve = subprocess.Popen([binary, "serve", os.path.join(d, "served"), "--socket", sock,
                              "--metrics-listen", "off", "--log", os.path.join(d, "serve.log")])
    try:
        while not os.path.exists(sock):
            if serve.poll() is not None:
                raise SystemExit("kvtier serve did not start: " + open(os.path.join(d, "serve.log")).read())
            time.sleep(0.02)
        rows = []
        for n in (int(x) for x in a.keys.split(",")):
            for where, path in (("service", "unix:" + sock), ("embedded", os.path.join(d, f"embedded-{n}"))):
                print(f"scanning {n} keys, {where} ...", file=sys.stderr)
                rows.append(dict(keys=n, store=where, **scan(path, n, a.reps, a.step_ms)))
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait()
        shutil.rmtree(d, ignore_errors=True)
    vllm = "vLLM source " + os.environ["KVTIER_VLLM_SRC"] if os.environ.get("KVTIER_VLLM_SRC") else "CI's stand-ins"
    if a.json:
        print(json.dumps({"ran_on": f"{os.uname().nodename}, {os.cpu_count()} CPUs, {vllm}",
                          "step_ms": a.step_ms, "rows": rows}, indent=1))
        return
    print(f"{'keys':>6} {'store':<9} {'p50 ms':>8} {'steps':>6}   ({vllm}, steps {a.step_ms} ms apart)")
    for r in rows:
        print(f"{r['keys']:>6} {r['store']:<9} {r['p50_ms']:>8} {r['steps']:>6}")


if __name__ == "__main__":
    main()
