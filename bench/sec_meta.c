// SPDX-License-Identifier: GPL-2.0
/*
 * Section "meta": the metadata path, per operation.
 *
 *   LOOKUP of 1, 16, 64, 256 and 4096-key chains (all hits), count-only and
 *   pinned; RELEASE of the pins of one pinned LOOKUP; ALLOC+PUBLISH of 64
 *   blocks on a full pool (so each call also evicts 64 LRU blocks).
 *
 * Baselines in the same run: the syscall floor (an ioctl the module refuses
 * at once with -ENOTTY; BELUGA_IOC_INFO, which takes the pool lock, is shown
 * too; and an ioctl that /dev/null refuses with -ENOTTY, the same system
 * call path without the module: the floor where there is no module), the
 * in-process
 * core (the algorithm alone) and the AF_UNIX server (the RPC design), all
 * with a pool of the same geometry. The targets run in rotation --repeat
 * times (default 3) and each figure is the median of the rounds' medians.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "bench.h"
#include "target.h"

#define MAX_LENS 8
#define CHAIN_NS 1
#define CHAIN_TAG 0xC4A1ULL
#define FILL_NS 2
#define FILL_TAG 0xF111ULL

struct mctx {
	struct bk *b;
	u32 n;
	struct beluga_key *keys;
	u64 *offs;
	u64 ctr;
	struct beluga_key k64[64];
	u64 o64[64];
};

static int op_floor(void *a)
{
	struct mctx *c = a;

	return c->b->floor(c->b);
}

static int op_info(void *a)
{
	struct mctx *c = a;

	return kernel_info_op(c->b);
}

static int devnull = -1;

/* ioctl() on /dev/null with a command nobody knows: -ENOTTY. */
static int op_null(void *a)
{
	(void)a;
	return ioctl(devnull, _IO(BELUGA_TYPE, 0x7f), NULL) == -1 &&
	       errno == ENOTTY ? 0 : -EPROTO;
}

static int op_lookup(void *a)
{
	struct mctx *c = a;
	u32 hits = 0;
	int ret = c->b->lookup(c->b, CHAIN_NS, c->n, c->keys, false, NULL,
			       &hits);

	return ret ? ret : hits == c->n ? 0 : -ENOENT;
}

static int op_pin_release(void *a)
{
	struct mctx *c = a;
	u32 hits = 0;
	int ret = c->b->lookup(c->b, CHAIN_NS, c->n, c->keys, true, c->offs,
			       &hits);

	if (ret || hits != c->n)
		return ret ? ret : -ENOENT;
	return c->b->release(c->b, c->n, c->offs);
}

static int op_alloc_publish(void *a)
{
	struct mctx *c = a;
	u32 i, ok = 0;
	int ret = c->b->alloc(c->b, 64, c->o64);

	if (ret)
		return ret;
	for (i = 0; i < 64; i++)
		c->k64[i] = mkkey(FILL_TAG, c->ctr++);
	ret = c->b->publish(c->b, FILL_NS, 64, c->o64, c->k64, &ok, NULL);
	return ret ? ret : ok == 64 ? 0 : -EEXIST;
}

/* Pinned LOOKUPs and the RELEASEs of their pins, timed apart. */
static void pin_then_release(struct mctx *c, struct fig *fl, struct fig *fr)
{
	u64 reps = calibrate(op_pin_release, c, "LOOKUP+RELEASE");
	double vl[64], vr[64];
	int s, ns = opt.samples > 64 ? 64 : opt.samples;

	for (s = 0; s < ns; s++) {
		u64 t0, t1, t2, i;
		u32 hits;

		t0 = now_ns();
		for (i = 0; i < reps; i++)
			if (c->b->lookup(c->b, CHAIN_NS, c->n, c->keys, true,
					 c->offs, &hits) || hits != c->n)
				die("%s: pinned LOOKUP of %u failed", c->b->name,
				    c->n);
		t1 = now_ns();
		/* Every LOOKUP pinned the same blocks: release them as often. */
		for (i = 0; i < reps; i++)
			if (c->b->release(c->b, c->n, c->offs))
				die("%s: RELEASE of %u failed", c->b->name,
				    c->n);
		t2 = now_ns();
		vl[s] = (double)(t1 - t0) / reps;
		vr[s] = (double)(t2 - t1) / reps;
	}
	fl->ns = median(vl, ns);
	fl->min = vl[0];
	fl->p10 = percentile(vl, ns, 0.1);
	fl->p90 = percentile(vl, ns, 0.9);
	fr->ns = median(vr, ns);
	fr->min = vr[0];
	fr->p10 = percentile(vr, ns, 0.1);
	fr->p90 = percentile(vr, ns, 0.9);
	fl->reps = fr->reps = reps;
	fl->samples = fr->samples = ns;
	fl->run_min = fl->run_max = fl->ns;
	fr->run_min = fr->run_max = fr->ns;
	fl->runs = fr->runs = 1;
}

