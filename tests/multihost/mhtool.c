// SPDX-License-Identifier: GPL-2.0
/*
 * mhtool: the guest side of the two-guest multi-host test (run.sh). Each
 * subcommand is one step; guest.sh sequences them and prints TAP.
 *
 *   mhtool attach DAX ID [format]   ATTACH_SHARED of /dev/DAX as host ID
 *   mhtool attach-expect DAX ID ERRNO   the attach must fail with -ERRNO
 *   mhtool detach                   DETACH of region 0
 *   mhtool publish NS BASE N TAG    alloc N blocks, fill, publish keys
 *                                   BASE..BASE+N-1; prints "published P exists E"
 *   mhtool wait NS BASE N SECS      poll LOOKUP until all N keys hit (or time
 *                                   out), then pin, verify every byte, release
 *   mhtool read NS KEY              pin KEY, print the tag its bytes carry
 *   mhtool set-version DAX MAJOR    rewrite the superblock's major version
 *                                   (with a valid checksum) through /dev/DAX
 *   mhtool find-pool DAX...         print the first DAX whose first bytes
 *                                   hold a pool's magic (exit 1: none)
 *   mhtool stream NS BASE MAX TAG PINBASE PINN
 *                                   host-death load, forever: publish key
 *                                   BASE+i (while i < MAX), LOOKUP+PIN and
 *                                   RELEASE PINBASE..+PINN; "# STREAM i" lines
 *   mhtool watch NS STOPFILE RANGE...   LOOKUP every key of every RANGE
 *                                   (BASE:N), one at a time and each RANGE as
 *                                   one chain, count-only and with PIN, in
 *                                   turns, until STOPFILE exists; counts every
 *                                   key that misses ("WATCH ..." summary)
 *   mhtool account NS ROLE MINE OTHER HOLD RANGE...
 *                                   pool accounting: pin every key of RANGEs,
 *                                   publish and pin key MINE, wait for key
 *                                   OTHER, ALLOC one block at a time until it
 *                                   fails; prints the block numbers pinned and
 *                                   allocated ("ACCT ..." lines), holds them
 *                                   HOLD s
 *   mhtool count NS BASE N          LOOKUP keys BASE..+N one at a time:
 *                                   "count H run R" (R: leading run of hits)
 *   mhtool cost NS OWN OTHER N ITERS PARTS
 *                                   time LOOKUP (count-only, +PIN, RELEASE) of
 *                                   keys OWN..+N (this host's partitions) and
 *                                   OTHER..+N (another host's), interleaved;
 *                                   medians and non-owner/owner ratios
 *   mhtool hosts                    the pool's host records (BELUGA_IOC_HOSTS),
 *                                   one a line, in the format of the debugfs
 *                                   table: ID STATE INCARNATION HEARTBEAT
 *                                   OWNED(hex) alive|dead SILENT_MS self|- NAME|-
 *                                   then devpins=W_MS|- and aware|unaware
 *   mhtool free                     this host's free blocks (STATS)
 *   mhtool devpin SECS letgo|hold   a device's pin, as cudaHostRegister takes
 *                                   one: declare a device range over the pool
 *                                   (with an eventfd), map it, register its
 *                                   first block as an io_uring fixed buffer
 *                                   (a FOLL_LONGTERM pin); "# DEVPIN W_MS"
 *                                   once pinned. letgo: when the eventfd
 *                                   fires (the fence), unregister, unmap,
 *                                   close ("# LETGO MS" after the signal);
 *                                   hold: keep the pin. Exits after SECS.
 *                                   late:SECS: the device writes late:
 *                                   ALLOC a block, pin its first 4 KiB as
 *                                   the fixed buffer instead, and queue a
 *                                   READ_FIXED into it from a pipe whose
 *                                   4 KiB of 0xee a child writes SECS later
 *                                   (late_write())
 *
 * A block for key k written by tag t holds fill(k, t, j) at byte j. With
 * MH_FILL=BYTES in the environment only the first BYTES of each block are
 * written and checked (markers and bulk keys: CXL memory is slow under TCG).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <linux/io_uring.h>

#include <linux/beluga.h>

#include "bel_mh_format.h"

#define KEY_HI	0x4d554c5449484f53ULL	/* "MULTIHOS" */

static int fd = -1;
static uint64_t map_size, block_size, nr_blocks;
static uint8_t *map;

static void die(const char *what)
{
	fprintf(stderr, "mhtool: %s: %s\n", what, strerror(errno));
	exit(1);
}

static int dev_open(void)
{
	fd = open("/dev/beluga", O_RDWR);
	if (fd < 0)
		die("open /dev/beluga");
	return fd;
}

static void dev_map(void)
{
	struct beluga_info info = { .size = sizeof(info) };

	if (ioctl(fd, BELUGA_IOC_INFO, &info))
		die("INFO");
	map_size = info.map_size;
	block_size = info.block_size;
	nr_blocks = info.nr_blocks;
	map = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		die("mmap");
}

