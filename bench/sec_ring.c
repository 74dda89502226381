// SPDX-License-Identifier: GPL-2.0
/*
 * Section "ring": a 64-key chain (all hits), count-only LOOKUP and pinned
 * LOOKUP + RELEASE per request, through every path that issue 23 sets
 * against the paper's spin-polled server, in one run:
 *
 *   kernel-ioctl          one system call per command (the raw ioctls)
 *   kernel-ring-B         IORING_OP_URING_CMD, B commands per io_uring_enter
 *                         (B = 1, 8, 64): raw SQEs carrying a struct
 *                         beluga_uring_cmd (liburing, no libbeluga, as the
 *                         kernel backend's raw ioctls); pinned: B LOOKUPs in
 *                         one submission, their B RELEASEs in the next (the
 *                         commands of one submission are unordered)
 *   kernel-ring-sqpoll-64 the same at 64 with IORING_SETUP_SQPOLL: the
 *                         kernel's polling thread on a CPU of its own (the
 *                         polled server's), the client spins on the
 *                         completion queue, no system call at all
 *   userspace-reader      count-only LOOKUP with no system call, on a copy
 *                         of the index (issue 23 part 2): in the guest the
 *                         module's, mapped read-only (BELUGA_IOC_INDEX_MAP);
 *                         natively the core's, in this process
 *   model-ring-B          no module needed: the in-process core driven in
 *                         the same shape (B requests, then their B RELEASEs)
 *                         plus each io_uring_enter charged at the floor, an
 *                         ioctl that /dev/null refuses: core + floor / B
 *                         (pinned: 2 floors / B). A model: it leaves out
 *                         io_uring's own per-command work, which the guest
 *                         rows measure (ring over model)
 *   model-ring-nop-64     the core at 64 plus io_uring's own cost per command,
 *                         measured with IORING_OP_NOP, 64 per io_uring_enter
 *                         (io_uring-nop-64; no module needed): what the
 *                         floor model leaves out, but for the module's own
 *                         command dispatch and copies
 *   rpc-shm-polled        the paper's design (shmrpc.c), the baseline
 *   core                  the in-process core: the limit
 *
 * The targets run in rotation, --rounds times with fresh pools; each
 * figure is the median over rounds with min and max, and every ratio
 * (the polled server over each path, each path over the core) is taken
 * round by round. Goals (reported, never asserted): pinned LOOKUP +
 * RELEASE through the ring at 64 per submission ahead of the polled server,
 * measured where the module is, and as the model where it is not.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <liburing.h>

#include "bench.h"
#include "target.h"
#include "bel_index_copy.h"

#define CHAIN 64
#define CHAIN_NS 1
#define CHAIN_TAG 0x5121ULL
#define MAX_BATCH 64
#define MAX_ROUNDS 16
/* twice the largest batch: with SQPOLL the kernel may move the queue's
 * head only after the batch's completions are posted (6.1) */
#define RING_ENTRIES 128

/* The rows of the table, in print order. */
enum row {
	R_IOCTL,
	R_RING1,
	R_RING8,
	R_RING64,
	R_SQPOLL64,
	R_UREADER,
	R_MODEL1,
	R_MODEL8,
	R_MODEL64,
	R_MODEL_NOP64,	/* core(64) + the ring's own cost, measured with NOPs */
	R_SHM,
	R_CORE,
	R_CORE8,	/* the core in ring shape: the models' measured part */
	R_CORE64,
	R_NULL,		/* ioctl(/dev/null): the floor of a system call */
	R_NOP64,	/* IORING_OP_NOP, 64 per io_uring_enter: io_uring alone */
	NR_ROWS
};

