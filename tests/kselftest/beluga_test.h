/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared helpers of the Beluga in-guest kselftests.
 *
 * The tests talk to /dev/beluga with raw ioctls on <linux/beluga.h> only,
 * so that they check the ABI itself, not a library on top of it.
 *
 * Environment (set by the VM infrastructure; a test that needs a missing
 * variable SKIPs with the reason):
 *   BELUGA_TEST_KERNEL  "6.1" or "6.12" (informational)
 *   BELUGA_TEST_DAX     space-separated device-dax names bound to device_dax
 *   BELUGA_TEST_NODE    a NUMA node usable for the node backend
 *   BELUGA_TEST_KO      path of beluga.ko (only for the unload/reload test)
 *
 * Rules for tests built on these helpers:
 *   - every fixture starts from an empty pool (bt_reset_pool()) and leaves
 *     one behind, so that a failed or timed-out test cannot poison the next;
 *   - forked children never use the ASSERT and EXPECT macros (an ASSERT
 *     longjmps into the harness, which would run the fixture teardown in
 *     the child);
 *     they use CHILD_CHECK() and report through their exit status;
 *   - threads likewise report through return values.
 */
#ifndef BELUGA_TEST_H
#define BELUGA_TEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/beluga.h>
#include <linux/if_xdp.h>

#include "../lib/beluga_abi.h"

/* kselftest_harness.h, with the warnings it needs silenced (why: there). */
#include "../lib/harness.h"

/* ------------------------------------------------------------------ */
/* The ABI's struct layouts, checked at compile time.                  */

/* Every size and offset, the same assertions the module compiles. */
#include <assert.h>
#include <stddef.h>
#include "beluga_layout.h"	/* uapi/, not installed */

/* The sizes the header names. */

_Static_assert(sizeof(struct beluga_key) == 16, "beluga_key");
_Static_assert(sizeof(struct beluga_info) == BELUGA_INFO_SIZE_V1, "info");
_Static_assert(sizeof(struct beluga_stats) == BELUGA_STATS_SIZE_V2, "stats");
_Static_assert(sizeof(struct beluga_alloc) == BELUGA_ALLOC_SIZE_V2, "alloc");
_Static_assert(sizeof(struct beluga_blocks) == BELUGA_BLOCKS_SIZE_V1, "blocks");
_Static_assert(sizeof(struct beluga_publish) == BELUGA_PUBLISH_SIZE_V1, "publish");
_Static_assert(sizeof(struct beluga_publish_item) == 32, "publish_item");
_Static_assert(sizeof(struct beluga_lookup) == BELUGA_LOOKUP_SIZE_V1, "lookup");
_Static_assert(sizeof(struct beluga_attach) == BELUGA_ATTACH_SIZE_V2, "attach");
_Static_assert(sizeof(struct beluga_detach) == BELUGA_DETACH_SIZE_V1, "detach");
_Static_assert(sizeof(struct beluga_evict) == BELUGA_EVICT_SIZE_V1, "evict");
_Static_assert(sizeof(struct beluga_region_info) == BELUGA_REGION_INFO_SIZE_V1,
	       "region_info");
_Static_assert(sizeof(struct beluga_hosts) == BELUGA_HOSTS_SIZE_V2, "hosts");
_Static_assert(sizeof(struct beluga_host) == BELUGA_HOST_SIZE_V2, "host");
_Static_assert(offsetof(struct beluga_host, device_fence_ms) ==
	       BELUGA_HOST_SIZE_V1, "host: V2 appends to V1");
_Static_assert(offsetof(struct beluga_hosts, host_size) ==
	       BELUGA_HOSTS_SIZE_V1, "hosts: V2 appends to V1");
_Static_assert(sizeof(struct beluga_index_map) == BELUGA_INDEX_MAP_SIZE_V1,
	       "index_map");
_Static_assert(sizeof(struct beluga_watchdog) == BELUGA_WATCHDOG_SIZE_V1,
	       "watchdog");
