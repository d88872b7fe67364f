"""CI's SGLang stand-ins (standins/sglang) against SGLang's real modules.

Runs when KVTIER_SGLANG_SRC names an SGLang checkout. Each side is described
in a process of its own (both are named `sglang`): dataclass fields and which
are required, enum members, the storage base's methods and which are
abstract, and what the host pool's page accessors return for every layout
(fragment offsets and sizes, split heads' too, flat pages, the dummy page,
writes back). A
stand-in that differs would let a test pass in CI where SGLang would fail.
"""
import os

import pytest

from engine_loader import describe_in_child

SRC = os.environ.get("KVTIER_SGLANG_SRC", "")
HERE = os.path.dirname(os.path.abspath(__file__))

DESCRIBE = r"""
import inspect, json, os, sys
sys.path.insert(0, HERE)
if MODE == "real":
    import sglang_source
    sglang_source.load(SRC)
else:
    sys.path.insert(0, os.path.join(HERE, "standins"))
import torch
from sglang.srt.mem_cache import hicache_storage as hs
from sglang.srt.mem_cache.memory_pool_host import MHATokenToKVPoolHost
from sglang.srt.observability.metrics_collector import StorageMetrics
out = {}

from engine_loader import describe_type

for name in ("HiCacheStorageConfig", "HiCacheStorageExtraInfo", "PoolName", "PoolHitPolicy", "PoolTransfer",
             "PoolTransferResult"):
    out[name] = describe_type(getattr(hs, name))
out["StorageMetrics"] = describe_type(StorageMetrics)
base = hs.HiCacheStorage
out["abstract"] = sorted(base.__abstractmethods__)
out["methods"] = {n: list(inspect.signature(getattr(base, n)).parameters)
                  for n in ("register_mem_pool_host", "register_mem_host_pool_v2", "batch_exists_v2", "batch_get_v2",
                            "batch_set_v2", "batch_get_v1", "batch_set_v1", "get", "batch_get", "set", "batch_set",
                            "exists", "batch_exists", "clear", "get_stats")}
out["pool_init"] = list(inspect.signature(MHATokenToKVPoolHost.__init__).parameters)

class DevicePool:
    store_dtype, size, head_num, head_dim, layer_num, start_layer, end_layer, device = (
        torch.bfloat16, 24, 2, 4, 3, 0, 2, "cpu")

pools = {}
for layout in ("layer_first", "page_first", "page_first_direct", "page_head"):
    p = MHATokenToKVPoolHost(DevicePool(), 2.0, 0, 4, layout, pin_memory=False, device="cpu")
    p.kv_buffer.view(torch.int16).copy_(torch.arange(p.kv_buffer.numel(), dtype=torch.int16).view(p.kv_buffer.shape))
    idx = torch.tensor(list(range(4, 8)) + list(range(12, 16)), dtype=torch.int64)
    ptrs, sizes = p.get_page_buffer_meta(idx)
    d = {"size": p.size, "shape": list(p.kv_buffer.shape), "meta": [x - p.kv_buffer.data_ptr() for x in ptrs],
         "sizes": list(sizes), "page": p.get_data_page(12).view(torch.int16).tolist(),
         "dummy": list(p.get_dummy_flat_data_page().shape), "alloc": p.alloc(8).tolist()}
    p.set_from_flat_data_page(4, torch.arange(p.get_dummy_flat_data_page().numel(), dtype=torch.int16).view(torch.bfloat16))
    d["after_set"] = p.kv_buffer.view(torch.int16).flatten().tolist()[::7]
    if layout == "page_head":  # SGLang's split heads (tp_lcm_size), in 2 pieces of 1 head
        ptrs, sizes = p.get_split_heads_page_buffer_meta(idx, 2)
        d["split_meta"] = [x - p.kv_buffer.data_ptr() for x in ptrs]
        d["split_sizes"] = list(sizes)
    pools[layout] = d
out["pools"] = pools
print(json.dumps(out))
"""


def describe(mode):
    return describe_in_child(DESCRIBE, mode, SRC, HERE)


@pytest.mark.skipif(not SRC, reason="KVTIER_SGLANG_SRC does not name an SGLang checkout")
def test_standins_match_sglang():
    real, ours = describe("real"), describe("standin")
    for key in real:
        if key == "methods":
            for name, params in real[key].items():
                assert ours[key][name] == params, name
        elif key == "pools":
            for layout, d in real[key].items():
                for field, value in d.items():
                    assert ours[key][layout][field] == value, (layout, field)
        else:
            assert ours[key] == real[key], key
