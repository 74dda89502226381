// SPDX-License-Identifier: GPL-2.0
/*
 * rel_modload: module unload and load (the debug lane runs it last).
 *
 *   rmmod              refused while a file or only a mapping is open;
 *                      succeeds after the last close; the module reloads
 *   fault_nth_modload  every fault point of finit_module() with pools=2 and
 *                      node= fails in turn: a failed load leaves nothing, a
 *                      successful one unloads
 *   modload_open_race  a module load failing in its parameter ATTACH while
 *                      another process opens and maps /dev/beluga: no open
 *                      may succeed
 *
 * Each test loads the module again at its end. Environment also:
 * BELUGA_MODPROBE_ARGS (module parameters for the reload, e.g. "pools=2"),
 * BELUGA_TEST_KO (the module file), BELUGA_MODLOAD_STRIDE.
 *
 * Environment: BELUGA_TEST_NODE, BELUGA_TEST_DAX (see rel.h); the harness's
 * options (-l lists the tests, -t NAME runs one). See README.md.
 */
#include "rel_test.h"

static bool t_rmmod(void)
{
	const char *args = getenv("BELUGA_MODPROBE_ARGS");
	char cmd[256];
	int fd = bt_open(O_RDWR), r, e;
	void *map;

	REQUIRE(fd >= 0, "open");
	map = rel_map(fd, REGION, PROT_READ);
	REQUIRE(map, "mmap");
	r = (int)syscall(SYS_delete_module, "beluga", O_NONBLOCK);
	e = errno;
	REQUIRE(r != 0 && (e == EWOULDBLOCK || e == EBUSY),
		"rmmod with an open file: %s", r ? strerror(e) : "unloaded");
	close(fd);
	r = (int)syscall(SYS_delete_module, "beluga", O_NONBLOCK);
	e = errno;
	REQUIRE(r != 0 && (e == EWOULDBLOCK || e == EBUSY),
		"rmmod with only a mapping left: %s", r ? strerror(e) : "unloaded");
	munmap(map, REGION);
	r = (int)syscall(SYS_delete_module, "beluga", O_NONBLOCK);
	e = errno;
	REQUIRE(r == 0, "rmmod after the last close and munmap: %s", strerror(e));
	REQUIRE(access(bt_dev_path(), F_OK) != 0, "%s still exists after rmmod",
		bt_dev_path());
	snprintf(cmd, sizeof(cmd), "modprobe beluga %s", args ? args : "");
	r = system(cmd);
	REQUIRE(r == 0, "'%s' failed (status %d)", cmd, r);
	for (int i = 0; i < 50 && access(bt_dev_path(), F_OK); i++)
		rel_msleep(100);
	REQUIRE(access(bt_dev_path(), F_OK) == 0, "%s did not come back", bt_dev_path());
	return true;
}

/*
 * Module load with every fault point of finit_module() failing in turn,
 * with pools=2 and a node region attached at load (node=): each load either
 * fails and leaves nothing behind (no module, no device node), or succeeds
 * and unloads cleanly. The error paths of beluga_init() run under KASAN and
 * kmemleak. Opt-in, like rmmod; the module is loaded again at the end.
 */
static bool module_loaded(void)
{
	return access("/sys/module/beluga", F_OK) == 0;
}

