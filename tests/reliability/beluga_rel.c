// SPDX-License-Identifier: GPL-2.0
/*
 * beluga_rel: fault, crash and permission tests for /dev/beluga (static,
 * TAP, runs as root in the QEMU guests).
 *
 *   beluga_rel [-l] [TEST...]      run the named tests (default: all but
 *                                  the module-unload ones), -l lists them
 *
 * Faults and crashes
 *   fault-nth-*      every fault point of ATTACH (node, dax), open, ALLOC,
 *                    PUBLISH, LOOKUP+PIN and DETACH in turn is made to fail
 *                    (/proc/thread-self/fail-nth: failslab, fail_page_alloc
 *                    and fail_usercopy); the call fails cleanly or succeeds,
 *                    and a failed call leaves no partial state behind
 *   fault-random     failslab + fail_page_alloc at 10%, task-filtered with
 *                    /proc/self/make-it-fail, over a worker's whole life
 *   kill-alloc       SIGKILL between ALLOC and PUBLISH leaks nothing
 *   kill-batch       SIGKILL at random points of batch loops leaks nothing
 *   fork-ownership   a child shares the parent's file description: its
 *                    allocations and pins; everything returns only when the
 *                    last reference (fd or mapping, in any process) is gone
 *   detach-mapped    DETACH is refused while mapped, even after close()
 *   attach-detach-race  ATTACH while another process DETACHes every slot:
 *                    documented errors only, an empty pool at the end
 *   mapping-counts   the region's mapping count equals the process's VMAs
 *                    through splits, merges, mremap, madvise and fork
 *   pinned-checksum  readers verify every block they pin while writers
 *                    force eviction and an admin evicts namespaces
 *   abi-ro-struct    a command whose answer cannot be written back fails
 *                    with -EFAULT and leaves what the uapi says, command
 *                    by command ("The answer and -EFAULT")
 * Permissions
 *   perm-unpriv      a non-root uid cannot ATTACH, DETACH or EVICT
 *   perm-readonly    without write access: no ALLOC/FREE/PUBLISH, no
 *                    writable mapping; LOOKUP and read mappings work
 *   ns-keys          namespaces separate keys, not memory
 *   pools-isolation  with pools=N: a tenant that can open only pool A
 *                    cannot find, pin, map or read pool B's blocks
 * Module (opt-in: the last tests of a run; the module is loaded again)
 *   rmmod            refused while a file or only a mapping is open;
 *                    succeeds after the last close; the module reloads
 *   fault-nth-modload  every fault point of finit_module() with pools=2 and
 *                    node= fails in turn: a failed load leaves nothing, a
 *                    successful one unloads
 *
 * Environment: BELUGA_TEST_NODE, BELUGA_TEST_DAX (see rel.h),
 * BELUGA_MODPROBE_ARGS (module parameters for the reload, e.g. "pools=2").
 */
#include "rel.h"

#include <grp.h>
#include <pthread.h>
#include <sys/syscall.h>

#define BSIZE		(16 * BT_KIB)
#define REGION		(4 * BT_MIB)

static char why[512];

#define FAILF(...) do { snprintf(why, sizeof(why), __VA_ARGS__); return false; } while (0)
#define REQUIRE(cond, ...) do { if (!(cond)) FAILF(__VA_ARGS__); } while (0)

static const char *en(int r)
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
static int fresh_pool(uint64_t len, uint64_t bsize, bool want_dax)
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

static uint64_t ns_unique(uint64_t salt)
{
	return bt_mix64(((uint64_t)getpid() << 24) ^ salt ^ (uint64_t)time(NULL));
}

