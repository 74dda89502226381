// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libbeluga: block commands through io_uring (struct beluga_ring).
 *
 * Each queued command takes a slot that holds its uapi struct until its
 * completion is reaped: the module reads the struct when the command runs,
 * which may be after io_uring_enter() returned, and writes its answer
 * (LOOKUP's hits, PUBLISH's counters) there. The SQE's user_data is the
 * slot's index. A ring never has more commands in flight than slots, and
 * its rings are at least that large, so neither the submission nor the
 * completion queue can fill up.
 *
 * The handle's fd is registered with the ring (when io_uring allows it):
 * the kernel then takes no file reference per command.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <liburing.h>

#include "internal.h"

/* A slot's command, and nothing for a free slot. */
enum ring_cmd {
	RING_FREE_SLOT = 0,
	RING_LOOKUP,
	RING_RELEASE,
	RING_ALLOC,
	RING_FREE,
	RING_PUBLISH,
};

struct ring_slot {
	enum ring_cmd cmd;
	uint64_t user_data;
	union {
		struct beluga_lookup lookup;
		struct beluga_blocks blocks;
		struct beluga_alloc alloc;
		struct beluga_publish publish;
	} arg;
};

struct beluga_ring {
	struct beluga *b;
	struct io_uring ring;
	int fd;			/* in the SQEs: 0 when registered, else b->fd */
	uint8_t sqe_flags;	/* IOSQE_FIXED_FILE when registered */
	unsigned int nr_slots;
	unsigned int queued;	/* prepared, not submitted */
	unsigned int in_flight;	/* submitted, not reaped */
	unsigned int nr_free;
	unsigned int *free;	/* stack of free slot indexes */
	struct ring_slot *slots;
};

static const char *ring_cmd_name(enum ring_cmd cmd)
{
	switch (cmd) {
	case RING_LOOKUP:
		return "LOOKUP";
	case RING_RELEASE:
		return "RELEASE";
	case RING_ALLOC:
		return "ALLOC";
	case RING_FREE:
		return "FREE";
	case RING_PUBLISH:
		return "PUBLISH";
	default:
		return "?";
	}
}

static const char ring_fallback[] =
	"the plain calls (beluga_lookup(), beluga_release(), ...), which need no io_uring";

/* Why io_uring_queue_init() failed, and what to do. */
static int ring_setup_failed(struct beluga *b, int err, unsigned int flags)
{
	switch (-err) {
	case ENOSYS:
		return bel_fail(b, err, "io_uring: this kernel has no io_uring "
				"(CONFIG_IO_URING=n): %s", ring_fallback);
	case EPERM:
	case EACCES:
		return bel_fail(b, err, "io_uring is disabled here (sysctl "
				"kernel.io_uring_disabled, a seccomp filter or a "
				"container's policy)%s: allow it, or use %s",
				flags & BELUGA_RING_SQPOLL ?
				", or SQPOLL needs a privilege here" : "",
				ring_fallback);
	case ENOMEM:
		return bel_fail(b, err, "io_uring: no memory for the ring (or "
				"RLIMIT_MEMLOCK too low on an older kernel): fewer "
				"entries, or raise ulimit -l");
	default:
		return bel_fail(b, err, "io_uring_queue_init: %s", strerror(-err));
	}
}

/* What a module or kernel without the commands answers, and what to do. */
static int ring_unsupported(struct beluga *b, int err)
{
	if (err == -EOPNOTSUPP)
		return bel_fail(b, err, "%s: the loaded beluga module has no io_uring "
				"commands (it predates them): load the module of "
				"libbeluga's release (%s), or use %s",
				b->path, LIBBELUGA_VERSION, ring_fallback);
	return bel_fail(b, err, "%s: this kernel's io_uring has no "
			"IORING_OP_URING_CMD (it needs Linux 5.19 or later): use %s",
			b->path, ring_fallback);
}