/* Bytes of a block that publish writes and the readers check. */
static uint64_t fill_len(void)
{
	const char *e = getenv("MH_FILL");
	uint64_t n = e ? strtoull(e, NULL, 0) : 0;

	return n && n < block_size ? n : block_size;
}

static uint8_t fill(uint64_t key, uint32_t tag, uint64_t j)
{
	uint64_t x = key * 0x9e3779b97f4a7c15ULL ^ (uint64_t)tag << 40 ^
		     (j >> 3) * 0xff51afd7ed558ccdULL;

	return (uint8_t)(x >> ((j & 7) * 8));
}

static int read_hex(const char *path, uint64_t *v)
{
	FILE *f = fopen(path, "r");
	int ok;

	if (!f)
		return -1;
	ok = fscanf(f, "%" SCNi64, v) == 1;
	fclose(f);
	return ok ? 0 : -1;
}

static int do_attach(const char *dax, uint32_t id, int format)
{
	struct beluga_attach a = { .size = sizeof(a) };
	char path[256];
	uint64_t start, len;

	snprintf(path, sizeof(path), "/sys/bus/dax/devices/%s/resource", dax);
	if (read_hex(path, &start))
		die(path);
	snprintf(path, sizeof(path), "/sys/bus/dax/devices/%s/size", dax);
	if (read_hex(path, &len))
		die(path);
	a.flags = BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID |
		  (format ? BELUGA_ATTACH_FORMAT : 0);
	a.backend = BELUGA_BACKEND_DAX;
	a.node = -1;
	a.phys_start = start;
	a.length = len;
	a.host_id = id;
	snprintf(a.name, sizeof(a.name), "%s", dax);
	dev_open();
	if (ioctl(fd, BELUGA_IOC_ATTACH, &a))
		return -errno;
	printf("attached %s as host %u: region %u, %llu blocks at offset %#llx\n",
	       dax, id, a.region_id, (unsigned long long)a.nr_blocks,
	       (unsigned long long)a.first_offset);
	return 0;
}