/* Wait for a child; returns its exit status, 128+sig when killed. */
static int reap(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static bool quiet(int fd, uint64_t clients, const char *when)
{
	struct beluga_stats s;

	if (rel_wait_quiet(fd, clients, 3000, &s))
		return true;
	rel_stats_print(when, &s);
	FAILF("%s: %llu blocks still allocated, %llu pins, %llu clients (want %llu)",
	      when, (rel_ull)s.allocated_blocks, (rel_ull)s.pins, (rel_ull)s.clients,
	      (rel_ull)clients);
}

/* ------------------------------------------------------------------ */
/* Fault injection                                                      */

#define DBG "/sys/kernel/debug"

static bool fi_available(void)
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
static void fi_configure(int probability)
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
static void kmsg(const char *msg)
{
	int fd = open("/dev/kmsg", O_WRONLY | O_CLOEXEC);

	if (fd >= 0) {
		ssize_t n = write(fd, msg, strlen(msg));

		(void)n;
		close(fd);
	}
}

static int nth_fd = -1;

static void fail_nth_set(unsigned int n)
{
	char buf[16];
	int len = snprintf(buf, sizeof(buf), "%u", n);

	if (nth_fd < 0)
		nth_fd = open("/proc/thread-self/fail-nth", O_RDWR | O_CLOEXEC);
	/* -EFAULT: the write itself was the n-th point (then it is disarmed) */
	if (pwrite(nth_fd, buf, len, 0) < 0 && errno != EFAULT)
		perror("fail-nth");
}

static unsigned int fail_nth_get(void)
{
	char buf[16] = "";

	if (pread(nth_fd, buf, sizeof(buf) - 1, 0) <= 0)
		return 0;
	return (unsigned int)strtoul(buf, NULL, 10);
}

/*
 * One fault-nth target: prepare (no faults), run the operation with the
 * n-th fault point failing, then check the state and undo the effect.
 */
struct nth_ctx {
	int fd;
	uint64_t ns;
	uint64_t offs[8];
	struct beluga_key keys[8];
	struct beluga_stats before;
	uint32_t regions_before;
	int extra_fd;
	uint32_t slot;
	struct beluga_attach req;	/* ATTACH: prepared, not read from sysfs while armed */
};

struct nth_op {
	const char *name;
	bool (*prepare)(struct nth_ctx *c);
	int (*run)(struct nth_ctx *c);
	/* r: the run's result; injected: the n-th point was reached */
	bool (*check)(struct nth_ctx *c, int r, bool injected);
};

static uint32_t nr_regions(int fd)
{
	struct beluga_info info;

	return bt_info(fd, &info) ? UINT32_MAX : info.nr_regions;
}

static bool occupancy_same(int fd, const struct beluga_stats *a, const char *what)
{
	struct beluga_stats b;

	REQUIRE(bt_stats(fd, &b) == 0, "STATS failed");
	REQUIRE(a->total_blocks == b.total_blocks && a->free_blocks == b.free_blocks &&
		a->allocated_blocks == b.allocated_blocks &&
		a->published_blocks == b.published_blocks && a->pins == b.pins &&
		a->pinned_blocks == b.pinned_blocks && a->clients == b.clients,
		"%s left partial state: total %llu->%llu free %llu->%llu allocated "
		"%llu->%llu published %llu->%llu pins %llu->%llu clients %llu->%llu", what,
		(rel_ull)a->total_blocks, (rel_ull)b.total_blocks, (rel_ull)a->free_blocks,
		(rel_ull)b.free_blocks, (rel_ull)a->allocated_blocks,
		(rel_ull)b.allocated_blocks, (rel_ull)a->published_blocks,
		(rel_ull)b.published_blocks, (rel_ull)a->pins, (rel_ull)b.pins,
		(rel_ull)a->clients, (rel_ull)b.clients);
	return true;
}

static bool err_ok(int r)
{
	return r == -ENOMEM || r == -EFAULT || r == -EINTR;
}

/* ATTACH (node or dax): on failure nothing is attached, the name is free. */
static bool prep_none(struct nth_ctx *c)
{
	(void)c;
	return true;
}

static bool prep_attach_node(struct nth_ctx *c)
{
	memset(&c->req, 0, sizeof(c->req));
	c->req.size = sizeof(c->req);
	c->req.backend = BELUGA_BACKEND_NODE;
	c->req.node = rel_env_node();
	c->req.length = 2 * BT_MIB;
	c->req.block_size = BSIZE;
	snprintf(c->req.name, sizeof(c->req.name), "nth-extra");
	REQUIRE(c->req.node >= 0, "BELUGA_TEST_NODE not set");
	return true;
}

/* The second dax device, or 2 MiB of the first past the fixture region. */
static bool prep_attach_dax(struct nth_ctx *c)
{
	char dev[64];
	uint64_t phys, size, skip = 0;

	if (rel_env_dax(1, dev, sizeof(dev))) {
		REQUIRE(rel_env_dax(0, dev, sizeof(dev)) == 0, "BELUGA_TEST_DAX not set");
		skip = REGION;
	}
	REQUIRE(bt_dax_geometry(dev, &phys, &size) == 0 && size >= skip + 2 * BT_MIB,
		"%s: no room", dev);
	memset(&c->req, 0, sizeof(c->req));
	c->req.size = sizeof(c->req);
	c->req.backend = BELUGA_BACKEND_DAX;
	c->req.node = -1;
	c->req.phys_start = phys + skip;
	c->req.length = 2 * BT_MIB;
	c->req.block_size = BSIZE;
	snprintf(c->req.name, sizeof(c->req.name), "nth-extra");
	return true;
}

static int run_attach(struct nth_ctx *c)
{
	struct beluga_attach a = c->req;
	int r = rel_attach(c->fd, &a);

	c->slot = a.region_id;
	return r;
}

static bool check_attach(struct nth_ctx *c, int r, bool injected)
{
	char path[128];
	int r2;

	if (r == 0) {
		REQUIRE(nr_regions(c->fd) == c->regions_before + 1, "ATTACH succeeded, "
			"but nr_regions did not grow");
		snprintf(path, sizeof(path), "/sys/class/misc/beluga/region%u", c->slot);
		REQUIRE(access(path, F_OK) == 0, "ATTACH succeeded without %s", path);
		r2 = rel_detach(c->fd, c->slot, BELUGA_DETACH_EVICT);
		REQUIRE(r2 == 0, "DETACH after a successful ATTACH: %s", en(r2));
		return true;
	}
	REQUIRE(injected, "ATTACH failed (%s) with no fault injected", en(r));
	REQUIRE(err_ok(r), "ATTACH with an injected fault: %s (want -ENOMEM/-EFAULT)",
		en(r));
	REQUIRE(nr_regions(c->fd) == c->regions_before, "ATTACH failed with %s but the "
		"region was attached (nr_regions %u -> %u)", en(r), c->regions_before,
		nr_regions(c->fd));
	if (!occupancy_same(c->fd, &c->before, "failed ATTACH"))
		return false;
	/* the name and range are free again: the caller retries */
	return true;
}

static bool check_attach_retry(struct nth_ctx *c)
{
	int r = run_attach(c);

	REQUIRE(r == 0, "ATTACH after a failed one: %s (partial state left?)", en(r));
	r = rel_detach(c->fd, c->slot, BELUGA_DETACH_EVICT);
	REQUIRE(r == 0, "DETACH after the retried ATTACH: %s", en(r));
	return true;
}

static bool check_attach_any(struct nth_ctx *c, int r, bool injected)
{
	if (!check_attach(c, r, injected))
		return false;
	return r == 0 || check_attach_retry(c);
}

/* open(): on failure no client is left counted. */
static int run_open(struct nth_ctx *c)
{
	c->extra_fd = bt_open(O_RDWR);
	return c->extra_fd < 0 ? -errno : 0;
}

static bool check_open(struct nth_ctx *c, int r, bool injected)
{
	if (r == 0) {
		close(c->extra_fd);
		return quiet(c->fd, c->before.clients, "after close");
	}
	REQUIRE(injected, "open failed (%s) with no fault injected", en(r));
	REQUIRE(r == -ENOMEM || r == -EFAULT || r == -ENFILE || r == -EMFILE,
		"open with an injected fault: %s", en(r));
	return occupancy_same(c->fd, &c->before, "failed open");
}

/* ALLOC 8: on failure nothing allocated. */
static int run_alloc(struct nth_ctx *c)
{
	memset(c->offs, 0xff, sizeof(c->offs));
	return bt_alloc(c->fd, 8, c->offs);
}

static bool check_alloc(struct nth_ctx *c, int r, bool injected)
{
	if (r == 0) {
		int f = bt_free(c->fd, 8, c->offs);

		REQUIRE(f == 0, "FREE of the 8 blocks ALLOC returned: %s", en(f));
		return occupancy_same(c->fd, &c->before, "ALLOC + FREE");
	}
	REQUIRE(injected, "ALLOC failed (%s) with no fault injected", en(r));
	REQUIRE(err_ok(r), "ALLOC with an injected fault: %s", en(r));
	if (c->offs[0] != UINT64_MAX)
		why[0] = 0;	/* the offsets were written: say so if state changed */
	if (!occupancy_same(c->fd, &c->before, c->offs[0] != UINT64_MAX ?
			    "ALLOC failed after writing the offsets array (the struct "
			    "copy-back failed?) and" : "failed ALLOC"))
		return false;
	if (c->offs[0] != UINT64_MAX) {
		int f = bt_free(c->fd, 8, c->offs);

		REQUIRE(f == -EINVAL, "ALLOC failed (%s) but its blocks are still "
			"allocated to the file (FREE: %s)", en(r), en(f));
	}
	return true;
}

/* PUBLISH 4 allocated blocks: on failure before taking effect, all four
 * remain ALLOCATED; -EFAULT after taking effect: all four published. */
static bool prep_publish(struct nth_ctx *c)
{
	int r = bt_alloc(c->fd, 4, c->offs);

	REQUIRE(r == 0, "ALLOC for PUBLISH: %s", en(r));
	c->ns = ns_unique((uint64_t)c->offs[0]);
	for (int i = 0; i < 4; i++)
		c->keys[i] = bt_key(c->ns, (uint64_t)i);
	return bt_stats(c->fd, &c->before) == 0;
}

static int run_publish(struct nth_ctx *c)
{
	struct beluga_publish_item it[4];

	memset(it, 0, sizeof(it));
	for (int i = 0; i < 4; i++) {
		it[i].offset = c->offs[i];
		it[i].key = c->keys[i];
	}
	return bt_publish(c->fd, c->ns, it, 4, NULL);
}

static bool check_publish(struct nth_ctx *c, int r, bool injected)
{
	struct beluga_stats s;
	uint32_t hits = 0;
	int l, f;

	l = bt_lookup(c->fd, c->ns, c->keys, 4, NULL, 0, &hits);
	REQUIRE(l == 0, "LOOKUP after PUBLISH: %s", en(l));
	if (r) {
		REQUIRE(injected, "PUBLISH failed (%s) with no fault injected", en(r));
		REQUIRE(err_ok(r), "PUBLISH with an injected fault: %s", en(r));
	}
	if (hits == 0) {
		REQUIRE(r != 0, "PUBLISH succeeded, but no key is visible");
		/* failed before taking effect: the blocks are still ours */
		if (!occupancy_same(c->fd, &c->before, "failed PUBLISH"))
			return false;
		f = bt_free(c->fd, 4, c->offs);
		REQUIRE(f == 0, "PUBLISH failed (%s) before taking effect, but its "
			"blocks are no longer ALLOCATED to the file (FREE: %s)", en(r), en(f));
		return true;
	}
	REQUIRE(hits == 4, "PUBLISH (%s) made %u of 4 keys visible: partial state",
		en(r), hits);
	REQUIRE(r == 0 || r == -EFAULT, "PUBLISH took effect but returned %s", en(r));
	REQUIRE(bt_stats(c->fd, &s) == 0 && s.allocated_blocks + 4 ==
		c->before.allocated_blocks, "PUBLISH took effect, allocated count wrong");
	REQUIRE(rel_evict_ns(c->fd, c->ns, NULL, NULL) == 0, "EVICT ns");
	return true;
}

/* LOOKUP+PIN 4 published keys: on failure no pin is left. */
static bool prep_lookup(struct nth_ctx *c)
{
	int32_t res;

	c->ns = ns_unique(0x100);
	for (int i = 0; i < 4; i++) {
		uint64_t off;
		int r = bt_alloc(c->fd, 1, &off);

		REQUIRE(r == 0, "ALLOC: %s", en(r));
		c->keys[i] = bt_key(c->ns, (uint64_t)i);
		r = bt_publish1(c->fd, c->ns, off, c->keys[i], &res);
		REQUIRE(r == 0 && res == 0, "PUBLISH: %s/%d", en(r), res);
	}
	return bt_stats(c->fd, &c->before) == 0;
}

static int run_lookup(struct nth_ctx *c)
{
	uint32_t hits = 0;
	int r;

	memset(c->offs, 0xff, sizeof(c->offs));
	r = bt_lookup(c->fd, c->ns, c->keys, 4, c->offs, BELUGA_LOOKUP_PIN, &hits);
	return r ? r : (int)hits;
}

static bool check_lookup(struct nth_ctx *c, int r, bool injected)
{
	if (r >= 0) {
		int rr;

		REQUIRE(r == 4, "LOOKUP+PIN found %d of 4", r);
		rr = bt_release(c->fd, 4, c->offs);
		REQUIRE(rr == 0, "RELEASE of 4 pins: %s", en(rr));
	} else {
		REQUIRE(injected, "LOOKUP failed (%s) with no fault injected", en(r));
		REQUIRE(err_ok(r), "LOOKUP+PIN with an injected fault: %s", en(r));
		if (!occupancy_same(c->fd, &c->before, c->offs[0] != UINT64_MAX ?
				    "LOOKUP+PIN failed after writing the offsets array (the "
				    "struct copy-back failed?) and" : "failed LOOKUP+PIN"))
			return false;
	}
	REQUIRE(rel_evict_ns(c->fd, c->ns, NULL, NULL) == 0, "EVICT ns");
	return true;
}

/* DETACH of an extra region: on failure it is still fully attached. */
static bool prep_detach(struct nth_ctx *c)
{
	struct beluga_attach a = { 0 };
	int r = rel_attach_node(c->fd, 2 * BT_MIB, BSIZE, "nth-detach", &a);

	if (r == -ENOENT)
		r = rel_attach_dax(c->fd, 0, REGION, 2 * BT_MIB, BSIZE, "nth-detach", &a);
	REQUIRE(r == 0, "ATTACH for DETACH: %s", en(r));
	c->slot = a.region_id;
	c->regions_before = nr_regions(c->fd);
	return bt_stats(c->fd, &c->before) == 0;
}

static int run_detach(struct nth_ctx *c)
{
	return rel_detach(c->fd, c->slot, BELUGA_DETACH_EVICT);
}

static bool check_detach(struct nth_ctx *c, int r, bool injected)
{
	if (r == 0)
		return nr_regions(c->fd) == c->regions_before - 1 ||
		       (snprintf(why, sizeof(why), "DETACH succeeded, region count wrong"), false);
	REQUIRE(injected, "DETACH failed (%s) with no fault injected", en(r));
	REQUIRE(err_ok(r), "DETACH with an injected fault: %s", en(r));
	/*
	 * The uapi's one exception: DETACH cannot be undone, so a struct that
	 * cannot be written back after the region went (an injected usercopy
	 * fault here; another thread's munmap in real life) leaves it
	 * detached, whole, with -EFAULT.
	 */
	if (r == -EFAULT && nr_regions(c->fd) == c->regions_before - 1) {
		struct beluga_region_info ri;

		REQUIRE(bt_region_info(c->fd, c->slot, &ri) == -ENOENT, "DETACH "
			"returned -EFAULT, one region fewer, but slot %u still answers",
			c->slot);
		return true;
	}
	REQUIRE(nr_regions(c->fd) == c->regions_before, "DETACH failed with %s but the "
		"region was detached", en(r));
	r = rel_detach(c->fd, c->slot, BELUGA_DETACH_EVICT);
	REQUIRE(r == 0, "DETACH after a failed one: %s", en(r));
	return true;
}

static const struct nth_op nth_ops[] = {	/* t_nthN: index N */
	{ "attach-node", prep_attach_node, run_attach, check_attach_any },
	{ "attach-dax", prep_attach_dax, run_attach, check_attach_any },
	{ "open", prep_none, run_open, check_open },
	{ "alloc", prep_none, run_alloc, check_alloc },
	{ "publish", prep_publish, run_publish, check_publish },
	{ "lookup-pin", prep_lookup, run_lookup, check_lookup },
	{ "detach", prep_detach, run_detach, check_detach },
};

/*
 * Every fault point in turn. After a failed check the pool is rebuilt and
 * the scan goes on, so that one run reports every distinct kind of failure
 * (the message without its fault point), each with the first point.
 */
static bool t_fault_nth_one(const struct nth_op *op, int *points)
{
	char found[4][512];
	int nfound = 0, nfail = 0;
	struct nth_ctx c;
	int r;

	memset(&c, 0, sizeof(c));
	c.fd = bt_open(O_RDWR);
	REQUIRE(c.fd >= 0, "open: %s", strerror(errno));
	for (unsigned int n = 1; n <= 400; n++) {
		unsigned int left;
		bool ok;

		c.regions_before = nr_regions(c.fd);
		why[0] = 0;
		if (bt_stats(c.fd, &c.before) || !op->prepare(&c)) {
			if (!why[0])
				snprintf(why, sizeof(why), "prepare failed");
			close(c.fd);
			return false;
		}
		fail_nth_set(n);
		r = op->run(&c);
		left = fail_nth_get();
		fail_nth_set(0);
		ok = op->check(&c, r, left == 0);
		if (getenv("BELUGA_REL_VERBOSE"))
			rel_diag("%s: fault point %u: result %s, %s, check %s%s%s", op->name, n,
				 en(r), left ? "not reached" : "injected", ok ? "ok" : "FAILED: ",
				 ok ? "" : why, "");
		if (!ok) {
			bool seen = false;

			nfail++;
			for (int i = 0; i < nfound; i++)
				seen |= !strcmp(found[i], why);
			if (!seen && nfound < 4) {
				memcpy(found[nfound], why, sizeof(why));
				rel_diag("%s: %s (first at fault point %u)", op->name, why, n);
				nfound++;
			}
			/* start over from a clean pool and file */
			close(c.fd);
			r = fresh_pool(REGION, BSIZE, false);
			c.fd = bt_open(O_RDWR);
			REQUIRE(r == 0 && c.fd >= 0, "rebuilding the pool after a failure: %s",
				en(r));
		}
		if (left) {	/* fewer than n fault points: every one was tried */
			*points = (int)n - 1;
			break;
		}
	}
	close(c.fd);
	if (nfail)
		FAILF("%d of %d fault points left the state wrong; %d kind(s) above", nfail,
		      *points < 0 ? 400 : *points, nfound);
	return true;
}

static bool t_fault_nth(int i)
{
	int points = -1;
	bool ok;

	fi_configure(0);
	why[0] = 0;
	kmsg("beluga-fault-inject: begin\n");
	ok = t_fault_nth_one(&nth_ops[i], &points);
	kmsg("beluga-fault-inject: end\n");
	if (ok && points < 0)
		FAILF("still failing at fault point 400");
	if (ok)
		rel_diag("%s: %d fault points, each failed once", nth_ops[i].name, points);
	return ok;
}

#define NTH(i) static bool t_nth##i(void) { return t_fault_nth(i); }
NTH(0) NTH(1) NTH(2) NTH(3) NTH(4) NTH(5) NTH(6)

/* failslab + fail_page_alloc at 10% for one task's whole life. */
static bool t_fault_random(void)
{
	int fd = bt_open(O_RDWR), r;
	uint64_t ns = ns_unique(7);
	struct beluga_stats st0;
	pid_t pid;

	REQUIRE(fd >= 0, "open");
	REQUIRE(bt_stats(fd, &st0) == 0, "STATS");
	fi_configure(10);
	kmsg("beluga-fault-inject: begin\n");
	pid = fork();
	if (pid == 0) {
		struct rel_rng rng = { 0x5eedULL };
		uint64_t offs[16], pins[64];
		int npins = 0, cfd, errors = 0, bad = 0;

		if (bt_write_str("/proc/self/make-it-fail", "1"))
			_exit(3);
		for (int it = 0; it < 300; it++) {
			struct beluga_publish_item items[16];
			uint32_t n = 1 + (uint32_t)rel_below(&rng, 8), hits = 0;

			cfd = bt_open(O_RDWR);
			if (cfd < 0) {
				errors++;
				continue;
			}
			r = bt_alloc(cfd, n, offs);
			if (r == 0) {
				memset(items, 0, sizeof(items));
				for (uint32_t i = 0; i < n; i++) {
					items[i].offset = offs[i];
					items[i].key = bt_key(ns, rel_below(&rng, 64));
				}
				r = bt_publish(cfd, ns, items, n, NULL);
				if (r && !err_ok(r))
					bad++;
			} else if (!err_ok(r) && r != -ENOSPC) {
				bad++;
			}
			{
				struct beluga_key keys[8];

				for (int i = 0; i < 8; i++)
					keys[i] = bt_key(ns, rel_below(&rng, 64));
				npins = 0;
				r = bt_lookup(cfd, ns, keys, 8, pins,
					       BELUGA_LOOKUP_PIN, &hits);
				if (r == 0)
					npins = (int)hits;
				else if (!err_ok(r))
					bad++;
				if (npins && rel_one_in(&rng, 2)) {
					r = bt_release(cfd, npins, pins);
					if (r && !err_ok(r))
						bad++;
				}
			}
			if (r)
				errors++;
			close(cfd);	/* whatever is left returns here */
		}
		bt_write_str("/proc/self/make-it-fail", "0");
		_exit(bad ? 1 : 0);
	}
	r = reap(pid);
	fi_configure(0);
	kmsg("beluga-fault-inject: end\n");
	REQUIRE(r == 0, "the faulting worker exited with %d (1: an error outside "
		"-ENOMEM/-EFAULT/-ENOSPC)", r);
	if (!quiet(fd, st0.clients, "after the faulting worker"))
		return false;
	rel_evict_ns(fd, ns, NULL, NULL);
	close(fd);
	return true;
}

/* ------------------------------------------------------------------ */
/* Crashes                                                              */

static bool t_kill_alloc(void)
{
	int fd = bt_open(O_RDWR), p[2];
	struct beluga_stats s0, s;
	char c;
	pid_t pid;

	REQUIRE(fd >= 0 && bt_stats(fd, &s0) == 0, "open/STATS");
	REQUIRE(pipe(p) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		int cfd = bt_open(O_RDWR);
		uint64_t offs[8];
		uint8_t *map;

		if (cfd < 0 || bt_alloc(cfd, 8, offs))
			_exit(1);
		map = rel_map(cfd, offs[7] + BSIZE, PROT_READ | PROT_WRITE);
		if (!map)
			_exit(2);
		for (int i = 0; i < 8; i++)
			bt_fill(map + offs[i], BSIZE, i);
		/* written, not yet published: now die */
		if (write(p[1], "x", 1) != 1)
			_exit(3);
		pause();
		_exit(0);
	}
	close(p[1]);
	REQUIRE(read(p[0], &c, 1) == 1, "the child did not get to ALLOC (status %d)",
		reap(pid));
	close(p[0]);
	REQUIRE(bt_stats(fd, &s) == 0 && s.allocated_blocks == s0.allocated_blocks + 8 &&
		s.clients == s0.clients + 1, "the child's 8 blocks are not allocated");
	kill(pid, SIGKILL);
	REQUIRE(reap(pid) == 128 + SIGKILL, "child status");
	if (!quiet(fd, s0.clients, "after SIGKILL between ALLOC and PUBLISH"))
		return false;
	REQUIRE(bt_stats(fd, &s) == 0 && s.free_blocks == s0.free_blocks,
		"free blocks %llu, was %llu", (rel_ull)s.free_blocks, (rel_ull)s0.free_blocks);
	close(fd);
	return true;
}

static bool t_kill_batch(void)
{
	int fd = bt_open(O_RDWR);
	struct beluga_stats s0;
	struct rel_rng rng = { 0xba7c4ULL };
	uint64_t ns = ns_unique(0xba7c4);

	REQUIRE(fd >= 0 && bt_stats(fd, &s0) == 0, "open/STATS");
	for (int round = 0; round < 24; round++) {
		pid_t pid = fork();

		if (pid == 0) {
			int cfd = bt_open(O_RDWR);
			struct rel_rng r2 = { (uint64_t)round };
			struct beluga_publish_item it[64];
			struct beluga_key keys[64];
			uint64_t offs[64], pins[64];
			uint32_t hits;

			for (;;) {
				uint32_t n = 16 + (uint32_t)rel_below(&r2, 48);

				if (bt_alloc(cfd, n, offs) == 0) {
					memset(it, 0, sizeof(it));
					for (uint32_t i = 0; i < n; i++) {
						it[i].offset = offs[i];
						it[i].key = bt_key(ns, rel_below(&r2, 512));
					}
					bt_publish(cfd, ns, it, n, NULL);
				}
				for (uint32_t i = 0; i < 64; i++)
					keys[i] = bt_key(ns, rel_below(&r2, 512));
				if (bt_lookup(cfd, ns, keys, 64, pins, BELUGA_LOOKUP_PIN,
					       &hits) == 0 && hits && rel_one_in(&r2, 2))
					bt_release(cfd, hits, pins);
			}
		}
		rel_msleep(1 + (unsigned int)rel_below(&rng, 60));
		kill(pid, SIGKILL);
		REQUIRE(reap(pid) == 128 + SIGKILL, "batch child did not die by SIGKILL");
		if (!quiet(fd, s0.clients, "after SIGKILL during batch calls"))
			return false;
	}
	rel_evict_ns(fd, ns, NULL, NULL);
	close(fd);
	return true;
}

/* Mappings counted in the pool's first region. */
static int mappings0(int fd)
{
	struct beluga_region_info ri;

	for (uint32_t s = 0; s < BELUGA_MAX_REGIONS; s++)
		if (bt_region_info(fd, s, &ri) == 0)
			return (int)ri.mappings;
	return -1;
}

static bool t_fork_ownership(void)
{
	int fd = bt_open(O_RDWR), afd = bt_open(O_RDWR), r;
	struct beluga_stats s0, s;
	uint64_t a[2], pin, ns = ns_unique(0xf0), base;
	struct beluga_key key = bt_key(ns, 1);
	uint32_t hits;
	uint8_t *map;
	int32_t res;
	pid_t pid;

	REQUIRE(fd >= 0 && afd >= 0 && bt_stats(afd, &s0) == 0, "open/STATS");
	base = s0.clients - 1;		/* without fd: afd and whoever else */
	/* a published key, pinned by fd; two blocks allocated by fd */
	REQUIRE(bt_alloc(fd, 1, &pin) == 0, "ALLOC");
	map = rel_map(fd, REGION, PROT_READ | PROT_WRITE);
	REQUIRE(map, "mmap: %s", strerror(errno));
	bt_fill(map + pin, BSIZE, 0xf0f0);
	REQUIRE(bt_publish1(fd, ns, pin, key, &res) == 0 && res == 0, "PUBLISH");
	REQUIRE(bt_lookup(fd, ns, &key, 1, &pin, BELUGA_LOOKUP_PIN, &hits) == 0 &&
		hits == 1, "LOOKUP+PIN");
	REQUIRE(bt_alloc(fd, 2, a) == 0, "ALLOC 2");
	REQUIRE(mappings0(afd) == 1, "mappings %d, want 1", mappings0(afd));

	/* 1. the child shares the description: it may free and release them */
	pid = fork();
	if (pid == 0) {
		uint64_t b;
		int own;

		if (mappings0(fd) != 2)		/* the VMA was copied: vm_open */
			_exit(10);
		if (bt_check(map + pin, BSIZE, 0xf0f0) >= 0)
			_exit(11);
		if (bt_alloc(fd, 1, &b))	/* stays with the shared file */
			_exit(14);
		if (bt_free(fd, 1, &a[0]))	/* the parent's allocation */
			_exit(12);
		if (bt_release(fd, 1, &pin))	/* the parent's pin */
			_exit(13);
		/* a fresh open is a different owner */
		own = bt_open(O_RDWR);
		if (own < 0 || bt_free(own, 1, &a[1]) != -EINVAL)
			_exit(15);
		close(own);
		/* hand b to the parent through the exit status */
		_exit(b / BSIZE < 100 ? 100 + (int)(b / BSIZE) : 99);
	}
	r = reap(pid);
	REQUIRE(r >= 99, "fork child step failed with status %d (10: mapping count, 11: "
		"bytes, 12: FREE of parent's block, 13: RELEASE of parent's pin, 14: ALLOC, "
		"15: a new open could free the parent's block)", r);
	REQUIRE(mappings0(afd) == 1, "mappings after the child's exit: %d, want 1",
		mappings0(afd));
	REQUIRE(bt_stats(afd, &s) == 0, "STATS");
	/* a[1] and the child's block are still allocated to the shared file */
	REQUIRE(s.allocated_blocks == s0.allocated_blocks + 2 && s.pins == s0.pins,
		"after the child: allocated %llu (want %llu), pins %llu (want %llu)",
		(rel_ull)s.allocated_blocks, (rel_ull)s0.allocated_blocks + 2,
		(rel_ull)s.pins, (rel_ull)s0.pins);
	REQUIRE(bt_free(fd, 1, &a[0]) == -EINVAL, "the child's FREE did not stick");
	REQUIRE(bt_release(fd, 1, &pin) == -EINVAL, "the child's RELEASE did not stick");
	if (r >= 100) {
		uint64_t b = (uint64_t)(r - 100) * BSIZE;

		REQUIRE(bt_free(fd, 1, &b) == 0, "the parent cannot FREE the child's "
			"allocation 0x%llx", (rel_ull)b);
		REQUIRE(bt_alloc(fd, 1, &b) == 0, "ALLOC");
	}

	/* 2. the last reference decides: parent closes, a child keeps it open */
	int p1[2], p2[2];
	char c;

	REQUIRE(pipe(p1) == 0 && pipe(p2) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		close(p1[0]);
		close(p2[1]);
		if (write(p1[1], "r", 1) != 1)
			_exit(1);
		if (read(p2[0], &c, 1) != 1)	/* wait for the parent to close */
			_exit(2);
		_exit(0);	/* the last reference goes with us */
	}
	close(p1[1]);
	close(p2[0]);
	REQUIRE(read(p1[0], &c, 1) == 1, "child");
	munmap(map, REGION);
	close(fd);
	rel_msleep(50);
	REQUIRE(bt_stats(afd, &s) == 0 && s.allocated_blocks == s0.allocated_blocks + 2 &&
		s.clients == base + 1,
		"the parent closed, a child still holds the file: allocated %llu (want "
		"%llu), clients %llu (want %llu)", (rel_ull)s.allocated_blocks,
		(rel_ull)s0.allocated_blocks + 2, (rel_ull)s.clients, (rel_ull)base + 1);
	REQUIRE(write(p2[1], "x", 1) == 1, "pipe");
	REQUIRE(reap(pid) == 0, "child 2");
	close(p1[0]);
	close(p2[1]);
	if (!quiet(afd, base, "after the last reference"))
		return false;

	/* 3. a mapping alone keeps the file (and its blocks) alive */
	fd = bt_open(O_RDWR);
	REQUIRE(fd >= 0 && bt_alloc(fd, 2, a) == 0, "ALLOC");
	map = rel_map(fd, REGION, PROT_READ);
	REQUIRE(map, "mmap");
	close(fd);
	REQUIRE(bt_stats(afd, &s) == 0 && s.allocated_blocks == s0.allocated_blocks + 2 &&
		s.clients == base + 1,
		"closed fd with a live mapping: allocated %llu (want %llu), clients %llu",
		(rel_ull)s.allocated_blocks, (rel_ull)s0.allocated_blocks + 2,
		(rel_ull)s.clients);
	munmap(map, REGION);
	if (!quiet(afd, base, "after munmap of the last mapping"))
		return false;
	rel_evict_ns(afd, ns, NULL, NULL);
	close(afd);
	return true;
}

static bool t_detach_mapped(void)
{
	int fd = bt_open(O_RDWR), afd = bt_open(O_RDWR), r;
	struct beluga_region_info ri;
	uint32_t slot = UINT32_MAX;
	void *map;

	REQUIRE(fd >= 0 && afd >= 0, "open");
	for (uint32_t s = 0; s < BELUGA_MAX_REGIONS && slot == UINT32_MAX; s++)
		if (bt_region_info(afd, s, &ri) == 0)
			slot = s;
	REQUIRE(slot != UINT32_MAX, "no region");
	map = rel_map(fd, REGION, PROT_READ);
	REQUIRE(map, "mmap");
	r = rel_detach(afd, slot, BELUGA_DETACH_EVICT);
	REQUIRE(r == -EBUSY, "DETACH while mapped: %s (want -EBUSY)", en(r));
	close(fd);
	r = rel_detach(afd, slot, BELUGA_DETACH_EVICT);
	REQUIRE(r == -EBUSY, "DETACH while mapped by a closed file: %s", en(r));
	munmap(map, REGION);
	r = rel_detach(afd, slot, BELUGA_DETACH_EVICT);
	REQUIRE(r == 0, "DETACH after the last munmap: %s", en(r));
	close(afd);
	return true;
}

/*
 * ATTACH racing DETACH of the same slot: a child detaches every slot in a
 * loop while the parent attaches and detaches small node regions. The
 * kernel must not touch a region after it dropped its locks (the fuzzer
 * found ATTACH logging through a region another process had just freed:
 * KASAN slab-use-after-free); the lane's log scan catches that. Here:
 * every call answers a documented error and the pool ends empty.
 */
/* 2 MiB of the test node, or of the first dax device without one. */
static int attach_small(int fd, const char *name, struct beluga_attach *a)
{
	int r = rel_attach_node(fd, 2 * BT_MIB, BSIZE, name, a);

	if (r == -ENOENT)
		r = rel_attach_dax(fd, 0, 0, 2 * BT_MIB, BSIZE, name, a);
	return r;
}

static bool t_attach_detach_race(void)
{
	int fd = bt_open(O_RDWR), r, st, attached = 0, lost = 0;
	struct beluga_attach a;
	double end;
	pid_t pid;

	REQUIRE(fd >= 0, "open");
	REQUIRE(rel_reset_pool_fd(fd, 2000) == 0, "empty the pool first");
	r = attach_small(fd, "race-probe", &a);
	REQUIRE(r == 0, "ATTACH of a small region: %s", en(r));
	REQUIRE(rel_detach(fd, a.region_id, BELUGA_DETACH_EVICT) == 0, "DETACH");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		end = rel_now() + 3.0;
		while (rel_now() < end)
			for (uint32_t s = 0; s < 4; s++) {
				r = rel_detach(fd, s, BELUGA_DETACH_EVICT);
				if (r && r != -ENOENT && r != -EBUSY)
					_exit(1);
			}
		_exit(0);
	}
	end = rel_now() + 3.0;
	while (rel_now() < end) {
		r = attach_small(fd, "race", &a);
		if (r == -EBUSY)	/* still detaching the last one */
			continue;
		REQUIRE(r == 0, "ATTACH during the DETACH loop: %s", en(r));
		attached++;
		r = rel_detach(fd, a.region_id, BELUGA_DETACH_EVICT);
		if (r == -ENOENT)
			lost++;		/* the child was first */
		else
			REQUIRE(r == 0, "DETACH of the parent's region: %s", en(r));
	}
	REQUIRE(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		"the detaching child saw an undocumented error");
	REQUIRE(nr_regions(fd) == 0, "%u region(s) left after the race", nr_regions(fd));
	rel_diag("attach-detach-race: %d attaches, %d detached by the other process first",
		 attached, lost);
	close(fd);
	return true;
}