static struct io_uring_sqe *ring_prep(struct beluga_ring *r, unsigned int slot,
				      unsigned long request, const void *arg)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
	int ret;

	/*
	 * Never more in flight than the queue has entries, so there is room
	 * once the kernel consumed what was submitted. Without SQPOLL it has,
	 * by the time the completions are reaped. An SQPOLL thread moves the
	 * queue's head after it posted the completions of a batch: wait for
	 * it then.
	 */
	while (!sqe && (r->ring.flags & IORING_SETUP_SQPOLL)) {
		ret = io_uring_sqring_wait(&r->ring);
		if (ret < 0 && ret != -EINTR)
			return NULL;
		sqe = io_uring_get_sqe(&r->ring);
	}
	if (!sqe)
		return NULL;
	io_uring_prep_rw(IORING_OP_URING_CMD, sqe, r->fd, NULL, 0, 0);
	sqe->cmd_op = (uint32_t)request;
	/* struct beluga_uring_cmd: the argument, and 0 in __reserved */
	memset(sqe->cmd, 0, sizeof(struct beluga_uring_cmd));
	((struct beluga_uring_cmd *)sqe->cmd)->arg = (uintptr_t)arg;
	sqe->flags |= r->sqe_flags;
	io_uring_sqe_set_data64(sqe, slot);
	return sqe;
}

/*
 * One command with a NULL struct: a module with the commands answers
 * -EFAULT (the struct's size cannot be read).
 */
static int ring_probe(struct beluga_ring *r)
{
	struct io_uring_cqe *cqe;
	int ret;

	if (!ring_prep(r, 0, BELUGA_IOC_LOOKUP, NULL))
		return bel_fail(r->b, -EBUSY, "io_uring: no free entry for the probe");
	ret = io_uring_submit(&r->ring);
	if (ret < 0)
		return bel_fail(r->b, ret, "io_uring: submitting the probe: %s",
				strerror(-ret));
	do {
		ret = io_uring_wait_cqe(&r->ring, &cqe);
	} while (ret == -EINTR);
	if (ret < 0)
		return bel_fail(r->b, ret, "io_uring: the probe's completion: %s",
				strerror(-ret));
	ret = cqe->res;
	io_uring_cqe_seen(&r->ring, cqe);
	if (ret == -EFAULT)
		return 0;
	if (ret == -EOPNOTSUPP || ret == -EINVAL)
		return ring_unsupported(r->b, ret);
	return bel_fail(r->b, ret, "%s: the io_uring probe got %s, not EFAULT: "
			"module and library disagree on the ABI",
			r->b->path, strerror(-ret));
}

BEL_EXPORT int beluga_ring_init(struct beluga *b, unsigned int entries,
				unsigned int flags, struct beluga_ring **out)
{
	struct io_uring_params params;
	struct beluga_ring *r;
	unsigned int i;
	int ret;

	if (!out)
		return bel_fail(b, -EINVAL, "beluga_ring_init: no place for the ring (out is NULL)");
	*out = NULL;
	if (flags & ~BELUGA_RING_SQPOLL)
		return bel_fail(b, -EINVAL, "beluga_ring_init: unknown flags %#x "
				"(only BELUGA_RING_SQPOLL)", flags & ~BELUGA_RING_SQPOLL);
	if (!entries || entries > BELUGA_MAX_BATCH)
		return bel_fail(b, -EINVAL, "beluga_ring_init: %u entries: pass 1 to %u",
				entries, BELUGA_MAX_BATCH);
	r = calloc(1, sizeof(*r));
	if (r) {
		r->slots = calloc(entries, sizeof(*r->slots));
		r->free = calloc(entries, sizeof(*r->free));
	}
	if (!r || !r->slots || !r->free) {
		ret = bel_fail(b, -ENOMEM, "beluga_ring_init: out of memory");
		goto err_free;
	}
	r->b = b;
	r->nr_slots = entries;
	for (i = 0; i < entries; i++)
		r->free[i] = entries - 1 - i;
	r->nr_free = entries;

	memset(&params, 0, sizeof(params));
	if (flags & BELUGA_RING_SQPOLL) {
		params.flags |= IORING_SETUP_SQPOLL;
		/* the thread sleeps after this much idle time (ms) */
		params.sq_thread_idle = 100;
	}
	ret = io_uring_queue_init_params(entries, &r->ring, &params);
	if (ret) {
		ring_setup_failed(b, ret, flags);
		goto err_free;
	}
	r->fd = b->fd;
	if (io_uring_register_files(&r->ring, &b->fd, 1) == 0) {
		r->fd = 0;
		r->sqe_flags = IOSQE_FIXED_FILE;
	}
	ret = ring_probe(r);
	if (ret)
		goto err_ring;
	*out = r;
	return 0;

err_ring:
	io_uring_queue_exit(&r->ring);
err_free:
	if (r) {
		free(r->slots);
		free(r->free);
	}
	free(r);
	return ret;
}

