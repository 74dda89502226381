// SPDX-License-Identifier: GPL-2.0
/*
 * The baseline: a metadata server with Beluga's semantics in a separate
 * process, reached over an AF_UNIX stream socket. This is the shape of the
 * RPC designs Beluga replaces (Mooncake's master service, Maru, the paper's
 * RDMA baseline), kept small and honest:
 *
 *  - the same hash index, allocator, LRU and pin bookkeeping: the server
 *    links the portable core (kmod/core/{pool,index,lru,client}.c), the code the module runs;
 *  - the same batching: one request and one response per operation, with
 *    the whole key or offset array in it, as one ioctl carries it;
 *  - the same ownership: each connection is a client; closing it (or the
 *    client dying) frees its allocations and drops its pins;
 *  - one server thread per connection, as each caller of the module runs
 *    in its own context;
 *  - a minimal frame (a 24-byte header, the arrays, no serialisation
 *    library), written with one writev() and read with MSG_WAITALL.
 *
 * So the comparison isolates the transport: a socket round trip and a
 * context switch to another process, against a system call.
 *
 * For the data path the server also holds the blocks' bytes (an "arena":
 * anonymous memory, or a shared read-only mapping of a device such as
 * /dev/dax0.0, the same medium Beluga maps) and GET streams them through
 * the socket: the staged path, two copies (arena -> socket buffer -> the
 * client's destination).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "bel_core.h"
#include "core_publish.h"

enum {
	RPC_PING = 1,
	RPC_LOOKUP,
	RPC_ALLOC,
	RPC_PUBLISH,
	RPC_RELEASE,
	RPC_FREE,
	RPC_GET,
};

#define RPC_WANT_OFFSETS	(1U << 1)	/* LOOKUP: return the offsets */

struct rpc_req {
	u32 op;
	u32 count;
	u64 ns;
	u32 flags;		/* BELUGA_LOOKUP_PIN | RPC_WANT_OFFSETS */
	u32 pad;
};

struct rpc_resp {
	s32 ret;		/* 0 or -errno */
	u32 count;		/* hits / offsets / blocks that follow */
	u32 a;			/* PUBLISH: published */
	u32 b;			/* PUBLISH: exists */
};

struct rpc_item {
	u64 offset;
	struct beluga_key key;
};

#define RPC_SOCKBUF	(4 << 20)

static int write_full_iov(int fd, struct iovec *iov, int cnt)
{
	while (cnt > 0) {
		ssize_t n = writev(fd, iov, cnt > IOV_MAX ? IOV_MAX : cnt);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		while (cnt > 0 && (size_t)n >= iov->iov_len) {
			n -= iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (u8 *)iov->iov_base + n;
			iov->iov_len -= n;
		}
	}
	return 0;
}