/* VMAs of this process that map the pool device, from /proc/self/maps. */
static int maps_of_dev(void)
{
	char line[512];
	int n = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, bt_dev_path()))
			n++;
	fclose(f);
	return n;
}

/*
 * The region's mapping count follows every VMA operation: splits by munmap,
 * mprotect and madvise, merges back, mremap (move, grow, shrink,
 * MREMAP_DONTUNMAP), fork. It must equal the number of VMAs at each step and
 * reach zero, so that DETACH works again.
 */
static bool t_mapping_counts(void)
{
	int fd = bt_open(O_RDWR), afd = bt_open(O_RDWR), step = 0, r;
	const size_t len = 8 * BT_PAGE;
	uint8_t *p, *q;
	pid_t pid;

	REQUIRE(fd >= 0 && afd >= 0, "open");
#define COUNT_OK(what) do {							\
		int m = mappings0(afd), v = maps_of_dev();			\
		step++;								\
		REQUIRE(m == v, "step %d (%s): region counts %d mappings, the "	\
			"process has %d VMAs of %s", step, what, m, v, bt_dev_path()); \
	} while (0)
	p = rel_map(fd, len, PROT_READ | PROT_WRITE);
	REQUIRE(p, "mmap");
	COUNT_OK("mmap");
	REQUIRE(mprotect(p + 2 * BT_PAGE, BT_PAGE, PROT_READ) == 0, "mprotect");
	COUNT_OK("mprotect splits one page out");
	REQUIRE(mprotect(p + 2 * BT_PAGE, BT_PAGE, PROT_READ | PROT_WRITE) == 0, "mprotect");
	COUNT_OK("mprotect back (may merge)");
	REQUIRE(madvise(p + 4 * BT_PAGE, BT_PAGE, MADV_DONTFORK) == 0, "madvise");
	COUNT_OK("MADV_DONTFORK splits");
	{
		/* the count is the region's, over both processes */
		int vp = maps_of_dev();

		pid = fork();
		if (pid == 0)
			_exit(mappings0(afd) == vp + maps_of_dev() ? 0 : 1);
		REQUIRE(reap(pid) == 0, "in the forked child the count was not the parent's "
			"%d VMAs plus the child's (MADV_DONTFORK page not copied)", vp);
	}
	COUNT_OK("after the child exited");
	REQUIRE(madvise(p + 4 * BT_PAGE, BT_PAGE, MADV_DOFORK) == 0, "madvise");
	COUNT_OK("MADV_DOFORK (may merge)");
	REQUIRE(madvise(p, len, MADV_DONTNEED) == 0, "MADV_DONTNEED");
	COUNT_OK("MADV_DONTNEED");
	q = mremap(p + 6 * BT_PAGE, 2 * BT_PAGE, BT_PAGE, 0);
	REQUIRE(q != MAP_FAILED, "mremap shrink: %s", strerror(errno));
	COUNT_OK("mremap shrinks the tail");
	q = mremap(p, BT_PAGE, 3 * BT_PAGE, MREMAP_MAYMOVE);
	REQUIRE(q != MAP_FAILED, "mremap grow+move: %s", strerror(errno));
	COUNT_OK("mremap moves and grows the first page");
	{
		void *d = mremap(p + BT_PAGE, BT_PAGE, BT_PAGE,
				 MREMAP_MAYMOVE | 4 /* MREMAP_DONTUNMAP */);

		COUNT_OK(d == MAP_FAILED ? "MREMAP_DONTUNMAP (refused)" : "MREMAP_DONTUNMAP");
		if (d != MAP_FAILED)
			munmap(d, BT_PAGE);
		COUNT_OK("munmap of the DONTUNMAP copy");
	}
	munmap(q, 3 * BT_PAGE);
	COUNT_OK("munmap of the moved part");
	munmap(p, len);
	COUNT_OK("munmap of the rest");
	REQUIRE(mappings0(afd) == 0, "count %d after every VMA is gone", mappings0(afd));
	close(fd);
	{
		struct beluga_region_info ri;
		uint32_t slot = 0;

		while (slot < BELUGA_MAX_REGIONS && bt_region_info(afd, slot, &ri))
			slot++;
		r = rel_detach(afd, slot, BELUGA_DETACH_EVICT);
		REQUIRE(r == 0, "DETACH after every mapping is gone: %s", en(r));
	}
	close(afd);
