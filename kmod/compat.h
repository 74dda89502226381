/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Kernel API differences between the kernels Beluga supports (6.1 to 6.12).
 * Version checks live here only; the rest of the module is written against
 * the newest API.
 */
#ifndef BELUGA_COMPAT_H
#define BELUGA_COMPAT_H

#include <linux/mm.h>
#include <linux/version.h>

#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 3, 0)
static inline void vm_flags_set(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags |= flags;
}

static inline void vm_flags_clear(struct vm_area_struct *vma,
				  vm_flags_t flags)
{
	vma->vm_flags &= ~flags;
}
#endif

/* vm_operations_struct.huge_fault took an enum before 6.6, an order since. */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 6, 0)
#define BELUGA_HUGE_FAULT_ARGS	struct vm_fault *vmf, enum page_entry_size pe_size
#define BELUGA_HUGE_FAULT_IS_PMD	(pe_size == PE_SIZE_PMD)
#else
#define BELUGA_HUGE_FAULT_ARGS	struct vm_fault *vmf, unsigned int order
#define BELUGA_HUGE_FAULT_IS_PMD	(order == PMD_ORDER)
#endif

/*
 * Special 2 MiB entries: since 6.12 (huge pfnmaps), vmf_insert_pfn_pmd() of
 * a pfn without PFN_MAP makes a pmd_special() entry, which
 * get_user_pages_fast() leaves to the slow path. Before, it makes a plain
 * huge entry whose page the fast path takes (mmap.c).
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 12, 0) && \
	defined(CONFIG_ARCH_SUPPORTS_PMD_PFNMAP)
#define BELUGA_HAVE_SPECIAL_PMD	1
#else
#define BELUGA_HAVE_SPECIAL_PMD	0
#endif

/* eventfd_signal() lost its count in 6.8 (it always added 1). */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 8, 0)
#define beluga_eventfd_signal(ctx)	eventfd_signal(ctx, 1)
#else
#define beluga_eventfd_signal(ctx)	eventfd_signal(ctx)
#endif

/* mm->get_unmapped_area went away in 6.10 for mm_get_unmapped_area(). */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 10, 0)
static inline unsigned long
mm_get_unmapped_area(struct mm_struct *mm, struct file *file,
		     unsigned long addr, unsigned long len,
		     unsigned long pgoff, unsigned long flags)
{
	return mm->get_unmapped_area(file, addr, len, pgoff, flags);
}
#endif

/*
 * io_uring passthrough commands (ioctl.c). Since 6.8 the API is in
 * <linux/io_uring/cmd.h>, with the IO_URING_F_* issue flags in
 * <linux/io_uring_types.h>; before, both are in <linux/io_uring.h>. Only
 * ioctl.c includes it, by this name (a string: the token "linux" is a
 * macro): those headers reach far (blkdev.h declares block_size()), and
 * the other files need none of them.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 8, 0)
#define BELUGA_IO_URING_CMD_H	"linux/io_uring/cmd.h"
#else
#define BELUGA_IO_URING_CMD_H	"linux/io_uring.h"
#endif

/*
 * The command area of a struct io_uring_cmd's SQE. Since 6.4 the command
 * sees the whole SQE (@sqe; the area through io_uring_sqe_cmd()); 6.1 to
 * 6.3 hand it the area itself (@cmd).
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 4, 0)
#define beluga_uring_cmd_area(ioucmd)	io_uring_sqe_cmd((ioucmd)->sqe)
#else
#define beluga_uring_cmd_area(ioucmd)	((ioucmd)->cmd)
#endif

#endif /* BELUGA_COMPAT_H */
