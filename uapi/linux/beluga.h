/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * Beluga: a KV-cache block pool on CXL memory, served by /dev/beluga.
 *
 * This header is the whole contract between the kernel module and
 * userspace. It is installable as <linux/beluga.h>.
 *
 * Pools
 * -----
 * The module serves one pool per device node: /dev/beluga, and with the
 * pools=N module parameter also /dev/beluga1 ... /dev/beluga<N-1>. Pools
 * share nothing: regions, keys, offsets and statistics are per pool, and
 * each node has its own file permissions. Separate pools are how tenants
 * are isolated; namespaces inside one pool separate keys, not memory
 * (any file that can map a pool can read every block in it).
 *
 * Model
 * -----
 * The pool is an array of fixed-size blocks carved out of one or more
 * attached memory regions (device-dax ranges or memory reserved from a NUMA
 * node). A block is named by its byte offset in the /dev/beluga mapping;
 * offsets are stable for as long as the block's region stays attached.
 *
 * A block is in one of three states:
 *
 *   FREE      -> ALLOC ->      ALLOCATED (owned by one open file, writable,
 *                              invisible to LOOKUP)
 *   ALLOCATED -> PUBLISH ->    PUBLISHED (immutable by contract, visible to
 *                              every file under (namespace, key))
 *   ALLOCATED -> FREE ->       FREE
 *   PUBLISHED -> eviction ->   FREE, only while no file holds a pin on it
 *
 * Keys are 128-bit chained prefix hashes inside a 64-bit namespace:
 * key[i] = H(key[i-1], tokens of block i). The kernel never interprets keys;
 * libbeluga provides one documented hash (beluga_hash_chain()).
 *
 * Ownership: every allocation and every pin belongs to the open file
 * description that made it. When the last reference to that file goes away
 * (close(), exit, SIGKILL) all of them are returned. A child created by
 * fork() shares its parent's file description and therefore its allocations
 * and pins; open /dev/beluga again for separate ownership.
 *
 * Eviction: when ALLOC finds no free block it evicts published blocks with
 * no pins, least recently used first. A block's use is its PUBLISH and
 * the RELEASE of its last pin (or the close that drops it); a LOOKUP, with
 * or without BELUGA_LOOKUP_PIN, does not move it. A pinned block is never
 * evicted or reused, and once it has no pins it counts as used at that
 * moment.
 *
 * Mapping: mmap() of /dev/beluga maps the offset space [0, map_size) from
 * BELUGA_IOC_INFO, or any page-aligned part of it. Mappings are pinnable
 * with FOLL_LONGTERM (cudaHostRegister, ibv_reg_mr, AF_XDP umems, and
 * io_uring fixed buffers on kernels whose io_uring accepts file-backed
 * memory, 6.5 and later), except mappings of a shared pool (below).
 * Device-dax regions are mapped with 2 MiB pages where the
 * mapping address, the offset and the region allow it; the kernel picks a
 * 2 MiB aligned address for mappings of 2 MiB or more at a 2 MiB aligned
 * offset. A mapping reaches the regions attached when it was made, in the
 * range it was made with; pages in holes, in regions attached later or in
 * regions it reaches only after mremap() grew it raise SIGBUS: map again
 * after ATTACH (REGION_INFO's @mappings says which mappings count where).
 * mmap() errors:
 *   -EINVAL  MAP_PRIVATE (only MAP_SHARED is allowed);
 *   -EACCES  PROT_WRITE on a file opened O_RDONLY (read-only files map
 *            read-only, and mprotect() cannot add write later);
 *   -ENODEV  no region is attached;
 *   -ENXIO   the range reaches past map_size;
 *   -ESTALE  the file was opened before a fence of the pool's shared-pool
 *            host (see BELUGA_IOC_ATTACH); its mappings raise SIGBUS.
 *
 * Command conventions (iommufd style)
 * -----------------------------------
 * Every command is _IO(BELUGA_TYPE, nr) and takes a pointer to a struct
 * whose first member is __u32 size, the size of the struct as userspace
 * knows it. The kernel accepts any size >= the size of the struct's first
 * version (BELUGA_*_SIZE_V1 below):
 *   - a larger size from newer userspace is accepted when the bytes the
 *     kernel does not know are zero, else -E2BIG;
 *   - a smaller one is an older caller: the fields it does not pass read
 *     as zero;
 *   - the answer is written back up to the smaller of the two sizes.
 * Structs grow only at the end, by appending fields (BELUGA_*_SIZE_V2);
 * fields never move.
 * Common errors, checked in this order; a call that breaks several rules
 * gets the error of the first step it fails:
 *   1. -ENOTTY  unknown command number, or a command encoded with a size
 *               or direction.
 *   2. -EPERM   an admin command (ATTACH, DETACH, EVICT, WATCHDOG) from a task
 *               without CAP_SYS_ADMIN. The capability is the calling
 *               task's, whatever file it calls through: a file that root
 *               opened and passed on grants nothing, and a read-only file
 *               serves the admin commands of a task that has it.
 *   3. -EBADF   ALLOC, FREE or PUBLISH on a file not opened for writing
 *               (admin commands do not need a writable file, so -EPERM and
 *               -EBADF never meet in one command).
 *   4. The struct, read as copy_struct_from_user() reads it: -EFAULT when
 *      the size field cannot be read; -EINVAL size below the first
 *      version; -E2BIG size above 4096, or nonzero bytes past the kernel's
 *      struct; -EFAULT when the rest of the struct cannot be read. (That it
 *      can be written is not checked here: see the answer, below.)
 *   5. The struct's fields: -EINVAL unknown flags or a nonzero reserved
 *      field; then the count of a batch, -EINVAL for 0 and -E2BIG above
 *      BELUGA_MAX_BATCH (HOSTS' count is a capacity: any value is
 *      valid); then the command's own rules on its fields
 *      (-EINVAL, e.g. LOOKUP with BELUGA_LOOKUP_PIN and no offsets array).
 *   6. The arrays the struct points to (only once the count that sizes
 *      them is valid): -EFAULT when an input array (the offsets of FREE
 *      and RELEASE, the items of PUBLISH, the keys of LOOKUP) cannot be
 *      read whole, or ALLOC's offsets array (then its evicted array) cannot
 *      be written whole (checked by writing their own bytes back); then
 *      what they hold
 *      (-EINVAL for a nonzero __reserved in a PUBLISH item).
 *   7. -ENODEV  ALLOC, FREE, PUBLISH, LOOKUP or RELEASE while no region is
 *               attached (INFO, STATS, REGION_INFO and HOSTS work on an
 *               empty pool).
 *   8. The command's own errors (its description below). Last, the
 *      answer: results written to arrays the kernel only writes, and only
 *      when there is a result (LOOKUP's offsets array, PUBLISH's item
 *      results, HOSTS' records), and the struct itself for a command that
 *      answers in it (all but FREE, RELEASE and ALLOC without
 *      BELUGA_ALLOC_EVICTED, whose struct is only read and may be
 *      read-only): -EFAULT when it cannot be written.
 * Why this order: each step needs the one before it, as in iommufd, whose
 * conventions this ABI follows. The struct is copied in whole with
 * copy_struct_from_user() before any field is looked at, so nonzero
 * trailing bytes from a newer userspace (a feature this kernel does not
 * have) are reported as -E2BIG before the fields that feature may give a
 * meaning to. An array is read only after the count that sizes it is
 * valid. And every error about the arguments comes before the pool's
 * state, so a malformed call fails the same way whether or not a region
 * is attached.
 * A command that fails with an error leaves the pool unchanged, unless its
 * description below says otherwise (DETACH with BELUGA_DETACH_EVICT), or
 * it failed writing its answer (-EFAULT: PUBLISH, DETACH and EVICT, next).
 *
 * The answer and -EFAULT
 * ----------------------
 * Each command writes its answer once the answer is complete, as iommufd
 * does, so an answer that cannot be written (the struct or an output
 * array read-only or unmapped, also by another thread during the call)
 * is found then, and what the command did by then is, command by command:
 *   INFO, STATS, REGION_INFO  nothing (they change no state).
 *   ALLOC    the blocks, answered in @offsets (then @evicted and the
 *            struct, with BELUGA_ALLOC_EVICTED): freed again before the
 *            -EFAULT (each one the file still holds); the blocks it
 *            evicted stay evicted. The arrays are also checked before
 *            anything is allocated (step 6).
 *   FREE, RELEASE  no answer: they never fail for it.
 *   PUBLISH  takes effect, and cannot be undone: the keys are visible. The
 *            struct's counters are written first, then the item results.
 *   LOOKUP   @offsets, then the struct; with BELUGA_LOOKUP_PIN the pins are
 *            dropped again before the -EFAULT (each one the file still
 *            holds). Without it nothing changed but the counters.
 *   ATTACH   nothing: the region is built first but is not part of the
 *            pool until the answer is written, so on -EFAULT it is torn
 *            down without anything having seen it: no slot, no offsets, no
 *            blocks. What ATTACH does to the memory itself stays done: a
 *            device-dax range was cleared; a shared pool was joined and is
 *            left again (its other hosts see this host come and go), and
 *            with BELUGA_ATTACH_FORMAT it stays formatted.
 *   DETACH, EVICT  what they did stands: a region detached, blocks
 *            evicted (REGION_INFO and LOOKUP tell what happened).
 * The counters of STATS count attempts: a call undone on -EFAULT still
 * shows in allocs and frees.
 */
#ifndef _UAPI_LINUX_BELUGA_H
#define _UAPI_LINUX_BELUGA_H

#include <linux/const.h>
#include <linux/ioctl.h>
#include <linux/types.h>

#define BELUGA_DEVICE_PATH	"/dev/beluga"
#define BELUGA_ABI_VERSION	1

/* The hard upper bound on items (keys, offsets) in one batch call. */
#define BELUGA_MAX_BATCH	4096
#define BELUGA_MAX_REGIONS	16
#define BELUGA_NAME_LEN		32

#define BELUGA_BLOCK_SIZE_MIN		4096ULL
#define BELUGA_BLOCK_SIZE_MAX		(1ULL << 30)
#define BELUGA_BLOCK_SIZE_DEFAULT	(2ULL << 20)

/* Device-dax ranges must start and end on this boundary. */
#define BELUGA_DAX_ALIGN		(2ULL << 20)

/* A 128-bit key; lo holds bits 0..63, hi bits 64..127. */
struct beluga_key {
	__u64 lo;
	__u64 hi;
};

#define BELUGA_TYPE	0xBE

enum {
	BELUGA_CMD_INFO = 0x00,
	BELUGA_CMD_STATS,
	BELUGA_CMD_ALLOC,
	BELUGA_CMD_FREE,
	BELUGA_CMD_PUBLISH,
	BELUGA_CMD_LOOKUP,
	BELUGA_CMD_RELEASE,
	BELUGA_CMD_ATTACH,
	BELUGA_CMD_DETACH,
	BELUGA_CMD_EVICT,
	BELUGA_CMD_REGION_INFO,
	BELUGA_CMD_HOSTS,
	BELUGA_CMD_INDEX_MAP,
	BELUGA_CMD_WATCHDOG,
	BELUGA_CMD_DEVICE_RANGE,
};

/**
 * struct beluga_info - BELUGA_IOC_INFO: pool geometry
 * @size: sizeof(struct beluga_info)
 * @flags: must be 0
 * @abi_version: out: BELUGA_ABI_VERSION of the running module
 * @nr_regions: out: regions attached now
 * @block_size: out: bytes per block; 0 while no region is attached
 * @nr_blocks: out: blocks in all attached regions
 * @map_size: out: bytes of offset space to mmap to reach every block;
 *	it may contain holes where a region was detached
 * @max_batch: out: BELUGA_MAX_BATCH
 * @max_regions: out: BELUGA_MAX_REGIONS
 *
 * Any file may call it. Never fails other than with the common errors.
 */
struct beluga_info {
	__u32 size;
	__u32 flags;
	__u32 abi_version;
	__u32 nr_regions;
	__u64 block_size;
	__u64 nr_blocks;
	__u64 map_size;
	__u32 max_batch;
	__u32 max_regions;
};

#define BELUGA_INFO_SIZE_V1	48
#define BELUGA_IOC_INFO		_IO(BELUGA_TYPE, BELUGA_CMD_INFO)

/**
 * struct beluga_stats - BELUGA_IOC_STATS: pool occupancy and counters
 * @size: sizeof(struct beluga_stats)
 * @flags: must be 0
 * @total_blocks: out: free + allocated + published + retired, except on
 *	a shared pool (below)
 * @free_blocks: out
 * @allocated_blocks: out: owned by some file, not yet published
 * @published_blocks: out
 * @pinned_blocks: out: published blocks with at least one pin
 * @pins: out: pins held by all files together
 * @clients: out: open files of /dev/beluga
 * @allocs: out: blocks handed out by ALLOC since load
 * @frees: out: blocks returned by FREE, by a lost publish race, or on close
 * @publishes: out: blocks that became visible
 * @publish_races: out: PUBLISH items that found their key present
 * @lookups: out: LOOKUP calls
 * @lookup_keys: out: keys asked for
 * @lookup_hits: out: keys found (the leading run only)
 * @releases: out: pins dropped by RELEASE or on close
 * @evictions: out: published blocks evicted, by ALLOC or by EVICT
 * @alloc_failures: out: ALLOC calls that ended in -ENOSPC
 * @retired_blocks: out (since BELUGA_STATS_SIZE_V2): blocks of the
 *	regions attached now that a memory error took out of service (on a
 *	shared pool: of the partitions this host owns, below)
 *
 * Memory errors: when a page behind a block is poisoned (an uncorrectable
 * error that the kernel's memory_failure() handled, or madvise
 * MADV_HWPOISON), the block is retired: its key is unpublished (LOOKUP no
 * longer finds it) and ALLOC never hands it out again. The module learns
 * of the error at the next page fault on the poisoned page, or when its
 * region is attached; a process that touches the page gets SIGBUS with
 * si_code BUS_MCEERR_AR, si_addr the address touched and si_addr_lsb
 * PAGE_SHIFT. On device-dax, memory_failure() itself signals the process
 * that consumed the poison at once (BUS_MCEERR_AR; BUS_MCEERR_AO for
 * processes that asked for early kills), with si_addr and si_addr_lsb
 * giving the whole folio it took (2 MiB on a 2 MiB aligned device), and
 * unmaps that folio from every mapping, so that any further touch faults.
 * Node memory is left mapped by memory_failure() (it handles no driver's
 * non-LRU pages; MADV_HWPOISON fails with EBUSY there): the module sees
 * the poison once the page is faulted again (a new mapping, or after
 * MADV_DONTNEED). A block that a file still holds (ALLOCATED, or pinned)
 * stays that file's until FREE, PUBLISH (item result -EIO), RELEASE or
 * close, and counts where it is held until then. Detaching the region
 * forgets its retired blocks; attaching it again retires them again.
 *
 * A shared pool retires a block on every host: the host that learns of
 * the error takes it out of the pool's shared index, or asks the host
 * owning the block's partition to, within a heartbeat
 * (Documentation/multihost.md, section 5); from then on no host's LOOKUP
 * returns it (the learning host's at once) and no host's ALLOC hands it
 * out, also after takeovers, rejoins, and DETACH and ATTACH of every host.
 * Pins on it stay until released, and it counts as retired at once; an
 * ALLOCATED one is retired as on a local pool, when let go. FORMAT starts
 * a new pool and forgets retired blocks (ATTACH then retires those whose
 * poison the formatting host knows). Hosts whose module predates format
 * 1.2 do not honour retirement in partitions they own.
 *
 * The occupancy fields are one consistent snapshot taken under the pool
 * lock; the counters are read in the same snapshot.
 *
 * Shared pool (BELUGA_ATTACH_SHARED): the fields are this host's view,
 * taken under its host lock. @total_blocks is the whole pool's;
 * @free_blocks and @published_blocks count the partitions this host owns
 * now (Documentation/multihost.md, 3), @allocated_blocks the blocks its
 * files allocated, @pinned_blocks the blocks (of any partition) its files
 * pin, @pins their pins, @retired_blocks the retired blocks of the
 * partitions it owns. So free + allocated + published + retired is the
 * number of blocks in the partitions this host owns, and total_blocks
 * minus that is
 * owned by other hosts (or by none, for a lease after a host died).
 * Ownership moves when hosts join, leave or die. The counters count this
 * host's operations, and run since load like on a local pool.
 */
struct beluga_stats {
	__u32 size;
	__u32 flags;
	__u64 total_blocks;
	__u64 free_blocks;
	__u64 allocated_blocks;
	__u64 published_blocks;
	__u64 pinned_blocks;
	__u64 pins;
	__u64 clients;
	__u64 allocs;
	__u64 frees;
	__u64 publishes;
	__u64 publish_races;
	__u64 lookups;
	__u64 lookup_keys;
	__u64 lookup_hits;
	__u64 releases;
	__u64 evictions;
	__u64 alloc_failures;
	__u64 retired_blocks;
};

#define BELUGA_STATS_SIZE_V1	144
#define BELUGA_STATS_SIZE_V2	152

/*
 * BELUGA_STATS_FIELDS(F) - the fields of struct beluga_stats after @flags,
 * for code that treats them all alike (the module's STATS and sysfs files,
 * belugactl's outputs, the Python binding): F(name, kind, help) for each,
 * in the order tools show them (the struct's order is the ABI's: fields
 * are appended). @kind is BELUGA_STAT_GEOMETRY (the pool's size),
 * BELUGA_STAT_OCCUPANCY (a snapshot) or BELUGA_STAT_COUNTER (events since
 * load, never decreasing); @help is one sentence. Like __BPF_FUNC_MAPPER
 * in <linux/bpf.h>. The struct stays written out, as the ABI; the module
 * checks at build time that this list names each of its fields once.
 * A new field goes into the struct (at its end), here, and into the
 * sysfs ABI document (Documentation/ABI/testing/sysfs-class-misc-beluga).
 */
#define BELUGA_STAT_GEOMETRY	0
#define BELUGA_STAT_OCCUPANCY	1
#define BELUGA_STAT_COUNTER	2

#define BELUGA_STATS_OCCUPANCY_FIELDS(F)				\
	F(total_blocks, GEOMETRY, "Blocks in the pool.")		\
	F(free_blocks, OCCUPANCY, "Free blocks.")			\
	F(allocated_blocks, OCCUPANCY,					\
	  "Blocks allocated by a client, not yet published.")		\
	F(published_blocks, OCCUPANCY, "Published blocks.")		\
	F(retired_blocks, OCCUPANCY,					\
	  "Blocks a memory error took out of service.")		\
	F(pinned_blocks, OCCUPANCY,					\
	  "Published blocks with at least one pin.")			\
	F(pins, OCCUPANCY, "Pins held by all clients.")			\
	F(clients, OCCUPANCY, "Open files of /dev/beluga.")

#define BELUGA_STATS_COUNTER_FIELDS(F)					\
	F(allocs, COUNTER, "Blocks handed out by ALLOC.")		\
	F(frees, COUNTER,						\
	  "Blocks returned by FREE, a lost publish race, or close.")	\
	F(publishes, COUNTER, "Blocks that became visible.")		\
	F(publish_races, COUNTER,					\
	  "PUBLISH items that found their key present.")		\
	F(lookups, COUNTER, "LOOKUP calls.")				\
	F(lookup_keys, COUNTER, "Keys asked for by LOOKUP.")		\
	F(lookup_hits, COUNTER, "Keys found by LOOKUP (leading run).")	\
	F(releases, COUNTER, "Pins dropped by RELEASE or close.")	\
	F(evictions, COUNTER, "Published blocks evicted.")		\
	F(alloc_failures, COUNTER, "ALLOC calls that failed with ENOSPC.")

#define BELUGA_STATS_FIELDS(F)						\
	BELUGA_STATS_OCCUPANCY_FIELDS(F)				\
	BELUGA_STATS_COUNTER_FIELDS(F)
#define BELUGA_IOC_STATS	_IO(BELUGA_TYPE, BELUGA_CMD_STATS)

/* ALLOC flags */
#define BELUGA_ALLOC_EVICTED	_BITUL(0)

/**
 * struct beluga_evicted_key - a key an ALLOC evicted (BELUGA_ALLOC_EVICTED)
 * @ns: the namespace the block was published under
 * @key: the key it was published under
 */
struct beluga_evicted_key {
	__aligned_u64 ns;
	struct beluga_key key;
};

/**
 * struct beluga_alloc - BELUGA_IOC_ALLOC: take blocks for writing
 * @size: sizeof(struct beluga_alloc)
 * @flags: 0 or BELUGA_ALLOC_EVICTED (since BELUGA_ALLOC_SIZE_V2)
 * @count: in: blocks wanted, 1..BELUGA_MAX_BATCH
 * @__reserved: must be 0
 * @offsets: in: user pointer to __u64[@count]; out there: block offsets
 * @evicted: in (since BELUGA_ALLOC_SIZE_V2): with BELUGA_ALLOC_EVICTED, a
 *	user pointer to struct beluga_evicted_key[@count]; out there: the
 *	keys of the published blocks this ALLOC evicted, least recently used
 *	first; entries from @nr_evicted on are not written. Required with
 *	the flag and must be 0 without it: either mistake is -EINVAL, a rule
 *	on the fields (step 5 of the common errors, after the count), as is
 *	the flag in a struct whose @size stops short of @nr_evicted.
 * @nr_evicted: out (since BELUGA_ALLOC_SIZE_V2): the entries of @evicted
 *	written, at most @count (0 when the free blocks sufficed). Written
 *	only with BELUGA_ALLOC_EVICTED and only when the ALLOC succeeds: on
 *	an error (-ENOSPC included, which evicts nothing) the struct is not
 *	written and @nr_evicted keeps what the caller put there. Its value
 *	in is ignored.
 * @__reserved2: must be 0
 *
 * All or nothing: either @count blocks are allocated to the calling file,
 * or none is. Free blocks are taken round-robin across regions; when there
 * are not enough, unpinned published blocks are evicted, least recently
 * used first. Never sleeps waiting for space.
 *
 * Contents: a block holds what its last owner in this pool wrote (any
 * opener of the pool can read every block anyway), or zeros if no one has
 * written it since its region was attached. Nothing written through one
 * pool is ever seen through another, nor after its region is detached:
 * ATTACH clears a device-dax range, node memory comes zeroed, and a
 * shared pool's FORMAT clears its data area (BELUGA_IOC_ATTACH).
 *
 * An ALLOC that evicts does bounded work each time it holds the pool's
 * lock: it merges the clients' pending LRU updates and looks at pinned
 * blocks in chunks, letting other callers in between. A pinned block it
 * meets is not looked at again until its last pin goes, so ALLOCs that
 * fail on a pool whose blocks are all pinned cost almost nothing each.
 *
 * Evictions reported: an engine that keeps its own account of what the
 * pool holds (vLLM's offloading events, a prefix tree of stored blocks)
 * learns from BELUGA_ALLOC_EVICTED which keys its ALLOC made room by
 * removing, whoever published them. Keys removed otherwise (EVICT, DETACH,
 * other files' ALLOCs, other hosts of a shared pool) are not reported
 * here: LOOKUP stays the authority.
 *
 * The answer is @offsets, then with BELUGA_ALLOC_EVICTED @evicted and
 * @nr_evicted in this struct; without the flag the struct is only read
 * (it may be read-only).
 *
 * Errors: -ENOSPC when free plus evictable blocks are fewer than @count;
 * -EBADF on a read-only file; -EFAULT when @offsets or @evicted cannot be
 * written, checked before anything is allocated (step 6 above), or when
 * the answer cannot be written during the call (another thread unmaps it):
 * the blocks are then freed again before returning, each one that the
 * file still holds (another thread of the file may have freed some
 * meanwhile); the blocks evicted stay evicted.
 */
struct beluga_alloc {
	__u32 size;
	__u32 flags;
	__u32 count;
	__u32 __reserved;
	__aligned_u64 offsets;
	__aligned_u64 evicted;
	__u32 nr_evicted;
	__u32 __reserved2;
};

#define BELUGA_ALLOC_SIZE_V1	24
#define BELUGA_ALLOC_SIZE_V2	40
#define BELUGA_IOC_ALLOC	_IO(BELUGA_TYPE, BELUGA_CMD_ALLOC)

/**
 * struct beluga_blocks - argument of BELUGA_IOC_FREE and BELUGA_IOC_RELEASE
 * @size: sizeof(struct beluga_blocks)
 * @flags: must be 0
 * @count: in: 1..BELUGA_MAX_BATCH
 * @__reserved: must be 0
 * @offsets: in: user pointer to __u64[@count], block offsets
 *
 * BELUGA_IOC_FREE returns ALLOCATED blocks owned by the calling file to
 * the free pool. BELUGA_IOC_RELEASE drops one pin of the calling file per
 * listed offset (an offset may be listed as often as it is pinned).
 *
 * All or nothing: when one offset is invalid (not a block, not allocated
 * by this file for FREE, listed twice for FREE, not pinned by this file as
 * often as listed for RELEASE) the call fails with -EINVAL and nothing
 * changes. FREE needs a writable file (-EBADF).
 */
struct beluga_blocks {
	__u32 size;
	__u32 flags;
	__u32 count;
	__u32 __reserved;
	__aligned_u64 offsets;
};

#define BELUGA_BLOCKS_SIZE_V1	24
#define BELUGA_IOC_FREE		_IO(BELUGA_TYPE, BELUGA_CMD_FREE)
#define BELUGA_IOC_RELEASE	_IO(BELUGA_TYPE, BELUGA_CMD_RELEASE)

/*
 * Per-item result of PUBLISH.
 * BELUGA_PUBLISH_OK: the block is now PUBLISHED under the key.
 * BELUGA_PUBLISH_EXISTS: the key was already present in the namespace (the
 *	caller lost the race, or an earlier item of the same call published
 *	it); the caller's block was freed.
 * A negative errno: this item was not applied and its block is unchanged:
 *	-EINVAL not a block offset, -EPERM not ALLOCATED by this file;
 *	except -EIO: a memory error hit the block (see struct beluga_stats,
 *	@retired_blocks); it was taken out of service and is no longer the
 *	caller's.
 */
#define BELUGA_PUBLISH_OK	0
#define BELUGA_PUBLISH_EXISTS	1

/**
 * struct beluga_publish_item - one (block, key) pair of a PUBLISH call
 * @offset: in: block offset, ALLOCATED by the calling file
 * @key: in
 * @result: out: BELUGA_PUBLISH_OK, BELUGA_PUBLISH_EXISTS or -errno
 * @__reserved: must be 0
 */
struct beluga_publish_item {
	__aligned_u64 offset;
	struct beluga_key key;
	__s32 result;
	__u32 __reserved;
};

/**
 * struct beluga_publish - BELUGA_IOC_PUBLISH: make blocks visible
 * @size: sizeof(struct beluga_publish)
 * @flags: must be 0
 * @ns: in: namespace of every key in the call
 * @count: in: items, 1..BELUGA_MAX_BATCH
 * @published: out: items with BELUGA_PUBLISH_OK
 * @exists: out: items with BELUGA_PUBLISH_EXISTS
 * @failed: out: items with a negative result
 * @items: in/out: user pointer to struct beluga_publish_item[@count]
 *
 * Results are per item; the call itself returns 0 once the items were
 * read, even when some items failed. The whole call fails with -EINVAL,
 * changing nothing, when an item's @__reserved is nonzero. The answer is
 * this struct's counters, then the items' @result. If either cannot be
 * written (-EFAULT), the call has still taken effect (publishing cannot
 * be undone): whatever of the answer can be written is, and the state is
 * visible through LOOKUP.
 *
 * The writer must have finished (and, on a non-coherent path, flushed)
 * the block's bytes before PUBLISH; readers may see them at once after.
 */
struct beluga_publish {
	__u32 size;
	__u32 flags;
	__aligned_u64 ns;
	__u32 count;
	__u32 published;
	__u32 exists;
	__u32 failed;
	__aligned_u64 items;
};

#define BELUGA_PUBLISH_SIZE_V1	40
#define BELUGA_IOC_PUBLISH	_IO(BELUGA_TYPE, BELUGA_CMD_PUBLISH)

/* LOOKUP flags */
#define BELUGA_LOOKUP_PIN	_BITUL(0)

/**
 * struct beluga_lookup - BELUGA_IOC_LOOKUP: longest cached prefix
 * @size: sizeof(struct beluga_lookup)
 * @flags: 0 or BELUGA_LOOKUP_PIN
 * @ns: in: namespace
 * @count: in: keys, 1..BELUGA_MAX_BATCH, in chain order
 * @hits: out: length of the leading run of keys that are PUBLISHED
 * @keys: in: user pointer to struct beluga_key[@count]
 * @offsets: out: user pointer to __u64[@count]; the first @hits entries
 *	receive block offsets, nothing else is written (so with no hit the
 *	pointer is not touched, and not checked either). Required with
 *	BELUGA_LOOKUP_PIN: 0 there is -EINVAL, a rule on the fields (step 5
 *	of the common errors), so it comes before @keys is read and before
 *	-ENODEV. May be 0 without the flag (a count-only probe).
 *
 * With BELUGA_LOOKUP_PIN every hit gets one pin owned by the calling file;
 * the caller must RELEASE each pin (or close the file), and the release of
 * a block's last pin makes it the most recently used (see Eviction
 * above). Without it nothing changes in the pool but the counters, and
 * the offsets are only a hint: the blocks may be evicted at any time.
 *
 * The answer is @offsets, then @hits in this struct.
 *
 * Errors: -EFAULT when @keys cannot be read, or @offsets or the struct
 * cannot be written; with BELUGA_LOOKUP_PIN the pins are dropped again
 * before returning (each one the file still holds).
 * -EOVERFLOW with BELUGA_LOOKUP_PIN when a hit already carries nearly 2^32
 * pins; nothing is pinned then.
 */
struct beluga_lookup {
	__u32 size;
	__u32 flags;
	__aligned_u64 ns;
	__u32 count;
	__u32 hits;
	__aligned_u64 keys;
	__aligned_u64 offsets;
};

#define BELUGA_LOOKUP_SIZE_V1	40
#define BELUGA_IOC_LOOKUP	_IO(BELUGA_TYPE, BELUGA_CMD_LOOKUP)

enum beluga_backend {
	BELUGA_BACKEND_DAX = 1,
	BELUGA_BACKEND_NODE = 2,
};

/**
 * struct beluga_attach - BELUGA_IOC_ATTACH: add a memory region (admin)
 * @size: sizeof(struct beluga_attach)
 * @flags: 0, or BELUGA_ATTACH_SHARED with optionally BELUGA_ATTACH_FORMAT
 *	and BELUGA_ATTACH_HOST_ID (below)
 * @backend: in: BELUGA_BACKEND_DAX or BELUGA_BACKEND_NODE
 * @node: in: NODE: the NUMA node to reserve memory from, >= 0. DAX: must
 *	be -1.
 * @phys_start: in: DAX: physical address of the device-dax range (from
 *	/sys/bus/dax/devices/daxX.Y/resource). NODE: must be 0.
 * @length: in: DAX: bytes of the range. NODE: bytes to reserve.
 * @block_size: in: bytes per block, a multiple of 4096 in
 *	[BELUGA_BLOCK_SIZE_MIN, BELUGA_BLOCK_SIZE_MAX]; 0 means the pool's
 *	size, or BELUGA_BLOCK_SIZE_DEFAULT for the first region. Every region
 *	of a pool has the same block size.
 * @name: in: NUL-terminated label, e.g. "dax0.0", unique in the pool;
 *	required for DAX; for NODE it may be empty and becomes "node<N>"
 * @region_id: out: slot of the new region, 0..BELUGA_MAX_REGIONS-1
 * @__reserved: must be 0 (but see the first layout, below)
 * @first_offset: out: offset of the region's first block
 * @nr_blocks: out: blocks the region adds
 * @host_id: in (since BELUGA_ATTACH_SIZE_V2), with BELUGA_ATTACH_HOST_ID:
 *	this host's id in a shared pool; must be 0 without that flag
 * @__reserved2: must be 0
 *
 * The first layout, BELUGA_ATTACH_SIZE_V1 bytes, ends at @nr_blocks and
 * gave the host id in the 32 bits that are @__reserved now. A caller that
 * passes a size below the end of @host_id still does so: with
 * BELUGA_ATTACH_HOST_ID its @__reserved is the host id (and reads back
 * unchanged); without, it must be 0.
 *
 * The answer (@region_id, @first_offset, @nr_blocks) is written before the
 * region joins the pool: until then nothing can map, allocate from, look
 * up, count or detach it. If it cannot be written (-EFAULT), the region is
 * torn down again and the pool is as before (see "The answer and -EFAULT"
 * above for what stays done to the memory). Its sysfs directory exists
 * from a little before the answer (its block counts read -ENODEV until the
 * region is in the pool).
 *
 * DAX: the range must be 2 MiB aligned, lie wholly inside one device-dax
 * instance bound to the device_dax driver, and not overlap System RAM or
 * another attached region, and no page of it may be referenced from
 * outside (a pin taken through /dev/daxX.Y: -EBUSY). While attached, the
 * module holds a reference on the device's page map: unbinding device_dax
 * from it waits until DETACH. The range is cleared (zeroed) before the
 * call returns, which takes time in proportion to its size (about 15 MB/s
 * on emulated CXL memory, memory bandwidth on real memory); ATTACH and
 * DETACH of other regions and pools go on meanwhile, and the region's
 * blocks and offsets exist only once it is clear (the pool's sysfs
 * "attaching" attribute shows the progress). A fatal signal stops the
 * clearing (-EINTR, nothing attached).
 * NODE: memory is taken from the node with __GFP_THISNODE, 2 MiB at a time
 * where possible, zeroed, and given back at DETACH.
 *
 * Errors: -EEXIST the range or a name is already attached; -EBUSY the
 * range is not device-dax memory bound to device_dax, is System RAM, or
 * has a page referenced from outside;
 * -ENOSPC no free slot; -ENOMEM the node has not that much free memory;
 * -EINVAL bad alignment, block size mismatch, length smaller than one block,
 * a missing or unterminated name, a negative NODE node; -ENODEV the node
 * has no memory online.
 *
 * Shared pools (hosts on one CXL device, Documentation/multihost.md): with
 * BELUGA_ATTACH_SHARED the DAX range holds a multi-host pool. The pool
 * (device node) must be empty, and stays limited to this one region. The
 * range is formatted when it holds no valid pool (or with
 * BELUGA_ATTACH_FORMAT, refused while other hosts are alive), else this
 * host joins it; @block_size 0 accepts the pool's. A join leaves the
 * blocks as the pool's hosts wrote them; a format clears the data area
 * too. The host id is
 * @host_id with BELUGA_ATTACH_HOST_ID, else the host_id module parameter
 * (beluga.host_id=N). That parameter and the timings a formatting host
 * writes (beluga.mh_heartbeat_ms, beluga.mh_lease_ms) are given at load
 * and read-only afterwards (/sys/module/beluga/parameters, mode 0444); an
 * ATTACH that uses an out-of-range value fails (-ERANGE, -EINVAL).
 * ALLOC, FREE, PUBLISH, LOOKUP and RELEASE then follow the multi-host
 * protocol; the offset space holds the range's data blocks
 * only (its metadata is not mappable); PUBLISH writes the blocks' CPU
 * caches back first; EVICT is -EOPNOTSUPP; STATS and REGION_INFO report
 * this host's view of the pool (see struct beluga_stats; BELUGA_IOC_HOSTS
 * lists the hosts). DETACH leaves
 * the pool cleanly, refused with -EBUSY while this host's files hold
 * allocations or pins. More errors, with the reason in the kernel log:
 * -EUCLEAN corrupt pool, -EPROTONOSUPPORT unknown on-media version,
 * -EINVAL geometry or block size mismatch, -ERANGE host id too large for
 * the pool, -EADDRINUSE another live host uses this id, -EBUSY a pool is
 * attached already (or FORMAT while hosts are alive). -EOPNOTSUPP: the
 * module was built without shared pools (BELUGA_SHARED=n in kmod/Kbuild);
 * the struct's fields are checked first, as for any ATTACH, and nothing is
 * claimed.
 *
 * Pins of a shared pool: a fence zaps mappings, but it cannot revoke pins
 * that devices hold (RDMA memory regions, io_uring fixed buffers,
 * cudaHostRegister): those would go on reading and writing blocks that
 * other hosts reuse. So get_user_pages() refuses the pages of a shared
 * pool's mapping, its fast path included (they are mapped by special
 * entries), whether they were touched before or not: those registrations,
 * O_DIRECT reads and writes (also through AIO and io_uring), vmsplice(),
 * process_vm_readv() and MADV_HWPOISON on them fail with -EFAULT. Two
 * exceptions: a mapping made by a file that declared a device range first
 * (BELUGA_IOC_DEVICE_RANGE: the host's hardware watchdog bounds how long
 * its devices can outlive a fence, and the other hosts wait that long),
 * and every mapping when the module is loaded with mh_allow_gup=1, which
 * an operator sets only where something outside the host stops its
 * devices' access to the pool when it loses its lease, within
 * mh_device_fence_ms (Documentation/multihost.md, 10). Drivers that look
 * up the physical pages of a VM_IO mapping without get_user_pages() are
 * not refused by this (same section).
 *
 * Fence: a host whose own heartbeat falls half a lease behind (the machine
 * or its heartbeat work stalled for about a second) stops writing to the
 * pool, because the other hosts will soon hold it dead and reuse the
 * blocks it allocated or pinned. The module then zaps every mapping of the
 * pool and makes every file opened before that moment stale: its ALLOC,
 * FREE, PUBLISH, LOOKUP and RELEASE fail with -ESTALE, its mmap() too, and
 * touching its mappings raises SIGBUS, until it is closed (its allocations
 * and pins are gone; close and open again). The host then rejoins by
 * itself with a new incarnation, after a lease; until then block commands
 * of newer files fail with -ESTALE too, at once (retry after a while). If
 * it cannot rejoin (the pool was formatted again, another host took its
 * id), every block command fails with -ESTALE until DETACH; the kernel log
 * says why.
 */
struct beluga_attach {
	__u32 size;
	__u32 flags;
	__u32 backend;
	__s32 node;
	__aligned_u64 phys_start;
	__aligned_u64 length;
	__aligned_u64 block_size;
	char name[BELUGA_NAME_LEN];
	__u32 region_id;
	__u32 __reserved;
	__aligned_u64 first_offset;
	__aligned_u64 nr_blocks;
	__u32 host_id;
	__u32 __reserved2;
};

/*
 * ATTACH flags. Bit 0 is left unused: the first ABI refused every flag,
 * and its tests keep checking that bit.
 */
#define BELUGA_ATTACH_SHARED	_BITUL(1)	/* a multi-host pool */
#define BELUGA_ATTACH_FORMAT	_BITUL(2)	/* format it even if valid */
#define BELUGA_ATTACH_HOST_ID	_BITUL(3)	/* @host_id is given */

#define BELUGA_ATTACH_SIZE_V1	96
#define BELUGA_ATTACH_SIZE_V2	104	/* + @host_id, @__reserved2 */
#define BELUGA_IOC_ATTACH	_IO(BELUGA_TYPE, BELUGA_CMD_ATTACH)

/* DETACH flags */
#define BELUGA_DETACH_EVICT	_BITUL(0)

/**
 * struct beluga_detach - BELUGA_IOC_DETACH: remove a region (admin)
 * @size: sizeof(struct beluga_detach)
 * @flags: 0 or BELUGA_DETACH_EVICT
 * @region_id: in: the slot to detach
 * @__reserved: must be 0
 * @evicted: out: published blocks evicted by BELUGA_DETACH_EVICT
 *
 * Refused with -EBUSY while any mapping of /dev/beluga covers the region,
 * while any page of it is still pinned by a past mapping (io_uring, RDMA),
 * while any of its blocks is ALLOCATED or pinned, or while any is
 * PUBLISHED and BELUGA_DETACH_EVICT is not given. With
 * BELUGA_DETACH_EVICT the unpinned published blocks are evicted first;
 * if the region is still busy after that (allocated or pinned blocks), the
 * evictions stand, -EBUSY is returned and @evicted is written back.
 * -ENOENT: no region in that slot.
 *
 * The answer (@evicted) is written after the region is detached, whatever
 * the result: on -EFAULT what DETACH did stands (the region detached, or
 * the evictions of a busy one).
 */
struct beluga_detach {
	__u32 size;
	__u32 flags;
	__u32 region_id;
	__u32 __reserved;
	__aligned_u64 evicted;
};

#define BELUGA_DETACH_SIZE_V1	24
#define BELUGA_IOC_DETACH	_IO(BELUGA_TYPE, BELUGA_CMD_DETACH)

/* EVICT flags */
#define BELUGA_EVICT_NAMESPACE	_BITUL(0)

/**
 * struct beluga_evict - BELUGA_IOC_EVICT: drop published keys (admin)
 * @size: sizeof(struct beluga_evict)
 * @flags: 0 to evict @key, or BELUGA_EVICT_NAMESPACE for every key of @ns
 * @ns: in: namespace
 * @key: in: the key; must be zero with BELUGA_EVICT_NAMESPACE
 * @evicted: out: blocks evicted
 * @busy: out: blocks left in place because they are pinned
 *
 * Errors: -ENOENT the key is not present; -EBUSY the key is pinned.
 * With BELUGA_EVICT_NAMESPACE the call succeeds and reports @busy.
 * The answer (@evicted, @busy) is written after the eviction, also with
 * -ENOENT and -EBUSY: on -EFAULT the evictions stand.
 */
struct beluga_evict {
	__u32 size;
	__u32 flags;
	__aligned_u64 ns;
	struct beluga_key key;
	__aligned_u64 evicted;
	__aligned_u64 busy;
};

#define BELUGA_EVICT_SIZE_V1	48
#define BELUGA_IOC_EVICT	_IO(BELUGA_TYPE, BELUGA_CMD_EVICT)

/**
 * struct beluga_region_info - BELUGA_IOC_REGION_INFO: one region's state
 * @size: sizeof(struct beluga_region_info)
 * @flags: must be 0
 * @region_id: in: slot, 0..BELUGA_MAX_REGIONS-1
 * @backend: out: enum beluga_backend
 * @node: out: NUMA node of the memory
 * @mappings: out: VMAs of /dev/beluga mappings that count in the region.
 *	A VMA counts in every region its range covered when mmap() made it,
 *	for as long as it lives, whatever happens to its range later: each
 *	piece of a mapping split (munmap() or mprotect() of a part) or shrunk
 *	(mremap()) counts in all of them, also in regions the piece no longer
 *	covers, and so does each copy fork() makes; a mapping moved by
 *	mremap() counts once. Growing a mapping with mremap() adds no
 *	region: its pages in a region it did not cover at mmap() raise
 *	SIGBUS, like pages in holes. So DETACH, which needs 0 here, waits
 *	for every piece of every mapping that covered the region at mmap()
 *	to be unmapped, and is allowed under a mapping grown over it.
 * @phys_start: out: DAX: physical start; NODE: 0
 * @length: out: bytes claimed
 * @first_offset: out: offset of the region's first block
 * @nr_blocks: out
 * @free_blocks: out
 * @allocated_blocks: out
 * @published_blocks: out
 * @name: out
 *
 * Any file may call it. -ENOENT when no region is in the slot.
 *
 * The region of a shared pool: @nr_blocks is the pool's, and the other
 * counts are this host's view as in STATS (free and published in the
 * partitions it owns, allocated by its files); @nr_blocks minus their sum
 * are blocks of partitions other hosts own.
 */
struct beluga_region_info {
	__u32 size;
	__u32 flags;
	__u32 region_id;
	__u32 backend;
	__s32 node;
	__u32 mappings;
	__aligned_u64 phys_start;
	__aligned_u64 length;
	__aligned_u64 first_offset;
	__aligned_u64 nr_blocks;
	__aligned_u64 free_blocks;
	__aligned_u64 allocated_blocks;
	__aligned_u64 published_blocks;
	char name[BELUGA_NAME_LEN];
};

#define BELUGA_REGION_INFO_SIZE_V1	112
#define BELUGA_IOC_REGION_INFO	_IO(BELUGA_TYPE, BELUGA_CMD_REGION_INFO)

/* The most host records a shared pool has (its max_hosts is at most this). */
#define BELUGA_MAX_HOSTS	16

/* A host record's state in the shared pool. */
enum beluga_host_state {
	BELUGA_HOST_NONE = 0,	/* unused: no host joined with this id */
	BELUGA_HOST_ACTIVE = 1,	/* joined (alive or not: see the flags) */
	BELUGA_HOST_LEFT = 2,	/* detached cleanly */
};

/* struct beluga_host flags */
#define BELUGA_HOST_ALIVE	_BITUL(0)	/* heartbeat moved within the lease */
#define BELUGA_HOST_SELF	_BITUL(1)	/* the host that answers */
/* Its record carries a device lease: devices may pin (@device_fence_ms). */
#define BELUGA_HOST_DEVICE_PINS	_BITUL(2)
/* It honours other hosts' device leases (a module of format 1.3 or later). */
#define BELUGA_HOST_LEASE_AWARE	_BITUL(3)

/**
 * struct beluga_host - one host record of a shared pool (BELUGA_IOC_HOSTS)
 * @host_id: out: the record's host id, its index in the array
 * @state: out: enum beluga_host_state, as the record says
 * @flags: out: BELUGA_HOST_ALIVE, BELUGA_HOST_SELF
 * @incarnation: out: +1 at each join of this host id
 * @heartbeat: out: the record's heartbeat counter
 * @silent_ns: out: nanoseconds since this host last saw @heartbeat move
 *	(its own: since its last heartbeat)
 * @owned: out: bit p set: the host owns partition p (docs/multihost.md,
 *	section 3)
 * @name: out: the host's name (its utsname when it joined), NUL
 *	terminated, printable, no spaces; empty when it has none
 * @device_fence_ms: out: with BELUGA_HOST_DEVICE_PINS, W: the time the
 *	host's devices need to stop after its fence (its watchdog's
 *	timeout); the others wait lease + W + lease/2 of its silence. Else 0
 *	(second version of the record: see @host_size of beluga_hosts)
 * @__reserved: out: 0
 */
struct beluga_host {
	__u32 host_id;
	__u32 state;
	__u32 flags;
	__u32 incarnation;
	__aligned_u64 heartbeat;
	__aligned_u64 silent_ns;
	__aligned_u64 owned;
	char name[BELUGA_NAME_LEN];
	__u32 device_fence_ms;
	__u32 __reserved;
};

#define BELUGA_HOST_SIZE_V1	72
#define BELUGA_HOST_SIZE_V2	80	/* + @device_fence_ms, @__reserved */

/**
 * struct beluga_hosts - BELUGA_IOC_HOSTS: the hosts of a shared pool
 * @size: sizeof(struct beluga_hosts)
 * @flags: must be 0
 * @count: in: entries @hosts has room for; 0 asks for the number only.
 *	out: host records the pool has (its max_hosts, at most
 *	BELUGA_MAX_HOSTS), 0 when no shared pool is attached or this host is
 *	not joined (it is rejoining after a fence). A capacity, not a batch:
 *	any value is valid, 0 included.
 * @__reserved: must be 0
 * @hosts: in: user pointer to struct beluga_host[@count]; out there: the
 *	first min(@count in, @count out) records, in host id order. Not
 *	touched, nor checked, when nothing is written to it.
 * @host_size: in: the size of one struct beluga_host in @hosts:
 *	BELUGA_HOST_SIZE_V1 or BELUGA_HOST_SIZE_V2, or 0 for the version of
 *	this header (V2); others -EINVAL. A caller of the first version,
 *	whose struct ends before @host_size, gets V1 records. Each record is
 *	written in that size.
 * @__reserved2: must be 0
 *
 * Any file may call it; it changes nothing. The records are this host's
 * view, each read from the pool at the call (liveness is judged against
 * the pool's lease, as the host's own tick judges it).
 *
 * Errors, after the common errors (steps 1-5: -EINVAL for nonzero @flags,
 * @__reserved or @__reserved2, or an unknown @host_size): -EMSGSIZE
 * when the pool has more records than @count in: the first @count records are written to @hosts and @count is set
 * to the number of records, so a second call with that count gets them
 * all; -EFAULT when @hosts cannot be written (the struct is left as it
 * was). -ENOMEM.
 */
struct beluga_hosts {
	__u32 size;
	__u32 flags;
	__u32 count;
	__u32 __reserved;
	__aligned_u64 hosts;
	__u32 host_size;
	__u32 __reserved2;
};

#define BELUGA_HOSTS_SIZE_V1	24
#define BELUGA_HOSTS_SIZE_V2	32	/* + @host_size, @__reserved2 */
#define BELUGA_IOC_HOSTS	_IO(BELUGA_TYPE, BELUGA_CMD_HOSTS)

/* BELUGA_IOC_WATCHDOG flags: exactly one */
#define BELUGA_WATCHDOG_REGISTER	_BITUL(0)
#define BELUGA_WATCHDOG_QUERY		_BITUL(1)

/* BELUGA_IOC_WATCHDOG answers */
#define BELUGA_WATCHDOG_FEED	1	/* pet the hardware watchdog now */
#define BELUGA_WATCHDOG_HOLD	2	/* do not: devices may outlive a fence */

/* The longest watchdog timeout (W) a host may declare: 4 h 39 min. */
#define BELUGA_WATCHDOG_MAX_MS	16777215U

/**
 * struct beluga_watchdog - BELUGA_IOC_WATCHDOG: the host's watchdog daemon
 * @size: sizeof(struct beluga_watchdog)
 * @flags: BELUGA_WATCHDOG_REGISTER or BELUGA_WATCHDOG_QUERY
 * @timeout_ms: REGISTER, in: W, the timeout the daemon set on its hardware
 *	watchdog (WDIOC_SETTIMEOUT), 1 .. BELUGA_WATCHDOG_MAX_MS.
 *	QUERY, out: the registered W
 * @answer: out: BELUGA_WATCHDOG_FEED or BELUGA_WATCHDOG_HOLD
 * @device_ranges: out: device ranges declared under the pool's device
 *	lease and not yet released (BELUGA_IOC_DEVICE_RANGE on a shared
 *	pool; not those of a local pool or under mh_allow_gup, which need
 *	no fence)
 * @__reserved: must be 0
 *
 * Devices that pin a shared pool's pages (cudaHostRegister, ibv_reg_mr)
 * cannot be stopped by a fence; a hardware watchdog that resets the host
 * can (PCIe devices are reset with it). A daemon (beluga-watchdogd) opens
 * /dev/watchdog, sets its timeout W, and REGISTERs here: the calling file
 * becomes the pool's watchdog link until it is closed. It then QUERYs at
 * least every W/4 and pets the watchdog only when the answer is FEED:
 *   FEED  no shared pool is attached; or this host's heartbeat is fresh
 *         (it holds its lease); or no device range is declared and no page
 *         of the pool is referenced from outside (the refcount scan that
 *         DETACH does): a fence stopped everything there is to stop.
 *   HOLD  the host fenced itself (or stalled) while devices may still
 *         reach the pool: the watchdog fires within W, the host resets,
 *         and its devices' DMA stops before the other hosts reuse what it
 *         held (they wait lease + W + lease/2 of silence: the device lease
 *         of its record, Documentation/multihost.md section 10).
 * While no daemon is registered, DEVICE_RANGE is refused (-ENOLINK). A
 * daemon that exits must not disarm its watchdog while @device_ranges is
 * nonzero or the last answer was HOLD.
 *
 * Admin command (CAP_SYS_ADMIN). Errors, after the common errors (steps
 * 1-5: -EINVAL for flags other than exactly one of the two, a nonzero
 * @__reserved, REGISTER with @timeout_ms 0 or above the maximum, or QUERY
 * with a nonzero @timeout_ms):
 *   -EBUSY   REGISTER while another file is the pool's watchdog link, or
 *            with another W while device ranges hold the old one;
 *   -ENOLINK QUERY from a file that is not the pool's watchdog link.
 * The answer is written to the struct (-EFAULT when it cannot be).
 */
struct beluga_watchdog {
	__u32 size;
	__u32 flags;
	__u32 timeout_ms;
	__u32 answer;
	__u32 device_ranges;
	__u32 __reserved;
};

#define BELUGA_WATCHDOG_SIZE_V1	24
#define BELUGA_IOC_WATCHDOG	_IO(BELUGA_TYPE, BELUGA_CMD_WATCHDOG)

/**
 * struct beluga_device_range - BELUGA_IOC_DEVICE_RANGE: declare device pins
 * @size: sizeof(struct beluga_device_range)
 * @flags: must be 0
 * @eventfd: in: an eventfd(2) the kernel signals (adds 1) when the devices
 *	must let go of the range, or -1 for none
 * @fence_ms: out: W, how long the devices have from that signal until the
 *	host's watchdog resets it; 0 on a pool that is not shared (no signal
 *	ever comes: its pins need no fence)
 * @offset: in: start of the range in the pool's mapping, page aligned
 * @length: in: bytes, page aligned, nonzero, within map_size
 *
 * Call it before the devices pin (cudaHostRegister, ibv_reg_mr), on the
 * file whose mappings they will pin. Mappings that this file makes
 * afterwards and that lie inside the range are pinnable
 * (get_user_pages(), FOLL_LONGTERM included) on a shared pool too, where
 * other mappings refuse pins (BELUGA_IOC_ATTACH). Before it returns, the
 * host's record in the shared pool says that its devices may pin, with W:
 * the other hosts then hold this host alive, for the reuse of its blocks
 * and pins, until lease + W + lease/2 of silence.
 *
 * When the host fences itself (its lease ran out), or a host that ignores
 * device leases joins the pool, the eventfd is signalled: unregister the
 * memory from the devices (cudaHostUnregister, ibv_dereg_mr), unmap, and
 * close the file, within W. Until every device range is closed and no
 * page of the pool is referenced from outside, the host does not rejoin
 * the pool and the watchdog daemon is told HOLD, so a device that does
 * not let go in time gets the host reset. Once the last range is closed
 * and the pages are free, the record's device lease ends.
 *
 * One device range per file; it lasts until the file is released (its
 * last close(), after its last mapping is gone). Any file may declare one,
 * a read-only one included.
 *
 * Errors, after the common errors (steps 1-5: -EINVAL nonzero @flags,
 * @offset or @length not page aligned, @length 0, @eventfd below -1):
 *   -EBADF   @eventfd is not an eventfd;
 *   -ENODEV  no region is attached;
 *   -ENXIO   the range reaches past map_size;
 *   -EBUSY   this file declared a device range already;
 *   shared pools only:
 *   -ESTALE  the file was opened before a fence, or the host is fenced or
 *            rejoining (close, open again, retry);
 *   -ENOLINK no watchdog daemon is registered (BELUGA_IOC_WATCHDOG), and
 *            the module was not loaded with mh_allow_gup=1;
 *   -EPROTO  a live host of the pool runs a module that ignores device
 *            leases (on-media format older than 1.3; the kernel log names
 *            it): it would reuse this host's blocks after one lease.
 * The answer is written to the struct (-EFAULT when it cannot be; the
 * range stays declared).
 */
struct beluga_device_range {
	__u32 size;
	__u32 flags;
	__s32 eventfd;
	__u32 fence_ms;
	__aligned_u64 offset;
	__aligned_u64 length;
};

#define BELUGA_DEVICE_RANGE_SIZE_V1	32
#define BELUGA_IOC_DEVICE_RANGE	_IO(BELUGA_TYPE, BELUGA_CMD_DEVICE_RANGE)

/*
 * The index, mapped read-only
 * ---------------------------
 * A count-only LOOKUP (no pins, no offsets) can run in the caller's own
 * address space, with no system call, on a read-only mapping of the pool's
 * key index, the way the vDSO publishes the clock. It is opt-in: the
 * kernel keeps a copy of the index in mappable memory only from the first
 * BELUGA_IOC_INDEX_MAP of the pool on, and writes it as it writes the index
 * (under the same lock, in the same order).
 *
 * BELUGA_IOC_INDEX_MAP answers where to mmap() it: PROT_READ, MAP_SHARED,
 * at @offset (BELUGA_INDEX_MAP_OFFSET), @length bytes. The mapping starts
 * with a struct beluga_index_header, which says where the rest is.
 *
 * What it exposes, and to whom: every key of the pool (its namespace and
 * 128-bit key), which block holds it (a block id) and each block's index
 * sequence, to every file of that pool, read-only or not; nothing else (no
 * pins, owners, LRU order, data or kernel addresses). Another pool's index
 * is never reachable: the mapping is of the pool whose device the file
 * opened, like its blocks. What that discloses beyond LOOKUP: LOOKUP
 * answers whether a key the caller names is present; the mapping also
 * lists the keys, and shows when blocks come and go. Within a pool that
 * adds nothing a tenant boundary relies on: namespaces separate keys, not
 * memory, and any file that can map the pool can read every block's data
 * already (Pools, above); keys are hashes of that data's tokens. Tenants
 * that must not see each other's keys belong in separate pools, as they
 * already must to keep their data apart.
 *
 * Layout (byte offsets in the mapping; all little-endian host words):
 *   struct beluga_index_header at 0;
 *   __u32 buckets[@nr_buckets] at @buckets: the block id of the first
 *     entry of each hash chain, or BELUGA_INDEX_NONE;
 *   for each region slot s with @regions[s].nr_blocks != 0,
 *     struct beluga_index_entry[@regions[s].nr_blocks] at @regions[s].entries.
 * A block id is (slot << BELUGA_INDEX_SLOT_SHIFT) | (index in its region).
 * The bucket of (ns, key) is H(ns, key.lo, key.hi) & (@nr_buckets - 1),
 * where, with M(h) MurmurHash3's 64-bit finaliser (h ^= h >> 33;
 * h *= 0xff51afd7ed558ccd; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53;
 * h ^= h >> 33) and arithmetic modulo 2^64,
 *   H(ns, lo, hi) = M(M(ns * 0x9e3779b97f4a7c15 ^ hi) ^ lo)
 * (@hash == BELUGA_INDEX_HASH_MIX64; a different hash gets a new value).
 *
 * Reading it (libbeluga's beluga_lookup_count() does; it runs the module's
 * own reader, kmod/core/bel_index_read.h, compiled in userspace): entries
 * are reused at once, without waiting for readers, so every word read is
 * validated. An entry's @seq is even while it is in the index under its
 * key, odd while it is not; it changes at every insertion and removal. A
 * reader walks a chain from its bucket and, for each entry, reads @seq
 * (acquire), then @ns, @key and @next, then @seq again (after a read
 * barrier): an odd or changed @seq restarts the key from its bucket. An
 * entry whose key matches with a stable even @seq is a hit. A walk that
 * ends (@next == BELUGA_INDEX_NONE) on an entry whose key belongs to
 * another bucket was led there by a reused entry: restart. A miss counts
 * only if the header's @seq is still the even value it had when the walk
 * began. After a few restarts, or with @seq odd, the reader cannot be sure
 * and asks the kernel (BELUGA_IOC_LOOKUP).
 *
 * Sealing: the copy follows the index only while the pool's regions stay
 * as they were when it was made. An ATTACH or DETACH (and the growth of
 * the hash table that an ATTACH brings) seals it: the header's @seq
 * becomes odd for good and the kernel stops writing it. A sealed mapping
 * stays readable memory for as long as it is mapped (it never faults, also
 * after its regions are gone); its readers fall back to LOOKUP. Call
 * BELUGA_IOC_INDEX_MAP again and map anew for a live copy. Each pool has
 * one live copy at a time; a sealed one is freed when its last mapping
 * goes.
 *
 * mmap() of the index: PROT_READ only: -EACCES for PROT_WRITE (and
 * mprotect() cannot add it); -EINVAL for MAP_PRIVATE; -ENXIO when the
 * range does not start at BELUGA_INDEX_MAP_OFFSET or reaches past the
 * current copy's @length (a copy sealed and replaced since the ioctl has
 * another length: ask again); -ENODEV when no copy was made
 * (BELUGA_IOC_INDEX_MAP first) or the current one is sealed.
 *
 * Shared (multi-host) pools have no such mapping: their index is on the
 * shared media, written by every host, and LOOKUP there takes the media's
 * locks; BELUGA_IOC_INDEX_MAP fails with -EOPNOTSUPP.
 */

/* The mmap() offset of the index's copy: above any offset of the blocks. */
#define BELUGA_INDEX_MAP_OFFSET		(1ULL << 62)
#define BELUGA_INDEX_MAGIC		0x58444942U	/* "BIDX" */
#define BELUGA_INDEX_HASH_MIX64		1
#define BELUGA_INDEX_NONE		0xffffffffU
#define BELUGA_INDEX_SLOT_SHIFT		27

/**
 * struct beluga_index_region - where one region's entries are
 * @nr_blocks: entries (the region's blocks); 0: no region in this slot
 *	when the copy was made
 * @__reserved: 0
 * @first_offset: offset of the region's block 0 in the pool's mapping
 * @entries: byte offset of its struct beluga_index_entry array
 */
struct beluga_index_region {
	__u32 nr_blocks;
	__u32 __reserved;
	__aligned_u64 first_offset;
	__aligned_u64 entries;
};

/**
 * struct beluga_index_header - the start of the index's mapping
 * @magic: BELUGA_INDEX_MAGIC
 * @seq: even (0) while the copy is live; odd once it is sealed, for good
 * @nr_buckets: hash buckets, a power of two
 * @hash: BELUGA_INDEX_HASH_MIX64, the bucket function (above)
 * @length: bytes of the whole copy
 * @buckets: byte offset of the __u32 bucket array
 * @block_size: the pool's bytes per block
 * @entry_size: sizeof(struct beluga_index_entry)
 * @__reserved: 0
 * @regions: per region slot
 */
struct beluga_index_header {
	__u32 magic;
	__u32 seq;
	__u32 nr_buckets;
	__u32 hash;
	__aligned_u64 length;
	__aligned_u64 buckets;
	__aligned_u64 block_size;
	__u32 entry_size;
	__u32 __reserved;
	struct beluga_index_region regions[BELUGA_MAX_REGIONS];
};

/**
 * struct beluga_index_entry - one block's words in the index's copy
 * @ns: namespace of its key (valid only inside a stable even @seq)
 * @key: its key (likewise)
 * @seq: even while it is in the index under (@ns, @key), odd while not
 * @next: the next block id of its hash chain, or BELUGA_INDEX_NONE
 */
struct beluga_index_entry {
	__aligned_u64 ns;
	struct beluga_key key;
	__u32 seq;
	__u32 next;
};

/**
 * struct beluga_index_map - BELUGA_IOC_INDEX_MAP: map the index read-only
 * @size: sizeof(struct beluga_index_map)
 * @flags: must be 0
 * @offset: out: the mmap() offset, BELUGA_INDEX_MAP_OFFSET
 * @length: out: bytes to mmap() (the header's @length)
 *
 * Makes the pool's live copy of its index if it has none (the first call,
 * or the first after a seal), then answers where it is ("The index, mapped
 * read-only", above). Any file of the pool may call it, read-only too.
 * Making the copy holds the pool's lock while it copies the index (time
 * in proportion to the pool's blocks and hash buckets); later calls that
 * find the copy live only answer.
 *
 * Errors: -EOPNOTSUPP on a shared pool; -ENODEV while no region is
 * attached; -ENOMEM.
 */
struct beluga_index_map {
	__u32 size;
	__u32 flags;
	__aligned_u64 offset;
	__aligned_u64 length;
};

#define BELUGA_INDEX_MAP_SIZE_V1	24
#define BELUGA_IOC_INDEX_MAP	_IO(BELUGA_TYPE, BELUGA_CMD_INDEX_MAP)

/*
 * io_uring commands
 * -----------------
 * ALLOC, FREE, PUBLISH, LOOKUP (with and without BELUGA_LOOKUP_PIN) and
 * RELEASE can also be submitted through io_uring, as IORING_OP_URING_CMD
 * requests on a /dev/beluga file: many in one io_uring_enter(2), or with
 * IORING_SETUP_SQPOLL none. Each is the ioctl of the same number run by
 * the same code: the same struct, the same checks in the same order, the
 * same effects and the same answer, written to the same places. The
 * completion's @res is what the ioctl returns (0 or -errno); @res2 and a
 * CQE32's extra words are 0.
 *
 * The SQE (struct io_uring_sqe, <linux/io_uring.h>):
 *   @opcode      IORING_OP_URING_CMD
 *   @fd          the /dev/beluga file (a registered one with
 *                IOSQE_FIXED_FILE): it owns what the command allocates or
 *                pins, as with the ioctl
 *   @cmd_op      the ioctl number: BELUGA_IOC_ALLOC, BELUGA_IOC_FREE,
 *                BELUGA_IOC_PUBLISH, BELUGA_IOC_LOOKUP or BELUGA_IOC_RELEASE
 *   @cmd         the first 16 bytes of the command area hold a struct
 *                beluga_uring_cmd (below); in a 128-byte SQE
 *                (IORING_SETUP_SQE128) the other 64 bytes must be zero
 *   @uring_cmd_flags  0: IORING_URING_CMD_FIXED is refused (the commands
 *                take no registered buffers)
 *   @flags, @ioprio, @user_data, @personality: io_uring's, as for any
 *                request (IOSQE_IO_LINK orders commands; without links
 *                and drains io_uring gives no order)
 *   @addr, @len and the other fields: not read; keep them 0, for later
 *                versions
 *
 * Errors of the SQE itself come before the ioctl's, in this order:
 *   1. -ENOTTY     @cmd_op is not the exact _IO() number of a Beluga
 *                  command (the ioctl's step 1);
 *   2. -EOPNOTSUPP @cmd_op is a Beluga command that the ring does not
 *                  take (INFO, STATS, ATTACH, DETACH, EVICT, REGION_INFO,
 *                  HOSTS, INDEX_MAP, WATCHDOG, DEVICE_RANGE): use the ioctl;
 *   3. -EINVAL     IORING_URING_CMD_FIXED, a nonzero @__reserved, or a
 *                  nonzero byte in the rest of a 128-byte SQE's area.
 * Then the ioctl's common errors from step 2 on, with @arg as the ioctl's
 * argument (0 or unreadable: -EFAULT, step 4). io_uring's own errors come
 * first (a nonzero @__pad1 or unknown @uring_cmd_flags: -EINVAL; a ring
 * set up with IORING_SETUP_IOPOLL: -EOPNOTSUPP, as the commands complete
 * at once and have nothing to poll). A kernel whose io_uring has no
 * IORING_OP_URING_CMD (before 5.19) fails the request with -EINVAL, and a
 * module without these commands with -EOPNOTSUPP: fall back to the ioctls.
 *
 * Memory: @arg, the struct and the arrays it points to are the ioctl's,
 * read and written in the address space of the task that submitted the
 * request; with SQPOLL, of the task that created the ring (its SQPOLL
 * thread shares that task's memory, as for every io_uring request). They
 * must stay valid and unchanged until the completion: the command may
 * run after io_uring_enter(2) returned (below).
 *
 * Ownership and lifetime: allocations and pins belong to the file, never
 * to the ring, and are returned when the last reference to the file goes:
 * io_uring holds one while a request on it is in flight, and for a
 * registered file until it is unregistered or the ring is closed. So a
 * closed file whose ring is closed too leaks nothing; io_uring drops its
 * references asynchronously, shortly after the ring's close returns.
 *
 * Where a command runs: on a single-host pool, inline in the submitting
 * task or the SQPOLL thread, waiting on nothing but the pool's short lock
 * holds and the file's own other commands. On a shared pool, whose
 * commands wait for other hosts, and while a DETACH, an ATTACH of a
 * shared region or a shared pool's rejoin is changing the pool, io_uring
 * runs it in one of its worker threads instead, like any request that
 * would block.
 */

/**
 * struct beluga_uring_cmd - the command area of a Beluga io_uring command
 * @arg: user pointer to the command's struct: what the ioctl takes as its
 *	argument (struct beluga_alloc, beluga_blocks, beluga_publish or
 *	beluga_lookup, with its leading @size)
 * @__reserved: must be 0
 */
struct beluga_uring_cmd {
	__aligned_u64 arg;
	__aligned_u64 __reserved;
};

#endif /* _UAPI_LINUX_BELUGA_H */
