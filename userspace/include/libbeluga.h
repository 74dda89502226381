/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libbeluga: the userspace API of Beluga, a KV-cache block pool on CXL
 * memory served by /dev/beluga.
 *
 * The library is a thin layer over the ioctls in <linux/beluga.h> (read
 * that header for the pool model: blocks, offsets, keys, namespaces, pins).
 * It adds what every engine would otherwise write itself:
 *
 *   - batch calls of any length, split into BELUGA_MAX_BATCH chunks with the
 *     semantics of one call kept where that is possible (see each function);
 *   - a 2 MiB aligned mapping of the pool and offset -> pointer helpers;
 *   - one documented, seed-free chained prefix hash (beluga_hash_chain());
 *   - device-dax discovery through sysfs for beluga_attach_dax();
 *   - optional CUDA host registration of the mapping, loaded with dlopen().
 *
 * Conventions
 * -----------
 * Every function that can fail returns a negative errno value (-ENOENT,
 * -ENOSPC, ...) and 0 or a non-negative count on success. It then also
 * records a one-line message naming the cause and then the fix, readable
 * with beluga_last_error(): "/dev/beluga not found: load the module with
 * `modprobe beluga`". A fix is given in terms every caller can act on (a
 * system tool such as modprobe or daxctl, a flag, a requirement);
 * belugactl and the Python binding may add their own way of doing it
 * (`belugactl attach`, Pool.attach_dax()). The message is kept per thread, like dlerror(): it
 * is the one of the calling thread's latest failing call, whatever handle
 * (or none: beluga_open() failing, device discovery) that call had. Read
 * it in the thread that made the call, before that thread's next call.
 *
 * A handle may be used by several threads at once for the pool commands
 * (they are plain ioctls), and each thread reads its own messages.
 * beluga_map(), beluga_unmap(), beluga_cuda_register() and
 * beluga_cuda_unregister() change the mapping: they must not race with each
 * other, with beluga_ptr()/beluga_map_base()/beluga_map_length(), or with
 * accesses to the mapped memory; pool commands may run alongside them.
 * beluga_close() must not race with any call on the same handle.
 *
 * Ownership follows the open file (see <linux/beluga.h>): allocations and
 * pins of a handle are returned by beluga_close() or process exit.
 *
 * Environment
 * -----------
 *   BELUGA_DEVICE      device path used when beluga_open() gets NULL
 *                      (default /dev/beluga)
 *   BELUGA_SYSFS_ROOT  where sysfs is mounted (default /sys); tests point
 *                      it at a fake tree
 *   BELUGA_CUDART      the CUDA runtime beluga_cuda_register() loads, as a
 *                      dlopen() path (default: see beluga_cuda_register())
 */
#ifndef LIBBELUGA_H
#define LIBBELUGA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <linux/beluga.h>

/*
 * LIBBELUGA_VERSION_MAJOR, LIBBELUGA_VERSION_MINOR and LIBBELUGA_VERSION
 * (a "major.minor.patch" string), generated from the project's VERSION
 * file and installed next to this header.
 */
#include "beluga_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An open /dev/beluga plus its mapping. Opaque. */
struct beluga;

/* ---- Handles and errors ------------------------------------------------ */

/*
 * beluga_open - open the Beluga device
 * @path: device path, or NULL for $BELUGA_DEVICE or else /dev/beluga
 * @flags: O_RDWR, or O_RDONLY for a reader that only looks up and maps
 *	read-only. O_CLOEXEC is always added; other flags give -EINVAL.
 * @out: receives the handle
 *
 * Checks that the file is a Beluga device of a compatible ABI.
 * Errors: -ENOENT (module not loaded), -EACCES, -ENOTTY (not a Beluga
 * device), -EPROTO (ABI version mismatch), or the error of open(2).
 */
int beluga_open(const char *path, int flags, struct beluga **out);

/* beluga_close - unmap, unregister from CUDA, close; NULL is a no-op. */
void beluga_close(struct beluga *b);

/* The file descriptor, for poll/io_uring/passing to other code. */
int beluga_fd(const struct beluga *b);

/*
 * beluga_strerror - text for a negative errno from this library, with the
 * meaning the error has in Beluga (e.g. -ENODEV: "no memory region is
 * attached to the pool"). Never NULL.
 */
const char *beluga_strerror(int err);