static const struct {
	const char *backend;	/* the records' name */
	const char *label;	/* the table's */
	u32 batch;		/* requests per submission */
} rows[NR_ROWS] = {
	[R_IOCTL] = { "kernel-ioctl", "ioctl, 1 syscall per command", 1 },
	[R_RING1] = { "kernel-ring-1", "ring, 1 per io_uring_enter", 1 },
	[R_RING8] = { "kernel-ring-8", "ring, 8 per io_uring_enter", 8 },
	[R_RING64] = { "kernel-ring-64", "ring, 64 per io_uring_enter", 64 },
	[R_SQPOLL64] = { "kernel-ring-sqpoll-64", "ring, SQPOLL, 64 per batch", 64 },
	[R_UREADER] = { "userspace-reader", "userspace reader (no syscall)", 1 },
	[R_MODEL1] = { "model-ring-1", "model: core + floor/1", 1 },
	[R_MODEL8] = { "model-ring-8", "model: core(8) + floor/8", 8 },
	[R_MODEL64] = { "model-ring-64", "model: core(64) + floor/64", 64 },
	[R_MODEL_NOP64] = { "model-ring-nop-64", "model: core(64) + NOP ring(64)", 64 },
	[R_SHM] = { "rpc-shm-polled", "rpc-shm-polled (the paper)", 1 },
	[R_CORE] = { "core", "core in-process (the limit)", 1 },
	[R_CORE8] = { "core-batch-8", "core, 8 then their RELEASEs", 8 },
	[R_CORE64] = { "core-batch-64", "core, 64 then their RELEASEs", 64 },
	[R_NULL] = { "sys", "ioctl(/dev/null): the floor", 1 },
	[R_NOP64] = { "io_uring-nop-64", "io_uring NOP, 64 per enter", 64 },
};

/* The two request shapes: count-only LOOKUP, pinned LOOKUP + RELEASE. */
enum shape { S_COUNT, S_PAIR, NR_SHAPES };
static const char *shape_op[NR_SHAPES] = { "lookup", "lookup_release" };
static const char *shape_ratio[NR_SHAPES] = { "lookup_count",
					      "lookup_pin_release" };

struct rctx {
	struct bk *b;		/* ioctl, core or shm client */
	u32 batch;
	int devnull;
	struct beluga_key keys[CHAIN];
	/* one command's structs per request in flight, valid until reaped */
	struct beluga_lookup lk[MAX_BATCH];
	struct beluga_blocks rel[MAX_BATCH];
	u64 offs[MAX_BATCH][CHAIN];
	/* the ring (kernel-ring-*) */
	struct io_uring ring;
	bool sqpoll;
	/* the userspace reader: a mapped (kernel) or in-process (core) copy */
	const struct beluga_index_header *index;
	u64 unsure;		/* lookups the copy passed on to the pool */
};

struct round {
	bool done[NR_ROWS];
	struct fig f[NR_ROWS][NR_SHAPES];
};

/* ---- the measured operations -------------------------------------------- */

static int op_null(void *a)
{
	struct rctx *c = a;

	return ioctl(c->devnull, _IO(BELUGA_TYPE, 0x7f), NULL) == -1 &&
	       errno == ENOTTY ? 0 : -EPROTO;
}

/* c->batch requests through a backend, one call each (ioctl, core, shm). */
static int op_bk_count(void *a)
{
	struct rctx *c = a;
	u32 i, hits;
	int ret;

	for (i = 0; i < c->batch; i++) {
		ret = c->b->lookup(c->b, CHAIN_NS, CHAIN, c->keys, false, NULL,
				   &hits);
		if (ret || hits != CHAIN)
			return ret ? ret : -ENOENT;
	}
	return 0;
}

/* c->batch pinned LOOKUPs, then their c->batch RELEASEs: the ring's shape. */
static int op_bk_pair(void *a)
{
	struct rctx *c = a;
	u32 i, hits;
	int ret;

	for (i = 0; i < c->batch; i++) {
		ret = c->b->lookup(c->b, CHAIN_NS, CHAIN, c->keys, true,
				   c->offs[i], &hits);
		if (ret || hits != CHAIN)
			return ret ? ret : -ENOENT;
	}
	for (i = 0; i < c->batch; i++) {
		ret = c->b->release(c->b, CHAIN, c->offs[i]);
		if (ret)
			return ret;
	}
	return 0;
}

