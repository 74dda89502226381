// SPDX-License-Identifier: GPL-2.0
/*
 * libbeluga against the in-process fake kernel: opening, batch splitting
 * and the cross-chunk semantics (all-or-nothing ALLOC, leading-run LOOKUP,
 * pins undone on error, per-item PUBLISH results), error messages, and the
 * mapping helper.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "libbeluga.h"
#include "fake_kernel.h"
#include "internal.h"
#include "../lib/tap.h"

#define BS	4096ULL
#define MB	(1ULL << 20)

static char dev_path[FAKE_DEVICE_PATH_LEN];

/* A fresh fake pool of @nr_blocks blocks, batches of @max_batch, and a handle. */
static struct beluga *setup(uint32_t max_batch, uint32_t nr_blocks)
{
	struct beluga *b = NULL;

	fake_kernel_reset(BS, max_batch);
	if (nr_blocks)
		fake_kernel_add_region("dax0.0", BELUGA_BACKEND_DAX, -1, 0x390000000ULL,
				       nr_blocks * BS);
	if (beluga_open(dev_path, O_RDWR, &b)) {
		printf("# beluga_open: %s\n", beluga_last_error(NULL));
		exit(1);
	}
	return b;
}

static struct beluga_key key_of(uint64_t i)
{
	struct beluga_key k = { .lo = i * 0x9e3779b97f4a7c15ULL + 1, .hi = i };

	return k;
}

/* Allocate and publish keys 0..n-1 (batch-agnostic helper). */
static int publish_keys(struct beluga *b, uint64_t ns, size_t n)
{
	struct beluga_publish_item *items = calloc(n, sizeof(*items));
	uint64_t *offs = calloc(n, sizeof(*offs));
	size_t i;
	int ret;

	ret = beluga_alloc(b, offs, n);
	for (i = 0; !ret && i < n; i++) {
		items[i].offset = offs[i];
		items[i].key = key_of(i);
	}
	if (!ret)
		ret = beluga_publish(b, ns, items, n, NULL);
	free(items);
	free(offs);
	return ret;
}

static void test_open(void)
{
	struct beluga *b = NULL;
	int ret;

	ret = beluga_open("/nonexistent/beluga", O_RDWR, &b);
	tap_result(ret == -ENOENT && !b &&
		   strstr(beluga_last_error(NULL), "/nonexistent/beluga not found: load the "
			  "module with `modprobe beluga`, or check the path (the module's "
			  "pools=N makes /dev/beluga, /dev/beluga1"),
		   "open: a missing device is named, with the fix (load the module, or the path)");
	if (!access(BELUGA_DEVICE_PATH, F_OK)) {
		tap_skip(BELUGA_DEVICE_PATH " exists here", "open: a missing default device "
			 "says only: load the module");
	} else {
		ret = beluga_open(BELUGA_DEVICE_PATH, O_RDWR, &b);
		tap_result(ret == -ENOENT &&
			   !strcmp(beluga_last_error(NULL), BELUGA_DEVICE_PATH " not found: load "
				   "the module with `modprobe beluga`"),
			   "open: a missing default device says only: load the module (%s)",
			   beluga_last_error(NULL));
	}

	ret = beluga_open(dev_path, O_RDWR | O_APPEND, &b);
	tap_result(ret == -EINVAL && strstr(beluga_last_error(NULL), "O_RDWR or O_RDONLY"),
		   "open: unknown flags are refused");

	fake_kernel_reset(BS, BELUGA_MAX_BATCH);
	fake.abi_version = 99;
	ret = beluga_open(dev_path, O_RDWR, &b);
	tap_result(ret == -EPROTO && strstr(beluga_last_error(NULL), "ABI 99"),
		   "open: an ABI mismatch is -EPROTO naming both versions");

	fake_kernel_reset(BS, BELUGA_MAX_BATCH);
	fake.fail_cmd = BELUGA_CMD_INFO;
	fake.fail_nth = 1;
	fake.fail_errno = ENOTTY;
	ret = beluga_open(dev_path, O_RDWR, &b);
	tap_result(ret == -ENOTTY && strstr(beluga_last_error(NULL), "not a Beluga device") &&
		   strstr(beluga_last_error(NULL), ": give the path of /dev/beluga (or /dev/belugaN)"),
		   "open: a file without the INFO ioctl is not a Beluga device, and the fix");

	setenv("BELUGA_DEVICE", dev_path, 1);
	fake_kernel_reset(BS, BELUGA_MAX_BATCH);
	ret = beluga_open(NULL, O_RDONLY, &b);
	tap_result(!ret && b && beluga_fd(b) >= 0, "open: NULL path uses $BELUGA_DEVICE");
	beluga_close(b);
	unsetenv("BELUGA_DEVICE");
}

