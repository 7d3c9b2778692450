#!/usr/bin/env bash
# man_test.sh - the man pages (man/, made from --help at build time):
# - `man -l` renders every page with no warning (groff's and man's), in a UTF-8
#   and in the C locale;
# - each page says exactly what its --help says: SYNOPSIS + DESCRIPTION rendered
#   equal the help text line by line (usage line, spacing, every option);
# - there is one page per subcommand that `rbtrace --help` lists, and no other.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
test_tmp man
command -v man >/dev/null || fail "man is not installed (man-db; ./dev setup)"

cmds=$("$RBTRACE" --help | sed -n '/^commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p')
[ -n "$cmds" ] || fail "no commands in rbtrace --help"
pages=$(cd "$root/man" && ls rbtrace*.1 | sort)
want=$( (echo rbtrace.1; for c in $cmds; do echo "rbtrace-$c.1"; done) | sort)
[ "$pages" = "$want" ] || fail "pages $(echo $pages) but rbtrace --help lists $(echo $want)"

for p in $pages; do
	name=${p%.1}
	sub=${name#rbtrace}
	sub=${sub#-}
	for loc in C.UTF-8 C; do
		LC_ALL=$loc MANWIDTH=200 man --warnings=all -l "$root/man/$p" >"$tmp/$p.$loc" 2>"$tmp/err" ||
			fail "man -l $p ($loc) failed: $(cat "$tmp/err")"
		[ ! -s "$tmp/err" ] || fail "man -l $p ($loc) warns: $(cat "$tmp/err")"
	done
	if [ -n "$sub" ]; then "$RBTRACE" "$sub" --help >"$tmp/help"; else "$RBTRACE" --help >"$tmp/help"; fi
	python3 - "$tmp/$p.C.UTF-8" "$tmp/help" "$name" <<'PY' || fail "$p differs from its --help"
import sys
page = open(sys.argv[1], encoding="utf-8").read().split("\n")
helptext = open(sys.argv[2]).read().rstrip("\n").split("\n")
name = sys.argv[3]
# the rendered page: NAME names the command; SYNOPSIS..SEE ALSO is the help text
assert any(l.strip().startswith(name + " - ") for l in page), "NAME line"
s, d, e = page.index("SYNOPSIS"), page.index("DESCRIPTION"), page.index("SEE ALSO")
unindent = lambda ls: [(l[7:] if l.startswith("       ") else l).rstrip() for l in ls]
synopsis = [l.strip() for l in page[s + 1:d] if l.strip()]
desc = unindent(page[d + 1:e])
while desc and not desc[-1]:
    desc.pop()
want = [l.rstrip() for l in helptext]
assert want[0].startswith("usage: "), want[0]
usage = [want[0][len("usage: "):]]
i = 1
while i < len(want) and want[i].startswith(" ") and want[i].strip():
    usage.append(want[i].strip())
    i += 1
while i < len(want) and not want[i]:
    i += 1
if synopsis != usage:
    sys.exit("SYNOPSIS %r, --help usage %r" % (synopsis, usage))
want = want[i:]
# DESCRIPTION is the rest of the help, character for character, blank lines too
for k, (x, y) in enumerate(zip(desc, want)):
    if x != y:
        sys.exit("DESCRIPTION line %d: page %r, --help %r" % (k + 1, x, y))
if len(desc) != len(want):
    sys.exit("DESCRIPTION has %d lines, --help %d" % (len(desc), len(want)))
PY
done
echo "PASS: $(echo $pages | wc -w) pages render and match --help"
