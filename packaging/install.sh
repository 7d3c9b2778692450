#!/usr/bin/env bash
# install.sh - installs rbtrace by its manifest (written from packaging/artifacts.bzl).
#
#   install.sh --manifest FILE --from DIR[:DIR...] [--prefix=DIR] [--destdir=DIR]
#
# Each "file SRC DEST MODE" line copies the first existing DIR/SRC to
# DESTDIR/PREFIX/DEST (DIRs: bazel-bin then the source tree for ./dev install,
# the runfiles tree in tests); "link TARGET NAME" makes a symbolic link. It
# prints nothing but errors, and refuses to install half: every source is found
# before anything is written. It never writes outside DESTDIR/PREFIX.
set -euo pipefail

prefix=/usr/local destdir="" manifest="" from=""
while (($#)); do
	case $1 in
	--prefix=*) prefix=${1#*=} ;;
	--destdir=*) destdir=${1#*=} ;;
	--manifest=*) manifest=${1#*=} ;;
	--from=*) from=${1#*=} ;;
	--prefix | --destdir | --manifest | --from)
		(($# >= 2)) || { echo "install.sh: $1 needs a value" >&2; exit 2; }
		declare "${1#--}=$2"
		shift
		;;
	*) echo "install.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
	shift
done
[[ -n $manifest && -n $from ]] || { echo "install.sh: --manifest and --from are needed" >&2; exit 2; }
[[ $prefix == /* ]] || { echo "install.sh: --prefix must be an absolute path, not '$prefix'" >&2; exit 2; }
[[ -z $destdir || $destdir == /* ]] || destdir=$PWD/$destdir
prefix=${prefix%/}
[[ -n $prefix ]] || prefix=/

libdir=lib
[[ $prefix == /usr ]] && libdir=lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)

IFS=: read -r -a roots <<<"$from"
declare -a srcs dests modes links
while read -r kind a b mode; do
	[[ -z $kind || $kind == \#* ]] && continue
	if [[ $kind == version ]]; then version=$a; continue; fi
	b=${b//@LIBDIR@/$libdir}
	case $kind in
	file)
		src=""
		for r in "${roots[@]}"; do
			if [[ -f $r/$a ]]; then src=$r/$a; break; fi
		done
		[[ -n $src ]] || { echo "install.sh: $a: not found in $from (built?)" >&2; exit 1; }
		srcs+=("$src") dests+=("$b") modes+=("$mode")
		;;
	link) links+=("$a" "$b") ;;
	*) echo "install.sh: $manifest: unknown line '$kind $a $b'" >&2; exit 1 ;;
	esac
done <"$manifest"
[[ -n ${version-} ]] || { echo "install.sh: $manifest: no version line" >&2; exit 1; }

root=$destdir$prefix
for i in "${!srcs[@]}"; do
	dst=$root/${dests[i]}
	mkdir -p "$(dirname "$dst")"
	rm -f "$dst" # a running rbtrace keeps its old file
	if [[ ${modes[i]} == subst ]]; then
		sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@VERSION@|$version|g" \
			"${srcs[i]}" >"$dst"
		chmod 0644 "$dst"
	else
		install -m "${modes[i]}" "${srcs[i]}" "$dst"
	fi
done
for ((i = 0; i < ${#links[@]}; i += 2)); do
	ln -sfn "${links[i]}" "$root/${links[i + 1]}"
done
# A real install (no staging) into the system's library path: refresh the
# loader's cache so that programs find librbtformat.so.1 at once.
if [[ -z $destdir && $(id -u) == 0 ]] && command -v ldconfig >/dev/null; then
	ldconfig 2>/dev/null || true
fi
