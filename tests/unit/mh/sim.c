// SPDX-License-Identifier: GPL-2.0
/*
 * The multi-host simulator: deterministic baton scheduler, simulated
 * clock, per-host non-coherent cache model, crash and stall injection.
 * See sim.h.
 */
#include <stdarg.h>
#include <pthread.h>
#include "sim.h"

/* The one disabled flush/invalidate site (bel_mh.h, BEL_MH_TESTING). */
int bel_mh_site_off;

static pthread_cond_t sim_cv[SIM_MAX_HOSTS + 1];
static bool sim_cv_ready;

static pthread_cond_t *sim_cv_of(int idx)
{
	return &sim_cv[idx < 0 ? SIM_MAX_HOSTS : idx];
}

struct sim *sim_new(const struct sim_cfg *cfg)
{
	struct sim *s = calloc(1, sizeof(*s));
	int i;

	if (!s)
		abort();
	s->cfg = *cfg;
	if (!s->cfg.step_ns)
		s->cfg.step_ns = 1000;
	if (!s->cfg.max_steps)
		s->cfg.max_steps = 2000000;
	if (!s->cfg.max_ns)
		s->cfg.max_ns = 2000000000ULL;
	s->mem = calloc(1, cfg->region_size);
	if (!s->mem)
		abort();
	s->nlines = cfg->region_size / BEL_MH_LINE;
	pthread_mutex_init(&s->mu, NULL);
	if (!sim_cv_ready) {
		for (i = 0; i <= SIM_MAX_HOSTS; i++)
			pthread_cond_init(&sim_cv[i], NULL);
		sim_cv_ready = true;
	}
	s->running = -1;
	s->rng = cfg->seed * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
	s->clock = 1000000000ULL;	/* clocks need not start at 0 */
	return s;
}

static void sim_free_host_state(struct sim_host *sh)
{
	struct bel_mh_host *h = &sh->mh;
	int i;

	/* Crash: free the DRAM state without the locks the host may hold. */
	bel_mh_free_dram(h);
	for (i = 0; i < SIM_CLIENTS; i++) {
		bel_mh_client_forget(&sh->cl[i]);
		sh->cl_live[i] = false;
	}
}

void sim_free(struct sim *s)
{
	int i, j;

	for (i = 0; i < s->nhosts; i++) {
		struct sim_host *sh = s->h[i];

		if (sh->attached) {
			for (j = 0; j < SIM_CLIENTS; j++)
				if (sh->cl_live[j])
					bel_mh_client_release(&sh->cl[j]);
			bel_mh_destroy(&sh->mh);
		} else {
			sim_free_host_state(sh);
		}
		free(sh->cdata);
		free(sh->cst);
		free(sh->clife);
		free(sh);
	}
	pthread_mutex_destroy(&s->mu);
	free(s->mem);
	free(s);
}

u64 sim_rand(struct sim *s)
{
	/* xorshift64* */
	s->rng ^= s->rng >> 12;
	s->rng ^= s->rng << 25;
	s->rng ^= s->rng >> 27;
	return s->rng * 0x2545f4914f6cdd1dULL;
}

void sim_violation(struct sim *s, const char *fmt, ...)
{
	va_list ap;

	if (getenv("MH_VERBOSE")) {
		va_start(ap, fmt);
		fprintf(stderr, "# violation: ");
		vfprintf(stderr, fmt, ap);
		fprintf(stderr, "\n");
		va_end(ap);
	}
	if (!s->violations++) {
		va_start(ap, fmt);
		vsnprintf(s->first_violation, sizeof(s->first_violation), fmt,
			  ap);
		va_end(ap);
	}
}

struct sim_host *sim_add_host(struct sim *s, u32 host_id)
{
	struct sim_host *sh = calloc(1, sizeof(*sh));

	if (!sh || s->nhosts >= SIM_MAX_HOSTS)
		abort();
	sh->sim = s;
	sh->idx = s->nhosts;
	sh->host_id = host_id;
	sh->cdata = malloc(s->cfg.region_size);
	sh->cst = calloc(1, s->nlines);
	sh->clife = calloc(s->nlines, sizeof(*sh->clife));
	if (!sh->cdata || !sh->cst || !sh->clife)
		abort();
	sh->cfg.host_id = host_id;
	snprintf(sh->cfg.name, sizeof(sh->cfg.name), "host%u", host_id);
	s->h[s->nhosts++] = sh;
	return sh;
}

