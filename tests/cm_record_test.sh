#!/bin/bash
# cm_record_test.sh - librdmacm programs recorded with `rbtrace record --softnic`
# (rping, also -q, ucmatose -c 8, udaddy, rdma_server/rdma_client,
# rdma_xserver/rdma_xclient, cmtime, mckey, and perftest -R: ib_send_lat,
# ib_write_lat, ib_read_lat, ib_send_bw, ib_write_bw, ib_read_bw,
# ib_atomic_bw, RC and UD where perftest offers it, -q 4), both ends, over softnic's librdmacm.so.1, in softnic's two
# modes (drop-in libibverbs, provider):
# - the trace holds every CM event both ends saw: softnic's librdmacm writes
#   one line per event it hands out to SOFTNIC_CM_EVENTS (a count apart from
#   the recorder), which the trace must match for every program; besides,
#   rping -d prints each event it handles, and for some others the event
#   sequence librdmacm gives those programs is written below;
# - the report has the connection section: every connection ESTABLISHED, the
#   active and passive ids paired across the two traces, the timings present;
# - the replay of both ends matches every completion and says the connection
#   was made by the CM.
# Then tests/cm_failures provokes each CM failure under the recorder and the
# report must name it (the finding's code).
set -u
. "$(dirname "$0")/lib.sh"
R=$RBTRACE
F=$root/tests/cm_failures
need_files "$R" "$F" "$RBTRACE_SOFTNIC_DIR/librdmacm.so.1" "$RBTRACE_LIB"
need_progs rping ucmatose udaddy mckey cmtime rdma_server rdma_client rdma_xserver rdma_xclient \
	ib_send_lat ib_write_lat ib_read_lat ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw
# CM_RECORD_KEEP=1: the traces and outputs are kept (the directory is printed)
KEEP=${CM_RECORD_KEEP:-}
test_tmp cm_record shm
port=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000)) # below the ephemeral range
fails=0
# CM_RECORD_ONLY=REGEX: only the programs whose names match (no failure cases);
# CM_RECORD_REPLAYS=N: each recording replayed N times (see check_pair)
only=${CM_RECORD_ONLY:-}
fail() {
	echo "FAIL $*"
	fails=$((fails + 1))
}
wait_listen() { cm_wait_listen "$1" 200; }

# "N TYPE" lines, sorted: the CM events rdma_get_cm_event returned in a trace
# (those librdmacm took inside its own calls too: they were delivered)
trace_events() {
	"$R" dump "$1" | awk '$3 == "cm_event" && / ret=0 / {
		for (i = 4; i <= NF; i++) if ($i ~ /^event=/) { sub(/^event=/, "", $i); n[$i]++ } }
		END { for (k in n) print n[k], k }' | sort -k2
}

# expected "TYPE=N,TYPE=N" -> the same "N TYPE" lines
expect_lines() {
	tr ',' '\n' <<<"$1" | awk -F= 'NF == 2 { print $2, $1 }' | sort -k2
}

# the same "N TYPE" lines from softnic's own log of the events it handed out
log_events() {
	[ -r "$1" ] || return 0
	awk '{ sub(/^RDMA_CM_EVENT_/, "", $1); n[$1]++ } END { for (k in n) print n[k], k }' "$1" |
		sort -k2
}

# check_side NAME SIDE WANT: the trace's events against softnic's log and
# WANT (written "TYPE=N,...", "-" from rping -d's output, "" nothing more)
check_side() {
	local name=$1 side=$2 want=$3 got exp
	got=$(trace_events "$tmp/$name.$side.rbt")
	exp=$(log_events "$tmp/$name.$side.cmev")
	[ -n "$exp" ] || fail "$name $side: softnic logged no CM event"
	[ "$got" = "$exp" ] ||
		fail "$name $side: trace events [$(echo $got)], softnic handed out [$(echo $exp)]"
	if [ "$want" = - ]; then
		# rping -d: "cma_event type RDMA_CM_EVENT_X cma_id ..." per event
		want=$(grep -o 'cma_event type RDMA_CM_EVENT_[A-Z_]*' "$tmp/$name.$side.out" |
			sed 's/.*RDMA_CM_EVENT_//' | sort | uniq -c | awk '{print $2 "=" $1}' | paste -sd,)
		[ -n "$want" ] || { fail "$name $side: rping printed no event"; return; }
	fi
	[ -n "$want" ] || return 0
	exp=$(expect_lines "$want")
	[ "$got" = "$exp" ] || fail "$name $side: trace events [$(echo $got)], expected [$(echo $exp)]"
}

