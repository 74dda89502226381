// SPDX-License-Identifier: GPL-2.0
/*
 * The multi-host cost model, measured: shared cache lines read (and how
 * many of them after an invalidate, i.e. from the device), lines written
 * and flushed, and fences, per LOOKUP, PIN, RELEASE, PUBLISH, ALLOC and
 * maintenance tick, on the host that owns the key's partition and on one
 * that does not, for 1, 2, 4 and 8 hosts on a pool of 8 partitions.
 *
 * Counts come from the accessor layer (struct bel_mh_counters) and the
 * simulator's cache model (device fetches and write-backs, warm caches, no
 * random eviction). Prints a Markdown table.
 */
#include "world.h"

#define CHAIN	16

struct cost {
	double reads, invals, writes, flushes, fences, fetches, wbs;
};

struct snap {
	struct bel_mh_counters c;
	u64 fetches, wbs;
};

static void take(struct sim_host *sh, struct snap *s)
{
	s->c = sh->mh.cnt;
	s->fetches = sh->fetches;
	s->wbs = sh->writebacks;
}

static void diff(struct sim_host *sh, const struct snap *a, u32 n,
		 struct cost *out)
{
	struct snap b;

	take(sh, &b);
	out->reads = (double)(b.c.reads - a->c.reads) / n;
	out->invals = (double)(b.c.invals - a->c.invals) / n;
	out->writes = (double)(b.c.writes - a->c.writes) / n;
	out->flushes = (double)(b.c.flushes - a->c.flushes) / n;
	out->fences = (double)(b.c.fences - a->c.fences) / n;
	out->fetches = (double)(b.fetches - a->fetches) / n;
	out->wbs = (double)(b.wbs - a->wbs) / n;
}

enum op {
	OP_LOOKUP,	/* count-only, keys of a chain in order */
	OP_MISS,	/* count-only, absent keys */
	OP_PIN,		/* LOOKUP + PIN of a chain */
	OP_RELEASE,
	OP_PUBLISH,	/* ALLOC + PUBLISH of new keys */
	OP_ALLOC,	/* ALLOC + FREE, free blocks available */
	OP_EVICT,	/* ALLOC that must evict, + FREE */
	OP_TICK,
	NR_OPS
};

static const char *const op_names[NR_OPS] = {
	"LOOKUP hit (chain)", "LOOKUP miss", "LOOKUP+PIN (first pin)",
	"RELEASE (last pin)", "PUBLISH (metadata)", "ALLOC, free block",
	"ALLOC with eviction", "tick (observe+heartbeat)",
};

struct arg {
	struct world *w;
	enum op op;
	u32 base;		/* first key of the chain */
	struct cost cost;
};

static void s_fill(struct sim_host *sh, void *p)
{
	struct arg *a = p;
	u32 i;

	for (i = 0; i < CHAIN; i++) {
		sim_maybe_tick(sh);
		w_put(a->w, sh, 0, a->base + i, NULL);
	}
}

