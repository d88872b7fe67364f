#!/usr/bin/env bash
# Runs the GPU tests and the GPU benchmark on a machine with a GPU and writes
# the results into the folder given as $1.
#
#   tools/gpu_run.sh OUT_DIR [BUILD_DIR] [BENCH_DIR]
#
# BUILD_DIR (default build-gpu) holds bin/kvtier_cuda_test,
# bin/kvtier_gpu_bench and bin/kvtier-host-bench, built with:
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
#         -DKVTIER_STATIC_DEPS=ON -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build-gpu --target kvtier_cuda_test kvtier_gpu_bench kvtier-host-bench -j2
# or an ordinary build's, run with LD_LIBRARY_PATH=.gpu/lib (tools/gpu_pack.sh).
# BENCH_DIR (default $TMPDIR or /tmp) is a folder on the disk to measure.
# Outputs: gpu_tests.xml (gtest), gpu_tests.txt, gpu_python_tests.txt,
# forward_check.txt, host_bench.txt, gpu_bench.json, gpu_bench.txt, fio.json
# (when fio is installed), env.txt.
set -u
out=${1:?usage: tools/gpu_run.sh OUT_DIR [BUILD_DIR] [BENCH_DIR]}
build=${2:-build-gpu}
bench_dir=${3:-${TMPDIR:-/tmp}}/kvtier-gpu-bench.$$
mkdir -p "$out"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  uname -a
  nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv 2>&1
  df -h "$(dirname "$bench_dir")" /dev/shm 2>&1
  nproc; free -g
  echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>&1)"
} > "$out/env.txt" 2>&1

rc=0
"$build/bin/kvtier_cuda_test" --gtest_output="xml:$out/gpu_tests.xml" > "$out/gpu_tests.txt" 2>&1 || rc=1
tail -n 3 "$out/gpu_tests.txt"

# The GPU path through the C ABI and the Python package (libkvtier.so from
# tools/gpu_pack.sh, or $KVTIER_LIB), and the e2e forward against transformers.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lib="${KVTIER_LIB:-$root/.gpu/lib/libkvtier.so}"
if [ -f "$lib" ]; then
  KVTIER_LIB="$lib" PYTHONPATH="$root/src/python" python3 -m pytest -q -p no:cacheprovider \
    "$root/tests/python/test_gpu_path.py" > "$out/gpu_python_tests.txt" 2>&1 || rc=1
  tail -n 3 "$out/gpu_python_tests.txt"
else
  echo "no $lib: the Python GPU tests did not run (tools/gpu_pack.sh makes it)" | tee "$out/gpu_python_tests.txt"
fi
python3 "$root/bench/e2e/paged_model.py" > "$out/forward_check.txt" 2>&1 || rc=1
cat "$out/forward_check.txt"

# The host load path against the host's best memcpy.
if [ -x "$build/bin/kvtier-host-bench" ]; then
  "$build/bin/kvtier-host-bench" --dir "$bench_dir-host" --working-set-mib "${KVTIER_HOST_BENCH_MIB:-2048}" \
    --seconds 1 > "$out/host_bench.txt" 2>&1 || rc=1
  cat "$out/host_bench.txt"
  rm -rf "$bench_dir-host"
fi

"$build/bin/kvtier_gpu_bench" --dir "$bench_dir" --data-mib "${KVTIER_GPU_BENCH_MIB:-2048}" \
  --out "$out/gpu_bench.json" > "$out/gpu_bench.txt" 2>&1 || rc=1
cat "$out/gpu_bench.txt"

# fio on the same disk, same shape as the bench's own io_uring baseline.
if command -v fio > /dev/null; then
  mkdir -p "$bench_dir"
  fio --name=randread --directory="$bench_dir" --size=4G --bs=2M --rw=randread --direct=1 \
      --ioengine=io_uring --iodepth=16 --runtime=20 --time_based --group_reporting \
      --output-format=json > "$out/fio.json" 2>&1 || true
  rm -rf "$bench_dir"
else
  echo "fio not installed: see limit_disk_read_best_* in gpu_bench.json" > "$out/fio.json.txt"
fi
exit $rc
