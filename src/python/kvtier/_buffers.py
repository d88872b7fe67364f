"""Turns Python values into (address, size) fragments for the C ABI.

Accepted payload forms:
- any object with the buffer protocol (bytes, bytearray, memoryview, numpy
  arrays, array.array); it must be C-contiguous; gets need a writable one;
- an object with data_ptr() (a torch tensor, without importing torch): its
  size is numel() * element_size() unless given; it must be contiguous;
- a raw address (int) with an explicit size;
- an (address, size) tuple;
- a list of the above: a gather list on put, a scatter list on get.
"""
import ctypes

from ._errors import Code, KvtierError
from ._lib import Fragment


def _invalid(msg):
    return KvtierError(Code.INVALID_ARGUMENT, msg)


def bytes_address(b):
    """Address of a bytes object's internal buffer (no copy)."""
    return ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value


def key_bytes(key):
    if isinstance(key, str):
        key = key.encode()
    elif isinstance(key, (bytearray, memoryview)):
        key = bytes(key)
    elif not isinstance(key, bytes):
        raise _invalid(f"a key must be str or bytes, not {type(key).__name__}")
    if not 1 <= len(key) <= 255:
        raise _invalid(f"key length {len(key)} is outside 1..255")
    return key


def one(obj, writable, size=None):
    """Returns (address, nbytes, keepalive) for one payload piece."""
    if isinstance(obj, bool):
        raise _invalid("a payload cannot be a bool")
    if isinstance(obj, int):
        if size is None:
            raise _invalid("a raw address needs size=")
        if obj <= 0 or obj >= 1 << 64 or size < 0:
            raise _invalid("raw address must be a positive 64-bit value and size >= 0")
        return obj, int(size), None
    if isinstance(obj, tuple) and len(obj) == 2 and all(isinstance(x, int) for x in obj):
        return one(obj[0], writable, obj[1])
    if hasattr(obj, "data_ptr") and callable(obj.data_ptr):
        if hasattr(obj, "is_contiguous") and not obj.is_contiguous():
            raise _invalid("tensor must be contiguous")
        if getattr(getattr(obj, "device", None), "type", "cpu") != "cpu":
            raise _invalid("tensor must be in host memory (device 'cpu')")
        n = size if size is not None else obj.numel() * obj.element_size()
        addr = obj.data_ptr()
        if n and not addr:
            raise _invalid("tensor has no storage")
        return addr, int(n), obj
    try:
        mv = memoryview(obj)
    except TypeError:
        raise _invalid(f"{type(obj).__name__} is not a buffer, tensor or address") from None
    if not mv.c_contiguous:
        raise _invalid("buffer must be C-contiguous")
    n = mv.nbytes
    if size is not None:
        if size > n or size < 0:
            raise _invalid(f"size {size} is outside the buffer's {n} bytes")
        n = size
    if n == 0:
        return None, 0, mv
    if not mv.readonly:
        arr = (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B"))
        return ctypes.addressof(arr), n, arr
    if writable:
        raise _invalid("the destination buffer is read-only")
    if isinstance(obj, bytes):
        return bytes_address(obj), n, obj
    iface = getattr(obj, "__array_interface__", None)
    if iface is not None and iface.get("data"):
        return iface["data"][0], n, obj
    b = mv.tobytes()  # a read-only buffer of another kind: copy once
    return bytes_address(b), n, b


def fragments(value, writable, size=None):
    """Returns (Fragment array, count, total bytes, keepalive list)."""
    if isinstance(value, list):
        if size is not None:
            raise _invalid("size= applies to a single buffer, not a list")
        parts = [one(v, writable) for v in value]
    else:
        parts = [one(value, writable, size)]
    arr = (Fragment * max(1, len(parts)))()
    total = 0
    for i, (addr, n, _) in enumerate(parts):
        arr[i].data = addr
        arr[i].size = n
        total += n
    return arr, len(parts), total, [p[2] for p in parts]


def _cuda_array_size(iface):
    """Bytes of a contiguous __cuda_array_interface__ array (CuPy, Numba ...)."""
    strides = iface.get("strides")
    shape = tuple(iface.get("shape", ()))
    itemsize = int(str(iface.get("typestr", "|u1"))[2:] or 1)
    n = itemsize
    for d in shape:
        n *= int(d)
    if strides is not None:
        want, step = [], itemsize
        for d in reversed(shape):
            want.append(step)
            step *= int(d)
        if tuple(reversed(want)) != tuple(strides):
            raise _invalid("a __cuda_array_interface__ array must be C-contiguous")
    return n


def device_one(obj, size=None):
    """Returns (address, nbytes, device index or None, keepalive) for one
    piece of device memory: a CUDA tensor, an object with
    __cuda_array_interface__, a raw device address with size=, or an
    (address, size) tuple. The library checks each block's memory too."""
    if isinstance(obj, bool):
        raise _invalid("a device payload cannot be a bool")
    if isinstance(obj, int) or (isinstance(obj, tuple) and len(obj) == 2 and all(isinstance(x, int) for x in obj)):
        addr, n, _ = one(obj, True, size)
        return addr, n, None, None
    if hasattr(obj, "data_ptr") and callable(obj.data_ptr) and hasattr(obj, "device"):
        dev = obj.device
        if getattr(dev, "type", "cpu") != "cuda":
            raise _invalid(f"a device payload must be a CUDA tensor, not one on '{dev}' "
                           "(host buffers go through put/get and their batch forms)")
        if hasattr(obj, "is_contiguous") and not obj.is_contiguous():
            raise _invalid("tensor must be contiguous")
        full = obj.numel() * obj.element_size()
        n = full if size is None else int(size)
        if not 0 <= n <= full:
            raise _invalid(f"size {n} is outside the tensor's {full} bytes")
        return obj.data_ptr(), n, dev.index if dev.index is not None else None, obj
    iface = getattr(obj, "__cuda_array_interface__", None)
    if iface is not None:
        full = _cuda_array_size(iface)
        n = full if size is None else int(size)
        if not 0 <= n <= full:
            raise _invalid(f"size {n} is outside the array's {full} bytes")
        return int(iface["data"][0]), n, None, obj
    raise _invalid(f"{type(obj).__name__} is not device memory: pass a CUDA tensor, an object with "
                   "__cuda_array_interface__, or an (address, size) pair")


def device_fragments(value, size=None):
    """Returns (Fragment array, count, total bytes, keepalive, device indexes
    seen) for one block's device memory (a list: its fragments in order)."""
    if isinstance(value, list):
        if size is not None:
            raise _invalid("size= applies to a single buffer, not a list")
        parts = [device_one(v) for v in value]
    else:
        parts = [device_one(value, size)]
    arr = (Fragment * max(1, len(parts)))()
    total = 0
    for i, (addr, n, _, _) in enumerate(parts):
        arr[i].data = addr
        arr[i].size = n
        total += n
    devices = {p[2] for p in parts if p[2] is not None}
    return arr, len(parts), total, [p[3] for p in parts], devices


def packed_keys(keys):
    """keys as a kvtier_key array packed in one flat array over one joined
    bytes object (a prompt's thousand keys cost milliseconds as ctypes
    structs). Returns (pointer to the keys, count, keepalive)."""
    import array
    ks = [key_bytes(k) for k in keys]
    if not ks:
        return None, 0, None
    blob = b"".join(ks)
    base = bytes_address(blob)
    n, width = len(ks), len(ks[0])
    if all(len(k) == width for k in ks):  # engine hashes: one length
        flat = array.array("Q", [0, width]) * n
        flat[0::2] = array.array("Q", range(base, base + n * width, width))
    else:
        flat = array.array("Q")
        off = 0
        for k in ks:
            flat.extend((base + off, len(k)))
            off += len(k)
    from ._lib import Key
    assert ctypes.sizeof(Key) == 16
    return ctypes.cast(flat.buffer_info()[0], ctypes.POINTER(Key)), n, (blob, flat, ks)


def packed_items(item_type, keys, values):
    """Items for a batch call whose payloads are all (address, size) pairs,
    packed in two flat arrays instead of one ctypes object per item (an
    engine's load of hundreds of blocks would otherwise spend milliseconds
    here). Returns (pointer to the items, keepalive), or None when some value
    has another form (the general path takes those). Whole-list operations
    where one per item would do: a load's Python share is paid per block."""
    import array
    import itertools
    import struct
    # Each check is one pass in C (map, set, array): a generator over the
    # items cost about as much again as all the rest of the packing.
    if set(map(type, values)) != {tuple} or set(map(len, values)) != {2}:
        return None
    flat = list(itertools.chain.from_iterable(values))
    if set(map(type, flat)) != {int}:
        return None
    ks = keys if set(map(type, keys)) == {bytes} else [key_bytes(k) for k in keys]
    lens = set(map(len, ks))
    if min(lens, default=1) < 1 or max(lens, default=1) > 255:
        for k in ks:
            key_bytes(k)  # raises for the first bad one, as the general path would
    try:
        frags = array.array("Q", flat)
    except OverflowError:
        frags = None
    if frags is None or (0 in frags[0::2] and any(n and not a for a, n in zip(flat[0::2], flat[1::2]))):
        raise _invalid("a device or host address must be a positive 64-bit value and size >= 0")
    blob = b"".join(ks)
    base = bytes_address(blob) if blob else 0
    fbase = frags.buffer_info()[0]
    n = len(ks)
    items = array.array("Q", [0, 0, 0, 1]) * n
    if len(lens) == 1:  # engine hashes: one width
        width = next(iter(lens))
        items[0::4] = array.array("Q", range(base, base + n * width, width))
        items[1::4] = array.array("Q", [width]) * n
    else:
        offs, off = [], 0
        for k in ks:
            offs.append(base + off)
            off += len(k)
        items[0::4] = array.array("Q", offs)
        items[1::4] = array.array("Q", map(len, ks))
    items[2::4] = array.array("Q", range(fbase, fbase + 16 * n, 16))
    assert struct.calcsize("PNPN") == 32 and ctypes.sizeof(item_type) == 32
    ptr = ctypes.cast(items.buffer_info()[0], ctypes.POINTER(item_type))
    return ptr, (blob, frags, items, ks)
