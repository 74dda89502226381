// SPDX-License-Identifier: GPL-2.0
/*
 * The second baseline, "rpc-shm-polled": the metadata server the way the
 * Beluga paper's own design reaches it (CXL-RPC: request and reply slots in
 * shared memory, a server that spin-polls them, no system call on the fast
 * path), here over ordinary shared memory between processes.
 *
 * It runs the same portable core as every other target, with the same
 * batching (one request carries the whole key or offset array) and the same
 * ownership (each slot is a client: its allocations and pins die with it).
 * The server is one thread on a CPU of its own that polls every slot in
 * turn; that CPU does nothing else, as the paper's metadata server burns a
 * core. A client owns one slot while it is open and spins (PAUSE) for the
 * reply. Against rpc-unix-blocking this removes the socket system calls and
 * the two context switches; what is left is the core's work plus two cache
 * line transfers each way and the copies of the arrays through the slot.
 *
 * The shared memory is a memfd that the server, a fresh image (fork +
 * exec, like the AF_UNIX server), maps by its descriptor number.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "bel_core.h"
#include "core_publish.h"

enum {
	SHM_PING = 1,
	SHM_LOOKUP,
	SHM_ALLOC,
	SHM_PUBLISH,
	SHM_RELEASE,
	SHM_FREE,
	SHM_CLOSE,	/* drop the slot's client (its pins and blocks) */
};

/*
 * One client's slot. req and resp sit on cache lines of their own, so that
 * the client's write of a request and the server's write of a reply each
 * move one line; the arrays follow.
 */
struct shm_slot {
	_Alignas(64) _Atomic u32 req;	/* client: sequence of the request */
	_Atomic u32 in_use;		/* claimed by an open client */
	u32 op, count, flags;
	u64 ns;
	_Alignas(64) _Atomic u32 resp;	/* server: sequence answered */
	s32 ret;
	u32 hits, a, b;
	_Alignas(64) struct beluga_key keys[BELUGA_MAX_BATCH];
	u64 offs[BELUGA_MAX_BATCH];
};

struct shm_area {
	_Atomic u32 ready;		/* the server polls */
	_Atomic u32 quit;
	struct shm_slot slot[SHM_MAX_CLIENTS];
};

static void pin_self(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* ---- the server ------------------------------------------------------ */

static void shm_serve(struct shm_slot *s, struct bel_client **cl,
		      struct bel_pool *pool, struct beluga_publish_item *res)
{
	u32 failed = 0;

	if (!*cl) {
		*cl = bel_client_new(pool);
		if (!*cl)
			die("shm server: bel_client_new failed");
	}
	s->ret = 0;
	s->hits = s->a = s->b = 0;
	if (s->op != SHM_PING && s->op != SHM_CLOSE &&
	    (!s->count || s->count > BELUGA_MAX_BATCH)) {
		s->ret = -EINVAL;
		return;
	}
	switch (s->op) {
	case SHM_PING:
		break;
	case SHM_LOOKUP: {
		bool pin = s->flags & BELUGA_LOOKUP_PIN;
		bool want = pin || (s->flags & 2);

		s->ret = bel_lookup(*cl, s->ns, s->count, s->keys, pin,
				    want ? s->offs : NULL, &s->hits);
		break;
	}
	case SHM_ALLOC:
		s->ret = bel_alloc(*cl, s->count, s->offs);
		break;
	case SHM_PUBLISH:
		s->ret = bench_core_publish(*cl, s->ns, s->count, s->offs,
					    s->keys, res, &s->a, &s->b, &failed);
		if (!s->ret && failed)
			s->ret = -EPROTO;
		break;
	case SHM_RELEASE:
		s->ret = bel_release(*cl, s->count, s->offs);
		break;
	case SHM_FREE:
		s->ret = bel_free(*cl, s->count, s->offs);
		break;
	case SHM_CLOSE:
		bel_client_release(*cl);
		*cl = NULL;
		break;
	default:
		s->ret = -ENOTTY;
	}
}

int shm_server_main(int argc, char **argv)
{
	struct bel_client *cl[SHM_MAX_CLIENTS] = { NULL };
	u32 last[SHM_MAX_CLIENTS] = { 0 };
	u64 bs = 4096, blocks = 1024;
	struct shm_area *a;
	struct bel_pool *pool;
	struct beluga_publish_item *res = xcalloc(BELUGA_MAX_BATCH, sizeof(*res));
	int fd = -1, cpu = -1, i;

	for (i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--fd"))
			fd = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--bs"))
			bs = parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "--blocks"))
			blocks = parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "--cpu"))
			cpu = atoi(argv[i + 1]);
		else
			die("shm server: unknown option %s", argv[i]);
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	a = mmap(NULL, sizeof(*a), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (a == MAP_FAILED)
		die("shm server: mmap of fd %d: %s", fd, strerror(errno));
	close(fd);
	pin_self(cpu);
	pool = core_pool_new(blocks, bs);
	atomic_store_explicit(&a->ready, 1, memory_order_release);
	for (;;) {
		for (i = 0; i < SHM_MAX_CLIENTS; i++) {
			struct shm_slot *s = &a->slot[i];
			u32 r = atomic_load_explicit(&s->req,
						     memory_order_acquire);

			if (r == last[i])
				continue;
			last[i] = r;
			shm_serve(s, &cl[i], pool, res);
			atomic_store_explicit(&s->resp, r,
					      memory_order_release);
		}
		if (atomic_load_explicit(&a->quit, memory_order_relaxed))
			break;
		cpu_relax();
	}
	for (i = 0; i < SHM_MAX_CLIENTS; i++)
		if (cl[i])
			bel_client_release(cl[i]);
	core_pool_free(pool);
	_exit(0);
}

