#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The man pages (userspace/man) and the bash completion
# (packaging/bash-completion/belugactl), checked against the program and
# the header they describe, so that neither can fall behind:
#   - every page renders with groff's warnings fatal, and with `man -l`;
#   - belugactl.8 has a section for every command of belugactl's usage,
#     and each names every option of that command's --help;
#   - every function of libbeluga.h is named by a man3 page;
#   - the completion, sourced in bash, completes `belugactl ` to exactly
#     the usage's commands and `belugactl CMD --` to exactly the options of
#     CMD --help, and offers dax nodes to attach and pools to -d;
#   - `make install` puts the pages where man finds them, one per function,
#     and the completion where bash-completion loads it.
#
# Usage: tests/userspace/test_man.sh BUILD_DIR   (prints TAP)
set -u

bin=${1:?usage: test_man.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
man_dir=$top/userspace/man
completion=$top/packaging/bash-completion/belugactl
ctl=$bin/belugactl
tmp=$(mktemp -d /tmp/beluga-man.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=../lib/tap.sh
. "$here/../lib/tap.sh"

pages=("$man_dir"/*.[358])

# ---- every page renders, without a warning ----
for page in "${pages[@]}"; do
	name=${page##*/}
	if ! command -v groff >/dev/null; then
		skip "$name: groff -man -ww renders it without warnings" "groff is not installed (groff-base)"
	elif out=$(groff -man -Tutf8 -ww -z "$page" 2>&1) && [ -z "$out" ]; then
		ok "$name: groff -man -ww renders it without warnings"
	else
		not_ok "$name: groff -man -ww renders it without warnings: $(head -1 <<<"$out")"
	fi
	if ! command -v man >/dev/null; then
		skip "$name: man -l shows it" "man is not installed (man-db)"
	elif MANWIDTH=80 LC_ALL=C.UTF-8 man -l "$page" >"$tmp/page.txt" 2>"$tmp/page.err" &&
		[ ! -s "$tmp/page.err" ] && grep -q '^NAME' "$tmp/page.txt"; then
		ok "$name: man -l shows it"
	else
		not_ok "$name: man -l shows it: $(head -1 "$tmp/page.err")"
	fi
done

# ---- belugactl.8 follows belugactl's usage ----
# section FILE MACRO TITLE: the lines of section TITLE (.SH or .SS) up to the next one
section() {
	awk -v want="$2 $3" '$0 == want { on = 1; next } on && /^\.S[HS] / { exit } on' "$1"
}
"$ctl" --help >"$tmp/usage"
commands=$(sed -n '/^Commands:/,/^$/s/^  \([a-z]\+\) .*/\1/p' "$tmp/usage")
if [ "$(wc -w <<<"$commands")" -lt 7 ]; then
	not_ok "belugactl --help lists its commands (got: $(tr '\n' ' ' <<<"$commands"))"
fi
missing=()
for c in $commands; do
	[ -n "$(section "$man_dir/belugactl.8" .SS "$c")" ] || missing+=("$c")
done
if [ ${#missing[@]} -eq 0 ]; then
	ok "belugactl.8 has a section for each command of the usage: $(tr '\n' ' ' <<<"$commands")"
else
	not_ok "belugactl.8 has no section for: ${missing[*]}"
fi
# options OUTPUT: the long options an option list of --help starts a line with
options() { sed -n 's/^  \(-[a-zA-Z], \)\?\(--[a-z-]\+\).*/\2/p' <<<"$1" | sort -u; }
# The global options of the usage, short and long: -d --device ...
global_options=$(sed -n '/^Options:/,/^$/s/^  \(-[a-zA-Z]\), \(--[a-z-]\+\).*/\1 \2/p' "$tmp/usage")
missing=()
for c in $commands; do
	text=$(section "$man_dir/belugactl.8" .SS "$c")
	for o in $(options "$("$ctl" "$c" --help)"); do
		grep -qF -- "${o//-/\\-}" <<<"$text" || missing+=("$c $o")
	done
done
text=$(section "$man_dir/belugactl.8" .SH OPTIONS)
for o in $global_options; do
	grep -qF -- "${o//-/\\-}" <<<"$text" || missing+=("global $o")
done
if [ ${#missing[@]} -eq 0 ]; then
	ok "belugactl.8 names every option of every command's --help, and the global ones"
else
	not_ok "belugactl.8 does not name: ${missing[*]}"
fi

# ---- a man3 page for every function of libbeluga.h ----
declared=$(grep -oE '\bbeluga_[a-z0-9_]+\(' "$top/userspace/include/libbeluga.h" | tr -d '(' | sort -u)
named=$(for page in "$man_dir"/*.3; do
	sed -n '/^\.SH NAME/{n;s/ \\- .*//;s/,/ /g;p;q;}' "$page"
done | tr ' ' '\n' | grep . | sort -u)
if [ "$(wc -l <<<"$declared")" -ge 30 ] && [ -z "$(comm -23 <(echo "$declared") <(echo "$named"))" ]; then
	ok "every function of libbeluga.h is named by a man3 page ($(wc -l <<<"$declared"))"
else
	not_ok "functions of libbeluga.h without a man3 page: $(comm -23 <(echo "$declared") <(echo "$named") | tr '\n' ' ')"
fi
stale=$(comm -13 <(echo "$declared") <(echo "$named") | grep -vx libbeluga)
if [ -z "$stale" ]; then
	ok "the man3 pages name no function that libbeluga.h lacks"
else
	not_ok "the man3 pages name functions libbeluga.h lacks: $(tr '\n' ' ' <<<"$stale")"
fi

# ---- the bash completion ----
mkdir -p "$tmp/dev" "$tmp/sys/devices/system/node/node0" "$tmp/sys/devices/system/node/node2"
: >"$tmp/dev/dax0.0" && : >"$tmp/dev/dax1.0" && : >"$tmp/dev/beluga" && : >"$tmp/dev/beluga1" && : >"$tmp/dev/sda"
# complete WORD...: what the completion offers for the command line WORD..., sorted, one a line
complete_words() {
	BELUGA_DEV_ROOT=$tmp/dev BELUGA_SYSFS_ROOT=$tmp/sys bash --norc --noprofile -c '
		source "$1" || exit 1
		shift
		COMP_WORDS=("$@")
		COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
		_belugactl
		printf "%s\n" "${COMPREPLY[@]}"' complete "$completion" "$@" | grep . | sort
}
# same NAME GOT WANT: the two lists hold the same words
same() {
	if [ -n "$2" ] && [ "$(tr ' ' '\n' <<<"$2" | grep . | sort)" = "$(tr ' ' '\n' <<<"$3" | grep . | sort)" ]; then
		ok "$1"
	else
		not_ok "$1 (got: $(tr '\n' ' ' <<<"$2"); want: $(tr '\n' ' ' <<<"$3"))"
	fi
}
if ! bash --norc --noprofile -c 'source "$1" && complete -p belugactl' x "$completion" >/dev/null 2>&1; then
	not_ok "the completion sources in bash and registers belugactl"
else
	ok "the completion sources in bash and registers belugactl"
fi
same "completion: 'belugactl ' offers exactly the commands of the usage" \
	"$(complete_words belugactl "")" "$commands"
same "completion: 'belugactl help ' offers the commands" \
	"$(complete_words belugactl help "")" "$commands"
for c in $commands; do
	same "completion: 'belugactl $c --' offers exactly the options of $c --help" \
		"$(complete_words belugactl "$c" --)" "$(options "$("$ctl" "$c" --help)") --help"
done
same "completion: 'belugactl -' offers exactly the global options of the usage" \
	"$(complete_words belugactl -)" "$global_options"
same "completion: attach offers the dax device nodes" \
	"$(complete_words belugactl attach "")" "$tmp/dev/dax0.0 $tmp/dev/dax1.0"
same "completion: -d offers the pools (/dev/beluga, /dev/belugaN)" \
	"$(complete_words belugactl -d "")" "$tmp/dev/beluga $tmp/dev/beluga1"
same "completion: a command after -d DEVICE" \
	"$(complete_words belugactl -d "$tmp/dev/beluga1" st)" "status stats"
same "completion: attach --node offers the NUMA nodes" \
	"$(complete_words belugactl attach --node "")" "0 2"

# ---- make install: man finds the pages, and the completion is in place ----
root=$tmp/root
if ! out=$(make -s -C "$top/userspace" install DESTDIR="$root" PREFIX=/usr 2>&1); then
	not_ok "make install DESTDIR=... PREFIX=/usr: $(tail -1 <<<"$out")"
else
	missing=()
	for page in "${pages[@]}"; do
		name=${page##*/}
		cmp -s "$page" "$root/usr/share/man/man${name##*.}/$name" || missing+=("$name")
	done
	if [ ${#missing[@]} -eq 0 ]; then
		ok "make install puts every page under PREFIX/share/man/manN"
	else
		not_ok "make install did not install: ${missing[*]}"
	fi
	if cmp -s "$completion" "$root/usr/share/bash-completion/completions/belugactl"; then
		ok "make install puts the completion under PREFIX/share/bash-completion/completions"
	else
		not_ok "make install puts the completion under PREFIX/share/bash-completion/completions"
	fi
	if ! command -v man >/dev/null; then
		skip "man finds every installed page and function" "man is not installed (man-db)"
	else
		unfound=()
		for topic in belugactl beluga.conf libbeluga $declared; do
			MANPATH=$root/usr/share/man man -w "$topic" >/dev/null 2>&1 || unfound+=("$topic")
		done
		if [ ${#unfound[@]} -eq 0 ]; then
			ok "man finds belugactl, beluga.conf, libbeluga and every function once installed"
		else
			not_ok "man does not find, once installed: ${unfound[*]}"
		fi
	fi
fi

tap_done
