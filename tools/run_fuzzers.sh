#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang in build-fuzz/ and runs
# each for N seconds over its seed corpus. Fails on any crash, leak, sanitizer
# report or timeout; the failing input is left in build-fuzz/artifacts/.
#
#   tools/run_fuzzers.sh <seconds-per-target> [target ...]
#   (targets: record scanner superblock namespace wire; default all)
#
# The committed seeds (tests/fuzz/corpus/<target>/) are only read; inputs the
# run finds go to build-fuzz/corpus/<target>/ and seed the next run there.
# tests/fuzz/corpus/<target>_regress/ holds inputs that once crashed: each is
# run once first (they are slow, so they do not seed the fuzzing).
# Prints one line per target with the executions done.
#
# Environment: BUILD_DIR (default build-fuzz), JOBS (default nproc), CC/CXX
# (default clang/clang++).
set -euo pipefail

secs=${1:-}
if [[ -z $secs || ! $secs =~ ^[0-9]+$ ]]; then
  echo "usage: $0 <seconds-per-target> [record|scanner|superblock|namespace|wire ...]" >&2
  exit 2
fi
shift
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(record scanner superblock namespace wire)

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-fuzz}
jobs=${JOBS:-$(nproc)}

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="${CC:-clang}" -DCMAKE_CXX_COMPILER="${CXX:-clang++}" \
  -DKVTIER_BUILD_FUZZ=ON -DKVTIER_BUILD_TESTS=OFF -DKVTIER_BUILD_BENCH=OFF \
  -DKVTIER_WITH_CUDA=OFF >/dev/null
bins=()
for t in "${targets[@]}"; do bins+=("kvtier_${t}_fuzz"); done
cmake --build "$build" --target "${bins[@]}" -j "$jobs"

# The scanner's raw mode lays out whole 4 KiB pages, so it needs longer inputs.
max_len() {
  case $1 in
    scanner) echo 20000 ;;
    superblock) echo 512 ;;
    *) echo 8192 ;;
  esac
}

mkdir -p "$build/artifacts"
status=0
for t in "${targets[@]}"; do
  work="$build/corpus/$t"
  mkdir -p "$work"
  log="$build/fuzz-$t.log"
  seeds=()
  [[ -d $root/tests/fuzz/corpus/$t ]] && seeds+=("$root/tests/fuzz/corpus/$t")
  regress=$root/tests/fuzz/corpus/${t}_regress
  if [[ -d $regress ]] && ! "$build/bin/kvtier_${t}_fuzz" "$regress"/* >"$build/regress-$t.log" 2>&1; then
    echo "FAIL $t: a regression input crashes again, see $build/regress-$t.log" >&2
    status=1
    continue
  fi
  # The scanner's inputs range from microseconds to a second (multi-MiB
  # segments): weight the fast ones so that the run is not spent on a few.
  extra=()
  [[ $t == scanner ]] && extra+=(-entropic_scale_per_exec_time=1)
  set +e
  "$build/bin/kvtier_${t}_fuzz" "$work" "${seeds[@]}" "${extra[@]}" \
    -max_total_time="$secs" -max_len="$(max_len "$t")" -timeout=20 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)  # none when it crashed at once
  if [[ $rc -ne 0 ]]; then
    echo "FAIL $t (rc $rc): see $log" >&2
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -5 >&2 || true
    status=1
  else
    echo "ok   $t: ${execs:-?} executions in ${secs} s, coverage ${cov:-?} edges, corpus $(ls "$work" | wc -l) files"
  fi
done
exit $status
