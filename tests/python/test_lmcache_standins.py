"""CI's LMCache stand-ins (standins/lmcache) against LMCache's real modules.

Runs when KVTIER_LMCACHE_SRC names an LMCache checkout. Each side is described
in a process of its own (both are named `lmcache`): the key types' fields,
which are required and their defaults; L2AdapterInterface's abstract methods
and the parameters of every method the kvtier adapter implements or calls.
A stand-in that differs would let a test pass in CI where LMCache would fail.
"""
import os

import pytest

from engine_loader import describe_in_child

SRC = os.environ.get("KVTIER_LMCACHE_SRC", "")
HERE = os.path.dirname(os.path.abspath(__file__))

DESCRIBE = r"""
import inspect, json, os, sys
sys.path.insert(0, HERE)
if MODE == "real":
    import lmcache_source
    lmcache_source.load(SRC)
else:
    sys.path.insert(0, os.path.join(HERE, "standins"))
from engine_loader import describe_type
from lmcache.v1.distributed import api
from lmcache.v1.distributed.l2_adapters import base
out = {n: describe_type(getattr(api, n)) for n in ("ObjectKey", "EncodedObjectKey", "KeyEntry", "KeyListPage")}
out["kv_rank"] = api.ObjectKey.ComputeKVRank(world_size=4, global_rank=2, local_world_size=4, local_rank=2)
for bad in ({"model_name": "a@b"}, {"cache_salt": "x/y"}, {"object_group_id": -1}):
    try:
        api.ObjectKey(**dict({"chunk_hash": b"h", "model_name": "m", "kv_rank": 0}, **bad))
        out[str(bad)] = "accepted"
    except ValueError:
        out[str(bad)] = "refused"
I = base.L2AdapterInterface
out["abstract"] = sorted(I.__abstractmethods__)
out["params"] = {n: list(inspect.signature(getattr(I, n)).parameters)
                 for n in ("__init__", "submit_store_task", "pop_completed_store_tasks", "submit_lookup_and_lock_task",
                           "query_lookup_and_lock_result", "submit_unlock", "submit_load_task", "query_load_result",
                           "delete", "list_l2_keys", "get_usage", "report_status", "close", "register_listener",
                           "_notify_keys_stored", "_notify_keys_accessed", "_notify_keys_deleted")}
out["supports_global_eviction"] = isinstance(inspect.getattr_static(I, "supports_global_eviction"), property)
print(json.dumps(out))
"""


@pytest.mark.skipif(not SRC, reason="KVTIER_LMCACHE_SRC does not name an LMCache checkout")
def test_standins_match_lmcache():
    real, ours = describe_in_child(DESCRIBE, "real", SRC, HERE), describe_in_child(DESCRIBE, "standin", SRC, HERE)
    assert real.keys() == ours.keys()
    for key in real:
        assert ours[key] == real[key], key