/*
 * The server's CPU: one that no client is pinned to. Clients of
 * single-threaded sections run on opt.rpc_cpu; the server takes the first
 * other CPU this process could use at start (on a 2-CPU machine: the other
 * one, and every client then shares the remaining CPU).
 */
int shm_server_cpu(void)
{
	int cpu, first = -1;

	if (opt.shm_cpu >= 0)
		return opt.shm_cpu;
	for (cpu = 0; cpu < 64; cpu++) {
		if (!(bench_cpus_at_start & (1ULL << cpu)))
			continue;
		if (first < 0)
			first = cpu;
		if (cpu != opt.rpc_cpu)
			return cpu;
	}
	return first;
}

void shm_server_start(struct shm_server *s, u64 nr_blocks, u64 bs)
{
	char fd_s[16], blocks_s[32], bs_s[32], cpu_s[16];
	int fd, i;

	s->cpu = shm_server_cpu();
	s->bs = bs;
	fd = memfd_create("belbench-shmrpc", 0);
	if (fd < 0)
		die("memfd_create: %s", strerror(errno));
	if (ftruncate(fd, sizeof(struct shm_area)))
		die("ftruncate of the shm RPC area: %s", strerror(errno));
	s->area = mmap(NULL, sizeof(struct shm_area), PROT_READ | PROT_WRITE,
		       MAP_SHARED, fd, 0);
	if (s->area == MAP_FAILED)
		die("mmap of the shm RPC area: %s", strerror(errno));
	snprintf(fd_s, sizeof(fd_s), "%d", fd);
	snprintf(blocks_s, sizeof(blocks_s), "%llu",
		 (unsigned long long)nr_blocks);
	snprintf(bs_s, sizeof(bs_s), "%llu", (unsigned long long)bs);
	snprintf(cpu_s, sizeof(cpu_s), "%d", s->cpu);
	fflush(NULL);
	s->pid = fork();
	if (s->pid < 0)
		die("fork: %s", strerror(errno));
	if (!s->pid) {
		char *av[] = { "belbench", "shm-server", "--fd", fd_s, "--bs",
			       bs_s, "--blocks", blocks_s, "--cpu", cpu_s,
			       NULL };

		execv("/proc/self/exe", av);
		fprintf(stderr, "belbench: exec /proc/self/exe: %s\n",
			strerror(errno));
		_exit(127);
	}
	close(fd);
	for (i = 0; i < 60000; i++) {
		int st;

		if (atomic_load_explicit(&s->area->ready, memory_order_acquire))
			return;
		if (waitpid(s->pid, &st, WNOHANG) == s->pid)
			die("the shm RPC server exited during start-up");
		usleep(1000);
	}
	die("the shm RPC server did not start within 60 s");
}

void shm_server_stop(struct shm_server *s)
{
	int st;

	if (s->pid <= 0)
		return;
	atomic_store(&s->area->quit, 1);
	waitpid(s->pid, &st, 0);
	munmap(s->area, sizeof(struct shm_area));
	s->pid = 0;
}

/* ---- the client ------------------------------------------------------ */

struct shm_client {
	struct shm_slot *s;
	u32 seq;
};

static struct shm_slot *slot_of(struct bk *b)
{
	return ((struct shm_client *)b->priv)->s;
}