/* An SQE for the command @cmd_op on @arg (the registered file, index 0). */
static int ring_prep(struct rctx *c, unsigned long cmd_op, void *arg)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&c->ring);

	while (!sqe && c->sqpoll) {
		/* the SQPOLL thread has not moved the queue's head yet */
		int ret = io_uring_sqring_wait(&c->ring);

		if (ret < 0)
			return ret;
		sqe = io_uring_get_sqe(&c->ring);
	}
	if (!sqe)
		return -EBUSY;
	io_uring_prep_rw(IORING_OP_URING_CMD, sqe, 0, NULL, 0, 0);
	sqe->flags |= IOSQE_FIXED_FILE;
	sqe->cmd_op = (u32)cmd_op;
	/* struct beluga_uring_cmd: the ioctl's argument, 0 in __reserved */
	memset(sqe->cmd, 0, sizeof(struct beluga_uring_cmd));
	((struct beluga_uring_cmd *)sqe->cmd)->arg = (u64)(uintptr_t)arg;
	return 0;
}

/*
 * Submit what is prepared and reap @n completions: one io_uring_enter
 * that submits and waits, or with SQPOLL none (the client spins on the
 * completion queue, as the polled server's clients spin on their slot).
 * The first failed command's result, else 0.
 */
static int ring_go(struct rctx *c, u32 n)
{
	struct io_uring_cqe *cqe;
	unsigned int head, seen;
	u32 got = 0;
	int ret, err = 0;

	ret = c->sqpoll ? io_uring_submit(&c->ring) :
			  io_uring_submit_and_wait(&c->ring, n);
	if (ret < 0)
		return ret;
	/* with SQPOLL it counts what the thread has not taken yet: no check */
	if (!c->sqpoll && (u32)ret != n)
		return -EIO;
	while (got < n) {
		seen = 0;
		io_uring_for_each_cqe(&c->ring, head, cqe) {
			if (cqe->res < 0 && !err)
				err = cqe->res;
			seen++;
		}
		io_uring_cq_advance(&c->ring, seen);
		got += seen;
		if (got >= n)
			break;
		if (c->sqpoll) {
			cpu_relax();
		} else {
			/* cannot happen after submit_and_wait(n) but for a signal */
			ret = io_uring_wait_cqe(&c->ring, &cqe);
			if (ret < 0 && ret != -EINTR)
				return ret;
		}
	}
	return err;
}

/* c->batch LOOKUPs of the chain in one submission, every one a full hit. */
static int ring_lookups(struct rctx *c, bool pin)
{
	u32 i;
	int ret;

	for (i = 0; i < c->batch; i++) {
		c->lk[i].flags = pin ? BELUGA_LOOKUP_PIN : 0;
		c->lk[i].offsets = pin ? (u64)(uintptr_t)c->offs[i] : 0;
		c->lk[i].hits = 0;
		ret = ring_prep(c, BELUGA_IOC_LOOKUP, &c->lk[i]);
		if (ret)
			return ret;
	}
	ret = ring_go(c, c->batch);
	for (i = 0; !ret && i < c->batch; i++)
		if (c->lk[i].hits != CHAIN)
			ret = -ENOENT;
	return ret;
}

static int op_ring_count(void *a)
{
	return ring_lookups(a, false);
}

/* The pinned LOOKUPs in one submission, their RELEASEs in the next. */
static int op_ring_pair(void *a)
{
	struct rctx *c = a;
	u32 i;
	int ret = ring_lookups(c, true);

	if (ret)
		return ret;
	for (i = 0; i < c->batch; i++) {
		ret = ring_prep(c, BELUGA_IOC_RELEASE, &c->rel[i]);
		if (ret)
			return ret;
	}
	return ring_go(c, c->batch);
}

/*
 * c->batch IORING_OP_NOPs in one io_uring_enter: what io_uring itself costs
 * per command (the entry, an SQE, a CQE) with no module behind it, so
 * that the host, which has no module, can still charge it.
 */
static int op_ring_nop(void *a)
{
	struct rctx *c = a;
	u32 i;

	for (i = 0; i < c->batch; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&c->ring);

		if (!sqe)
			return -EBUSY;
		io_uring_prep_nop(sqe);
	}
	return ring_go(c, c->batch);
}

/* A figure per request: @fn does c->batch of them per call. */
static struct fig measure_per_request(op_fn fn, struct rctx *c,
				      const char *what)
{
	struct fig f = measure(fn, c, what);
	double b = c->batch;

	f.ns /= b;
	f.min /= b;
	f.p10 /= b;
	f.p90 /= b;
	f.run_min = f.run_max = f.ns;
	return f;
}