/*
 * beluga_last_error - the message of the calling thread's latest failing
 * call (on any handle, or on none); it names the cause and the fix. @b may
 * be NULL and does not select the message: messages are per thread, not
 * per handle (see Conventions). Empty string when nothing failed yet in
 * this thread. Valid until this thread's next failing call.
 */
const char *beluga_last_error(const struct beluga *b);

/* ---- Pool state -------------------------------------------------------- */

/* Fill the uapi structs; the size field is set by the library. */
int beluga_info(struct beluga *b, struct beluga_info *info);
int beluga_stats(struct beluga *b, struct beluga_stats *stats);
/* -ENOENT when no region is in @region_id. */
int beluga_region_info(struct beluga *b, uint32_t region_id,
		       struct beluga_region_info *ri);
/*
 * beluga_hosts - the host records of the shared pool behind @b, as the
 * host that answers sees them (BELUGA_IOC_HOSTS): the first @max go to
 * @hosts, in host id order. Returns how many records the pool has, which
 * may be more than @max (snprintf() style: call again with room for
 * them; BELUGA_MAX_HOSTS is always enough), 0 when the pool is not
 * shared or its host is rejoining, or -errno (-ENOTTY: a module without
 * the command).
 *
 * The records are the second version (BELUGA_HOST_SIZE_V2, with the
 * device lease: BELUGA_HOST_DEVICE_PINS and @device_fence_ms, and
 * BELUGA_HOST_LEASE_AWARE); from a module that only knows the first,
 * they come with those fields 0. (Programs built against libbeluga 1.1,
 * whose struct beluga_host was 72 bytes, keep getting 72-byte records:
 * the shared library versions the symbol.)
 */
int beluga_hosts(struct beluga *b, struct beluga_host *hosts, unsigned int max);

/* ---- Blocks: batch calls of any length --------------------------------- */

/*
 * beluga_alloc - allocate @count blocks; their offsets go to @offsets.
 * All or nothing across chunks: when a later chunk fails, the blocks of the
 * earlier chunks are freed again before returning the error.
 * -ENOSPC: the pool has fewer free plus evictable blocks than asked for.
 * @count == 0 is a no-op.
 */
int beluga_alloc(struct beluga *b, uint64_t *offsets, size_t count);

/*
 * beluga_alloc_evicting - beluga_alloc(), and the (ns, key) of each
 * published block the allocation evicted to make room, least recently
 * used first, go to @evicted (room for @count entries); their number to
 * *@nr_evicted. Whoever published them: an engine that keeps its own
 * account of what the pool holds drops these keys from it. Keys removed
 * otherwise (EVICT, DETACH, other handles' allocations) are not reported.
 * On failure *@nr_evicted still counts the keys earlier chunks evicted
 * (an eviction is not undone when their blocks are freed again).
 * -EOPNOTSUPP: the loaded module predates the report
 * (BELUGA_ALLOC_EVICTED); beluga_alloc() works there. Since libbeluga 1.2.
 */
int beluga_alloc_evicting(struct beluga *b, uint64_t *offsets, size_t count,
			  struct beluga_evicted_key *evicted, size_t *nr_evicted);

/*
 * beluga_free - return ALLOCATED blocks of this handle to the pool.
 * Each chunk is all or nothing. When a chunk fails, the chunks before it
 * stay freed (a free cannot be undone) and the rest are untouched; the
 * last-error message says how many were freed.
 */
int beluga_free(struct beluga *b, const uint64_t *offsets, size_t count);

/* Totals of one beluga_publish() call. */
struct beluga_publish_summary {
	size_t published;	/* items with BELUGA_PUBLISH_OK */
	size_t exists;		/* BELUGA_PUBLISH_EXISTS: lost race, block freed */
	size_t failed;		/* items with a negative result */
};

/*
 * beluga_publish - publish ALLOCATED blocks under keys of namespace @ns.
 * Fill @offset and @key of each item; the library clears @result and the
 * reserved field. Results are per item (see <linux/beluga.h>): the call
 * returns 0 when every chunk was processed, even if some items failed.
 * When a chunk fails as a whole, the items of that chunk and after it get
 * that error as their result, earlier chunks stay applied, and the error
 * is returned. @sum may be NULL.
 */
int beluga_publish(struct beluga *b, uint64_t ns,
		   struct beluga_publish_item *items, size_t count,
		   struct beluga_publish_summary *sum);

