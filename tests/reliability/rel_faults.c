// SPDX-License-Identifier: GPL-2.0
/*
 * rel_faults: fault injection (fail-nth and random failures).
 *
 *   fault_nth_*    every fault point of ATTACH (node, dax), open, ALLOC,
 *                  PUBLISH, LOOKUP+PIN and DETACH in turn is made to fail
 *                  (/proc/thread-self/fail-nth: failslab, fail_page_alloc
 *                  and fail_usercopy); the call fails cleanly or succeeds,
 *                  and a failed call leaves no partial state behind
 *   fault_random   failslab + fail_page_alloc at 10%, task-filtered with
 *                  /proc/self/make-it-fail, over a worker's whole life
 *
 * Both need the debug kernel's fault injection; elsewhere they SKIP.
 *
 * Environment: BELUGA_TEST_NODE, BELUGA_TEST_DAX (see rel.h); the harness's
 * options (-l lists the tests, -t NAME runs one). See README.md.
 */
#include "rel_test.h"

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

static const struct nth_op nth_ops[] = {	/* t_fault_nth(N): index N */
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

FIXTURE_REL(faults);

TEST_F_TIMEOUT(faults, fault_nth_attach_node, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL | REL_FI))
		return;
	REL_ASSERT(t_fault_nth(0));
}

TEST_F_TIMEOUT(faults, fault_nth_attach_dax, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL | REL_DAX | REL_FI))
		return;
	REL_ASSERT(t_fault_nth(1));
}

TEST_F_TIMEOUT(faults, fault_nth_open, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL | REL_FI))
		return;
	REL_ASSERT(t_fault_nth(2));
}

TEST_F_TIMEOUT(faults, fault_nth_alloc, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL | REL_FI))
		return;
	REL_ASSERT(t_fault_nth(3));
}

TEST_F_TIMEOUT(faults, fault_nth_publish, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL | REL_FI))
		return;
	REL_ASSERT(t_fault_nth(4));
}

TEST_F_TIMEOUT(faults, fault_nth_lookup_pin, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL | REL_FI))
		return;
	REL_ASSERT(t_fault_nth(5));
}

TEST_F_TIMEOUT(faults, fault_nth_detach, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL | REL_FI))
		return;
	REL_ASSERT(t_fault_nth(6));
}

TEST_F_TIMEOUT(faults, fault_random, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL | REL_FI))
		return;
	REL_ASSERT(t_fault_random());
}

TEST_HARNESS_MAIN