_Static_assert(sizeof(struct beluga_device_range) ==
	       BELUGA_DEVICE_RANGE_SIZE_V1, "device_range");

/* ------------------------------------------------------------------ */
/* Small utilities (the ABI wrappers are in ../lib/beluga_abi.h).       */

/* Default geometry of fixture regions: 2 MiB of 64 KiB blocks = 32. */
#define BT_REGION_LEN	(2 * BT_MIB)
#define BT_BLOCK_SIZE	(64 * BT_KIB)

#define BT_ANY_BACKEND	0	/* node when BELUGA_TEST_NODE is set, else dax */

/* A namespace unique enough for one test run. */
/* Seconds on CLOCK_MONOTONIC: the stress tests run for a time, not a count. */
static inline double bt_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline uint64_t bt_ns(uint64_t salt)
{
	return bt_mix64(((uint64_t)getpid() << 20) ^ salt ^ (uint64_t)time(NULL));
}

/* The address family and socket level of AF_XDP, for libcs that lack them. */
#ifndef AF_XDP
#define AF_XDP	44
#endif
#ifndef SOL_XDP
#define SOL_XDP	283
#endif

/*
 * Register [@addr, +@len) as an AF_XDP umem, a FOLL_LONGTERM pin as a
 * device's (*@sock, -1 on failure): 0 or -errno.
 */
static inline int bt_xdp_umem_pin(void *addr, size_t len, int *sock)
{
	struct xdp_umem_reg mr;
	int s = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0), e;

	*sock = -1;
	if (s < 0)
		return -errno;
	memset(&mr, 0, sizeof(mr));
	mr.addr = (uintptr_t)addr;
	mr.len = len;
	mr.chunk_size = 4096;
	if (setsockopt(s, SOL_XDP, XDP_UMEM_REG, &mr, sizeof(mr))) {
		e = errno;
		close(s);
		return -e;
	}
	*sock = s;
	return 0;
}

/* The shared pool's test knob (kmod/mh.c) under debugfs. */
#define BT_DEBUGFS	"/sys/kernel/debug"
#define BT_MH_STALL	BT_DEBUGFS "/beluga/mh_stall_heartbeat"

/*
 * Stall this host's heartbeat for its shared pools (every heartbeat and
 * tick skipped, until bt_mh_stall(false)) through BT_MH_STALL: a fault
 * attribute on kernels with fault injection, its "probability" file alone
 * on the others. 0, or -errno with the reason in @why.
 */
static inline int bt_mh_stall(bool on, char *why, size_t len)
{
	static const char *const attr[] = { "verbose", "times", "interval",
					    "probability" };
	static const char *const val[] = { "0", "-1", "1", "100" };
	char path[256];
	unsigned int i;
	int r;

	if (access(BT_DEBUGFS "/beluga", F_OK))
		mount("debugfs", BT_DEBUGFS, "debugfs", 0, NULL);
	if (access(BT_MH_STALL, F_OK)) {
		snprintf(why, len, "no %s (debugfs not mounted, or a module "
			 "without shared pools)", BT_MH_STALL);
		return -ENOENT;
	}
	/* off: probability 0 alone stops the failures */
	for (i = on ? 0 : 3; i < 4; i++) {
		snprintf(path, sizeof(path), "%s/%s", BT_MH_STALL, attr[i]);
		if (i < 3 && access(path, F_OK))
			continue;
		r = bt_write_str(path, on ? val[i] : "0");
		if (r) {
			snprintf(why, len, "%s/%s: %s", BT_MH_STALL, attr[i],
				 strerror(-r));
			return r;
		}
	}
	return 0;
}

static inline int bt_errno_ret(int r)
{
	return r < 0 ? -errno : r;
}

