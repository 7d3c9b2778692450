#!/bin/bash
# cm_programs_test.sh - Debian's unmodified librdmacm programs (rdmacm-utils,
# perftest -R) between two processes over softnic's librdmacm.so.1 and
# libibverbs.so.1: each pair gets its own port and a timeout, so a hang fails
# instead of hanging CI. Checks exit codes and the output each program prints
# on hardware. Then tests/cm_failures provokes every CM failure.
#
# usage: cm_programs_test.sh [DIR_WITH_SOFTNIC_LIBS [CM_FAILURES_BINARY]]
set -u
dir=${1:-}
fbin=${2:-}
if [ -z "$dir" ]; then
	if [ -n "${TEST_SRCDIR:-}" ]; then
		dir=$TEST_SRCDIR/${TEST_WORKSPACE:-rbtrace}/softnic
		fbin=$TEST_SRCDIR/${TEST_WORKSPACE:-rbtrace}/tests/cm_failures
	else
		dir=$(dirname "$0")/../bazel-bin/softnic
		fbin=$(dirname "$0")/../bazel-bin/tests/cm_failures
	fi
fi
dir=$(cd "$dir" && pwd) || { echo "no softnic dir"; exit 2; }
for f in libibverbs.so.1 librdmacm.so.1; do
	[ -r "$dir/$f" ] || { echo "$dir/$f missing"; exit 2; }
done
. "$(dirname "$0")/lib.sh"
need_progs rping ucmatose udaddy mckey rdma_server rdma_client rdma_xserver rdma_xclient cmtime ib_send_lat
export LD_LIBRARY_PATH=$dir
asan_first "$dir/librdmacm.so.1"
# the programs must get ours, not Debian's (which needs the kernel's rdma_cm)
ldd "$(command -v rping)" | grep -q "$dir/librdmacm.so.1" ||
	{ echo "rping does not load $dir/librdmacm.so.1"; exit 1; }
test_tmp cm_programs shm
port=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000)) # below the ephemeral range
fails=0

