// SPDX-License-Identifier: GPL-2.0
/*
 * The C side of the Python-overhead benchmark (bench/python/overhead.py):
 * the same 64-key LOOKUP loop as the Python side, through libbeluga.
 *
 * Built twice from this file (bench/python/Makefile):
 *   liblookup64.so  loaded by overhead.py with ctypes, so that C and Python
 *                   samples alternate one by one in the same process: both see
 *                   the same CPU, caches and preemptions (under TCG on a shared
 *                   host those swing by 2x from one second to the next);
 *   lookup64        the same loop as a program, for C-only runs:
 *                   lookup64 [-d DEVICE] [-s SAMPLES] [-m SAMPLE_MS] [-n KEYS]
 *                   prints {"count_ns": [...], "pin_ns": [...]}.
 *
 * l64_open() publishes KEYS blocks under a namespace of its own (from a tag and
 * the pid) and maps the pool's index; l64_run() times ITERS operations of one
 * kind, all hits:
 *   L64_COUNT:        beluga_lookup() count-only of the KEYS-key chain
 *   L64_PIN:          beluga_lookup(BELUGA_LOOKUP_PIN) + beluga_release() of
 *                     the hits
 *   L64_COUNT_MAPPED: beluga_lookup_count() of the chain, on the mapped index
 *                     with no system call: what KVStore.lookup() runs
 *                     (Pool.lookup_count()), so the C side of its figure
 * l64_index_mapped() says whether the index is mapped (else
 * beluga_lookup_count() asks the kernel, as L64_COUNT does).
 * The handle's allocations die with it; the published blocks stay in the pool
 * as evictable cache.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libbeluga.h>

#define MAX_KEYS 4096
#define L64_API __attribute__((visibility("default")))

enum { L64_COUNT = 0, L64_PIN = 1, L64_COUNT_MAPPED = 2 };

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct l64 {
	struct beluga *b;
	uint64_t ns;
	size_t n;
	struct beluga_key keys[MAX_KEYS];
	uint64_t offs[MAX_KEYS];
};

static int op_count(struct l64 *c)
{
	ssize_t r = beluga_lookup(c->b, c->ns, c->keys, c->n, NULL, 0);

	return r < 0 ? (int)r : (size_t)r == c->n ? 0 : -ENOENT;
}

static int op_count_mapped(struct l64 *c)
{
	ssize_t r = beluga_lookup_count(c->b, c->ns, c->keys, c->n);

	return r < 0 ? (int)r : (size_t)r == c->n ? 0 : -ENOENT;
}

static int op_pin(struct l64 *c)
{
	ssize_t r = beluga_lookup(c->b, c->ns, c->keys, c->n, c->offs, BELUGA_LOOKUP_PIN);

	if (r < 0)
		return (int)r;
	if ((size_t)r != c->n)
		return -ENOENT;
	return beluga_release(c->b, c->offs, c->n);
}

/* Open @dev (NULL: $BELUGA_DEVICE or /dev/beluga) and publish @n blocks. */
L64_API struct l64 *l64_open(const char *dev, size_t n, uint64_t tag)
{
	struct beluga_publish_item *items;
	struct beluga_publish_summary sum;
	uint32_t tokens[MAX_KEYS];
	struct l64 *c;
	size_t i;
	int ret;

	if (n < 1 || n > MAX_KEYS) {
		fprintf(stderr, "lookup64: keys must be 1..%d\n", MAX_KEYS);
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	items = calloc(n, sizeof(*items));
	if (!c || !items)
		goto fail;
	c->n = n;
	ret = beluga_open(dev, O_RDWR, &c->b);
	if (ret) {
		fprintf(stderr, "lookup64: %s\n", beluga_last_error(NULL));
		goto fail;
	}
	/* a namespace of this run's own: nothing else publishes there */
	c->ns = (tag << 32) ^ ((uint64_t)getpid() << 8) ^ 0xC0DEu;
	for (i = 0; i < n; i++)
		tokens[i] = (uint32_t)(i * 2654435761u) ^ (uint32_t)c->ns;
	beluga_hash_chain(NULL, tokens, n, 1, c->keys, n);
	ret = beluga_alloc(c->b, c->offs, n);
	for (i = 0; !ret && i < n; i++) {
		items[i].offset = c->offs[i];
		items[i].key = c->keys[i];
	}
	if (!ret)
		ret = beluga_publish(c->b, c->ns, items, n, &sum);
	if (ret || sum.published != n) {
		fprintf(stderr, "lookup64: setup: %s\n",
			ret ? beluga_last_error(c->b) : "not every block published");
		goto fail;
	}
	free(items);
	/*
	 * As the binding does at its first lookup_count(); a pool that cannot
	 * map it (a shared one) is asked through the kernel, which
	 * l64_index_mapped() tells.
	 */
	beluga_index_map(c->b);
	return c;
fail:
	if (c)
		beluga_close(c->b);
	free(c);
	free(items);
	return NULL;
}

/* ns per operation of @iters operations @op, or a negative errno. */
L64_API double l64_run(struct l64 *c, int op, uint64_t iters)
{
	int (*fn)(struct l64 *) = op == L64_PIN ? op_pin :
				  op == L64_COUNT_MAPPED ? op_count_mapped : op_count;
	uint64_t t0, i;
	int ret = 0;

	if (!iters)
		return -EINVAL;
	t0 = now_ns();
	for (i = 0; i < iters; i++)
		ret |= fn(c);
	if (ret) {
		fprintf(stderr, "lookup64: %s: %s (%s)\n",
			op == L64_PIN ? "pin" : op == L64_COUNT_MAPPED ? "count_mapped" : "count",
			beluga_strerror(ret), beluga_last_error(c->b));
		return ret < 0 ? ret : -EIO;
	}
	return (double)(now_ns() - t0) / (double)iters;
}

/* 1 when L64_COUNT_MAPPED reads the mapped index, 0 when it asks the kernel. */
L64_API int l64_index_mapped(struct l64 *c)
{
	return beluga_index_live(c->b);
}

L64_API void l64_close(struct l64 *c)
{
	if (c)
		beluga_close(c->b);
	free(c);
}

#ifndef L64_LIBRARY
static int run_op(struct l64 *c, int op, const char *name, int samples, double sample_ms)
{
	uint64_t iters = 1;
	double v;
	int s;

	/* calibrate: double until one batch takes sample_ms */
	for (;;) {
		v = l64_run(c, op, iters);
		if (v < 0)
			return (int)v;
		if (v * (double)iters >= sample_ms * 1e6 || iters >= (1u << 30))
			break;
		iters *= 2;
	}
	printf("\"%s_ns\":[", name);
	for (s = 0; s < samples; s++) {
		v = l64_run(c, op, iters);
		if (v < 0)
			return (int)v;
		printf("%s%.1f", s ? "," : "", v);
	}
	printf("],\"%s_iters\":%" PRIu64, name, iters);
	return 0;
}

int main(int argc, char **argv)
{
	const char *dev = NULL;
	int samples = 15, opt, ret;
	double sample_ms = 5;
	struct l64 *c;
	size_t n = 64;

	while ((opt = getopt(argc, argv, "d:s:m:n:")) != -1) {
		switch (opt) {
		case 'd': dev = optarg; break;
		case 's': samples = atoi(optarg); break;
		case 'm': sample_ms = atof(optarg); break;
		case 'n': n = strtoul(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: lookup64 [-d DEVICE] [-s SAMPLES] [-m SAMPLE_MS] [-n KEYS]\n");
			return 2;
		}
	}
	if (samples < 1) {
		fprintf(stderr, "lookup64: -s must be >= 1\n");
		return 2;
	}
	c = l64_open(dev, n, 1);
	if (!c)
		return 1;
	printf("{\"keys\":%zu,", n);
	ret = run_op(c, L64_COUNT, "count", samples, sample_ms);
	printf(",");
	if (!ret)
		ret = run_op(c, L64_PIN, "pin", samples, sample_ms);
	printf("}\n");
	l64_close(c);
	return ret ? 1 : 0;
}
#endif
