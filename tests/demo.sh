#!/usr/bin/env bash
# The main job, end to end on a machine with no RDMA hardware: record both ends of
# ibv_rc_pingpong over softnic, print the report, replay the pair and diff the replay
# against the original. Run through `./dev demo` (which builds first).
set -euo pipefail
cd "$(dirname "$0")/.."
rbtrace=${RBTRACE:-bazel-bin/cli/rbtrace}
out=${RBTRACE_DEMO_DIR:-$(mktemp -d /tmp/rbtrace-demo.XXXXXX)}
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768 up)
mkdir -p "$out"
export SOFTNIC_FABRIC="$out/fabric"

echo "== recording both ends of ibv_rc_pingpong over softnic (traces in $out)"
$rbtrace record --softnic -o "$out/server.rbt" -- ibv_rc_pingpong -p "$port" -n 1000 >"$out/server.log" 2>&1 &
server=$!
sleep 0.5
$rbtrace record --softnic -o "$out/client.rbt" -- ibv_rc_pingpong -p "$port" -n 1000 localhost
wait "$server"
tail -n 3 "$out/server.log"

echo
echo "== rbtrace report client.rbt server.rbt"
$rbtrace report "$out/client.rbt" "$out/server.rbt"

echo
echo "== rbtrace replay --softnic client.rbt server.rbt"
$rbtrace replay --softnic -o "$out/replay.rbt" "$out/client.rbt" "$out/server.rbt"

echo
echo "Also try: $rbtrace dump $out/client.rbt | less"
echo "          $rbtrace report --format=html -o $out/report.html $out/client.rbt"
