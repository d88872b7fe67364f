import array
import os
import threading
import time

import numpy as np
import pytest

import kvtier
from kvtier import Code, KvtierError
from conftest import SMALL


def open_store(path):
    return kvtier.Store(path, **SMALL)


def test_abi_version():
    assert kvtier.abi_version()[0] == 1


def test_put_get_forms(store_dir):
    with open_store(store_dir) as s:
        ns = s.register_namespace(name="t", model_id="m", dtype="bf16")
        a = np.arange(4096, dtype=np.float32)
        assert ns.put("np", a)
        assert ns.put(b"bytes", b"x" * 5000)
        assert ns.put("bytearray", bytearray(b"y" * 100))
        assert ns.put("mv", memoryview(a)[:10])
        assert ns.put("array", array.array("i", range(50)))
        ro = np.frombuffer(b"z" * 64, dtype=np.uint8)  # read-only numpy view
        assert ns.put("ro", ro)
        # raw pointers, as torch's data_ptr() would give
        assert ns.put("raw", a.ctypes.data, size=a.nbytes)
        # fragments: gathered on put, scattered on get
        assert ns.put("frags", [a[:100], b"abc", (a.ctypes.data, 16)])
        out = np.zeros_like(a)
        assert ns.get_into("raw", out) == a.nbytes and np.array_equal(out, a)
        assert ns.get("bytes") == b"x" * 5000
        assert ns.get("ro") == b"z" * 64
        parts = [bytearray(200), bytearray(300)]
        assert ns.get_into("frags", parts) == 400 + 3 + 16
        assert bytes(parts[0][:200]) == a[:50].tobytes()
        out2 = np.zeros(4096, dtype=np.float32)
        assert ns.get_into("np", out2.ctypes.data, size=out2.nbytes) == a.nbytes
        assert np.array_equal(out2, a)
        assert ns.get("missing") is None and ns.get_into("missing", out) is None


class FakeTensor:
    """What the package needs from a torch tensor, without torch."""

    def __init__(self, arr):
        self.arr = arr

    def data_ptr(self):
        return self.arr.ctypes.data

    def numel(self):
        return self.arr.size

    def element_size(self):
        return self.arr.itemsize

    def is_contiguous(self):
        return self.arr.flags.c_contiguous


def test_tensor_like(store_dir):
    with open_store(store_dir) as s:
        ns = s.register_namespace(name="t")
        src = FakeTensor(np.arange(1000, dtype=np.int64))
        assert ns.put("t", src)
        dst = FakeTensor(np.zeros(1000, dtype=np.int64))
        assert ns.get_into("t", dst) == 8000
        assert np.array_equal(dst.arr, src.arr)


