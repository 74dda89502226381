#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The top-level `make install` and `make install-dkms` into scratch DESTDIRs,
# as a packager runs them: everything lands under DESTDIR and PREFIX, and
# nothing outside DESTDIR changes on this host (the trees install could
# touch are listed with their mtimes before and after). Then build consumers
# the way an engine would: pkg-config, shared and static, C and C++. Also
# checks the shared library's ABI surface: the soname, and that it exports
# exactly the functions libbeluga.h declares.
#
# Usage: tests/userspace/test_install.sh USERSPACE_DIR   (prints TAP)
set -u

src=$(cd "${1:?usage: test_install.sh USERSPACE_DIR}" && pwd)
top=$(cd "$src/.." && pwd)
ver=$(cat "$top/VERSION")
tmp=$(mktemp -d /tmp/beluga-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
# shellcheck source=../lib/tap.sh
. "$(dirname "$0")/../lib/tap.sh"
check() { # check NAME CMD...: CMD succeeds
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then ok "$name"; else
		not_ok "$name"
		printf '%s\n' "$out" | sed 's/^/#   /' | head -10
	fi
}
installed() { # installed ROOT PATH...: each PATH exists under ROOT and is not empty
	local r=$1 f
	shift
	for f in "$@"; do
		if [ -s "$r/$f" ] || [ -L "$r/$f" ]; then ok "installed /$f"; else not_ok "installed /$f"; fi
	done
}

# What an install could write on this host, with mtimes: the DESTDIR runs
# below must leave every line as it was. Deep trees are listed only as deep
# as an install writes, so that a python3 writing its bytecode caches
# elsewhere in dist-packages does not count.
host_trees=("/usr/local" "/usr/src" "/etc" "/var/lib/dkms" "/lib/modules/$(uname -r)"
	"/usr/lib/systemd/system" "/usr/lib/sysusers.d" "/usr/lib/udev/rules.d" "/usr/lib/pkgconfig")
shallow_trees=("/usr/lib/python3/dist-packages" "/usr/include" "/usr/include/linux" "/usr/bin" "/usr/lib")
snapshot() {
	{
		find "${host_trees[@]}" -xdev -printf '%p %y %m %s %T@\n' 2>/dev/null
		find "${shallow_trees[@]}" -xdev -maxdepth 1 -printf '%p %y %m %s %T@\n' 2>/dev/null
	} | sort
}
snapshot >"$tmp/host-before"

# dkms, ldconfig and the group tools, replaced by stand-ins that only log:
# a DESTDIR install must call none of them.
mkdir -p "$tmp/stub"
for cmd in dkms ldconfig systemd-sysusers groupadd udevadm systemctl depmod modprobe; do
	printf '#!/bin/sh\necho "%s $*" >>"$STUB_LOG"\n' "$cmd" >"$tmp/stub/$cmd"
	chmod +x "$tmp/stub/$cmd"
done
# The installs see only the directories given here: none inherited from the
# environment or from a calling make's command line (MAKEFLAGS).
clean_env=(env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u DESTDIR -u PREFIX -u BINDIR -u LIBDIR
	-u INCLUDEDIR -u PKGCONFIGDIR -u SYSCONFDIR -u UNITDIR -u SYSUSERSDIR -u PYTHONDIR)
stubbed=("${clean_env[@]}" PATH="$tmp/stub:$PATH" STUB_LOG="$tmp/host-commands")

# PREFIX: everything under it (and the configuration under /etc).
opt=$tmp/opt-root
check "make install DESTDIR=... PREFIX=/opt/beluga" \
	"${stubbed[@]}" make -s -C "$top" install DESTDIR="$opt" PREFIX=/opt/beluga
installed "$opt" opt/beluga/lib/libbeluga.so.1 opt/beluga/include/libbeluga.h \
	opt/beluga/lib/pkgconfig/beluga.pc opt/beluga/bin/belugactl \
	opt/beluga/lib/systemd/system/beluga.service opt/beluga/lib/sysusers.d/beluga.conf
outside=$(cd "$opt" && find . -mindepth 1 -maxdepth 2 ! -path ./opt ! -path ./opt/beluga \
	! -path ./etc ! -path './etc/*' | sed 's|^\.||' | tr '\n' ' ')
if [ -z "$outside" ]; then
	ok "PREFIX=/opt/beluga: nothing outside /opt/beluga but the configuration in /etc"
else
	not_ok "PREFIX=/opt/beluga: nothing outside /opt/beluga but the configuration in /etc (also: $outside)"
fi
if grep -qx 'prefix=/opt/beluga' "$opt/opt/beluga/lib/pkgconfig/beluga.pc" 2>/dev/null; then
	ok "PREFIX=/opt/beluga: beluga.pc says prefix=/opt/beluga"
else
	not_ok "PREFIX=/opt/beluga: beluga.pc says prefix=/opt/beluga"
fi
if grep -qx 'ExecStart=/opt/beluga/bin/belugactl apply /etc/beluga.conf' \
	"$opt/opt/beluga/lib/systemd/system/beluga.service" 2>/dev/null; then
	ok "PREFIX=/opt/beluga: beluga.service runs /opt/beluga/bin/belugactl"
else
	not_ok "PREFIX=/opt/beluga: beluga.service runs /opt/beluga/bin/belugactl"
fi

# A package's tree: PREFIX=/usr, the server's files included.
check "make install DESTDIR=... PREFIX=/usr" \
	"${stubbed[@]}" make -s -C "$top" install DESTDIR="$root" PREFIX=/usr
installed "$root" usr/lib/libbeluga.so.1 usr/lib/libbeluga.so usr/lib/libbeluga.a usr/include/libbeluga.h \
	usr/include/linux/beluga.h usr/lib/pkgconfig/beluga.pc usr/bin/belugactl usr/bin/beluga-demo \
	usr/bin/beluga-watchdogd usr/bin/beluga-vm-fence usr/bin/beluga-setup \
	usr/lib/systemd/system/beluga.service etc/beluga.conf etc/modprobe.d/beluga.conf \
	etc/udev/rules.d/60-beluga.rules usr/lib/sysusers.d/beluga.conf
# The group the udev rule grants /dev/beluga to is the one sysusers.d creates.
rule_group=$(sed -n 's/.*GROUP="\([^"]*\)".*/\1/p' "$root/etc/udev/rules.d/60-beluga.rules" 2>/dev/null)
if [ -n "$rule_group" ] && grep -qE "^g[[:space:]]+$rule_group([[:space:]]|\$)" \
	"$root/usr/lib/sysusers.d/beluga.conf" 2>/dev/null; then
	ok "sysusers.d/beluga.conf creates the group the udev rule names ($rule_group)"
else
	not_ok "sysusers.d/beluga.conf creates the group the udev rule names ('$rule_group')"
fi

# DKMS, staged: the module's sources and dkms.conf under DESTDIR/usr/src.
check "make install-dkms DESTDIR=..." "${stubbed[@]}" make -s -C "$top" install-dkms DESTDIR="$root"
dkms_src=usr/src/beluga-$ver
installed "$root" "$dkms_src/dkms.conf" "$dkms_src/VERSION" "$dkms_src/kmod/Kbuild" \
	"$dkms_src/uapi/linux/beluga.h" "$dkms_src/LICENSES/preferred/GPL-2.0"
if grep -qx "PACKAGE_VERSION=\"$ver\"" "$root/$dkms_src/dkms.conf" 2>/dev/null; then
	ok "the staged dkms.conf names version $ver"
else
	not_ok "the staged dkms.conf names version $ver"
fi
# The module's sources as git knows them (a tarball: as find sees them).
module_src=$(cd "$top" && { git ls-files kmod uapi 2>/dev/null ||
	find kmod uapi -type f ! -name '*.mod.c'; } | grep -E '(\.[ch]|/Kbuild|/Makefile)$')
missing_src=$(while read -r f; do [ -f "$root/$dkms_src/$f" ] || echo "$f"; done <<<"$module_src" | tr '\n' ' ')
if [ "$(wc -l <<<"$module_src")" -lt 10 ]; then
	not_ok "the staged DKMS tree holds every source of kmod/ and uapi/ (found only '$module_src' in $top)"
elif [ -z "$missing_src" ]; then
	ok "the staged DKMS tree holds every source of kmod/ and uapi/"
else
	not_ok "the staged DKMS tree holds every source of kmod/ and uapi/ (missing: $missing_src)"
fi

# Without DESTDIR the install is the live system's: as root it refreshes the
# loader's cache and creates the group (here into a scratch PREFIX and
# SYSCONFDIR, the commands stubbed); as a user it says what root must run.
live=$tmp/live
out=$("${clean_env[@]}" PATH="$tmp/stub:$PATH" STUB_LOG="$tmp/live-commands" \
	make -s -C "$top" install PREFIX="$live" SYSCONFDIR="$live/etc" 2>&1)
rc=$?
if [ "$(id -u)" -eq 0 ]; then
	want="ldconfig ;systemd-sysusers $live/lib/sysusers.d/beluga.conf;"
	got=$(tr '\n' ';' <"$tmp/live-commands" 2>/dev/null)
	if [ $rc -eq 0 ] && [ "$got" = "$want" ]; then
		ok "make install without DESTDIR, as root, runs ldconfig and systemd-sysusers"
	else
		not_ok "make install without DESTDIR, as root, runs ldconfig and systemd-sysusers (exit $rc, ran: '$got')"
		printf '%s\n' "$out" | tail -5 | sed 's/^/#   /'
	fi
else
	if [ $rc -eq 0 ] && [ ! -s "$tmp/live-commands" ] && grep -q 'as root.*ldconfig' <<<"$out"; then
		ok "make install without DESTDIR, as a user, runs nothing and says what root must run"
	else
		not_ok "make install without DESTDIR, as a user, runs nothing and says what root must run (exit $rc)"
		printf '%s\n' "$out" | tail -5 | sed 's/^/#   /'
	fi
fi
if grep -qx "ConditionPathExists=$live/etc/beluga.conf" "$live/lib/systemd/system/beluga.service" 2>/dev/null; then
	ok "SYSCONFDIR: beluga.service reads beluga.conf from it"
else
	not_ok "SYSCONFDIR: beluga.service reads beluga.conf from it"
fi

# Nothing ran against this host, and nothing on it changed.
if [ -s "$tmp/host-commands" ]; then
	not_ok "DESTDIR installs run no host command (ran: $(tr '\n' ';' <"$tmp/host-commands"))"
else
	ok "DESTDIR installs run no host command (dkms, ldconfig, systemd-sysusers, groupadd, ...)"
fi
snapshot >"$tmp/host-after"
if cmp -s "$tmp/host-before" "$tmp/host-after"; then
	ok "DESTDIR installs leave the host as it was (${#host_trees[@]} trees and ${#shallow_trees[@]} directories compared)"
else
	not_ok "DESTDIR installs leave the host as it was; changed:"
	diff "$tmp/host-before" "$tmp/host-after" | grep '^[<>]' | head -20 | sed 's/^/#   /'
fi
if cmp -s "$root/usr/include/linux/beluga.h" "$src/../uapi/linux/beluga.h"; then
	ok "the installed <linux/beluga.h> is the uapi header"
else
	not_ok "the installed <linux/beluga.h> is the uapi header"
fi
soname=$(readelf -d "$root/usr/lib/libbeluga.so.1" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
if [ "$soname" = libbeluga.so.1 ]; then ok "soname is libbeluga.so.1"; else not_ok "soname is libbeluga.so.1 (got '$soname')"; fi

# Exported functions == functions declared in the public header.
declared=$(grep -oE '\bbeluga_[a-z0-9_]+\(' "$src/include/libbeluga.h" | tr -d '(' | sort -u)
exported=$(nm -D --defined-only "$root/usr/lib/libbeluga.so.1" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' | sort -u)
if [ "$declared" = "$exported" ]; then
	ok "libbeluga.so exports exactly the functions of libbeluga.h ($(wc -l <<<"$exported"))"
else
	not_ok "libbeluga.so exports exactly the functions of libbeluga.h"
	diff <(echo "$declared") <(echo "$exported") | sed 's/^/#   /'
fi

# beluga_hosts() grew its records: programs built against 1.1 keep their symbol.
versions=$(nm -D --defined-only "$root/usr/lib/libbeluga.so.1" | awk '$3 ~ /^beluga_hosts@/ { print $3 }' | sort | tr '\n' ' ')
if [ "$versions" = "beluga_hosts@@LIBBELUGA_1.2 beluga_hosts@LIBBELUGA_1 " ]; then
	ok "beluga_hosts is versioned: LIBBELUGA_1.2 by default, LIBBELUGA_1 for 1.1's programs"
else
	not_ok "beluga_hosts is versioned: LIBBELUGA_1.2 by default, LIBBELUGA_1 for 1.1's programs (got: $versions)"
fi

# The Python package, where Debian's python3 looks for PREFIX=/usr.
pydir=usr/lib/python3/dist-packages
ext=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
if [ -z "$ext" ]; then
	skip "the Python package" "/usr/bin/python3 not installed"
else
	for f in "$pydir/beluga/__init__.py" "$pydir/beluga/_beluga$ext"; do
		if [ -e "$root/$f" ]; then ok "installed $f"; else not_ok "installed $f"; fi
	done
	check "/$pydir is on /usr/bin/python3's sys.path" \
		/usr/bin/python3 -c "import sys; sys.exit('/$pydir' not in sys.path)"
	check "the installed package imports and hashes like libbeluga" \
		env PYTHONPATH="$root/$pydir" /usr/bin/python3 -c "import beluga, sys
sys.exit(beluga.FAKE_KERNEL or beluga.__file__ != '$root/$pydir/beluga/__init__.py' or
	 beluga.hash_chain([1, 2, 3, 4], 4)[::-1].hex() != 'a2bf8a25c5590ba78943ede6c6c5e9bd')"
	if readelf -d "$root/$pydir/beluga/_beluga$ext" | grep -q 'NEEDED.*libbeluga'; then
		not_ok "the extension links libbeluga statically (no libbeluga.so dependency)"
	else
		ok "the extension links libbeluga statically (no libbeluga.so dependency)"
	fi
fi

cat >"$tmp/consumer.c" <<'C'
#include <libbeluga.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	uint32_t tokens[4] = { 1, 2, 3, 4 };
	struct beluga_key key;
	char hex[33];

	if (beluga_hash_chain(NULL, tokens, 4, 4, &key, 1) != 1)
		return 1;
	snprintf(hex, sizeof(hex), "%016llx%016llx", (unsigned long long)key.hi,
		 (unsigned long long)key.lo);
	return strcmp(hex, "a2bf8a25c5590ba78943ede6c6c5e9bd") != 0;
}
C
export PKG_CONFIG_SYSROOT_DIR=$root PKG_CONFIG_LIBDIR=$root/usr/lib/pkgconfig
if ! command -v pkg-config >/dev/null 2>&1; then
	skip "consumers built with pkg-config" "pkg-config not installed"
else
	# shellcheck disable=SC2046
	check "a C consumer builds with pkg-config against the shared library" \
		cc -std=c11 -Wall -Wextra -Werror "$tmp/consumer.c" $(pkg-config --cflags --libs beluga) \
		-Wl,-rpath,"$root/usr/lib" -o "$tmp/consumer-shared"
	check "the shared consumer runs and gets the published hash vector" "$tmp/consumer-shared"
	# shellcheck disable=SC2046
	check "a C consumer links libbeluga.a (pkg-config --static)" \
		cc -std=c11 -Wall -Wextra -Werror "$tmp/consumer.c" $(pkg-config --cflags beluga) \
		"$root/usr/lib/libbeluga.a" $(pkg-config --static --libs-only-l beluga | sed 's/-lbeluga//') \
		-o "$tmp/consumer-static"
	check "the static consumer runs" "$tmp/consumer-static"
	if command -v c++ >/dev/null 2>&1; then
		# shellcheck disable=SC2046
		check "libbeluga.h compiles as C++" c++ -x c++ -Wall -Wextra -Werror -fsyntax-only \
			$(pkg-config --cflags beluga) "$tmp/consumer.c"
	fi
fi

if grep -qx 'ExecStart=/usr/bin/belugactl apply /etc/beluga.conf' \
	"$root/usr/lib/systemd/system/beluga.service" 2>/dev/null; then
	ok "beluga.service runs belugactl from BINDIR"
else
	not_ok "beluga.service runs belugactl from BINDIR"
fi
if grep -qx 'ExecStart=/usr/bin/beluga-watchdogd --foreground $BELUGA_WATCHDOGD_OPTS' \
	"$root/usr/lib/systemd/system/beluga-watchdogd.service" 2>/dev/null &&
	grep -qx 'EnvironmentFile=-/etc/default/beluga-watchdogd' \
		"$root/usr/lib/systemd/system/beluga-watchdogd.service"; then
	ok "beluga-watchdogd.service runs the daemon from BINDIR, options from SYSCONFDIR/default"
else
	not_ok "beluga-watchdogd.service runs the daemon from BINDIR, options from SYSCONFDIR/default"
fi
# The modprobe.d example loads nothing by itself, and explains every load-time
# parameter of the module (every module parameter is one: the test-only heartbeat
# stall is a debugfs fault attribute).
modprobe_conf=$root/etc/modprobe.d/beluga.conf
if [ -s "$modprobe_conf" ] && ! grep -qv '^\(#.*\)\?$' "$modprobe_conf"; then
	ok "modprobe.d/beluga.conf has only comments"
else
	not_ok "modprobe.d/beluga.conf has only comments"
fi
params=$(sed -n 's/^module_param(\([a-z_]*\),.*/\1/p; s/^module_param_named(\([a-z_]*\),.*/\1/p' \
	"$src"/../kmod/*.c | sort -u)
missing=
for p in $params; do
	grep -q "^#   $p=" "$modprobe_conf" 2>/dev/null || missing="$missing $p"
done
if [ -n "$params" ] && [ -z "$missing" ]; then
	ok "modprobe.d/beluga.conf explains every module parameter ($(echo $params))"
else
	not_ok "modprobe.d/beluga.conf explains every module parameter (missing:${missing:- none found})"
fi

tap_done
