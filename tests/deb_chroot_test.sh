#!/usr/bin/env bash
# deb_chroot_test.sh - `apt install ./rbtrace_*.deb` on a bare Debian 12, then
# rbtrace report, info and dump on committed traces there without rdma-core;
# replay says in one line that it needs libibverbs, and replays over softnic.
#
#   tests/deb_chroot_test.sh rbtrace_VERSION_amd64.deb     (./dev deb-test)
#
# Needs root (chroot) and Debian's archive (debootstrap, apt); not a Bazel test
# for that reason. The base system (debootstrap --variant=minbase bookworm,
# about 1 minute and 200 MB) is kept as a tarball in $RBTRACE_CHROOT_CACHE
# (default ~/.cache/rbtrace) and unpacked afresh for every run.
set -euo pipefail
deb=$(realpath "${1:?usage: deb_chroot_test.sh rbtrace_VERSION_amd64.deb}")
here=$(cd "$(dirname "$0")/.." && pwd)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${RBTRACE_CHROOT_CACHE:-$HOME/.cache/rbtrace}
base=$cache/bookworm-minbase.tar.gz
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (chroot)"
command -v debootstrap >/dev/null || apt-get install -y -q debootstrap >/dev/null
scratch=$(mktemp -d "${TMPDIR:-/tmp}/rbtrace-chroot.XXXXXX")
trap 'umount "$scratch/sysroot/proc" 2>/dev/null || true; rm -rf "$scratch"' EXIT
r=$scratch/sysroot
t0=$(date +%s)
if [ ! -f "$base" ]; then
	mkdir -p "$cache"
	debootstrap --variant=minbase bookworm "$r" "$mirror" >"$scratch/debootstrap.log" 2>&1 ||
		{ tail -20 "$scratch/debootstrap.log"; fail "debootstrap"; }
	tar -C "$r" -czf "$base.tmp" . && mv "$base.tmp" "$base"
else
	mkdir -p "$r" && tar -C "$r" -xzf "$base"
fi
t1=$(date +%s)
cp /etc/resolv.conf "$r/etc/resolv.conf"
mount -t proc proc "$r/proc"
cp "$deb" "$here"/tests/data/rc_pingpong_*.rbt "$r/tmp/"
in_root() { chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }
in_root apt-get update -q >"$scratch/apt.log" 2>&1 || { tail "$scratch/apt.log"; fail "apt-get update"; }
in_root apt-get install -y -q "/tmp/$(basename "$deb")" >>"$scratch/apt.log" 2>&1 ||
	{ tail -20 "$scratch/apt.log"; fail "apt install ./$(basename "$deb")"; }
t2=$(date +%s)
in_root dpkg-query -W -f='${Status}\n' rbtrace | grep -q "install ok installed" || fail "not installed"
in_root rbtrace report /tmp/rc_pingpong_client.rbt /tmp/rc_pingpong_server.rbt >"$scratch/report.txt" ||
	fail "rbtrace report failed in the chroot"
grep -q "no problems found" "$scratch/report.txt" || fail "report: $(tail -3 "$scratch/report.txt")"
in_root rbtrace info /tmp/rc_pingpong_client.rbt | grep -q "finished:  yes" || fail "info"
in_root rbtrace dump /tmp/rc_pingpong_client.rbt >/dev/null || fail "dump"
# replay needs libibverbs: without rdma-core it says so in one line, and runs on
# softnic, whose drop-in libibverbs.so.1 the package carries
if ! in_root dpkg-query -W -f='${Status}' libibverbs1 2>/dev/null | grep -q "ok installed"; then
	! in_root rbtrace replay /tmp/rc_pingpong_client.rbt /tmp/rc_pingpong_server.rbt 2>"$scratch/rp.err" ||
		fail "replay ran without libibverbs"
	[ "$(wc -l <"$scratch/rp.err")" = 1 ] && grep -q "libibverbs" "$scratch/rp.err" ||
		fail "replay without libibverbs: $(cat "$scratch/rp.err")"
fi
mkdir -p "$r/tmp/fabric"
in_root SOFTNIC_FABRIC=/tmp/fabric timeout 120 rbtrace replay --softnic /tmp/rc_pingpong_client.rbt \
	/tmp/rc_pingpong_server.rbt >"$scratch/replay.txt" 2>&1 || { cat "$scratch/replay.txt"; fail "replay --softnic"; }
grep -q "no divergence" "$scratch/replay.txt" || fail "replay --softnic: $(tail -3 "$scratch/replay.txt")"
verbs=$(in_root dpkg-query -W -f='${db:Status-Abbrev}${Package}\n' 'libibverbs1' 'rdma-core' 2>/dev/null | grep '^ii' || true)
if [ -n "$verbs" ]; then
	# Until replay is loaded at run time rbtrace itself links libibverbs.so.1.
	dpkg-deb -f "$deb" Depends | grep -q libibverbs1 ||
		fail "installed $verbs though the package does not depend on it"
	echo "NOTE: libibverbs1 installed: the package still Depends on it (rbtrace links it)"
fi
echo "PASS: base system $((t1 - t0)) s, apt install $((t2 - t1)) s$([ -n "$verbs" ] || echo ", no RDMA stack installed")"