static bool sim_idle_flag[SIM_MAX_HOSTS];

void sim_set(struct sim_host *sh, sim_fn fn, void *arg, bool idle)
{
	sh->fn = fn;
	sh->arg = arg;
	sh->in_run = true;
	sh->done = false;
	sim_idle_flag[sh->idx] = idle;
}

/* --- scheduling ------------------------------------------------------------ */

static int sim_pick_locked(struct sim *s)
{
	for (;;) {
		int cand[SIM_MAX_HOSTS];
		u64 min_wake = UINT64_MAX;
		int n = 0, i;

		for (i = 0; i < s->nhosts; i++) {
			struct sim_host *sh = s->h[i];
			u64 t;

			if (!sh->in_run || sh->done)
				continue;
			t = sh->wake_at > sh->stall_until ? sh->wake_at :
			    sh->stall_until;
			if (sh->kill_pending || t <= s->clock)
				cand[n++] = i;
			else if (t < min_wake)
				min_wake = t;
		}
		if (n)
			return cand[sim_rand(s) % n];
		if (min_wake == UINT64_MAX)
			return -1;
		s->clock = min_wake;
	}
}

static void sim_check_kill(struct sim_host *sh)
{
	if (!sh->kill_pending)
		return;
	sh->kill_pending = false;
	sh->killed = true;
	sh->attached = false;
	/* A crash loses every dirty line of the cache. */
	memset(sh->cst, 0, sh->sim->nlines);
	siglongjmp(sh->jb, 1);
}

