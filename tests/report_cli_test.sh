#!/usr/bin/env bash
# report_cli_test.sh - `rbtrace report` end to end on synthetic traces with known
# timing (tests/progs/report_synth.c): text, JSON (schema and phase medians against
# the truth), Perfetto (slices, phases and flows parsed and checked), HTML (opened in
# headless Chromium: the page's script marks its plots drawn; the screenshot is not
# blank), a trace with a problem, and the CLI's error lines.
set -euo pipefail
RBTRACE=${RBTRACE:-cli/rbtrace}
SYNTH=${SYNTH:-tests/report_synth}
CHECK=${CHECK:-tests/report_check.py}
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/report_cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$SYNTH" --iters 2000 --nic "$tmp/c.rbt" "$tmp/s.rbt"

echo "== text"
"$RBTRACE" report "$tmp/c.rbt" "$tmp/s.rbt" >"$tmp/report.txt"
grep -q "no problems found" "$tmp/report.txt" || fail "healthy ping-pong has findings"
grep -q "round trips: 2000, p50 6.60 us = local post 300 ns + NIC and wire 5.00 us + remote application 1.30 us" \
	"$tmp/report.txt" || { cat "$tmp/report.txt"; fail "round trip split"; }
grep -q "NIC clock: fitted to" "$tmp/report.txt" || fail "no clock fit"

echo "== json"
"$RBTRACE" report --format=json -o "$tmp/report.json" "$tmp/c.rbt" "$tmp/s.rbt"
python3 "$CHECK" json "$tmp/report.json" serious=0 p50:0:nic=2000 p50:0:post=300 \
	p50:0:recv_poll=500 p50:1:nic=2000

echo "== perfetto"
"$RBTRACE" report --format=perfetto-json -o "$tmp/trace.json" "$tmp/c.rbt" "$tmp/s.rbt"
python3 "$CHECK" perfetto "$tmp/trace.json"

echo "== without NIC timestamps: bounds, no made-up point"
"$SYNTH" --iters 500 "$tmp/c2.rbt" "$tmp/s2.rbt"
"$RBTRACE" report --format=json -o "$tmp/bound.json" "$tmp/c2.rbt" "$tmp/s2.rbt"
python3 - "$tmp/bound.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ph = d["traces"][0]["phases"]
assert "nic" not in ph, "a NIC point without NIC timestamps"
lo, hi = ph["nic_lo"]["p50"], ph["nic_hi"]["p50"]
assert lo <= 2000 <= hi, (lo, hi)  # the truth: 2 us
print("bound ok: nic p50 in [%.0f, %.0f] contains 2000" % (lo, hi))
EOF

echo "== html in headless chromium"
"$RBTRACE" report --format=html -o "$tmp/report.html" "$tmp/c.rbt" "$tmp/s.rbt"
if grep -q "https\?://" "$tmp/report.html"; then fail "html refers to the network"; fi
CHROME=${CHROME:-/usr/bin/chromium}
if [ -x "$CHROME" ]; then
	flags=(--headless --no-sandbox --disable-gpu --disable-background-networking
		--disable-component-update --disable-sync --no-first-run
		--user-data-dir="$tmp/chrome" --window-size=1200,1600 --virtual-time-budget=5000)
	HOME="$tmp" timeout 60 "$CHROME" "${flags[@]}" --dump-dom "file://$tmp/report.html" \
		>"$tmp/dom.html" 2>/dev/null
	# per trace: a row of 4 plots for its QP, 2 for its round trips, 2 distributions
	grep -q 'data-js-errors="0"' "$tmp/dom.html" || fail "script errors in the page"
	grep -q 'data-plots-drawn="16"' "$tmp/dom.html" ||
		fail "plots not drawn: $(grep -o '<title>[^<]*' "$tmp/dom.html")"
	HOME="$tmp" timeout 60 "$CHROME" "${flags[@]}" --screenshot="$tmp/shot.png" \
		"file://$tmp/report.html" >/dev/null 2>&1
	python3 "$CHECK" png "$tmp/shot.png"
else
	fail "chromium not installed (apt-get install -y chromium)"
fi

echo "== a problem: wrong dest QP number, retries exhausted"
"$SYNTH" --iters 5 --problem=retry "$tmp/c3.rbt" "$tmp/s3.rbt"
"$RBTRACE" report --format=json -o "$tmp/bad.json" "$tmp/c3.rbt" "$tmp/s3.rbt"
python3 "$CHECK" json "$tmp/bad.json" finding=qp_error finding=dest_qpn_unmatched
"$RBTRACE" report "$tmp/c3.rbt" "$tmp/s3.rbt" | grep -q "\[error\] qp_error: QP 0x11 went to ERR: first error completion RETRY_EXC_ERR" ||
	fail "text finding"

echo "== a truncated trace: reported as far as it goes, with a warning"
cp "$tmp/c2.rbt" "$tmp/cut.rbt"
truncate -s $(($(stat -c %s "$tmp/cut.rbt") * 2 / 3)) "$tmp/cut.rbt"
"$RBTRACE" report "$tmp/cut.rbt" >"$tmp/cut.txt" 2>"$tmp/cut.err" || fail "truncated trace: exit $?"
grep -q "trace_incomplete" "$tmp/cut.txt" || fail "truncation not reported"
grep -q "warning: trace .*cut.rbt is incomplete" "$tmp/cut.err" || fail "no warning on stderr"
grep -q "send WRs" "$tmp/cut.txt" || fail "nothing reported"

echo "== errors"
set +e
"$RBTRACE" report "$tmp/nope.rbt" 2>"$tmp/err"
rc=$?
set -e
[ $rc = 1 ] || fail "missing file exit code $rc"
[ "$(wc -l <"$tmp/err")" = 1 ] || fail "error is not one line: $(cat "$tmp/err")"
grep -q "nope.rbt" "$tmp/err" || fail "error does not name the file"
set +e
"$RBTRACE" report --format=xml "$tmp/c.rbt" 2>/dev/null
rc=$?
set -e
[ $rc = 2 ] || fail "bad format exit code $rc"
echo "report_cli_test: all good"
