#!/usr/bin/env bash
# report_filter_test.sh - zooming in (--from/--to/--around, --qp, --pid, --thread) on
# real traces recorded over softnic (tests/progs/replay_threads.c: 4 threads, 4 RC
# QPs ping-ponging in pairs; tests/progs/report_waiter.c for a finding):
# - --qp=N: exactly that QP's WRs: the counts are the QP's in the unfiltered JSON,
#   the only QP shown is N, and export's rows are the unfiltered rows of N;
# - --from/--to: two adjacent windows partition the WRs (their counts add up to the
#   whole), and export's rows are those posted inside the window;
# - --pid with two traces: that trace alone, with its unfiltered counts;
# - --thread: the WRs that thread posted (export's tid column);
# - --around=finding:N / --from=finding:CODE: the window around that finding;
# - the filter in force: the text's second line, the JSON's "filter";
# - bad values: one line on stderr naming the option, exit code 2;
# - the progress line: never when stderr is not a terminal; on a terminal (util-linux
#   script, when installed) once the run is long enough, and not with --quiet.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
R=$RBTRACE
THREADS=$root/tests/replay_threads
WAITER=$root/tests/report_waiter
need_files "$R" "$THREADS" "$WAITER" "$RBTRACE_LIB"
test_tmp report_filter shm

rec() { # OUT CMD...: CMD recorded over softnic into OUT
	local out=$1
	shift
	"$R" record --softnic -o "$out" -- timeout 60 "$@" >"$out.log" 2>&1 ||
		{ cat "$out.log"; fail "recording $*"; }
}
rec "$tmp/a.rbt" "$THREADS" --threads 4 --iters 2000 --interval-us 20
rec "$tmp/b.rbt" "$THREADS" --threads 2 --iters 300 --interval-us 20
rec "$tmp/w.rbt" "$WAITER" --iters 20 --mode spin --problem notrts
rec "$tmp/ni.rbt" "$WAITER" --iters 150 --mode spin --problem noinline

"$R" report --format=json -o "$tmp/all.json" "$tmp/a.rbt"
"$R" export -o "$tmp/all.csv" "$tmp/a.rbt"

echo "== --qp: exactly that QP's WRs"
for q in $(python3 -c 'import json,sys; print(" ".join(str(q["qp_num"]) for q in json.load(open(sys.argv[1]))["traces"][0]["qps"]))' "$tmp/all.json"); do
	"$R" report --format=json --qp=$q -o "$tmp/q$q.json" "$tmp/a.rbt"
	"$R" export --qp=$(printf '0x%x' $q) -o "$tmp/q$q.csv" "$tmp/a.rbt"
	python3 - "$tmp/all.json" "$tmp/q$q.json" "$tmp/all.csv" "$tmp/q$q.csv" $q <<'PY'
import csv, json, sys
full, sel = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
q = int(sys.argv[5])
assert sel["filter"]["qps"] == [q], sel["filter"]
qps = sel["traces"][0]["qps"]
assert [x["qp_num"] for x in qps] == [q], [x["qp_num"] for x in qps]
fq = [x for x in full["traces"][0]["qps"] if x["qp_num"] == q][0]
for k in ("posts", "wrs", "recv_posts", "recv_wrs"):
    assert qps[0][k] == fq[k], (k, qps[0][k], fq[k])
def wrs(qp, recv):
    return sum(g["wrs"] for g in qp["groups"] if (g["opcode"] == "RECV") == recv)
assert sel["counts"]["wrs_completed"] == wrs(fq, False) > 0, sel["counts"]
assert sel["counts"]["recvs_completed"] == wrs(fq, True) > 0, sel["counts"]
assert [g["wrs"] for g in qps[0]["groups"]] == [g["wrs"] for g in fq["groups"]]
rows = list(csv.DictReader(open(sys.argv[3])))
mine = [r for r in rows if int(r["qp_num"]) == q]
got = list(csv.DictReader(open(sys.argv[4])))
assert len(got) == len(mine) > 0 and all(int(r["qp_num"]) == q for r in got), (len(got), len(mine))
print("  QP %#x: %d send WRs, %d receives, %d export rows" % (q, wrs(fq, False), wrs(fq, True), len(got)))
PY
done

