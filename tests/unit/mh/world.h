/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Test world for the multi-host scenarios: a simulator, its hosts, and an
 * oracle that records what the protocol promised (allocations, publishes,
 * pins, payload bytes) and checks every result against it and against the
 * device contents. See test_mh.c.
 */
#ifndef MH_WORLD_H
#define MH_WORLD_H

#include "sim.h"

#define W_NS		42ULL
#define W_BS		4096U
#define W_HOSTS		4U		/* max_hosts = partitions */
#define W_REGION	(300U * 1024U)	/* 64 blocks of 4 KiB */
#define W_HB_MS		1U
#define W_LEASE_MS	8U
#define W_MS		1000000ULL
#define W_LEASE		(W_LEASE_MS * W_MS)
#define W_MAXB		1024
#define W_MAXK		65536

struct world {
	struct sim *s;
	struct sim_host *h[SIM_MAX_HOSTS];
	int n;
	u64 seed;
	struct bel_mh_geo geo;	/* of the pool, once formatted */
	/* Oracle, by block and key id (key ids < W_MAXK). */
	u8 bstate[W_MAXB];	/* 0 free/unknown, 1 allocated, 2 published */
	int8_t bhost[W_MAXB];	/* allocated: sim index */
	u32 bkey[W_MAXB];
	s32 kblock[W_MAXK];	/* -1: not published */
	u16 pins[SIM_MAX_HOSTS][W_MAXB];
	/* Retired (its owner served the memory error): never handed out. */
	u8 bretired[W_MAXB];
};

/* Global options of the test binary. */
extern bool g_coherent;
extern u32 g_w_hosts;		/* max_hosts of new pools */
extern u64 g_w_region;		/* region size of new worlds */
extern u32 g_switch;		/* scheduler switch chance, per mille */
extern bool g_snapshot;		/* booting caches start full */
extern u32 g_evict;
extern u32 g_writeback;		/* spontaneous write-backs, per mille */
extern int g_scale;
extern u64 g_seed;

struct world *w_new(int n, const u32 *ids, u64 seed);
void w_free(struct world *w);
/* Add one more sim host (e.g. a second machine with a duplicate id). */
struct sim_host *w_add(struct world *w, u32 id);

/* Runs: @fn on host @i, every other attached host ticks until it ends. */
void w_run1(struct world *w, int i, sim_fn fn, void *arg);
/* @fns[i] (may be NULL: idle if attached) on every host. */
void w_run(struct world *w, sim_fn *fns, void **args);
/* Every attached host ticks for @ns. */
void w_settle(struct world *w, u64 ns);

/* Scripts. */
void s_attach(struct sim_host *sh, void *arg);	/* arg: int *ret */
void s_leave(struct sim_host *sh, void *arg);	/* arg: int *ret */

/*
 * The core names blocks by their offset in the pool's mapping (map_base 0
 * here), the oracle by block number: the core's own conversions.
 */
static inline u64 w_off(struct sim_host *sh, u32 b)
{
	return bel_mh_offset_of(&sh->mh, b);
}

static inline u32 w_blk(struct sim_host *sh, u64 off)
{
	u32 b;

	return bel_mh_block_at(&sh->mh, off, &b) ? BEL_MH_NONE : b;
}

/* Operations with oracle checks (inside scripts). */
struct beluga_key w_key(u32 k);
void w_pattern(u32 k, u32 writer, u8 *buf);
int w_alloc1(struct world *w, struct sim_host *sh, int ci, u32 *b);
/* @n (at most 8) blocks into @b, naming what it evicted in @ev, *@nr_ev. */
int w_alloc_evicting(struct world *w, struct sim_host *sh, int ci, u32 n,
		     u32 *b, struct beluga_evicted_key *ev, u32 *nr_ev);
void w_write(struct world *w, struct sim_host *sh, u32 b, u32 k);
s32 w_publish(struct world *w, struct sim_host *sh, int ci, u32 k, u32 b);
/* Alloc + write + publish; BELUGA_PUBLISH_* or -errno. */
s32 w_put(struct world *w, struct sim_host *sh, int ci, u32 k, u32 *b);
/* Lookup + pin of one key; hit: verified (device, oracle, bytes). */
bool w_pin(struct world *w, struct sim_host *sh, int ci, u32 k, u32 *b);
/* Re-read a pinned block and check its bytes again. */
void w_reverify(struct world *w, struct sim_host *sh, u32 k, u32 b);
void w_release(struct world *w, struct sim_host *sh, int ci, u32 b);
/* Count-only lookup of a chain; returns hits. */
u32 w_probe(struct world *w, struct sim_host *sh, const u32 *ks, u32 n);
void w_free_block(struct world *w, struct sim_host *sh, int ci, u32 b);
/* Allocate until -ENOSPC (no publish); returns the count, frees them. */
u32 w_alloc_all(struct world *w, struct sim_host *sh, int ci);

/* Device inspection. */
int w_dev_published(struct world *w, u32 k, u32 *block, u32 *writer);
/* State of block @b's index entry in the device. */
u32 w_dev_ent_state(struct world *w, u32 b);

/* Quiescence checks: ownership, accounting, device index. */
void w_final_check(struct world *w);
/* Sim index owning partition p (live hosts), -1 none, -2 several. */
int w_owner(struct world *w, u32 p);
bool w_live(struct world *w, int idx);

#endif /* MH_WORLD_H */
