"""kvtier: a persistent, crash-safe store of LLM KV-cache blocks.

Python bindings over the C ABI (libkvtier.so, include/kvtier/c_api.h) with
ctypes: nothing to compile, the same package works on any CPython 3 that
can load the library, and the GIL is released during every kvtier call.

    with kvtier.Store("/nvme/kv", capacity_bytes=64 << 30) as store:
        ns = store.register_namespace(model_id="Qwen/Qwen3-0.6B", dtype="bf16")
        ns.put(b"key", numpy_array)
        ns.get_into(b"key", out_array)
"""
from ._errors import Code, KvtierError
from ._lib import lib as _lib
from .store import Namespace, Store, destroy_store


def abi_version():
    """(major, minor) of the loaded libkvtier."""
    v = _lib.kvtier_abi_version()
    return v >> 16, v & 0xFFFF


__all__ = ["Code", "KvtierError", "Namespace", "Store", "abi_version", "destroy_store"]