/*
 * beluga_lookup - the longest leading run of @keys present in @ns
 * @keys: the chained keys of one request, in order
 * @offsets: receives the offsets of the hits (first return-value entries);
 *	required with BELUGA_LOOKUP_PIN, may be NULL for a count-only probe
 * @flags: 0 or BELUGA_LOOKUP_PIN
 *
 * Returns the number of hits (>= 0) or a negative errno. Longer arrays are
 * looked up chunk by chunk; the next chunk is asked only when the previous
 * one hit in full, so the result is still the leading run. With
 * BELUGA_LOOKUP_PIN, when a later chunk fails, the pins of the earlier
 * chunks are released before returning the error. Release pins with
 * beluga_release().
 */
ssize_t beluga_lookup(struct beluga *b, uint64_t ns,
		      const struct beluga_key *keys, size_t count,
		      uint64_t *offsets, uint32_t flags);

/*
 * beluga_lookup_count - a count-only LOOKUP (no pins, no offsets): the
 * length of the leading run of @keys present in @ns, or a negative errno.
 * After beluga_index_map() it runs in this process on the read-only
 * mapping of the pool's index, with no system call, validating every
 * entry as the module's own LOOKUP does (<linux/beluga.h>, "The index,
 * mapped read-only"); what it cannot be sure of (a copy sealed by ATTACH
 * or DETACH, a key rewritten under it again and again) it asks of the
 * kernel with beluga_lookup(), from that key on. Without the mapping it is
 * beluga_lookup(b, ns, keys, count, NULL, 0). Each key's answer held at
 * some moment of the call, as with beluga_lookup(). Safe to call from
 * many threads at once on one handle, as long as none of them calls
 * beluga_index_map() or beluga_index_unmap() meanwhile.
 */
ssize_t beluga_lookup_count(struct beluga *b, uint64_t ns,
			    const struct beluga_key *keys, size_t count);

/*
 * beluga_index_map - map the pool's index read-only (BELUGA_IOC_INDEX_MAP),
 * for beluga_lookup_count(). Opt-in: the kernel keeps a copy of the index
 * only once a file asked for it. Calling it again maps the current copy in
 * place of the old one: do so after ATTACH or DETACH sealed it
 * (beluga_index_live() says 0), or lookups go to the kernel until then.
 * -EOPNOTSUPP: a shared (multi-host) pool, which has no such mapping;
 * -ENODEV: no region; -ENOTTY: a module without it (older than this
 * library). Any handle may map it, read-only ones too.
 */
int beluga_index_map(struct beluga *b);
/* Drop the index's mapping; no-op when not mapped. */
void beluga_index_unmap(struct beluga *b);
/* 1 while the mapped copy is live (follows the index), else 0. */
int beluga_index_live(const struct beluga *b);

/*
 * beluga_release - drop one pin per listed offset.
 * Each chunk is all or nothing; on failure, earlier chunks stay released.
 */
int beluga_release(struct beluga *b, const uint64_t *offsets, size_t count);

/* ---- Blocks: many commands per system call (io_uring) ------------------ */

/*
 * A ring of block commands on one handle: LOOKUP (with or without pins),
 * RELEASE, ALLOC, FREE and PUBLISH are queued in memory and sent to the
 * module many per system call, as io_uring commands (IORING_OP_URING_CMD,
 * <linux/beluga.h>, "io_uring commands"); with BELUGA_RING_SQPOLL a kernel
 * thread picks them up and the submitting side makes no system call while
 * it keeps busy. Use it where an engine issues many small calls (a
 * scheduler probing the prefixes of many requests, a worker releasing the
 * pins of a finished batch).
 *
 * Each queued command is one ioctl: at most the module's max_batch items
 * (beluga_info()), answered exactly as the ioctl answers, in the caller's
 * arrays and in its struct beluga_ring_result. No command is split, and
 * none is undone because of another's failure (beluga_alloc(),
 * beluga_lookup()... do that for arrays of any length). Commands of one
 * submission run in no particular order: queue the RELEASE of pins after
 * the completion of the LOOKUP that took them.
 *
 * Needs io_uring with IORING_OP_URING_CMD (Linux 5.19 or later) and a
 * module with the commands; beluga_ring_init() checks both and fails,
 * naming the cause and the fix, where either is missing: -EOPNOTSUPP (the
 * module predates the commands), -EINVAL (the kernel's io_uring does),
 * -EPERM (io_uring is disabled or forbidden), -ENOSYS (no io_uring). The
 * handle's plain calls work regardless.
 *
 * Ownership: the handle's file owns what the commands allocate and pin,
 * never the ring; the ring holds a reference to the file while it exists,
 * so what the handle holds is returned when both beluga_ring_exit() and
 * beluga_close() were called (or the process ends).
 *
 * Threads: a ring is used by one thread at a time; several rings, in
 * several threads, may share one handle.
 */
