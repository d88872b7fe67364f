"""The e2e run's tables (bench/e2e/engine_report.py) from a small results
file with known numbers: medians, ratios to recompute, the disk prediction
and the read rate that would tie with recompute, and one column per
repetition."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "e2e"))

import engine_report  # noqa: E402

MB = 1_000_000


def req(arm, ttft, load=0.0, fwd=0.0, loaded=0, call=None):
    return {"arm": arm, "batch": 1, "doc_tokens": 2750, "ttft_ms": ttft, "load_ms": load, "forward_ms": fwd,
            "load_call_ms": load if call is None else call, "loaded_bytes": loaded}


def worker(phase, rep, gpu_ttft, host_ttft):
    return {"spec": {"model": "m", "phase": phase, "rep": rep},
            "links": {"h2d_pinned_gbps": 50.0, "host_memcpy_best_gbps": 40.0},
            "requests": [req("recompute", 100.0, fwd=100.0),
                         req("gpu", gpu_ttft, load=10.0, fwd=5.0, loaded=400 * MB),
                         req("host", host_ttft, load=20.0, fwd=5.0, loaded=400 * MB)],
            "checks": [{"arm": "gpu", "tokens": 2774, "bit_exact": True, "vs_full_prefill_rel_diff": 0.01,
                        "full_prefill_top2_gap_rel": 0.002, "same_token_as_full_prefill": False}]}


def results():
    return {"date": "d", "disk": {"m/rep0": {"gbps": 2.0, "threads": 4}},
            "workers": [worker("warm", 0, 20.0, 40.0), worker("warm", 1, 30.0, 50.0),
                        worker("disk", 0, 210.0, 220.0)]}


def table_row(md, phase):
    return next(line for line in md.splitlines() if line.startswith(f"| m | {phase} | 2750 | 1 |"))


def test_ratios_are_medians_against_recompute_with_the_links():
    md = engine_report.markdown(results())
    row = table_row(md, "warm")
    assert "| 100.0 | 25.0 (0.25x) | 45.0 (0.45x) |" in row  # medians of both repetitions
    assert "| 10.0 (40.0, 0.80) |" in row  # 400 MB in 10 ms = 40 GB/s of a 50 GB/s link
    assert "| 20.0 (0.50) |" in row  # 400 MB in 20 ms = 20 GB/s of a 40 GB/s memcpy


def test_the_disk_row_predicts_and_says_what_rate_would_tie():
    row = table_row(engine_report.markdown(results()), "disk")
    # 400 MB at 2 GB/s = 200 ms, plus the 5 ms suffix: 205 ms; 210 ms measured.
    assert "| 205.0 (1.02x) |" in row
    # Recompute 100 ms less the 5 ms suffix leaves 95 ms for 400 MB: 4.2 GB/s.
    assert "4.2 (slower than recompute at 2.00)" in row


def test_each_repetition_has_its_column():
    md = engine_report.markdown(results())
    assert "| model | phase | doc tokens | batch | rep 0 | rep 1 |" in md
    assert "| m | warm | 2750 | 1 | 0.20x / 0.40x | 0.30x / 0.50x |" in md


def test_a_token_that_differs_is_shown_against_its_top_two_gap():
    md = engine_report.markdown(results())
    assert "0/3 give the full prefill's first token" in md
    assert "Of the 3 that differ, 3 have the full prefill's top two logits closer" in md


def test_host_rate_counts_get_batch_alone_against_the_best_copy_of_the_run():
    r = results()
    for w in r["workers"]:
        for q in w["requests"]:
            if q["arm"] == "host":
                q["get_batch_ms"] = 8.0  # of a 20 ms load: the copies to the GPU are not get_batch's
    r["host_bench"] = {"m": {"block_bytes": 1 << 20, "memcpy_best_gbps": 80.0, "memcpy_best_kernel": "k",
                             "memcpy_best_threads": 16, "get_batch_gbps": 60.0, "get_batch_ratio": 0.75}}
    md = engine_report.markdown(r)
    # 400 MB in 8 ms = 50 GB/s, against the bench's 80 GB/s (above the worker's 40).
    assert "| 50.0 (0.62) |" in table_row(md, "warm")
    assert "Best host copy for m's blocks (1024 KiB; kvtier-host-bench): 80.0 GB/s (k, 16 threads)" in md


def test_a_host_rate_above_its_copy_limit_says_the_limit_was_not_the_best():
    r = results()
    md = engine_report.markdown(r)
    assert "was not the host's best copy" not in md  # 20 GB/s against a 40 GB/s memcpy
    for w in r["workers"]:
        for q in w["requests"]:
            if q["arm"] == "host":
                q["get_batch_ms"] = 8.0  # 400 MB in 8 ms = 50 GB/s, above the worker's 40
    md = engine_report.markdown(r)
    assert "| 50.0 (1.25) |" in table_row(md, "warm")
    assert "below get_batch itself in 2 row(s) (m disk 2750x1, m warm 2750x1): it was not the host's best copy" in md


def test_a_phase_without_the_gpu_arm_shows_the_host_arm_alone():
    r = results()
    w = worker("service-restart", 0, 20.0, 40.0)
    w["requests"] = [q for q in w["requests"] if q["arm"] != "gpu"]
    r["workers"].append(w)
    md = engine_report.markdown(r)
    assert "| - | 40.0 (0.40x) |" in table_row(md, "service-restart")
    assert "| m | service-restart | 2750 | 1 | - / 0.40x | - |" in md


def test_a_run_cut_short_reports_the_phases_that_finished(tmp_path):
    # engine_run rewrites results.md after every phase: a run stopped by a
    # machine's time limit after one phase still has its table.
    import engine_run
    r = results()
    r["workers"] = r["workers"][:1]
    engine_run.write_report(str(tmp_path), r)
    md = (tmp_path / "results.md").read_text()
    assert "| 25.0 (0.25x)" not in md and "| 20.0 (0.20x) | 40.0 (0.40x) |" in table_row(md, "warm")
    r["workers"] = results()["workers"]
    engine_run.write_report(str(tmp_path), r)
    assert "| 25.0 (0.25x) | 45.0 (0.45x) |" in table_row((tmp_path / "results.md").read_text(), "warm")


def test_gpu_loads_are_split_into_host_copies_and_the_checks_tail():
    r = results()
    for w, tail in zip(r["workers"], (0.1, 0.3, 0.2)):
        for q in w["requests"]:
            if q["arm"] == "gpu" and w["spec"]["phase"] == "warm":
                q["gpu_load_split"] = {"call_ms": 9.5, "enqueue_ms": 2.0, "copy_ms": 8.5, "hash_tail_ms": tail,
                                       "prepare_ms": 0.1, "library_ms": 9.7, "results_ms": 0.05}
    md = engine_report.markdown(r)
    assert ("| model | phase | doc tokens | batch | load | call | queuing | copies | hash tail | at the link "
            "| Python: marshaling | C call | results |") in md
    # Medians of the two warm repetitions; 400 MB at the 50 GB/s link is 8 ms.
    assert "| m | warm | 2750 | 1 | 10.00 | 9.50 | 2.00 | 8.50 | 0.20 | 8.00 | 0.10 | 9.70 | 0.05 |" in md
    split = md.split("GPU path loads of RAM hits")[1].split("O_DIRECT reads")[0]
    assert "| m | disk |" not in split  # its loads had no RAM hits: nothing to split