/* Child-side check: print and exit non-zero. Never use ASSERT in a child. */
#define CHILD_CHECK(cond) do {						\
	if (!(cond)) {							\
		int __e = errno;					\
		fprintf(stderr, "# child %d: %s:%d: check failed: %s "	\
			"(errno %d %s)\n", (int)getpid(), __FILE__,	\
			__LINE__, #cond, __e, strerror(__e));		\
		_exit(1);						\
	}								\
} while (0)

/* Count-only probe of one key: 1 if present, 0 if not, -errno. */
static inline int bt_present(int fd, uint64_t ns, struct beluga_key key)
{
	uint32_t hits = 0;
	int r = bt_lookup(fd, ns, &key, 1, NULL, 0, &hits);

	return r ? r : (int)hits;
}

/* Any command's argument, for tests that poke at raw bytes. */
union bt_argbuf {
	uint8_t b[512];
	uint32_t w[128];
	uint64_t q[64];
	BELUGA_IOCTL_ARGS(BELUGA_IOCTL_ARG_MEMBER)
};

/* ------------------------------------------------------------------ */
/* Environment.                                                         */

#define BT_MAX_DAX	8

/* Parse BELUGA_TEST_DAX into names[]; returns how many. */
static inline int bt_env_dax(char names[BT_MAX_DAX][64])
{
	const char *env = getenv("BELUGA_TEST_DAX");
	char buf[512], *save = NULL, *tok;
	int n = 0;

	if (!env || !*env)
		return 0;
	snprintf(buf, sizeof(buf), "%s", env);
	for (tok = strtok_r(buf, " \t,", &save); tok && n < BT_MAX_DAX;
	     tok = strtok_r(NULL, " \t,", &save)) {
		/* accept "dax0.0" and "/dev/dax0.0" */
		const char *base = strrchr(tok, '/');

		snprintf(names[n++], 64, "%s", base ? base + 1 : tok);
	}
	return n;
}

static inline int bt_env_node(int *node)
{
	const char *env = getenv("BELUGA_TEST_NODE");
	char *end;
	long v;

	if (!env || !*env)
		return -ENOENT;
	v = strtol(env, &end, 10);
	if (*end || v < 0 || v > 4095)
		return -EINVAL;
	*node = (int)v;
	return 0;
}

/* Kernel version as major*100+minor (uname), e.g. 601, 612. */
static inline int bt_kernel_version(void)
{
	struct utsname u;
	int maj = 0, min = 0;

	if (uname(&u) || sscanf(u.release, "%d.%d", &maj, &min) != 2)
		return 0;
	return maj * 100 + min;
}

/*
 * Is @backend usable here for a region of @length bytes (dax: in the
 * @index-th device of BELUGA_TEST_DAX)? Fills @why when not.
 */
static inline bool bt_backend_ok(int backend, int index, uint64_t length,
				 char *why, size_t whylen)
{
	char names[BT_MAX_DAX][64];
	uint64_t phys, size;
	int n, node, r;

	if (backend == BELUGA_BACKEND_NODE) {
		r = bt_env_node(&node);
		if (r) {
			snprintf(why, whylen, "BELUGA_TEST_NODE %s",
				 r == -ENOENT ? "not set" : "is not a node number");
			return false;
		}
		return true;
	}
	n = bt_env_dax(names);
	if (n == 0) {
		snprintf(why, whylen, "BELUGA_TEST_DAX not set");
		return false;
	}
	if (index >= n) {
		snprintf(why, whylen, "needs %d device-dax instances in "
			 "BELUGA_TEST_DAX, have %d", index + 1, n);
		return false;
	}
	r = bt_dax_geometry(names[index], &phys, &size);
	if (r) {
		snprintf(why, whylen, "cannot read /sys/bus/dax/devices/%s: %s",
			 names[index], strerror(-r));
		return false;
	}
	if (size < length) {
		snprintf(why, whylen, "%s has %" PRIu64 " usable bytes, test needs %"
			 PRIu64, names[index], size, length);
		return false;
	}
	return true;
}

