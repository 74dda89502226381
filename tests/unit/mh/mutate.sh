#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The mutation check: run the scenario suite once per flush/invalidate site
# of the multi-host protocol with exactly that site disabled. Every site
# must make at least one scenario fail; prints TAP, one line per site,
# naming the scenarios that caught it.
#   mutate.sh ./test_mh [extra test_mh options]
bin=${1:-./test_mh}
[ $# -gt 0 ] && shift
sites=$("$bin" --list-sites) || exit 1
n=$(printf '%s\n' "$sites" | wc -l)
echo "# mutation check: $n flush/invalidate sites"
i=0
failed=0
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
printf '%s\n' "$sites" | while read -r num name desc; do
	i=$((i + 1))
	"$bin" --disable-site "$num" "$@" >"$tmp" 2>/dev/null
	caught=$(sed -n 's/^not ok [0-9]* \(.*\)$/\1/p' "$tmp" | tr '\n' ' ' | sed 's/ $//')
	# A crash (sanitizer abort) also catches it, but ends the list early.
	grep -q '^1\.\.' "$tmp" || caught="$caught (suite aborted)"
	if [ -n "$caught" ]; then
		echo "ok $i $name caught by: $caught"
	else
		echo "not ok $i $name ($desc) not caught by any scenario"
	fi
done | tee "$tmp.out"
fails=$(grep -c '^not ok' "$tmp.out")
rm -f "$tmp.out"
echo "1..$n"
[ "$fails" -eq 0 ]
