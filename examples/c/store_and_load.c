// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * store_and_load: one engine request through libbeluga, every call checked.
 *
 * An engine that finished a prefill has the KV cache of a token sequence.
 * It stores that cache in the pool, block by block, so that a later
 * request with the same prefix (on this process or another) loads it
 * instead of recomputing it:
 *
 *   1. open /dev/beluga (or $BELUGA_DEVICE) and map the pool;
 *   2. key the sequence: one 128-bit chained key per full block of tokens;
 *   3. LOOKUP (count only): how many leading blocks the pool has already;
 *   4. ALLOC the missing blocks, write them through the mapping, PUBLISH;
 *   5. LOOKUP with PIN: the blocks cannot be evicted or reused while pinned;
 *      read them back and compare;
 *   6. RELEASE the pins, close.
 *
 * Errors: every libbeluga call returns a negative errno, and
 * beluga_last_error() names the cause and the fix (load the module, get
 * access to the device, attach memory...). This program prints that
 * message with the step that failed, gives back what it holds, and exits 1. Run it twice on the real module: the second run finds every
 * block in step 3 and stores nothing.
 *
 * Build:  cc -Wall -Wextra -O2 store_and_load.c $(pkg-config --cflags --libs beluga)
 * Run:    ./store_and_load     (a member of the group that owns /dev/beluga)
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libbeluga.h>

/* Tokens of the example sequence, and tokens per block (an engine's page). */
#define NR_TOKENS	64
#define BLOCK_TOKENS	16
#define NR_BLOCKS	(NR_TOKENS / BLOCK_TOKENS)

/*
 * The namespace keeps this program's blocks apart from every other
 * layout's. An engine derives it from everything that changes a block's
 * bytes (model, dtype, layout, TP rank...): the Python package's
 * beluga.keys.namespace() does.
 */
#define EXAMPLE_NS	0x4578616d706c6531ULL	/* "Example1" */

/* What this program holds, given back on every exit path. */
struct request {
	struct beluga *pool;
	uint64_t block_size;
	struct beluga_key keys[NR_BLOCKS];
	uint64_t new_blocks[NR_BLOCKS];	/* allocated, not yet published */
	size_t nr_new;
	uint64_t pinned[NR_BLOCKS];
	size_t nr_pinned;
};

/* Print why @step failed: libbeluga's message names the cause and the fix. */
static int failed(const struct request *r, const char *step, long err)
{
	const char *msg = beluga_last_error(r->pool);

	fprintf(stderr, "store_and_load: %s failed: %s\n", step,
		msg && *msg ? msg : beluga_strerror((int)err));
	return 1;
}

/*
 * Byte @pos of the block keyed @key: stands for the engine's KV cache.
 * Derived from the key, so that a reader checks a block without the writer.
 */
static uint8_t block_byte(const struct beluga_key *key, uint64_t pos)
{
	return (uint8_t)(key->lo >> (8 * (pos % 8))) ^ (uint8_t)(pos / 4096);
}

static void write_block(uint8_t *dst, const struct beluga_key *key, uint64_t size)
{
	uint64_t pos;

	for (pos = 0; pos < size; pos++)
		dst[pos] = block_byte(key, pos);
}

/* Offset of the first wrong byte, or @size when the block is as written. */
static uint64_t check_block(const uint8_t *src, const struct beluga_key *key, uint64_t size)
{
	uint64_t pos;

	for (pos = 0; pos < size; pos++)
		if (src[pos] != block_byte(key, pos))
			return pos;
	return size;
}

/* Step 4: store blocks @first.. of the chain (the ones the pool lacks). */
static int store_missing(struct request *r, size_t first)
{
	struct beluga_publish_item items[NR_BLOCKS];
	struct beluga_publish_summary sum;
	size_t i, count;
	int ret;

	r->nr_new = NR_BLOCKS - first;
	if (!r->nr_new)
		return 0;
	/* All or nothing: -ENOSPC when the pool cannot make room. */
	ret = beluga_alloc(r->pool, r->new_blocks, r->nr_new);
	if (ret) {
		r->nr_new = 0;
		return failed(r, "ALLOC", ret);
	}
	for (i = 0; i < r->nr_new; i++) {
		uint8_t *dst = beluga_ptr(r->pool, r->new_blocks[i]);

		if (!dst) {
			fprintf(stderr, "store_and_load: block at offset %#" PRIx64 " is outside "
				"the mapping: the pool grew after beluga_map(); map again\n",
				r->new_blocks[i]);
			return 1;
		}
		write_block(dst, &r->keys[first + i], r->block_size);
		items[i] = (struct beluga_publish_item){
			.offset = r->new_blocks[i], .key = r->keys[first + i],
		};
	}
	/*
	 * PUBLISH hands each block whose result is OK or EXISTS to the pool (an
	 * EXISTS block was freed: another writer was first). A block with a
	 * negative result is still ours, allocated: finish() frees it. When a
	 * whole chunk fails, its items carry that error, so the same holds.
	 */
	ret = beluga_publish(r->pool, EXAMPLE_NS, items, r->nr_new, &sum);
	count = r->nr_new;
	r->nr_new = 0;
	for (i = 0; i < count; i++) {
		if (items[i].result >= 0)
			continue;
		fprintf(stderr, "store_and_load: block %zu not published: %s\n", first + i,
			beluga_strerror(items[i].result));
		r->new_blocks[r->nr_new++] = items[i].offset;
	}
	if (ret)
		return failed(r, "PUBLISH", ret);
	printf("4. stored %zu blocks (%zu published, %zu already there from another "
	       "writer, %zu failed)\n", count, sum.published, sum.exists, sum.failed);
	return r->nr_new ? 1 : 0;
}

