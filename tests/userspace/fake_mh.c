// SPDX-License-Identifier: GPL-2.0
/*
 * The fake kernel's shared pool: this process is one host of a multi-host
 * pool (Documentation/multihost.md) that lives in a file, mapped shared,
 * which other processes, each another host, map too. The protocol is the
 * module's own (kmod/core/mh_*.c), driven as kmod/mh.c drives it over a
 * CXL range: the same accessors (plain copies, write-back and invalidate
 * of each line, a full fence), a heartbeat and a maintenance tick every
 * heartbeat period on threads of their own, the payload of a block written
 * back before PUBLISH names it. One machine's memory is coherent, so the
 * write-backs and invalidates are not needed here for correctness; they
 * are done anyway, so that a pool shared between processes costs what a
 * pool shared between hosts costs the CPU.
 *
 * The process is the host and has one client, as the fake kernel has
 * (fake_kernel.h). A host that lost its lease (its threads starved for
 * half a lease) answers -ESTALE from then on; it does not rejoin.
 */
#include <cpuid.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fake_mh.h"
#include "libbeluga.h"

struct fake_mh {
	int fd;
	uint8_t *base;
	uint64_t size;
	struct bel_mh_host host;
	struct bel_mh_client client;
	bool joined;
	/* The heartbeat and tick threads run while @running (under @lock). */
	pthread_mutex_t lock;
	pthread_cond_t stop;
	bool running;
	pthread_t heartbeat, tick;
};

static struct fake_mh mh = {
	.fd = -1,
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.stop = PTHREAD_COND_INITIALIZER,
};

#define LINE	64

/* CPUID.(EAX=7,ECX=0):EBX bit 24: CLWB. */
static bool have_clwb;

static void cache_ops_probe(void)
{
	unsigned int a, b, c, d;

	have_clwb = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_CLWB);
}

/*
 * The module's arch_wb_cache_pmem(): CLWB each line, which keeps it
 * cached; without CLWB, libbeluga's write-back-and-invalidate.
 */
static void write_back(uint8_t *p, uint64_t len)
{
	uint8_t *end = p + len;

	if (!have_clwb) {
		beluga_flush_range(p, len);
		return;
	}
	for (p = (uint8_t *)((uintptr_t)p & ~(uintptr_t)(LINE - 1)); p < end; p += LINE)
		__asm__ volatile("clwb %0" : "+m"(*(volatile char *)p));
}

/* Every access within the file: a bug must not scribble elsewhere. */
static uint8_t *at(uint64_t off, uint64_t len)
{
	if (off > mh.size || len > mh.size - off) {
		fprintf(stderr, "fake_mh: access at %#llx+%#llx outside the pool's %#llx bytes\n",
			(unsigned long long)off, (unsigned long long)len,
			(unsigned long long)mh.size);
		abort();
	}
	return mh.base + off;
}

static void mem_read(void *priv, u64 off, void *dst, u32 len)
{
	(void)priv;
	memcpy(dst, at(off, len), len);
}

static void mem_write(void *priv, u64 off, const void *src, u32 len)
{
	(void)priv;
	memcpy(at(off, len), src, len);
}

static void mem_flush(void *priv, int site, u64 off, u64 len)
{
	(void)priv;
	(void)site;
	write_back(at(off, len), len);
}

static void mem_inval(void *priv, int site, u64 off, u64 len)
{
	(void)priv;
	(void)site;
	/* The module's clflush_cache_range(): libbeluga's is the same. */
	beluga_invalidate_range(at(off, len), len);
}

static void mem_fence(void *priv)
{
	(void)priv;
	__sync_synchronize();
}

static u64 mem_now_ns(void *priv)
{
	struct timespec ts;

	(void)priv;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (u64)ts.tv_sec * 1000000000ULL + (u64)ts.tv_nsec;
}

static void mem_relax(void *priv)
{
	(void)priv;
	usleep(500);
}

static void mem_resched(void *priv)
{
	(void)priv;
}

static const struct bel_mh_mem_ops fake_mh_ops = {
	.read = mem_read,
	.write = mem_write,
	.flush = mem_flush,
	.inval = mem_inval,
	.fence = mem_fence,
	.now_ns = mem_now_ns,
	.relax = mem_relax,
	.resched = mem_resched,
};

