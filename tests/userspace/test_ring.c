// SPDX-License-Identifier: GPL-2.0
/*
 * libbeluga's ring of block commands (beluga_ring_*) where the module has
 * no io_uring commands: the host's real io_uring runs the probe against
 * the fake device, a regular file, which answers IORING_OP_URING_CMD
 * exactly as a module that predates the commands does (-EOPNOTSUPP). The
 * ring is refused with a message that names the cause and the fix, and
 * the handle's plain calls keep working. The commands themselves run
 * against the real module in the guests (the kselftests' uring_test and
 * the static guest test libbeluga-ring).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <liburing.h>

#include "libbeluga.h"
#include "fake_kernel.h"
#include "../lib/tap.h"

static char dev_path[FAKE_DEVICE_PATH_LEN];

static void test_arguments(struct beluga *b)
{
	struct beluga_ring *r = (struct beluga_ring *)1;
	int ret;

	ret = beluga_ring_init(b, 8, 1U << 7, &r);
	tap_result(ret == -EINVAL && r == NULL &&
		   strstr(beluga_last_error(b), "BELUGA_RING_SQPOLL"),
		   "unknown flags: -EINVAL naming the one flag (%d: %s)", ret,
		   beluga_last_error(b));
	ret = beluga_ring_init(b, 0, 0, &r);
	tap_result(ret == -EINVAL && strstr(beluga_last_error(b), "1 to 4096"),
		   "0 entries: -EINVAL with the range (%s)", beluga_last_error(b));
	ret = beluga_ring_init(b, BELUGA_MAX_BATCH + 1, 0, &r);
	tap_result(ret == -EINVAL, "%u entries: -EINVAL", BELUGA_MAX_BATCH + 1);
	ret = beluga_ring_init(b, 8, 0, NULL);
	tap_result(ret == -EINVAL, "no place for the ring: -EINVAL");
}

static void test_module_without_commands(struct beluga *b)
{
	struct beluga_ring *r = (struct beluga_ring *)1;
	struct beluga_key key = { 5, 6 };
	struct io_uring probe;
	const char *msg;
	int ret;

	/* Only where this host's io_uring works can the probe reach the file. */
	ret = io_uring_queue_init(2, &probe, 0);
	if (ret) {
		tap_skip("io_uring_queue_init fails on this host",
			 "a module without io_uring commands: %s", strerror(-ret));
		ret = beluga_ring_init(b, 8, 0, &r);
		msg = beluga_last_error(b);
		tap_result(ret < 0 && r == NULL && strstr(msg, "io_uring") &&
			   strstr(msg, "beluga_lookup()"),
			   "no io_uring here: %d, and the message names the plain calls (%s)",
			   ret, msg);
		return;
	}
	io_uring_queue_exit(&probe);
	ret = beluga_ring_init(b, 8, 0, &r);
	msg = beluga_last_error(b);
	tap_result(ret == -EOPNOTSUPP && r == NULL,
		   "a device without io_uring commands: -EOPNOTSUPP, no ring (%d)", ret);
	tap_result(strstr(msg, "no io_uring commands") && strstr(msg, dev_path) &&
		   strstr(msg, "load the module of libbeluga's release") &&
		   strstr(msg, LIBBELUGA_VERSION) && strstr(msg, "beluga_lookup()"),
		   "the message names the device, the cause and both fixes: %s", msg);
	ret = beluga_ring_init(b, 8, BELUGA_RING_SQPOLL, &r);
	tap_result(ret == -EOPNOTSUPP && r == NULL,
		   "the same with SQPOLL (%d: %s)", ret, beluga_last_error(b));
	ret = (int)beluga_lookup(b, 7, &key, 1, NULL, 0);
	tap_result(ret == 0, "the handle's plain LOOKUP still works (%d)", ret);
	beluga_ring_exit(NULL);
	tap_result(1, "beluga_ring_exit(NULL) is a no-op");
}

int main(void)
{
	struct beluga *b;

	if (fake_device_create(dev_path))
		return 1;
	fake_kernel_reset(4096, BELUGA_MAX_BATCH);
	fake_kernel_add_region("dax0.0", BELUGA_BACKEND_DAX, -1, 0x390000000ULL, 1 << 20);
	if (beluga_open(dev_path, O_RDWR, &b)) {
		printf("# beluga_open: %s\n", beluga_last_error(NULL));
		unlink(dev_path);
		return 1;
	}
	test_arguments(b);
	test_module_without_commands(b);
	beluga_close(b);
	unlink(dev_path);
	return tap_done();
}
