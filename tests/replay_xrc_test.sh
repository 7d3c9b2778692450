#!/usr/bin/env bash
# replay_xrc_test.sh - `rbtrace replay` of XRC programs: both ends of Debian's
# ibv_xsrq_pingpong recorded over softnic with `rbtrace record --softnic`, then
# replayed in one process and in two replayer processes over TCP. Asserts on the
# JSON replay report that every recorded send and receive completion (all of them
# successes, checked in the trace) came back as recorded, and that every QP ends
# in its recorded state; on the replay's own trace (-o) that each XRC send named
# the peer's *replayed* SRQ number, not the recorded one; the same with two
# clients sharing the server's XRC domain (-c 2: a send reaches one client's SRQ
# through the other client's TGT QP); a clear refusal against the responder; and
# `rbtrace report` on the XRC traces (every receive joined to its SRQ post).
# Also -e (completion channels on the XRC SRQ's CQ), and the one-line refusals
# of what the replayer cannot rebuild (tests/replay_xrc_refuse.c).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
REFUSE=$root/tests/replay_xrc_refuse
command -v ibv_xsrq_pingpong >/dev/null || { echo "SKIP: ibverbs-utils is not installed"; exit 0; }
test_tmp replay_xrc
# where the replayer puts the files of shared XRC domains (checked at the end)
export TMPDIR=$tmp/t
mkdir -p "$TMPDIR"

# record NAME NCLIENTS ITERS [OPTION...]: the server and its clients, each end
# traced
record() {
	local name=$1 nc=$2 n=$3 p i
	shift 3
	local opts=("$@")
	p=$(free_port)
	timeout 60 "$RBTRACE" record --softnic -o "$tmp/$name-srv.rbt" -- \
		ibv_xsrq_pingpong "${opts[@]}" -p "$p" -c "$nc" -n "$n" >"$tmp/$name-srv.log" 2>&1 &
	local srv=$!
	pids+=("$srv")
	local cl=()
	for i in $(seq 1 "$nc"); do
		# the server may not listen yet: a client that finds no one retries
		(for t in $(seq 1 50); do
			sleep 0.1
			timeout 60 "$RBTRACE" record --softnic -o "$tmp/$name-cli$i.rbt" -- \
				ibv_xsrq_pingpong "${opts[@]}" -p "$p" -n "$n" localhost \
				>"$tmp/$name-cli$i.log" 2>&1 && exit 0
			rm -f "$tmp/$name-cli$i.rbt"
		done
		exit 1) &
		cl+=($!)
	done
	for c in "${cl[@]}"; do wait "$c" || { cat "$tmp/$name"-*.log; fail "$name: client"; }; done
	wait "$srv" || { cat "$tmp/$name-srv.log"; fail "$name: server"; }
	grep -q success "$tmp/$name-srv.log" || fail "$name: server did not succeed"
}

# check JSON TRACE...: the replay report says every recorded completion came
# back as recorded and every QP ends in its recorded state; the traces' own
# completions were all successes, and as many as the report expected.
check() {
	local json=$1
	shift
	for t in "$@"; do "$RBTRACE" dump --json "$t"; done >"$json.dump"
	python3 - "$json" "$json.dump" <<'PY'
import json, sys
rep = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
wcs = [w for l in open(sys.argv[2]) for e in [json.loads(l)]
       if e.get("type") == "poll_cq" for w in e.get("wcs", [])]
assert wcs and all(w["status"] == 0 for w in wcs), "recorded completions not all successes"
c = rep["completions"]
assert rep["divergences"] == [], rep["divergences"]
assert c["expected"] == len(wcs), (c, len(wcs))
assert c["matched"] == c["expected"] > 0, c
types = set()
for q in rep["qps"]:
    types.add(q["type"])
    for d in ("send", "recv"):
        assert q[d]["replayed"] == q[d]["recorded"], q
    if not q.get("other_process"):
        assert q["state"]["replayed"] == q["state"]["recorded"] == "RTS", q
assert {"XRC_SEND", "XRC_RECV"} <= types, types
recv = sum(q["recv"]["recorded"] for q in rep["qps"])
send = sum(q["send"]["recorded"] for q in rep["qps"])
assert recv > 0 and send > 0 and recv + send == c["expected"], (recv, send, c)
PY
}

