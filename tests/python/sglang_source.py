"""Imports SGLang's real HiCache code from a source checkout, on CPU.

KVTIER_SGLANG_SRC names an SGLang checkout (the folder holding python/sglang,
or python/ itself). What runs as it is: the storage interface and factory
(mem_cache/hicache_storage.py, mem_cache/storage/backend_factory.py), the host
pools (mem_cache/memory_pool_host.py), HiCacheController
(managers/cache_controller.py), the page hashing (mem_cache/utils.py) and the
metrics types (observability/metrics_collector.py).

What is replaced, each said below, is only what needs a GPU, triton, several
processes, or a newer torch than Debian 12's 1.13. Third-party packages
Debian 12 lacks (PIL, transformers, starlette, ...) are mocked only when an
SGLang module imports them; none is on the storage path. Nothing of SGLang is
copied here.
"""
import importlib.abc
import importlib.machinery
import os
import sys

from engine_loader import stand_in_module

_loaded = None

# Single-process stand-ins for SGLang's process groups; tests set these to
# act as one rank of several.
RANKS = {"tp_rank": 0, "tp_size": 1, "dp_attention": False, "attn_tp_rank": 0, "attn_tp_size": 1,
         "attn_dp_rank": 0}


class _Packages(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`sglang` as a plain folder (its __init__ loads the whole frontend and
    patches transformers); GPU kernel packages and packages Debian lacks as
    SGLang's own triton mock, the latter only when SGLang imports them."""

    _GPU = ("sglang.jit_kernel", "sgl_kernel", "sgl_kernel_npu")

    def __init__(self, src, mock_cls):
        self._src = src
        self._mock = mock_cls
        self.mocked = []

    def _importer_is_sglang(self):
        f = sys._getframe(2)
        while f is not None:
            name = f.f_code.co_filename
            if not name.startswith("<frozen"):
                return name.startswith(os.path.join(self._src, "sglang"))
            f = f.f_back
        return False

    def find_spec(self, name, path=None, target=None):
        if name == "sglang":
            spec = importlib.machinery.ModuleSpec(name, self, is_package=True)
            spec.submodule_search_locations = [os.path.join(self._src, "sglang")]
            return spec
        if any(name == g or name.startswith(g + ".") for g in self._GPU):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        if name.split(".")[0] == "sglang" or not self._importer_is_sglang():
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            try:
                if finder.find_spec(name, path, target) is not None:
                    return None
            except (ImportError, AttributeError, ValueError):
                continue
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        if spec.name == "sglang":
            return None
        self.mocked.append(spec.name)
        return self._mock(spec.name)

    def exec_module(self, module):
        pass


def _torch2_names():
    """torch-2 names SGLang reads at import time, or calls on CPU."""
    import torch
    import torch.autograd.grad_mode
    import torch.library

    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
                 "float4_e2m1fn_x2"):
        if not hasattr(torch, name):  # only finfo() and dict keys at import
            setattr(torch, name, torch.float16)
    for name in ("uint16", "uint32", "uint64"):
        if not hasattr(torch, name):
            setattr(torch, name, torch.int64)
    if "torch.utils._contextlib" not in sys.modules:
        stand_in_module("torch.utils._contextlib",
                _DecoratorContextManager=torch.autograd.grad_mode._DecoratorContextManager)

    class Library:  # custom-op registration of CUDA kernels (torch 2's FRAGMENT)
        def __init__(self, *a, **k):
            pass

        def define(self, *a, **k):
            pass

        def impl(self, *a, **k):
            pass

        def _register_fake(self, *a, **k):
            pass

    torch.library.Library = Library
    torch.library.infer_schema = lambda *a, **k: "()"
    if not hasattr(torch.float16, "itemsize"):  # torch 2.1: the host pools size their buffers with it
        import ctypes
        import gc

        slots = gc.get_referents(torch.dtype.__dict__)[0]
        slots["itemsize"] = property(lambda dt: torch.empty((), dtype=dt).element_size())
        ctypes.pythonapi.PyType_Modified(ctypes.py_object(torch.dtype))
    if not hasattr(torch.cpu, "is_available"):
        torch.cpu.is_available = lambda: True

    class Stream:  # the controller makes its copy streams in __init__
        def synchronize(self):
            pass

        def wait_stream(self, other):
            pass

    cpu = stand_in_module("kvtier_test_cpu_device", Stream=Stream, Event=Stream, synchronize=lambda *a: None,
                  current_stream=lambda *a: Stream(), stream=lambda s: _NullContext(),
                  is_available=lambda: False)
    torch.get_device_module = lambda device=None: cpu


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _stand_ins(src):
    # Process groups (torch.distributed with NCCL/gloo among ranks): one
    # process here, whose ranks the tests set in RANKS. The package keeps its
    # real folder for its light submodules (utils).
    stand_in_module("sglang.srt.distributed", __path__=[os.path.join(src, "sglang", "srt", "distributed")],
            get_tensor_model_parallel_rank=lambda: RANKS["tp_rank"],
            get_tensor_model_parallel_world_size=lambda: RANKS["tp_size"])

    def create_custom_parallel_group(group_ranks, backend):
        raise RuntimeError("one process here: no process groups")

    stand_in_module("sglang.srt.distributed.parallel_state", create_custom_parallel_group=create_custom_parallel_group)
    stand_in_module("sglang.srt.layers.dp_attention",
            is_dp_attention_enabled=lambda: RANKS["dp_attention"],
            get_attention_tp_rank=lambda: RANKS["attn_tp_rank"],
            get_attention_tp_size=lambda: RANKS["attn_tp_size"],
            get_attention_dp_rank=lambda: RANKS["attn_dp_rank"])

    # The device pools hold the KV cache in GPU memory, written by triton
    # kernels. The host pools and the controller read only the attributes
    # below, which DevicePool (in the tests) provides.
    class KVCache:
        def register_layer_transfer_counter(self, counter):
            self.layer_transfer_counter = counter

    class MHATokenToKVPool(KVCache):
        pass

    class MLATokenToKVPool(KVCache):
        pass

    class DSATokenToKVPool(MLATokenToKVPool):
        pass

    class MambaPool:
        pass

    class HybridLinearKVPool(KVCache):
        pass

    # metrics_collector (real: StorageMetrics, StorageMetricsCollector) takes
    # three names from modules that import every model's config (transformers)
    # and the disaggregation transfer engines; only the scheduler's
    # collectors use them.
    import enum

    stand_in_module("sglang.srt.server_args", ServerArgs=type("ServerArgs", (), {}))
    stand_in_module("sglang.srt.disaggregation.utils",
            DisaggregationMode=enum.Enum("DisaggregationMode", {"NULL": "null", "PREFILL": "prefill",
                                                                "DECODE": "decode"}))
    stand_in_module("sglang.srt.model_executor.forward_batch_info", ForwardMode=type("ForwardMode", (), {}))

    stand_in_module("sglang.srt.mem_cache.memory_pool", KVCache=KVCache, MHATokenToKVPool=MHATokenToKVPool,
            MLATokenToKVPool=MLATokenToKVPool, DSATokenToKVPool=DSATokenToKVPool, MambaPool=MambaPool,
            HybridLinearKVPool=HybridLinearKVPool)


