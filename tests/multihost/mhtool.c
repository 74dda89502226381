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
 *
 * A block for key k written by tag t holds fill(k, t, j) at byte j.
 */
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

#include <linux/beluga.h>

#define KEY_HI	0x4d554c5449484f53ULL	/* "MULTIHOS" */

static int fd = -1;
static uint64_t map_size, block_size;
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
	map = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		die("mmap");
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

		for (j = 0; j < block_size; j++)
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

	for (tag = 1; tag <= 8; tag++) {
		for (j = 0; j < block_size; j++)
			if (p[j] != fill(key, tag, j))
				break;
		if (j == block_size)
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
	double t0 = now_s();
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
	printf("found %u keys after %.1f s, %u byte-exact\n", n, now_s() - t0,
	       n - bad);
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

/* Same checksum as kmod/core/mh_format.c (bel_mh_csum). */
static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static uint32_t csum(const void *buf, uint32_t len)
{
	const uint8_t *p = buf;
	uint64_t h = 0x6a09e667f3bcc908ULL ^ len;
	uint32_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		uint64_t w;

		memcpy(&w, p + i, 8);
		h = mix64(h ^ w) + 0x9e3779b97f4a7c15ULL;
	}
	for (; i < len; i++)
		h = mix64(h ^ p[i]);
	return (uint32_t)(h ^ (h >> 32));
}

/* Superblock: magic at 0, major at 8, csum (last of 192 bytes) at 188. */
static int do_set_version(const char *dax, uint32_t major)
{
	char path[64];
	uint8_t *sb;
	uint32_t c;
	int dfd;

	snprintf(path, sizeof(path), "/dev/%s", dax);
	dfd = open(path, O_RDWR);
	if (dfd < 0)
		die(path);
	sb = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, dfd, 0);
	if (sb == MAP_FAILED)
		die("mmap dax");
	if (memcmp(sb, "BELUGAMH", 8)) {
		printf("no pool on %s\n", dax);
		return 1;
	}
	memcpy(sb + 8, &major, 4);
	c = csum(sb, 188);
	memcpy(sb + 188, &c, 4);
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
	if (!strcmp(cmd, "set-version") && argc == 4)
		return do_set_version(argv[2], strtoul(argv[3], NULL, 0));
	fprintf(stderr, "usage: see the comment at the top of mhtool.c\n");
	return 2;
}
