// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libbeluga: the block commands, for arrays of any length.
 *
 * The kernel takes at most BELUGA_MAX_BATCH items per call. These wrappers
 * split longer arrays into chunks and keep, across chunks, the semantics a
 * single call would have had where that can be done from userspace:
 * ALLOC stays all or nothing (earlier chunks are freed on failure), LOOKUP
 * stays a leading-run query (stop at the first chunk that does not hit in
 * full; drop earlier pins on failure). FREE and RELEASE cannot be undone,
 * so on failure they report how far they got.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

/* One FREE or RELEASE ioctl over at most one batch. */
static int blocks_call(struct beluga *b, unsigned long request,
		       const uint64_t *offsets, size_t count)
{
	struct beluga_blocks req;

	memset(&req, 0, sizeof(req));
	req.size = sizeof(req);
	req.count = (uint32_t)count;
	req.offsets = (uintptr_t)offsets;
	return bel_ioctl_call(b, request, &req);
}

/* FREE or RELEASE of any length; @what names it in messages. */
static int blocks_batch(struct beluga *b, unsigned long request, const char *what,
			const uint64_t *offsets, size_t count)
{
	size_t done = 0;
	int ret;

	while (done < count) {
		size_t n = min_size(count - done, bel_batch(b));

		ret = blocks_call(b, request, offsets + done, n);
		if (ret == -EINVAL)
			return bel_fail(b, ret,
					"%s: an offset in items %zu..%zu is not a block %s "
					"(%zu of %zu done before it): %s", what, done, done + n - 1,
					request == BELUGA_IOC_FREE ?
						"allocated by this handle" : "pinned by this handle as often as listed",
					done, count,
					request == BELUGA_IOC_FREE ?
						"free only unpublished blocks that beluga_alloc() gave "
						"this handle" :
						"release each offset once per pin that beluga_lookup() took");
		if (ret) {
			bel_fail_common(b, ret, what);
			if (done)
				bel_fail(b, ret, "%.400s (%zu of %zu done before it)",
					 beluga_last_error(b), done, count);
			return ret;
		}
		done += n;
	}
	return 0;
}

BEL_EXPORT int beluga_free(struct beluga *b, const uint64_t *offsets, size_t count)
{
	return blocks_batch(b, BELUGA_IOC_FREE, "FREE", offsets, count);
}

BEL_EXPORT int beluga_release(struct beluga *b, const uint64_t *offsets, size_t count)
{
	return blocks_batch(b, BELUGA_IOC_RELEASE, "RELEASE", offsets, count);
}

/*
 * ALLOC of any length; with @evicted, each chunk asks for the keys it
 * evicted (BELUGA_ALLOC_EVICTED) and they follow the earlier chunks' ones.
 */
static int alloc_batch(struct beluga *b, uint64_t *offsets, size_t count,
		       struct beluga_evicted_key *evicted, size_t *nr_evicted)
{
	struct beluga_alloc req;
	size_t done = 0, keys = 0;
	int ret;

	while (done < count) {
		size_t n = min_size(count - done, bel_batch(b));

		memset(&req, 0, sizeof(req));
		req.size = sizeof(req);
		req.count = (uint32_t)n;
		req.offsets = (uintptr_t)(offsets + done);
		if (evicted) {
			req.flags = BELUGA_ALLOC_EVICTED;
			req.evicted = (uintptr_t)(evicted + keys);
		}
		ret = bel_ioctl_call(b, BELUGA_IOC_ALLOC, &req);
		if (ret)
			goto undo;
		done += n;
		keys += req.nr_evicted;
	}
	if (nr_evicted)
		*nr_evicted = keys;
	return 0;

undo:
	/* Evictions cannot be undone: the earlier chunks' keys stay reported. */
	if (nr_evicted)
		*nr_evicted = keys;
	/*
	 * All or nothing, like one ALLOC: give back what the earlier chunks
	 * took. These blocks are ours and unpublished, so FREE cannot fail
	 * short of the module vanishing; nothing more could be done then.
	 */
	if (done)
		blocks_batch(b, BELUGA_IOC_FREE, "FREE", offsets, done);
	if (ret == -ENOSPC)
		return bel_fail(b, ret,
				"ALLOC of %zu blocks: the pool has fewer free plus evictable "
				"blocks: release pins, free blocks, or attach more memory", count);
	/* Chunks fit the module's batch, so only the longer struct is too big. */
	if (ret == -E2BIG && evicted)
		return bel_fail(b, -EOPNOTSUPP,
				"ALLOC with the evicted keys: the loaded beluga module predates "
				"ALLOC's evicted report (BELUGA_ALLOC_EVICTED): upgrade the module "
				"to this libbeluga's version, or call beluga_alloc()");
	return bel_fail_common(b, ret, "ALLOC");
}