def load(src):
    """Makes `import sglang.srt...` import the checkout at `src`."""
    global _loaded
    if os.path.isdir(os.path.join(src, "python", "sglang")):
        src = os.path.join(src, "python")
    src = os.path.abspath(src)
    if _loaded is not None:
        if _loaded != src:
            raise RuntimeError(f"SGLang already loaded from {_loaded}")
        return
    if not os.path.isfile(os.path.join(src, "sglang", "srt", "mem_cache", "hicache_storage.py")):
        raise RuntimeError(f"{src} is not an SGLang checkout with sglang/srt/mem_cache/hicache_storage.py")
    _loaded = src
    sys.path.insert(0, src)
    sys.meta_path.insert(0, _Packages(src, None))
    from sglang._triton_stub import _MockModule, install  # SGLang's own stand-in for triton

    class _StubMeta(type):  # PIL's Image.Image and the like, as annotations
        def __getattr__(cls, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _StubMeta(name, (), {})

        def __call__(cls, *a, **k):
            return None

    class _Mock(_MockModule):
        def __getattr__(self, name):
            if name[:1].isupper():
                return _StubMeta(name, (), {"__module__": self.__name__})
            return super().__getattr__(name)

    sys.meta_path[0]._mock = _Mock
    install()
    _torch2_names()
    _stand_ins(src)


def mocked_modules():
    for finder in sys.meta_path:
        if isinstance(finder, _Packages):
            return list(finder.mocked)
    return []
