"""The Python package against `kvtier serve` (issue 19): unix: and auto:
paths, registered memory, several processes, metrics, signals.

Needs the kvtier program: $KVTIER_BIN (ctest sets it); skipped without."""
import json
import mmap
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

import kvtier

KVTIER_BIN = os.environ.get("KVTIER_BIN", "")
pytestmark = pytest.mark.skipif(not os.access(KVTIER_BIN or "/nonexistent", os.X_OK),
                                reason="KVTIER_BIN (the kvtier program) is not set")
CLIENT = {"client": {"staging_bytes": 16 << 20, "op_timeout_ms": 10000}}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, seconds=20):
    until = time.time() + seconds
    while not pred():
        if time.time() > until:
            return False
        time.sleep(0.02)
    return True


class Served:
    def __init__(self, tmp_path, *extra, env=None):
        self.dir = str(tmp_path / "store")
        self.sock = str(tmp_path / "kv.sock")
        self.log = str(tmp_path / "serve.log")
        self.port = free_port()
        self.started_before = self.read_log().count(" kvtier serve: serving ")  # a log reused by a restart
        self.proc = subprocess.Popen(
            [KVTIER_BIN, "serve", self.dir, "--socket", self.sock, "--segment-size", "4M", "--capacity", "256M",
             "--metrics-listen", f"127.0.0.1:{self.port}", "--log", self.log, *extra], env=env)
        # The socket comes first; the "serving" line follows once the metrics
        # endpoint and the start-up warnings are there.
        assert wait_for(lambda: self.serving() or self.proc.poll() is not None)
        assert self.proc.poll() is None, self.read_log()
        self.address = "unix:" + self.sock

    def read_log(self):
        return open(self.log).read() if os.path.exists(self.log) else ""

    def serving(self):
        return self.read_log().count(" kvtier serve: serving ") > self.started_before

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
        return self.proc.returncode


@pytest.fixture
def served(tmp_path):
    s = Served(tmp_path, "--ram-tier", "64M")
    yield s
    s.stop()


SPEC = dict(name="svc", model_id="Qwen/Qwen3-0.6B", dtype="bf16", layout="test", block_tokens=16)


def test_a_served_store_is_the_same_api(served):
    with kvtier.Store(served.address, **CLIENT) as s:
        ns = s.register_namespace(**SPEC)
        a = np.arange(1 << 16, dtype=np.float32)
        assert ns.put("k1", a)
        out = np.zeros_like(a)
        assert ns.get_into("k1", out) == a.nbytes and np.array_equal(out, a)
        assert ns.get("nope") is None
        assert ns.lookup_prefix(["k1", "nope", "k1"]) == 1
        futs = [ns.put_async(f"a{i}", a[: 1024 * (i + 1)]) for i in range(8)]
        assert all(f.result(timeout=10) for f in futs)
        assert ns.get("a3") == a[: 4096].tobytes()
        st = s.stats()
        assert st["puts"] >= 9
    # What went through the service is in the folder once it stops.
    assert served.stop() == 0
    with kvtier.Store(served.dir, read_only=True) as s:
        assert s.namespace(SPEC["name"]).get("k1") == a.tobytes()


def test_a_forked_child_never_speaks_on_the_parents_connection(served):
    # The child shares the parent's socket and staging: a call there could
    # take the parent's replies or land in its staging. It gets Busy instead.
    with kvtier.Store(served.address, **CLIENT) as s:
        ns = s.register_namespace(**SPEC)
        ns.put("p", b"p" * 65536)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                try:
                    ns.get("p")
                    code = 3
                except kvtier.KvtierError as e:
                    code = 0 if e.code == kvtier.Code.BUSY else 4
                s.close()
            except BaseException:
                code = 5
            os._exit(code)
        for _ in range(50):  # the parent's calls go on while the child runs
            assert ns.get("p") == b"p" * 65536
        status = []

        def reaped():
            done, st = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                status.append(st)
            return bool(status)

        if not wait_for(reaped):
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung on the parent's connection")
        assert os.WIFEXITED(status[0]) and os.WEXITSTATUS(status[0]) == 0
        assert ns.get("p") == b"p" * 65536


