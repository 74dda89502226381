// SPDX-License-Identifier: GPL-2.0
/*
 * The index, mapped read-only (uapi: "The index, mapped read-only"): the
 * memory behind the core's copy of a single-host pool's index
 * (core/bel_index_copy.h), BELUGA_IOC_INDEX_MAP, which makes it, and the
 * mmap() of it at BELUGA_INDEX_MAP_OFFSET.
 *
 * The copy's memory is vmalloc'ed, zeroed and charged to the caller's
 * memory cgroup, and served to faults page by page, as UIO serves
 * vmalloc memory. It is reference counted: the pool holds its newest copy
 * (dev->index) and each VMA the copy it was made with, so a sealed copy
 * stays readable, unchanged, for as long as anything maps it, whatever
 * happened to the regions since: a mapping never faults for that; its
 * reader sees the sealed header and asks the kernel. The pool drops its
 * reference when it makes a newer copy, and at unload.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/kref.h>
#include <linux/mm.h>
#include <linux/vmalloc.h>

#include "beluga_glue.h"
#include "bel_index_copy.h"

/* One copy's memory. */
struct beluga_index_mem {
	struct kref ref;		/* dev->index's and each VMA's */
	void *mem;			/* @size bytes, vmalloc'ed */
	u64 size;
	struct bel_index_copy copy;	/* the core's view of it */
};

static void beluga_index_mem_free(struct kref *ref)
{
	struct beluga_index_mem *m = container_of(ref, struct beluga_index_mem,
						  ref);

	vfree(m->mem);
	kfree(m);
}

static void beluga_index_mem_put(struct beluga_index_mem *m)
{
	if (m)
		kref_put(&m->ref, beluga_index_mem_free);
}

/*
 * A new live copy of @dev's index, or an ERR_PTR. The regions may change
 * between sizing it and filling it: then the core says -EAGAIN and it is
 * sized again.
 */
static struct beluga_index_mem *beluga_index_mem_new(struct beluga_device *dev)
{
	struct beluga_index_mem *m;
	int ret;

	for (;;) {
		u64 size = bel_index_copy_size(&dev->pool);

		if (!size)
			return ERR_PTR(-ENODEV);
		if (size > ULONG_MAX)
			return ERR_PTR(-ENOMEM);
		m = kzalloc(sizeof(*m), GFP_KERNEL_ACCOUNT);
		if (!m)
			return ERR_PTR(-ENOMEM);
		m->size = PAGE_ALIGN(size);
		m->mem = __vmalloc(m->size, GFP_KERNEL_ACCOUNT | __GFP_ZERO);
		if (!m->mem) {
			kfree(m);
			return ERR_PTR(-ENOMEM);
		}
		kref_init(&m->ref);
		ret = bel_index_copy_start(&dev->pool, &m->copy, m->mem,
					   m->size);
		if (!ret)
			return m;
		beluga_index_mem_put(m);
		if (ret != -EAGAIN)
			return ERR_PTR(ret);
	}
}

/*
 * BELUGA_IOC_INDEX_MAP: the pool's live copy, made now if it has none.
 * Under ops_rwsem (read), so that the pool stays single-host meanwhile.
 */
int beluga_index_map(struct beluga_device *dev, struct beluga_index_map *arg)
{
	const struct beluga_pool_ops *ops;
	struct beluga_index_mem *m, *old = NULL;
	int ret = 0;

	mutex_lock(&dev->index_mutex);
	ops = beluga_pool_ops_begin(dev);
	if (!ops->index_copy) {
		ret = -EOPNOTSUPP;
		goto out;
	}
	m = dev->index;
	if (!m || !bel_index_copy_live(&dev->pool, &m->copy)) {
		m = beluga_index_mem_new(dev);
		if (IS_ERR(m)) {
			ret = PTR_ERR(m);
			goto out;
		}
		old = dev->index;
		dev->index = m;
	}
	arg->offset = BELUGA_INDEX_MAP_OFFSET;
	arg->length = m->copy.hdr->length;
out:
	beluga_pool_ops_end(dev);
	mutex_unlock(&dev->index_mutex);
	/* Sealed (the core let it go when it made the new one). */
	beluga_index_mem_put(old);
	return ret;
}

static void beluga_index_vm_open(struct vm_area_struct *vma)
{
	struct beluga_index_mem *m = vma->vm_private_data;

	kref_get(&m->ref);
}

static void beluga_index_vm_close(struct vm_area_struct *vma)
{
	beluga_index_mem_put(vma->vm_private_data);
}

static vm_fault_t beluga_index_fault(struct vm_fault *vmf)
{
	struct beluga_index_mem *m = vmf->vma->vm_private_data;
	unsigned long first = BELUGA_INDEX_MAP_OFFSET >> PAGE_SHIFT;
	unsigned long index = vmf->pgoff - first;
	struct page *page;

	if (vmf->pgoff < first || index >= m->size >> PAGE_SHIFT)
		return VM_FAULT_SIGBUS;
	page = vmalloc_to_page((char *)m->mem + (index << PAGE_SHIFT));
	if (!page)
		return VM_FAULT_SIGBUS;
	get_page(page);
	vmf->page = page;
	return 0;
}

static const struct vm_operations_struct beluga_index_vm_ops = {
	.open = beluga_index_vm_open,
	.close = beluga_index_vm_close,
	.fault = beluga_index_fault,
};

/* mmap() at BELUGA_INDEX_MAP_OFFSET or above (mmap.c). */
int beluga_index_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct beluga_device *dev = beluga_file_dev(file);
	u64 start = (u64)vma->vm_pgoff << PAGE_SHIFT;
	u64 len = vma->vm_end - vma->vm_start;
	struct beluga_index_mem *m;
	int ret = 0;

	if (vma->vm_flags & VM_WRITE)
		return -EACCES;
	/* Not the copy's offset: no offset there, whether or not a copy exists. */
	if (start != BELUGA_INDEX_MAP_OFFSET)
		return -ENXIO;
	mutex_lock(&dev->index_mutex);
	m = dev->index;
	if (!m || !bel_index_copy_live(&dev->pool, &m->copy)) {
		ret = -ENODEV;
		goto out;
	}
	if (len > m->size) {
		ret = -ENXIO;
		goto out;
	}
	kref_get(&m->ref);
	vma->vm_private_data = m;
	vma->vm_ops = &beluga_index_vm_ops;
	/* Read-only for good; its size is the copy's. */
	vm_flags_clear(vma, VM_MAYWRITE);
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
out:
	mutex_unlock(&dev->index_mutex);
	return ret;
}

void beluga_index_exit(struct beluga_device *dev)
{
	bel_index_copy_seal(&dev->pool);
	beluga_index_mem_put(dev->index);
	dev->index = NULL;
}
