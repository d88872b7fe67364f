#!/usr/bin/env bash
# Runs the GPU tests and the GPU benchmark on a machine with a GPU and writes
# the results into the folder given as $1.
#
#   tools/gpu_run.sh OUT_DIR [BUILD_DIR] [BENCH_DIR]
#
# BUILD_DIR (default build-gpu) holds bin/kvtier_cuda_test and
# bin/kvtier_gpu_bench, built with:
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
#         -DKVTIER_STATIC_DEPS=ON -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build-gpu --target kvtier_cuda_test kvtier_gpu_bench -j2
# BENCH_DIR (default $TMPDIR or /tmp) is a folder on the disk to measure.
# Outputs: gpu_tests.xml (gtest), gpu_tests.txt, gpu_bench.json,
# gpu_bench.txt, fio.json (when fio is installed), env.txt.
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
  echo "fio not installed: see limit_uring_randread_* in gpu_bench.json" > "$out/fio.json.txt"
fi
exit $rc
