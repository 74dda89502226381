#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The project's one VERSION file and everything it names agree: the library
# (beluga_version.h, beluga.pc), belugactl --version, the Python package's
# __version__ and the dkms.conf that scripts/dkms-install.sh installs. (The
# module's MODULE_VERSION() is checked on a built beluga.ko by scripts/test.sh.)
#
# Usage: tests/userspace/test_version.sh CHECK_BUILD_DIR   (prints TAP)
set -u

dir=$(cd "${1:?usage: test_version.sh CHECK_BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
us=$top/userspace
# shellcheck source=../lib/tap.sh
. "$(dirname "$0")/../lib/tap.sh"
same() { # same NAME WANT GOT
	if [ "$2" = "$3" ]; then ok "$1"; else not_ok "$1 (VERSION says '$2', got '$3')"; fi
}

ver=$(cat "$top/VERSION")
if [[ $ver =~ ^([0-9]+)\.([0-9]+)\.[0-9]+$ ]]; then
	ok "VERSION is MAJOR.MINOR.PATCH ($ver)"
else
	not_ok "VERSION is MAJOR.MINOR.PATCH (got '$ver')"
fi
major=${BASH_REMATCH[1]:-} minor=${BASH_REMATCH[2]:-}

hdr=$us/build/include/beluga_version.h
same "beluga_version.h: LIBBELUGA_VERSION" "\"$ver\"" \
	"$(sed -n 's/^#define LIBBELUGA_VERSION \(.*\)$/\1/p' "$hdr")"
same "beluga_version.h: major.minor" "$major.$minor" \
	"$(sed -n 's/^#define LIBBELUGA_VERSION_MAJOR \(.*\)$/\1/p' "$hdr").$(sed -n 's/^#define LIBBELUGA_VERSION_MINOR \(.*\)$/\1/p' "$hdr")"
same "beluga.pc: Version" "$ver" "$(sed -n 's/^Version: //p' "$us/build/beluga.pc")"
same "belugactl --version" "belugactl $ver" "$("$dir/belugactl" --version | cut -d' ' -f1-2)"
same "python: beluga.__version__" "$ver" \
	"$(PYTHONPATH="$us/build/python-fake" /usr/bin/python3 -c 'import beluga; print(beluga.__version__)' 2>&1)"
same "dkms.conf: PACKAGE_VERSION" "\"$ver\"" \
	"$("$top/scripts/dkms-install.sh" -n | sed -n 's/^PACKAGE_VERSION=//p')"
same "kmod/Kbuild: MODULE_VERSION from VERSION" 1 \
	"$(grep -c 'shell cat \$(src)/\.\./VERSION' "$top/kmod/Kbuild")"
tap_done
