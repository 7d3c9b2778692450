#!/usr/bin/env bash
# deb.sh - builds rbtrace_VERSION_amd64.deb with dpkg-deb (no debhelper).
#
#   deb.sh --manifest FILE --from DIR[:DIR...] [--out=DIR]
#
# The files are those of packaging/install.sh --prefix=/usr. Depends is computed
# by dpkg-shlibdeps from the ELF files, except those that need libibverbs.so.1
# and are not a command in /usr/bin: those are the parts loaded only for verbs
# work (the replayer, softnic's provider and librdmacm) and their needs go to
# Suggests, so that
# reading traces installs no RDMA stack. The recorder must never need
# libibverbs; this script refuses to package one that does. Prints the path of
# the .deb it wrote.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$PWD args=()
for a in "$@"; do
	case $a in
	--out=*) out=${a#*=} ;;
	*) args+=("$a") ;;
	esac
done
manifest=""
for a in "${args[@]}"; do [[ $a == --manifest=* ]] && manifest=${a#*=}; done
[[ -n $manifest ]] || { echo "deb.sh: --manifest=FILE is needed" >&2; exit 2; }
version=$(sed -n 's/^version //p' "$manifest")
work=$(mktemp -d "${TMPDIR:-/tmp}/rbtrace-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root

"$here/install.sh" "${args[@]}" --prefix=/usr --destdir="$root"
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
find "$root" -type d -exec chmod 0755 {} +
# Debian keeps documentation compressed; man finds .1.gz as it finds .1.
gzip -9n "$root"/usr/share/man/man1/*.1
strip --strip-unneeded "$root/usr/lib/rbtrace/librbtrace.so" \
	"$root/usr/lib/$multiarch/librbtformat.so.1" 2>/dev/null || true

needs_verbs() { readelf -d "$1" 2>/dev/null | grep -q 'NEEDED.*\[libibverbs\.so\.1\]'; }
needs_verbs "$root/usr/lib/rbtrace/librbtrace.so" &&
	{ echo "deb.sh: librbtrace.so needs libibverbs.so.1: the recorder must not link it" >&2; exit 1; }
core=() optional=()
while IFS= read -r -d '' f; do
	file -b "$f" | grep -q '^ELF' || continue
	if needs_verbs "$f" && [[ $f != "$root"/usr/bin/* ]]; then optional+=("$f"); else core+=("$f"); fi
done < <(find "$root" -type f -print0)
# softnic's drop-in libibverbs.so.1 needs only libc: it is core; its provider
# and librdmacm (which bind the system's libibverbs) come out optional
mkdir -p "$work/debian"
printf 'Source: rbtrace\n\nPackage: rbtrace\nArchitecture: amd64\n' >"$work/debian/control"
shlibdeps() { # files... -> a Depends value
	(($#)) || return 0
	(cd "$work" && dpkg-shlibdeps -O -xrbtrace "${@/#$work\//}" 2>/dev/null) |
		sed -n 's/^shlibs:Depends=//p'
}
depends=$(shlibdeps "${core[@]}")
[[ -n $depends ]] || { echo "deb.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
suggests=$(shlibdeps "${optional[@]}")
# once each, a part's own "libibverbs1 (>= N)" before the plain name, and
# nothing that Depends already has
suggests=$( (echo "$depends" | tr ',' '\n' | sed 's/^ *\([^ ]*\).*/-\1/'
	echo "${suggests:+$suggests, }libibverbs1, ibverbs-providers, python3-pandas" | tr ',' '\n') |
	sed 's/^ *//; /^$/d' | awk '/^-/ { dep[substr($1, 2)] = 1; next } !dep[$1] && !seen[$1]++' |
	paste -sd, | sed 's/,/, /g')

mkdir -p "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s|@VERSION@|$version|" -e "s|@SIZE@|$size|" -e "s|@DEPENDS@|$depends|" \
	-e "s|@SUGGESTS@|$suggests|" "$here/deb-control.in" >"$root/DEBIAN/control"
# librbtformat is a public library: ldconfig after install, shlibs for dependents
echo "activate-noawait ldconfig" >"$root/DEBIAN/triggers"
echo "librbtformat 1 rbtrace (>= $version)" >"$root/DEBIAN/shlibs"
(cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/"*
mkdir -p "$out"
deb=$out/rbtrace_${version}_amd64.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