# the timeline too: that QP's WR slices only, as many as its WRs
"$R" report --format=perfetto-json --qp=$q -o "$tmp/q.pf.json" "$tmp/a.rbt"
python3 - "$tmp/q.pf.json" "$tmp/q$q.json" $q <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
sel, q = json.load(open(sys.argv[2])), int(sys.argv[3])
wr = [e for e in ev if e.get("cat") == "wr" and "args" in e]
assert {e["args"]["qp_num"] for e in wr} == {q}, {e["args"]["qp_num"] for e in wr}
assert len(wr) == sel["counts"]["wrs_completed"] + sel["counts"]["recvs_completed"], len(wr)
print("  perfetto-json --qp=%#x: %d WR slices, all of that QP" % (q, len(wr)))
PY
# and the protobuf one: one QP's tracks, its WRs as slices
"$R" report --format=perfetto --qp=$q -o "$tmp/q.pftrace" "$tmp/a.rbt"
n=$(python3 -c 'import json,sys; k=json.load(open(sys.argv[1]))["counts"]
print(k["wrs_completed"] + k["recvs_completed"])' "$tmp/q$q.json")
python3 "$root/tests/perfetto_decode.py" "$tmp/q.pftrace" --expect-wrs "$n" --exact-counters ||
	fail "perfetto --qp=$q"

echo "== --from/--to: adjacent windows partition the WRs"
# the cut: halfway between two posts a microsecond apart or more, near the middle
cut=$(python3 - "$tmp/all.csv" <<'PY'
import csv, sys
t = sorted({int(r["post_ns"]) for r in csv.DictReader(open(sys.argv[1]))})
mid = t[len(t) // 2]
for a, b in zip(t, t[1:]):
    if a >= mid and b - a >= 1000:
        print("%.3fus" % ((a + b) / 2 / 1e3)); break
PY
)
[ -n "$cut" ] || fail "no cut"
"$R" report --format=json --to=$cut -o "$tmp/w1.json" "$tmp/a.rbt"
"$R" report --format=json --from=$cut -o "$tmp/w2.json" "$tmp/a.rbt"
"$R" report --format=json --from=0 --to=$cut -o "$tmp/w1b.json" "$tmp/a.rbt"
"$R" export --from=$cut -o "$tmp/w2.csv" "$tmp/a.rbt"
python3 - "$tmp/all.json" "$tmp/w1.json" "$tmp/w2.json" "$tmp/w1b.json" "$tmp/all.csv" "$tmp/w2.csv" "$cut" <<'PY'
import csv, json, sys
full, a, b, a2 = (json.load(open(p)) for p in sys.argv[1:5])
cut = float(sys.argv[7][:-2]) * 1e3
assert a["filter"]["to_ns"] == round(cut) and a["filter"]["from_ns"] is None, a["filter"]
assert b["filter"]["from_ns"] == round(cut) and b["filter"]["to_ns"] is None, b["filter"]
for k in ("wrs_completed", "recvs_completed", "wrs_bounded", "wrs_nic_exact"):
    assert a["counts"][k] + b["counts"][k] == full["counts"][k], (k, a["counts"][k], b["counts"][k], full["counts"][k])
    assert a["counts"][k] == a2["counts"][k], k
assert a["counts"]["wrs_completed"] > 100 and b["counts"]["wrs_completed"] > 100, (a["counts"], b["counts"])
def per_qp(d, k):
    return {q["qp_num"]: q[k] for q in d["traces"][0]["qps"]}
for k in ("posts", "wrs", "recv_wrs"):
    fa, fb, ff = per_qp(a, k), per_qp(b, k), per_qp(full, k)
    assert all(fa[q] + fb[q] == ff[q] for q in ff), (k, fa, fb, ff)
ta, tb, tf = (d["traces"][0] for d in (a, b, full))
assert ta["posts"] + tb["posts"] == tf["posts"], (ta["posts"], tb["posts"], tf["posts"])
assert ta["polls"] + tb["polls"] == tf["polls"]
rows = list(csv.DictReader(open(sys.argv[5])))
want = sorted(r["post_ns"] + r["wr_id"] + r["qp_num"] + r["kind"] for r in rows if int(r["post_ns"]) >= cut)
got = sorted(r["post_ns"] + r["wr_id"] + r["qp_num"] + r["kind"] for r in csv.DictReader(open(sys.argv[6])))
assert got == want, (len(got), len(want))
print("  cut at %s: %d + %d send WRs, %d + %d receives; export: %d rows posted after it" % (
    sys.argv[7], a["counts"]["wrs_completed"], b["counts"]["wrs_completed"],
    a["counts"]["recvs_completed"], b["counts"]["recvs_completed"], len(got)))
PY
"$R" dump --from=$cut --to=$cut "$tmp/a.rbt" >/dev/null 2>&1 && fail "dump took an empty window"
# dump: a thread's events in the 2 ms after a send it posted
read -r dtid dfrom <<<"$(python3 -c 'import csv,sys; r = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "send"][100]; print(r["tid"], int(r["post_ns"]) // 1000)' "$tmp/all.csv")"
"$R" dump --thread=$dtid --from=${dfrom}us --to=$((dfrom + 2000))us "$tmp/a.rbt" >"$tmp/dump.txt"
[ -s "$tmp/dump.txt" ] || fail "dump: nothing in the window"
awk -v lo=$dfrom -v hi=$((dfrom + 2000)) '{ if ($1 * 1e6 < lo - 0.01 || $1 * 1e6 >= hi + 0.01) bad = 1 } END { exit bad }' "$tmp/dump.txt" ||
	fail "dump: an event outside the window"
[ "$(awk '{ print $2 }' "$tmp/dump.txt" | sort -u | wc -l)" = 1 ] || fail "dump --thread: several threads"
"$R" report --to=$cut "$tmp/a.rbt" | sed -n 3p | grep -q "^filter: WRs posted in \[start, " ||
	fail "the text report does not say the filter: $("$R" report --to=$cut "$tmp/a.rbt" | sed -n 3p)"

echo "== --pid: one trace of two"
"$R" report --format=json -o "$tmp/ab.json" "$tmp/a.rbt" "$tmp/b.rbt"
for i in 0 1; do
	pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["traces"][int(sys.argv[2])]["pid"])' "$tmp/ab.json" $i)
	"$R" report --format=json --pid=$pid -o "$tmp/p$i.json" "$tmp/a.rbt" "$tmp/b.rbt"
	python3 - "$tmp/ab.json" "$tmp/p$i.json" $i $pid <<'PY'
import json, sys
full, sel = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
i, pid = int(sys.argv[3]), int(sys.argv[4])
assert [t["index"] for t in sel["traces"]] == [i] and sel["traces"][0]["pid"] == pid
assert sel["filter"]["pid"] == pid
ft = full["traces"][i]
n = sum(g["wrs"] for q in ft["qps"] for g in q["groups"] if g["opcode"] != "RECV")
r = sum(g["wrs"] for q in ft["qps"] for g in q["groups"] if g["opcode"] == "RECV")
assert sel["counts"]["wrs_completed"] == n > 0 and sel["counts"]["recvs_completed"] == r > 0, (sel["counts"], n, r)
assert sel["traces"][0]["qps"] == ft["qps"]
print("  pid %d: trace %d alone, %d send WRs, %d receives" % (pid, i, n, r))
PY
done

echo "== --thread: the WRs that thread posted"
for tid in $(python3 -c 'import csv,sys; print(" ".join(sorted({r["tid"] for r in csv.DictReader(open(sys.argv[1]))})))' "$tmp/all.csv"); do
	"$R" report --format=json --thread=$tid -o "$tmp/t$tid.json" "$tmp/a.rbt"
	"$R" export --thread=$tid -o "$tmp/t$tid.csv" "$tmp/a.rbt"
	python3 - "$tmp/all.csv" "$tmp/t$tid.json" "$tmp/t$tid.csv" $tid <<'PY'
import csv, json, sys
tid = sys.argv[4]
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["tid"] == tid]
sel = json.load(open(sys.argv[2]))
got = list(csv.DictReader(open(sys.argv[3])))
assert sel["filter"]["thread"] == int(tid)
assert len(got) == len(rows) > 0 and all(r["tid"] == tid for r in got), (len(got), len(rows))
c = sel["counts"]
assert c["wrs_completed"] == sum(r["kind"] == "send" for r in rows), c
assert c["recvs_completed"] == sum(r["kind"] == "recv" for r in rows), c
print("  thread %s: %d send WRs, %d receives" % (tid, c["wrs_completed"], c["recvs_completed"]))
PY
done
[ "$(python3 -c 'import csv,sys; print(len({r["tid"] for r in csv.DictReader(open(sys.argv[1]))}))' "$tmp/all.csv")" -ge 4 ] ||
	fail "replay_threads' trace has fewer than 4 posting threads"

