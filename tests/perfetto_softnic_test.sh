#!/usr/bin/env bash
# perfetto_softnic_test.sh - the Perfetto timeline of real programs recorded over
# softnic, both ends: ib_write_bw of 500,000 WRs and ibv_rc_pingpong (receives too)
# decode back (tests/perfetto_decode.py) with every WR the report counts as a slice,
# the sends outstanding equal to the WR slices open; ib_write_bw's is at most 40 MB
# (80 bytes per WR);
# the JSON form (--format=perfetto-json) of ucmatose, whose last sends are never
# polled, has a flow arrow only where both its ends exist (report_check.py).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
DECODE=$root/tests/perfetto_decode.py
CHECK=$root/tests/report_check.py
use_softnic
mode=$softnic_mode
test_tmp perfetto_softnic shm
need_progs ib_write_bw ibv_rc_pingpong ucmatose
rec() { # OUT CMD...
	local out=$1
	shift
	timeout 300 "$RBTRACE" record --softnic=$mode -o "$out" -- "$@"
}
pair() { # NAME SERVER-ARGS -- CLIENT-ARGS (@P: a free port)
	local name=$1 port srv
	shift
	port=$(free_port)
	local s=() c=() side=s
	for a in "$@"; do
		[ "$a" = -- ] && { side=c; continue; }
		a=${a//@P/$port}
		if [ $side = s ]; then s+=("$a"); else c+=("$a"); fi
	done
	rec "$tmp/${name}_s.rbt" "${s[@]}" >"$tmp/${name}_s.log" 2>&1 &
	srv=$!
	wait_listen "$port" "$srv" || { tail -5 "$tmp/${name}_s.log"; fail "$name server: never listened"; }
	rec "$tmp/${name}_c.rbt" "${c[@]}" >"$tmp/${name}_c.log" 2>&1 ||
		{ tail -5 "$tmp/${name}_c.log"; fail "$name client"; }
	wait $srv || { tail -5 "$tmp/${name}_s.log"; fail "$name server"; }
}
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

pair bw ib_write_bw -p @P -n 500000 -- ib_write_bw -p @P -n 500000 localhost
pair pp ibv_rc_pingpong -p @P -n 500 -- ibv_rc_pingpong -p @P -n 500 localhost
for n in bw pp; do
	files=("$tmp/${n}_c.rbt" "$tmp/${n}_s.rbt")
	"$RBTRACE" report --format=json -o "$tmp/$n.json" "${files[@]}"
	"$RBTRACE" report --format=perfetto -o "$tmp/$n.pftrace" "${files[@]}"
	wrs=$(python3 -c 'import json,sys; k=json.load(open(sys.argv[1]))["counts"]
print(k["wrs_completed"] + k["recvs_completed"])' "$tmp/$n.json")
	out=$(python3 "$DECODE" "$tmp/$n.pftrace" --expect-wrs "$wrs" --exact-counters \
		--max-bytes $([ $n = bw ] && echo 40000000 || echo 1000000000)) || fail "$n: $out"
	echo "$n: $out"
	[ "$(field "$out" wr_slices)" = "$wrs" ] || fail "$n: not every WR is a slice"
	[ "$(field "$out" calls)" -gt 0 ] || fail "$n: no verbs calls"
done
[ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["counts"]["wrs_completed"])' \
	"$tmp/bw.json")" = 500000 ] || fail "ib_write_bw: not 500000 WRs"
# the receives of the ping-pong are slices too
[ "$(field "$(python3 "$DECODE" "$tmp/pp.pftrace")" wr_slices)" -gt 1000 ] ||
	fail "pingpong: receives missing"

echo "== ucmatose: the JSON form's flows"
pair uc ucmatose -p @P -c 4 -- ucmatose -s 127.0.0.1 -p @P -c 4
"$RBTRACE" report --format=perfetto-json -o "$tmp/uc.json" "$tmp/uc_c.rbt" "$tmp/uc_s.rbt"
python3 "$CHECK" perfetto "$tmp/uc.json"
"$RBTRACE" report --format=perfetto -o "$tmp/uc.pftrace" "$tmp/uc_c.rbt" "$tmp/uc_s.rbt"
python3 "$DECODE" "$tmp/uc.pftrace"
echo PASS
