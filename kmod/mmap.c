// SPDX-License-Identifier: GPL-2.0
/*
 * Mapping the pool. The offset space of /dev/beluga is the concatenation of
 * the attached regions (with holes where regions were detached). A mapping
 * is served only from the regions that existed when it was made: it counts
 * itself in each of them, which is what keeps DETACH away, and a fault
 * anywhere else is SIGBUS.
 *
 * Device-dax pages are inserted as devmap PFNs, as device_dax itself does,
 * with 2 MiB entries where the address, the offset and the physical range
 * are all 2 MiB aligned. Node pages are ordinary pages returned from the
 * fault handler. Neither uses VM_PFNMAP or VM_IO, so get_user_pages() and
 * FOLL_LONGTERM pins work on every mapping of a local pool.
 *
 * A mapping that must refuse pins (a shared pool's, unless mh_allow_gup:
 * the pool ops' mmap adds VM_IO, mh.c) gets special entries instead: the
 * same PFNs without PFN_MAP. VM_IO alone stops only the slow path of
 * get_user_pages(); get_user_pages_fast() walks the page tables without
 * looking at the VMA and takes the page of any devmap entry for every pin
 * but FOLL_LONGTERM (O_DIRECT, vmsplice). It leaves special entries to the
 * slow path, which refuses VM_IO with -EFAULT. 2 MiB special entries
 * exist since 6.12 (compat.h); before, such a mapping is served with
 * 4 KiB entries only. The cost: memory_failure() finds the mappers of a
 * device page through devmap entries only (poison.c).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/mm.h>
#include <linux/huge_mm.h>
#include <linux/mman.h>
#include <linux/pfn_t.h>
#include <linux/sched/mm.h>

#include "beluga_glue.h"
#include "beluga_trace.h"

/* vm_private_data: the bitmask of region slots the mapping counts in. */
static unsigned long beluga_vma_slots(struct vm_area_struct *vma)
{
	return (unsigned long)vma->vm_private_data;
}

static void beluga_count_mappings(struct beluga_device *dev,
				  unsigned long slots, int delta)
{
	unsigned long slot;

	for_each_set_bit(slot, &slots, BELUGA_MAX_REGIONS)
		atomic_add(delta, &READ_ONCE(dev->regions[slot])->mappings);
}

/* A VMA was split or copied (fork, mremap): the copy counts too. */
static void beluga_vm_open(struct vm_area_struct *vma)
{
	beluga_count_mappings(beluga_file_dev(vma->vm_file),
			      beluga_vma_slots(vma), 1);
}

static void beluga_vm_close(struct vm_area_struct *vma)
{
	beluga_count_mappings(beluga_file_dev(vma->vm_file),
			      beluga_vma_slots(vma), -1);
}

/*
 * Region and byte offset inside it behind @offset, if the VMA may use it.
 * No lock: bel_pool_find_offset() reads the core's region table without
 * one (kmod/core/pool.c), and a region in the VMA's slots cannot be
 * detached while the VMA counts itself in it, so dev->regions[slot] and
 * its fields stay put for the whole fault. Faults of different processes
 * thus share nothing but the page tables they fill.
 */
static struct beluga_region *beluga_vma_region(struct vm_area_struct *vma,
					       u64 offset, u64 *region_offset)
{
	struct beluga_device *dev = beluga_file_dev(vma->vm_file);
	u32 slot;

	if (bel_pool_find_offset(&dev->pool, offset, &slot, region_offset))
		return NULL;
	if (!(beluga_vma_slots(vma) & BIT(slot)))
		return NULL;
	return READ_ONCE(dev->regions[slot]);
}

static phys_addr_t beluga_dax_phys(struct beluga_region *region,
				   u64 region_offset)
{
	return region->phys_start + region->data_off + region_offset;
}

/* A mapping that refuses pins (VM_IO: see the top of this file). */
static bool beluga_vma_refuses_pins(struct vm_area_struct *vma)
{
	return vma->vm_flags & VM_IO;
}

/* The entry for @phys in @vma: devmap, or special where pins are refused. */
static pfn_t beluga_dax_pfn(struct vm_area_struct *vma, phys_addr_t phys)
{
	return phys_to_pfn_t(phys, beluga_vma_refuses_pins(vma) ?
				   PFN_DEV : PFN_DEV | PFN_MAP);
}