echo "== a finding's time: --around=finding:N, --from=finding:CODE"
"$R" report --format=json -o "$tmp/wf.json" "$tmp/w.rbt"
"$R" report --format=json --around=finding:1,1ms -o "$tmp/wa.json" "$tmp/w.rbt"
"$R" report --format=json --from=finding:post_not_rts -o "$tmp/wc.json" "$tmp/w.rbt"
python3 - "$tmp/wf.json" "$tmp/wa.json" "$tmp/wc.json" <<'PY'
import json, sys
full, a, c = (json.load(open(p)) for p in sys.argv[1:])
f = full["findings"][0]
t = f["time_ns"] + full["traces"][f["trace"]]["align_ns"]
assert f["time_ns"] > 0, f
assert abs(a["filter"]["from_ns"] - (t - 1e6)) <= 1 and abs(a["filter"]["to_ns"] - (t + 1e6)) <= 1, (a["filter"], t)
assert (f["code"], f["title"]) in [(x["code"], x["title"]) for x in a["findings"]], a["findings"]
p = [x for x in full["findings"] if x["code"] == "post_not_rts"][0]
tp = p["time_ns"] + full["traces"][p["trace"]]["align_ns"]
assert abs(c["filter"]["from_ns"] - tp) <= 1, (c["filter"], tp)
assert "post_not_rts" in [x["code"] for x in c["findings"]]
print("  finding 1 (%s) at %.3f ms: kept inside its window" % (f["code"], t / 1e6))
PY