static void test_alloc(void)
{
	uint64_t offs[10];
	struct beluga *b;
	int ret, i, distinct = 1;

	b = setup(4, 16);
	ret = beluga_alloc(b, offs, 10);
	for (i = 1; i < 10; i++)
		distinct &= offs[i] != offs[i - 1];
	tap_result(!ret && fake_kernel_calls(BELUGA_CMD_ALLOC) == 3 && fake.log[1].count == 4 &&
		   fake.log[2].count == 4 && fake.log[3].count == 2 && distinct &&
		   fake_kernel_count(1) == 10,
		   "alloc: 10 blocks in batches of 4 take 3 calls (4, 4, 2)");
	beluga_close(b);

	/* Only 9 free blocks: the third chunk fails, the first two are undone. */
	b = setup(4, 9);
	ret = beluga_alloc(b, offs, 10);
	tap_result(ret == -ENOSPC && fake_kernel_count(1) == 0 && fake_kernel_count(0) == 9 &&
		   fake_kernel_calls(BELUGA_CMD_FREE) == 2,
		   "alloc: a failing later chunk frees the earlier chunks (all or nothing)");
	tap_result(strstr(beluga_last_error(b), "release pins") != NULL,
		   "alloc: -ENOSPC message says how to make room");
	beluga_close(b);

	b = setup(4, 9);
	tap_result(!beluga_alloc(b, offs, 0) && fake.nr_calls == 1,
		   "alloc: count 0 is a no-op without an ioctl");
	beluga_close(b);

	b = setup(BELUGA_MAX_BATCH, 0);
	ret = beluga_alloc(b, offs, 1);
	tap_result(ret == -ENODEV &&
		   strstr(beluga_last_error(b), "no region attached: attach a memory region") &&
		   !strstr(beluga_last_error(b), "belugactl"),
		   "alloc: no region attached says so and the fix, naming no front end");
	beluga_close(b);
}

/* beluga_alloc_evicting(): the keys the allocation evicted, oldest first. */
static void test_alloc_evicting(void)
{
	struct beluga_evicted_key evicted[10];
	uint64_t offs[10];
	size_t nr = 99, i;
	unsigned int calls;
	struct beluga *b;
	int ret, in_order = 1;

	b = setup(4, 8);
	ret = beluga_alloc_evicting(b, offs, 3, evicted, &nr);
	tap_result(!ret && nr == 0, "alloc_evicting: free blocks evict nothing (nr_evicted 0)");
	beluga_free(b, offs, 3);
	publish_keys(b, 5, 8);
	calls = fake_kernel_calls(BELUGA_CMD_ALLOC);
	ret = beluga_alloc_evicting(b, offs, 6, evicted, &nr);
	for (i = 0; i < nr; i++)
		in_order &= evicted[i].ns == 5 && evicted[i].key.lo == key_of(i).lo &&
			    evicted[i].key.hi == key_of(i).hi;
	tap_result(!ret && nr == 6 && in_order && fake_kernel_calls(BELUGA_CMD_ALLOC) == calls + 2 &&
		   fake_kernel_count(2) == 2,
		   "alloc_evicting: 6 blocks in batches of 4 name the 6 keys they evicted, "
		   "least recently published first (got %zu)", nr);
	beluga_free(b, offs, 6);
	beluga_close(b);

	/* The second chunk finds too few: the first's evictions stay reported. */
	b = setup(4, 6);
	publish_keys(b, 5, 6);
	ret = beluga_alloc_evicting(b, offs, 8, evicted, &nr);
	tap_result(ret == -ENOSPC && nr == 4 && fake_kernel_count(1) == 0 &&
		   fake_kernel_count(2) == 2,
		   "alloc_evicting: a failing later chunk frees the earlier ones and still counts "
		   "what they evicted (got %zu)", nr);
	beluga_close(b);

	b = setup(4, 8);
	fake.alloc_v1 = 1;
	ret = beluga_alloc_evicting(b, offs, 2, evicted, &nr);
	tap_result(ret == -EOPNOTSUPP && nr == 0 &&
		   strstr(beluga_last_error(b), "module predates ALLOC's evicted report") &&
		   strstr(beluga_last_error(b), "upgrade the module"),
		   "alloc_evicting: a module without the report is -EOPNOTSUPP naming cause and fix "
		   "(%s)", beluga_last_error(b));
	tap_result(!beluga_alloc(b, offs, 2) && fake_kernel_count(1) == 2,
		   "alloc: still works on a module without the report");
	beluga_free(b, offs, 2);
	tap_result(beluga_alloc_evicting(b, offs, 2, NULL, &nr) == -EINVAL &&
		   strstr(beluga_last_error(b), "call beluga_alloc()"),
		   "alloc_evicting: no room for the keys is -EINVAL, pointing at beluga_alloc()");
	beluga_close(b);
}

