// SPDX-License-Identifier: GPL-2.0
/*
 * libbeluga's count-only LOOKUP with no system call (beluga_index_map(),
 * beluga_lookup_count()) against the in-process fake kernel, whose
 * INDEX_MAP hands out the core's own copy of the index: answers equal
 * LOOKUP's, no LOOKUP reaches the kernel while the copy is live, a seal
 * (ATTACH) sends lookups to the kernel until the handle maps again, and
 * the errors name their fix.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libbeluga.h"
#include "fake_kernel.h"
#include "internal.h"
#include "../lib/tap.h"

#define BS	4096ULL
#define NKEYS	48

static char dev_path[FAKE_DEVICE_PATH_LEN];

static struct beluga_key key_of(uint64_t i)
{
	struct beluga_key k = { .lo = i * 0x9e3779b97f4a7c15ULL + 1, .hi = i };

	return k;
}

static int publish_range(struct beluga *b, uint64_t ns, uint64_t first, size_t n)
{
	struct beluga_publish_item items[NKEYS];
	uint64_t offs[NKEYS];
	size_t i;
	int ret;

	ret = beluga_alloc(b, offs, n);
	for (i = 0; !ret && i < n; i++) {
		memset(&items[i], 0, sizeof(items[i]));
		items[i].offset = offs[i];
		items[i].key = key_of(first + i);
	}
	return ret ? ret : beluga_publish(b, ns, items, n, NULL);
}

/* Chains over keys [first, first + n), answered both ways. */
struct probe {
	uint64_t ns, first;
	size_t n;
};

static const struct probe probes[] = {
	{ 0, 0, NKEYS },	/* all hit */
	{ 0, 10, 20 },		/* all hit, not from the start */
	{ 0, 30, 40 },		/* 18 hits, then keys never published */
	{ 0, 500, 5 },		/* a miss at once */
	{ 1, 0, 8 },		/* another namespace: 4 hits (below) */
};

/* Every probe: beluga_lookup_count() equals beluga_lookup(); mismatches. */
static int compare_probes(struct beluga *b)
{
	struct beluga_key keys[64];
	unsigned int bad = 0;
	size_t p, i;

	for (p = 0; p < sizeof(probes) / sizeof(probes[0]); p++) {
		ssize_t want, got;

		for (i = 0; i < probes[p].n; i++)
			keys[i] = key_of(probes[p].first + i);
		got = beluga_lookup_count(b, probes[p].ns, keys, probes[p].n);
		want = beluga_lookup(b, probes[p].ns, keys, probes[p].n, NULL, 0);
		if (got != want) {
			printf("# probe %zu: beluga_lookup_count %zd, LOOKUP %zd\n", p, got, want);
			bad++;
		}
	}
	return bad;
}

