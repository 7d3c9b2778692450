# bash completion for rbtrace: subcommands, their options, traces (*.rbt).
#
# Installed as PREFIX/share/bash-completion/completions/rbtrace. The words come
# from the rbtrace being completed (its --help, read once per shell and cached),
# so they are always the installed version's; nothing here lists options by hand.

_rbtrace_words()
{
	# $1: the rbtrace to ask, $2: a subcommand or "" for the command list
	local key="${1}|${2}" var
	var="_rbtrace_cache_$(printf '%s' "$key" | cksum | cut -d' ' -f1)"
	if [[ -z ${!var+x} ]]; then
		local words
		if [[ -z $2 ]]; then
			words=$("$1" --help 2>/dev/null |
				sed -n '/^commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p')
			words+=" help --help --version"
		else
			# option lines: "  -o, --output FILE", "  --type=T,...", "  --json"
			words=$("$1" "$2" --help 2>/dev/null |
				sed -n 's/^  \{1,\}\(-[A-Za-z], \)\{0,1\}\(--[a-z0-9-]*=\{0,1\}\).*/\2/p')
			words+=" --help"
		fi
		printf -v "$var" '%s' "$words"
	fi
	printf '%s' "${!var}"
}

_rbtrace()
{
	local cur prev words cword
	if declare -F _init_completion >/dev/null; then
		_init_completion -n = || return
	else
		# without bash-completion: words split at blanks only, as
		# _init_completion -n = would (COMP_WORDS splits --format=x at '=')
		local line=${COMP_LINE:0:COMP_POINT}
		read -r -a words <<<"$line"
		[[ -z $line || $line == *[[:blank:]] ]] && words+=("")
		cword=$((${#words[@]} - 1))
		cur=${words[cword]}
		prev=${words[cword - 1]:-}
	fi
	local prog=${words[0]} sub="" i
	for ((i = 1; i < cword; i++)); do
		if [[ ${words[i]} != -* ]]; then
			sub=${words[i]}
			break
		fi
	done
	if [[ -z $sub ]]; then
		COMPREPLY=($(compgen -W "$(_rbtrace_words "$prog" "")" -- "$cur"))
		return
	fi
	if [[ $sub == help ]]; then
		COMPREPLY=($(compgen -W "$(_rbtrace_words "$prog" "")" -- "$cur"))
		return
	fi
	# record and softnic run a program: after "--" complete commands and files
	local j after=0
	for ((j = i + 1; j < cword; j++)); do
		[[ ${words[j]} == -- ]] && after=1
	done
	if ((after)) && [[ $sub == record || $sub == softnic ]]; then
		COMPREPLY=($(compgen -c -- "$cur") $(compgen -f -- "$cur"))
		return
	fi
	case $prev in
	-o | --output | --fabric)
		COMPREPLY=($(compgen -f -- "$cur"))
		return
		;;
	--link)
		COMPREPLY=($(compgen -W "ib eth" -- "$cur"))
		return
		;;
	esac
	case $cur in
	--format=*)
		COMPREPLY=($(compgen -W "text json perfetto html csv ndjson" -- "${cur#--format=}"))
		return
		;;
	--from=* | --to=* | --around=*)
		COMPREPLY=($(compgen -W "finding:" -- "${cur#*=}"))
		compopt -o nospace 2>/dev/null
		return
		;;
	--timing=*)
		COMPREPLY=($(compgen -W "recorded asap scale:" -- "${cur#--timing=}"))
		return
		;;
	-*)
		((after)) && { COMPREPLY=($(compgen -f -- "$cur")); return; }
		COMPREPLY=($(compgen -W "$(_rbtrace_words "$prog" "$sub")" -- "$cur"))
		[[ ${COMPREPLY[0]-} == *= ]] && compopt -o nospace 2>/dev/null
		return
		;;
	esac
	case $sub in
	record | softnic)
		COMPREPLY=($(compgen -c -- "$cur"))
		;;
	*)
		# traces, and directories to reach them
		COMPREPLY=($(compgen -f -X '!*.rbt' -- "$cur") $(compgen -d -- "$cur"))
		compopt -o filenames 2>/dev/null
		;;
	esac
}
complete -F _rbtrace rbtrace
