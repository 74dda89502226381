// SPDX-License-Identifier: GPL-2.0
/*
 * In-guest test of libbeluga's ring of block commands against the real
 * module (TAP). `make -C userspace static` builds it statically as
 * build/guest-tests/libbeluga-ring, which the VM suite runs from
 * /tests/userspace. It attaches a 2 MiB region of 64 KiB blocks (the test
 * NUMA node, else the first test dax device), runs every command through a
 * plain ring and an SQPOLL ring, compares LOOKUP with beluga_lookup(),
 * checks the library's own refusals and a failed command's message, and
 * leaves the pool as it found it (detached).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libbeluga.h"
#include "../lib/tap.h"

#define NKEYS	4
#define NLOOK	16

static struct beluga *b;
static unsigned int ring_flags;

static int attach_region(uint32_t *region_id)
{
	const char *node = getenv("BELUGA_TEST_NODE");
	const char *dax = getenv("BELUGA_TEST_DAX");
	struct beluga_attach a;
	char first[64];
	int ret;

	if (node && *node)
		ret = beluga_attach_node(b, atoi(node), 2 << 20, 64 << 10, &a);
	else if (dax && sscanf(dax, "%63s", first) == 1)
		ret = beluga_attach_dax(b, first, 64 << 10, &a);
	else
		return -ENOENT;
	if (!ret)
		*region_id = a.region_id;
	return ret;
}

/* Submit and wait; @n results expected, all of them 0. */
static int run_all(struct beluga_ring *r, struct beluga_ring_result *res,
		   size_t n)
{
	ssize_t got = beluga_ring_submit_and_wait(r, res, n);
	size_t i;

	if (got != (ssize_t)n)
		return -1;
	for (i = 0; i < n; i++)
		if (res[i].res)
			return -1;
	return 0;
}

