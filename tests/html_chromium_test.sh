#!/usr/bin/env bash
# html_chromium_test.sh - `rbtrace report --format=html` of real traces recorded over
# softnic, opened in headless Chromium after its script ran (--dump-dom with a
# virtual time budget), checked against the JSON report of the same traces
# (tests/html_check.py):
# - ibv_rc_pingpong, both ends (paired): one row per QP with its four plots over time
#   (WR rate, send WRs outstanding, CQ occupancy against the CQ's depth, latency
#   p50/p99), one point per time bin, the series adding up to the WRs the report
#   counts; the round-trip split of each QP;
# - a service that hangs the way rdma_bench's herd did (tests/progs/stall_prog.c):
#   each wr_stalled finding links to its QP's row and has a mark at its time in each
#   of its plots; the series show the stall (the WR outstanding to the end, no
#   completion, the CQ polled empty); opened on #finding-N, that finding is lit;
# - no script error (window.onerror writes them into the page) and no console line
#   (--enable-logging=stderr); a screenshot of each page, not blank.
# Chromium is a package of ./dev setup; without it the test fails saying so.
set -euo pipefail
root=$PWD
STALL=$root/tests/stall_prog
CHECK=$root/tests/report_check.py
HCHECK=$root/tests/html_check.py
. "$(dirname "$0")/lib.sh"
use_softnic
test_tmp html_chromium

CHROME=${CHROME:-$(command -v chromium || true)}
[ -n "$CHROME" ] && [ -x "$CHROME" ] ||
	fail "chromium not installed: ./dev setup installs it (apt-get install -y chromium)"

flags=(--headless --no-sandbox --disable-gpu --disable-background-networking
	--disable-component-update --disable-sync --no-first-run --mute-audio
	--user-data-dir="$tmp/chrome" --window-size=1280,1400 --virtual-time-budget=5000)
# open NAME URL-SUFFIX: NAME.html, its DOM after the script ran into NAME.dom and a
# screenshot into NAME.png (one Chromium run); its console lines checked
open_page() {
	HOME=$tmp timeout 60 "$CHROME" "${flags[@]}" --enable-logging=stderr --v=0 \
		--screenshot="$tmp/$1.png" --dump-dom "file://$tmp/$1.html$2" \
		>"$tmp/$1.dom" 2>"$tmp/$1.err" ||
		{ tail -5 "$tmp/$1.err"; fail "chromium on $1.html"; }
	python3 "$HCHECK" console "$tmp/$1.err"
	[ -s "$tmp/$1.png" ] || fail "no screenshot of $1.html"
	[ "$(stat -c %s "$tmp/$1.png")" -gt 20000 ] || fail "screenshot of $1.html is tiny"
	python3 "$CHECK" png "$tmp/$1.png"
	[ -z "${HTML_SHOT_DIR:-}" ] || cp "$tmp/$1.png" "$HTML_SHOT_DIR/"
}

echo "== ibv_rc_pingpong, both ends"
pair pp ibv_rc_pingpong -n 500
"$RBTRACE" report --format=html -o "$tmp/pp.html" "$tmp/pp_c.rbt" "$tmp/pp_s.rbt"
"$RBTRACE" report --format=json -o "$tmp/pp.json" "$tmp/pp_c.rbt" "$tmp/pp_s.rbt"
if grep -q "https\?://" "$tmp/pp.html"; then fail "the page refers to the network"; fi
open_page pp ""
python3 "$HCHECK" dom "$tmp/pp.dom" "$tmp/pp.json" rt

echo "== a stall: the server stops answering, both clients spin"
stalled st 2
traces=("$tmp/st_c1.rbt" "$tmp/st_c2.rbt" "$tmp/st_s.rbt")
"$RBTRACE" report --format=html -o "$tmp/st.html" "${traces[@]}"
"$RBTRACE" report --format=json -o "$tmp/st.json" "${traces[@]}"
# opened on a finding: its marks lit, its row too
n=$(python3 -c 'import json,sys; print([i for i, f in enumerate(json.load(open(sys.argv[1]))["findings"]) if f["code"] == "wr_stalled"][0])' "$tmp/st.json")
open_page st "#finding-$n"
python3 "$HCHECK" dom "$tmp/st.dom" "$tmp/st.json" stall "hl=$n"
echo "html_chromium_test: all good"