def test_batch_lookup_remove(store_dir):
    with open_store(store_dir) as s:
        ns = s.register_namespace(name="t")
        vals = [np.full(2048, i, dtype=np.uint8) for i in range(5)]
        keys = [f"k{i}" for i in range(5)]
        assert ns.put_batch(keys[:4], vals[:4]) == [Code.OK] * 4
        outs = [np.zeros(2048, dtype=np.uint8) for _ in range(5)]
        sizes, codes = ns.get_batch(keys, outs, return_codes=True)
        assert sizes == [2048] * 4 + [None]
        assert codes[4] == Code.NOT_FOUND
        assert all(np.array_equal(o, v) for o, v in zip(outs[:4], vals[:4]))
        # A deadline its reads make: the same answers. A negative one is refused.
        outs = [np.zeros(2048, dtype=np.uint8) for _ in range(5)]
        assert ns.get_batch(keys, outs, timeout=60) == [2048] * 4 + [None]
        assert all(np.array_equal(o, v) for o, v in zip(outs[:4], vals[:4]))
        with pytest.raises(KvtierError):
            ns.get_batch(keys, outs, timeout=-1)
        assert ns.lookup_prefix(keys) == 4
        assert ns.lookup_prefix(["k0", "zz", "k1"]) == 1
        assert "k2" in ns and not ns.contains("zz")
        assert ns.block_size("k1") == 2048 and ns.block_size("zz") is None
        assert ns.keys(prefix="k") == [k.encode() for k in keys[:4]]
        # Paged: resumed after a key (there or not), at most `limit` a page.
        assert ns.keys_with_sizes("k", after="k0", limit=2) == [(b"k1", 2048), (b"k2", 2048)]
        assert [k for k, _ in ns.keys_with_sizes("k", after=b"k15")] == [b"k2", b"k3"]
        assert ns.keys_with_sizes("k", after="k3") == []
        with pytest.raises(ValueError):
            ns.keys_with_sizes(limit=0)
        ns.remove("k1")
        ns.remove("k1")
        assert ns.lookup_prefix(keys) == 1
        assert ns.contains_batch(["k2", "zz", b"k3"]) == [True, False, True]
        assert ns.contains_batch([]) == []
        assert ns.touch_batch(["k2", "zz"]) == [True, False] and ns.touch_batch([]) == []
        assert s.stats()["touches"] == 1
        # Several at once, one index flush: which of them had a block.
        assert ns.remove_batch(["k2", "zz", b"k3", "k2"]) == [True, False, True, True]
        assert ns.remove_batch([]) == []
        assert ns.lookup_prefix(keys) == 1 and "k0" in ns and "k3" not in ns
        with pytest.raises(KvtierError) as e:
            ns.remove_batch(["k0", ""])
        assert e.value.code == Code.INVALID_ARGUMENT and "k0" in ns
        s.flush()
        st = s.stats()
        assert st["puts"] >= 4 and "io_backend" in st
        # Copy-free I/O and the shared tier are reported (no Ceph here).
        assert "zero_copy_put_bytes" in st and st["hits_remote"] == 0 and st["remote_connected"] is False


def test_batches_of_address_pairs(store_dir):
    """(address, size) pairs take the packed path: the same answers, str and
    bytes keys, the same refusals."""
    with open_store(store_dir) as s:
        ns = s.register_namespace(name="t")
        src = np.arange(6 * 3000, dtype=np.uint8).reshape(6, 3000)
        keys = [f"p{i}" if i % 2 else f"p{i}".encode() for i in range(6)]
        pairs = [(src[i].ctypes.data, 3000) for i in range(6)]
        assert ns.put_batch(keys[:5], pairs[:5]) == [Code.OK] * 5
        dst = np.zeros((6, 3000), dtype=np.uint8)
        sizes, codes = ns.get_batch(keys, [(dst[i].ctypes.data, 3000) for i in range(6)], return_codes=True)
        assert sizes == [3000] * 5 + [None] and codes[5] == Code.NOT_FOUND
        assert np.array_equal(dst[:5], src[:5]) and not dst[5].any()
        small = np.zeros(100, dtype=np.uint8)
        assert ns.get_batch(["p1"], [(small.ctypes.data, 100)], return_codes=True)[1] == [Code.BUFFER_TOO_SMALL]
        for bad in [(0, 10), (-5, 10), (src.ctypes.data, -1)]:
            with pytest.raises(KvtierError) as e:
                ns.get_batch(["p1"], [bad])
            assert e.value.code == Code.INVALID_ARGUMENT
        with pytest.raises(KvtierError):
            ns.put_batch([""], [(src.ctypes.data, 10)])


def test_address_pairs_with_keys_of_several_widths(store_dir):
    """The packed path lays out keys of one width by arithmetic and of
    several one by one: each block lands under its own key either way, and an
    address past 64 bits or a key past 255 bytes is refused whatever its
    place in the batch."""
    with open_store(store_dir) as s:
        ns = s.register_namespace(name="t")
        n = 40
        src = np.random.default_rng(3).integers(0, 256, (n, 512), dtype=np.uint8)
        for keys in ([os.urandom(32) for _ in range(n)], [b"k" * (1 + i % 7) + bytes([i]) for i in range(n)]):
            assert ns.put_batch(keys, [(src[i].ctypes.data, 512) for i in range(n)]) == [Code.OK] * n
            dst = np.zeros_like(src)
            assert ns.get_batch(keys, [(dst[i].ctypes.data, 512) for i in range(n)]) == [512] * n
            assert np.array_equal(dst, src)
            for i in (0, 17):  # one block, read alone, is the one put under its key
                assert ns.get(keys[i]) == src[i].tobytes()
        good = [(src[i].ctypes.data, 512) for i in range(3)]
        for bad_pairs in (good[:2] + [(1 << 64, 8)], good[:2] + [(src.ctypes.data, 1 << 64)]):
            with pytest.raises(KvtierError) as e:
                ns.get_batch(["a", "b", "c"], bad_pairs)
            assert e.value.code == Code.INVALID_ARGUMENT
        with pytest.raises(KvtierError) as e:
            ns.get_batch([b"a", b"x" * 256], good[:2])
        assert e.value.code == Code.INVALID_ARGUMENT and "255" in str(e.value)


