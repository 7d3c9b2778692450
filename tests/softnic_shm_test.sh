#!/bin/bash
# softnic_shm_test.sh - registered memory that other processes share stays
# shared over softnic, as with DMA (tests/progs/shm_prog.c):
#  - the HERD pattern: a master registers a SysV segment (also SHM_HUGETLB when
#    the host has a free hugepage), three worker processes shmat it and poll it
#    for the RDMA WRITEs of two client processes, and answer by UD SEND; each
#    client must get every answer with the right contents;
#  - a WRITE into an MR over a SysV segment, a MAP_SHARED file, a memfd (also
#    a hugetlbfs one when the host has a free hugepage), and
#    shared anonymous memory inherited over fork (registered before and after
#    the fork) must be seen by the other process that maps the pages; also
#    by one MR over a private page, two shared pages and a private page.
#
# Each program runs under `rbtrace softnic --softnic=MODE`, MODE from
# RBTRACE_SOFTNIC_MODE (tests/softnic_mode.bzl sets it; default dropin: the
# library in place of libibverbs.so.1; provider: softnic under the system's
# own libibverbs), so the same cases check both front ends.
#
# usage: softnic_shm_test.sh SHM_PROG RBTRACE
set -u
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
[ $# -eq 2 ] || { echo "usage: softnic_shm_test.sh SHM_PROG RBTRACE"; exit 2; }
prog=$(abs "$1")
rbtrace=$(abs "$2")
mode=${RBTRACE_SOFTNIC_MODE:-dropin}
[ -x "$prog" ] && [ -x "$rbtrace" ] || { echo "$prog or $rbtrace missing"; exit 2; }
. "$(dirname "$0")/lib.sh"
asan_first "$prog"
test_tmp softnic_shm shm
fabric=$SOFTNIC_FABRIC
# run ARGS...: shm_prog on softnic in the chosen mode, bounded in time
run() {
	timeout 60 "$rbtrace" softnic --softnic="$mode" --fabric "$fabric" -- "$prog" "$@"
}
run canreopen >"$tmp/mode" 2>&1
case $mode in dropin) want=drop-in ;; *) want=$mode ;; esac
grep -q "^rbtrace softnic: .*$want" "$tmp/mode" || { echo "FAIL: not in $mode mode:"; cat "$tmp/mode"; exit 1; }
echo "mode: $(grep 'softnic: ' "$tmp/mode" | head -1)"
fails=0

# herd NAME [huge]: 1 master, 3 workers, 2 clients, 200 requests per client
herd() {
	local name=$1 huge=${2:-} d=$tmp/$1 nreq=200 key pids=() rc=0
	mkdir -p "$d"
	# a key of our own: parallel runs share the host's SysV namespace
	key=$((0x5e000000 + $(od -An -N2 -tu2 /dev/urandom)))
	run master "$d" $key 2 $huge >"$d/master.out" 2>&1 &
	local mpid=$!
	for w in 0 1 2; do
		# the segment exists once the master published its first QP
		while [ ! -e "$d/master-0" ] && kill -0 $mpid 2>/dev/null; do sleep 0.05; done
		run worker "$d" $key $w 3 2 $nreq >"$d/worker$w.out" 2>&1 &
		pids+=($!)
	done
	for c in 0 1; do
		run client "$d" $c 3 $nreq >"$d/client$c.out" 2>&1 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait $p || rc=1; done
	touch "$d/all-done"
	wait $mpid || rc=1
	local served=$(cat "$d"/worker*.out | awk '/served/ {n += $4} END {print n + 0}')
	if [ $rc -ne 0 ] || [ "$served" != $((2 * nreq)) ] ||
		! grep -q "^client 0: $nreq answers, $nreq correct" "$d/client0.out" ||
		! grep -q "^client 1: $nreq answers, $nreq correct" "$d/client1.out"; then
		echo "FAIL $name (served $served of $((2 * nreq)))"
		for f in "$d"/master.out "$d"/worker*.out "$d"/client*.out; do
			echo "--- $(basename "$f"):"; cat "$f"
		done
		fails=$((fails + 1))
	else
		echo "ok   $name: $(grep '^master: registered' "$d/master.out"); $served answers checked"
	fi
}

# shared KIND [unshared]: the target's watcher must see the writer's WRITE;
# with "unshared", softnic must instead say on stderr that it cannot share
# these pages, and the target itself must still see the WRITE
shared() {
	local kind=$1 want=${2:-shared} d=$tmp/shared-$1 rc
	mkdir -p "$d"
	# unshared: the watcher must not see it; 2 s is long enough to tell
	run target "$d" $kind $([ $want = unshared ] && echo 2) >"$d/target.out" 2>&1 &
	local tpid=$!
	run writer "$d" >"$d/writer.out" 2>&1
	rc=$?
	wait $tpid || rc=1
	if [ $want = unshared ]; then
		if grep -q "cannot be reopened by peers without CAP_SYS_ADMIN" "$d/target.out" &&
			grep -q "^target: saw the" "$d/target.out"; then
			echo "ok   shared $kind (unprivileged): the warning, and no sharing"
		else
			echo "FAIL shared $kind (unprivileged: no warning)"
			cat "$d/target.out"
			fails=$((fails + 1))
		fi
		return
	fi
	if [ $rc -ne 0 ] || ! grep -q "^target $kind: watcher saw it" "$d/target.out" ||
		grep -q "cannot be reopened" "$d/writer.out"; then
		echo "FAIL shared $kind"
		echo "--- target:"; cat "$d/target.out"; echo "--- writer:"; cat "$d/writer.out"
		fails=$((fails + 1))
	else
		echo "ok   shared $kind: $(grep '^watcher' "$d/target.out")"
	fi
}

herd herd_sysv
if [ "$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)" -ge 1 ] 2>/dev/null; then
	herd herd_sysv_hugetlb huge
	shared memfd-huge
else
	echo "skip herd_sysv_hugetlb: no free hugepage (echo 4 > /proc/sys/vm/nr_hugepages)"
fi
shared sysv
shared file
shared memfd
shared mixed
# anonymous shared memory, and a memfd whose descriptor was closed, have no
# name: reopening them needs /proc/self/map_files, which needs privileges
if grep -qx yes "$tmp/mode"; then
	shared memfd-closed
	shared anon
	shared anon-regfirst
else
	shared memfd-closed unshared
	shared anon unshared
	echo "note: anonymous shared memory stays shared only with CAP_SYS_ADMIN"
fi
[ $fails -eq 0 ] && echo "all shared-memory cases passed"
exit $((fails > 0))
