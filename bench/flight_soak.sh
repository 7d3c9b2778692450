#!/usr/bin/env bash
# flight_soak.sh - the flight recorder over a long run (not a CI test): a
# loopback send/receive pair on softnic, flat out, recorded with a 64 MB flight
# ring; prints the process's RSS and the recorder's rates every PERIOD seconds,
# then asks for a snapshot and checks that it reads.
#
# usage: bazel build //tests:flight_prog //cli:rbtrace //interpose:librbtrace.so \
#            //softnic:libibverbs.so.1
#        bench/flight_soak.sh [MINUTES=10] [PERIOD=30] [RING=64M]
set -euo pipefail
minutes=${1:-10}
period=${2:-30}
ring=${3:-64M}
bin=$(cd "$(dirname "$0")/.." && pwd)/bazel-bin
tmp=$(mktemp -d /tmp/flight_soak.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export SOFTNIC_FABRIC=$tmp/fabric
mkdir -p "$SOFTNIC_FABRIC"
secs=$((minutes * 60))
LD_LIBRARY_PATH=$bin/softnic LD_PRELOAD=$bin/interpose/librbtrace.so \
	RBTRACE_OUTPUT=$tmp/soak.rbt RBTRACE_FLIGHT=$ring \
	"$bin/tests/flight_prog" spin 1000 "$secs" >"$tmp/out" &
pid=$!
for _ in $(seq 200); do grep -q ready "$tmp/out" && break; sleep 0.05; done
echo "flight soak: pid $pid, ring $ring, $minutes min; RSS every $period s"
printf "%8s %10s %12s\n" "t_s" "rss_kib" "cpu_s"
t0=$(date +%s)
first_rss=
while kill -0 "$pid" 2>/dev/null; do
	now=$(date +%s)
	rss=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status 2>/dev/null || echo 0)
	[ -n "$rss" ] || break
	ticks=$(awk '{print $14 + $15}' /proc/$pid/stat 2>/dev/null || echo 0)
	cpu=$(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", t / hz}')
	[ -n "$first_rss" ] || first_rss=$rss
	printf "%8d %10d %12s\n" $((now - t0)) "$rss" "$cpu"
	[ $((now - t0)) -ge $((secs - period)) ] && break
	sleep "$period"
done
"$bin/cli/rbtrace" snapshot "$pid"
sleep 1
wait "$pid" || true
cat "$tmp/out"
sends=$(sed -n 's/.*sends=\([0-9]*\).*/\1/p' "$tmp/out")
echo "sends/s (average over the run): $((${sends:-0} / secs))"
ls -la "$tmp"
[ -f "$tmp/soak-snap1.rbt" ] && "$bin/cli/rbtrace" info "$tmp/soak-snap1.rbt" |
	grep -E "^(snapshot|duration|events|finished):"
"$bin/cli/rbtrace" info "$tmp/soak.rbt" | grep -E "^(snapshot|duration|events|finished):"