static int do_publish(uint64_t ns, uint64_t base, uint32_t n, uint32_t tag)
{
	struct beluga_alloc al = { .size = sizeof(al), .count = n };
	struct beluga_publish pub = { .size = sizeof(pub) };
	struct beluga_publish_item *items;
	uint64_t *offs;
	uint32_t i;
	uint64_t j;

	dev_open();
	dev_map();
	offs = calloc(n, sizeof(*offs));
	items = calloc(n, sizeof(*items));
	al.offsets = (uintptr_t)offs;
	if (ioctl(fd, BELUGA_IOC_ALLOC, &al))
		die("ALLOC");
	for (i = 0; i < n; i++) {
		uint8_t *p = map + offs[i];

		for (j = 0; j < fill_len(); j++)
			p[j] = fill(base + i, tag, j);
		items[i].offset = offs[i];
		items[i].key.lo = base + i;
		items[i].key.hi = KEY_HI;
	}
	pub.ns = ns;
	pub.count = n;
	pub.items = (uintptr_t)items;
	if (ioctl(fd, BELUGA_IOC_PUBLISH, &pub))
		die("PUBLISH");
	for (i = 0; i < n; i++)
		if (items[i].result < 0)
			fprintf(stderr, "item %u: %s\n", i,
				strerror(-items[i].result));
	printf("published %u exists %u failed %u\n", pub.published, pub.exists,
	       pub.failed);
	return pub.failed ? 1 : 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Tag of the writer whose bytes the block holds, or -1 if it matches none. */
static int32_t block_tag(const uint8_t *p, uint64_t key)
{
	uint32_t tag;
	uint64_t j;

	uint64_t len = fill_len();

	for (tag = 1; tag <= 8; tag++) {
		for (j = 0; j < len; j++)
			if (p[j] != fill(key, tag, j))
				break;
		if (j == len)
			return (int32_t)tag;
	}
	return -1;
}

static int lookup(uint64_t ns, uint64_t base, uint32_t n, uint32_t flags,
		  uint64_t *offs, uint32_t *hits)
{
	struct beluga_lookup lk = { .size = sizeof(lk) };
	struct beluga_key *keys = calloc(n, sizeof(*keys));
	uint32_t i;
	int ret;

	for (i = 0; i < n; i++) {
		keys[i].lo = base + i;
		keys[i].hi = KEY_HI;
	}
	lk.flags = flags;
	lk.ns = ns;
	lk.count = n;
	lk.keys = (uintptr_t)keys;
	lk.offsets = (uintptr_t)offs;
	ret = ioctl(fd, BELUGA_IOC_LOOKUP, &lk) ? -errno : 0;
	*hits = lk.hits;
	free(keys);
	return ret;
}

static int do_wait(uint64_t ns, uint64_t base, uint32_t n, double secs)
{
	struct beluga_blocks rel = { .size = sizeof(rel), .count = n };
	uint64_t *offs = calloc(n, sizeof(*offs));
	double t0 = now_s(), t1;
	uint32_t hits = 0, i;
	int bad = 0;

	dev_open();
	dev_map();
	for (;;) {
		if (lookup(ns, base, n, 0, NULL, &hits))
			die("LOOKUP");
		if (hits == n)
			break;
		if (now_s() - t0 > secs) {
			printf("timeout: %u of %u keys after %.0f s\n", hits, n,
			       secs);
			return 2;
		}
		usleep(100000);
	}
	t1 = now_s();
	if (lookup(ns, base, n, BELUGA_LOOKUP_PIN, offs, &hits))
		die("LOOKUP+PIN");
	if (hits != n) {
		printf("pinned %u of %u keys\n", hits, n);
		return 1;
	}
	for (i = 0; i < n; i++) {
		int32_t tag = block_tag(map + offs[i], base + i);

		if (tag < 0) {
			printf("key %" PRIu64 ": bytes match no writer\n",
			       base + i);
			bad++;
		}
	}
	rel.offsets = (uintptr_t)offs;
	if (ioctl(fd, BELUGA_IOC_RELEASE, &rel))
		die("RELEASE");
	printf("found %u keys after %.1f s, %u byte-exact (checked in %.1f s)\n", n,
	       t1 - t0, n - bad, now_s() - t1);
	return bad ? 1 : 0;
}

static int do_read(uint64_t ns, uint64_t key)
{
	struct beluga_blocks rel = { .size = sizeof(rel), .count = 1 };
	uint64_t off;
	uint32_t hits;
	int32_t tag;

	dev_open();
	dev_map();
	if (lookup(ns, key, 1, BELUGA_LOOKUP_PIN, &off, &hits))
		die("LOOKUP+PIN");
	if (!hits) {
		printf("tag none\n");
		return 1;
	}
	tag = block_tag(map + off, key);
	rel.offsets = (uintptr_t)&off;
	if (ioctl(fd, BELUGA_IOC_RELEASE, &rel))
		die("RELEASE");
	printf("tag %d\n", tag);
	return tag < 0;
}

/* Publish one key: alloc, fill, publish. 1 published, 0 exists, -errno. */
static int publish_one(uint64_t ns, uint64_t key, uint32_t tag)
{
	struct beluga_alloc al = { .size = sizeof(al), .count = 1 };
	struct beluga_publish pub = { .size = sizeof(pub) };
	struct beluga_publish_item item = { 0 };
	uint64_t off, j, len = fill_len();
	uint8_t *p;

	al.offsets = (uintptr_t)&off;
	if (ioctl(fd, BELUGA_IOC_ALLOC, &al))
		return -errno;
	p = map + off;
	for (j = 0; j < len; j++)
		p[j] = fill(key, tag, j);
	item.offset = off;
	item.key.lo = key;
	item.key.hi = KEY_HI;
	pub.ns = ns;
	pub.count = 1;
	pub.items = (uintptr_t)&item;
	if (ioctl(fd, BELUGA_IOC_PUBLISH, &pub))
		return -errno;
	if (item.result < 0)
		return item.result;
	return pub.published ? 1 : 0;
}

static int release_one(uint64_t off)
{
	struct beluga_blocks rel = { .size = sizeof(rel), .count = 1 };

	rel.offsets = (uintptr_t)&off;
	return ioctl(fd, BELUGA_IOC_RELEASE, &rel) ? -errno : 0;
}

static int do_stream(uint64_t ns, uint64_t base, uint32_t max, uint32_t tag,
		     uint64_t pinbase, uint32_t pinn)
{
	uint64_t *offs = calloc(pinn ? pinn : 1, sizeof(*offs));
	uint32_t i = 0, hits, round = 0;
	struct beluga_blocks rel = { .size = sizeof(rel) };
	int ret;

	dev_open();
	dev_map();
	printf("# STREAM-START\n");
	for (;;) {
		if (i < max) {
			ret = publish_one(ns, base + i, tag);
			printf("# STREAM %u %s\n", i + 1,
			       ret == 1 ? "published" : ret == 0 ? "exists" :
			       strerror(-ret));
			i++;
		}
		if (pinn) {
			if (lookup(ns, pinbase, pinn, BELUGA_LOOKUP_PIN, offs,
				   &hits))
				die("LOOKUP+PIN");
			if (hits != pinn)
				printf("# STREAM pinned %u of %u\n", hits, pinn);
			rel.count = hits;
			rel.offsets = (uintptr_t)offs;
			if (hits && ioctl(fd, BELUGA_IOC_RELEASE, &rel))
				die("RELEASE");
		}
		if (++round % 50 == 0)
			printf("# STREAM round %u\n", round);
	}
	return 0;
}

struct range {
	uint64_t base;
	uint32_t n;
};

static uint32_t parse_ranges(int argc, char **argv, struct range *r)
{
	uint32_t total = 0;
	int i;

	for (i = 0; i < argc; i++) {
		char *colon = strchr(argv[i], ':');

		r[i].base = strtoull(argv[i], NULL, 0);
		r[i].n = colon ? strtoul(colon + 1, NULL, 0) : 1;
		total += r[i].n;
	}
	return total;
}

/*
 * Survivors' lookups while another host dies or rejoins: every key of every
 * range, in rounds of four kinds: one LOOKUP per key count-only, one per key
 * with PIN (then RELEASE), one LOOKUP per range (a chain, as a prefix
 * lookup does) count-only, and one per range with PIN. Every key that
 * misses counts. Miss episodes are printed with their times (CLOCK_MONOTONIC
 * of this guest, s).
 */
static int do_watch(uint64_t ns, const char *stop, int argc, char **argv)
{
	static const char *const kind[4] = { "count-only", "pin", "chain", "chain+pin" };
	struct range *r = calloc(argc, sizeof(*r));
	uint64_t lk[4] = { 0 }, miss[4] = { 0 }, *offs;
	double t0 = now_s(), first = -1, last = -1, ep = -1, longest = 0;
	uint32_t nkeys = parse_ranges(argc, argv, r), hits, round = 0, maxn = 1;
	struct beluga_blocks rel = { .size = sizeof(rel) };
	int i;

	for (i = 0; i < argc; i++)
		if (r[i].n > maxn)
			maxn = r[i].n;
	offs = calloc(maxn, sizeof(*offs));
	dev_open();
	dev_map();
	printf("# WATCH-START %.1f keys %u\n", t0, nkeys);
	while (access(stop, F_OK)) {
		int m = round % 4, pin = m & 1, chain = m >> 1;
		uint32_t round_miss = 0;

		for (i = 0; i < argc; i++) {
			uint32_t k, step = chain ? r[i].n : 1;

			for (k = 0; k < r[i].n; k += step) {
				uint64_t key = r[i].base + k;

				if (lookup(ns, key, step, pin ? BELUGA_LOOKUP_PIN : 0,
					   pin ? offs : NULL, &hits))
					die("LOOKUP");
				lk[m] += step;
				if (pin && hits) {
					rel.count = hits;
					rel.offsets = (uintptr_t)offs;
					if (ioctl(fd, BELUGA_IOC_RELEASE, &rel))
						die("RELEASE");
				}
				if (hits == step)
					continue;
				miss[m] += step - hits;
				round_miss += step - hits;
				if (first < 0)
					first = now_s();
				last = now_s();
				if (miss[0] + miss[1] + miss[2] + miss[3] <= 20)
					printf("# WATCH miss key %" PRIu64 " (+%u) %s at %.1f\n",
					       key + hits, step - hits - 1, kind[m], last);
			}
		}
		if (round_miss && ep < 0) {
			ep = now_s();
			printf("# WATCH miss episode starts at %.1f\n", ep);
		} else if (!round_miss && ep >= 0 && m == 3) {
			/* an episode ends after a full cycle of the four kinds without a miss */
			printf("# WATCH miss episode ends at %.1f (%.1f s)\n",
			       now_s(), now_s() - ep);
			if (now_s() - ep > longest)
				longest = now_s() - ep;
			ep = -1;
		}
		round++;
		usleep(20000);	/* leave the emulator some CPU */
	}
	if (ep >= 0 && now_s() - ep > longest)
		longest = now_s() - ep;
	printf("WATCH lookups %" PRIu64 " misses %" PRIu64 " (count-only %" PRIu64 "/%" PRIu64
	       ", pin %" PRIu64 "/%" PRIu64 ", chain %" PRIu64 "/%" PRIu64 ", chain+pin %" PRIu64
	       "/%" PRIu64 ") rounds %u over %.1f s (%.1f..%.1f) first-miss %.1f last-miss %.1f"
	       " longest-episode %.1f s\n",
	       lk[0] + lk[1] + lk[2] + lk[3], miss[0] + miss[1] + miss[2] + miss[3],
	       miss[0], lk[0], miss[1], lk[1], miss[2], lk[2], miss[3], lk[3],
	       round, now_s() - t0, t0, now_s(), first, last, longest);
	return miss[0] + miss[1] + miss[2] + miss[3] ? 1 : 0;
}

static void print_blocks(const char *what, const char *role,
			 const uint64_t *offs, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++) {
		if (i % 16 == 0)
			printf("%s# ACCT-%s %s", i ? "\n" : "", what, role);
		printf(" %" PRIu64, offs[i] / block_size);
	}
	if (n)
		printf("\n");
}

