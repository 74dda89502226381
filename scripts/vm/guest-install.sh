# shellcheck shell=sh
# SPDX-License-Identifier: GPL-2.0
# The server-install stage of the in-guest suite (busybox ash), installed in the
# initramfs as /etc/beluga/install.sh and run by tests/vm/guest-tests.sh after the
# Python stage when the kernel command line has beluga_hostroot=REPO
# (scripts/vm/run-guest.sh -P REPO; make test does this in the 6.12 guest).
#
# It does what the README's "Installing on a CXL server" tells an operator, on a
# copy of the host's root that nothing can write through to the host:
#   - an overlay of the host's root (the read-only 9p share at /host that
#     guest-python.sh mounts) with a tmpfs as its upper layer, the guest's /proc,
#     /sys and /dev bound in, and a fresh tmpfs on /run and /tmp;
#   - chrooted there, as root, from the checkout: `make install` (PREFIX as the
#     README's recipe leaves it, /usr/local), which also runs ldconfig and
#     systemd-sysusers (the beluga group) because it installs to the live system;
#     the installed files are checked in the tmpfs upper layer, ldconfig's cache,
#     the group, and `man -w belugactl`;
#   - `make install-dkms` is not run: /init has loaded this tree's beluga.ko
#     already (the guest kernel has no headers to build against); the unit's
#     `modprobe beluga` is run with the guest's own modprobe, which finds it loaded;
#   - Debian's systemd-udevd from the chroot, then the README's
#     `udevadm control --reload` and `udevadm trigger /sys/class/misc/beluga`
#     (with SYSTEMD_IGNORE_CHROOT=1: udevadm ignores requests in a chroot):
#     /dev/beluga (reset to the module's 0600 root:root first) must become
#     root:beluga 0660, and udevd's log must name the installed rule;
#   - useradd for two unprivileged users; the README's `usermod -aG beluga` for one;
#   - beluga-setup (lists the guest's dax devices), the operator's edit of
#     /etc/beluga.conf (`dax = DEV`), `systemctl daemon-reload` and
#     `systemctl enable beluga` (the README's --now cannot start anything in a
#     chroot: there is no systemd as PID 1), then the enabled unit's ExecStart=
#     lines as systemd would run them: `belugactl apply /etc/beluga.conf`
#     attaches the first test dax device;
#   - the README's Python quick start, taken from README.md as it stands, run with
#     Debian's python3 -I (no PYTHONPATH, no checkout on sys.path: the installed
#     package) as the group's member (setpriv: its own uid and groups, no
#     capabilities): it must print what the README says; as the other user it must
#     fail with beluga.PermissionDenied naming /dev/beluga;
#   - the region detached again (--evict), /dev/beluga back to 0600 root:root,
#     everything unmounted.
# One TAP result per step, KERNEL:install:STEP. Under TCG on 2 cores it takes
# about 90 s (up to 3 minutes while other guests share the cores): most of it
# the attach, which zeroes 256 MiB of emulated CXL memory (about 40 s), make
# install (10-40 s: it only checks that the tree is built, which `make test`
# does on the host first) and two Python starts with numpy (about 14 s).
# Needs /etc/beluga/lib.sh, /etc/beluga/env and /etc/beluga/python.sh loaded
# (py_mount, PY_ROOT, py_repo).

IN_RW=/run/beluga-install
IN_ROOT=/mnt/beluga-install
IN_TIMEOUT=${IN_TIMEOUT:-900}
# the two users of the test, created in the chroot (host names are not touched)
IN_MEMBER=kvengine
IN_OUTSIDER=kvoutsider

# in_chroot CMD...: CMD as root in the overlay, with a clean environment
in_chroot() {
	timeout "$IN_TIMEOUT" chroot "$IN_ROOT" /usr/bin/env -i \
		PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root LANG=C.UTF-8 TERM=dumb "$@"
}

# in_as USER CMD...: CMD in the overlay as USER, with USER's uid, primary group
# and supplementary groups (initgroups), and no capabilities (setuid from root
# to a non-zero uid drops them all)
in_as() {
	_u=$1
	shift
	timeout "$IN_TIMEOUT" chroot "$IN_ROOT" /usr/bin/setpriv --reuid="$_u" --regid="$_u" --init-groups \
		/usr/bin/env -i -C /tmp PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 "$@"
}

