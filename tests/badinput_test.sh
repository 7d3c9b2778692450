#!/bin/bash
# badinput_test.sh - `rbtrace record` against programs and output paths that are
# wrong, `softnic` and `replay` against bad numbers, `replay` against traces
# given twice and -o paths it cannot write: each case gets one clear line on
# stderr and the documented exit code, and a bad -o is refused before the
# program runs (it never runs untraced by mistake) or the replay starts. The
# trace-file cases are in cli_test.cc.
set -u
. "$(dirname "$0")/lib.sh"
rbtrace=$RBTRACE
# Under --config=asan the recorder needs the ASan runtime first in the process.
asan_first "$RBTRACE_LIB"
test_tmp badinput
fails=0
# check NAME WANT_EXIT REGEX CMD...: exit code WANT_EXIT, exactly one line on
# stderr (NLINES=n: n lines) matching REGEX (stdout is the program's, not ours).
check() {
	local name=$1 want=$2 re=$3 nlines=${NLINES:-1}
	shift 3
	err=$("$@" 2>&1 >/dev/null)
	rc=$?
	lines=$(printf '%s\n' "$err" | grep -c .)
	if [ $rc -ne "$want" ] || [ "$lines" -ne "$nlines" ] || ! grep -Eq -- "$re" <<<"$err"; then
		echo "FAIL $name (rc=$rc, want $want; $lines lines)"
		echo "$err"
		fails=$((fails + 1))
	else
		echo "ok   $name"
	fi
}

# Programs that cannot run: the shell's 127 / 126, one line (before: 127 for
# both, and a second line saying the program "made no verbs calls").
check no_such_program 127 "record: no-such-program-xyz: No such file or directory" \
	"$rbtrace" record -- no-such-program-xyz
printf '#!/bin/sh\necho hi\n' >"$tmp/notexec.sh"
chmod 644 "$tmp/notexec.sh"
check not_executable 126 "record: $tmp/notexec.sh: Permission denied" \
	"$rbtrace" record -- "$tmp/notexec.sh"
check directory 126 "record: $tmp: Permission denied" "$rbtrace" record -- "$tmp"

# A program killed by a signal: 128 + the signal, as a shell reports it (and
# the usual line about the traces, here none).
NLINES=2 check killed 137 "record: sh killed by signal 9" "$rbtrace" record -o "$tmp/k.rbt" -- \
	sh -c 'kill -9 $$'
check exit_code 7 "no trace written" "$rbtrace" record -o "$tmp/e.rbt" -- sh -c 'exit 7'

# -o that cannot be written: refused before the program starts (before: it ran
# untraced, and record exited 0).
check out_no_dir 1 "record: --output $tmp/no/such/x.rbt: No such file or directory" \
	"$rbtrace" record -o "$tmp/no/such/x.rbt" -- touch "$tmp/ran"
check out_no_dir_slash 1 "record: --output $tmp/none/: No such file or directory \(a DIR/ must exist\)" \
	"$rbtrace" record -o "$tmp/none/" -- touch "$tmp/ran"
touch "$tmp/file"
check out_under_file 1 "record: --output $tmp/file/x.rbt: Not a directory" \
	"$rbtrace" record -o "$tmp/file/x.rbt" -- touch "$tmp/ran"
check out_newline 1 "record: --output: a newline in the path is not supported" \
	"$rbtrace" record -o "$tmp/a
b.rbt" -- touch "$tmp/ran"
check env_out_no_dir 1 "record: RBTRACE_OUTPUT=$tmp/no/x.rbt: No such file or directory" \
	env RBTRACE_OUTPUT="$tmp/no/x.rbt" "$rbtrace" record -- touch "$tmp/ran"
if [ -e "$tmp/ran" ]; then
	echo "FAIL the program ran although -o was unusable"
	fails=$((fails + 1))
fi
if [ "$(id -u)" != 0 ]; then # root writes anywhere
	mkdir "$tmp/ro" && chmod 555 "$tmp/ro"
	check out_read_only 1 "record: --output $tmp/ro/x.rbt: Permission denied" \
		"$rbtrace" record -o "$tmp/ro/x.rbt" -- true
fi

# Option errors: one line, exit 2.
check no_command 2 "no command to record" "$rbtrace" record -o "$tmp/x.rbt"
check missing_value 2 "option '-o' needs a value" "$rbtrace" record -o
check empty_output 2 "--output: empty path" "$rbtrace" record -o "" -- true
check unknown_option 2 "unknown option '--frob'" "$rbtrace" record --frob -- true
check softnic_latency 2 "--latency: 99999999999 ns is more than a minute" \
	"$rbtrace" softnic --latency 99999999999 -- true
check softnic_empty_fabric 2 "--fabric: empty path" "$rbtrace" softnic --fabric "" --counters
check softnic_negative 2 "--jitter: ' -5' is not a number" \
	"$rbtrace" softnic --jitter " -5" -- true