# pair NAME CLIENT_REGEX SERVER_REGEX "SERVER CMD" "CLIENT CMD": @P in the
# commands is the port. SERVER_REGEX "-": the server runs until killed.
pair() {
	local name=$1 cexp=$2 sexp=$3 scmd=$4 ccmd=$5
	local s=$tmp/$name.srv c=$tmp/$name.cli crc=1 src=0 spid
	port=$((port + 1))
	local pp=$port
	[[ $scmd == *@P* ]] || pp=${LISTEN_PORT:?}
	scmd=${scmd//@P/$pp}
	ccmd=${ccmd//@P/$pp}
	timeout 60 $scmd >"$s" 2>&1 &
	spid=$!
	if ! cm_wait_listen $pp; then
		echo "FAIL ${mode:-}$name: the server never listened"; cat "$s"
		kill $spid 2>/dev/null; wait $spid 2>/dev/null
		fails=$((fails + 1))
		return
	fi
	timeout 60 $ccmd >"$c" 2>&1
	crc=$?
	if [ "$sexp" = - ]; then
		kill $spid 2>/dev/null
		wait $spid 2>/dev/null
	else
		wait $spid
		src=$?
	fi
	if [ $crc -ne 0 ] || [ $src -ne 0 ] || ! grep -Eq -- "$cexp" "$c" ||
		{ [ "$sexp" != - ] && ! grep -Eq -- "$sexp" "$s"; }; then
		echo "FAIL ${mode:-}$name (client rc=$crc, server rc=$src)"
		echo "--- client: $ccmd"; tail -20 "$c"; echo "--- server: $scmd"; tail -20 "$s"
		fails=$((fails + 1))
	else
		echo "ok   ${mode:-}$name: $(grep -E -- "$cexp" "$c" | tail -1 | tr -s ' \t' ' ')"
	fi
}

# rping: every one of the -C pings came back, both sides saw the disconnect
rping_pair() {
	local name=$1
	shift
	pair "$name" "ping data: rdma-ping-9:" "server DISCONNECT EVENT" \
		"rping -s $* -a 127.0.0.1 -p @P -C 10 -v" "rping -c $* -a 127.0.0.1 -p @P -C 10 -v"
	local n
	n=$(grep -c "^ping data: rdma-ping-" "$tmp/$name.cli" 2>/dev/null)
	[ "$n" = 10 ] || { echo "FAIL $name: $n pings, not 10"; fails=$((fails + 1)); }
}
# mckey: a receiver joins a multicast group, then a sender joins and sends
# it 10 datagrams; softnic delivers them to every attached QP. The receiver
# has no listening port: wait until its group exists in the fabric.
mckey_pair() {
	local name=$1 group=$2 r=$tmp/$1.recv s=$tmp/$1.send rrc src i
	rm -f "$SOFTNIC_FABRIC"/mc-*
	timeout 60 mckey -m "$group" -b 127.0.0.1 >"$r" 2>&1 &
	local rpid=$!
	for i in $(seq 1 100); do
		ls "$SOFTNIC_FABRIC"/mc-* >/dev/null 2>&1 && grep -q "^receiving" "$r" && break
		sleep 0.05
	done
	timeout 60 mckey -m "$group" -s -b 127.0.0.1 >"$s" 2>&1
	src=$?
	wait $rpid
	rrc=$?
	if [ $src -ne 0 ] || [ $rrc -ne 0 ] || ! grep -q "^data transfers complete" "$r" ||
		! grep -q "^return status 0" "$r"; then
		echo "FAIL ${mode:-}$name (sender rc=$src, receiver rc=$rrc)"
		echo "--- sender"; tail -20 "$s"; echo "--- receiver"; tail -20 "$r"
		fails=$((fails + 1))
	else
		echo "ok   ${mode:-}$name: $(grep "joined" "$r" | tr -s ' \t' ' '); receiver: $(grep "^data transfers complete" "$r")"
	fi
}

lat='^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+'
bw='^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+'
perf() {
	local name=$1 expect=$2 squiet=$3
	shift 3
	pair "$name" "$expect" "$([ "$squiet" = 1 ] && echo . || echo "$expect")" \
		"$* -R -p @P" "$* -R -p @P 127.0.0.1"
}

# every program pair, both modes
programs() {
	rping_pair rping
	rping_pair rping_q -q
	SOFTNIC_LINK=eth rping_pair rping_eth
	pair ucmatose_c8 "^return status 0" "^return status 0" \
		"ucmatose -p @P -c 8" "ucmatose -s 127.0.0.1 -p @P -c 8"
	pair ucmatose_m "^return status 0" "^return status 0" \
		"ucmatose -p @P -c 4 -m" "ucmatose -s 127.0.0.1 -p @P -c 4 -m"
	# udaddy has no port option: its own 7174 (the fabric keeps runs apart)
	LISTEN_PORT=7174 pair udaddy "^return status 0" "^return status 0" \
		"udaddy" "udaddy -s 127.0.0.1"
	mckey_pair mckey 239.1.1.1
	pair rdma_server "^rdma_client: end 0" "^rdma_server: end 0" \
		"rdma_server -p @P" "rdma_client -s 127.0.0.1 -p @P"
	pair rdma_xserver "^rdma_xclient: end 0" "^rdma_xserver: end 0" \
		"rdma_xserver -p @P" "rdma_xclient -s 127.0.0.1 -p @P"
	pair rdma_xserver_rc "^rdma_xclient: end 0" "^rdma_xserver: end 0" \
		"rdma_xserver -p @P -c r" "rdma_xclient -s 127.0.0.1 -p @P -c r"
	pair cmtime "^connect +: +[0-9.]+ +[0-9.]+" - \
		"cmtime -p @P" "cmtime -s 127.0.0.1 -p @P -c 50"

	perf ib_send_lat "$lat" 0 ib_send_lat -n 1000
	perf ib_send_lat_ud "$lat" 0 ib_send_lat -c UD -n 1000
	perf ib_write_lat "$lat" 0 ib_write_lat -n 1000
	perf ib_read_lat "$lat" 1 ib_read_lat -n 1000
	perf ib_send_bw_q4 "$bw" 0 ib_send_bw -n 1000 -q 4
	perf ib_send_bw_ud_q4 "$bw" 0 ib_send_bw -c UD -n 1000 -q 4
	perf ib_write_bw_q4 "$bw" 0 ib_write_bw -n 1000 -q 4
	perf ib_read_bw_q4 "$bw" 1 ib_read_bw -n 1000 -q 4
	perf ib_atomic_bw_q4 "$bw" 1 ib_atomic_bw -n 1000 -q 4
}

programs

# provider mode: Debian's own libibverbs with softnic as its provider (the
# preload gives it the fake sysfs), our librdmacm.so.1 alone on the path
preload=$dir/provider/libsoftnic-preload.so
if [ -r "$preload" ]; then
	pdir=$tmp/provider-mode
	mkdir -p "$pdir"
	ln -s "$dir/librdmacm.so.1" "$pdir/librdmacm.so.1"
	saved=$LD_LIBRARY_PATH
	export LD_LIBRARY_PATH=$pdir LD_PRELOAD="${LD_PRELOAD:-} $preload"
	mode=provider/
	programs
	mode=
	export LD_LIBRARY_PATH=$saved
	LD_PRELOAD=${LD_PRELOAD% $preload}
else
	echo "-- provider mode not tested: $preload not built beside librdmacm.so.1"
fi

# every failure as the kernel CM reports it (a short CM timeout for UNREACHABLE)
if [ -n "$fbin" ] && [ -x "$fbin" ]; then
	if SOFTNIC_CM_TIMEOUT_MS=500 timeout 120 "$fbin" >"$tmp/failures" 2>&1; then
		sed 's/^/     /' "$tmp/failures"
		[ "$(grep -c '^ok ' "$tmp/failures")" = 14 ] ||
			{ echo "FAIL cm_failures: not 14 cases"; fails=$((fails + 1)); }
	else
		echo "FAIL cm_failures"; cat "$tmp/failures"; fails=$((fails + 1))
	fi
else
	echo "FAIL cm_failures binary missing"; fails=$((fails + 1))
fi

[ $fails -eq 0 ] && echo "all CM programs passed" || echo "$fails failed"
exit $((fails > 0))
