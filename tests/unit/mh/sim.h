/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A multi-host simulator for the portable multi-host protocol
 * (kmod/core/mh_*.c). N simulated hosts are threads running against one
 * shared buffer that stands for the CXL region, through the protocol's
 * accessor layer (struct bel_mh_mem_ops).
 *
 * Scheduling is deterministic: only the thread holding the baton runs, and
 * at every accessor call (a yield point) a seeded PRNG decides whether to
 * pass the baton and to whom. A simulated clock advances by step_ns per
 * yield and jumps forward when every host sleeps; heartbeats and leases
 * run on it.
 *
 * Non-coherent mode gives each host a private cache of 64-byte lines:
 * a read fetches a line on first use or after an invalidate; a write
 * dirties the line in that cache only (fetching it first unless the whole
 * line is written); a flush writes dirty lines back; an invalidate writes
 * a dirty line back and drops it (CLFLUSH); clean lines may be dropped at
 * random; dirty lines may be written back at random (as the hardware
 * evicts them, at any time). A booting host's cache may start as a
 * snapshot of the region (as if prefetched when it was mapped); a host
 * that rejoins after a fence keeps its cache, dirty lines included. A
 * killed host loses its dirty lines.
 *
 * Every line remembers the life (attach) of its host that dirtied it, so
 * that a write-back can be judged: it must reach the device before that
 * life's lease ends (its last heartbeat + lease), when other hosts may
 * start to act on its death (I6).
 */
#ifndef MH_SIM_H
#define MH_SIM_H

#include <setjmp.h>
#include <stdio.h>
#include "bel_mh_internal.h"

#define SIM_MAX_HOSTS	8
#define SIM_CLIENTS	4

struct sim;
struct sim_host;

typedef void (*sim_fn)(struct sim_host *sh, void *arg);

struct sim_cfg {
	u64 region_size;
	bool coherent;		/* no cache model: direct access */
	bool snapshot;		/* a booting host's cache starts full */
	u32 evict_permille;	/* chance to drop a clean line per access */
	u32 writeback_permille;	/* chance per yield: a dirty line goes back */
	u32 switch_permille;	/* chance to pass the baton per yield */
	u64 step_ns;		/* clock advance per yield */
	u64 seed;
	u64 max_steps;		/* per sim_run(); beyond: livelock */
	u64 max_ns;		/* simulated time per sim_run(), likewise */
};

struct sim_host {
	struct sim *sim;
	int idx;
	u32 host_id;
	pthread_t th;
	bool in_run;		/* has a script in the current run */
	bool done;
	bool killed;		/* crashed (thread unwound) */
	bool attached;		/* mh holds a joined host */
	u64 wake_at;		/* sleeping until */
	u64 stall_until;	/* descheduled until */
	u64 steps;
	u64 next_tick;
	/* Crash or stall triggers. */
	bool kill_pending;
	u64 kill_at_step;	/* 0: none */
	u64 kill_at_clock;	/* 0: none */
	int trig_site;		/* after this site ... */
	u32 trig_nth;		/* ... executed this many times ... */
	u32 trig_hits;
	u64 trig_stall_ns;	/* ... stall that long (0: crash) */
	bool trig_before;	/* ... or just before it ran */
	/* Stall right after the next store into [lo, hi) reached the cache. */
	u64 trig_write_lo, trig_write_hi;
	u64 trig_write_stall_ns;	/* 0: none */
	sigjmp_buf jb;
	/* Cache model. */
	u8 *cdata;
	u8 *cst;		/* per line: 0 invalid, 1 clean, 2 dirty */
	u32 *clife;		/* dirty lines: the life that dirtied them */
	u32 life;		/* attaches so far (the current one's number) */
	bool booted;		/* attached before: a rejoin keeps the cache */
	bool life_over;		/* the current life was dropped or left */
	u64 life_end[64];	/* by life % 64: when its lease ended */
	u64 fetches;		/* lines read from the device */
	u64 writebacks;		/* lines written to the device */
	u64 rescheds;		/* preemption points passed (resched) */
	bool fatal_signal;	/* ops->killed() answers true */
	/* Protocol state and clients. */
	struct bel_mh_host mh;
	struct bel_mh_client cl[SIM_CLIENTS];
	bool cl_live[SIM_CLIENTS];
	sim_fn fn;
	void *arg;
	struct bel_mh_config cfg;
};

struct sim {
	struct sim_cfg cfg;
	u8 *mem;
	u64 nlines;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int running;		/* index of the baton holder, -1: main */
	int nhosts;
	struct sim_host *h[SIM_MAX_HOSTS];
	u64 clock;
	u64 rng;
	u64 steps;		/* in the current run */
	u64 run_start;		/* clock at the start of the run */
	int workers_left;	/* scripts that are not idle loops */
	bool timed_out;
	/* Violations seen by the simulator itself. */
	int violations;
	char first_violation[256];
	/* Optional per-yield checker. */
	void (*check)(struct sim *s, void *arg);
	void *check_arg;
};

struct sim *sim_new(const struct sim_cfg *cfg);
void sim_free(struct sim *s);
u64 sim_rand(struct sim *s);

/* Add a host slot with protocol host id @host_id (cache empty). */
struct sim_host *sim_add_host(struct sim *s, u32 host_id);

/* Give @sh a script for the next run; @idle: not counted as a worker. */
void sim_set(struct sim_host *sh, sim_fn fn, void *arg, bool idle);
/* Run every script set; returns when all returned or were killed. */
void sim_run(struct sim *s);

void sim_violation(struct sim *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Inside scripts ---------------------------------------------------------- */

void sim_yield(struct sim_host *sh);
void sim_sleep(struct sim_host *sh, u64 ns);
/* Tick (maintenance + heartbeat) if a heartbeat period has passed. */
void sim_maybe_tick(struct sim_host *sh);
/* Tick as due and sleep until the clock passed @ns from now. */
void sim_idle(struct sim_host *sh, u64 ns);
/* Idle until every worker script of the run has returned. */
void sim_idle_fn(struct sim_host *sh, void *arg);

/*
 * Boot (fresh cache, snapshot if configured) and attach with sh->cfg.
 * Returns bel_mh_attach()'s result; on success the clients are set up.
 */
int sim_attach(struct sim_host *sh);
/* Clean leave; 0 or the error. Releases the clients first. */
int sim_leave(struct sim_host *sh);
/* Drop a fenced host's state locally (no pool writes), like a crash. */
void sim_drop(struct sim_host *sh);

/* From anywhere: crash @sh at its next yield. */
void sim_kill(struct sim_host *sh);

extern const struct bel_mh_mem_ops sim_ops;

/* Raw device access for checks (no cache, no yield). */
static inline void sim_dev_read(struct sim *s, u64 off, void *dst, u32 len)
{
	memcpy(dst, s->mem + off, len);
}

static inline bool sim_effectively_fenced(struct sim_host *sh)
{
	struct bel_mh_host *h = &sh->mh;

	if (!sh->attached || sh->killed)
		return true;
	return h->fenced ||
	       (h->leased && sh->sim->clock - h->last_hb > h->fence_ns);
}

#endif /* MH_SIM_H */