@pytest.mark.parametrize("spin", [0, 1000])
def test_blocking_requests_answer_whether_the_caller_spins_or_sleeps(served, spin):
    with kvtier.Store(served.address, client={"reply_spin_us": spin}) as s:
        ns = s.register_namespace(**SPEC)
        assert ns.put("spun", b"x" * 4096)
        for _ in range(200):
            assert ns.lookup_prefix(["spun", "nope"]) == 1 and "spun" in ns


def test_a_bad_reply_spin_is_named(served):
    with pytest.raises(kvtier.KvtierError, match="reply_spin_us"):
        kvtier.Store(served.address, client={"reply_spin_us": -2})


# Out of the lent RAM tier (one copy) or out of staging (two), on the copy threads either way.
@pytest.mark.parametrize("lent", [True, False])
def test_a_batch_into_private_memory_is_copied_out_by_the_client_copy_threads(served, lent):
    rng = np.random.default_rng(7)
    blocks = [rng.integers(0, 255, (3 << 19) + 7, dtype=np.uint8) for _ in range(5)]
    client = {"copy_threads": 3, "staging_bytes": 8 << 20, "read_lent_tier": lent}
    with kvtier.Store(served.address, client=client) as s:
        ns = s.register_namespace(**SPEC)
        for i, b in enumerate(blocks):
            assert ns.put(f"cp{i}", b)
        outs = [np.zeros(b.nbytes, dtype=np.uint8) for b in blocks]
        assert ns.get_batch([f"cp{i}" for i in range(5)], outs) == [b.nbytes for b in blocks]
        assert all(np.array_equal(o, b) for o, b in zip(outs, blocks))
        # get_async too, in flight together (lent: each copied on a copy thread).
        outs = [np.zeros(b.nbytes, dtype=np.uint8) for b in blocks]
        futures = [ns.get_async(f"cp{i}", o, timeout=10) for i, o in enumerate(outs)]
        assert [f.result(timeout=10) for f in futures] == [b.nbytes for b in blocks]
        assert all(np.array_equal(o, b) for o, b in zip(outs, blocks))
        assert ns.get_async("absent", outs[0], timeout=10).result(timeout=10) is None
    with pytest.raises(kvtier.KvtierError, match="copy_threads"):
        kvtier.Store(served.address, client={"copy_threads": -1})
    with pytest.raises(kvtier.KvtierError, match="read_lent_tier"):
        kvtier.Store(served.address, client={"read_lent_tier": "yes"})


@pytest.mark.parametrize("spin", [0, 300])
def test_a_store_shares_a_lone_gets_copy_when_asked(tmp_path, spin):
    rng = np.random.default_rng(8)
    block = rng.integers(0, 255, (2 << 20) + 5, dtype=np.uint8)
    opts = {"ram_tier_bytes": 64 << 20, "ram_copy_threads": 3, "ram_split_copy_min_bytes": 1 << 20,
            "ram_copy_spin_us": spin}
    with kvtier.Store(str(tmp_path / "s"), **opts) as s:
        ns = s.register_namespace(**SPEC)
        assert ns.put("big", block)
        for _ in range(3):  # the first read records the states the later ones share out by
            out = np.zeros(block.nbytes, dtype=np.uint8)
            assert ns.get_into("big", out) == block.nbytes and np.array_equal(out, block)
        assert s.stats()["hits_ram"] >= 3
    with pytest.raises(kvtier.KvtierError, match="ram_split_copy_min_bytes"):
        kvtier.Store(str(tmp_path / "t"), ram_split_copy_min_bytes="big")
    for bad in (-1, 10001, "fast"):
        with pytest.raises(kvtier.KvtierError, match="ram_copy_spin_us"):
            kvtier.Store(str(tmp_path / "u"), ram_copy_spin_us=bad)


