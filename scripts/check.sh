#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# scripts/check.sh: what `make check` runs. Static checks, each one TAP result:
#   1. beluga.ko against the 6.1 and 6.12 headers with W=1, failing on any warning;
#   2. the same with C=1 (sparse), failing on any sparse warning; 2a. the single-host
#      module (BELUGA_SHARED=n) against 6.12, W=1 and C=1;
#   3. userspace built with -Werror (make -C userspace; its flags always carry -Werror);
#   4. checkpatch.pl --strict --no-tree -f on the kernel sources and the uapi header,
#      checkpatch.pl (+ spelling.txt, const_structs.checkpatch) taken from Debian's
#      /usr/src/linux-source-6.12.tar.xz into build/checkpatch (once).
# Logs: build/check/. Last line: "N passed, N failed"; exit status 1 on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/vm/lib.sh

C=$BELUGA_BUILD/check
rm -rf "$C"
mkdir -p "$C"
n=0 passed=0 failed=0
ok() {
	n=$((n + 1)) passed=$((passed + 1))
	echo "ok $n $1"
}
notok() {
	n=$((n + 1)) failed=$((failed + 1))
	echo "not ok $n $1"
	shift
	local l
	for l in "$@"; do echo "# $l"; done
}
comment() { sed 's/^/#   /'; }

# 1./2. the module
for mode in W C; do
	for k in 6.1 6.12; do
		kv=$(kver_of "$k")
		name="module-$k-$([ $mode = W ] && echo W=1 || echo C=1-sparse)"
		logf=$C/$name.log
		set +e
		scripts/vm/build-module.sh "-$mode" "$k" >"$logf" 2>&1
		rc=$?
		set -e
		case $rc in
		0) ok "$name ($kv)" ;;
		2)
			notok "$name" "warnings against $kv:"
			grep -E ': (warning|error):|^WARNING: ' "$logf" | sort -u | head -n 60 | comment
			;;
		*)
			notok "$name" "the build failed against $kv (log: $logf):"
			tail -n 30 "$logf" | comment
			;;
		esac
	done
done

# 2a. the single-host module (BELUGA_SHARED=n): W=1 (scripts/check-single-host.sh, which
#     also checks it has no shared-pool code), then C=1
kv=$(kver_of 6.12)
if scripts/check-single-host.sh "$kv" >"$C/module-6.12-single-host-W=1.log" 2>&1; then
	ok "module-6.12-single-host-W=1 ($kv)"
else
	notok "module-6.12-single-host-W=1" "scripts/check-single-host.sh $kv failed:"
	tail -n 30 "$C/module-6.12-single-host-W=1.log" | comment
fi
set +e
scripts/vm/build-module.sh -C -N 6.12 >"$C/module-6.12-single-host-C=1.log" 2>&1
rc=$?
set -e
case $rc in
0) ok "module-6.12-single-host-C=1-sparse ($kv)" ;;
*)
	notok "module-6.12-single-host-C=1-sparse" "BELUGA_SHARED=n sparse build against $kv (status $rc):"
	grep -E ': (warning|error):|^WARNING: ' "$C/module-6.12-single-host-C=1.log" | sort -u | head -n 60 | comment
	;;
esac

# 3. userspace, -Werror
if [ -f userspace/Makefile ]; then
	if make -C userspace >"$C/userspace.log" 2>&1; then
		if grep -qE ': warning:' "$C/userspace.log"; then
			notok "userspace-Werror" "warnings in the userspace build:"
			grep -E ': warning:' "$C/userspace.log" | head -n 40 | comment
		else
			ok "userspace-Werror"
		fi
	else
		notok "userspace-Werror" "make -C userspace failed (log: $C/userspace.log):"
		tail -n 30 "$C/userspace.log" | comment
	fi
else
	notok "userspace-Werror" "userspace/Makefile is missing: the userspace sources are not in this tree yet"
fi

# 4. checkpatch
cp_dir=$BELUGA_BUILD/checkpatch
tarball=/usr/src/linux-source-6.12.tar.xz
if [ ! -f "$cp_dir/.complete" ] || [ "$cp_dir/.complete" -ot "$tarball" ]; then
	if [ ! -f "$tarball" ]; then
		notok checkpatch "$tarball is missing: run scripts/install-deps.sh (installs linux-source-6.12)"
		cp_dir=
	else
		rm -rf "$cp_dir"
		mkdir -p "$cp_dir"
		# one pass over the archive (~15 s); the three files land in scripts/
		tar -xJf "$tarball" -C "$cp_dir" --strip-components=1 --wildcards \
			'*/scripts/checkpatch.pl' '*/scripts/spelling.txt' '*/scripts/const_structs.checkpatch'
		touch "$cp_dir/.complete"
	fi
fi
if [ -n "$cp_dir" ]; then
	command -v perl >/dev/null || die "perl not found (checkpatch.pl needs it): apt-get install perl"
	files=$(ls kmod/*.c kmod/*.h kmod/core/*.c kmod/core/*.h uapi/linux/beluga.h 2>/dev/null | grep -v '\.mod\.c$' || true)
	[ -n "$files" ] || notok checkpatch "no kernel sources found under kmod/"
	for f in $files; do
		set +e
		out=$(perl "$cp_dir/scripts/checkpatch.pl" --strict --no-tree --no-summary --terse -f "$f" 2>&1)
		rc=$?
		set -e
		if [ $rc -eq 0 ] && [ -z "$out" ]; then
			ok "checkpatch $f"
		else
			notok "checkpatch $f" "checkpatch.pl --strict:"
			echo "$out" | comment
		fi
	done
fi

echo "1..$n"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
