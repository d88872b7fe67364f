#!/usr/bin/env bash
# One command for the end-to-end prefix-reuse run on a GPU machine with
# PyTorch and transformers (docs/e2e.md):
#
#   bench/e2e/run_h200.sh OUT_DIR [engine_run.py options]
#
# Uses the library folder made by tools/gpu_pack.sh (default .gpu/lib, or
# $KVTIER_GPU_LIB): libkvtier.so plus RocksDB, liburing and friends. The
# packed copies of libraries that the machine already has (fallback/) are
# not put on the search path, so torch and CUDA keep the system's.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:?usage: bench/e2e/run_h200.sh OUT_DIR [options]}"
shift
PY="${PYTHON:-python3}"
LIBDIR="${KVTIER_GPU_LIB:-$ROOT/.gpu/lib}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

if [ ! -f "$LIBDIR/libkvtier.so" ]; then
  echo "run_h200: $LIBDIR/libkvtier.so is missing: run tools/gpu_pack.sh on the build machine and carry .gpu" >&2
fi

# Fallback libraries only where the system has none of that name.
LDEXTRA="$ROOT/build-e2e-ld"
rm -rf "$LDEXTRA" && mkdir -p "$LDEXTRA"
LDCONFIG="$(command -v ldconfig || echo /sbin/ldconfig)"
for f in "$LIBDIR"/fallback/*; do
  [ -e "$f" ] || continue
  n="$(basename "$f")"
  if ! "$LDCONFIG" -p 2>/dev/null | grep -q "^[[:space:]]*$n "; then
    ln -s "$f" "$LDEXTRA/$n"
    echo "run_h200: using packed $n (the system has none)"
  fi
done

export LD_LIBRARY_PATH="$LIBDIR:$LDEXTRA${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KVTIER_LIB="$LIBDIR/libkvtier.so"
export PYTHONPATH="$ROOT/src/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false

# Preflight: versions and whether each piece loads, in the output folder too.
"$PY" - <<'EOF' 2>&1 | tee "$OUT/preflight.txt"
import platform
print("python", platform.python_version())
for mod in ("numpy", "torch", "transformers", "kvtier"):
    try:
        m = __import__(mod)
        extra = ""
        if mod == "torch":
            extra = f" cuda={m.version.cuda} available={m.cuda.is_available()}"
            if m.cuda.is_available():
                extra += f" gpu={m.cuda.get_device_name(0)}"
        if mod == "kvtier":
            extra = f" abi={m.abi_version()}"
        print(f"{mod} {getattr(m, '__version__', '')}{extra}")
    except Exception as e:
        print(f"{mod}: FAILED to import: {type(e).__name__}: {e}")
EOF

cd "$ROOT"
# engine_run.py: the serving engine's forward (paged KV, CUDA graphs), the GPU
# and host paths; E2E_DRIVER=prefix_reuse runs the transformers-cache driver.
"$PY" "$ROOT/bench/e2e/${E2E_DRIVER:-engine_run}.py" "$OUT" "$@"
rc=$?
rm -rf "$LDEXTRA"
echo "run_h200: exit $rc; results in $OUT/results.md and $OUT/results.json"
exit $rc
