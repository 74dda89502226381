/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Beluga multi-host: the versioned on-media format of a shared pool
 * (Documentation/multihost.md). Explicit offsets, fixed-width little-endian
 * fields, static size checks: what another implementation or a tool that reads
 * a pool image needs (tests/multihost/mhtool.c). The protocol's API is in
 * bel_mh.h, what only its files share in bel_mh_internal.h.
 */
#ifndef BEL_MH_FORMAT_H
#define BEL_MH_FORMAT_H

#include "bel_env.h"

#ifdef __KERNEL__
#include <linux/build_bug.h>
#include <asm/byteorder.h>
#else
#include <endian.h>
#define cpu_to_le16(x)	((__le16)htole16(x))
#define cpu_to_le32(x)	((__le32)htole32(x))
#define cpu_to_le64(x)	((__le64)htole64(x))
#define le16_to_cpu(x)	((u16)le16toh(x))
#define le32_to_cpu(x)	((u32)le32toh(x))
#define le64_to_cpu(x)	((u64)le64toh(x))
#endif

/* --- on-media format, version 1 ---------------------------------------- */

#define BEL_MH_LINE		64U	/* unit of single-writer ownership */
#define BEL_MH_MAX_HOSTS	16U	/* hard cap; a pool's is max_hosts */
#define BEL_MH_DEF_HOSTS	8U
#define BEL_MH_MAGIC		0x484d4147554c4542ULL	/* "BELUGAMH" */
#define BEL_MH_VERSION_MAJOR	1U
#define BEL_MH_VERSION_MINOR	0U

/* Version-independent locations: a later format keeps these. */
#define BEL_MH_SB_OFF		0ULL
#define BEL_MH_SB_SIZE		192U
#define BEL_MH_INTENT_OFF	4096ULL	/* one line per host id, 64 ids */
#define BEL_MH_HOST_OFF		8192ULL	/* one line per host id */

#define BEL_MH_DEF_HEARTBEAT_MS	100U
#define BEL_MH_DEF_LEASE_MS	2000U
/* Longest lease a pool may have (a join waits up to one). */
#define BEL_MH_MAX_LEASE_MS	60000U
#define BEL_MH_DEF_DATA_ALIGN	(2ULL << 20)

/* Bucket heads per line: __le32 each, block number + 1, 0 ends a chain. */
#define BEL_MH_BUCKETS_PER_LINE	(BEL_MH_LINE / 4)

/*
 * The superblock: written once by the formatting host, after every other
 * area has been zeroed and flushed; read by every joining host. @csum is
 * bel_mh_csum() of everything before it.
 */
struct bel_mh_super {
	__le64 magic;
	__le32 version_major;
	__le32 version_minor;
	u8 uuid[16];
	__le64 region_size;	/* bytes of the shared region */
	__le64 block_size;
	__le64 data_off;	/* first block */
	__le64 nr_blocks;
	__le32 max_hosts;	/* host ids and partitions */
	__le32 buckets;		/* per partition, a power of two */
	__le64 host_off;	/* host records */
	__le64 pin_off;		/* pin arrays */
	__le64 pin_stride;	/* bytes of one host's pin array */
	__le64 index_off;	/* entry of block b at index_off + b * 64 */
	__le64 bucket_off;	/* bucket heads of partition p at ... */
	__le64 bucket_stride;	/* ... bucket_off + p * bucket_stride */
	__le64 data_align;
	__le32 heartbeat_ms;
	__le32 lease_ms;
	__le32 flags;		/* 0 */
	__le32 reserved[12];
	__le32 csum;
};

static_assert(sizeof(struct bel_mh_super) == BEL_MH_SB_SIZE,
	      "superblock is three lines");

/* Format intent of one host id (line at BEL_MH_INTENT_OFF + id * 64). */
struct bel_mh_intent {
	__le64 nonce;		/* 0: no intent */
	__le64 progress;	/* advanced while formatting */
	__le64 reserved[6];
};

static_assert(sizeof(struct bel_mh_intent) == BEL_MH_LINE,
	      "intent is one line");

enum bel_mh_host_state {
	BEL_MH_HOST_NONE = 0,	/* never joined since format */
	BEL_MH_HOST_ACTIVE = 1,
	BEL_MH_HOST_LEFT = 2,	/* detached cleanly */
};

/* One host's record, written only by that host. */
struct bel_mh_host_rec {
	__le32 state;		/* enum bel_mh_host_state */
	__le32 incarnation;	/* +1 at every join, never 0 once joined */
	__le64 heartbeat;	/* +1 every heartbeat period */
	__le32 owned;		/* bitmask of owned partitions */
	__le32 flags;		/* 0 */
	char name[24];
	__le64 reserved[2];
};

static_assert(sizeof(struct bel_mh_host_rec) == BEL_MH_LINE,
	      "host record is one line");

enum bel_mh_ent_state {
	BEL_MH_ENT_EMPTY = 0,	/* never used since format */
	BEL_MH_ENT_TENTATIVE = 2,	/* publish in progress */
	BEL_MH_ENT_PUBLISHED = 3,
	BEL_MH_ENT_EVICTING = 4,	/* eviction in progress */
};

/*
 * The index entry of one block (a line at index_off + block * 64), written
 * only by the owner of the block's partition. While linked into the chain
 * of its key's bucket it is TENTATIVE, PUBLISHED or EVICTING; once
 * unlinked it keeps its last contents (readers that reach it through a
 * stale pointer see a key of its old bucket, or of another bucket, which
 * tells them they were diverted) until the block is published again.
 */
struct bel_mh_entry {
	__le32 state;		/* enum bel_mh_ent_state */
	__le32 block;		/* the block, for checking */
	__le64 ns;
	__le64 key_lo;
	__le64 key_hi;
	__le64 seq;		/* publish sequence in the partition */
	__le32 writer;		/* host id that wrote the entry */
	__le32 writer_inc;	/* and its incarnation */
	__le32 next;		/* next block in the chain + 1; 0 ends it */
	__le32 reserved[3];
};

static_assert(sizeof(struct bel_mh_entry) == BEL_MH_LINE,
	      "index entry is one line");

/* The superblock's @csum: of the bytes before that field. */
u32 bel_mh_csum(const void *buf, u32 len);

#endif /* BEL_MH_FORMAT_H */
