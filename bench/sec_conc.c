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
#define CHAINS_PER_WORKER 128
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
	struct wres w[MAX_WORKERS];
};

struct cctx {
	struct target *t;
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

static void chain_keys(int shape, int worker, u64 c, struct beluga_key *k)
{
	u64 base;
	int j;

	if (shape == SHAPE_DISJOINT) {
		base = ((u64)worker * CHAINS_PER_WORKER + c) * CHAIN;
		for (j = 0; j < CHAIN; j++)
			k[j] = mkkey(CONC_TAG, base + j);
		return;
	}
	for (j = 0; j < HEAD; j++)
		k[j] = mkkey(HEAD_TAG, j);
	base = ((u64)worker * CHAINS_PER_WORKER + c) * (CHAIN - HEAD);
	for (j = HEAD; j < CHAIN; j++)
		k[j] = mkkey(TAIL_TAG, base + j - HEAD);
}

static void *worker_run(void *arg)
{
	struct cctx *c = arg;
	struct wres *r = &c->sh->w[c->id];
	struct beluga_key *keys = xcalloc((u64)CHAINS_PER_WORKER * CHAIN,
					  sizeof(*keys));
	u64 offs[CHAIN], rnd = 0x9E3779B97F4A7C15ULL * (c->id + 1), t0, ops = 0;
	struct bk *b;
	u64 i;

	pin_to(c->cpu);
	for (i = 0; i < CHAINS_PER_WORKER; i++)
		chain_keys(c->shape, c->id, i, keys + i * CHAIN);
	b = target_open(c->t, false);
	atomic_fetch_add(&c->sh->ready, 1);
	while (!atomic_load(&c->sh->go))
		usleep(50);
	t0 = now_ns();
	for (;;) {
		u64 a = now_ns(), z;
		u64 ch = rnd_next(&rnd) % CHAINS_PER_WORKER;
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
		z = now_ns() - a;
		if (r->nlat < LAT_MAX)
			r->lat[r->nlat++] = z > 0xffffffffULL ? 0xffffffffU :
					    (u32)z;
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

/*
 * One run: @nw workers of @shape against @t for @ms; processes unless
 * @threads.
 */
static struct one run_workers(struct target *t, int shape, int nw, double ms,
			      bool threads, int server_cpu)
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
	sh->deadline_ns = now_ns() + (u64)(ms * 1e6);
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
			die("conc: %s worker %d: %s", target_kind_name[t->kind],
			    i, strerror(-sh->w[i].err));
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

int sec_conc(int argc, char **argv)
{
	const char *spec = "none", *targets = "kernel,core,shm";
	u64 workers[MAX_WORKERS] = { 1, 2 };
	int nwk = 2, rounds = opt.quick ? 1 : 5, i, k, s, w, r;
	double ms = opt.quick ? 50 : 300;
	u64 bs = 4096, maxw = 0, nblocks;
	static struct one res[NR_TARGETS][NR_SHAPES][MAX_WORKERS][MAX_ROUNDS];
	bool done[NR_TARGETS] = { false };
	int cpus[64], ncpu = cpu_list(cpus, 64);

	for (i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--pool"))
			spec = argv[i + 1];
		else if (!strcmp(argv[i], "--targets"))
			targets = argv[i + 1];
		else if (!strcmp(argv[i], "--workers"))
			nwk = parse_list(argv[i + 1], workers, MAX_WORKERS);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--ms"))
			ms = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--bs"))
			bs = parse_size(argv[i + 1]);
		else
			die("conc: unknown option %s", argv[i]);
	}
	if (rounds < 1 || rounds > MAX_ROUNDS)
		die("conc: --rounds must be 1..%d", MAX_ROUNDS);
	for (i = 0; i < nwk; i++) {
		if (workers[i] < 1 || workers[i] > MAX_WORKERS)
			die("conc: --workers: 1..%d", MAX_WORKERS);
		if (workers[i] > maxw)
			maxw = workers[i];
	}
	/* Every chain of every worker, both shapes, and the shared head. */
	nblocks = maxw * CHAINS_PER_WORKER * (CHAIN + CHAIN - HEAD) + HEAD;
	nblocks = (nblocks + 511) & ~511ULL;
	out_open("conc");
	note("conc: %llu workers at most, %d CPUs, %d rounds of %.0f ms per figure; pool of %llu blocks",
	     (unsigned long long)maxw, ncpu, rounds, ms,
	     (unsigned long long)nblocks);

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
				    (u64)w * CHAINS_PER_WORKER * CHAIN,
				    CHAINS_PER_WORKER * CHAIN, -1, NULL);
			target_fill(fill, CONC_NS, TAIL_TAG,
				    (u64)w * CHAINS_PER_WORKER * (CHAIN - HEAD),
				    CHAINS_PER_WORKER * (CHAIN - HEAD), -1,
				    NULL);
		}
		target_fill(fill, CONC_NS, HEAD_TAG, 0, HEAD, -1, NULL);
		for (r = 0; r < rounds; r++)
			for (s = 0; s < NR_SHAPES; s++)
				for (i = 0; i < nwk; i++)
					res[k][s][i][r] = run_workers(&t, s,
						(int)workers[i], ms,
						k == T_CORE, scpu);
		fill->close(fill);
		target_teardown(&t);
		done[k] = true;
	}

