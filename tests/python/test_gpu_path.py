"""The GPU path from Python (kvtier._device over the C ABI's kvtier_get_to_device
and friends).

Everywhere: the calls refuse what they must (host tensors, mixed devices, bad
streams) before reaching the library, and without a usable GPU every call
says why. On a machine with a GPU and torch built for CUDA (the H200 run:
bench/e2e/run_h200.sh runs this file), blocks go device -> store -> device and
are compared byte for byte, with and without a RAM tier, in one fragment and
in per-layer fragments, blocking and async, and interoperate with the host API.
"""
import time
import types

import pytest

import kvtier
from kvtier import Code, KvtierError

from conftest import SMALL


def _gpu_ready(store):
    """None when blocks can go to a GPU from here, else why not."""
    why = store.gpu_status()
    if why is not None:
        return why
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch has no CUDA device"
    return None


class FakeCudaTensor:
    """Looks like a CUDA tensor to kvtier's argument checks; it never reaches
    a copy (every test using it expects a refusal first)."""

    def __init__(self, index, nbytes=4096, contiguous=True):
        self.device = types.SimpleNamespace(type="cuda", index=index)
        self._n = nbytes
        self._contiguous = contiguous

    def data_ptr(self):
        return 0x7F0000000000

    def numel(self):
        return self._n

    def element_size(self):
        return 1

    def is_contiguous(self):
        return self._contiguous


@pytest.fixture
def ns(store_dir):
    with kvtier.Store(store_dir, **SMALL) as s:
        yield s.register_namespace(name="gpu", model_id="m", dtype="bf16")


# ---- everywhere ---------------------------------------------------------------

def test_without_a_gpu_every_call_says_why(ns):
    why = ns.store.gpu_status()
    if why is None:
        pytest.skip("a GPU is usable here: the round trips below cover it")
    assert "GPU path" in why or "CUDA" in why
    with pytest.raises(KvtierError) as e:
        ns.get_to_device(["k"], [(0x7F0000000000, 4096)])
    assert e.value.code == Code.NOT_SUPPORTED and str(why) in str(e.value)
    with pytest.raises(KvtierError) as e:
        ns.put_from_device(["k"], [(0x7F0000000000, 4096)])
    assert e.value.code == Code.NOT_SUPPORTED
    with pytest.raises(KvtierError) as e:
        ns.put_from_device_async(["k"], [(0x7F0000000000, 4096)])
    assert e.value.code == Code.NOT_SUPPORTED
    assert ns.store.pending() == 0
    with pytest.raises(KvtierError) as e:
        ns.store.gpu_stats()
    assert e.value.code == Code.NOT_SUPPORTED
    with pytest.raises(KvtierError) as e:
        ns.store.gpu_set_copy_method("kernel")
    assert e.value.code == Code.NOT_SUPPORTED
    # The host API still works on the same handle.
    ns.put("k", b"x" * 4096)
    assert ns.get("k") == b"x" * 4096


@pytest.mark.parametrize("bad", ["fast", "", 3, None])
def test_bad_copy_methods_are_refused_first(ns, bad):
    with pytest.raises(KvtierError) as e:
        ns.store.gpu_set_copy_method(bad)
    assert e.value.code == Code.INVALID_ARGUMENT


def test_host_memory_is_refused_before_the_library(ns):
    torch = pytest.importorskip("torch")
    cpu = torch.zeros(4096, dtype=torch.uint8)
    with pytest.raises(KvtierError) as e:
        ns.get_to_device(["k"], [cpu])
    assert e.value.code == Code.INVALID_ARGUMENT and "CUDA tensor" in str(e.value)
    with pytest.raises(KvtierError) as e:
        ns.put_from_device(["k"], [bytearray(4096)])
    assert e.value.code == Code.INVALID_ARGUMENT and "not device memory" in str(e.value)


@pytest.mark.parametrize("bad, words", [
    ([[FakeCudaTensor(0), FakeCudaTensor(1)]], "one device"),
    ([FakeCudaTensor(0, contiguous=False)], "contiguous"),
    ([True], "bool"),
    ([(0x1000, -1)], "size"),
    ([(0x1000, 1 << 64)], "64-bit"),
    ([(0, 4096)], "positive"),
    ([(0x7F0000000000, 4096), (0, 4096)], "positive"),
])
def test_bad_device_payloads_are_refused(ns, bad, words):
    with pytest.raises(KvtierError) as e:
        ns.get_to_device([f"k{i}" for i in range(len(bad))], bad)
    assert e.value.code == Code.INVALID_ARGUMENT and words in str(e.value)


