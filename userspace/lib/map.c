// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libbeluga: mapping the pool, offset -> pointer, and CPU cache
 * maintenance for the non-coherent multi-host case.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

/*
 * 2 MiB: the huge page size on x86-64 and arm64 (4K granule). The module
 * can only back the mapping with PMD entries when the user address is
 * aligned like the region, so the library places the mapping itself.
 */
#define BEL_MAP_ALIGN	(2UL << 20)

BEL_EXPORT int beluga_map(struct beluga *b)
{
	struct beluga_info info;
	uintptr_t reserved, aligned;
	size_t length, slack;
	void *p;
	int prot, ret;

	ret = beluga_info(b, &info);
	if (ret)
		return ret;
	if (!info.map_size || !info.nr_regions)
		return bel_fail(b, -ENODEV,
				"nothing to map: no region attached: " BEL_FIX_ATTACH);
	if (info.map_size > SIZE_MAX - BEL_MAP_ALIGN)
		return bel_fail(b, -EOVERFLOW, "map size %" PRIu64 " does not fit the address "
				"space: map the pool from a 64-bit process",
				(uint64_t)info.map_size);
	length = (size_t)info.map_size;

	beluga_unmap(b);

	/*
	 * Reserve length + 2 MiB of address space, put the real mapping at
	 * the first 2 MiB boundary inside it, and give back the slack on
	 * both sides. PROT_NONE + MAP_NORESERVE costs no memory.
	 */
	p = mmap(NULL, length + BEL_MAP_ALIGN, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return bel_fail(b, -errno,
				"cannot reserve %zu bytes of address space for the pool: %s "
				"(check `ulimit -v`)", length, strerror(errno));
	reserved = (uintptr_t)p;
	aligned = (reserved + BEL_MAP_ALIGN - 1) & ~(uintptr_t)(BEL_MAP_ALIGN - 1);

	prot = PROT_READ | (b->flags == O_RDWR ? PROT_WRITE : 0);
	p = bel_mmap((void *)aligned, length, prot, MAP_SHARED | MAP_FIXED, b->fd, 0);
	if (p == MAP_FAILED) {
		ret = -errno;
		munmap((void *)reserved, length + BEL_MAP_ALIGN);
		if (ret == -EINVAL || ret == -EBUSY)
			return bel_fail(b, ret,
					"mmap of %s (%zu bytes) refused: %s: the pool changed "
					"(a region was detached?); retry beluga_map()",
					b->path, length, strerror(-ret));
		return bel_fail(b, ret, "mmap of %s (%zu bytes) failed: %s: " BEL_FIX_DMESG,
				b->path, length, strerror(-ret));
	}
	slack = aligned - reserved;
	if (slack)
		munmap((void *)reserved, slack);
	if (BEL_MAP_ALIGN - slack)
		munmap((void *)(aligned + length), BEL_MAP_ALIGN - slack);

	b->map_base = p;
	b->map_length = length;
	/* Made after the device range: pins take it where the range covers it. */
	b->map_pinnable = b->range_declared && !b->range_offset && b->range_length >= length;
	return 0;
}

int bel_map_again(struct beluga *b)
{
	int prot = PROT_READ | (b->flags == O_RDWR ? PROT_WRITE : 0), ret;
	void *p;

	p = bel_mmap(b->map_base, b->map_length, prot, MAP_SHARED | MAP_FIXED, b->fd, 0);
	if (p == b->map_base) {
		b->map_pinnable = 1;
		return 0;
	}
	ret = p == MAP_FAILED ? -errno : -EFAULT;
	/* A failed MAP_FIXED may have taken the old mapping down already. */
	if (p != MAP_FAILED)
		munmap(p, b->map_length);
	munmap(b->map_base, b->map_length);
	b->map_base = NULL;
	b->map_length = 0;
	b->map_pinnable = 0;
	if (ret == -ESTALE)
		return bel_fail(b, ret, "mapping %s again after declaring its device range "
				"failed: the host fenced itself from the shared pool: the handle "
				"is unmapped; close it, open the device again and retry", b->path);
	return bel_fail(b, ret, "mapping %s again after declaring its device range failed: "
			"%s: the handle is unmapped; " BEL_FIX_DMESG, b->path, strerror(-ret));
}

BEL_EXPORT void beluga_unmap(struct beluga *b)
{
	if (!b->map_base)
		return;
	if (b->cuda_registered)
		beluga_cuda_unregister(b);
	munmap(b->map_base, b->map_length);
	b->map_base = NULL;
	b->map_length = 0;
	b->map_pinnable = 0;
}

BEL_EXPORT void *beluga_map_base(const struct beluga *b)
{
	return b->map_base;
}

BEL_EXPORT size_t beluga_map_length(const struct beluga *b)
{
	return b->map_length;
}

BEL_EXPORT void *beluga_ptr(const struct beluga *b, uint64_t offset)
{
	if (!b->map_base || offset >= b->map_length)
		return NULL;
	return (char *)b->map_base + offset;
}

/*
 * Cache line size for the flush loops. 64 bytes on every x86-64 and on the
 * arm64 parts that carry CXL; a smaller line than the real one would only
 * cost repeated flushes of the same line, never a missed one, as long as
 * the real line is a multiple of 64.
 */
#define BEL_CACHELINE	64UL

#if defined(__x86_64__)
#include <cpuid.h>

/*
 * CLFLUSHOPT where the CPU has it (CPUID.(EAX=7,ECX=0):EBX[23]), as the
 * kernel's clflush_cache_range() does: the same write-back and invalidate
 * as CLFLUSH, but not ordered against the other lines' flushes, so they
 * overlap. CLFLUSH one line at a time cost 160 ns a line on the bench host
 * (0.4 GB/s, below a GPU's KV production), CLFLUSHOPT 5 ns. Ordered with
 * older stores to the same line; the MFENCE after the loop waits for all.
 * -1: not asked yet (a race asks twice and gets the same answer).
 */
static int clflushopt_present = -1;

int bel_cache_flush_insn(void)
{
	int have = __atomic_load_n(&clflushopt_present, __ATOMIC_RELAXED);

	if (have < 0) {
		unsigned int a, b, c, d;

		have = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_CLFLUSHOPT);
		__atomic_store_n(&clflushopt_present, have, __ATOMIC_RELAXED);
	}
	return have ? BEL_FLUSH_CLFLUSHOPT : BEL_FLUSH_CLFLUSH;
}
#elif defined(__aarch64__)
int bel_cache_flush_insn(void)
{
	return BEL_FLUSH_DC_CIVAC;
}
#else
int bel_cache_flush_insn(void)
{
	return BEL_FLUSH_NONE;
}
#endif

