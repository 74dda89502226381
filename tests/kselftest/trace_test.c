// SPDX-License-Identifier: GPL-2.0
/*
 * Observability through the kernel's own interfaces:
 *   - the beluga tracepoints, read through tracefs in an instance of
 *     their own: ALLOC, FREE, PUBLISH, LOOKUP (hits and misses), RELEASE,
 *     a page fault, and evictions by EVICT and by ALLOC's LRU, each event
 *     with the fields the calls imply;
 *   - the uevents of the pool's device when a region is attached and
 *     detached, read from a NETLINK_KOBJECT_UEVENT socket.
 * A kernel without tracefs SKIPs the tracepoint test.
 */
#include "beluga_test.h"

#include <poll.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <linux/netlink.h>

#define TRACEFS		"/sys/kernel/tracing"
#define INSTANCE	TRACEFS "/instances/beluga_test"

/* ------------------------------------------------------------------ */
/* tracefs                                                              */

/* tracefs mounted (mounting it if needed); else why not. */
static bool trace_available(char *why, size_t len)
{
	if (access(TRACEFS "/events", F_OK))
		mount("tracefs", TRACEFS, "tracefs", 0, NULL);
	if (access(TRACEFS "/events", F_OK)) {
		snprintf(why, len, "no tracefs at %s (%s): a kernel without tracing",
			 TRACEFS, strerror(errno));
		return false;
	}
	return true;
}

static int trace_write(const char *file, const char *val)
{
	char path[256];

	snprintf(path, sizeof(path), INSTANCE "/%s", file);
	return bt_write_str(path, val);
}

