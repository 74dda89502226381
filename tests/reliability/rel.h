/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared helpers of Beluga's reliability tests and ioctl fuzzer (static
 * binaries that run in the QEMU guests as root, against /dev/beluga). The
 * tests report through kselftest_harness.h (rel_test.h), the fuzzer through
 * ../lib/tap.h; rel_diag() prints a "# " comment for either.
 *
 *   - the raw ioctl wrappers of ../lib/beluga_abi.h (bt_*, shared with the
 *     kselftests), plus DETACH and EVICT shapes of its own;
 *   - the environment of the guest scripts: BELUGA_TEST_DAX ("dax0.0
 *     dax1.0"), BELUGA_TEST_NODE (a CPU-less node), BELUGA_DEV (device
 *     node, default /dev/beluga);
 *   - pool setup and teardown: rel_reset_pool() detaches every region
 *     (evicting), rel_attach_node()/rel_attach_dax() attach small regions;
 *   - STATS invariants (rel_stats_check) and a seeded PRNG (splitmix64).
 *
 * Header-only, shared by every program of ../reliability and ../fuzz.
 */
#ifndef BELUGA_REL_H
#define BELUGA_REL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/beluga.h>

#include "../lib/beluga_abi.h"


/* A "# " comment line: diagnostics for TAP (tests/lib/tap.h) or the harness. */
static inline void rel_diag(const char *fmt, ...)
{
	va_list ap;

	fputs("# ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

/* ------------------------------------------------------------------ */
/* PRNG: splitmix64, deterministic for a seed                           */

struct rel_rng {
	uint64_t s;
};

static inline uint64_t rel_next(struct rel_rng *r)
{
	r->s += 0x9e3779b97f4a7c15ULL;
	return bt_mix64(r->s);
}

/* Uniform in [0, n); n > 0. */
static inline uint64_t rel_below(struct rel_rng *r, uint64_t n)
{
	return n ? rel_next(r) % n : 0;
}

/* True with probability 1/n. */
static inline bool rel_one_in(struct rel_rng *r, uint64_t n)
{
	return rel_below(r, n) == 0;
}

/*
 * Block contents: word i of a block published under (ns, key) is
 * bt_mix64(seed + i) with seed derived from both. A reader that pinned the
 * block checks every word.
 */
static inline uint64_t rel_key_seed(uint64_t ns, struct beluga_key k)
{
	return bt_mix64(ns ^ bt_mix64(k.lo) ^ (k.hi * 3));
}

static inline void rel_msleep(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static inline double rel_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------ */
/* Raw ioctls: 0 or -errno                                              */

static inline int rel_detach(int fd, uint32_t id, uint32_t flags)
{
	struct beluga_detach d = { .size = sizeof(d), .flags = flags,
				   .region_id = id };

	return bt_ioctl(fd, BELUGA_IOC_DETACH, &d);
}

static inline int rel_evict_key(int fd, uint64_t ns, struct beluga_key key)
{
	struct beluga_evict e = { .size = sizeof(e), .ns = ns, .key = key };

	return bt_ioctl(fd, BELUGA_IOC_EVICT, &e);
}

static inline int rel_evict_ns(int fd, uint64_t ns, uint64_t *evicted,
			       uint64_t *busy)
{
	struct beluga_evict e = { .size = sizeof(e),
				  .flags = BELUGA_EVICT_NAMESPACE, .ns = ns };
	int r = bt_ioctl(fd, BELUGA_IOC_EVICT, &e);

	if (evicted)
		*evicted = e.evicted;
	if (busy)
		*busy = e.busy;
	return r;
}

/* ------------------------------------------------------------------ */
/* STATS invariants                                                     */

/*
 * The occupancy invariants of one snapshot. Fills @why and returns false
 * when one is broken. A count "below zero" shows up as a huge u64.
 */
typedef unsigned long long rel_ull;

static inline bool rel_stats_sane(const struct beluga_stats *s, char *why,
				  size_t len)
{
	const rel_ull huge = 1ULL << 48;
	rel_ull fr = s->free_blocks, al = s->allocated_blocks;
	rel_ull pu = s->published_blocks, to = s->total_blocks;
	rel_ull pi = s->pins, pb = s->pinned_blocks, cl = s->clients;

	if (fr + al + pu != to) {
		snprintf(why, len, "free %llu + allocated %llu + published %llu != total %llu",
			 fr, al, pu, to);
		return false;
	}
	if (fr > huge || al > huge || pu > huge || pi > huge || pb > huge || cl > huge) {
		snprintf(why, len, "a count went negative: free %llu allocated %llu "
			 "published %llu pins %llu pinned %llu clients %llu",
			 fr, al, pu, pi, pb, cl);
		return false;
	}
	if (pb > pu) {
		snprintf(why, len, "pinned_blocks %llu > published_blocks %llu", pb, pu);
		return false;
	}
	if (pi < pb) {
		snprintf(why, len, "pins %llu < pinned_blocks %llu", pi, pb);
		return false;
	}
	return true;
}

static inline void rel_stats_print(const char *tag, const struct beluga_stats *s)
{
	rel_diag("%s: total %llu free %llu allocated %llu published %llu pinned %llu "
		 "pins %llu clients %llu evictions %llu", tag,
		 (rel_ull)s->total_blocks, (rel_ull)s->free_blocks,
		 (rel_ull)s->allocated_blocks, (rel_ull)s->published_blocks,
		 (rel_ull)s->pinned_blocks, (rel_ull)s->pins, (rel_ull)s->clients,
		 (rel_ull)s->evictions);
}

/*
 * Wait (up to @ms) until no allocation or pin is held and only @clients
 * files are open: releases run when the last reference to a file goes,
 * which for a killed process is during its exit (before wait() returns),
 * but an io_uring or AF_XDP reference may hold it a little longer.
 * Returns true when reached; @s gets the last snapshot.
 */
static inline bool rel_wait_quiet(int fd, uint64_t clients, unsigned int ms,
				  struct beluga_stats *s)
{
	double end = rel_now() + ms / 1000.0;

	for (;;) {
		if (bt_stats(fd, s) == 0 && s->allocated_blocks == 0 &&
		    s->pins == 0 && s->pinned_blocks == 0 &&
		    s->clients == clients)
			return true;
		if (rel_now() > end)
			return false;
		rel_msleep(20);
	}
}

/* ------------------------------------------------------------------ */
/* Environment and regions                                              */

/* The @index-th name of BELUGA_TEST_DAX into @name; -ENOENT if absent. */
static inline int rel_env_dax(int index, char *name, size_t len)
{
	const char *env = getenv("BELUGA_TEST_DAX");
	char buf[512], *save = NULL, *tok;
	int n = 0;

	if (!env || !*env)
		return -ENOENT;
	snprintf(buf, sizeof(buf), "%s", env);
	for (tok = strtok_r(buf, " \t,", &save); tok;
	     tok = strtok_r(NULL, " \t,", &save), n++) {
		const char *base = strrchr(tok, '/');

		if (n == index) {
			snprintf(name, len, "%s", base ? base + 1 : tok);
			return 0;
		}
	}
	return -ENOENT;
}

static inline int rel_env_node(void)
{
	const char *env = getenv("BELUGA_TEST_NODE");

	if (!env || !*env)
		return -ENOENT;
	return atoi(env);
}

static inline int rel_attach(int fd, struct beluga_attach *a)
{
	return bt_ioctl(fd, BELUGA_IOC_ATTACH, a);
}

/* Attach @length bytes of BELUGA_TEST_NODE memory. -ENOENT: no node. */
static inline int rel_attach_node(int fd, uint64_t length, uint64_t bsize,
				  const char *name, struct beluga_attach *out)
{
	struct beluga_attach a = { .size = sizeof(a),
				   .backend = BELUGA_BACKEND_NODE,
				   .length = length, .block_size = bsize };
	int node = rel_env_node(), r;

	if (node < 0)
		return -ENOENT;
	a.node = node;
	snprintf(a.name, sizeof(a.name), "%s", name ? name : "");
	r = rel_attach(fd, &a);
	if (out)
		*out = a;
	return r;
}

/*
 * Attach @length bytes at @skip into the @index-th BELUGA_TEST_DAX device.
 * -ENOENT: no such device; -ERANGE: it is too small.
 */
static inline int rel_attach_dax(int fd, int index, uint64_t skip,
				 uint64_t length, uint64_t bsize,
				 const char *name, struct beluga_attach *out)
{
	struct beluga_attach a = { .size = sizeof(a),
				   .backend = BELUGA_BACKEND_DAX, .node = -1,
				   .length = length, .block_size = bsize };
	char dev[64];
	uint64_t phys, size;
	int r;

	r = rel_env_dax(index, dev, sizeof(dev));
	if (r)
		return r;
	r = bt_dax_geometry(dev, &phys, &size);
	if (r)
		return r;
	if (skip + length > size)
		return -ERANGE;
	a.phys_start = phys + skip;
	snprintf(a.name, sizeof(a.name), "%s", name ? name : dev);
	r = rel_attach(fd, &a);
	if (out)
		*out = a;
	return r;
}

/*
 * Detach every region, evicting published blocks; retries -EBUSY for up to
 * @ms (asynchronous pin drops). Returns 0 when the pool is empty.
 */
static inline int rel_reset_pool_fd(int fd, unsigned int ms)
{
	struct beluga_region_info ri;
	double end = rel_now() + ms / 1000.0;
	int slot, r, ret = 0;

	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		if (bt_region_info(fd, slot, &ri) == -ENOENT)
			continue;
		for (;;) {
			r = rel_detach(fd, slot, BELUGA_DETACH_EVICT);
			if (r != -EBUSY || rel_now() > end)
				break;
			rel_msleep(20);
		}
		if (r && r != -ENOENT) {
			rel_diag("reset: detach of region %d (%s): %s", slot,
				 ri.name, strerror(-r));
			ret = r;
		}
	}
	return ret;
}

static inline int rel_reset_pool(unsigned int ms)
{
	int fd = bt_open(O_RDWR), r;

	if (fd < 0)
		return -errno;
	r = rel_reset_pool_fd(fd, ms);
	close(fd);
	return r;
}

/* Map [0, len) of @fd shared; NULL (errno set) on failure. */
static inline void *rel_map(int fd, size_t len, int prot)
{
	void *p = mmap(NULL, len, prot, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

#endif /* BELUGA_REL_H */
