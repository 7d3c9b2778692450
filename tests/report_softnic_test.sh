#!/usr/bin/env bash
# report_softnic_test.sh - `rbtrace report` on real programs recorded over softnic:
# - ground truth: with softnic's latency model (SOFTNIC_LATENCY_NS) and a program that
#   waits a known time after each post before it polls, the NIC and poll phase medians
#   are within 5 % (or 2 us) of the truth with NIC timestamps, and the bounds contain
#   the truth without them;
# - each diagnosis, provoked by tests/progs/report_waiter.c, is named;
# - healthy runs (ibv_rc_pingpong, ib_write_bw, both ends recorded) have no warning or
#   error;
# - a service that hangs the way rdma_bench's herd did (tests/progs/stall_prog.c: its
#   server stops answering, both clients poll at 100 % empty for seconds, their
#   requests never complete) is named a stall, with the peer's view; a client that
#   stops polling with its request outstanding too; the healthy runs carry none;
# - ibv_rc_pingpong -t (completion timestamps the program asked for): every WR is
#   attributed from NIC timestamps through the recorded NIC clock samples, with the
#   fit's residual stated.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
WAITER=$root/tests/report_waiter
STALL=$root/tests/stall_prog
CHECK=$root/tests/report_check.py
use_softnic
test_tmp report_softnic

echo "== ground truth: NIC 20 us (latency model), poll 60 us after each post"
SOFTNIC_LATENCY_NS=20000 RBTRACE_NIC_TS=1 run "$tmp/gt.rbt" "$WAITER" --iters 300 --mode wait --wait-us 60 >/dev/null
"$RBTRACE" report --format=json -o "$tmp/gt.json" "$tmp/gt.rbt"
# the NIC phase runs from the post's return; the model from inside the post call
python3 "$CHECK" json "$tmp/gt.json" serious=0 near:0:nic=20000 near:0:poll=40000

echo "== ground truth without NIC timestamps: the bound contains the truth"
SOFTNIC_LATENCY_NS=20000 run "$tmp/gtb.rbt" "$WAITER" --iters 300 --mode spin >/dev/null
"$RBTRACE" report --format=json -o "$tmp/gtb.json" "$tmp/gtb.rbt"
python3 "$CHECK" json "$tmp/gtb.json" serious=0 le:0:nic_lo=20000 ge:0:nic_hi=19000 le:0:nic_hi=60000
python3 - "$tmp/gtb.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert "nic" not in d["traces"][0]["phases"], "a NIC point without NIC timestamps"
assert d["counts"]["wrs_nic_exact"] == 0 and d["counts"]["wrs_bounded"] == 300, d["counts"]
PY

