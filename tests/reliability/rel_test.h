/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the reliability programs (rel_*.c, one per area) share on top of
 * rel.h: the kernel's kselftest harness, which runs each test in its own
 * process group with a timeout and prints TAP; the checks' vocabulary; the
 * setup every test starts from; fault injection.
 *
 * The checks are written as `static bool t_xxx(void)` functions: REQUIRE()
 * and FAILF() leave them with false and the reason in why[]. A fault-nth
 * scan calls its checks hundreds of times, collects the distinct reasons
 * and goes on, which a harness ASSERT (it ends the test) cannot do. Each
 * harness test is then two lines:
 *
 *	TEST_F_TIMEOUT(crash, kill_alloc, REL_TIMEOUT)
 *	{
 *		if (!rel_setup(_metadata, REL_POOL))
 *			return;
 *		REL_ASSERT(t_kill_alloc());
 *	}
 *
 * Each test starts from an empty pool with one small region (16 KiB blocks)
 * and leaves an empty pool behind (the fixture's teardown), like the
 * kselftests.
 */
#ifndef BELUGA_REL_TEST_H
#define BELUGA_REL_TEST_H

#include "rel.h"

#include <grp.h>
#include <pthread.h>
#include <sys/syscall.h>

#include "../lib/harness.h"

#define BSIZE		(16 * BT_KIB)
#define REGION		(4 * BT_MIB)
/* per test, as the old runner had it; a fault-nth scan takes ~30 s on TCG + KASAN */
#define REL_TIMEOUT	300

static char why[512] __attribute__((unused));

#define FAILF(...) do { snprintf(why, sizeof(why), __VA_ARGS__); return false; } while (0)
#define REQUIRE(cond, ...) do { if (!(cond)) FAILF(__VA_ARGS__); } while (0)

/* A check as one harness assertion, its reason in the log. */
#define REL_ASSERT(check) ASSERT_TRUE(check) TH_LOG("%s", why)

/*
 * Line-buffered stdout, as the checks print diagnostics and fork: a child
 * must not inherit (and print again) half a buffer.
 */
static void __attribute__((constructor)) rel_stdout_lines(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
}

/* An errno result as "-ENAME", a count as itself (4 buffers, for one printf). */
static inline const char *en(int r)
{
	static char buf[4][48];
	static int i;
	char *b = buf[i++ & 3];

	if (r >= 0)
		snprintf(b, 48, "%d", r);
	else
		snprintf(b, 48, "-%s", strerrorname_np(-r) ? strerrorname_np(-r) : "?");
	return b;
}

/* An empty pool with one node region (or a dax one) of @len bytes. */
static inline int fresh_pool(uint64_t len, uint64_t bsize, bool want_dax)
{
	int fd = bt_open(O_RDWR), r;

	if (fd < 0)
		return -errno;
	r = rel_reset_pool_fd(fd, 5000);
	if (!r) {
		if (want_dax)
			r = rel_attach_dax(fd, 0, 0, len, bsize, "rel-dax", NULL);
		else {
			r = rel_attach_node(fd, len, bsize, "rel-node", NULL);
			if (r == -ENOENT)
				r = rel_attach_dax(fd, 0, 0, len, bsize, "rel-dax", NULL);
		}
	}
	close(fd);
	return r;
}

static inline uint64_t ns_unique(uint64_t salt)
{
	return bt_mix64(((uint64_t)getpid() << 24) ^ salt ^ (uint64_t)time(NULL));
}

/* Wait for a child; returns its exit status, 128+sig when killed. */
static inline int reap(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static inline bool quiet(int fd, uint64_t clients, const char *when)
{
	struct beluga_stats s;

	if (rel_wait_quiet(fd, clients, 3000, &s))
		return true;
	rel_stats_print(when, &s);
	FAILF("%s: %llu blocks still allocated, %llu pins, %llu clients (want %llu)",
	      when, (rel_ull)s.allocated_blocks, (rel_ull)s.pins, (rel_ull)s.clients,
	      (rel_ull)clients);
}

static inline uint32_t nr_regions(int fd)
{
	struct beluga_info info;

	return bt_info(fd, &info) ? UINT32_MAX : info.nr_regions;
}

/* Mappings counted in the pool's first region. */
static inline int mappings0(int fd)
{
	struct beluga_region_info ri;

	for (uint32_t s = 0; s < BELUGA_MAX_REGIONS; s++)
		if (bt_region_info(fd, s, &ri) == 0)
			return (int)ri.mappings;
	return -1;
}

/* ------------------------------------------------------------------ */
/* Fault injection                                                      */

#define DBG "/sys/kernel/debug"

static inline bool fi_available(void)
{
	return access("/proc/thread-self/fail-nth", W_OK) == 0 &&
	       access(DBG "/failslab/probability", W_OK) == 0 &&
	       access(DBG "/fail_page_alloc/probability", W_OK) == 0;
}

/*
 * Quiet, GFP_KERNEL-inclusive configuration: by default failslab and
 * fail_page_alloc skip allocations that may sleep, and every injected
 * failure dumps a stack (which the lane's dmesg scan would rightly flag).
 */
static inline void fi_configure(int probability)
{
	static const char *const attrs[] = { "failslab", "fail_page_alloc", "fail_usercopy" };
	char path[128], val[16];

	for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
		snprintf(path, sizeof(path), DBG "/%s/verbose", attrs[i]);
		bt_write_str(path, "0");
		snprintf(path, sizeof(path), DBG "/%s/task-filter", attrs[i]);
		bt_write_str(path, "Y");
		snprintf(path, sizeof(path), DBG "/%s/interval", attrs[i]);
		bt_write_str(path, "1");
		snprintf(path, sizeof(path), DBG "/%s/times", attrs[i]);
		bt_write_str(path, "-1");
		snprintf(path, sizeof(path), DBG "/%s/space", attrs[i]);
		bt_write_str(path, "0");
		snprintf(path, sizeof(path), DBG "/%s/probability", attrs[i]);
		snprintf(val, sizeof(val), "%d", i < 2 ? probability : 0);
		bt_write_str(path, val);
	}
	bt_write_str(DBG "/failslab/ignore-gfp-wait", "N");
	bt_write_str(DBG "/fail_page_alloc/ignore-gfp-wait", "N");
	bt_write_str(DBG "/fail_page_alloc/ignore-gfp-highmem", "N");
	bt_write_str(DBG "/fail_page_alloc/min-order", "0");
}

/* Marks in the kernel log: the dmesg scan tolerates allocation-failure
 * reports (not sanitizer reports) between them. */
static inline void kmsg(const char *msg)
{
	int fd = open("/dev/kmsg", O_WRONLY | O_CLOEXEC);

	if (fd >= 0) {
		ssize_t n = write(fd, msg, strlen(msg));

		(void)n;
		close(fd);
	}
}

static int nth_fd __attribute__((unused)) = -1;

static inline void fail_nth_set(unsigned int n)
{
	char buf[16];
	int len = snprintf(buf, sizeof(buf), "%u", n);

	if (nth_fd < 0)
		nth_fd = open("/proc/thread-self/fail-nth", O_RDWR | O_CLOEXEC);
	/* -EFAULT: the write itself was the n-th point (then it is disarmed) */
	if (pwrite(nth_fd, buf, len, 0) < 0 && errno != EFAULT)
		perror("fail-nth");
}

static inline unsigned int fail_nth_get(void)
{
	char buf[16] = "";

	if (pread(nth_fd, buf, sizeof(buf) - 1, 0) <= 0)
		return 0;
	return (unsigned int)strtoul(buf, NULL, 10);
}

/* ------------------------------------------------------------------ */
/* Setup                                                                */

enum rel_needs {
	REL_POOL = 1 << 0,	/* an empty pool with one REGION-byte region */
	REL_DAX  = 1 << 1,	/* ... on the first dax device */
	REL_FI   = 1 << 2,	/* fault injection (the debug kernel) */
};

/*
 * Skip (with the reason) what this kernel or guest cannot test, fail when
 * the pool cannot be set up, else start the test from @needs. False: the
 * test is over (skipped).
 */
static inline bool rel_setup(struct __test_metadata *_metadata, unsigned int needs)
{
	char dax[64];
	int r;

	why[0] = 0;
	if (access(bt_dev_path(), F_OK))
		SKIP(return false, "no %s (module not loaded)", bt_dev_path());
	if ((needs & REL_FI) && !fi_available())
		SKIP(return false, "no fault injection (needs CONFIG_FAULT_INJECTION_DEBUG_FS "
		     "and debugfs): the debug lane has it");
	if ((needs & REL_DAX) && rel_env_dax(0, dax, sizeof(dax)))
		SKIP(return false, "BELUGA_TEST_DAX not set");
	if (!(needs & REL_POOL))
		return true;
	r = fresh_pool(REGION, BSIZE, needs & REL_DAX);
	if (r == -ENOENT)
		SKIP(return false, "neither BELUGA_TEST_NODE nor BELUGA_TEST_DAX is set");
	ASSERT_EQ(0, r) TH_LOG("pool setup: %s", en(r));
	return true;
}

/*
 * FIXTURE_REL(name): the fixture of one program. Its teardown leaves an
 * empty pool behind, whatever the test left (a failed test's files and
 * mappings went away with its process).
 */
#define FIXTURE_REL(name)						\
	FIXTURE(name) {};						\
	FIXTURE_SETUP(name) {}						\
	FIXTURE_TEARDOWN(name)						\
	{								\
		if (!access(bt_dev_path(), F_OK))			\
			rel_reset_pool(5000);				\
	}

#endif /* BELUGA_REL_TEST_H */