/* Post the request already written into the slot, spin for the reply. */
static int shm_call(struct bk *b, u32 op)
{
	struct shm_client *c = b->priv;
	struct shm_slot *s = c->s;
	u32 seq = ++c->seq;

	s->op = op;
	atomic_store_explicit(&s->req, seq, memory_order_release);
	while (atomic_load_explicit(&s->resp, memory_order_acquire) != seq)
		cpu_relax();
	return s->ret;
}

static int s_floor(struct bk *b)
{
	return shm_call(b, SHM_PING);
}

static int s_lookup(struct bk *b, u64 ns, u32 n, const struct beluga_key *keys,
		    bool pin, u64 *offsets, u32 *hits)
{
	struct shm_slot *s = slot_of(b);
	int ret;

	if (n > BELUGA_MAX_BATCH)
		return -EINVAL;
	s->count = n;
	s->ns = ns;
	s->flags = (pin ? BELUGA_LOOKUP_PIN : 0) | (offsets ? 2 : 0);
	memcpy(s->keys, keys, n * sizeof(*keys));
	ret = shm_call(b, SHM_LOOKUP);
	if (ret)
		return ret;
	if (offsets && s->hits)
		memcpy(offsets, s->offs, s->hits * sizeof(u64));
	if (hits)
		*hits = s->hits;
	return 0;
}

static int s_alloc(struct bk *b, u32 n, u64 *offsets)
{
	struct shm_slot *s = slot_of(b);
	int ret;

	if (n > BELUGA_MAX_BATCH)
		return -EINVAL;
	s->count = n;
	ret = shm_call(b, SHM_ALLOC);
	if (!ret)
		memcpy(offsets, s->offs, n * sizeof(u64));
	return ret;
}

static int s_publish(struct bk *b, u64 ns, u32 n, const u64 *offsets,
		     const struct beluga_key *keys, u32 *ok, u32 *exists)
{
	struct shm_slot *s = slot_of(b);
	int ret;

	if (n > BELUGA_MAX_BATCH)
		return -EINVAL;
	s->count = n;
	s->ns = ns;
	memcpy(s->offs, offsets, n * sizeof(u64));
	memcpy(s->keys, keys, n * sizeof(*keys));
	ret = shm_call(b, SHM_PUBLISH);
	if (ok)
		*ok = s->a;
	if (exists)
		*exists = s->b;
	return ret;
}

static int s_blocks(struct bk *b, u32 op, u32 n, const u64 *offsets)
{
	struct shm_slot *s = slot_of(b);

	if (n > BELUGA_MAX_BATCH)
		return -EINVAL;
	s->count = n;
	memcpy(s->offs, offsets, n * sizeof(u64));
	return shm_call(b, op);
}

static int s_release(struct bk *b, u32 n, const u64 *offsets)
{
	return s_blocks(b, SHM_RELEASE, n, offsets);
}

static int s_free(struct bk *b, u32 n, const u64 *offsets)
{
	return s_blocks(b, SHM_FREE, n, offsets);
}

static int s_get(struct bk *b, u64 ns, u32 n, const struct beluga_key *keys,
		 void *dst, u32 *hits)
{
	(void)b; (void)ns; (void)n; (void)keys; (void)dst; (void)hits;
	return -EOPNOTSUPP;	/* the staged data path is rpc-unix-blocking's */
}

static void s_close(struct bk *b)
{
	struct shm_client *c = b->priv;

	shm_call(b, SHM_CLOSE);
	atomic_store_explicit(&c->s->in_use, 0, memory_order_release);
	free(c);
	free(b);
}

struct bk *shmrpc_open(struct shm_server *srv)
{
	struct bk *b = xcalloc(1, sizeof(*b));
	struct shm_client *c = xcalloc(1, sizeof(*c));
	int i;

	for (i = 0; i < SHM_MAX_CLIENTS; i++) {
		u32 zero = 0;

		if (atomic_compare_exchange_strong(&srv->area->slot[i].in_use,
						   &zero, 1))
			break;
	}
	if (i == SHM_MAX_CLIENTS)
		die("shm RPC: all %d slots are in use", SHM_MAX_CLIENTS);
	c->s = &srv->area->slot[i];
	/* Carry on from the slot's last sequence: the server remembers it. */
	c->seq = atomic_load(&c->s->resp);
	b->name = "rpc-shm-polled";
	b->fd = -1;
	b->priv = c;
	b->block_size = srv->bs;
	b->floor = s_floor;
	b->lookup = s_lookup;
	b->alloc = s_alloc;
	b->publish = s_publish;
	b->release = s_release;
	b->free = s_free;
	b->get = s_get;
	b->close = s_close;
	return b;
}
