/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Beluga's io_uring commands for the in-guest test programs (the
 * kselftests and the ioctl fuzzer): an SQE that carries an ioctl's number
 * and argument (uapi/linux/beluga.h, "io_uring commands"), one command
 * through a ring, and the transport that runs abi_test.c's cases through
 * the ring (abi_ring_test). Raw liburing on the uapi header, no libbeluga:
 * these programs check the ABI itself. Link with -luring (static).
 */
#ifndef BELUGA_TEST_RING_H
#define BELUGA_TEST_RING_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <liburing.h>
#include <linux/beluga.h>

/* The user_data of the commands bt_ring_call() submits. */
#define BT_RING_TAG	0xbe1a0000beefULL

/*
 * Fill @sqe with the Beluga command @cmd (an ioctl number) on @fd, whose
 * argument is @arg: every field the uapi does not name is zero, as it
 * requires. The 64 more bytes of a 128-byte SQE are the caller's to clear.
 */
static inline void bt_ring_prep(struct io_uring_sqe *sqe, int fd,
				unsigned long cmd, const void *arg)
{
	struct beluga_uring_cmd area = { .arg = (uintptr_t)arg };

	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = fd;
	sqe->cmd_op = (uint32_t)cmd;
	memcpy(sqe->cmd, &area, sizeof(area));
}

/* The command area of @sqe, to break its fields on purpose. */
static inline struct beluga_uring_cmd *bt_ring_area(struct io_uring_sqe *sqe)
{
	return (struct beluga_uring_cmd *)sqe->cmd;
}

/*
 * Submit what is queued on @ring and reap one completion: its @res, or
 * -errno when io_uring itself failed (then *@reaped stays false).
 */
static inline int bt_ring_reap1(struct io_uring *ring, uint64_t *user_data,
				bool *reaped)
{
	struct io_uring_cqe *cqe;
	int r;

	*reaped = false;
	r = io_uring_submit_and_wait(ring, 1);
	if (r < 0)
		return r;
	do {
		r = io_uring_wait_cqe(ring, &cqe);
	} while (r == -EINTR);
	if (r < 0)
		return r;
	r = cqe->res;
	if (user_data)
		*user_data = cqe->user_data;
	io_uring_cqe_seen(ring, cqe);
	*reaped = true;
	return r;
}

/*
 * One command through @ring, with @sqe_flags (IOSQE_*): what the ioctl
 * returns, 0 or -errno, from the completion. A failure of io_uring itself
 * is reported on stderr and returned as its -errno.
 */
static inline int bt_ring_call_flags(struct io_uring *ring, int fd,
				     unsigned long cmd, void *arg,
				     uint8_t sqe_flags)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	uint64_t tag = 0;
	bool reaped;
	int r;

	if (!sqe) {
		fprintf(stderr, "# io_uring: no free SQE\n");
		return -EBUSY;
	}
	/* a 128-byte SQE: its second half is the command area's, zero */
	if (ring->flags & IORING_SETUP_SQE128)
		memset(sqe, 0, 2 * sizeof(*sqe));
	bt_ring_prep(sqe, fd, cmd, arg);
	sqe->flags = sqe_flags;
	sqe->user_data = BT_RING_TAG;
	r = bt_ring_reap1(ring, &tag, &reaped);
	if (!reaped)
		fprintf(stderr, "# io_uring: submit or wait: %s\n", strerror(-r));
	else if (tag != BT_RING_TAG)
		fprintf(stderr, "# io_uring: a completion not ours: 0x%llx\n",
			(unsigned long long)tag);
	return r;
}

static inline int bt_ring_call(struct io_uring *ring, int fd, unsigned long cmd,
			       void *arg)
{
	return bt_ring_call_flags(ring, fd, cmd, arg, 0);
}

/* The highest command number of the uapi header this is built with. */
#define BT_CMD_LAST	BELUGA_CMD_DEVICE_RANGE

/* Does the ring take command @cmd (uapi: the five block commands)? */
static inline bool bt_ring_takes(unsigned long cmd)
{
	switch (cmd) {
	case BELUGA_IOC_ALLOC:
	case BELUGA_IOC_FREE:
	case BELUGA_IOC_PUBLISH:
	case BELUGA_IOC_LOOKUP:
	case BELUGA_IOC_RELEASE:
		return true;
	default:
		return false;
	}
}

/*
 * The transport of BT_VIA_RING builds (abi_ring_test: abi_test.c again;
 * uring_test): bt_ioctl() sends through io_uring every command the ring
 * takes, and every number that is no Beluga command at all (the ring's
 * -ENOTTY is the ioctl's), so that each case of abi_test.c runs through
 * the ring against the error its test expects of the ioctl. The commands
 * the ring does not take stay ioctls: the tests set up and check with
 * them. The knobs are per thread: @off sends everything as ioctls (a test
 * that runs one scenario both ways), @ring is the ring to use (SQPOLL, a
 * registered file...) instead of the thread's own, made on first use (the
 * tests fork, and drop privileges in children before their call), and
 * @sqe_flags go into each SQE (IOSQE_ASYNC: through io_uring's workers).
 */
struct bt_ring_via {
	bool off;
	struct io_uring *ring;
	uint8_t sqe_flags;
};

static __thread struct bt_ring_via bt_ring_via;

static inline bool bt_ring_routes(unsigned long request)
{
	/* what both reach the kernel as: ioctl(2)'s cmd and cmd_op are 32 bits */
	uint32_t cmd = (uint32_t)request;
	unsigned int nr = _IOC_NR(cmd);

	if (bt_ring_via.off)
		return false;
	if (bt_ring_takes(cmd))
		return true;
	/* a command of Beluga the ring refuses (-EOPNOTSUPP): an ioctl */
	return !(cmd == _IO(BELUGA_TYPE, nr) && nr <= BT_CMD_LAST);
}

static inline int bt_ring_transport(int fd, unsigned long cmd, void *arg)
{
	static __thread struct io_uring own;
	static __thread pid_t owner;
	int r;

	if (bt_ring_via.ring)
		return bt_ring_call_flags(bt_ring_via.ring, fd, cmd, arg,
					  bt_ring_via.sqe_flags);
	if (owner != getpid()) {
		/* a forked child's copy of its parent's ring is left alone */
		r = io_uring_queue_init(8, &own, 0);
		if (r) {
			fprintf(stderr, "# io_uring_queue_init: %s\n",
				strerror(-r));
			return r;
		}
		owner = getpid();
	}
	return bt_ring_call_flags(&own, fd, cmd, arg, bt_ring_via.sqe_flags);
}

#endif /* BELUGA_TEST_RING_H */