/*
 * Pool accounting on a survivor (Documentation/multihost.md section 6: no
 * block is lost, none is owned twice): pin every key the test published,
 * then take every block this host can get. run.sh checks across the
 * survivors that pinned and allocated blocks together are the whole pool,
 * and that no block was handed out twice.
 */
static int do_account(uint64_t ns, const char *role, uint64_t mine,
		      uint64_t other, int hold, int argc, char **argv)
{
	struct range *r = calloc(argc, sizeof(*r));
	uint32_t nkeys = parse_ranges(argc, argv, r), npin = 0, nalloc = 0, hits;
	uint64_t *pins, *allocs, off;
	double t0;
	int i, err = 0, ret;

	dev_open();
	dev_map();
	pins = calloc(nkeys + 1, sizeof(*pins));
	allocs = calloc(nr_blocks + 1, sizeof(*allocs));
	for (i = 0; i < argc; i++) {
		uint32_t k;

		for (k = 0; k < r[i].n; k++) {
			if (lookup(ns, r[i].base + k, 1, BELUGA_LOOKUP_PIN, &off,
				   &hits))
				die("LOOKUP+PIN");
			if (hits)
				pins[npin++] = off;
		}
	}
	/* tell the other survivor that this host holds its pins */
	ret = publish_one(ns, mine, 1);
	if (ret < 0) {
		printf("ACCT publish %" PRIu64 ": %s\n", mine, strerror(-ret));
		return 1;
	}
	if (lookup(ns, mine, 1, BELUGA_LOOKUP_PIN, &off, &hits) || !hits) {
		printf("ACCT pin %" PRIu64 " failed\n", mine);
		return 1;
	}
	pins[npin++] = off;
	t0 = now_s();
	for (;;) {
		if (lookup(ns, other, 1, 0, NULL, &hits))
			die("LOOKUP");
		if (hits)
			break;
		if (now_s() - t0 > 180) {
			printf("ACCT timeout waiting for key %" PRIu64 "\n", other);
			return 1;
		}
		usleep(100000);
	}
	for (;;) {
		struct beluga_alloc al = { .size = sizeof(al), .count = 1 };

		if (nalloc > nr_blocks) {
			printf("ACCT more allocations than blocks\n");
			return 1;
		}
		al.offsets = (uintptr_t)&allocs[nalloc];
		if (ioctl(fd, BELUGA_IOC_ALLOC, &al)) {
			err = errno;
			break;
		}
		nalloc++;
	}
	printf("ACCT %s keys %u pinned %u allocated %u (then %s) pool %" PRIu64
	       " blocks\n", role, nkeys + 1, npin, nalloc, strerror(err),
	       nr_blocks);
	print_blocks("PIN", role, pins, npin);
	print_blocks("ALLOC", role, allocs, nalloc);
	fflush(stdout);
	sleep(hold);
	return err == ENOSPC ? 0 : 1;
}

