/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared helpers of Beluga's reliability tests and ioctl fuzzer (static
 * binaries that run in the QEMU guests as root, against /dev/beluga).
 *
 *   - TAP output (rel_ok / rel_fail / rel_skip, rel_done prints the plan);
 *   - raw ioctl wrappers returning 0 or -errno (the ABI itself, no library);
 *   - the environment of the guest scripts: BELUGA_TEST_DAX ("dax0.0
 *     dax1.0"), BELUGA_TEST_NODE (a CPU-less node), BELUGA_DEV (device
 *     node, default /dev/beluga);
 *   - pool setup and teardown: rel_reset_pool() detaches every region
 *     (evicting), rel_attach_node()/rel_attach_dax() attach small regions;
 *   - STATS invariants (rel_stats_check) and a seeded PRNG (splitmix64).
 *
 * Header-only so that each test is one .c file.
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

#define REL_KIB		1024ULL
#define REL_MIB		(1024ULL * 1024ULL)
#define REL_PAGE	4096ULL

/* ------------------------------------------------------------------ */
/* TAP                                                                  */

static int rel_n, rel_failed, rel_skipped;

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

static inline void rel_result(bool ok, const char *name)
{
	rel_n++;
	if (!ok)
		rel_failed++;
	printf("%sok %d %s\n", ok ? "" : "not ", rel_n, name);
	fflush(stdout);
}

static inline void rel_ok(const char *name)
{
	rel_result(true, name);
}

static inline void rel_fail(const char *name)
{
	rel_result(false, name);
}

static inline void rel_skip(const char *name, const char *why)
{
	rel_n++;
	rel_skipped++;
	printf("ok %d %s # SKIP %s\n", rel_n, name, why);
	fflush(stdout);
}

/* Prints the plan; exit status 1 on any failure, 4 (KSFT_SKIP) if all skipped. */
static inline int rel_done(void)
{
	printf("1..%d\n", rel_n);
	printf("# %d passed, %d failed, %d skipped\n", rel_n - rel_failed - rel_skipped,
	       rel_failed, rel_skipped);
	fflush(stdout);
	if (rel_failed)
		return 1;
	if (rel_n && rel_skipped == rel_n)
		return 4;
	return 0;
}

/* ------------------------------------------------------------------ */
/* PRNG: splitmix64, deterministic for a seed                           */

static inline uint64_t rel_mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

struct rel_rng {
	uint64_t s;
};

static inline uint64_t rel_next(struct rel_rng *r)
{
	r->s += 0x9e3779b97f4a7c15ULL;
	return rel_mix64(r->s);
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

/* A reproducible, never-zero key. */
static inline struct beluga_key rel_key(uint64_t a, uint64_t b)
{
	struct beluga_key k;

	k.lo = rel_mix64(a * 0x100000001b3ULL + b) | 1;
	k.hi = rel_mix64(k.lo ^ (b << 17) ^ a);
	return k;
}

/*
 * Block contents: word i of a block published under (ns, key) is
 * rel_mix64(seed + i) with seed derived from both. A reader that pinned the
 * block checks every word.
 */
static inline uint64_t rel_key_seed(uint64_t ns, struct beluga_key k)
{
	return rel_mix64(ns ^ rel_mix64(k.lo) ^ (k.hi * 3));
}

static inline void rel_fill(volatile void *dst, size_t len, uint64_t seed)
{
	volatile uint64_t *p = dst;
	size_t i;

	for (i = 0; i < len / 8; i++)
		p[i] = rel_mix64(seed + i);
}

/* -1 when the pattern matches, else the index of the first bad word. */
static inline long rel_check(const volatile void *src, size_t len, uint64_t seed)
{
	const volatile uint64_t *p = src;
	size_t i;

	for (i = 0; i < len / 8; i++)
		if (p[i] != rel_mix64(seed + i))
			return (long)i;
	return -1;
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

static inline const char *rel_dev_path(void)
{
	const char *p = getenv("BELUGA_DEV");

	return p && *p ? p : BELUGA_DEVICE_PATH;
}

static inline int rel_open(int flags)
{
	return open(rel_dev_path(), flags | O_CLOEXEC);
}

static inline int rel_ioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) < 0 ? -errno : 0;
}

static inline int rel_info(int fd, struct beluga_info *info)
{
	memset(info, 0, sizeof(*info));
	info->size = sizeof(*info);
	return rel_ioctl(fd, BELUGA_IOC_INFO, info);
}

static inline int rel_stats(int fd, struct beluga_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->size = sizeof(*st);
	return rel_ioctl(fd, BELUGA_IOC_STATS, st);
}

static inline int rel_alloc(int fd, uint32_t count, uint64_t *offsets)
{
	struct beluga_alloc a = {
		.size = sizeof(a), .count = count, .offsets = (uintptr_t)offsets,
	};

	return rel_ioctl(fd, BELUGA_IOC_ALLOC, &a);
}

