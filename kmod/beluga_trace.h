/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Tracepoints of the block lifecycle, for an operator who watches a pool
 * with perf trace -e 'beluga:*', bpftrace or tracefs (README, "Watching a
 * pool"). One event per command (ALLOC, FREE, PUBLISH, LOOKUP, RELEASE),
 * with its counts and result, so that a 4096-item batch costs one event;
 * one per evicted block (the eviction happens inside ALLOC or EVICT, under
 * the pool lock), per page fault served, and per fence of a shared pool's
 * host. @pool is the pool's number: 0 for /dev/beluga, N for /dev/belugaN.
 *
 * The fields are part of what operators script against: add fields, do
 * not rename or remove them.
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM beluga

#if !defined(BELUGA_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define BELUGA_TRACE_H

#include <linux/tracepoint.h>
#include <linux/types.h>

/* ALLOC, FREE, RELEASE: @first is the first offset of the list. */
DECLARE_EVENT_CLASS(beluga_blocks,
		    TP_PROTO(int pool, u32 count, u64 first, int ret),
		    TP_ARGS(pool, count, first, ret),
		    TP_STRUCT__entry(__field(int, pool)
				     __field(u32, count)
				     __field(u64, first)
				     __field(int, ret)),
		    TP_fast_assign(__entry->pool = pool;
				   __entry->count = count;
				   __entry->first = first;
				   __entry->ret = ret;),
		    TP_printk("pool=%d count=%u first=0x%llx ret=%d",
			      __entry->pool, __entry->count, __entry->first,
			      __entry->ret)
);

/* ALLOC: @first is the first block handed out, 0 when it failed. */
DEFINE_EVENT(beluga_blocks, beluga_alloc,
	     TP_PROTO(int pool, u32 count, u64 first, int ret),
	     TP_ARGS(pool, count, first, ret)
);

DEFINE_EVENT(beluga_blocks, beluga_free,
	     TP_PROTO(int pool, u32 count, u64 first, int ret),
	     TP_ARGS(pool, count, first, ret)
);

DEFINE_EVENT(beluga_blocks, beluga_release,
	     TP_PROTO(int pool, u32 count, u64 first, int ret),
	     TP_ARGS(pool, count, first, ret)
);

/* PUBLISH: the items' results, counted as the uapi struct counts them. */
TRACE_EVENT(beluga_publish,
	    TP_PROTO(int pool, u64 ns, u32 count, u32 published, u32 exists,
		     u32 failed, int ret),
	    TP_ARGS(pool, ns, count, published, exists, failed, ret),
	    TP_STRUCT__entry(__field(int, pool)
			     __field(u64, ns)
			     __field(u32, count)
			     __field(u32, published)
			     __field(u32, exists)
			     __field(u32, failed)
			     __field(int, ret)),
	    TP_fast_assign(__entry->pool = pool;
			   __entry->ns = ns;
			   __entry->count = count;
			   __entry->published = published;
			   __entry->exists = exists;
			   __entry->failed = failed;
			   __entry->ret = ret;),
	    TP_printk("pool=%d ns=0x%llx count=%u published=%u exists=%u failed=%u ret=%d",
		      __entry->pool, __entry->ns, __entry->count,
		      __entry->published, __entry->exists, __entry->failed,
		      __entry->ret)
);

/* LOOKUP: @hits is the leading run found, @misses the keys after it. */
TRACE_EVENT(beluga_lookup,
	    TP_PROTO(int pool, u64 ns, u32 count, u32 hits, bool pin, int ret),
	    TP_ARGS(pool, ns, count, hits, pin, ret),
	    TP_STRUCT__entry(__field(int, pool)
			     __field(u64, ns)
			     __field(u32, count)
			     __field(u32, hits)
			     __field(u32, misses)
			     __field(bool, pin)
			     __field(int, ret)),
	    TP_fast_assign(__entry->pool = pool;
			   __entry->ns = ns;
			   __entry->count = count;
			   __entry->hits = hits;
			   __entry->misses = count - hits;
			   __entry->pin = pin;
			   __entry->ret = ret;),
	    TP_printk("pool=%d ns=0x%llx count=%u hits=%u misses=%u pin=%d ret=%d",
		      __entry->pool, __entry->ns, __entry->count, __entry->hits,
		      __entry->misses, __entry->pin, __entry->ret)
);

/* One published block evicted (LRU, by ALLOC; EVICT; DETACH's evict). */
TRACE_EVENT(beluga_evict,
	    TP_PROTO(int pool, u64 offset, u64 ns, u64 key_lo, u64 key_hi),
	    TP_ARGS(pool, offset, ns, key_lo, key_hi),
	    TP_STRUCT__entry(__field(int, pool)
			     __field(u64, offset)
			     __field(u64, ns)
			     __field(u64, key_lo)
			     __field(u64, key_hi)),
	    TP_fast_assign(__entry->pool = pool;
			   __entry->offset = offset;
			   __entry->ns = ns;
			   __entry->key_lo = key_lo;
			   __entry->key_hi = key_hi;),
	    TP_printk("pool=%d offset=0x%llx ns=0x%llx key=%016llx%016llx",
		      __entry->pool, __entry->offset, __entry->ns,
		      __entry->key_hi, __entry->key_lo)
);

/*
 * A page fault on a pool mapping: @offset in the pool's offset space,
 * @order 0 for a page, PMD_ORDER for a 2 MiB entry, @ret the vm_fault_t
 * (0 or VM_FAULT_NOPAGE served; VM_FAULT_FALLBACK, SIGBUS, HWPOISON).
 */
TRACE_EVENT(beluga_fault,
	    TP_PROTO(int pool, u64 offset, unsigned long address,
		     unsigned int order, bool write, unsigned int ret),
	    TP_ARGS(pool, offset, address, order, write, ret),
	    TP_STRUCT__entry(__field(int, pool)
			     __field(u64, offset)
			     __field(unsigned long, address)
			     __field(unsigned int, order)
			     __field(bool, write)
			     __field(unsigned int, ret)),
	    TP_fast_assign(__entry->pool = pool;
			   __entry->offset = offset;
			   __entry->address = address;
			   __entry->order = order;
			   __entry->write = write;
			   __entry->ret = ret;),
	    TP_printk("pool=%d offset=0x%llx address=0x%lx order=%u write=%d ret=0x%x",
		      __entry->pool, __entry->offset, __entry->address,
		      __entry->order, __entry->write, __entry->ret)
);

/*
 * The shared pool's host lost its lease and fenced itself: mappings are
 * zapped, files opened before @epoch are stale.
 */
TRACE_EVENT(beluga_fence,
	    TP_PROTO(int pool, u32 host_id, u32 epoch),
	    TP_ARGS(pool, host_id, epoch),
	    TP_STRUCT__entry(__field(int, pool)
			     __field(u32, host_id)
			     __field(u32, epoch)),
	    TP_fast_assign(__entry->pool = pool;
			   __entry->host_id = host_id;
			   __entry->epoch = epoch;),
	    TP_printk("pool=%d host=%u epoch=%u", __entry->pool,
		      __entry->host_id, __entry->epoch)
);

#endif /* BELUGA_TRACE_H */

/* Out of tree: define_trace.h finds this file through these. */
#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE beluga_trace
#include <trace/define_trace.h>