@pytest.mark.parametrize("stream", [True, -1, 1 << 64, "0", object()])
def test_bad_streams_are_refused(ns, stream):
    with pytest.raises(KvtierError) as e:
        ns.get_to_device(["k"], [(0x7F0000000000, 4096)], stream=stream)
    assert e.value.code == Code.INVALID_ARGUMENT


def test_mismatched_lists_and_keys_are_refused(ns):
    with pytest.raises(KvtierError) as e:
        ns.put_from_device(["a", "b"], [(0x7F0000000000, 4096)])
    assert e.value.code == Code.INVALID_ARGUMENT
    with pytest.raises(KvtierError) as e:
        ns.get_to_device([""], [(0x7F0000000000, 4096)])
    assert e.value.code == Code.INVALID_ARGUMENT


def test_cuda_array_interface_sizes():
    from kvtier import _buffers

    class Arr:
        __cuda_array_interface__ = {"data": (0x7F0000000000, False), "shape": (3, 5), "typestr": "<f2",
                                    "strides": None, "version": 3}
    addr, n, dev, _ = _buffers.device_one(Arr())
    assert (addr, n, dev) == (0x7F0000000000, 30, None)
    Arr.__cuda_array_interface__ = dict(Arr.__cuda_array_interface__, strides=(2, 6))
    with pytest.raises(KvtierError):
        _buffers.device_one(Arr())


def test_a_closed_store_refuses(store_dir):
    s = kvtier.Store(store_dir, **SMALL)
    n = s.register_namespace(name="gpu", model_id="m")
    s.close()
    with pytest.raises(KvtierError) as e:
        n.get_to_device(["k"], [(0x7F0000000000, 4096)])
    assert e.value.code == Code.CLOSED


# ---- with a GPU -----------------------------------------------------------------

def _gpu_store(store_dir, ram):
    s = kvtier.Store(store_dir, **dict(SMALL, capacity_bytes=256 << 20, ram_tier_bytes=ram,
                                       ram_tier_shared_memory=False))
    why = _gpu_ready(s)
    if why is not None:
        s.close()
        pytest.skip("GPU round trips skipped: " + why)
    return s


@pytest.mark.parametrize("ram", [64 << 20, 0])
@pytest.mark.parametrize("layers", [0, 4])
def test_round_trip_through_the_device(store_dir, ram, layers):
    import torch
    s = _gpu_store(store_dir, ram)
    n = s.register_namespace(name="gpu", model_id="m", dtype="bf16")
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev).manual_seed(5)
    blocks, frag = 8, 64 << 10
    # Per-layer: a paged cache per layer, (2, blocks, frag) bytes; a block is
    # its K and V slice in every layer. Cross-layer: one tensor per block.
    if layers:
        caches = [torch.randint(0, 256, (2, blocks, frag), dtype=torch.uint8, device=dev, generator=g)
                  for _ in range(layers)]
        src = [[c[kv, b] for c in caches for kv in (0, 1)] for b in range(blocks)]
    else:
        src = [torch.randint(0, 256, (frag * 2,), dtype=torch.uint8, device=dev, generator=g) for _ in range(blocks)]
    keys = [f"b{i}" for i in range(blocks)]
    codes = n.put_from_device(keys, src)
    assert codes == [Code.OK] * blocks
    if layers:
        dst_caches = [torch.zeros_like(c) for c in caches]
        dst = [[c[kv, b] for c in dst_caches for kv in (0, 1)] for b in range(blocks)]
    else:
        dst = [torch.zeros_like(t) for t in src]
    got = n.get_to_device(keys + ["absent"], dst + [torch.zeros(4096, dtype=torch.uint8, device=dev)])
    torch.cuda.current_stream().synchronize()
    want = (2 * layers * frag) if layers else 2 * frag
    assert got == [want] * blocks + [None]
    st = s.gpu_stats()
    # Every RAM hit was checked on the device before the call returned.
    assert st["ram_hits_verified_on_device"] == st["ram_hits"] == (blocks if ram else 0)
    assert st["ram_hits_reloaded"] == 0
    from kvtier import _device  # the call's Python share, timed around the library
    assert _device.last_get_times["library_s"] > 0 and _device.last_get_times["prepare_s"] > 0
    if ram:  # the load's time split: host queuing, the copies, the check's tail
        assert st["last_get_copy_ms"] > 0 and st["last_get_enqueue_ms"] > 0
        assert st["last_get_hash_tail_ms"] >= 0
        assert st["last_get_call_ms"] >= st["last_get_enqueue_ms"]
    if layers:
        assert all(torch.equal(a, b) for a, b in zip(caches, dst_caches))
    else:
        assert all(torch.equal(a, b) for a, b in zip(src, dst))
    # The host API reads what the device put, byte for byte.
    host = bytearray(want)
    assert n.get_into("b3", host) == want
    flat = torch.cat([f.reshape(-1) for f in src[3]]) if layers else src[3]
    assert bytes(host) == bytes(flat.cpu().numpy().tobytes())
    s.close()