def test_async(store_dir):
    with open_store(store_dir) as s:
        ns = s.register_namespace(name="t")
        vals = [np.full(4096, i, dtype=np.uint8) for i in range(20)]
        futs = [ns.put_async(f"a{i}", v) for i, v in enumerate(vals)]
        assert all(f.result(timeout=10) is True for f in futs)
        outs = [np.zeros(4096, dtype=np.uint8) for _ in range(21)]
        gets = [ns.get_async(f"a{i}", outs[i]) for i in range(20)]
        gets.append(ns.get_async("absent", outs[20]))
        assert [g.result(timeout=10) for g in gets] == [4096] * 20 + [None]
        assert all(np.array_equal(outs[i], vals[i]) for i in range(20))
        # a deadline yields the size or None (miss), never an exception
        assert ns.get_async("a0", outs[0], timeout=1e-6).result(timeout=10) in (4096, None)
        # many threads at once
        errors = []

        def worker(t):
            try:
                for i in range(10):
                    k = f"t{t}-{i}"
                    ns.put(k, vals[i])
                    assert ns.get(k) == vals[i].tobytes()
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors


def test_errors(store_dir):
    with pytest.raises(KvtierError) as e:
        kvtier.Store(store_dir, no_such_option=1)
    assert e.value.code == Code.INVALID_ARGUMENT and "no_such_option" in str(e.value)
    with pytest.raises(KvtierError):
        kvtier.Store(store_dir, capacity_bytes="lots")
    s = open_store(store_dir)
    with pytest.raises(KvtierError) as e:
        open_store(store_dir)  # folder in use
    assert e.value.code == Code.BUSY
    ns = s.register_namespace(name="t")
    with pytest.raises(KvtierError) as e:
        ns.put("k" * 300, b"x")
    assert e.value.code == Code.INVALID_ARGUMENT
    with pytest.raises(KvtierError) as e:
        ns.put("", b"x")
    ns.put("k", b"x" * 1000)
    with pytest.raises(KvtierError) as e:
        ns.get_into("k", bytearray(10))
    assert e.value.code == Code.BUFFER_TOO_SMALL
    with pytest.raises(KvtierError) as e:
        ns.get_into("k", b"immutable" * 200)
    assert e.value.code == Code.INVALID_ARGUMENT
    for bad in (3.5, object(), None, True):
        with pytest.raises(KvtierError):
            ns.put("k", bad)
    with pytest.raises(KvtierError):
        ns.put("k", 12345)  # raw address without size
    with pytest.raises(KvtierError):
        ns.put("k", np.arange(10)[::2])  # not contiguous
    with pytest.raises(KvtierError) as e:
        kvtier.Namespace(s, 42).put("k", b"x")
    assert e.value.code == Code.NOT_FOUND
    with pytest.raises(KvtierError) as e:
        s.namespace("nobody")
    assert e.value.code == Code.NOT_FOUND
    with pytest.raises(KvtierError):
        s.register_namespace(tp_rank=3, tp_size=2)
    with pytest.raises(KvtierError):
        s.register_namespace(colour="red")
    s.close()
    s.close()
    with pytest.raises(KvtierError) as e:
        ns.get("k")
    assert e.value.code == Code.CLOSED
    with pytest.raises(KvtierError):
        s.flush()


