# shellcheck shell=sh
# SPDX-License-Identifier: GPL-2.0
# The Python stage of the in-guest suite (busybox ash), installed in the initramfs
# as /etc/beluga/python.sh and run by tests/vm/guest-tests.sh when the kernel
# command line has beluga_hostroot=REPO (scripts/vm/run-guest.sh -P REPO).
#
# The guest has no Python of its own: it runs Debian's /usr/bin/python3 from the
# host's root filesystem, shared read-only over 9p (QEMU -virtfs, mount tag
# hostroot) and chrooted at /host, with the guest's /proc, /sys and /dev bound in
# and a tmpfs on /tmp (/var/tmp if the repository is under /tmp) for everything
# written. REPO is the repository's absolute
# path on the host, so the real beluga package that `make -C userspace python`
# built (REPO/userspace/build/python) and the tests are read straight from it.
#
#   1. python: mounts, and Debian's python3 with pytest and numpy present;
#   2. a region for the tests: the first test dax device attached with 64 KiB
#      blocks (the mini engine wants small blocks, and emulated CXL memory moves
#      ~15 MB/s under TCG), on a pool the earlier stages left empty; another
#      size with BELUGA_TEST_BLOCK_SIZE on the host (run-guest.sh passes it as
#      beluga_test_block_size=), which pytest gets too and checks the pool
#      against (tests/python/conftest.py);
#   3. pytest on tests/python/host and tests/python/guest with BELUGA_TEST_REAL=1:
#      tests/python/conftest.py writes one TAP result per test (BELUGA_PYTEST_TAP),
#      re-emitted here as KERNEL:python:NODEID; pytest's own output goes to the
#      console; an exit status other than 0 or 1 is a failure of its own;
#   4. with beluga_engines=1 on the command line (run-guest.sh, BELUGA_GUEST_ENGINES=1
#      on the host): the engine lane's model test (tests/engines/test_model_kv.py)
#      with the `model` venv's python (REPO/build/venv-model, which make test's engine
#      lane built on the host from Debian's python3, so it runs here too) and the
#      real package installed in it; opt-in while its time under TCG is unknown
#      (importing torch maps ~2.9 GB of libraries), else one SKIP says so;
#   5. the region detached again (--evict), so later stages find the pool as the
#      earlier ones left it.
# Needs /etc/beluga/lib.sh and /etc/beluga/env loaded.

PY_BS=${PY_BS:-64K}
PY_TIMEOUT=${PY_TIMEOUT:-900}
PY_ROOT=/host

