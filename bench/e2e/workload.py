"""The synthetic workload: documents of random token ids revisited round-robin,
each visit with a new question. Deterministic from a seed, so every process
(and a restarted one) regenerates the same prompts. The token functions need
numpy; the statistics helpers need nothing (the orchestrator uses them)."""
import math
import statistics

WARMUP_DOC = -1
CHECK_VISIT = 10_000  # visit index of the correctness-check questions


def doc_tokens(seed, doc, mean_tokens, jitter, vocab):
    import numpy as np
    rng = np.random.default_rng([seed, 1, doc + 2])
    n = int(mean_tokens + (rng.integers(-jitter, jitter + 1) if jitter else 0))
    return rng.integers(0, vocab, size=max(16, n), dtype=np.int64)


def question_tokens(seed, doc, visit, n, vocab):
    import numpy as np
    rng = np.random.default_rng([seed, 2, doc + 2, visit])
    return rng.integers(0, vocab, size=n, dtype=np.int64)


def prompt(seed, doc, visit, mean_tokens, jitter, question, vocab):
    import numpy as np
    return np.concatenate([doc_tokens(seed, doc, mean_tokens, jitter, vocab),
                           question_tokens(seed, doc, visit, question, vocab)])


def percentile(values, p):
    """Nearest-rank percentile (p in 0..100); None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(math.ceil(p / 100.0 * len(s))) - 1))
    return s[k]


def median(values):
    if not values:
        return None
    return float(statistics.median(values))


# ---- the processes' record files and log lines ---------------------------------------
def write_json(path, obj):
    """Writes obj to path whole (a temporary file renamed into place), so a
    reader never sees half a record."""
    import json
    import os
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
    os.replace(tmp, path)


def log(name, msg):
    import time
    print(f"[{name} {time.strftime('%H:%M:%S')}] {msg}", flush=True)
