// SPDX-License-Identifier: GPL-2.0
/*
 * rel_abi: the ABI's no-partial-effect rule when the answer cannot be written.
 *
 *   abi_ro_struct  a command whose answer cannot be written back fails
 *                  with -EFAULT and leaves what the uapi says, command
 *                  by command ("The answer and -EFAULT")
 *
 * Environment: BELUGA_TEST_NODE, BELUGA_TEST_DAX (see rel.h); the harness's
 * options (-l lists the tests, -t NAME runs one). See README.md.
 */
#include "rel_test.h"

/*
 * The struct lives in read-only memory: the kernel can read it but not
 * write its answer back. The uapi ("The answer and -EFAULT"): ALLOC never
 * writes its struct, LOOKUP+PIN drops its pins again, ATTACH leaves no
 * region, EVICT and DETACH keep what they did.
 */
static bool t_abi_ro_struct(void)
{
	int fd = bt_open(O_RDWR), r;
	struct beluga_stats s0, s;
	uint64_t *offs, ns = ns_unique(0xab1);
	uint8_t *ro;
	uint32_t hits;
	int32_t res;
	bool ok = true;

	REQUIRE(fd >= 0 && bt_stats(fd, &s0) == 0, "open/STATS");
	ro = mmap(NULL, BT_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	offs = mmap(NULL, BT_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(ro != MAP_FAILED && offs != MAP_FAILED, "mmap");

	/* ALLOC */
	{
		struct beluga_alloc *a = (void *)ro;

		a->size = sizeof(*a);
		a->count = 2;
		a->offsets = (uintptr_t)offs;
		offs[0] = offs[1] = UINT64_MAX;
		mprotect(ro, BT_PAGE, PROT_READ);
		r = bt_ioctl(fd, BELUGA_IOC_ALLOC, a);
		mprotect(ro, BT_PAGE, PROT_READ | PROT_WRITE);
		bt_stats(fd, &s);
		if (r == -EFAULT && s.allocated_blocks != s0.allocated_blocks) {
			rel_diag("ALLOC with its struct in read-only memory returned -EFAULT "
				 "but left %llu blocks allocated to the file (offsets 0x%llx, "
				 "0x%llx were written): the ioctl dispatcher copies the struct "
				 "back after the command ran, and ALLOC has no output field in "
				 "the struct", (rel_ull)(s.allocated_blocks - s0.allocated_blocks),
				 (rel_ull)offs[0], (rel_ull)offs[1]);
			ok = false;
			bt_free(fd, 2, offs);
		} else if (r != -EFAULT && r != 0) {
			rel_diag("ALLOC with a read-only struct: %s", en(r));
			ok = false;
		} else if (r == 0) {
			bt_free(fd, 2, offs);
		}
	}
	/* LOOKUP + PIN */
	{
		struct beluga_lookup *l = (void *)ro;
		struct beluga_key *key = (void *)(offs + 8);

		REQUIRE(bt_alloc(fd, 1, offs) == 0, "ALLOC");
		*key = bt_key(ns, 1);
		REQUIRE(bt_publish1(fd, ns, offs[0], *key, &res) == 0 && res == 0, "PUBLISH");
		bt_stats(fd, &s0);
		memset(l, 0, sizeof(*l));
		l->size = sizeof(*l);
		l->flags = BELUGA_LOOKUP_PIN;
		l->ns = ns;
		l->count = 1;
		l->keys = (uintptr_t)key;
		l->offsets = (uintptr_t)offs;
		mprotect(ro, BT_PAGE, PROT_READ);
		r = bt_ioctl(fd, BELUGA_IOC_LOOKUP, l);
		mprotect(ro, BT_PAGE, PROT_READ | PROT_WRITE);
		bt_stats(fd, &s);
		if (r == -EFAULT && s.pins != s0.pins) {
			rel_diag("LOOKUP+PIN with its struct in read-only memory returned "
				 "-EFAULT but left %llu pin(s) held: the caller was told it failed "
				 "and cannot know it must RELEASE", (rel_ull)(s.pins - s0.pins));
			ok = false;
			bt_release(fd, 1, offs);
		} else if (r == 0) {
			bt_release(fd, 1, offs);
		}
		(void)hits;
	}
	/* EVICT of one key */
	{
		struct beluga_evict *e = (void *)ro;
		struct beluga_key k = bt_key(ns, 9);
		uint64_t off;
		uint32_t hits = 0;

		if (bt_alloc(fd, 1, &off) == 0 && bt_publish1(fd, ns, off, k, &res) == 0 &&
		    res == 0) {
			memset(e, 0, sizeof(*e));
			e->size = sizeof(*e);
			e->ns = ns;
			e->key = k;
			mprotect(ro, BT_PAGE, PROT_READ);
			r = bt_ioctl(fd, BELUGA_IOC_EVICT, e);
			mprotect(ro, BT_PAGE, PROT_READ | PROT_WRITE);
			bt_lookup(fd, ns, &k, 1, NULL, 0, &hits);
			if (r != -EFAULT || hits != 0) {
				rel_diag("EVICT with its struct in read-only memory: %s, key %s; "
					 "want -EFAULT and the key evicted (the answer comes after "
					 "the eviction)", en(r), hits ? "still there" : "evicted");
				ok = false;
			}
		}
	}
	/* ATTACH and DETACH (admin): out fields, so the struct is written back */
	{
		struct beluga_attach *a = (void *)ro;
		uint32_t before = nr_regions(fd), slot = UINT32_MAX;
		struct beluga_region_info ri;

		memset(a, 0, sizeof(*a));
		r = rel_attach_node(fd, 2 * BT_MIB, BSIZE, "ro-struct", a);
		if (r == 0)	/* a writable one first: learn the slot, then detach */
			rel_detach(fd, a->region_id, BELUGA_DETACH_EVICT);
		if (r == 0) {
			a->region_id = 0;
			mprotect(ro, BT_PAGE, PROT_READ);
			r = bt_ioctl(fd, BELUGA_IOC_ATTACH, a);
			mprotect(ro, BT_PAGE, PROT_READ | PROT_WRITE);
			for (uint32_t sl = 0; sl < BELUGA_MAX_REGIONS; sl++)
				if (bt_region_info(fd, sl, &ri) == 0 && !strcmp(ri.name, "ro-struct"))
					slot = sl;
			if (r == -EFAULT && nr_regions(fd) != before) {
				rel_diag("ATTACH with its struct in read-only memory returned -EFAULT "
					 "but the region was attached (slot %u, name ro-struct); the "
					 "caller never learns its region_id", slot);
				ok = false;
			}
			if (slot == UINT32_MAX) {
				/* a writable ATTACH: a region for DETACH to answer about */
				memset(a, 0, sizeof(*a));
				if (rel_attach_node(fd, 2 * BT_MIB, BSIZE, "ro-struct", a) == 0)
					slot = a->region_id;
			}
			if (slot != UINT32_MAX) {
				struct beluga_detach *d = (void *)ro;

				memset(d, 0, sizeof(*d));
				d->size = sizeof(*d);
				d->flags = BELUGA_DETACH_EVICT;
				d->region_id = slot;
				mprotect(ro, BT_PAGE, PROT_READ);
				r = bt_ioctl(fd, BELUGA_IOC_DETACH, d);
				mprotect(ro, BT_PAGE, PROT_READ | PROT_WRITE);
				if (r != -EFAULT || bt_region_info(fd, slot, &ri) != -ENOENT) {
					rel_diag("DETACH with its struct in read-only memory: %s; want "
						 "-EFAULT and the region detached (the answer comes "
						 "after the detach)", en(r));
					ok = false;
				}
				if (bt_region_info(fd, slot, &ri) == 0)
					rel_detach(fd, slot, BELUGA_DETACH_EVICT);
			}
		}
	}
	rel_evict_ns(fd, ns, NULL, NULL);
	close(fd);
	if (!ok)
		FAILF("a failed command changed state (see above)");
	return true;
}

FIXTURE_REL(abi);

TEST_F_TIMEOUT(abi, abi_ro_struct, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL))
		return;
	REL_ASSERT(t_abi_ro_struct());
}

TEST_HARNESS_MAIN
