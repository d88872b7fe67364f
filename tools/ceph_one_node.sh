#!/usr/bin/env bash
# A throwaway one-node Ceph cluster for kvtier's shared-tier tests and benches:
# one monitor and one bluestore OSD on a sparse file, loopback only, cephx off.
# Never use it for anything but tests (no authentication, one replica).
#
#   tools/ceph_one_node.sh start DIR [POOL]   DIR must be absent or empty; prints DIR/ceph.conf
#   tools/ceph_one_node.sh stop DIR           stops the daemons started in DIR (waits for them)
#   tools/ceph_one_node.sh status DIR         exit 0 when the OSD is up
#
# Needs Debian 12's ceph-mon, ceph-osd and ceph-common. The monitor listens on
# $KVTIER_CEPH_PORT, else 6789 when free, else a random free port, so that
# clusters can coexist (the OSD picks free ports itself).
# The OSD's disk is a sparse file of $KVTIER_CEPH_OSD_GIB GiB (default 32):
# only what is written takes space. Without a manager nothing watches the
# cluster's fill ratios, so a full image aborts the OSD instead of refusing
# writes; `rados bench` alone writes 4+ GB in 10 s on this VM, which is why
# the default is well above that.
# With KVTIER_CEPH_OSD_MEDIUM=ram the OSD's disk is a loop device over a file
# in /dev/shm instead (root and losetup needed; the file takes its whole size
# of host memory from the start until stop): a cluster that does not share the
# store's disk, as a cluster on hosts of its own would not: the shared tier's
# upload reads each segment back from the local disk while it writes to the
# cluster, and on one disk the two compete (docs/benchmarks.md).
# Starts in about 10 s on a 2-core machine.
set -eu

usage() { echo "usage: $0 start|stop|status DIR [POOL]" >&2; exit 2; }
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || usage

ceph_q() { ceph -c "$dir/ceph.conf" --connect-timeout 10 "$@"; }
# Detaches and removes the RAM disk a start with KVTIER_CEPH_OSD_MEDIUM=ram
# made (named in DIR/osd0.ram: "LOOP FILE").
release_ram_disk() {
  [ -f "$dir/osd0.ram" ] || return 0
  read -r loop img <"$dir/osd0.ram" || true
  [ -n "${img:-}" ] && rm -f "$img"
  # A device still closing is only marked to detach: wait until it has (and
  # its memory is free for the next start).
  for _ in $(seq 1 300); do
    [ -n "${loop:-}" ] && losetup "$loop" 2>/dev/null | grep -q kvtier-ceph-osd || break
    losetup -d "$loop" 2>/dev/null || true
    sleep 0.1
  done
  rm -f "$dir/osd0.ram"
}

