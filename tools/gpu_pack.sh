#!/usr/bin/env bash
# Packs libkvtier.so and the shared libraries it needs beyond glibc and the
# GCC runtime into one folder, for a machine where they are not installed
# (the H200 machine: Ubuntu 24.04, no RocksDB/liburing). bench/e2e/run_h200.sh
# puts the folder on LD_LIBRARY_PATH. The `kvtier` command (for the e2e's
# service phases) and kvtier-host-bench (its copy limit) go beside it, in
# DEST/../bin.
#
#   tools/gpu_pack.sh [BUILD_DIR] [DEST]      (defaults: build  .gpu/lib)
#
# Builds the `kvtier` target in BUILD_DIR first (a no-op when up to date;
# configures a Release build when BUILD_DIR has none). Libraries that a
# stock Ubuntu 24.04 has in its base system (zlib, bzip2, zstd, lz4) go to
# DEST/fallback: the launcher uses each only where the machine lacks it, so
# Debian's older copies never shadow the system's for torch and CUDA.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
DEST="${2:-$ROOT/.gpu/lib}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
case "$DEST" in /*) ;; *) DEST="$ROOT/$DEST" ;; esac

die() { echo "gpu_pack: $*" >&2; exit 1; }

if [ ! -f "$BUILD/build.ninja" ] && [ ! -f "$BUILD/Makefile" ]; then
  echo "gpu_pack: configuring $BUILD (Release)"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$BUILD" --target kvtier -j2 >/dev/null || die "building target kvtier in $BUILD failed"
LIB="$BUILD/lib/libkvtier.so"
[ -f "$LIB" ] || die "$LIB is missing after the build"
# The programs, where this build has them (benchmarks can be configured off).
PROGRAMS=()
for t in kvtier_cli:kvtier kvtier-host-bench:kvtier-host-bench; do
  if cmake --build "$BUILD" --target "${t%%:*}" -j2 >/dev/null 2>&1; then
    PROGRAMS+=("$BUILD/bin/${t##*:}")
  else
    echo "gpu_pack: no ${t%%:*} in $BUILD; packing the library only"
  fi
done

# Provided by glibc / the GCC runtime on any x86-64 Linux (Ubuntu 24.04 has
# newer, backward-compatible versions).
SYSTEM_RE='^(linux-vdso|ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libresolv|libgcc_s|libstdc\+\+)\.so'
# In Ubuntu 24.04's base system: packed, but used only where missing.
FALLBACK_RE='^(libz|libbz2|libzstd|liblz4)\.so'

BIN="$(dirname "$DEST")/bin"
rm -rf "$DEST" "$BIN"
mkdir -p "$DEST/fallback" "$BIN"
cp -L "$LIB" "$DEST/libkvtier.so"
ln -s libkvtier.so "$DEST/$(objdump -p "$LIB" | awk '$1 == "SONAME" {print $2}')"
for p in "${PROGRAMS[@]}"; do cp -L "$p" "$BIN/"; done

missing=$(ldd "$LIB" | awk '/not found/ {print $1}')
[ -z "$missing" ] || die "ldd cannot resolve: $missing"

ldd "$LIB" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
  if [[ "$name" =~ $SYSTEM_RE ]]; then
    continue
  elif [[ "$name" =~ $FALLBACK_RE ]]; then
    cp -L "$path" "$DEST/fallback/$name"
  else
    cp -L "$path" "$DEST/$name"
  fi
done

# Every non-system dependency must now resolve inside DEST.
bad=$(LD_LIBRARY_PATH="$DEST:$DEST/fallback" ldd "$DEST/libkvtier.so" |
      awk -v d="$DEST" '$2 == "=>" {print $1, $3}' |
      while read -r name path; do
        [[ "$name" =~ $SYSTEM_RE ]] && continue
        case "$path" in "$DEST"/*) ;; *) echo "$name=>$path" ;; esac
      done)
[ -z "$bad" ] || die "libraries resolved outside $DEST: $bad"

LD_LIBRARY_PATH="$DEST:$DEST/fallback" KVTIER_LIB="$DEST/libkvtier.so" PYTHONPATH="$ROOT/src/python" \
  /usr/bin/python3 -c 'import kvtier; assert kvtier.abi_version()[0] == 1' ||
  die "the packed library does not load from Python"

for p in "$BIN"/*; do
  [ -e "$p" ] || continue
  ! LD_LIBRARY_PATH="$DEST:$DEST/fallback" ldd "$p" | grep -q "not found" || die "$p needs libraries not in $DEST"
done

echo "gpu_pack: $(du -sh "$DEST" | cut -f1) in $DEST:"
(cd "$DEST" && ls -1 ./*.so* fallback/* | sed 's/^/  /')
echo "gpu_pack: programs in $BIN: $(cd "$BIN" && ls | tr '\n' ' ')"