static int flush_lines(const void *addr, size_t len)
{
	uintptr_t p = (uintptr_t)addr & ~(BEL_CACHELINE - 1);
	uintptr_t end = (uintptr_t)addr + len;

	if (!len)
		return 0;
#if defined(__x86_64__)
	if (bel_cache_flush_insn() == BEL_FLUSH_CLFLUSHOPT)
		for (; p < end; p += BEL_CACHELINE)
			__asm__ volatile("clflushopt %0" : "+m"(*(volatile char *)p));
	else
		for (; p < end; p += BEL_CACHELINE)
			__asm__ volatile("clflush %0" : "+m"(*(volatile char *)p));
	__asm__ volatile("mfence" ::: "memory");
	return 0;
#elif defined(__aarch64__)
	for (; p < end; p += BEL_CACHELINE)
		__asm__ volatile("dc civac, %0" : : "r"(p) : "memory");
	__asm__ volatile("dsb sy" ::: "memory");
	return 0;
#else
	(void)p;
	(void)end;
	return -EOPNOTSUPP;
#endif
}

BEL_EXPORT int beluga_flush_range(const void *addr, size_t len)
{
	return flush_lines(addr, len);
}

BEL_EXPORT int beluga_invalidate_range(const void *addr, size_t len)
{
	return flush_lines(addr, len);
}