/* Pass the baton to whoever the scheduler picks (maybe ourselves). */
static void sim_switch(struct sim_host *sh)
{
	struct sim *s = sh->sim;
	int next;

	pthread_mutex_lock(&s->mu);
	/* Outside a run (sim_free() releasing clients): nobody to switch to. */
	if (s->running != sh->idx) {
		pthread_mutex_unlock(&s->mu);
		return;
	}
	next = sim_pick_locked(s);
	if (next != sh->idx) {
		s->running = next;
		pthread_cond_signal(sim_cv_of(next));
		while (s->running != sh->idx)
			pthread_cond_wait(sim_cv_of(sh->idx), &s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	sim_check_kill(sh);
}

void sim_kill(struct sim_host *sh)
{
	sh->kill_pending = true;
}

static void sim_writeback(struct sim_host *sh, u64 l);

/* The hardware writes one dirty line of some host back, at random. */
static void sim_spontaneous_writeback(struct sim *s)
{
	struct sim_host *x = s->h[sim_rand(s) % s->nhosts];
	u64 start = sim_rand(s) % s->nlines;
	u8 *p;

	if (x->killed || s->cfg.coherent)
		return;
	p = memchr(x->cst + start, 2, s->nlines - start);
	if (!p)
		p = memchr(x->cst, 2, start);
	if (p)
		sim_writeback(x, (u64)(p - x->cst));
}

void sim_yield(struct sim_host *sh)
{
	struct sim *s = sh->sim;

	/* Outside a run (sim_free() releasing clients): no step at all. */
	if (s->running != sh->idx)
		return;
	if (s->cfg.writeback_permille &&
	    sim_rand(s) % 1000 < s->cfg.writeback_permille)
		sim_spontaneous_writeback(s);
	s->clock += s->cfg.step_ns;
	s->steps++;
	sh->steps++;
	if (s->check)
		s->check(s, s->check_arg);
	if ((s->steps > s->cfg.max_steps ||
	     s->clock - s->run_start > s->cfg.max_ns) && !s->timed_out) {
		int i;

		s->timed_out = true;
		sim_violation(s, "run exceeded %llu steps or %llu ms (livelock?)",
			      (unsigned long long)s->cfg.max_steps,
			      (unsigned long long)s->cfg.max_ns / 1000000);
		for (i = 0; i < s->nhosts; i++)
			if (s->h[i]->in_run && !s->h[i]->done)
				s->h[i]->kill_pending = true;
	}
	if ((sh->kill_at_step && sh->steps >= sh->kill_at_step) ||
	    (sh->kill_at_clock && s->clock >= sh->kill_at_clock))
		sh->kill_pending = true;
	sim_check_kill(sh);
	if (sh->stall_until > s->clock ||
	    sim_rand(s) % 1000 < s->cfg.switch_permille)
		sim_switch(sh);
}

void sim_sleep(struct sim_host *sh, u64 ns)
{
	sh->wake_at = sh->sim->clock + (ns ? ns : 1);
	sim_switch(sh);
}

static void *sim_thread(void *arg)
{
	struct sim_host *sh = arg;
	struct sim *s = sh->sim;

	pthread_mutex_lock(&s->mu);
	while (s->running != sh->idx)
		pthread_cond_wait(sim_cv_of(sh->idx), &s->mu);
	pthread_mutex_unlock(&s->mu);

	if (!sigsetjmp(sh->jb, 0)) {
		sim_check_kill(sh);
		sh->fn(sh, sh->arg);
	} else {
		sim_free_host_state(sh);
	}

	pthread_mutex_lock(&s->mu);
	sh->done = true;
	if (!sim_idle_flag[sh->idx])
		s->workers_left--;
	s->running = sim_pick_locked(s);
	pthread_cond_signal(sim_cv_of(s->running));
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

void sim_run(struct sim *s)
{
	int i;

	s->steps = 0;
	s->run_start = s->clock;
	s->timed_out = false;
	s->workers_left = 0;
	for (i = 0; i < s->nhosts; i++) {
		struct sim_host *sh = s->h[i];

		if (!sh->in_run)
			continue;
		if (!sim_idle_flag[i])
			s->workers_left++;
		if (pthread_create(&sh->th, NULL, sim_thread, sh))
			abort();
	}
	pthread_mutex_lock(&s->mu);
	s->running = sim_pick_locked(s);
	if (s->running >= 0) {
		pthread_cond_signal(sim_cv_of(s->running));
		while (s->running != -1)
			pthread_cond_wait(sim_cv_of(-1), &s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	for (i = 0; i < s->nhosts; i++) {
		struct sim_host *sh = s->h[i];

		if (!sh->in_run)
			continue;
		pthread_join(sh->th, NULL);
		sh->in_run = false;
		sh->fn = NULL;
		sh->wake_at = 0;
		sh->stall_until = 0;
		sh->kill_at_step = 0;
		sh->kill_at_clock = 0;
		sh->trig_site = 0;
		sh->trig_before = false;
	}
}

/* --- the accessor layer over the cache model --------------------------------- */

static void sim_bounds(struct sim_host *sh, u64 off, u64 len)
{
	if (off + len > sh->sim->cfg.region_size || off + len < off) {
		fprintf(stderr, "# access out of the region: %llu+%llu\n",
			(unsigned long long)off, (unsigned long long)len);
		abort();
	}
}

static void sim_fetch(struct sim_host *sh, u64 l)
{
	memcpy(sh->cdata + l * BEL_MH_LINE, sh->sim->mem + l * BEL_MH_LINE,
	       BEL_MH_LINE);
	sh->cst[l] = 1;
	sh->fetches++;
}

/* A store into the cache (or, coherent, the device): never once fenced. */
static void sim_store_check(struct sim_host *sh)
{
	struct bel_mh_host *h = &sh->mh;

	if (h->leased && h->fenced)
		sim_violation(sh->sim,
			      "host %u stored to the pool while fenced",
			      sh->host_id);
}

/* When the lease of the current life ends, as the other hosts may see it. */
static u64 sim_lease_end(struct sim_host *sh)
{
	struct bel_mh_host *h = &sh->mh;

	if (!h->leased)
		return UINT64_MAX;
	return h->last_hb + h->geo.lease_ns;
}

/* The life of @sh ends now (a drop after a fence, or a leave). */
static void sim_end_life(struct sim_host *sh)
{
	sh->life_end[sh->life % 64] = sim_lease_end(sh);
	sh->life_over = true;
}

static void sim_writeback(struct sim_host *sh, u64 l)
{
	u32 life = sh->clife[l];
	u64 end = life == sh->life && !sh->life_over ? sim_lease_end(sh) :
		  sh->life_end[life % 64];

	if (sh->sim->clock > end)
		sim_violation(sh->sim,
			      "host %u wrote line %llu back after the lease of the life that dirtied it (life %u, %llu us late)",
			      sh->host_id, (unsigned long long)l, life,
			      (unsigned long long)(sh->sim->clock - end) / 1000);
	memcpy(sh->sim->mem + l * BEL_MH_LINE, sh->cdata + l * BEL_MH_LINE,
	       BEL_MH_LINE);
	sh->cst[l] = 1;
	sh->writebacks++;
}

static void sim_trigger(struct sim_host *sh, int site)
{
	if (!sh->trig_site || site != sh->trig_site ||
	    ++sh->trig_hits != sh->trig_nth)
		return;
	if (sh->trig_stall_ns) {
		sh->stall_until = sh->sim->clock + sh->trig_stall_ns;
		sim_switch(sh);
	} else {
		sh->kill_pending = true;
		sim_check_kill(sh);
	}
}

static void sim_op_read(void *priv, u64 off, void *dst, u32 len)
{
	struct sim_host *sh = priv;
	struct sim *s = sh->sim;
	u64 l;

	sim_yield(sh);
	sim_bounds(sh, off, len);
	if (s->cfg.coherent) {
		memcpy(dst, s->mem + off, len);
		sh->fetches += bel_mh_nlines(off, len);
		return;
	}
	for (l = off / BEL_MH_LINE; l <= (off + len - 1) / BEL_MH_LINE; l++) {
		if (sh->cst[l] == 1 && s->cfg.evict_permille &&
		    sim_rand(s) % 1000 < s->cfg.evict_permille)
			sh->cst[l] = 0;
		if (!sh->cst[l])
			sim_fetch(sh, l);
	}
	memcpy(dst, sh->cdata + off, len);
}

static void sim_op_write(void *priv, u64 off, const void *src, u32 len)
{
	struct sim_host *sh = priv;
	struct sim *s = sh->sim;
	u64 l;

	sim_yield(sh);
	sim_bounds(sh, off, len);
	sim_store_check(sh);
	if (s->cfg.coherent) {
		memcpy(s->mem + off, src, len);
		sh->writebacks += bel_mh_nlines(off, len);
	} else {
		for (l = off / BEL_MH_LINE; l <= (off + len - 1) / BEL_MH_LINE;
		     l++) {
			bool whole = off <= l * BEL_MH_LINE &&
				     off + len >= (l + 1) * BEL_MH_LINE;

			if (!sh->cst[l] && !whole)
				sim_fetch(sh, l);
			sh->cst[l] = 2;
			sh->clife[l] = sh->life;
		}
		memcpy(sh->cdata + off, src, len);
	}
	/* An interrupt, an SMI or a preempted vCPU right after the store. */
	if (sh->trig_write_stall_ns && off >= sh->trig_write_lo &&
	    off < sh->trig_write_hi) {
		sh->stall_until = s->clock + sh->trig_write_stall_ns;
		sh->trig_write_stall_ns = 0;
		sim_switch(sh);
	}
}

static void sim_op_flush(void *priv, int site, u64 off, u64 len)
{
	struct sim_host *sh = priv;
	struct sim *s = sh->sim;
	u64 l;

	sim_yield(sh);
	sim_bounds(sh, off, len);
	if (sh->trig_before)
		sim_trigger(sh, site);
	if (!s->cfg.coherent)
		for (l = off / BEL_MH_LINE; l <= (off + len - 1) / BEL_MH_LINE;
		     l++)
			if (sh->cst[l] == 2)
				sim_writeback(sh, l);
	if (!sh->trig_before)
		sim_trigger(sh, site);
}

static void sim_op_inval(void *priv, int site, u64 off, u64 len)
{
	struct sim_host *sh = priv;
	struct sim *s = sh->sim;
	u64 l;

	sim_yield(sh);
	sim_bounds(sh, off, len);
	if (sh->trig_before)
		sim_trigger(sh, site);
	if (!s->cfg.coherent)
		for (l = off / BEL_MH_LINE; l <= (off + len - 1) / BEL_MH_LINE;
		     l++) {
			/*
			 * CLFLUSH would write the line back, but a protocol
			 * that stores without flushing and lets a later
			 * invalidate publish the store by accident is broken.
			 */
			if (sh->cst[l] == 2) {
				sim_violation(s, "host %u invalidated line %llu holding an unflushed store",
					      sh->host_id,
					      (unsigned long long)l);
				sim_writeback(sh, l);
			}
			sh->cst[l] = 0;
		}
	if (!sh->trig_before)
		sim_trigger(sh, site);
}

static void sim_op_fence(void *priv)
{
	sim_yield(priv);
}

static u64 sim_op_now(void *priv)
{
	struct sim_host *sh = priv;

	return sh->sim->clock;
}

/*
 * The kernel's heartbeat work runs beside an operation that sleeps or
 * reschedules (the heartbeat takes only the record spinlock).
 */
static void sim_beside(struct sim_host *sh)
{
	if (sh->mh.joined && sh->sim->clock >= sh->next_tick) {
		sh->next_tick = sh->sim->clock + sh->mh.geo.heartbeat_ns;
		bel_mh_heartbeat(&sh->mh);
	}
}

static void sim_op_relax(void *priv)
{
	struct sim_host *sh = priv;

	sim_beside(sh);
	sim_sleep(sh, 20000);
}

static void sim_op_resched(void *priv)
{
	struct sim_host *sh = priv;

	sh->rescheds++;
	sim_beside(sh);
	sim_yield(sh);
}

static bool sim_op_killed(void *priv)
{
	struct sim_host *sh = priv;

	return sh->fatal_signal;
}

const struct bel_mh_mem_ops sim_ops = {
	.read = sim_op_read,
	.write = sim_op_write,
	.flush = sim_op_flush,
	.inval = sim_op_inval,
	.fence = sim_op_fence,
	.now_ns = sim_op_now,
	.relax = sim_op_relax,
	.resched = sim_op_resched,
	.killed = sim_op_killed,
};

/* --- host lifecycle helpers --------------------------------------------------- */

void sim_maybe_tick(struct sim_host *sh)
{
	if (!sh->attached || sh->sim->clock < sh->next_tick)
		return;
	sh->next_tick = sh->sim->clock + sh->mh.geo.heartbeat_ns;
	bel_mh_tick(&sh->mh);
}

void sim_idle(struct sim_host *sh, u64 ns)
{
	u64 end = sh->sim->clock + ns;

	while (sh->sim->clock < end) {
		u64 until = end;

		sim_maybe_tick(sh);
		if (sh->attached && sh->next_tick < until)
			until = sh->next_tick;
		sim_sleep(sh, until > sh->sim->clock ?
			  until - sh->sim->clock : 1);
	}
}

void sim_idle_fn(struct sim_host *sh, void *arg)
{
	(void)arg;
	while (sh->sim->workers_left > 0) {
		sim_maybe_tick(sh);
		sim_sleep(sh, sh->attached ? sh->mh.geo.heartbeat_ns / 4 :
			  250000);
	}
}

int sim_attach(struct sim_host *sh)
{
	struct sim *s = sh->sim;
	int ret, i;

	sim_free_host_state(sh);
	if (!sh->booted || sh->killed) {
		/* Boot: lines may be prefetched since the region was mapped. */
		if (s->cfg.snapshot && !s->cfg.coherent) {
			memcpy(sh->cdata, s->mem, s->cfg.region_size);
			memset(sh->cst, 1, s->nlines);
		} else {
			memset(sh->cst, 0, s->nlines);
		}
	}
	/* Else a rejoin on a running machine: the cache stays as it is. */
	sh->booted = true;
	sh->life++;
	sh->life_over = false;
	sh->killed = false;
	sh->trig_hits = 0;
	ret = bel_mh_attach(&sh->mh, &sim_ops, sh, s->cfg.region_size,
			    &sh->cfg);
	if (ret)
		return ret;
	sh->attached = true;
	sh->next_tick = s->clock + sh->mh.geo.heartbeat_ns;
	for (i = 0; i < SIM_CLIENTS; i++) {
		bel_mh_client_init(&sh->mh, &sh->cl[i]);
		sh->cl_live[i] = true;
	}
	return 0;
}

static void sim_release_clients(struct sim_host *sh)
{
	int i;

	for (i = 0; i < SIM_CLIENTS; i++)
		if (sh->cl_live[i]) {
			bel_mh_client_release(&sh->cl[i]);
			sh->cl_live[i] = false;
		}
}

int sim_leave(struct sim_host *sh)
{
	int ret;

	sim_release_clients(sh);
	ret = bel_mh_leave(&sh->mh);
	if (ret)
		return ret;
	sim_end_life(sh);
	bel_mh_destroy(&sh->mh);
	sh->attached = false;
	return 0;
}

void sim_drop(struct sim_host *sh)
{
	sim_release_clients(sh);
	sim_end_life(sh);
	bel_mh_destroy(&sh->mh);
	sh->attached = false;
}
