/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The fake kernel's shared pool (fake_mh.c): this process as one host of a
 * multi-host pool in a file that other processes, each a host, map too.
 * fake_kernel.c routes the block commands here while it is joined.
 */
#ifndef FAKE_MH_H
#define FAKE_MH_H

#include <stdbool.h>
#include <stdint.h>

#include "bel_mh.h"

/*
 * Join (formatting it if it holds no pool) the shared pool in the first
 * @length bytes of @path as host @host_id, with @block_size (0: the
 * pool's) and, if this host formats it, room for @max_hosts hosts (0: the
 * default) and a lease of @lease_ms (0: the default). Starts the
 * heartbeat and the maintenance tick. 0, or -errno with *why saying why.
 */
int fake_mh_join(const char *path, uint64_t length, uint64_t block_size, uint32_t host_id,
		 uint32_t max_hosts, uint32_t lease_ms, const char **why);
/* Leave the pool (clean: LEFT in the own record), stop the threads, unmap. */
void fake_mh_leave(void);
bool fake_mh_joined(void);

const struct bel_mh_geo *fake_mh_geo(void);
/* The pool's data: @len bytes at offset @off of the pool's mapping. */
void *fake_mh_map(void *addr, size_t len, int prot, int flags, uint64_t off);
void fake_mh_stats(struct bel_mh_stats *out);
/* The host records, as HOSTS answers them; their number. */
int fake_mh_hosts(struct beluga_host *out, uint32_t max);

/* The block commands of the process's one client (bel_mh.h). */
int fake_mh_alloc(uint32_t count, uint64_t *offsets, struct beluga_evicted_key *evicted,
		  uint32_t *nr_evicted);
int fake_mh_free(uint32_t count, const uint64_t *offsets);
int fake_mh_release(uint32_t count, const uint64_t *offsets);
int fake_mh_publish(uint64_t ns, uint32_t count, struct beluga_publish_item *items,
		    uint32_t *published, uint32_t *exists, uint32_t *failed);
int fake_mh_lookup(uint64_t ns, uint32_t count, const struct beluga_key *keys, bool pin,
		   uint64_t *offsets, uint32_t *hits);

#endif /* FAKE_MH_H */
