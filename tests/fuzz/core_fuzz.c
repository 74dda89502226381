// SPDX-License-Identifier: GPL-2.0
/*
 * core_fuzz: a libFuzzer harness for the portable core (kmod/core), built
 * with ASan and UBSan on the host (clang -fsanitize=fuzzer).
 *
 * The input is a byte program: each operation takes an opcode byte and its
 * argument bytes. Up to four clients add and remove regions, allocate,
 * free, publish, look up (with and without pins), release and evict, mixing
 * valid arguments (their own blocks and pins) with arbitrary ones. One
 * opcode arms an allocation failure: the n-th following bel_calloc() (the
 * core's only allocator) returns NULL, so the error paths run too.
 *
 * Checked after every operation: the STATS occupancy adds up (free +
 * allocated + published = total, per region and in all), pins >= pinned
 * blocks, nothing negative; a client's FREE of its own blocks and RELEASE
 * of its own pins succeed. At the end every client is released, no
 * allocation or pin remains, and every region detaches with eviction.
 * Leaks are ASan's job.
 *
 *   make -C tests/fuzz core-fuzz           build build/fuzz/core_fuzz
 *   make -C tests/fuzz core-fuzz-run       fuzz for CORE_FUZZ_SECS (60) s
 *   build/fuzz/core_fuzz CRASH-FILE        replay one input
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bel_core.h"

/* --- allocation failure injection (the core is built with -Dcalloc=fz_calloc) */
static unsigned int fail_in;	/* 0: off; n: the n-th call from now fails */

void *fz_calloc(size_t n, size_t size);
void *fz_calloc(size_t n, size_t size)
{
	if (fail_in && --fail_in == 0)
		return NULL;
	return (calloc)(n, size);
}

/* --- the byte program --------------------------------------------------- */
struct prog {
	const uint8_t *p;
	size_t n, i;
};

static uint8_t byte(struct prog *pr)
{
	return pr->i < pr->n ? pr->p[pr->i++] : 0;
}

static uint32_t u16b(struct prog *pr)
{
	return byte(pr) | (uint32_t)byte(pr) << 8;
}

#define NCL	4
#define MAXOWN	64
#define MAXPIN	64

static struct bel_pool pool;
static struct bel_client *cl[NCL];
static uint64_t own[NCL][MAXOWN];
static int nown[NCL];
static uint64_t pin[NCL][MAXPIN];
static int npin[NCL];

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static void check_stats(void)
{
	struct bel_stats s;
	u64 t = 0, f = 0, a = 0, p = 0;

	bel_pool_stats(&pool, &s);
	if (s.free_blocks + s.allocated_blocks + s.published_blocks != s.total_blocks)
		FAIL("free %llu + allocated %llu + published %llu != total %llu",
		     (unsigned long long)s.free_blocks, (unsigned long long)s.allocated_blocks,
		     (unsigned long long)s.published_blocks, (unsigned long long)s.total_blocks);
	if (s.pins < s.pinned_blocks || s.pinned_blocks > s.published_blocks)
		FAIL("pins %llu, pinned %llu, published %llu",
		     (unsigned long long)s.pins, (unsigned long long)s.pinned_blocks,
		     (unsigned long long)s.published_blocks);
	for (u32 slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		struct bel_region_stats rs;

		if (bel_region_stats(&pool, slot, &rs))
			continue;
		if (rs.free_blocks + rs.allocated_blocks + rs.published_blocks != rs.nr_blocks)
			FAIL("region %u does not add up", slot);
		t += rs.nr_blocks;
		f += rs.free_blocks;
		a += rs.allocated_blocks;
		p += rs.published_blocks;
	}
	if (t != s.total_blocks || f != s.free_blocks || a != s.allocated_blocks ||
	    p != s.published_blocks)
		FAIL("regions and pool disagree");
}

static struct beluga_key key_of(uint64_t ns, uint32_t k)
{
	struct beluga_key key = { .lo = ns * 1000003ULL + k + 1, .hi = k * 7919ULL + ns };

	return key;
}