static int read_full(int fd, void *buf, size_t len)
{
	u8 *p = buf;

	while (len) {
		ssize_t n = recv(fd, p, len, MSG_WAITALL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EPIPE;
		p += n;
		len -= n;
	}
	return 0;
}

static void sock_bufs(int fd)
{
	int sz = RPC_SOCKBUF;

	/* Give the baseline its best shot; the kernel caps at wmem_max. */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
}

/* ---- the server ------------------------------------------------------ */

struct srv {
	struct bel_pool *pool;
	u8 *arena;
	u64 bs;
};

struct conn {
	struct srv *srv;
	int fd;
};

static void *serve_conn(void *arg)
{
	struct conn *c = arg;
	struct srv *s = c->srv;
	struct bel_client *cl = bel_client_new(s->pool);
	struct beluga_key *keys = xcalloc(BELUGA_MAX_BATCH, sizeof(*keys));
	struct rpc_item *items = xcalloc(BELUGA_MAX_BATCH, sizeof(*items));
	u64 *offs = xcalloc(BELUGA_MAX_BATCH, sizeof(*offs));
	struct beluga_publish_item *res = xcalloc(BELUGA_MAX_BATCH, sizeof(*res));
	struct iovec *iov = xcalloc(BELUGA_MAX_BATCH + 1, sizeof(*iov));
	struct rpc_req rq;
	u32 i;

	if (!cl)
		die("server: bel_client_new failed");
	for (;;) {
		struct rpc_resp rp = { 0 };
		int niov = 1;

		if (read_full(c->fd, &rq, sizeof(rq)))
			break;
		if (rq.op != RPC_PING &&
		    (!rq.count || rq.count > BELUGA_MAX_BATCH)) {
			rp.ret = -EINVAL;
			goto reply;
		}
		switch (rq.op) {
		case RPC_PING:
			break;
		case RPC_LOOKUP:
		case RPC_GET: {
			bool pin = rq.op == RPC_GET ||
				   (rq.flags & BELUGA_LOOKUP_PIN);
			bool want = rq.op == RPC_GET || pin ||
				    (rq.flags & RPC_WANT_OFFSETS);
			u32 hits = 0;

			if (read_full(c->fd, keys, rq.count * sizeof(*keys)))
				goto out;
			rp.ret = bel_lookup(cl, rq.ns, rq.count, keys, pin,
					    want ? offs : NULL, &hits);
			if (rp.ret)
				break;
			rp.count = hits;
			if (rq.op == RPC_GET) {
				for (i = 0; i < hits; i++) {
					iov[niov].iov_base = s->arena + offs[i];
					iov[niov].iov_len = s->bs;
					niov++;
				}
			} else if (want && hits) {
				iov[1].iov_base = offs;
				iov[1].iov_len = hits * sizeof(*offs);
				niov = 2;
			}
			break;
		}
		case RPC_ALLOC:
			rp.ret = bel_alloc(cl, rq.count, offs);
			if (rp.ret)
				break;
			rp.count = rq.count;
			iov[1].iov_base = offs;
			iov[1].iov_len = rq.count * sizeof(*offs);
			niov = 2;
			break;
		case RPC_PUBLISH: {
			u32 failed = 0;

			if (read_full(c->fd, items, rq.count * sizeof(*items)))
				goto out;
			for (i = 0; i < rq.count; i++) {
				offs[i] = items[i].offset;
				keys[i] = items[i].key;
			}
			rp.ret = bench_core_publish(cl, rq.ns, rq.count, offs,
						    keys, res, &rp.a, &rp.b,
						    &failed);
			if (!rp.ret && failed)
				rp.ret = -EPROTO;
			break;
		}
		case RPC_RELEASE:
		case RPC_FREE:
			if (read_full(c->fd, offs, rq.count * sizeof(*offs)))
				goto out;
			rp.ret = rq.op == RPC_RELEASE ?
				 bel_release(cl, rq.count, offs) :
				 bel_free(cl, rq.count, offs);
			break;
		default:
			rp.ret = -ENOTTY;
		}
reply:
		iov[0].iov_base = &rp;
		iov[0].iov_len = sizeof(rp);
		if (write_full_iov(c->fd, iov, niov))
			break;
		/* GET: the bytes are out; drop the pins it took. */
		if (rq.op == RPC_GET && !rp.ret && rp.count)
			bel_release(cl, rp.count, offs);
	}
out:
	bel_client_release(cl);
	close(c->fd);
	free(keys);
	free(items);
	free(offs);
	free(res);
	free(iov);
	free(c);
	return NULL;
}

int server_main(int argc, char **argv)
{
	const char *path = NULL, *arena = NULL;
	u64 bs = 4096, blocks = 1024;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct srv s = { 0 };
	int lfd, i;

	for (i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--sock"))
			path = argv[i + 1];
		else if (!strcmp(argv[i], "--bs"))
			bs = parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "--blocks"))
			blocks = parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "--arena"))
			arena = argv[i + 1];
		else
			die("server: unknown option %s", argv[i]);
	}
	if (!path)
		die("server: --sock PATH is required");
	/* Never outlive the benchmark. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGPIPE, SIG_IGN);

	s.bs = bs;
	s.pool = core_pool_new(blocks, bs);
	if (arena && !strcmp(arena, "anon")) {
		s.arena = anon_buf(blocks * bs, 0xA5);
	} else if (arena) {
		int fd = open(arena, O_RDONLY | O_CLOEXEC);

		if (fd < 0)
			die("server: open %s: %s", arena, strerror(errno));
		s.arena = mmap(NULL, blocks * bs, PROT_READ, MAP_SHARED, fd, 0);
		if (s.arena == MAP_FAILED)
			die("server: mmap %s (%llu bytes): %s", arena,
			    (unsigned long long)(blocks * bs), strerror(errno));
		close(fd);
	}

	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		die("server: socket: %s", strerror(errno));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	unlink(path);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 64))
		die("server: bind/listen %s: %s", path, strerror(errno));
	for (;;) {
		struct conn *c;
		pthread_t t;
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR)
				continue;
			die("server: accept: %s", strerror(errno));
		}
		sock_bufs(fd);
		c = xcalloc(1, sizeof(*c));
		c->srv = &s;
		c->fd = fd;
		if (pthread_create(&t, NULL, serve_conn, c))
			die("server: pthread_create failed");
		pthread_detach(t);
	}
	return 0;
}

static void rpc_server_spawn(struct rpc_server *s, u64 nr_blocks, u64 bs,
			     const char *arena);

/*
 * --rpc-cpu auto: the CPU where a ping round trip (client and server both
 * on it) is fastest, measured once per process. The baseline gets its best
 * placement; in the TCG guest CPU 0 also serves the serial console and is
 * several times slower for this.
 */