static int do_count(uint64_t ns, uint64_t base, uint32_t n)
{
	uint32_t k, hits, h = 0, run = 0;

	dev_open();
	for (k = 0; k < n; k++) {
		if (lookup(ns, base + k, 1, 0, NULL, &hits))
			die("LOOKUP");
		h += hits;
		if (hits && run == k)
			run++;
	}
	printf("count %u run %u\n", h, run);
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, uint32_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n ? (n & 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) : 0;
}

/* Partition of the block at @off: partition p holds [p*n/P, (p+1)*n/P). */
static uint32_t part_of(uint64_t off, uint32_t parts)
{
	uint64_t b = off / block_size;
	uint32_t p;

	for (p = parts - 1; p > 0; p--)
		if (b >= p * nr_blocks / parts)
			break;
	return p;
}

/*
 * Owner vs non-owner LOOKUP cost: the same number of single-key LOOKUPs of
 * keys in partitions this host owns and of keys another host owns, in
 * alternation so that both see the same load. Under TCG only the ratios
 * mean something.
 */
static int do_cost(uint64_t ns, uint64_t own, uint64_t other, uint32_t n,
		   uint32_t iters, uint32_t parts)
{
	static const char *const mode[3] = { "LOOKUP count-only", "LOOKUP+PIN (first pin)",
					     "RELEASE (last pin)" };
	uint64_t base[2] = { own, other }, off;
	uint32_t m, s, it, k, hits, cnt = 0;
	double *t[3][2], med[3][2], sum[3][2];
	uint32_t pmask[2] = { 0, 0 };

	dev_open();
	dev_map();
	for (m = 0; m < 3; m++)
		for (s = 0; s < 2; s++) {
			t[m][s] = calloc((size_t)iters * n, sizeof(double));
			sum[m][s] = 0;
		}
	for (s = 0; s < 2; s++)
		for (k = 0; k < n; k++) {
			if (lookup(ns, base[s] + k, 1, BELUGA_LOOKUP_PIN, &off, &hits))
				die("LOOKUP+PIN");
			if (!hits) {
				printf("cost: key %" PRIu64 " missing\n", base[s] + k);
				return 1;
			}
			pmask[s] |= 1u << part_of(off, parts);
			release_one(off);
		}
	for (it = 0; it < iters; it++)
		for (k = 0; k < n; k++)
			for (s = 0; s < 2; s++) {
				uint32_t side = (s + it) & 1;
				struct beluga_key key = { .lo = base[side] + k, .hi = KEY_HI };
				struct beluga_lookup lk = { .size = sizeof(lk), .ns = ns,
							    .count = 1 };
				struct beluga_blocks rel = { .size = sizeof(rel), .count = 1 };
				double a, b, c;

				lk.keys = (uintptr_t)&key;
				a = now_s();
				if (ioctl(fd, BELUGA_IOC_LOOKUP, &lk) || lk.hits != 1)
					die("LOOKUP");
				b = now_s();
				t[0][side][cnt / 2] = b - a;
				lk.flags = BELUGA_LOOKUP_PIN;
				lk.offsets = (uintptr_t)&off;
				a = now_s();
				if (ioctl(fd, BELUGA_IOC_LOOKUP, &lk) || lk.hits != 1)
					die("LOOKUP+PIN");
				b = now_s();
				rel.offsets = (uintptr_t)&off;
				if (ioctl(fd, BELUGA_IOC_RELEASE, &rel))
					die("RELEASE");
				c = now_s();
				t[1][side][cnt / 2] = b - a;
				t[2][side][cnt / 2] = c - b;
				cnt++;
			}
	printf("COST keys %u per side, %u rounds; owner keys in partitions %#x, "
	       "non-owner keys in partitions %#x\n", n, iters, pmask[0], pmask[1]);
	for (m = 0; m < 3; m++) {
		for (s = 0; s < 2; s++) {
			for (k = 0; k < iters * n; k++)
				sum[m][s] += t[m][s][k];
			med[m][s] = median(t[m][s], iters * n);
		}
		printf("COST %-24s owner median %.1f us mean %.1f us | non-owner median "
		       "%.1f us mean %.1f us | ratio median %.2f mean %.2f\n", mode[m],
		       med[m][0] * 1e6, sum[m][0] / (iters * n) * 1e6,
		       med[m][1] * 1e6, sum[m][1] / (iters * n) * 1e6,
		       med[m][1] / med[m][0], sum[m][1] / sum[m][0]);
	}
	return 0;
}

