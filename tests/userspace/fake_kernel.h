/* SPDX-License-Identifier: GPL-2.0 */
/*
 * An in-process stand-in for beluga.ko, for host tests of libbeluga, the
 * tools and the Python binding without /dev/beluga: the module's ioctl
 * validation over the module's own portable core (kmod/core), so the pool
 * semantics are the real ones. It records every call and can fail one.
 * It is installed by pointing the library's ioctl hook at it.
 *
 * One pool per process, one client: the handle's fd is used to size the
 * backing file so that mmap() of it works (point BELUGA_DEVICE at a
 * regular file), and to tell files apart for what the module keeps per
 * file (a device range, the watchdog link).
 *
 * Tools linked with it install it when BELUGA_FAKE_KERNEL is set:
 *   BELUGA_FAKE_KERNEL=1
 *   BELUGA_FAKE_REGIONS="dax0.0:4M,node1:2M"   regions present at start
 *   BELUGA_FAKE_BLOCK_SIZE=65536               default 64 KiB
 *   BELUGA_FAKE_MAX_BATCH=4096
 *   BELUGA_FAKE_LOOKUP_SKEW=1                  LOOKUP returns wrong offsets
 *   BELUGA_FAKE_HOSTS=FILE                     host records for HOSTS, one a
 *                                              line (fake_kernel.c); with
 *                                              records, the pool is shared
 *   BELUGA_FAKE_ALLOW_GUP=MS                   as mh_allow_gup=1 with W = MS:
 *                                              DEVICE_RANGE needs no watchdog
 *   BELUGA_FAKE_LEASE=FILE                     "fresh N [W]" or "fenced N [W]":
 *                                              the host's lease, and N device
 *                                              ranges of other processes'
 *                                              files, declared under W ms
 *                                              (read at each WATCHDOG and
 *                                              DEVICE_RANGE; no file: fresh 0)
 *   BELUGA_FAKE_ATTACHING=FILE                 ATTACH takes BELUGA_FAKE_ATTACH_MS
 *   BELUGA_FAKE_ATTACH_MS=2000                 and shows its progress in FILE as
 *                                              the pool's sysfs "attaching" does
 *   BELUGA_FAKE_CXL=FILE:LENGTH                instead of regions: join the
 *   BELUGA_FAKE_HOST_ID=N                      multi-host pool in FILE as host
 *                                              N (fake_mh.c); other processes
 *                                              that join it are other hosts
 *   BELUGA_FAKE_CXL_HOSTS=N                    a host that formats it: room
 *   BELUGA_FAKE_CXL_LEASE_MS=MS                for N hosts, that lease
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
	/*
	 * HOSTS answers these records; none by default. With records the
	 * pool is shared: DEVICE_RANGE and WATCHDOG follow the shared pool's
	 * rules (the record with BELUGA_HOST_SELF is this host's, and gets the
	 * device lease while device ranges are declared).
	 */
	uint32_t nr_hosts;
	struct beluga_host hosts[BELUGA_MAX_HOSTS];
	/* The module loaded with mh_allow_gup=1: its W (mh_device_fence_ms); 0: not. */
	uint32_t allow_gup_fence_ms;
	/* The host fenced itself (fake_kernel_fence()); 0: it holds its lease. */
	int fenced;
	/* Device ranges of other processes' files, which the fake cannot see. */
	uint32_t outside_ranges;
	/* WATCHDOG: the W the link registered (0: none ever). */
	uint32_t watchdog_ms;
	/* mmap()s of the pool: the last one, and whether pins would take it. */
	unsigned int pool_maps;
	void *last_map;
	uint64_t last_map_length;
	int last_map_pinnable;
	/*
	 * ALLOC as a module that predates BELUGA_ALLOC_SIZE_V2 answers it:
	 * its struct ends at @offsets, so a caller's nonzero @evicted is -E2BIG.
	 */
	int alloc_v1;
};

extern struct fake_kernel fake;

/* Reset to an empty pool with @block_size and @max_batch; install the hook. */
void fake_kernel_reset(uint64_t block_size, uint32_t max_batch);
/* Add a region as ATTACH would; returns the slot or -errno. */
int fake_kernel_add_region(const char *name, enum beluga_backend backend, int node,
			   uint64_t phys_start, uint64_t length);
/* Count blocks in a state: 0 free, 1 allocated, 2 published (enum bel_block_state). */
uint64_t fake_kernel_count(int state);
/*
 * The host fences itself, as the module does when its lease runs out:
 * every declared device range's eventfd is signalled (adds 1), WATCHDOG
 * answers HOLD while ranges stay declared, DEVICE_RANGE -ESTALE. Returns
 * the eventfds signalled. fake_kernel_unfence() lets it hold its lease again.
 */
int fake_kernel_fence(void);
void fake_kernel_unfence(void);
/* Device ranges declared and not yet released (their files still open). */
unsigned int fake_kernel_device_ranges(void);
/* Calls of one command since the last reset. */
unsigned int fake_kernel_calls(unsigned int cmd);
/*
 * The device file for beluga_open(): a new empty file whose name goes to
 * @path (room for FAKE_DEVICE_PATH_LEN bytes). 0, or -1 after perror().
 */
#define FAKE_DEVICE_PATH_LEN	64
int fake_device_create(char *path);

#endif /* BELUGA_FAKE_KERNEL_H */
