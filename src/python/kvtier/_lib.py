"""Loads libkvtier.so and declares the C ABI (include/kvtier/c_api.h) for ctypes.

The library is found, in order: $KVTIER_LIB (a path), a libkvtier.so* next to
this package, then the dynamic loader's search by name (libkvtier.so.0).
ctypes releases the GIL around every foreign call, so kvtier I/O never
holds it.
"""
import ctypes
import ctypes.util
import glob
import os

ABI_MAJOR = 1
ABI_MINOR = 8  # kvtier_get_batch_timeout; 7: kvtier_list_keys_after; 6: kvtier_touch_batch; 5: kvtier_remove_batch, kvtier_contains_batch; 4: kvtier_gpu_set_copy_method, kvtier_gpu_stats_json; 3: kvtier_destroy_store; 2: the GPU path (kvtier_get_to_device ...)

c_ns = ctypes.c_uint64


class Fragment(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class Key(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class PutItem(ctypes.Structure):
    _fields_ = [("key", Key), ("frags", ctypes.POINTER(Fragment)), ("num_frags", ctypes.c_size_t)]


class GetItem(ctypes.Structure):
    _fields_ = [("key", Key), ("frags", ctypes.POINTER(Fragment)), ("num_frags", ctypes.c_size_t)]


class Completion(ctypes.Structure):
    _fields_ = [("user_data", ctypes.c_uint64), ("size", ctypes.c_uint64),
                ("status", ctypes.c_int32), ("op", ctypes.c_uint32)]


KEY_VISITOR = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, c_ns, ctypes.c_void_p,
                               ctypes.c_size_t, ctypes.c_uint64)

_P = ctypes.c_void_p
_SZ = ctypes.c_size_t
_I = ctypes.c_int

_SIGNATURES = {
    "kvtier_abi_version": (ctypes.c_uint32, []),
    "kvtier_code_name": (ctypes.c_char_p, [_I]),
    "kvtier_last_error": (ctypes.c_char_p, []),
    "kvtier_open": (_I, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_P)]),
    "kvtier_close": (_I, [_P]),
    "kvtier_free": (None, [_P]),
    "kvtier_destroy_store": (_I, [ctypes.c_char_p]),
    "kvtier_register_namespace_json": (_I, [_P, ctypes.c_char_p, ctypes.POINTER(c_ns)]),
    "kvtier_find_namespace": (_I, [_P, ctypes.c_char_p, ctypes.POINTER(c_ns)]),
    "kvtier_remove_namespace": (_I, [_P, c_ns]),
    "kvtier_putv": (_I, [_P, c_ns, _P, _SZ, ctypes.POINTER(Fragment), _SZ]),
    "kvtier_getv": (_I, [_P, c_ns, _P, _SZ, ctypes.POINTER(Fragment), _SZ,
                         ctypes.POINTER(ctypes.c_uint64)]),
    "kvtier_put_batch": (_I, [_P, c_ns, ctypes.POINTER(PutItem), _SZ, ctypes.POINTER(ctypes.c_int32)]),
    "kvtier_get_batch": (_I, [_P, c_ns, ctypes.POINTER(GetItem), _SZ, ctypes.POINTER(ctypes.c_int32),
                              ctypes.POINTER(ctypes.c_uint64)]),
    "kvtier_get_batch_timeout": (_I, [_P, c_ns, ctypes.POINTER(GetItem), _SZ, ctypes.c_uint64,
                                      ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_uint64)]),
    "kvtier_contains": (_I, [_P, c_ns, _P, _SZ, ctypes.POINTER(_I)]),
    "kvtier_lookup_prefix": (_I, [_P, c_ns, ctypes.POINTER(Key), _SZ, ctypes.POINTER(_SZ)]),
    "kvtier_contains_batch": (_I, [_P, c_ns, ctypes.POINTER(Key), _SZ, ctypes.POINTER(ctypes.c_uint8)]),
    "kvtier_touch_batch": (_I, [_P, c_ns, ctypes.POINTER(Key), _SZ, ctypes.POINTER(ctypes.c_uint8)]),
    "kvtier_block_size": (_I, [_P, c_ns, _P, _SZ, ctypes.POINTER(ctypes.c_uint64)]),
    "kvtier_list_keys": (_I, [_P, c_ns, _P, _SZ, KEY_VISITOR, _P]),
    "kvtier_list_keys_after": (_I, [_P, c_ns, _P, _SZ, c_ns, _P, _SZ, KEY_VISITOR, _P]),
    "kvtier_remove": (_I, [_P, c_ns, _P, _SZ]),
    "kvtier_remove_batch": (_I, [_P, c_ns, ctypes.POINTER(Key), _SZ, ctypes.POINTER(ctypes.c_uint8)]),
    "kvtier_flush": (_I, [_P]),
    "kvtier_share_now": (_I, [_P, ctypes.c_uint32]),
    "kvtier_register_memory": (_I, [_P, _P, _SZ, _I, ctypes.c_uint64]),
    "kvtier_unregister_memory": (_I, [_P, _P]),
    "kvtier_stats_json": (_I, [_P, ctypes.c_char_p, _SZ, ctypes.POINTER(_SZ)]),
    "kvtier_put_async": (_I, [_P, c_ns, _P, _SZ, ctypes.POINTER(Fragment), _SZ, ctypes.c_uint64]),
    "kvtier_get_async": (_I, [_P, c_ns, _P, _SZ, ctypes.POINTER(Fragment), _SZ, ctypes.c_uint64,
                              ctypes.c_uint64]),
    "kvtier_poll": (_I, [_P, ctypes.POINTER(Completion), _SZ, _I]),
    "kvtier_event_fd": (_I, [_P]),
    "kvtier_pending": (ctypes.c_uint64, [_P]),
    "kvtier_gpu_status": (_I, [_P]),
    "kvtier_gpu_bind": (_I, [_P, _I]),
    "kvtier_gpu_set_copy_method": (_I, [_P, ctypes.c_char_p]),
    "kvtier_gpu_stats_json": (_I, [_P, ctypes.c_char_p, _SZ, ctypes.POINTER(_SZ)]),
    "kvtier_get_to_device": (_I, [_P, c_ns, ctypes.POINTER(GetItem), _SZ, ctypes.c_uint64, ctypes.c_uint64,
                                  ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_uint64)]),
    "kvtier_get_to_device_async": (_I, [_P, c_ns, ctypes.POINTER(GetItem), _SZ, ctypes.c_uint64,
                                        ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_uint64),
                                        ctypes.c_uint64]),
    "kvtier_put_from_device": (_I, [_P, c_ns, ctypes.POINTER(PutItem), _SZ, ctypes.c_uint64, _I,
                                    ctypes.POINTER(ctypes.c_int32)]),
    "kvtier_put_from_device_async": (_I, [_P, c_ns, ctypes.POINTER(PutItem), _SZ, ctypes.c_uint64,
                                          ctypes.POINTER(ctypes.c_int32), ctypes.c_uint64]),
}


def _candidates():
    env = os.environ.get("KVTIER_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for pattern in ("libkvtier.so", "libkvtier.so.*"):
        yield from sorted(glob.glob(os.path.join(here, pattern)))
    found = ctypes.util.find_library("kvtier")
    if found:
        yield found
    yield "libkvtier.so.0"


def load():
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        # The version first: an older library lacks later entry points.
        lib.kvtier_abi_version.restype = ctypes.c_uint32
        lib.kvtier_abi_version.argtypes = []
        version = lib.kvtier_abi_version()
        if version >> 16 != ABI_MAJOR or (version & 0xffff) < ABI_MINOR:
            raise ImportError(f"{path} has kvtier ABI {version >> 16}.{version & 0xffff}, "
                              f"this package needs {ABI_MAJOR}.{ABI_MINOR} or a later {ABI_MAJOR}.x")
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
        return lib
    raise ImportError("cannot load libkvtier.so (set KVTIER_LIB to its path): " + "; ".join(errors))


lib = load()