static void s_measure(struct sim_host *sh, void *p)
{
	struct arg *a = p;
	u64 offs[CHAIN];
	u32 i, n = CHAIN, hits;
	struct beluga_key keys[CHAIN];
	struct snap s0;

	for (i = 0; i < CHAIN; i++)
		keys[i] = w_key(a->base + i);
	/* Warm the caches once, like a long-running host. */
	bel_mh_lookup(&sh->cl[0], W_NS, CHAIN, keys, false, NULL, &hits);
	take(sh, &s0);
	switch (a->op) {
	case OP_LOOKUP:
		bel_mh_lookup(&sh->cl[0], W_NS, CHAIN, keys, false, NULL,
			      &hits);
		break;
	case OP_MISS:
		for (i = 0; i < CHAIN; i++) {
			struct beluga_key k = w_key(900000 + i);

			bel_mh_lookup(&sh->cl[0], W_NS, 1, &k, false, NULL,
				      &hits);
		}
		break;
	case OP_PIN:
	case OP_RELEASE:
		bel_mh_lookup(&sh->cl[0], W_NS, CHAIN, keys, true, offs,
			      &hits);
		if (a->op == OP_RELEASE) {
			take(sh, &s0);
			bel_mh_release(&sh->cl[0], hits, offs);
		} else {
			diff(sh, &s0, n, &a->cost);
			bel_mh_release(&sh->cl[0], hits, offs);
			return;
		}
		break;
	case OP_PUBLISH: {
		struct cost sum = { 0 }, one;

		/* The metadata of PUBLISH only: payload written before. */
		for (i = 0; i < CHAIN; i++) {
			u32 b;

			if (w_alloc1(a->w, sh, 1, &b))
				break;
			w_write(a->w, sh, b, 40000 + a->base + i);
			take(sh, &s0);
			w_publish(a->w, sh, 1, 40000 + a->base + i, b);
			diff(sh, &s0, 1, &one);
			sum.reads += one.reads / CHAIN;
			sum.invals += one.invals / CHAIN;
			sum.writes += one.writes / CHAIN;
			sum.flushes += one.flushes / CHAIN;
			sum.fences += one.fences / CHAIN;
			sum.fetches += one.fetches / CHAIN;
			sum.wbs += one.wbs / CHAIN;
		}
		a->cost = sum;
		return;
	}
	case OP_ALLOC:
		for (i = 0; i < CHAIN; i++) {
			bel_mh_alloc(&sh->cl[2], 1, &offs[0], NULL, NULL);
			bel_mh_free(&sh->cl[2], 1, &offs[0]);
		}
		break;
	case OP_EVICT: {
		u32 have = 0, j;
		u64 *got = calloc(W_MAXB, sizeof(*got));

		/* Publish until nothing is free, then measure evictions. */
		for (j = 0; j < W_MAXB; j++) {
			u32 p, free = 0;

			for (p = 0; p < sh->mh.geo.max_hosts; p++)
				if (sh->mh.part[p].owned)
					free += sh->mh.part[p].nr_free;
			if (!free)
				break;
			sim_maybe_tick(sh);
			w_put(a->w, sh, 1, 45000 + j, NULL);
		}
		take(sh, &s0);
		for (i = 0; i < CHAIN; i++)
			if (bel_mh_alloc(&sh->cl[2], 1, &got[have], NULL, NULL) == 0)
				have++;
		diff(sh, &s0, have ? have : 1, &a->cost);
		bel_mh_free(&sh->cl[2], have, got);
		free(got);
		return;
	}
	case OP_TICK:
		n = 1;
		sh->next_tick = 0;
		sim_maybe_tick(sh);
		break;
	default:
		break;
	}
	diff(sh, &s0, n, &a->cost);
}

static void row(const char *who, const char *op, const struct cost *c)
{
	/* 500 ns per device line (read after invalidate, or write-back). */
	double us = (c->fetches + c->wbs) * 0.5 + c->fences * 0.05;

	printf("| %-8s | %-26s | %5.2f | %5.2f | %5.2f | %5.2f | %5.2f | %5.2f | %6.2f |\n",
	       who, op, c->reads, c->invals, c->fetches, c->writes,
	       c->flushes, c->fences, us);
}

int main(void)
{
	static const int hosts[] = { 1, 2, 4, 8 };
	u32 ids[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
	size_t t;
	int op;

	g_w_hosts = 8;
	g_w_region = 2U << 20;		/* 8 partitions of ~60 blocks */
	g_evict = 0;
	g_switch = 0;
	g_snapshot = false;

	printf("Per operation (per key for LOOKUP/PIN/RELEASE), pool of 8 partitions.\n");
	printf("reads: lines read; inval: of them invalidated first; fetch: lines\n");
	printf("that came from the device (cache model); w/fl: lines written/flushed;\n");
	printf("fence: fences; est: device lines x 500 ns + fences x 50 ns.\n\n");
	for (t = 0; t < sizeof(hosts) / sizeof(hosts[0]); t++) {
		int n = hosts[t];

		printf("\n%d host%s (host 0 owns %s)\n\n", n, n > 1 ? "s" : "",
		       n == 1 ? "all 8 partitions" : "its home partition and some orphans");
		printf("| host     | operation                  | reads | inval | fetch |   w   |  fl   | fence | est us |\n");
		printf("|----------|----------------------------|-------|-------|-------|-------|-------|-------|--------|\n");
		for (op = 0; op < NR_OPS; op++) {
			int who;

			for (who = 0; who < (n > 1 ? 2 : 1); who++) {
				struct world *w = w_new(n, ids, 1000 + op);
				struct arg a = { .w = w, .op = op, .base = 1000 };
				int i, r;

				for (i = 0; i < n; i++) {
					r = -1;
					w_run1(w, i, s_attach, &r);
				}
				w_settle(w, 3 * W_MS);
				/* The chain is host 0's: host 1 is the non-owner. */
				w_run1(w, 0, s_fill, &a);
				w_run1(w, who, s_measure, &a);
				if (op == OP_PUBLISH || op == OP_ALLOC ||
				    op == OP_EVICT || op == OP_TICK)
					row(who ? "host 1" : "host 0",
					    op_names[op], &a.cost);
				else
					row(who ? "non-own" : "owner",
					    op_names[op], &a.cost);
				if (w->s->violations)
					printf("# violation: %s\n",
					       w->s->first_violation);
				w_free(w);
			}
		}
	}
	return 0;
}