struct mres {
	bool done;
	u64 nr_blocks;
	struct fig floor, info;
	struct fig count[MAX_LENS], pin[MAX_LENS], rel[MAX_LENS];
	struct fig ap;
};

/* The median over rounds of one figure (its spread: the round's median). */
static void comb_fig(struct fig *out, struct mres *rounds, int repeat, int kind,
		     size_t off)
{
	struct fig *f[16];
	int r;

	for (r = 0; r < repeat; r++)
		f[r] = (struct fig *)((char *)&rounds[r * NR_TARGETS + kind] + off);
	*out = fig_over_runs(f, repeat);
}

static void combine(struct mres *out, struct mres *rounds, int repeat,
		    int kind, int nlens)
{
	int l;

	out->done = rounds[kind].done;
	if (!out->done)
		return;
	out->nr_blocks = rounds[kind].nr_blocks;
	comb_fig(&out->floor, rounds, repeat, kind, offsetof(struct mres, floor));
	comb_fig(&out->info, rounds, repeat, kind, offsetof(struct mres, info));
	comb_fig(&out->ap, rounds, repeat, kind, offsetof(struct mres, ap));
	for (l = 0; l < nlens; l++) {
		comb_fig(&out->count[l], rounds, repeat, kind,
			 offsetof(struct mres, count) + l * sizeof(struct fig));
		comb_fig(&out->pin[l], rounds, repeat, kind,
			 offsetof(struct mres, pin) + l * sizeof(struct fig));
		comb_fig(&out->rel[l], rounds, repeat, kind,
			 offsetof(struct mres, rel) + l * sizeof(struct fig));
	}
}

static void run_target(enum target_kind kind, const char *spec, u64 nblocks,
		       u64 bs, const u64 *lens, int nlens, struct mres *m)
{
	struct target t;
	struct mctx c = { 0 };
	u64 chain = 0, i;
	int l;

	for (l = 0; l < nlens; l++)
		if (lens[l] > chain)
			chain = lens[l];
	if (target_setup(&t, kind, spec, nblocks, bs, NULL))
		return;
	m->nr_blocks = t.nr_blocks;
	c.b = target_open(&t, false);
	c.keys = xcalloc(chain, sizeof(*c.keys));
	c.offs = xcalloc(chain, sizeof(*c.offs));
	for (i = 0; i < chain; i++)
		c.keys[i] = mkkey(CHAIN_TAG, i);
	target_fill(c.b, CHAIN_NS, CHAIN_TAG, 0, chain, -1, NULL);

	m->floor = measure(op_floor, &c, "floor");
	if (kind == T_KERNEL)
		m->info = measure(op_info, &c, "INFO");
	for (l = 0; l < nlens; l++) {
		c.n = (u32)lens[l];
		m->count[l] = measure(op_lookup, &c, "LOOKUP");
		pin_then_release(&c, &m->pin[l], &m->rel[l]);
	}
	/* Fill the pool, so that every ALLOC below evicts. */
	target_fill(c.b, FILL_NS, FILL_TAG, 0, t.nr_blocks - chain, -1, NULL);
	c.ctr = t.nr_blocks - chain;
	m->ap = measure(op_alloc_publish, &c, "ALLOC+PUBLISH");
	m->done = true;

	c.b->close(c.b);
	free(c.keys);
	free(c.offs);
	target_teardown(&t);
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : NAN;
}

static void cell(bool ok, double v, int w, int prec)
{
	if (ok && v == v)
		printf(" %*.*f", w, prec, v);
	else
		printf(" %*s", w, "-");
}

/*
 * One table row: absolute ns of the four targets, then the ratios. @calls is
 * how many system calls the kernel path makes for the row's operation (0 for
 * the floor row itself). Where there is no module (the host) the baselines
 * are held against the core plus one ioctl(/dev/null) per call: an estimate
 * of the kernel path. The kernel's cost above the floor subtracts one ENOTTY
 * ioctl per call.
 */