/* The instance's buffer, whole; NULL on error. Caller frees. */
static char *trace_read(void)
{
	size_t cap = 1 << 20, len = 0;
	char *buf = malloc(cap);
	int fd = open(INSTANCE "/trace", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (!buf || fd < 0) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	while ((n = read(fd, buf + len, cap - 1 - len)) > 0) {
		len += n;
		if (len == cap - 1) {
			char *more = realloc(buf, cap * 2);

			if (!more)
				break;
			buf = more;
			cap *= 2;
		}
	}
	close(fd);
	buf[len] = 0;
	return buf;
}

/* The value after "@name=" in @line (0 when absent, *found false). */
static uint64_t field(const char *line, const char *name, bool *found)
{
	char key[32];
	const char *p;

	snprintf(key, sizeof(key), " %s=", name);
	p = strstr(line, key);
	if (found)
		*found = p != NULL;
	return p ? strtoull(p + strlen(key), NULL, 0) : 0;
}

struct ev {
	char name[32];
	const char *line;
};

/* Split the trace into events of the beluga system; returns how many. */
static int trace_events(char *buf, struct ev *evs, int max)
{
	char *line, *save = NULL;
	int n = 0;

	for (line = strtok_r(buf, "\n", &save); line && n < max;
	     line = strtok_r(NULL, "\n", &save)) {
		char *p = strstr(line, ": beluga_"), *end;

		if (line[0] == '#' || !p)
			continue;
		p += 2;
		end = strchr(p, ':');
		if (!end || end - p >= (long)sizeof(evs[n].name))
			continue;
		memcpy(evs[n].name, p, end - p);
		evs[n].name[end - p] = 0;
		evs[n].line = end;	/* " pool=0 count=..." after the colon */
		n++;
	}
	return n;
}

/* Events named @name; the first one's line in *@line. */
static int count_ev(const struct ev *evs, int n, const char *name,
		    const char **line)
{
	int i, c = 0;

	for (i = 0; i < n; i++) {
		if (strcmp(evs[i].name, name))
			continue;
		if (!c && line)
			*line = evs[i].line;
		c++;
	}
	return c;
}

FIXTURE(trace) {
	struct bt_ctx c;
	bool instance;
};

FIXTURE_SETUP(trace)
{
	char why[200];

	bt_ctx_init(&self->c);
	self->instance = false;
	if (!trace_available(why, sizeof(why)))
		SKIP(return, "%s", why);
	/* A kernel with tracing: the module's events must be there. */
	ASSERT_EQ(0, access(TRACEFS "/events/beluga/beluga_alloc", F_OK))
		TH_LOG("%s/events/beluga: %s: the module has no tracepoints",
		       TRACEFS, strerror(errno));
	if (!bt_setup(&self->c, BT_ANY_BACKEND, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
	/* A ring buffer of its own: nothing else writes to it. */
	rmdir(INSTANCE);
	ASSERT_EQ(0, mkdir(INSTANCE, 0700)) TH_LOG("mkdir %s: %s", INSTANCE,
						  strerror(errno));
	self->instance = true;
	ASSERT_EQ(0, trace_write("buffer_size_kb", "1024"));
	ASSERT_EQ(0, trace_write("events/beluga/enable", "1"));
}

FIXTURE_TEARDOWN(trace)
{
	if (self->instance) {
		trace_write("events/beluga/enable", "0");
		rmdir(INSTANCE);
	}
	bt_teardown(&self->c);
}

#define KEYHEX(k) ({							\
	static char __b[40];						\
	snprintf(__b, sizeof(__b), "key=%016llx%016llx",		\
		 (unsigned long long)(k).hi, (unsigned long long)(k).lo); \
	__b; })

TEST_F_TIMEOUT(trace, block_lifecycle_events, 120)
{
	uint64_t ns = bt_ns(81), off[4], got[3], extra[64], free0;
	struct beluga_key k[3] = { bt_key(ns, 1), bt_key(ns, 2),
				   bt_key(ns, 3) };
	struct beluga_publish_item items[2];
	struct beluga_publish p;
	struct beluga_stats st;
	struct beluga_evict e;
	const char *l = NULL;
	volatile uint8_t *map;
	struct ev evs[256];
	uint32_t hits;
	int32_t res;
	char *buf;
	bool found;
	int n, i, served;

	ASSERT_EQ(0, bt_alloc(self->c.fd, 4, off));
	for (i = 0; i < 2; i++)
		items[i] = (struct beluga_publish_item){ .offset = off[i],
							 .key = k[i] };
	ASSERT_EQ(0, bt_publish(self->c.fd, ns, items, 2, &p));
	ASSERT_EQ(2, p.published);
	/* the same key again: lost the race */
	ASSERT_EQ(0, bt_publish1(self->c.fd, ns, off[2], k[0], &res));
	ASSERT_EQ(BELUGA_PUBLISH_EXISTS, res);
	ASSERT_EQ(0, bt_free(self->c.fd, 1, &off[3]));
	/* k[2] was never published: 2 hits, 1 miss */
	ASSERT_EQ(0, bt_lookup(self->c.fd, ns, k, 3, got, BELUGA_LOOKUP_PIN,
			       &hits));
	ASSERT_EQ(2, hits);
	ASSERT_EQ(0, bt_lookup(self->c.fd, ns, &k[2], 1, NULL, 0, &hits));
	ASSERT_EQ(0, hits);
	ASSERT_EQ(0, bt_release(self->c.fd, 2, got));
	/* a page fault on the first block */
	map = mmap(NULL, self->c.info.map_size, PROT_READ, MAP_SHARED,
		   self->c.fd, 0);
	ASSERT_NE(MAP_FAILED, (void *)map);
	(void)map[off[0] + 8];
	munmap((void *)map, self->c.info.map_size);
	/* EVICT of k[1]; then ALLOC past the free blocks evicts k[0] (LRU) */
	ASSERT_EQ(0, bt_evict_key(self->c.fd, ns, k[1], &e));
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	free0 = st.free_blocks;
	ASSERT_GT(ARRAY_SIZE(extra), free0);
	ASSERT_EQ(1, st.published_blocks);
	ASSERT_EQ(0, bt_alloc(self->c.fd, free0 + 1, extra));
	ASSERT_EQ(0, bt_free(self->c.fd, free0 + 1, extra));
	ASSERT_EQ(0, trace_write("events/beluga/enable", "0"));

	buf = trace_read();
	ASSERT_NE(NULL, buf);
	n = trace_events(buf, evs, ARRAY_SIZE(evs));
	TH_LOG("%d beluga events", n);

	/* ALLOC: the call of 4, then the one that evicts */
	ASSERT_EQ(2, count_ev(evs, n, "beluga_alloc", &l));
	EXPECT_EQ(4, field(l, "count", NULL));
	EXPECT_EQ(off[0], field(l, "first", NULL));
	EXPECT_EQ(0, field(l, "ret", &found));
	EXPECT_TRUE(found);
	/* FREE: off[3], then the evicting ALLOC's blocks */
	ASSERT_EQ(2, count_ev(evs, n, "beluga_free", &l));
	EXPECT_EQ(1, field(l, "count", NULL));
	EXPECT_EQ(off[3], field(l, "first", NULL));
	/* PUBLISH: 2 published, then 1 that found its key */
	ASSERT_EQ(2, count_ev(evs, n, "beluga_publish", &l));
	EXPECT_EQ(ns, field(l, "ns", NULL));
	EXPECT_EQ(2, field(l, "count", NULL));
	EXPECT_EQ(2, field(l, "published", NULL));
	EXPECT_EQ(0, field(l, "exists", NULL));
	EXPECT_EQ(0, field(l, "failed", NULL));
	for (i = 0; i < n; i++)
		if (!strcmp(evs[i].name, "beluga_publish") &&
		    field(evs[i].line, "count", NULL) == 1)
			break;
	ASSERT_GT(n, i) TH_LOG("no PUBLISH event of the lost race");
	EXPECT_EQ(0, field(evs[i].line, "published", NULL));
	EXPECT_EQ(1, field(evs[i].line, "exists", NULL));
	/* LOOKUP: hits and misses of each call */
	ASSERT_EQ(2, count_ev(evs, n, "beluga_lookup", &l));
	EXPECT_EQ(3, field(l, "count", NULL));
	EXPECT_EQ(2, field(l, "hits", NULL));
	EXPECT_EQ(1, field(l, "misses", NULL));
	EXPECT_EQ(1, field(l, "pin", NULL));
	for (i = 0; i < n; i++)
		if (!strcmp(evs[i].name, "beluga_lookup") &&
		    field(evs[i].line, "pin", NULL) == 0)
			break;
	ASSERT_GT(n, i) TH_LOG("no LOOKUP event without a pin");
	EXPECT_EQ(1, field(evs[i].line, "count", NULL));
	EXPECT_EQ(0, field(evs[i].line, "hits", NULL));
	EXPECT_EQ(1, field(evs[i].line, "misses", NULL));
	/* RELEASE */
	ASSERT_EQ(1, count_ev(evs, n, "beluga_release", &l));
	EXPECT_EQ(2, field(l, "count", NULL));
	EXPECT_EQ(got[0], field(l, "first", NULL));
	EXPECT_EQ(0, field(l, "ret", NULL));
	/* a served fault whose entry covers the byte read */
	for (i = 0, served = 0; i < n; i++) {
		uint64_t o = field(evs[i].line, "offset", NULL);
		uint64_t order = field(evs[i].line, "order", NULL);
		uint64_t ret = field(evs[i].line, "ret", NULL);

		if (strcmp(evs[i].name, "beluga_fault") || order > 9)
			continue;
		if (o <= off[0] + 8 && off[0] + 8 < o + (BT_PAGE << order) &&
		    !(ret & 0x832))	/* SIGBUS, HWPOISON(_LARGE), FALLBACK */
			served++;
	}
	EXPECT_LE(1, served) TH_LOG("no served fault at offset 0x%llx",
				    (unsigned long long)off[0]);
	/* evictions: k[1] by EVICT, then k[0] by the LRU inside ALLOC */
	ASSERT_EQ(2, count_ev(evs, n, "beluga_evict", &l));
	EXPECT_EQ(off[1], field(l, "offset", NULL));
	EXPECT_EQ(ns, field(l, "ns", NULL));
	EXPECT_NE(NULL, strstr(l, KEYHEX(k[1]))) TH_LOG("%s", l);
	for (i = n - 1; i >= 0 && strcmp(evs[i].name, "beluga_evict"); i--)
		;
	ASSERT_LE(0, i);
	EXPECT_EQ(off[0], field(evs[i].line, "offset", NULL));
	EXPECT_NE(NULL, strstr(evs[i].line, KEYHEX(k[0]))) TH_LOG("%s",
								   evs[i].line);
	/* every event names the pool: /dev/beluga is pool 0 */
	for (i = 0; i < n; i++)
		EXPECT_EQ(0, field(evs[i].line, "pool", NULL));
	free(buf);
}

/* ------------------------------------------------------------------ */
/* uevents                                                              */

/* A kernel uevent socket, or -errno. */
static int uevent_socket(void)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = 1 };
	int fd, sz = 1 << 20;

	fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC,
		    NETLINK_KOBJECT_UEVENT);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int r = -errno;

		close(fd);
		return r;
	}
	return fd;
}

