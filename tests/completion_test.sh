#!/usr/bin/env bash
# completion_test.sh - bash completion (packaging/rbtrace.bash): subcommands, each
# subcommand's options as its --help lists them, option values, traces.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
test_tmp completion
mkdir -p "$tmp/bin" "$tmp/proj/sub"
ln -s "$root/cli/rbtrace" "$tmp/bin/rbtrace"
touch "$tmp/proj/a.rbt" "$tmp/proj/b.rbt" "$tmp/proj/notes.txt"
cd "$tmp/proj"
export PATH=$tmp/bin:$PATH

# complete WORDS...: what TAB offers after the last word (an empty last word
# completes a new one), sorted, one line
complete_words() {
	bash -c '
		[ -z "$WITH_BC" ] || source /usr/share/bash-completion/bash_completion
		source "$1"; shift
		COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
		# as bash splits the line: "=" ends a word (COMP_WORDBREAKS)
		COMP_WORDS=(); for w in "$@"; do
			if [[ $w == --*=* ]]; then COMP_WORDS+=("${w%%=*}" "=" "${w#*=}"); else COMP_WORDS+=("$w"); fi
		done
		COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
		_rbtrace
		printf "%s\n" "${COMPREPLY[@]}" | sort | tr "\n" " "
	' _ "$root/packaging/rbtrace.bash" "$@"
}
export WITH_BC=""
expect() { # expect "WANT" WORDS...
	local want=$1 got
	shift
	got=$(complete_words "$@")
	[ "$got" = "$want " ] || fail "rbtrace completion of '$*': got '$got', want '$want'"
}
expect_has() { # expect_has WORD WORDS...
	local w=$1 got
	shift
	got=" $(complete_words "$@")"
	[[ $got == *" $w "* ]] || fail "rbtrace completion of '$*' lacks $w: '$got'"
}

run_all() {
cmds=$(rbtrace --help | sed -n '/^commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p' | sort | tr '\n' ' ')
[ -n "$cmds" ] || fail "no commands in rbtrace --help"
for c in $cmds --version help; do expect_has "$c" rbtrace ""; done
expect "record replay report" rbtrace re
expect "--flight= --help --light --output --rotate= --softnic" rbtrace record --
expect "--around= --from= --help --jobs= --json --qp= --stream= --thread= --to= --type=" rbtrace dump --
expect_has --timing= rbtrace replay --t
expect_has --poll-timeout rbtrace replay --p
expect "--around= --format= --from= --help --jobs= --output= --perfetto-bin= --perfetto-detail= --perfetto-max-wrs= --pid= --qp= --quiet --thread= --to=" rbtrace report --
expect "finding:" rbtrace report --around=f
expect "html" rbtrace report --format=h
expect "perfetto perfetto-json" rbtrace report --format=p
expect "asap" rbtrace replay --timing=a
expect "eth ib" rbtrace softnic --link ""
expect "a.rbt b.rbt sub" rbtrace report ""
expect "a.rbt b.rbt sub" rbtrace info -- ""
expect "record" rbtrace help rec
expect_has ibv_rc_pingpong rbtrace record --softnic -- ibv_rc_pi
# every option each --help shows is offered
for c in $cmds; do
	for o in $(rbtrace "$c" --help | grep -oE '^ +(-[A-Za-z], )?--[a-z0-9-]+' | grep -oE -- '--[a-z0-9-]+$'); do
		got=" $(complete_words rbtrace "$c" "$o")"
		[[ $got == *" $o "* || $got == *" $o= "* ]] || fail "rbtrace $c $o not completed: '$got'"
	done
done
}
# plain bash, then with the bash-completion package's helpers (_init_completion)
WITH_BC="" run_all
echo "plain bash: ok"
if [ -f /usr/share/bash-completion/bash_completion ]; then
	export WITH_BC=1
	run_all
	echo "with bash-completion: ok"
fi
echo PASS
