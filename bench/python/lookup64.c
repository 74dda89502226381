// SPDX-License-Identifier: GPL-2.0
/*
 * The C side of the Python-overhead benchmark (bench/python/overhead.py):
 * the same 64-key LOOKUP loop as the Python side, through libbeluga.
 *
 *   lookup64 [-d DEVICE] [-s SAMPLES] [-m SAMPLE_MS] [-n KEYS] [-t TAG]
 *
 * Publishes KEYS blocks under a namespace of its own (derived from TAG and
 * the pid), then times two operations, each as SAMPLES samples of about
 * SAMPLE_MS ms (operations per sample calibrated once):
 *   count: beluga_lookup() count-only of the KEYS-key chain (all hits)
 *   pin:   beluga_lookup(BELUGA_LOOKUP_PIN) + beluga_release() of the hits
 * and prints one JSON object: {"count_ns": [...], "pin_ns": [...]} (ns per
 * operation of each sample). Its allocations die with the file; the
 * published blocks stay in the pool as evictable cache.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <beluga.h>

#define MAX_KEYS 4096

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct ctx {
	struct beluga *b;
	uint64_t ns;
	size_t n;
	struct beluga_key keys[MAX_KEYS];
	uint64_t offs[MAX_KEYS];
};

static int op_count(struct ctx *c)
{
	ssize_t r = beluga_lookup(c->b, c->ns, c->keys, c->n, NULL, 0);

	return r < 0 ? (int)r : (size_t)r == c->n ? 0 : -ENOENT;
}

static int op_pin(struct ctx *c)
{
	ssize_t r = beluga_lookup(c->b, c->ns, c->keys, c->n, c->offs, BELUGA_LOOKUP_PIN);

	if (r < 0)
		return (int)r;
	if ((size_t)r != c->n)
		return -ENOENT;
	return beluga_release(c->b, c->offs, c->n);
}

static int run_op(struct ctx *c, int (*op)(struct ctx *), const char *name,
		  int samples, double sample_ms, FILE *out)
{
	uint64_t iters = 1, t0, dt;
	int s, ret;

	/* calibrate: double until one batch takes sample_ms */
	for (;;) {
		t0 = now_ns();
		for (uint64_t i = 0; i < iters; i++) {
			ret = op(c);
			if (ret) {
				fprintf(stderr, "lookup64: %s: %s (%s)\n", name,
					beluga_strerror(ret), beluga_last_error(c->b));
				return ret;
			}
		}
		dt = now_ns() - t0;
		if (dt >= sample_ms * 1e6 || iters >= (1u << 30))
			break;
		iters *= 2;
	}
	fprintf(out, "\"%s_ns\":[", name);
	for (s = 0; s < samples; s++) {
		t0 = now_ns();
		for (uint64_t i = 0; i < iters; i++)
			ret |= op(c);
		dt = now_ns() - t0;
		fprintf(out, "%s%.1f", s ? "," : "", (double)dt / (double)iters);
	}
	fprintf(out, "],\"%s_iters\":%" PRIu64, name, iters);
	return ret;
}

int main(int argc, char **argv)
{
	static struct ctx c;
	struct beluga_publish_item *items;
	struct beluga_publish_summary sum;
	const char *dev = NULL;
	uint32_t tokens[MAX_KEYS];
	int samples = 15, opt, ret;
	double sample_ms = 5;
	uint64_t tag = 1;
	size_t i;

	c.n = 64;
	while ((opt = getopt(argc, argv, "d:s:m:n:t:")) != -1) {
		switch (opt) {
		case 'd': dev = optarg; break;
		case 's': samples = atoi(optarg); break;
		case 'm': sample_ms = atof(optarg); break;
		case 'n': c.n = strtoul(optarg, NULL, 0); break;
		case 't': tag = strtoull(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: lookup64 [-d DEVICE] [-s SAMPLES] [-m SAMPLE_MS] [-n KEYS] [-t TAG]\n");
			return 2;
		}
	}
	if (samples < 1 || c.n < 1 || c.n > MAX_KEYS) {
		fprintf(stderr, "lookup64: -s must be >= 1 and -n 1..%d\n", MAX_KEYS);
		return 2;
	}
	ret = beluga_open(dev, O_RDWR, &c.b);
	if (ret) {
		fprintf(stderr, "lookup64: %s\n", beluga_last_error(NULL));
		return 1;
	}
	/* a namespace of this run's own: nothing else publishes there */
	c.ns = (tag << 32) ^ ((uint64_t)getpid() << 8) ^ 0xC0DEu;
	for (i = 0; i < c.n; i++)
		tokens[i] = (uint32_t)(i * 2654435761u) ^ (uint32_t)c.ns;
	beluga_hash_chain(NULL, tokens, c.n, 1, c.keys, c.n);
	items = calloc(c.n, sizeof(*items));
	if (!items)
		return 1;
	ret = beluga_alloc(c.b, c.offs, c.n);
	for (i = 0; !ret && i < c.n; i++) {
		items[i].offset = c.offs[i];
		items[i].key = c.keys[i];
	}
	if (!ret)
		ret = beluga_publish(c.b, c.ns, items, c.n, &sum);
	if (ret || sum.published != c.n) {
		fprintf(stderr, "lookup64: setup: %s\n", ret ? beluga_last_error(c.b) : "not every block published");
		beluga_close(c.b);
		return 1;
	}
	printf("{\"keys\":%zu,", c.n);
	ret = run_op(&c, op_count, "count", samples, sample_ms, stdout);
	printf(",");
	ret |= run_op(&c, op_pin, "pin", samples, sample_ms, stdout);
	printf("}\n");
	free(items);
	beluga_close(c.b);
	return ret ? 1 : 0;
}