static bool t_fault_nth_modload(void)
{
	const char *ko = getenv("BELUGA_TEST_KO"), *margs = getenv("BELUGA_MODPROBE_ARGS");
	char params[128], cmd[256];
	int kfd, node = rel_env_node(), points = -1, loaded = 0, r;
	unsigned int n, first;
	double t0 = rel_now();
	/* BELUGA_MODLOAD_STRIDE=k tests every k-th point (CI); default: all */
	const char *st = getenv("BELUGA_MODLOAD_STRIDE");
	unsigned int stride = st && atoi(st) > 0 ? (unsigned int)atoi(st) : 1;

	REQUIRE(ko && *ko, "BELUGA_TEST_KO not set");
	kfd = open(ko, O_RDONLY | O_CLOEXEC);
	REQUIRE(kfd >= 0, "%s: %s", ko, strerror(errno));
	snprintf(params, sizeof(params), "pools=2 block_size=16K%s", "");
	if (node >= 0)
		snprintf(params, sizeof(params), "pools=2 block_size=16K node=%d:2M", node);
	REQUIRE(rel_reset_pool(3000) == 0, "empty the pool before unloading");
	if (module_loaded())
		REQUIRE(syscall(SYS_delete_module, "beluga", O_NONBLOCK) == 0,
			"rmmod: %s", strerror(errno));
	fi_configure(0);
	/*
	 * Loading a module has hundreds of fault points in the module loader
	 * itself, each load taking a while under TCG + KASAN: only the window
	 * from where beluga_init() starts (a load with pools=99 fails there
	 * at once) to the end of a good load is tested.
	 */
	kmsg("beluga-fault-inject: begin\n");	/* the pools=99 load logs an error */
	{
		const unsigned int big = 1000000;
		unsigned int p_fast, p_all;

		fail_nth_set(big);
		r = (int)syscall(SYS_finit_module, kfd, "pools=99", 0);
		p_fast = big - fail_nth_get();
		fail_nth_set(0);
		if (r == 0 || module_loaded())
			kmsg("beluga-fault-inject: end\n");
		REQUIRE(r != 0 && !module_loaded(), "a load with pools=99 did not fail");
		fail_nth_set(big);
		r = (int)syscall(SYS_finit_module, kfd, params, 0);
		p_all = big - fail_nth_get();
		fail_nth_set(0);
		if (r)
			kmsg("beluga-fault-inject: end\n");
		REQUIRE(r == 0, "load with '%s': %s", params, strerror(errno));
		REQUIRE(syscall(SYS_delete_module, "beluga", O_NONBLOCK) == 0, "rmmod");
		first = p_fast > 3 ? p_fast - 3 : 1;
		rel_diag("fault-nth-modload: a load has %u fault points; beluga_init() starts "
			 "near %u: testing %u..%u, every %u", p_all, p_fast, first, p_all, stride);
	}
	for (n = first; n <= first + 2000; n += stride) {
		unsigned int left;

		fail_nth_set(n);
		r = (int)syscall(SYS_finit_module, kfd, params, 0);
		left = fail_nth_get();
		fail_nth_set(0);
		if (r == 0) {
			loaded++;
			for (int i = 0; i < 50 && access("/dev/beluga1", F_OK); i++)
				rel_msleep(20);
			if (access("/dev/beluga", F_OK) || access("/dev/beluga1", F_OK)) {
				kmsg("beluga-fault-inject: end\n");
				FAILF("load succeeded at fault point %u but /dev/beluga%s is missing",
				      n, access("/dev/beluga", F_OK) ? "" : "1");
			}
			if (syscall(SYS_delete_module, "beluga", O_NONBLOCK)) {
				kmsg("beluga-fault-inject: end\n");
				FAILF("unload after a load at fault point %u: %s", n, strerror(errno));
			}
		} else if (module_loaded() || !access("/dev/beluga", F_OK)) {
			kmsg("beluga-fault-inject: end\n");
			FAILF("load failed (%s) at fault point %u but left %s behind", strerror(errno),
			      n, module_loaded() ? "the module" : "/dev/beluga");
		}
		if (left) {
			points = (int)n - 1;
			break;
		}
	}
	kmsg("beluga-fault-inject: end\n");
	close(kfd);
	snprintf(cmd, sizeof(cmd), "modprobe beluga %s", margs ? margs : "");
	r = system(cmd);
	REQUIRE(r == 0 && module_loaded(), "'%s' afterwards: status %d", cmd, r);
	for (int i = 0; i < 50 && access(bt_dev_path(), F_OK); i++)
		rel_msleep(100);
	REQUIRE(points >= 0, "still failing 2000 points after %u", first);
	rel_diag("fault-nth-modload: points %u..%d (every %u) in %.0f s; %d loads "
		 "succeeded despite the fault", first, points, stride, rel_now() - t0,
		 loaded - 1);
	return true;
}