static void measure_row(struct round *rd, enum row r, struct rctx *c,
			op_fn count, op_fn pair)
{
	char what[96];

	c->batch = rows[r].batch;
	snprintf(what, sizeof(what), "%s count-only LOOKUP %d", rows[r].backend,
		 CHAIN);
	rd->f[r][S_COUNT] = measure_per_request(count, c, what);
	snprintf(what, sizeof(what), "%s pinned LOOKUP+RELEASE %d",
		 rows[r].backend, CHAIN);
	rd->f[r][S_PAIR] = measure_per_request(pair, c, what);
	rd->done[r] = true;
}

/* ---- the ring's set-up ---------------------------------------------------- */

/*
 * A ring on the kernel client's file, registered (as libbeluga does).
 * With SQPOLL its thread goes to the polled server's CPU, so that both
 * polling designs get one CPU of their own, and it stays awake between
 * samples (idle time 2 s). 0, or -errno with the reason noted.
 */
static int ring_open(struct rctx *c, bool sqpoll)
{
	struct io_uring_params p;
	int ret;

	memset(&p, 0, sizeof(p));
	if (sqpoll) {
		p.flags = IORING_SETUP_SQPOLL | IORING_SETUP_SQ_AFF;
		p.sq_thread_cpu = (u32)shm_server_cpu();
		p.sq_thread_idle = 2000;
	}
	ret = io_uring_queue_init_params(RING_ENTRIES, &c->ring, &p);
	if (ret == -EINVAL && sqpoll) {
		/* that CPU is not ours: let the kernel place the thread */
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_SQPOLL;
		p.sq_thread_idle = 2000;
		ret = io_uring_queue_init_params(RING_ENTRIES, &c->ring, &p);
	}
	if (ret) {
		note("ring: io_uring_queue_init%s: %s (io_uring disabled by "
		     "sysctl kernel.io_uring_disabled or seccomp?): ring rows skipped",
		     sqpoll ? " with SQPOLL" : "", strerror(-ret));
		return ret;
	}
	c->sqpoll = sqpoll;
	ret = io_uring_register_files(&c->ring, &c->b->fd, 1);
	if (ret) {
		note("ring: io_uring_register_files: %s: ring rows skipped",
		     strerror(-ret));
		io_uring_queue_exit(&c->ring);
		return ret;
	}
	/* one command first: a module without ring commands says so here */
	c->batch = 1;
	ret = op_ring_count(c);
	if (ret) {
		note("ring: a LOOKUP through io_uring failed: %s%s: ring rows skipped",
		     strerror(-ret), ret == -EOPNOTSUPP ?
		     " (the loaded beluga module has no io_uring commands: load this tree's)" :
		     ret == -EINVAL ? " (this kernel's io_uring has no IORING_OP_URING_CMD: 5.19 or later)" : "");
		io_uring_queue_exit(&c->ring);
	}
	return ret;
}

/* ---- the userspace reader (issue 23 part 2) ------------------------------- */

/*
 * A count-only LOOKUP in the caller's own address space, on a copy of the
 * index (bel_index_copy_lookup(), the reader libbeluga's
 * beluga_lookup_count() compiles): the module's copy mapped read-only in
 * the guest, the core's copy in this process natively. What the copy
 * cannot be sure of goes to the pool from that key on, as in libbeluga;
 * such lookups are counted and reported. Pinned LOOKUP + RELEASE always
 * needs the pool: that cell stays empty.
 */
static int op_ureader_count(void *a)
{
	struct rctx *c = a;
	u32 hits = 0, more = 0;
	int ret = bel_index_copy_lookup(c->index, CHAIN_NS, CHAIN, c->keys,
					&hits);

	if (ret == BEL_COPY_UNSURE) {
		c->unsure++;
		ret = c->b->lookup(c->b, CHAIN_NS, CHAIN - hits, c->keys + hits,
				   false, NULL, &more);
		hits += more;
	}
	return ret ? ret : hits == CHAIN ? 0 : -ENOENT;
}