# the report's connection section and the replay of both ends (every
# completion matched; ncomp=0: the programs post nothing)
check_pair() {
	local name=$1
	"$R" report "$tmp/$name.cli.rbt" "$tmp/$name.srv.rbt" >"$tmp/$name.txt" 2>&1 ||
		fail "$name: report failed"
	grep -q '^== connections (rdma_cm): ' "$tmp/$name.txt" || fail "$name: no connection section"
	"$R" report --format=json -o "$tmp/$name.json" "$tmp/$name.cli.rbt" "$tmp/$name.srv.rbt" ||
		fail "$name: json report failed"
	python3 - "$tmp/$name.json" "${mcast:-}" "$name" <<'PY' || fail "$name: connection section"
import json, sys
d = json.load(open(sys.argv[1]))
mcast = sys.argv[2] == "1"
conns = d["connections"]
act = [c for c in conns if c["role"] == "active"]
pas = [c for c in conns if c["role"] == "passive"]
assert act, "no active id: %s" % [c["role"] for c in conns]
assert mcast or pas, "no passive id: %s" % [c["role"] for c in conns]
for c in act + pas:
    assert c["error"] is None, c
    assert mcast or c["peer"] is not None, "id %s not paired" % c["id"]
    assert c["events"] >= 1 and c["unacked"] == 0, c
for c in act:
    assert mcast or c["established_at_ns"] is not None, "never ESTABLISHED: %s" % c
for c in act:
    assert c["addr_resolve_ns"] is not None and c["addr_resolve_ns"] >= 0, c
    assert mcast or c["route_resolve_ns"] is not None, c
    if c["qp_type"] == "RC":
        assert c["connect_ns"] is not None and c["connect_ns"] > 0, c
for c in pas:
    if c["accept_delay_ns"] is None:
        raise AssertionError("no CONNECT_REQUEST -> accept: %s" % c)
bad = [f["code"] for f in d["findings"] if f["code"].startswith("cm_")]
assert not bad, "CM findings on a healthy run: %s" % bad
# rping runs its CM and its data path on two threads: the trace's streams
# merged by time, no post before the RTS the CM thread made, nothing unmatched
bad = [f["code"] for f in d["findings"] if f["code"] in ("post_not_rts", "qp_error")]
assert not bad, "false QP findings: %s" % bad
# perftest -R registers its buffers after the CM handshake's posts, then
# creates the QPs that use them: setup, not MRs on the data path
if sys.argv[3].split(".", 1)[-1].startswith("ib_"):
    bad = [f["evidence"] for f in d["findings"] if f["code"] == "mr_on_datapath"]
    assert not bad, "mr_on_datapath on perftest's setup: %s" % bad
assert d["counts"]["unmatched_completions"] == 0, d["counts"]
PY
	# every replay must match, the first time (no retry); CM_RECORD_REPLAYS=N
	# replays each recording N times, every one checked
	local rrc m k
	for ((k = 1; k <= ${CM_RECORD_REPLAYS:-1}; k++)); do
		rrc=0
		timeout 120 "$R" replay --softnic --timing=asap "$tmp/$name.cli.rbt" "$tmp/$name.srv.rbt" \
			>"$tmp/$name.replay" 2>&1 || rrc=$?
		[ $rrc = 0 ] || fail "$name: replay $k failed ($(grep -m3 -e '^completions matched:' -e 'step [0-9]*:' "$tmp/$name.replay" | paste -sd';'))"
		m=$(grep '^completions matched:' "$tmp/$name.replay")
		[[ $m =~ ^completions\ matched:\ ([0-9]+)\ of\ ([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] &&
			{ [ "${BASH_REMATCH[2]}" -gt 0 ] || [ "${ncomp:-}" = 0 ]; } || fail "$name: replay $k: ${m:-no match line}"
		[ "$(grep -c 'connected by rdma_cm' "$tmp/$name.replay")" = 2 ] ||
			fail "$name: the replay does not say both ends were connected by the CM"
	done
	echo "ok   $name: $(grep -c '^  trace' "$tmp/$name.txt") ids, $m${CM_RECORD_REPLAYS:+ (x $CM_RECORD_REPLAYS replays)}"
}

# rec NAME "SERVER" "CLIENT" SRV_EVENTS CLI_EVENTS (see check_side); killsrv=1:
# the server runs until killed (its trace ends by the signal)
rec() {
	local name=$1 scmd=$2 ccmd=$3 sev=$4 cev=$5 i spid crc src=0
	[ -z "${only:-}" ] || [[ $name =~ $only ]] || return 0
	port=$((port + 1))
	scmd=${scmd//@P/$port}
	ccmd=${ccmd//@P/$port}
	name=$mode.$name
	SOFTNIC_CM_EVENTS=$tmp/$name.srv.cmev timeout -k 10 60 "$R" record --softnic=$mode \
		-o "$tmp/$name.srv.rbt" -- $scmd >"$tmp/$name.srv.out" 2>&1 &
	spid=$!
	wait_listen "${lport:-$port}" || fail "$name: the server never listened"
	SOFTNIC_CM_EVENTS=$tmp/$name.cli.cmev timeout -k 10 60 "$R" record --softnic=$mode \
		-o "$tmp/$name.cli.rbt" -- $ccmd >"$tmp/$name.cli.out" 2>&1
	crc=$?
	if [ "${killsrv:-}" ]; then
		# the server's last events (the DISCONNECTEDs) come after the
		# client's exit: wait until softnic logged as many as the client's
		for i in $(seq 1 100); do
			[ "$(grep -c DISCONNECTED "$tmp/$name.srv.cmev" 2>/dev/null)" -ge \
				"$(grep -c ESTABLISHED "$tmp/$name.cli.cmev" 2>/dev/null)" ] && break
			sleep 0.05
		done
		kill -TERM $spid 2>/dev/null
		wait $spid
	else
		wait $spid
		src=$?
	fi
	if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
		fail "$name: client rc=$crc server rc=$src"
		tail -n 5 "$tmp/$name.cli.out" "$tmp/$name.srv.out"
		return
	fi
	[ -z "${cexpect:-}" ] || grep -Eq -- "$cexpect" "$tmp/$name.cli.out" ||
		fail "$name: the client did not print /$cexpect/: $(tail -3 "$tmp/$name.cli.out")"
	check_side "$name" srv "$sev"
	check_side "$name" cli "$cev"
	check_pair "$name"
}

# mckey: a receiver joins a group (no listening port: wait until the group
# exists in the fabric), a sender joins and sends it 10 datagrams
rec_mckey() {
	local name=$mode.mckey group=$1 i rpid rrc src
	[ -z "${only:-}" ] || [[ mckey =~ $only ]] || return 0
	rm -f "$SOFTNIC_FABRIC"/mc-*
	SOFTNIC_CM_EVENTS=$tmp/$name.srv.cmev timeout -k 10 60 "$R" record --softnic=$mode \
		-o "$tmp/$name.srv.rbt" -- mckey -m "$group" -b 127.0.0.1 >"$tmp/$name.srv.out" 2>&1 &
	rpid=$!
	for i in $(seq 1 200); do
		ls "$SOFTNIC_FABRIC"/mc-* >/dev/null 2>&1 && grep -q "^receiving" "$tmp/$name.srv.out" && break
		sleep 0.05
	done
	SOFTNIC_CM_EVENTS=$tmp/$name.cli.cmev timeout -k 10 60 "$R" record --softnic=$mode \
		-o "$tmp/$name.cli.rbt" -- mckey -m "$group" -s -b 127.0.0.1 >"$tmp/$name.cli.out" 2>&1
	src=$?
	wait $rpid
	rrc=$?
	if [ $src -ne 0 ] || [ $rrc -ne 0 ] || ! grep -q "^data transfers complete" "$tmp/$name.srv.out"; then
		fail "$name: sender rc=$src receiver rc=$rrc"
		tail -n 5 "$tmp/$name.cli.out" "$tmp/$name.srv.out"
		return
	fi
	check_side "$name" srv ADDR_RESOLVED=1,MULTICAST_JOIN=1
	check_side "$name" cli ADDR_RESOLVED=1,MULTICAST_JOIN=1
	# the replay attaches each QP to the group its MULTICAST_JOIN named
	mcast=1 check_pair "$name"
	grep -q ': 1 multicast group joins (rdma_join_multicast): 1 attached' "$tmp/$name.replay" ||
		fail "$name: the replay does not say the receiver's QP joined its group"

}

# both of softnic's modes: its drop-in libibverbs, and a provider under the
# system's libibverbs (softnic's librdmacm.so.1 in both)
modes=dropin
[ -e "$RBTRACE_SOFTNIC_DIR/cm/librdmacm.so.1" ] && [ -d "$RBTRACE_SOFTNIC_DIR/provider" ] &&
	[ "${RBTRACE_SOFTNIC_MODE:-}" != dropin ] && modes="dropin provider"
lat='^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+'
bw='^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+'
# perf NAME OUTPUT_REGEX PROGRAM ARGS...: perftest -R, both ends; the events
# checked against softnic's log
perf() {
	local name=$1 exp=$2
	shift 2
	cexpect=$exp rec "$name" "$* -R -p @P" "$* -R -p @P 127.0.0.1" "" ""
}

for mode in $modes; do
rec rping "rping -s -a 127.0.0.1 -p @P -C 10 -d" "rping -c -a 127.0.0.1 -p @P -C 10 -d" - -
rec rping_q "rping -s -q -a 127.0.0.1 -p @P -C 10 -d" "rping -c -q -a 127.0.0.1 -p @P -C 10 -d" - -
rec ucmatose "ucmatose -p @P -c 8" "ucmatose -s 127.0.0.1 -p @P -c 8" \
	CONNECT_REQUEST=8,ESTABLISHED=8,DISCONNECTED=8 \
	ADDR_RESOLVED=8,ROUTE_RESOLVED=8,ESTABLISHED=8,DISCONNECTED=8
lport=7174 rec udaddy "udaddy" "udaddy -s 127.0.0.1" CONNECT_REQUEST=1 \
	ADDR_RESOLVED=1,ROUTE_RESOLVED=1,ESTABLISHED=1
# the endpoint API's synchronous ids: librdmacm takes the events in its calls
rec rdma_server "rdma_server -p @P" "rdma_client -s 127.0.0.1 -p @P" \
	CONNECT_REQUEST=1,ESTABLISHED=1,DISCONNECTED=1 \
	ADDR_RESOLVED=1,ROUTE_RESOLVED=1,ESTABLISHED=1,DISCONNECTED=1
cexpect='^rdma_xclient: end 0' rec rdma_xserver "rdma_xserver -p @P" "rdma_xclient -s 127.0.0.1 -p @P" \
	CONNECT_REQUEST=1,ESTABLISHED=1,DISCONNECTED=1 \
	ADDR_RESOLVED=1,ROUTE_RESOLVED=1,ESTABLISHED=1,DISCONNECTED=1
cexpect='^rdma_xclient: end 0' rec rdma_xserver_rc "rdma_xserver -p @P -c r" \
	"rdma_xclient -s 127.0.0.1 -p @P -c r" \
	CONNECT_REQUEST=1,ESTABLISHED=1,DISCONNECTED=1 \
	ADDR_RESOLVED=1,ROUTE_RESOLVED=1,ESTABLISHED=1,DISCONNECTED=1
# cmtime -c 20: 20 connections made and torn down, no data; its server runs
# until killed
killsrv=1 ncomp=0 cexpect='^connect +: +[0-9.]+ +[0-9.]+' rec cmtime "cmtime -p @P" \
	"cmtime -s 127.0.0.1 -p @P -c 20" \
	CONNECT_REQUEST=20,ESTABLISHED=20,DISCONNECTED=20 \
	ADDR_RESOLVED=20,ROUTE_RESOLVED=20,ESTABLISHED=20,DISCONNECTED=20
rec_mckey 239.1.1.1
# perftest -R: two connections (the test's and its control channel); the server
# never reads its events after the requests
rec ib_send_lat "ib_send_lat -n 1000 -R -p @P" "ib_send_lat -n 1000 -R -p @P 127.0.0.1" \
	CONNECT_REQUEST=2 ADDR_RESOLVED=2,ROUTE_RESOLVED=2,ESTABLISHED=2,DISCONNECTED=1
rec ib_write_bw "ib_write_bw -n 1000 -R -p @P" "ib_write_bw -n 1000 -R -p @P 127.0.0.1" \
	CONNECT_REQUEST=2 ADDR_RESOLVED=2,ROUTE_RESOLVED=2,ESTABLISHED=2,DISCONNECTED=1
perf ib_send_lat_ud "$lat" ib_send_lat -c UD -n 1000
perf ib_write_lat "$lat" ib_write_lat -n 1000
perf ib_read_lat "$lat" ib_read_lat -n 1000
# four RC QPs on one CQ, each kept as full as its send queue allows: the
# replay's posts wait for the completions that freed their slots
perf ib_send_bw_q4 "$bw" ib_send_bw -n 1000 -q 4
perf ib_send_bw_ud_q4 "$bw" ib_send_bw -c UD -n 1000 -q 4
perf ib_write_bw_q4 "$bw" ib_write_bw -n 1000 -q 4
perf ib_read_bw_q4 "$bw" ib_read_bw -n 1000 -q 4
perf ib_atomic_bw_q4 "$bw" ib_atomic_bw -n 1000 -q 4
done

[ -z "${only:-}" ] && failures=1
# each failure, recorded: the program's own check passes and the report names it
[ "${failures:-}" ] && for p in noone:cm_no_listener reject:cm_rejected silent:cm_timeout addr:cm_addr_error \
	qperr:cm_connect_error unacked:cm_event_not_acked; do
	c=${p%%:*} code=${p##*:}
	mkdir -p "$tmp/f_$c"
	SOFTNIC_CM_TIMEOUT_MS=500 timeout -k 10 60 "$R" record --softnic -o "$tmp/f_$c/" -- "$F" "$c" \
		>"$tmp/f_$c.out" 2>&1
	grep -q "^ok *$c:" "$tmp/f_$c.out" || { fail "cm_failures $c: $(grep "$c" "$tmp/f_$c.out")"; continue; }
	# the passive side's process may leave an empty trace (it is killed)
	traces=$(find "$tmp/f_$c" -name '*.rbt' -size +0 | sort)
	"$R" report --format=json -o "$tmp/f_$c.json" $traces 2>/dev/null ||
		{ fail "$c: report failed"; continue; }
	python3 - "$tmp/f_$c.json" "$code" "$c" <<'PY' || fail "$c: the report does not name $code"
import json, sys
d = json.load(open(sys.argv[1]))
code, case = sys.argv[2], sys.argv[3]
f = [x for x in d["findings"] if x["code"] == code]
assert f, [x["code"] for x in d["findings"]]
if case == "reject":
    assert "reason 28" in f[0]["title"] and "148 bytes" in f[0]["title"], f[0]["title"]
    e = [c["error"] for c in d["connections"] if c["error"]]
    assert e and e[0]["event"] == "REJECTED" and e[0]["status"] == 28, e
if case == "noone":
    assert "nobody listened" in f[0]["title"], f[0]["title"]
if case == "addr":
    assert "-19" in f[0]["title"], f[0]["title"]
PY
	echo "ok   $c: $code"
done

if [ "${failures:-}" ]; then
# an event never acked: rdma_destroy_id hangs; the program is killed and its
# trace (ended by the signal) must say the destroy waits forever
timeout -s TERM 5 "$R" record --softnic -o "$tmp/hang.rbt" -- "$root/tests/cm_hang" >"$tmp/hang.out" 2>&1
grep -q '^got RDMA_CM_EVENT_ADDR_RESOLVED, destroying' "$tmp/hang.out" || fail "cm_hang: $(cat "$tmp/hang.out")"
grep -q '^destroy returned' "$tmp/hang.out" && fail "cm_hang: the destroy returned without the ack"
"$R" report --format=json -o "$tmp/hang.json" "$tmp/hang.rbt" 2>/dev/null || fail "hang: report failed"
python3 - "$tmp/hang.json" <<'PY' && echo "ok   hang: cm_event_not_acked (error)" || fail "hang: the report does not say the destroy hangs"
import json, sys
d = json.load(open(sys.argv[1]))
f = [x for x in d["findings"] if x["code"] == "cm_event_not_acked"]
assert f and f[0]["severity"] == "error" and "forever" in f[0]["title"], d["findings"]
PY

fi

[ $fails -eq 0 ] && echo "all CM recordings passed" || echo "$fails failed"
exit $((fails > 0))