def test_a_tier_of_two_regions_loads_a_block_on_either_side_of_their_boundary(store_dir):
    # The tier is registered with CUDA one 1 GiB region at a time; a block
    # whose chunks are the last of the first region and the first of the
    # second is copied in two pieces, each within its own registration.
    import torch
    chunk = 4 << 20  # 256 chunks a region
    s = kvtier.Store(store_dir, **dict(SMALL, segment_size_bytes=16 << 20, capacity_bytes=256 << 20,
                                       ram_tier_bytes=258 * chunk, ram_tier_chunk_bytes=chunk,
                                       ram_tier_shared_memory=False, ram_tier_prefault=False))
    why = _gpu_ready(s)
    if why is not None:
        s.close()
        pytest.skip("GPU round trips skipped: " + why)
    n = s.register_namespace(name="gpu", model_id="m", dtype="bf16")
    for i in range(255):  # one chunk each: chunks 0..254
        assert n.put(f"small{i}", bytes([i]))
    g = torch.Generator().manual_seed(11)
    across = torch.randint(0, 256, (chunk + 4096,), dtype=torch.uint8, generator=g)
    within = torch.randint(0, 256, (chunk + 4096,), dtype=torch.uint8, generator=g)
    assert n.put("across", across.numpy()) and n.put("within", within.numpy())
    dev = torch.device("cuda", 0)
    dst = [torch.zeros(chunk + 4096, dtype=torch.uint8, device=dev) for _ in range(2)]
    got, codes = n.get_to_device(["across", "within"], dst, return_codes=True)
    assert got == [chunk + 4096] * 2, (codes, s.gpu_stats(), {k: v for k, v in s.stats().items() if "ram" in k})
    torch.cuda.current_stream().synchronize()
    assert torch.equal(dst[0].cpu(), across) and torch.equal(dst[1].cpu(), within)
    st = s.gpu_stats()
    assert st["ram_tier_pinned"] and st["ram_hits"] == st["ram_hits_verified_on_device"] == 2
    # Both regions pinned (the load pinned those it needed; a thread pins
    # the rest behind the prefault, which is off here).
    for _ in range(1000):
        if st["ram_tier_regions_pinned"] == st["ram_tier_regions"]:
            break
        time.sleep(0.01)
        st = s.gpu_stats()
    assert st["ram_tier_regions"] == 2 and st["ram_tier_regions_pinned"] == 2, st
    s.close()


def _served_round_trip(address, size, seed):
    """Six random blocks of `size` bytes put from the device through the
    service at `address` and loaded back (with one absent key), byte-exact.
    Returns (store, namespace, the sources) or skips without a GPU."""
    s = kvtier.Store(address)
    why = _gpu_ready(s)
    if why is not None:
        s.close()
        pytest.skip("GPU round trips skipped: " + why)
    import torch
    n = s.register_namespace(name="gpu", model_id="m", dtype="bf16")
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev).manual_seed(seed)
    src = [torch.randint(0, 256, (size,), dtype=torch.uint8, device=dev, generator=g) for _ in range(6)]
    keys = [f"b{i}" for i in range(6)]
    assert n.put_from_device(keys, src) == [Code.OK] * 6
    dst = [torch.zeros_like(t) for t in src]
    got = n.get_to_device(keys + ["absent"], dst + [torch.zeros(4096, dtype=torch.uint8, device=dev)])
    torch.cuda.current_stream().synchronize()
    assert got == [size] * 6 + [None]
    assert all(torch.equal(a, b) for a, b in zip(src, dst))
    return s, n, src