static void measure_ureader(struct round *rd, struct rctx *c)
{
	c->batch = 1;
	c->unsure = 0;
	rd->f[R_UREADER][S_COUNT] = measure_per_request(op_ureader_count, c,
							"userspace reader LOOKUP");
	rd->f[R_UREADER][S_PAIR] = (struct fig){ .ns = NAN };
	rd->done[R_UREADER] = true;
	if (c->unsure)
		note("userspace reader: %llu lookups went to the pool (copy unsure)",
		     (unsigned long long)c->unsure);
}

/* The module's copy: BELUGA_IOC_INDEX_MAP and a read-only mmap(). */
static void ureader_kernel(struct round *rd, struct rctx *c)
{
	struct beluga_index_map req = { .size = sizeof(req) };
	void *p;

	if (ioctl(c->b->fd, BELUGA_IOC_INDEX_MAP, &req)) {
		note("userspace reader: BELUGA_IOC_INDEX_MAP: %s: row not measured%s",
		     strerror(errno), errno == ENOTTY ?
		     " (the loaded beluga module predates the mapped index: load this tree's)" : "");
		return;
	}
	p = mmap(NULL, req.length, PROT_READ, MAP_SHARED, c->b->fd,
		 (off_t)req.offset);
	if (p == MAP_FAILED) {
		note("userspace reader: mmap of the index: %s: row not measured",
		     strerror(errno));
		return;
	}
	if (bel_index_copy_usable(p, req.length)) {
		c->index = p;
		measure_ureader(rd, c);
	} else {
		note("userspace reader: the mapped index has a layout this belbench does not read");
	}
	c->index = NULL;
	munmap(p, req.length);
}

/* The core's copy, made in this process's memory. */
static void ureader_core(struct round *rd, struct rctx *c, struct bel_pool *pool)
{
	struct bel_index_copy copy;
	u64 size = bel_index_copy_size(pool);
	void *mem = aligned_alloc(4096, (size + 4095) & ~4095ULL);
	int ret;

	if (!mem)
		die("userspace reader: %llu bytes for the index's copy",
		    (unsigned long long)size);
	memset(mem, 0, size);
	ret = bel_index_copy_start(pool, &copy, mem, size);
	if (ret)
		die("userspace reader: bel_index_copy_start: %s", strerror(-ret));
	c->index = copy.hdr;
	measure_ureader(rd, c);
	c->index = NULL;
	bel_index_copy_seal(pool);
	free(mem);
}

/* ---- one round -------------------------------------------------------------- */

static void setup_chain(struct rctx *c)
{
	u32 i;

	for (i = 0; i < CHAIN; i++)
		c->keys[i] = mkkey(CHAIN_TAG, i);
	target_fill(c->b, CHAIN_NS, CHAIN_TAG, 0, CHAIN, -1, NULL);
	for (i = 0; i < MAX_BATCH; i++) {
		c->lk[i] = (struct beluga_lookup){
			.size = sizeof(c->lk[i]),
			.ns = CHAIN_NS,
			.count = CHAIN,
			.keys = (u64)(uintptr_t)c->keys,
		};
		c->rel[i] = (struct beluga_blocks){
			.size = sizeof(c->rel[i]),
			.count = CHAIN,
			.offsets = (u64)(uintptr_t)c->offs[i],
		};
	}
}

static bool ring_broken;	/* noted once: no more tries */

static void round_kernel(struct round *rd, struct rctx *c, const char *spec,
			 u64 nblocks, u64 bs)
{
	static const enum row ring_rows[] = { R_RING1, R_RING8, R_RING64 };
	struct target t;
	size_t i;

	if (target_setup(&t, T_KERNEL, spec, nblocks, bs, NULL))
		return;
	c->b = target_open(&t, false);
	setup_chain(c);
	measure_row(rd, R_IOCTL, c, op_bk_count, op_bk_pair);
	if (!ring_broken && !ring_open(c, false)) {
		for (i = 0; i < ARRAY_SIZE(ring_rows); i++)
			measure_row(rd, ring_rows[i], c, op_ring_count,
				    op_ring_pair);
		io_uring_queue_exit(&c->ring);
		if (!ring_open(c, true)) {
			measure_row(rd, R_SQPOLL64, c, op_ring_count,
				    op_ring_pair);
			io_uring_queue_exit(&c->ring);
		}
	}
	ring_broken = !rd->done[R_RING64];
	ureader_kernel(rd, c);
	c->b->close(c->b);
	target_teardown(&t);
}

