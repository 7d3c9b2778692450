#!/usr/bin/env bash
# fuzz_replay.sh HARNESS FILE... - runs a fuzz harness's plain build (fuzz_main.c)
# over the seed corpus: every file and its truncations must pass through it.
set -euo pipefail
exec "$@"
