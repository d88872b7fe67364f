#!/usr/bin/env bash
# The kvtier Python package, installed two ways into scratch folders and
# imported from there with a clean environment (no KVTIER_LIB, no
# LD_LIBRARY_PATH, not the source tree):
#   1. cmake --install BUILD_DIR --prefix P   (P/lib/python3/dist-packages)
#   2. pip wheel --no-build-isolation SRC, then pip install --target T
set -euo pipefail
src_dir=$1 build_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3
check='
import os, sys, kvtier
lib = sys.modules["kvtier._lib"].lib._name
assert os.path.realpath(lib).startswith(os.path.realpath(sys.argv[1])), (lib, sys.argv[1])
with kvtier.Store(sys.argv[2], segment_size_bytes=1 << 20, capacity_bytes=8 << 20) as s:
    ns = s.register_namespace(name="t", model_id="m", dtype="bf16")
    assert ns.put(b"k", b"v" * 5000)
    assert ns.get(b"k") == b"v" * 5000
print("imported", kvtier.__file__, "with", lib)
'
clean_env() { env -i PATH=/usr/bin:/bin HOME="$work" "$@"; }

cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
pkgdir=$(ls -d "$work"/prefix/lib*/python3/dist-packages)
(cd "$work" && clean_env PYTHONPATH="$pkgdir" "$py" -c "$check" "$work/prefix" "$work/store1")

KVTIER_LIB_DIR="$build_dir/lib" "$py" -m pip wheel -q --no-build-isolation --no-deps --no-index \
  -w "$work/wheels" "$src_dir"
"$py" -m pip install -q --no-deps --no-index --target "$work/site" "$work"/wheels/kvtier-*.whl
(cd "$work" && clean_env PYTHONPATH="$work/site" "$py" -c "$check" "$work/site" "$work/store2")
echo "python install check: cmake --install and pip wheel both import and serve"
