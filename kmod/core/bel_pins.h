/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A client's pin table: block id -> how often the client pins it, in an
 * open-addressing hash table (linear probing, load at most one half,
 * backward-shift deletion, so there are no tombstones). Memory grows with
 * the number of distinct blocks pinned, never with the number of pins, and
 * finding a block costs O(1) expected probes. Shared by the single-host
 * core (client.c) and the multi-host one (mh_ops.c); the caller's lock
 * protects the table.
 */
#ifndef BEL_PINS_H
#define BEL_PINS_H

#include "bel_env.h"
#include <linux/beluga.h>

#define BEL_PINS_EMPTY		0xffffffffU	/* an empty slot, or not found */

/* Slots of one table: a power of two, at most this (1 GiB of ids). */
#define BEL_MAX_PIN_SLOTS	0x10000000U	/* 2^28 */
#define BEL_MIN_PIN_SLOTS	16U

/*
 * A block's pin count never goes above this, so that one more batch of
 * pins on the same block (at most BELUGA_MAX_BATCH) cannot wrap it.
 */
#define BEL_MAX_PINS		(0xffffffffU - BELUGA_MAX_BATCH)

struct bel_pin_table {
	u32 *ids;		/* BEL_PINS_EMPTY marks an empty slot */
	u32 *counts;
	u32 capacity;		/* power of two, or 0 */
	u32 used;		/* distinct blocks in the table */
	u64 probes;		/* slots inspected so far (cost accounting) */
};

/* Slot of @id, or BEL_PINS_EMPTY. */
u32 bel_pins_find(struct bel_pin_table *t, u32 id);
/* One more pin of @id; room for a new id must have been reserved. */
void bel_pins_add(struct bel_pin_table *t, u32 id);
/* Empty slot @pos (whatever its count). */
void bel_pins_del_at(struct bel_pin_table *t, u32 pos);

/*
 * Reserve room for @more new distinct ids. May sleep; allocates without
 * touching @t. When @t has room, *@next is left empty (capacity 0); else
 * *@next is a larger copy of @t, which the caller installs with
 * bel_pins_swap() under its lock and then frees (the old arrays) with
 * bel_pins_free(). -ENOMEM when the table would exceed BEL_MAX_PIN_SLOTS.
 */
int bel_pins_prepare(const struct bel_pin_table *t, u32 more,
		     struct bel_pin_table *next);
void bel_pins_swap(struct bel_pin_table *a, struct bel_pin_table *b);
void bel_pins_free(struct bel_pin_table *t);

#endif /* BEL_PINS_H */