# replay's ports are checked as command-line errors, before any trace is read
# (before: exit 1, like a failed replay).
check replay_listen 2 "replay: --listen: 'abc' is not a port number" \
	"$rbtrace" replay --listen abc "$tmp/x.rbt"
check replay_listen_range 2 "replay: --listen: '70000' is not a port number" \
	"$rbtrace" replay --listen 70000 "$tmp/x.rbt"
check replay_connect 2 "replay: --connect nohost: expected HOST:PORT" \
	"$rbtrace" replay --connect nohost "$tmp/x.rbt"
# replay -o naming a trace being replayed (before: the replay's own recording
# silently replaced it).
echo "not really a trace" >"$tmp/t.rbt"
check replay_out_is_input 2 "replay: -o $tmp/t.rbt would overwrite the trace $tmp/t.rbt" \
	"$rbtrace" replay -o "$tmp/t.rbt" "$tmp/t.rbt"
cp "$tmp/t.rbt" "$tmp/r.1.rbt"
check replay_out_is_input_n 2 "replay: -o $tmp/r.rbt would overwrite the trace $tmp/r.1.rbt" \
	"$rbtrace" replay -o "$tmp/r.rbt" "$tmp/t.rbt" "$tmp/r.1.rbt"
if [ "$(cat "$tmp/t.rbt")" != "not really a trace" ]; then
	echo "FAIL replay changed its input"
	fails=$((fails + 1))
fi

# replay with real traces over softnic: the two ends of an RC exchange
# (tests/replay_synth), each case checked before any work (before: the whole
# replay ran first, or the message named the wrong problem).
mkdir "$tmp/syn" && "$root/tests/replay_synth" "$tmp/syn" >/dev/null || {
	echo "FAIL replay_synth"
	exit 1
}
a=$tmp/syn/a.rbt b=$tmp/syn/b.rbt
# The same trace twice (before: "QP 100 was connected to QP 200, which is in
# none of the given traces"): exit 2 for the same file, 1 for a copy.
check replay_twice 2 "replay: $a is given twice \(also as $a\)" \
	"$rbtrace" replay --softnic "$a" "$a"
cp "$a" "$tmp/copy.rbt"
check replay_copy 1 "replay: $tmp/copy.rbt: the same recording as $a \(host, pid and start time\)" \
	"$rbtrace" replay --softnic "$a" "$tmp/copy.rbt"
# -o into a directory that does not exist (before: the replay ran, then two
# errors, one per file).
check replay_out_no_dir 1 "replay: -o $tmp/no/r.0.rbt: No such file or directory" \
	"$rbtrace" replay --softnic --timing=asap -o "$tmp/no/r.rbt" "$a" "$b"
out=$("$rbtrace" replay --softnic --timing=asap -o "$tmp/no/r.rbt" "$a" "$b" 2>/dev/null)
if [ -n "$out" ]; then
	echo "FAIL replay_out_no_dir replayed before refusing: $out"
	fails=$((fails + 1))
fi
# -o a device with two traces (before, as root: /dev/full.0 and /dev/full.1
# created in /dev, exit 0).
check replay_out_device 2 "replay: -o /dev/full is not a regular file: with 2 traces" \
	"$rbtrace" replay --softnic --timing=asap -o /dev/full "$a" "$b"
if [ -e /dev/full.0 ] || [ -e /dev/full.1 ]; then
	echo "FAIL replay created files beside /dev/full"
	fails=$((fails + 1))
fi
check replay_out_dir 2 "replay: -o $tmp is a directory" \
	"$rbtrace" replay --softnic -o "$tmp" "$a" "$b"
# A write that fails at the end (X.0.rbt is /dev/full through a link): one
# line naming it, exit 1, and X.1.rbt is not written after it.
ln -s /dev/full "$tmp/w.0.rbt"
check replay_out_write_fails 1 "replay: -o $tmp/w.0.rbt: No space left on device" \
	"$rbtrace" replay --softnic --timing=asap -o "$tmp/w.rbt" "$a" "$b"
if [ -e "$tmp/w.1.rbt" ]; then
	echo "FAIL replay wrote w.1.rbt after w.0.rbt failed"
	fails=$((fails + 1))
fi
# Not a regular file: the words info and dump use (before: "cannot open
# trace: Invalid argument").
check replay_dev_null 1 "replay: /dev/null: not a regular file" "$rbtrace" replay /dev/null
# No device and no --softnic: the hint names the option that works (before:
# `rbtrace softnic -- rbtrace replay ...`).
if [ ! -d /sys/class/infiniband ]; then
	check replay_no_device 1 "no RDMA device found \(run over softnic: rbtrace replay --softnic \.\.\.\)" \
		env -u LD_LIBRARY_PATH SOFTNIC_FABRIC=/nonexistent "$rbtrace" replay "$a" "$b"
fi
exit $fails
