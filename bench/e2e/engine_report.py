"""Tables of an engine_run.py run (results.json -> results.md): per model,
document length and batch, the median TTFT of each arm and phase, its ratio
to recompute in the same process, and beside it the parts (lookup, load,
forward) and the links measured in the same run.

The host arm's get_batch rate is its bytes over the time spent inside
get_batch (the copies to the GPU queued between chunks are not in it),
against the best host copy of the run: the larger of the worker's own
memmove sweep and kvtier-host-bench's sweep of copy kernels at the model's
block size."""
import statistics


def _med(xs):
    return statistics.median(xs) if xs else None


def _f(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"


def rows(results, by_rep=False):
    """(model, phase, doc_tokens, batch[, rep]) -> {arm: [request records]}, with the links."""
    out = {}
    for w in results["workers"]:
        spec = w.get("spec", {})
        for r in w.get("requests", []):
            k = (spec.get("model"), spec.get("phase"), r["doc_tokens"], r["batch"])
            if by_rep:
                k += (spec.get("rep"),)
            out.setdefault(k, {"arms": {}, "links": []})
            out[k]["arms"].setdefault(r["arm"], []).append(r)
            out[k]["links"].append(w.get("links", {}))
    return out


def markdown(results):
    disk = results.get("disk", {})
    odirect = _med([d["gbps"] for d in disk.values() if d.get("gbps")])
    lines = [f"Run of {results.get('date')}; machine: {_machine(results)}.", "",
             "| model | phase | doc tokens | batch | recompute TTFT ms | GPU path TTFT ms (x) | host path TTFT ms (x) "
             "| suffix fwd ms | recompute fwd ms | GPU load ms (GB/s, x link) | host get_batch GB/s (x memcpy) "
             "| disk prediction ms (x) | disk rate to beat recompute GB/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    over_limit = []  # rows whose get_batch beat the copy limit: that limit was not the host's best
    for (model, phase, n, b), v in sorted(rows(results).items(), key=lambda kv: tuple(map(str, kv[0]))):
        arms = v["arms"]
        rc = _med([r["ttft_ms"] for r in arms.get("recompute", [])])
        g = arms.get("gpu", [])
        h = arms.get("host", [])
        gt = _med([r["ttft_ms"] for r in g])
        ht = _med([r["ttft_ms"] for r in h])
        link = _med([l.get("h2d_pinned_gbps") for l in v["links"] if l.get("h2d_pinned_gbps")])
        mem = _best_copy(results, model, v["links"])
        gl = _med([r["load_ms"] for r in g])
        gbytes = _med([r["loaded_bytes"] for r in g]) or 0
        grate = gbytes / gl / 1e6 if gl else None
        hrate = _med([r["loaded_bytes"] / _get_ms(r) / 1e6 for r in h if _get_ms(r)])
        sfwd = _med([r["forward_ms"] for r in g])
        rfwd = _med([r["forward_ms"] for r in arms.get("recompute", [])])
        if hrate and mem and hrate > mem:
            over_limit.append(f"{model} {phase} {n}x{b}")
        pred = even = None
        if phase == "disk" and odirect and sfwd is not None:
            pred = gbytes / odirect / 1e6 + sfwd
            # The read rate at which loading ties with recomputing.
            even = gbytes / (rc - sfwd) / 1e6 if rc and rc > sfwd else None

        def x(a, base):
            return f" ({a / base:.2f}x)" if a is not None and base else ""
        lines.append(
            f"| {model} | {phase} | {n} | {b} | {_f(rc)} | {_f(gt)}{x(gt, rc)} | {_f(ht)}{x(ht, rc)} | {_f(sfwd)} "
            f"| {_f(rfwd)} | {_f(gl)} ({_f(grate)}, {_f(grate / link if grate and link else None, 2)}) "
            f"| {_f(hrate)} ({_f(hrate / mem if hrate and mem else None, 2)}) "
            f"| {_f(pred)}{x(gt, pred) if pred else ''} "
            f"| {_even(even, odirect) if phase == 'disk' else '-'} |")
    if over_limit:
        lines += ["", f"The host copy limit is below get_batch itself in {len(over_limit)} row(s) "
                      f"({', '.join(over_limit)}): it was not the host's best copy. Without kvtier-host-bench it "
                      "is Python's memcpy, which cannot use streaming AVX-512 stores; keep the bench's sweep "
                      "(`--host-bench`) in a run that reports this column."]
    lines += _load_split(results)
    reads = ", ".join(f"{k}: {d.get('gbps')} GB/s ({d.get('threads')} threads)" for k, d in disk.items())
    swept = sorted({int(t) for d in disk.values() for t in d.get("by_threads", {})})
    over = f"{swept[0]}-{swept[-1]}" if swept else "4/16/32"  # runs before the sweep began at one thread
    lines += ["", f"O_DIRECT reads of the stores' segment files (best over {over} threads): {reads or '-'}."]
    for model, hb in sorted(results.get("host_bench", {}).items()):
        if hb.get("memcpy_best_gbps"):
            lines.append(f"Best host copy for {model}'s blocks ({hb['block_bytes'] >> 10} KiB; kvtier-host-bench): "
                         f"{hb['memcpy_best_gbps']:.1f} GB/s ({hb.get('memcpy_best_kernel')}, "
                         f"{hb.get('memcpy_best_threads')} threads); its get_batch alone "
                         f"{hb.get('get_batch_gbps', 0):.1f} GB/s ({hb.get('get_batch_ratio', 0):.2f}x)"
                         + (f"; the best verified copy (copy and XXH3 in one pass) "
                            f"{hb['verified_copy_best_gbps']:.1f} GB/s ({hb.get('verified_copy_best_kernel')}, "
                            f"{hb.get('verified_copy_best_threads')} threads)"
                            if hb.get("verified_copy_best_gbps") else "") + ".")
        else:
            lines.append(f"Best host copy for {model}: not measured ({hb.get('skipped') or hb.get('error')}).")
    probes = [w["host_path_probe"] for w in results["workers"] if w.get("host_path_probe")]
    if probes:
        lines.append(f"Host path probe (get_batch of one document's blocks with the GPU idle, median of "
                     f"{len(probes)} processes): into the pinned buffer "
                     f"{_f(_med([p['pinned_gbps'] for p in probes]))} GB/s, into fresh pageable memory "
                     f"{_f(_med([p['pageable_gbps'] for p in probes]))} GB/s.")
    checks = [c for w in results["workers"] for c in w.get("checks", [])]
    if checks:
        exact = sum(c["bit_exact"] for c in checks)
        same = sum(c["same_token_as_full_prefill"] for c in checks)
        worst = max(c["vs_full_prefill_rel_diff"] for c in checks)
        lines.append(f"Checks: {exact}/{len(checks)} loads bit-exact against the same forward over fresh KV; "
                     f"{same}/{len(checks)} give the full prefill's first token (largest relative logit "
                     f"difference to it {worst:.2e}, other attention kernels).")
        ties = [c for c in checks if not c["same_token_as_full_prefill"] and "full_prefill_top2_gap_rel" in c]
        if ties:
            near = sum(c["full_prefill_top2_gap_rel"] <= c["vs_full_prefill_rel_diff"] for c in ties)
            lines.append(f"Of the {len(ties)} that differ, {near} have the full prefill's top two logits closer "
                         f"than the kernels' difference (largest gap {max(c['full_prefill_top2_gap_rel'] for c in ties):.2e}): "
                         f"a near tie, not a wrong load.")
    lines += ["", "Per repetition (TTFT ratio to recompute, GPU path / host path):", "",
              "| model | phase | doc tokens | batch | " + " | ".join(f"rep {r}" for r in _reps(results)) + " |",
              "|---|---|---|---|" + "---|" * len(_reps(results))]
    per = rows(results, by_rep=True)
    for (model, phase, n, b) in sorted({k[:4] for k in per}, key=lambda k: tuple(map(str, k))):
        cells = []
        for rep in _reps(results):
            arms = per.get((model, phase, n, b, rep), {}).get("arms", {})
            rc = _med([r["ttft_ms"] for r in arms.get("recompute", [])])
            gt = _med([r["ttft_ms"] for r in arms.get("gpu", [])])
            ht = _med([r["ttft_ms"] for r in arms.get("host", [])])
            cells.append(f"{_ratio(gt, rc)} / {_ratio(ht, rc)}" if rc and (gt or ht) else "-")
        lines.append(f"| {model} | {phase} | {n} | {b} | " + " | ".join(cells) + " |")
    errors = [(w.get("spec", {}).get("model"), w.get("spec", {}).get("phase"), e.splitlines()[0])
              for w in results["workers"] for e in w.get("errors", [])]
    for m, p, e in errors:
        lines.append(f"Error in {m}/{p}: {e}")
    return "\n".join(lines) + "\n"


def _load_split(results):
    """Where the GPU path's loads of RAM hits spend their time (medians): the
    load as the serving process times it (its stream's events around the
    call), the call on the host, the host's queuing of the copies, the
    device's time from the call's start to the last copy's end, the hashing
    after it, and what the bytes take at the measured link."""
    out = []
    for (model, phase, n, b), v in sorted(rows(results).items(), key=lambda kv: tuple(map(str, kv[0]))):
        g = [r for r in v["arms"].get("gpu", []) if r.get("gpu_load_split")]
        if not g:
            continue
        link = _med([l.get("h2d_pinned_gbps") for l in v["links"] if l.get("h2d_pinned_gbps")])
        split = {k: _med([r["gpu_load_split"][k] for r in g if k in r["gpu_load_split"]])
                 for k in ("call_ms", "enqueue_ms", "copy_ms", "hash_tail_ms", "prepare_ms", "library_ms",
                           "results_ms")}
        at_link = _med([r["loaded_bytes"] for r in g]) / link / 1e6 if link else None
        out.append(f"| {model} | {phase} | {n} | {b} | {_f(_med([r['load_ms'] for r in g]), 2)} "
                   f"| {_f(split['call_ms'], 2)} | {_f(split['enqueue_ms'], 2)} | {_f(split['copy_ms'], 2)} "
                   f"| {_f(split['hash_tail_ms'], 2)} | {_f(at_link, 2)} | {_f(split['prepare_ms'], 2)} "
                   f"| {_f(split['library_ms'], 2)} | {_f(split['results_ms'], 2)} |")
    if not out:
        return []
    return ["", "GPU path loads of RAM hits, split (ms, medians): the load on the serving stream's events; the "
            "call on the host; its queuing of the copies; the device from the call's start to the last copy's "
            "end; the hashing after that; the bytes at the measured link; then the Python package's share: "
            "its marshaling, the C call as Python sees it, the results.", "",
            "| model | phase | doc tokens | batch | load | call | queuing | copies | hash tail | at the link "
            "| Python: marshaling | C call | results |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"] + out


def _ratio(a, base):
    return f"{a / base:.2f}x" if a is not None and base else "-"


def _get_ms(r):
    """Time inside get_batch; older records have only the whole load call."""
    return r.get("get_batch_ms") or r.get("load_call_ms")


def _best_copy(results, model, links):
    mem = _med([l.get("host_memcpy_best_gbps") for l in links if l.get("host_memcpy_best_gbps")])
    bench = results.get("host_bench", {}).get(model, {}).get("memcpy_best_gbps")
    return max(x for x in (mem, bench, 0.0) if x is not None) or None


def _reps(results):
    return sorted({w.get("spec", {}).get("rep") for w in results["workers"]} - {None})


def _even(rate, measured):
    if rate is None:
        return "never (the suffix alone costs more)"
    verdict = "beats recompute" if measured and measured >= rate else "slower than recompute"
    return f"{rate:.1f} ({verdict} at {measured:.2f})" if measured else f"{rate:.1f}"


def _machine(results):
    for w in results["workers"]:
        m = w.get("machine")
        if m:
            return (f"{m.get('gpu')}, {m.get('cpus')} CPUs, torch {m.get('torch')}, CUDA {m.get('cuda')}, "
                    f"Python {m.get('python')}, Linux {m.get('kernel')}")
    return "unknown"