/* The value of @key in a uevent message of @len bytes, or NULL. */
static const char *uevent_get(const char *msg, size_t len, const char *key)
{
	size_t kl = strlen(key), i = 0;

	while (i < len) {
		const char *v = msg + i;
		size_t l = strnlen(v, len - i);

		if (l > kl && !strncmp(v, key, kl) && v[kl] == '=')
			return v + kl + 1;
		i += l + 1;
	}
	return NULL;
}

/*
 * Wait up to @ms for the beluga uevent @event of region @slot; 0 when it
 * came with the expected fields, else -errno.
 */
static int uevent_wait(struct __test_metadata *_metadata, int fd,
		       const char *event, uint32_t slot, const char *name,
		       int ms)
{
	char msg[8192], want_slot[16];
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	ssize_t n;

	snprintf(want_slot, sizeof(want_slot), "%u", slot);
	while (poll(&pfd, 1, ms) == 1) {
		const char *ev, *v;

		n = recv(fd, msg, sizeof(msg) - 1, 0);
		if (n <= 0)
			return -EIO;
		msg[n] = 0;
		ev = uevent_get(msg, n, "BELUGA_EVENT");
		if (!ev || strcmp(ev, event))
			continue;
		v = uevent_get(msg, n, "BELUGA_REGION");
		if (!v || strcmp(v, want_slot))
			continue;
		EXPECT_STREQ("change", uevent_get(msg, n, "ACTION") ?: "(none)");
		EXPECT_STREQ("misc", uevent_get(msg, n, "SUBSYSTEM") ?: "(none)");
		EXPECT_STREQ("beluga", uevent_get(msg, n, "DEVNAME") ?: "(none)");
		EXPECT_STREQ("beluga", uevent_get(msg, n, "BELUGA_POOL") ?: "(none)");
		EXPECT_STREQ(name, uevent_get(msg, n, "BELUGA_REGION_NAME") ?: "(none)");
		v = uevent_get(msg, n, "BELUGA_BACKEND");
		EXPECT_TRUE(v && (!strcmp(v, "dax") || !strcmp(v, "node")));
		return 0;
	}
	return -ETIMEDOUT;
}