# srqmap REC_SRV REC_CLI REP_SRV REP_CLI: each end's XRC sends name the other
# end's SRQ - in the recording its recorded number, in the replay's own traces
# (-o) its replayed number, which differs from every recorded one.
srqmap() {
	local t
	for t in "$@"; do "$RBTRACE" dump --json "$t" >"$t.dump"; done
	python3 - "$1.dump" "$2.dump" "$3.dump" "$4.dump" <<'PY'
import json, sys
def load(p):
    ev = [json.loads(l) for l in open(p)]
    srqn = {e["srqn"] for e in ev if e.get("type") == "srq_create" and e["srq_type"] == 1}
    dst = {w["remote_qpn"] for e in ev if e.get("type") == "post_send" for w in e["wrs"]}
    return srqn, dst
rs, rc, ps, pc = (load(p) for p in sys.argv[1:5])
assert rs[1] and rc[1] and ps[1] and pc[1], "no XRC sends"
assert rs[1] == rc[0] and rc[1] == rs[0], ("recorded sends", rs, rc)
assert not ((rs[0] | rc[0]) & (ps[0] | pc[0])), ("replayed SRQ numbers equal recorded ones", rs, rc, ps, pc)
assert ps[1] == pc[0] and pc[1] == ps[0], ("replayed sends do not name the peer's replayed SRQ", ps, pc)
PY
}

# replay2 NAME LISTEN_TRACES -- CONNECT_TRACES: two replayer processes
replay2() {
	local name=$1 p
	shift
	local lt=() ct=()
	while [ "$1" != -- ]; do lt+=("$1"); shift; done
	shift
	ct=("$@")
	p=$(free_port)
	timeout 120 "$RBTRACE" replay --softnic --json --listen "$p" -o "$tmp/$name-l.rep.rbt" \
		"${lt[@]}" >"$tmp/$name-l.json" 2>"$tmp/$name-l.err" &
	local bg=$!
	pids+=("$bg")
	timeout 120 "$RBTRACE" replay --softnic --json --connect "127.0.0.1:$p" \
		-o "$tmp/$name-c.rep.rbt" "${ct[@]}" >"$tmp/$name-c.json" 2>"$tmp/$name-c.err" ||
		{ cat "$tmp/$name-c.json" "$tmp/$name-c.err"; fail "$name: connecting replayer"; }
	wait "$bg" || { cat "$tmp/$name-l.json" "$tmp/$name-l.err"; fail "$name: listening replayer"; }
	check "$tmp/$name-l.json" "${lt[@]}"
	check "$tmp/$name-c.json" "${ct[@]}"
}

echo "== record ibv_xsrq_pingpong over softnic (server, one client)"
record pp 1 20
srv=$tmp/pp-srv.rbt cli=$tmp/pp-cli1.rbt

# report NAME TRACE...: `rbtrace report` names the XRC QPs and joins every
# receive completion (on the XRC SRQ's CQ) to its receive posted on the SRQ.
report() {
	local name=$1
	shift
	"$RBTRACE" report "$@" >"$tmp/$name-report.txt" || fail "$name: report"
	grep -q "XRC_SEND" "$tmp/$name-report.txt" && grep -q "XRC_RECV" "$tmp/$name-report.txt" ||
		{ cat "$tmp/$name-report.txt"; fail "$name: report names no XRC QP"; }
	"$RBTRACE" report --format=json -o "$tmp/$name-report.json" "$@" || fail "$name: report --format=json"
	for t in "$@"; do "$RBTRACE" dump --json "$t"; done >"$tmp/$name-report.dump"
	python3 - "$tmp/$name-report.json" "$tmp/$name-report.dump" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["counts"]
recvs = sum(1 for l in open(sys.argv[2]) for e in [json.loads(l)]
            if e.get("type") == "poll_cq" for w in e.get("wcs", []) if w["opcode"] & 128)
assert recvs > 0 and c["recvs_completed"] == recvs, (c, recvs)
assert c["unmatched_completions"] == 0, c
PY
}

echo "== rbtrace report on the XRC traces"
report pp "$cli" "$srv"

echo "== both ends in one process"
timeout 120 "$RBTRACE" replay --softnic --json -o "$tmp/one.rbt" "$cli" "$srv" >"$tmp/one.json" ||
	{ cat "$tmp/one.json"; fail "one-process replay"; }