struct beluga_ring;

/* beluga_ring_init() flags */
#define BELUGA_RING_SQPOLL	(1U << 0)	/* a kernel thread submits */

/*
 * beluga_ring_init - a ring for @b
 * @entries: commands in flight at most (queued and not yet reaped), 1..4096
 * @flags: 0 or BELUGA_RING_SQPOLL; other bits: -EINVAL
 * @out: receives the ring
 *
 * Errors, besides the ones above: -ENOMEM (the ring's memory).
 */
int beluga_ring_init(struct beluga *b, unsigned int entries, unsigned int flags,
		     struct beluga_ring **out);

/*
 * beluga_ring_exit - wait for the commands in flight, then free the ring;
 * NULL is a no-op. Commands queued and not submitted are dropped.
 */
void beluga_ring_exit(struct beluga_ring *r);

/* The answer of one command. */
struct beluga_ring_result {
	uint64_t user_data;	/* as queued */
	int32_t res;		/* 0 or -errno: what the ioctl returns */
	uint32_t hits;		/* LOOKUP: the leading run; else 0 */
	uint32_t published;	/* PUBLISH: its counters; else 0 */
	uint32_t exists;
	uint32_t failed;
	uint32_t __pad;
};

/*
 * Queue one command; nothing is sent until beluga_ring_submit_and_wait().
 * The arrays are the ioctl's and must stay valid, and the inputs
 * unchanged, until the command's result is reaped; the library keeps the
 * command's struct. @count is 1..max_batch. @user_data is returned in the
 * command's result.
 * Errors: -EBUSY the ring has @entries commands in flight (submit and
 * reap first); -EINVAL @count 0, PIN without @offsets; -E2BIG @count above
 * max_batch (queue several commands, or use the plain calls).
 */
int beluga_ring_queue_lookup(struct beluga_ring *r, uint64_t ns,
			     const struct beluga_key *keys, size_t count,
			     uint64_t *offsets, uint32_t flags, uint64_t user_data);
int beluga_ring_queue_release(struct beluga_ring *r, const uint64_t *offsets,
			      size_t count, uint64_t user_data);
int beluga_ring_queue_alloc(struct beluga_ring *r, uint64_t *offsets,
			    size_t count, uint64_t user_data);
int beluga_ring_queue_free(struct beluga_ring *r, const uint64_t *offsets,
			   size_t count, uint64_t user_data);
/* Clears each item's @result and reserved field, as beluga_publish() does. */
int beluga_ring_queue_publish(struct beluga_ring *r, uint64_t ns,
			      struct beluga_publish_item *items, size_t count,
			      uint64_t user_data);

/*
 * beluga_ring_submit_and_wait - send what is queued and wait for every
 * command in flight; their results go to @results, in completion order.
 * @max: room in @results, at least the number of commands in flight
 *	(else -EINVAL, nothing sent)
 *
 * Returns the number of results, or -errno when io_uring failed (the
 * commands stay in flight; call again). A command's own failure is its
 * result's @res, not this call's; the message of the first one (in
 * completion order) is recorded for beluga_last_error().
 */
ssize_t beluga_ring_submit_and_wait(struct beluga_ring *r,
				    struct beluga_ring_result *results,
				    size_t max);

/* ---- Regions (need CAP_SYS_ADMIN) -------------------------------------- */

/*
 * beluga_attach_dax - attach a device-dax instance to the pool
 * @dax: "dax0.0" or "/dev/dax0.0"
 * @block_size: bytes per block, 0 for the pool's (2 MiB for the first)
 * @out: may be NULL; receives the request and the kernel's answer
 *	(region_id, first_offset, nr_blocks); block_size is the pool's
 *
 * Resolves the physical range from /sys/bus/dax/devices/<name>/{resource,
 * size}. The device must stay bound to device_dax: one that is online as
 * System RAM (kmem) or unbound is refused with -EBUSY and a message naming
 * its state; a device made of several ranges is refused with
 * -EOPNOTSUPP. -ENOENT: no such dax device.
 */
int beluga_attach_dax(struct beluga *b, const char *dax, uint64_t block_size,
		      struct beluga_attach *out);