static void test_big_batches(void)
{
	enum { N = 10000 };
	uint64_t *offs = calloc(N, sizeof(*offs));
	struct beluga_key *keys = calloc(N, sizeof(*keys));
	struct beluga *b;
	ssize_t hits;
	int i;

	b = setup(BELUGA_MAX_BATCH, N + 10);
	tap_result(!publish_keys(b, 1, N) && fake_kernel_calls(BELUGA_CMD_ALLOC) == 3 &&
		   fake_kernel_calls(BELUGA_CMD_PUBLISH) == 3 && fake_kernel_count(2) == N,
		   "alloc+publish: 10000 items take 3 calls each at BELUGA_MAX_BATCH");
	for (i = 0; i < N; i++)
		keys[i] = key_of((uint64_t)i);
	hits = beluga_lookup(b, 1, keys, N, offs, BELUGA_LOOKUP_PIN);
	tap_result(hits == N && fake_kernel_calls(BELUGA_CMD_LOOKUP) == 3 && fake.nr_pins == N,
		   "lookup: 10000 keys across 3 chunks all hit and are pinned");
	tap_result(!beluga_release(b, offs, N) && fake.nr_pins == 0 &&
		   fake_kernel_calls(BELUGA_CMD_RELEASE) == 3,
		   "release: 10000 pins in 3 calls");
	beluga_close(b);
	free(offs);
	free(keys);
}

/*
 * LOOKUP+PIN of the 10 @keys of namespace 7, at 4 keys a call: @want hits in
 * @calls calls, each one pinned. The pins are released again.
 */
static void lookup_pinned(struct beluga *b, const struct beluga_key *keys, ssize_t want,
			  unsigned int calls, const char *what)
{
	uint64_t offs[10] = { 0 };
	ssize_t hits;

	fake.calls_of[BELUGA_CMD_LOOKUP] = 0;
	hits = beluga_lookup(b, 7, keys, 10, offs, BELUGA_LOOKUP_PIN);
	tap_result(hits == want && fake_kernel_calls(BELUGA_CMD_LOOKUP) == calls &&
		   fake.nr_pins == (uint64_t)want, "%s", what);
	beluga_release(b, offs, (size_t)want);
}

static void test_lookup(void)
{
	struct beluga_key keys[10];
	uint64_t offs[10];
	struct beluga *b;
	ssize_t hits;
	int i;

	for (i = 0; i < 10; i++)
		keys[i] = key_of((uint64_t)i);

	b = setup(4, 32);
	publish_keys(b, 7, 10);
	fake.nr_calls = 0;
	lookup_pinned(b, keys, 10, 3, "lookup: full hits continue into the next chunk");

	/* Key 5 missing: chunk 1 hits 4 of 4, chunk 2 hits 1 of 4, stop. */
	keys[5].hi ^= 0xdead;
	lookup_pinned(b, keys, 5, 2, "lookup: stops at the first miss (chunk 2 of 3 not full)");
	keys[5].hi ^= 0xdead;

	/* Miss exactly at a chunk boundary. */
	keys[4].hi ^= 0xbeef;
	lookup_pinned(b, keys, 4, 2, "lookup: a miss at a chunk boundary ends the run");
	keys[4].hi ^= 0xbeef;

	/* Keys after a miss are not a hit even if present (chain semantics). */
	keys[0].lo ^= 1;
	hits = beluga_lookup(b, 7, keys, 10, offs, BELUGA_LOOKUP_PIN);
	tap_result(hits == 0 && fake.nr_pins == 0, "lookup: a first-key miss is 0 hits");
	keys[0].lo ^= 1;

	/* Failure in chunk 2 with pins: chunk 1's pins are released. */
	fake.calls_of[BELUGA_CMD_LOOKUP] = 0;
	fake.fail_cmd = BELUGA_CMD_LOOKUP;
	fake.fail_nth = 2;
	fake.fail_errno = EFAULT;
	hits = beluga_lookup(b, 7, keys, 10, offs, BELUGA_LOOKUP_PIN);
	tap_result(hits == -EFAULT && fake.nr_pins == 0,
		   "lookup: an error in a later chunk releases the earlier chunks' pins");
	fake.fail_cmd = -1;

	/* Count-only: no offsets, no pins. */
	hits = beluga_lookup(b, 7, keys, 10, NULL, 0);
	tap_result(hits == 10 && fake.nr_pins == 0, "lookup: count-only probe pins nothing");
	hits = beluga_lookup(b, 8, keys, 10, NULL, 0);
	tap_result(hits == 0, "lookup: namespaces are separate");

	fake.calls_of[BELUGA_CMD_LOOKUP] = 0;
	hits = beluga_lookup(b, 7, keys, 10, NULL, BELUGA_LOOKUP_PIN);
	tap_result(hits == -EINVAL && fake_kernel_calls(BELUGA_CMD_LOOKUP) == 0 &&
		   strstr(beluga_last_error(b), "offsets"),
		   "lookup: PIN without an offsets array is refused before the ioctl");
	beluga_close(b);
}

