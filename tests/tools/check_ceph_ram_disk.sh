#!/usr/bin/env bash
# tools/ceph_one_node.sh with KVTIER_CEPH_OSD_MEDIUM=ram: the OSD runs on a
# loop device over /dev/shm, an object written reads back, and stop gives the
# device and its memory back. Bad settings are refused before anything is
# made. Skips (77) without the Ceph binaries, root, or a loop device.
#
#   tests/tools/check_ceph_ram_disk.sh SOURCE_DIR
set -u
src=${1:?usage: $0 SOURCE_DIR}
script="$src/tools/ceph_one_node.sh"
skip() { echo "SKIP: $1"; exit 77; }
fail() { echo "FAIL: $1"; exit 1; }

for b in ceph-osd ceph-mon rados losetup; do command -v "$b" >/dev/null || skip "$b not installed"; done
[ "$(id -u)" = 0 ] || skip "not root: a loop device needs root"
probe=$(mktemp /dev/shm/kvtier-loop-probe.XXXXXX)
truncate -s 1M "$probe"
if ! loop=$(losetup -f --show "$probe" 2>/dev/null); then
  rm -f "$probe"
  skip "this machine cannot attach a loop device"
fi
losetup -d "$loop"
rm -f "$probe"

work=$(mktemp -d /tmp/kvtier-ceph-ram-test.XXXXXX)
dir="$work/cluster"
trap '"$script" stop "$dir" >/dev/null 2>&1; rm -rf "$work"' EXIT

# Refused before anything is made: an unknown medium, more memory than there is.
KVTIER_CEPH_OSD_MEDIUM=tape "$script" start "$dir" 2>"$work/err" && fail "an unknown medium was accepted"
grep -q "file or ram" "$work/err" || fail "no clear error for an unknown medium: $(cat "$work/err")"
KVTIER_CEPH_OSD_MEDIUM=ram KVTIER_CEPH_OSD_GIB=100000 "$script" start "$dir" 2>"$work/err" &&
  fail "a RAM disk larger than memory was accepted"
grep -q "GiB available" "$work/err" || fail "no clear error for too little memory: $(cat "$work/err")"
[ -z "$(ls -A "$dir" 2>/dev/null)" ] || fail "a refused start left files in $dir"

avail_gib=$(( $(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) >> 20 ))
[ "$avail_gib" -ge 7 ] || skip "${avail_gib} GiB of memory available; the 3 GiB disk needs 7"
conf=$(KVTIER_CEPH_OSD_MEDIUM=ram KVTIER_CEPH_OSD_GIB=3 "$script" start "$dir") || fail "start on a RAM disk"
read -r loop img <"$dir/osd0.ram" || fail "no record of the RAM disk"
case "$img" in /dev/shm/*) ;; *) fail "the RAM disk's file is not in /dev/shm: $img" ;; esac
losetup "$loop" | grep -qF "$img" || fail "$loop is not backed by $img"
grep -qx "bluestore block path = $loop" "$conf" || fail "the OSD does not write to $loop"
[ "$(stat -c %b "$img")" -ge $(( 3 * 1024 * 1024 * 2 )) ] || fail "the RAM disk's memory is not all allocated"

head -c 1048576 /dev/urandom >"$work/in"
rados -c "$conf" -p kvtier put ram-check "$work/in" || fail "rados put"
rados -c "$conf" -p kvtier get ram-check "$work/out" || fail "rados get"
cmp -s "$work/in" "$work/out" || fail "the object read back differs"

"$script" stop "$dir" || fail "stop"
[ ! -e "$img" ] || fail "stop left $img"
[ ! -e "$dir/osd0.ram" ] || fail "stop left the RAM disk's record"
if losetup "$loop" 2>/dev/null | grep -qF "$img"; then fail "stop left $loop attached to $img"; fi
echo "OK: a RAM-disk cluster ran, read back what it wrote, and gave its device back"
