#!/usr/bin/env bash
# tests/fuzz.sh [SECONDS] [HARNESS...] - builds rbtrace's libFuzzer harnesses with
# Bazel (--config=fuzz: clang, -fsanitize=fuzzer,address,undefined) and runs each
# for SECONDS (default 30) from the seed corpus in tests/fuzz_corpus/:
#   reader     any bytes into the trace reader and the printers
#   roundtrip  events drawn from the bytes, written, read back, compared field by field
#   analyzer   the reader's decoded events fed to the analyzer, report written
# Fails, keeping the crashing input and the log, when a harness crashes, leaks,
# hangs or trips a sanitizer. New corpus entries go to a temporary directory, never
# into the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
shift || true
harnesses=("$@")
((${#harnesses[@]})) || harnesses=(reader roundtrip analyzer)
targets=()
for h in "${harnesses[@]}"; do targets+=("//tests:fuzz_$h"); done
work=$(mktemp -d "${TMPDIR:-/tmp}/rbt-fuzz.XXXXXX")
if ! bazel build --config=fuzz "${targets[@]}" >"$work/build.log" 2>&1; then
	grep -v 'Cannot export local symbol' "$work/build.log" | tail -n 40 >&2
	echo "fuzz.sh: the harnesses did not build (log: $work/build.log)" >&2
	exit 1
fi
bin=$(bazel info --config=fuzz bazel-bin 2>/dev/null)
for h in "${harnesses[@]}"; do
	mkdir "$work/$h"
	echo "fuzz.sh: fuzzing $h for ${secs}s" >&2
	if ! "$bin/tests/fuzz_$h" -max_total_time="$secs" -max_len=65536 -timeout=10 \
		-rss_limit_mb=2048 -artifact_prefix="$work/$h-" -print_final_stats=1 \
		"$work/$h" tests/fuzz_corpus >"$work/$h.log" 2>&1; then
		tail -n 60 "$work/$h.log" >&2
		echo "fuzz.sh: $h FAILED; the crashing input and the log are kept in $work" >&2
		exit 1
	fi
	grep -E '^#[0-9]+.*DONE' "$work/$h.log" | tail -n 1 >&2 || true
done
rm -rf "$work"
echo "fuzz.sh: no crash in ${secs}s each (${harnesses[*]})" >&2