static double null_ns;	/* null ioctl, for the native estimate */

static void row(const char *name, struct mres *m, struct fig *k, struct fig *c,
		struct fig *r, struct fig *sh, int calls)
{
	bool kd = m[T_KERNEL].done, cd = m[T_CORE].done && c;
	bool rd = m[T_RPC].done, sd = m[T_SHM].done;
	double base = kd ? k->ns : cd ? c->ns + calls * null_ns : NAN;
	double floor = calls * m[T_KERNEL].floor.ns;

	printf("%-22s", name);
	cell(kd, k->ns, 10, 0);
	cell(cd, cd ? c->ns : 0, 9, 0);
	cell(rd, r->ns, 10, 0);
	cell(sd, sh->ns, 9, 0);
	printf("  ");
	cell(rd, ratio(r->ns, base), 9, 2);
	cell(sd, ratio(sh->ns, base), 9, 2);
	cell(kd && cd, cd ? ratio(k->ns - floor, c->ns) : 0, 12, 2);
	printf("\n");
}

static void rec_ratio(const char *name, u64 n, double v, const char *target,
		      double goal, int met)
{
	rec_begin("ratio");
	rec_str("name", name);
	rec_int("n", (long long)n);
	rec_num("value", v);
	rec_str("target", target);
	rec_num("goal", goal);
	rec_int("met", met);
	rec_end();
}

/*
 * A ratio of two targets' figures, taken round by round (the targets of a
 * round ran minutes apart at most): median, min and max over the rounds.
 * @what: 0 count-only LOOKUP, 1 pinned LOOKUP, 2 pinned LOOKUP + RELEASE.
 * @den T_CORE means core + one ioctl(/dev/null) per system call the kernel
 * path makes (two for the pair), the estimate of the kernel path where there
 * is no module.
 */
static double fig_of(struct mres *m, int what, int l)
{
	switch (what) {
	case 0:
		return m->count[l].ns;
	case 1:
		return m->pin[l].ns;
	default:
		return m->pin[l].ns + m->rel[l].ns;
	}
}

static int calls_of(int what)
{
	return what == 2 ? 2 : 1;
}

static void rec_round_ratio(const char *name, struct mres *rounds, int repeat,
			    int num, int den, int what, int l, u64 n,
			    const char *target, double goal)
{
	double v[16];
	int r;

	for (r = 0; r < repeat; r++) {
		struct mres *mr = rounds + r * NR_TARGETS;
		double d = fig_of(&mr[den], what, l);

		if (den == T_CORE)
			d += calls_of(what) * null_ns;
		v[r] = ratio(fig_of(&mr[num], what, l), d);
	}
	rec_begin("ratio");
	rec_str("name", name);
	rec_int("n", (long long)n);
	rec_runs_verdict(v, repeat, target, goal);
	rec_end();
}