static void test_publish(void)
{
	struct beluga_publish_summary sum;
	struct beluga_publish_item items[10];
	uint64_t offs[10];
	struct beluga *b;
	int i, ok = 1, ret;

	b = setup(4, 32);
	beluga_alloc(b, offs, 10);
	memset(items, 0xff, sizeof(items));	/* garbage result and reserved */
	for (i = 0; i < 10; i++) {
		items[i].offset = offs[i];
		items[i].key = key_of((uint64_t)(i % 8));	/* items 8, 9 repeat 0, 1 */
	}
	items[3].offset = 12345;			/* not a block */
	ret = beluga_publish(b, 1, items, 10, &sum);
	for (i = 0; i < 10; i++) {
		int want = i == 3 ? -EINVAL : i >= 8 ? BELUGA_PUBLISH_EXISTS : BELUGA_PUBLISH_OK;

		ok &= items[i].result == want;
	}
	tap_result(!ret && ok && sum.published == 7 && sum.exists == 2 && sum.failed == 1 &&
		   fake_kernel_calls(BELUGA_CMD_PUBLISH) == 3,
		   "publish: per-item results and summed totals across 3 chunks");
	beluga_close(b);

	/* The second chunk fails as a whole: its items and later ones carry the error. */
	b = setup(4, 32);
	beluga_alloc(b, offs, 10);
	for (i = 0; i < 10; i++) {
		items[i].offset = offs[i];
		items[i].key = key_of((uint64_t)i);
	}
	fake.fail_cmd = BELUGA_CMD_PUBLISH;
	fake.fail_nth = 2;
	fake.fail_errno = EFAULT;
	ret = beluga_publish(b, 1, items, 10, &sum);
	ok = 1;
	for (i = 0; i < 10; i++)
		ok &= items[i].result == (i < 4 ? BELUGA_PUBLISH_OK : -EFAULT);
	tap_result(ret == -EFAULT && ok && sum.published == 4 && sum.failed == 6 &&
		   fake_kernel_count(2) == 4,
		   "publish: a failed chunk marks its items and the rest, earlier chunks stay");
	beluga_close(b);
}

static void test_free_release(void)
{
	uint64_t offs[10];
	struct beluga *b;
	int ret;

	b = setup(4, 32);
	beluga_alloc(b, offs, 10);
	offs[6] = 999;		/* chunk 2 holds an invalid offset */
	ret = beluga_free(b, offs, 10);
	tap_result(ret == -EINVAL && fake_kernel_count(1) == 6 &&
		   strstr(beluga_last_error(b), "4 of 10 done"),
		   "free: a bad chunk stops it; the message says how many were freed");
	beluga_close(b);

	b = setup(4, 32);
	publish_keys(b, 1, 3);
	{
		struct beluga_key keys[3] = { key_of(0), key_of(1), key_of(2) };

		beluga_lookup(b, 1, keys, 3, offs, BELUGA_LOOKUP_PIN);
		beluga_lookup(b, 1, keys, 1, offs + 3, BELUGA_LOOKUP_PIN);
	}
	/* offs[0] and offs[3] are the same block, pinned twice. */
	ret = beluga_release(b, offs, 4);
	tap_result(!ret && fake.nr_pins == 0, "release: an offset listed as often as pinned");
	ret = beluga_release(b, offs, 1);
	tap_result(ret == -EINVAL && strstr(beluga_last_error(b), "pinned by this handle"),
		   "release: an unpinned offset is -EINVAL with a message");
	beluga_close(b);
}

