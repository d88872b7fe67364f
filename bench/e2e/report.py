"""Summaries of worker results and the markdown table (no torch needed)."""
import workload as wl

ARM_TITLES = {
    "recompute": "(a) recompute every revisit (GPU cache only)",
    "ram": "(b) kvtier RAM tier",
    "ram_restart": "(c) RAM tier after kill + restart",
    "disk_restart": "(d) disk tier after restart, RAM tier off (O_DIRECT)",
}


def _r(x, nd=1):
    return None if x is None else round(float(x), nd)


def summarize_pass(p):
    reqs = p.get("requests", [])
    first = [r for r in reqs if r.get("kind") == "first"]
    rev = [r for r in reqs if r.get("kind") == "revisit"]
    out = {"kv_dtype": p.get("kv_dtype"), "requests": len(reqs), "first_visits": len(first),
           "revisits": len(rev)}
    for name, rs in (("first", first), ("revisit", rev)):
        t = [r["ttft_ms"] for r in rs]
        out[f"{name}_ttft_ms_median"] = _r(wl.median(t), 2)
        out[f"{name}_ttft_ms_p90"] = _r(wl.percentile(t, 90), 2)
    tok = {k: sum(r.get(k, 0) for r in rev) for k in
           ("prompt_tokens", "computed_tokens", "gpu_tokens", "ram_tokens", "disk_tokens", "kvtier_tokens")}
    out["revisit_tokens"] = tok
    out["revisit_bytes_loaded"] = sum(r.get("bytes_loaded", 0) for r in rev)
    load_s = sum(r.get("load_ms", 0.0) for r in rev) / 1e3
    get_s = sum(r.get("get_ms", 0.0) for r in rev) / 1e3
    out["revisit_load_gbps"] = _r(out["revisit_bytes_loaded"] / load_s / 1e9, 2) if load_s > 0 else None
    out["revisit_get_gbps"] = _r(out["revisit_bytes_loaded"] / get_s / 1e9, 2) if get_s > 0 else None
    loaded = [r for r in rev if r.get("kvtier_tokens")]
    if loaded:
        out["revisit_load_ms_median"] = _r(wl.median([r["load_ms"] for r in loaded]), 2)
        out["revisit_forward_ms_median"] = _r(wl.median([r["forward_ms"] for r in loaded]), 2)
        out["load_us_per_token"] = _r(sum(r["load_ms"] for r in loaded) * 1e3
                                      / sum(r["kvtier_tokens"] for r in loaded), 2)
    if first:
        out["recompute_us_per_token"] = _r(wl.median([r["ttft_ms"] * 1e3 / r["prompt_tokens"]
                                                      for r in first]), 2)
    out["unreconciled"] = sum(1 for r in reqs if not r.get("reconciled", False))
    saves = [r["save"] for r in reqs if "save" in r]
    if saves:
        out["saved_blocks"] = sum(s.get("saved", 0) for s in saves)
        out["save_declined"] = sum(s.get("declined", 0) for s in saves)
        out["save_failed"] = sum(s.get("failed", 0) for s in saves)
        out["fp8_clamped_values"] = sum(s.get("clamped", 0) for s in saves)
        fs = [r["save"]["save_s"] * 1e3 for r in first if "save" in r]
        out["first_visit_save_ms_median"] = _r(wl.median(fs), 1)
    checks = p.get("checks", [])
    if checks:
        out["checks"] = checks
        out["check_summary"] = check_summary(checks, p.get("kv_dtype"))
    if p.get("errors"):
        out["errors"] = p["errors"]
    return out


def check_summary(checks, kv_dtype):
    """One line: bit-exactness on the same kernels and the worst deviation elsewhere."""
    parts = []
    good = [c for c in checks if "error" not in c]
    if len(good) < len(checks):
        parts.append(f"{len(checks) - len(good)} check(s) failed to run")
    if not good:
        return "; ".join(parts) or "no checks"
    kv = all(c["kv_vs_first_visit_recompute"]["bitexact"] for c in good)
    lg = all(c["logits_vs_same_kernels"]["bitexact"] for c in good)
    parts.append(f"KV {'bit-exact' if kv else 'DIFFERS'}, logits {'bit-exact' if lg else 'DIFFER'} "
                 f"vs same-kernel recompute")
    for key, label in (("logits_vs_prefix_then_suffix", "prefix+suffix recompute"),
                       ("logits_vs_one_pass_prefill", "one-pass prefill"),
                       ("logits_vs_bf16_kv", "bf16 KV")):
        vals = [c[key] for c in good if key in c]
        if vals:
            rel = max((v["rel_to_max"] or 0.0) for v in vals)
            cos = min(v["cosine"] for v in vals)
            am = all(v["argmax_equal"] for v in vals)
            parts.append(f"vs {label}: max rel {rel:.2g}, cos {cos:.5f}, argmax {'same' if am else 'differs'}")
    return "; ".join(parts)


