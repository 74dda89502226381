// SPDX-License-Identifier: GPL-2.0
/*
 * A client's pin table (bel_pins.h): used by client.c for local pools and
 * by mh_ops.c for shared ones.
 */
#include "bel_pins.h"

static u32 bel_pins_home(u32 id, u32 mask)
{
	/* Fibonacci hashing: ids of different regions share low bits. */
	return (u32)(((u64)id * 0x9e3779b97f4a7c15ULL) >> 32) & mask;
}

u32 bel_pins_find(struct bel_pin_table *t, u32 id)
{
	u32 mask, pos;

	if (!t->capacity)
		return BEL_PINS_EMPTY;
	mask = t->capacity - 1;
	for (pos = bel_pins_home(id, mask);; pos = (pos + 1) & mask) {
		t->probes++;
		if (t->ids[pos] == BEL_PINS_EMPTY)
			return BEL_PINS_EMPTY;
		if (t->ids[pos] == id)
			return pos;
	}
}

/* Insert @id, known to be absent, into arrays with room (load <= 1/2). */
static void bel_pins_insert(u32 *ids, u32 *counts, u32 capacity, u32 id,
			    u32 count)
{
	u32 mask = capacity - 1;
	u32 pos = bel_pins_home(id, mask);

	while (ids[pos] != BEL_PINS_EMPTY)
		pos = (pos + 1) & mask;
	ids[pos] = id;
	counts[pos] = count;
}

void bel_pins_add(struct bel_pin_table *t, u32 id)
{
	u32 pos = bel_pins_find(t, id);

	if (pos != BEL_PINS_EMPTY) {
		t->counts[pos]++;
		return;
	}
	BEL_ASSERT((u64)(t->used + 1) * 2 <= t->capacity);
	bel_pins_insert(t->ids, t->counts, t->capacity, id, 1);
	t->used++;
}

void bel_pins_del_at(struct bel_pin_table *t, u32 pos)
{
	u32 mask = t->capacity - 1;
	u32 hole = pos, j = pos;

	for (;;) {
		u32 home;

		t->ids[hole] = BEL_PINS_EMPTY;
		t->counts[hole] = 0;
		for (;;) {
			j = (j + 1) & mask;
			t->probes++;
			if (t->ids[j] == BEL_PINS_EMPTY) {
				t->used--;
				return;
			}
			home = bel_pins_home(t->ids[j], mask);
			/* Stays put when home lies cyclically in (hole, j]. */
			if (hole <= j ? (hole < home && home <= j)
				      : (hole < home || home <= j))
				continue;
			break;
		}
		t->ids[hole] = t->ids[j];
		t->counts[hole] = t->counts[j];
		hole = j;
	}
}

int bel_pins_prepare(const struct bel_pin_table *t, u32 more,
		     struct bel_pin_table *next)
{
	u64 need = ((u64)t->used + more) * 2;
	u64 cap = BEL_MIN_PIN_SLOTS;
	u32 i;

	memset(next, 0, sizeof(*next));
	if (need <= t->capacity)
		return 0;
	while (cap < need)
		cap <<= 1;
	if (cap > BEL_MAX_PIN_SLOTS)
		return -ENOMEM;
	next->ids = bel_calloc(cap, sizeof(*next->ids));
	next->counts = bel_calloc(cap, sizeof(*next->counts));
	if (!next->ids || !next->counts) {
		bel_pins_free(next);
		return -ENOMEM;
	}
	memset(next->ids, 0xff, (size_t)cap * sizeof(*next->ids));
	next->capacity = (u32)cap;
	next->used = t->used;
	next->probes = t->probes;
	for (i = 0; i < t->capacity; i++)
		if (t->ids[i] != BEL_PINS_EMPTY)
			bel_pins_insert(next->ids, next->counts, next->capacity,
					t->ids[i], t->counts[i]);
	return 0;
}

void bel_pins_swap(struct bel_pin_table *a, struct bel_pin_table *b)
{
	struct bel_pin_table x = *a;

	*a = *b;
	*b = x;
}

void bel_pins_free(struct bel_pin_table *t)
{
	bel_kvfree(t->ids);
	bel_kvfree(t->counts);
	memset(t, 0, sizeof(*t));
}
