#!/bin/bash
# softnic_cli_test.sh - `rbtrace softnic`: runs a verbs program on softnic
# (finding ../softnic next to rbtrace), prints the fabric's counters, and
# rejects bad arguments with one line and exit code 2.
set -u
. "$(dirname "$0")/lib.sh"
rbtrace=$RBTRACE
test_tmp softnic_cli shm
fails=0
check() { # name, expected exit, regex, command...
	local name=$1 want=$2 re=$3
	shift 3
	out=$("$@" 2>&1)
	rc=$?
	if [ $rc -ne "$want" ] || ! grep -Eq -- "$re" <<<"$out"; then
		echo "FAIL $name (rc=$rc, want $want)"; echo "$out"; fails=$((fails + 1))
	else
		echo "ok   $name"
	fi
}
unset LD_LIBRARY_PATH
check devices 0 "softnic0" "$rbtrace" softnic -- ibv_devices
check devinfo_eth 0 "link_layer:.*Ethernet" "$rbtrace" softnic --link eth -- ibv_devinfo
check counters_empty_fabric 0 "port_xmit_packets" "$rbtrace" softnic --counters
check bad_link 2 "--link" "$rbtrace" softnic --link carrier-pigeon -- true
check quirks_mlx5_clock 0 "hca_core_clock:[[:space:]]*156250kHZ" "$rbtrace" softnic --quirks=mlx5 -- ibv_devinfo -v
check bad_quirks 2 "--quirks: .bnx2. is not mlx5 or none" "$rbtrace" softnic --quirks=bnx2 -- true
check bad_latency 2 "not a number" "$rbtrace" softnic --latency soon -- true
check no_command 2 "no command" "$rbtrace" softnic
check missing_program 127 "no-such-program" "$rbtrace" softnic -- no-such-program
check help 0 "example" "$rbtrace" softnic --help
# which mode runs, in one line (RBTRACE_SOFTNIC_MODE, as the test target sets it)
mode=${RBTRACE_SOFTNIC_MODE:-dropin}
[ "$mode" = provider ] && said="softnic as a provider under /" || said="softnic's drop-in"
check says_mode 0 "^rbtrace softnic: $said" "$rbtrace" softnic -- true
check mode_dropin 0 "^rbtrace softnic: softnic's drop-in libibverbs.so.1 \(asked for\)" \
	"$rbtrace" softnic --softnic=dropin -- ibv_devices
check mode_bad 2 "--softnic=fast: not provider, dropin or auto" \
	"$rbtrace" softnic --softnic=fast -- true
# a libibverbs with another private ABI: one line, and the drop-in runs
fake=$SOFTNIC_FABRIC/lib/libibverbs.so.1.14.57.0
mkdir -p "${fake%/*}" && printf '\177ELF...IBVERBS_PRIVATE_57...' >"$fake"
check other_abi_auto 0 "^rbtrace softnic: softnic's drop-in libibverbs.so.1 \(the system's .*libibverbs.so.1.14.57.0 has private ABI 57, not 34\)" \
	env RBTRACE_SOFTNIC_MODE=auto RBTRACE_SYSTEM_LIBIBVERBS="$fake" "$rbtrace" softnic -- ibv_devices
check other_abi_provider 1 "^rbtrace softnic: --softnic=provider: the system's .* has private ABI 57, not 34; use --softnic=dropin\$" \
	env RBTRACE_SYSTEM_LIBIBVERBS="$fake" "$rbtrace" softnic --softnic=provider -- true
check mode_provider_missing 1 "--softnic=provider: .*use --softnic=dropin" \
	env RBTRACE_SOFTNIC_DIR="$root/softnic/../no-such" "$rbtrace" softnic --softnic=provider -- true
# a fabric directory that cannot be made: one line naming it, no device (the
# drop-in fails the device list, the provider adds no device to it)
check bad_fabric 255 "softnic: cannot use fabric directory /proc/no-such-dir/fabric: " \
	env SOFTNIC_FABRIC=/proc/no-such-dir/fabric "$rbtrace" softnic -- ibv_devinfo -d softnic0
# bad settings from the environment: one line each, defaults used, device works
check env_jitter_huge 0 "SOFTNIC_JITTER_NS=18446744073709551615: not a number" \
	env SOFTNIC_JITTER_NS=18446744073709551615 "$rbtrace" softnic -- ibv_devices
check env_latency_negative 0 "SOFTNIC_LATENCY_NS= -1: not a number" \
	env SOFTNIC_LATENCY_NS=" -1" "$rbtrace" softnic -- ibv_devices
check env_ppm_junk 0 "SOFTNIC_CLOCK_PPM=abc: not a number" \
	env SOFTNIC_CLOCK_PPM=abc "$rbtrace" softnic -- ibv_devices
# a fabric left by another softnic build (its fingerprint differs): renewed when
# no process uses it, refused in one line while one does
stale=$SOFTNIC_FABRIC/stale
check stale_make 0 "softnic0" env SOFTNIC_FABRIC="$stale" "$rbtrace" softnic -- ibv_devices
printf 'OLDBUILD' | dd of="$stale/fabric" bs=1 count=8 conv=notrunc status=none
flock -x "$stale/pid-1-0000beef" sh -c "echo \$\$ > $stale.holder; exec sleep 5" &
holder=$!
for i in 1 2 3 4 5 6 7 8 9 10; do [ -s "$stale.holder" ] && break; sleep 0.1; done
check stale_in_use 255 "fabric in use by processes of another softnic build" \
	env SOFTNIC_FABRIC="$stale" "$rbtrace" softnic -- ibv_devinfo -d softnic0
kill "$(cat "$stale.holder")" 2>/dev/null; wait $holder 2>/dev/null # the lock goes
check stale_renewed 0 "softnic0" env SOFTNIC_FABRIC="$stale" "$rbtrace" softnic -- ibv_devices
# missing parents are created
check nested_fabric 0 "softnic0" \
	env SOFTNIC_FABRIC="$SOFTNIC_FABRIC/a/b" "$rbtrace" softnic -- ibv_devices
# the device's network interface at the real /sys/class/infiniband/softnic0,
# in both modes (rdma-core's pyverbs CM tests look there, with stat and ls):
# the loopback one; in drop-in mode only the sysfs part of the preload runs
check sysfs_net_ls 0 "^lo\$" "$rbtrace" softnic -- ls /sys/class/infiniband/softnic0/device/net/
check sysfs_net_python 0 "^True 1\$" "$rbtrace" softnic -- python3 -c \
	'import os; p = "/sys/class/infiniband/softnic0/device/net/lo/ifindex"; print(os.path.exists(p), open(p).read().strip())'
if [ "$mode" = dropin ]; then
	check sysfs_dropin_part 0 "^sysfs-only\$" "$rbtrace" softnic -- sh -c \
		'grep -q "/libsoftnic-sysfs.so\$" /proc/self/maps && ! grep -q libsoftnic-preload /proc/self/maps && [ -z "${RDMAV_DRIVERS:-}" ] && echo sysfs-only'
fi
# a real exchange, then its counters
# a port nobody listens on now, the kernel's choice (pids repeat across sandboxes)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$rbtrace" softnic -- ibv_rc_pingpong -p $port -n 50 >/dev/null 2>&1 &
wait_listen $port $! || { echo "FAIL: the pingpong server never listened"; fails=$((fails + 1)); }
check pingpong 0 "50 iters" timeout 30 "$rbtrace" softnic -- ibv_rc_pingpong -p $port -n 50 localhost
wait
check counters_after 0 "port_xmit_packets [1-9]" "$rbtrace" softnic --counters
exit $fails