def test_round_trip_through_the_service(kvtier_service):
    # The same calls on a service's client: without a RAM tier in the
    # service, blocks go through staging the service maps (one host copy
    # each, made and verified by the service).
    size = 256 << 10
    s, n, src = _served_round_trip(kvtier_service, size, seed=9)
    st = s.gpu_stats()
    assert st["through_service"] is True and st["disk_reads"] == 6 and st["misses"] == 1
    assert st["staging_shared_with_service"] is True  # one host copy per block, by the service
    assert st["ram_tier_lent"] is False
    host = bytearray(size)  # the host API reads what the device put
    assert n.get_into("b2", host) == size and bytes(host) == bytes(src[2].cpu().numpy().tobytes())
    s.close()


def test_ram_hits_through_the_service_come_straight_from_its_lent_tier(kvtier_service_ram):
    # A service whose RAM tier is in /dev/shm lends it: this process maps it
    # read-only and registered with CUDA, so a hit is copied from the
    # service's memory to the device (no host copy) and checked there.
    s, _, _ = _served_round_trip(kvtier_service_ram, 512 << 10, seed=4)
    st = s.gpu_stats()
    if not st["ram_tier_lent"] and s.stats()["ram_shared_memory"] is False:
        s.close()
        pytest.skip("the service's RAM tier is not in /dev/shm here (no room)")
    assert st["ram_tier_lent"] is True
    assert st["ram_hits"] == 6 and st["disk_reads"] == 0 and st["misses"] == 1
    assert st["ram_hits_verified_on_device"] == 6
    s.close()


@pytest.mark.parametrize("method,calls", [("kernel", "kernel_calls"), ("loop", "loop_calls"),
                                          ("batch", "batch_calls")])
def test_each_copy_method_loads_the_same_bytes(store_dir, method, calls):
    import torch
    s = _gpu_store(store_dir, 64 << 20)
    n = s.register_namespace(name="gpu", model_id="m")
    dev = torch.device("cuda", 0)
    src = torch.randint(0, 256, (8, 512 << 10), dtype=torch.uint8, device=dev)
    keys = [f"m{i}" for i in range(8)]
    assert n.put_from_device(keys, list(src)) == [Code.OK] * 8
    s.gpu_set_copy_method(method)
    before = s.gpu_stats()
    assert before["method"] == method and before["device"] == 0
    dst = torch.zeros_like(src)
    side = torch.cuda.Stream(dev)  # the batch API refuses the legacy default stream
    assert n.get_to_device(keys, list(dst), stream=side) == [512 << 10] * 8
    side.synchronize()
    assert torch.equal(src, dst)
    after = s.gpu_stats()
    assert after[calls] > before[calls] and after["ram_hits"] == before["ram_hits"] + 8
    s.close()


def test_async_forms_and_a_side_stream(store_dir):
    import torch
    s = _gpu_store(store_dir, 64 << 20)
    n = s.register_namespace(name="gpu", model_id="m")
    dev = torch.device("cuda", 0)
    side = torch.cuda.Stream(dev)
    src = [torch.full((256 << 10,), i, dtype=torch.uint8, device=dev) for i in range(6)]
    keys = [f"a{i}" for i in range(6)]
    fut = n.put_from_device_async(keys, src, stream=side)
    assert fut.result(timeout=60) == [Code.OK] * 6
    dst = [torch.zeros_like(t) for t in src]
    fut = n.get_to_device_async(keys + ["gone"], dst + [torch.zeros_like(src[0])], stream=side)
    assert fut.result(timeout=60) == [256 << 10] * 6 + [None]
    side.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(src, dst))
    s.close()


def test_memory_off_the_bound_device_is_refused_per_block(store_dir):
    import torch
    s = _gpu_store(store_dir, 64 << 20)
    n = s.register_namespace(name="gpu", model_id="m")
    dev = torch.device("cuda", 0)
    good = torch.arange(4096, dtype=torch.int32, device=dev)
    pinned = torch.zeros(16384, dtype=torch.uint8).pin_memory()
    codes = n.put_from_device(["good", "host"], [good, (pinned.data_ptr(), 16384)])
    assert codes == [Code.OK, Code.INVALID_ARGUMENT]
    assert "host" not in n and "good" in n
    out = torch.zeros_like(good)
    assert n.get_to_device(["good"], [out]) == [16384]
    torch.cuda.current_stream().synchronize()
    assert torch.equal(out, good)
    s.close()