static void round_userspace(struct round *rd, struct rctx *c,
			    enum target_kind kind, u64 nblocks, u64 bs)
{
	struct target t;

	target_setup(&t, kind, "none", nblocks, bs, NULL);
	c->b = target_open(&t, false);
	setup_chain(c);
	if (kind == T_SHM) {
		measure_row(rd, R_SHM, c, op_bk_count, op_bk_pair);
	} else {
		measure_row(rd, R_CORE, c, op_bk_count, op_bk_pair);
		measure_row(rd, R_CORE8, c, op_bk_count, op_bk_pair);
		measure_row(rd, R_CORE64, c, op_bk_count, op_bk_pair);
		/* natively; in the guest the module's mapped copy is the row */
		if (!kernel_available())
			ureader_core(rd, c, t.pool);
	}
	c->b->close(c->b);
	target_teardown(&t);
}

/* io_uring's own cost per command (no module needed); once noted if none */
static void round_nop(struct round *rd, struct rctx *c)
{
	static bool noted;
	struct fig nan = { .ns = NAN };
	int ret = io_uring_queue_init(RING_ENTRIES, &c->ring, 0);

	if (ret) {
		if (!noted)
			note("ring: io_uring_queue_init: %s: no NOP row and no NOP model",
			     strerror(-ret));
		noted = true;
		return;
	}
	c->sqpoll = false;
	c->batch = rows[R_NOP64].batch;
	rd->f[R_NOP64][S_COUNT] = measure_per_request(op_ring_nop, c,
						      "io_uring NOP");
	rd->f[R_NOP64][S_PAIR] = nan;
	rd->done[R_NOP64] = true;
	io_uring_queue_exit(&c->ring);
}

/*
 * The models of a round: the core in ring shape plus the round's floor per
 * submission (a count-only batch makes one, a pinned one two); and the core
 * at 64 plus the NOP ring's measured cost per command (one command per
 * count-only request, two per pinned pair).
 */
static void round_models(struct round *rd)
{
	static const enum row model[] = { R_MODEL1, R_MODEL8, R_MODEL64 };
	static const enum row core[] = { R_CORE, R_CORE8, R_CORE64 };
	double floor_ns = rd->f[R_NULL][S_COUNT].ns;
	size_t i;
	int s;

	for (i = 0; i < ARRAY_SIZE(model); i++) {
		for (s = 0; s < NR_SHAPES; s++) {
			struct fig *f = &rd->f[model[i]][s];

			*f = rd->f[core[i]][s];
			f->ns += (s == S_PAIR ? 2 : 1) * floor_ns /
				 rows[model[i]].batch;
			f->min = f->p10 = f->p90 = f->run_min = f->run_max = f->ns;
		}
		rd->done[model[i]] = true;
	}
	if (!rd->done[R_NOP64])
		return;
	for (s = 0; s < NR_SHAPES; s++) {
		struct fig *f = &rd->f[R_MODEL_NOP64][s];

		*f = rd->f[R_CORE64][s];
		f->ns += (s == S_PAIR ? 2 : 1) * rd->f[R_NOP64][S_COUNT].ns;
		f->min = f->p10 = f->p90 = f->run_min = f->run_max = f->ns;
	}
	rd->done[R_MODEL_NOP64] = true;
}

/* ---- output ----------------------------------------------------------------- */

static double ratio(double a, double b)
{
	return b > 0 && a == a ? a / b : NAN;
}

/*
 * Per round, @num over @den for each shape; median, min and max of the
 * rounds. @target and @goal apply to the shape @goal_shape only.
 */
static void rec_row_ratio(const char *name, enum row num, enum row den,
			  enum row backend, struct round *rd, int nr,
			  enum shape goal_shape, const char *target, double goal)
{
	int s, r;

