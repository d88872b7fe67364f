"""CI's vLLM stand-ins (standins/) against vLLM's real modules.

Runs when KVTIER_VLLM_SRC names a vLLM checkout. Each side is described in a
process of its own (both are named `vllm`): dataclass fields and which are
required, enum members, the tier base's constructor and abstract methods.
The stand-ins may leave out optional fields the tier never sets, but nothing
may be required, accepted or defaulted differently, or a test would pass in
CI where vLLM rejects the adapter.
"""
import os

import pytest

from engine_loader import describe_in_child

SRC = os.environ.get("KVTIER_VLLM_SRC", "")
HERE = os.path.dirname(os.path.abspath(__file__))

DESCRIBE = r"""
import inspect, json, os, sys
sys.path.insert(0, HERE)
if MODE == "real":
    import vllm_source
    vllm_source.load(SRC)
else:
    sys.path.insert(0, os.path.join(HERE, "standins"))
import importlib
from engine_loader import describe_type
NAMES = {
    "vllm.v1.kv_offload.base": ["Medium", "Locality", "ReqContext", "LookupResult", "OffloadPolicy",
                                "RequestOffloadingContext", "OffloadingEvent", "OffloadingMetricMetadata",
                                "OffloadingCounterMetadata", "OffloadingKVEventsConfig", "ScheduleEndContext",
                                "make_offload_key"],
    "vllm.v1.kv_offload.config": ["OffloadingGroupConfig", "OffloadingModelConfig", "OffloadingCacheConfig",
                                  "OffloadingParallelConfig", "OffloadingConfig"],
    "vllm.v1.kv_offload.tiering.base": ["TransferJob", "JobResult", "SecondaryTierManager"],
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics": ["OffloadingConnectorStats"],
}
out = {}
for mod, names in NAMES.items():
    m = importlib.import_module(mod)
    for n in names:
        o = getattr(m, n)
        d = describe_type(o)
        if n == "SecondaryTierManager":
            d["init"] = list(inspect.signature(o.__init__).parameters)
            d["abstract"] = sorted(o.__abstractmethods__)
            d["methods"] = sorted(k for k, v in vars(o).items() if callable(v) and not k.startswith("__"))
        if n == "OffloadingConnectorStats":
            d["methods"] = {k: list(inspect.signature(getattr(o, k)).parameters)
                            for k in ("increase_counter", "is_empty", "reduce")}
        if n == "make_offload_key":
            d["sample"] = o(b"abc", 7).hex()
        out[mod + "." + n] = d
print(json.dumps(out))
"""


def _describe(mode):
    return describe_in_child(DESCRIBE, mode, SRC, HERE)


@pytest.mark.skipif(not SRC, reason="KVTIER_VLLM_SRC does not name a vLLM checkout")
def test_standins_match_vllm():
    real, ours = _describe("real"), _describe("standins")
    problems = []
    for name, o in ours.items():
        r = real[name]
        if "fields" in o:
            for f, required in o["fields"].items():
                if f not in r["fields"]:
                    problems.append(f"{name}.{f}: not a field of vLLM's")
                elif required != r["fields"][f]:
                    problems.append(f"{name}.{f}: required={required}, vLLM's {r['fields'][f]}")
                elif f in o["defaults"] and o["defaults"][f] != r["defaults"].get(f):
                    problems.append(f"{name}.{f}: default {o['defaults'][f]}, vLLM's {r['defaults'].get(f)}")
            for f, required in r["fields"].items():
                if required and f not in o["fields"]:
                    problems.append(f"{name}.{f}: required by vLLM, missing")
            if o["frozen"] != r["frozen"]:
                problems.append(f"{name}: frozen={o['frozen']}, vLLM's {r['frozen']}")
        for key in ("members", "init", "abstract", "sample"):
            if key in o and o[key] != r.get(key):
                problems.append(f"{name} {key}: {o[key]} != vLLM's {r.get(key)}")
        if "methods" in o and isinstance(o["methods"], list):
            missing = sorted(set(r["methods"]) - set(o["methods"]))
            if missing:
                problems.append(f"{name}: vLLM's base has methods the stand-in lacks: {missing}")
        if "methods" in o and isinstance(o["methods"], dict):
            for k, params in o["methods"].items():
                if params != r["methods"][k]:
                    problems.append(f"{name}.{k}{params} != vLLM's {r['methods'][k]}")
    assert not problems, "\n".join(problems)