echo "== bad values: one line naming the option, exit code 2"
bad() { # OPTION-NAME ARGS...
	local name=$1
	shift
	set +e
	"$R" report "$@" "$tmp/w.rbt" >"$tmp/bad.out" 2>"$tmp/bad.err"
	local rc=$?
	set -e
	[ $rc = 2 ] || fail "report $*: exit $rc, not 2"
	[ "$(wc -l <"$tmp/bad.err")" = 1 ] || fail "report $*: not one line: $(cat "$tmp/bad.err")"
	grep -q -- "--$name" "$tmp/bad.err" || fail "report $*: does not name --$name: $(cat "$tmp/bad.err")"
	[ ! -s "$tmp/bad.out" ] || fail "report $*: wrote a report"
}
bad from --from=abc
bad from --from=-5
bad from --from=2parsecs
bad to --to=0x10
bad to --from=2s --to=1s
bad qp --qp=xyz
bad qp --qp=
bad qp --qp=1,,2
bad qp --qp=0x1000000
bad pid --pid=-3
bad thread --thread=1.5
bad pid --pid=1
bad around --around=finding:99
bad around --around=finding:no_such_code
bad around --around=5ms,abc
bad around --around=5ms --from=1ms
bad from --from=finding:0
# a QP no trace has: a warning, an empty selection
"$R" report --format=json --qp=0xfffff -o "$tmp/noqp.json" "$tmp/w.rbt" 2>"$tmp/noqp.err"
grep -q "warning: --qp: no QP 0xfffff in the traces" "$tmp/noqp.err" || fail "no warning for an unknown QP"
python3 -c 'import json,sys; d = json.load(open(sys.argv[1])); assert d["counts"]["wrs_completed"] == 0 and not d["traces"][0]["qps"]' "$tmp/noqp.json"
# a finding with no moment of its own (a pattern over the WRs) has no window
set +e
"$R" report --around=finding:not_inlined "$tmp/ni.rbt" >/dev/null 2>"$tmp/bad.err"
rc=$?
set -e
[ $rc = 2 ] && grep -q -- "--around: finding:not_inlined (not_inlined) is a pattern" "$tmp/bad.err" ||
	fail "--around=finding:not_inlined: exit $rc: $(cat "$tmp/bad.err")"
