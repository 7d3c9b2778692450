#!/usr/bin/env bash
# light_test.sh - light mode (RBTRACE_LIGHT=1, `rbtrace record --light`) on a real
# program over softnic (tests/progs/flight_prog.c): the posts and polls carry no
# exit time and the trace says why (its first NOTE); no stacks are taken; info,
# dump, report and replay read it, and the report counts the same WRs and
# completions as a normal recording of the same program.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
PROG=$root/tests/flight_prog
test_tmp light
use_softnic

echo "== RBTRACE_LIGHT=1 beside a normal recording"
RBTRACE_LIGHT=1 run "$tmp/light.rbt" "$PROG" run 3000 >/dev/null
run "$tmp/full.rbt" "$PROG" run 3000 >/dev/null
"$RBTRACE" dump "$tmp/light.rbt" >"$tmp/light.txt" || fail "dump of the light trace"
"$RBTRACE" dump "$tmp/full.rbt" >"$tmp/full.txt"
grep -q "note .*light mode (RBTRACE_LIGHT=1)" "$tmp/light.txt" || fail "no light-mode note"
! grep -q "light mode" "$tmp/full.txt" || fail "a normal trace says light mode"
grep -E " (post_send|post_recv|poll_cq) " "$tmp/light.txt" >"$tmp/light.dp" || true
grep -E " (post_send|post_recv|poll_cq) " "$tmp/full.txt" >"$tmp/full.dp" || true
n=$(wc -l <"$tmp/light.dp")
[ "$n" -ge 9000 ] || fail "only $n posts and polls in the light trace"
! grep -q "ts_exit=" "$tmp/light.dp" || fail "a light post or poll has an exit time"
grep -q "ts_exit=" "$tmp/full.dp" || fail "the normal trace has no exit times"
! grep -q " stack " "$tmp/light.txt" || fail "light mode took stacks"
grep -q " stack " "$tmp/full.txt" || fail "the normal trace has no stacks"
"$RBTRACE" info "$tmp/light.rbt" >"$tmp/info.txt"
grep -q "^finished:  yes" "$tmp/info.txt" || fail "info: not finished"
"$RBTRACE" report --format=json -o "$tmp/light.json" "$tmp/light.rbt" || fail "report"
"$RBTRACE" report --format=json -o "$tmp/full.json" "$tmp/full.rbt"
"$RBTRACE" report "$tmp/light.rbt" >/dev/null || fail "text report"
python3 - "$tmp/full.json" "$tmp/light.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
ca, cb = a["counts"], b["counts"]
assert cb["unmatched_completions"] == 0 and cb["wrs_completed"] > 0, cb
for k in ("wrs_completed", "unmatched_completions"):
    assert ca[k] == cb[k], (k, ca, cb)
assert a["traces"][0]["posts"] == b["traces"][0]["posts"], "posts"
PY
"$RBTRACE" replay --softnic --timing=asap "$tmp/light.rbt" >"$tmp/rp.txt" 2>&1 ||
	{ cat "$tmp/rp.txt" >&2; fail "replay of the light trace"; }
python3 - "$tmp/rp.txt" <<'PY' || { cat "$tmp/rp.txt" >&2; fail "the light replay diverged"; }
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"completions matched: (\d+) of (\d+)", t)
assert m and m.group(1) == m.group(2) and int(m.group(2)) > 0, t
assert "divergences" not in t, t
PY

echo "== rbtrace record --light"
"$RBTRACE" record --softnic --light -o "$tmp/rec.rbt" -- "$PROG" run 200 >/dev/null 2>"$tmp/rec.err" ||
	fail "record --light: $(cat "$tmp/rec.err")"
"$RBTRACE" dump "$tmp/rec.rbt" >"$tmp/rec.txt"
grep -q "light mode (RBTRACE_LIGHT=1)" "$tmp/rec.txt" || fail "record --light: no note"
RBTRACE_STACKS=1 RBTRACE_LIGHT=1 run "$tmp/stk.rbt" "$PROG" run 10 >/dev/null
"$RBTRACE" dump "$tmp/stk.rbt" >"$tmp/stk.txt"
grep -q " stack " "$tmp/stk.txt" || fail "RBTRACE_STACKS=1 ignored in light mode"
echo PASS