static inline int rel_blocks(int fd, unsigned long cmd, uint32_t count,
			     const uint64_t *offsets)
{
	struct beluga_blocks b = {
		.size = sizeof(b), .count = count, .offsets = (uintptr_t)offsets,
	};

	return rel_ioctl(fd, cmd, &b);
}

static inline int rel_free(int fd, uint32_t count, const uint64_t *offsets)
{
	return rel_blocks(fd, BELUGA_IOC_FREE, count, offsets);
}

static inline int rel_release(int fd, uint32_t count, const uint64_t *offsets)
{
	return rel_blocks(fd, BELUGA_IOC_RELEASE, count, offsets);
}

static inline int rel_publish(int fd, uint64_t ns,
			      struct beluga_publish_item *items, uint32_t count,
			      struct beluga_publish *out)
{
	struct beluga_publish p = {
		.size = sizeof(p), .ns = ns, .count = count,
		.items = (uintptr_t)items,
	};
	int r = rel_ioctl(fd, BELUGA_IOC_PUBLISH, &p);

	if (out)
		*out = p;
	return r;
}

/* Publish one block: the call's status, *result the item's. */
static inline int rel_publish1(int fd, uint64_t ns, uint64_t off,
			       struct beluga_key key, int32_t *result)
{
	struct beluga_publish_item it = { .offset = off, .key = key,
					  .result = 0x7eadbeef };
	int r = rel_publish(fd, ns, &it, 1, NULL);

	if (result)
		*result = it.result;
	return r;
}

static inline int rel_lookup(int fd, uint64_t ns, const struct beluga_key *keys,
			     uint32_t count, uint64_t *offsets, uint32_t flags,
			     uint32_t *hits)
{
	struct beluga_lookup l = {
		.size = sizeof(l), .flags = flags, .ns = ns, .count = count,
		.hits = 0xdeadbeef, .keys = (uintptr_t)keys,
		.offsets = (uintptr_t)offsets,
	};
	int r = rel_ioctl(fd, BELUGA_IOC_LOOKUP, &l);

	if (hits)
		*hits = l.hits;
	return r;
}

static inline int rel_region_info(int fd, uint32_t id,
				  struct beluga_region_info *ri)
{
	memset(ri, 0, sizeof(*ri));
	ri->size = sizeof(*ri);
	ri->region_id = id;
	return rel_ioctl(fd, BELUGA_IOC_REGION_INFO, ri);
}

static inline int rel_detach(int fd, uint32_t id, uint32_t flags)
{
	struct beluga_detach d = { .size = sizeof(d), .flags = flags,
				   .region_id = id };

	return rel_ioctl(fd, BELUGA_IOC_DETACH, &d);
}

static inline int rel_evict_key(int fd, uint64_t ns, struct beluga_key key)
{
	struct beluga_evict e = { .size = sizeof(e), .ns = ns, .key = key };

	return rel_ioctl(fd, BELUGA_IOC_EVICT, &e);
}

static inline int rel_evict_ns(int fd, uint64_t ns, uint64_t *evicted,
			       uint64_t *busy)
{
	struct beluga_evict e = { .size = sizeof(e),
				  .flags = BELUGA_EVICT_NAMESPACE, .ns = ns };
	int r = rel_ioctl(fd, BELUGA_IOC_EVICT, &e);

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
		if (rel_stats(fd, s) == 0 && s->allocated_blocks == 0 &&
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

static inline int rel_read_u64(const char *path, uint64_t *val)
{
	char buf[64];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = 0;
	errno = 0;
	*val = strtoull(buf, NULL, 0);
	return errno ? -errno : 0;
}

static inline int rel_write_str(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, val, strlen(val));
	close(fd);
	return n < 0 ? -errno : 0;
}

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

/* The 2 MiB aligned part of device-dax @name. */
static inline int rel_dax_range(const char *name, uint64_t *phys,
				uint64_t *size)
{
	char path[256];
	uint64_t start = 0, len = 0, a;
	int r;

	snprintf(path, sizeof(path), "/sys/bus/dax/devices/%s/resource", name);
	r = rel_read_u64(path, &start);
	if (r)
		return r;
	snprintf(path, sizeof(path), "/sys/bus/dax/devices/%s/size", name);
	r = rel_read_u64(path, &len);
	if (r)
		return r;
	a = (start + BELUGA_DAX_ALIGN - 1) & ~(BELUGA_DAX_ALIGN - 1);
	if (a - start >= len)
		return -ERANGE;
	*phys = a;
	*size = (len - (a - start)) & ~(BELUGA_DAX_ALIGN - 1);
	return 0;
}

static inline int rel_attach(int fd, struct beluga_attach *a)
{
	return rel_ioctl(fd, BELUGA_IOC_ATTACH, a);
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
	r = rel_dax_range(dev, &phys, &size);
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
		if (rel_region_info(fd, slot, &ri) == -ENOENT)
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
	int fd = rel_open(O_RDWR), r;

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