def test_registered_memory_moves_payloads_without_staging(served):
    fd = os.memfd_create("engine-pool")
    size = 64 << 20
    os.ftruncate(fd, size)
    mem = mmap.mmap(fd, size)
    view = np.frombuffer(mem, dtype=np.uint8)
    # Staging too small for 3 MiB blocks, and puts not read from this process's memory.
    client = {"client": {"staging_bytes": 2 << 20, "service_reads_memory": False}}
    with kvtier.Store(served.address, **client) as s:
        ns = s.register_namespace(**SPEC)
        block = np.random.default_rng(1).integers(0, 255, 3 << 20, dtype=np.uint8)
        view[: block.nbytes] = block
        assert not ns.put("big", view[: block.nbytes])  # declined: no staging room
        s.register_memory(view, fd)
        assert ns.put("big", view[: block.nbytes])
        assert ns.get_into("big", view[16 << 20: (16 << 20) + block.nbytes]) == block.nbytes
        assert np.array_equal(view[16 << 20: (16 << 20) + block.nbytes], block)
    del view
    mem.close()
    os.close(fd)


def test_puts_from_private_memory_are_read_by_the_service_in_one_copy(served):
    # Staging smaller than the block: only the service's read of this
    # process's memory (another process) can carry it.
    block = np.random.default_rng(2).integers(0, 255, 3 << 20, dtype=np.uint8)
    scrape = lambda: urllib.request.urlopen(f"http://127.0.0.1:{served.port}/metrics", timeout=10).read().decode()
    with kvtier.Store(served.address, client={"staging_bytes": 2 << 20}) as s:
        ns = s.register_namespace(**SPEC)
        assert ns.put("private", block)
        out = np.zeros_like(block)
        assert ns.get_into("private", out) == block.nbytes
        assert np.array_equal(out, block)
    assert _metric(scrape(), "kvtier_service_client_memory_puts_total") == 1
    assert "puts read from its memory" in open(served.log).read()
    # Declined by the client: the same put goes through staging, too small.
    with kvtier.Store(served.address, client={"staging_bytes": 2 << 20, "service_reads_memory": False}) as s:
        assert not s.register_namespace(**SPEC).put("staged", block)
    assert _metric(scrape(), "kvtier_service_client_memory_puts_total") == 1


@pytest.mark.parametrize("flag", [False, True])
def test_zero_copy_small_pages_reads_disk_blocks_straight_into_client_memory(tmp_path, flag):
    served = Served(tmp_path, *(["--zero-copy-small-pages"] if flag else []))  # no RAM tier: gets read the disk
    fd = os.memfd_create("engine-pool")  # 4 KiB pages
    size = 16 << 20
    os.ftruncate(fd, size)
    mem = mmap.mmap(fd, size)
    view = np.frombuffer(mem, dtype=np.uint8)
    out = None
    try:
        with kvtier.Store(served.address, **CLIENT) as s:
            ns = s.register_namespace(**SPEC)
            s.register_memory(view, fd)
            block = np.random.default_rng(2).integers(0, 255, 3 << 20, dtype=np.uint8)
            view[: block.nbytes] = block
            assert ns.put("disk", view[: block.nbytes])
            before = s.stats()["small_page_copies"]
            out = view[8 << 20: (8 << 20) + block.nbytes]
            out[:] = 0
            assert ns.get_into("disk", out) == block.nbytes and np.array_equal(out, block)
            copies = s.stats()["small_page_copies"] - before
        # Without the flag the service reads into a bounce buffer and copies.
        assert copies == (0 if flag else 1)
    finally:
        del view, out
        mem.close()
        os.close(fd)
        served.stop()


def resident_memory(pid):
    """Bytes of anonymous and shared memory the process holds resident (its
    RAM tier is one or the other)."""
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    return sum(int(fields[k].split()[0]) * 1024 for k in ("RssAnon", "RssShmem") if k in fields)


