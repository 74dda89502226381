// SPDX-License-Identifier: GPL-2.0
/*
 * A "target" is one implementation under test with a pool of its own: the
 * kernel module (a region attached for the section), the in-process core,
 * or the baseline server. Sections create one, open clients on it, and tear
 * it down, so that every implementation gets the same geometry.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench.h"
#include "target.h"

const char *target_kind_name[] = {
	[T_KERNEL] = "kernel",
	[T_CORE] = "core",
	[T_RPC] = "rpc-unix-blocking",
	[T_SHM] = "rpc-shm-polled",
};

static const char *target_alias[] = {
	[T_KERNEL] = "kernel",
	[T_CORE] = "core",
	[T_RPC] = "rpc",
	[T_SHM] = "shm",
};

bool list_names(const char *list, const char *name)
{
	char buf[256], *tok, *save = NULL;

	snprintf(buf, sizeof(buf), "%s", list);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save))
		if (!strcmp(tok, name))
			return true;
	return false;
}

bool target_selected(const char *list, enum target_kind kind)
{
	return list_names(list, target_kind_name[kind]) ||
	       list_names(list, target_alias[kind]) ||
	       (kind == T_RPC && list_names(list, "unix"));
}

int target_setup(struct target *t, enum target_kind kind, const char *spec,
		 u64 nr_blocks, u64 bs, const char *arena)
{
	memset(t, 0, sizeof(*t));
	t->kind = kind;
	t->name = target_kind_name[kind];
	t->bs = bs;
	switch (kind) {
	case T_KERNEL:
		if (kregion_attach(&t->kr, spec, nr_blocks * bs, bs))
			return -1;
		t->nr_blocks = t->kr.nr_blocks;
		break;
	case T_CORE:
		t->pool = core_pool_new(nr_blocks, bs);
		t->nr_blocks = nr_blocks;
		t->arena_fd = -1;
		if (arena && !strcmp(arena, "anon"))
			t->arena = anon_buf(nr_blocks * bs, 0xA5);
		if (arena && !strcmp(arena, "memfd")) {
			/*
			 * A file of shared pages, like the module's memory:
			 * other mappings of it (the raw limit, the staged
			 * server) read the very same bytes.
			 */
			t->arena_fd = memfd_create("belbench-arena", MFD_CLOEXEC);
			if (t->arena_fd < 0 ||
			    ftruncate(t->arena_fd, nr_blocks * bs))
				die("memfd arena of %llu bytes: %s",
				    (unsigned long long)(nr_blocks * bs),
				    strerror(errno));
			t->arena = mmap(NULL, nr_blocks * bs,
					PROT_READ | PROT_WRITE, MAP_SHARED,
					t->arena_fd, 0);
			if (t->arena == MAP_FAILED)
				die("mmap of the memfd arena: %s",
				    strerror(errno));
			memset(t->arena, 0, nr_blocks * bs);
		}
		break;
	case T_RPC:
		rpc_server_start(&t->srv, nr_blocks, bs, arena);
		t->nr_blocks = nr_blocks;
		break;
	case T_SHM:
		shm_server_start(&t->shm, nr_blocks, bs);
		t->nr_blocks = nr_blocks;
		break;
	case NR_TARGETS:
		die("bad target");
	}
	return 0;
}

struct bk *target_open(struct target *t, bool map)
{
	switch (t->kind) {
	case T_KERNEL:
		return kernel_open(map);
	case T_CORE:
		return core_open(t->pool, t->arena);
	case T_RPC:
		return rpc_open(&t->srv);
	case T_SHM:
		return shmrpc_open(&t->shm);
	case NR_TARGETS:
		break;
	}
	return NULL;
}

void target_teardown(struct target *t)
{
	switch (t->kind) {
	case T_KERNEL:
		kregion_detach(&t->kr);
		break;
	case T_CORE:
		if (t->arena)
			free_anon(t->arena, t->nr_blocks * t->bs);
		if (t->arena_fd >= 0)
			close(t->arena_fd);
		core_pool_free(t->pool);
		break;
	case T_RPC:
		rpc_server_stop(&t->srv);
		break;
	case T_SHM:
		shm_server_stop(&t->shm);
		break;
	case NR_TARGETS:
		break;
	}
}

/*
 * Publish @count blocks under (@ns, mkkey(@tag, first + i)), in batches of
 * up to BELUGA_MAX_BATCH; @fill >= 0 writes that byte into every block
 * through the mapping first (kernel and core with an arena). Offsets of the
 * blocks go to @offs when not NULL.
 */
void target_fill(struct bk *b, u64 ns, u64 tag, u64 first, u64 count,
		 int fill, u64 *offs)
{
	struct beluga_key *keys = xcalloc(BELUGA_MAX_BATCH, sizeof(*keys));
	u64 *o = xcalloc(BELUGA_MAX_BATCH, sizeof(*o));
	u64 done = 0;

	while (done < count) {
		u32 n = count - done > BELUGA_MAX_BATCH ? BELUGA_MAX_BATCH :
			(u32)(count - done);
		u32 i, ok = 0, ex = 0;
		int ret = b->alloc(b, n, o);

		if (ret)
			die("%s: ALLOC %u (after %llu of %llu): %s", b->name, n,
			    (unsigned long long)done,
			    (unsigned long long)count, strerror(-ret));
		for (i = 0; i < n; i++) {
			keys[i] = mkkey(tag, first + done + i);
			if (fill >= 0 && b->map)
				memset(b->map + o[i], fill, b->block_size);
			if (offs)
				offs[done + i] = o[i];
		}
		ret = b->publish(b, ns, n, o, keys, &ok, &ex);
		if (ret || ok != n)
			die("%s: PUBLISH %u: %s (published %u, existing %u)",
			    b->name, n, strerror(-ret), ok, ex);
		done += n;
	}
	free(keys);
	free(o);
}