static void test_admin_messages(void)
{
	struct beluga_key k = key_of(1);
	uint64_t evicted = 0, busy = 0;
	struct beluga *b;

	b = setup(4, 32);
	tap_result(beluga_detach(b, 5, 0, NULL) == -ENOENT &&
		   strstr(beluga_last_error(b), "no region in slot 5: give the id of an attached"),
		   "detach: an empty slot is -ENOENT, with the fix");
	publish_keys(b, 1, 3);
	tap_result(beluga_detach(b, 0, 0, NULL) == -EBUSY &&
		   strstr(beluga_last_error(b), "or published blocks: stop the processes that "
			  "use the pool, or evict its published blocks first") &&
		   !strstr(beluga_last_error(b), "--evict"),
		   "detach: published blocks without evict is -EBUSY naming them and the fix, "
		   "not a CLI flag");
	tap_result(beluga_evict_key(b, 2, &k) == -ENOENT &&
		   strstr(beluga_last_error(b), "not present in namespace 2: check the key"),
		   "evict: a missing key is -ENOENT, with the fix");
	tap_result(!beluga_evict_key(b, 1, &k) && fake_kernel_count(2) == 2, "evict: one key");
	tap_result(!beluga_evict_ns(b, 1, &evicted, &busy) && evicted == 2 && busy == 0,
		   "evict: a whole namespace");
	tap_result(beluga_detach(b, 0, 2, NULL) == -EINVAL &&
		   strstr(beluga_last_error(b), "unknown flags 0x2: pass 0 or BELUGA_DETACH_EVICT"),
		   "detach: unknown flags are -EINVAL, naming the valid ones");
	tap_result(!beluga_detach(b, 0, BELUGA_DETACH_EVICT, &evicted), "detach: an idle region");
	tap_result(beluga_attach_dax_shared(b, "dax0.0", 0, -1, 2, NULL) == -EINVAL &&
		   strstr(beluga_last_error(b), "unknown flags 0x2: pass 0 or LIBBELUGA_SHARED_FORMAT"),
		   "attach shared: unknown flags are -EINVAL, naming the valid ones");

	fake.fail_cmd = BELUGA_CMD_ATTACH;
	fake.fail_nth = 1;
	fake.fail_errno = EPERM;
	tap_result(beluga_attach_node(b, 0, 8 * MB, 0, NULL) == -EPERM &&
		   strstr(beluga_last_error(b), "needs CAP_SYS_ADMIN: run as root"),
		   "attach: -EPERM says root is needed");
	fake.fail_cmd = -1;
	{
		struct beluga_attach out;

		tap_result(!beluga_attach_node(b, 1, 8 * MB, 0, &out) && out.nr_blocks == 2048 &&
			   !strcmp(out.name, "node1"),
			   "attach: node region reports its blocks");
		tap_result(beluga_attach_node(b, 1, 8 * MB, 0, NULL) == -EEXIST &&
			   strstr(beluga_last_error(b), "already attached, or overlaps an attached "
				  "region: detach that region first"),
			   "attach: the same node twice is -EEXIST, with the fix");
	}
	beluga_close(b);

	tap_result(strstr(beluga_strerror(-ENODEV), "no memory region") &&
		   strstr(beluga_strerror(ENOSPC), "pool full") && *beluga_strerror(-E2BIG) &&
		   !strcmp(beluga_strerror(-EIO), strerror(EIO)),
		   "strerror: Beluga meanings for its errors, strerror() for others");
}

static int map_perms(const void *addr, char perms[5])
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	int found = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 &&
		    (uintptr_t)addr >= lo && (uintptr_t)addr < hi) {
			found = 1;
			break;
		}
	}
	fclose(f);
	return found;
}


/*
 * A shared pool's writers and readers flush whole blocks: with CLFLUSH, one
 * line at a time (160 ns a line on the bench host, 0.4 GB/s); CLFLUSHOPT,
 * where the CPU has it, overlaps them as the kernel's clflush_cache_range()
 * does.
 */
static void flush_insn_check(void)
{
#if defined(__x86_64__)
	unsigned int a, b, c, d;
	int want = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_CLFLUSHOPT) ?
		   BEL_FLUSH_CLFLUSHOPT : BEL_FLUSH_CLFLUSH;

	tap_result(bel_cache_flush_insn() == want,
		   "flush/invalidate ranges use %s, as this CPU's CPUID allows",
		   want == BEL_FLUSH_CLFLUSHOPT ? "CLFLUSHOPT" : "CLFLUSH");
