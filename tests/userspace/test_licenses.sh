#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Every source file of the checkout names its license with an SPDX tag, in
# the kernel's placement (the first line, or the second after a #! line or
# a directive to shellcheck), and every tag names a license or exception that
# LICENSES/ holds; the library parts are LGPL, the module GPL-2.0, as the
# README's License section says. A new file without a tag fails here, by
# name. TAP.
#
# Usage: test_licenses.sh [REPO_ROOT]
set -u
root=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
# shellcheck source=../lib/tap.sh
. "$(dirname "$0")/../lib/tap.sh"

# ---- LICENSES/: the identifiers a tag may use -------------------------------
# header_field FILE NAME: the values of "NAME: value" lines before License-Text
header_field() {
	sed -n "/^License-Text:/q; s/^$2:[[:space:]]*//p" "$1"
}
licenses=() exceptions=() malformed=()
declare -A exception_for # exception -> " license license ... "
for f in "$root"/LICENSES/preferred/* "$root"/LICENSES/exceptions/*; do
	[ -f "$f" ] || continue
	text=$(sed -n '/^License-Text:/,$p' "$f" | tail -n +2)
	if [ -z "$(tr -d '[:space:]' <<<"$text")" ] || ! grep -q '^Usage-Guide:' "$f"; then
		malformed+=("${f#"$root"/}")
		continue
	fi
	case $f in
	*/exceptions/*)
		id=$(header_field "$f" SPDX-Exception-Identifier)
		[ -n "$id" ] || { malformed+=("${f#"$root"/}"); continue; }
		exceptions+=("$id")
		exception_for[$id]=" $(header_field "$f" SPDX-Licenses | tr -d ,) "
		;;
	*)
		ids=$(header_field "$f" Valid-License-Identifier)
		[ -n "$ids" ] || { malformed+=("${f#"$root"/}"); continue; }
		mapfile -t -O ${#licenses[@]} licenses <<<"$ids"
		;;
	esac
done
if [ ${#licenses[@]} -gt 0 ] && [ ${#malformed[@]} -eq 0 ]; then
	ok "LICENSES/: ${#licenses[@]} license identifiers, ${#exceptions[@]} exceptions, each with a usage guide and its text"
else
	not_ok "LICENSES/: every file has Valid-License-Identifier (or SPDX-Exception-Identifier), Usage-Guide and License-Text (bad: ${malformed[*]:-no LICENSES/preferred/*})"
fi
known=" ${licenses[*]} "

# ---- the source files -------------------------------------------------------
if ! git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	skip "every source file carries an SPDX tag" "$root is not a git checkout (the file list comes from git)"
	tap_done
	exit
fi
# is_source PATH: the kinds of file that carry a tag. Documents (*.md), data
# and the license texts themselves do not.
is_source() {
	case ${1##*/} in
	*.c | *.h | *.cu | *.cuh | *.py | *.sh | *.awk | *.mk | *.map | *.in | *.service | *.rules | \
		*.conf | *.config | Makefile | Kbuild) return 0 ;;
	esac
	case $1 in LICENSES/*) return 1 ;; esac
	[ "$(head -c 2 "$root/$1")" = '#!' ]
}
untagged=() unknown=() wrong_component=() checked=0
while IFS= read -r path; do
	if [ ! -f "$root/$path" ] || ! is_source "$path"; then continue; fi
	checked=$((checked + 1))
	tag=$(head -n 2 "$root/$path" | sed -n 's/.*SPDX-License-Identifier:[[:space:]]*//p' | head -n 1)
	tag=${tag%%\*/*}
	read -r lic with exc rest <<<"$tag"
	if [ -z "${lic:-}" ]; then
		untagged+=("$path")
		continue
	fi
	# "A OR B": a dual license, both of LICENSES/; "A WITH E": an exception.
	if [[ $known != *" $lic "* ]] || [ -n "${rest:-}" ] ||
		{ [ "${with:-}" = OR ] && [[ $known != *" ${exc:-} "* ]]; } ||
		{ [ -n "${with:-}" ] && [ "$with" != OR ] &&
			{ [ "$with" != WITH ] || [[ ${exception_for[${exc:-}]:-} != *" $lic "* ]]; }; }; then
		unknown+=("$path: '$tag'")
	fi
	# The component's license: the library and the Python package are LGPL,
	# so that engines of any license may load them; the module is the
	# kernel's GPL-2.0, its ABI header the kernel's GPL-2.0 with the syscall
	# note.
	# The core's files that libbeluga compiles as they are (its reader of
	# the index's copy, userspace/Makefile) are GPL-2.0 or LGPL, for both.
	case $path in
	userspace/lib/* | userspace/include/* | userspace/python/beluga/*) want=LGPL-2.1-or-later ;;
	kmod/core/bel_env.h | kmod/core/bel_hash.h | kmod/core/bel_index_walk.h | kmod/core/bel_index_copy.h)
		want="GPL-2.0 OR LGPL-2.1-or-later" ;;
	kmod/*) want=GPL-2.0 ;;
	uapi/*) want="GPL-2.0 WITH Linux-syscall-note" ;;
	*) want= ;;
	esac
	if [ -n "$want" ] && [ "$lic${with:+ $with ${exc:-}}" != "$want" ]; then
		wrong_component+=("$path: '$tag', not '$want'")
	fi
done < <(git -C "$root" ls-files --cached --others --exclude-standard | sort -u)

report() { # report NAME ITEMS...: ok when there are none, else list them
	local name=$1
	shift
	if [ $# -eq 0 ]; then
		ok "$name"
	else
		not_ok "$name: $# files"
		printf '#   %s\n' "$@"
	fi
}
if [ $checked -lt 100 ]; then
	not_ok "found the source files ($checked in $root; expected hundreds)"
fi
report "every source file carries an SPDX tag in its first two lines ($checked files)" "${untagged[@]}"
report "every SPDX tag names a license (and exception) that LICENSES/ holds" "${unknown[@]}"
report "libbeluga and the Python package are LGPL-2.1-or-later, the module GPL-2.0, uapi with the syscall note" \
	"${wrong_component[@]}"

# The README says which part is under which license, naming each file of LICENSES/.
section=$(sed -n '/^## License/,/^## /p' "$root/README.md")
missing=()
for f in "$root"/LICENSES/*/*; do
	[ -f "$f" ] || continue
	grep -qF "LICENSES/${f#"$root"/LICENSES/}" <<<"$section" || missing+=("${f#"$root"/}")
done
if [ -n "$section" ] && [ ${#missing[@]} -eq 0 ]; then
	ok "README: a License section that names every file of LICENSES/"
else
	not_ok "README: a License section that names every file of LICENSES/ (${section:+missing: }${missing[*]:-no '## License' section})"
fi
tap_done
