#!/usr/bin/env bash
# report_jobs_test.sh - the traces read on several threads (-j N: chunks decoded
# ahead on worker threads, rbt_reader_opts.threads) give byte for byte what one
# thread gives: `rbtrace report --format=json` (stdout, stderr and exit code) with
# -j 1, -j 2 and -j 4, and `export`, `info` and `dump --json` with -j 1 and -j 4, on
# - real programs recorded over softnic (ibv_rc_pingpong and ib_write_bw, both
#   ends: several files, several streams),
# - synthetic traces: many small chunks on two streams (make_trace), four QPs
#   on two threads in chunks of 4 KiB (report_bench --write), paired traces
#   (report_synth, replay_synth),
# - damaged ones: wild bytes (badinput_traces), a flipped byte inside a chunk, a
#   file cut inside a chunk, the fuzz corpus.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
use_softnic
test_tmp report_jobs
cd "$tmp"

cases=()
add() { cases+=("$*"); }

echo "== real programs over softnic"
pair pp ibv_rc_pingpong -n 2000
add pp pp_c.rbt pp_s.rbt
pair bw ib_write_bw -n 5000
add bw bw_c.rbt bw_s.rbt
add bw_c bw_c.rbt

echo "== synthetic"
"$root/tests/make_trace" mt.rbt --iters 20000 --chunk-bytes 4096 >/dev/null
add mt mt.rbt
"$root/bench/report_bench" --write rb.rbt --events 300000 --chunk-bytes 4096
add rb rb.rbt
"$root/tests/report_synth" --iters 200 --nic rs_c.rbt rs_s.rbt
add rs rs_c.rbt rs_s.rbt
mkdir rp
"$root/tests/replay_synth" rp --scenario stream --iters 200 >/dev/null 2>&1
add rp rp/a.rbt rp/b.rbt

echo "== damaged"
for seed in 1 2 3; do
	"$root/tests/badinput_traces" wild "bw$seed.rbt" "$seed" 20000
	add "wild$seed" "bw$seed.rbt"
done
# a flipped byte in the middle of the file (inside a chunk: that chunk is lost)
python3 - rb.rbt flip.rbt cut.rbt <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
f = bytearray(b)
f[len(f) // 2] ^= 0x40
open(sys.argv[2], "wb").write(f)
open(sys.argv[3], "wb").write(b[: len(b) * 2 // 3])
PY
add flip flip.rbt
add cut cut.rbt
add flip_mt flip.rbt mt.rbt
i=0
for f in "$root"/tests/fuzz_corpus/*.bin; do
	cp "$f" "fz$i.rbt"
	add "fz$i" "fz$i.rbt"
	i=$((i + 1))
done

# out NAME J CMD...: CMD's stdout, stderr and exit code in NAME.J
out() {
	local name=$1 j=$2
	shift 2
	set +e
	"$@" >"$name.$j.out" 2>"$name.$j.err"
	echo "exit $?" >>"$name.$j.out"
	set -e
}
same() { # NAME A B
	cmp -s "$1.$2.out" "$1.$3.out" && cmp -s "$1.$2.err" "$1.$3.err" && return 0
	echo "FAIL $1: -j $2 and -j $3 differ" >&2
	diff "$1.$2.out" "$1.$3.out" | head -20 >&2
	diff "$1.$2.err" "$1.$3.err" | head -10 >&2
	return 1
}

bad=0 n=0
for c in "${cases[@]}"; do
	set -- $c
	name=$1
	shift
	for j in 1 2 4; do
		out "r_$name" $j "$RBTRACE" report --format=json -j $j "$@"
	done
	same "r_$name" 1 2 || bad=1
	same "r_$name" 1 4 || bad=1
	for j in 1 4; do
		out "e_$name" $j "$RBTRACE" export -j $j "$@"
	done
	same "e_$name" 1 4 || bad=1
	if [ $# = 1 ]; then
		for j in 1 4; do
			out "i_$name" $j "$RBTRACE" info -j $j "$1"
			out "d_$name" $j "$RBTRACE" dump --json -j $j "$1"
		done
		same "i_$name" 1 4 || bad=1
		same "d_$name" 1 4 || bad=1
	fi
	n=$((n + 1))
done
[ $bad = 0 ] || fail "outputs differ with -j"

# The cases must mean something: several chunks per file, damage seen.
python3 - r_rb.1.out r_flip.1.out r_bw.1.out <<'PY'
import json, sys
def doc(p):
    return json.loads(open(p).read().rsplit("exit", 1)[0])
rb, flip, bw = (doc(p) for p in sys.argv[1:])
assert rb["counts"]["events"] >= 300000, rb["counts"]
assert flip["counts"]["events"] < rb["counts"]["events"], (flip["counts"], rb["counts"])
assert len(bw["traces"]) == 2, len(bw["traces"])
PY
grep -q "chunks" i_rb.1.out || fail "info prints no chunk count"
chunks=$(awk '/chunks/ {for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) { print $i; exit }}' i_rb.1.out)
[ "${chunks:-0}" -gt 50 ] || fail "rb.rbt has only ${chunks:-0} chunks: nothing to decode ahead"

echo "== bad -j values: one clear line, exit 2"
for v in 0 x -1 2000; do
	set +e
	"$RBTRACE" report -j "$v" mt.rbt >/dev/null 2>"badj.err"
	rc=$?
	set -e
	[ $rc = 2 ] || fail "-j $v: exit $rc"
	[ "$(wc -l <badj.err)" -le 2 ] || fail "-j $v: $(cat badj.err)"
	grep -q "jobs" badj.err || fail "-j $v: $(cat badj.err)"
done
echo "PASS: $n cases, report/export/info/dump the same with -j 1, 2 and 4"
