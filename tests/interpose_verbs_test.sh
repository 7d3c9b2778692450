#!/bin/bash
# interpose_verbs_test.sh - the recorder's list of verbs (interpose/rbt_verbs.h)
# against what the libraries really export: every libibverbs entry under the same
# version node in softnic's libibverbs.map and as the default version of the
# installed rdma-core libibverbs.so.1; the mlx5dv entries against libmlx5.so.1;
# the exec family against libc.so.6; the librdmacm entries against softnic's
# librdmacm.map and the installed rdma-core librdmacm.so.1. Then the built libraries against the list:
# librbtrace.so exports exactly the wrapped entries, each under its version, and
# defines no exported-looking wrapper that the list (hence its version script)
# lacks; the tests' fake libibverbs.so.1 likewise.
set -u
LIST=${LIST:-interpose/rbt_verbs.list}
MAP=${MAP:-softnic/libibverbs.map}
CMMAP=${CMMAP:-softnic/librdmacm.map}
PRELOAD=${PRELOAD:-interpose/librbtrace.so}
FAKE=${FAKE:-tests/progs/fakeverbs/libibverbs.so.1}
T=${TEST_TMPDIR:-$(mktemp -d)}
fails=0
fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

syslib() {
	for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64 /lib64; do
		[ -e "$d/$1" ] && { echo "$d/$1"; return 0; }
	done
	return 1
}

# "name version" for every symbol a library defines and exports by default (@@).
defaults() {
	readelf --dyn-syms -W "$1" | awk '$7 != "UND" && $8 ~ /@@/ { split($8, a, "@@"); print a[1], a[2] }' | sort -u
}

# "name node" for every name of a version script.
map_names() {
	sed 's,/\*.*\*/,,' "$1" | tr ';' '\n' | awk '
		/^[ \t]*[A-Za-z0-9_.]+[ \t]*\{/ { node = $1; sub(/\{.*/, "", node); next }
		/global:|local:/ { sub(/.*:/, "") }
		{ gsub(/[ \t{}]/, ""); if ($0 != "" && $0 != "*" && node != "") print $0, node }' | sort -u
}

[ -s "$LIST" ] || { echo "FAIL: no list at $LIST"; exit 1; }
nlist=$(wc -l <"$LIST")
echo "list: $nlist entries"

# 1. libibverbs entries: softnic's map and the installed library.
ibv=$(syslib libibverbs.so.1) || { echo "FAIL: libibverbs.so.1 of rdma-core not installed (./dev setup)"; exit 1; }
map_names "$MAP" >"$T/map.txt"
defaults "$ibv" >"$T/ibv.txt"
cm=$(syslib librdmacm.so.1) || { echo "FAIL: librdmacm.so.1 of rdma-core not installed (./dev setup)"; exit 1; }
map_names "$CMMAP" >"$T/cmmap.txt"
defaults "$cm" >"$T/cm.txt"
while read -r group name ver; do
	case $group in
	wrapped | called | companion)
		m=$(awk -v n="$name" '$1 == n { print $2 }' "$T/map.txt")
		[ "$m" = "$ver" ] || fail "$name: list says $ver, softnic/libibverbs.map says ${m:-nothing}"
		d=$(awk -v n="$name" '$1 == n { print $2 }' "$T/ibv.txt")
		[ "$d" = "$ver" ] || fail "$name: list says $ver, $ibv exports ${d:-nothing} as default"
		;;
	mlx5)
		if mlx=$(syslib libmlx5.so.1); then
			d=$(defaults "$mlx" | awk -v n="$name" '$1 == n { print $2 }')
			[ "$d" = "$ver" ] || fail "$name: list says $ver, $mlx exports ${d:-nothing}"
		else
			echo "note: libmlx5.so.1 not installed, $name not checked"
		fi
		;;
	rdmacm)
		m=$(awk -v n="$name" '$1 == n { print $2 }' "$T/cmmap.txt")
		[ "$m" = "$ver" ] || fail "$name: list says $ver, softnic/librdmacm.map says ${m:-nothing}"
		d=$(awk -v n="$name" '$1 == n { print $2 }' "$T/cm.txt")
		[ "$d" = "$ver" ] || fail "$name: list says $ver, $cm exports ${d:-nothing} as default"
		;;
	libc)
		libc=$(syslib libc.so.6) || { fail "libc.so.6 not found"; continue; }
		d=$(defaults "$libc" | awk -v n="$name" '$1 == n { print $2 }')
		[ "$d" = "$ver" ] || fail "$name: list says $ver, $libc exports ${d:-nothing}"
		;;
	*) fail "unknown group $group for $name" ;;
	esac
done <"$LIST"

# 2. librbtrace.so exports exactly the wrapped entries, each under its version.
awk '$1 == "wrapped" || $1 == "mlx5" || $1 == "libc" || $1 == "rdmacm" { print $2, $3 }' "$LIST" | sort -u >"$T/want.txt"
defaults "$PRELOAD" >"$T/have.txt"
diff "$T/want.txt" "$T/have.txt" >/dev/null || {
	fail "librbtrace.so exports differ from the list (< list only, > library only):"
	diff "$T/want.txt" "$T/have.txt" | grep '^[<>]'
}
# A wrapper defined with default visibility but missing from the list is made
# local by the version script: it would never be called.
readelf -s -W "$PRELOAD" | awk '$4 == "FUNC" && $5 == "LOCAL" && $6 == "DEFAULT" { print $8 }' |
	grep -E '^(ibv_|mlx5dv_|exec|rdma_)' | while read -r s; do
	echo "FAIL: librbtrace.so defines $s for export but the list lacks it"
done | tee "$T/stray.txt"
[ -s "$T/stray.txt" ] && fails=$((fails + 1))

# 3. The fake device exports what it defines under the list's versions.
awk '$1 == "wrapped" || $1 == "called" || $1 == "companion" { print $2, $3 }' "$LIST" | sort -u >"$T/fakewant.txt"
defaults "$FAKE" >"$T/fakehave.txt"
[ -s "$T/fakehave.txt" ] || fail "fake libibverbs.so.1 exports nothing"
while read -r name ver; do
	w=$(awk -v n="$name" '$1 == n { print $2 }' "$T/fakewant.txt")
	[ "$w" = "$ver" ] || fail "fake libibverbs.so.1 exports $name@@$ver, the list says ${w:-nothing}"
done <"$T/fakehave.txt"
readelf -s -W "$FAKE" | awk '$4 == "FUNC" && $5 == "LOCAL" && $6 == "DEFAULT" { print $8 }' |
	grep -E '^ibv_' | while read -r s; do
	echo "FAIL: the fake libibverbs.so.1 defines $s for export but the list lacks it"
done | tee "$T/fakestray.txt"
[ -s "$T/fakestray.txt" ] && fails=$((fails + 1))

echo "$((fails == 0 ? 1 : 0)) passed, $((fails > 0 ? 1 : 0)) failed"
[ "$fails" -eq 0 ]