static void rpc_pick_cpu(void)
{
	cpu_set_t allowed;
	double best = 0;
	int cpu, pick = -1;

	if (sched_getaffinity(0, sizeof(allowed), &allowed))
		CPU_ZERO(&allowed);
	for (cpu = 0; cpu < 64; cpu++) {
		struct rpc_server t;
		struct bk *b;
		double v[64];
		int i, n = 0;

		if (!CPU_ISSET(cpu, &allowed))
			continue;
		opt.rpc_cpu = cpu;
		rpc_server_spawn(&t, 16, 4096, NULL);
		b = rpc_open(&t);
		for (i = 0; i < 5; i++)
			b->floor(b);	/* warm up */
		for (i = 0; i < 31; i++) {
			u64 t0 = now_ns();

			b->floor(b);
			v[n++] = (double)(now_ns() - t0);
		}
		b->close(b);
		rpc_server_stop(&t);
		if (pick < 0 || median(v, n) < best) {
			best = median(v, n);
			pick = cpu;
		}
		note("rpc placement: server and client on CPU %d: ping %.0f ns",
		     cpu, median(v, n));
	}
	opt.rpc_cpu = pick;
}

static void rpc_resolve_cpu(void)
{
	if (opt.rpc_cpu == RPC_CPU_AUTO) {
		rpc_pick_cpu();
		note("rpc placement: CPU %d for the baseline server and its clients",
		     opt.rpc_cpu);
	}
}