echo "== each diagnosis, provoked"
for p in rnr:rnr_retry_exceeded latercv:rnr_late_receives cqsmall:cq_too_small notrts:post_not_rts \
	mrdereg:mr_dereg_before_qp badrkey:qp_error noinline:not_inlined \
	unaligned:unaligned_buffer mrreg:mr_on_datapath allsig:all_signaled \
	mtu:mtu_mismatch psn:psn_mismatch; do
	prob=${p%%:*} code=${p##*:}
	iters=20
	[ "$prob" = noinline ] && iters=150
	[ "$prob" = allsig ] && iters=600
	run "$tmp/$prob.rbt" "$WAITER" --iters $iters --mode spin --problem "$prob" >/dev/null
	"$RBTRACE" report --format=json -o "$tmp/$prob.json" "$tmp/$prob.rbt"
	python3 "$CHECK" json "$tmp/$prob.json" "finding=$code"
done
# the evidence names what proves it
"$RBTRACE" report "$tmp/rnr.rbt" | grep -q "rnr_retry=0" || fail "rnr evidence"
"$RBTRACE" report "$tmp/rnr.rbt" | grep -q "the peer had 0 receives posted" || fail "rnr peer evidence"
"$RBTRACE" report "$tmp/badrkey.rbt" | grep -q "REM_ACCESS_ERR" || fail "badrkey status"
"$RBTRACE" report "$tmp/notrts.rbt" | grep -q "in state INIT returned" || fail "notrts evidence"
"$RBTRACE" report "$tmp/mtu.rbt" | grep -q "path_mtu=3.*path_mtu=5" || fail "mtu evidence"

echo "== a stall: the server stops answering after 50 requests, both clients spin"
stalled st 3
"$RBTRACE" report --format=json -o "$tmp/st.json" "$tmp/st_c1.rbt" "$tmp/st_c2.rbt" "$tmp/st_s.rbt"
python3 "$CHECK" json "$tmp/st.json" finding=wr_stalled
python3 - "$tmp/st.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
st = [f for f in d["findings"] if f["code"] == "wr_stalled"]
# one per client, an error (still outstanding), on the client's QP, with the peer's view
assert sorted(f["trace"] for f in st) == [0, 1], st
for f in st:
    assert f["severity"] == "error", f
    qps = [q["qp_num"] for q in d["traces"][f["trace"]]["qps"]]
    assert f["qp_num"] in qps, (f, qps)
    ev = "\n".join(f["evidence"])
    assert "polls of its send CQ came back empty" in ev, ev
    assert "0 receives posted at the end" in ev, ev
    assert "rnr_retry=7" in ev, ev
assert not [f for f in d["findings"] if f["trace"] == 2 and f["code"] == "wr_stalled"]
print("  wr_stalled on both clients: " + st[0]["title"])
PY
# alone, a client's trace still shows it (without the peer's view)
"$RBTRACE" report "$tmp/st_c1.rbt" | grep -q "wr_stalled.*polled empty" || fail "stall alone"

echo "== the client stops polling with its request outstanding"
port=$(free_port)
run "$tmp/sp_s.rbt" "$STALL" server $port 1 20 >"$tmp/sp_s.log" 2>&1 &
srv=$!
run "$tmp/sp_c.rbt" "$STALL" client localhost $port 2 stop >"$tmp/sp_c.log" 2>&1 ||
	{ cat "$tmp/sp_c.log"; fail "stall_prog client (stop)"; }
wait $srv || { cat "$tmp/sp_s.log"; fail "stall_prog server"; }
"$RBTRACE" report --format=json -o "$tmp/sp.json" "$tmp/sp_c.rbt" "$tmp/sp_s.rbt"
python3 "$CHECK" json "$tmp/sp.json" finding=polling_stopped
python3 - "$tmp/sp.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
codes = [f["code"] for f in d["findings"] if f["trace"] == 0]
assert "polling_stopped" in codes and "wr_stalled" not in codes, codes
PY

echo "== healthy: ibv_rc_pingpong, both ends"
pair pp ibv_rc_pingpong -n 500
"$RBTRACE" report --format=json -o "$tmp/pp.json" "$tmp/pp_c.rbt" "$tmp/pp_s.rbt"
python3 "$CHECK" json "$tmp/pp.json" serious=0
python3 - "$tmp/pp.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
q = d["traces"][0]["qps"]
assert any(x["peer"] is not None for x in q), "ends not paired"
rt = [x["roundtrips"] for x in q if x["roundtrips"]]
assert rt and rt[0]["count"] >= 490, rt
assert d["counts"]["unmatched_completions"] == 0, d["counts"]
# every send completed; what is left are receives the program kept posted
c = d["counts"]
assert c["outstanding_at_end"] == c["recvs_outstanding_at_end"] > 0, c
print("  paired, %d round trips, p50 %.1f us" % (rt[0]["count"], rt[0]["rtt"]["p50"] / 1e3))
PY

"$RBTRACE" report --format=perfetto-json -o "$tmp/pp_trace.json" "$tmp/pp_c.rbt" "$tmp/pp_s.rbt"
python3 "$CHECK" perfetto "$tmp/pp_trace.json"

echo "== ibv_rc_pingpong -t (the program's own completion timestamps), both ends"
# The recorder samples the NIC clock of a context with a timestamped CQ (at the CQ's
# creation, periodically, at close): the report maps every completion from its NIC
# timestamp, states the fit's residual, and never falls back to bounds.
pair ppt ibv_rc_pingpong -t -n 1000
"$RBTRACE" report --format=json -o "$tmp/ppt.json" "$tmp/ppt_c.rbt" "$tmp/ppt_s.rbt"
python3 "$CHECK" json "$tmp/ppt.json" serious=0
python3 - "$tmp/ppt.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c = d["counts"]
assert c["wrs_completed"] == 2000 and c["wrs_nic_exact"] == 2000 and c["wrs_bounded"] == 0, c
# a wrong clock model would put NIC times outside [post, poll] (clamped and counted)
assert c["nic_outside_bound"] <= 40, c
total = 0
for t in d["traces"]:
    k = t["nic_clock"]
    assert k is not None, "no NIC clock model for " + t["name"]
    # creation and close at least; the server also lives long enough for the
    # writer thread's periodic samples
    assert k["samples"] >= 2, (t["name"], k)
    assert 0.99 < k["ns_per_nic_tick"] < 1.01, k  # softnic's NIC clock runs in ns
    assert 0 <= k["max_residual_ns"] < 20000, k
    total += k["samples"]
    ph = t["phases"]
    assert "nic" in ph and "poll" in ph, sorted(ph)
    assert "nic_lo" not in ph and "poll_hi" not in ph, sorted(ph)
    print("  %s: %d NIC clock samples, max residual %.0f ns, NIC p50 %.0f ns, poll p50 %.0f ns"
          % (t["name"].rsplit("/", 1)[-1], k["samples"], k["max_residual_ns"],
             ph["nic"]["p50"], ph["poll"]["p50"]))
assert total >= 5, total
PY

echo "== the same with a NIC clock 100 ppm off its nominal rate"
# (real NICs' crystals are tens of ppm off): NIC times between two samples are
# interpolated, not extrapolated at the nominal rate - which put hundreds of the
# short client's NIC times past their polls
SOFTNIC_CLOCK_PPM=100 pair pps ibv_rc_pingpong -t -n 1000
"$RBTRACE" report --format=json -o "$tmp/pps.json" "$tmp/pps_c.rbt" "$tmp/pps_s.rbt"
python3 - "$tmp/pps.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c = d["counts"]
assert c["wrs_nic_exact"] == 2000 and c["wrs_bounded"] == 0, c
assert c["nic_outside_bound"] <= 40, c
for t in d["traces"]:
    k = t["nic_clock"]
    assert 0.9998 < k["ns_per_nic_tick"] < 0.99995, k  # the 100 ppm, found
print("  %d of 2000 NIC times outside [post, poll]" % c["nic_outside_bound"])
PY

echo "== healthy: ib_write_bw, both ends"
pair bw ib_write_bw -n 2000
"$RBTRACE" report --format=json -o "$tmp/bw.json" "$tmp/bw_c.rbt" "$tmp/bw_s.rbt"
python3 "$CHECK" json "$tmp/bw.json" serious=0
echo "report_softnic_test: all good"