#elif defined(__aarch64__)
	tap_result(bel_cache_flush_insn() == BEL_FLUSH_DC_CIVAC,
		   "flush/invalidate ranges use DC CIVAC");
#else
	tap_skip("no cache maintenance on this architecture", "flush/invalidate instruction");
#endif
}
static void test_map(void)
{
	struct beluga *b, *ro;
	char perms[5];
	void *base;
	int ret;

	b = setup(4, 0);
	ret = beluga_map(b);
	tap_result(ret == -ENODEV && strstr(beluga_last_error(b), "no region attached"),
		   "map: nothing attached is -ENODEV with the fix");
	fake_kernel_add_region("dax0.0", BELUGA_BACKEND_DAX, -1, 0x390000000ULL, 6 * MB);
	ret = beluga_map(b);
	base = beluga_map_base(b);
	tap_result(!ret && base && !((uintptr_t)base & (2 * MB - 1)) &&
		   beluga_map_length(b) == 6 * MB, "map: the whole pool at a 2 MiB aligned address");
	tap_result(beluga_ptr(b, 0) == base && beluga_ptr(b, 6 * MB - 1) == (char *)base + 6 * MB - 1 &&
		   !beluga_ptr(b, 6 * MB), "ptr: offsets inside the mapping only");
	memset(beluga_ptr(b, BS), 0x5a, BS);
	tap_result(map_perms(base, perms) && perms[0] == 'r' && perms[1] == 'w' && perms[3] == 's',
		   "map: a read-write handle maps shared read-write");

	fake_kernel_add_region("dax1.0", BELUGA_BACKEND_DAX, -1, 0x3a0000000ULL, 4 * MB);
	tap_result(!beluga_map(b) && beluga_map_length(b) == 10 * MB &&
		   ((unsigned char *)beluga_ptr(b, BS))[7] == 0x5a,
		   "map: remapping after an attach covers the new region, same data");

	if (beluga_open(dev_path, O_RDONLY, &ro)) {
		tap_result(0, "map: read-only open failed: %s", beluga_last_error(NULL));
	} else {
		tap_result(!beluga_map(ro) && map_perms(beluga_map_base(ro), perms) &&
			   perms[0] == 'r' && perms[1] == '-' &&
			   ((unsigned char *)beluga_ptr(ro, BS))[0] == 0x5a,
			   "map: a read-only handle maps read-only and sees the writer's bytes");
		beluga_close(ro);
	}
	beluga_unmap(b);
	tap_result(!beluga_map_base(b) && !beluga_ptr(b, 0), "unmap: no pointers afterwards");

	/*
	 * Whatever this machine has: no runtime (-ENOSYS), a runtime but no
	 * GPU (-EIO with CUDA's reason), or a GPU (registered in chunks).
	 */
	fake_kernel_add_region("node0", BELUGA_BACKEND_NODE, 0, 0, 2 * MB);
	ret = beluga_cuda_register(b, 0);
	if (ret == -ENOSYS)
		tap_result(strstr(beluga_last_error(b), "no CUDA runtime found") != NULL,
			   "cuda: without a CUDA runtime, register is -ENOSYS with a message");
	else if (ret == -EIO)
		tap_result(strstr(beluga_last_error(b), "cudaHostRegister of pool bytes") != NULL,
			   "cuda: a runtime without a usable GPU is -EIO with CUDA's reason (%s)",
			   beluga_last_error(b));
	else
		tap_result(!ret && beluga_map_base(b) && !beluga_cuda_unregister(b),
			   "cuda: the mapping registers and unregisters (ret %d: %s)", ret,
			   ret ? beluga_last_error(b) : "ok");
	beluga_cuda_unregister(b);
	beluga_close(b);

	tap_result(!beluga_flush_range(&ret, sizeof(ret)) && !beluga_invalidate_range(&ret, 1),
		   "flush/invalidate ranges run on this architecture");
	flush_insn_check();
}

/* The fake answers a raw call the way kmod/ioctl.c does (uapi: common errors). */
static int raw(int fd, unsigned long request, void *arg)
{
	return bel_ioctl(fd, request, arg) ? -errno : 0;
}