/* Sleep one heartbeat period, or less if the host leaves; false then. */
static bool period_passes(void)
{
	u64 at_ns = mem_now_ns(NULL) + mh.host.geo.heartbeat_ns;
	struct timespec until = { .tv_sec = (time_t)(at_ns / 1000000000ULL),
				  .tv_nsec = (long)(at_ns % 1000000000ULL) };
	bool running;

	pthread_mutex_lock(&mh.lock);
	while (mh.running && pthread_cond_timedwait(&mh.stop, &mh.lock, &until) != ETIMEDOUT)
		;
	running = mh.running;
	pthread_mutex_unlock(&mh.lock);
	return running;
}

/* kmod/mh.c's two works: the heartbeat alone (it must not wait for the host mutex) ... */
static void *heartbeat_main(void *arg)
{
	(void)arg;
	while (period_passes())
		bel_mh_heartbeat(&mh.host);
	return NULL;
}

/* ... and the maintenance tick, which takes the host mutex. */
static void *tick_main(void *arg)
{
	bool told = false;

	(void)arg;
	while (period_passes()) {
		bel_mh_tick(&mh.host);
		if (!told && bel_mh_fenced_now(&mh.host)) {
			fprintf(stderr, "fake_mh: host %u lost its lease (its threads did not run for half a lease): fenced; block commands now fail with ESTALE\n",
				mh.host.id);
			told = true;
		}
	}
	return NULL;
}

static void threads_stop(void)
{
	pthread_mutex_lock(&mh.lock);
	mh.running = false;
	pthread_cond_broadcast(&mh.stop);
	pthread_mutex_unlock(&mh.lock);
	pthread_join(mh.heartbeat, NULL);
	pthread_join(mh.tick, NULL);
}

int fake_mh_join(const char *path, uint64_t length, uint64_t block_size, uint32_t host_id,
		 uint32_t max_hosts, uint32_t lease_ms, const char **why)
{
	struct bel_mh_config cfg;
	struct stat st;
	int ret;

	*why = NULL;
	if (mh.joined) {
		*why = "this process is a host of a shared pool already";
		return -EBUSY;
	}
	cache_ops_probe();
	mh.fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (mh.fd < 0) {
		ret = -errno;
		*why = "cannot open the pool's file";
		return ret;
	}
	/* A host that finds the file short makes it long enough: it reads as zeros. */
	if (fstat(mh.fd, &st) || ((uint64_t)st.st_size < length && ftruncate(mh.fd, (off_t)length))) {
		ret = -errno;
		*why = "cannot size the pool's file";
		goto err_close;
	}
	mh.base = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_SHARED, mh.fd, 0);
	if (mh.base == MAP_FAILED) {
		ret = -errno;
		*why = "cannot map the pool's file";
		goto err_close;
	}
	mh.size = length;
	memset(&cfg, 0, sizeof(cfg));
	cfg.host_id = host_id;
	cfg.block_size = block_size;
	cfg.max_hosts = max_hosts;
	cfg.lease_ms = lease_ms;
	if (lease_ms)
		cfg.heartbeat_ms = lease_ms / 20 ? lease_ms / 20 : 1;
	if (getrandom(&cfg.nonce, sizeof(cfg.nonce), 0) != sizeof(cfg.nonce))
		cfg.nonce = mem_now_ns(NULL) ^ ((u64)getpid() << 32);
	cfg.nonce |= 1;
	snprintf(cfg.name, sizeof(cfg.name), "fake-%d", (int)getpid());
	ret = bel_mh_attach(&mh.host, &fake_mh_ops, &mh, length, &cfg);
	if (ret) {
		*why = mh.host.why;
		goto err_unmap;
	}
	bel_mh_set_map_base(&mh.host, 0);
	bel_mh_client_init(&mh.host, &mh.client);
	mh.running = true;
	if (pthread_create(&mh.heartbeat, NULL, heartbeat_main, NULL)) {
		ret = -EAGAIN;
		goto err_leave;
	}
	if (pthread_create(&mh.tick, NULL, tick_main, NULL)) {
		mh.running = false;
		pthread_join(mh.heartbeat, NULL);
		ret = -EAGAIN;
		goto err_leave;
	}
	mh.joined = true;
	return 0;

