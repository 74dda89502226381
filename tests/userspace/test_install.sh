#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# `make install` into a scratch DESTDIR, then build consumers the way an
# engine would: pkg-config, shared and static, C and C++. Also checks the
# shared library's ABI surface: the soname, and that it exports exactly the
# functions libbeluga.h declares.
#
# Usage: tests/userspace/test_install.sh USERSPACE_DIR   (prints TAP)
set -u

src=$(cd "${1:?usage: test_install.sh USERSPACE_DIR}" && pwd)
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

check "make install DESTDIR=... PREFIX=/usr" make -s -C "$src" install DESTDIR="$root" PREFIX=/usr
for f in usr/lib/libbeluga.so.1 usr/lib/libbeluga.so usr/lib/libbeluga.a usr/include/libbeluga.h \
	usr/include/linux/beluga.h usr/lib/pkgconfig/beluga.pc usr/bin/belugactl usr/bin/beluga-demo; do
	if [ -e "$root/$f" ]; then ok "installed $f"; else not_ok "installed $f"; fi
done
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

# The boot-time files (packaging/), as a package would install them.
check "make install-systemd DESTDIR=... PREFIX=/usr" \
	make -s -C "$src" install-systemd DESTDIR="$root" PREFIX=/usr
for f in usr/lib/systemd/system/beluga.service etc/beluga.conf etc/modprobe.d/beluga.conf \
	etc/udev/rules.d/60-beluga.rules; do
	if [ -s "$root/$f" ]; then ok "installed $f"; else not_ok "installed $f"; fi
done
if grep -qx 'ExecStart=/usr/bin/belugactl apply /etc/beluga.conf' \
	"$root/usr/lib/systemd/system/beluga.service" 2>/dev/null; then
	ok "beluga.service runs belugactl from BINDIR"
else
	not_ok "beluga.service runs belugactl from BINDIR"
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
