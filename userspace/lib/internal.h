/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libbeluga internals shared between the library's source files and its
 * host tests. Nothing here is exported from libbeluga.so (the version
 * script exports beluga_* only, and these names start with bel_).
 */
#ifndef BELUGA_LIB_INTERNAL_H
#define BELUGA_LIB_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "libbeluga.h"
#include "cuda.h"

#define BEL_ERRMSG_LEN	512

struct beluga {
	int fd;
	int flags;			/* O_RDWR or O_RDONLY as opened */
	char path[256];
	uint32_t max_batch;		/* from INFO, capped at BELUGA_MAX_BATCH */
	void *map_base;
	size_t map_length;
	int cuda_registered;
	struct bel_cuda_plan cuda_plan;	/* how the mapping was registered */
	/* beluga_index_map(): the index's copy, read-only; or NULL. */
	void *index_map;
	size_t index_length;
	/* beluga_device_range(): the file's one device range (device.c). */
	int range_declared;
	uint64_t range_offset, range_length;
	uint32_t range_fence_ms;
	int range_eventfd;		/* the eventfd it was declared with, or -1 */
	int own_eventfd;		/* made by the library (closed by it), or -1 */
	/* The mapping was made after the range, inside it: pins may take it. */
	int map_pinnable;
};

/*
 * Every ioctl goes through this pointer so that the host tests can put a
 * fake kernel behind the library. Same contract as ioctl(2): -1 and errno
 * on failure.
 */
extern int (*bel_ioctl)(int fd, unsigned long request, void *arg);
/*
 * The index's mapping (index_map.c) goes through these, so that the fake
 * kernel can hand out its copy: mmap(2) and munmap(2)'s contract.
 */
extern void *(*bel_mmap)(void *addr, size_t len, int prot, int flags, int fd,
			 off_t off);
extern int (*bel_munmap)(void *addr, size_t len);

/*
 * Record the calling thread's last-error message and return @err, so that
 * error paths read "return bel_fail(b, err, ...)". The message is kept per
 * thread, not per handle: threads that share a handle each read the
 * message of their own latest failing call. @b is unused today; it names
 * the handle the failure belongs to. The arguments may point into the
 * current message (beluga_last_error()).
 */
int bel_fail(struct beluga *b, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * The fixes several messages end with. Every message names the cause and
 * then the fix, in terms any caller can act on (a system tool, a flag, a
 * requirement); belugactl and the Python binding may add their own way of
 * doing it (`belugactl attach`, Pool.attach_dax()) after it.
 */
#define BEL_FIX_LOAD_MODULE	"load the module with `modprobe beluga`"
#define BEL_FIX_ATTACH		"attach a memory region to the pool first"
#define BEL_FIX_DMESG		"the kernel log (dmesg) says more"
#define BEL_FIX_DEVDAX		"run `daxctl reconfigure-device --mode=devdax %s`"

/* Run one ioctl; 0 or -errno. */
int bel_ioctl_call(struct beluga *b, unsigned long request, void *arg);

/*
 * Message for an error every command can return (ENODEV, EPERM, EBADF,
 * ...), with @what naming the operation. Returns @err.
 */
int bel_fail_common(struct beluga *b, int err, const char *what);

/* The batch bound used for splitting: the kernel's, at most the ABI's. */
static inline size_t bel_batch(const struct beluga *b)
{
	return b->max_batch ? b->max_batch : BELUGA_MAX_BATCH;
}

/*
 * Before devices pin the mapping (beluga_cuda_register()): on a shared
 * pool, declare a device range over the whole mapping (with the library's
 * own eventfd) unless one covers it, and make the mapping again in place
 * so that the module lets pins take it. A no-op elsewhere. 0 or -errno
 * with the message recorded.
 */
int bel_device_prepare(struct beluga *b);

/*
 * mmap() the pool again over the handle's own mapping, same address and
 * length (map.c). On failure the handle is left unmapped.
 */
int bel_map_again(struct beluga *b);

/* beluga_hosts() with records of @rec_size bytes (V1 or V2); beluga.c. */
int bel_hosts(struct beluga *b, void *hosts, unsigned int max, size_t rec_size);

/* The instruction beluga_flush_range() and beluga_invalidate_range() use here (map.c). */
enum {
	BEL_FLUSH_NONE,		/* no cache maintenance on this architecture */
	BEL_FLUSH_CLFLUSH,
	BEL_FLUSH_CLFLUSHOPT,
	BEL_FLUSH_DC_CIVAC,
};
int bel_cache_flush_insn(void);

/* Root of sysfs: $BELUGA_SYSFS_ROOT or "/sys". */
const char *bel_sysfs_root(void);

/* "dax0.0" from "dax0.0" or "/dev/dax0.0"; NULL when not a dax name. */
const char *bel_dax_basename(const char *dax);

#define BEL_EXPORT __attribute__((visibility("default")))

#endif /* BELUGA_LIB_INTERNAL_H */