/* ALLOC with BELUGA_ALLOC_EVICTED: the uapi's steps 5, 6 and 8 (kselftest abi_test's rows). */
static void test_fake_alloc_evicted(int fd)
{
	struct beluga_evicted_key keys[2];
	uint64_t offs[2] = { 0, 0 };
	struct beluga_alloc a, *ro;
	const struct beluga_alloc v2 = { .size = sizeof(a), .flags = BELUGA_ALLOC_EVICTED,
					 .count = 1, .offsets = (uintptr_t)offs,
					 .evicted = (uintptr_t)keys };

	/* One field of the valid V2 struct changed, and the error it meets first. */
	static const struct {
		size_t field, width;
		uint64_t value;
		int expect;
		const char *name;
	} rows[] = {
		{ 0, 0, 0, -ENODEV, "the flag and its array pass steps 5 and 6 (-ENODEV)" },
		{ offsetof(struct beluga_alloc, evicted), 8, 0, -EINVAL,
		  "BELUGA_ALLOC_EVICTED without an evicted array is -EINVAL" },
		{ offsetof(struct beluga_alloc, flags), 4, 0, -EINVAL,
		  "an evicted array without BELUGA_ALLOC_EVICTED is -EINVAL" },
		{ offsetof(struct beluga_alloc, flags), 4, BELUGA_ALLOC_EVICTED << 1 | BELUGA_ALLOC_EVICTED,
		  -EINVAL, "an unknown ALLOC flag is -EINVAL" },
		{ offsetof(struct beluga_alloc, __reserved2), 4, 1, -EINVAL,
		  "nonzero __reserved2 is -EINVAL" },
		{ offsetof(struct beluga_alloc, size), 4, BELUGA_ALLOC_SIZE_V1, -EINVAL,
		  "the flag in a V1 struct (no room for the array) is -EINVAL" },
		{ offsetof(struct beluga_alloc, count), 4, BELUGA_MAX_BATCH + 1, -E2BIG,
		  "with the flag, a count above the batch is still -E2BIG (step 5 passed)" },
		{ offsetof(struct beluga_alloc, offsets), 8, 0, -EFAULT,
		  "the offsets array is checked before -ENODEV (step 6)" },
	};
	size_t i;

	fake_kernel_reset(BS, BELUGA_MAX_BATCH);	/* no region */
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		uint32_t v32 = (uint32_t)rows[i].value;

		a = v2;
		memcpy((char *)&a + rows[i].field, rows[i].width == 8 ? (const void *)&rows[i].value :
		       (const void *)&v32, rows[i].width);
		tap_result(raw(fd, BELUGA_IOC_ALLOC, &a) == rows[i].expect, "fake: ALLOC: %s",
			   rows[i].name);
	}
	a = v2;
	a.evicted = 0;
	a.count = BELUGA_MAX_BATCH + 1;
	tap_result(raw(fd, BELUGA_IOC_ALLOC, &a) == -E2BIG,
		   "fake: the count comes before the flag's rule on its array (step 5, as the module)");
	a = v2;
	a.size = offsetof(struct beluga_alloc, nr_evicted);
	tap_result(raw(fd, BELUGA_IOC_ALLOC, &a) == -EINVAL,
		   "fake: the flag in a struct without room for nr_evicted is -EINVAL");
	fake.alloc_v1 = 1;
	a = v2;
	tap_result(raw(fd, BELUGA_IOC_ALLOC, &a) == -E2BIG,
		   "fake: a module that predates V2 refuses the flag's struct with -E2BIG");

	fake_kernel_reset(BS, BELUGA_MAX_BATCH);
	fake_kernel_add_region("dax0.0", BELUGA_BACKEND_DAX, -1, 0x390000000ULL, 4 * BS);
	a = v2;
	a.nr_evicted = 77;
	tap_result(!raw(fd, BELUGA_IOC_ALLOC, &a) && a.nr_evicted == 0,
		   "fake: with the flag, nr_evicted is answered in the struct (0: nothing evicted)");
	a = v2;
	a.flags = 0;
	a.evicted = 0;
	a.nr_evicted = 77;
	tap_result(!raw(fd, BELUGA_IOC_ALLOC, &a) && a.nr_evicted == 77,
		   "fake: without the flag the struct is not written (nr_evicted as passed)");
	ro = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (ro == MAP_FAILED) {
		tap_skip("mmap failed", "fake: ALLOC without the flag takes a read-only struct");
		return;
	}
	*ro = a;
	mprotect(ro, 4096, PROT_READ);
	tap_result(!raw(fd, BELUGA_IOC_ALLOC, ro),
		   "fake: ALLOC without the flag takes a read-only struct (step 8)");
	munmap(ro, 4096);
}

