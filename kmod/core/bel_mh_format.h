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

/* bel_env.h: byte order (cpu_to_le32() ...) and static_assert(). */
#include "bel_env.h"

/* --- on-media format, version 1.3 -------------------------------------- */

#define BEL_MH_LINE		64U	/* unit of single-writer ownership */
#define BEL_MH_MAX_HOSTS	16U	/* hard cap; a pool's is max_hosts */
#define BEL_MH_DEF_HOSTS	8U
#define BEL_MH_MAGIC		0x484d4147554c4542ULL	/* "BELUGAMH" */
#define BEL_MH_VERSION_MAJOR	1U
/*
 * 1.1 names its bucket hash in the superblock (@hash); a 1.0 pool has 0
 * there, which is BEL_MH_HASH_MIX64, the only hash 1.0 ever used. A 1.1
 * module joins both; a 1.0 module joins a 1.1 pool of that hash alike.
 *
 * 1.2 takes blocks out of service after a memory error: an index entry may
 * be BEL_MH_ENT_RETIRED (never linked, never handed out again, found by
 * the scan of a takeover), and a host record carries up to
 * BEL_MH_RETIRE_SLOTS retire requests for the owners of other partitions
 * (@retire, zero in 1.0 and 1.1 records). A 1.2 module joins 1.0, 1.1 and
 * 1.2 pools. Older modules read neither the minor version nor these
 * fields, so they join a 1.2 pool and cannot be made to refuse it: such a
 * host ignores retire requests, and in a partition it owns (its home, or
 * one it takes over) its rebuild takes a RETIRED block for a free one and
 * hands it out again, which is what 1.1 does with a poisoned block anyway
 * (the processes touching it get SIGBUS). Upgrade every host of a pool to
 * 1.2 before relying on retirement (Documentation/multihost.md, section 4).
 *
 * 1.3 gives each host record a device lease (@flags, zero before): a host
 * whose devices may hold pins on the pool says so, with the time its
 * devices need to stop after its fence (W, its hardware watchdog's
 * timeout), and every other host then holds it alive, for the reuse of
 * its blocks and pins, until lease + W + lease/2 of silence. A 1.3 module
 * also marks its own record BEL_MH_REC_LEASE_AWARE. A 1.2 module ignores
 * the lease (it would reuse after one lease), and cannot be made to refuse
 * the pool; so a host takes device pins only while every live host of the
 * pool marks itself aware, and asks its devices to let go when an unaware
 * host appears (Documentation/multihost.md, section 10). A 1.3 module
 * joins 1.0, 1.1 and 1.2 pools alike; the device lease needs nothing
 * formatted.
 */
#define BEL_MH_VERSION_MINOR	3U

/* Bucket hashes of the on-media index (bel_mh_super.hash). */
#define BEL_MH_HASH_MIX64	0U	/* bel_key_hash() (bel_hash.h) */

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
	__le32 hash;		/* BEL_MH_HASH_* (since 1.1; 0 before) */
	__le32 reserved[11];
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

/*
 * Host record @flags (since 1.3). Bits 8-31 are the device lease's W in
 * milliseconds, meaningful with BEL_MH_REC_DEVICE_PINS.
 */
#define BEL_MH_REC_LEASE_AWARE	0x1U	/* honours device leases */
#define BEL_MH_REC_DEVICE_PINS	0x2U	/* devices may pin blocks */
#define BEL_MH_REC_FENCE_SHIFT	8U
#define BEL_MH_REC_FENCE_MAX_MS	((1U << 24) - 1U)	/* 4 h 39 min */

/* Retire requests in a host record (since 1.2). */
#define BEL_MH_RETIRE_SLOTS	4U

/*
 * One host's record, written only by that host. @retire: blocks (+ 1; 0
 * is an empty slot) in which this host found a memory error and whose
 * partition's owner has not retired them yet, as far as it has seen; the
 * owner retires them at its next tick. Kept across a rejoin and a leave,
 * cleared by FORMAT.
 */
struct bel_mh_host_rec {
	__le32 state;		/* enum bel_mh_host_state */
	__le32 incarnation;	/* +1 at every join, never 0 once joined */
	__le64 heartbeat;	/* +1 every heartbeat period */
	__le32 owned;		/* bitmask of owned partitions */
	__le32 flags;		/* BEL_MH_REC_* (since 1.3; 0 before) */
	char name[24];
	__le32 retire[BEL_MH_RETIRE_SLOTS];	/* since 1.2; 0 before */
};

static_assert(sizeof(struct bel_mh_host_rec) == BEL_MH_LINE,
	      "host record is one line");

enum bel_mh_ent_state {
	BEL_MH_ENT_EMPTY = 0,	/* never used since format */
	BEL_MH_ENT_TENTATIVE = 2,	/* publish in progress */
	BEL_MH_ENT_PUBLISHED = 3,
	BEL_MH_ENT_EVICTING = 4,	/* eviction in progress */
	BEL_MH_ENT_RETIRED = 5,		/* memory error: out of service (1.2) */
};

/*
 * The index entry of one block (a line at index_off + block * 64), written
 * only by the owner of the block's partition. While linked into the chain
 * of its key's bucket it is TENTATIVE, PUBLISHED or EVICTING; once
 * unlinked it keeps its last contents (readers that reach it through a
 * stale pointer see a key of its old bucket, or of another bucket, which
 * tells them they were diverted) until the block is published again.
 * A RETIRED entry is never linked: its owner unlinks a published block's
 * entry before it writes it RETIRED (state, block, writer; the rest 0),
 * and nothing rewrites it until FORMAT zeroes the index.
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
