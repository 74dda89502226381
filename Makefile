# SPDX-License-Identifier: GPL-2.0
#
# Beluga top-level build.
#   make                 module for the running kernel (or KDIR=...) + userspace
#   make module KDIR=... only the module
#   make userspace       libbeluga, belugactl, demo
#   make install         libbeluga, headers, pkg-config, tools, the Python
#                        package, and the server's files: systemd unit,
#                        /etc/beluga.conf, modprobe.d, udev rule, sysusers.d
#                        (PREFIX=/usr/local; DESTDIR= stages a tree and touches
#                        nothing else on this host)
#   make install-dkms    the module's sources to /usr/src/beluga-VERSION, then
#                        dkms add/build/install for the running kernel; with
#                        DESTDIR=, only the sources, staged for a package
#   make test            everything, in QEMU guests; ends with "N passed, N failed"
#   make demo            a QEMU CXL guest serving a prefix-reuse workload
#   make try             the README's Python quick start over the fake kernel:
#                        seconds, no root, no CXL, no module
#   make check           W=1 and sparse (C=1) builds against 6.1 and 6.12, checkpatch
#   make bench           benchmarks with their baselines (table + JSON + plots)
#   make test-debug      the in-guest suite on a KASAN/lockdep/kmemleak kernel
#                        (also a stage of make test)
#   make fuzz            a long ioctl fuzzer run on that kernel (~25 min)
#   make core-fuzz       libFuzzer on the portable core, on the host (clang;
#                        CORE_FUZZ_SECS=60)
KDIR ?= /lib/modules/$(shell uname -r)/build
PREFIX ?= /usr/local
DESTDIR ?=

all: module userspace

module:
	@if [ -d "$(KDIR)" ]; then \
		$(MAKE) -C kmod KDIR=$(KDIR); \
	else \
		echo "module: no kernel build tree at $(KDIR);" \
		     "install linux-headers-$$(uname -r) or pass KDIR=/lib/modules/VER/build" >&2; \
		exit 1; \
	fi

userspace:
	$(MAKE) -C userspace

install: userspace
	$(MAKE) -C userspace install install-systemd PREFIX=$(PREFIX) DESTDIR=$(DESTDIR)

install-dkms:
	DESTDIR=$(DESTDIR) scripts/dkms-install.sh

test:
	scripts/test.sh

demo:
	scripts/demo.sh

try:
	scripts/try.sh

check:
	scripts/check.sh

bench:
	scripts/bench.sh

test-debug:
	scripts/test-debug.sh

fuzz:
	$(MAKE) -C tests/fuzz long

core-fuzz:
	$(MAKE) -C tests/fuzz core-fuzz-run

clean:
	-$(MAKE) -C kmod clean KDIR=$(KDIR) 2>/dev/null
	-$(MAKE) -C userspace clean
	-$(MAKE) -C tests/unit clean
	-$(MAKE) -C tests/kselftest clean
	rm -rf build

.PHONY: all module userspace install install-dkms test demo try check bench test-debug fuzz core-fuzz clean
