// SPDX-License-Identifier: GPL-2.0
/*
 * beluga-demo: plays an LLM inference engine against the Beluga pool.
 *
 * Each request is a token sequence split into fixed-size blocks with
 * chained keys (beluga_hash_chain()). The engine does what vLLM-style
 * prefix caching does with an external KV store:
 *
 *   LOOKUP (pin) the request's keys -> the cached prefix;
 *   read every hit through the mapping and verify it byte for byte;
 *   RELEASE the pins;
 *   ALLOC blocks for the misses, write their "KV data", PUBLISH them.
 *
 * The KV data of a block is derived from its namespace and key, so a reader
 * can check every byte exactly, whoever wrote it: a header naming the key,
 * then 64-bit words that are a hash of (key, word index).
 *
 * The workload is either synthetic (a few system prompts shared by many
 * conversations, each turn extending its own history: the pattern that
 * makes prefix caching pay) or a Mooncake trace (--trace, JSON lines whose
 * "hash_ids" are already chained block keys).
 *
 * Exit: 0 ok, 1 verification errors or a failed operation, 2 usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libbeluga.h"
#include "../trace/mooncake.h"

#define DEMO_MAGIC		0x564b4147554c4542ULL	/* "BELUGAKV" little-endian */
#define VOCAB_SIZE		151936			/* Qwen-sized vocabulary */
#define MAX_REPORTED_ERRORS	8

/* ---- options ---- */

static struct {
	const char *device;
	const char *trace;
	uint64_t requests;	/* 0: synthetic default, or the whole trace */
	uint64_t ns;
	uint64_t block_tokens;
	uint64_t seed;
	uint64_t prompts;
	uint64_t conversations;
	uint64_t bytes_per_block;	/* 0: the whole block */
	int flush;
	int dry_run;
	int json;
} opt = {
	.ns = 1,
	.block_tokens = 16,
	.seed = 1,
	.prompts = 4,
	.conversations = 8,
};

/* ---- results ---- */