case "$cmd" in
  stop)
    [ -d "$dir/run" ] || exit 0
    pids=$(cat "$dir"/run/*.pid 2>/dev/null || true)
    for p in $pids; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
    for p in $pids; do
      for _ in $(seq 1 30); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$p" 2>/dev/null || true
    done
    release_ram_disk
    exit 0
    ;;
  status)
    ceph_q osd stat 2>/dev/null | grep -q "1 up"
    exit $?
    ;;
  start) ;;
  *) usage ;;
esac

pool=${3:-kvtier}
for b in ceph-mon ceph-osd ceph monmaptool uuidgen; do
  command -v "$b" >/dev/null || { echo "ceph_one_node: $b not found (apt-get install ceph-mon ceph-osd ceph-common)" >&2; exit 3; }
done
if [ -e "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
  echo "ceph_one_node: refusing to use $dir: not empty" >&2
  exit 2
fi
# The OSD's medium, checked before anything is made.
medium=${KVTIER_CEPH_OSD_MEDIUM:-file}
case "$medium" in
  file) osd_gib=${KVTIER_CEPH_OSD_GIB:-32} ;;
  ram)
    # Enough for `kvtier remote-bench`'s defaults (its kept `rados bench`
    # objects and a 2 GiB upload), and refused where memory would run short.
    osd_gib=${KVTIER_CEPH_OSD_GIB:-16}
    avail_gib=$(( $(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) >> 20 ))
    if [ "$avail_gib" -lt $(( osd_gib + 4 )) ]; then
      echo "ceph_one_node: a ${osd_gib} GiB RAM disk needs ${osd_gib} GiB of memory and 4 to spare; ${avail_gib} GiB available (set KVTIER_CEPH_OSD_GIB)" >&2
      exit 2
    fi
    command -v losetup >/dev/null || { echo "ceph_one_node: KVTIER_CEPH_OSD_MEDIUM=ram needs losetup (and root)" >&2; exit 3; }
    ;;
  *) echo "ceph_one_node: KVTIER_CEPH_OSD_MEDIUM is file or ram, not $medium" >&2; exit 2 ;;
esac
mkdir -p "$dir/mon" "$dir/osd0" "$dir/run"
dir=$(cd "$dir" && pwd)
# The monitor's port: $KVTIER_CEPH_PORT, else 6789 unless something listens
# there, else a random free one.
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=${KVTIER_CEPH_PORT:-}
if [ -z "$port" ]; then
  port=6789
  while in_use "$port"; do port=$((20000 + RANDOM % 20000)); done
fi
fsid=$(uuidgen)
case "$medium" in
  file)
    osd_store="bluestore block path = $dir/osd0.img
bluestore block create = true
bluestore block size = $(( osd_gib << 30 ))"
    ;;
  ram)
    img=$(mktemp /dev/shm/kvtier-ceph-osd.XXXXXX)
    # Every page allocated now, so that no write pays for allocating its
    # page: one that lands where nothing was written before would, and one
    # that reuses a deleted object's place would not, which would favour
    # whichever run comes second.
    if ! fallocate -l "${osd_gib}G" "$img"; then
      rm -f "$img"
      echo "ceph_one_node: cannot allocate a ${osd_gib} GiB RAM disk in /dev/shm" >&2
      exit 3
    fi
    if ! loop=$(losetup -f --show "$img" 2>&1); then
      rm -f "$img"
      echo "ceph_one_node: losetup failed (root needed): $loop" >&2
      exit 3
    fi
    echo "$loop $img" >"$dir/osd0.ram"
    osd_store="bluestore block path = $loop
bluestore block create = false"
    ;;
esac
cat >"$dir/ceph.conf" <<CONF
[global]
fsid = $fsid
mon host = 127.0.0.1:$port
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = true
osd pool default size = 1
osd pool default min size = 1
osd crush chooseleaf type = 0
# A fixed CRUSH location: the default one is the short hostname, and a machine
# whose hostname was never set ("(none)") makes the OSD's boot-time
# create-or-move fail with EINVAL (the daemon then exits 250).
crush location = root=default host=kvtier-one-node
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
# A throwaway test cluster need not keep 5% of a shared disk free (the
# monitor's default refusal): CI machines often run with less. It still stops
# at 1%, before the disk is full.
mon data avail crit = 1
mon data avail warn = 2
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/\$name.log
pid file = $dir/run/\$name.pid
ms bind ipv4 = true
ms bind ipv6 = false
public addr = 127.0.0.1
osd objectstore = bluestore
$osd_store
bluestore fsck on mkfs = false
osd data = $dir/osd0
mon data = $dir/mon
CONF
# On failure say which step failed and show the end of the daemons' logs.
fail() {
  echo "ceph_one_node: $1 failed" >&2
  for f in "$dir"/mon.a.log "$dir"/osd.0.log; do
    [ -f "$f" ] && { echo "--- last lines of $f" >&2; tail -n 15 "$f" >&2; }
  done
  "$0" stop "$dir"
  exit 1
}
monmaptool --create --add a "127.0.0.1:$port" --fsid "$fsid" "$dir/monmap" >/dev/null || fail monmaptool
ceph-mon -c "$dir/ceph.conf" --mkfs -i a --monmap "$dir/monmap" || fail "ceph-mon --mkfs"
ceph-mon -c "$dir/ceph.conf" -i a || fail "ceph-mon start"
ceph_q osd create >/dev/null || fail "ceph osd create"
ceph-osd -c "$dir/ceph.conf" -i 0 --mkfs 2>"$dir/osd-mkfs.err" || fail "ceph-osd --mkfs"
# The OSD's first commands to the monitor have been seen to fail once under
# load ("wrong fsid": sent before it had the monitor map); it exits, and a
# second start works.
started=0
for attempt in 1 2 3; do
  if ceph-osd -c "$dir/ceph.conf" -i 0 2>"$dir/osd-start.err"; then started=1; break; fi
  echo "ceph_one_node: ceph-osd start failed (attempt $attempt), retrying" >&2
  sleep 1
done
[ "$started" = 1 ] || fail "ceph-osd start"
up=0
for _ in $(seq 1 60); do
  if ceph_q osd stat 2>/dev/null | grep -q "1 up"; then up=1; break; fi
  sleep 0.5
done
if [ "$up" != 1 ]; then
  fail "waiting for the OSD to come up"
fi
ceph_q osd pool create "$pool" 8 >/dev/null 2>&1 || fail "ceph osd pool create $pool"
ceph_q osd pool application enable "$pool" kvtier >/dev/null 2>&1 || true
echo "$dir/ceph.conf"
