// SPDX-License-Identifier: GPL-2.0
/*
 * Memory errors in the pool's memory.
 *
 * How the mappers are found. memory_failure() handles a ZONE_DEVICE page
 * (device-dax) in mf_generic_kill_procs(): dax_lock_folio() (6.1:
 * dax_lock_page()) must see a folio->mapping whose host is a dax
 * char-device inode (IS_DAX needs CONFIG_FS_DAX), and collect_procs()
 * then walks that address_space's VMAs at folio->index. So, as device_dax
 * does in dax_set_mapping(), every folio of a dax region is stamped with the
 * pool inode's address_space (main.c: S_DAX, S_IFCHR; every file of the
 * pool maps through it) and its page offset in the pool's offset space.
 * Beluga stamps at ATTACH rather than at the first fault, so that an error
 * in a page nobody mapped yet is recorded (PG_hwpoison) too, and clears the
 * stamp at DETACH, so that device_dax, which only stamps folios whose
 * mapping is NULL, stamps them again for its own users. memory_failure()
 * then unmaps the folio from every mapping of the pool and sends SIGBUS
 * (BUS_MCEERR_AR to the process that consumed the poison) with the address.
 *
 * Not for a shared pool's mappings (unless mh_allow_gup): their entries are
 * special, not devmap (mmap.c: so that get_user_pages_fast() cannot pin
 * them), and dev_pagemap_mapping_shift() counts devmap entries only, so
 * memory_failure() marks the page PG_hwpoison but finds no mapper: it
 * neither unmaps nor signals them, and the fault below happens only where
 * the page was not mapped yet (MADV_DONTNEED, a new mapping, a rejoin).
 * Worse, from the 6.12 source and not testable under TCG: a process that
 * consumes the poison through such an entry takes a machine check whose
 * memory_failure() again finds no mapper and returns 0, which x86's
 * kill_me_maybe() takes for recovered, so the load repeats (the task
 * loops in machine checks until it is killed). Reaching Beluga from the
 * machine check (x86's decode chain) to zap the page is the missing piece.
 *
 * NODE pages are ordinary pages that Beluga allocated and that are not on
 * an LRU list: memory_failure() marks them PG_hwpoison, calls them an
 * "unknown page state" and leaves them mapped (-EBUSY; madvise
 * MADV_HWPOISON fails with EBUSY and keeps the reference it took). A
 * process that consumes the poison gets SIGBUS from the machine-check
 * handler; others keep their mapping until it is faulted in again.
 *
 * How Beluga learns of the error. memory_failure() calls no driver of a
 * device-dax page whose dev_pagemap belongs to device_dax, and nothing for
 * a NODE page. So the fault handler checks PG_hwpoison on every fault (one
 * bit; after memory_failure() unmapped the folio, the next touch faults),
 * retires the block and answers VM_FAULT_HWPOISON (SIGBUS BUS_MCEERR_AR at
 * the address), and ATTACH scans the region once. A periodic scan of every
 * page, or a check at each ALLOC and LOOKUP, would cost every pool time in
 * proportion to its size for an event that is rare, while a block nobody
 * maps can do no harm until somebody maps it, and then the fault finds it.
 *
 * ATTACH's clear of a device-dax range skips the pages already marked
 * (beluga_poison_clear()); their blocks are retired by the scan that
 * follows.
 *
 * Shared pools retire through the multi-host protocol (format 1.2,
 * Documentation/multihost.md, section 5): the host that learns of the
 * error (this fault path, or the ATTACH scan) calls the shared ops table's
 * retire, which takes the block out of service on every host: in a
 * partition this host owns, the block is unlinked from the shared index and
 * its entry written RETIRED at once (fence-checked store and flush, like
 * every metadata write); in another host's partition, this host's record
 * asks that partition's owner, which retires it at its next tick. A
 * RETIRED entry is honoured by every 1.2 host, survives takeovers, rejoins
 * and the last host's leave, and is counted in retired_blocks by the host
 * owning its partition; FORMAT zeroes the index and so forgets it (the
 * formatting host's ATTACH scan retires what it knows to be poisoned
 * again, other hosts at their next fault on it). memory_failure() only
 * tells the host that consumed the error, so another host learns of the
 * block only through the protocol, or when it touches the page itself.
 * Metadata lines are read with copy_mc_to_kernel() (mh.c).
 *
 * memory_failure() against DETACH and rmmod. mf_generic_kill_procs()
 * checks folio->mapping (dax_lock_folio(), then collect_procs()), reads it
 * again and walks its mappers under i_mmap_lock_read() (collect_procs_file()),
 * holding mf_mutex and a reference on device_dax's dev_pagemap, which pins
 * device_dax's inode but not the pool inode; it unmaps only when it found
 * mappers, and a region with mappers cannot be detached. DETACH clears the
 * stamps and then takes the pool inode's i_mmap lock for writing once, so a
 * call already walking the mappers finishes before DETACH returns, and so
 * before rmmod can free the inode (iput(), once every file is closed). Two
 * windows stay open, a few instructions each, reachable only if the call is
 * preempted there: a stamp cleared between collect_procs()'s check and its
 * second read (a NULL mapping), and a stamp read before the clear by a call
 * that takes the i_mmap lock only after DETACH dropped it (the pool inode
 * used after a following rmmod freed it). mm exports no way to wait for
 * memory_failure() calls in flight (mf_mutex is static; unpoison_memory()
 * takes it, but it is a test interface that logs and could unpoison a
 * page): an operator should not detach or unload while memory errors are
 * being reported on a pool's memory.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/page-flags.h>
#include <linux/sched.h>

#include "beluga_glue.h"

/* First pfn of the blocks of a dax region, and the pages they cover. */
static unsigned long beluga_dax_first_pfn(const struct beluga_region *region)
{
	return PHYS_PFN(region->phys_start + region->data_off);
}

