# softnic_env.sh - sourced by the shell tests that run programs over softnic:
# on_softnic [--preload LIB] CMD ARGS... runs CMD on softnic in the mode that
# (ON_SOFTNIC_EXEC=1: in place of the shell, so that CMD & gives CMD's pid)
# RBTRACE_SOFTNIC_MODE names (dropin, the default, or provider), with LIB (a
# recorder) preloaded before softnic's own preload. SOFTNIC_DIR must be
# softnic's directory (the drop-in's libibverbs.so.1, provider/ beside it).

softnic_mode=${RBTRACE_SOFTNIC_MODE:-dropin}
# Built with --config=asan: the sanitizer runtimes the preload links, which must
# be the first libraries of the (uninstrumented) programs it is preloaded into.
softnic_asan=
if [ "$softnic_mode" = provider ]; then
	softnic_asan=$(ldd "$SOFTNIC_DIR/provider/libsoftnic-preload.so" 2>/dev/null |
		awk '/libasan|libubsan/ {printf "%s:", $3}')
fi
# and their leaks are Debian's programs' own, not ours
softnic_asan_opts=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0

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

# What a test says about its mode on its first line of output.
echo "softnic mode: $softnic_mode"
