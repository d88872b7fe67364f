"""Drives KvtierL2Connector the way LMCache's NativeConnectorL2Adapter does:
submit a batch, poll the client's eventfd, drain_completions() and read each
(future_id, ok, error, per_key) as the wrapper's demux thread reads it.
test_lmcache_engine.py runs the same client inside LMCache's real wrapper
when KVTIER_LMCACHE_SRC is set."""
import logging
import os
import select
import time

import pytest

from kvtier.adapters import lmcache as adapter
from conftest import SMALL

SIZE = 32 * 1024


def connector(path, **params):
    return adapter.KvtierL2Connector(**dict({"path": path, "capacity_gb": 0.0625, "dtype": "bfloat16",
                                             "chunk_tokens": 256, "options": dict(SMALL)}, **params))


def wait_for(c, fid, timeout=30):
    p = select.poll()
    p.register(c.event_fd(), select.POLLIN)
    deadline = time.monotonic() + timeout
    seen = {}
    while time.monotonic() < deadline and fid not in seen:
        if p.poll(100):
            for done in c.drain_completions():
                assert len(done) == 4 and isinstance(done[0], int) and isinstance(done[1], bool)
                assert isinstance(done[2], str) and (done[3] is None or isinstance(done[3], list))
                seen[done[0]] = done
    assert fid in seen, "no completion"
    return seen[fid]


def keys(n, tag="Qwen/Qwen3-0.6B@01000100"):
    return [f"{tag}@0@{i:064x}" for i in range(n)]


def bufs(n, fill=None):
    return [memoryview(bytearray(os.urandom(SIZE) if fill is None else bytes([fill]) * SIZE)) for _ in range(n)]


def test_set_get_exists_delete_across_a_restart(store_dir):
    c = connector(store_dir)
    data = bufs(4)
    fid, ok, err, per = wait_for(c, c.submit_batch_set(keys(4), data))
    assert (ok, err, per) == (True, "", [True] * 4)
    c.close()
    c.close()  # idempotent

    c = connector(store_dir)
    _, ok, _, per = wait_for(c, c.submit_batch_exists(keys(5)))
    assert ok and per == [True] * 4 + [False]  # a partial hit is still a successful lookup
    out = bufs(4, fill=0)
    _, ok, _, per = wait_for(c, c.submit_batch_get(keys(4), out))
    assert ok and per == [True] * 4
    assert [bytes(o) for o in out] == [bytes(d) for d in data]
    _, ok, _, per = wait_for(c, c.submit_batch_delete(keys(2) + keys(1, "absent")))
    assert ok and per == [True, True, False]
    _, _, _, per = wait_for(c, c.submit_batch_exists(keys(4)))
    assert per == [False, False, True, True]
    c.close()


def test_the_eventfd_is_readable_only_while_completions_wait(store_dir):
    c = connector(store_dir)
    p = select.poll()
    p.register(c.event_fd(), select.POLLIN)
    assert not p.poll(0)
    wait_for(c, c.submit_batch_exists(keys(1)))
    assert not p.poll(0) and c.drain_completions() == []
    c.close()