/* Rewrite the superblock's major version, with a valid checksum. */
static int do_set_version(const char *dax, uint32_t major)
{
	char path[64];
	struct bel_mh_super *sb;
	int dfd;

	snprintf(path, sizeof(path), "/dev/%s", dax);
	dfd = open(path, O_RDWR);
	if (dfd < 0)
		die(path);
	sb = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, dfd, 0);
	if (sb == MAP_FAILED)
		die("mmap dax");
	if (le64_to_cpu(sb->magic) != BEL_MH_MAGIC) {
		printf("no pool on %s\n", dax);
		return 1;
	}
	sb->version_major = cpu_to_le32(major);
	sb->csum = cpu_to_le32(bel_mh_csum(sb, offsetof(struct bel_mh_super, csum)));
	msync(sb, 2 << 20, MS_SYNC);
	printf("superblock major version set to %u\n", major);
	return 0;
}

/*
 * Which of the guest's dax devices is backed by the CXL memory the other
 * guest formatted: the guest setup numbers regions in endpoint probe order,
 * which differs between boots.
 */
static int do_find_pool(int argc, char **argv)
{
	char path[64];
	int i;

	for (i = 0; i < argc; i++) {
		uint8_t *p;
		int dfd, hit;

		snprintf(path, sizeof(path), "/dev/%s", argv[i]);
		dfd = open(path, O_RDONLY);
		if (dfd < 0)
			continue;
		p = mmap(NULL, 2 << 20, PROT_READ, MAP_SHARED, dfd, 0);
		close(dfd);
		if (p == MAP_FAILED)
			continue;
		hit = !memcmp(p, "BELUGAMH", 8);
		munmap(p, 2 << 20);
		if (hit) {
			printf("%s\n", argv[i]);
			return 0;
		}
	}
	return 1;
}

static int do_hosts(void)
{
	static const char *const states[] = { "none", "active", "left" };
	struct beluga_host h[BELUGA_MAX_HOSTS];
	struct beluga_hosts q = {
		.size = sizeof(q),
		.count = BELUGA_MAX_HOSTS,
		.hosts = (uintptr_t)h,
	};
	uint32_t i;

	dev_open();
	if (ioctl(fd, BELUGA_IOC_HOSTS, &q)) {
		printf("hosts: %s\n", strerror(errno));
		return 1;
	}
	for (i = 0; i < q.count && i < BELUGA_MAX_HOSTS; i++) {
		char dev[24] = "-";

		if (h[i].flags & BELUGA_HOST_DEVICE_PINS)
			snprintf(dev, sizeof(dev), "%u", h[i].device_fence_ms);
		printf("%u %s %u %llu %llx %s %llu %s %s devpins=%s %s\n", h[i].host_id,
		       h[i].state < 3 ? states[h[i].state] : "?", h[i].incarnation,
		       (unsigned long long)h[i].heartbeat,
		       (unsigned long long)h[i].owned,
		       h[i].flags & BELUGA_HOST_ALIVE ? "alive" : "dead",
		       (unsigned long long)(h[i].silent_ns / 1000000),
		       h[i].flags & BELUGA_HOST_SELF ? "self" : "-",
		       h[i].name[0] ? h[i].name : "-", dev,
		       h[i].flags & BELUGA_HOST_LEASE_AWARE ? "aware" : "unaware");
	}
	return 0;
}

