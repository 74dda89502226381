// SPDX-License-Identifier: GPL-2.0
/*
 * Section "conc": does the read path scale with the engines' workers?
 *
 * Each worker repeats what an engine worker does before it reads: a pinned
 * LOOKUP of a 64-key chain and the RELEASE of its pins, timed op by op. For
 * 1 and 2 workers (--workers), in two shapes:
 *
 *   disjoint  each worker looks up its own random chains (128 of them):
 *             nothing shared but the pool
 *   hothead   every chain starts with the same 32 keys (the system prompt
 *             all requests share), then 32 keys of the worker's own chain
 *
 * Targets: the module (one worker = one process with its own open file),
 * the in-process core (threads: one process, one pool), and rpc-shm-polled
 * (one client process per worker; the server polls on a CPU of its own, so
 * on a 2-CPU machine every client shares the one CPU left).
 *
 * Workers run for --ms milliseconds after a common start. Reported per
 * target, shape and worker count: total LOOKUP+RELEASE pairs per second,
 * per-pair latency p50 and p99 (every pair of every worker), and the
 * scaling ratio ops/s(2 workers) / ops/s(1 worker) of the same round.
 * Everything runs --rounds times (default 5), worker counts interleaved
 * inside a round; figures are medians over the rounds, with min and max.
 *
 * How well two workers can scale depends on the machine at that moment
 * (a shared host, turbo, the other guest): with "control" among the
 * targets, every round of every target is followed at once by the same
 * 1 and 2 workers (threads) running no Beluga code at all: 128 random
 * 8-byte reads per operation (a LOOKUP 64 and its RELEASE touch about as
 * many lines) in a private buffer as large as the pool's block metadata.
 * The target's scaling over the control's, round by round, is Beluga's
 * own share of the figure. --chains sets the chains per worker (default
 * 128: a working set that fits in the caches; the bench also runs a pool
 * of about 256K blocks, where it does not).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "target.h"

#define CONC_NS 13
#define CONC_TAG 0xC0C0ULL	/* disjoint chains */
#define HEAD_TAG 0x4EADULL	/* the shared head */
#define TAIL_TAG 0x7A11ULL	/* hot-head chains' own tails */
#define CHAIN 64
#define HEAD 32
#define DEFAULT_CHAINS 128
#define MAX_CHAINS 8192
#define CONTROL_READS (2 * CHAIN)
#define CONTROL_LINE 64	/* bytes of block metadata per block */
#define MAX_WORKERS 4
#define MAX_ROUNDS 16
#define LAT_MAX (1U << 18)

enum { SHAPE_DISJOINT, SHAPE_HOTHEAD, NR_SHAPES };
static const char *shape_name[NR_SHAPES] = { "disjoint", "hothead" };

struct wres {
	_Atomic u64 ops;
	u64 elapsed_ns;
	u32 nlat;
	int err;
	u32 lat[LAT_MAX];	/* ns per LOOKUP+RELEASE, saturating */
};

struct shared {
	_Atomic int ready;
	_Atomic int go;
	u64 deadline_ns;
	u64 chains;		/* per worker */
	u64 control_bytes;	/* the control's private buffer */
	struct wres w[MAX_WORKERS];
};

struct cctx {
	struct target *t;	/* NULL: the control */
	struct shared *sh;
	int shape;
	int id;
	int cpu;
};

