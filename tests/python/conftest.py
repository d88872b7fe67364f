import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "src", "python"))

SMALL = dict(segment_size_bytes=1 << 20, capacity_bytes=16 << 20, write_queue_bytes=8 << 20,
             group_commit_bytes=2 << 20, read_threads=2, queue_depth=16)


@pytest.fixture
def store_dir(tmp_path):
    return str(tmp_path / "store")
