import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "src", "python"))

SMALL = dict(segment_size_bytes=1 << 20, capacity_bytes=16 << 20, write_queue_bytes=8 << 20,
             group_commit_bytes=2 << 20, read_threads=2, queue_depth=16)


@pytest.fixture(autouse=True)
def _destroy_stores(tmp_path):
    """Stores a test leaves under tmp_path go with their RAM tiers: a
    /dev/shm tier outlives its folder, and a suite run would leave gigabytes
    of them behind."""
    yield
    try:
        import kvtier
    except ImportError:
        return
    for root, _, files in os.walk(tmp_path):
        if "SUPERBLOCK" in files:
            try:
                kvtier.destroy_store(root)
            except kvtier.KvtierError:
                pass  # still open somewhere: pytest removes the folder later


@pytest.fixture
def store_dir(tmp_path):
    return str(tmp_path / "store")


def _serve(tmp_path, extra):
    """A `kvtier serve` process on a fresh store (with `extra` arguments);
    yields its "unix:" address. Needs $KVTIER_BIN (ctest sets it); skips
    without."""
    import signal
    import subprocess
    import time

    binary = os.environ.get("KVTIER_BIN", "")
    if not os.access(binary or "/nonexistent", os.X_OK):
        pytest.skip("KVTIER_BIN (the kvtier program) is not set")
    sock = str(tmp_path / "kvtier.sock")
    proc = subprocess.Popen([binary, "serve", str(tmp_path / "served-store"), "--socket", sock, "--segment-size", "4M",
                             "--capacity", "256M", "--metrics-listen", "off", "--log", str(tmp_path / "serve.log")]
                            + extra)
    until = time.time() + 30
    while not os.path.exists(sock) and proc.poll() is None and time.time() < until:
        time.sleep(0.02)
    if proc.poll() is not None or not os.path.exists(sock):
        pytest.fail("kvtier serve did not start: " + open(tmp_path / "serve.log").read())
    yield "unix:" + sock
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


@pytest.fixture
def kvtier_service(tmp_path):
    """A `kvtier serve` process on a fresh store, without a RAM tier."""
    yield from _serve(tmp_path, [])


@pytest.fixture
def kvtier_service_ram(tmp_path):
    """A `kvtier serve` process with a 64 MiB RAM tier (in /dev/shm where it
    has room: the tier the service lends to clients' GPU loads)."""
    yield from _serve(tmp_path, ["--ram-tier", "64M"])
