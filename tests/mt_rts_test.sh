#!/bin/bash
# mt_rts_test.sh - a program whose main thread moves its QPs to RTS and whose
# second thread posts right after (tests/progs/mt_rts.c, rping's shape),
# recorded over softnic. The recorder writes each thread's ring into chunks of
# its own, so the posts' chunk can come before the RTS chunk in the file; the
# reader hands the events merged by time, so:
# - `rbtrace dump` shows the RTS before the first post;
# - the report has no post_not_rts or qp_error and no unmatched completion;
# - the replay matches every completion.
set -u
. "$(dirname "$0")/lib.sh"
R=$RBTRACE
P=$root/tests/mt_rts
need_files "$R" "$P" "$RBTRACE_LIB"
test_tmp mt_rts shm
fails=0
fail() {
	echo "FAIL $*"
	fails=$((fails + 1))
}

"$R" record --softnic -o "$tmp/t.rbt" -- "$P" --iters 20 >"$tmp/out" 2>&1 ||
	{ cat "$tmp/out"; echo "FAIL the program failed under the recorder"; exit 1; }
"$R" dump "$tmp/t.rbt" >"$tmp/dump" || fail "dump failed"
# in the dump's order (merged by time): both QPs' modify to RTS before the first
# post_send (in the file, the data thread's chunk of posts comes first: the
# recorder drains the newer ring first)
awk '$3 == "qp_modify" && / qp_state=RTS/ { m++ } $3 == "post_send" && m < 2 { bad = 1 }
	END { exit bad || m != 2 }' "$tmp/dump" || fail "dump: a post_send before the QPs were in RTS"
"$R" report --format=json -o "$tmp/r.json" "$tmp/t.rbt" || fail "report failed"
python3 - "$tmp/r.json" <<'PY' || fail "report"
import json, sys
d = json.load(open(sys.argv[1]))
bad = [f["code"] for f in d["findings"] if f["code"] in ("post_not_rts", "qp_error")]
assert not bad, "false findings: %s" % bad
assert d["counts"]["unmatched_completions"] == 0, d["counts"]
PY
timeout 120 "$R" replay --softnic --timing=asap "$tmp/t.rbt" >"$tmp/replay" 2>&1 ||
	fail "replay failed ($(tail -1 "$tmp/replay"))"
m=$(grep '^completions matched:' "$tmp/replay")
[[ $m =~ ^completions\ matched:\ ([0-9]+)\ of\ ([0-9]+)$ ]] &&
	[ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] && [ "${BASH_REMATCH[2]}" -ge 40 ] ||
	fail "replay: ${m:-no match line}"
echo "replay: $m"
[ $fails = 0 ] && echo PASS
exit $((fails > 0))