#undef COUNT_OK
	return true;
}

/* Readers check every pinned block while writers churn the pool. */
static bool t_pinned_checksum(bool dax)
{
	int fd = bt_open(O_RDWR), nreaders = 3, nwriters = 2;
	uint64_t ns = ns_unique(dax ? 0xc5d : 0xc5);
	struct beluga_info info;
	pid_t pids[8];
	int np = 0, bad = 0;
	double end = rel_now() + (dax ? 4.0 : 6.0);

	REQUIRE(fd >= 0 && bt_info(fd, &info) == 0, "open/INFO");
	for (int i = 0; i < nreaders + nwriters + 1; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			struct rel_rng rng = { (uint64_t)i * 7919 };
			int cfd = bt_open(O_RDWR);
			uint8_t *map = rel_map(cfd, info.map_size, PROT_READ | PROT_WRITE);
			uint64_t verified = 0;

			if (cfd < 0 || !map)
				_exit(2);
			while (rel_now() < end) {
				if (i < nreaders) {
					struct beluga_key keys[8];
					uint64_t offs[8];
					uint32_t hits = 0;
					int k0 = (int)rel_below(&rng, 96);

					for (int k = 0; k < 8; k++)
						keys[k] = bt_key(ns, (uint64_t)(k0 + k) % 96);
					if (bt_lookup(cfd, ns, keys, 8, offs, BELUGA_LOOKUP_PIN,
						       &hits))
						_exit(3);
					for (int pass = 0; pass < 2; pass++) {
						for (uint32_t h = 0; h < hits; h++) {
							long w = bt_check(map + offs[h], info.block_size,
									   rel_key_seed(ns, keys[h]));
							if (w >= 0) {
								printf("# reader %d: block 0x%llx (key %d) "
								       "corrupted at word %ld while pinned\n",
								       i, (rel_ull)offs[h],
								       (k0 + (int)h) % 96, w);
								_exit(1);
							}
							verified++;
						}
						sched_yield();	/* let the writers evict */
					}
					if (hits && bt_release(cfd, hits, offs))
						_exit(4);
				} else if (i < nreaders + nwriters) {
					uint64_t off;
					int k = (int)rel_below(&rng, 96);
					struct beluga_key key = bt_key(ns, (uint64_t)k);
					int32_t res;

					if (bt_alloc(cfd, 1, &off))
						continue;	/* -ENOSPC: all pinned */
					bt_fill(map + off, info.block_size, rel_key_seed(ns, key));
					if (bt_publish1(cfd, ns, off, key, &res))
						_exit(5);
				} else {
					rel_msleep(30);
					rel_evict_ns(cfd, ns, NULL, NULL);
				}
			}
			if (i < nreaders)
				printf("# reader %d verified %llu pinned blocks\n", i,
				       (rel_ull)verified);
			fflush(stdout);
			_exit(0);
		}
		pids[np++] = pid;
	}
	for (int i = 0; i < np; i++) {
		int r = reap(pids[i]);

		if (r) {
			rel_diag("process %d exited with %d", i, r);
			bad++;
		}
	}
	REQUIRE(!bad, "a reader saw a pinned block change (or a call failed)");
	{
		struct beluga_stats s;

		bt_stats(fd, &s);
		rel_diag("evictions so far: %llu", (rel_ull)s.evictions);
	}
	rel_evict_ns(fd, ns, NULL, NULL);
	close(fd);
	return true;
}