def _fmt(x, nd=1):
    return "–" if x is None else f"{x:.{nd}f}"


def _tokens(t):
    if not t or not t.get("prompt_tokens"):
        return "–"
    return (f"{t['computed_tokens']:,} / {t['gpu_tokens']:,} / {t['ram_tokens']:,} / {t['disk_tokens']:,} "
            f"of {t['prompt_tokens']:,}")


def markdown(results):
    m = results.get("meta", {})
    lines = ["# kvtier end-to-end prefix reuse", ""]
    lines.append(f"- date: {m.get('date')}; host: {m.get('host')}; GPU: {m.get('gpu')}")
    lines.append(f"- versions: {m.get('versions')}")
    lines.append(f"- store root: {m.get('store_root')} ({m.get('store_fs')}); /dev/shm free: "
                 f"{m.get('shm_free_gib')} GiB; RAM tier option: {m.get('ram_tier_probe')}")
    a = results.get("args", {})
    lines.append(f"- workload: {a.get('docs')} documents of ~{a.get('doc_tokens')} tokens "
                 f"(+-{a.get('doc_jitter')}), {a.get('question_tokens')}-token new question per visit, "
                 f"{a.get('rounds')} rounds (a, b), {a.get('restart_rounds')} rounds after restart (c, d); "
                 f"simulated GPU prefix cache {a.get('gpu_cache_tokens')} tokens (LRU)")
    links = results.get("links", {})
    lines.append(f"- measured links: pinned H2D {links.get('h2d_gbps_median')} GB/s (median of workers' "
                 f"256 MiB copies); disk O_DIRECT read {links.get('disk_read_gbps')} GB/s "
                 f"(2 MiB reads, {links.get('disk_read_threads')} threads, a file written with O_DIRECT beside the "
                 f"stores)")
    lines.append("")
    lines.append("Tokens by source are summed over revisits: computed / GPU hit / kvtier RAM / kvtier disk. "
                 "TTFT is from token ids to next-token logits on the host, in ms (median / p90).")
    lines.append("")
    lines.append("| model | KV | arm | rep | RAM source | first visit TTFT | revisit TTFT | revisit tokens "
                 "(computed / GPU / RAM / disk) | bytes loaded | load GB/s | µs/token recompute / load "
                 "| correctness |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for w in results.get("workers", []):
        for s in w.get("summary", []):
            lines.append("| " + " | ".join([
                w.get("model", "?"), s.get("kv_dtype") or "-", ARM_TITLES.get(w.get("arm"), w.get("arm")),
                str(w.get("rep")), w.get("store_mode") or "-",
                f"{_fmt(s.get('first_ttft_ms_median'))} / {_fmt(s.get('first_ttft_ms_p90'))}",
                f"{_fmt(s.get('revisit_ttft_ms_median'))} / {_fmt(s.get('revisit_ttft_ms_p90'))}",
                _tokens(s.get("revisit_tokens")),
                f"{s.get('revisit_bytes_loaded', 0) / 1e9:.2f} GB",
                _fmt(s.get("revisit_load_gbps"), 2),
                f"{_fmt(s.get('recompute_us_per_token'), 2)} / {_fmt(s.get('load_us_per_token'), 2)}",
                (s.get("check_summary") or "–") + (f"; {s['unreconciled']} unreconciled"
                                                  if s.get("unreconciled") else ""),
            ]) + " |")
    if any("page cache" in (w.get("store_mode") or "") for w in results.get("workers", [])):
        lines.append("")
        lines.append("In rows whose RAM source is the OS page cache, kvtier counts those reads as disk hits: "
                     "their 'disk' tokens came from the page cache (buffered segment I/O).")
    failed = [w for w in results.get("workers", []) if w.get("problem")]
    if failed or results.get("notes"):
        lines.append("")
        lines.append("## Problems and notes")
        for w in failed:
            lines.append(f"- {w['name']}: {w['problem']}")
        for n in results.get("notes", []):
            lines.append(f"- {n}")
    lines.append("")
    return "\n".join(lines)