/* Reap every command in flight into @results (room for all of them). */
static ssize_t ring_reap(struct beluga_ring *r, struct beluga_ring_result *results)
{
	unsigned int want = r->in_flight, got = 0, head, seen;
	struct io_uring_cqe *cqe;
	int ret = 0, first_err = 0;

	while (got < want) {
		/* submits what is left unconsumed, then waits for the rest */
		ret = io_uring_submit_and_wait(&r->ring, want - got);
		if (ret == -EINTR)
			continue;
		if (ret < 0) {
			bel_fail(r->b, ret, "io_uring: waiting for %u commands: %s",
				 want - got, strerror(-ret));
			break;
		}
		seen = 0;
		io_uring_for_each_cqe(&r->ring, head, cqe) {
			uint64_t index = io_uring_cqe_get_data64(cqe);
			struct beluga_ring_result *res = &results[got];
			struct ring_slot *s;

			seen++;
			if (index >= r->nr_slots)
				continue;	/* not ours: cannot happen */
			s = &r->slots[index];
			memset(res, 0, sizeof(*res));
			res->user_data = s->user_data;
			res->res = cqe->res;
			if (s->cmd == RING_LOOKUP && cqe->res == 0)
				res->hits = s->arg.lookup.hits;
			if (s->cmd == RING_PUBLISH) {
				res->published = s->arg.publish.published;
				res->exists = s->arg.publish.exists;
				res->failed = s->arg.publish.failed;
			}
			if (cqe->res < 0 && !first_err) {
				first_err = cqe->res;
				if (cqe->res == -EOPNOTSUPP)
					ring_unsupported(r->b, cqe->res);
				else
					bel_fail_common(r->b, cqe->res,
							ring_cmd_name(s->cmd));
			}
			s->cmd = RING_FREE_SLOT;
			r->free[r->nr_free++] = (unsigned int)index;
			r->in_flight--;
			got++;
		}
		io_uring_cq_advance(&r->ring, seen);
	}
	/* A failed wait: what was reaped, else its error; the rest stay. */
	return got || !want ? (ssize_t)got : ret;
}

BEL_EXPORT ssize_t beluga_ring_submit_and_wait(struct beluga_ring *r,
					       struct beluga_ring_result *results,
					       size_t max)
{
	unsigned int pending = r->queued + r->in_flight;

	if (max < pending)
		return bel_fail(r->b, -EINVAL,
				"beluga_ring_submit_and_wait: room for %zu results, "
				"%u commands in flight: pass room for all of them",
				max, pending);
	/* In flight from here: the next io_uring_enter() submits them. */
	r->in_flight = pending;
	r->queued = 0;
	return ring_reap(r, results);
}

BEL_EXPORT void beluga_ring_exit(struct beluga_ring *r)
{
	struct beluga_ring_result *results;

	if (!r)
		return;
	/*
	 * The module may still write into the slots of commands in flight:
	 * wait for them. Queued ones are never submitted.
	 */
	if (r->in_flight) {
		results = calloc(r->in_flight, sizeof(*results));
		if (results) {
			r->queued = 0;
			ring_reap(r, results);
			free(results);
		}
	}
	io_uring_queue_exit(&r->ring);
	free(r->slots);
	free(r->free);
	free(r);
}

/* A slot for a command of @count items, or -errno with the message. */
static int ring_take(struct beluga_ring *r, enum ring_cmd cmd, size_t count,
		     uint64_t user_data)
{
	struct ring_slot *s;
	unsigned int index;

	if (!count)
		return bel_fail(r->b, -EINVAL, "%s through the ring: count 0",
				ring_cmd_name(cmd));
	if (count > bel_batch(r->b))
		return bel_fail(r->b, -E2BIG, "%s through the ring: %zu items, and "
				"one command takes at most %zu: queue several, or "
				"use the plain call", ring_cmd_name(cmd), count,
				bel_batch(r->b));
	if (!r->nr_free)
		return bel_fail(r->b, -EBUSY, "%s through the ring: %u commands in "
				"flight, as many as the ring has entries: "
				"beluga_ring_submit_and_wait() first",
				ring_cmd_name(cmd), r->nr_slots);
	index = r->free[--r->nr_free];
	s = &r->slots[index];
	memset(s, 0, sizeof(*s));
	s->cmd = cmd;
	s->user_data = user_data;
	return (int)index;
}

