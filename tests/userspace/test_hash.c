// SPDX-License-Identifier: GPL-2.0
/*
 * Tests of the reference block hash against an independent, deliberately
 * naive FNV-1a-128 (one byte at a time on unsigned __int128, the input
 * bytes laid out by hand), the FNV spec's vectors, and the vectors that
 * libbeluga.h publishes for other implementations.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libbeluga.h"
#include "../lib/tap.h"

typedef unsigned __int128 u128;

static u128 ref_fnv(const uint8_t *p, size_t len)
{
	const u128 prime = ((u128)1 << 88) + 0x13b;
	u128 h = ((u128)0x6c62272e07bb0142ULL << 64) | 0x62b821756295c58dULL;
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= p[i];
		h *= prime;
	}
	return h;
}

static u128 key128(const struct beluga_key *k)
{
	return ((u128)k->hi << 64) | k->lo;
}

static u128 hex128(const char *s)
{
	u128 v = 0;

	for (; *s; s++)
		v = (v << 4) | (u128)(*s <= '9' ? *s - '0' : *s - 'a' + 10);
	return v;
}

/* The key of one block, bytes laid out by hand as libbeluga.h specifies. */
static u128 ref_block(u128 parent, const uint32_t *tokens, uint32_t n)
{
	uint8_t buf[16 + 4 + 4 * 256];
	size_t len = 0;
	uint32_t i;
	int b;

	for (b = 0; b < 16; b++)		/* lo then hi, each LE = LE u128 */
		buf[len++] = (uint8_t)(parent >> (8 * b));
	for (b = 0; b < 4; b++)
		buf[len++] = (uint8_t)(n >> (8 * b));
	for (i = 0; i < n; i++)
		for (b = 0; b < 4; b++)
			buf[len++] = (uint8_t)(tokens[i] >> (8 * b));
	return ref_fnv(buf, len);
}

static uint64_t rng = 42;

static uint32_t next_u32(void)
{
	rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint32_t)(rng >> 32);
}

static void test_standard_vectors(void)
{
	static const struct {
		const char *in;
		const char *hex;
	} v[] = {
		{ "", "6c62272e07bb014262b821756295c58d" },
		{ "a", "d228cb696f1a8caf78912b704e4a8964" },
		{ "foobar", "343e1662793c64bf6f0d3597ba446f18" },
	};
	struct beluga_key k;
	size_t i;

	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		beluga_fnv1a_128(v[i].in, strlen(v[i].in), &k);
		tap_result(key128(&k) == hex128(v[i].hex) && ref_fnv((const uint8_t *)v[i].in,
			   strlen(v[i].in)) == hex128(v[i].hex),
			   "fnv1a-128 standard vector \"%s\"", v[i].in);
	}
}

static void test_random_buffers(void)
{
	uint8_t buf[512];
	struct beluga_key k;
	size_t len, i;
	int bad = 0;

	for (len = 0; len <= sizeof(buf); len++) {
		for (i = 0; i < len; i++)
			buf[i] = (uint8_t)next_u32();
		beluga_fnv1a_128(buf, len, &k);
		bad += key128(&k) != ref_fnv(buf, len);
	}
	tap_result(!bad, "fnv1a-128 matches the independent implementation on 513 random buffers");
}

static void test_block_layout(void)
{
	uint32_t tokens[256];
	struct beluga_key parent, k;
	int bad = 0, round;
	uint32_t n, i;

	for (round = 0; round < 200; round++) {
		n = next_u32() % 257;
		for (i = 0; i < n; i++)
			tokens[i] = next_u32();
		parent.lo = round % 3 ? ((uint64_t)next_u32() << 32 | next_u32()) : 0;
		parent.hi = round % 3 ? ((uint64_t)next_u32() << 32 | next_u32()) : 0;
		beluga_hash_block(&parent, tokens, n, &k);
		bad += key128(&k) != ref_block(key128(&parent), tokens, n);
	}
	tap_result(!bad, "hash_block = FNV-1a-128(parent LE || n LE32 || tokens LE32) on 200 blocks");

	/* A NULL parent is the zero key. */
	tokens[0] = 7;
	beluga_hash_block(NULL, tokens, 1, &k);
	tap_result(key128(&k) == ref_block(0, tokens, 1), "hash_block: NULL parent means zero");

	/* Byte order is fixed, whatever the host's. */
	{
		uint8_t bytes[24] = { 0 };
		uint32_t t = 0x01020304;

		bytes[16] = 1;	/* n = 1 */
		bytes[20] = 0x04, bytes[21] = 0x03, bytes[22] = 0x02, bytes[23] = 0x01;
		beluga_hash_block(NULL, &t, 1, &k);
		tap_result(key128(&k) == ref_fnv(bytes, sizeof(bytes)),
			   "hash_block: token ids are hashed little-endian");
	}

	/* The token count is part of the input: [x] and [x, 0] differ. */
	{
		uint32_t two[2] = { 5, 0 };
		struct beluga_key k1, k2;

		beluga_hash_block(NULL, two, 1, &k1);
		beluga_hash_block(NULL, two, 2, &k2);
		tap_result(key128(&k1) != key128(&k2), "hash_block: the token count is hashed");
	}
}