/* An offset: one of the client's own, a pinned one, or anything. */
static uint64_t any_offset(struct prog *pr, int c)
{
	uint8_t b = byte(pr);

	switch (b & 3) {
	case 0:
		if (nown[c])
			return own[c][byte(pr) % nown[c]];
		break;
	case 1:
		if (npin[c])
			return pin[c][byte(pr) % npin[c]];
		break;
	case 2:
		return (uint64_t)u16b(pr) * 4096;
	}
	return (uint64_t)u16b(pr) * 16384;
}

static void drop_owned(int c, uint64_t off)
{
	for (int i = 0; i < nown[c]; i++)
		if (own[c][i] == off) {
			own[c][i] = own[c][--nown[c]];
			return;
		}
}

static void client_release(int c)
{
	if (!cl[c])
		return;
	bel_client_release(cl[c]);
	cl[c] = NULL;
	nown[c] = npin[c] = 0;
}

static void step(struct prog *pr)
{
	uint8_t op = byte(pr);
	int c = (op >> 4) % NCL, r;
	uint64_t offs[64];
	uint32_t n;

	if ((op & 15) >= 2 && (op & 15) <= 8 && !cl[c]) {
		cl[c] = bel_client_new(&pool);
		if (!cl[c])
			return;
	}
	switch (op & 15) {
	case 0: {	/* add a region */
		static const u64 bs[] = { 0, 4096, 16384, 65536 };
		u32 slot, nb;
		u64 first;

		r = bel_pool_add_region(&pool, (u64)(1 + byte(pr) % 16) * 65536 +
					(byte(pr) & 1) * 4096, bs[byte(pr) & 3],
					&slot, &first, &nb);
		if (r && r != -EINVAL && r != -ENOSPC && r != -ENOMEM)
			FAIL("add_region: %d", r);
		break;
	}
	case 1: {	/* remove a region */
		u64 ev;

		r = bel_pool_remove_region(&pool, byte(pr) % (BELUGA_MAX_REGIONS + 1),
					   byte(pr) & 1, &ev);
		if (r && r != -ENOENT && r != -EBUSY)
			FAIL("remove_region: %d", r);
		break;
	}
	case 2:		/* open a fresh client / release one */
		client_release(c);
		break;
	case 3:		/* ALLOC */
		n = 1 + byte(pr) % 16;
		if (nown[c] + (int)n > MAXOWN)
			break;
		r = bel_alloc(cl[c], n, offs);
		if (r == 0)
			for (u32 i = 0; i < n; i++)
				own[c][nown[c]++] = offs[i];
		else if (r != -ENOSPC && r != -ENODEV)
			FAIL("alloc: %d", r);
		break;
	case 4: {	/* FREE: own blocks (must work) or anything */
		bool valid = byte(pr) & 1;

		n = 1 + byte(pr) % 8;
		if (valid) {
			if (!nown[c])
				break;
			if (n > (u32)nown[c])
				n = (u32)nown[c];
			memcpy(offs, &own[c][nown[c] - n], n * sizeof(u64));
			r = bel_free(cl[c], n, offs);
			if (r)
				FAIL("free of %u own blocks: %d", n, r);
			nown[c] -= (int)n;
			break;
		}
		for (u32 i = 0; i < n; i++)
			offs[i] = any_offset(pr, c);
		r = bel_free(cl[c], n, offs);
		if (r == 0)
			for (u32 i = 0; i < n; i++)
				drop_owned(c, offs[i]);
		else if (r != -EINVAL)
			FAIL("free: %d", r);
		break;
	}
	case 5: {	/* PUBLISH */
		struct beluga_publish_item items[16];
		u32 okc, ex, fl;
		u64 ns = byte(pr) % 3;

		n = 1 + byte(pr) % 8;
		memset(items, 0, sizeof(items));
		for (u32 i = 0; i < n; i++) {
			items[i].offset = any_offset(pr, c);
			items[i].key = key_of(ns, byte(pr) % 32);
		}
		r = bel_publish(cl[c], ns, n, items, &okc, &ex, &fl);
		if (r || okc + ex + fl != n)
			FAIL("publish: %d, %u+%u+%u != %u", r, okc, ex, fl, n);
		for (u32 i = 0; i < n; i++) {
			s32 res = items[i].result;

			if (res == BELUGA_PUBLISH_OK || res == BELUGA_PUBLISH_EXISTS)
				drop_owned(c, items[i].offset);
			else if (res != -EINVAL && res != -EPERM)
				FAIL("publish item result %d", res);
		}
		break;
	}
	case 6: {	/* LOOKUP */
		struct beluga_key keys[16];
		bool p = byte(pr) & 1;
		u64 ns = byte(pr) % 3;
		u32 hits = 0, k0 = byte(pr) % 32;

		n = 1 + byte(pr) % 8;
		if (p && npin[c] + (int)n > MAXPIN)
			p = false;
		for (u32 i = 0; i < n; i++)
			keys[i] = key_of(ns, (k0 + i) % 32);
		r = bel_lookup(cl[c], ns, n, keys, p, p || (op & 1) ? offs : NULL, &hits);
		if (r == -ENOMEM)
			break;
		if (r || hits > n)
			FAIL("lookup: %d hits %u", r, hits);
		if (p)
			for (u32 i = 0; i < hits; i++)
				pin[c][npin[c]++] = offs[i];
		break;
	}
	case 7: {	/* RELEASE: own pins (must work) or anything */
		bool valid = byte(pr) & 1;

		n = 1 + byte(pr) % 8;
		if (valid) {
			if (!npin[c])
				break;
			if (n > (u32)npin[c])
				n = (u32)npin[c];
			memcpy(offs, &pin[c][npin[c] - n], n * sizeof(u64));
			r = bel_release(cl[c], n, offs);
			if (r)
				FAIL("release of %u own pins: %d", n, r);
			npin[c] -= (int)n;
			break;
		}
		for (u32 i = 0; i < n; i++)
			offs[i] = any_offset(pr, c);
		r = bel_release(cl[c], n, offs);
		if (r == 0) {	/* drop those pins from the model, once each */
			for (u32 i = 0; i < n; i++)
				for (int j = 0; j < npin[c]; j++)
					if (pin[c][j] == offs[i]) {
						pin[c][j] = pin[c][--npin[c]];
						break;
					}
		} else if (r != -EINVAL) {
			FAIL("release: %d", r);
		}
		break;
	}
	case 8: {	/* EVICT */
		u64 ns = byte(pr) % 3, busy;

		if (byte(pr) & 1) {
			bel_evict_ns(&pool, ns, &busy);
		} else {
			struct beluga_key k = key_of(ns, byte(pr) % 32);

			r = bel_evict_key(&pool, ns, &k);
			if (r && r != -ENOENT && r != -EBUSY)
				FAIL("evict_key: %d", r);
		}
		break;
	}
	case 9:		/* the n-th next allocation fails */
		fail_in = 1 + byte(pr) % 4;
		break;
	default:
		break;
	}
	check_stats();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct prog pr = { data, size, 0 };
	struct bel_stats s;

	fail_in = 0;
	bel_pool_init(&pool);
	memset(cl, 0, sizeof(cl));
	memset(nown, 0, sizeof(nown));
	memset(npin, 0, sizeof(npin));
	for (int steps = 0; pr.i < pr.n && steps < 400; steps++)
		step(&pr);
	fail_in = 0;
	for (int c = 0; c < NCL; c++)
		client_release(c);
	bel_pool_stats(&pool, &s);
	if (s.allocated_blocks || s.pins || s.pinned_blocks || s.clients)
		FAIL("after every client: allocated %llu pins %llu clients %llu",
		     (unsigned long long)s.allocated_blocks, (unsigned long long)s.pins,
		     (unsigned long long)s.clients);
	for (u32 slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		u64 ev;
		int r = bel_pool_remove_region(&pool, slot, true, &ev);

		if (r && r != -ENOENT)
			FAIL("region %u does not detach at the end: %d", slot, r);
	}
	bel_pool_stats(&pool, &s);
	if (s.total_blocks)
		FAIL("blocks left after removing every region");
	bel_pool_destroy(&pool);
	return 0;
}
