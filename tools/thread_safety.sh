#!/usr/bin/env bash
# Clang's thread-safety analysis over the library: builds src/ with clang++
# and -Wthread-safety -Werror into build-tsa/ (or $BUILD_DIR). The
# annotations (src/util/thread_annotations.h) say which mutex guards which
# field; a field touched without its mutex fails the build. A CI stage.
#
#   tools/thread_safety.sh        JOBS (build parallelism, default nproc)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-tsa}
jobs=${JOBS:-$(nproc)}
cxx=${CXX_TSA:-clang++}
command -v "$cxx" >/dev/null || { echo "thread_safety: $cxx not found (apt install clang)" >&2; exit 1; }
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_CXX_FLAGS="-Wthread-safety -Wthread-safety-beta" -DKVTIER_BUILD_TESTS=OFF -DKVTIER_BUILD_BENCH=OFF \
  -DKVTIER_WITH_CUDA=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target kvtier_obj
echo "thread_safety: clean"