/*
 * beluga_attach_dax_shared - attach a device-dax instance as a pool shared
 * by several hosts (Documentation/multihost.md); the pool must be empty
 * @host_id: this host's id, 0..15; -1 for the module's host_id parameter
 * @flags: 0 or LIBBELUGA_SHARED_FORMAT; other bits are refused (-EINVAL)
 * @block_size: 0 accepts the pool's (2 MiB when this call formats)
 *
 * More errors than beluga_attach_dax(): -EUCLEAN corrupt pool,
 * -EPROTONOSUPPORT unknown on-media version, -ERANGE host id too large,
 * -EADDRINUSE another live host has this id; the kernel log says more.
 */
int beluga_attach_dax_shared(struct beluga *b, const char *dax, uint64_t block_size,
			     int host_id, unsigned int flags, struct beluga_attach *out);

/*
 * Flags of beluga_attach_dax_shared(). LIBBELUGA_SHARED_FORMAT: format the
 * range even if it holds a valid pool (refused with -EBUSY while other
 * hosts are alive); an unformatted range is formatted anyway. (Until 1.1
 * this argument was "int format"; 1, what callers passed for true, is
 * still LIBBELUGA_SHARED_FORMAT.)
 */
#define LIBBELUGA_SHARED_FORMAT	(1U << 0)

/*
 * beluga_attach_node - reserve @bytes from NUMA node @node for the pool
 * @out: may be NULL; as for beluga_attach_dax()
 */
int beluga_attach_node(struct beluga *b, int node, uint64_t bytes,
		       uint64_t block_size, struct beluga_attach *out);

/*
 * beluga_detach - remove region @region_id
 * @flags: 0, or BELUGA_DETACH_EVICT (the uapi flag): evict its unpinned
 *	published blocks first (else -EBUSY if any). Other bits: -EINVAL.
 *	(Until 1.1 this argument was "int evict"; 1 is BELUGA_DETACH_EVICT.)
 * @evicted: may be NULL; receives the number of blocks evicted
 *
 * The region must not be mapped by anyone: unmap (beluga_unmap()) first,
 * including in this process.
 */
int beluga_detach(struct beluga *b, uint32_t region_id, unsigned int flags,
		  uint64_t *evicted);

/* Evict one published key. -ENOENT: not present; -EBUSY: pinned. */
int beluga_evict_key(struct beluga *b, uint64_t ns,
		     const struct beluga_key *key);

/* Evict every unpinned key of @ns; @evicted, @busy may be NULL. */
int beluga_evict_ns(struct beluga *b, uint64_t ns, uint64_t *evicted,
		    uint64_t *busy);

/* ---- Mapping ----------------------------------------------------------- */

/*
 * beluga_map - map the whole pool (map_size from INFO) MAP_SHARED at a
 * 2 MiB aligned address; read-only for an O_RDONLY handle. Returns 0.
 * Calling it again remaps (after regions were attached). -ENODEV: no
 * region attached. Pointers from an earlier mapping become invalid.
 */
int beluga_map(struct beluga *b);

/* Drop the mapping (CUDA registration first). No-op when not mapped. */
void beluga_unmap(struct beluga *b);

/* Base and length of the mapping; NULL and 0 when not mapped. */
void *beluga_map_base(const struct beluga *b);
size_t beluga_map_length(const struct beluga *b);

/*
 * beluga_ptr - the address of pool offset @offset, or NULL when the handle
 * is not mapped or @offset lies outside the mapping.
 */
void *beluga_ptr(const struct beluga *b, uint64_t offset);

/*
 * CPU cache maintenance for the non-coherent multi-host case (CXL shared
 * memory is not coherent between hosts): a writer flushes a block before
 * PUBLISH, a reader invalidates it before reading. Both write back and
 * invalidate the lines (CLFLUSHOPT on x86-64 where the CPU has it, else
 * CLFLUSH; DC CIVAC on arm64) and end with a fence. -EOPNOTSUPP on other
 * architectures.
 */
int beluga_flush_range(const void *addr, size_t len);
int beluga_invalidate_range(const void *addr, size_t len);

/* ---- CUDA ---------------------------------------------------------------- */

