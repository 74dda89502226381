/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The portable core's whole view of its environment, for both cores: the
 * allocator, index, LRU and client bookkeeping of a single-host pool, and
 * the shared pool's protocol (bel_mh.h, which adds the little-endian and
 * once-access helpers of its on-media format from here) use nothing but
 * what is defined here, so the same files compile into the kernel module
 * and into userspace unit tests, the multi-host simulator, fuzzers and
 * benchmarks.
 */
#ifndef BEL_ENV_H
#define BEL_ENV_H

#ifdef __KERNEL__

#include <linux/types.h>
#include <linux/errno.h>
#include <linux/string.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/spinlock.h>
#include <linux/mutex.h>
#include <linux/overflow.h>
#include <linux/sched.h>
#include <linux/stddef.h>
#include <linux/build_bug.h>
#include <linux/compiler.h>
#include <linux/math64.h>
#include <asm/byteorder.h>

/* A word another context reads or writes without the lock: no tearing. */
#define BEL_READ_ONCE(x)	READ_ONCE(x)
#define BEL_WRITE_ONCE(x, v)	WRITE_ONCE(x, v)

/* 64-bit division; 32-bit kernels have no native one. */
static inline u64 bel_div64(u64 a, u64 b)
{
	return div64_u64(a, b);
}

/* Short critical sections, never sleeps inside: a spinlock. */
typedef spinlock_t bel_spinlock_t;
#define bel_spin_init(l)	spin_lock_init(l)
#define bel_spin_destroy(l)	do { } while (0)
#define bel_spin_lock(l)	spin_lock(l)
#define bel_spin_unlock(l)	spin_unlock(l)

/* Serialises one client's calls; may be held across allocations. */
typedef struct mutex bel_mutex_t;
#define bel_mutex_init(m)	mutex_init(m)
#define bel_mutex_destroy(m)	mutex_destroy(m)
#define bel_mutex_lock(m)	mutex_lock(m)
#define bel_mutex_unlock(m)	mutex_unlock(m)

/* May sleep; never called with a bel_spinlock_t held. */
#define bel_calloc(n, size)	kvcalloc((n), (size), GFP_KERNEL_ACCOUNT)
#define bel_kvfree(p)		kvfree(p)

/* Lets other tasks run between chunks of a long walk; process context. */
#define bel_cond_resched()	cond_resched()

#define BEL_ASSERT(cond)	WARN_ON_ONCE(!(cond))

/*
 * Tracepoint hooks: what only the core sees of the block lifecycle, an
 * eviction inside ALLOC or EVICT. The glue implements them (kmod/trace.c)
 * with the module's tracepoints; they may be called under the pool lock
 * or a shared pool's host mutex and never sleep.
 */
struct bel_pool;
struct bel_mh_host;
void bel_env_trace_evict(struct bel_pool *pool, u64 offset, u64 ns,
			 u64 key_lo, u64 key_hi);
void bel_env_trace_mh_evict(struct bel_mh_host *h, u32 block, u64 ns,
			    u64 key_lo, u64 key_hi);
#define bel_trace_evict(pool, offset, ns, key_lo, key_hi)		\
	bel_env_trace_evict(pool, offset, ns, key_lo, key_hi)
#define bel_trace_mh_evict(h, block, ns, key_lo, key_hi)		\
	bel_env_trace_mh_evict(h, block, ns, key_lo, key_hi)

#else /* userspace */

#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <assert.h>
#include <pthread.h>
#include <sched.h>
#include <endian.h>
#include <linux/types.h>
#include <linux/stddef.h>

/* <linux/stddef.h>'s, as the kernel defines it on the uapi's helper. */
#define struct_group_tagged(TAG, NAME, MEMBERS...) \
	__struct_group(TAG, NAME, /* no attrs */, MEMBERS)

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int32_t s32;
typedef int64_t s64;

/* The kernel's byte-order helpers, for the shared pool's on-media fields. */
#define cpu_to_le16(x)	((__le16)htole16(x))
#define cpu_to_le32(x)	((__le32)htole32(x))
#define cpu_to_le64(x)	((__le64)htole64(x))
#define le16_to_cpu(x)	((u16)le16toh(x))
#define le32_to_cpu(x)	((u32)le32toh(x))
#define le64_to_cpu(x)	((u64)le64toh(x))

#define BEL_READ_ONCE(x)	__atomic_load_n(&(x), __ATOMIC_RELAXED)
#define BEL_WRITE_ONCE(x, v)	__atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

static inline u64 bel_div64(u64 a, u64 b)
{
	return a / b;
}

typedef pthread_mutex_t bel_spinlock_t;
#define bel_spin_init(l)	pthread_mutex_init((l), NULL)
#define bel_spin_destroy(l)	pthread_mutex_destroy(l)
#ifdef BEL_TEST_LOCK_HOOK
/*
 * Unit tests only (tests/unit/Makefile): the test defines this hook, which
 * runs before each acquisition with the lock not held by the caller, so it
 * can count acquisitions and run other pool operations at that point.
 */
void bel_test_before_spin_lock(bel_spinlock_t *l);
static inline void bel_spin_lock(bel_spinlock_t *l)
{
	bel_test_before_spin_lock(l);
	pthread_mutex_lock(l);
}
#else
#define bel_spin_lock(l)	pthread_mutex_lock(l)
#endif
#define bel_spin_unlock(l)	pthread_mutex_unlock(l)

typedef pthread_mutex_t bel_mutex_t;
#define bel_mutex_init(m)	pthread_mutex_init((m), NULL)
#define bel_mutex_destroy(m)	pthread_mutex_destroy(m)
#define bel_mutex_lock(m)	pthread_mutex_lock(m)
#define bel_mutex_unlock(m)	pthread_mutex_unlock(m)

#define bel_calloc(n, size)	calloc((n), (size))
#define bel_kvfree(p)		free(p)

#define bel_cond_resched()	sched_yield()

#define BEL_ASSERT(cond)	assert(cond)

/* No tracepoints in userspace: the arguments are not even evaluated. */
#define bel_trace_evict(...)		do { } while (0)
#define bel_trace_mh_evict(...)		do { } while (0)

#endif /* __KERNEL__ */

#endif /* BEL_ENV_H */