static struct {
	uint64_t requests;
	uint64_t keys;			/* blocks asked for */
	uint64_t hits;
	uint64_t misses;
	uint64_t published;
	uint64_t races;			/* PUBLISH found the key already there */
	uint64_t publish_failed;
	uint64_t alloc_failures;	/* ALLOC calls that hit -ENOSPC */
	uint64_t uncached;		/* miss blocks not stored for lack of space */
	uint64_t lookups, allocs, publishes, releases;	/* ioctl-level calls */
	uint64_t bytes_written;
	uint64_t bytes_verified;
	uint64_t verify_errors;
} res;

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int fail(const char *fmt, ...)
{
	va_list ap;

	fputs("beluga-demo: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

/* ---- deterministic randomness ---- */

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* splitmix64: tiny, seedable, the same sequence on every platform. */
static uint64_t rng_state;

static uint64_t rng_next(void)
{
	rng_state += 0x9e3779b97f4a7c15ULL;
	return mix64(rng_state);
}

static uint64_t rng_range(uint64_t lo, uint64_t hi)
{
	return lo + rng_next() % (hi - lo + 1);
}

/* ---- block contents ---- */

/*
 * Every block starts with a header naming what it holds and how much of
 * it was written, so that a reader verifies exactly what the writer wrote,
 * even when the writer was another run with other options. The rest is
 * 64-bit words, word i being pattern_word(key, i): in "full" mode every
 * word up to @written, in "pages" mode the first 64 bytes of every 4 KiB
 * page (enough to catch a page mapped at the wrong place, at 1/64 of the
 * memory traffic: emulated CXL under TCG moves about 15 MB/s).
 */
enum verify_mode { VERIFY_FULL = 0, VERIFY_PAGES = 1 };

#define PAGE_STAMP_BYTES	64
#define STAMP_PAGE		4096

struct block_header {
	uint64_t magic;
	uint64_t ns;
	uint64_t key_lo;
	uint64_t key_hi;
	uint64_t written;	/* bytes of the block covered by the pattern */
	uint64_t mode;		/* enum verify_mode of the writer */
};

static enum verify_mode verify_mode = VERIFY_FULL;
/* --verify auto (the default): full, unless the pool's memory is slow. */
static int verify_auto = 1;
static double calibrated_mbps;	/* measured write speed; 0 when not measured */

static uint64_t pattern_word(const struct beluga_key *key, uint64_t i)
{
	return mix64(key->lo ^ mix64(key->hi + 0x632be59bd9b4e019ULL) ^ (i * 0x9e3779b97f4a7c15ULL));
}

static size_t payload_bytes(uint64_t block_size)
{
	uint64_t n = opt.bytes_per_block && opt.bytes_per_block < block_size ?
		     opt.bytes_per_block : block_size;

	if (n < sizeof(struct block_header))
		n = sizeof(struct block_header);
	return (size_t)(n & ~7ULL);
}

/* Word ranges [first, end) covered by @mode over @len bytes, one per call. */
struct span_iter {
	enum verify_mode mode;
	size_t len, pos;
};

static int next_span(struct span_iter *it, size_t *first, size_t *end)
{
	size_t span_end;

	if (it->pos >= it->len)
		return 0;
	span_end = it->mode == VERIFY_FULL ? it->len : it->pos + PAGE_STAMP_BYTES;
	if (span_end > it->len)
		span_end = it->len;
	*first = it->pos / 8;
	*end = span_end / 8;
	it->pos = it->mode == VERIFY_FULL ? it->len : it->pos + STAMP_PAGE;
	return 1;
}

static void fill_block(void *dst, uint64_t ns, const struct beluga_key *key, size_t len)
{
	struct span_iter it = { verify_mode, len, 0 };
	struct block_header *h = dst;
	uint64_t *w = dst;
	size_t i, end;

	while (next_span(&it, &i, &end)) {
		if (i < sizeof(*h) / 8)
			i = sizeof(*h) / 8;
		if (end > i)
			res.bytes_written += (end - i) * 8;
		for (; i < end; i++)
			w[i] = pattern_word(key, i);
	}
	h->ns = ns;
	h->key_lo = key->lo;
	h->key_hi = key->hi;
	h->written = len;
	h->mode = verify_mode;
	h->magic = DEMO_MAGIC;
	res.bytes_written += sizeof(*h);
	if (opt.flush)
		beluga_flush_range(dst, len);
}

/* 0 when the block holds what fill_block() wrote for @key. */
static int verify_block(const void *src, uint64_t offset, uint64_t ns,
			const struct beluga_key *key, size_t len, uint64_t block_size)
{
	const struct block_header *h = src;
	const uint64_t *w = src;
	struct span_iter it;
	size_t i, end;

	if (opt.flush)
		beluga_invalidate_range(src, len);
	if (h->magic != DEMO_MAGIC || h->ns != ns || h->key_lo != key->lo || h->key_hi != key->hi ||
	    h->written > block_size || h->written < sizeof(*h) || h->mode > VERIFY_PAGES) {
		if (res.verify_errors++ < MAX_REPORTED_ERRORS)
			fprintf(stderr, "beluga-demo: block at offset %#" PRIx64 " should hold "
				"ns %" PRIu64 " key %016" PRIx64 "%016" PRIx64 " but its header says "
				"magic %#" PRIx64 " ns %" PRIu64 " key %016" PRIx64 "%016" PRIx64
				" written %" PRIu64 " mode %" PRIu64 "\n",
				offset, ns, (uint64_t)key->hi, (uint64_t)key->lo, h->magic, h->ns,
				h->key_hi, h->key_lo, h->written, h->mode);
		return -1;
	}
	/* Check what was written, within what this run wants to read. */
	it.mode = h->mode == VERIFY_PAGES ? VERIFY_PAGES : verify_mode;
	it.len = h->written < len ? (size_t)h->written : len;
	it.pos = 0;
	while (next_span(&it, &i, &end)) {
		if (i < sizeof(*h) / 8)
			i = sizeof(*h) / 8;
		if (end > i)
			res.bytes_verified += (end - i) * 8;
		for (; i < end; i++) {
			if (w[i] == pattern_word(key, i))
				continue;
			if (res.verify_errors++ < MAX_REPORTED_ERRORS)
				fprintf(stderr, "beluga-demo: block at offset %#" PRIx64 " (key %016"
					PRIx64 "%016" PRIx64 ") differs at byte %zu: %#" PRIx64
					" instead of %#" PRIx64 "\n", offset, (uint64_t)key->hi,
					(uint64_t)key->lo, i * 8, w[i], pattern_word(key, i));
			return -1;
		}
	}
	res.bytes_verified += sizeof(*h);
	return 0;
}

/* ---- the engine ---- */

struct engine {
	struct beluga *b;
	uint64_t block_size;
	size_t payload;
	/* Scratch, grown as needed. */
	uint64_t *offsets;
	struct beluga_publish_item *items;
	size_t cap;
};

static int engine_reserve(struct engine *e, size_t n)
{
	void *p;

	if (n <= e->cap)
		return 0;
	p = realloc(e->offsets, n * sizeof(*e->offsets));
	if (!p)
		return -ENOMEM;
	e->offsets = p;
	p = realloc(e->items, n * sizeof(*e->items));
	if (!p)
		return -ENOMEM;
	e->items = p;
	e->cap = n;
	return 0;
}

/* Pointer to a block, remapping once if the pool grew since we mapped. */
static void *block_ptr(struct engine *e, uint64_t offset)
{
	void *p = beluga_ptr(e->b, offset);

	if (!p && !beluga_map(e->b))
		p = beluga_ptr(e->b, offset);
	if (p && offset + e->payload > beluga_map_length(e->b))
		p = NULL;
	return p;
}

/*
 * --verify auto: time writing one whole block. Real DRAM and CXL memory
 * take GB/s, and every byte is verified. Emulated CXL under QEMU TCG
 * takes about 15 MB/s, where verifying every byte of 2 MiB blocks turns
 * a one-minute run into ten; there, verify 64 bytes of every page.
 */
#define AUTO_FULL_MIN_MBPS	100.0

static int calibrate_verify_mode(struct engine *e)
{
	struct beluga_key probe = { 0x5eed, 0xca11b8a7e };
	struct timespec t0, t1;
	uint64_t offset;
	double seconds;
	void *p;
	int ret;

	verify_mode = VERIFY_FULL;
	ret = beluga_alloc(e->b, &offset, 1);
	if (ret == -ENOSPC)
		return 0;	/* a full pool of pinned blocks: stay with full */
	if (ret)
		return fail("%s", beluga_last_error(e->b));
	p = block_ptr(e, offset);
	if (p) {
		/* Once to fault the pages in, once timed: steady-state speed. */
		fill_block(p, opt.ns, &probe, e->payload);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		fill_block(p, opt.ns, &probe, e->payload);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		res.bytes_written = 0;
		seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
		calibrated_mbps = (double)e->payload / 1e6 / (seconds > 1e-9 ? seconds : 1e-9);
		if (calibrated_mbps < AUTO_FULL_MIN_MBPS)
			verify_mode = VERIFY_PAGES;
	}
	/* Never published: the block goes straight back. */
	ret = beluga_free(e->b, &offset, 1);
	return ret ? fail("%s", beluga_last_error(e->b)) : 0;
}

/* Serve one request: the keys of its full blocks, in chain order. */
static int engine_request(struct engine *e, const struct beluga_key *keys, size_t n)
{
	struct beluga_publish_summary sum;
	size_t i, want;
	ssize_t hits;
	int ret;

	res.requests++;
	res.keys += n;
	if (!n)
		return 0;
	if (engine_reserve(e, n))
		return fail("out of memory");

	hits = beluga_lookup(e->b, opt.ns, keys, n, e->offsets, BELUGA_LOOKUP_PIN);
	res.lookups++;
	if (hits < 0)
		return fail("%s", beluga_last_error(e->b));
	for (i = 0; i < (size_t)hits; i++) {
		void *p = block_ptr(e, e->offsets[i]);

		if (!p) {
			res.verify_errors++;
			fprintf(stderr, "beluga-demo: LOOKUP returned offset %#" PRIx64
				" outside the mapping (%zu bytes)\n", e->offsets[i],
				beluga_map_length(e->b));
			continue;
		}
		verify_block(p, e->offsets[i], opt.ns, &keys[i], e->payload, e->block_size);
	}
	if (hits) {
		ret = beluga_release(e->b, e->offsets, (size_t)hits);
		res.releases++;
		if (ret)
			return fail("%s", beluga_last_error(e->b));
	}
	res.hits += (uint64_t)hits;
	res.misses += n - (size_t)hits;

	/*
	 * Store the misses. When the pool cannot take them all (everything
	 * pinned or allocated by other engines), store the longest prefix of
	 * them that fits: a block is only useful after its parent.
	 */
	want = n - (size_t)hits;
	for (;;) {
		ret = beluga_alloc(e->b, e->offsets, want);
		res.allocs++;
		if (ret != -ENOSPC)
			break;
		res.alloc_failures++;
		want /= 2;
		if (!want)
			break;
	}
	if (ret && ret != -ENOSPC)
		return fail("%s", beluga_last_error(e->b));
	res.uncached += n - (size_t)hits - want;
	if (!want)
		return 0;

	for (i = 0; i < want; i++) {
		const struct beluga_key *key = &keys[(size_t)hits + i];
		void *p = block_ptr(e, e->offsets[i]);

		if (!p) {
			beluga_free(e->b, e->offsets, want);
			return fail("ALLOC returned offset %#" PRIx64 " outside the mapping (%zu bytes)",
				    e->offsets[i], beluga_map_length(e->b));
		}
		fill_block(p, opt.ns, key, e->payload);
		e->items[i].offset = e->offsets[i];
		e->items[i].key = *key;
	}
	ret = beluga_publish(e->b, opt.ns, e->items, want, &sum);
	res.publishes++;
	if (ret)
		return fail("%s", beluga_last_error(e->b));
	res.published += sum.published;
	res.races += sum.exists;
	res.publish_failed += sum.failed;
	if (sum.failed)
		return fail("%s", beluga_last_error(e->b));
	return 0;
}

/*
 * --dry-run: an unbounded in-memory cache in place of the device, to check
 * a workload's ideal hit ratio and to test the generators without Beluga.
 */
static struct {
	struct beluga_key *slots;	/* open addressing; (0,0) marks empty */
	size_t cap, used;
	int has_zero_key;
} sim;

static size_t sim_slot(const struct beluga_key *k, size_t cap)
{
	return (size_t)(mix64(k->lo ^ mix64(k->hi)) & (cap - 1));
}

static int sim_contains(const struct beluga_key *k)
{
	size_t i;

	if (!k->lo && !k->hi)
		return sim.has_zero_key;
	if (!sim.cap)
		return 0;
	for (i = sim_slot(k, sim.cap);; i = (i + 1) & (sim.cap - 1)) {
		if (!sim.slots[i].lo && !sim.slots[i].hi)
			return 0;
		if (sim.slots[i].lo == k->lo && sim.slots[i].hi == k->hi)
			return 1;
	}
}

static int sim_insert(const struct beluga_key *k)
{
	size_t i;

	if (!k->lo && !k->hi) {
		sim.has_zero_key = 1;
		return 0;
	}
	if (2 * (sim.used + 1) > sim.cap) {
		size_t old_cap = sim.cap, j, new_cap = old_cap ? 2 * old_cap : 1024;
		struct beluga_key *old = sim.slots;

		sim.slots = calloc(new_cap, sizeof(*sim.slots));
		if (!sim.slots)
			return -ENOMEM;
		sim.cap = new_cap;
		for (j = 0; j < old_cap; j++) {
			if (!old[j].lo && !old[j].hi)
				continue;
			for (i = sim_slot(&old[j], new_cap); sim.slots[i].lo || sim.slots[i].hi;
			     i = (i + 1) & (new_cap - 1))
				;
			sim.slots[i] = old[j];
		}
		free(old);
	}
	for (i = sim_slot(k, sim.cap); sim.slots[i].lo || sim.slots[i].hi;
	     i = (i + 1) & (sim.cap - 1))
		if (sim.slots[i].lo == k->lo && sim.slots[i].hi == k->hi)
			return 0;
	sim.slots[i] = *k;
	sim.used++;
	return 0;
}

static int sim_request(const struct beluga_key *keys, size_t n)
{
	size_t hits = 0, i;

	res.requests++;
	res.keys += n;
	while (hits < n && sim_contains(&keys[hits]))
		hits++;
	res.hits += hits;
	res.misses += n - hits;
	for (i = hits; i < n; i++)
		if (sim_insert(&keys[i]))
			return fail("out of memory");
	res.published += n - hits;
	return 0;
}

static int serve(struct engine *e, const struct beluga_key *keys, size_t n)
{
	return opt.dry_run ? sim_request(keys, n) : engine_request(e, keys, n);
}

/* ---- synthetic workload ---- */

struct tokens {
	uint32_t *v;
	size_t len, cap;
};

static int tokens_reserve(struct tokens *t, size_t n)
{
	if (t->len + n > t->cap) {
		size_t cap = (t->len + n) * 2;
		uint32_t *v = realloc(t->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		t->v = v;
		t->cap = cap;
	}
	return 0;
}

static int tokens_append_random(struct tokens *t, size_t n)
{
	size_t i;

	if (tokens_reserve(t, n))
		return -ENOMEM;
	for (i = 0; i < n; i++)
		t->v[t->len++] = (uint32_t)(rng_next() % VOCAB_SIZE);
	return 0;
}

static int tokens_copy(struct tokens *dst, const struct tokens *src)
{
	dst->len = 0;
	if (tokens_reserve(dst, src->len))
		return -ENOMEM;
	memcpy(dst->v, src->v, src->len * sizeof(*src->v));
	dst->len = src->len;
	return 0;
}

struct conversation {
	struct tokens history;
	unsigned int turns;
};

/*
 * Workload shape. Kept small by default so that a run with 2 MiB blocks,
 * verifying every byte, finishes in minutes even on emulated CXL memory;
 * scale it with --requests, --prompts and --conversations.
 */
#define PROMPT_TOKENS_MIN	96	/* a shared system prompt */
#define PROMPT_TOKENS_MAX	384
#define TURN_TOKENS_MIN		16	/* one user message or model answer */
#define TURN_TOKENS_MAX		96
/* A conversation ends after this many turns or tokens and starts over. */
#define MAX_TURNS		6
#define MAX_HISTORY_TOKENS	2048

static int run_synthetic(struct engine *e)
{
	struct tokens *prompts = calloc(opt.prompts, sizeof(*prompts));
	struct conversation *conv = calloc(opt.conversations, sizeof(*conv));
	struct beluga_key *keys = NULL;
	size_t keys_cap = 0, n;
	uint64_t r, i;
	int ret = 0;

	if (!prompts || !conv) {
		ret = fail("out of memory");
		goto out;
	}
	rng_state = opt.seed;
	for (i = 0; i < opt.prompts; i++)
		if (tokens_append_random(&prompts[i], rng_range(PROMPT_TOKENS_MIN, PROMPT_TOKENS_MAX))) {
			ret = fail("out of memory");
			goto out;
		}

	for (r = 0; r < opt.requests && !ret; r++) {
		struct conversation *c = &conv[rng_next() % opt.conversations];
		struct tokens *h = &c->history;

		/* A new conversation starts from one of the shared system prompts. */
		if (!h->len || c->turns >= MAX_TURNS || h->len > MAX_HISTORY_TOKENS) {
			if (tokens_copy(h, &prompts[rng_next() % opt.prompts])) {
				ret = fail("out of memory");
				break;
			}
			c->turns = 0;
		}
		/* The user's new message ends the request's prompt. */
		if (tokens_append_random(h, rng_range(TURN_TOKENS_MIN, TURN_TOKENS_MAX))) {
			ret = fail("out of memory");
			break;
		}
		n = h->len / opt.block_tokens;
		if (n > keys_cap) {
			struct beluga_key *k = realloc(keys, 2 * n * sizeof(*k));

			if (!k) {
				ret = fail("out of memory");
				break;
			}
			keys = k;
			keys_cap = 2 * n;
		}
		n = (size_t)beluga_hash_chain(NULL, h->v, h->len, opt.block_tokens, keys, keys_cap);
		ret = serve(e, keys, n);
		/* The model's answer becomes history for the next turn. */
		if (tokens_append_random(h, rng_range(TURN_TOKENS_MIN, TURN_TOKENS_MAX)))
			ret = fail("out of memory");
		c->turns++;
	}
out:
	for (i = 0; prompts && i < opt.prompts; i++)
		free(prompts[i].v);
	for (i = 0; conv && i < opt.conversations; i++)
		free(conv[i].history.v);
	free(prompts);
	free(conv);
	free(keys);
	return ret;
}

/* ---- Mooncake trace replay (../trace/mooncake.h reads it) ---- */

static int run_trace(struct engine *e)
{
	struct mooncake_reader tr;
	struct beluga_key *keys = NULL;
	size_t keys_cap = 0;
	uint64_t served = 0;
	int ret = 0, n;

	n = mooncake_open(&tr, opt.trace);
	if (n)
		return fail("cannot open trace %s: %s", opt.trace, strerror(-n));
	while (!opt.requests || served < opt.requests) {
		n = mooncake_next(&tr);
		if (n == 0)
			break;
		if (n == -ENOENT) {
			ret = fail("%s:%" PRIu64 ": no \"hash_ids\" field: expected Mooncake trace "
				   "lines like {\"hash_ids\": [1, 2, 3], ...}", opt.trace, tr.lineno);
			break;
		}
		if (n == -EIO) {
			ret = fail("reading %s: %s", opt.trace, strerror(errno));
			break;
		}
		if (n < 0) {
			ret = fail("%s:%" PRIu64 ": %s", opt.trace, tr.lineno,
				   n == -ENOMEM ? "out of memory" :
				   "malformed \"hash_ids\": expected a list of non-negative integers");
			break;
		}
		/* the ids are chained block keys already: key.lo = id */
		if (tr.req.nr_ids > keys_cap) {
			struct beluga_key *k = realloc(keys, tr.req.nr_ids * sizeof(*k));

			if (!k) {
				ret = fail("out of memory");
				break;
			}
			keys = k;
			keys_cap = tr.req.nr_ids;
		}
		for (size_t i = 0; i < tr.req.nr_ids; i++) {
			keys[i].lo = tr.req.ids[i];
			keys[i].hi = 0;
		}
		ret = serve(e, keys, tr.req.nr_ids);
		if (ret)
			break;
		served++;
	}
	if (!ret && !tr.lineno)
		ret = fail("%s is empty: no requests to replay", opt.trace);
	free(keys);
	mooncake_close(&tr);
	return ret;
}

/* ---- report ---- */

static void report(double seconds, uint64_t block_size)
{
	double ratio = res.keys ? (double)res.hits / (double)res.keys : 0.0;

	if (opt.json) {
		printf("{\n  \"mode\": \"%s\",\n  \"dry_run\": %s,\n  \"namespace\": %" PRIu64 ",\n"
		       "  \"block_tokens\": %" PRIu64 ",\n  \"block_size\": %" PRIu64 ",\n",
		       opt.trace ? "trace" : "synthetic", opt.dry_run ? "true" : "false", opt.ns,
		       opt.block_tokens, block_size);
		printf("  \"requests\": %" PRIu64 ",\n  \"keys\": %" PRIu64 ",\n  \"hits\": %" PRIu64
		       ",\n  \"misses\": %" PRIu64 ",\n  \"hit_ratio\": %.6f,\n",
		       res.requests, res.keys, res.hits, res.misses, ratio);
		printf("  \"published\": %" PRIu64 ",\n  \"publish_races\": %" PRIu64 ",\n"
		       "  \"publish_failed\": %" PRIu64 ",\n  \"alloc_failures\": %" PRIu64 ",\n"
		       "  \"uncached\": %" PRIu64 ",\n",
		       res.published, res.races, res.publish_failed, res.alloc_failures,
		       res.uncached);
		printf("  \"ops\": {\"lookup\": %" PRIu64 ", \"release\": %" PRIu64 ", \"alloc\": %"
		       PRIu64 ", \"publish\": %" PRIu64 "},\n",
		       res.lookups, res.releases, res.allocs, res.publishes);
		printf("  \"verify\": \"%s\",\n  \"verify_auto\": %s,\n"
		       "  \"calibrated_mbps\": %.1f,\n"
		       "  \"bytes_written\": %" PRIu64 ",\n  \"bytes_verified\": %" PRIu64 ",\n"
		       "  \"verify_errors\": %" PRIu64 ",\n  \"seconds\": %.6f\n}\n",
		       verify_mode == VERIFY_PAGES ? "pages" : "full",
		       verify_auto ? "true" : "false", calibrated_mbps,
		       res.bytes_written, res.bytes_verified, res.verify_errors, seconds);
		return;
	}
	printf("beluga-demo: %s%s, namespace %" PRIu64 ", %" PRIu64 "-token blocks",
	       opt.trace ? "trace " : "synthetic workload", opt.trace ? opt.trace : "",
	       opt.ns, opt.block_tokens);
	if (block_size)
		printf(" of %" PRIu64 " bytes", block_size);
	printf("%s\n", opt.dry_run ? " (dry run: unbounded in-memory cache)" : "");
	printf("  requests         %" PRIu64 "\n", res.requests);
	printf("  blocks           %" PRIu64 " (%" PRIu64 " hits, %" PRIu64 " misses)\n",
	       res.keys, res.hits, res.misses);
	printf("  hit ratio        %.1f%%\n", 100.0 * ratio);
	printf("  published        %" PRIu64 " (%" PRIu64 " lost races, %" PRIu64 " failed)\n",
	       res.published, res.races, res.publish_failed);
	if (!opt.dry_run) {
		printf("  alloc failures   %" PRIu64 " (%" PRIu64 " blocks left uncached)\n",
		       res.alloc_failures, res.uncached);
		printf("  ops              %" PRIu64 " lookup, %" PRIu64 " release, %" PRIu64
		       " alloc, %" PRIu64 " publish\n",
		       res.lookups, res.releases, res.allocs, res.publishes);
		printf("  bytes written    %" PRIu64 "\n", res.bytes_written);
		printf("  bytes verified   %" PRIu64 " (%s", res.bytes_verified,
		       verify_mode == VERIFY_PAGES ? "64 bytes per 4 KiB page" : "every byte");
		if (verify_auto && calibrated_mbps > 0)
			printf("; auto: the pool writes at %.0f MB/s", calibrated_mbps);
		printf(")\n");
		printf("  verify errors    %" PRIu64 "\n", res.verify_errors);
	}
	printf("  elapsed          %.3f s\n", seconds);
}

/* ---- main ---- */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: beluga-demo [OPTIONS]\n\n"
		"Play an inference engine against the Beluga pool: look up each request's\n"
		"cached prefix (pinning it), verify every cached byte, release, then store\n"
		"the missing blocks.\n\n"
		"  -d, --device PATH        device (default $BELUGA_DEVICE or /dev/beluga)\n"
		"  -n, --requests N         requests to serve (synthetic default 32;\n"
		"                           with --trace, cap the replayed lines)\n"
		"      --ns N               namespace (default 1)\n"
		"      --block-tokens N     tokens per block, 1..4096 (default 16)\n"
		"      --trace FILE         replay a Mooncake trace (JSON lines with \"hash_ids\")\n"
		"      --seed N             synthetic workload seed (default 1)\n"
		"      --prompts N          shared system prompts (default 4)\n"
		"      --conversations N    concurrent conversations (default 8)\n"
		"      --bytes-per-block N  write/verify only the first N bytes of each block\n"
		"                           (default: all; for slow emulated CXL)\n"
		"      --verify MODE        full: write and verify every byte;\n"
		"                           pages: the first 64 bytes of every 4 KiB page\n"
		"                           (catches misplaced pages at 1/64 of the traffic);\n"
		"                           auto (default): full, or pages when writing a\n"
		"                           block runs below 100 MB/s (emulated CXL)\n"
		"      --flush              flush written blocks and invalidate before reading\n"
		"                           (non-coherent multi-host pools)\n"
		"      --dry-run            no device: an unbounded in-memory cache instead\n"
		"      --json               print the results as JSON\n"
		"  -h, --help               this help\n\n"
		"Exit status: 0 ok, 1 verification errors or a failed operation, 2 usage error.\n");
}

static int parse_num(const char *name, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	errno = 0;
	if (s[0] < '0' || s[0] > '9' || ((v = strtoull(s, &end, 0)), errno) || *end ||
	    v < min || v > max) {
		fprintf(stderr, "beluga-demo: invalid %s '%s': expected a number from %" PRIu64
			" to %" PRIu64 "\nTry 'beluga-demo --help'.\n", name, s, min, max);
		return -1;
	}
	*out = v;
	return 0;
}

int main(int argc, char **argv)
{
	enum { O_NS = 256, O_BT, O_TRACE, O_SEED, O_PROMPTS, O_CONV, O_BPB, O_FLUSH, O_DRY,
	       O_JSON, O_VERIFY };
	static const struct option opts[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "requests", required_argument, NULL, 'n' },
		{ "ns", required_argument, NULL, O_NS },
		{ "block-tokens", required_argument, NULL, O_BT },
		{ "trace", required_argument, NULL, O_TRACE },
		{ "seed", required_argument, NULL, O_SEED },
		{ "prompts", required_argument, NULL, O_PROMPTS },
		{ "conversations", required_argument, NULL, O_CONV },
		{ "bytes-per-block", required_argument, NULL, O_BPB },
		{ "verify", required_argument, NULL, O_VERIFY },
		{ "flush", no_argument, NULL, O_FLUSH },
		{ "dry-run", no_argument, NULL, O_DRY },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct engine e = { 0 };
	struct beluga_info info = { 0 };
	struct timespec t0, t1;
	int c, ret;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":d:n:h", opts, NULL)) != -1) {
		int bad = 0;

		switch (c) {
		case 'd':
			opt.device = optarg;
			break;
		case 'n':
			bad = parse_num("request count", optarg, 1, UINT64_MAX, &opt.requests);
			break;
		case O_NS:
			bad = parse_num("namespace", optarg, 0, UINT64_MAX, &opt.ns);
			break;
		case O_BT:
			bad = parse_num("block token count", optarg, 1, 4096, &opt.block_tokens);
			break;
		case O_TRACE:
			opt.trace = optarg;
			break;
		case O_SEED:
			bad = parse_num("seed", optarg, 0, UINT64_MAX, &opt.seed);
			break;
		case O_PROMPTS:
			bad = parse_num("prompt count", optarg, 1, 1024, &opt.prompts);
			break;
		case O_CONV:
			bad = parse_num("conversation count", optarg, 1, 1 << 20, &opt.conversations);
			break;
		case O_BPB:
			bad = parse_num("bytes per block", optarg, 32, UINT64_MAX, &opt.bytes_per_block);
			break;
		case O_VERIFY:
			verify_auto = 0;
			if (!strcmp(optarg, "full")) {
				verify_mode = VERIFY_FULL;
			} else if (!strcmp(optarg, "pages")) {
				verify_mode = VERIFY_PAGES;
			} else if (!strcmp(optarg, "auto")) {
				verify_auto = 1;
			} else {
				fprintf(stderr, "beluga-demo: invalid verify mode '%s': expected "
					"auto, full or pages\nTry 'beluga-demo --help'.\n", optarg);
				return 2;
			}
			break;
		case O_FLUSH:
			opt.flush = 1;
			break;
		case O_DRY:
			opt.dry_run = 1;
			break;
		case O_JSON:
			opt.json = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case ':':
			fprintf(stderr, "beluga-demo: option '%s' needs a value\n"
				"Try 'beluga-demo --help'.\n", argv[optind - 1]);
			return 2;
		default:
			fprintf(stderr, "beluga-demo: unknown option '%s'\n"
				"Try 'beluga-demo --help'.\n", argv[optind - 1]);
			return 2;
		}
		if (bad)
			return 2;
	}
	if (optind < argc) {
		fprintf(stderr, "beluga-demo: unexpected argument '%s'\nTry 'beluga-demo --help'.\n",
			argv[optind]);
		return 2;
	}
	if (!opt.trace && !opt.requests)
		opt.requests = 32;

	if (!opt.dry_run) {
		ret = beluga_open(opt.device, O_RDWR, &e.b);
		if (ret)	/* the message names the fix (modprobe, udev) */
			return fail("%s", beluga_last_error(NULL));
		ret = beluga_info(e.b, &info);
		if (!ret)
			ret = beluga_map(e.b);
		if (ret == -ENODEV) {
			fail("%s with `belugactl attach`", beluga_last_error(e.b));
			beluga_close(e.b);
			return 1;
		}
		if (ret) {
			fail("%s", beluga_last_error(e.b));
			beluga_close(e.b);
			return 1;
		}
		e.block_size = info.block_size;
		e.payload = payload_bytes(info.block_size);
		if (verify_auto && calibrate_verify_mode(&e)) {
			beluga_close(e.b);
			return 1;
		}
	}

	clock_gettime(CLOCK_MONOTONIC, &t0);
	ret = opt.trace ? run_trace(&e) : run_synthetic(&e);
	clock_gettime(CLOCK_MONOTONIC, &t1);

	if (e.b)
		beluga_close(e.b);
	free(e.offsets);
	free(e.items);
	free(sim.slots);
	if (!ret || res.requests)
		report((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
		       e.block_size);
	if (res.verify_errors) {
		fprintf(stderr, "beluga-demo: %" PRIu64 " blocks failed verification\n",
			res.verify_errors);
		return 1;
	}
	return ret ? 1 : 0;
}