/* Queue slot @index, whose struct @arg is filled in, as @request. */
static int ring_queue(struct beluga_ring *r, int index, unsigned long request,
		      const void *arg)
{
	if (!ring_prep(r, (unsigned int)index, request, arg)) {
		r->slots[index].cmd = RING_FREE_SLOT;
		r->free[r->nr_free++] = (unsigned int)index;
		return bel_fail(r->b, -EBUSY, "io_uring: the submission queue is full");
	}
	r->queued++;
	return 0;
}

BEL_EXPORT int beluga_ring_queue_lookup(struct beluga_ring *r, uint64_t ns,
					const struct beluga_key *keys, size_t count,
					uint64_t *offsets, uint32_t flags,
					uint64_t user_data)
{
	struct beluga_lookup *l;
	int index;

	if ((flags & BELUGA_LOOKUP_PIN) && !offsets)
		return bel_fail(r->b, -EINVAL,
				"LOOKUP with BELUGA_LOOKUP_PIN needs an offsets array "
				"(the pins must be released by offset)");
	index = ring_take(r, RING_LOOKUP, count, user_data);
	if (index < 0)
		return index;
	l = &r->slots[index].arg.lookup;
	l->size = sizeof(*l);
	l->flags = flags;
	l->ns = ns;
	l->count = (uint32_t)count;
	l->keys = (uintptr_t)keys;
	l->offsets = (uintptr_t)offsets;
	return ring_queue(r, index, BELUGA_IOC_LOOKUP, l);
}

/* FREE or RELEASE: the same struct. */
static int ring_queue_blocks(struct beluga_ring *r, enum ring_cmd cmd,
			     unsigned long request, const uint64_t *offsets,
			     size_t count, uint64_t user_data)
{
	struct beluga_blocks *bl;
	int index = ring_take(r, cmd, count, user_data);

	if (index < 0)
		return index;
	bl = &r->slots[index].arg.blocks;
	bl->size = sizeof(*bl);
	bl->count = (uint32_t)count;
	bl->offsets = (uintptr_t)offsets;
	return ring_queue(r, index, request, bl);
}

BEL_EXPORT int beluga_ring_queue_release(struct beluga_ring *r,
					 const uint64_t *offsets, size_t count,
					 uint64_t user_data)
{
	return ring_queue_blocks(r, RING_RELEASE, BELUGA_IOC_RELEASE, offsets,
				 count, user_data);
}

BEL_EXPORT int beluga_ring_queue_free(struct beluga_ring *r,
				      const uint64_t *offsets, size_t count,
				      uint64_t user_data)
{
	return ring_queue_blocks(r, RING_FREE, BELUGA_IOC_FREE, offsets, count,
				 user_data);
}

BEL_EXPORT int beluga_ring_queue_alloc(struct beluga_ring *r, uint64_t *offsets,
				       size_t count, uint64_t user_data)
{
	struct beluga_alloc *a;
	int index = ring_take(r, RING_ALLOC, count, user_data);

	if (index < 0)
		return index;
	a = &r->slots[index].arg.alloc;
	a->size = sizeof(*a);
	a->count = (uint32_t)count;
	a->offsets = (uintptr_t)offsets;
	return ring_queue(r, index, BELUGA_IOC_ALLOC, a);
}

BEL_EXPORT int beluga_ring_queue_publish(struct beluga_ring *r, uint64_t ns,
					 struct beluga_publish_item *items,
					 size_t count, uint64_t user_data)
{
	struct beluga_publish *p;
	int index = ring_take(r, RING_PUBLISH, count, user_data);
	size_t i;

	if (index < 0)
		return index;
	for (i = 0; i < count; i++) {
		items[i].result = 0;
		items[i].__reserved = 0;
	}
	p = &r->slots[index].arg.publish;
	p->size = sizeof(*p);
	p->ns = ns;
	p->count = (uint32_t)count;
	p->items = (uintptr_t)items;
	return ring_queue(r, index, BELUGA_IOC_PUBLISH, p);
}
