#!/usr/bin/env bash
# rbtformat_abi_test.sh - librbtformat.so.1's ABI: its soname, the symbols it
# exports (exactly the lists below, under the versions RBTFORMAT_1 and
# RBTFORMAT_1.1, nothing of the writer), and that it needs no RDMA library. Changing the list is a
# decision about the public API (docs/reader-api.md "ABI"), not a side effect.
set -euo pipefail
lib=$PWD/trace_format/librbtformat.so.1
fail() { echo "FAIL: $*" >&2; exit 1; }
want="rbt_event_format_json rbt_event_format_text rbt_event_name rbt_event_type_from_name
rbt_header_same_recording rbt_reader_close rbt_reader_error rbt_reader_header rbt_reader_next
rbt_reader_open rbt_reader_open_mem rbt_reader_stats rbt_reader_trailer rbt_strerror
rbt_ticks_to_ns rbt_verbs_name"
want11="rbt_reader_open_mem_opts rbt_reader_open_opts"
readelf -d "$lib" | grep -q 'SONAME.*\[librbtformat\.so\.1\]' || fail "soname"
! readelf -d "$lib" | grep -q 'NEEDED.*ibverbs' || fail "links libibverbs"
got=$(nm -D --defined-only "$lib" | awk '$2 == "T" || $2 == "D" || $2 == "B" || $2 == "R" {print $3}' |
	sort | tr '\n' ' ')
exp=$( (echo $want | tr ' ' '\n' | sed 's/$/@@RBTFORMAT_1/'
	echo $want11 | tr ' ' '\n' | sed 's/$/@@RBTFORMAT_1.1/') | sort | tr '\n' ' ')
[ "$got" = "$exp" ] || fail "exports differ:
 got:  $got
 want: $exp"
! nm -D --defined-only "$lib" | grep -q rbt_writer || fail "the writer is exported"
echo "PASS: $(echo $want $want11 | wc -w) symbols, RBTFORMAT_1 and RBTFORMAT_1.1"
