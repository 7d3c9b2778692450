#!/bin/sh
# html_embed.sh IN NAME - prints IN as the C string constant NAME (a header), so the
# HTML sink embeds its script and the page stays one self-contained file.
set -eu
echo "/* generated from $(basename "$1") by analyzer/html_embed.sh */"
echo "static const char $2[] ="
sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/\t"/' -e 's/$/\\n"/' "$1"
echo "	;"
