#!/usr/bin/env bash
# replay_deps_test.sh - causality through memory (replay/replay_deps.c): the
# HERD pattern of tests/progs/replay_herd.c (two client processes RDMA-WRITE
# requests over UC into a server's MR; the server finds them by polling its
# memory and answers each with a UD SEND) recorded over softnic with
# `rbtrace record --softnic`, then replayed in recorded, asap and deps timing,
# in one replayer and in three replayer processes (--listen --peers 2 /
# --connect). Asserts on the JSON report: every recorded completion matched,
# no divergence, and the server's memory dependencies inferred (> 0) and all
# kept (none timed out). Then the same replay with the waits switched off
# (RBTRACE_REPLAY_NO_DEPS=1) must diverge: the server's answers run ahead of
# the requests, are dropped, and the clients miss completions - so the test
# fails when the dependencies are not enforced. Last, tests/progs/shm_prog.c's
# HERD with a master process whose memory worker processes poll, in one
# replayer. Each replayed in memory and streamed in small windows
# (RBTRACE_REPLAY_WINDOW), the dependencies then inferred window by window.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
HERD=$root/tests/replay_herd
SHM=$root/tests/shm_prog
NREQ=200
test_tmp replay_deps

echo "== record the HERD pattern: a server and two client processes"
mkdir -p "$tmp/meet"
timeout 60 "$RBTRACE" record --softnic -o "$tmp/srv.rbt" -- \
	"$HERD" server "$tmp/meet" 2 "$NREQ" >"$tmp/srv.log" 2>&1 &
srv=$!
pids+=("$srv")
cl=()
for c in 0 1; do
	timeout 60 "$RBTRACE" record --softnic -o "$tmp/c$c.rbt" -- \
		"$HERD" client "$tmp/meet" "$c" "$NREQ" >"$tmp/c$c.log" 2>&1 &
	cl+=($!)
	pids+=($!)
