#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Install everything Beluga's build, tests, demo and benchmarks need on a
# Debian 12 (bookworm) machine, from Debian's own archive only:
#   - bookworm: compiler, kernel headers for 6.1, busybox, sparse, dkms, ...,
#     stress-ng and trinity (the debug lane copies them into its guest);
#   - bookworm-backports: QEMU 10 (volatile CXL memory) and Linux 6.12.
# Idempotent: a second run only checks that everything is present.
# Any other system is refused before anything is changed (it would get a
# Debian apt source): Documentation/install.md has the manual path.
#   --check-system   only say whether this system is supported (exit 0 or 1)
set -euo pipefail

# BELUGA_OS_RELEASE: another os-release file, for the tests only.
os_release=${BELUGA_OS_RELEASE:-/etc/os-release}
check_only=0
case ${1:-} in
--check-system) check_only=1 ;;
"") ;;
*)
	echo "install-deps: unknown argument '$1' (usage: install-deps.sh [--check-system])" >&2
	exit 2
	;;
esac

# os_field NAME: NAME's value in the os-release file (sourced in a subshell,
# as os-release(5) allows)
os_field() {
	(
		set +u
		# shellcheck disable=SC1090
		. "$os_release" && printf '%s' "${!1:-}"
	)
}
if [ ! -r "$os_release" ]; then
	echo "install-deps: cannot read $os_release, so cannot tell whether this is Debian 12 (bookworm)," \
		"the only system this script supports. Elsewhere install the dependencies by hand:" \
		"Documentation/install.md" >&2
	exit 1
fi
os_id=$(os_field ID) os_version=$(os_field VERSION_ID)
if [ "$os_id" != debian ] || [ "$os_version" != 12 ]; then
	echo "install-deps: this is $(os_field PRETTY_NAME) (ID=$os_id VERSION_ID=$os_version in $os_release);" \
		"this script supports Debian 12 (bookworm) only: it would add Debian's bookworm-backports apt" \
		"source and install Debian's kernels. Nothing was changed. Install the dependencies by hand" \
		"as Documentation/install.md describes (Ubuntu 22.04 and 24.04, other distributions;" \
		"signing the module for Secure Boot)." >&2
	exit 1
fi
if [ $check_only -eq 1 ]; then
	echo "install-deps: $(os_field PRETTY_NAME): supported"
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: must run as root (apt-get); re-run with sudo" >&2
	exit 1
fi

stamp_dir=${BELUGA_CACHE:-/var/cache/beluga}
mkdir -p "$stamp_dir"

export DEBIAN_FRONTEND=noninteractive

bpo=/etc/apt/sources.list.d/beluga-bookworm-backports.sources
if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
	mirror=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | grep -oE "https?://[^ ]+/debian/?$" | head -n1 || true)
	mirror=${mirror:-http://deb.debian.org/debian}
	cat >"$bpo" <<EOT
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOT
fi

# The 6.12 ABI name moves with Debian's backports; pick what the archive has.
need_update=1
if [ -f "$stamp_dir/apt-updated" ] && [ -n "$(find "$stamp_dir/apt-updated" -mmin -720 2>/dev/null)" ]; then
	need_update=0
fi
if [ $need_update -eq 1 ]; then
	apt-get update -q
	touch "$stamp_dir/apt-updated"
fi

kver_612=$(apt-cache search --names-only '^linux-headers-6\.12\.[0-9.+a-z]*-amd64$' |
	awk '{print $1}' | sed 's/^linux-headers-//' | sort -V | tail -n1)
kver_61=$(apt-cache search --names-only '^linux-headers-6\.1\.0-[0-9]+-amd64$' |
	awk '{print $1}' | sed 's/^linux-headers-//' | sort -V | tail -n1)
if [ -z "$kver_612" ] || [ -z "$kver_61" ]; then
	echo "install-deps: could not find linux-headers for 6.1 and 6.12 in the archive" >&2
	echo "install-deps: check that bookworm and bookworm-backports are reachable" >&2
	exit 1
fi

pkgs=(
	build-essential make gcc pkg-config git
	sparse dkms kmod cpio xz-utils zstd busybox-static perl stress-ng trinity
	flex bison bc libelf-dev libssl-dev
	liburing-dev ndctl daxctl
	liburcu-dev
	gnuplot-nox graphviz
	# the bench's counted cache misses (bench/scale-misses.sh)
	valgrind
	man-db groff-base
	python3 python3-dev python3-numpy python3-pytest python3-hypothesis python3-yaml
	python3-venv
	iproute2
	# systemd-udevd and udevadm (systemd-sysusers comes with systemd), useradd: the
	# 6.12 guest's install stage runs the host's (scripts/vm/guest-install.sh)
	udev passwd
	redis-server
	"linux-headers-$kver_61"
	"linux-headers-$kver_612"
)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# QEMU >= 8 is needed for volatile CXL memory: take it from backports.
if ! dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null | grep -qE '^1:(8|9|1[0-9])'; then
	apt-get install -y -q --no-install-recommends -t bookworm-backports qemu-system-x86
fi
# The 6.12 source ships kselftest_harness.h; only two headers are extracted.
if ! dpkg-query -W -f='${Status}' linux-source-6.12 2>/dev/null | grep -q 'install ok installed'; then
	apt-get install -y -q --no-install-recommends -t bookworm-backports linux-source-6.12 ||
		apt-get install -y -q --no-install-recommends linux-source-6.12
fi

printf '%s\n' "$kver_61" >"$stamp_dir/kver-6.1"
printf '%s\n' "$kver_612" >"$stamp_dir/kver-6.12"
echo "install-deps: ok (guest kernels $kver_61 and $kver_612)"
