#!/usr/bin/env bash
# perfetto_size_test.sh - `rbtrace report --format=perfetto` at scale, decoded back by
# tests/perfetto_decode.py: a 500,000-WR trace shaped like ib_write_bw's client
# (perfetto_synth) gives a file of at most 40 MB (80 bytes per WR) holding every WR as
# a slice, its counters equal to the slices open; above --perfetto-max-wrs the WRs
# outside the detail window (or after the first N) are aggregated into per-QP bins
# that still account for every WR; bad --perfetto-* values fail in one line.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
SYNTH=$root/tests/perfetto_synth
DECODE=$root/tests/perfetto_decode.py
test_tmp perfetto_size
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

"$SYNTH" "$tmp/bw.rbt"
"$RBTRACE" report --format=json -o "$tmp/bw.json" "$tmp/bw.rbt"
wrs=$(python3 -c 'import json,sys; k=json.load(open(sys.argv[1]))["counts"]
print(k["wrs_completed"] + k["recvs_completed"])' "$tmp/bw.json")
[ "$wrs" = 500000 ] || fail "the report counts $wrs WRs, not 500000"

echo "== full detail"
start=$(date +%s.%N)
"$RBTRACE" report --format=perfetto -o "$tmp/bw.pftrace" "$tmp/bw.rbt"
end=$(date +%s.%N)
out=$(python3 "$DECODE" "$tmp/bw.pftrace" --expect-wrs "$wrs" --exact-counters \
	--max-bytes 40000000) || fail "decode: $out"
echo "$out"
echo "report --format=perfetto took $(echo "$end - $start" | bc) s"
[ "$(field "$out" wr_slices)" = 500000 ] || fail "not every WR is a slice"
[ "$(field "$out" wr_unfinished)" = 0 ] || fail "WR slices left open"
[ "$(field "$out" calls)" -gt 500000 ] || fail "the post and poll calls are missing"

echo "== aggregated beyond the first 100000"
"$RBTRACE" report --format=perfetto --perfetto-max-wrs=100000 "$tmp/bw.rbt" >"$tmp/agg.pftrace"
out=$(python3 "$DECODE" "$tmp/agg.pftrace" --expect-wrs "$wrs") || fail "decode: $out"
echo "$out"
[ "$(field "$out" wr_slices)" = 100000 ] || fail "expected 100000 WR slices"
[ "$(field "$out" agg_slices)" -gt 100 ] || fail "no aggregated bins"
[ "$(field "$out" bytes)" -lt 10000000 ] || fail "aggregation did not shrink the file"

echo "== aggregated outside a detail window"
"$RBTRACE" report --format=perfetto --perfetto-max-wrs=1000 --perfetto-detail=100:110 \
	--perfetto-bin=500 "$tmp/bw.rbt" >"$tmp/win.pftrace"
out=$(python3 "$DECODE" "$tmp/win.pftrace" --expect-wrs "$wrs") || fail "decode: $out"
echo "$out"
n=$(field "$out" wr_slices)
{ [ "$n" -gt 0 ] && [ "$n" -le 1000 ]; } || fail "$n WR slices in a 10 ms window"

echo "== bad options"
for bad in --perfetto-max-wrs=0 --perfetto-max-wrs=x --perfetto-detail=5:1 \
	--perfetto-detail=1 --perfetto-bin=0; do
	if err=$("$RBTRACE" report --format=perfetto $bad -o "$tmp/x" "$tmp/bw.rbt" 2>&1); then
		fail "$bad accepted"
	fi
	[ "$(echo "$err" | wc -l)" = 1 ] || fail "$bad: more than one line: $err"
	echo "$bad: $err"
done
err=$("$RBTRACE" report --perfetto-max-wrs=5 "$tmp/bw.rbt" 2>&1) && fail "--perfetto-max-wrs without perfetto"
echo "PASS"
