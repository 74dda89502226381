// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libbeluga: the reference chained block hash, FNV-1a with 128-bit state.
 * The definition (byte layout, constants, vectors) is in libbeluga.h; this
 * file only has to compute it fast and in portable C11.
 *
 * Why FNV-1a-128: it is fully specified by two constants, needs no seed
 * (a key must be equal in every process and host), and takes ten lines in
 * any language. It is not a cryptographic hash; Beluga keys only have to
 * keep honest prefixes apart. 128 bits make accidental collisions between
 * distinct prefixes negligible at any pool size.
 */
#include <errno.h>
#include <stdint.h>

#include "internal.h"

#define FNV128_BASIS_HI	0x6c62272e07bb0142ULL
#define FNV128_BASIS_LO	0x62b821756295c58dULL
/*
 * The 128-bit FNV prime is 2^88 + 0x13b. Multiplying by it is therefore
 * h * 0x13b + (h << 88), which needs no 128-bit type: the shift only
 * touches the high word (by 88 - 64 = 24 bits of the low word), and the
 * product of the low word with a 9-bit constant carries into the high word
 * by mulhi(lo, 0x13b).
 */
#define FNV128_PRIME_LOW	0x13bULL

struct fnv128 {
	uint64_t hi;
	uint64_t lo;
};

/* High 64 bits of the 128-bit product x * c, for c < 2^32. */
static inline uint64_t mulhi_small(uint64_t x, uint64_t c)
{
	uint64_t high_part = (x >> 32) * c;
	uint64_t low_part = (x & 0xffffffffULL) * c;

	return (high_part + (low_part >> 32)) >> 32;
}

static inline void fnv128_mix_byte(struct fnv128 *h, uint8_t byte)
{
	uint64_t lo = h->lo ^ byte;
	uint64_t hi = h->hi;

	h->hi = hi * FNV128_PRIME_LOW + mulhi_small(lo, FNV128_PRIME_LOW) + (lo << 24);
	h->lo = lo * FNV128_PRIME_LOW;
}

static inline void fnv128_init(struct fnv128 *h)
{
	h->hi = FNV128_BASIS_HI;
	h->lo = FNV128_BASIS_LO;
}

/* Feed @v as @nbytes little-endian bytes, whatever the host byte order. */
static inline void fnv128_mix_le(struct fnv128 *h, uint64_t v, unsigned int nbytes)
{
	unsigned int i;

	for (i = 0; i < nbytes; i++)
		fnv128_mix_byte(h, (uint8_t)(v >> (8 * i)));
}

BEL_EXPORT void beluga_fnv1a_128(const void *data, size_t len, struct beluga_key *out)
{
	const uint8_t *p = data;
	struct fnv128 h;
	size_t i;

	fnv128_init(&h);
	for (i = 0; i < len; i++)
		fnv128_mix_byte(&h, p[i]);
	out->hi = h.hi;
	out->lo = h.lo;
}

BEL_EXPORT void beluga_hash_block(const struct beluga_key *parent, const uint32_t *tokens,
				  size_t nr_tokens, struct beluga_key *out)
{
	struct fnv128 h;
	size_t i;

	fnv128_init(&h);
	fnv128_mix_le(&h, parent ? parent->lo : 0, 8);
	fnv128_mix_le(&h, parent ? parent->hi : 0, 8);
	fnv128_mix_le(&h, (uint32_t)nr_tokens, 4);
	for (i = 0; i < nr_tokens; i++)
		fnv128_mix_le(&h, tokens[i], 4);
	out->hi = h.hi;
	out->lo = h.lo;
}

BEL_EXPORT ssize_t beluga_hash_chain(const struct beluga_key *parent,
				     const uint32_t *tokens, size_t nr_tokens,
				     size_t block_tokens, struct beluga_key *keys,
				     size_t max_keys)
{
	struct beluga_key prev = { 0, 0 };
	size_t nr_keys, i;

	if (!block_tokens || block_tokens > UINT32_MAX)
		return bel_fail(NULL, -EINVAL,
				"beluga_hash_chain: block_tokens must be in 1..2^32-1 (got %zu)",
				block_tokens);
	nr_keys = nr_tokens / block_tokens;
	if (nr_keys > max_keys)
		nr_keys = max_keys;
	if (parent)
		prev = *parent;
	for (i = 0; i < nr_keys; i++) {
		beluga_hash_block(&prev, tokens + i * block_tokens, block_tokens, &keys[i]);
		prev = keys[i];
	}
	return (ssize_t)nr_keys;
}