	for (s = 0; s < NR_SHAPES; s++) {
		double v[MAX_ROUNDS];

		for (r = 0; r < nr; r++)
			v[r] = ratio(rd[r].f[num][s].ns, rd[r].f[den][s].ns);
		if (v[0] != v[0])
			continue;	/* no such figure (the reader's pair) */
		rec_begin("ratio");
		rec_str("name", name);
		rec_str("backend", rows[backend].backend);
		rec_str("op", shape_ratio[s]);
		rec_int("n", CHAIN);
		rec_runs_verdict(v, nr, s == (int)goal_shape ? target : "", goal);
		rec_end();
	}
}

static void print_cell(const struct fig *f, bool done)
{
	char buf[64];

	if (!done || f->ns != f->ns)
		snprintf(buf, sizeof(buf), "-");
	else
		snprintf(buf, sizeof(buf), "%.0f [%.0f..%.0f]", f->ns,
			 f->run_min, f->run_max);
	printf(" %22s", buf);
}

/* The median over rounds of a per-round ratio (for the table only). */
static double round_ratio(struct round *rd, int nr, enum row num,
			  enum row den, int s)
{
	double v[MAX_ROUNDS];
	int r;

	for (r = 0; r < nr; r++)
		v[r] = ratio(rd[r].f[num][s].ns, rd[r].f[den][s].ns);
	return v[0] == v[0] ? median(v, nr) : NAN;
}