# in_comment FILE [N]: the last N lines of FILE as TAP comments
in_comment() {
	tail -n "${2:-40}" "$1" | sed 's/^/#   /'
}

# in_mount: the overlay, its kernel filesystems and its tmpfs mounts
in_mount() {
	if ! grep -q " $PY_ROOT 9p " /proc/mounts; then
		py_mount || return 1
	fi
	load overlay
	mkdir -p $IN_RW $IN_ROOT
	mount -t tmpfs -o size=384m,mode=0755 beluga-install $IN_RW || return 1
	mkdir -p $IN_RW/upper $IN_RW/work $IN_RW/log
	mount -t overlay -o lowerdir="$PY_ROOT",upperdir=$IN_RW/upper,workdir=$IN_RW/work \
		beluga-install $IN_ROOT || { echo "# mounting the overlay on $PY_ROOT failed"; return 1; }
	for _d in proc sys dev; do
		mount -o rbind /$_d $IN_ROOT/$_d || { echo "# binding /$_d into $IN_ROOT failed"; return 1; }
	done
	mount -t tmpfs -o mode=0755 tmpfs $IN_ROOT/run || return 1
	# /tmp is the overlay's (on the upper tmpfs) where the checkout lives under it
	case $py_repo/ in
	/tmp/*) ;;
	*) mount -t tmpfs -o mode=1777 tmpfs $IN_ROOT/tmp || return 1 ;;
	esac
}

in_umount() {
	for _m in tmp run dev sys proc; do
		grep -q " $IN_ROOT/$_m " /proc/mounts && umount -l $IN_ROOT/$_m
	done
	grep -q " $IN_ROOT " /proc/mounts && umount -l $IN_ROOT
	grep -q " $IN_RW " /proc/mounts && umount -l $IN_RW
}

# in_quickstart USER OUT ERR: the README's quick start as USER, its stdout in
# OUT and stderr in ERR (guest files, outside the overlay); prints the exit status.
# The wrapper says who ran it and which beluga it imported, on stderr.
in_quickstart() {
	in_as "$1" /usr/bin/python3 -I -c '
import grp, os, sys
import beluga
sys.stderr.write("uid %d, groups %s, beluga from %s\n" % (
    os.getuid(), " ".join(sorted(grp.getgrgid(g).gr_name for g in os.getgroups())),
    os.path.dirname(beluga.__file__)))
path = sys.argv[1]
exec(compile(open(path).read(), "README.md quick start", "exec"), {"__name__": "__main__"})
' /tmp/quickstart.py >"$2" 2>"$3" </dev/null
	echo $?
}

install_stage() {
	_t0=$(cut -d' ' -f1 /proc/uptime)
	if [ -z "$py_repo" ]; then
		tap_fail install:overlay "no beluga_hostroot=REPO on the kernel command line (run-guest.sh -P REPO)"
		return 1
	fi
	# shellcheck disable=SC2086 # a list of words
	set -- $BELUGA_TEST_DAX
	_dax=$1
	if [ -z "$_dax" ]; then
		tap_fail install:overlay "no test dax device (BELUGA_TEST_DAX is empty: see the setup results)"
		return 1
	fi

	# 1. the overlay: all writes go to a tmpfs, none to the host
	if ! _out=$(in_mount 2>&1); then
		tap_fail install:overlay "an overlay of the host's root on $IN_ROOT failed" "$_out"
		in_umount
		return 1
	fi
	[ -n "$_out" ] && echo "$_out" | sed 's/^/# /'
	echo "# overlay: lower $PY_ROOT (the host's root, 9p, read-only), upper a tmpfs at $IN_RW/upper"
	tap_ok install:overlay
	_ret=0
	install_steps || _ret=1
	in_umount
	echo "# install stage: $(awk -v a="$_t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.0f", b - a }') s"
	return $_ret
}

# install_steps: steps 2.. (a failure that leaves later steps meaningless returns)
install_steps() {
	_log=$IN_RW/log
	_up=$IN_RW/upper

	# 2. make install, as root, from the checkout
	echo "# make install (as root in $IN_ROOT, from $py_repo; its output is in the console log)"
	{
		in_chroot env -C "$py_repo" make install </dev/null
		echo $? >$_log/make.rc
	} 2>&1 | tee $_log/make.log >/dev/console
	_rc=$(cat $_log/make.rc)
	if [ "$_rc" -ne 0 ]; then
		tap_fail install:make-install "'make install' exited with status $_rc; its last lines:"
		in_comment $_log/make.log
		return 1
	fi
	# it installs to the live system, so it ran these (userspace/Makefile's on_live_system)
	_miss=
	grep -q '^ldconfig$' $_log/make.log || _miss="$_miss ldconfig"
	grep -q '^systemd-sysusers ' $_log/make.log || _miss="$_miss systemd-sysusers"
	if [ -n "$_miss" ]; then
		tap_fail install:make-install "make install did not run:$_miss (as root, without DESTDIR, it should); its last lines:"
		in_comment $_log/make.log 20
		return 1
	fi
	tap_ok install:make-install

	# 3. what the README says it installs, each written now (in the tmpfs upper layer)
	_pydir=$(cd $_up && find usr/local/lib -maxdepth 3 -path 'usr/local/lib/python3*/dist-packages/beluga' 2>/dev/null | head -n 1)
	_missing=
	for _f in usr/local/bin/belugactl usr/local/bin/beluga-demo usr/local/bin/beluga-setup \
		usr/local/lib/libbeluga.so.1 usr/local/lib/libbeluga.a usr/local/lib/pkgconfig/beluga.pc \
		usr/local/include/libbeluga.h usr/local/include/linux/beluga.h \
		usr/local/share/man/man8/belugactl.8 usr/local/share/man/man3/libbeluga.3 \
		usr/local/share/man/man5/beluga.conf.5 \
		usr/local/share/bash-completion/completions/belugactl \
		usr/local/lib/systemd/system/beluga.service usr/local/lib/sysusers.d/beluga.conf \
		etc/beluga.conf etc/modprobe.d/beluga.conf etc/udev/rules.d/60-beluga.rules \
		"${_pydir:-usr/local/lib/python3.X/dist-packages/beluga}/__init__.py"; do
		[ -e "$_up/$_f" ] || [ -L "$_up/$_f" ] || _missing="$_missing /$_f"
	done
	# (/usr/local/man is a link to share/man on Debian: man may name either)
	_man=$(in_chroot man -w belugactl 2>&1)
	_manr=$(in_chroot readlink -f "$_man" 2>/dev/null)
	if [ -n "$_missing" ]; then
		tap_fail install:files "not installed (absent from the overlay's upper layer):$_missing"
	elif [ "$_manr" != /usr/local/share/man/man8/belugactl.8 ]; then
		tap_fail install:files "'man -w belugactl' gives '$_man', not /usr/local/share/man/man8/belugactl.8"
	else
		echo "# $(cd $_up && find usr/local etc -type f | wc -l) files written under /usr/local and /etc (the upper layer); the package at /$_pydir"
		tap_ok install:files
	fi

	# 4. nothing reached the host: the share is read-only, so every write above
	# landed in the tmpfs (checked in step 3)
	_opts=$(awk -v m="$PY_ROOT" '$2 == m && $3 == "9p" { print $4 }' /proc/mounts)
	if touch "$PY_ROOT"/.beluga-install-probe 2>/dev/null; then
		rm -f "$PY_ROOT"/.beluga-install-probe
		tap_fail install:host-untouched "$PY_ROOT (the host's root) is writable from the guest: the 9p share must be read-only"
	else
		case ,$_opts, in
		*,ro,*)
			echo "# $PY_ROOT is mounted ro ($_opts) on a read-only QEMU export; a write there fails"
			tap_ok install:host-untouched
			;;
		*) tap_fail install:host-untouched "$PY_ROOT is not mounted read-only: '$_opts'" ;;
		esac
	fi

	# 5. ldconfig's cache has the library
	_ld=$(in_chroot ldconfig -p 2>&1 | grep 'libbeluga\.so\.1 ')
	case $_ld in
	*"=> /usr/local/lib/libbeluga.so.1") echo "# ldconfig -p: $(echo "$_ld" | sed 's/^[[:space:]]*//')"; tap_ok install:ldconfig ;;
	*) tap_fail install:ldconfig "ldconfig -p does not list /usr/local/lib/libbeluga.so.1 (found: '${_ld:-nothing}')" ;;
	esac

	# 6. the group systemd-sysusers made
	_gid=$(in_chroot getent group beluga | cut -d: -f3)
	if [ -z "$_gid" ]; then
		tap_fail install:group "no beluga group in the chroot after make install (systemd-sysusers)"
		return 1
	fi
	if grep -q '^beluga:' "$PY_ROOT"/etc/group; then
		echo "# the host's /etc/group has a beluga group already; make install kept it (gid $_gid)"
	else
		echo "# beluga group: gid $_gid, made by make install (the host has none)"
	fi
	tap_ok install:group

	# 7. the udev rule, applied by systemd-udevd as the README says
	install_udev "$_gid" || return 1

	# 8. the users
	if ! _out=$({
		in_chroot useradd --no-create-home --shell /bin/sh $IN_MEMBER &&
			in_chroot usermod -aG beluga $IN_MEMBER &&
			in_chroot useradd --no-create-home --shell /bin/sh $IN_OUTSIDER
	} 2>&1); then
		tap_fail install:users "useradd/usermod in the chroot failed" "$_out"
		return 1
	fi
	echo "# $IN_MEMBER: $(in_chroot id $IN_MEMBER); $IN_OUTSIDER: $(in_chroot id $IN_OUTSIDER)"
	tap_ok install:users

	# 9. beluga-setup lists the device the test attaches
	_out=$(in_chroot beluga-setup 2>&1)
	_rc=$?
	echo "$_out" | sed 's/^/#   /'
	if [ $_rc -ne 0 ]; then
		tap_fail install:beluga-setup "beluga-setup exited with status $_rc"
	elif ! echo "$_out" | grep -qE "^${_dax}[[:space:]].*devdax"; then
		tap_fail install:beluga-setup "beluga-setup does not list $_dax in devdax mode"
	else
		tap_ok install:beluga-setup
	fi

	# 10. the operator's /etc/beluga.conf, then systemctl
	printf '\n# added by the guest install test, as an operator would\ndax = %s\n' "$_dax" >>$IN_ROOT/etc/beluga.conf
	# `systemctl enable --now beluga` in the README: in a chroot systemctl enables
	# (it writes the links) but cannot start (no systemd as PID 1 to ask: it fails
	# with "System has not been booted with systemd"), so `enable` here and the
	# unit's commands below, as systemd would run them
	_out=$({ in_chroot systemctl daemon-reload && in_chroot systemctl enable beluga; } 2>&1)
	_rc=$?
	echo "$_out" | sed 's/^/#   /'
	_wants=$IN_ROOT/etc/systemd/system/multi-user.target.wants/beluga.service
	_unit=/usr/local/lib/systemd/system/beluga.service
	if [ $_rc -ne 0 ]; then
		tap_fail install:systemctl-enable "'systemctl enable beluga' exited with status $_rc"
		return 1
	elif [ "$(readlink $_wants)" != $_unit ]; then
		tap_fail install:systemctl-enable "$_wants is not a link to $_unit: '$(readlink $_wants)'"
		return 1
	fi
	echo "# enabled: multi-user.target.wants/beluga.service -> $_unit (--now: a chroot's systemctl cannot start it; its ExecStart= lines follow)"
	tap_ok install:systemctl-enable

	# 11. the unit's ExecStart= lines, in order, as systemd would run them
	_bad=
	sed -n 's/^ExecStart=//p' $IN_ROOT$_unit >$_log/exec
	if [ ! -s $_log/exec ]; then
		_bad="$_unit has no ExecStart= line"
	fi
	while read -r _cmd; do
		[ -n "$_bad" ] && break
		# shellcheck disable=SC2086 # the unit's command line, split as systemd does (no quotes in it)
		set -- $_cmd
		if ! in_chroot test -x "$1" </dev/null; then
			_bad="ExecStart=$_cmd: $1 is not installed"
			break
		fi
		case $_cmd in
		*/modprobe\ beluga)
			# the module is this tree's, loaded by /init: the guest's modprobe
			# (the chroot's has no modules of the guest kernel) finds it loaded
			_out=$(modprobe beluga 2>&1 </dev/null)
			;;
		*)
			_out=$(in_chroot "$@" 2>&1 </dev/null)
			;;
		esac
		_rc=$?
		echo "# ExecStart=$_cmd: status $_rc"
		[ -n "$_out" ] && echo "$_out" | sed 's/^/#   /'
		[ $_rc -eq 0 ] || _bad="ExecStart=$_cmd exited with status $_rc"
	done <$_log/exec
	if [ -z "$_bad" ]; then
		_out=$(in_chroot belugactl status 2>&1)
		echo "$_out" | sed 's/^/#   /'
		echo "$_out" | grep -q "$_dax" || _bad="belugactl status does not show $_dax after the unit's commands"
	fi
	if [ -n "$_bad" ]; then
		tap_fail install:service-start "$_bad"
		return 1
	fi
	tap_ok install:service-start

	# 12./13. the README's quick start as the member, then as the outsider
	awk '/^```python$/ { f = 1; next } f && /^```$/ { exit } f' "$IN_ROOT$py_repo/README.md" >$IN_ROOT/tmp/quickstart.py
	chmod 0644 $IN_ROOT/tmp/quickstart.py
	if ! grep -q 'beluga.Pool()' $IN_ROOT/tmp/quickstart.py; then
		tap_fail install:quickstart-member "no Python quick start (a \`\`\`python block with beluga.Pool()) in README.md"
		return 1
	fi
	_rc=$(in_quickstart $IN_MEMBER $_log/qs.out $_log/qs.err)
	sed 's/^/#   stderr: /' $_log/qs.err | tail -n 30
	sed 's/^/#   stdout: /' $_log/qs.out
	_l1=$(sed -n 1p $_log/qs.out) _l2=$(sed -n 2p $_log/qs.out)
	if [ "$_rc" -ne 0 ]; then
		tap_fail install:quickstart-member "the quick start as $IN_MEMBER (in group beluga) exited with status $_rc"
	elif ! grep -q "groups .*beluga" $_log/qs.err || grep -q '^uid 0,' $_log/qs.err; then
		tap_fail install:quickstart-member "it did not run as an unprivileged member of the beluga group"
	elif ! grep -q "beluga from /$_pydir\$" $_log/qs.err; then
		tap_fail install:quickstart-member "python3 did not import the installed package from /$_pydir"
	elif ! echo "$_l1" | grep -qE '^StoreResult\(requested=1, skipped=0, stored=1, exists=0, failed=\[\], not_stored=0\)$'; then
		tap_fail install:quickstart-member "its first line is not StoreResult(... stored=1 ...) as the README says: '$_l1'"
	elif [ "$_l2" != "LoadResult(requested=1, loaded=1) True" ]; then
		tap_fail install:quickstart-member "its second line is not 'LoadResult(requested=1, loaded=1) True' as the README says: '$_l2'"
	else
		tap_ok install:quickstart-member
	fi

	_rc=$(in_quickstart $IN_OUTSIDER $_log/qso.out $_log/qso.err)
	sed 's/^/#   stderr: /' $_log/qso.err | tail -n 8
	_last=$(tail -n 1 $_log/qso.err)
	if [ "$_rc" -eq 0 ]; then
		tap_fail install:quickstart-outsider "the quick start as $IN_OUTSIDER (not in group beluga) succeeded: /dev/beluga is open to everyone"
	elif [ -s $_log/qso.out ]; then
		tap_fail install:quickstart-outsider "it printed results before failing: $(head -n 2 $_log/qso.out)"
	elif ! echo "$_last" | grep -q 'PermissionDenied: .*/dev/beluga'; then
		tap_fail install:quickstart-outsider "it failed (status $_rc), but not with beluga.PermissionDenied naming /dev/beluga: '$_last'"
	else
		echo "# $IN_OUTSIDER gets: $_last"
		tap_ok install:quickstart-outsider
	fi

	# 14. leave the pool and /dev/beluga as the earlier stages left them
	_out=$(in_chroot belugactl detach "$_dax" --evict 2>&1)
	_rc=$?
	[ -n "$_out" ] && echo "$_out" | sed 's/^/# /'
	chown 0:0 /dev/beluga && chmod 0600 /dev/beluga
	if [ $_rc -ne 0 ]; then
		tap_fail install:detach "'belugactl detach $_dax --evict' exited with status $_rc"
		return 1
	fi
	tap_ok install:detach
}

