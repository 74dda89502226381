/* SPDX-License-Identifier: GPL-2.0 OR LGPL-2.1-or-later */
/*
 * The portable core's whole view of its environment, for both cores: the
 * allocator, index, LRU and client bookkeeping of a single-host pool, and
 * the shared pool's protocol (bel_mh.h, which adds the little-endian and
 * once-access helpers of its on-media format from here) use nothing but
 * what is defined here, so the same files compile into the kernel module
 * and into userspace unit tests, the multi-host simulator, fuzzers and
 * benchmarks. Dual licensed, with bel_hash.h: libbeluga compiles it
 * (bel_index_walk.h says why).
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
#include <linux/rcupdate.h>
#include <linux/prefetch.h>
#include <linux/timekeeping.h>
#include <asm/barrier.h>

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
/* One turn of a busy wait on another CPU's short critical section. */
#define bel_cpu_relax()		cpu_relax()

#define BEL_ASSERT(cond)	WARN_ON_ONCE(!(cond))

/*
 * The lock-free read path (index.c, client.c): RCU read sections, marked
 * accesses, barriers and a 32-bit compare-and-exchange on plain u32
 * fields, a monotonic clock for LRU stamps, and a prefetch hint.
 */
#define bel_rcu_read_lock()	rcu_read_lock()
#define bel_rcu_read_unlock()	rcu_read_unlock()
/* Waits for every RCU read section begun before it; may sleep. */
#define bel_synchronize_rcu()	synchronize_rcu()
/* A word another context reads or writes without the lock: no tearing. */
#define BEL_READ(x)		READ_ONCE(x)
#define BEL_WRITE(x, v)		WRITE_ONCE(x, v)
/*
 * The barriers' pairings are documented where they are used: index.c
 * (block sequence, rehash), pool.c (region publication), client.c and
 * pool.c (a retired block's last pin).
 */
#define bel_load_acquire(p)	smp_load_acquire(p)	/* pairs: see above */
#define bel_store_release(p, v)	smp_store_release(p, v)	/* pairs: see above */
#define bel_smp_mb()		smp_mb()	/* pairs: see above */
#define bel_smp_rmb()		smp_rmb()	/* pairs: see above */
#define bel_smp_wmb()		smp_wmb()	/* pairs: see above */
/* Full barrier; returns the value found at @p. */
#define bel_cmpxchg32(p, o, n)	cmpxchg((p), (o), (n))
#define bel_prefetch(p)		prefetch(p)
/* Nanoseconds, monotonic across CPUs. */
#define bel_now_ns()		ktime_get_ns()
/* Whole cache lines: kvmalloc memory is at least cache-line aligned here. */
#define bel_calloc_lines(n, size)	bel_calloc((n), (size))

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
/* sparse's lock annotations, as the kernel spells them. */
#define __acquires(...)

typedef pthread_mutex_t bel_mutex_t;
#define bel_mutex_init(m)	pthread_mutex_init((m), NULL)
#define bel_mutex_destroy(m)	pthread_mutex_destroy(m)
#define bel_mutex_lock(m)	pthread_mutex_lock(m)
#define bel_mutex_unlock(m)	pthread_mutex_unlock(m)

#define bel_calloc(n, size)	calloc((n), (size))
#define bel_kvfree(p)		free(p)

#define bel_cond_resched()	sched_yield()
/* The other thread may not be running: let it. */
#define bel_cpu_relax()		sched_yield()

#define BEL_ASSERT(cond)	assert(cond)

#ifndef BEL_ENV_NO_RCU
/*
 * RCU in userspace: Debian's liburcu, "bulletproof" flavour (urcu-bp),
 * which needs no per-thread registration, so that any thread of a test,
 * benchmark or Python binding may call the core. Link with -lurcu-bp.
 * Marked accesses are relaxed atomics, so that ThreadSanitizer sees the
 * lock-free reads as the intended races they are.
 */
#include <time.h>
#include <urcu-bp.h>
#define bel_rcu_read_lock()	urcu_bp_read_lock()
#define bel_rcu_read_unlock()	urcu_bp_read_unlock()
#define bel_synchronize_rcu()	urcu_bp_synchronize_rcu()
#endif /* BEL_ENV_NO_RCU: libbeluga's reader of the index copy needs none */
#define BEL_READ(x)		__atomic_load_n(&(x), __ATOMIC_RELAXED)
#define BEL_WRITE(x, v)		__atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define bel_load_acquire(p)	__atomic_load_n((p), __ATOMIC_ACQUIRE)
#define bel_store_release(p, v)	__atomic_store_n((p), (v), __ATOMIC_RELEASE)
#ifdef __SANITIZE_THREAD__
/*
 * ThreadSanitizer refuses fences; a locked read-modify-write of a dummy is
 * one on x86 and to the compiler, and every access the fences order is
 * atomic already, so TSan has no race to report either way.
 */
static inline void bel_tsan_fence(void)
{
	static int dummy;

	__atomic_fetch_add(&dummy, 0, __ATOMIC_SEQ_CST);
}

#define bel_smp_mb()		bel_tsan_fence()
#define bel_smp_rmb()		bel_tsan_fence()
#define bel_smp_wmb()		bel_tsan_fence()
#else
#define bel_smp_mb()		__atomic_thread_fence(__ATOMIC_SEQ_CST)
#define bel_smp_rmb()		__atomic_thread_fence(__ATOMIC_ACQUIRE)
#define bel_smp_wmb()		__atomic_thread_fence(__ATOMIC_RELEASE)
#endif
static inline u32 bel_cmpxchg32(u32 *p, u32 o, u32 n)
{
	__atomic_compare_exchange_n(p, &o, n, false, __ATOMIC_SEQ_CST,
				    __ATOMIC_SEQ_CST);
	return o;
}

#define bel_prefetch(p)		__builtin_prefetch(p)

static inline u64 bel_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (u64)ts.tv_sec * 1000000000ULL + (u64)ts.tv_nsec;
}

/* Zeroed, 64-byte aligned: one struct of 64 bytes per cache line. */
static inline void *bel_calloc_lines(size_t n, size_t size)
{
	size_t bytes;
	void *p;

	if (size && n > SIZE_MAX / size)
		return NULL;
	bytes = n * size;
	if (posix_memalign(&p, 64, bytes > 0 ? bytes : 64))
		return NULL;
	memset(p, 0, bytes);
	return p;
}

/* No tracepoints in userspace: the arguments are not even evaluated. */
#define bel_trace_evict(...)		do { } while (0)
#define bel_trace_mh_evict(...)		do { } while (0)

#endif /* __KERNEL__ */

#endif /* BEL_ENV_H */