/*
 * The pool's kind may check each fault (a shared pool's fence, mh.c):
 * false raises SIGBUS; after a true one the page is inserted before
 * beluga_fault_end().
 */
static bool beluga_fault_begin(struct vm_area_struct *vma,
			       struct beluga_region *region)
{
	return !region->ops->fault_begin ||
	       region->ops->fault_begin(vma->vm_file->private_data, region);
}

static void beluga_fault_end(struct vm_area_struct *vma,
			     struct beluga_region *region)
{
	if (region->ops->fault_end)
		region->ops->fault_end(vma->vm_file->private_data, region);
}

static vm_fault_t beluga_pte_fault(struct vm_fault *vmf)
{
	struct beluga_region *region;
	struct page *page;
	u64 region_offset;
	vm_fault_t ret;

	region = beluga_vma_region(vmf->vma, (u64)vmf->pgoff << PAGE_SHIFT,
				   &region_offset);
	if (!region)
		return VM_FAULT_SIGBUS;
	if (region->backend == BELUGA_BACKEND_DAX)
		page = pfn_to_page(PHYS_PFN(beluga_dax_phys(region,
							    region_offset)));
	else
		page = region->pages[region_offset >> PAGE_SHIFT];
	/* Poisoned: SIGBUS BUS_MCEERR_AR at the address (poison.c). */
	if (beluga_poison_fault(region, region_offset, page))
		return VM_FAULT_HWPOISON;
	if (!beluga_fault_begin(vmf->vma, region))
		return VM_FAULT_SIGBUS;

	atomic64_inc(&region->dev->pte_faults);
	if (region->backend == BELUGA_BACKEND_DAX) {
		ret = vmf_insert_mixed(vmf->vma, vmf->address,
				       beluga_dax_pfn(vmf->vma,
						      beluga_dax_phys(region,
								      region_offset)));
		beluga_fault_end(vmf->vma, region);
		return ret;
	}

	/*
	 * The core inserts a returned page after this: a pool kind whose
	 * faults need the check around the insert has DAX regions only
	 * (a shared pool).
	 */
	get_page(page);
	vmf->page = page;
	beluga_fault_end(vmf->vma, region);
	return 0;
}

static vm_fault_t beluga_pmd_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	unsigned long haddr = vmf->address & PMD_MASK;
	struct beluga_region *region;
	u64 offset, region_offset, usable;
	phys_addr_t phys;
	vm_fault_t ret;

	if (haddr < vma->vm_start || haddr + PMD_SIZE > vma->vm_end)
		return VM_FAULT_FALLBACK;
	/* A 2 MiB entry without PFN_MAP is special only since 6.12. */
	if (beluga_vma_refuses_pins(vma) && !BELUGA_HAVE_SPECIAL_PMD)
		return VM_FAULT_FALLBACK;
	offset = ((u64)vma->vm_pgoff << PAGE_SHIFT) + (haddr - vma->vm_start);
	if (!IS_ALIGNED(offset, PMD_SIZE))
		return VM_FAULT_FALLBACK;
	region = beluga_vma_region(vma, offset, &region_offset);
	if (!region || region->backend != BELUGA_BACKEND_DAX)
		return VM_FAULT_FALLBACK;
	usable = (u64)region->nr_blocks * region->dev->pool.block_size;
	phys = beluga_dax_phys(region, region_offset);
	if (region_offset + PMD_SIZE > usable || !IS_ALIGNED(phys, PMD_SIZE))
		return VM_FAULT_FALLBACK;
	/* Page by page, so that only the poisoned page raises SIGBUS. */
	if (beluga_poison_in_range(PHYS_PFN(phys), PMD_SIZE >> PAGE_SHIFT))
		return VM_FAULT_FALLBACK;

	if (!beluga_fault_begin(vma, region))
		return VM_FAULT_SIGBUS;
	atomic64_inc(&region->dev->pmd_faults);
	ret = vmf_insert_pfn_pmd(vmf, beluga_dax_pfn(vma, phys),
				 vmf->flags & FAULT_FLAG_WRITE);
	beluga_fault_end(vma, region);
	return ret;
}

static void beluga_trace_fault(struct vm_fault *vmf, u64 offset,
			       unsigned int order, vm_fault_t ret)
{
	trace_beluga_fault(beluga_pool_id(beluga_file_dev(vmf->vma->vm_file)),
			   offset, vmf->address, order,
			   vmf->flags & FAULT_FLAG_WRITE, (__force unsigned int)ret);
}