def test_a_get_into_a_buffer_of_another_size_fails_that_key(store_dir):
    c = connector(store_dir)
    wait_for(c, c.submit_batch_set(keys(2), bufs(2)))
    small, big = memoryview(bytearray(SIZE // 2)), memoryview(bytearray(SIZE * 2))
    _, ok, _, per = wait_for(c, c.submit_batch_get(keys(2), [small, big]))
    assert not ok and per == [False, False]
    _, ok, _, per = wait_for(c, c.submit_batch_get(keys(1, "absent"), bufs(1, 0)))
    assert not ok and per == [False]
    # A partial load: LMCache's wrapper marks each key loaded by its own result.
    out = bufs(2, fill=0)
    _, ok, _, per = wait_for(c, c.submit_batch_get(keys(1) + keys(1, "absent"), out))
    assert not ok and per == [True, False]
    assert bytes(out[1]) == bytes(SIZE)
    c.close()


def test_a_namespace_field_change_is_a_miss(store_dir):
    c = connector(store_dir)
    wait_for(c, c.submit_batch_set(keys(1), bufs(1)))
    c.close()
    for change in ({"dtype": "float16"}, {"chunk_tokens": 512}, {"salt": "b"}, {"layout": "other"}):
        c = connector(store_dir, **change)
        assert wait_for(c, c.submit_batch_exists(keys(1)))[3] == [False], change
        c.close()


def test_keys_longer_than_kvtier_takes_are_stored_under_their_hash(store_dir):
    c = connector(store_dir)
    long_key = "m" * 300 + "@0@0@ff"
    data = bufs(1)
    assert wait_for(c, c.submit_batch_set([long_key], data))[3] == [True]
    out = bufs(1, 0)
    assert wait_for(c, c.submit_batch_get([long_key], out))[3] == [True]
    assert bytes(out[0]) == bytes(data[0])
    assert wait_for(c, c.submit_batch_exists([long_key[:-1] + "e"]))[3] == [False]
    c.close()


def test_mismatched_lengths_and_empty_batches_complete(store_dir):
    c = connector(store_dir)
    _, ok, err, per = wait_for(c, c.submit_batch_set(keys(2), bufs(1)))
    assert not ok and "differ" in err and per == [False, False]
    assert wait_for(c, c.submit_batch_set([], []))[1:] == (True, "", [])
    c.close()


def test_a_bad_key_or_buffer_fails_in_its_completion_never_in_the_caller(store_dir):
    c = connector(store_dir)
    _, ok, err, per = wait_for(c, c.submit_batch_set(keys(2) + [None], bufs(2, fill=3) + bufs(1)))
    assert not ok and per == [True, True, False] and err
    _, ok, err, per = wait_for(c, c.submit_batch_set(keys(1, "x@1"), [object()]))
    assert not ok and per == [False]
    _, ok, err, per = wait_for(c, c.submit_batch_get(keys(2), bufs(1) + [12345]))
    assert not ok and per == [True, False]
    for submit in (c.submit_batch_exists, c.submit_batch_delete):
        _, ok, err, per = wait_for(c, submit(keys(1) + [None]))
        assert not ok and err and per == [False, False]
    c.close()


@pytest.mark.parametrize("bad, named", [({"capacity": 1}, "capacity"), ({"path": ""}, "path")])
def test_a_wrong_param_is_named(store_dir, bad, named):
    bad = dict(bad)
    with pytest.raises(ValueError, match=named):
        connector(bad.pop("path", store_dir), **bad)


def test_a_server_without_pythonhashseed_is_warned(store_dir, monkeypatch, caplog):
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    with caplog.at_level(logging.WARNING, logger="kvtier.adapters.lmcache"):
        connector(store_dir).close()
    assert "PYTHONHASHSEED is not set" in caplog.text
    caplog.clear()
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    with caplog.at_level(logging.WARNING, logger="kvtier.adapters.lmcache"):
        connector(store_dir).close()
    assert "PYTHONHASHSEED" not in caplog.text


def test_a_store_that_cannot_open_leaves_the_server_without_this_l2(tmp_path, caplog):

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with caplog.at_level(logging.ERROR, logger="kvtier.adapters.lmcache"):
        c = connector(str(blocker))
    assert [r.levelno for r in caplog.records].count(logging.ERROR) == 1
    assert "kvtier L2 connector disabled" in caplog.text
    assert wait_for(c, c.submit_batch_exists(keys(2)))[1:] == (True, "", [False, False])
    _, ok, err, per = wait_for(c, c.submit_batch_set(keys(2), bufs(2)))
    assert not ok and err and per == [False, False]
    assert not wait_for(c, c.submit_batch_get(keys(1), bufs(1, 0)))[1]
    assert wait_for(c, c.submit_batch_delete(keys(1)))[3] == [False]
    c.close()
