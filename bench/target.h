/* SPDX-License-Identifier: GPL-2.0 */
#ifndef BELBENCH_TARGET_H
#define BELBENCH_TARGET_H

#include "bench.h"

/*
 * The implementations under test. The baselines are named for what they
 * are: rpc-unix-blocking (AF_UNIX stream socket, blocking calls, rpc.c) and
 * rpc-shm-polled (shared-memory slots, a spin-polling server on a CPU of its
 * own, shmrpc.c), both running the same core.
 */
enum target_kind { T_KERNEL, T_CORE, T_RPC, T_SHM, NR_TARGETS };
extern const char *target_kind_name[];
/* Is @kind in a list such as "kernel,core,rpc"? (aliases: rpc, unix, shm) */
/* Whether the comma-separated @list has the item @name. */
bool list_names(const char *list, const char *name);
bool target_selected(const char *list, enum target_kind kind);

struct target {
	enum target_kind kind;
	const char *name;
	u64 nr_blocks;		/* what the pool really has */
	u64 bs;
	struct kregion kr;	/* T_KERNEL */
	struct bel_pool *pool;	/* T_CORE */
	u8 *arena;		/* T_CORE with "anon" or "memfd" */
	int arena_fd;		/* "memfd": the file behind the arena, else -1 */
	struct rpc_server srv;	/* T_RPC */
	struct shm_server shm;	/* T_SHM */
};

/* -1 when the kernel refused the region (reported already) */
int target_setup(struct target *t, enum target_kind kind, const char *spec,
		 u64 nr_blocks, u64 bs, const char *arena);
struct bk *target_open(struct target *t, bool map);
void target_teardown(struct target *t);
void target_fill(struct bk *b, u64 ns, u64 tag, u64 first, u64 count,
		 int fill, u64 *offs);

#endif