/*
 * How many /proc/iomem entries are named @name; the last one's range goes
 * to @start and @end. -errno when the file cannot be read.
 */
static inline int bt_iomem_find(const char *name, uint64_t *start,
				uint64_t *end)
{
	char line[256], entry[128];
	unsigned long long s, e;
	int found = 0;
	FILE *f;

	f = fopen("/proc/iomem", "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, " %llx-%llx : %127[^\n]", &s, &e, entry) != 3 ||
		    strcmp(entry, name))
			continue;
		*start = s;
		*end = e;
		found++;
	}
	fclose(f);
	return found;
}

/*
 * Does region @slot's "dax" link in sysfs lead to device-dax instance
 * @dax (/sys/bus/dax/devices/@dax)? 1 yes, 0 elsewhere, -errno when
 * either path does not resolve.
 */
static inline int bt_region_dax_link(uint32_t slot, const char *dax)
{
	char link[PATH_MAX], want[PATH_MAX], path[128];

	snprintf(path, sizeof(path), "/sys/class/misc/beluga/region%u/dax",
		 slot);
	if (!realpath(path, link))
		return -errno;
	snprintf(path, sizeof(path), "/sys/bus/dax/devices/%s", dax);
	if (!realpath(path, want))
		return -errno;
	return !strcmp(link, want);
}

/* Resolve BT_ANY_BACKEND: node (RAM speed) when available, else dax. */
static inline int bt_pick_backend(int backend)
{
	char why[128];

	if (backend != BT_ANY_BACKEND)
		return backend;
	if (bt_backend_ok(BELUGA_BACKEND_NODE, 0, 0, why, sizeof(why)))
		return BELUGA_BACKEND_NODE;
	return BELUGA_BACKEND_DAX;
}

/*
 * Fill an attach request. DAX: device @index of BELUGA_TEST_DAX, starting
 * @skip bytes into it. NODE: BELUGA_TEST_NODE. @name may be NULL (dax: the
 * device name; node: empty). Returns 0 or -errno (environment problems).
 */
static inline int bt_attach_req(struct beluga_attach *a, int backend, int index,
				uint64_t skip, uint64_t length,
				uint64_t block_size, const char *name)
{
	char names[BT_MAX_DAX][64];
	uint64_t phys, size;
	int n, r, node;

	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->backend = backend;
	a->length = length;
	a->block_size = block_size;
	if (backend == BELUGA_BACKEND_NODE) {
		r = bt_env_node(&node);
		if (r)
			return r;
		a->node = node;
		a->phys_start = 0;
		if (name) {
			if (strlen(name) >= sizeof(a->name))
				return -ENAMETOOLONG;
			memcpy(a->name, name, strlen(name) + 1);
		}
		return 0;
	}
	n = bt_env_dax(names);
	if (index >= n)
		return -ENOENT;
	r = bt_dax_geometry(names[index], &phys, &size);
	if (r)
		return r;
	if (skip + length > size)
		return -ERANGE;
	a->node = -1;
	a->phys_start = phys + skip;
	if (!name)
		name = names[index];
	if (strlen(name) >= sizeof(a->name))
		return -ENAMETOOLONG;
	memcpy(a->name, name, strlen(name) + 1);
	return 0;
}

static inline int bt_attach(int fd, struct beluga_attach *a)
{
	return bt_ioctl(fd, BELUGA_IOC_ATTACH, a);
}

/*
 * Detach every region, evicting published blocks. Retries EBUSY for a
 * while: pins held by io_uring or AF_XDP are dropped asynchronously after
 * the owner closes them. Returns 0 when the pool is empty.
 */
