#!/usr/bin/env bash
# install_test.sh - rbtrace installed into a fresh prefix by packaging/install.sh,
# then used from there only:
# - a missing file or a relative prefix: one line, and nothing written;
# - every line of the manifest (packaging/artifacts.bzl) is installed, softnic's
#   libibverbs.so.1 only in the private PREFIX/lib/rbtrace/softnic/;
# - the README session (record both ends of ibv_rc_pingpong over softnic, info,
#   dump, report, replay, diff) run with PREFIX/bin/rbtrace moved away from the
#   build: it finds its recorder and softnic through the installed layout;
# - rping (librdmacm) over the installed softnic, when rdmacm-utils is there;
# - the C example (share/doc/rbtrace/examples/wr_latency.c) built against the
#   installed header and library through pkg-config, run on the recorded trace;
# - the Python module from the installed tree, counts checked against `rbtrace info`.
set -euo pipefail
root=$PWD
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/install.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
prefix=$tmp/opt/rbtrace

echo "== install into $prefix (staged through --destdir, then moved)"
"$root/packaging/install.sh" --manifest="$root/packaging/manifest.txt" --from="$root" \
	--prefix=/opt/rbtrace --destdir="$tmp/stage"
mv "$tmp/stage/opt" "$tmp/opt" # a prefix is relocatable: rbtrace looks relative to itself
n=0
while read -r kind src dst mode; do
	[ "$kind" = file ] || continue
	[ -f "$prefix/${dst//@LIBDIR@/lib}" ] || fail "$dst not installed"
	n=$((n + 1))
done <"$root/packaging/manifest.txt"
[ "$n" -ge 15 ] || fail "only $n files in the manifest"
[ -x "$prefix/bin/rbtrace" ] || fail "bin/rbtrace is not executable"
[ -L "$prefix/lib/librbtformat.so" ] || fail "no librbtformat.so link"
find "$prefix" -name 'libibverbs.so*' -o -name 'librdmacm.so*' | grep -qv "^$prefix/lib/rbtrace/softnic/" &&
	fail "rdma-core's names outside lib/rbtrace/softnic: $(find "$prefix" -name 'lib*verbs.so*' -o -name 'librdmacm*')"
grep -q "^prefix=/opt/rbtrace$" "$prefix/lib/pkgconfig/rbtformat.pc" || fail "pc file prefix"
echo "installed $n files"

echo "== install.sh refuses half an install and bad arguments, in one line"
{ cat "$root/packaging/manifest.txt"; echo "file no/such.so lib/rbtrace/such.so 0644"; } >"$tmp/bad.txt"
! "$root/packaging/install.sh" --manifest="$tmp/bad.txt" --from="$root" --prefix="$tmp/half" 2>"$tmp/err" ||
	fail "installed with a missing file"