check "$tmp/one.json" "$cli" "$srv"
srqmap "$srv" "$cli" "$tmp/one.1.rbt" "$tmp/one.0.rbt"

echo "== two replayer processes over TCP"
replay2 two "$srv" -- "$cli"
srqmap "$srv" "$cli" "$tmp/two-l.rep.rbt" "$tmp/two-c.rep.rbt"
"$RBTRACE" diff "$srv" "$tmp/two-l.rep.rbt" >/dev/null || fail "diff of the server's replay"
"$RBTRACE" diff "$cli" "$tmp/two-c.rep.rbt" >/dev/null || fail "diff of the client's replay"

echo "== completion channels (-e), both ends in one process"
record ev 1 20 -e
timeout 120 "$RBTRACE" replay --softnic --json "$tmp/ev-cli1.rbt" "$tmp/ev-srv.rbt" >"$tmp/ev.json" ||
	{ cat "$tmp/ev.json"; fail "-e in one process"; }
check "$tmp/ev.json" "$tmp/ev-cli1.rbt" "$tmp/ev-srv.rbt"

echo "== two clients sharing the server's XRC domain (-c 2)"
record c2 2 10
timeout 120 "$RBTRACE" replay --softnic --json "$tmp/c2-cli1.rbt" "$tmp/c2-cli2.rbt" "$tmp/c2-srv.rbt" \
	>"$tmp/c2.json" || { cat "$tmp/c2.json"; fail "-c 2 in one process"; }
check "$tmp/c2.json" "$tmp/c2-cli1.rbt" "$tmp/c2-cli2.rbt" "$tmp/c2-srv.rbt"
grep -q '"other_process":true' "$tmp/c2.json" || fail "-c 2: no receive through another trace's TGT QP"
report c2 "$tmp/c2-cli1.rbt" "$tmp/c2-cli2.rbt" "$tmp/c2-srv.rbt"
report c2cli2 "$tmp/c2-cli2.rbt"
# the server and one client in one replayer, the other client in the other
replay2 c2two "$tmp/c2-srv.rbt" "$tmp/c2-cli1.rbt" -- "$tmp/c2-cli2.rbt"

echo "== one end against the responder: refused, naming the QP and its type"
p=$(free_port)
timeout 30 "$RBTRACE" replay --softnic --responder --listen "$p" >"$tmp/resp.log" 2>&1 &
pids+=($!)
if timeout 30 "$RBTRACE" replay --softnic --connect "127.0.0.1:$p" "$cli" >"$tmp/refuse.log" 2>&1; then
	fail "an XRC trace against the responder was not refused"
fi
grep -Eq "QP [0-9]+ is of type XRC_(SEND|RECV); the responder stands in for RC/UC peers only" \
	"$tmp/refuse.log" || { cat "$tmp/refuse.log"; fail "refusal message"; }

echo "== refused before any resource, with one line naming the QP (or SRQ) and type"
for c in "raw:QP 77 is of type RAW_PACKET, which the replayer cannot rebuild" \
	"nodom:QP 78 \(XRC_RECV\) names an XRC domain the trace never opened" \
	"tm:SRQ 0 is of type 2 \(tag matching\?\), which the replayer cannot rebuild"; do
	what=${c%%:*} msg=${c#*:}
	"$REFUSE" "$what" "$tmp/refuse-$what.rbt" || fail "writing the $what trace"
	if "$RBTRACE" replay --softnic "$tmp/refuse-$what.rbt" >"$tmp/refuse-$what.log" 2>&1; then
		fail "$what: not refused"
	fi
	# (the line saying which softnic mode runs is not the refusal)
	grep -v "^rbtrace replay: softnic" "$tmp/refuse-$what.log" >"$tmp/refuse-$what.err"
	[ "$(wc -l <"$tmp/refuse-$what.err")" -eq 1 ] && grep -Eq "$msg" "$tmp/refuse-$what.err" ||
		{ cat "$tmp/refuse-$what.log"; fail "$what: refusal message"; }
done
ls "$TMPDIR"/rbtrace-xrcd-* >/dev/null 2>&1 && fail "XRC domain files left behind"
echo "PASS"
