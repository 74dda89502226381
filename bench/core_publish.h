/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The benchmarks' servers over the portable core keep keys and offsets in
 * parallel arrays (their wire formats); the core's PUBLISH takes the uapi's
 * item array. This fills @it (room for @n items) from the arrays and calls
 * bel_publish(); the results stay in @it.
 */
#ifndef BENCH_CORE_PUBLISH_H
#define BENCH_CORE_PUBLISH_H

#include "bel_core.h"

static inline int bench_core_publish(struct bel_client *c, u64 ns, u32 n,
				     const u64 *offs,
				     const struct beluga_key *keys,
				     struct beluga_publish_item *it,
				     u32 *ok, u32 *exists, u32 *failed)
{
	u32 i;

	for (i = 0; i < n && i < BELUGA_MAX_BATCH; i++) {
		it[i].offset = offs[i];
		it[i].key = keys[i];
		it[i].__reserved = 0;
	}
	return bel_publish(c, ns, n, it, ok, exists, failed);
}

#endif /* BENCH_CORE_PUBLISH_H */
