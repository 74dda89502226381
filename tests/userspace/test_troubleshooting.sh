#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Documentation/troubleshooting.md lists the error messages of belugactl,
# beluga-demo, beluga-watchdogd, libbeluga and the Python binding, one heading each, as the
# source writes them with "…" for a filled-in value. Check that the page
# cannot rot: every listed message still exists in the source (each piece
# between the "…" in the strings the compiler sees, c-strings.py), and every
# entry says its cause and its fix. TAP.
#
# Usage: tests/userspace/test_troubleshooting.sh [REPO_ROOT]
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "${1:-$here/../..}" && pwd)
page=$root/Documentation/troubleshooting.md
tmp=$(mktemp -d /tmp/beluga-trouble.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=../lib/tap.sh
. "$here/../lib/tap.sh"

if ! command -v python3 >/dev/null; then
	skip "every message of troubleshooting.md exists in the source" "python3 is not installed"
	tap_done
	exit
fi
# The strings of everything that prints these messages.
python3 "$here/c-strings.py" "$root"/userspace/lib/*.[ch] "$root"/userspace/belugactl/*.[ch] \
	"$root"/userspace/belugactl/util/*.c "$root"/userspace/demo/*.c "$root"/userspace/watchdogd/*.c \
	"$root"/userspace/python/beluga/_beluga.c >"$tmp/strings"
# The messages: the code span of each "### `` … ``" heading.
sed -n 's/^### `` \(.*\) ``$/\1/p' "$page" >"$tmp/messages"

nr=$(wc -l <"$tmp/messages")
if [ "$nr" -ge 30 ]; then
	ok "troubleshooting.md lists $nr messages"
else
	not_ok "troubleshooting.md lists $nr messages (expected 30 or more headings like ### \`\` message \`\`)"
fi

# A message exists when each piece between its "…" (4 characters or more:
# shorter ones, like ": ", say nothing) is in some string of the source.
stale=()
while IFS= read -r message; do
	while IFS= read -r piece; do
		[ ${#piece} -lt 4 ] && continue
		grep -qF -- "$piece" "$tmp/strings" || { stale+=("$message  [no: '$piece']"); break; }
	done < <(sed 's/…/\n/g' <<<"$message")
done <"$tmp/messages"
if [ ${#stale[@]} -eq 0 ]; then
	ok "every message troubleshooting.md lists exists in the source"
else
	not_ok "troubleshooting.md lists messages the source no longer has: ${#stale[@]}"
	printf '#   %s\n' "${stale[@]}"
fi

# Each entry, from its heading to the next, has a cause and a fix.
lacking=$(awk '
	/^#+ / { if (msg != "" && !(cause && fix)) print msg; msg = ""; cause = fix = 0 }
	/^### `` / { msg = $0 }
	/^\*\*Cause:\*\*/ { cause = 1 }
	/^\*\*Fix:\*\*/ { fix = 1 }
	END { if (msg != "" && !(cause && fix)) print msg }' "$page")
if [ -z "$lacking" ]; then
	ok "every entry of troubleshooting.md has a **Cause:** and a **Fix:**"
else
	not_ok "entries of troubleshooting.md without a cause or a fix:"
	sed 's/^/#   /' <<<"$lacking"
fi
tap_done