/*
 * beluga_cuda_register - cudaHostRegister() the whole mapping, so GPU copies
 * from and to pool blocks run as DMA from pinned memory, and GPU kernels
 * (libbeluga-kvcopy, userspace/cuda/kvcopy.h) read and write blocks in place.
 * @cuda_flags: cudaHostRegister flags; 0 means cudaHostRegisterPortable |
 *	cudaHostRegisterMapped. cudaHostRegisterReadOnly is added for an
 *	O_RDONLY handle.
 *
 * Which runtime: $BELUGA_CUDART when set; else a libcudart already mapped in
 * the process (the engine's, found in /proc/self/maps, so that its error
 * state is the one used); else dlopen() of libcudart.so, .so.13, .so.12,
 * .so.11.0. There is no build-time dependency. Maps first if the handle is
 * not mapped.
 *
 * Pieces: one call of 512 GiB or more fails on current NVIDIA drivers, and a
 * block that spans two registrations breaks copies of it, so the mapping is
 * registered in pieces of at most 256 GiB whose boundaries are multiples of
 * the pool's block size (and of the page size) counted from the mapping's
 * start, which is pool offset 0: no block spans two pieces. A block size of
 * 512 GiB or more cannot be registered (-E2BIG).
 *
 * Shared pool (beluga_hosts() answers records): first, the handle declares
 * a device range over its whole mapping (beluga_device_range(), with an
 * eventfd the library makes: beluga_device_eventfd()) and maps the pool
 * again at the same address (mmap(MAP_FIXED) over its own mapping), since
 * the module lets pins take only mappings made after the declaration;
 * pointers into the mapping stay valid. Once per handle: the range lasts
 * until beluga_close(). That needs beluga-watchdogd running (-ENOLINK
 * otherwise; see "Device leases" above). When the eventfd becomes
 * readable the host fenced: call beluga_cuda_unregister(), beluga_unmap()
 * and beluga_close() within beluga_device_fence_ms().
 *
 * All or nothing: every return code is checked; when a piece fails, the
 * pieces registered before it are unregistered, and the calling thread's
 * CUDA last-error state is read back (cleared) in the runtime used and in
 * every other libcudart mapped in the process, so that the failure does not
 * surface later as the error of an unrelated call (PyTorch checks
 * cudaGetLastError() after each kernel launch). Registration is optional:
 * copies from an unregistered mapping still work, through staging buffers.
 *
 * Errors: -ENOSYS no CUDA runtime found (or a static build); -E2BIG block
 * size too large; -EIO CUDA refused a piece (the message names the piece
 * and has CUDA's error string); the errors of beluga_device_range() on a
 * shared pool (-ENOLINK: no watchdog daemon); -ENXIO the handle's device
 * range does not cover its mapping (the pool grew: use a new handle);
 * when mapping again fails, its error, and the handle is left unmapped.
 */
int beluga_cuda_register(struct beluga *b, unsigned int cuda_flags);
/*
 * Undo beluga_cuda_register() piece by piece (every piece is tried, the
 * error state cleared as above); no-op when not registered.
 */
int beluga_cuda_unregister(struct beluga *b);

/* ---- Device leases of a shared pool ------------------------------------- */

/*
 * A shared pool (several hosts on one CXL memory) refuses device pins
 * (cudaHostRegister, ibv_reg_mr, O_DIRECT) of its mappings: a fence of a
 * host that lost its lease cannot revoke them, and the other hosts reuse
 * its blocks. It allows them on mappings that a file made after it
 * declared a device range (beluga_device_range()), while the host's
 * hardware watchdog is run by beluga-watchdogd (beluga-watchdogd(8)):
 * the host's record then carries a device lease of W, the watchdog's
 * timeout, and the other hosts wait lease + W + lease/2 of its silence
 * before they reuse what it held. <linux/beluga.h> (BELUGA_IOC_WATCHDOG,
 * BELUGA_IOC_DEVICE_RANGE) and Documentation/multihost.md, section 10,
 * have the whole story. beluga_cuda_register() does all of this itself.
 */

/*
 * beluga_watchdog_register - make @b the pool's watchdog link (needs
 * CAP_SYS_ADMIN): the daemon that pets a hardware watchdog whose timeout
 * it set to @timeout_ms (1 .. BELUGA_WATCHDOG_MAX_MS). The link lasts
 * until the handle is closed; calling it again on the link changes W.
 * Errors: -EINVAL @timeout_ms out of range; -EBUSY another file is the
 * link (another daemon runs), or device ranges hold another W; -ENOTTY a
 * module without the command.
 */
int beluga_watchdog_register(struct beluga *b, uint32_t timeout_ms);