	printf("\n== conc (%s): pinned LOOKUP 64 + RELEASE, 1 vs 2 workers (%s), %d CPUs ==\n",
	       opt.env, strcmp(opt.env, "host") ? "TCG guest" : "host CPU", ncpu);
	printf("%-15s %-9s %3s %12s %12s %12s %10s %10s  %s\n", "target", "shape",
	       "wk", "ops/s", "(min", "max)", "p50 ns", "p99 ns",
	       "x of 1 worker (min..max)");
	for (k = 0; k < NR_TARGETS; k++) {
		if (!done[k])
			continue;
		for (s = 0; s < NR_SHAPES; s++)
			for (i = 0; i < nwk; i++) {
				double ops[MAX_ROUNDS], p50[MAX_ROUNDS],
				       p99[MAX_ROUNDS], sc[MAX_ROUNDS];
				bool scaled = i > 0 && workers[0] == 1;

				for (r = 0; r < rounds; r++) {
					ops[r] = res[k][s][i][r].ops_s;
					p50[r] = res[k][s][i][r].p50;
					p99[r] = res[k][s][i][r].p99;
					sc[r] = ops[r] / res[k][s][0][r].ops_s;
				}
				rec_begin("conc");
				rec_str("backend", target_kind_name[k]);
				rec_str("shape", shape_name[s]);
				rec_int("workers", (long long)workers[i]);
				rec_str("mode", k == T_CORE ? "threads" :
					"processes");
				rec_int("cpus", ncpu);
				rec_int("runs", rounds);
				rec_num("ms", ms);
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
					double m = median(sc, rounds);

					printf("  %.2f (%.2f..%.2f)", m, sc[0],
					       sc[rounds - 1]);
					rec_begin("ratio");
					rec_str("name", "conc_scaling");
					rec_str("backend", target_kind_name[k]);
					rec_str("shape", shape_name[s]);
					rec_int("n", (long long)workers[i]);
					rec_num("value", m);
					rec_num("run_min", sc[0]);
					rec_num("run_max", sc[rounds - 1]);
					rec_int("runs", rounds);
					/* the goal is for Beluga's own path */
					rec_str("target", k == T_SHM ? "" : ">=");
					rec_num("goal", 0.9 * workers[i]);
					rec_int("met", k == T_SHM ||
						m >= 0.9 * workers[i]);
					rec_end();
				}
				printf("\n");
			}
	}
	if (done[T_SHM] && ncpu <= 2)
		printf("rpc-shm-polled on %d CPUs: the server owns one CPU, so its clients share the other: two\n"
		       "clients do not get two CPUs, and a client that spins while the other waits costs it a time slice.\n",
		       ncpu);
	out_close();
	return 0;
}