static void test_published_vectors(void)
{
	uint32_t tokens[32], four[4] = { 1, 2, 3, 4 };
	struct beluga_key keys[4];
	ssize_t n;
	int i;

	for (i = 0; i < 32; i++)
		tokens[i] = (uint32_t)i;
	n = beluga_hash_chain(NULL, tokens, 32, 16, keys, 4);
	tap_result(n == 2 && key128(&keys[0]) == hex128("edeb83b5c40730fbe43af425245ace0d") &&
		   key128(&keys[1]) == hex128("bba2d53446b14787e13ac728aa0e7927"),
		   "published vector: tokens 0..31, 16-token blocks");
	tap_result(key128(&keys[1]) == ref_block(ref_block(0, tokens, 16), tokens + 16, 16),
		   "published vector agrees with the independent chain");
	n = beluga_hash_chain(NULL, four, 4, 4, keys, 4);
	tap_result(n == 1 && key128(&keys[0]) == hex128("a2bf8a25c5590ba78943ede6c6c5e9bd"),
		   "published vector: tokens 1,2,3,4, 4-token blocks");
}

static void test_chaining(void)
{
	enum { BT = 16, NB = 8 };
	uint32_t a[BT * NB + 5], b[BT * NB + 5];
	struct beluga_key ka[NB + 1], kb[NB + 1], kc[NB];
	int i, same_before = 1, differ_after = 1;
	ssize_t na, nb;

	for (i = 0; i < BT * NB + 5; i++)
		a[i] = b[i] = next_u32();
	na = beluga_hash_chain(NULL, a, BT * NB + 5, BT, ka, NB + 1);
	nb = beluga_hash_chain(NULL, b, BT * NB, BT, kb, NB + 1);
	tap_result(na == NB && nb == NB && !memcmp(ka, kb, sizeof(kc)),
		   "chain: equal prefixes give equal keys; a partial last block is not hashed");

	/* Diverge in block 3: keys 0..2 stay, keys 3.. all change. */
	b[3 * BT + 7] ^= 1;
	beluga_hash_chain(NULL, b, BT * NB, BT, kb, NB);
	for (i = 0; i < 3; i++)
		same_before &= key128(&ka[i]) == key128(&kb[i]);
	for (i = 3; i < NB; i++)
		differ_after &= key128(&ka[i]) != key128(&kb[i]);
	tap_result(same_before && differ_after,
		   "chain: a changed token changes its block's key and every later one only");

	/* The same block after a different prefix has a different key. */
	tap_result(key128(&ka[5]) != key128(&kb[5]), "chain: keys depend on the whole prefix");

	/* Continuing a chain from a parent gives the same keys. */
	beluga_hash_chain(NULL, a, 3 * BT, BT, kc, NB);
	beluga_hash_chain(&kc[2], a + 3 * BT, 5 * BT, BT, kc + 3, 5);
	tap_result(!memcmp(kc, ka, sizeof(kc)), "chain: continuing from a parent key");

	tap_result(beluga_hash_chain(NULL, a, BT * NB, BT, kc, 3) == 3,
		   "chain: max_keys caps the output");
	tap_result(beluga_hash_chain(NULL, a, BT - 1, BT, kc, NB) == 0,
		   "chain: fewer tokens than one block give no key");
	tap_result(beluga_hash_chain(NULL, a, BT, 0, kc, NB) == -EINVAL &&
		   strstr(beluga_last_error(NULL), "block_tokens"),
		   "chain: block_tokens 0 is -EINVAL with a message");
}

int main(void)
{
	test_standard_vectors();
	test_random_buffers();
	test_block_layout();
	test_published_vectors();
	test_chaining();
	return tap_done();
}
