"""Imports LMCache's real L2 adapter wrapper from a source checkout, on CPU.

KVTIER_LMCACHE_SRC names an LMCache checkout (the folder holding lmcache/).
What runs as it is: the L2 adapter base with its byte accounting
(l2_adapters/base.py), the key types (distributed/api.py), and each route's
loader the checkout has: MP mode's `native_plugin` loader
(l2_adapters/native_plugin_l2_adapter.py) with the NativeConnectorL2Adapter
it wraps a client in (l2_adapters/native_connector_l2_adapter.py), and the
`plugin` loader (l2_adapters/plugin_l2_adapter.py).

What is replaced, each said below, is what is native code or what pulls in
the rest of LMCache's multiprocess server (its config, serde, eviction and
IPC layers, the L1 memory manager with its CUDA allocators). Each stand-in
carries only the names those modules use. Nothing of LMCache is copied
here.
"""
import abc
import logging
import os
import sys

from engine_loader import FolderPackages, stand_in_module

_loaded = None

REAL = ("lmcache.v1.distributed.api", "lmcache.v1.distributed.l2_adapters.base")
# Each route's loader, imported when the checkout has it.
ROUTES = {
    "native_plugin": ("lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter",
                      "lmcache.v1.distributed.l2_adapters.native_plugin_l2_adapter"),
    "plugin": ("lmcache.v1.distributed.l2_adapters.plugin_l2_adapter",),
}

# Packages whose __init__ imports the whole server: plain folders here.
_NO_INIT = ("lmcache", "lmcache.v1", "lmcache.v1.distributed", "lmcache.v1.distributed.l2_adapters",
            "lmcache.v1.multiprocess")


def _standin_file(relpath, name):
    """A module of CI's stand-ins (standins/lmcache), loaded under a private
    name: the classes both CI and a real checkout's run stand in with."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, "standins", "lmcache", relpath))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_HERE = os.path.dirname(os.path.abspath(__file__))
# Bitmap is a C++ extension's fixed-size bit set: lmcache.lmcache_native in the
# checkout tested (docs/engines.md), lmcache.native_storage_ops in later ones.
Bitmap = _standin_file("native_storage_ops.py", "_kvtier_lmcache_bitmap").Bitmap
_internal = _standin_file(os.path.join("v1", "distributed", "internal_api.py"), "_kvtier_lmcache_internal_api")
L2StoreResult, L2AdapterListener = _internal.L2StoreResult, _internal.L2AdapterListener


class TensorMemoryObj:
    """An L1 memory object over a CPU tensor: what the wrapper reads of
    lmcache.v1.memory_management's (its allocators pin memory with CUDA)."""

    def __init__(self, tensor, physical_size=None):
        import ctypes

        self.tensor = tensor
        self._size = tensor.numel() * tensor.element_size()
        self._physical = physical_size or self._size
        self.data_ptr = tensor.data_ptr()
        arr = (ctypes.c_ubyte * self._size).from_address(self.data_ptr)
        self.byte_array = memoryview(arr)

    def get_size(self):
        return self._size

    def get_physical_size(self):
        return self._physical


class EventNotifier:
    """lmcache.v1.platform.create_event_notifier() on Linux: an eventfd."""

    def __init__(self):
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def fileno(self):
        return self._fd

    def notify(self):
        os.eventfd_write(self._fd, 1)

    def clear(self):
        try:
            os.eventfd_read(self._fd)
        except BlockingIOError:
            pass

    def close(self):
        os.close(self._fd)


