"""The e2e's disk limit reads only what a segment file holds: kvtier
preallocates its segment files, and an O_DIRECT read of an extent never
written returns zeros without touching the disk, which would put the limit
(and every disk row's prediction) too high."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "e2e"))

import engine_report  # noqa: E402
import engine_run  # noqa: E402
import prefix_reuse  # noqa: E402

MIB = 1 << 20


def preallocated_file(path, size, written):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
        os.pwrite(fd, b"\x5a" * written, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def test_only_written_bytes_count(tmp_path):
    path = str(tmp_path / "00000000.kvs")
    preallocated_file(path, 16 * MIB, 4 * MIB)
    if prefix_reuse.written_bytes(path) != 4 * MIB:
        pytest.skip(f"{tmp_path}'s file system keeps no unwritten extents (tmpfs?)")
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
    except OSError as e:
        pytest.skip(f"no O_DIRECT on {tmp_path}: {e}")
    gbps, read, _ = prefix_reuse.odirect_read([path], 1 << 30, threads=2)
    assert read == 4 * MIB and gbps > 0


def test_a_file_without_holes_counts_whole(tmp_path):
    path = str(tmp_path / "full.kvs")
    with open(path, "wb") as f:
        f.write(b"\x01" * (3 * MIB))
    assert prefix_reuse.written_bytes(path) == 3 * MIB


def test_the_read_buffer_starts_at_a_huge_page():
    import ctypes
    buf = prefix_reuse.HugeBuffer(2 * MIB)
    try:
        assert len(buf.view) == 2 * MIB
        addr = ctypes.addressof(ctypes.c_char.from_buffer(buf.view))
        assert addr % (2 * MIB) == 0
    finally:
        buf.close()


def test_the_limit_sweeps_from_one_reader_up(tmp_path):
    seg = tmp_path / "store" / "segments"
    seg.mkdir(parents=True)
    path = str(seg / "00000000.kvs")
    with open(path, "wb") as f:
        f.write(b"\x02" * (8 * MIB))
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
    except OSError as e:
        pytest.skip(f"no O_DIRECT on {tmp_path}: {e}")
    got = engine_run.odirect_rate(str(tmp_path / "store"))
    assert engine_run.DISK_LIMIT_THREADS[0] == 1
    assert sorted(got["by_threads"]) == list(engine_run.DISK_LIMIT_THREADS)
    assert got["threads"] in engine_run.DISK_LIMIT_THREADS and got["gbps"] > 0
    assert got["gbps"] == max(got["by_threads"].values())
    md = engine_report.markdown({"date": "test", "disk": {"m/rep0": got}, "workers": []})
    assert "best over 1-32 threads" in md