err_leave:
	*why = "cannot start the heartbeat threads";
	bel_mh_client_release(&mh.client);
	bel_mh_leave(&mh.host);
	bel_mh_destroy(&mh.host);
err_unmap:
	munmap(mh.base, length);
err_close:
	close(mh.fd);
	mh.fd = -1;
	return ret;
}

void fake_mh_leave(void)
{
	if (!mh.joined)
		return;
	threads_stop();
	bel_mh_client_release(&mh.client);
	if (bel_mh_leave(&mh.host))
		fprintf(stderr, "fake_mh: host %u could not leave the pool cleanly: %s\n",
			mh.host.id, mh.host.why ? mh.host.why : "?");
	bel_mh_destroy(&mh.host);
	munmap(mh.base, mh.size);
	close(mh.fd);
	mh.fd = -1;
	mh.joined = false;
}

bool fake_mh_joined(void)
{
	return mh.joined;
}

const struct bel_mh_geo *fake_mh_geo(void)
{
	return &mh.host.geo;
}

void *fake_mh_map(void *addr, size_t len, int prot, int flags, uint64_t off)
{
	const struct bel_mh_geo *g = &mh.host.geo;

	if (off > (uint64_t)g->nr_blocks * g->block_size ||
	    len > (uint64_t)g->nr_blocks * g->block_size - off) {
		errno = ENXIO;
		return MAP_FAILED;
	}
	return mmap(addr, len, prot, flags, mh.fd, (off_t)(g->data_off + off));
}

void fake_mh_stats(struct bel_mh_stats *out)
{
	bel_mh_stats(&mh.host, out);
}

/* kmod/mh.c's beluga_mh_hosts(). */
int fake_mh_hosts(struct beluga_host *out, uint32_t max)
{
	struct bel_mh_host_info info[BEL_MH_MAX_HOSTS];
	int n, i;

	n = bel_mh_hosts(&mh.host, info, BEL_MH_MAX_HOSTS);
	for (i = 0; i < n && (uint32_t)i < max; i++)
		bel_mh_host_info_to_uapi(&info[i], (u32)i, &out[i]);
	return n < 0 ? 0 : n;
}

int fake_mh_alloc(uint32_t count, uint64_t *offsets, struct beluga_evicted_key *evicted,
		  uint32_t *nr_evicted)
{
	return bel_mh_alloc(&mh.client, count, offsets, evicted, nr_evicted);
}

int fake_mh_free(uint32_t count, const uint64_t *offsets)
{
	return bel_mh_free(&mh.client, count, offsets);
}

int fake_mh_release(uint32_t count, const uint64_t *offsets)
{
	return bel_mh_release(&mh.client, count, offsets);
}

static int offset_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * kmod/mh.c's beluga_mh_publish(): the payload of each distinct block the
 * client has allocated is written back before any index entry names it.
 */
int fake_mh_publish(uint64_t ns, uint32_t count, struct beluga_publish_item *items,
		    uint32_t *published, uint32_t *exists, uint32_t *failed)
{
	uint64_t *sorted = malloc(count * sizeof(*sorted));
	uint32_t i, b;

	if (!sorted)
		return -ENOMEM;
	for (i = 0; i < count; i++)
		sorted[i] = items[i].offset;
	qsort(sorted, count, sizeof(*sorted), offset_cmp);
	for (i = 0; i < count; i++) {
		if (i && sorted[i] == sorted[i - 1])
			continue;
		if (bel_mh_client_owns(&mh.client, sorted[i]) &&
		    !bel_mh_block_at(&mh.host, sorted[i], &b))
			mem_flush(&mh, BEL_MH_F_PAYLOAD, bel_mh_block_off(&mh.host.geo, b),
				  mh.host.geo.block_size);
	}
	free(sorted);
	__sync_synchronize();
	return bel_mh_publish(&mh.client, ns, count, items, published, exists, failed);
}

int fake_mh_lookup(uint64_t ns, uint32_t count, const struct beluga_key *keys, bool pin,
		   uint64_t *offsets, uint32_t *hits)
{
	return bel_mh_lookup(&mh.client, ns, count, keys, pin, offsets, hits);
}