int sec_ring(int argc, char **argv)
{
	const char *spec = "none";
	u64 bs = 4096, nblocks = 65536;
	int nr = opt.quick ? 1 : 5, i, r, s;
	struct round *rd;
	struct fig comb[NR_ROWS][NR_SHAPES];
	bool done[NR_ROWS] = { false };
	struct rctx *c;
	bool kern;

	for (i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--pool"))
			spec = argv[i + 1];
		else if (!strcmp(argv[i], "--blocks"))
			nblocks = parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			nr = atoi(argv[i + 1]);
		else
			die("ring: unknown option %s (--pool SPEC|none, --blocks N, --rounds N)",
			    argv[i]);
	}
	if (i < argc)
		die("ring: option %s needs a value", argv[i]);
	if (nr < 1 || nr > MAX_ROUNDS)
		die("ring: --rounds must be 1..%d", MAX_ROUNDS);
	if (!strncmp(spec, "dax:", 4)) {
		u64 sz = dax_spec_size(spec);

		if (sz && sz / bs < nblocks)
			nblocks = sz / bs;
	}
	kern = strcmp(spec, "none") && kernel_available();
	out_open("ring");
	bench_pin_cpu();
	note("ring: %d-key chain, %llu blocks of %llu bytes, %d rounds of %d samples of ~%.0f ms%s",
	     CHAIN, (unsigned long long)nblocks, (unsigned long long)bs, nr,
	     opt.samples, opt.sample_ms,
	     kern ? "" : "; no /dev/beluga or --pool none: kernel rows skipped");

	c = xcalloc(1, sizeof(*c));
	c->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (c->devnull < 0)
		die("open /dev/null: %s", strerror(errno));
	rd = xcalloc(nr, sizeof(*rd));
	for (r = 0; r < nr; r++) {
		c->batch = 1;
		rd[r].f[R_NULL][S_COUNT] = measure(op_null, c, "ioctl(/dev/null)");
		rd[r].f[R_NULL][S_PAIR] = (struct fig){ .ns = NAN };
		rd[r].done[R_NULL] = true;
		if (kern)
			round_kernel(&rd[r], c, spec, nblocks, bs);
		round_userspace(&rd[r], c, T_CORE, nblocks, bs);
		round_userspace(&rd[r], c, T_SHM, nblocks, bs);
		round_nop(&rd[r], c);
		round_models(&rd[r]);
	}
	close(c->devnull);

	/* a row counts when every round has it, so ratios pair up */
	for (i = 0; i < NR_ROWS; i++) {
		done[i] = true;
		for (r = 0; r < nr; r++)
			done[i] = done[i] && rd[r].done[i];
		if (!done[i])
			continue;
		for (s = 0; s < NR_SHAPES; s++) {
			struct fig *f[MAX_ROUNDS];

			for (r = 0; r < nr; r++)
				f[r] = &rd[r].f[i][s];
			comb[i][s] = fig_over_runs(f, nr);
			if (comb[i][s].ns == comb[i][s].ns)
				rec_fig(rows[i].backend, shape_op[s], s == S_PAIR,
					i == R_NULL || i == R_NOP64 ? 0 : CHAIN,
					&comb[i][s]);
		}
	}
	if (!done[R_UREADER]) {
		rec_begin("missing");
		rec_str("backend", rows[R_UREADER].backend);
		rec_str("why", "the index could not be mapped (the run's notes say why)");
		rec_end();
	}

	/* ratios, round by round: the polled server over each path, each path over the core */
	for (i = 0; i < NR_ROWS; i++) {
		const char *target = "";

		/* the core in ring shape is the models' input, not a path */
		if (!done[i] || i == R_SHM || i == R_CORE8 || i == R_CORE64 ||
		    i == R_NULL || i == R_NOP64)
			continue;
		if (i == R_CORE) {	/* the limit: how far the polled server is */
			rec_row_ratio("polled_over_this", R_SHM, i, i, rd, nr,
				      S_PAIR, "", 0);
			continue;
		}
		if (i == R_UREADER) {
			/* the goals for the reader: count-only (it
			 * cannot pin), within 1.5x of the core, ahead of the
			 * polled server */
			rec_row_ratio("polled_over_this", R_SHM, i, i, rd, nr,
				      S_COUNT, ">=", 1);
			rec_row_ratio("this_over_core", i, R_CORE, i, rd, nr,
				      S_COUNT, "<=", 1.5);
			continue;
		}
		/* the goal: the ring at 64 ahead of the polled server, measured
		 * where the module is, modelled where it is not */
		if (i == R_RING64 || (i == R_MODEL64 && !done[R_RING64]))
			target = ">=";
		rec_row_ratio("polled_over_this", R_SHM, i, i, rd, nr, S_PAIR,
			      target, 1);
		rec_row_ratio("this_over_core", i, R_CORE, i, rd, nr, S_PAIR,
			      "", 0);
	}
	/* where both exist (the guest): how far each model is from its ring */
	for (i = 0; i < 3; i++)
		if (done[R_RING1 + i])
			rec_row_ratio("ring_over_model", R_RING1 + i,
				      R_MODEL1 + i, R_RING1 + i, rd, nr, S_PAIR,
				      "", 0);
	if (done[R_RING64] && done[R_MODEL_NOP64])
		rec_row_ratio("ring_over_nop_model", R_RING64, R_MODEL_NOP64,
			      R_RING64, rd, nr, S_PAIR, "", 0);

	printf("\n== ring (%s): 64-key chain, ns per request, median [min..max] of %d rounds (%s) ==\n",
	       opt.env, nr, strcmp(opt.env, "host") ? "TCG guest: compare ratios only" : "host CPU");
	printf("%-31s %22s %22s  %12s %12s\n", "path", "count-only LOOKUP",
	       "pinned LOOKUP+RELEASE", "polled/this", "this/core");
	for (i = 0; i < NR_ROWS; i++) {
		if (i == R_UREADER && !done[i]) {
			printf("%-31s %s\n", rows[i].label,
			       "not measured (the index could not be mapped: see the notes above)");
			continue;
		}
		if (!done[i])
			continue;
		printf("%-31s", rows[i].label);
		for (s = 0; s < NR_SHAPES; s++)
			print_cell(&comb[i][s], true);
		if (i != R_NULL && i != R_NOP64)
			printf("  %5.2f %5.2f  %5.2f %5.2f",
			       round_ratio(rd, nr, R_SHM, i, S_COUNT),
			       round_ratio(rd, nr, R_SHM, i, S_PAIR),
			       round_ratio(rd, nr, i, R_CORE, S_COUNT),
			       round_ratio(rd, nr, i, R_CORE, S_PAIR));
		printf("\n");
	}
	printf("polled/this above 1: this path is ahead of the polled server; the models (no module\n"
	       "needed) are the core in ring shape plus ioctl(/dev/null) per submission, or plus the NOP\n"
	       "ring's cost per command (two per pinned pair): estimates, not measurements.\n"
	       "SQPOLL and the polled server each get CPU %d to themselves.\n", shm_server_cpu());
	free(rd);
	free(c);
	out_close();
	return 0;
}
