#!/usr/bin/env bash
# tests/format_check.sh - fails, naming each file, when a C/C++ file of the
# repository differs from what clang-format (Debian's clang-format 14, with the
# repository's .clang-format) makes of it. `clang-format -i FILE` fixes one.
# Only tracked files are checked (git ls-files; outside git, every file but the
# bazel-* output links), so build outputs never count.
set -euo pipefail
cd "$(dirname "$0")/.."
cf=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$cf" ]; then
	echo "format_check: clang-format not found (./dev setup installs it)" >&2
	exit 1
fi
files() {
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		git ls-files -z -- '*.c' '*.h' '*.cc' '*.cpp' '*.hpp'
	else
		find . -path './bazel-*' -prune -o -type f \( -name '*.c' -o -name '*.h' \
			-o -name '*.cc' -o -name '*.cpp' -o -name '*.hpp' \) -print0
	fi
}
bad=()
while IFS= read -r -d '' f; do
	[ -f "$f" ] || continue
	"$cf" --style=file --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done < <(files)
if ((${#bad[@]})); then
	echo "format_check: ${#bad[@]} file(s) differ from clang-format's output" \
		"(run clang-format -i on them):" >&2
	printf '  %s\n' "${bad[@]}" >&2
	exit 1
fi
echo "format_check: every C/C++ file is as clang-format writes it" >&2
