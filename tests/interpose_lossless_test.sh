#!/usr/bin/env bash
# interpose_lossless_test.sh - the recorder's ends lose nothing (issue "Lossless
# ends"): four threads post and poll flat out over softnic
# (tests/progs/interpose_lossless.c) and the process is ended by SIGTERM, SIGINT,
# SIGSEGV in another thread, exit() from another thread, exit() from two threads
# at once (and main's return with another thread's exit()), abort() and exec. Each
# time the trace's posts, polls and completions per thread lie between what the
# program's own counters say returned and what it started (every call that
# returned is in the trace; none is invented), nothing is lost, and the trailer
# says how the process ended; `rbtrace info` says so too. Then calls that stay
# under way past the end (a stand-in device whose posts hang): the trailer counts
# them as lost, and info and report call the trace incomplete.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
PROG=$root/tests/interpose_lossless
CHECK=$root/tests/interpose_lossless_check
SOFTNIC=$SOFTNIC_DIR
FAKE=$root/tests/progs/fakeverbs
test_tmp lossless
fails=0
NW=4 # the program's worker threads

# ready FILE: the program's "ready" word (every worker did 2000 posts) is set.
ready() { [ "$(od -An -tu8 -N8 "$1" 2>/dev/null | tr -d ' ')" = 1 ]; }

# one NAME MODE SIGNAL RC HOW N [LOST]: run, end it, compare. LIB: the device.
# RC may list the statuses allowed ("3 4"); N "rc": the status it ended with.
LIB=$SOFTNIC
one() {
	local name=$1 mode=$2 sig=$3 want_rc=$4 how=$5 n=$6 lost=${7:-0}
	local trace=$tmp/$name.rbt counters=$tmp/$name.cnt rc=0
	echo "== $name"
	[ -n "${STALL:-}" ] && rm -f "$STALL" "$STALL.held"
	[ -n "${LOSSLESS_GO:-}" ] && rm -f "$LOSSLESS_GO"
	# Background jobs of a script ignore SIGINT: give the program the default.
	# Under --config=asan: the program ends mid-run with its MRs registered (not
	# a leak of ours), and its SIGSEGV is the recorder's to handle.
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:handle_segv=0 \
		LD_LIBRARY_PATH=$LIB LD_PRELOAD=$SHIM RBTRACE_OUTPUT=$trace \
		env --default-signal=INT timeout -s KILL 60 "$PROG" "$counters" "$mode" &
	local pid=$!
	for _ in $(seq 600); do
		ready "$counters" && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	if [ -n "${STALL:-}" ]; then
		# Every worker's next post is held; the device counts them in
		# STALL.held. Wait for all four, however long the machine takes to
		# schedule them (bounded, 30 s), rather than a fixed time.
		touch "$STALL"
		local held=0
		for _ in $(seq 600); do
			held=$(stat -c %s "$STALL.held" 2>/dev/null || echo 0)
			[ "$held" -ge "$NW" ] && break
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.05
		done
		[ "$held" -ge "$NW" ] || { echo "FAIL: $name: $held of $NW workers held in a post"; fails=$((fails + 1)); }
		[ -n "${LOSSLESS_GO:-}" ] && touch "$LOSSLESS_GO"
	fi
	if [ "$sig" != - ]; then
		ready "$counters" || { echo "FAIL: $name: the program never got ready"; fails=$((fails + 1)); }
		# timeout runs the program as its child: signal the program itself.
		local child
		child=$(pgrep -P "$pid" -f interpose_lossless | head -1)
		kill -s "$sig" "$child"
	fi
	wait "$pid" || rc=$?
	if [[ " $want_rc " != *" $rc "* ]]; then
		echo "FAIL: $name: exit status $rc, expected $want_rc"
		fails=$((fails + 1))
	fi
	[ "$n" = rc ] && n=$rc
	"$CHECK" "$trace" "$counters" "$how" "$n" "$lost" || fails=$((fails + 1))
	"$RBTRACE" info "$trace" >"$tmp/$name.info" 2>&1 || true
	grep '^ended:' "$tmp/$name.info" || { echo "FAIL: $name: info does not say how it ended"; fails=$((fails + 1)); }
}

one sigterm wait TERM 143 signal 15
one sigint wait INT 130 signal 2
one segv segv - 139 signal 11
one exit exit - 3 exit 3
one abort abort - 134 signal 6
one exec exec - 0 exec 0
# Two threads call exit() at the same moment (exit(3) and exit(4)), and main
# returns 3 while another thread calls exit(4), as rping does: either may go
# first, but the process ends with that one's status, the trailer says the
# same, and nothing is lost. Before the recorder put the exits one after the
# other, most such runs lost the trailer; looped because it is a race.
for i in $(seq 8); do
	one exits-$i exits - "3 4" exit rc
	one return-exit-$i return-exit - "3 4" exit rc
done
# SIGTERM to a worker thread, most likely inside a post or poll: held back until
# that call is recorded.
one tgkill tgkill - 143 signal 15

# Every worker hangs inside ibv_post_send when SIGTERM comes: after waiting 1 s
# the end counts the four calls as not kept.
export FAKEVERBS_STALL=$tmp/stall
STALL=$FAKEVERBS_STALL LIB=$FAKE one stall wait TERM 143 signal 15 4
grep -q '^complete:  no (4 records' "$tmp/stall.info" ||
	{ echo "FAIL: info does not call the stalled trace incomplete"; cat "$tmp/stall.info"; fails=$((fails + 1)); }
"$RBTRACE" report "$tmp/stall.rbt" >"$tmp/stall.report" 2>&1 || true
grep -q 'incomplete' "$tmp/stall.report" ||
	{ echo "FAIL: report does not call the stalled trace incomplete"; fails=$((fails + 1)); }
# The same, the signal sent to a worker stuck in a post: the writer thread ends
# the trace and delivers the signal itself.
LOSSLESS_GO=$tmp/go STALL=$FAKEVERBS_STALL LIB=$FAKE one tgkill-stuck tgkill - 143 signal 15 4

echo "$((fails == 0 ? 1 : 0)) passed, $((fails > 0 ? 1 : 0)) failed"
[ "$fails" -eq 0 ]
