#!/usr/bin/env bash
# no_verbs_test.sh - reading a trace needs no RDMA stack: `rbtrace` itself links
# no libibverbs (its NEEDED entries), and with every libibverbs.so.1 of the
# system hidden (a private mount namespace, /dev/null bound over each) report,
# dump, info and diff still run and print what they print with it, while
# `rbtrace replay` fails in one line naming libibverbs - and `rbtrace replay
# --softnic`, which brings its own libibverbs.so.1, still replays and matches.
# Hiding needs root and unshare(CLONE_NEWNS); without them that part is skipped
# with a line saying so (the NEEDED checks still run).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
SYNTH=$root/tests/replay_synth
MODULE=$root/replay/librbtrace-replay.so
test_tmp no_verbs

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

# 1. The static picture: the command links no verbs, the replayer does.
[ -x "$RBTRACE" ] || fail "$RBTRACE is not built"
[ -f "$MODULE" ] || fail "$MODULE is not built (a data dependency of //cli:rbtrace)"
if needed "$RBTRACE" | grep -q libibverbs; then
	fail "rbtrace links libibverbs: $(needed "$RBTRACE" | tr '\n' ' ')"
fi
needed "$MODULE" | grep -qx 'libibverbs.so.1' || fail "the replayer module does not link libibverbs.so.1"

"$SYNTH" "$tmp" --iters 20 >/dev/null || fail "replay_synth"
a=$tmp/a.rbt
b=$tmp/b.rbt

# A module that is missing, or is not the replayer, is refused in one line.
one_line() { # WHAT PATTERN FILE
	[ "$(wc -l <"$3")" = 1 ] && grep -q "$2" "$3" || fail "$1: $(cat "$3")"
}
rc=0
RBTRACE_REPLAY_MODULE=$tmp/none.so "$RBTRACE" replay "$a" "$b" >/dev/null 2>"$tmp/m1" || rc=$?
[ "$rc" = 1 ] || fail "a missing module: exit $rc"
one_line "a missing module" "^rbtrace replay: cannot load the replayer: .*none.so" "$tmp/m1"
rc=0
RBTRACE_REPLAY_MODULE=$(readlink -f "$root/softnic/libibverbs.so.1") "$RBTRACE" replay "$a" "$b" \
	>/dev/null 2>"$tmp/m2" || rc=$?
[ "$rc" = 1 ] || fail "a library that is not the replayer: exit $rc"
one_line "a library that is not the replayer" "is not the replayer of this rbtrace" "$tmp/m2"

# What each reading command prints, and its exit status, with libibverbs
# present; compared below with the same commands where none is reachable.
run_readers() { # OUTDIR
	local o=$1
	mkdir -p "$o"
	one() { # NAME ARGS...
		local n=$1 rc=0
		shift
		env -u LD_LIBRARY_PATH "$RBTRACE" "$@" >"$o/$n" 2>&1 || rc=$?
		echo "exit $rc" >>"$o/$n"
	}
	one report report "$a" "$b"
	one report.json report --format=json "$a"
	one dump dump "$a"
	one dump.json dump --json "$b"
	one info info "$a"
	one diff diff "$a" "$b"
}
run_readers "$tmp/with"
grep -qx 'exit 0' "$tmp/with/report" || fail "report: $(cat "$tmp/with/report")"
grep -qx 'exit 1' "$tmp/with/diff" || fail "diff of two ends should diverge: $(cat "$tmp/with/diff")"

# 2. The same with no libibverbs reachable.
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
	echo "SKIP: hiding libibverbs needs root and unshare -m (uid $(id -u)): only the NEEDED checks ran"
	exit 0
fi
libs=$(
	{
		ldconfig -p 2>/dev/null | awk '/libibverbs\.so\.1 /{print $NF}'
		ls /lib/*/libibverbs.so.1* /usr/lib/*/libibverbs.so.1* /usr/lib/libibverbs.so.1* \
			/lib/libibverbs.so.1* 2>/dev/null || true
	} | xargs -r -n1 readlink -f | sort -u
)
[ -n "$libs" ] || echo "note: no libibverbs.so.1 installed here: nothing to hide"
# the client's trace under a name JSON must escape (a quote, a backslash, a tab)
qa=$tmp/$(printf 'a"q\\\t.rbt')
cp "$a" "$qa"
export RBTRACE SOFTNIC_FABRIC=$tmp/fabric a b qa tmp libs
export -f run_readers
unshare -m --propagation private bash -euo pipefail -c '
	for l in $libs; do mount --bind /dev/null "$l"; done
	# the hiding holds: nothing can load libibverbs from the system now
	if python3 -c "import ctypes; ctypes.CDLL(\"libibverbs.so.1\")" 2>/dev/null; then
		echo "FAIL: libibverbs.so.1 still loads after hiding" >&2; exit 1
	fi
	run_readers "$tmp/without"
	rc=0
	env -u LD_LIBRARY_PATH "$RBTRACE" replay "$a" "$b" >"$tmp/replay.out" 2>"$tmp/replay.err" || rc=$?
	echo "$rc" >"$tmp/replay.rc"
	"$RBTRACE" replay --softnic --json "$qa" "$b" >"$tmp/softnic.json" 2>"$tmp/softnic.err" \
		&& echo 0 >"$tmp/softnic.rc" || echo $? >"$tmp/softnic.rc"
' || fail "the run without libibverbs (see above)"

for f in report report.json dump dump.json info diff; do
	cmp -s "$tmp/with/$f" "$tmp/without/$f" ||
		fail "rbtrace $f differs without libibverbs: $(diff "$tmp/with/$f" "$tmp/without/$f" | head -5)"
done
[ "$(cat "$tmp/replay.rc")" = 1 ] || fail "replay without libibverbs exited $(cat "$tmp/replay.rc"), not 1"
[ "$(wc -l <"$tmp/replay.err")" = 1 ] || fail "replay without libibverbs: not one line: $(cat "$tmp/replay.err")"
grep -q '^rbtrace replay: cannot load libibverbs.so.1' "$tmp/replay.err" ||
	fail "replay without libibverbs: $(cat "$tmp/replay.err")"
[ ! -s "$tmp/replay.out" ] || fail "replay without libibverbs printed a report: $(cat "$tmp/replay.out")"
[ "$(cat "$tmp/softnic.rc")" = 0 ] || fail "replay --softnic without libibverbs: $(cat "$tmp/softnic.err")"
python3 - "$tmp/softnic.json" "$qa" <<'EOF' || fail "replay --softnic without libibverbs did not match"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["sides"][0]["trace"] == sys.argv[2], (r["sides"][0]["trace"], sys.argv[2])
c = r["completions"]
assert c["expected"] > 0 and c["matched"] == c["expected"], c
assert not r["divergences"], r["divergences"]
EOF
echo "PASS: report, dump, info and diff without libibverbs; replay refused in one line; --softnic replays"