int sec_meta(int argc, char **argv)
{
	const char *spec = "none";
	u64 lens[MAX_LENS] = { 1, 16, 64, 256, 4096 };
	int nlens = 5, i, l;
	u64 bs = 4096, nblocks = 65536;
	struct mres m[NR_TARGETS] = { 0 }, *rounds;
	int r, repeat = opt.quick ? 1 : 5;
	struct mctx nc = { 0 };
	struct fig null;
	FILE *dat;

	for (i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--pool"))
			spec = argv[i + 1];
		else if (!strcmp(argv[i], "--bs"))
			bs = parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "--blocks"))
			nblocks = parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "--lens"))
			nlens = parse_list(argv[i + 1], lens, MAX_LENS);
		else if (!strcmp(argv[i], "--repeat"))
			repeat = atoi(argv[i + 1]);
		else
			die("meta: unknown option %s", argv[i]);
	}
	if (!strncmp(spec, "dax:", 4)) {
		u64 sz = dax_spec_size(spec);

		if (sz && sz / bs < nblocks)
			nblocks = sz / bs;
	}
	if (repeat < 1 || repeat > 16)
		die("meta: --repeat must be 1..16");
	out_open("meta");
	bench_pin_cpu();
	note("meta: %llu blocks of %llu bytes; chains up to %llu keys; %d samples of ~%.0f ms",
	     (unsigned long long)nblocks, (unsigned long long)bs,
	     (unsigned long long)lens[nlens - 1], opt.samples, opt.sample_ms);

	devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (devnull < 0)
		die("open /dev/null: %s", strerror(errno));
	null = measure(op_null, &nc, "ioctl(/dev/null)");
	rec_fig("sys", "null_ioctl", 0, 0, &null);
	close(devnull);

	if (!strcmp(spec, "none") || !kernel_available())
		note("meta: no /dev/beluga or --pool none: kernel rows skipped");
	/*
	 * The three targets in rotation, --repeat times; each figure is the
	 * median over the rounds, so that a slow minute of a shared host
	 * does not land on one target only.
	 */
	rounds = xcalloc(repeat * NR_TARGETS, sizeof(*rounds));
	for (r = 0; r < repeat; r++) {
		struct mres *mr = rounds + r * NR_TARGETS;

		if (strcmp(spec, "none") && kernel_available())
			run_target(T_KERNEL, spec, nblocks, bs, lens, nlens,
				   &mr[T_KERNEL]);
		/* The same geometry for the baselines as the kernel got. */
		if (mr[T_KERNEL].done)
			nblocks = mr[T_KERNEL].nr_blocks;
		run_target(T_CORE, spec, nblocks, bs, lens, nlens, &mr[T_CORE]);
		run_target(T_RPC, spec, nblocks, bs, lens, nlens, &mr[T_RPC]);
		run_target(T_SHM, spec, nblocks, bs, lens, nlens, &mr[T_SHM]);
	}
	for (i = 0; i < NR_TARGETS; i++) {
		combine(m + i, rounds, repeat, i, nlens);
		if (!m[i].done)
			continue;
		rec_fig(target_kind_name[i], "floor", 0, 0, &m[i].floor);
		if (i == T_KERNEL)
			rec_fig(target_kind_name[i], "info", 0, 0, &m[i].info);
		for (l = 0; l < nlens; l++) {
			rec_fig(target_kind_name[i], "lookup", 0, lens[l],
				&m[i].count[l]);
			rec_fig(target_kind_name[i], "lookup", 1, lens[l],
				&m[i].pin[l]);
			rec_fig(target_kind_name[i], "release", 0, lens[l],
				&m[i].rel[l]);
		}
		rec_fig(target_kind_name[i], "alloc_publish", 0, 64, &m[i].ap);
	}
	printf("\n== meta (%s): ns per operation (absolute, %s) and ratios ==\n",
	       opt.env, strcmp(opt.env, "host") ? "TCG guest: compare ratios only" :
	       "host CPU");
	null_ns = null.ns;
	printf("%-22s %10s %9s %10s %9s   %9s %9s %12s\n", "operation", "kernel",
	       "core", "unix-blk", "shm-poll", m[0].done ? "unix/kern" : "unix/est",
	       m[0].done ? "shm/kern" : "shm/est", "(k-floor)/c");
	printf("%-22s %10.0f\n", "ioctl(/dev/null)", null.ns);
	row("floor (ENOTTY / ping)", m, &m[0].floor, NULL, &m[2].floor,
	    &m[3].floor, 0);
	if (m[0].done)
		printf("%-22s %10.0f\n", "INFO ioctl", m[0].info.ns);
	for (l = 0; l < nlens; l++) {
		char name[40];
		struct fig kp, cp, rp, sp;

		snprintf(name, sizeof(name), "LOOKUP %llu count",
			 (unsigned long long)lens[l]);
		row(name, m, &m[0].count[l], &m[1].count[l], &m[2].count[l],
		    &m[3].count[l], 1);
		snprintf(name, sizeof(name), "LOOKUP %llu pinned",
			 (unsigned long long)lens[l]);
		row(name, m, &m[0].pin[l], &m[1].pin[l], &m[2].pin[l],
		    &m[3].pin[l], 1);
		snprintf(name, sizeof(name), "RELEASE %llu",
			 (unsigned long long)lens[l]);
		row(name, m, &m[0].rel[l], &m[1].rel[l], &m[2].rel[l],
		    &m[3].rel[l], 1);
		kp = m[0].pin[l]; kp.ns += m[0].rel[l].ns;
		cp = m[1].pin[l]; cp.ns += m[1].rel[l].ns;
		rp = m[2].pin[l]; rp.ns += m[2].rel[l].ns;
		sp = m[3].pin[l]; sp.ns += m[3].rel[l].ns;
		snprintf(name, sizeof(name), "LOOKUP+RELEASE %llu",
			 (unsigned long long)lens[l]);
		row(name, m, &kp, &cp, &rp, &sp, 2);
	}
	/* two system calls */
	row("ALLOC+PUBLISH 64", m, &m[0].ap, &m[1].ap, &m[2].ap, &m[3].ap, 2);
	printf("unix-blk: rpc-unix-blocking (AF_UNIX, blocking); shm-poll: rpc-shm-polled (shared-memory slots,\n"
	       "          server spin-polling on CPU %d, its own)\n"
	       "x/kern: the baseline over the module; x/est (no module, the host): over the core plus one\n"
	       "        ioctl(/dev/null) per system call (two for LOOKUP+RELEASE and ALLOC+PUBLISH), an\n"
	       "        estimate of the kernel path that leaves out the module's own entry work\n"
	       "(k-floor)/c: the kernel's cost above the syscall floor (one ENOTTY ioctl per call) over the\n"
	       "        in-process core's\n",
	       shm_server_cpu());

	/*
	 * Ratios and targets (reported, never asserted), round by round. The
	 * headline is the pinned LOOKUP + RELEASE pair: what an engine needs
	 * before it reads.
	 */
	for (l = 0; l < nlens; l++) {
		int den = m[0].done ? T_KERNEL : T_CORE;
		const char *sfx = m[0].done ? "kernel" : "core_plus_syscalls";
		static const char *wn[3] = { "lookup_count", "lookup_pin",
					     "lookup_pin_release" };
		int w;

		for (w = 0; w < 3; w++) {
			char nm[96];

			snprintf(nm, sizeof(nm), "unix_over_%s_%s", sfx, wn[w]);
			rec_round_ratio(nm, rounds, repeat, T_RPC, den, w, l,
					lens[l], lens[l] == 64 && w == 2 &&
					m[0].done ? ">=" : "", 10);
			snprintf(nm, sizeof(nm), "shm_over_%s_%s", sfx, wn[w]);
			rec_round_ratio(nm, rounds, repeat, T_SHM, den, w, l,
					lens[l], lens[l] == 64 && w == 2 &&
					m[0].done ? ">=" : "", 1);
		}
		if (m[0].done) {
			double k = ratio(m[0].count[l].ns - m[0].floor.ns,
					 m[1].count[l].ns);

			rec_ratio("kernel_minus_floor_over_core_lookup_count",
				  lens[l], k, lens[l] >= 64 ? "<=" : "", 3,
				  k <= 3);
		}
	}
	if (m[0].done) {
		rec_ratio("unix_ping_over_kernel_floor", 0,
			  ratio(m[2].floor.ns, m[0].floor.ns), "", 0, 1);
		rec_ratio("shm_ping_over_kernel_floor", 0,
			  ratio(m[3].floor.ns, m[0].floor.ns), "", 0, 1);
		rec_ratio("unix_over_kernel_alloc_publish_64", 64,
			  ratio(m[2].ap.ns, m[0].ap.ns), "", 0, 1);
		rec_ratio("shm_over_kernel_alloc_publish_64", 64,
			  ratio(m[3].ap.ns, m[0].ap.ns), "", 0, 1);
	}
	free(rounds);

	dat = dat_open("meta", "keys kernel_count kernel_pin core_count core_pin unix_count unix_pin kernel_floor(ENOTTY ioctl) unix_floor(ping) null_ioctl(/dev/null) shm_count shm_pin shm_floor(ping) (ns per LOOKUP)");
	for (l = 0; l < nlens; l++)
		fprintf(dat, "%llu %.1f %.1f %.1f %.1f %.1f %.1f %.1f %.1f %.1f %.1f %.1f %.1f\n",
			(unsigned long long)lens[l],
			m[0].done ? m[0].count[l].ns : NAN,
			m[0].done ? m[0].pin[l].ns : NAN,
			m[1].count[l].ns, m[1].pin[l].ns,
			m[2].count[l].ns, m[2].pin[l].ns,
			m[0].done ? m[0].floor.ns : NAN, m[2].floor.ns,
			null.ns, m[3].count[l].ns, m[3].pin[l].ns,
			m[3].floor.ns);
	fclose(dat);
	out_close();
	return 0;
}
