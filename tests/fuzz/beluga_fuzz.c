// SPDX-License-Identifier: GPL-2.0
/*
 * beluga_fuzz: an in-guest ioctl fuzzer for /dev/beluga (static, TAP).
 *
 * It sets up a small pool of its own (a node region and a device-dax region
 * from BELUGA_TEST_NODE / BELUGA_TEST_DAX, 16 KiB blocks, so that eviction
 * happens all the time), then runs ROUNDS rounds of PROCS worker processes.
 * Each worker performs ITERS operations drawn from a PRNG seeded by (seed,
 * round, worker):
 *   - valid traffic: ALLOC, write + PUBLISH, FREE, LOOKUP (pin or probe),
 *     RELEASE, EVICT, mmap/munmap/mremap, fork with the file and mappings
 *     shared, close + reopen with a live mapping, ATTACH/DETACH of extra
 *     regions;
 *   - hostile but valid sequences: double FREE, double RELEASE, FREE after
 *     PUBLISH, PUBLISH of another process's block, a key published twice in
 *     one call, LOOKUP while other workers evict;
 *   - the device lease's commands on a fresh file: WATCHDOG REGISTER and
 *     QUERY, DEVICE_RANGE (valid: fence_ms 0 on these local pools, once
 *     per file, the range mapped afterwards) and each of their refusals
 *     with its exact error, and HOSTS with every record size;
 *   - garbage: random command encodings, sizes, flags, counts, reserved
 *     fields and user pointers (NULL, unmapped, kernel, read-only, straddling
 *     the end of a page);
 *   - the same through io_uring: one operation in four sends its block
 *     commands (valid, hostile and garbage) as io_uring commands
 *     (uapi: "io_uring commands"; ../lib/beluga_ring.h), and garbage SQEs
 *     (random cmd_op, reserved words, flags) must get the documented errors.
 * Every result is checked against what the ABI (uapi/linux/beluga.h) allows,
 * and against the worker's own model of what it owns and pins. Readers check
 * the contents of every block they pin (blocks are filled with a pattern
 * derived from their key before PUBLISH). Some workers kill themselves at a
 * seeded point (e.g. between ALLOC and PUBLISH); the parent SIGKILLs others
 * at seeded moments.
 *
 * Invariants, checked by the parent while the workers run and after each
 * round: STATS occupancy adds up (free + allocated + published = total,
 * pins >= pinned blocks, nothing negative); once every worker of a round has
 * exited, no allocation or pin is left and only the parent's file is open.
 * At the end every region detaches (nothing mapped or pinned was leaked).
 * The kernel log (KASAN, UBSAN, lockdep, kmemleak) is the lane's job.
 *
 * Determinism: each worker's operation sequence depends only on the seed;
 * the interleaving of workers does not. The seed is printed first; rerun
 * with -s SEED to replay, and with -R ROUND -W WORKER to run one worker's
 * sequence alone (which is then fully deterministic).
 *
 * Usage: beluga_fuzz [-s SEED] [-r ROUNDS] [-p PROCS] [-i ITERS] [-T SECS]
 *                    [-N MIN_IOCTLS] [-R ROUND -W WORKER] [-k] [-v]
 *        beluga_fuzz -P attach|reset
 *   -T  time budget: no new round starts after SECS, and workers stop their
 *       sequence early when it is over (CI bounds the lane's time with it;
 *       the replay command of a failure works without it)
 *   -N  fail (result "ioctl-volume") unless the workers made at least
 *       MIN_IOCTLS ioctl calls; the rate is printed either way
 *   -P  attach: set up the pool and leave it attached (for stress-ng and
 *       trinity); reset: check nothing is left allocated or pinned, detach
 *       every region
 *   -W  one worker alone: STATS must then match its model after every
 *       operation (allocated blocks, pins)
 *   -k  no parent-side kills (self-kills still happen)
 *   -v  print every worker operation (to stderr)
 * Environment: BELUGA_FUZZ_SEED (default seed), BELUGA_TEST_NODE,
 * BELUGA_TEST_DAX, BELUGA_DEV.
 */
#include "../reliability/rel.h"
/* TAP results; CHECK() below is the fuzzer's own */
#define TAP_RESULTS_ONLY
#include "../lib/tap.h"

#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/utsname.h>

#define MAX_PROCS	16
#define NR_NS		3
#define NR_KEYS		24
#define MAX_OWN		48
#define MAX_PIN		48
#define FZ_BSIZE	(16 * BT_KIB)
#define FZ_REGION	(2 * BT_MIB)
#define FZ_EXTRA	(2 * BT_MIB)
#define MSG_LEN		512

/* Shared between the parent and every worker (MAP_SHARED anonymous). */
struct board {
	uint64_t seed;
	uint64_t ns[NR_NS];
	uint64_t main_end;		/* offsets below: main regions, mapped */
	uint64_t bsize;
	uint32_t nr_main;		/* main regions are slots 0..nr_main-1 */
	uint32_t extra_seq;		/* unique names for extra regions */
	int dax_extra_ok;		/* a second device-dax for extra regions */
	volatile uint64_t posted[MAX_PROCS][8];	/* offsets others allocated */
	volatile uint64_t ops[MAX_PROCS];
	/*
	 * Commands made, per worker (threads and fork children included):
	 * ioctl(2) calls and io_uring submissions (one command each)
	 */
	volatile uint64_t ioctls[MAX_PROCS];
	volatile uint64_t ring_cmds[MAX_PROCS];
	int solo;			/* one worker alone (-W): its model is exact */
	volatile uint64_t verified;	/* pinned blocks whose bytes were checked */
	volatile uint64_t hostile;	/* hostile calls made */
	volatile uint64_t pubs, lookups_hit;
	volatile uint64_t abi_violations;	/* failed calls that changed state */
	double deadline;		/* CLOCK_MONOTONIC; 0: none */
	/* the slowest operation of each worker (a kernel path gone slow) */
	volatile double slow_s[MAX_PROCS];
	char slow_op[MAX_PROCS][16];
	char msg[MAX_PROCS][MSG_LEN];
};

static struct board *B;
static int verbose;

struct pin {
	uint64_t off;
	int ns, key;
};

struct worker {
	int id, round;
	struct rel_rng rng;
	int fd;
	uint8_t *map;
	size_t map_len;
	uint64_t owned[MAX_OWN];
	int nowned;
	struct pin pins[MAX_PIN];
	int npins;
	uint64_t op;
	const char *opname;
	uint8_t *rw;		/* 2 pages, random junk */
	uint8_t *ro;		/* 1 page, read-only junk */
	uint8_t *edge;		/* 1 rw page followed by an inaccessible one */
	uint64_t kill_at;	/* self-kill before this op (0: never) */
};

static struct worker *W;	/* this process's worker */

/*
 * Every ioctl(2) this program makes goes through here (the Makefile links
 * with -Wl,--wrap=ioctl), so the rate it reports counts calls into the
 * driver, whatever helper made them. The parent's own calls are not
 * counted: they poll STATS while the workers run.
 */
int __real_ioctl(int fd, unsigned long cmd, ...);
int __wrap_ioctl(int fd, unsigned long cmd, ...);

int __wrap_ioctl(int fd, unsigned long cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (W)
		__atomic_add_fetch(&B->ioctls[W->id], 1, __ATOMIC_RELAXED);
	return __real_ioctl(fd, cmd, arg);
}

/*
 * The same for io_uring submissions (--wrap=io_uring_submit_and_wait):
 * every ring command of this program is submitted alone through it
 * (bt_ring_call_flags(), op_ring_sqe()), so it counts commands.
 */
int __real_io_uring_submit_and_wait(struct io_uring *ring, unsigned int wait_nr);
int __wrap_io_uring_submit_and_wait(struct io_uring *ring, unsigned int wait_nr);

int __wrap_io_uring_submit_and_wait(struct io_uring *ring, unsigned int wait_nr)
{
	if (W) {
		__atomic_add_fetch(&B->ioctls[W->id], 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&B->ring_cmds[W->id], 1, __ATOMIC_RELAXED);
	}
	return __real_io_uring_submit_and_wait(ring, wait_nr);
}

static void wfail(struct worker *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));

static void wfail(struct worker *w, const char *fmt, ...)
{
	char *m = B->msg[w->id];
	int n;
	va_list ap;

	n = snprintf(m, MSG_LEN, "round %d worker %d op %" PRIu64 " (%s): ",
		     w->round, w->id, w->op, w->opname ? w->opname : "?");
	va_start(ap, fmt);
	vsnprintf(m + n, MSG_LEN - n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "# FAIL %s\n", m);
	_exit(1);
}

#define CHECK(w, cond, ...) do { if (!(cond)) wfail(w, __VA_ARGS__); } while (0)

static const char *ename(int e)
{
	static char buf[8][32];
	static int i;
	char *b = buf[i++ & 7];

	if (e == 0)
		return "0";
	snprintf(b, 32, "-%s", strerrorname_np(-e) ? strerrorname_np(-e) : "?");
	return b;
}

/* Errors any command may return on hostile input. */
static bool allowed_err(int r)
{
	switch (-r) {
	case ENOTTY: case EFAULT: case EINVAL: case E2BIG: case EPERM:
	case EBADF: case ENODEV: case ENOSPC: case ENOENT: case EBUSY:
	case EEXIST: case ENOMEM: case EOVERFLOW: case EINTR:
	case EMSGSIZE:	/* HOSTS into an array shorter than the pool's records */
	case ENXIO:	/* DEVICE_RANGE past map_size */
	case ENOLINK:	/* WATCHDOG QUERY from a file that is not the link */
		return true;
	}
	return false;
}

static uint64_t ns_of(int i)
{
	return B->ns[i];
}

static bool in_main(uint64_t off)
{
	return off + B->bsize <= B->main_end;
}

/* ------------------------------------------------------------------ */
/* The worker's model                                                   */

static void own_add(struct worker *w, uint64_t off)
{
	CHECK(w, off % B->bsize == 0, "ALLOC returned unaligned offset 0x%" PRIx64, off);
	for (int i = 0; i < w->nowned; i++)
		CHECK(w, w->owned[i] != off, "ALLOC returned 0x%" PRIx64
		      " which this file already owns", off);
	for (int i = 0; i < w->npins; i++)
		CHECK(w, w->pins[i].off != off, "ALLOC returned 0x%" PRIx64
		      " which this file holds a pin on", off);
	/*
	 * A block the kernel gave this file but the model forgot would be
	 * taken for a foreign one later: callers make room first.
	 */
	CHECK(w, w->nowned < MAX_OWN, "fuzzer bug: the model of owned blocks is full "
	      "(%d) and would lose 0x%" PRIx64, w->nowned, off);
	w->owned[w->nowned++] = off;
	B->posted[w->id][rel_below(&w->rng, 8)] = off;
}

static void own_del_at(struct worker *w, int i)
{
	w->owned[i] = w->owned[--w->nowned];
}

static bool owned(struct worker *w, uint64_t off)
{
	for (int i = 0; i < w->nowned; i++)
		if (w->owned[i] == off)
			return true;
	return false;
}

static bool pinned(struct worker *w, uint64_t off)
{
	for (int i = 0; i < w->npins; i++)
		if (w->pins[i].off == off)
			return true;
	return false;
}

/* An offset that names a block slot but is neither owned nor pinned here. */
static uint64_t foreign_offset(struct worker *w)
{
	for (int t = 0; t < 16; t++) {
		uint64_t off;

		if (rel_one_in(&w->rng, 2)) {
			int o = (int)rel_below(&w->rng, MAX_PROCS);

			off = B->posted[o][rel_below(&w->rng, 8)];
			if (!off && o != w->id)
				continue;
		} else {
			off = rel_below(&w->rng, (B->main_end + 8 * BT_MIB) / B->bsize) *
			      B->bsize;
		}
		if (!owned(w, off) && !pinned(w, off))
			return off;
	}
	return B->main_end + 64 * BT_MIB;	/* no block there */
}