@pytest.mark.parametrize("prefault", [True, False])
def test_serve_sets_the_ram_tiers_chunk_size_and_prefault(tmp_path, prefault):
    tier = 256 << 20
    served = Served(tmp_path, "--ram-tier", "256M", "--ram-chunk", "4K",
                    *([] if prefault else ["--no-ram-prefault"]))
    try:
        assert "RAM tier 256.00 MiB in " in served.read_log() and ", 4.00 KiB chunks, " in served.read_log()
        if prefault:
            assert wait_for(lambda: resident_memory(served.proc.pid) >= tier)
            assert wait_for(lambda: "RAM tier faulted in: 256.00 MiB, " in served.read_log())
        else:
            time.sleep(1.0)  # the prefault, were it on, takes well under that here
            assert resident_memory(served.proc.pid) < tier // 2
            assert "RAM tier faulted in" not in served.read_log()
        with kvtier.Store(served.address, **CLIENT) as s:
            ns = s.register_namespace(**SPEC)
            for i in range(300):
                assert ns.put(f"small{i}", bytes([i % 251]) * 4096)
            st = s.stats()
            # Each 4 KiB block takes one 4 KiB chunk, not 64 KiB.
            assert st["ram_blocks"] == 300 and st["ram_used_bytes"] == 300 * 4096, st
            assert st["ram_payload_bytes"] == 300 * 4096, st
            assert ns.get("small9") == bytes([9]) * 4096
        # The operator's view: the metrics and `kvtier info` name the RAM tier's fill.
        body = urllib.request.urlopen(f"http://127.0.0.1:{served.port}/metrics", timeout=10).read().decode()
        assert _metric(body, 'kvtier_blocks{tier="ram"}') == 300
        assert _metric(body, 'kvtier_bytes{tier="ram"}') == 300 * 4096
        assert _metric(body, "kvtier_ram_used_bytes") == 300 * 4096
        assert _metric(body, "kvtier_ram_capacity_bytes") == tier
        assert _metric(body, "kvtier_ram_prefaulted_bytes") == (tier if prefault else 0)
        info = subprocess.run([KVTIER_BIN, "info", served.address, "--json"], capture_output=True, text=True,
                              timeout=60)
        assert info.returncode == 0, info.stderr
        ram = json.loads(info.stdout)["ram_tier"]
        assert ram["blocks"] == 300 and ram["used_bytes"] == 300 * 4096 and ram["capacity_bytes"] == tier, ram
    finally:
        served.stop()
    # A chunk size the store refuses is named, and serve exits 3.
    bad = subprocess.run([KVTIER_BIN, "serve", str(tmp_path / "other"), "--ram-tier", "64M", "--ram-chunk", "5000",
                          "--metrics-listen", "off"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 3 and "ram_tier_chunk_bytes" in bad.stderr, bad.stderr


CHILD = r"""
import sys, numpy as np, kvtier
addr, who = sys.argv[1], int(sys.argv[2])
with kvtier.Store(addr, client={"staging_bytes": 8 << 20}) as s:
    ns = s.register_namespace(name="svc", model_id="Qwen/Qwen3-0.6B", dtype="bf16", layout="test", block_tokens=16)
    for i in range(20):
        assert ns.put(f"p{who}-{i}", np.full(50000, who * 1000 + i, dtype=np.int32))
    # Wait for the others' blocks, then read them all.
    import time
    for other in range(4):
        for i in range(20):
            for _ in range(500):
                got = ns.get(f"p{other}-{i}")
                if got is not None:
                    break
                time.sleep(0.01)
            assert got == np.full(50000, other * 1000 + i, dtype=np.int32).tobytes(), (other, i)
print("ok", who)
"""


def test_processes_share_one_store(served):
    env = dict(os.environ)
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, served.address, str(w)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for w in range(4)]
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out.decode()
    body = urllib.request.urlopen(f"http://127.0.0.1:{served.port}/metrics", timeout=10).read().decode()
    assert "kvtier_service_connections_total 4" in body
    assert 'kvtier_namespace_puts_total{namespace="svc"' in body
    assert "kvtier_namespace_hit_tokens_total" in body
    assert 'kvtier_hits_total{source="ram"}' in body
    # 200,000-byte blocks take four 64 KiB chunks each.
    assert _metric(body, 'kvtier_blocks{tier="ram"}') == 80
    assert _metric(body, "kvtier_ram_used_bytes") == 80 * 4 * 65536
    assert _metric(body, 'kvtier_bytes{tier="ram"}') == 80 * 200000


def _metric(body, name):
    for line in body.splitlines():
        if line.startswith(name):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.mark.parametrize("interval", ["0", "3600"])
def test_metrics_reuse_the_namespace_counts_for_the_count_interval(tmp_path, interval):
    # Counting blocks per namespace walks the whole index, so a scrape reuses
    # the last count for --metrics-count-interval seconds; 0 counts each time.
    s = Served(tmp_path, "--metrics-count-interval", interval)
    try:
        scrape = lambda: urllib.request.urlopen(f"http://127.0.0.1:{s.port}/metrics", timeout=10).read().decode()
        with kvtier.Store(s.address, **CLIENT) as st:
            ns = st.register_namespace(**SPEC)
            assert ns.put("a", np.zeros(1024, dtype=np.float32))
            first = scrape()
            assert ns.put("b", np.zeros(1024, dtype=np.float32))
            second = scrape()
        blocks = 'kvtier_namespace_blocks{namespace="svc'
        assert _metric(first, blocks) == 1
        assert _metric(second, "kvtier_puts_total") == 2
        assert _metric(second, blocks) == (2 if interval == "0" else 1)
        age = _metric(second, "kvtier_namespace_counts_age_seconds")
        assert age == 0 if interval == "0" else 0 < age < 3600
    finally:
        s.stop()


def test_sighup_reopens_the_log_and_sigterm_closes_cleanly(tmp_path):
    s = Served(tmp_path)
    os.rename(s.log, s.log + ".1")
    s.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: os.path.exists(s.log))
    assert s.stop() == 0
    assert "stopped cleanly" in open(s.log).read()
    out = subprocess.run([KVTIER_BIN, "info", s.dir, "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert '"clean"' in out.stdout


def test_serve_names_orphaned_ram_tiers_at_start(tmp_path):
    # A store whose folder is deleted by hand leaves its /dev/shm tier behind.
    folder = str(tmp_path / "deleted-by-hand")
    with kvtier.Store(folder, ram_tier_bytes=8 << 20) as s:
        shm_tier = s.stats()["ram_shared_memory"]
    if not shm_tier:
        pytest.skip("no room in /dev/shm for the tier")
    info = subprocess.run([KVTIER_BIN, "info", folder, "--json"], capture_output=True, text=True)
    assert info.returncode == 0, info.stderr
    store_id = json.loads(info.stdout)["store_id"]
    shutil.rmtree(folder)
    s = Served(tmp_path)
    try:
        log = open(s.log).read()
        assert "orphaned RAM tier(s) in /dev/shm hold" in log, log
        assert "kvtier shm --remove-orphans --yes" in log, log
    finally:
        s.stop()
        out = subprocess.run([KVTIER_BIN, "shm", "--remove-orphans", "--yes", store_id], capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stderr


def test_auto_starts_one_service_for_every_process_and_it_leaves_when_idle(tmp_path):
    folder = str(tmp_path / "auto-store")
    os.makedirs(folder)
    addr = "auto:" + folder
    opts = {"client": {"staging_bytes": 8 << 20, "idle_exit_s": 1, "serve_program": KVTIER_BIN,
                       "serve_args": "--segment-size 4M --capacity 256M --metrics-listen off"}}
    a = kvtier.Store(addr, **opts)
    b = kvtier.Store(addr, **opts)
    na, nb = a.register_namespace(**SPEC), b.register_namespace(**SPEC)
    assert na.put("from-a", b"a" * 10000)
    assert nb.get("from-a") == b"a" * 10000
    assert os.path.exists(folder + "/kvtier.sock")
    a.close()
    b.close()
    # The last client gone, the service leaves; the next client starts another.
    assert wait_for(lambda: not os.path.exists(folder + "/kvtier.sock"), 30)
    with kvtier.Store(addr, **opts) as c:
        assert c.register_namespace(**SPEC).get("from-a") == b"a" * 10000


def serve_pids(folder):
    """The pids of `kvtier serve FOLDER` processes."""
    pids = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and folder.encode() in argv:
            pids.append(int(p))
    return pids


def test_an_idle_auto_client_starts_a_killed_service_again_before_its_next_call(tmp_path):
    folder = str(tmp_path / "auto-store")
    os.makedirs(folder)
    opts = {"client": {"staging_bytes": 8 << 20, "idle_exit_s": 30, "serve_program": KVTIER_BIN,
                       "serve_args": "--segment-size 4M --capacity 256M --metrics-listen off"}}
    a = kvtier.Store("auto:" + folder, **opts)
    log = os.path.join(folder, "kvtier-serve.log")
    me = f"connected: pid {os.getpid()}"
    try:
        ns = a.register_namespace(**SPEC)
        blocks = put_blocks(ns, 4)
        a.flush()
        [first] = serve_pids(folder)
        os.kill(first, signal.SIGKILL)
        # No call from here on: the client's watcher finds the connection
        # gone, starts another service and connects to it.
        assert wait_for(lambda: open(log).read().count(me) == 2, 30), open(log).read()
        text = open(log).read()
        assert text.count("serving ") == 2, text
        assert first not in serve_pids(folder)
        assert all(ns.get(k) == v for k, v in blocks.items())
        assert open(log).read().count(me) == 2  # the gets went on that connection
    finally:
        a.close()


FAIL_WRITES = os.environ.get("KVTIER_FAIL_WRITES_PRELOAD", "")
needs_fail_writes = pytest.mark.skipif(not os.path.exists(FAIL_WRITES or "/nonexistent"),
                                       reason="KVTIER_FAIL_WRITES_PRELOAD (tests/doubles/fail_writes_preload.c) "
                                              "is not set")


def failing_disk_env(store_dir, trigger):
    """kvtier serve's environment: its index's writes fail with EIO while `trigger` exists."""
    return dict(os.environ, LD_PRELOAD=FAIL_WRITES, KVTIER_FAIL_WRITES_UNDER=os.path.join(store_dir, "index") + "/",
                KVTIER_FAIL_WRITES_WHEN=str(trigger))


def put_blocks(ns, n):
    blocks = {f"blk{i}": bytes([i]) * (50000 + i) for i in range(n)}
    for k, v in blocks.items():
        assert ns.put(k, v)
    return blocks


@needs_fail_writes
@pytest.mark.parametrize("policy", ["exit", "serve"])
def test_an_index_that_fails_its_writes_makes_serve_exit_for_its_supervisor(tmp_path, policy):
    trigger = tmp_path / "fail-now"
    s = Served(tmp_path, "--on-index-failure", policy, env=failing_disk_env(str(tmp_path / "store"), trigger))
    try:
        with kvtier.Store(s.address, **CLIENT) as c:
            ns = c.register_namespace(**SPEC)
            blocks = put_blocks(ns, 6)
            c.flush()
            trigger.touch()  # the disk under the index starts failing
            # Acknowledged: its record is durable (the segments' I/O is not
            # failing), its index entry not yet; a recovery re-indexes it.
            assert ns.put("late", b"x" * 1000)
            blocks["late"] = b"x" * 1000
            with pytest.raises(kvtier.KvtierError):
                c.flush()  # the index's flush fails
            trigger.unlink()  # too late: RocksDB 7.8 does not resume after a failed flush
            if policy == "exit":
                assert wait_for(lambda: s.proc.poll() is not None, 30), "serve did not exit"
                assert s.proc.returncode == 75
                log = open(s.log).read()
                assert "refuses writes until the store is reopened" in log, log
                assert "exiting with code 75" in log, log
            else:
                # Serving on: reads go on, writes are refused until a restart.
                assert wait_for(lambda: c.stats()["index_writes_refused"], 10)
                assert s.proc.poll() is None
                assert all(ns.get(k) == v for k, v in blocks.items())
                with pytest.raises(kvtier.KvtierError):
                    ns.remove("blk0")
    finally:
        s.stop()
    # The restart (a supervisor's, here by hand) reopens the store: every
    # acknowledged block is there, and writes work again.
    again = Served(tmp_path)
    try:
        with kvtier.Store(again.address, **CLIENT) as c:
            ns = c.register_namespace(**SPEC)
            assert all(ns.get(k) == v for k, v in blocks.items())
            assert ns.put("after", b"y" * 1000)
            c.flush()
            assert not c.stats()["index_writes_refused"]
    finally:
        assert again.stop() == 0


@needs_fail_writes
def test_auto_clients_start_the_service_again_after_it_exits_on_an_index_failure(tmp_path):
    folder = str(tmp_path / "auto-store")
    os.makedirs(folder)
    trigger = tmp_path / "fail-now"
    # The service the clients start runs on the failing disk: a wrapper sets its environment.
    wrapper = tmp_path / "kvtier-on-a-failing-disk"
    env = failing_disk_env(folder, trigger)
    wrapper.write_text("#!/bin/sh\n" + "".join(f"export {k}='{env[k]}'\n" for k in (
        "LD_PRELOAD", "KVTIER_FAIL_WRITES_UNDER", "KVTIER_FAIL_WRITES_WHEN")) + f'exec "{KVTIER_BIN}" "$@"\n')
    wrapper.chmod(0o755)
    opts = {"client": {"staging_bytes": 8 << 20, "idle_exit_s": 30, "serve_program": str(wrapper),
                       "op_timeout_ms": 10000,
                       "serve_args": "--segment-size 4M --capacity 256M --metrics-listen off"}}
    a = kvtier.Store("auto:" + folder, **opts)
    b = kvtier.Store("auto:" + folder, **opts)
    try:
        na, nb = a.register_namespace(**SPEC), b.register_namespace(**SPEC)
        blocks = put_blocks(na, 4)
        a.flush()
        trigger.touch()
        with pytest.raises(kvtier.KvtierError):
            a.flush()
        trigger.unlink()
        log = os.path.join(folder, "kvtier-serve.log")
        assert wait_for(lambda: "exiting with code 75" in open(log).read(), 30), open(log).read()

        # Each client keeps calling; the first to find the service gone starts another.
        def serves_again(ns):
            try:
                return all(ns.get(k) == v for k, v in blocks.items())
            except kvtier.KvtierError:
                return False
        assert wait_for(lambda: serves_again(nb), 60), open(log).read()
        assert wait_for(lambda: serves_again(na), 30)
        assert nb.put("after", b"z" * 1000)
        assert na.get("after") == b"z" * 1000
        assert open(log).read().count("serving ") == 2
    finally:
        a.close()
        b.close()


def test_the_kvtier_command_works_against_a_service(served, tmp_path):
    with kvtier.Store(served.address, **CLIENT) as s:
        s.register_namespace(**SPEC)
    payload = tmp_path / "block"
    payload.write_bytes(b"q" * 12345)

    def kv(*args):
        return subprocess.run([KVTIER_BIN, *args], capture_output=True, text=True, timeout=60)

    r = kv("put", served.address, "abcd", str(payload), "--ns", "svc")
    assert r.returncode == 0, r.stderr
    r = kv("get", served.address, "abcd", "--ns", "svc", "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out").read_bytes() == b"q" * 12345
    r = kv("ls", served.address, "--json")
    assert r.returncode == 0 and "abcd" in r.stdout, r.stderr
    r = kv("info", served.address)
    assert r.returncode == 0 and "served by the kvtier service" in r.stdout, r.stderr
    r = kv("stats", served.address)
    assert r.returncode == 0 and "kvtier_puts_total" in r.stdout, r.stderr