static int uring_setup(unsigned int entries, struct io_uring_params *p)
{
	memset(p, 0, sizeof(*p));
	return (int)syscall(__NR_io_uring_setup, entries, p);
}

/*
 * The late device write: a block this host allocates is registered as an
 * io_uring fixed buffer (a FOLL_LONGTERM pin, as cudaHostRegister takes),
 * and a READ_FIXED from a pipe into it is queued. A child writes 4 KiB of
 * 0xee into the pipe @delay seconds later (of this guest's time: a paused
 * guest's child waits too); the kernel then copies them into the pinned
 * page, as a device's DMA would, whatever became of the mapping. A fence
 * that stops this host before then (a reset, a quit) keeps them out.
 */
static int late_write(int ring, struct io_uring_params *p, double delay)
{
	struct beluga_alloc al = { .size = sizeof(al), .count = 1 };
	struct io_uring_sqe *sqe;
	struct iovec iov;
	unsigned int *tail;
	uint64_t off;
	int pfd[2];
	void *sq, *sqes;
	pid_t pid;

	al.offsets = (uintptr_t)&off;
	if (ioctl(fd, BELUGA_IOC_ALLOC, &al))
		die("ALLOC");
	iov.iov_base = map + off;
	iov.iov_len = 4096;
	if (syscall(__NR_io_uring_register, ring, IORING_REGISTER_BUFFERS, &iov, 1)) {
		printf("# DEVPIN-FAILED io_uring fixed buffer: %s\n", strerror(errno));
		return 1;
	}
	if (pipe(pfd))
		die("pipe");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (!pid) {
		static char bytes[4096];
		struct timespec ts = { (time_t)delay,
				       (long)((delay - (time_t)delay) * 1e9) };

		memset(bytes, 0xee, sizeof(bytes));
		nanosleep(&ts, NULL);
		_exit(write(pfd[1], bytes, sizeof(bytes)) != sizeof(bytes));
	}
	close(pfd[1]);
	sq = mmap(NULL, p->sq_off.array + p->sq_entries * sizeof(unsigned int),
		  PROT_READ | PROT_WRITE, MAP_SHARED, ring, IORING_OFF_SQ_RING);
	sqes = mmap(NULL, p->sq_entries * sizeof(struct io_uring_sqe),
		    PROT_READ | PROT_WRITE, MAP_SHARED, ring, IORING_OFF_SQES);
	if (sq == MAP_FAILED || sqes == MAP_FAILED)
		die("mmap io_uring");
	sqe = sqes;
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = IORING_OP_READ_FIXED;
	sqe->fd = pfd[0];
	sqe->addr = (uintptr_t)iov.iov_base;
	sqe->len = iov.iov_len;
	sqe->off = (uint64_t)-1;
	sqe->buf_index = 0;
	tail = (unsigned int *)((char *)sq + p->sq_off.tail);
	((unsigned int *)((char *)sq + p->sq_off.array))[*tail & (p->sq_entries - 1)] = 0;
	__atomic_store_n(tail, *tail + 1, __ATOMIC_RELEASE);
	if (syscall(__NR_io_uring_enter, ring, 1, 0, 0, NULL, 0) != 1) {
		printf("# DEVPIN-FAILED io_uring READ_FIXED from a pipe: %s\n", strerror(errno));
		return 1;
	}
	printf("# LATE-QUEUED block at offset %llu, written %.0f s from now\n",
	       (unsigned long long)off, delay);
	return 0;
}