/*
 * beluga_watchdog_query - ask the pool whether to pet the watchdog now
 * @answer: receives BELUGA_WATCHDOG_FEED (pet it) or BELUGA_WATCHDOG_HOLD
 *	(do not: the host fenced while devices may still reach the pool, and
 *	the watchdog must reset it); may be NULL
 * @device_ranges: receives the device ranges declared and not yet closed;
 *	may be NULL
 *
 * Call it on the handle that registered, at least every W/4.
 * Errors: -ENOLINK @b is not the pool's watchdog link.
 */
int beluga_watchdog_query(struct beluga *b, uint32_t *answer, uint32_t *device_ranges);

/*
 * beluga_device_range - declare that devices will pin bytes
 * @offset .. @offset + @length of the pool's mapping (page aligned,
 * within INFO's map_size), before they do (BELUGA_IOC_DEVICE_RANGE)
 * @eventfd: an eventfd(2) the kernel signals when the devices must let go
 *	(the host fenced), or -1; the caller keeps owning it
 * @fence_ms: receives W, how long the devices then have before the
 *	watchdog resets the host; 0 on a pool that is not shared (no signal
 *	ever comes, pins need no fence there); may be NULL
 *
 * One range per handle, for as long as the handle's file is open. Only
 * mappings made after the call take pins: beluga_map() again (or use
 * beluga_cuda_register(), which declares the range over the whole
 * mapping and remaps in place).
 * Errors: -EINVAL unaligned or empty range; -EBADF @eventfd is not an
 * eventfd; -ENODEV no region; -ENXIO past map_size; -EBUSY the handle
 * declared one already; and on a shared pool: -ENOLINK no watchdog
 * daemon (beluga-watchdogd) is registered, -ESTALE the host fenced (open
 * a new handle), -EPROTO a live host's module ignores device leases.
 */
int beluga_device_range(struct beluga *b, uint64_t offset, uint64_t length, int eventfd,
			uint32_t *fence_ms);

/*
 * beluga_device_eventfd - the eventfd of @b's device range: the one
 * beluga_cuda_register() made (EFD_CLOEXEC | EFD_NONBLOCK; the library
 * closes it in beluga_close()), or the one given to beluga_device_range().
 * When it becomes readable, the host fenced itself from the shared pool:
 * within W (the fence_ms of beluga_device_fence_ms()) call
 * beluga_cuda_unregister(), then beluga_unmap() and beluga_close(), or the
 * host's watchdog resets it. Poll it with the engine's event loop.
 * -ENOENT: no device range with an eventfd (the pool is not shared, or
 * nothing was registered).
 */
int beluga_device_eventfd(const struct beluga *b);

/*
 * beluga_device_fence_ms - W of @b's device range: the milliseconds its
 * devices have, from the eventfd's signal, to let go; 0 when @b declared
 * none or the pool is not shared.
 */
uint32_t beluga_device_fence_ms(const struct beluga *b);

/* ---- Keys: the reference chained hash ---------------------------------- */

/*
 * The Beluga block hash is FNV-1a with 128-bit state (the FNV spec's
 * 128-bit offset basis 0x6c62272e07bb014262b821756295c58d and prime
 * 2^88 + 2^8 + 0x3b = 0x0000000001000000000000000000013b):
 *
 *     h = offset_basis
 *     for each input byte c:  h = (h XOR c) * prime   (mod 2^128)
 *
 * The key of one block is h over these bytes, in this order:
 *
 *     parent.lo  as 8 bytes little-endian   (all 16 parent bytes are zero
 *     parent.hi  as 8 bytes little-endian    for the first block of a chain)
 *     n          the block's token count, 4 bytes little-endian
 *     token[0..n-1], each token id as 4 bytes little-endian
 *
 * and key.lo = h mod 2^64, key.hi = h >> 64. There is no seed: equal
 * inputs give equal keys in every process, host and language.
 *
 * A chain splits the token ids of a request into blocks of block_tokens
 * tokens; key[i] = H(key[i-1], block i), with key[-1] = 0 (or a caller
 * given parent, to continue a chain). Only full blocks get a key; trailing
 * tokens that do not fill a block are not hashed (they cannot be cached).
 *
 * Reference vectors (printed as the 128-bit number, hi then lo):
 *   FNV-1a-128("")  = 6c62272e07bb014262b821756295c58d
 *   FNV-1a-128("a") = d228cb696f1a8caf78912b704e4a8964
 *   tokens 0,1,...,31, block_tokens 16:
 *     key[0] = edeb83b5c40730fbe43af425245ace0d
 *     key[1] = bba2d53446b14787e13ac728aa0e7927
 *   tokens 1,2,3,4, block_tokens 4:
 *     key[0] = a2bf8a25c5590ba78943ede6c6c5e9bd
 *
 * A Python reimplementation, for engines:
 *   P, B, M = (1 << 88) + 0x13b, 0x6c62272e07bb014262b821756295c58d, (1 << 128) - 1
 *   def block_key(parent, toks):
 *       h = B
 *       data = parent.to_bytes(16, 'little') + len(toks).to_bytes(4, 'little')
 *       data += b''.join(t.to_bytes(4, 'little') for t in toks)
 *       for c in data: h = ((h ^ c) * P) & M
 *       return h
 */

