# lib.sh - sourced by the shell tests (". "$(dirname "$0")/lib.sh""): where the
# built tools are, a scratch directory and a softnic fabric removed at exit, and
# the run-and-check helpers the tests share (softnic in the test's mode, a
# recorded run, a recorded server/client pair, softnic's CM listening). Sourcing
# it defines names only: it must never run a program, nor exit the test (only
# fail does, when the test calls it).
#
# root: the built tree (the runfiles under bazel test, bazel-bin otherwise).
if [ -z "${root:-}" ]; then
	if [ -n "${TEST_SRCDIR:-}" ]; then
		root=$TEST_SRCDIR/${TEST_WORKSPACE:-rbtrace}
	else
		root=$(cd "$(dirname "$0")/../bazel-bin" 2>/dev/null && pwd) || root=$(dirname "$0")/../bazel-bin
	fi
fi
RBTRACE=$root/cli/rbtrace
SHIM=$root/interpose/librbtrace.so
SOFTNIC_DIR=${SOFTNIC_DIR:-$root/softnic}
# the recorder and softnic `rbtrace record` puts under a program: the built ones
export RBTRACE_LIB=$SHIM RBTRACE_SOFTNIC_DIR=$SOFTNIC_DIR

fail() { echo "FAIL: $*" >&2; exit 1; }

# need_files FILE...: each one is built (exit 2 otherwise);
# need_progs PROG...: each one is installed (./dev setup installs them).
need_files() {
	local f
	for f in "$@"; do
		[ -e "$f" ] || { echo "missing $f"; exit 2; }
	done
}
need_progs() {
	local p
	for p in "$@"; do
		command -v "$p" >/dev/null || { echo "$p missing: install rdmacm-utils and perftest (./dev setup)"; exit 2; }
	done
}

# asan_first LIB: built with --config=asan, the sanitizer runtimes LIB links
# must be the first libraries of the (uninstrumented) programs LIB goes into.
asan_first() {
	local asan
	asan=$(ldd "$1" 2>/dev/null | awk '/libasan|libubsan/ {print $3}' | tr '\n' ' ')
	if [ -n "$asan" ]; then
		export LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0
	fi
}

# test_tmp NAME [shm]: $tmp, a scratch directory, and SOFTNIC_FABRIC, in it
# (shm: under /dev/shm, where the CM's and the shared rings' files go); both
# removed at exit, after the pids in the array pids are killed. KEEP=1 keeps
# $tmp (and says where it is).
pids=()
test_shm=
test_cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[ -n "${KEEP:-}" ] || rm -rf "$tmp"
	[ -z "$test_shm" ] || rm -rf "$test_shm"
}
test_tmp() {
	tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/$1.XXXXXX")
	if [ "${2:-}" = shm ]; then
		test_shm=$(mktemp -d "/dev/shm/softnic-$1-XXXXXX")
		export SOFTNIC_FABRIC=$test_shm
	else
		export SOFTNIC_FABRIC=$tmp/fabric
		mkdir -p "$SOFTNIC_FABRIC"
	fi
	[ -z "${KEEP:-}" ] || echo "keeping $tmp"
	trap test_cleanup EXIT
}

# A TCP port nobody listens on now (the kernel's choice for port 0).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# use_softnic: on_softnic [--preload LIB] CMD ARGS... then runs CMD on softnic
# in the mode RBTRACE_SOFTNIC_MODE names (dropin, the default, or provider),
# with LIB (a recorder) preloaded before softnic's own preload;
# ON_SOFTNIC_EXEC=1: in place of the shell, so that CMD & gives CMD's pid.
# The test says its mode on its first line of output.
use_softnic() {
	softnic_mode=${RBTRACE_SOFTNIC_MODE:-dropin}
	# Built with --config=asan: the runtimes the preload links come first.
	softnic_asan=
	if [ "$softnic_mode" = provider ]; then
		softnic_asan=$(ldd "$SOFTNIC_DIR/provider/libsoftnic-preload.so" 2>/dev/null |
			awk '/libasan|libubsan/ {printf "%s:", $3}')
	fi
	# and their leaks are Debian's programs' own, not ours
	softnic_asan_opts=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
	echo "softnic mode: $softnic_mode"
}
on_softnic() {
	local pre= run=
	[ "${ON_SOFTNIC_EXEC:-0}" = 1 ] && run=exec
	if [ "${1:-}" = --preload ]; then
		pre=$2
		shift 2
	fi
	if [ "$softnic_mode" = provider ]; then
		$run env LD_PRELOAD="$softnic_asan${LD_PRELOAD:+$LD_PRELOAD:}${pre:+$pre:}$SOFTNIC_DIR/provider/libsoftnic-preload.so" \
			RDMAV_DRIVERS="$SOFTNIC_DIR/provider/libsoftnic" \
			${softnic_asan:+ASAN_OPTIONS=$softnic_asan_opts} "$@"
	else
		$run env LD_LIBRARY_PATH="$SOFTNIC_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
			${pre:+LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD:}$pre"} "$@"
	fi
}