static int do_devpin(double secs, int letgo, double late)
{
	struct beluga_device_range r = { .size = sizeof(r) };
	struct io_uring_params up;
	struct pollfd pfd;
	struct iovec iov;
	double t0 = now_s(), t_sig;
	uint64_t v;
	int efd, ring;

	dev_open();
	efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (efd < 0)
		die("eventfd");
	{
		struct beluga_info info = { .size = sizeof(info) };

		if (ioctl(fd, BELUGA_IOC_INFO, &info))
			die("INFO");
		r.length = info.map_size;
	}
	r.eventfd = efd;
	if (ioctl(fd, BELUGA_IOC_DEVICE_RANGE, &r)) {
		printf("# DEVPIN-FAILED %s\n", strerror(errno));
		return 1;
	}
	dev_map();
	ring = uring_setup(4, &up);
	if (ring < 0)
		die("io_uring_setup");
	iov.iov_base = map;
	iov.iov_len = block_size;
	if (late) {
		if (late_write(ring, &up, late))
			return 1;
	} else if (syscall(__NR_io_uring_register, ring,
			   IORING_REGISTER_BUFFERS, &iov, 1)) {
		printf("# DEVPIN-FAILED io_uring fixed buffer: %s\n",
		       strerror(errno));
		return 1;
	}
	printf("# DEVPIN %u\n", r.fence_ms);
	pfd.fd = efd;
	pfd.events = POLLIN;
	while (now_s() - t0 < secs) {
		if (poll(&pfd, 1, 100) != 1 || read(efd, &v, sizeof(v)) != 8)
			continue;
		t_sig = now_s();
		printf("# DEVPIN-SIGNALLED\n");
		if (!letgo)
			continue;
		if (syscall(__NR_io_uring_register, ring,
				     IORING_UNREGISTER_BUFFERS, NULL, 0))
			die("IORING_UNREGISTER_BUFFERS");
		close(ring);
		munmap(map, map_size);
		close(fd);
		printf("# LETGO %.0f\n", (now_s() - t_sig) * 1000);
		return 0;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";
	int ret;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(cmd, "attach") && argc >= 4) {
		ret = do_attach(argv[2], strtoul(argv[3], NULL, 0),
				argc > 4 && !strcmp(argv[4], "format"));
		if (ret)
			printf("attach: %s\n", strerror(-ret));
		return !!ret;
	}
	if (!strcmp(cmd, "attach-expect") && argc == 5) {
		int want = atoi(argv[4]);

		ret = do_attach(argv[2], strtoul(argv[3], NULL, 0), 0);
		printf("attach: %s (want %s)\n", ret ? strerror(-ret) : "ok",
		       strerror(want));
		return ret != -want;
	}
	if (!strcmp(cmd, "detach")) {
		struct beluga_detach d = { .size = sizeof(d) };

		dev_open();
		if (ioctl(fd, BELUGA_IOC_DETACH, &d)) {
			printf("detach: %s\n", strerror(errno));
			return 1;
		}
		return 0;
	}
	if (!strcmp(cmd, "publish") && argc == 6)
		return do_publish(strtoull(argv[2], NULL, 0),
				  strtoull(argv[3], NULL, 0),
				  strtoul(argv[4], NULL, 0),
				  strtoul(argv[5], NULL, 0));
	if (!strcmp(cmd, "wait") && argc == 6)
		return do_wait(strtoull(argv[2], NULL, 0),
			       strtoull(argv[3], NULL, 0),
			       strtoul(argv[4], NULL, 0), atof(argv[5]));
	if (!strcmp(cmd, "read") && argc == 4)
		return do_read(strtoull(argv[2], NULL, 0),
			       strtoull(argv[3], NULL, 0));
	if (!strcmp(cmd, "find-pool") && argc > 2)
		return do_find_pool(argc - 2, argv + 2);
	if (!strcmp(cmd, "stream") && argc == 8)
		return do_stream(strtoull(argv[2], NULL, 0),
				 strtoull(argv[3], NULL, 0),
				 strtoul(argv[4], NULL, 0),
				 strtoul(argv[5], NULL, 0),
				 strtoull(argv[6], NULL, 0),
				 strtoul(argv[7], NULL, 0));
	if (!strcmp(cmd, "watch") && argc > 4)
		return do_watch(strtoull(argv[2], NULL, 0), argv[3],
				argc - 4, argv + 4);
	if (!strcmp(cmd, "account") && argc > 7)
		return do_account(strtoull(argv[2], NULL, 0), argv[3],
				  strtoull(argv[4], NULL, 0),
				  strtoull(argv[5], NULL, 0), atoi(argv[6]),
				  argc - 7, argv + 7);
	if (!strcmp(cmd, "count") && argc == 5)
		return do_count(strtoull(argv[2], NULL, 0),
				strtoull(argv[3], NULL, 0),
				strtoul(argv[4], NULL, 0));
	if (!strcmp(cmd, "cost") && argc == 8)
		return do_cost(strtoull(argv[2], NULL, 0),
			       strtoull(argv[3], NULL, 0),
			       strtoull(argv[4], NULL, 0),
			       strtoul(argv[5], NULL, 0),
			       strtoul(argv[6], NULL, 0),
			       strtoul(argv[7], NULL, 0));
	if (!strcmp(cmd, "hosts") && argc == 2)
		return do_hosts();
	if (!strcmp(cmd, "free") && argc == 2) {
		struct beluga_stats st = { .size = sizeof(st) };

		dev_open();
		if (ioctl(fd, BELUGA_IOC_STATS, &st))
			die("STATS");
		printf("%llu\n", (unsigned long long)st.free_blocks);
		return 0;
	}
	if (!strcmp(cmd, "devpin") && argc == 4)
		return do_devpin(atof(argv[2]), !strcmp(argv[3], "letgo"),
				 !strncmp(argv[3], "late:", 5) ? atof(argv[3] + 5) : 0);
	if (!strcmp(cmd, "set-version") && argc == 4)
		return do_set_version(argv[2], strtoul(argv[3], NULL, 0));
	fprintf(stderr, "usage: see the comment at the top of mhtool.c\n");
	return 2;
}