# ... but it is judged on the WRs selected: in a window of the first 10 sends, too few
"$R" report --format=json -o "$tmp/ni.json" "$tmp/ni.rbt"
"$R" report --format=json --to=$(python3 -c 'import json,sys; d = json.load(open(sys.argv[1])); print("%dus" % (max(h["time_ns"] for q in d["traces"][0]["qps"] for h in q["history"] if h["to"] == "RTS") / 1e3 + 1))' "$tmp/ni.json") -o "$tmp/ni0.json" "$tmp/ni.rbt"
python3 - "$tmp/ni.json" "$tmp/ni0.json" <<'PY'
import json, sys
full, early = (json.load(open(p)) for p in sys.argv[1:])
assert "not_inlined" in [f["code"] for f in full["findings"]], full["findings"]
assert "not_inlined" not in [f["code"] for f in early["findings"]], early["findings"]
assert early["counts"]["wrs_completed"] < 10, early["counts"]
PY
set +e
"$R" export --qp=nope "$tmp/w.rbt" >/dev/null 2>"$tmp/bad.err"
rc=$?
set -e
[ $rc = 2 ] && grep -q -- "--qp" "$tmp/bad.err" || fail "export --qp=nope: exit $rc"
echo "  17 bad values refused by report, one by export"

echo "== the progress line"
RBTRACE_PROGRESS_DELAY_MS=1 "$R" report -o "$tmp/r.txt" "$tmp/a.rbt" 2>"$tmp/err"
[ ! -s "$tmp/err" ] || fail "a progress line on a stderr that is no terminal: $(cat -v "$tmp/err")"
if script -qc true /dev/null >/dev/null 2>&1; then
	RBTRACE_PROGRESS_DELAY_MS=1 script -qc "'$R' report -o '$tmp/r.txt' '$tmp/a.rbt'" "$tmp/tty.log" >/dev/null
	grep -aq "rbtrace report: .* M events, .* MB read" "$tmp/tty.log" ||
		fail "no progress line on a terminal: $(cat -v "$tmp/tty.log")"
	# cleared at the end: the last thing written is the erase
	python3 -c 'import sys; d = open(sys.argv[1], "rb").read(); sys.exit(b"\r\x1b[K" not in d[d.rindex(b"MB read"):])' \
		"$tmp/tty.log" || fail "the progress line is not cleared: $(cat -v "$tmp/tty.log")"
	RBTRACE_PROGRESS_DELAY_MS=1 script -qc "'$R' report --quiet -o '$tmp/r.txt' '$tmp/a.rbt'" "$tmp/tty.log" >/dev/null
	! grep -aq "events" "$tmp/tty.log" || fail "--quiet drew a progress line"
	echo "  on a terminal (script): drawn and cleared; --quiet: none"
else
	echo "  util-linux script is not installed: the terminal check is skipped"
fi
echo PASS
