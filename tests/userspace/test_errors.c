// SPDX-License-Identifier: GPL-2.0
/*
 * libbeluga's last-error message is per thread: threads that share one
 * handle each read the message of their own latest failing call, never a
 * message another thread's failure wrote in between (the Python binding
 * releases the GIL around every call and reads the message afterwards).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libbeluga.h"
#include "fake_kernel.h"
#include "../lib/tap.h"

#define ROUNDS	20000

static char dev_path[FAKE_DEVICE_PATH_LEN];
static struct beluga *shared;
static pthread_barrier_t start;

/*
 * Two failures the library diagnoses itself, before any ioctl, so the
 * threads do not race inside the (single-threaded) fake kernel.
 */
static int fail_node(void)
{
	return beluga_attach_node(shared, -1, 1 << 20, 0, NULL);
}

static int fail_lookup(void)
{
	struct beluga_key key = { 1, 2 };

	return (int)beluga_lookup(shared, 7, &key, 1, NULL, BELUGA_LOOKUP_PIN);
}

struct failer {
	int (*fail)(void);
	const char *expect;	/* a phrase only this failure's message has */
	int wrong;		/* rounds whose message was not its own */
	int wrong_err;
	char seen[256];		/* the first wrong message */
};

static void *failer_thread(void *arg)
{
	struct failer *f = arg;
	int i;

	pthread_barrier_wait(&start);
	for (i = 0; i < ROUNDS; i++) {
		int ret = f->fail();
		const char *msg = beluga_last_error(shared);

		if (ret != -EINVAL)
			f->wrong_err++;
		if (!strstr(msg, f->expect)) {
			if (!f->wrong)
				snprintf(f->seen, sizeof(f->seen), "%s", msg);
			f->wrong++;
		}
	}
	return NULL;
}

static void test_concurrent(void)
{
	struct failer a = { .fail = fail_node, .expect = "NUMA node -1 is invalid" };
	struct failer b = { .fail = fail_lookup, .expect = "needs an offsets array" };
	pthread_t ta, tb;

	pthread_barrier_init(&start, NULL, 2);
	pthread_create(&ta, NULL, failer_thread, &a);
	pthread_create(&tb, NULL, failer_thread, &b);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	pthread_barrier_destroy(&start);

	tap_result(!a.wrong_err && !b.wrong_err, "both failing calls return -EINVAL");
	if (!tap_result(!a.wrong, "thread A read its own message in all %d rounds", ROUNDS))
		tap_diag("%d rounds wrong; first: '%s'", a.wrong, a.seen);
	if (!tap_result(!b.wrong, "thread B read its own message in all %d rounds", ROUNDS))
		tap_diag("%d rounds wrong; first: '%s'", b.wrong, b.seen);
}

static void *fail_once(void *arg)
{
	(void)arg;
	fail_lookup();
	return NULL;
}

static void *read_fresh(void *arg)
{
	snprintf(arg, 256, "%s", beluga_last_error(shared));
	return NULL;
}

/* Deterministic: another thread's failure leaves this thread's message. */
static void test_isolation(void)
{
	struct beluga_dax_device dev;
	char fresh[256];
	pthread_t t;

	fail_node();
	pthread_create(&t, NULL, fail_once, NULL);
	pthread_join(t, NULL);
	if (!tap_result(strstr(beluga_last_error(shared), "NUMA node -1") != NULL,
			"a failure in another thread keeps this thread's message"))
		tap_diag("got '%s'", beluga_last_error(shared));

	pthread_create(&t, NULL, read_fresh, fresh);
	pthread_join(t, NULL);
	tap_result(fresh[0] == '\0', "a thread that has not failed reads an empty message (got '%s')",
		   fresh);

	/* Handle-less and handle calls share the thread's one message. */
	beluga_dax_probe("not-a-dax", &dev);
	tap_result(strstr(beluga_last_error(shared), "daxX.Y") != NULL &&
		   beluga_last_error(NULL) == beluga_last_error(shared),
		   "beluga_last_error(b) and (NULL) read the thread's latest failure");
}

int main(void)
{

	if (fake_device_create(dev_path))
		return 1;
	fake_kernel_reset(4096, BELUGA_MAX_BATCH);
	fake_kernel_add_region("dax0.0", BELUGA_BACKEND_DAX, -1, 0x390000000ULL, 1 << 20);
	if (beluga_open(dev_path, O_RDWR, &shared)) {
		printf("# beluga_open: %s\n", beluga_last_error(NULL));
		unlink(dev_path);
		return 1;
	}
	test_isolation();
	test_concurrent();
	beluga_close(shared);
	unlink(dev_path);
	return tap_done();
}