py_repo=
py_engines=0
for _a in $(cat /proc/cmdline); do
	case $_a in
	beluga_hostroot=*) py_repo=${_a#beluga_hostroot=} ;;
	beluga_engines=1) py_engines=1 ;;
	beluga_test_block_size=*) PY_BS=${_a#beluga_test_block_size=} ;;
	esac
done

# py_mount: the host's root at /host with the guest's kernel filesystems inside
py_mount() {
	load netfs 9pnet 9pnet_virtio 9p
	mkdir -p $PY_ROOT
	# cache=loose: the guest caches what it read (the share is read-only and
	# nothing changes it during the run); without it every import stats and
	# reads over 9p again, and importing numpy takes 4x as long
	if ! mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot $PY_ROOT; then
		echo "# mounting the 9p share 'hostroot' failed (no virtio-9p device from run-guest.sh -P?)"
		return 1
	fi
	# rbind: /dev carries /dev/shm (multiprocessing's semaphores) and /dev/pts
	for _d in proc sys dev; do
		mount -o rbind /$_d $PY_ROOT/$_d || { echo "# binding /$_d into $PY_ROOT failed"; return 1; }
	done
	# The one writable place: a tmpfs over the host's /tmp, or, where the
	# repository itself lives under /tmp (a CI clone may), over /var/tmp, so
	# that the tmpfs does not hide it.
	for PY_TMP in /tmp /var/tmp /mnt; do
		case $py_repo/ in
		"$PY_TMP"/*) continue ;;
		esac
		[ -d "$PY_ROOT$PY_TMP" ] && break
	done
	mount -t tmpfs -o size=256m tmpfs "$PY_ROOT$PY_TMP" || { echo "# a tmpfs on $PY_ROOT$PY_TMP failed"; return 1; }
	echo "$PY_TMP" >/tmp/python.tmpdir
}

# py_run ARGS...: the host's python3 (or PY_BIN, a venv's) in the chroot, with a
# clean environment, killed after PY_TIMEOUT seconds; PY_PATH: its PYTHONPATH
py_run() {
	timeout "$PY_TIMEOUT" chroot $PY_ROOT /usr/bin/env -i -C "$PY_TMP" PATH=/usr/bin:/bin \
		HOME="$PY_TMP" TMPDIR="$PY_TMP" LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 COLUMNS=200 \
		PYTHONPATH="${PY_PATH-$py_repo/userspace/build/python}" \
		BELUGA_TEST_REAL=1 BELUGA_DEVICE=/dev/beluga BELUGA_PYTEST_TAP="$PY_TAP" \
		BELUGA_TEST_BLOCK_SIZE="$PY_BS" \
		"${PY_BIN:-/usr/bin/python3}" "$@"
}

# pytest_status_meaning N: what pytest's exit status N means
pytest_status_meaning() {
	case $1 in
	0) echo "all tests passed" ;;
	1) echo "some tests failed" ;;
	2) echo "interrupted (a collection error, or a signal)" ;;
	3) echo "pytest internal error" ;;
	4) echo "pytest usage error (a bad option or a missing test path)" ;;
	5) echo "no tests were collected" ;;
	124 | 143) echo "killed after $PY_TIMEOUT s" ;;
	*) echo "not a pytest status: python3 crashed or could not start" ;;
	esac
}

# py_pytest NAME ROOTDIR PATH...: pytest on PATHs in the chroot, its results
# re-emitted as KERNEL:NAME:NODEID.
# BELUGA_PYTEST_TAP: tests/python/conftest.py writes one TAP line per test
# there, and the plan ("1..N") when pytest is done; -rfEs: the reasons of
# failures, errors and skips in the short summary, which the failures
# below carry as comments; --durations: where the guest time goes;
# faulthandler_timeout: a test stuck for 5 minutes prints every stack.
py_pytest() {
	_name=$1 _rootdir=$2
	shift 2
	_tap=$PY_TMP/$_name.tap _log=$PY_TMP/$_name-pytest.log
	rm -f "$PY_ROOT$_tap" "$PY_ROOT$_log" /tmp/python.rc
	{
		PY_TAP=$_tap
		py_run -m pytest -p no:cacheprovider -o faulthandler_timeout=300 \
			-v -rfEs --color=no --durations=15 --rootdir="$_rootdir" "$@" </dev/null
		echo $? >/tmp/python.rc
	} 2>&1 | tee "$PY_ROOT$_log" >/dev/console
	_rc=$(cat /tmp/python.rc)
	{
		grep -E '^(not )?ok ' "$PY_ROOT$_tap" 2>/dev/null
		if ! grep -qE '^1\.\.[0-9]+$' "$PY_ROOT$_tap" 2>/dev/null; then
			echo "not ok - pytest:unfinished"
			echo "# pytest exited with status $_rc before it finished its TAP output: $(pytest_status_meaning "$_rc")"
		elif [ "$_rc" -gt 1 ]; then
			# 0 and 1 are in the results; anything else fails on its own (5:
			# nothing collected, 4: a missing test directory)
			echo "not ok - pytest:exit-status-$_rc"
			echo "# pytest exited with status $_rc: $(pytest_status_meaning "$_rc")"
		fi
		_summary=$(sed -n '/short test summary info/,$p' "$PY_ROOT$_log" | grep -v '^SKIPPED' | head -n 60)
		if [ "$_rc" -ne 0 ] && [ -n "$_summary" ]; then
			echo "# pytest's short summary (its whole output is in the guest console log):"
			echo "$_summary" | sed 's/^/#   /'
		fi
		echo "BELUGA-RC 0"
	} | awk -v pfx="$BELUGA_KPFX:$_name:" -v prog="$BELUGA_KPFX:$_name" -v n="$(tap_count)" \
		-v nf="$TAP_N_FILE" -v tmo="$PY_TIMEOUT" -f /etc/beluga/tap-filter.awk
}

# py_engines_stage: the model test with the `model` venv (step 4 above)
py_engines_stage() {
	_venv=$py_repo/build/venv-model
	if [ "$py_engines" != 1 ]; then
		tap_skip python:engines "the transformers model test runs in the guest only with BELUGA_GUEST_ENGINES=1 on the host (opt-in until its time under TCG is measured)"
		return 0
	fi
	if [ ! -x "$PY_ROOT$_venv/bin/python" ]; then
		tap_fail python:engines "$_venv is missing on the host: run scripts/engine-venv.sh model (make test's engine lane builds it)"
		return 1
	fi
	# the package installed in the venv (the real build), not the tree's build/python
	PY_BIN=$_venv/bin/python
	PY_PATH=
	py_pytest engines "$py_repo/tests/engines" "$py_repo/tests/engines/test_model_kv.py"
	unset PY_BIN PY_PATH
}

python_stage() {
	_t0=$(cut -d' ' -f1 /proc/uptime)
	if [ -z "$py_repo" ]; then
		tap_fail python:hostroot "no beluga_hostroot=REPO on the kernel command line (run-guest.sh -P REPO)"
		return 1
	fi
	if ! _out=$(py_mount 2>&1); then
		tap_fail python:hostroot "the host's root is not usable at $PY_ROOT" "$_out"
		return 1
	fi
	PY_TMP=$(cat /tmp/python.tmpdir)
	[ -n "$_out" ] && echo "$_out" | sed 's/^/# /'
	if [ ! -x $PY_ROOT/usr/bin/python3 ]; then
		tap_fail python:deps "the host has no /usr/bin/python3: run scripts/install-deps.sh"
		return 1
	fi
	# find_spec, not import: the check costs one interpreter start, not numpy's import
	if ! _out=$(py_run -c 'import importlib.util as u, sys
missing = [m for m in ("pytest", "numpy") if u.find_spec(m) is None]
sys.exit("missing Python modules: " + " ".join(missing) if missing else 0)' 2>&1); then
		tap_fail python:deps "Debian's python3-pytest or python3-numpy is missing on the host: run scripts/install-deps.sh" \
			"$(echo "$_out" | tail -n 5)"
		return 1
	fi
	tap_ok python:deps
	if [ ! -d "$PY_ROOT$py_repo/userspace/build/python/beluga" ]; then
		tap_fail python:package "$py_repo/userspace/build/python/beluga is missing on the host: run 'make -C userspace python'"
		return 1
	fi

	set -- $BELUGA_TEST_DAX
	_dax=$1
	if ! command -v belugactl >/dev/null; then
		tap_fail python:attach "belugactl is not in the guest (userspace/build/static/belugactl not built)"
		return 1
	fi
	if [ -z "$_dax" ]; then
		tap_fail python:attach "no test dax device (BELUGA_TEST_DAX is empty: see the setup results)"
		return 1
	fi
	tap_check python:attach-$_dax-$PY_BS belugactl attach /dev/$_dax --block-size $PY_BS || return 1

	py_pytest python "$py_repo/tests/python" "$py_repo/tests/python/host" "$py_repo/tests/python/guest"
	py_engines_stage

	tap_check python:detach-$_dax belugactl detach "$_dax" --evict
	echo "# python stage: $(awk -v a="$_t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.0f", b - a }') s"
}
