/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The pool's occupancy and counters, as both cores keep them: one struct
 * per concept, each generated from the uapi's one field list
 * (BELUGA_STATS_FIELDS in <linux/beluga.h>), so that a field is added in
 * one place and the module, the fake kernel and the tools follow.
 *
 * struct bel_counters holds the counters alone (events since load): the
 * single-host pool keeps them inside its struct bel_stats, each shared-pool
 * host in its opstats, and the module adds those up with
 * bel_counters_add(). struct bel_stats is one STATS snapshot; its counters
 * are reachable both by name (s.allocs) and as a whole (s.counters).
 */
#ifndef BEL_STATS_H
#define BEL_STATS_H

#include "bel_env.h"
#include <linux/beluga.h>

#define BEL_STATS_U64(name, kind, help)	u64 name;

/*
 * Occupancy and counters, the fields of struct beluga_stats. The group
 * also defines struct bel_counters, the counters alone (events since
 * load).
 */
struct bel_stats {
	BELUGA_STATS_OCCUPANCY_FIELDS(BEL_STATS_U64)
	struct_group_tagged(bel_counters, counters,
			    BELUGA_STATS_COUNTER_FIELDS(BEL_STATS_U64)
	);
};

#undef BEL_STATS_U64

/*
 * The list names each field of struct beluga_stats after @flags once: a
 * name missing from the ABI struct fails to compile, a duplicate name
 * fails struct bel_stats, and a field of the ABI struct missing from the
 * list fails the size check. Every field is a __u64.
 */
#define BEL_STATS_CHECK(name, kind, help)				\
	static_assert(sizeof(((struct beluga_stats *)0)->name) ==	\
		      sizeof(u64), #name " is not a __u64");
BELUGA_STATS_FIELDS(BEL_STATS_CHECK)
#undef BEL_STATS_CHECK
static_assert(sizeof(struct beluga_stats) ==
	      offsetof(struct beluga_stats, flags) + sizeof(__u32) +
	      sizeof(struct bel_stats),
	      "BELUGA_STATS_FIELDS does not list every field of struct beluga_stats");
static_assert(sizeof(struct bel_stats) ==
	      offsetof(struct bel_stats, counters) + sizeof(struct bel_counters),
	      "the counters end struct bel_stats");

/* @to += @from, counter by counter. */
static inline void bel_counters_add(struct bel_counters *to,
				    const struct bel_counters *from)
{
#define BEL_STATS_ADD(name, kind, help)	to->name += from->name;
	BELUGA_STATS_COUNTER_FIELDS(BEL_STATS_ADD)
#undef BEL_STATS_ADD
}

/* STATS' answer: every field of @s into @out (@size and @flags untouched). */
static inline void bel_stats_to_uapi(const struct bel_stats *s,
				     struct beluga_stats *out)
{
#define BEL_STATS_COPY(name, kind, help)	out->name = s->name;
	BELUGA_STATS_FIELDS(BEL_STATS_COPY)
#undef BEL_STATS_COPY
}

#endif /* BEL_STATS_H */
