"""Imports vLLM's real offloading code from a source checkout, on CPU.

KVTIER_VLLM_SRC names a vLLM checkout (the folder holding vllm/). Its
offloading modules (vllm/v1/kv_offload, the OffloadingConnector's stats) run
as they are; what is replaced is only what needs a GPU or a newer stack than
Debian 12 has (torch 1.13, pydantic 1, typing_extensions 4.4), each said
below. Nothing of vLLM is copied here.
"""
import dataclasses
import os
import sys
import typing

from engine_loader import FolderPackages, stand_in_module

# Packages whose __init__ imports the whole engine (CUDA, torch 2 internals):
# loaded as plain folders, their modules imported one by one as used.
_NO_INIT = {
    "vllm",
    "vllm.distributed",
    "vllm.distributed.kv_transfer",
    "vllm.distributed.kv_transfer.kv_connector.v1",
    "vllm.model_executor",
}


_loaded = None


def load(src):
    """Makes `import vllm.v1.kv_offload...` import the checkout at `src`."""
    global _loaded
    if _loaded is not None:
        if _loaded != src:
            raise RuntimeError(f"vLLM already loaded from {_loaded}")
        return
    _loaded = src
    if not os.path.isdir(os.path.join(src, "vllm", "v1", "kv_offload", "tiering")):
        raise RuntimeError(f"{src} is not a vLLM checkout with vllm/v1/kv_offload/tiering")
    sys.path.insert(0, src)
    sys.meta_path.insert(0, FolderPackages(src, _NO_INIT))

    import torch
    import torch.library
    import typing_extensions

    # torch-2 and typing_extensions-4.5 names read at import time only.
    if not hasattr(typing_extensions, "deprecated"):
        typing_extensions.deprecated = lambda *a, **k: (lambda f: f)
    if not hasattr(torch.library, "infer_schema"):
        torch.library.infer_schema = lambda *a, **k: ""
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "uint16", "uint32", "uint64"):
        if not hasattr(torch, name):
            setattr(torch, name, torch.uint8)
    if not hasattr(torch, "Event"):
        torch.Event = type("Event", (), {})

    # vllm.config needs pydantic 2; the offloading modules take two names from
    # it, for annotations.
    stand_in_module("vllm.config", VllmConfig=type("VllmConfig", (), {}), KVTransferConfig=type("KVTransferConfig", (), {}))

    # The KV-connector framework's metrics base pulls in the connector
    # registry and the config system; OffloadingConnectorStats (real) subclasses
    # its dataclass, which has one field.
    @dataclasses.dataclass
    class KVConnectorStats:
        data: dict = dataclasses.field(default_factory=dict)

    class KVConnectorPromMetrics:
        def __init__(self, *a, **k):
            pass

    stand_in_module("vllm.distributed.kv_transfer.kv_connector.v1.metrics", KVConnectorStats=KVConnectorStats,
            KVConnectorPromMetrics=KVConnectorPromMetrics, PromMetric=typing.Any,
            PromMetricT=typing.TypeVar("PromMetricT"))
    # GPU side: the CUDA kernels, torch-2 custom-op registration, and the
    # shared-memory broadcast's torch.distributed internals (the offload region
    # uses its /dev/shm free-space check).
    stand_in_module("vllm._custom_ops")
    stand_in_module("vllm.utils.torch_utils", PIN_MEMORY=False)
    stand_in_module("vllm.distributed.device_communicators.shm_broadcast", check_shm_free_space=lambda *a, **k: None)
    # Process groups (torch.distributed of torch 2): vllm.logger's *_once
    # helpers ask whether this is the first local rank. One process here.
    stand_in_module("vllm.distributed.parallel_state", is_local_first_rank=lambda: True)
