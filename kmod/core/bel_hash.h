/* SPDX-License-Identifier: GPL-2.0 OR LGPL-2.1-or-later */
/*
 * The key hash of both indexes: the single-host index in DRAM (index.c)
 * and the shared pool's on-media index, whose bucket of a key every host
 * must compute alike. So this function is part of the shared pool's
 * on-media format: its superblock names it (bel_mh_super.hash,
 * BEL_MH_HASH_MIX64), and tests/unit/mh checks it against fixed vectors.
 * Changing it means a new BEL_MH_HASH_* value and a new major format
 * version (modules of format 1.0 do not read the hash field).
 *
 * bel_mix64() is also the mixing step of the shared pool's checksum, uuid
 * and partition designation (mh_format.c, mh_host.c), and a seedable
 * generator in tests. Dual licensed: libbeluga compiles it to find a
 * key's bucket in the index's copy (bel_index_walk.h).
 */
#ifndef BEL_HASH_H
#define BEL_HASH_H

#include "bel_env.h"

/* MurmurHash3's 64-bit finaliser: each input bit reaches every output bit. */
static inline u64 bel_mix64(u64 h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

/*
 * Keys are meant to be uniform hashes, but traces and tests use small
 * integers (hash ids 0, 1, 2 ... in key.lo, hi = 0), and two tenants may
 * store the same keys under different namespaces. Mix all three words
 * through a full 64-bit finaliser so that the low bits used as the bucket
 * number depend on every input bit. Buckets are a power of two: the
 * bucket of a key is bel_key_hash() & (buckets - 1).
 */
static inline u64 bel_key_hash(u64 ns, u64 key_lo, u64 key_hi)
{
	return bel_mix64(bel_mix64(ns * 0x9e3779b97f4a7c15ULL ^ key_hi) ^
			 key_lo);
}

#endif /* BEL_HASH_H */
