#!/usr/bin/env bash
# deb_test.sh - the Debian package (packaging/deb.sh), built from this build:
# - its control file: Depends from the ELF files (libc6, libzstd1 ...), never
#   libibverbs1 for the recorder or the reader; Suggests names the RDMA stack;
# - its files: the install layout at /usr, man pages compressed, softnic's
#   libibverbs.so.1 only in /usr/lib/rbtrace/softnic/, an ldconfig trigger;
# - unpacked into a scratch root (dpkg -x), `rbtrace report` on committed traces
#   (tests/data, a real ibv_rc_pingpong over softnic) from there, and the loader's
#   own record (LD_DEBUG=files) shows it loaded no libibverbs.
# tests/deb_chroot_test.sh (./dev deb-test) installs it with apt into a bare
# Debian 12 made by debootstrap.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
test_tmp deb

deb=$(TMPDIR=$tmp "$root/packaging/deb.sh" --manifest="$root/packaging/manifest.txt" \
	--from="$root" --out="$tmp/out")
version=$(sed -n 's/^version //p' "$root/packaging/manifest.txt")
[ "$(basename "$deb")" = "rbtrace_${version}_amd64.deb" ] || fail "named $deb"
dpkg-deb -f "$deb" Package Version Architecture Depends Suggests >"$tmp/control"
cat "$tmp/control"
grep -q "^Version: $version$" "$tmp/control" || fail "version"
grep -q "^Architecture: amd64$" "$tmp/control" || fail "architecture"
depends=$(sed -n 's/^Depends: //p' "$tmp/control")
for d in libc6 libzstd1 libunwind8; do
	[[ ", $depends" == *", $d"* ]] || fail "Depends lacks $d: $depends"
done
grep -q "^Suggests: .*libibverbs1" "$tmp/control" || [[ $depends == *libibverbs1* ]] ||
	fail "neither Suggests nor Depends names libibverbs1"

mkdir "$tmp/root"
dpkg-deb -x "$deb" "$tmp/root"
r=$tmp/root
for f in usr/bin/rbtrace usr/lib/rbtrace/librbtrace.so usr/lib/rbtrace/softnic/libibverbs.so.1 \
	usr/lib/x86_64-linux-gnu/librbtformat.so.1 usr/include/rbtrace/rbt_format.h \
	usr/lib/x86_64-linux-gnu/pkgconfig/rbtformat.pc usr/share/man/man1/rbtrace-report.1.gz \
	usr/share/bash-completion/completions/rbtrace usr/lib/python3/dist-packages/rbtformat.py; do
	[ -e "$r/$f" ] || fail "$f not in the package"
done
[ "$(find "$r" -name 'libibverbs.so*')" = "$r/usr/lib/rbtrace/softnic/libibverbs.so.1" ] ||
	fail "libibverbs outside the private directory: $(find "$r" -name 'libibverbs.so*')"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./triggers | grep -q "activate-noawait ldconfig" ||
	fail "no ldconfig trigger"
grep -q "^libdir=\${prefix}/lib/x86_64-linux-gnu$" "$r/usr/lib/x86_64-linux-gnu/pkgconfig/rbtformat.pc" ||
	fail "pc libdir"
needs() { readelf -d "$1" | grep -q "NEEDED.*\[$2\]"; }
! needs "$r/usr/lib/rbtrace/librbtrace.so" libibverbs.so.1 || fail "the recorder links libibverbs"
! needs "$r/usr/lib/x86_64-linux-gnu/librbtformat.so.1" libibverbs.so.1 || fail "the reader links libibverbs"

echo "== rbtrace report from the unpacked package"
cd "$tmp"
cp "$root/tests/data/rc_pingpong_client.rbt" "$root/tests/data/rc_pingpong_server.rbt" .
run() { LD_DEBUG=files LD_DEBUG_OUTPUT=$tmp/ld "$r/usr/bin/rbtrace" "$@"; }
run report rc_pingpong_client.rbt rc_pingpong_server.rbt >report.txt || fail "report failed"
grep -q "no problems found" report.txt || fail "report: $(tail -3 report.txt)"
grep -q "^== findings: 0" report.txt || fail "findings"
run info rc_pingpong_client.rbt | grep -q "finished:  yes" || fail "info"
run dump --type=post_send rc_pingpong_client.rbt | grep -c post_send >n.txt
[ "$(cat n.txt)" -ge 100 ] || fail "dump: $(cat n.txt) post_send"
"$r/usr/bin/rbtrace" --version | grep -q "^rbtrace $version$" || fail "--version"
if needs "$r/usr/bin/rbtrace" libibverbs.so.1; then
	# Until the replayer is a part loaded at run time (replay needs libibverbs,
	# report does not), rbtrace itself links it and the package says so.
	[[ $depends == *libibverbs1* ]] || fail "rbtrace needs libibverbs.so.1 but Depends lacks libibverbs1"
	echo "NOTE: usr/bin/rbtrace links libibverbs.so.1: Depends has libibverbs1 (until replay is loaded at run time)"
else
	[[ $depends != *libibverbs1* && $depends != *rdma-core* ]] ||
		fail "Depends names the RDMA stack: $depends"
	! grep -h "calling init: .*libibverbs" ld.* || fail "report, info or dump loaded libibverbs"
	grep -qh "calling init: .*libzstd" ld.* || fail "LD_DEBUG recorded nothing"
fi
echo PASS