/*
 * A module load that fails in its module-parameter ATTACH (node=: the
 * second entry asks for more than the node has) while a child keeps
 * opening and mapping /dev/beluga. No open may succeed before init has
 * finished: the failed module is freed whatever its files hold, so a file
 * from that window would run freed module code at close() (KASAN reports
 * it here; a plain kernel oopses). Opt-in, like rmmod; the module is
 * loaded again at the end.
 */
static bool t_modload_open_race(void)
{
	const char *ko = getenv("BELUGA_TEST_KO"), *margs = getenv("BELUGA_MODPROBE_ARGS");
	struct { volatile int started, stop, opens, maps; } *st;
	int kfd, node = rel_env_node(), r, status, round, opens = 0;
	char params[128], cmd[256];
	pid_t pid;

	REQUIRE(ko && *ko, "BELUGA_TEST_KO not set");
	REQUIRE(node >= 0, "BELUGA_TEST_NODE not set");
	kfd = open(ko, O_RDONLY | O_CLOEXEC);
	REQUIRE(kfd >= 0, "%s: %s", ko, strerror(errno));
	snprintf(params, sizeof(params), "node=%d:8M:rel-a,%d:1T:rel-b", node, node);
	st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		  -1, 0);
	REQUIRE(st != MAP_FAILED, "mmap");
	REQUIRE(rel_reset_pool(3000) == 0, "empty the pool before unloading");
	if (module_loaded())
		REQUIRE(syscall(SYS_delete_module, "beluga", O_NONBLOCK) == 0,
			"rmmod: %s", strerror(errno));
	for (round = 0; round < 3; round++) {
		memset((void *)st, 0, sizeof(*st));
		fflush(NULL);
		pid = fork();
		REQUIRE(pid >= 0, "fork");
		if (pid == 0) {
			int fds[32], nfd = 0;

			st->started = 1;
			while (!st->stop) {
				int fd = open(bt_dev_path(), O_RDWR | O_CLOEXEC);

				if (fd < 0)
					continue;
				st->opens++;
				if (mmap(NULL, 2 << 20, PROT_READ, MAP_SHARED, fd, 0) != MAP_FAILED)
					st->maps++;
				if (nfd < 32)
					fds[nfd++] = fd;
				else
					close(fd);
			}
			while (nfd)
				close(fds[--nfd]);
			_exit(0);
		}
		while (!st->started)
			sched_yield();
		r = (int)syscall(SYS_finit_module, kfd, params, 0);
		st->stop = 1;
		waitpid(pid, &status, 0);
		opens += st->opens;
		REQUIRE(r != 0, "load with '%s' succeeded", params);
		REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			"the opener died (status 0x%x) closing files of the failed module",
			status);
		REQUIRE(st->opens == 0, "%d opens (%d mmaps) succeeded during the failing init",
			st->opens, st->maps);
		REQUIRE(!module_loaded(), "the failed load left the module behind");
	}
	close(kfd);
	munmap((void *)st, sizeof(*st));
	snprintf(cmd, sizeof(cmd), "modprobe beluga %s", margs ? margs : "");
	r = system(cmd);
	REQUIRE(r == 0 && module_loaded(), "'%s' afterwards: status %d", cmd, r);
	for (int i = 0; i < 50 && access(bt_dev_path(), F_OK); i++)
		rel_msleep(100);
	rel_diag("modload-open-race: 3 failing loads, %d opens in their windows", opens);
	return true;
}

FIXTURE_REL(modload);

TEST_F_TIMEOUT(modload, rmmod, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL))
		return;
	REL_ASSERT(t_rmmod());
}

TEST_F_TIMEOUT(modload, fault_nth_modload, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_FI))
		return;
	REL_ASSERT(t_fault_nth_modload());
}

TEST_F_TIMEOUT(modload, modload_open_race, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, 0))
		return;
	REL_ASSERT(t_modload_open_race());
}

TEST_HARNESS_MAIN