done
for p in "${cl[@]}"; do wait "$p" || { cat "$tmp"/*.log; fail "a client"; }; done
wait "$srv" || { cat "$tmp"/*.log; fail "the server"; }
grep -q "client 0: $NREQ of $NREQ answers correct" "$tmp/c0.log" || fail "client 0's answers"
grep -q "client 1: $NREQ of $NREQ answers correct" "$tmp/c1.log" || fail "client 1's answers"
for t in srv c0 c1; do "$RBTRACE" dump --json "$tmp/$t.rbt" >"$tmp/$t.dump"; done

# check JSON DEPS TRACE...: every recorded completion of TRACE... matched, no
# divergence; DEPS=yes: the server side's memory dependencies are inferred
# and all kept (as many as the server's answers: each follows a request).
check() {
	local json=$1 deps=$2
	shift 2
	local dumps=()
	for t in "$@"; do dumps+=("$tmp/$t.dump"); done
	python3 - "$json" "$deps" "$NREQ" "${dumps[@]}" <<'PY'
import json, sys
rep = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
deps, nreq = sys.argv[2], int(sys.argv[3])
wcs = [w for p in sys.argv[4:] for l in open(p) for e in [json.loads(l)]
       if e.get("type") == "poll_cq" for w in e.get("wcs", [])]
c = rep["completions"]
assert rep["divergences"] == [], rep["divergences"]
assert c["expected"] == len(wcs) > 0, (c, len(wcs))
assert c["matched"] == c["expected"], c
for s in rep["sides"]:
    d = s["memory_deps"]
    if s["trace"].endswith("srv.rbt") and deps == "yes":
        assert d["enforced"] and d["inferred"] == 2 * nreq, d
        assert d["kept"] == d["inferred"] and d["timed_out"] == 0, d
    elif not s["trace"].endswith("srv.rbt"):
        # the server only SENDs: nothing lands in a client's memory
        assert d["inferred"] == 0, (s["trace"], d)
PY
}

for timing in recorded asap deps; do
	echo "== one replayer, --timing=$timing"
	timeout 120 "$RBTRACE" replay --softnic --json --timing=$timing \
		"$tmp/srv.rbt" "$tmp/c0.rbt" "$tmp/c1.rbt" >"$tmp/one-$timing.json" 2>"$tmp/one-$timing.err" ||
		{ cat "$tmp/one-$timing.json" "$tmp/one-$timing.err"; fail "one replayer, $timing"; }
	check "$tmp/one-$timing.json" yes srv c0 c1
done

for timing in recorded asap deps; do
	echo "== three replayer processes, --timing=$timing"
	p=$(free_port)
	timeout 120 "$RBTRACE" replay --softnic --json --timing=$timing --listen "$p" --peers 2 \
		"$tmp/srv.rbt" >"$tmp/three-$timing-s.json" 2>"$tmp/three-$timing-s.err" &
	bg=$!
	pids+=("$bg")
	cp=()
	for c in 0 1; do
		timeout 120 "$RBTRACE" replay --softnic --json --timing=$timing \
			--connect "127.0.0.1:$p" "$tmp/c$c.rbt" \
			>"$tmp/three-$timing-c$c.json" 2>"$tmp/three-$timing-c$c.err" &
		cp+=($!)
		pids+=($!)
	done
	for c in 0 1; do
		wait "${cp[$c]}" || { cat "$tmp/three-$timing"-*; fail "three processes, $timing: client $c's replayer"; }
	done
	wait "$bg" || { cat "$tmp/three-$timing"-*; fail "three processes, $timing: the server's replayer"; }
	check "$tmp/three-$timing-s.json" yes srv
	check "$tmp/three-$timing-c0.json" yes c0
	check "$tmp/three-$timing-c1.json" yes c1
done

# windows JSON ERR MIN: every side streamed in MIN windows or more, and the
# replayer did not fall back to memory.
windows() {
	! grep -q "cannot be streamed" "$2" || { cat "$2"; fail "$1: not streamed"; }
	python3 - "$1" "$3" <<'PY'
import json, sys
rep = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
for s in rep["sides"]:
    assert s["windows"] >= int(sys.argv[2]), (s["trace"], s["windows"])
PY
}

# Streamed (replay_stream.c): windows of 150 steps, so the dependencies are
# inferred window by window with what the windows before left pending (the
# WRITE ordinals, the WRITEs not yet completed or not yet waited for); the
# same checks as in memory, exact counts included. Each timing twice: each
# window read in the pause before it, and read while the window before runs
# (RBTRACE_REPLAY_FEED_AHEAD; by default only with a CPU more than the lanes).
for run in recorded:0 asap:0 deps:0 recorded:1 asap:1 deps:1; do
	timing=${run%:*}
	echo "== streamed, windows of 150 steps, --timing=$timing, RBTRACE_REPLAY_FEED_AHEAD=${run#*:}"
	RBTRACE_REPLAY_FEED_AHEAD=${run#*:} RBTRACE_REPLAY_WINDOW=150 timeout 120 "$RBTRACE" replay --softnic --json --timing=$timing \
		"$tmp/srv.rbt" "$tmp/c0.rbt" "$tmp/c1.rbt" >"$tmp/win-$timing.json" 2>"$tmp/win-$timing.err" ||
		{ cat "$tmp/win-$timing.json" "$tmp/win-$timing.err"; fail "streamed, $timing"; }
	windows "$tmp/win-$timing.json" "$tmp/win-$timing.err" 5
	check "$tmp/win-$timing.json" yes srv c0 c1
done

for win in 16384 150; do
echo "== without the waits (RBTRACE_REPLAY_NO_DEPS=1) the server runs ahead (window $win)"
rc=0
RBTRACE_REPLAY_WINDOW=$win RBTRACE_REPLAY_NO_DEPS=1 timeout 120 "$RBTRACE" replay --softnic --json --timing=asap \
	--poll-timeout 1000 "$tmp/srv.rbt" "$tmp/c0.rbt" "$tmp/c1.rbt" \
	>"$tmp/nodeps.json" 2>"$tmp/nodeps.err" || rc=$?
[ "$rc" -ne 0 ] || { cat "$tmp/nodeps.json"; fail "a replay without the waits did not diverge"; }
python3 - "$tmp/nodeps.json" <<'PY'
import json, sys
rep = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert rep["divergences"], "no divergence without the waits"
srv = [s for s in rep["sides"] if s["trace"].endswith("srv.rbt")][0]["memory_deps"]
assert srv["inferred"] > 0 and not srv["enforced"] and srv["kept"] == 0, srv
c = rep["completions"]
assert c["matched"] < c["recorded"], c
PY
done

echo "== HERD with a master process: the workers poll memory the master registered"
# tests/progs/shm_prog.c: the master registers a SysV segment and posts
# nothing; worker processes shmat and poll it for the clients' WRITEs and
# answer by UD SEND. The waiting posts are the workers', the memory the master's.
key=$(( (RANDOM << 8 | RANDOM) % 1000000 + 1000000 ))
mkdir -p "$tmp/shm"
timeout 60 "$RBTRACE" record --softnic -o "$tmp/m.rbt" -- \
	"$SHM" master "$tmp/shm" "$key" 2 >"$tmp/m.log" 2>&1 &
mp=$!
pids+=("$mp")
for i in $(seq 1 400); do [ -e "$tmp/shm/master-0" ] && break; sleep 0.05; done
for w in 0 1; do
	timeout 60 "$RBTRACE" record --softnic -o "$tmp/w$w.rbt" -- \
		"$SHM" worker "$tmp/shm" "$key" "$w" 2 2 100 >"$tmp/w$w.log" 2>&1 &
	pids+=($!)
done
cl=()
for c in 0 1; do
	timeout 60 "$RBTRACE" record --softnic -o "$tmp/k$c.rbt" -- \
		"$SHM" client "$tmp/shm" "$c" 2 100 >"$tmp/k$c.log" 2>&1 &
	cl+=($!)
	pids+=($!)
done
for p in "${cl[@]}"; do wait "$p" || { cat "$tmp"/[mwk]*.log; fail "an shm_prog client"; }; done
touch "$tmp/shm/all-done"
wait "$mp" || { cat "$tmp"/[mwk]*.log; fail "the shm_prog master"; }
for t in m w0 w1 k0 k1; do "$RBTRACE" dump --json "$tmp/$t.rbt" >"$tmp/$t.dump"; done
# in memory, then streamed in windows of 100 steps (whether the master only
# registers memory, and what the others WRITE into, come from the first reading)
for run in asap:0 deps:0 asap:100 deps:100; do
	timing=${run%:*}
	win=${run#*:}
	RBTRACE_REPLAY_WINDOW=$win timeout 120 "$RBTRACE" replay --softnic --json --timing=$timing "$tmp/m.rbt" \
		"$tmp/w0.rbt" "$tmp/w1.rbt" "$tmp/k0.rbt" "$tmp/k1.rbt" >"$tmp/shm-$timing.json" \
		2>"$tmp/shm-$timing.err" || { cat "$tmp/shm-$timing.json" "$tmp/shm-$timing.err"; fail "shm_prog HERD, $timing, window $win"; }
	[ "$win" = 0 ] || windows "$tmp/shm-$timing.json" "$tmp/shm-$timing.err" 3
	python3 - "$tmp/shm-$timing.json" "$tmp"/m.dump "$tmp"/w0.dump "$tmp"/w1.dump "$tmp"/k0.dump "$tmp"/k1.dump <<'PY'
import json, sys
rep = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
wcs = [w for p in sys.argv[2:] for l in open(p) for e in [json.loads(l)]
       if e.get("type") == "poll_cq" for w in e.get("wcs", [])]
c = rep["completions"]
assert rep["divergences"] == [], rep["divergences"]
assert c["matched"] == c["expected"] == len(wcs) > 0, (c, len(wcs))
for s in rep["sides"]:
    d = s["memory_deps"]
    if "/w" in s["trace"]:
        assert d["inferred"] > 0 and d["kept"] == d["inferred"] and d["timed_out"] == 0, d
    else:
        assert d["inferred"] == 0, (s["trace"], d)
PY
done

echo "== herd's workers: a server thread that answers late, another that starts later"
# replay_herd late: thread A answers its first request 1.5 s after it landed
# (unsignaled WRITEs: the recording cannot tell when they landed), thread B
# sets its device and QP up only at 2.3 s, GETs and PUTs of two lengths in one
# slot. In deps timing A keeps its wait (from the WRITE's post), and B, whose
# first steps keep their schedule, still answers inside the client's poll: a
# replay that took A's answer for immediate left the client waiting for B
# longer than --poll-timeout. Streamed in windows of 100 steps too. In
# recorded timing the client's poll, issued at its recorded entry, waits what
# it waited in the recording (more than --poll-timeout) before it diverges.
mkdir -p "$tmp/late"
timeout 60 "$RBTRACE" record --softnic -o "$tmp/ls.rbt" -- \
	"$HERD" late "$tmp/late" 300 1500 2300 >"$tmp/ls.log" 2>&1 &
lsp=$!
pids+=("$lsp")
timeout 60 "$RBTRACE" record --softnic -o "$tmp/lc.rbt" -- \
	"$HERD" lateclient "$tmp/late" 300 >"$tmp/lc.log" 2>&1 ||
	{ cat "$tmp"/l[sc].log; fail "the late client"; }
wait "$lsp" || { cat "$tmp"/l[sc].log; fail "the late server"; }
grep -q "client 0: 300 of 300 answers correct" "$tmp/lc.log" || fail "the late client's answers"
for t in ls lc; do "$RBTRACE" dump --json "$tmp/$t.rbt" >"$tmp/$t.dump"; done
for run in deps:0 asap:0 deps:100 recorded:0; do
	timing=${run%:*}
	win=${run#*:}
	RBTRACE_REPLAY_WINDOW=$win timeout 120 "$RBTRACE" replay --softnic --json --timing=$timing \
		--poll-timeout 1000 "$tmp/ls.rbt" "$tmp/lc.rbt" >"$tmp/late-$run.json" 2>"$tmp/late-$run.err" ||
		{ cat "$tmp/late-$run.json" "$tmp/late-$run.err"; fail "late workers, $timing, window $win"; }
	python3 - "$tmp/late-$run.json" "$timing" "$tmp/ls.dump" "$tmp/lc.dump" <<'PY'
import json, sys
rep = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
wcs = [w for p in sys.argv[3:] for l in open(p) for e in [json.loads(l)]
       if e.get("type") == "poll_cq" for w in e.get("wcs", [])]
c = rep["completions"]
assert rep["divergences"] == [], rep["divergences"]
assert c["matched"] == c["expected"] == len(wcs) > 0, (c, len(wcs))
srv = [s for s in rep["sides"] if s["trace"].endswith("ls.rbt")][0]["memory_deps"]
assert srv["inferred"] >= 300 and srv["kept"] == srv["inferred"], srv
if sys.argv[2] == "deps":
    # A's 1.5 s and B's start are kept: the replay is as long as the recording
    assert rep["wall_ns"] > 0.8 * rep["recorded_wall_ns"], (rep["wall_ns"], rep["recorded_wall_ns"])
PY
done

echo "== the text report names the dependencies"
timeout 120 "$RBTRACE" replay --softnic --timing=asap "$tmp/srv.rbt" "$tmp/c0.rbt" "$tmp/c1.rbt" \
	>"$tmp/one.txt" 2>&1 || { cat "$tmp/one.txt"; fail "text report"; }
grep -q "memory dependencies: .*srv.rbt: $((2 * NREQ)) inferred .* $((2 * NREQ)) kept, 0 timed out" "$tmp/one.txt" ||
	{ cat "$tmp/one.txt"; fail "the text report does not count the dependencies"; }
echo PASS
