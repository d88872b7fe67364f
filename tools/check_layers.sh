#!/usr/bin/env bash
# Checks that every room of src/ includes only itself, include/ and the rooms
# the layer table allows it (CMakeLists.txt's KVTIER_ROOMS, written by cmake to
# <build>/layers.txt as "room: dep dep ..."). A ctest (`layers`).
#
#   tools/check_layers.sh SOURCE_DIR LAYERS_FILE
set -euo pipefail
src=${1:?source dir}/src
table=${2:?layers file}
declare -A allowed
while IFS=: read -r room deps; do
  [[ -n "$room" ]] && allowed[$room]=" ${deps} "
done <"$table"
bad=0
for dir in "$src"/*/; do
  room=$(basename "$dir")
  [[ "$room" == python ]] && continue  # the Python package: no C++
  if [[ -z "${allowed[$room]+set}" ]]; then
    echo "layers: src/$room is not in the layer table (CMakeLists.txt KVTIER_ROOMS)"
    bad=1
    continue
  fi
  while IFS= read -r line; do
    file=${line%%:*}
    dep=$(sed -E 's/.*#include "([a-z_0-9]+)\/.*/\1/' <<<"$line")
    [[ "$dep" == kvtier || "$dep" == "$room" || ! -d "$src/$dep" ]] && continue
    if [[ "${allowed[$room]}" != *" $dep "* ]]; then
      echo "layers: ${file#"$src"/} includes $dep/, which src/$room may not (allowed: ${allowed[$room]})"
      bad=1
    fi
  done < <(grep -H '#include "[a-z_0-9]*/' "$dir"* 2>/dev/null || true)
done
if ((bad)); then exit 1; fi
echo "layers: every include of src/ follows the table"
