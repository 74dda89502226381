#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The STATS fields are listed once, in the uapi (BELUGA_STATS_FIELDS); the
# module makes one sysfs file of each, geometry and occupancy in the pool's
# directory and counters in stats/. Check that the documents follow the
# list: each field has its sysfs ABI entry at the path the module uses and
# its line in the uapi kernel-doc of struct beluga_stats, and no stats/ file
# is documented that the module does not make. TAP.
#
# Usage: test_docs.sh [REPO_ROOT]
set -u
root=${1:-$(dirname "$0")/../..}
here=$(cd "$(dirname "$0")" && pwd)
hdr=$root/uapi/linux/beluga.h
abi=$root/Documentation/ABI/testing/sysfs-class-misc-beluga
n=0
ok() { echo "ok $((n += 1)) $1"; }
not_ok() { echo "not ok $((n += 1)) $1"; }

fields=$("$here/stats-fields.sh" "$hdr")
if [ "$(wc -l <<<"$fields")" -lt 18 ]; then
	not_ok "the uapi's BELUGA_STATS_FIELDS could not be read from $hdr"
	echo "1..$n"
	exit 1
fi

# The kernel-doc block of struct beluga_stats, up to the struct itself.
kdoc=$(sed -n '/^ \* struct beluga_stats - /,/^struct beluga_stats {/p' "$hdr")
missing_abi=() missing_kdoc=()
while read -r name kind; do
	if [ "$kind" = COUNTER ]; then
		path=/sys/class/misc/beluga/stats/$name
	else
		path=/sys/class/misc/beluga/$name
	fi
	grep -qx "What:[[:space:]]*$path" "$abi" || missing_abi+=("$path")
	grep -q "^ \* @$name:" <<<"$kdoc" || missing_kdoc+=("@$name")
done <<<"$fields"

if [ ${#missing_abi[@]} -eq 0 ]; then
	ok "sysfs ABI document: an entry for every STATS field, at the module's path"
else
	not_ok "sysfs ABI document: no entry for ${missing_abi[*]}"
fi
if [ ${#missing_kdoc[@]} -eq 0 ]; then
	ok "uapi kernel-doc: every STATS field of the list is described"
else
	not_ok "uapi kernel-doc of struct beluga_stats: no line for ${missing_kdoc[*]}"
fi

# stats/ holds the counters and the two fault counters STATS does not carry.
stale=()
for p in $(sed -n 's|^What:[[:space:]]*/sys/class/misc/beluga/stats/||p' "$abi"); do
	case $p in
	pte_faults | pmd_faults) continue ;;
	esac
	grep -qx "$p COUNTER" <<<"$fields" || stale+=("stats/$p")
done
if [ ${#stale[@]} -eq 0 ]; then
	ok "sysfs ABI document: every stats/ entry is a counter of the list"
else
	not_ok "sysfs ABI document: ${stale[*]} documented, but no counter of the list"
fi
echo "1..$n"