TEST(region_uevents)
{
	struct beluga_attach a;
	struct bt_ctx c;
	char why[160];
	int fd, r, backend;

	bt_ctx_init(&c);
	backend = bt_pick_backend(BT_ANY_BACKEND);
	if (!bt_backend_ok(backend, 0, BT_REGION_LEN, why, sizeof(why)))
		SKIP(return, "%s", why);
	fd = uevent_socket();
	ASSERT_LE(0, fd) TH_LOG("NETLINK_KOBJECT_UEVENT socket: %s", strerror(-fd));
	bt_setup_empty(&c);
	ASSERT_EQ(0, bt_attach_req(&a, backend, 0, 0, BT_REGION_LEN,
				   BT_BLOCK_SIZE, "bt-uevent"));
	r = bt_attach(c.fd, &a);
	ASSERT_EQ(0, r) TH_LOG("ATTACH: %s", strerror(-r));
	r = uevent_wait(_metadata, fd, "attach", a.region_id, "bt-uevent", 10000);
	EXPECT_EQ(0, r) TH_LOG("attach uevent of region %u: %s", a.region_id,
			       strerror(-r));
	r = bt_detach(c.fd, a.region_id, 0, NULL);
	ASSERT_EQ(0, r) TH_LOG("DETACH: %s", strerror(-r));
	r = uevent_wait(_metadata, fd, "detach", a.region_id, "bt-uevent", 10000);
	EXPECT_EQ(0, r) TH_LOG("detach uevent of region %u: %s", a.region_id,
			       strerror(-r));
	close(fd);
	bt_ctx_teardown(&c);
}

TEST_HARNESS_MAIN