/* FNV-1a-128 of @len bytes: the raw primitive. */
void beluga_fnv1a_128(const void *data, size_t len, struct beluga_key *out);

/* The key of one block of @nr_tokens tokens; @parent NULL means zero. */
void beluga_hash_block(const struct beluga_key *parent, const uint32_t *tokens,
		       size_t nr_tokens, struct beluga_key *out);

/*
 * beluga_hash_chain - keys of the full blocks of a token array
 * @parent: key of the block before @tokens[0], or NULL to start a chain
 * @tokens, @nr_tokens: the token ids
 * @block_tokens: tokens per block, >= 1
 * @keys: receives min(nr_tokens / block_tokens, @max_keys) keys
 *
 * Returns the number of keys written, or -EINVAL for block_tokens == 0.
 */
ssize_t beluga_hash_chain(const struct beluga_key *parent,
			  const uint32_t *tokens, size_t nr_tokens,
			  size_t block_tokens, struct beluga_key *keys,
			  size_t max_keys);

/* ---- Device-dax discovery (sysfs) -------------------------------------- */

enum beluga_dax_mode {
	BELUGA_DAX_UNBOUND = 0,	/* no driver: `echo NAME > .../device_dax/new_id` */
	BELUGA_DAX_DEVDAX,	/* bound to device_dax: attachable */
	BELUGA_DAX_SYSTEM_RAM,	/* bound to kmem: online as System RAM */
	BELUGA_DAX_OTHER,	/* some other driver */
};

/* What the source of a dax device looks like from its sysfs path. */
enum beluga_dax_source {
	BELUGA_DAX_SRC_UNKNOWN = 0,
	BELUGA_DAX_SRC_CXL,	/* a CXL region (dax_cxl) */
	BELUGA_DAX_SRC_PMEM,	/* an nvdimm/pmem namespace (dax_pmem) */
	BELUGA_DAX_SRC_HMEM,	/* soft-reserved memory (dax_hmem) */
};

struct beluga_dax_device {
	char name[BELUGA_NAME_LEN];	/* "dax0.0" */
	uint64_t start;			/* physical start, from resource */
	uint64_t size;			/* bytes, from size */
	int target_node;		/* node the memory belongs to, -1 unknown */
	int numa_node;			/* node of the device, -1 unknown */
	uint64_t align;			/* mapping alignment, 0 unknown */
	unsigned int nr_ranges;		/* mappingN/ entries; 0 = not listed */
	enum beluga_dax_mode mode;
	enum beluga_dax_source source;
	char driver[32];		/* bound driver's name, "" if none */
};

/* Readable names: "devdax", "system-ram", "unbound", "other"; "cxl",... */
const char *beluga_dax_mode_name(enum beluga_dax_mode mode);
const char *beluga_dax_source_name(enum beluga_dax_source source);

/*
 * beluga_dax_probe - read one dax device's sysfs entry
 * @dax: "dax0.0" or "/dev/dax0.0"
 * Returns 0, or -ENOENT (no such device), -EINVAL (bad name) or -EIO
 * (unreadable attributes); the message is in beluga_last_error(NULL).
 * Any mode is reported; whether it can be attached is the caller's call.
 */
int beluga_dax_probe(const char *dax, struct beluga_dax_device *out);

/*
 * beluga_dax_list - every device under /sys/bus/dax/devices, sorted by name
 * @out: receives a malloc()ed array; free() it
 * Returns the count (0 when there is no dax bus) or a negative errno.
 */
ssize_t beluga_dax_list(struct beluga_dax_device **out);

#ifdef __cplusplus
}
#endif

#endif /* LIBBELUGA_H */