[ ! -e "$tmp/half" ] || fail "wrote part of an install before finding every file"
[ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "no/such.so: not found" "$tmp/err" || fail "error: $(cat "$tmp/err")"
! "$root/packaging/install.sh" --manifest="$tmp/bad.txt" --from="$root" --prefix=rel 2>"$tmp/err" ||
	fail "a relative prefix"
grep -q "absolute" "$tmp/err" || fail "relative prefix error: $(cat "$tmp/err")"

# Nothing of the build may be reachable: no bazel-bin next to the prefix, no
# environment pointing at it.
unset RBTRACE_LIB RBTRACE_SOFTNIC_DIR RBTRACE_REPLAY_MODULE LD_LIBRARY_PATH LD_PRELOAD
export PATH=$prefix/bin:$PATH
[ "$(command -v rbtrace)" = "$prefix/bin/rbtrace" ] || fail "PATH"
rbtrace --version | grep -q "^rbtrace [0-9]" || fail "--version"
export SOFTNIC_FABRIC=$tmp/fabric
mkdir -p "$SOFTNIC_FABRIC"
cd "$tmp"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

echo "== the README session from $prefix/bin"
timeout 60 rbtrace record --softnic -o server.rbt -- ibv_rc_pingpong -p "$port" -n 200 >/dev/null &
spid=$!
for _ in $(seq 100); do
	ss -ltn 2>/dev/null | grep -q ":$port " && break
	sleep 0.1
done
timeout 60 rbtrace record --softnic -o client.rbt -- ibv_rc_pingpong -p "$port" -n 200 localhost \
	>/dev/null 2>"$tmp/rec.err" || { cat "$tmp/rec.err"; fail "client"; }
wait $spid || fail "server"
grep -q "client.rbt: [0-9]* events" "$tmp/rec.err" || fail "record did not list its trace"
rbtrace info client.rbt >info.txt
grep -q "finished:  yes" info.txt || fail "client trace not finished: $(cat info.txt)"
grep -q "^tool:      librbtrace $(rbtrace --version | sed -n '1s/rbtrace //p') (format 2)$" info.txt ||
	fail "tool field: $(grep tool: info.txt)"
rbtrace dump --type=post_send,poll_cq client.rbt >dump.txt
grep -q "post_send" dump.txt && ! grep -qv "post_send\|poll_cq" dump.txt || fail "dump"
rbtrace report client.rbt server.rbt >report.txt
grep -q "no problems found" report.txt || fail "report: $(tail -5 report.txt)"
rbtrace report --format=html -o report.html client.rbt server.rbt
grep -qi "<html" report.html || fail "html report"
rbtrace report --format=perfetto-json -o timeline.json client.rbt
python3 -c 'import json,sys; json.load(open("timeline.json"))' || fail "perfetto-json output"
rbtrace report --format=perfetto -o timeline.pftrace client.rbt
# a protobuf Trace: its first bytes are packet 1 (tag 0x0a)
[ "$(head -c1 timeline.pftrace | od -An -tx1 | tr -d ' ')" = 0a ] || fail "perfetto output"
timeout 120 rbtrace replay --softnic -o replay.rbt client.rbt server.rbt >replay.txt 2>&1 ||
	{ cat replay.txt; fail "replay"; }
grep -q "no divergence" replay.txt || fail "replay: $(tail -3 replay.txt)"
rbtrace diff client.rbt replay.0.rbt >/dev/null || fail "diff"

echo "== an rdma_cm program on the installed softnic (its librdmacm.so.1)"
if command -v rping >/dev/null; then
	p2=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	timeout 60 rbtrace softnic -- rping -s -a 127.0.0.1 -p "$p2" -C 5 -v >rping_s.txt 2>&1 &
	rpid=$!
	# rping's client does not retry a connect that finds no listener, and
	# how long the server takes to listen is the machine's business: retry
	# while the server waits (it takes one connection), up to 30 s
	crc=1
	for _ in $(seq 60); do
		sleep 0.5
		crc=0
		timeout 60 rbtrace softnic -- rping -c -a 127.0.0.1 -p "$p2" -C 5 -v >rping_c.txt 2>&1 || crc=$?
		[ $crc = 0 ] || ! kill -0 $rpid 2>/dev/null || grep -q '^ping data' rping_c.txt && break
	done
	[ $crc = 0 ] || { cat rping_c.txt; fail "rping client"; }
	wait $rpid || { cat rping_s.txt; fail "rping server"; }
	[ "$(grep -c '^ping data' rping_c.txt)" = 5 ] || fail "rping: $(cat rping_c.txt)"
else
	echo "rping not installed (rdmacm-utils): skipped"
fi

echo "== the C example, built against the installed library"
# moved after install: --define-prefix takes the prefix from the .pc file's place
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cc -std=gnu11 -Wall -Werror "$prefix/share/doc/rbtrace/examples/wr_latency.c" \
	$(pkg-config --define-prefix --cflags --libs rbtformat) -Wl,-rpath,"$prefix/lib" -o wr_latency
./wr_latency client.rbt >lat.txt
# ibv_rc_pingpong -n 200: 200 sends and 200 receives, each signaled
python3 - lat.txt <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l[:1].isdigit()]
kinds = [r[2] for r in rows]
assert kinds.count("send") == 200 and kinds.count("recv") == 200, (len(rows), kinds[:4])
assert all(float(r[4]) > 0 for r in rows), [r for r in rows if float(r[4]) <= 0][:3]
assert {r[3] for r in rows if r[2] == "send"} == {"SEND"}, {r[3] for r in rows}
PY
! ./wr_latency /etc/passwd 2>err.txt || fail "a non-trace read as one"
grep -q "wr_latency: /etc/passwd:" err.txt || fail "error line: $(cat err.txt)"

echo "== Python, from the installed tree"
PYTHONPATH=$prefix/lib/python3/dist-packages /usr/bin/python3 - client.rbt info.txt "$prefix" <<'PY'
import re, sys
import rbtformat
trace, info, prefix = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3]
# the module finds the library of its own prefix, not some other one
assert rbtformat.library()._name == prefix + "/lib/librbtformat.so.1", rbtformat.library()._name
want = {m[0]: int(m[1]) for m in re.findall(r"^  ([a-z_]+) +(\d+)$", info, re.M)}
total = int(re.search(r"^events: +(\d+)$", info, re.M).group(1))
with rbtformat.Trace(trace) as t:
    got = {}
    for ev in t:
        got[ev["type"]] = got.get(ev["type"], 0) + 1
    assert t.stats["finished"] and t.stats["events"] == total, t.stats
assert got == want, (got, want)
assert sum(got.values()) == total
w = list(rbtformat.wrs(trace))
assert sum(1 for x in w if x["kind"] == "send") == 200, len(w)
assert {x["opcode_name"] for x in w} == {"SEND", "RECV"}, {x["opcode_name"] for x in w}
print("python: %d events in %d types, %d WRs, as rbtrace info says" % (total, len(got), len(w)))
PY
echo PASS