BEL_EXPORT int beluga_alloc(struct beluga *b, uint64_t *offsets, size_t count)
{
	return alloc_batch(b, offsets, count, NULL, NULL);
}

BEL_EXPORT int beluga_alloc_evicting(struct beluga *b, uint64_t *offsets, size_t count,
				     struct beluga_evicted_key *evicted, size_t *nr_evicted)
{
	if (!evicted || !nr_evicted)
		return bel_fail(b, -EINVAL,
				"beluga_alloc_evicting: evicted and nr_evicted must not be NULL: "
				"pass room for @count keys, or call beluga_alloc()");
	*nr_evicted = 0;
	return alloc_batch(b, offsets, count, evicted, nr_evicted);
}

BEL_EXPORT int beluga_publish(struct beluga *b, uint64_t ns,
			      struct beluga_publish_item *items, size_t count,
			      struct beluga_publish_summary *sum)
{
	struct beluga_publish_summary total = { 0, 0, 0 };
	struct beluga_publish req;
	size_t done = 0, i;
	int ret = 0;

	for (i = 0; i < count; i++) {
		items[i].result = 0;
		items[i].__reserved = 0;
	}
	while (done < count) {
		size_t n = min_size(count - done, bel_batch(b));

		memset(&req, 0, sizeof(req));
		req.size = sizeof(req);
		req.ns = ns;
		req.count = (uint32_t)n;
		req.items = (uintptr_t)(items + done);
		ret = bel_ioctl_call(b, BELUGA_IOC_PUBLISH, &req);
		if (ret)
			break;
		total.published += req.published;
		total.exists += req.exists;
		total.failed += req.failed;
		done += n;
	}
	if (ret) {
		/* Keep the per-item results truthful: these were not applied. */
		for (i = done; i < count; i++)
			items[i].result = ret;
		total.failed += count - done;
	}
	if (sum)
		*sum = total;
	if (ret)
		return bel_fail_common(b, ret, "PUBLISH");
	if (total.failed)
		bel_fail(b, 0, "PUBLISH: %zu of %zu items failed (see each item's result: "
			 "-EINVAL not a block, -EPERM not allocated by this handle): publish "
			 "only blocks that beluga_alloc() gave this handle, once each",
			 total.failed, count);
	return 0;
}

BEL_EXPORT ssize_t beluga_lookup(struct beluga *b, uint64_t ns,
				 const struct beluga_key *keys, size_t count,
				 uint64_t *offsets, uint32_t flags)
{
	const int pin = flags & BELUGA_LOOKUP_PIN;
	struct beluga_lookup req;
	size_t hits = 0;
	int ret;

	if (pin && !offsets)
		return bel_fail(b, -EINVAL,
				"LOOKUP with BELUGA_LOOKUP_PIN needs an offsets array "
				"(the pins must be released by offset)");
	while (hits < count) {
		size_t n = min_size(count - hits, bel_batch(b));

		memset(&req, 0, sizeof(req));
		req.size = sizeof(req);
		req.flags = flags;
		req.ns = ns;
		req.count = (uint32_t)n;
		req.keys = (uintptr_t)(keys + hits);
		req.offsets = offsets ? (uintptr_t)(offsets + hits) : 0;
		ret = bel_ioctl_call(b, BELUGA_IOC_LOOKUP, &req);
		if (ret)
			goto undo;
		if (req.hits > n) {
			ret = -EPROTO;
			goto undo;
		}
		hits += req.hits;
		/*
		 * A chunk that did not hit in full ends the leading run: keys
		 * after a miss may be present, but the prefix is broken.
		 */
		if (req.hits < n)
			break;
	}
	return (ssize_t)hits;

undo:
	/* Like one LOOKUP that failed: leave no pins behind. */
	if (pin && hits)
		blocks_batch(b, BELUGA_IOC_RELEASE, "RELEASE", offsets, hits);
	if (ret == -EPROTO)
		return bel_fail(b, ret,
				"LOOKUP: the module reported more hits than keys: "
				"module and library disagree on the ABI: install the module and "
				"libbeluga from the same release");
	if (ret == -EOVERFLOW)
		return bel_fail(b, ret,
				"LOOKUP: a block already carries nearly 2^32 pins: some client "
				"pins without releasing (STATS counts pins); restart it");
	return bel_fail_common(b, ret, "LOOKUP");
}