def _stand_ins():
    stand_in_module("lmcache.lmcache_native", Bitmap=Bitmap)  # C++ extension
    stand_in_module("lmcache.native_storage_ops", Bitmap=Bitmap)  # its later name
    stand_in_module("lmcache.logging", init_logger=logging.getLogger)  # LMCache's colour formatter
    # IPC message types (msgspec); api.py imports one for an annotation.
    stand_in_module("lmcache.v1.multiprocess.custom_types", IPCCacheEngineKey=type("IPCCacheEngineKey", (), {}))
    # internal_api pulls in the L1 manager's protocol types.
    stand_in_module("lmcache.v1.distributed.internal_api", L2StoreResult=L2StoreResult, L2AdapterListener=L2AdapterListener,
            L1MemoryDesc=type("L1MemoryDesc", (), {}))
    # The L1 memory manager (pinned, CUDA-registered allocations).
    stand_in_module("lmcache.v1.memory_management", MemoryObj=TensorMemoryObj, TensorMemoryObj=TensorMemoryObj)
    stand_in_module("lmcache.v1.platform", create_event_notifier=EventNotifier)
    # Free-space guard of the filesystem adapters (the wrapper takes None).
    stand_in_module("lmcache.v1.distributed.l2_adapters.disk_guard", DiskGuard=type("DiskGuard", (), {}))

    # The adapter registries (config.py pulls in serde and eviction configs).
    registry = {"types": {}, "factories": {}}

    class L2AdapterConfigBase(abc.ABC):
        @classmethod
        @abc.abstractmethod
        def from_dict(cls, d):
            ...

        @classmethod
        @abc.abstractmethod
        def help(cls):
            ...

    def register_l2_adapter_type(name, config_cls):
        if name in registry["types"]:
            raise ValueError("L2 adapter type already registered: %r" % name)
        registry["types"][name] = config_cls

    def register_l2_adapter_factory(name, factory):
        registry["factories"][name] = factory

    def create_l2_adapter(spec):
        """What the storage manager does with one --l2-adapter JSON object."""
        config = registry["types"][spec["type"]].from_dict(spec)
        return registry["factories"][spec["type"]](config)

    stand_in_module("lmcache.v1.distributed.l2_adapters.config", L2AdapterConfigBase=L2AdapterConfigBase,
            register_l2_adapter_type=register_l2_adapter_type)
    stand_in_module("lmcache.v1.distributed.l2_adapters.factory", register_l2_adapter_factory=register_l2_adapter_factory,
            create_l2_adapter=create_l2_adapter)


def load(src):
    """Makes `import lmcache.v1.distributed...` import the checkout at `src`."""
    global _loaded
    src = os.path.abspath(src)
    if _loaded is not None:
        if _loaded != src:
            raise RuntimeError(f"LMCache already loaded from {_loaded}")
        return
    for name in REAL:
        if not os.path.isfile(os.path.join(src, *name.split(".")) + ".py"):
            raise RuntimeError(f"{src} is not an LMCache checkout with {name}")
    _loaded = src
    sys.path.insert(0, src)
    sys.meta_path.insert(0, FolderPackages(src, _NO_INIT))
    _stand_ins()
    import importlib

    for name in REAL + tuple(m for route in ROUTES if has_route(route) for m in ROUTES[route]):
        importlib.import_module(name)


def _has_module(name):
    return _loaded is not None and os.path.isfile(os.path.join(_loaded, *name.split(".")) + ".py")


def has_route(route):
    """Whether the loaded checkout has `route`'s loader ("native_plugin" or "plugin")."""
    return all(_has_module(m) for m in ROUTES[route])



def memory_objects(n, size, seed=None):
    """n L1 memory objects of `size` bytes: zeros, or random bytes from `seed`."""
    import torch

    out = []
    for i in range(n):
        t = torch.zeros(size, dtype=torch.uint8)
        if seed is not None:
            t.copy_(torch.randint(0, 256, (size,), generator=torch.Generator().manual_seed(seed + i),
                                  dtype=torch.uint8))
        out.append(TensorMemoryObj(t))
    return out


def wait_for(fd, query, timeout=30):
    """query() until it answers, waking on `fd` (an L2 task's eventfd)."""
    import select
    import time

    p = select.poll()
    p.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = query()
        if got is not None:
            return got
        p.poll(50)
    raise AssertionError("no completion on the L2 task's eventfd")
