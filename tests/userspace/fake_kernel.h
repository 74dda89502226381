/* SPDX-License-Identifier: GPL-2.0 */
/*
 * An in-process stand-in for beluga.ko, for host tests of libbeluga, the
 * tools and the Python binding without /dev/beluga: the module's ioctl
 * validation over the module's own portable core (kmod/core), so the pool
 * semantics are the real ones. It records every call and can fail one.
 * It is installed by pointing the library's ioctl hook at it.
 *
 * One pool per process, one client: the handle's fd is only used to size
 * the backing file so that mmap() of it works (point BELUGA_DEVICE at a
 * regular file).
 *
 * Tools linked with it install it when BELUGA_FAKE_KERNEL is set:
 *   BELUGA_FAKE_KERNEL=1
 *   BELUGA_FAKE_REGIONS="dax0.0:4M,node1:2M"   regions present at start
 *   BELUGA_FAKE_BLOCK_SIZE=65536               default 64 KiB
 *   BELUGA_FAKE_MAX_BATCH=4096
 *   BELUGA_FAKE_LOOKUP_SKEW=1                  LOOKUP returns wrong offsets
 *   BELUGA_FAKE_HOSTS=FILE                     host records for HOSTS, one a
 *                                              line (fake_kernel.c)
 *   BELUGA_FAKE_ATTACHING=FILE                 ATTACH takes BELUGA_FAKE_ATTACH_MS
 *   BELUGA_FAKE_ATTACH_MS=2000                 and shows its progress in FILE as
 *                                              the pool's sysfs "attaching" does
 */
#ifndef BELUGA_FAKE_KERNEL_H
#define BELUGA_FAKE_KERNEL_H

#include <stdint.h>

#include "libbeluga.h"

#define FAKE_LOG_LEN	256

struct fake_call {
	unsigned int cmd;	/* BELUGA_CMD_* */
	uint32_t count;		/* items, where the command has a count */
};

struct fake_kernel {
	uint32_t abi_version;
	uint32_t max_batch;
	uint64_t block_size;
	/* Fault injection: the fail_nth call (1-based) of fail_cmd fails. */
	int fail_cmd;		/* -1: none */
	unsigned int fail_nth;
	int fail_errno;
	unsigned int calls_of[16];
	/* Call log. */
	unsigned int nr_calls;
	struct fake_call log[FAKE_LOG_LEN];
	/* A broken kernel: LOOKUP answers the next block's offset. */
	int lookup_skew;
	/* Pins held by the one client, after the last call. */
	uint64_t nr_pins;
	/* mmap()s of the index's copy (INDEX_MAP) served. */
	unsigned int index_maps;
	/* HOSTS answers these records (a shared pool); none by default. */
	uint32_t nr_hosts;
	struct beluga_host hosts[BELUGA_MAX_HOSTS];
};

extern struct fake_kernel fake;

/* Reset to an empty pool with @block_size and @max_batch; install the hook. */
void fake_kernel_reset(uint64_t block_size, uint32_t max_batch);
/* Add a region as ATTACH would; returns the slot or -errno. */
int fake_kernel_add_region(const char *name, enum beluga_backend backend, int node,
			   uint64_t phys_start, uint64_t length);
/* Count blocks in a state: 0 free, 1 allocated, 2 published (enum bel_block_state). */
uint64_t fake_kernel_count(int state);
/* Calls of one command since the last reset. */
unsigned int fake_kernel_calls(unsigned int cmd);
/*
 * The device file for beluga_open(): a new empty file whose name goes to
 * @path (room for FAKE_DEVICE_PATH_LEN bytes). 0, or -1 after perror().
 */
#define FAKE_DEVICE_PATH_LEN	64
int fake_device_create(char *path);

#endif /* BELUGA_FAKE_KERNEL_H */