static inline int bt_reset_pool_path(const char *path)
{
	struct beluga_region_info ri;
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	int fd, slot, tries, r, ret = 0;

	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		r = bt_region_info(fd, slot, &ri);
		if (r == -ENOENT)
			continue;
		if (r) {
			ret = r;
			continue;
		}
		for (tries = 0; tries < 500; tries++) {	/* ~10 s */
			r = bt_detach(fd, slot, BELUGA_DETACH_EVICT, NULL);
			if (r != -EBUSY)
				break;
			nanosleep(&ts, NULL);
		}
		if (r && r != -ENOENT) {
			fprintf(stderr, "# reset: detach of slot %d: %s\n", slot,
				strerror(-r));
			ret = r;
		}
	}
	close(fd);
	return ret;
}

static inline int bt_reset_pool(void)
{
	return bt_reset_pool_path(BELUGA_DEVICE_PATH);
}

/* Retry DETACH while it answers EBUSY (asynchronous unpinning). */
static inline int bt_detach_retry(int fd, uint32_t id, uint32_t flags,
				  uint64_t *evicted, int max_ms)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	int r, waited = 0;

	for (;;) {
		r = bt_detach(fd, id, flags, evicted);
		if (r != -EBUSY || waited >= max_ms)
			return r;
		nanosleep(&ts, NULL);
		waited += 20;
	}
}

/* ------------------------------------------------------------------ */
/* A common test context, embedded in every fixture.                    */

#define BT_MAX_KIDS	16

struct bt_ctx {
	int fd;				/* O_RDWR on /dev/beluga */
	int backend;			/* of region 0 */
	int nr;				/* regions attached by the fixture */
	struct beluga_attach att[BELUGA_MAX_REGIONS];
	struct beluga_info info;
	void *map;			/* whole-pool mapping, or NULL */
	size_t map_len;
	pid_t kids[BT_MAX_KIDS];	/* children to kill in teardown */
	int nkids;
};

static inline void bt_ctx_init(struct bt_ctx *c)
{
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

/* fork() that remembers the child for teardown. */
static inline pid_t bt_fork(struct bt_ctx *c)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid > 0 && c && c->nkids < BT_MAX_KIDS)
		c->kids[c->nkids++] = pid;
	return pid;
}

/* Wait for a child; returns its exit code, or 128+signal, or -1. */
static inline int bt_wait(struct bt_ctx *c, pid_t pid)
{
	int status, i;

	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return -1;
	}
	if (c) {
		for (i = 0; i < c->nkids; i++)
			if (c->kids[i] == pid)
				c->kids[i] = 0;
	}
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return -1;
}

