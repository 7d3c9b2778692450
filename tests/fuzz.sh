#!/usr/bin/env bash
# tests/fuzz.sh [SECONDS] - builds the trace reader's libFuzzer target with clang
# (-fsanitize=fuzzer,address,undefined) and runs it for SECONDS (default 60) from
# the seed corpus in tests/fuzz_corpus/. Fails, keeping the crashing input, when
# the reader crashes, leaks, hangs or trips a sanitizer. New corpus entries go to
# a temporary directory, never into the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
work=$(mktemp -d /tmp/rbt-fuzz.XXXXXX)
clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined -DRBT_FUZZING -I. \
	trace_format/rbt_tables.c trace_format/rbt_writer.c trace_format/rbt_reader.c \
	trace_format/rbt_print.c tests/fuzz_reader.c -lzstd -pthread -o "$work/fuzz_reader"
mkdir "$work/corpus"
echo "fuzz.sh: fuzzing the trace reader for ${secs}s (work dir $work)" >&2
if ! "$work/fuzz_reader" -max_total_time="$secs" -max_len=65536 -timeout=10 \
	-rss_limit_mb=2048 -artifact_prefix="$work/" -print_final_stats=1 \
	"$work/corpus" tests/fuzz_corpus >"$work/log" 2>&1; then
	tail -n 60 "$work/log" >&2
	echo "fuzz.sh: FAILED; the crashing input and the log are kept in $work" >&2
	exit 1
fi
grep -E '^stat::number_of_executed_units|^#[0-9]+.*DONE' "$work/log" | tail -n 2 >&2 || true
rm -rf "$work"
echo "fuzz.sh: no crash in ${secs}s" >&2