static unsigned long beluga_region_nr_pages(const struct beluga_region *region)
{
	return ((u64)region->nr_blocks * region->dev->pool.block_size) >>
	       PAGE_SHIFT;
}

/* Retire the blocks that overlap @len bytes at @region_offset. */
static void beluga_poison_retire(struct beluga_region *region,
				 u64 region_offset, u64 len)
{
	/* Local: the core; shared: the multi-host protocol (mh.c). */
	if (region->ops->retire)
		region->ops->retire(region, region_offset, len);
}

static bool beluga_page_poisoned(struct page *page)
{
	/* device-dax marks the head of a compound folio (mm/memory-failure.c). */
	return PageHWPoison(page) || PageHWPoison(&page_folio(page)->page);
}

void beluga_poison_attach(struct beluga_region *region)
{
	struct address_space *mapping = region->dev->inode->i_mapping;
	unsigned long i, nr = beluga_region_nr_pages(region);
	unsigned long first, pfn;
	pgoff_t base = region->first_offset >> PAGE_SHIFT;

	/* Fresh from the page allocator, which never hands out poison. */
	if (region->backend == BELUGA_BACKEND_NODE)
		return;

	first = beluga_dax_first_pfn(region);
	for (pfn = first; pfn < first + nr;) {
		struct folio *folio = page_folio(pfn_to_page(pfn));
		unsigned long head = folio_pfn(folio);
		unsigned long next = head + folio_nr_pages(folio);

		/* A folio that starts in a shared pool's metadata: no index. */
		if (head >= first) {
			WRITE_ONCE(folio->mapping, mapping);
			WRITE_ONCE(folio->index, base + (head - first));
		}
		for (i = pfn; i < next && i < first + nr; i++)
			if (beluga_page_poisoned(pfn_to_page(i)))
				beluga_poison_retire(region,
						     (u64)(i - first) << PAGE_SHIFT,
						     PAGE_SIZE);
		pfn = next;
		if (!((pfn - first) % 4096))
			cond_resched();
	}
}

/*
 * ATTACH's clear of a device-dax range (region.c): zero @len bytes at byte
 * @off of the region, mapped at @base, except the pages memory_failure()
 * has already marked. Writing over a known-bad page only risks another
 * machine check (a partial-line store reads the line first) for nothing:
 * the page's block is retired by beluga_poison_attach() right after, and
 * is never handed out, so its old bytes reach nobody. Errors that nobody
 * reported yet cannot be skipped; the kernel's own zeroing of device
 * memory (dax_zero_page_range()) has the same exposure. Returns the pages
 * left as they were.
 */
unsigned long beluga_poison_clear(const struct beluga_region *region,
				  void *base, u64 off, u64 len)
{
	unsigned long pfn = PHYS_PFN(region->phys_start + off);
	unsigned long i, nr = len >> PAGE_SHIFT, skipped = 0;

	if (likely(!beluga_poison_in_range(pfn, nr))) {
		memset(base + off, 0, len);
		return 0;
	}
	for (i = 0; i < nr; i++) {
		if (beluga_page_poisoned(pfn_to_page(pfn + i)))
			skipped++;
		else
			memset(base + off + ((u64)i << PAGE_SHIFT), 0,
			       PAGE_SIZE);
	}
	return skipped;
}

/* Undo the stamps of beluga_poison_attach() (also after a failed one). */
void beluga_poison_detach(struct beluga_region *region)
{
	struct address_space *mapping;
	unsigned long first, pfn, end;

	if (region->backend != BELUGA_BACKEND_DAX || !region->dev)
		return;
	mapping = region->dev->inode->i_mapping;
	first = beluga_dax_first_pfn(region);
	end = PHYS_PFN(region->phys_start + region->length);
	for (pfn = first; pfn < end;) {
		struct folio *folio = page_folio(pfn_to_page(pfn));

		if (READ_ONCE(folio->mapping) == mapping)
			WRITE_ONCE(folio->mapping, NULL);
		pfn = folio_pfn(folio) + folio_nr_pages(folio);
		if (!((pfn - first) % 4096))
			cond_resched();
	}
	/*
	 * A memory_failure() that read a stamp before it was cleared and is
	 * walking the pool's mappers holds this lock for reading: let it
	 * finish while the inode is certain to exist (see the top).
	 */
	i_mmap_lock_write(mapping);
	i_mmap_unlock_write(mapping);
}

bool beluga_poison_fault(struct beluga_region *region, u64 region_offset,
			 struct page *page)
{
	struct folio *folio = page_folio(page);
	u64 start = round_down(region_offset, PAGE_SIZE), len = PAGE_SIZE;

	if (likely(!beluga_page_poisoned(page)))
		return false;
	/* Poison on the head: memory_failure() took the whole folio. */
	if (folio_test_large(folio) && folio_test_hwpoison(folio)) {
		u64 back = (u64)(page_to_pfn(page) - folio_pfn(folio)) <<
			   PAGE_SHIFT;

		start = back <= start ? start - back : 0;
		len = folio_size(folio);
	}
	beluga_poison_retire(region, start, len);
	return true;
}

bool beluga_poison_in_range(unsigned long pfn, unsigned long nr)
{
	unsigned long i;

	for (i = 0; i < nr; i++)
		if (beluga_page_poisoned(pfn_to_page(pfn + i)))
			return true;
	return false;
}
