// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libbeluga: count-only LOOKUPs with no system call, on the read-only
 * mapping of the pool's index (<linux/beluga.h>, "The index, mapped
 * read-only"). The reader is the module's own, compiled here as it is:
 * kmod/core/bel_index_copy.h and bel_index_walk.h, the step that the
 * module's LOOKUP takes on every block (GPL-2.0 OR LGPL-2.1-or-later, for
 * this). Whatever it cannot be sure of (a sealed copy, a key restarted
 * too often) goes to BELUGA_IOC_LOOKUP, from that key on.
 */
#include "bel_index_copy.h"	/* -DBEL_ENV_NO_RCU (Makefile) */

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>

#include "internal.h"

static void *bel_real_mmap(void *addr, size_t len, int prot, int flags, int fd,
			   off_t off)
{
	return mmap(addr, len, prot, flags, fd, off);
}

void *(*bel_mmap)(void *addr, size_t len, int prot, int flags, int fd,
		  off_t off) = bel_real_mmap;
int (*bel_munmap)(void *addr, size_t len) = munmap;

/* Tries of INDEX_MAP and mmap(): a copy sealed and replaced in between. */
#define INDEX_MAP_TRIES	4

static int index_map_fail(struct beluga *b, int err)
{
	switch (-err) {
	case EOPNOTSUPP:
		return bel_fail(b, err,
				"INDEX_MAP: a shared (multi-host) pool has no mapped index: "
				"use beluga_lookup() (beluga_lookup_count() does by itself)");
	case ENOMEM:
		return bel_fail(b, err,
				"INDEX_MAP: the kernel could not allocate the index's copy: "
				"free memory (or raise the memory cgroup's limit) and retry");
	case EPROTO:
		return bel_fail(b, err,
				"INDEX_MAP: the module's index mapping has a layout this "
				"libbeluga does not read: use a module and library of one version");
	default:
		return bel_fail_common(b, err, "INDEX_MAP");
	}
}

BEL_EXPORT int beluga_index_map(struct beluga *b)
{
	struct beluga_index_map req;
	unsigned int tries;
	void *p = MAP_FAILED;
	int ret = -ENXIO;

	for (tries = 0; tries < INDEX_MAP_TRIES && p == MAP_FAILED; tries++) {
		memset(&req, 0, sizeof(req));
		req.size = sizeof(req);
		ret = bel_ioctl_call(b, BELUGA_IOC_INDEX_MAP, &req);
		if (ret)
			return index_map_fail(b, ret);
		if (req.length > SIZE_MAX || req.offset > INT64_MAX)
			return index_map_fail(b, -EPROTO);
		p = bel_mmap(NULL, (size_t)req.length, PROT_READ, MAP_SHARED,
			     b->fd, (off_t)req.offset);
		/* ENXIO, ENODEV: sealed and made anew since the ioctl. */
		ret = p == MAP_FAILED ? -errno : 0;
		if (ret && ret != -ENXIO && ret != -ENODEV)
			break;
	}
	if (ret)
		return index_map_fail(b, ret);
	if (!bel_index_copy_usable(p, req.length)) {
		bel_munmap(p, (size_t)req.length);
		return index_map_fail(b, -EPROTO);
	}
	beluga_index_unmap(b);
	b->index_map = p;
	b->index_length = (size_t)req.length;
	return 0;
}

BEL_EXPORT void beluga_index_unmap(struct beluga *b)
{
	if (!b->index_map)
		return;
	bel_munmap(b->index_map, b->index_length);
	b->index_map = NULL;
	b->index_length = 0;
}

BEL_EXPORT int beluga_index_live(const struct beluga *b)
{
	const struct beluga_index_header *hdr = b->index_map;

	return hdr && !(__atomic_load_n(&hdr->seq, __ATOMIC_ACQUIRE) & 1);
}

BEL_EXPORT ssize_t beluga_lookup_count(struct beluga *b, uint64_t ns,
				       const struct beluga_key *keys, size_t count)
{
	size_t done = 0;
	ssize_t more;

	while (b->index_map && done < count) {
		u32 n = count - done > UINT32_MAX ? UINT32_MAX : (u32)(count - done);
		u32 hits = 0;
		int r = bel_index_copy_lookup(b->index_map, ns, n, keys + done,
					      &hits);

		done += hits;
		if (r)
			break;		/* unsure from keys[done] on: ask */
		if (hits < n)
			return (ssize_t)done;
	}
	if (done == count)
		return (ssize_t)done;
	more = beluga_lookup(b, ns, keys + done, count - done, NULL, 0);
	return more < 0 ? more : (ssize_t)(done + (size_t)more);
}