static void test_mapped_lookups(void)
{
	struct beluga_key keys[NKEYS];
	unsigned int before;
	struct beluga *b = NULL, *ro = NULL;
	ssize_t got;
	size_t i;
	int ret;

	fake_kernel_reset(BS, BELUGA_MAX_BATCH);
	fake_kernel_add_region("dax0.0", BELUGA_BACKEND_DAX, -1, 0x390000000ULL, 256 * BS);
	if (beluga_open(dev_path, O_RDWR, &b) || beluga_open(dev_path, O_RDONLY, &ro)) {
		printf("# beluga_open: %s\n", beluga_last_error(NULL));
		exit(1);
	}
	publish_range(b, 0, 0, NKEYS);
	publish_range(b, 1, 0, 4);
	for (i = 0; i < NKEYS; i++)
		keys[i] = key_of(i);

	/* Not mapped: the kernel's LOOKUP. */
	before = fake_kernel_calls(BELUGA_CMD_LOOKUP);
	got = beluga_lookup_count(b, 0, keys, NKEYS);
	tap_result(got == NKEYS && fake_kernel_calls(BELUGA_CMD_LOOKUP) == before + 1 &&
		   !beluga_index_live(b),
		   "lookup_count: unmapped, it is one LOOKUP (%zd hits)", got);

	ret = beluga_index_map(ro);
	tap_result(ret == 0 && beluga_index_live(ro) && fake.index_maps == 1,
		   "index_map: a read-only handle maps the index (%d)", ret);

	before = fake_kernel_calls(BELUGA_CMD_LOOKUP);
	got = beluga_lookup_count(ro, 0, keys, NKEYS);
	tap_result(got == NKEYS && fake_kernel_calls(BELUGA_CMD_LOOKUP) == before,
		   "lookup_count: mapped, %zd of %d hits with no LOOKUP call", got, NKEYS);
	tap_result(compare_probes(ro) == 0,
		   "lookup_count: every probe (hits, partial runs, misses, namespaces) equals LOOKUP");

	/* An eviction is seen at once, through the copy. */
	ret = beluga_evict_key(b, 0, &keys[20]);
	before = fake_kernel_calls(BELUGA_CMD_LOOKUP);
	got = beluga_lookup_count(ro, 0, keys, NKEYS);
	tap_result(ret == 0 && got == 20 && fake_kernel_calls(BELUGA_CMD_LOOKUP) == before,
		   "lookup_count: an evicted key ends the run (%zd), still no LOOKUP call", got);

	/* ATTACH seals the copy: answers stay right, from the kernel. */
	fake_kernel_add_region("dax1.0", BELUGA_BACKEND_DAX, -1, 0x490000000ULL, 256 * BS);
	publish_range(b, 0, 100, 8);
	before = fake_kernel_calls(BELUGA_CMD_LOOKUP);
	got = beluga_lookup_count(ro, 0, keys, 20);
	tap_result(!beluga_index_live(ro) && got == 20 &&
		   fake_kernel_calls(BELUGA_CMD_LOOKUP) == before + 1,
		   "lookup_count: a copy sealed by ATTACH asks LOOKUP (%zd hits)", got);
	tap_result(compare_probes(ro) == 0, "lookup_count: sealed, every probe equals LOOKUP");

	/* Mapped again: live, both regions, no system call. */
	ret = beluga_index_map(ro);
	for (i = 0; i < 8; i++)
		keys[i] = key_of(100 + i);
	before = fake_kernel_calls(BELUGA_CMD_LOOKUP);
	got = beluga_lookup_count(ro, 0, keys, 8);
	tap_result(ret == 0 && beluga_index_live(ro) && got == 8 &&
		   fake_kernel_calls(BELUGA_CMD_LOOKUP) == before && fake.index_maps == 2,
		   "index_map again: live, the new region's keys found with no LOOKUP call (%zd)",
		   got);
	beluga_index_unmap(ro);
	tap_result(!beluga_index_live(ro), "index_unmap: not mapped any more");
	beluga_close(ro);
	beluga_close(b);
}

static void test_errors(void)
{
	struct beluga *b = NULL;
	int ret;

	fake_kernel_reset(BS, BELUGA_MAX_BATCH);
	if (beluga_open(dev_path, O_RDWR, &b))
		exit(1);
	ret = beluga_index_map(b);
	tap_result(ret == -ENODEV && strstr(beluga_last_error(b), "INDEX_MAP: no region attached: "
						      "attach a memory region to the pool first"),
		   "index_map: an empty pool is -ENODEV, with the fix (%s)", beluga_last_error(b));
	fake_kernel_add_region("dax0.0", BELUGA_BACKEND_DAX, -1, 0x390000000ULL, 16 * BS);
	fake.fail_cmd = BELUGA_CMD_INDEX_MAP;
	fake.fail_nth = fake_kernel_calls(BELUGA_CMD_INDEX_MAP) + 1;
	fake.fail_errno = EOPNOTSUPP;
	ret = beluga_index_map(b);
	tap_result(ret == -EOPNOTSUPP && strstr(beluga_last_error(b), "shared (multi-host) pool") &&
		   strstr(beluga_last_error(b), "use beluga_lookup()"),
		   "index_map: a shared pool's -EOPNOTSUPP names the way out");
	fake.fail_nth = fake_kernel_calls(BELUGA_CMD_INDEX_MAP) + 1;
	fake.fail_errno = ENOTTY;
	ret = beluga_index_map(b);
	tap_result(ret == -ENOTTY && strstr(beluga_last_error(b), "does not know this command"),
		   "index_map: an older module (-ENOTTY) is told to match the library");
	tap_result(!beluga_index_live(b), "index_map: nothing mapped after the failures");
	beluga_close(b);
}

int main(void)
{
	if (fake_device_create(dev_path))
		return 1;
	test_mapped_lookups();
	test_errors();
	unlink(dev_path);
	return tap_done();
}