# run OUT.rbt CMD...: CMD over softnic (use_softnic first), recorded into
# OUT.rbt, bounded in time.
run() {
	local out=$1
	shift
	RBTRACE_OUTPUT=$out on_softnic --preload "$SHIM" timeout 60 "$@"
}

# pair NAME CMD...: the server (CMD -p PORT) and the client (CMD -p PORT
# localhost) of a program, both recorded (run) into $tmp/NAME_s.rbt and
# $tmp/NAME_c.rbt, their output beside (.log); the client starts once the
# server listens.
pair() {
	local name=$1 port srv
	shift
	port=$(free_port)
	run "$tmp/${name}_s.rbt" "$@" -p "$port" >"$tmp/${name}_s.log" 2>&1 &
	srv=$!
	wait_listen "$port" "$srv" ||
		{ cat "$tmp/${name}_s.log"; fail "$name server: never listened on $port"; }
	run "$tmp/${name}_c.rbt" "$@" -p "$port" localhost >"$tmp/${name}_c.log" 2>&1 ||
		{ cat "$tmp/${name}_c.log"; fail "$name client"; }
	wait $srv || { cat "$tmp/${name}_s.log"; fail "$name server"; }
}

# stalled NAME N: a stall (tests/progs/stall_prog.c, $STALL): the server stops
# answering after 50 requests, two clients of N requests each spin on their
# CQs; recorded into $tmp/NAME_s.rbt, NAME_c1.rbt and NAME_c2.rbt.
stalled() {
	local name=$1 n=$2 port srv c1
	port=$(free_port)
	run "$tmp/${name}_s.rbt" "$STALL" server "$port" 2 50 >"$tmp/${name}_s.log" 2>&1 &
	srv=$!
	run "$tmp/${name}_c1.rbt" "$STALL" client localhost "$port" "$n" spin >"$tmp/${name}_c1.log" 2>&1 &
	c1=$!
	run "$tmp/${name}_c2.rbt" "$STALL" client localhost "$port" "$n" spin >"$tmp/${name}_c2.log" 2>&1 ||
		{ cat "$tmp/${name}_c2.log"; fail "stall_prog client 2"; }
	wait $c1 || { cat "$tmp/${name}_c1.log"; fail "stall_prog client 1"; }
	wait $srv || { cat "$tmp/${name}_s.log"; fail "stall_prog server"; }
}

# cm_listening PORT: something listens on softnic's CM port PORT of
# $SOFTNIC_FABRIC: an abstract socket softnic-cm/<fabric>/<space>/<port> in
# /proc/net/unix, <fabric> the FNV-1a hash, in hex, of "ino:<dev>:<inode>" of
# the fabric directory.
cm_listening() {
	local key fnv ch i fabric
	[ -d "${SOFTNIC_FABRIC:-}" ] || return 1
	printf -v key 'ino:%x:%x' $(stat -c '%d %i' "$SOFTNIC_FABRIC")
	fnv=1469598103934665603
	for ((i = 0; i < ${#key}; i++)); do
		printf -v ch '%d' "'${key:i:1}"
		fnv=$(((fnv ^ ch) * 1099511628211))
	done
	printf -v fabric '%016x' $fnv
	awk -v p="^@softnic-cm/$fabric/[0-9a-f]+/$1\$" '$4 == "00010000" && $NF ~ p {f = 1}
		END {exit !f}' /proc/net/unix
}

# tcp_listening PORT: something listens on TCP port PORT (/proc/net/tcp, tcp6:
# state 0A).
tcp_listening() {
	local hex f files=()
	printf -v hex ':%04X' "$1"
	for f in /proc/net/tcp /proc/net/tcp6; do [ -r "$f" ] && files+=("$f"); done
	awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 4) == p {f = 1}
		END {exit !f}' "${files[@]}"
}

# cm_wait_listen PORT [TRIES]: wait (TRIES x 50 ms, 100) until cm_listening.
cm_wait_listen() {
	local i
	for i in $(seq 1 "${2:-100}"); do
		cm_listening "$1" && return 0
		sleep 0.05
	done
	return 1
}

# wait_listen PORT [PID]: wait until a server listens on PORT, on TCP (the
# perftest and pingpong programs' exchange) or on softnic's CM (rdma_cm
# programs), and return 0; 1 once PID (the server) is gone, or after 60 s. Their
# clients do not retry: one started before the server listens fails at once.
# How long a recorded server takes to get there is the machine's business
# (seconds on a loaded one): the bound only ends a test that would hang.
wait_listen() {
	local i
	for i in $(seq 1200); do
		tcp_listening "$1" || cm_listening "$1" && return 0
		[ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null && return 1
		sleep 0.05
	done
	return 1
}
