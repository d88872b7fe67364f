"""The driver's whole process chain on a CPU (opt-in: E2E_DRIVER_TEST=1, about
a minute): orchestrator -> (a) recompute, (b) store + SIGKILL, (c) restart,
(d) restart from disk, with the real kvtier store and a stand-in model
(tests/e2e/fake_transformers). Checks that the chain runs, survives the
kill, reconciles tokens by source and writes the results files."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(os.environ.get("E2E_DRIVER_TEST") != "1",
                                reason="set E2E_DRIVER_TEST=1 to run the driver's process chain (slow)")


def test_driver_chain_on_cpu(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(HERE, "fake_transformers"),
                                         os.path.join(REPO, "src", "python"), env.get("PYTHONPATH", "")])
    out = tmp_path / "out"
    cmd = [sys.executable, os.path.join(REPO, "bench", "e2e", "prefix_reuse.py"), str(out),
           "--device", "cpu", "--models", "qwen3-0.6b", "--kv-dtypes", "bf16", "--reps", "1",
           "--docs", "3", "--doc-tokens", "70", "--doc-jitter", "3", "--question-tokens", "5",
           "--rounds", "2", "--restart-rounds", "1", "--gpu-cache-tokens", "96", "--check-docs", "1",
           "--ram-tier-gib", "0.0625", "--disk-read-gib", "0.01", "--store-root", str(tmp_path / "stores")]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    ws = {w["arm"]: w for w in res["workers"]}
    assert set(ws) == {"recompute", "ram", "ram_restart", "disk_restart"}
    assert ws["ram"]["rc"] == -9 and all(not w.get("problem") for w in ws.values()), ws
    for arm in ("ram", "ram_restart", "disk_restart"):
        s = ws[arm]["summary"][0]
        t = s["revisit_tokens"]
        assert t["kvtier_tokens"] > 0 and s["unreconciled"] == 0, (arm, s)
        assert t["computed_tokens"] + t["gpu_tokens"] + t["ram_tokens"] + t["disk_tokens"] == t["prompt_tokens"]
        assert "bit-exact" in s["check_summary"] and "DIFFER" not in s["check_summary"], s["check_summary"]
    assert ws["recompute"]["summary"][0]["revisit_tokens"]["kvtier_tokens"] == 0
    assert ws["ram_restart"]["store_open_stats"].get("recovered_from_crash") is True
    assert "| qwen3-0.6b |" in (out / "results.md").read_text()
