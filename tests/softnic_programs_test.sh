#!/bin/bash
# softnic_programs_test.sh - the unmodified Debian verbs programs (ibverbs-utils,
# perftest) between two processes over softnic: each pair gets its own TCP port
# and a timeout, so a hang fails instead of hanging CI. Checks the exit codes
# and the output shape (the summary line each program prints on hardware).
#
# usage: softnic_programs_test.sh [DIR_WITH_SOFTNIC_libibverbs.so.1]
set -u
dir=${1:-}
if [ -z "$dir" ]; then
	if [ -n "${TEST_SRCDIR:-}" ]; then
		dir=$TEST_SRCDIR/${TEST_WORKSPACE:-rbtrace}/softnic
	else
		dir=$(dirname "$0")/../bazel-bin/softnic
	fi
fi
dir=$(cd "$dir" && pwd) || { echo "no softnic dir"; exit 2; }
[ -r "$dir/libibverbs.so.1" ] || { echo "$dir/libibverbs.so.1 missing"; exit 2; }
SOFTNIC_DIR=$dir
. "$(dirname "$0")/lib.sh"
use_softnic
asan_first "$dir/libibverbs.so.1"
test_tmp softnic_programs shm
# random base: parallel runs in PID namespaces share the network namespace;
# below the ephemeral range (32768 up), where outgoing connections take theirs
port=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000))
fails=0

# pair NAME EXPECT_REGEX CMD ARGS... : server and client of the same program.
# SERVER_QUIET=1: the server prints no results (perftest's passive READ and
# atomic sides do the same on hardware); check the client only.
pair() {
	local name=$1 expect=$2 squiet=${SERVER_QUIET:-0}
	shift 2
	local s=$tmp/$name.srv c=$tmp/$name.cli crc=1 src=1
	for attempt in 1 2 3; do
		port=$((port + 1))
		on_softnic timeout 60 "$@" -p $port >"$s" 2>&1 &
		local spid=$!
		# the client once the server listens (it does not retry), however
		# long the machine takes to get the server there
		crc=1
		if wait_listen $port $spid; then
			on_softnic timeout 60 "$@" -p $port localhost >"$c" 2>&1
			crc=$?
		fi
		wait $spid
		src=$?
		# someone else holds the port: take another one
		grep -qi "couldn't listen\|Couldn't bind\|Address already in use" "$s" || break
	done
	if [ $crc -ne 0 ] || [ $src -ne 0 ] || ! grep -Eq "$expect" "$c" ||
		{ [ "$squiet" = 0 ] && ! grep -Eq "$expect" "$s"; }; then
		echo "FAIL $name (client rc=$crc, server rc=$src)"
		echo "--- client:"; cat "$c"; echo "--- server:"; cat "$s"
		fails=$((fails + 1))
	else
		echo "ok   $name: $(grep -E "$expect" "$c" | tail -1 | tr -s ' \t' ' ')"
	fi
}

pp='[0-9]+ iters in [0-9.]+ seconds'
lat='^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+'
bw='^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+'
pair rc_pingpong "$pp" ibv_rc_pingpong -n 200
pair rc_pingpong_e "$pp" ibv_rc_pingpong -n 200 -e
pair rc_pingpong_N "$pp" ibv_rc_pingpong -n 200 -N
pair rc_pingpong_t "Average receive completion clock cycles" ibv_rc_pingpong -n 200 -t
SOFTNIC_LINK=eth pair rc_pingpong_g0_eth "$pp" ibv_rc_pingpong -n 200 -g 0
pair uc_pingpong "$pp" ibv_uc_pingpong -n 200
pair ud_pingpong "$pp" ibv_ud_pingpong -n 200
pair srq_pingpong "$pp" ibv_srq_pingpong -n 200
pair xsrq_pingpong "^success" ibv_xsrq_pingpong -n 50
pair xsrq_pingpong_e "^success" ibv_xsrq_pingpong -n 50 -e
pair ib_send_lat "$lat" ib_send_lat -n 1000
pair ib_write_bw "$bw" ib_write_bw -n 2000
SERVER_QUIET=1 pair ib_read_lat "$lat" ib_read_lat -n 1000
pair ib_write_lat "$lat" ib_write_lat -n 1000
SERVER_QUIET=1 pair ib_atomic_lat "$lat" ib_atomic_lat -n 1000
SOFTNIC_LINK=eth pair ib_send_lat_roce "$lat" ib_send_lat -n 1000 -x 0

# ibv_devinfo shows the device (in provider mode the system's own ibv_devinfo
# through the system's libibverbs)
if on_softnic ibv_devinfo -v -d softnic0 >"$tmp/devinfo" 2>&1 &&
	grep -q "hca_id:.*softnic0" "$tmp/devinfo" && grep -q "PORT_ACTIVE" "$tmp/devinfo" &&
	grep -q "GID\[  0\]:.*fe80:0000:0000:0000" "$tmp/devinfo"; then
	echo "ok   ibv_devinfo -v"
else
	echo "FAIL ibv_devinfo -v"; cat "$tmp/devinfo"; fails=$((fails + 1))
fi

# the libibverbs a running program maps: in provider mode the system's (with
# softnic's provider beside it), never softnic's drop-in
# it listens once it has opened the device: libibverbs and the provider are
# mapped by then; another port when someone else holds this one
for attempt in 1 2 3; do
	port=$((port + 1))
	ON_SOFTNIC_EXEC=1 on_softnic ibv_rc_pingpong -p $port >"$tmp/maps.out" 2>&1 &
	mpid=$!
	wait_listen $port $mpid && break
	wait $mpid 2>/dev/null
	grep -qi "couldn't listen" "$tmp/maps.out" && continue
	echo "FAIL: the pingpong server never listened"
	break
done
# (not under the ASan runtime the programs get: it finds mawk's own overreads)
verbs=$(LD_PRELOAD= awk '/libibverbs\.so/ {print $6}' "/proc/$mpid/maps" 2>/dev/null | sort -u)
provider=$(LD_PRELOAD= awk '/libsoftnic-rdmav34/ {print $6}' "/proc/$mpid/maps" 2>/dev/null | sort -u)
kill $mpid 2>/dev/null; wait $mpid 2>/dev/null
dropin=$(readlink -f "$dir/libibverbs.so.1")
ok=0
if [ "$softnic_mode" = provider ]; then
	[ -n "$verbs" ] && [ "$verbs" != "$dropin" ] && [ -n "$provider" ] && ok=1
else
	[ "$verbs" = "$dropin" ] && ok=1
fi
if [ $ok = 1 ]; then
	echo "ok   maps: libibverbs $verbs${provider:+, provider $provider}"
else
	echo "FAIL maps: libibverbs '$verbs', provider '$provider' (mode $softnic_mode)"
	sed 's/^/    /' "$tmp/maps.out"
	fails=$((fails + 1))
fi
[ $fails -eq 0 ] && echo "all programs ran" || echo "$fails program(s) failed"
exit $fails
