// SPDX-License-Identifier: GPL-2.0
/*
 * The module's tracepoints (beluga_trace.h), and the hooks through which
 * the portable core reports what only it sees: the blocks an ALLOC or an
 * EVICT evicts (core/bel_env.h; in userspace the hooks compile away). The
 * shared pool's hook is in mh.c, which knows its host.
 */
#define CREATE_TRACE_POINTS
#include "beluga_trace.h"

#include "beluga_glue.h"

/* Under the pool lock, from bel_evict_block_locked(). */
void bel_env_trace_evict(struct bel_pool *pool, u64 offset, u64 ns,
			 u64 key_lo, u64 key_hi)
{
	struct beluga_device *dev = container_of(pool, struct beluga_device,
						 pool);

	trace_beluga_evict(beluga_pool_id(dev), offset, ns, key_lo, key_hi);
}
