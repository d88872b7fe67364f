#!/usr/bin/env bash
# Installs kvtier from BUILD_DIR into a temporary prefix, then builds and runs
# a consumer with find_package(kvtier) and one with pkg-config.
set -euo pipefail
src_dir=$1 build_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$src_dir/tests/install/consumer" -B "$work/consumer" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/consumer" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" "$work/consumer/consumer" "$work/store1"
libdir=$(ls -d "$work"/prefix/lib* | head -n1)
export PKG_CONFIG_PATH="$libdir/pkgconfig"
g++ -o "$work/pc_consumer" "$src_dir/tests/install/consumer/main.cc" $(pkg-config --cflags --libs kvtier)
LD_LIBRARY_PATH="$libdir" "$work/pc_consumer" "$work/store2"
echo "install check: find_package and pkg-config consumers ok"