static inline void bt_ctx_teardown(struct bt_ctx *c)
{
	int i, status;

	for (i = 0; i < c->nkids; i++) {
		if (c->kids[i] > 0) {
			kill(c->kids[i], SIGKILL);
			waitpid(c->kids[i], &status, 0);
			c->kids[i] = 0;
		}
	}
	if (c->map && c->map != MAP_FAILED)
		munmap(c->map, c->map_len);
	c->map = NULL;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

/* Fixture helper: an empty pool and @c->fd open on /dev/beluga. */
static inline void __bt_setup_empty(struct __test_metadata *_metadata,
				    struct bt_ctx *c)
{
	int r;

	r = bt_reset_pool();
	ASSERT_EQ(0, r) TH_LOG("could not empty the pool before the test: %s",
			       strerror(-r));
	c->fd = bt_open(O_RDWR);
	ASSERT_LE(0, c->fd) TH_LOG("open %s: %s", BELUGA_DEVICE_PATH,
				   strerror(errno));
}

#define bt_setup_empty(c)	__bt_setup_empty(_metadata, c)

/*
 * Fixture helper: start from an empty pool, open /dev/beluga and attach
 * one region of @length bytes with @block_size blocks. Returns false
 * (after SKIP) when the backend is not available; the caller must then
 * return from its setup at once.
 */
static inline bool __bt_setup(struct __test_metadata *_metadata,
			      struct bt_ctx *c, int backend, uint64_t length,
			      uint64_t block_size)
{
	char why[160];
	int r;

	bt_ctx_init(c);
	backend = bt_pick_backend(backend);
	if (!bt_backend_ok(backend, 0, length, why, sizeof(why))) {
		SKIP(return false, "%s", why);
	}
	__bt_setup_empty(_metadata, c);
	c->backend = backend;
	ASSERT_EQ(0, bt_attach_req(&c->att[0], backend, 0, 0, length,
				   block_size, backend == BELUGA_BACKEND_NODE ?
				   "bt-node0" : NULL));
	r = bt_attach(c->fd, &c->att[0]);
	ASSERT_EQ(0, r) TH_LOG("ATTACH %s %s len %llu bs %llu: %s",
			       backend == BELUGA_BACKEND_DAX ? "dax" : "node",
			       c->att[0].name, (unsigned long long)length,
			       (unsigned long long)block_size, strerror(-r));
	c->nr = 1;
	ASSERT_EQ(0, bt_info(c->fd, &c->info));
	return true;
}

#define bt_setup(c, backend, length, bs) \
	__bt_setup(_metadata, c, backend, length, bs)

/* Map the whole pool read-write; ASSERTs success. */
static inline void *__bt_map(struct __test_metadata *_metadata,
			     struct bt_ctx *c)
{
	void *p;

	ASSERT_EQ(0, bt_info(c->fd, &c->info));
	ASSERT_LT(0, c->info.map_size);
	p = mmap(NULL, c->info.map_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		 c->fd, 0);
	ASSERT_NE(MAP_FAILED, p) TH_LOG("mmap of %llu bytes: %s",
					(unsigned long long)c->info.map_size,
					strerror(errno));
	c->map = p;
	c->map_len = c->info.map_size;
	return p;
}

#define bt_map(c) __bt_map(_metadata, c)

static inline void bt_unmap(struct bt_ctx *c)
{
	if (c->map)
		munmap(c->map, c->map_len);
	c->map = NULL;
}

/* Teardown: children, mapping, fd, then empty the pool again. */
#define bt_teardown(c) do {						\
	int __r;							\
	bt_ctx_teardown(c);						\
	__r = bt_reset_pool();						\
	EXPECT_EQ(0, __r) TH_LOG("could not detach the test's regions "	\
				 "after the test (leaked pin, mapping or "	\
				 "allocation?): %s", strerror(-__r));	\
} while (0)

/* Occupancy part of STATS must be self-consistent. */
#define ASSERT_STATS_CONSISTENT(st) do {				\
	ASSERT_EQ((st).total_blocks, (st).free_blocks +			\
		  (st).allocated_blocks + (st).published_blocks +	\
		  (st).retired_blocks)					\
		TH_LOG("total %llu != free %llu + allocated %llu + "	\
		       "published %llu + retired %llu",			\
		       (unsigned long long)(st).total_blocks,		\
		       (unsigned long long)(st).free_blocks,		\
		       (unsigned long long)(st).allocated_blocks,	\
		       (unsigned long long)(st).published_blocks,	\
		       (unsigned long long)(st).retired_blocks);	\
	ASSERT_LE((st).pinned_blocks, (st).published_blocks);		\
	ASSERT_LE((st).pinned_blocks, (st).pins);			\
} while (0)

/* The occupancy fields (not the counters) of two snapshots are equal. */
#define ASSERT_OCCUPANCY_EQ(a, b) do {					\
	ASSERT_EQ((a).total_blocks, (b).total_blocks);			\
	ASSERT_EQ((a).free_blocks, (b).free_blocks);			\
	ASSERT_EQ((a).allocated_blocks, (b).allocated_blocks);		\
	ASSERT_EQ((a).published_blocks, (b).published_blocks);		\
	ASSERT_EQ((a).pinned_blocks, (b).pinned_blocks);		\
	ASSERT_EQ((a).pins, (b).pins);					\
} while (0)