static void test_fake_abi_order(void)
{
	uint64_t offs[2] = { 0, 0 };
	struct {
		struct beluga_alloc a;
		uint64_t newer;		/* a field of a newer ABI */
	} big;
	struct beluga_alloc a;
	int fd = open(dev_path, O_RDWR);

	fake_kernel_reset(BS, BELUGA_MAX_BATCH);	/* no region */
	a = (struct beluga_alloc){ .size = sizeof(a), .count = 1,
				   .offsets = (uintptr_t)offs };
	tap_result(raw(fd, BELUGA_IOC_ALLOC, &a) == -ENODEV, "fake: ALLOC without a region is -ENODEV");
	a.flags = 1;
	tap_result(raw(fd, BELUGA_IOC_ALLOC, &a) == -EINVAL,
		   "fake: unknown flags come before -ENODEV (uapi order)");
	a.flags = 0;
	a.count = 0;
	tap_result(raw(fd, BELUGA_IOC_ALLOC, &a) == -EINVAL, "fake: count 0 is -EINVAL");
	a.count = BELUGA_MAX_BATCH + 1;
	tap_result(raw(fd, BELUGA_IOC_ALLOC, &a) == -E2BIG, "fake: count above the batch is -E2BIG");
	a.count = 1;
	a.size = BELUGA_ALLOC_SIZE_V1 - 8;
	tap_result(raw(fd, BELUGA_IOC_ALLOC, &a) == -EINVAL, "fake: a size below V1 is -EINVAL");
	memset(&big, 0, sizeof(big));
	big.a = (struct beluga_alloc){ .size = sizeof(big), .count = 1,
				       .offsets = (uintptr_t)offs };
	big.newer = 1;
	tap_result(raw(fd, BELUGA_IOC_ALLOC, &big) == -E2BIG,
		   "fake: unknown nonzero trailing bytes are -E2BIG");
	big.newer = 0;
	tap_result(raw(fd, BELUGA_IOC_ALLOC, &big) == -ENODEV,
		   "fake: zero trailing bytes are accepted");
	tap_result(raw(fd, _IOW(BELUGA_TYPE, BELUGA_CMD_ALLOC, struct beluga_alloc), &a) == -ENOTTY,
		   "fake: a command encoded with a size is -ENOTTY");
	test_fake_alloc_evicted(fd);
	close(fd);
}

/* beluga_hosts(): the records, snprintf() style when there is less room. */
static void test_hosts(void)
{
	struct beluga_host out[BELUGA_MAX_HOSTS];
	struct beluga *b = setup(BELUGA_MAX_BATCH, 4);
	unsigned int i;
	int ret;

	tap_result(beluga_hosts(b, out, BELUGA_MAX_HOSTS) == 0,
		   "hosts: a pool that is not shared has no records");
	fake.nr_hosts = 3;
	for (i = 0; i < 3; i++) {
		memset(&fake.hosts[i], 0, sizeof(fake.hosts[i]));
		fake.hosts[i].host_id = i;
		fake.hosts[i].state = BELUGA_HOST_ACTIVE;
		fake.hosts[i].incarnation = 10 + i;
		snprintf(fake.hosts[i].name, sizeof(fake.hosts[i].name), "h%u", i);
	}
	fake.hosts[1].flags = BELUGA_HOST_SELF | BELUGA_HOST_ALIVE;
	memset(out, 0xa5, sizeof(out));
	ret = beluga_hosts(b, out, BELUGA_MAX_HOSTS);
	tap_result(ret == 3 && out[2].incarnation == 12 && !strcmp(out[2].name, "h2") &&
		   out[1].flags == (BELUGA_HOST_SELF | BELUGA_HOST_ALIVE) &&
		   out[3].incarnation == 0xa5a5a5a5u,
		   "hosts: every record, nothing past them written");
	memset(out, 0xa5, sizeof(out));
	ret = beluga_hosts(b, out, 2);
	tap_result(ret == 3 && out[1].incarnation == 11 && out[2].incarnation == 0xa5a5a5a5u,
		   "hosts: room for 2 of 3 records gets 2 and the number 3");
	tap_result(beluga_hosts(b, NULL, 0) == 3, "hosts: room for none asks for the number");
	beluga_close(b);
}

int main(void)
{
	if (fake_device_create(dev_path))
		return 1;

	test_open();
	test_alloc();
	test_alloc_evicting();
	test_big_batches();
	test_lookup();
	test_publish();
	test_free_release();
	test_admin_messages();
	test_map();
	test_fake_abi_order();
	test_hosts();
	unlink(dev_path);
	return tap_done();
}
