#!/usr/bin/env bash
# Installs the Debian 12 packages kvtier needs (only those missing) and
# configures a Release build in ./build (or $KVTIER_BUILD_DIR).
#
#   tools/setup.sh              install what is missing, configure build/
#   tools/setup.sh --no-install only configure
# Extra CMake arguments can be passed in $KVTIER_CMAKE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache
  liburing-dev librocksdb-dev libxxhash-dev libzstd-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev
  fio clang
  python3 python3-dev python3-numpy python3-pytest pybind11-dev
  python3-pip python3-setuptools python3-wheel
  # The adapters' tests (torch for SGLang's host pools), and what the engines'
  # own modules import when KVTIER_{VLLM,SGLANG}_SRC points at their source.
  python3-torch python3-typing-extensions python3-prometheus-client python3-regex
  python3-cbor2 python3-psutil python3-yaml python3-zmq
  ceph-mon ceph-osd ceph-common librados-dev libradospp-dev
)

if [[ "${1:-}" != "--no-install" ]]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "setup: all ${#PACKAGES[@]} packages present"
  fi
fi

BUILD_DIR="${KVTIER_BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${KVTIER_CMAKE_ARGS:-} >/dev/null
echo "setup: configured $BUILD_DIR (Release); build with: cmake --build $BUILD_DIR -j$(nproc)"