def test_survives_reopen(store_dir):
    with open_store(store_dir) as s:
        ns = s.register_namespace(name="keep", model_id="m")
        ns.put("k", b"v" * 4096)
        nsid = ns.id
    with open_store(store_dir) as s:
        ns = s.namespace("keep")
        assert ns.id == nsid
        assert ns.get("k") == b"v" * 4096
        assert s.register_namespace(name="keep", model_id="m").id == nsid


def test_ram_tier_options_and_stats(store_dir):
    opts = dict(SMALL, ram_tier_bytes=8 << 20, ram_tier_shared_memory=False)
    with kvtier.Store(store_dir, **opts) as s:
        ns = s.register_namespace(name="ram", model_id="m")
        ns.put("k", b"r" * 8192)
        assert ns.get("k") == b"r" * 8192
        st = s.stats()
        assert st["ram_capacity_bytes"] > 0
        assert st["hits_ram"] == 1
        assert st["ram_blocks"] == 1
    # The tier without its prefault still serves; the key takes a bool only.
    with kvtier.Store(store_dir, **dict(opts, ram_tier_prefault=False)) as s:
        ns = s.register_namespace(name="ram", model_id="m")
        ns.put("k2", b"p" * 8192)
        assert ns.get("k2") == b"p" * 8192
    with pytest.raises(KvtierError) as e:
        kvtier.Store(store_dir, **dict(opts, ram_tier_prefault="no"))
    assert e.value.code == Code.INVALID_ARGUMENT
    # 8 KiB blocks in 8 KiB chunks take their own size, not 64 KiB each.
    with kvtier.Store(store_dir, **dict(opts, ram_tier_chunk_bytes=8192)) as s:
        ns = s.register_namespace(name="ram", model_id="m")
        for i in range(64):
            ns.put(f"c{i}", bytes([i]) * 8192)
        st = s.stats()
        assert st["ram_blocks"] == 64 and st["ram_used_bytes"] == 64 * 8192
        assert ns.get("c7") == bytes([7]) * 8192
    for bad in (1000, "4096"):
        with pytest.raises(KvtierError) as e:
            kvtier.Store(store_dir, **dict(opts, ram_tier_chunk_bytes=bad))
        assert e.value.code == Code.INVALID_ARGUMENT


def test_path_with_nul_is_refused(tmp_path):
    # C would read "a\0b" as "a" and open (or create) another folder.
    for path in (str(tmp_path / "a") + "\0b", (str(tmp_path / "a") + "\0b").encode()):
        with pytest.raises(KvtierError) as e:
            kvtier.Store(path, **SMALL)
        assert e.value.code == Code.INVALID_ARGUMENT
    assert not (tmp_path / "a").exists()


def _remote_options(rados_ns):
    conf = os.environ.get("KVTIER_CEPH_CONF", "")
    return dict(SMALL, segment_size_bytes=4 << 20, capacity_bytes=64 << 20, ram_tier_bytes=16 << 20,
                ram_tier_shared_memory=False,
                remote=dict(enabled=True, ceph_conf=conf, pool="kvtier", rados_namespace=rados_ns,
                            poll_interval_ms=100, admit_to_ram=True))


def _wait(pred, seconds=60):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


@pytest.mark.skipif(not os.environ.get("KVTIER_CEPH_CONF"), reason="no Ceph cluster (KVTIER_CEPH_CONF unset)")
def test_get_returns_shared_tier_blocks(tmp_path):
    # Node B holds the block only in the shared tier, then only in its RAM
    # tier: get() (which sizes its buffer from block_size) must return it.
    opts = _remote_options(f"py{os.getpid()}-{int(time.time() * 1000) % 1000000}")
    spec = dict(name="t", model_id="m/remote", dtype="bf16", block_tokens=16)
    blocks = {}
    with kvtier.Store(str(tmp_path / "a"), **opts) as a:
        ns = a.register_namespace(**spec)
        i = 0
        while a.stats()["segments_sealed"] < 1:
            key, data = b"k%04d" % i, bytes([i % 251]) * (200_000 + i)
            assert ns.put(key, data)
            blocks[key] = data
            i += 1
        assert _wait(lambda: a.stats()["remote_uploads"] >= 1)
    with kvtier.Store(str(tmp_path / "b"), **opts) as b:
        ns = b.register_namespace(**spec)
        assert _wait(lambda: b.stats()["remote_segments_imported"] >= 1)
        key = b"k0000"
        assert ns.contains(key)
        assert ns.block_size(key) == len(blocks[key])
        assert ns.get(key) == blocks[key]       # from Ceph, admitted to RAM
        assert b.stats()["hits_remote"] == 1
        assert ns.get(key) == blocks[key]       # from the RAM tier
        assert b.stats()["hits_ram"] == 1