void bench_pin_cpu(void)
{
	cpu_set_t set;

	rpc_resolve_cpu();
	if (opt.rpc_cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(opt.rpc_cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		note("cannot pin to CPU %d: %s", opt.rpc_cpu, strerror(errno));
	else
		note("every target runs on CPU %d (single-threaded section)",
		     opt.rpc_cpu);
}

void rpc_server_start(struct rpc_server *s, u64 nr_blocks, u64 bs,
		      const char *arena)
{
	rpc_resolve_cpu();
	rpc_server_spawn(s, nr_blocks, bs, arena);
}

static void rpc_server_spawn(struct rpc_server *s, u64 nr_blocks, u64 bs,
			     const char *arena)
{
	static int seq;
	char blocks_s[32], bs_s[32];
	int i;

	s->bs = bs;
	snprintf(s->path, sizeof(s->path), "/tmp/belbench-%d-%d.sock",
		 (int)getpid(), seq++);
	snprintf(blocks_s, sizeof(blocks_s), "%llu",
		 (unsigned long long)nr_blocks);
	snprintf(bs_s, sizeof(bs_s), "%llu", (unsigned long long)bs);
	fflush(NULL);
	s->pid = fork();
	if (s->pid < 0)
		die("fork: %s", strerror(errno));
	if (!s->pid) {
		char *av[12] = { "belbench", "server", "--sock", s->path,
				 "--bs", bs_s, "--blocks", blocks_s, NULL };

		if (arena) {
			av[8] = "--arena";
			av[9] = (char *)arena;
			av[10] = NULL;
		}
		if (opt.rpc_cpu >= 0) {
			cpu_set_t set;

			CPU_ZERO(&set);
			CPU_SET(opt.rpc_cpu, &set);
			sched_setaffinity(0, sizeof(set), &set);
		}
		/* A fresh image: none of the parent's mappings or pins. */
		execv("/proc/self/exe", av);
		fprintf(stderr, "belbench: exec /proc/self/exe: %s\n",
			strerror(errno));
		_exit(127);
	}
	/* Ready once it accepts a connection (the pool may take a while). */
	for (i = 0; i < 60000; i++) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int st;

		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", s->path);
		if (!connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
			close(fd);
			return;
		}
		close(fd);
		if (waitpid(s->pid, &st, WNOHANG) == s->pid)
			die("the baseline server exited during start-up");
		usleep(1000);
	}
	die("the baseline server did not start within 60 s");
}

void rpc_server_stop(struct rpc_server *s)
{
	int st;

	if (s->pid <= 0)
		return;
	kill(s->pid, SIGTERM);
	waitpid(s->pid, &st, 0);
	unlink(s->path);
	s->pid = 0;
}

/* ---- the client ------------------------------------------------------ */

static int rpc_call(struct bk *b, struct rpc_req *rq, const void *payload,
		    size_t plen, struct rpc_resp *rp)
{
	struct iovec iov[2] = {
		{ .iov_base = rq, .iov_len = sizeof(*rq) },
		{ .iov_base = (void *)payload, .iov_len = plen },
	};
	int ret = write_full_iov(b->fd, iov, plen ? 2 : 1);

	if (ret)
		return ret;
	return read_full(b->fd, rp, sizeof(*rp));
}

static int r_floor(struct bk *b)
{
	struct rpc_req rq = { .op = RPC_PING };
	struct rpc_resp rp;
	int ret = rpc_call(b, &rq, NULL, 0, &rp);

	return ret ? ret : rp.ret;
}

static int r_lookup(struct bk *b, u64 ns, u32 n, const struct beluga_key *keys,
		    bool pin, u64 *offsets, u32 *hits)
{
	struct rpc_req rq = {
		.op = RPC_LOOKUP, .count = n, .ns = ns,
		.flags = (pin ? BELUGA_LOOKUP_PIN : 0) |
			 (offsets ? RPC_WANT_OFFSETS : 0),
	};
	struct rpc_resp rp;
	int ret = rpc_call(b, &rq, keys, n * sizeof(*keys), &rp);

	if (ret)
		return ret;
	if (rp.ret)
		return rp.ret;
	if (offsets && rp.count) {
		ret = read_full(b->fd, offsets, rp.count * sizeof(u64));
		if (ret)
			return ret;
	}
	if (hits)
		*hits = rp.count;
	return 0;
}

static int r_alloc(struct bk *b, u32 n, u64 *offsets)
{
	struct rpc_req rq = { .op = RPC_ALLOC, .count = n };
	struct rpc_resp rp;
	int ret = rpc_call(b, &rq, NULL, 0, &rp);

	if (ret)
		return ret;
	if (rp.ret)
		return rp.ret;
	return read_full(b->fd, offsets, rp.count * sizeof(u64));
}

static int r_publish(struct bk *b, u64 ns, u32 n, const u64 *offsets,
		     const struct beluga_key *keys, u32 *ok, u32 *exists)
{
	struct rpc_item *it = b->scratch;
	struct rpc_req rq = { .op = RPC_PUBLISH, .count = n, .ns = ns };
	struct rpc_resp rp;
	u32 i;
	int ret;

	for (i = 0; i < n; i++) {
		it[i].offset = offsets[i];
		it[i].key = keys[i];
	}
	ret = rpc_call(b, &rq, it, n * sizeof(*it), &rp);
	if (ret)
		return ret;
	if (ok)
		*ok = rp.a;
	if (exists)
		*exists = rp.b;
	return rp.ret;
}

static int r_blocks(struct bk *b, u32 op, u32 n, const u64 *offsets)
{
	struct rpc_req rq = { .op = op, .count = n };
	struct rpc_resp rp;
	int ret = rpc_call(b, &rq, offsets, n * sizeof(u64), &rp);

	return ret ? ret : rp.ret;
}

static int r_release(struct bk *b, u32 n, const u64 *offsets)
{
	return r_blocks(b, RPC_RELEASE, n, offsets);
}

static int r_free(struct bk *b, u32 n, const u64 *offsets)
{
	return r_blocks(b, RPC_FREE, n, offsets);
}

/* The staged read: the server copies the blocks into the socket. */
static int r_get(struct bk *b, u64 ns, u32 n, const struct beluga_key *keys,
		 void *dst, u32 *hits)
{
	struct rpc_req rq = { .op = RPC_GET, .count = n, .ns = ns };
	struct rpc_resp rp;
	int ret = rpc_call(b, &rq, keys, n * sizeof(*keys), &rp);

	if (ret)
		return ret;
	if (rp.ret)
		return rp.ret;
	*hits = rp.count;
	return rp.count ? read_full(b->fd, dst, rp.count * b->block_size) : 0;
}

static void r_close(struct bk *b)
{
	if (b->priv) {
		sched_setaffinity(0, sizeof(cpu_set_t), b->priv);
		free(b->priv);
	}
	close(b->fd);
	free(b->scratch);
	free(b);
}

struct bk *rpc_open(struct rpc_server *s)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct bk *b = xcalloc(1, sizeof(*b));

	b->name = "rpc";
	b->block_size = s->bs;
	b->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (b->fd < 0)
		die("socket: %s", strerror(errno));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", s->path);
	if (connect(b->fd, (struct sockaddr *)&sa, sizeof(sa)))
		die("connect %s: %s", s->path, strerror(errno));
	sock_bufs(b->fd);
	signal(SIGPIPE, SIG_IGN);
	if (opt.rpc_cpu >= 0) {
		/* Client thread and server on one CPU (see opt.rpc_cpu). */
		cpu_set_t *old = xcalloc(1, sizeof(*old)), set;

		sched_getaffinity(0, sizeof(*old), old);
		b->priv = old;
		CPU_ZERO(&set);
		CPU_SET(opt.rpc_cpu, &set);
		sched_setaffinity(0, sizeof(set), &set);
	}
	b->floor = r_floor;
	b->lookup = r_lookup;
	b->alloc = r_alloc;
	b->publish = r_publish;
	b->release = r_release;
	b->free = r_free;
	b->get = r_get;
	b->close = r_close;
	b->scratch = xcalloc(BELUGA_MAX_BATCH, sizeof(struct rpc_item));
	return b;
}