/* Region slot of @off among the fixture's regions, or -1. */
static inline int bt_region_of(const struct bt_ctx *c, uint64_t off)
{
	int i;

	for (i = 0; i < c->nr; i++) {
		const struct beluga_attach *a = &c->att[i];

		if (off >= a->first_offset &&
		    off < a->first_offset + a->nr_blocks * c->info.block_size)
			return i;
	}
	return -1;
}

/* Is @off a block offset of one of the fixture's regions? */
static inline bool bt_is_block(const struct bt_ctx *c, uint64_t off)
{
	int i = bt_region_of(c, off);

	return i >= 0 &&
	       (off - c->att[i].first_offset) % c->info.block_size == 0;
}

/*
 * An inaccessible page. It stays reserved (PROT_NONE) rather than unmapped,
 * so that a later mmap() cannot land on it and make it readable again.
 */
static inline void *bt_unmapped_page(void)
{
	void *p = mmap(NULL, BT_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/*
 * Two pages: the first read-write (zeroed), the second inaccessible.
 * Returns the start; (char *)ret + BT_PAGE is the inaccessible address.
 */
static inline void *bt_page_before_hole(void)
{
	char *p = mmap(NULL, 2 * BT_PAGE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	if (mprotect(p + BT_PAGE, BT_PAGE, PROT_NONE)) {
		munmap(p, 2 * BT_PAGE);
		return NULL;
	}
	memset(p, 0, BT_PAGE);
	return p;
}

/* A read-only page (contents zero). */
static inline void *bt_readonly_page(void)
{
	void *p = mmap(NULL, BT_PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* ------------------------------------------------------------------ */
/* Tagged blocks: whether a pinned block's bytes changed.               */

/*
 * The first bytes of a block as bt_tag_write() leaves them: the key's
 * words, then a generation and a check word over the three. A block that
 * is evicted and reused, or scribbled on, while a test holds a pin on it
 * fails bt_tag_ok(); a block republished under its key gets a new @gen.
 */
struct bt_tag {
	uint64_t lo, hi, gen, check;
};

/* @lo is cleared first and set last: a half-written tag is never @k's. */
static inline void bt_tag_write(volatile struct bt_tag *t,
				struct beluga_key k, uint64_t gen)
{
	t->lo = 0;		/* never a valid key word (keys have lo | 1) */
	t->gen = gen;
	t->check = gen ^ k.lo ^ k.hi;
	t->hi = k.hi;
	t->lo = k.lo;
}

/*
 * Does @t hold @k's tag? Each word is read once, into @seen when it is
 * not NULL (for the caller's message, and to compare generations).
 */
static inline bool bt_tag_ok(const volatile struct bt_tag *t,
			     struct beluga_key k, struct bt_tag *seen)
{
	struct bt_tag v;

	/* in this order, one statement each: volatile reads, sequenced */
	v.lo = t->lo;
	v.hi = t->hi;
	v.gen = t->gen;
	v.check = t->check;
	if (seen)
		*seen = v;
	return v.lo == k.lo && v.hi == k.hi &&
	       v.check == (v.gen ^ k.lo ^ k.hi);
}

/*
 * ALLOC a block, tag it for @k with @gen where @map (the first @map_len
 * bytes of the pool's offset space) reaches it, and PUBLISH it under
 * (@ns, @k). 0 when it is published or the key is there already (another
 * file republished it first), else -errno or the item's result.
 */
static inline int bt_publish_tagged(int fd, char *map, size_t map_len,
				    uint64_t ns, struct beluga_key k,
				    uint64_t gen)
{
	uint64_t off;
	int32_t res;
	int r;

	r = bt_alloc(fd, 1, &off);
	if (r)
		return r;
	if (off + sizeof(struct bt_tag) <= map_len)
		bt_tag_write((struct bt_tag *)(map + off), k, gen);
	r = bt_publish1(fd, ns, off, k, &res);
	if (r)
		return r;
	return res == BELUGA_PUBLISH_OK || res == BELUGA_PUBLISH_EXISTS ?
	       0 : res;
}

#endif /* BELUGA_TEST_H */