static void verify_block(struct worker *w, uint64_t off, int ns, int key,
			 const char *why)
{
	long bad;

	if (!in_main(off) || off + B->bsize > w->map_len)
		return;
	bad = bt_check(w->map + off, B->bsize,
			rel_key_seed(ns_of(ns), bt_key(ns_of(ns), key)));
	CHECK(w, bad < 0, "%s: pinned block 0x%" PRIx64 " (ns %d key %d) "
	      "corrupted at word %ld", why, off, ns, key, bad);
	__atomic_add_fetch(&B->verified, 1, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------ */
/* Valid operations                                                     */

static void op_alloc(struct worker *w)
{
	uint32_t n = 1 + (uint32_t)rel_below(&w->rng, 6);
	uint64_t offs[8];
	int r;

	if (w->nowned + (int)n > MAX_OWN)
		return;
	memset(offs, 0xa5, sizeof(offs));
	r = bt_alloc(w->fd, n, offs);
	CHECK(w, r == 0 || r == -ENOSPC, "ALLOC %u: %s", n, ename(r));
	if (r == 0)
		for (uint32_t i = 0; i < n; i++)
			own_add(w, offs[i]);
}

/* Publish 1-4 owned blocks (writing their pattern first). */
static void op_publish(struct worker *w)
{
	struct beluga_publish_item it[6];
	struct beluga_publish p;
	uint64_t offs[6];
	int nsi = (int)rel_below(&w->rng, NR_NS), keys[6], n = 0, r, dup = -1;
	int i;

	if (!w->nowned)
		return;
	n = 1 + (int)rel_below(&w->rng, w->nowned < 4 ? w->nowned : 4);
	memset(it, 0, sizeof(it));
	for (i = 0; i < n; i++) {
		int j = (int)rel_below(&w->rng, w->nowned);

		offs[i] = w->owned[j];
		own_del_at(w, j);
		keys[i] = (int)rel_below(&w->rng, NR_KEYS);
		it[i].offset = offs[i];
		it[i].key = bt_key(ns_of(nsi), keys[i]);
		it[i].result = 0x5a5a5a5a;
		if (in_main(offs[i]))
			bt_fill(w->map + offs[i], B->bsize,
				 rel_key_seed(ns_of(nsi), it[i].key));
	}
	/* hostile: the same key twice in one call -> the second EXISTS */
	if (n < 6 && w->nowned && rel_one_in(&w->rng, 6)) {
		int j = (int)rel_below(&w->rng, w->nowned);

		offs[n] = w->owned[j];
		own_del_at(w, j);
		keys[n] = keys[0];
		it[n] = it[0];
		it[n].offset = offs[n];
		if (in_main(offs[n]))
			bt_fill(w->map + offs[n], B->bsize,
				 rel_key_seed(ns_of(nsi), it[n].key));
		dup = n++;
	}
	/* hostile: another process's block (or no block) in the same call */
	int foreign = -1;

	if (n < 6 && rel_one_in(&w->rng, 5)) {
		foreign = n;
		offs[n] = foreign_offset(w);
		memset(&it[n], 0, sizeof(it[n]));
		it[n].offset = offs[n];
		it[n].key = bt_key(ns_of(nsi), (int)rel_below(&w->rng, NR_KEYS));
		n++;
		B->hostile++;
	}
	r = bt_publish(w->fd, ns_of(nsi), it, n, &p);
	CHECK(w, r == 0, "PUBLISH of %d blocks: %s", n, ename(r));
	CHECK(w, p.published + p.exists + p.failed == (uint32_t)n &&
	      p.failed == (foreign >= 0 ? 1U : 0U),
	      "PUBLISH counters %u+%u+%u for %d blocks (%d foreign)", p.published,
	      p.exists, p.failed, n, foreign >= 0);
	for (i = 0; i < n; i++) {
		if (i == foreign) {
			CHECK(w, it[i].result == -EPERM || it[i].result == -EINVAL,
			      "PUBLISH of foreign block 0x%" PRIx64 ": result %d",
			      offs[i], it[i].result);
			continue;
		}
		CHECK(w, it[i].result == BELUGA_PUBLISH_OK ||
		      it[i].result == BELUGA_PUBLISH_EXISTS,
		      "PUBLISH item %d (own block 0x%" PRIx64 "): result %d", i,
		      offs[i], it[i].result);
	}
	if (foreign >= 0)
		n--;	/* the rest looks at own blocks only */
	if (dup >= 0)
		CHECK(w, it[dup].result == BELUGA_PUBLISH_EXISTS,
		      "PUBLISH: a key listed twice in one call was published twice");
	__atomic_add_fetch(&B->pubs, p.published, __ATOMIC_RELAXED);

	/* hostile: publishing a block again (now PUBLISHED or freed) */
	if (rel_one_in(&w->rng, 4)) {
		int32_t res;

		r = bt_publish1(w->fd, ns_of(nsi), offs[0],
				 bt_key(ns_of(nsi), NR_KEYS + 1), &res);
		B->hostile++;
		/* -EINVAL: freed (EXISTS) and its extra region detached since */
		if (!owned(w, offs[0]))
			CHECK(w, r == 0 && (res == -EPERM ||
					    (res == -EINVAL && !in_main(offs[0]))),
			      "re-PUBLISH of 0x%" PRIx64 ": %s, result %d",
			      offs[0], ename(r), res);
	}
	/* hostile: FREE after PUBLISH */
	if (rel_one_in(&w->rng, 4)) {
		r = bt_free(w->fd, 1, &offs[0]);
		B->hostile++;
		if (!owned(w, offs[0]))
			CHECK(w, r == -EINVAL, "FREE after PUBLISH of 0x%" PRIx64 ": %s",
			      offs[0], ename(r));
	}
}

static void op_free_fixed(struct worker *w)
{
	uint64_t offs[4];
	int n, r, i;

	if (!w->nowned)
		return;
	n = 1 + (int)rel_below(&w->rng, w->nowned < 3 ? w->nowned : 3);
	for (i = 0; i < n; i++)
		offs[i] = w->owned[w->nowned - 1 - i];
	if (rel_one_in(&w->rng, 5)) {
		offs[n] = offs[0];
		r = bt_free(w->fd, n + 1, offs);
		B->hostile++;
		CHECK(w, r == -EINVAL, "FREE listing 0x%" PRIx64 " twice: %s",
		      offs[0], ename(r));
	}
	if (rel_one_in(&w->rng, 5)) {
		offs[n] = foreign_offset(w);
		r = bt_free(w->fd, n + 1, offs);
		B->hostile++;
		CHECK(w, r == -EINVAL, "FREE with foreign 0x%" PRIx64 ": %s",
		      offs[n], ename(r));
	}
	r = bt_free(w->fd, n, offs);
	CHECK(w, r == 0, "FREE of %d owned blocks: %s", n, ename(r));
	w->nowned -= n;	/* the last n entries */
	/* hostile: double FREE */
	if (rel_one_in(&w->rng, 4)) {
		r = bt_free(w->fd, 1, &offs[0]);
		B->hostile++;
		CHECK(w, r == -EINVAL, "double FREE of 0x%" PRIx64 ": %s",
		      offs[0], ename(r));
	}
}

static void op_lookup(struct worker *w)
{
	struct beluga_key keys[8];
	uint64_t offs[8];
	uint32_t n = 1 + (uint32_t)rel_below(&w->rng, 6), hits = 0;
	int nsi = (int)rel_below(&w->rng, NR_NS);
	int k0 = (int)rel_below(&w->rng, NR_KEYS);
	bool pin = rel_below(&w->rng, 3) != 0;
	int r;

	if (pin && w->npins + (int)n > MAX_PIN)
		pin = false;
	for (uint32_t i = 0; i < n; i++)
		keys[i] = bt_key(ns_of(nsi), (k0 + (int)i) % NR_KEYS);
	r = bt_lookup(w->fd, ns_of(nsi), keys, n, pin || rel_one_in(&w->rng, 2) ? offs : NULL,
		       pin ? BELUGA_LOOKUP_PIN : 0, &hits);
	CHECK(w, r == 0, "LOOKUP%s of %u keys: %s", pin ? "+PIN" : "", n, ename(r));
	CHECK(w, hits <= n, "LOOKUP: hits %u > count %u", hits, n);
	if (!pin)
		return;
	__atomic_add_fetch(&B->lookups_hit, hits, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < hits; i++) {
		CHECK(w, offs[i] % B->bsize == 0, "LOOKUP: unaligned offset");
		CHECK(w, !owned(w, offs[i]), "LOOKUP pinned 0x%" PRIx64
		      " which this file has ALLOCATED", offs[i]);
		w->pins[w->npins].off = offs[i];
		w->pins[w->npins].ns = nsi;
		w->pins[w->npins].key = (k0 + (int)i) % NR_KEYS;
		w->npins++;
		verify_block(w, offs[i], nsi, (k0 + (int)i) % NR_KEYS, "LOOKUP");
	}
}

static int pins_on(struct worker *w, uint64_t off)
{
	int c = 0;

	for (int i = 0; i < w->npins; i++)
		c += w->pins[i].off == off;
	return c;
}

static void op_release(struct worker *w)
{
	uint64_t offs[8];
	int n, r, i;

	if (!w->npins)
		return;
	/* re-check a pinned block first: eviction pressure must not touch it */
	i = (int)rel_below(&w->rng, w->npins);
	verify_block(w, w->pins[i].off, w->pins[i].ns, w->pins[i].key, "RELEASE");
	n = 1 + (int)rel_below(&w->rng, w->npins < 4 ? w->npins : 4);
	for (i = 0; i < n; i++)
		offs[i] = w->pins[w->npins - 1 - i].off;
	/* hostile: one release too many -> -EINVAL, nothing released */
	if (rel_one_in(&w->rng, 4)) {
		int extra = pins_on(w, offs[0]);

		for (i = 0; i < extra && n + i < 8; i++)
			offs[n + i] = offs[0];
		if (n + extra < 8) {
			/* offs[0] now appears 1 + extra > pins times */
			r = bt_release(w->fd, n + extra, offs);
			B->hostile++;
			CHECK(w, r == -EINVAL, "RELEASE of 0x%" PRIx64
			      " once more than pinned: %s", offs[0], ename(r));
		}
	}
	if (rel_one_in(&w->rng, 5)) {
		offs[n] = foreign_offset(w);
		r = bt_release(w->fd, n + 1, offs);
		B->hostile++;
		CHECK(w, r == -EINVAL, "RELEASE with unpinned 0x%" PRIx64 ": %s",
		      offs[n], ename(r));
	}
	r = bt_release(w->fd, n, offs);
	CHECK(w, r == 0, "RELEASE of %d held pins: %s", n, ename(r));
	w->npins -= n;
}

static void op_evict(struct worker *w)
{
	int nsi = (int)rel_below(&w->rng, NR_NS), r;

	if (rel_one_in(&w->rng, 6)) {
		uint64_t ev = 0, busy = 0;

		r = rel_evict_ns(w->fd, ns_of(nsi), &ev, &busy);
		CHECK(w, r == 0, "EVICT namespace: %s", ename(r));
		return;
	}
	r = rel_evict_key(w->fd, ns_of(nsi), bt_key(ns_of(nsi),
			  (int)rel_below(&w->rng, NR_KEYS)));
	CHECK(w, r == 0 || r == -ENOENT || r == -EBUSY, "EVICT key: %s", ename(r));
}

/* Extra regions (attached and detached while everything else runs). */
static void op_region(struct worker *w)
{
	struct beluga_attach a;
	int r;

	if (rel_one_in(&w->rng, 2)) {
		uint32_t seq = __atomic_fetch_add(&B->extra_seq, 1, __ATOMIC_RELAXED);
		char name[32];

		snprintf(name, sizeof(name), "fzx%u", seq);
		if (B->dax_extra_ok && rel_one_in(&w->rng, 2))
			r = rel_attach_dax(w->fd, 1, (seq % 4) * FZ_EXTRA, FZ_EXTRA,
					   0, name, &a);
		else
			r = rel_attach_node(w->fd, FZ_EXTRA, 0, name, &a);
		CHECK(w, r == 0 || r == -EEXIST || r == -ENOSPC || r == -ENOMEM ||
		      r == -EINTR, "ATTACH extra region %s: %s", name, ename(r));
		if (r == 0)
			CHECK(w, a.first_offset >= B->main_end,
			      "extra region placed at 0x%" PRIx64 " inside the main range",
			      (uint64_t)a.first_offset);
		return;
	}
	uint32_t slot = (uint32_t)rel_below(&w->rng, BELUGA_MAX_REGIONS + 1);

	r = rel_detach(w->fd, slot, rel_one_in(&w->rng, 2) ? BELUGA_DETACH_EVICT : 0);
	if (slot < B->nr_main)
		CHECK(w, r == -EBUSY, "DETACH of mapped main region %u: %s", slot,
		      ename(r));
	else
		CHECK(w, r == 0 || r == -EBUSY || r == -ENOENT,
		      "DETACH of region %u: %s", slot, ename(r));
}

static sigjmp_buf bus_jmp;
static volatile sig_atomic_t bus_armed;

static void on_bus(int sig)
{
	(void)sig;
	if (bus_armed)
		siglongjmp(bus_jmp, 1);
	signal(SIGBUS, SIG_DFL);
	raise(SIGBUS);
}

/* mmap with random geometry; check the documented errors. */
static void op_mmap(struct worker *w)
{
	struct beluga_info info;
	uint64_t off, len, pages;
	bool priv = rel_one_in(&w->rng, 6);
	void *p;
	int r;

	r = bt_info(w->fd, &info);
	CHECK(w, r == 0, "INFO: %s", ename(r));
	pages = (info.map_size + 4 * BT_MIB) / BT_PAGE;
	if (rel_one_in(&w->rng, 3))
		off = rel_below(&w->rng, pages / 512 + 1) * 2 * BT_MIB;
	else
		off = rel_below(&w->rng, pages) * BT_PAGE;
	len = (1 + rel_below(&w->rng, rel_one_in(&w->rng, 3) ? 1024 : 8)) * BT_PAGE;
	p = mmap(NULL, len, PROT_READ | (rel_one_in(&w->rng, 2) ? PROT_WRITE : 0),
		 priv ? MAP_PRIVATE : MAP_SHARED, w->fd, (off_t)off);
	if (priv) {
		CHECK(w, p == MAP_FAILED && errno == EINVAL,
		      "MAP_PRIVATE mmap: %s", p == MAP_FAILED ? strerror(errno) : "mapped");
		return;
	}
	if (off + len > info.map_size) {
		/* map_size may have grown meanwhile (extra regions) */
		CHECK(w, p == MAP_FAILED ? (errno == ENXIO || errno == ENOMEM) : true,
		      "mmap past map_size: %s", strerror(errno));
		if (p != MAP_FAILED)
			munmap(p, len);
		return;
	}
	if (p == MAP_FAILED) {
		CHECK(w, errno == ENXIO || errno == ENOMEM, "mmap [0x%" PRIx64 ", +0x%"
		      PRIx64 ") inside map_size: %s", off, len, strerror(errno));
		return;
	}
	/* touch what lies in the main range (always mapped, never SIGBUS) */
	for (uint64_t o = 0; o < len; o += 64 * BT_PAGE)
		if (in_main(off + o)) {
			volatile uint8_t c = ((volatile uint8_t *)p)[o];
			(void)c;
		}
	/* an unmapped hole / detached or later region: SIGBUS is documented */
	if (rel_one_in(&w->rng, 4)) {
		uint64_t o = rel_below(&w->rng, len / BT_PAGE) * BT_PAGE;

		bus_armed = 1;
		if (!sigsetjmp(bus_jmp, 1)) {
			volatile uint8_t c = ((volatile uint8_t *)p)[o];
			(void)c;
		}
		bus_armed = 0;
	}
	/* split the VMA (vm_open on the copy), grow it, unmap in pieces */
	if (len >= 3 * BT_PAGE && rel_one_in(&w->rng, 3)) {
		mprotect((uint8_t *)p + BT_PAGE, BT_PAGE, PROT_NONE);
		mprotect((uint8_t *)p + BT_PAGE, BT_PAGE, PROT_READ);
	}
	if (len >= 3 * BT_PAGE && rel_one_in(&w->rng, 2))
		munmap((uint8_t *)p + BT_PAGE, BT_PAGE);
	if (rel_one_in(&w->rng, 4)) {
		void *q = mremap(p, BT_PAGE, 2 * BT_PAGE, MREMAP_MAYMOVE);

		if (q != MAP_FAILED) {
			munmap(q, 2 * BT_PAGE);
			if (q != p)
				munmap(p, BT_PAGE);
			else
				p = (uint8_t *)p + 2 * BT_PAGE, len = len > 2 * BT_PAGE ?
					len - 2 * BT_PAGE : 0;
		}
	}
	if (len)
		munmap(p, len);
}

/* fork: the child shares the file description, its blocks and pins. */
static void op_fork(struct worker *w)
{
	pid_t pid = fork();
	int st;

	CHECK(w, pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		uint64_t off;
		int32_t res;
		int r;

		/* the parent's pins are the child's too: the bytes still match */
		for (int i = 0; i < w->npins; i++)
			verify_block(w, w->pins[i].off, w->pins[i].ns, w->pins[i].key,
				     "fork child");
		/*
		 * Allocate through a file of its own: a block the child left
		 * allocated to the shared file (killed right after ALLOC)
		 * would be invisible to the parent's model. Shared ownership
		 * itself is checked exactly by rel_crash's fork_ownership.
		 */
		int own = bt_open(O_RDWR);
		struct beluga_stats st;

		CHECK(w, own >= 0, "child open: %s", strerror(errno));
		CHECK(w, bt_stats(w->fd, &st) == 0, "child STATS on the shared file");
		r = bt_alloc(own, 1, &off);
		CHECK(w, r == 0 || r == -ENOSPC, "child ALLOC: %s", ename(r));
		if (r == 0 && in_main(off) && rel_one_in(&w->rng, 2)) {
			int k = (int)rel_below(&w->rng, NR_KEYS);

			bt_fill(w->map + off, B->bsize,
				 rel_key_seed(ns_of(0), bt_key(ns_of(0), k)));
			r = bt_publish1(own, ns_of(0), off, bt_key(ns_of(0), k), &res);
			CHECK(w, r == 0 && (res == 0 || res == 1), "child PUBLISH: %s/%d",
			      ename(r), res);
		}
		/* else: the block returns when the child's file closes */
		_exit(0);
	}
	if (rel_one_in(&w->rng, 2)) {
		rel_msleep((unsigned int)rel_below(&w->rng, 3));
		kill(pid, SIGKILL);
	}
	CHECK(w, waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(w, (WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
	      (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL),
	      "fork child ended with status 0x%x", st);
	if (WIFEXITED(st) && WEXITSTATUS(st))
		_exit(1);	/* its message is on the board */
}

static void map_main(struct worker *w)
{
	w->map_len = B->main_end;
	w->map = rel_map(w->fd, w->map_len, PROT_READ | PROT_WRITE);
	CHECK(w, w->map, "mmap of the main range: %s", strerror(errno));
}

/*
 * close() with a live mapping: the file (and what it owns) lives on until
 * the mapping goes; then everything returns, and the new file owns nothing.
 */
static void op_reopen(struct worker *w)
{
	uint64_t old = w->nowned ? w->owned[0] : UINT64_MAX;
	int fd, r;

	close(w->fd);
	if (old != UINT64_MAX) {
		/* still allocated to the old file: the mapping holds it */
		fd = bt_open(O_RDWR);
		CHECK(w, fd >= 0, "reopen: %s", strerror(errno));
		r = bt_free(fd, 1, &old);
		CHECK(w, r == -EINVAL, "FREE of the old file's block through a new file: %s",
		      ename(r));
		close(fd);
	}
	munmap(w->map, w->map_len);	/* last reference: release runs now */
	w->nowned = 0;
	w->npins = 0;
	w->fd = bt_open(O_RDWR);
	CHECK(w, w->fd >= 0, "reopen: %s", strerror(errno));
	map_main(w);
	if (old != UINT64_MAX) {
		r = bt_free(w->fd, 1, &old);
		CHECK(w, r == -EINVAL, "FREE of a released block: %s", ename(r));
	}
}

/* A read-only file: no ALLOC / FREE / PUBLISH, no writable mapping. */
static void op_readonly(struct worker *w)
{
	int fd = bt_open(O_RDONLY), r;
	uint64_t off = w->nowned ? w->owned[0] : 0;
	void *p;

	CHECK(w, fd >= 0, "open O_RDONLY: %s", strerror(errno));
	r = bt_alloc(fd, 1, &off);
	CHECK(w, r == -EBADF, "ALLOC on a read-only file: %s", ename(r));
	r = bt_free(fd, 1, &off);
	CHECK(w, r == -EBADF, "FREE on a read-only file: %s", ename(r));
	r = bt_publish1(fd, ns_of(0), off, bt_key(1, 2), NULL);
	CHECK(w, r == -EBADF, "PUBLISH on a read-only file: %s", ename(r));
	p = mmap(NULL, BT_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(w, p == MAP_FAILED && errno == EACCES, "writable mmap of a read-only file: %s",
	      p == MAP_FAILED ? strerror(errno) : "mapped");
	p = mmap(NULL, BT_PAGE, PROT_READ, MAP_SHARED, fd, 0);
	CHECK(w, p != MAP_FAILED, "read-only mmap of a read-only file: %s", strerror(errno));
	CHECK(w, mprotect(p, BT_PAGE, PROT_READ | PROT_WRITE) && errno == EACCES,
	      "mprotect(PROT_WRITE) on a read-only file's mapping: %s", strerror(errno));
	munmap(p, BT_PAGE);
	close(fd);
}

/*
 * The device lease's commands on a fresh file, valid and not, each with
 * its exact answer (uapi: BELUGA_IOC_WATCHDOG, BELUGA_IOC_DEVICE_RANGE;
 * the pools here are not shared), and HOSTS with each record size.
 */
static void op_devlease(struct worker *w)
{
	int fd = bt_open(rel_below(&w->rng, 3) ? O_RDWR : O_RDONLY);
	int efd = eventfd(0, EFD_CLOEXEC), r;
	uint64_t pages = B->main_end / BT_PAGE, off, len;
	struct beluga_watchdog wd;
	struct beluga_device_range dr;
	struct beluga_hosts h;
	uint32_t fence = 0xdead, wms;
	void *p;

	CHECK(w, fd >= 0 && efd >= 0, "open / eventfd: %s", strerror(errno));
	B->hostile++;
	/* a page-aligned range inside the main regions */
	off = rel_below(&w->rng, pages) * BT_PAGE;
	len = (1 + rel_below(&w->rng, pages - off / BT_PAGE)) * BT_PAGE;
	if (len > 64 * BT_PAGE)
		len = 64 * BT_PAGE;

	/* refusals first, each breaking one rule; none declares anything */
	memset(&dr, 0, sizeof(dr));
	dr.size = sizeof(dr);
	dr.eventfd = -1;
	dr.offset = off;
	dr.length = len;
	dr.flags = 1U << rel_below(&w->rng, 32);
	r = bt_ioctl(fd, BELUGA_IOC_DEVICE_RANGE, &dr);
	CHECK(w, r == -EINVAL, "DEVICE_RANGE flags 0x%x: %s", dr.flags, ename(r));
	r = bt_device_range(fd, -1, off + 1 + rel_below(&w->rng, BT_PAGE - 1), len,
			    NULL);
	CHECK(w, r == -EINVAL, "DEVICE_RANGE, offset not page aligned: %s", ename(r));
	r = bt_device_range(fd, -1, off, len - 1 - rel_below(&w->rng, BT_PAGE - 1),
			    NULL);
	CHECK(w, r == -EINVAL, "DEVICE_RANGE, length not page aligned: %s", ename(r));
	r = bt_device_range(fd, -1, off, 0, NULL);
	CHECK(w, r == -EINVAL, "DEVICE_RANGE, length 0: %s", ename(r));
	r = bt_device_range(fd, -2 - (int)rel_below(&w->rng, 1000), off, len, NULL);
	CHECK(w, r == -EINVAL, "DEVICE_RANGE, eventfd below -1: %s", ename(r));
	r = bt_device_range(fd, w->fd, off, len, NULL);
	CHECK(w, r == -EBADF, "DEVICE_RANGE, eventfd a /dev/beluga file: %s", ename(r));
	r = bt_device_range(fd, -1, (1ULL << 46) + off, len, NULL);
	CHECK(w, r == -ENXIO, "DEVICE_RANGE past map_size: %s", ename(r));
	r = bt_device_range(fd, -1, BT_PAGE, ~0ULL & ~(BT_PAGE - 1), NULL);
	CHECK(w, r == -ENXIO, "DEVICE_RANGE whose end wraps: %s", ename(r));

	/* the declaration: no fence on a local pool; one per file */
	r = bt_device_range(fd, rel_below(&w->rng, 2) ? efd : -1, off, len, &fence);
	CHECK(w, r == 0, "DEVICE_RANGE [0x%" PRIx64 ", +0x%" PRIx64 "): %s", off, len,
	      ename(r));
	CHECK(w, fence == 0, "DEVICE_RANGE on a local pool: fence_ms %u", fence);
	r = bt_device_range(fd, -1, off, len, NULL);
	CHECK(w, r == -EBUSY, "a second DEVICE_RANGE on one file: %s", ename(r));
	r = bt_device_range(fd, -1, (1ULL << 46), len, NULL);
	CHECK(w, r == -ENXIO, "a second DEVICE_RANGE past map_size: %s", ename(r));
	/* a mapping after the declaration, inside the range */
	p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);
	CHECK(w, p != MAP_FAILED, "mmap of the device range: %s", strerror(errno));
	(void)*(volatile uint8_t *)p;
	munmap(p, len);

	/* WATCHDOG: refusals, then a QUERY of a file that is no link */
	r = bt_watchdog(fd, 0, 0, NULL);
	CHECK(w, r == -EINVAL, "WATCHDOG without a flag: %s", ename(r));
	r = bt_watchdog(fd, BELUGA_WATCHDOG_REGISTER | BELUGA_WATCHDOG_QUERY, 1000, NULL);
	CHECK(w, r == -EINVAL, "WATCHDOG with both flags: %s", ename(r));
	r = bt_watchdog(fd, BELUGA_WATCHDOG_REGISTER, 0, NULL);
	CHECK(w, r == -EINVAL, "WATCHDOG REGISTER for 0 ms: %s", ename(r));
	r = bt_watchdog(fd, BELUGA_WATCHDOG_REGISTER, BELUGA_WATCHDOG_MAX_MS + 1 +
			(uint32_t)rel_below(&w->rng, 1000), NULL);
	CHECK(w, r == -EINVAL, "WATCHDOG REGISTER above the maximum: %s", ename(r));
	r = bt_watchdog(fd, BELUGA_WATCHDOG_QUERY, 1 + (uint32_t)rel_below(&w->rng, 99),
			NULL);
	CHECK(w, r == -EINVAL, "WATCHDOG QUERY with a timeout: %s", ename(r));
	memset(&wd, 0, sizeof(wd));
	wd.size = sizeof(wd);
	wd.flags = BELUGA_WATCHDOG_QUERY;
	wd.__reserved = 1 + (uint32_t)rel_below(&w->rng, 99);
	r = bt_ioctl(fd, BELUGA_IOC_WATCHDOG, &wd);
	CHECK(w, r == -EINVAL, "WATCHDOG with __reserved %u: %s", wd.__reserved, ename(r));
	r = bt_watchdog(fd, BELUGA_WATCHDOG_QUERY, 0, NULL);
	CHECK(w, r == -ENOLINK, "WATCHDOG QUERY from a fresh file: %s", ename(r));
	/* REGISTER: 0, or another file (another worker's) is the link */
	wms = 1 + (uint32_t)rel_below(&w->rng, 10000);
	r = bt_watchdog(fd, BELUGA_WATCHDOG_REGISTER, wms, &wd);
	CHECK(w, r == 0 || r == -EBUSY, "WATCHDOG REGISTER %u ms: %s", wms, ename(r));
	if (r == 0) {
		r = bt_watchdog(fd, BELUGA_WATCHDOG_QUERY, 0, &wd);
		CHECK(w, r == 0, "WATCHDOG QUERY from the link: %s", ename(r));
		/* ranges of local pools are not counted: nothing to wait for */
		CHECK(w, wd.answer == BELUGA_WATCHDOG_FEED && wd.timeout_ms == wms &&
		      wd.device_ranges == 0, "WATCHDOG QUERY: answer %u (want FEED), "
		      "timeout %u (want %u), device ranges %u (want 0 on local pools)",
		      wd.answer, wd.timeout_ms, wms, wd.device_ranges);
	}

	/* HOSTS of pools that are not shared: no records in any size */
	for (int i = 0; i < 5; i++) {
		static const uint32_t sz[] = { 0, BELUGA_HOST_SIZE_V1, BELUGA_HOST_SIZE_V2,
					       BELUGA_HOST_SIZE_V1 + 1, 1 };

		memset(&h, 0, sizeof(h));
		h.size = sizeof(h);
		h.count = BELUGA_MAX_HOSTS;
		h.hosts = (uintptr_t)(w->rw + BT_PAGE);
		h.host_size = sz[i];
		r = bt_ioctl(fd, BELUGA_IOC_HOSTS, &h);
		CHECK(w, i < 3 ? r == 0 && h.count == 0 : r == -EINVAL,
		      "HOSTS with host_size %u: %s, count %u", sz[i], ename(r), h.count);
	}
	/* the first layout does not pass host_size: whatever lies past it */
	memset(&h, 0, sizeof(h));
	h.size = BELUGA_HOSTS_SIZE_V1;
	h.count = BELUGA_MAX_HOSTS;
	h.hosts = (uintptr_t)(w->rw + BT_PAGE);
	h.host_size = 77;
	r = bt_ioctl(fd, BELUGA_IOC_HOSTS, &h);
	CHECK(w, r == 0 && h.count == 0, "HOSTS of the first layout: %s", ename(r));

	/* the link and the range end with the file */
	close(fd);
	close(efd);
}

/* Read every sysfs attribute of the pool while regions come and go. */
static void read_dir(const char *dir, int depth)
{
	char path[512], buf[256];
	struct dirent *de;
	DIR *d = opendir(dir);

	if (!d)
		return;
	while ((de = readdir(d))) {
		int fd;

		if (de->d_name[0] == '.' || !strcmp(de->d_name, "subsystem") ||
		    !strcmp(de->d_name, "device") || !strcmp(de->d_name, "power"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (de->d_type == DT_DIR && depth < 2) {
			read_dir(path, depth + 1);
			continue;
		}
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			ssize_t n = read(fd, buf, sizeof(buf));

			(void)n;
			close(fd);
		}
	}
	closedir(d);
}

static void op_sysfs(struct worker *w)
{
	(void)w;
	read_dir("/sys/class/misc/beluga", 0);
}

/*
 * Two threads on one file (one client): each allocates, publishes, pins and
 * releases its own blocks; the client's mutex and pin table must keep their
 * results exact.
 */
struct tctx {
	struct worker *w;
	uint64_t seed;
	char err[256];
};

static void *thread_body(void *arg)
{
	struct tctx *t = arg;
	struct rel_rng rng = { t->seed };
	uint64_t own[8], pins[16];
	int nown = 0, npins = 0, r;

	/* a new thread: its own ring (beluga_ring.h), one thread in two */
	bt_ring_via.off = rel_below(&rng, 2);

	for (int i = 0; i < 40 && !t->err[0]; i++) {
		switch (rel_below(&rng, 4)) {
		case 0:
			if (nown < 4 && (r = bt_alloc(t->w->fd, 2, own + nown)) == 0)
				nown += 2;
			else if (nown < 4 && r != -ENOSPC)
				snprintf(t->err, sizeof(t->err), "thread ALLOC: %s", ename(r));
			break;
		case 1:
			if (nown) {
				int nsi = (int)rel_below(&rng, NR_NS);
				int k = (int)rel_below(&rng, NR_KEYS);
				int32_t res;

				nown--;
				if (in_main(own[nown]))
					bt_fill(t->w->map + own[nown], B->bsize,
						 rel_key_seed(ns_of(nsi), bt_key(ns_of(nsi), k)));
				r = bt_publish1(t->w->fd, ns_of(nsi), own[nown],
						 bt_key(ns_of(nsi), k), &res);
				if (r || (res != 0 && res != 1))
					snprintf(t->err, sizeof(t->err), "thread PUBLISH: %s/%d",
						 ename(r), res);
			}
			break;
		case 2: {
			int nsi = (int)rel_below(&rng, NR_NS);
			struct beluga_key keys[4];
			uint32_t hits = 0;

			if (npins > 12)
				break;
			for (int k = 0; k < 4; k++)
				keys[k] = bt_key(ns_of(nsi), (uint64_t)rel_below(&rng, NR_KEYS));
			r = bt_lookup(t->w->fd, ns_of(nsi), keys, 4, pins + npins,
				       BELUGA_LOOKUP_PIN, &hits);
			if (r)
				snprintf(t->err, sizeof(t->err), "thread LOOKUP: %s", ename(r));
			else
				npins += (int)hits;
			break;
		}
		default:
			if (npins && (r = bt_release(t->w->fd, npins, pins)))
				snprintf(t->err, sizeof(t->err), "thread RELEASE of %d own pins: %s",
					 npins, ename(r));
			npins = 0;
			if (nown && (r = bt_free(t->w->fd, nown, own)))
				snprintf(t->err, sizeof(t->err), "thread FREE of %d own blocks: %s",
					 nown, ename(r));
			nown = 0;
		}
	}
	if (!t->err[0] && npins && (r = bt_release(t->w->fd, npins, pins)))
		snprintf(t->err, sizeof(t->err), "thread final RELEASE: %s", ename(r));
	if (!t->err[0] && nown && (r = bt_free(t->w->fd, nown, own)))
		snprintf(t->err, sizeof(t->err), "thread final FREE: %s", ename(r));
	return NULL;
}

static void op_threads(struct worker *w)
{
	struct tctx t[2];
	pthread_t th[2];

	for (int i = 0; i < 2; i++) {
		memset(&t[i], 0, sizeof(t[i]));
		t[i].w = w;
		t[i].seed = rel_next(&w->rng);
		CHECK(w, pthread_create(&th[i], NULL, thread_body, &t[i]) == 0,
		      "pthread_create");
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		CHECK(w, !t[i].err[0], "thread %d: %s", i, t[i].err);
	}
}

/*
 * Batches at the limit: LOOKUP+PIN of BELUGA_MAX_BATCH keys drawn from a
 * few (one block pinned thousands of times: the pin table grows), RELEASE of
 * them all in one call, an ALLOC that cannot be satisfied (all or nothing),
 * and a PUBLISH of MAX_BATCH items that are not ours.
 */
static void op_bigbatch(struct worker *w)
{
	const uint32_t n = BELUGA_MAX_BATCH;
	struct beluga_key *keys = calloc(n, sizeof(*keys));
	uint64_t *offs = calloc(n, sizeof(*offs));
	struct beluga_publish_item *it = calloc(n, sizeof(*it));
	int nsi = (int)rel_below(&w->rng, NR_NS), r;
	struct beluga_publish p;
	uint32_t hits = 0;

	CHECK(w, keys && offs && it, "calloc");
	/* one key repeated: every item pins the same block */
	for (uint32_t i = 0; i < n; i++)
		keys[i] = bt_key(ns_of(nsi), (int)rel_below(&w->rng, 2));
	keys[1] = keys[0];
	r = bt_lookup(w->fd, ns_of(nsi), keys, n, offs, BELUGA_LOOKUP_PIN, &hits);
	CHECK(w, r == 0 || r == -ENOMEM, "LOOKUP+PIN of %u keys: %s", n, ename(r));
	if (r == 0 && hits) {
		r = bt_release(w->fd, hits, offs);
		CHECK(w, r == 0, "RELEASE of the %u pins just taken: %s", hits, ename(r));
	}
	r = bt_alloc(w->fd, n, offs);
	CHECK(w, r == -ENOSPC, "ALLOC of %u blocks from a small pool: %s", n, ename(r));
	for (uint32_t i = 0; i < n; i++) {
		it[i].offset = foreign_offset(w);
		it[i].key = bt_key(ns_of(nsi), NR_KEYS + (int)rel_below(&w->rng, 8));
	}
	r = bt_publish(w->fd, ns_of(nsi), it, n, &p);
	if (r == 0 && p.failed != n)
		for (uint32_t i = 0; i < n; i++)
			CHECK(w, it[i].result < 0, "PUBLISH of %u foreign items: %u failed; "
			      "item %u, block 0x%" PRIx64 " (neither owned nor pinned in the "
			      "model), got result %d", n, p.failed, i,
			      (uint64_t)it[i].offset, it[i].result);
	CHECK(w, r == 0 && p.failed == n, "PUBLISH of %u foreign items: %s, %u failed",
	      n, ename(r), p.failed);
	B->hostile += 3;
	free(keys);
	free(offs);
	free(it);
}

/* ------------------------------------------------------------------ */
/* Hostile arguments                                                    */

struct cmdinfo {
	const char *name;
	uint32_t size, v1;
};

static const struct cmdinfo cmds[] = {
	{ "INFO", sizeof(struct beluga_info), BELUGA_INFO_SIZE_V1 },
	{ "STATS", sizeof(struct beluga_stats), BELUGA_STATS_SIZE_V1 },
	{ "ALLOC", sizeof(struct beluga_alloc), BELUGA_ALLOC_SIZE_V1 },
	{ "FREE", sizeof(struct beluga_blocks), BELUGA_BLOCKS_SIZE_V1 },
	{ "PUBLISH", sizeof(struct beluga_publish), BELUGA_PUBLISH_SIZE_V1 },
	{ "LOOKUP", sizeof(struct beluga_lookup), BELUGA_LOOKUP_SIZE_V1 },
	{ "RELEASE", sizeof(struct beluga_blocks), BELUGA_BLOCKS_SIZE_V1 },
	{ "ATTACH", sizeof(struct beluga_attach), BELUGA_ATTACH_SIZE_V1 },
	{ "DETACH", sizeof(struct beluga_detach), BELUGA_DETACH_SIZE_V1 },
	{ "EVICT", sizeof(struct beluga_evict), BELUGA_EVICT_SIZE_V1 },
	{ "REGION_INFO", sizeof(struct beluga_region_info), BELUGA_REGION_INFO_SIZE_V1 },
	{ "HOSTS", sizeof(struct beluga_hosts), BELUGA_HOSTS_SIZE_V1 },
	{ "INDEX_MAP", sizeof(struct beluga_index_map), BELUGA_INDEX_MAP_SIZE_V1 },
	{ "WATCHDOG", sizeof(struct beluga_watchdog), BELUGA_WATCHDOG_SIZE_V1 },
	{ "DEVICE_RANGE", sizeof(struct beluga_device_range),
	  BELUGA_DEVICE_RANGE_SIZE_V1 },
};
#define NR_CMDS (sizeof(cmds) / sizeof(cmds[0]))

/* A user pointer of some hostile kind; *kind tells which. */
enum { P_GOOD, P_NULL, P_UNMAPPED, P_KERNEL, P_RO, P_EDGE, P_ODD };

static uint64_t hostile_ptr(struct worker *w, int *kind, size_t need)
{
	*kind = (int)rel_below(&w->rng, 7);
	switch (*kind) {
	case P_NULL:
		return 0;
	case P_UNMAPPED:
		return (uintptr_t)(w->edge + BT_PAGE + rel_below(&w->rng, 64) * 8);
	case P_KERNEL:
		return 0xffffffff81000000ULL + rel_below(&w->rng, 1 << 20) * 8;
	case P_RO:
		return (uintptr_t)w->ro;
	case P_EDGE:	/* straddles into the unmapped page */
		return (uintptr_t)(w->edge + BT_PAGE - (need > 8 ? need / 2 : 4));
	case P_ODD:	/* misaligned; in the second page, away from the struct */
		return (uintptr_t)(w->rw + BT_PAGE + 2048 + 1 + rel_below(&w->rng, 7));
	}
	return (uintptr_t)(w->rw + BT_PAGE + 1024);
}

/* Random junk that is never an offset this worker owns or has pinned. */
static void junk_fill(struct worker *w, uint8_t *p, size_t len)
{
	uint64_t *q = (uint64_t *)p;

	for (size_t i = 0; i < len / 8; i++) {
		switch (rel_below(&w->rng, 4)) {
		case 0:
			q[i] = foreign_offset(w);
			break;
		case 1:	/* small, but never 0: offset 0 may be ours */
			q[i] = 1 + rel_below(&w->rng, 4);
			break;
		default:
			q[i] = rel_next(&w->rng);
		}
	}
}

/* A random command encoding, argument and size; checks the error class. */
static void op_garbage(struct worker *w)
{
	uint8_t *arg;
	uint32_t nr = (uint32_t)rel_below(&w->rng, NR_CMDS + 3);
	unsigned long cmd;
	bool enc_ok = true, arg_ok = true;
	uint32_t size;
	int kind = P_GOOD, ev_kind = P_GOOD, r;
	const struct cmdinfo *ci = nr < NR_CMDS ? &cmds[nr] : NULL;

	w->opname = ci ? ci->name : "bad-nr";
	B->hostile++;
	/* the command word */
	switch (rel_below(&w->rng, 8)) {
	case 0:
		cmd = _IOWR(BELUGA_TYPE, nr, struct beluga_alloc);
		enc_ok = false;
		break;
	case 1: {
		/* not a type the VFS answers itself (FIGETBSZ is _IO(0, 2)) */
		unsigned int type;

		do
			type = BELUGA_TYPE ^ (1 + (unsigned int)rel_below(&w->rng, 255));
		while (type == 0 || type == 'T' || type == 'X' || type == 'f' ||
		       type == 0x94 || type == 0x12);
		cmd = _IO(type, nr);
		enc_ok = false;
		break;
	}
	case 2:
		/* random: VFS-generic numbers are possible, so only the class counts */
		cmd = (unsigned long)rel_next(&w->rng);
		if (_IOC_TYPE(cmd) != BELUGA_TYPE) {
			r = ioctl(w->fd, cmd, w->rw) < 0 ? -errno : 0;
			CHECK(w, r != 0 || _IOC_TYPE(cmd) == 0 || _IOC_TYPE(cmd) == 'T' ||
			      _IOC_TYPE(cmd) == 'X' || _IOC_TYPE(cmd) == 'f',
			      "random command 0x%lx succeeded", cmd);
			return;
		}
		enc_ok = (unsigned int)cmd == _IO(BELUGA_TYPE, nr);
		break;
	default:
		cmd = _IO(BELUGA_TYPE, nr);
	}
	if (nr >= NR_CMDS)
		enc_ok = false;

	/* the argument: junk in rw (or elsewhere), size of some kind */
	junk_fill(w, w->rw, 2 * BT_PAGE);
	arg = w->rw + rel_below(&w->rng, 64) * 8;
	if (ci) {
		switch (rel_below(&w->rng, 9)) {
		case 0: size = (uint32_t)rel_below(&w->rng, ci->v1); break;
		case 1: size = ci->v1; break;
		case 2: size = ci->size + 8 * (1 + (uint32_t)rel_below(&w->rng, 8)); break;
		case 3: size = 4096 + 1 + (uint32_t)rel_below(&w->rng, 1 << 20); break;
		case 4: size = (uint32_t)rel_next(&w->rng); break;
		default: size = ci->size;
		}
		memcpy(arg, &size, 4);
		/* plausible fields most of the time, so that deeper code runs */
		if (rel_below(&w->rng, 3)) {
			uint32_t *u = (uint32_t *)arg;
			size_t need = 0;

			if (rel_below(&w->rng, 3))
				u[1] = 0;	/* flags */
			switch (nr) {
			case BELUGA_CMD_ALLOC: {
				struct beluga_alloc *a = (void *)arg;

				a->count = rel_one_in(&w->rng, 5) ? (uint32_t)rel_next(&w->rng) :
					   (uint32_t)rel_below(&w->rng, 10);
				if (rel_below(&w->rng, 3))
					a->__reserved = 0;
				need = (size_t)a->count * 8;
				a->offsets = rel_below(&w->rng, 2) ?
					     hostile_ptr(w, &kind, need) :
					     (uintptr_t)(w->rw + BT_PAGE);
				/* V2: no evicted array, a good one, or a hostile one */
				if (rel_below(&w->rng, 4))
					a->__reserved2 = 0;
				switch (rel_below(&w->rng, 4)) {
				case 0:
					break;		/* junk: -EINVAL, mostly */
				case 1:
					a->evicted = 0;
					a->flags &= ~(uint32_t)BELUGA_ALLOC_EVICTED;
					break;
				case 2:
					a->flags |= BELUGA_ALLOC_EVICTED;
					a->evicted = (uintptr_t)(w->rw + BT_PAGE + 1024);
					break;
				default:
					a->flags |= BELUGA_ALLOC_EVICTED;
					a->evicted = hostile_ptr(w, &ev_kind,
						(size_t)a->count * sizeof(struct beluga_evicted_key));
				}
				break;
			}
			case BELUGA_CMD_FREE: case BELUGA_CMD_RELEASE: {
				struct beluga_blocks *b = (void *)arg;

				b->count = rel_one_in(&w->rng, 5) ? (uint32_t)rel_next(&w->rng) :
					   (uint32_t)rel_below(&w->rng, 10);
				if (rel_below(&w->rng, 3))
					b->__reserved = 0;
				need = (size_t)b->count * 8;
				b->offsets = rel_below(&w->rng, 2) ?
					     hostile_ptr(w, &kind, need) :
					     (uintptr_t)(w->rw + BT_PAGE);
				break;
			}
			case BELUGA_CMD_PUBLISH: {
				struct beluga_publish *p = (void *)arg;
				struct beluga_publish_item *it = (void *)(w->rw + BT_PAGE);

				p->count = (uint32_t)rel_below(&w->rng, 6);
				p->ns = ns_of((int)rel_below(&w->rng, NR_NS));
				for (uint32_t i = 0; i < 6; i++)
					if (rel_below(&w->rng, 4))
						it[i].__reserved = 0;
				need = (size_t)p->count * sizeof(*it);
				p->items = rel_below(&w->rng, 2) ? hostile_ptr(w, &kind, need) :
					   (uintptr_t)it;
				break;
			}
			case BELUGA_CMD_LOOKUP: {
				struct beluga_lookup *l = (void *)arg;

				l->count = (uint32_t)rel_below(&w->rng, 9);
				l->ns = ns_of((int)rel_below(&w->rng, NR_NS));
				l->flags &= BELUGA_LOOKUP_PIN | (rel_one_in(&w->rng, 4) ? ~0U : 0);
				need = (size_t)l->count * 16;
				l->keys = rel_below(&w->rng, 2) ? hostile_ptr(w, &kind, need) :
					  (uintptr_t)(w->rw + BT_PAGE);
				l->offsets = rel_below(&w->rng, 2) ? hostile_ptr(w, &kind, need) :
					     (uintptr_t)(w->rw + BT_PAGE + 1024);
				break;
			}
			case BELUGA_CMD_ATTACH: {
				struct beluga_attach *a = (void *)arg;

				a->backend = (uint32_t)rel_below(&w->rng, 4);
				a->node = (int)rel_below(&w->rng, 4) - 1;
				a->phys_start = rel_one_in(&w->rng, 2) ? 0 :
					rel_below(&w->rng, 1 << 20) * BT_PAGE;
				a->length = rel_below(&w->rng, 4) * BT_MIB / 2;
				a->block_size = rel_below(&w->rng, 3) * BT_PAGE * 4;
				a->name[rel_below(&w->rng, BELUGA_NAME_LEN)] = 0;
				if (rel_below(&w->rng, 3))
					a->__reserved = 0;
				break;
			}
			case BELUGA_CMD_DETACH: {
				struct beluga_detach *d = (void *)arg;

				/* never the main regions by luck: test that elsewhere */
				d->region_id = B->nr_main + (uint32_t)rel_below(&w->rng, 20);
				d->flags &= rel_one_in(&w->rng, 2) ? ~0U : 1;
				break;
			}
			case BELUGA_CMD_REGION_INFO:
				((struct beluga_region_info *)arg)->region_id =
					(uint32_t)rel_below(&w->rng, 20);
				break;
			case BELUGA_CMD_WATCHDOG: {
				struct beluga_watchdog *wd = (void *)arg;
				static const uint32_t ms[] = {
					0, 1, 3000, BELUGA_WATCHDOG_MAX_MS,
					BELUGA_WATCHDOG_MAX_MS + 1, ~0U,
				};

				wd->flags = (uint32_t)rel_below(&w->rng, 4);
				if (rel_one_in(&w->rng, 6))
					wd->flags |= 1U << rel_below(&w->rng, 32);
				if (rel_below(&w->rng, 4))
					wd->timeout_ms = ms[rel_below(&w->rng, 6)];
				if (rel_below(&w->rng, 3))
					wd->__reserved = 0;
				break;
			}
			case BELUGA_CMD_DEVICE_RANGE: {
				struct beluga_device_range *dr = (void *)arg;

				switch (rel_below(&w->rng, 4)) {
				case 0: dr->eventfd = -1; break;
				case 1: dr->eventfd = -2 - (int32_t)rel_below(&w->rng, 9); break;
				case 2: dr->eventfd = w->fd; break;	/* not an eventfd */
				default: break;	/* junk: mostly no open file */
				}
				dr->offset = rel_below(&w->rng, 3) ?
					rel_below(&w->rng, B->main_end / BT_PAGE + 4) * BT_PAGE :
					rel_next(&w->rng);
				dr->length = rel_below(&w->rng, 3) ?
					rel_below(&w->rng, 64) * BT_PAGE :
					rel_next(&w->rng);
				break;
			}
			case BELUGA_CMD_HOSTS: {
				struct beluga_hosts *h = (void *)arg;

				h->count = rel_one_in(&w->rng, 5) ? (uint32_t)rel_next(&w->rng) :
					   (uint32_t)rel_below(&w->rng, 20);
				if (rel_below(&w->rng, 3))
					h->__reserved = 0;
				if (rel_below(&w->rng, 3))
					h->__reserved2 = 0;
				/* a record size: V1, V2, 0 (V2), or junk */
				switch (rel_below(&w->rng, 5)) {
				case 0: h->host_size = 0; break;
				case 1: h->host_size = BELUGA_HOST_SIZE_V1; break;
				case 2: h->host_size = BELUGA_HOST_SIZE_V2; break;
				case 3: h->host_size = BELUGA_HOST_SIZE_V1 +
					(uint32_t)rel_below(&w->rng, 16); break;
				default: break;	/* junk_fill's */
				}
				need = (size_t)(h->count < 20 ? h->count : 20) *
				       sizeof(struct beluga_host);
				h->hosts = rel_below(&w->rng, 2) ? hostile_ptr(w, &kind, need) :
					   (uintptr_t)(w->rw + BT_PAGE);
				break;
			}
			}
		}
	} else {
		size = (uint32_t)rel_next(&w->rng);
	}
	/* the argument pointer itself */
	switch (rel_below(&w->rng, 10)) {
	case 0:
		arg = NULL;
		arg_ok = false;
		break;
	case 1:
		arg = w->edge + BT_PAGE;	/* unmapped */
		arg_ok = false;
		break;
	case 2:
		arg = (uint8_t *)0xffff888000000000ULL;
		arg_ok = false;
		break;
	case 3:	/* straddling: size readable, the rest not */
		memcpy(w->edge + BT_PAGE - 8, arg, 8);
		arg = w->edge + BT_PAGE - 8;
		break;
	default:
		break;
	}
	/* through the ring in the operations that use it (bt_ring_routes()) */
	r = bt_ioctl(w->fd, cmd, arg);
	if (!enc_ok) {
		CHECK(w, r == -ENOTTY, "bad command 0x%lx: %s (want -ENOTTY)", cmd, ename(r));
		return;
	}
	if (!arg_ok) {
		CHECK(w, r == -EFAULT, "command 0x%lx with bad argument pointer %p: %s "
		      "(want -EFAULT)", cmd, (void *)arg, ename(r));
		return;
	}
	CHECK(w, r == 0 || allowed_err(r), "%s size %u: unexpected %s", ci->name, size,
	      ename(r));
	if (arg != w->edge + BT_PAGE - 8) {
		if (size < ci->v1)
			CHECK(w, r == -EINVAL, "%s with size %u < %u: %s", ci->name, size,
			      ci->v1, ename(r));
		else if (size > 4096)
			CHECK(w, r == -E2BIG, "%s with size %u > 4096: %s", ci->name, size,
			      ename(r));
	} else if (size > 8) {
		CHECK(w, r == -EFAULT || r == -EINVAL || r == -E2BIG,
		      "%s straddling a page end: %s", ci->name, ename(r));
	}
	/* an ALLOC that got through (valid count and array): give the blocks back */
	if (r == 0 && nr == BELUGA_CMD_ALLOC) {
		struct beluga_alloc *a = (void *)arg;
		int f = bt_free(w->fd, a->count, (uint64_t *)(uintptr_t)a->offsets);

		/* the flag is read from a V2 struct only; its answer is bounded */
		if (size >= BELUGA_ALLOC_SIZE_V2 && (a->flags & BELUGA_ALLOC_EVICTED)) {
			CHECK(w, ev_kind != P_NULL && ev_kind != P_UNMAPPED &&
			      ev_kind != P_KERNEL,
			      "ALLOC EVICTED succeeded with an inaccessible evicted array");
			CHECK(w, a->nr_evicted <= a->count,
			      "ALLOC EVICTED named %u keys for %u blocks",
			      a->nr_evicted, a->count);
		}

		CHECK(w, f == 0, "FREE of the %u blocks a garbage ALLOC returned: %s",
		      a->count, ename(f));
	}
	if (r == 0 && nr == BELUGA_CMD_DETACH)
		CHECK(w, ((struct beluga_detach *)arg)->region_id >= B->nr_main,
		      "garbage DETACH removed a main region");
	if (r == 0 && nr == BELUGA_CMD_WATCHDOG && size >= ci->v1) {
		const struct beluga_watchdog *wd = (const void *)arg;

		CHECK(w, wd->flags == BELUGA_WATCHDOG_REGISTER ||
		      wd->flags == BELUGA_WATCHDOG_QUERY,
		      "garbage WATCHDOG with flags 0x%x succeeded", wd->flags);
		CHECK(w, wd->answer == BELUGA_WATCHDOG_FEED,
		      "WATCHDOG on pools that are not shared answered %u, not FEED",
		      wd->answer);
	}
	if (r == 0 && nr == BELUGA_CMD_DEVICE_RANGE && size >= ci->v1)
		CHECK(w, ((const struct beluga_device_range *)arg)->fence_ms == 0,
		      "DEVICE_RANGE on a pool that is not shared answered fence_ms %u",
		      ((const struct beluga_device_range *)arg)->fence_ms);
	if (r == 0 && (kind == P_NULL || kind == P_UNMAPPED || kind == P_KERNEL)) {
		/* a pointer the kernel had to use could not have been used */
		bool used = false;
		uint32_t cnt = ((uint32_t *)arg)[2];

		if (nr == BELUGA_CMD_ALLOC || nr == BELUGA_CMD_FREE ||
		    nr == BELUGA_CMD_RELEASE || nr == BELUGA_CMD_PUBLISH)
			used = cnt != 0;
		CHECK(w, !used, "%s succeeded with an inaccessible array pointer",
		      ci->name);
	}
}

/*
 * A garbage SQE (uapi: "Errors of the SQE itself"): a random cmd_op (a
 * command the ring takes, one it refuses, or any number), a nonzero
 * reserved word, IORING_URING_CMD_FIXED, io_uring's own __pad1, and a
 * plausible or hostile struct behind it. The first broken rule decides
 * the error; a command that got through is checked like op_garbage's.
 */
static void op_ring_sqe(struct worker *w)
{
	static struct io_uring ring;
	static pid_t owner;
	struct io_uring_sqe *sqe;
	uint32_t nr = (uint32_t)rel_below(&w->rng, NR_CMDS);
	uint32_t cmd_op, size = cmds[nr].v1;
	bool reserved = rel_one_in(&w->rng, 6), fixed = rel_one_in(&w->rng, 10);
	bool pad1 = rel_one_in(&w->rng, 10), reaped, known;
	uint8_t *arg = w->rw + rel_below(&w->rng, 64) * 8;
	int kind = P_GOOD, r;

	w->opname = "ring-sqe";
	B->hostile++;
	if (owner != getpid()) {
		r = io_uring_queue_init(4, &ring, 0);
		CHECK(w, r == 0, "io_uring_queue_init: %s", ename(r));
		owner = getpid();
	}
	switch (rel_below(&w->rng, 4)) {
	case 0:
		cmd_op = (uint32_t)rel_next(&w->rng);
		break;
	case 1:
		cmd_op = _IOWR(BELUGA_TYPE, nr, struct beluga_lookup);
		break;
	default:
		cmd_op = _IO(BELUGA_TYPE, nr);
	}
	/* a random number may still name a command (never by luck, but exactly) */
	known = cmd_op == _IO(BELUGA_TYPE, _IOC_NR(cmd_op)) && _IOC_NR(cmd_op) < NR_CMDS;
	if (known)
		nr = _IOC_NR(cmd_op);
	junk_fill(w, w->rw, 2 * BT_PAGE);
	memcpy(arg, &size, 4);
	((uint32_t *)arg)[1] = 0;	/* flags */
	if (rel_below(&w->rng, 3))
		arg = (uint8_t *)(uintptr_t)hostile_ptr(w, &kind, size);
	sqe = io_uring_get_sqe(&ring);
	CHECK(w, sqe != NULL, "no free SQE");
	bt_ring_prep(sqe, w->fd, cmd_op, arg);
	if (reserved)
		bt_ring_area(sqe)->__reserved = rel_next(&w->rng) | 1;
	if (fixed)
		sqe->uring_cmd_flags = IORING_URING_CMD_FIXED;
	if (pad1)
		sqe->__pad1 = (uint32_t)rel_next(&w->rng) | 1;
	sqe->user_data = BT_RING_TAG;
	r = bt_ring_reap1(&ring, NULL, &reaped);
	CHECK(w, reaped, "io_uring failed: %s", ename(r));
	if (pad1) {
		CHECK(w, r == -EINVAL, "cmd_op 0x%x, __pad1 set: %s (want -EINVAL)",
		      cmd_op, ename(r));
	} else if (fixed) {
		/*
		 * io_uring's -EFAULT (no registered buffer), or Beluga's
		 * errors in their order: -ENOTTY, -EOPNOTSUPP, -EINVAL
		 */
		CHECK(w, r == -EFAULT || r == -ENOTTY || r == -EOPNOTSUPP || r == -EINVAL,
		      "cmd_op 0x%x with IORING_URING_CMD_FIXED: %s", cmd_op, ename(r));
	} else if (!known) {
		CHECK(w, r == -ENOTTY, "cmd_op 0x%x: %s (want -ENOTTY)", cmd_op,
		      ename(r));
	} else if (!bt_ring_takes(cmd_op)) {
		CHECK(w, r == -EOPNOTSUPP, "%s through the ring: %s (want -EOPNOTSUPP)",
		      cmds[nr].name, ename(r));
	} else if (reserved) {
		CHECK(w, r == -EINVAL, "%s with a nonzero reserved word: %s", cmds[nr].name,
		      ename(r));
	} else {
		CHECK(w, r == 0 || allowed_err(r), "%s through the ring: unexpected %s",
		      cmds[nr].name, ename(r));
		if (kind == P_NULL || kind == P_UNMAPPED || kind == P_KERNEL)
			CHECK(w, r == -EFAULT, "%s with its struct at an inaccessible "
			      "address: %s", cmds[nr].name, ename(r));
		/* junk that made a valid ALLOC: give the blocks back */
		if (r == 0 && nr == BELUGA_CMD_ALLOC) {
			struct beluga_alloc *a = (void *)arg;
			int f;

			bt_ring_via.off = true;
			f = bt_free(w->fd, a->count, (uint64_t *)(uintptr_t)a->offsets);
			CHECK(w, f == 0, "FREE of the %u blocks a garbage ALLOC returned: %s",
			      a->count, ename(f));
		}
	}
}

/*
 * ALLOC / LOOKUP+PIN whose struct sits in read-only memory: the kernel
 * does the work, then cannot write the struct back. The ABI says a failed
 * command changes nothing, so nothing may be left allocated or pinned.
 */
static void op_ro_struct(struct worker *w)
{
	uint64_t *offs = (uint64_t *)(w->rw + BT_PAGE);
	struct beluga_alloc *a;
	int r;

	if (w->nowned + 2 > MAX_OWN)
		return;		/* no room in the model for what it may get */
	B->hostile++;
	for (int i = 0; i < 4; i++)
		offs[i] = UINT64_MAX;
	mprotect(w->ro, BT_PAGE, PROT_READ | PROT_WRITE);
	a = (struct beluga_alloc *)w->ro;
	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->count = 2;
	a->offsets = (uintptr_t)offs;
	mprotect(w->ro, BT_PAGE, PROT_READ);
	r = bt_ioctl(w->fd, BELUGA_IOC_ALLOC, a);
	CHECK(w, r == -EFAULT || r == -ENOSPC || r == 0,
	      "ALLOC with a read-only struct: %s", ename(r));
	if (r == 0) {
		/* a kernel that does not copy the struct back on success */
		own_add(w, offs[0]);
		own_add(w, offs[1]);
	} else if (r == -EFAULT && offs[0] != UINT64_MAX) {
		int f = bt_free(w->fd, 2, offs);

		/* reported once per run by the parent (failed-call-no-effect) */
		if (f == 0 && !__atomic_fetch_add(&B->abi_violations, 1, __ATOMIC_RELAXED))
			fprintf(stderr, "# round %d worker %d op %" PRIu64 ": ALLOC with its "
				"struct in read-only memory failed with -EFAULT but left blocks "
				"0x%" PRIx64 ", 0x%" PRIx64 " allocated to the file (FREE "
				"succeeded); the ABI says a failed command changes nothing\n",
				w->round, w->id, w->op, offs[0], offs[1]);
		CHECK(w, f == 0 || f == -EINVAL, "FREE after the failed ALLOC: %s", ename(f));
	}
}

/* ------------------------------------------------------------------ */
/* Worker                                                               */

static void worker_setup(struct worker *w)
{
	w->fd = bt_open(O_RDWR);
	CHECK(w, w->fd >= 0, "open: %s", strerror(errno));
	map_main(w);
	w->rw = mmap(NULL, 2 * BT_PAGE, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	w->ro = mmap(NULL, BT_PAGE, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	w->edge = mmap(NULL, 2 * BT_PAGE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(w, w->rw != MAP_FAILED && w->ro != MAP_FAILED && w->edge != MAP_FAILED,
	      "scratch mmap");
	junk_fill(w, w->ro, BT_PAGE);
	mprotect(w->ro, BT_PAGE, PROT_READ);
	/*
	 * The hole stays reserved (PROT_NONE), not unmapped: a later small
	 * mmap() (an io_uring ring's queues) would land in it and make the
	 * "unmapped" pointers readable.
	 */
	mprotect(w->edge + BT_PAGE, BT_PAGE, PROT_NONE);
}

/*
 * One worker alone owns every allocation and pin in the pool, so STATS
 * must agree with its model exactly after each operation: a block or pin
 * the model lost (or one the kernel kept behind a failed call) shows at
 * once, deterministically, instead of as a stray success much later.
 */
static void solo_check(struct worker *w)
{
	struct beluga_stats st;
	int r = bt_stats(w->fd, &st);

	CHECK(w, r == 0, "STATS: %s", ename(r));
	CHECK(w, st.allocated_blocks == (uint64_t)w->nowned && st.pins == (uint64_t)w->npins,
	      "alone, the model has %d blocks allocated and %d pins, STATS says %llu "
	      "and %llu", w->nowned, w->npins, (rel_ull)st.allocated_blocks,
	      (rel_ull)st.pins);
}

static void worker_run(struct worker *w, uint64_t iters)
{
	static const struct {
		void (*fn)(struct worker *);
		const char *name;
		int weight;
	} ops[] = {
		{ op_alloc, "alloc", 20 },
		{ op_publish, "publish", 16 },
		{ op_free_fixed, "free", 8 },
		{ op_lookup, "lookup", 20 },
		{ op_release, "release", 14 },
		{ op_evict, "evict", 4 },
		{ op_garbage, "garbage", 14 },
		{ op_mmap, "mmap", 4 },
		{ op_region, "region", 2 },
		{ op_fork, "fork", 1 },
		{ op_reopen, "reopen", 1 },
		{ op_readonly, "readonly", 1 },
		{ op_ro_struct, "ro-struct", 1 },
		{ op_sysfs, "sysfs", 2 },
		{ op_threads, "threads", 2 },
		{ op_bigbatch, "bigbatch", 1 },
		{ op_ring_sqe, "ring-sqe", 4 },
		{ op_devlease, "devlease", 2 },
	};
	int total = 0;

	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		total += ops[i].weight;
	for (w->op = 1; w->op <= iters; w->op++) {
		int pick = (int)rel_below(&w->rng, total);
		size_t i;

		/* the time budget (-T) ends the sequence early, never mid-op */
		if (B->deadline && !(w->op & 15) && rel_now() > B->deadline)
			break;

		if (w->op == w->kill_at) {
			if (verbose)
				fprintf(stderr, "# w%d: self-kill at op %" PRIu64
					" (%d owned, %d pinned)\n", w->id, w->op,
					w->nowned, w->npins);
			kill(getpid(), SIGKILL);
		}
		for (i = 0; pick >= ops[i].weight; i++)
			pick -= ops[i].weight;
		w->opname = ops[i].name;
		/* one operation in four through io_uring */
		bt_ring_via.off = !rel_one_in(&w->rng, 4);
		if (verbose)
			fprintf(stderr, "# w%d op %" PRIu64 " %s\n", w->id, w->op, ops[i].name);
		double t = rel_now();

		ops[i].fn(w);
		t = rel_now() - t;
		if (t > B->slow_s[w->id]) {
			B->slow_s[w->id] = t;
			snprintf(B->slow_op[w->id], sizeof(B->slow_op[0]), "%s", ops[i].name);
		}
		B->ops[w->id]++;
		if (B->solo)
			solo_check(w);
	}
	/* leave with whatever is still owned and pinned: close returns it */
}

static uint64_t worker_seed(uint64_t seed, int round, int id)
{
	return bt_mix64(seed ^ bt_mix64(((uint64_t)round << 32) | (uint32_t)id));
}

static void worker_init(struct worker *w, int round, int id, uint64_t iters)
{
	memset(w, 0, sizeof(*w));
	w->id = id;
	w->round = round;
	w->rng.s = worker_seed(B->seed, round, id);
	/* one worker in four kills itself at a seeded point */
	if (rel_one_in(&w->rng, 4))
		w->kill_at = 1 + rel_below(&w->rng, iters);
}

static pid_t worker_spawn(int round, int id, uint64_t iters)
{
	pid_t pid = fork();

	if (pid)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	W = calloc(1, sizeof(*W));
	worker_init(W, round, id, iters);
	worker_setup(W);
	worker_run(W, iters);
	_exit(0);
}

/* ------------------------------------------------------------------ */
/* Parent                                                               */

static int setup_pool(int fd, char *why, size_t len)
{
	struct beluga_attach a;
	struct beluga_info info;
	char dev[64];
	int r, nr = 0;

	r = rel_reset_pool_fd(fd, 5000);
	if (r) {
		snprintf(why, len, "cannot empty the pool: %s", ename(r));
		return r;
	}
	r = rel_attach_node(fd, FZ_REGION, FZ_BSIZE, "fz-node", &a);
	if (r == 0)
		nr++;
	else if (r != -ENOENT) {
		snprintf(why, len, "attach node region: %s", ename(r));
		return r;
	}
	r = rel_attach_dax(fd, 0, 0, FZ_REGION, FZ_BSIZE, "fz-dax", &a);
	if (r == 0)
		nr++;
	else if (r != -ENOENT) {
		snprintf(why, len, "attach dax region: %s", ename(r));
		return r;
	}
	if (!nr) {
		snprintf(why, len, "neither BELUGA_TEST_NODE nor BELUGA_TEST_DAX is set");
		return -ENOENT;
	}
	B->dax_extra_ok = rel_env_dax(1, dev, sizeof(dev)) == 0;
	r = bt_info(fd, &info);
	if (r) {
		snprintf(why, len, "INFO: %s", ename(r));
		return r;
	}
	B->nr_main = (uint32_t)nr;
	B->main_end = info.map_size;
	B->bsize = info.block_size;
	return 0;
}

/*
 * The model's capacity, scripted so that it is deterministic: one worker
 * alone fills its model to one block short of MAX_OWN, then runs the
 * operations that allocate (ro-struct: two blocks at once; alloc), each
 * followed by the solo check. A block the model has no room for must be
 * refused before the kernel hands it out, never forgotten after.
 */
static bool model_full(void)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		uint64_t off;

		W = calloc(1, sizeof(*W));
		worker_init(W, 0, 0, 1);
		W->kill_at = 0;
		worker_setup(W);
		W->opname = "fill";
		while (W->nowned < MAX_OWN - 1) {
			int r = bt_alloc(W->fd, 1, &off);

			CHECK(W, r == 0, "ALLOC 1 of an empty pool: %s", ename(r));
			own_add(W, off);
		}
		solo_check(W);
		for (W->op = 1; W->op <= 8; W->op++) {
			W->opname = W->op & 1 ? "ro-struct" : "alloc";
			if (W->op & 1)
				op_ro_struct(W);
			else
				op_alloc(W);
			solo_check(W);
		}
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return false;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return true;
	rel_diag("%s", B->msg[0][0] ? B->msg[0] : "the model-full worker died");
	return false;
}

static uint64_t total_ops(void)
{
	uint64_t n = 0;

	for (int i = 0; i < MAX_PROCS; i++)
		n += B->ops[i];
	return n;
}

static uint64_t total_ring_cmds(void)
{
	uint64_t n = 0;

	for (int i = 0; i < MAX_PROCS; i++)
		n += B->ring_cmds[i];
	return n;
}

static uint64_t total_ioctls(void)
{
	uint64_t n = 0;

	for (int i = 0; i < MAX_PROCS; i++)
		n += B->ioctls[i];
	return n;
}

/*
 * After the last round: with the fuzzer's namespaces evicted, the pool is
 * as the run found it (nothing allocated, pinned or published, only the
 * parent's file open).
 */
static bool pool_restored(int fd, const struct beluga_stats *st0)
{
	struct beluga_stats st;
	uint64_t ev, busy, evicted = 0;

	for (int i = 0; i < NR_NS; i++) {
		busy = 0;
		if (rel_evict_ns(fd, ns_of(i), &ev, &busy) == 0)
			evicted += ev;
		if (busy)
			rel_diag("namespace %d: %" PRIu64 " block(s) still pinned", i, busy);
	}
	if (bt_stats(fd, &st)) {
		rel_diag("STATS: %s", strerror(errno));
		return false;
	}
	rel_stats_print("after the rounds, namespaces evicted", &st);
	rel_diag("evicted %" PRIu64 " published block(s) left by the rounds", evicted);
	return st.allocated_blocks == 0 && st.pins == 0 && st.pinned_blocks == 0 &&
	       st.published_blocks == st0->published_blocks && st.clients == st0->clients;
}

/*
 * -P attach: set up the fuzzer's pool and leave it attached, for an outside
 * exerciser (stress-ng, trinity) to find regions to map. -P reset: after
 * it, nothing may be left allocated or pinned, and every region detaches.
 * One TAP result each.
 */
static int pool_cmd(const char *what)
{
	struct beluga_stats st;
	char why[256];
	int fd = bt_open(O_RDWR), r;

	printf("TAP version 13\n");
	if (fd < 0) {
		tap_skip("cannot open the device (is beluga.ko loaded?)", "%s", what);
		return tap_done();
	}
	if (!strcmp(what, "attach")) {
		r = setup_pool(fd, why, sizeof(why));
		if (r == -ENOENT) {
			tap_skip(why, "pool-attach");
		} else {
			if (r)
				rel_diag("%s", why);
			else if (bt_stats(fd, &st) == 0)
				rel_stats_print("attached", &st);
			tap_result(r == 0, "pool-attach");
		}
	} else {
		bool quiet = rel_wait_quiet(fd, 1, 3000, &st);

		rel_stats_print("before the reset", &st);
		if (!quiet)
			rel_diag("allocations or pins were left behind, or files stayed open");
		r = rel_reset_pool_fd(fd, 5000);
		if (bt_stats(fd, &st) == 0)
			rel_stats_print("after the reset", &st);
		tap_result(quiet && !r && !st.total_blocks, "pool-reset");
	}
	close(fd);
	return tap_done();
}

static void usage(void)
{
	fprintf(stderr, "usage: beluga_fuzz [-s SEED] [-r ROUNDS] [-p PROCS] [-i ITERS] "
		"[-T SECS] [-N MIN_IOCTLS] [-R ROUND -W WORKER] [-k] [-v]\n"
		"       beluga_fuzz -P attach|reset\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t seed, iters = 300;
	int rounds = 4, procs = 4, only_round = -1, only_worker = -1, kills = 1;
	double budget = 0, t_rounds = 0;
	uint64_t min_ioctls = 0;
	const char *pool_op = NULL;
	struct utsname uts;
	const char *env = getenv("BELUGA_FUZZ_SEED");
	struct beluga_stats st0, st;
	char why[256];
	void *pmap;
	int fd, opt, r;
	bool round_ok, all_ok = true;
	double t0 = rel_now();

	seed = env && *env ? strtoull(env, NULL, 0) :
	       bt_mix64((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32));
	while ((opt = getopt(argc, argv, "s:r:p:i:T:N:R:W:P:kv")) != -1) {
		switch (opt) {
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 'r': rounds = atoi(optarg); break;
		case 'p': procs = atoi(optarg); break;
		case 'i': iters = strtoull(optarg, NULL, 0); break;
		case 'T': budget = atof(optarg); break;
		case 'N': min_ioctls = strtoull(optarg, NULL, 0); break;
		case 'P': pool_op = optarg; break;
		case 'R': only_round = atoi(optarg); break;
		case 'W': only_worker = atoi(optarg); break;
		case 'k': kills = 0; break;
		case 'v': verbose = 1; break;
		default: usage();
		}
	}
	if (procs < 1 || procs > MAX_PROCS || rounds < 1)
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (pool_op) {
		if (strcmp(pool_op, "attach") && strcmp(pool_op, "reset"))
			usage();
		B = calloc(1, sizeof(*B));
		return B ? pool_cmd(pool_op) : 1;
	}
	signal(SIGBUS, on_bus);
	printf("TAP version 13\n");
	rel_diag("beluga_fuzz seed=0x%016" PRIx64 " rounds=%d procs=%d iters=%" PRIu64
		 " budget=%.0fs (replay: beluga_fuzz -s 0x%" PRIx64 " -r %d -p %d -i %" PRIu64 ")",
		 seed, rounds, procs, iters, budget, seed, rounds, procs, iters);

	/* the parent's own block commands are ioctls; workers choose per operation */
	bt_ring_via.off = true;
	B = mmap(NULL, sizeof(*B), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (B == MAP_FAILED)
		return 1;
	memset(B, 0, sizeof(*B));
	B->seed = seed;
	B->solo = only_worker >= 0;
	if (budget > 0)
		B->deadline = t0 + budget;
	for (int i = 0; i < NR_NS; i++)
		B->ns[i] = bt_mix64(seed + 0x6e73 + i);

	fd = bt_open(O_RDWR);
	if (fd < 0) {
		tap_skip("cannot open the device (is beluga.ko loaded?)", "setup");
		return tap_done();
	}
	r = setup_pool(fd, why, sizeof(why));
	if (r == -ENOENT) {
		tap_skip(why, "setup");
		return tap_done();
	}
	if (r) {
		rel_diag("%s", why);
		tap_result(0, "setup");
		return tap_done();
	}
	/* The parent maps the main regions for the whole run: never detachable. */
	pmap = rel_map(fd, B->main_end, PROT_READ);
	if (!pmap || bt_stats(fd, &st0)) {
		rel_diag("mapping the pool: %s", strerror(errno));
		tap_result(0, "setup");
		return tap_done();
	}
	rel_stats_print("start", &st0);
	tap_result(1, "setup");
	tap_result(model_full(), "model-full");
	if (!rel_wait_quiet(fd, st0.clients, 3000, &st)) {
		rel_stats_print("after model-full", &st);
		tap_result(0, "model-full-released");
	}

	for (int round = 0; round < rounds; round++) {
		pid_t pids[MAX_PROCS] = { 0 };
		int live = 0, status[MAX_PROCS];
		struct rel_rng krng = { bt_mix64(seed ^ 0x6b696c6cULL ^ (uint64_t)round) };
		double next_kill, rstart = rel_now();
		int killed = 0, self_killed = 0;
		char name[64];

		if (only_round >= 0 && round != only_round)
			continue;
		if (B->deadline && rel_now() > B->deadline) {
			rel_diag("time budget of %.0f s used up: rounds %d-%d not run", budget,
				 round, rounds - 1);
			break;
		}
		round_ok = true;
		for (int i = 0; i < procs; i++) {
			if (only_worker >= 0 && i != only_worker)
				continue;
			memset(B->msg[i], 0, MSG_LEN);
			pids[i] = worker_spawn(round, i, iters);
			live++;
		}
		next_kill = rel_now() + 0.05 + rel_below(&krng, 400) / 1000.0;
		while (live) {
			int ws;
			pid_t p = waitpid(-1, &ws, WNOHANG);

			if (p > 0) {
				for (int i = 0; i < procs; i++)
					if (pids[i] == p) {
						status[i] = ws;
						pids[i] = -pids[i];
						live--;
					}
				continue;
			}
			if (bt_stats(fd, &st) || !rel_stats_sane(&st, why, sizeof(why))) {
				rel_diag("round %d: STATS invariant broken while running: %s",
					 round, why);
				round_ok = false;
			}
			/* at most one parent kill per round: most workers finish */
			if (kills && !killed && only_worker < 0 && rel_now() > next_kill &&
			    live > 1) {
				int victim = (int)rel_below(&krng, procs);

				if (pids[victim] > 0) {
					kill(pids[victim], SIGKILL);
					killed++;
				}
				next_kill = rel_now() + 0.1 + rel_below(&krng, 800) / 1000.0;
			}
			rel_msleep(5);
		}
		for (int i = 0; i < procs; i++) {
			int s = status[i];

			if (!pids[i])
				continue;
			if (WIFEXITED(s) && WEXITSTATUS(s) == 0)
				continue;
			if (WIFSIGNALED(s) && WTERMSIG(s) == SIGKILL) {
				self_killed++;
				continue;
			}
			round_ok = false;
			if (B->msg[i][0])
				rel_diag("%s", B->msg[i]);
			else
				rel_diag("round %d worker %d died: %s", round, i,
					 WIFSIGNALED(s) ? strsignal(WTERMSIG(s)) : "exit status");
			rel_diag("replay this worker alone: beluga_fuzz -s 0x%" PRIx64
				 " -i %" PRIu64 " -p %d -R %d -W %d -k -v", seed, iters,
				 procs, round, i);
		}
		/* every worker is gone: nothing may be left allocated or pinned */
		if (!rel_wait_quiet(fd, st0.clients, 3000, &st)) {
			rel_stats_print("after round", &st);
			rel_diag("round %d: allocations, pins or files leaked after every "
				 "worker exited", round);
			round_ok = false;
		}
		if (!rel_stats_sane(&st, why, sizeof(why))) {
			rel_diag("round %d: %s", round, why);
			round_ok = false;
		}
		{
			int sw = 0;

			for (int i = 1; i < procs; i++)
				if (B->slow_s[i] > B->slow_s[sw])
					sw = i;
			rel_diag("round %d: slowest operation %.2f s (%s, worker %d)", round,
				 B->slow_s[sw], B->slow_op[sw], sw);
			for (int i = 0; i < MAX_PROCS; i++)
				B->slow_s[i] = 0;
		}
		snprintf(name, sizeof(name), "round-%d", round);
		t_rounds += rel_now() - rstart;
		rel_diag("round %d: %.1f s, %d SIGKILLed (%d by the parent), ops so far "
			 "%" PRIu64 ", ioctls so far %" PRIu64 ", pinned blocks verified %"
			 PRIu64 ", published %" PRIu64 ", evictions %" PRIu64, round,
			 rel_now() - rstart, self_killed, killed, total_ops(), total_ioctls(),
			 B->verified, B->pubs, st.evictions);
		tap_result(round_ok, "%s", name);
		if (!round_ok)
			all_ok = false;
	}

	if (B->abi_violations) {
		rel_diag("%" PRIu64 " call(s) failed with -EFAULT after changing state "
			 "(ALLOC with a read-only struct; see the worker's message above)",
			 B->abi_violations);
		tap_result(0, "failed-call-no-effect");
	} else {
		tap_result(1, "failed-call-no-effect");
	}

	if (uname(&uts))
		snprintf(uts.release, sizeof(uts.release), "?");
	rel_diag("ioctl rate: %" PRIu64 " ioctls by %d process(es) in %.1f s of rounds: "
		 "%.0f ioctls/s (%" PRIu64 " operations, %.0f/s; kernel %s)", total_ioctls(),
		 only_worker >= 0 ? 1 : procs, t_rounds, t_rounds > 0 ? total_ioctls() / t_rounds : 0.0,
		 total_ops(), t_rounds > 0 ? total_ops() / t_rounds : 0.0, uts.release);
	rel_diag("of them through io_uring: %" PRIu64 " commands", total_ring_cmds());
	if (min_ioctls) {
		rel_diag("ioctls made %" PRIu64 ", wanted at least %" PRIu64, total_ioctls(),
			 min_ioctls);
		tap_result(total_ioctls() >= min_ioctls, "ioctl-volume");
	}
	tap_result(pool_restored(fd, &st0), "pool-restored");

	/* the end: drop everything; every region must detach */
	munmap(pmap, B->main_end);
	r = rel_reset_pool_fd(fd, 5000);
	if (bt_stats(fd, &st) == 0)
		rel_stats_print("end", &st);
	if (r || st.total_blocks || st.allocated_blocks || st.pins) {
		rel_diag("the pool did not return to empty: every region should detach "
			 "once nothing is mapped, allocated or pinned");
		tap_result(0, "final-state");
	} else {
		tap_result(1, "final-state");
	}
	close(fd);
	rel_diag("%.1f s, %" PRIu64 " hostile calls, seed 0x%" PRIx64 "%s", rel_now() - t0,
		 B->hostile, seed, all_ok ? "" : " (FAILED: replay with the seed above)");
	return tap_done();
}