static vm_fault_t beluga_fault(struct vm_fault *vmf)
{
	vm_fault_t ret = beluga_pte_fault(vmf);

	beluga_trace_fault(vmf, (u64)vmf->pgoff << PAGE_SHIFT, 0, ret);
	return ret;
}

static vm_fault_t beluga_huge_fault(BELUGA_HUGE_FAULT_ARGS)
{
	vm_fault_t ret;

	if (!BELUGA_HUGE_FAULT_IS_PMD)
		return VM_FAULT_FALLBACK;
	ret = beluga_pmd_fault(vmf);
	beluga_trace_fault(vmf, ((u64)vmf->pgoff << PAGE_SHIFT) & PMD_MASK,
			   PMD_SHIFT - PAGE_SHIFT, ret);
	return ret;
}

static const struct vm_operations_struct beluga_vm_ops = {
	.open = beluga_vm_open,
	.close = beluga_vm_close,
	.fault = beluga_fault,
	.huge_fault = beluga_huge_fault,
};

int beluga_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct beluga_device *dev = beluga_file_dev(file);
	u64 start, len = vma->vm_end - vma->vm_start, map_size;
	unsigned long slots = 0;
	int ret = 0;
	u32 slot;

	/* A read-only MAP_SHARED loses VM_SHARED but keeps VM_MAYSHARE. */
	if (!(vma->vm_flags & VM_MAYSHARE))
		return -EINVAL;
	if (vma->vm_pgoff > (U64_MAX >> PAGE_SHIFT))
		return -ENXIO;
	start = (u64)vma->vm_pgoff << PAGE_SHIFT;

	down_read(&dev->regions_rwsem);
	map_size = bel_pool_map_size(&dev->pool);
	if (!map_size) {
		ret = -ENODEV;
		goto out;
	}
	/* The pool's kind may refuse (-ESTALE) or add flags (mh.c). */
	if (dev->ops->mmap) {
		ret = dev->ops->mmap(file->private_data, vma);
		if (ret)
			goto out;
	}
	if (start >= map_size || len > map_size - start) {
		ret = -ENXIO;
		goto out;
	}
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		struct beluga_region *r = dev->regions[slot];

		if (r && r->first_offset < start + len &&
		    start < r->first_offset + r->length)
			slots |= BIT(slot);
	}
	/* Counted under regions_rwsem, so DETACH sees it or refuses first. */
	beluga_count_mappings(dev, slots, 1);
	vma->vm_private_data = (void *)slots;
	vma->vm_ops = &beluga_vm_ops;
	/*
	 * VM_MIXEDMAP: the VMA holds both devmap PFNs (no rmap, no page
	 * reference, like device_dax) and ordinary pages; it makes the zap
	 * path treat 2 MiB entries as special instead of as THP folios. Not
	 * VM_PFNMAP or VM_IO: those would refuse get_user_pages() (a shared
	 * pool adds VM_IO on purpose, above).
	 * Pools are large and shared: keep them out of core dumps.
	 */
	vm_flags_set(vma, VM_MIXEDMAP | VM_HUGEPAGE | VM_DONTDUMP);
out:
	up_read(&dev->regions_rwsem);
	return ret;
}

/*
 * Place mappings whose offset is 2 MiB aligned on a 2 MiB aligned address,
 * so that device-dax regions can be mapped with PMD entries.
 */
unsigned long beluga_get_unmapped_area(struct file *file, unsigned long addr,
				       unsigned long len, unsigned long pgoff,
				       unsigned long flags)
{
	unsigned long padded, area;

	if ((flags & MAP_FIXED) || len < PMD_SIZE ||
	    !IS_ALIGNED(pgoff, PMD_SIZE >> PAGE_SHIFT))
		goto fallback;
	padded = len + PMD_SIZE;
	if (padded < len)
		goto fallback;
	area = mm_get_unmapped_area(current->mm, file, addr, padded, pgoff,
				    flags);
	if (IS_ERR_VALUE(area))
		goto fallback;
	return ALIGN(area, PMD_SIZE);
fallback:
	return mm_get_unmapped_area(current->mm, file, addr, len, pgoff, flags);
}