def test_destroy_store_removes_the_store_and_its_ram_tier(store_dir):
    s = kvtier.Store(store_dir, ram_tier_bytes=8 << 20, ram_tier_shared_memory=True, **SMALL)
    ns = s.register_namespace(name="t", model_id="m", dtype="bf16")
    ns.put(b"k", b"v" * 4096)
    assert s.stats()["ram_shared_memory"]
    shm = [f for f in os.listdir("/dev/shm") if f.endswith(".ram")]
    with pytest.raises(kvtier.KvtierError) as busy:
        kvtier.destroy_store(store_dir)
    assert busy.value.code == kvtier.Code.BUSY
    s.close()
    mine = set(shm) - set(f for f in os.listdir("/dev/shm") if f.endswith(".ram"))
    assert not mine  # closing keeps the tier for the next open
    kvtier.destroy_store(store_dir)
    assert not os.path.exists(store_dir)
    gone = set(shm) - set(f for f in os.listdir("/dev/shm") if f.endswith(".ram"))
    assert len(gone) == 1
    with pytest.raises(kvtier.KvtierError) as missing:
        kvtier.destroy_store(store_dir)
    assert missing.value.code == kvtier.Code.NOT_FOUND


def test_lookup_prefix_over_many_keys_of_one_or_mixed_lengths(store_dir):
    with open_store(store_dir) as s:
        ns = s.register_namespace(name="t", model_id="m", dtype="bf16")
        hashes = [bytes([i % 256, i // 256]) * 16 for i in range(1000)]  # 32 bytes each, like an engine's
        ns.put_batch(hashes[:600], [b"x" * 64] * 600)
        assert ns.lookup_prefix(hashes) == 600
        assert ns.lookup_prefix(hashes[:599] + [b"absent-key"] + hashes[600:]) == 599
        mixed = ["short", b"a-longer-key-of-another-length"]
        ns.put_batch(mixed, [b"y" * 64] * 2)
        assert ns.lookup_prefix(mixed + hashes[:3] + ["missing"]) == 5
        assert ns.lookup_prefix([]) == 0
        with pytest.raises(KvtierError) as bad:
            ns.lookup_prefix([b""])
        assert bad.value.code == Code.INVALID_ARGUMENT


def test_a_forked_child_gets_busy_and_leaves_the_parents_store_alone(store_dir):
    with open_store(store_dir) as s:
        ns = s.register_namespace(name="t")
        ns.put("before", b"p" * 4096)
        pending = ns.put_async("async", b"a" * 4096)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                for call in (lambda: ns.get("before"), lambda: ns.put("child", b"c" * 10),
                             lambda: ns.get_async("before", bytearray(4096))):
                    try:
                        call()
                        code = 3
                    except KvtierError as e:
                        if e.code != Code.BUSY or "forked" not in str(e):
                            code = 4
                s.close()  # lets go of the child's copy only
            except BaseException:
                code = 5
            os._exit(code)
        deadline = time.monotonic() + 30
        done, status = os.waitpid(pid, os.WNOHANG)
        while done == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
            done, status = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung on the parent's store")
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert pending.result(timeout=10) is True
        assert ns.get("before") == b"p" * 4096
        assert ns.get("async") == b"a" * 4096
        assert ns.get("child") is None
        out = bytearray(4096)
        assert ns.get_async("before", out).result(timeout=10) == 4096