/*
 * The struct lives in read-only memory: the kernel can read it but not
 * write its answer back. The uapi ("The answer and -EFAULT"): ALLOC never
 * writes its struct, LOOKUP+PIN drops its pins again, ATTACH leaves no
 * region, EVICT and DETACH keep what they did.
 */
static bool t_abi_ro_struct(void)
{
	int fd = bt_open(O_RDWR), r;
	struct beluga_stats s0, s;
	uint64_t *offs, ns = ns_unique(0xab1);
	uint8_t *ro;
	uint32_t hits;
	int32_t res;
	bool ok = true;

	REQUIRE(fd >= 0 && bt_stats(fd, &s0) == 0, "open/STATS");
	ro = mmap(NULL, BT_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	offs = mmap(NULL, BT_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(ro != MAP_FAILED && offs != MAP_FAILED, "mmap");

	/* ALLOC */
	{
		struct beluga_alloc *a = (void *)ro;

		a->size = sizeof(*a);
		a->count = 2;
		a->offsets = (uintptr_t)offs;
		offs[0] = offs[1] = UINT64_MAX;
		mprotect(ro, BT_PAGE, PROT_READ);
		r = bt_ioctl(fd, BELUGA_IOC_ALLOC, a);
		mprotect(ro, BT_PAGE, PROT_READ | PROT_WRITE);
		bt_stats(fd, &s);
		if (r == -EFAULT && s.allocated_blocks != s0.allocated_blocks) {
			rel_diag("ALLOC with its struct in read-only memory returned -EFAULT "
				 "but left %llu blocks allocated to the file (offsets 0x%llx, "
				 "0x%llx were written): the ioctl dispatcher copies the struct "
				 "back after the command ran, and ALLOC has no output field in "
				 "the struct", (rel_ull)(s.allocated_blocks - s0.allocated_blocks),
				 (rel_ull)offs[0], (rel_ull)offs[1]);
			ok = false;
			bt_free(fd, 2, offs);
		} else if (r != -EFAULT && r != 0) {
			rel_diag("ALLOC with a read-only struct: %s", en(r));
			ok = false;
		} else if (r == 0) {
			bt_free(fd, 2, offs);
		}
	}
	/* LOOKUP + PIN */
	{
		struct beluga_lookup *l = (void *)ro;
		struct beluga_key *key = (void *)(offs + 8);

		REQUIRE(bt_alloc(fd, 1, offs) == 0, "ALLOC");
		*key = bt_key(ns, 1);
		REQUIRE(bt_publish1(fd, ns, offs[0], *key, &res) == 0 && res == 0, "PUBLISH");
		bt_stats(fd, &s0);
		memset(l, 0, sizeof(*l));
		l->size = sizeof(*l);
		l->flags = BELUGA_LOOKUP_PIN;
		l->ns = ns;
		l->count = 1;
		l->keys = (uintptr_t)key;
		l->offsets = (uintptr_t)offs;
		mprotect(ro, BT_PAGE, PROT_READ);
		r = bt_ioctl(fd, BELUGA_IOC_LOOKUP, l);
		mprotect(ro, BT_PAGE, PROT_READ | PROT_WRITE);
		bt_stats(fd, &s);
		if (r == -EFAULT && s.pins != s0.pins) {
			rel_diag("LOOKUP+PIN with its struct in read-only memory returned "
				 "-EFAULT but left %llu pin(s) held: the caller was told it failed "
				 "and cannot know it must RELEASE", (rel_ull)(s.pins - s0.pins));
			ok = false;
			bt_release(fd, 1, offs);
		} else if (r == 0) {
			bt_release(fd, 1, offs);
		}
		(void)hits;
	}
	/* EVICT of one key */
	{
		struct beluga_evict *e = (void *)ro;
		struct beluga_key k = bt_key(ns, 9);
		uint64_t off;
		uint32_t hits = 0;

		if (bt_alloc(fd, 1, &off) == 0 && bt_publish1(fd, ns, off, k, &res) == 0 &&
		    res == 0) {
			memset(e, 0, sizeof(*e));
			e->size = sizeof(*e);
			e->ns = ns;
			e->key = k;
			mprotect(ro, BT_PAGE, PROT_READ);
			r = bt_ioctl(fd, BELUGA_IOC_EVICT, e);
			mprotect(ro, BT_PAGE, PROT_READ | PROT_WRITE);
			bt_lookup(fd, ns, &k, 1, NULL, 0, &hits);
			if (r != -EFAULT || hits != 0) {
				rel_diag("EVICT with its struct in read-only memory: %s, key %s; "
					 "want -EFAULT and the key evicted (the answer comes after "
					 "the eviction)", en(r), hits ? "still there" : "evicted");
				ok = false;
			}
		}
	}
	/* ATTACH and DETACH (admin): out fields, so the struct is written back */
	{
		struct beluga_attach *a = (void *)ro;
		uint32_t before = nr_regions(fd), slot = UINT32_MAX;
		struct beluga_region_info ri;

		memset(a, 0, sizeof(*a));
		r = rel_attach_node(fd, 2 * BT_MIB, BSIZE, "ro-struct", a);
		if (r == 0)	/* a writable one first: learn the slot, then detach */
			rel_detach(fd, a->region_id, BELUGA_DETACH_EVICT);
		if (r == 0) {
			a->region_id = 0;
			mprotect(ro, BT_PAGE, PROT_READ);
			r = bt_ioctl(fd, BELUGA_IOC_ATTACH, a);
			mprotect(ro, BT_PAGE, PROT_READ | PROT_WRITE);
			for (uint32_t sl = 0; sl < BELUGA_MAX_REGIONS; sl++)
				if (bt_region_info(fd, sl, &ri) == 0 && !strcmp(ri.name, "ro-struct"))
					slot = sl;
			if (r == -EFAULT && nr_regions(fd) != before) {
				rel_diag("ATTACH with its struct in read-only memory returned -EFAULT "
					 "but the region was attached (slot %u, name ro-struct); the "
					 "caller never learns its region_id", slot);
				ok = false;
			}
			if (slot == UINT32_MAX) {
				/* a writable ATTACH: a region for DETACH to answer about */
				memset(a, 0, sizeof(*a));
				if (rel_attach_node(fd, 2 * BT_MIB, BSIZE, "ro-struct", a) == 0)
					slot = a->region_id;
			}
			if (slot != UINT32_MAX) {
				struct beluga_detach *d = (void *)ro;

				memset(d, 0, sizeof(*d));
				d->size = sizeof(*d);
				d->flags = BELUGA_DETACH_EVICT;
				d->region_id = slot;
				mprotect(ro, BT_PAGE, PROT_READ);
				r = bt_ioctl(fd, BELUGA_IOC_DETACH, d);
				mprotect(ro, BT_PAGE, PROT_READ | PROT_WRITE);
				if (r != -EFAULT || bt_region_info(fd, slot, &ri) != -ENOENT) {
					rel_diag("DETACH with its struct in read-only memory: %s; want "
						 "-EFAULT and the region detached (the answer comes "
						 "after the detach)", en(r));
					ok = false;
				}
				if (bt_region_info(fd, slot, &ri) == 0)
					rel_detach(fd, slot, BELUGA_DETACH_EVICT);
			}
		}
	}
	rel_evict_ns(fd, ns, NULL, NULL);
	close(fd);
	if (!ok)
		FAILF("a failed command changed state (see above)");
	return true;
}

/* ------------------------------------------------------------------ */
/* Permissions                                                          */

#define NOBODY 65534

static int drop_to(uid_t uid, gid_t gid)
{
	if (setgroups(0, NULL) || setgid(gid) || setuid(uid))
		return -errno;
	return 0;
}

static bool t_perm_unpriv(void)
{
	const char *dev = bt_dev_path();
	struct stat st;
	pid_t pid;
	int r;

	REQUIRE(stat(dev, &st) == 0, "stat %s", dev);
	REQUIRE(chmod(dev, 0666) == 0, "chmod");
	pid = fork();
	if (pid == 0) {
		struct beluga_attach a;
		struct beluga_evict e = { .size = sizeof(e), .ns = 1, .key = { 1, 1 } };
		struct beluga_detach d = { .size = sizeof(d), .region_id = 0 };
		struct beluga_stats s;
		uint64_t off;
		int fd;

		if (drop_to(NOBODY, NOBODY))
			_exit(20);
		fd = bt_open(O_RDWR);
		if (fd < 0)
			_exit(21);
		memset(&a, 0, sizeof(a));
		a.size = sizeof(a);
		a.backend = BELUGA_BACKEND_NODE;
		a.node = rel_env_node() < 0 ? 0 : rel_env_node();
		a.length = 2 * BT_MIB;
		if (rel_attach(fd, &a) != -EPERM)
			_exit(1);
		if (bt_ioctl(fd, BELUGA_IOC_DETACH, &d) != -EPERM)
			_exit(2);
		if (bt_ioctl(fd, BELUGA_IOC_EVICT, &e) != -EPERM)
			_exit(3);
		e.flags = BELUGA_EVICT_NAMESPACE;
		e.key.lo = e.key.hi = 0;
		if (bt_ioctl(fd, BELUGA_IOC_EVICT, &e) != -EPERM)
			_exit(4);
		/* what an ordinary writer may do still works */
		if (bt_stats(fd, &s) || bt_alloc(fd, 1, &off) || bt_free(fd, 1, &off))
			_exit(5);
		_exit(0);
	}
	r = reap(pid);
	chmod(dev, st.st_mode & 07777);
	REQUIRE(r == 0, "unprivileged child: status %d (1: ATTACH, 2: DETACH, 3: EVICT, "
		"4: EVICT namespace were not -EPERM; 5: a normal call failed; 2x: setup)", r);
	return true;
}

static bool t_perm_readonly(void)
{
	const char *dev = bt_dev_path();
	struct stat st;
	uint64_t off, ns = ns_unique(0x40);
	struct beluga_key key = bt_key(ns, 1);
	int fd = bt_open(O_RDWR), r;
	int32_t res;
	pid_t pid;

	REQUIRE(fd >= 0 && stat(dev, &st) == 0, "open/stat");
	REQUIRE(bt_alloc(fd, 1, &off) == 0 && bt_publish1(fd, ns, off, key, &res) == 0 &&
		res == 0, "publish a key as root");
	REQUIRE(chmod(dev, 0644) == 0, "chmod");
	pid = fork();
	if (pid == 0) {
		uint64_t o2, pin;
		uint32_t hits;
		void *p;
		int rfd;

		if (drop_to(NOBODY, NOBODY))
			_exit(20);
		if (bt_open(O_RDWR) >= 0 || errno != EACCES)
			_exit(1);
		if (bt_open(O_WRONLY) >= 0 || errno != EACCES)
			_exit(2);
		rfd = bt_open(O_RDONLY);
		if (rfd < 0)
			_exit(3);
		if (bt_alloc(rfd, 1, &o2) != -EBADF)
			_exit(4);
		if (bt_free(rfd, 1, &off) != -EBADF)
			_exit(5);
		if (bt_publish1(rfd, ns, off, bt_key(ns, 2), NULL) != -EBADF)
			_exit(6);
		p = mmap(NULL, BT_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, 0);
		if (p != MAP_FAILED || errno != EACCES)
			_exit(7);
		p = mmap(NULL, BT_PAGE, PROT_READ, MAP_SHARED, rfd, 0);
		if (p == MAP_FAILED)
			_exit(8);
		if (mprotect(p, BT_PAGE, PROT_READ | PROT_WRITE) == 0 || errno != EACCES)
			_exit(9);
		/* readers: LOOKUP, pin and release work on a read-only file */
		if (bt_lookup(rfd, ns, &key, 1, &pin, BELUGA_LOOKUP_PIN, &hits) || hits != 1 ||
		    pin != off || bt_release(rfd, 1, &pin))
			_exit(10);
		_exit(0);
	}
	r = reap(pid);
	chmod(dev, st.st_mode & 07777);
	rel_evict_ns(fd, ns, NULL, NULL);
	close(fd);
	REQUIRE(r == 0, "read-only child: status %d (1-2: write open allowed, 3: read open "
		"refused, 4-6: ALLOC/FREE/PUBLISH not -EBADF, 7: writable mmap, 8: read "
		"mmap refused, 9: mprotect added write, 10: LOOKUP+PIN/RELEASE failed)", r);
	/* root with an O_RDONLY file: the same rules */
	fd = bt_open(O_RDONLY);
	REQUIRE(fd >= 0, "open O_RDONLY");
	r = bt_alloc(fd, 1, &off);
	close(fd);
	REQUIRE(r == -EBADF, "root ALLOC on an O_RDONLY file: %s", en(r));
	return true;
}

static bool t_ns_keys(void)
{
	int fd = bt_open(O_RDWR), rfd = bt_open(O_RDONLY);
	uint64_t a = ns_unique(0xa), b = a ^ 1, off, got;
	struct beluga_key key = bt_key(42, 42);
	uint32_t hits = 0;
	int32_t res;
	uint8_t *map, *rmap;

	REQUIRE(fd >= 0 && rfd >= 0, "open");
	REQUIRE(bt_alloc(fd, 1, &off) == 0, "ALLOC");
	map = rel_map(fd, REGION, PROT_READ | PROT_WRITE);
	REQUIRE(map, "mmap");
	bt_fill(map + off, BSIZE, 0x5ec);
	REQUIRE(bt_publish1(fd, a, off, key, &res) == 0 && res == 0, "PUBLISH in ns A");
	REQUIRE(bt_lookup(rfd, b, &key, 1, &got, 0, &hits) == 0 && hits == 0,
		"the key of namespace A was found in namespace B");
	REQUIRE(bt_lookup(rfd, a, &key, 1, &got, 0, &hits) == 0 && hits == 1 && got == off,
		"the key is not found in its own namespace");
	/* same key in B is a different entry: no EXISTS */
	REQUIRE(bt_alloc(fd, 1, &got) == 0 && bt_publish1(fd, b, got, key, &res) == 0 &&
		res == BELUGA_PUBLISH_OK, "the same key in namespace B: result %d", res);
	/* memory is not separated: any file of the pool maps and reads A's block */
	rmap = rel_map(rfd, REGION, PROT_READ);
	REQUIRE(rmap && bt_check(rmap + off, BSIZE, 0x5ec) < 0,
		"a reader of the pool could not read namespace A's bytes (documented: "
		"namespaces separate keys, not memory)");
	munmap(rmap, REGION);
	munmap(map, REGION);
	rel_evict_ns(fd, a, NULL, NULL);
	rel_evict_ns(fd, b, NULL, NULL);
	close(fd);
	close(rfd);
	return true;
}

/* ------------------------------------------------------------------ */
/* Separate pools                                                       */

static int nr_pools(void)
{
	uint64_t v = 0;

	if (bt_read_sysfs_u64("/sys/module/beluga/parameters/pools", &v))
		return -1;
	return (int)v;
}

#define TENANT_A 1000
#define TENANT_B 1001

/*
 * Tenant B (uid 1001) owns /dev/beluga1, tenant A (uid 1000) /dev/beluga.
 * B publishes a secret; A must not find, pin, map or read it.
 */
static int pools_tenant_b(uint64_t ns, struct beluga_key key, uint64_t *off_out)
{
	int fd, r;
	uint64_t off;
	uint8_t *map;
	struct beluga_info info;
	int32_t res;

	fd = open("/dev/beluga1", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = bt_alloc(fd, 1, &off);
	if (r)
		return r;
	if (bt_info(fd, &info))
		return -EIO;
	map = rel_map(fd, info.map_size, PROT_READ | PROT_WRITE);
	if (!map)
		return -errno;
	bt_fill(map + off, BSIZE, 0xb5ec4e7);
	r = bt_publish1(fd, ns, off, key, &res);
	if (r || res)
		return r ? r : -EPROTO;
	munmap(map, info.map_size);
	*off_out = off;
	/* the key stays published after close (published blocks are the pool's) */
	close(fd);
	return 0;
}

static bool t_pools_isolation(bool *skipped)
{
	uint64_t ns = ns_unique(0xb00), off = 0;
	struct beluga_key key = bt_key(ns, 7);
	struct stat st0, st1;
	int fd0, fd1, r, p[2];
	pid_t pid;

	*skipped = false;
	if (nr_pools() < 0 || access("/dev/beluga1", F_OK)) {
		*skipped = true;
		snprintf(why, sizeof(why), "%s", nr_pools() < 0 ?
			 "beluga.ko has no pools= parameter (separate pools not implemented)" :
			 "only one pool: load beluga.ko with pools=2 to test tenant isolation");
		return false;
	}
	fd0 = bt_open(O_RDWR);
	fd1 = open("/dev/beluga1", O_RDWR | O_CLOEXEC);
	REQUIRE(fd0 >= 0 && fd1 >= 0, "open both pools: %s", strerror(errno));
	REQUIRE(rel_reset_pool_fd(fd1, 3000) == 0, "empty pool 1");
	/* pool 0 keeps its fixture region; pool 1 gets its own */
	r = rel_attach_node(fd1, REGION, BSIZE, "tenant-b", NULL);
	if (r == -ENOENT)
		r = rel_attach_dax(fd1, 1, 0, REGION, BSIZE, "tenant-b", NULL);
	REQUIRE(r == 0, "ATTACH to pool 1: %s", en(r));
	/* one device-dax range cannot be claimed by two pools */
	{
		struct beluga_region_info ri;

		for (uint32_t s = 0; s < BELUGA_MAX_REGIONS; s++)
			if (bt_region_info(fd0, s, &ri) == 0 && ri.backend == BELUGA_BACKEND_DAX) {
				struct beluga_attach a = { .size = sizeof(a),
					.backend = BELUGA_BACKEND_DAX, .node = -1,
					.phys_start = ri.phys_start, .length = ri.length };

				snprintf(a.name, sizeof(a.name), "steal");
				r = rel_attach(fd1, &a);
				REQUIRE(r == -EEXIST, "pool 1 attached pool 0's dax range: %s", en(r));
				break;
			}
	}
	REQUIRE(stat("/dev/beluga", &st0) == 0 && stat("/dev/beluga1", &st1) == 0, "stat");
	REQUIRE(chown("/dev/beluga", TENANT_A, TENANT_A) == 0 && chmod("/dev/beluga", 0600) == 0 &&
		chown("/dev/beluga1", TENANT_B, TENANT_B) == 0 && chmod("/dev/beluga1", 0600) == 0,
		"chown/chmod per tenant");

	/* tenant B publishes */
	REQUIRE(pipe(p) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		if (drop_to(TENANT_B, TENANT_B))
			_exit(20);
		r = pools_tenant_b(ns, key, &off);
		if (r)
			_exit(21);
		if (write(p[1], &off, sizeof(off)) != sizeof(off))
			_exit(22);
		_exit(0);
	}
	close(p[1]);
	r = read(p[0], &off, sizeof(off)) == sizeof(off) ? 0 : -1;
	close(p[0]);
	REQUIRE(reap(pid) == 0 && r == 0, "tenant B could not publish in its own pool");

	/* tenant A looks for it */
	pid = fork();
	if (pid == 0) {
		struct beluga_info info;
		uint64_t got;
		uint32_t hits = 9;
		uint8_t *map;
		int fd;

		if (drop_to(TENANT_A, TENANT_A))
			_exit(20);
		if (open("/dev/beluga1", O_RDWR) >= 0 || errno != EACCES)
			_exit(1);
		if (open("/dev/beluga1", O_RDONLY) >= 0 || errno != EACCES)
			_exit(2);
		fd = bt_open(O_RDWR);
		if (fd < 0)
			_exit(3);
		if (bt_lookup(fd, ns, &key, 1, &got, BELUGA_LOOKUP_PIN, &hits) || hits != 0)
			_exit(4);
		if (bt_info(fd, &info))
			_exit(5);
		/* A's offset space covers A's regions only */
		map = mmap(NULL, BT_PAGE, PROT_READ, MAP_SHARED, fd,
			   (off_t)(info.map_size + 64 * BT_MIB));
		if (map != MAP_FAILED)
			_exit(6);
		map = rel_map(fd, info.map_size, PROT_READ);
		if (!map)
			_exit(7);
		/* nowhere in A's mapping are B's bytes */
		for (uint64_t o = 0; o + BSIZE <= info.map_size; o += BSIZE) {
			struct beluga_region_info ri;
			bool in = false;

			for (uint32_t s = 0; s < BELUGA_MAX_REGIONS; s++)
				if (bt_region_info(fd, s, &ri) == 0 && o >= ri.first_offset &&
				    o + BSIZE <= ri.first_offset + ri.nr_blocks * info.block_size)
					in = true;
			if (in && bt_check(map + o, 64, 0xb5ec4e7) < 0)
				_exit(8);
		}
		_exit(0);
	}
	r = reap(pid);
	chown("/dev/beluga", st0.st_uid, st0.st_gid);
	chmod("/dev/beluga", st0.st_mode & 07777);
	chown("/dev/beluga1", st1.st_uid, st1.st_gid);
	chmod("/dev/beluga1", st1.st_mode & 07777);
	REQUIRE(r == 0, "tenant A: status %d (1-2: opened B's device, 3: cannot open its "
		"own, 4: found B's key, 5: INFO, 6: mapped past its own map_size, 7: mmap, "
		"8: read B's bytes through its own device)", r);
	/* and the key really is there, in B's pool */
	{
		uint32_t hits = 0;
		uint64_t got;

		REQUIRE(bt_lookup(fd1, ns, &key, 1, &got, 0, &hits) == 0 && hits == 1 &&
			got == off, "B's key is not in pool 1");
		REQUIRE(bt_lookup(fd0, ns, &key, 1, &got, 0, &hits) == 0 && hits == 0,
			"B's key is visible in pool 0 (as root)");
	}
	{
		uint64_t v0 = 0, v1 = 0;

		bt_read_sysfs_u64("/sys/class/misc/beluga/published_blocks", &v0);
		bt_read_sysfs_u64("/sys/class/misc/beluga1/published_blocks", &v1);
		REQUIRE(v1 >= 1, "/sys/class/misc/beluga1/published_blocks is %llu",
			(rel_ull)v1);
	}
	rel_reset_pool_fd(fd1, 3000);
	close(fd0);
	close(fd1);
	return true;
}

/* ------------------------------------------------------------------ */
/* Module unload                                                        */

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

/* ------------------------------------------------------------------ */

struct test {
	const char *name;
	bool (*fn)(void);
	bool need_pool, dax, fi, optin;
};

static bool t_pinned_checksum_node(void)
{
	return t_pinned_checksum(false);
}

static bool t_pinned_checksum_dax(void)
{
	return t_pinned_checksum(true);
}

static bool pools_skipped;

static bool t_pools_wrap(void)
{
	return t_pools_isolation(&pools_skipped);
}

static const struct test tests[] = {
	{ "fault-nth-attach-node", t_nth0, true, false, true, false },
	{ "fault-nth-attach-dax", t_nth1, true, true, true, false },
	{ "fault-nth-open", t_nth2, true, false, true, false },
	{ "fault-nth-alloc", t_nth3, true, false, true, false },
	{ "fault-nth-publish", t_nth4, true, false, true, false },
	{ "fault-nth-lookup-pin", t_nth5, true, false, true, false },
	{ "fault-nth-detach", t_nth6, true, false, true, false },
	{ "fault-random", t_fault_random, true, false, true, false },
	{ "kill-alloc", t_kill_alloc, true, false, false, false },
	{ "kill-batch", t_kill_batch, true, false, false, false },
	{ "fork-ownership", t_fork_ownership, true, false, false, false },
	{ "detach-mapped", t_detach_mapped, true, false, false, false },
	{ "attach-detach-race", t_attach_detach_race, false, false, false, false },
	{ "mapping-counts", t_mapping_counts, true, false, false, false },
	{ "pinned-checksum", t_pinned_checksum_node, true, false, false, false },
	{ "pinned-checksum-dax", t_pinned_checksum_dax, true, true, false, false },
	{ "abi-ro-struct", t_abi_ro_struct, true, false, false, false },
	{ "perm-unpriv", t_perm_unpriv, true, false, false, false },
	{ "perm-readonly", t_perm_readonly, true, false, false, false },
	{ "ns-keys", t_ns_keys, true, false, false, false },
	{ "pools-isolation", t_pools_wrap, true, false, false, false },
	{ "rmmod", t_rmmod, true, false, false, true },
	{ "fault-nth-modload", t_fault_nth_modload, false, false, true, true },
	{ "modload-open-race", t_modload_open_race, false, false, false, true },
};

/* The child's verdict, read by the parent. */
struct verdict {
	int state;		/* 0 ok, 1 fail, 2 skip */
	char why[512];
};

/*
 * Each test runs in its own process, so that a failed test's files and
 * mappings go away with it and cannot hold up the next one.
 */
static void run_test(const struct test *t, unsigned int tmo)
{
	struct verdict *v = mmap(NULL, sizeof(*v), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	char dax[64];
	pid_t pid;
	int st;

	memset(v, 0, sizeof(*v));
	v->state = 1;
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		int r;

		alarm(tmo);
		if (t->fi && !fi_available()) {
			v->state = 2;
			snprintf(v->why, sizeof(v->why), "no fault injection (needs "
				 "CONFIG_FAULT_INJECTION_DEBUG_FS and debugfs): the debug lane has it");
			_exit(0);
		}
		if (t->dax && rel_env_dax(0, dax, sizeof(dax))) {
			v->state = 2;
			snprintf(v->why, sizeof(v->why), "BELUGA_TEST_DAX not set");
			_exit(0);
		}
		if (t->need_pool) {
			r = fresh_pool(REGION, BSIZE, t->dax);
			if (r) {
				v->state = r == -ENOENT ? 2 : 1;
				snprintf(v->why, sizeof(v->why), "%s", r == -ENOENT ?
					 "neither BELUGA_TEST_NODE nor BELUGA_TEST_DAX is set" :
					 "pool setup failed");
				if (r != -ENOENT)
					snprintf(v->why, sizeof(v->why), "pool setup: %s", en(r));
				_exit(0);
			}
		}
		why[0] = 0;
		pools_skipped = false;
		if (t->fn()) {
			v->state = 0;
		} else {
			v->state = pools_skipped ? 2 : 1;
			snprintf(v->why, sizeof(v->why), "%s", why);
		}
		fflush(stdout);
		_exit(0);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) {
		v->state = 1;
		snprintf(v->why, sizeof(v->why), "the test process %s",
			 WIFSIGNALED(st) ? (WTERMSIG(st) == SIGALRM ? "timed out" :
			 strsignal(WTERMSIG(st))) : "vanished");
		/* a test's own children may still hold files: give them a moment */
		rel_msleep(200);
	}
	if (v->state == 2) {
		rel_skip(t->name, v->why);
	} else {
		if (v->state)
			rel_diag("%s: %s", t->name, v->why);
		rel_result(v->state == 0, t->name);
	}
	munmap(v, sizeof(*v));
}

int main(int argc, char **argv)
{
	bool list = false, any = false;
	int first = 1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1 && !strcmp(argv[1], "-l")) {
		list = true;
		first = 2;
	}
	if (list) {
		for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
			printf("%s%s\n", tests[i].name, tests[i].optin ? " (opt-in)" : "");
		return 0;
	}
	printf("TAP version 13\n");
	if (access(bt_dev_path(), F_OK)) {
		rel_skip("rel", "no /dev/beluga (module not loaded)");
		return rel_done();
	}
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		bool want = argc <= first ? !tests[i].optin : false;

		for (int a = first; a < argc; a++)
			if (!strcmp(argv[a], tests[i].name))
				want = true;
		if (!want)
			continue;
		any = true;
		run_test(&tests[i], 300);
	}
	if (!any) {
		fprintf(stderr, "no such test; -l lists them\n");
		return 2;
	}
	/* leave an empty pool behind, like the kselftests */
	rel_reset_pool(5000);
	return rel_done();
}