static void ring_commands(void)
{
	struct beluga_ring_result res[NLOOK];
	struct beluga_publish_item items[NKEYS];
	uint64_t o[NKEYS], got[NLOOK][NKEYS], plain[NKEYS], one;
	struct beluga_key k[NKEYS];
	struct beluga_stats st;
	struct beluga_ring *r;
	uint64_t ns = 0x7269e6ULL + ring_flags;
	int i, j;

	REQUIRE_EQ(beluga_ring_init(b, NLOOK, ring_flags, &r), 0);
	for (i = 0; i < NKEYS; i++)
		k[i] = (struct beluga_key){ .lo = (uint64_t)i * 2 + 1, .hi = ns };

	/* ALLOC, then PUBLISH: one command each */
	CHECK_EQ(beluga_ring_queue_alloc(r, o, NKEYS, 11), 0);
	REQUIRE_EQ(run_all(r, res, 1), 0);
	CHECK_EQ(res[0].user_data, 11);
	for (i = 0; i < NKEYS; i++)
		items[i] = (struct beluga_publish_item){ .offset = o[i], .key = k[i] };
	CHECK_EQ(beluga_ring_queue_publish(r, ns, items, NKEYS, 12), 0);
	REQUIRE_EQ(run_all(r, res, 1), 0);
	CHECK_EQ(res[0].published, NKEYS);
	CHECK_EQ(res[0].exists, 0);
	CHECK_EQ(res[0].failed, 0);
	for (i = 0; i < NKEYS; i++)
		CHECK_EQ(items[i].result, BELUGA_PUBLISH_OK);

	/* 16 LOOKUP+PIN in one submission, each the plain call's answer */
	REQUIRE_EQ(beluga_lookup(b, ns, k, NKEYS, plain, BELUGA_LOOKUP_PIN), NKEYS);
	REQUIRE_EQ(beluga_release(b, plain, NKEYS), 0);
	for (i = 0; i < NLOOK; i++)
		CHECK_EQ(beluga_ring_queue_lookup(r, ns, k, NKEYS, got[i],
						  BELUGA_LOOKUP_PIN, 100 + i), 0);
	REQUIRE_EQ(run_all(r, res, NLOOK), 0);
	for (i = 0; i < NLOOK; i++) {
		CHECK_EQ(res[i].hits, NKEYS);
		CHECK(res[i].user_data >= 100 && res[i].user_data < 100 + NLOOK);
		for (j = 0; j < NKEYS; j++)
			CHECK_EQ(got[i][j], plain[j]);
	}
	REQUIRE_EQ(beluga_stats(b, &st), 0);
	CHECK_EQ(st.pins, NLOOK * NKEYS);
	for (i = 0; i < NLOOK; i++)
		CHECK_EQ(beluga_ring_queue_release(r, got[i], NKEYS, 200 + i), 0);
	REQUIRE_EQ(run_all(r, res, NLOOK), 0);
	REQUIRE_EQ(beluga_stats(b, &st), 0);
	CHECK_EQ(st.pins, 0);

	/* a failed command: its result, and the message of its error */
	CHECK_EQ(beluga_ring_queue_release(r, o, 1, 300), 0);
	CHECK_EQ(beluga_ring_submit_and_wait(r, res, 1), 1);
	CHECK_EQ(res[0].res, -EINVAL);
	CHECK(strstr(beluga_last_error(b), "RELEASE") != NULL);

	/* the library's refusals, before anything is sent */
	CHECK_EQ(beluga_ring_queue_lookup(r, ns, k, 0, NULL, 0, 0), -EINVAL);
	CHECK_EQ(beluga_ring_queue_lookup(r, ns, k, BELUGA_MAX_BATCH + 1, NULL, 0, 0),
		 -E2BIG);
	CHECK_EQ(beluga_ring_queue_lookup(r, ns, k, 1, NULL, BELUGA_LOOKUP_PIN, 0),
		 -EINVAL);
	for (i = 0; i < NLOOK; i++)
		CHECK_EQ(beluga_ring_queue_lookup(r, ns, k, NKEYS, NULL, 0, i), 0);
	CHECK_EQ(beluga_ring_queue_lookup(r, ns, k, NKEYS, NULL, 0, 99), -EBUSY);
	CHECK(strstr(beluga_last_error(b), "beluga_ring_submit_and_wait") != NULL);
	CHECK_EQ(beluga_ring_submit_and_wait(r, res, NLOOK - 1), -EINVAL);
	REQUIRE_EQ(run_all(r, res, NLOOK), 0);
	for (i = 0; i < NLOOK; i++)
		CHECK_EQ(res[i].hits, NKEYS);

	/* FREE through the ring: a block of our own */
	CHECK_EQ(beluga_ring_queue_alloc(r, &one, 1, 400), 0);
	REQUIRE_EQ(run_all(r, res, 1), 0);
	CHECK_EQ(beluga_ring_queue_free(r, &one, 1, 401), 0);
	REQUIRE_EQ(run_all(r, res, 1), 0);
	beluga_ring_exit(r);
	REQUIRE_EQ(beluga_stats(b, &st), 0);
	CHECK_EQ(st.allocated_blocks, 0);
	CHECK_EQ(beluga_evict_ns(b, ns, NULL, NULL), 0);
}

static void plain_ring(void)
{
	ring_flags = 0;
	ring_commands();
}

static void sqpoll_ring(void)
{
	ring_flags = BELUGA_RING_SQPOLL;
	ring_commands();
}

int main(void)
{
	uint32_t region = 0;
	int ret;

	if (beluga_open(NULL, O_RDWR, &b)) {
		tap_result(0, "beluga_open: %s", beluga_last_error(NULL));
		return tap_done();
	}
	ret = attach_region(&region);
	if (ret == -ENOENT) {
		tap_skip("neither BELUGA_TEST_NODE nor BELUGA_TEST_DAX is set",
			 "libbeluga ring");
		beluga_close(b);
		return tap_done();
	}
	if (!tap_result(ret == 0, "attach a region: %s", ret ? beluga_last_error(b) : "ok")) {
		beluga_close(b);
		return tap_done();
	}
	TAP_RUN(plain_ring);
	TAP_RUN(sqpoll_ring);
	ret = beluga_detach(b, region, BELUGA_DETACH_EVICT, NULL);
	tap_result(ret == 0, "detach: %s", ret ? beluga_last_error(b) : "ok");
	beluga_close(b);
	return tap_done();
}