# install_udev GID: step 7. systemd-udevd runs in the chroot with the installed
# rules; the README's commands make it apply 60-beluga.rules to the existing node.
install_udev() {
	_gid=$1
	_udevd=
	for _p in /usr/lib/systemd/systemd-udevd /lib/systemd/systemd-udevd; do
		# tested in the chroot: the host's links are absolute (systemd-udevd -> /bin/udevadm)
		in_chroot test -x "$_p" && { _udevd=$_p; break; }
	done
	if [ -z "$_udevd" ]; then
		tap_fail install:udev-rule "the host has no systemd-udevd (Debian's udev package): run scripts/install-deps.sh"
		return 1
	fi
	# the module's own node, as before any rule: 0600 root:root
	chown 0:0 /dev/beluga && chmod 0600 /dev/beluga
	echo "# /dev/beluga before: $(stat -c '%a %u:%g' /dev/beluga)"
	# not through in_chroot: $! must be timeout's pid, which passes a signal on
	timeout "$IN_TIMEOUT" chroot "$IN_ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		SYSTEMD_LOG_TARGET=console SYSTEMD_LOG_LEVEL=debug "$_udevd" >"$_log"/udevd.log 2>&1 </dev/null &
	_upid=$!
	_i=0
	while [ ! -S $IN_ROOT/run/udev/control ] && [ $_i -lt 60 ]; do
		kill -0 $_upid 2>/dev/null || break
		sleep 1
		_i=$((_i + 1))
	done
	if [ ! -S $IN_ROOT/run/udev/control ]; then
		kill $_upid 2>/dev/null
		wait $_upid 2>/dev/null
		tap_fail install:udev-rule "systemd-udevd did not start in the chroot within 60 s; its log:"
		in_comment "$_log"/udevd.log 20
		return 1
	fi
	# The README's commands. udevadm ignores every request in a chroot ("Running in
	# chroot, ignoring request.") unless SYSTEMD_IGNORE_CHROOT=1: here the chroot
	# stands for the server's root, and udevd runs in it.
	_out=$({
		in_chroot SYSTEMD_IGNORE_CHROOT=1 udevadm control --reload &&
			in_chroot SYSTEMD_IGNORE_CHROOT=1 udevadm trigger --verbose /sys/class/misc/beluga &&
			in_chroot SYSTEMD_IGNORE_CHROOT=1 udevadm settle --timeout=60
	} 2>&1)
	_rc=$?
	in_chroot SYSTEMD_IGNORE_CHROOT=1 udevadm control --exit >/dev/null 2>&1
	# udevd exits on --exit; kill it if it did not
	_i=0
	while kill -0 $_upid 2>/dev/null && [ $_i -lt 10 ]; do
		sleep 1
		_i=$((_i + 1))
	done
	kill $_upid 2>/dev/null
	wait $_upid 2>/dev/null
	_st=$(stat -c '%a %u:%g' /dev/beluga)
	echo "# /dev/beluga after udevd ($_udevd): $_st ($(in_chroot stat -c '%U:%G' /dev/beluga))"
	# what udevd did to the device (its debug log names each rule line it applied)
	_applied=$(grep '^beluga: ' "$_log"/udevd.log)
	[ -n "$_applied" ] && echo "$_applied" | sed 's/^/#   udevd: /'
	_bad=
	if [ $_rc -ne 0 ]; then
		_bad="udevadm control --reload / trigger / settle failed (status $_rc): $_out"
	elif [ "$_st" != "660 0:$_gid" ]; then
		_bad="/dev/beluga is '$_st', not '660 0:$_gid' (root:beluga 0660, /etc/udev/rules.d/60-beluga.rules)"
	elif ! echo "$_applied" | grep -q '60-beluga\.rules:[0-9]* GROUP'; then
		_bad="udevd's log does not show /etc/udev/rules.d/60-beluga.rules setting GROUP"
	fi
	if [ -n "$_bad" ]; then
		tap_fail install:udev-rule "$_bad" "udevd's log, without the rule files it read:"
		grep -v 'Reading rules file\|Trying to open\|Parsed configuration\|Skipping empty' "$_log"/udevd.log |
			tail -n 30 | sed 's/^/#   /'
		return 1
	fi
	tap_ok install:udev-rule
}