static void pin_to(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static void chain_keys(int shape, int worker, u64 chains, u64 c,
		       struct beluga_key *k)
{
	u64 base;
	int j;

	if (shape == SHAPE_DISJOINT) {
		base = ((u64)worker * chains + c) * CHAIN;
		for (j = 0; j < CHAIN; j++)
			k[j] = mkkey(CONC_TAG, base + j);
		return;
	}
	for (j = 0; j < HEAD; j++)
		k[j] = mkkey(HEAD_TAG, j);
	base = ((u64)worker * chains + c) * (CHAIN - HEAD);
	for (j = HEAD; j < CHAIN; j++)
		k[j] = mkkey(TAIL_TAG, base + j - HEAD);
}

static void lat_add(struct wres *r, u64 ns)
{
	if (r->nlat < LAT_MAX)
		r->lat[r->nlat++] = ns > 0xffffffffULL ? 0xffffffffU : (u32)ns;
}

static void wait_for_go(struct shared *sh)
{
	atomic_fetch_add(&sh->ready, 1);
	while (!atomic_load(&sh->go))
		usleep(50);
}

/* The control: random reads in a private buffer, nothing shared. */
static void control_run(struct cctx *c, struct wres *r, u64 rnd)
{
	u64 lines = c->sh->control_bytes / CONTROL_LINE, t0, ops = 0, sum = 0;
	u8 *buf = xcalloc(lines, CONTROL_LINE);
	u64 i;

	for (i = 0; i < lines; i++)	/* fault it in, distinct contents */
		memcpy(buf + i * CONTROL_LINE, &i, sizeof(i));
	wait_for_go(c->sh);
	t0 = now_ns();
	for (;;) {
		u64 a = now_ns();

		if (a >= c->sh->deadline_ns)
			break;
		for (i = 0; i < CONTROL_READS; i++) {
			u64 v;

			memcpy(&v, buf + rnd_next(&rnd) % lines * CONTROL_LINE,
			       sizeof(v));
			sum += v;
		}
		lat_add(r, now_ns() - a);
		ops++;
	}
	r->elapsed_ns = now_ns() - t0;
	atomic_store(&r->ops, ops);
	/* keeps the reads: a sum of line numbers is never this */
	if (sum == 1)
		r->err = -EDOM;
	free(buf);
}

static void *worker_run(void *arg)
{
	struct cctx *c = arg;
	struct wres *r = &c->sh->w[c->id];
	u64 chains = c->sh->chains;
	u64 offs[CHAIN], rnd = 0x9E3779B97F4A7C15ULL * (c->id + 1), t0, ops = 0;
	struct beluga_key *keys;
	struct bk *b;
	u64 i;

	pin_to(c->cpu);
	if (!c->t) {
		control_run(c, r, rnd);
		return NULL;
	}
	keys = xcalloc(chains * CHAIN, sizeof(*keys));
	for (i = 0; i < chains; i++)
		chain_keys(c->shape, c->id, chains, i, keys + i * CHAIN);
	b = target_open(c->t, false);
	wait_for_go(c->sh);
	t0 = now_ns();
	for (;;) {
		u64 a = now_ns();
		u64 ch = rnd_next(&rnd) % chains;
		u32 hits = 0;
		int ret;

		if (a >= c->sh->deadline_ns)
			break;
		ret = b->lookup(b, CONC_NS, CHAIN, keys + ch * CHAIN, true,
				offs, &hits);
		if (!ret && hits != CHAIN)
			ret = -ENOENT;
		if (!ret)
			ret = b->release(b, CHAIN, offs);
		if (ret) {
			r->err = ret;
			break;
		}
		lat_add(r, now_ns() - a);
		ops++;
	}
	r->elapsed_ns = now_ns() - t0;
	atomic_store(&r->ops, ops);
	b->close(b);
	free(keys);
	return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
	u32 x = *(const u32 *)a, y = *(const u32 *)b;

	return x < y ? -1 : x > y;
}

/* The CPUs this process could use at start, in order. */
static int cpu_list(int *cpus, int max)
{
	int cpu, n = 0;

	for (cpu = 0; cpu < 64 && n < max; cpu++)
		if (bench_cpus_at_start & (1ULL << cpu))
			cpus[n++] = cpu;
	return n;
}

struct one {
	double ops_s, p50, p99;
};

/* What every run of one invocation shares. */
struct conc_geom {
	double ms;
	u64 chains;		/* per worker */
	u64 control_bytes;
};

/*
 * One run: @nw workers of @shape against @t (NULL: the control) for
 * @g->ms; processes unless @threads.
 */
static struct one run_workers(struct target *t, int shape, int nw,
			      const struct conc_geom *g, bool threads,
			      int server_cpu)
{
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct cctx cx[MAX_WORKERS];
	pthread_t th[MAX_WORKERS];
	pid_t pid[MAX_WORKERS];
	int cpus[64], ncpu = cpu_list(cpus, 64), usable[64], nu = 0, i;
	u64 total = 0, longest = 0, nlat = 0, k;
	struct one o;
	u32 *all;

	if (sh == MAP_FAILED)
		die("conc: mmap: %s", strerror(errno));
	sh->chains = g->chains;
	sh->control_bytes = g->control_bytes;
	for (i = 0; i < ncpu; i++)
		if (cpus[i] != server_cpu)
			usable[nu++] = cpus[i];
	if (!nu)
		usable[nu++] = cpus[0];
	for (i = 0; i < nw; i++) {
		cx[i] = (struct cctx){ .t = t, .sh = sh, .shape = shape,
				       .id = i, .cpu = usable[i % nu] };
		if (threads) {
			if (pthread_create(&th[i], NULL, worker_run, &cx[i]))
				die("conc: pthread_create failed");
			continue;
		}
		fflush(NULL);
		pid[i] = fork();
		if (pid[i] < 0)
			die("conc: fork: %s", strerror(errno));
		if (!pid[i]) {
			worker_run(&cx[i]);
			_exit(0);
		}
	}
	while (atomic_load(&sh->ready) < nw)
		usleep(200);
	sh->deadline_ns = now_ns() + (u64)(g->ms * 1e6);
	atomic_store(&sh->go, 1);
	for (i = 0; i < nw; i++) {
		int st;

		if (threads)
			pthread_join(th[i], NULL);
		else if (waitpid(pid[i], &st, 0) != pid[i] ||
			 !WIFEXITED(st) || WEXITSTATUS(st))
			die("conc: worker %d died", i);
	}
	for (i = 0; i < nw; i++) {
		if (sh->w[i].err)
			die("conc: %s worker %d: %s",
			    t ? target_kind_name[t->kind] : "control", i,
			    strerror(-sh->w[i].err));
		total += sh->w[i].ops;
		if (sh->w[i].elapsed_ns > longest)
			longest = sh->w[i].elapsed_ns;
		nlat += sh->w[i].nlat;
	}
	all = xcalloc(nlat ? nlat : 1, sizeof(u32));
	for (i = 0, k = 0; i < nw; i++) {
		memcpy(all + k, sh->w[i].lat, sh->w[i].nlat * sizeof(u32));
		k += sh->w[i].nlat;
	}
	qsort(all, nlat, sizeof(u32), cmp_u32);
	o.ops_s = longest ? (double)total / ((double)longest / 1e9) : 0;
	o.p50 = nlat ? all[(u64)(0.50 * (nlat - 1))] : NAN;
	o.p99 = nlat ? all[(u64)(0.99 * (nlat - 1))] : NAN;
	free(all);
	munmap(sh, sizeof(*sh));
	return o;
}

static void rec_stat(const char *key, double *v, int n)
{
	char k[64];

	snprintf(k, sizeof(k), "%s", key);
	rec_num(k, median(v, n));
	snprintf(k, sizeof(k), "%s_min", key);
	rec_num(k, v[0]);
	snprintf(k, sizeof(k), "%s_max", key);
	rec_num(k, v[n - 1]);
}

/* Round @r's scaling of @res: @i workers over the first count (1). */
static double scaling(struct one (*res)[MAX_ROUNDS], int i, int r)
{
	return res[i][r].ops_s / res[0][r].ops_s;
}

static void rec_scaling(const char *name, const char *backend,
			const char *shape, u64 workers, double *v, int rounds,
			u64 nblocks, double goal)
{
	rec_begin("ratio");
	rec_str("name", name);
	rec_str("backend", backend);
	if (shape)
		rec_str("shape", shape);
	rec_int("n", (long long)workers);
	rec_int("pool_blocks", (long long)nblocks);
	rec_num("value", median(v, rounds));
	rec_num("run_min", v[0]);
	rec_num("run_max", v[rounds - 1]);
	rec_int("runs", rounds);
	rec_str("target", goal > 0 ? ">=" : "");
	rec_num("goal", goal);
	rec_int("met", goal <= 0 || median(v, rounds) >= goal);
	rec_end();
}

/* Everything one invocation measures at one pool size. */
struct conc_plan {
	const char *spec, *targets;
	u64 workers[MAX_WORKERS];
	int nwk, rounds;
	u64 bs, maxw;
	bool control;
};

static void conc_at(const struct conc_plan *p, struct conc_geom g)
{
	const u64 *workers = p->workers;
	const char *spec = p->spec, *targets = p->targets;
	int nwk = p->nwk, rounds = p->rounds, i, k, s, w, r;
	u64 bs = p->bs, maxw = p->maxw, nblocks;
	static struct one res[NR_TARGETS][NR_SHAPES][MAX_WORKERS][MAX_ROUNDS];
	/* the control, run right after each round of each target */
	static struct one ctl[NR_TARGETS][MAX_WORKERS][MAX_ROUNDS];
	bool done[NR_TARGETS] = { false }, control = p->control;
	int cpus[64], ncpu = cpu_list(cpus, 64);

	/* Every chain of every worker, both shapes, and the shared head. */
	nblocks = maxw * g.chains * (CHAIN + CHAIN - HEAD) + HEAD;
	nblocks = (nblocks + 511) & ~511ULL;
	g.control_bytes = nblocks * CONTROL_LINE;
	note("conc: %llu workers at most, %d CPUs, %d rounds of %.0f ms per figure; pool of %llu blocks (%llu chains per worker)%s",
	     (unsigned long long)maxw, ncpu, rounds, g.ms,
	     (unsigned long long)nblocks, (unsigned long long)g.chains,
	     control ? "; a control run follows each round" : "");

	for (k = 0; k < NR_TARGETS; k++) {
		struct target t;
		struct bk *fill;
		int scpu = -1;

		if (k == T_RPC || !target_selected(targets, k))
			continue;
		if (k == T_KERNEL && (!strcmp(spec, "none") ||
				      !kernel_available()))
			continue;
		if (target_setup(&t, k, spec, nblocks, bs, NULL))
			die("conc: no %s pool of %llu blocks",
			    target_kind_name[k], (unsigned long long)nblocks);
		if (k == T_SHM) {
			scpu = t.shm.cpu;
			note("conc: the polled server spins on CPU %d; its clients get the other %d CPU(s)",
			     scpu, ncpu > 1 ? ncpu - 1 : 1);
		}
		fill = target_open(&t, false);
		for (w = 0; w < (int)maxw; w++) {
			target_fill(fill, CONC_NS, CONC_TAG,
				    (u64)w * g.chains * CHAIN,
				    g.chains * CHAIN, -1, NULL);
			target_fill(fill, CONC_NS, TAIL_TAG,
				    (u64)w * g.chains * (CHAIN - HEAD),
				    g.chains * (CHAIN - HEAD), -1, NULL);
		}
		target_fill(fill, CONC_NS, HEAD_TAG, 0, HEAD, -1, NULL);
		for (r = 0; r < rounds; r++) {
			for (s = 0; s < NR_SHAPES; s++)
				for (i = 0; i < nwk; i++)
					res[k][s][i][r] = run_workers(&t, s,
						(int)workers[i], &g,
						k == T_CORE, scpu);
			/*
			 * The polled server spins through its own rounds
			 * only; the control runs beside the other targets
			 * with the machine as they found it.
			 */
			for (i = 0; control && k != T_SHM && i < nwk; i++)
				ctl[k][i][r] = run_workers(NULL, SHAPE_DISJOINT,
							   (int)workers[i], &g,
							   true, -1);
		}
		fill->close(fill);
		target_teardown(&t);
		done[k] = true;
	}

	printf("\n== conc (%s): pinned LOOKUP 64 + RELEASE, 1 vs 2 workers (%s), %d CPUs, pool of %llu blocks ==\n",
	       opt.env, strcmp(opt.env, "host") ? "TCG guest" : "host CPU", ncpu,
	       (unsigned long long)nblocks);
	printf("%-15s %-9s %3s %12s %12s %12s %10s %10s  %s\n", "target", "shape",
	       "wk", "ops/s", "(min", "max)", "p50 ns", "p99 ns",
	       "x of 1 worker (min..max)");
	for (k = 0; k < NR_TARGETS; k++) {
		bool with_control = control && k != T_SHM;

		if (!done[k])
			continue;
		for (s = 0; s < NR_SHAPES; s++)
			for (i = 0; i < nwk; i++) {
				double ops[MAX_ROUNDS], p50[MAX_ROUNDS],
				       p99[MAX_ROUNDS], sc[MAX_ROUNDS],
				       over[MAX_ROUNDS];
				bool scaled = i > 0 && workers[0] == 1;

				for (r = 0; r < rounds; r++) {
					ops[r] = res[k][s][i][r].ops_s;
					p50[r] = res[k][s][i][r].p50;
					p99[r] = res[k][s][i][r].p99;
					sc[r] = scaling(res[k][s], i, r);
					over[r] = with_control ?
						sc[r] / scaling(ctl[k], i, r) :
						0;
				}
				rec_begin("conc");
				rec_str("backend", target_kind_name[k]);
				rec_str("shape", shape_name[s]);
				rec_int("workers", (long long)workers[i]);
				rec_str("mode", k == T_CORE ? "threads" :
					"processes");
				rec_int("cpus", ncpu);
				rec_int("runs", rounds);
				rec_int("pool_blocks", (long long)nblocks);
				rec_num("ms", g.ms);
				rec_stat("ops_per_s", ops, rounds);
				rec_stat("p50_ns", p50, rounds);
				rec_stat("p99_ns", p99, rounds);
				rec_end();
				printf("%-15s %-9s %3llu %12.0f %12.0f %12.0f %10.0f %10.0f",
				       target_kind_name[k], shape_name[s],
				       (unsigned long long)workers[i],
				       median(ops, rounds), ops[0],
				       ops[rounds - 1], median(p50, rounds),
				       median(p99, rounds));
				if (scaled) {
					/* sorted by median() */
					double m = median(sc, rounds);

					printf("  %.2f (%.2f..%.2f)", m, sc[0],
					       sc[rounds - 1]);
					/* the goal is for Beluga's own path */
					rec_scaling("conc_scaling",
						    target_kind_name[k],
						    shape_name[s], workers[i],
						    sc, rounds, nblocks,
						    k == T_SHM ? 0 :
						    0.9 * workers[i]);
				}
				if (scaled && with_control) {
					double m = median(over, rounds);

					printf("  over control %.2f (%.2f..%.2f)",
					       m, over[0], over[rounds - 1]);
					rec_scaling("conc_scaling_over_control",
						    target_kind_name[k],
						    shape_name[s], workers[i],
						    over, rounds, nblocks, 0.9);
				}
				printf("\n");
			}
		for (i = 1; with_control && workers[0] == 1 && i < nwk; i++) {
			double sc[MAX_ROUNDS], m;
			char beside[64];

			for (r = 0; r < rounds; r++)
				sc[r] = scaling(ctl[k], i, r);
			snprintf(beside, sizeof(beside), "control beside %s",
				 target_kind_name[k]);
			m = median(sc, rounds);
			printf("%-25s %3llu x of 1 worker %.2f (%.2f..%.2f)\n",
			       beside, (unsigned long long)workers[i], m,
			       sc[0], sc[rounds - 1]);
			rec_scaling("control_scaling", beside, NULL, workers[i],
				    sc, rounds, nblocks, 0);
		}
	}
	if (done[T_SHM] && ncpu <= 2)
		printf("rpc-shm-polled on %d CPUs: the server owns one CPU, so its clients share the other: two\n"
		       "clients do not get two CPUs, and a client that spins while the other waits costs it a time slice.\n",
		       ncpu);
}

int sec_conc(int argc, char **argv)
{
	struct conc_plan p = { .spec = "none", .targets = "kernel,core,shm",
			       .workers = { 1, 2 }, .nwk = 2,
			       .rounds = opt.quick ? 1 : 5, .bs = 4096 };
	struct conc_geom g = { .ms = opt.quick ? 50 : 300 };
	u64 chains[8] = { DEFAULT_CHAINS };
	int nchains = 1, i;

	for (i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--pool"))
			p.spec = argv[i + 1];
		else if (!strcmp(argv[i], "--targets"))
			p.targets = argv[i + 1];
		else if (!strcmp(argv[i], "--workers"))
			p.nwk = parse_list(argv[i + 1], p.workers, MAX_WORKERS);
		else if (!strcmp(argv[i], "--rounds"))
			p.rounds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--ms"))
			g.ms = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--bs"))
			p.bs = parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "--chains"))
			nchains = parse_list(argv[i + 1], chains, 8);
		else
			die("conc: unknown option %s", argv[i]);
	}
	if (p.rounds < 1 || p.rounds > MAX_ROUNDS)
		die("conc: --rounds must be 1..%d", MAX_ROUNDS);
	for (i = 0; i < nchains; i++)
		if (chains[i] < 1 || chains[i] > MAX_CHAINS)
			die("conc: --chains: 1..%d each", MAX_CHAINS);
	for (i = 0; i < p.nwk; i++) {
		if (p.workers[i] < 1 || p.workers[i] > MAX_WORKERS)
			die("conc: --workers: 1..%d", MAX_WORKERS);
		if (p.workers[i] > p.maxw)
			p.maxw = p.workers[i];
	}
	p.control = list_names(p.targets, "control");
	if (p.control && p.workers[0] != 1)
		die("conc: the control's scaling needs 1 worker first in --workers");
	out_open("conc");
	for (i = 0; i < nchains; i++) {
		g.chains = chains[i];
		conc_at(&p, g);
	}
	out_close();
	return 0;
}
