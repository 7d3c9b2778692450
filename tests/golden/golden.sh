#!/bin/bash
# golden.sh - `rbtrace report --format=json` on deterministic traces, compared with
# the JSON committed here (the report before the analyzer moved onto model/).
#
# usage: golden.sh RBTRACE BINDIR GOLDENDIR [--update]
#   BINDIR holds the fixture writers (make_trace, report_synth, replay_synth,
#   badinput_traces, replay_xrc_refuse); GOLDENDIR the *.json goldens and the
#   committed traces it also reads (the fuzz corpus).
# The fields a trace takes from the machine that wrote it (pid, host, command line,
# start time) are blanked by normalize.py before comparing; every number the
# analyzer computes is compared as written.
set -u
rbtrace=$(realpath "$1") bin=$(realpath "$2") gold=$(realpath "$3") update=${4:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fail=0

# name: the golden's file name; the rest: the traces to report together.
cases=()
add() { cases+=("$*"); }

"$bin/make_trace" mt.rbt >/dev/null && add make_trace mt.rbt
"$bin/make_trace" mt2.rbt --iters 3000 --chunk-bytes 4096 >/dev/null &&
	add make_trace_chunks mt2.rbt
"$bin/report_synth" rs_c.rbt rs_s.rbt && add synth rs_c.rbt rs_s.rbt &&
	add synth_client rs_c.rbt
"$bin/report_synth" --nic rn_c.rbt rn_s.rbt && add synth_nic rn_c.rbt rn_s.rbt &&
	add synth_nic_server rn_s.rbt
"$bin/report_synth" --iters 20 r20_c.rbt r20_s.rbt && add synth20 r20_c.rbt r20_s.rbt
"$bin/report_synth" --iters 20 --nic n20_c.rbt n20_s.rbt &&
	add synth_nic20 n20_c.rbt n20_s.rbt
"$bin/report_synth" --problem=retry rr_c.rbt rr_s.rbt &&
	add synth_retry rr_c.rbt rr_s.rbt
"$bin/report_synth" --iters 7 --nic --problem=retry rx_c.rbt rx_s.rbt &&
	add synth_retry_nic rx_c.rbt rx_s.rbt
for s in pingpong stream rnr rkey unpolled unpolled-lost; do
	mkdir -p "rp_$s"
	"$bin/replay_synth" "rp_$s" --scenario "$s" --iters 20 >/dev/null 2>&1 &&
		add "replay_$s" "rp_$s/a.rbt" "rp_$s/b.rbt"
done
"$bin/badinput_traces" zero bz.rbt && add bad_zero bz.rbt
"$bin/badinput_traces" noclock bn.rbt && add bad_noclock bn.rbt
for seed in 1 2 3 4; do
	"$bin/badinput_traces" wild "bw$seed.rbt" "$seed" 3000 &&
		add "bad_wild$seed" "bw$seed.rbt"
done
for m in raw nodom tm; do
	"$bin/replay_xrc_refuse" "$m" "x$m.rbt" >/dev/null 2>&1 && add "xrc_$m" "x$m.rbt"
done
for f in "$gold"/../fuzz_corpus/*.bin; do
	[ -f "$f" ] || continue
	b=$(basename "$f" .bin)
	cp "$f" "fz_$b.rbt" && add "fuzz_$b" "fz_$b.rbt"
done

n=0
for c in "${cases[@]}"; do
	set -- $c
	name=$1
	shift
	"$rbtrace" report --format=json "$@" >"$name.raw" 2>"$name.err"
	echo "exit $?" >>"$name.raw"
	python3 "$gold/normalize.py" <"$name.raw" >"$name.json" || {
		echo "FAIL $name: normalize"
		fail=1
		continue
	}
	n=$((n + 1))
	if [ "$update" = --update ]; then
		cp "$name.json" "$gold/$name.json"
	elif ! cmp -s "$name.json" "$gold/$name.json"; then
		echo "FAIL $name: report JSON differs from tests/golden/$name.json"
		diff <(python3 -m json.tool <"$gold/$name.json" 2>/dev/null || cat "$gold/$name.json") \
			<(python3 -m json.tool <"$name.json" 2>/dev/null || cat "$name.json") | head -40
		fail=1
	fi
done
# The text and Perfetto outputs too, on the fixtures whose headers are fixed
# (report_synth, replay_synth: no pid or host of the machine in them).
for c in synth20 synth_nic20 synth_retry synth_retry_nic replay_pingpong replay_rkey \
	replay_unpolled; do
	for c2 in "${cases[@]}"; do
		set -- $c2
		[ "$1" = "$c" ] || continue
		shift
		for fmt in text perfetto; do
			f=$fmt
			[ $fmt = perfetto ] && f=perfetto-json # the goldens keep their name
			out="$c.$fmt"
			"$rbtrace" report --format=$f "$@" >"$out" 2>&1
			echo "exit $?" >>"$out"
			n=$((n + 1))
			if [ "$update" = --update ]; then
				cp "$out" "$gold/$out"
			elif ! cmp -s "$out" "$gold/$out"; then
				echo "FAIL $out: differs from tests/golden/$out"
				diff "$gold/$out" "$out" | head -20
				fail=1
			fi
		done
	done
done
[ "$n" -ge 20 ] || { echo "FAIL: only $n cases ran"; fail=1; }
[ $fail = 0 ] && echo "PASS: $n report JSON goldens"
exit $fail