/* Step 5: pin the chain, read it back, compare. */
static int load_and_check(struct request *r)
{
	ssize_t hits;
	size_t i;

	hits = beluga_lookup(r->pool, EXAMPLE_NS, r->keys, NR_BLOCKS, r->pinned,
			     BELUGA_LOOKUP_PIN);
	if (hits < 0)
		return failed(r, "LOOKUP+PIN", hits);
	r->nr_pinned = (size_t)hits;
	if (hits < NR_BLOCKS) {
		/* Evicted already: possible on a small, busy pool. */
		fprintf(stderr, "store_and_load: only %zd of %d blocks found after storing them: "
			"the pool evicted the rest (a larger pool keeps them)\n", hits, NR_BLOCKS);
		return 1;
	}
	for (i = 0; i < r->nr_pinned; i++) {
		const uint8_t *src = beluga_ptr(r->pool, r->pinned[i]);
		uint64_t bad = src ? check_block(src, &r->keys[i], r->block_size) : 0;

		if (!src || bad != r->block_size) {
			fprintf(stderr, "store_and_load: block %zu (offset %#" PRIx64 ") differs "
				"from what was stored, at byte %" PRIu64 "\n", i, r->pinned[i], bad);
			return 1;
		}
	}
	printf("5. pinned and read back %zu blocks of %" PRIu64 " bytes: every byte as "
	       "stored\n", r->nr_pinned, r->block_size);
	return 0;
}

/* Step 6 and every exit: give back pins and unpublished blocks, close. */
static int finish(struct request *r, int status)
{
	int ret;

	if (r->nr_pinned) {
		ret = beluga_release(r->pool, r->pinned, r->nr_pinned);
		if (ret)
			status = failed(r, "RELEASE", ret);
		else if (!status)
			printf("6. released %zu pins\n", r->nr_pinned);
	}
	if (r->nr_new) {
		ret = beluga_free(r->pool, r->new_blocks, r->nr_new);
		if (ret)
			status = failed(r, "FREE", ret);
	}
	/* Closing would also give back whatever is still held: the file owns it. */
	beluga_close(r->pool);
	return status;
}

int main(void)
{
	struct request r = { 0 };
	uint32_t tokens[NR_TOKENS];
	struct beluga_info info;
	ssize_t nr_keys, present;
	int ret, i;

	/* 1. Open and map. */
	ret = beluga_open(NULL, O_RDWR, &r.pool);
	if (ret)
		return failed(&r, "opening the pool", ret);
	ret = beluga_info(r.pool, &info);
	if (ret)
		return finish(&r, failed(&r, "INFO", ret));
	ret = beluga_map(r.pool);	/* -ENODEV: no region attached yet */
	if (ret)
		return finish(&r, failed(&r, "mapping the pool", ret));
	r.block_size = info.block_size;
	printf("1. opened and mapped the pool: %" PRIu64 " blocks of %" PRIu64 " bytes\n",
	       (uint64_t)info.nr_blocks, r.block_size);

	/* 2. Keys: the same tokens give the same keys in every process. */
	for (i = 0; i < NR_TOKENS; i++)
		tokens[i] = 1000 + (uint32_t)i;
	nr_keys = beluga_hash_chain(NULL, tokens, NR_TOKENS, BLOCK_TOKENS, r.keys, NR_BLOCKS);
	if (nr_keys != NR_BLOCKS)
		return finish(&r, failed(&r, "keying the tokens", nr_keys < 0 ? nr_keys : -EINVAL));
	printf("2. %d tokens -> %zd keys of %d tokens each\n", NR_TOKENS, nr_keys, BLOCK_TOKENS);

	/* 3. What the pool has already (counts; pins nothing). */
	present = beluga_lookup(r.pool, EXAMPLE_NS, r.keys, NR_BLOCKS, NULL, 0);
	if (present < 0)
		return finish(&r, failed(&r, "LOOKUP", present));
	printf("3. the pool has the first %zd of %d blocks\n", present, NR_BLOCKS);

	ret = store_missing(&r, (size_t)present);
	if (!ret)
		ret = load_and_check(&r);
	return finish(&r, ret);
}
