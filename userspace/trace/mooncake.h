/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The one reader of the Mooncake conversation trace (FAST'25 release; see
 * ../shared/data/README.md), shared by beluga-demo --trace and the
 * benchmarks' replay (bench/trace.c). The trace is JSON lines:
 *
 *   {"timestamp": 0, "input_length": 6758, "output_length": 500,
 *    "hash_ids": [0, 1, 2, 3]}
 *
 * Each hash id names one prompt block, and equal ids are equal prefixes:
 * the ids are already chained block keys. Only "hash_ids" and
 * "input_length" are read; the rest of a line is ignored. Plain C (no
 * libbeluga), so that the static benchmark binary can carry it too.
 */
#ifndef BELUGA_MOONCAKE_H
#define BELUGA_MOONCAKE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One request: its block ids in prompt order, and its prompt length. */
struct mooncake_req {
	uint64_t *ids;
	size_t nr_ids;
	uint64_t input_length;	/* tokens; 0 when the line has no such field */
};

/*
 * Parse one line into @req; @req->ids grows as needed (@cap: its capacity,
 * 0 with ids NULL at first; free(req->ids) at the end). Returns 0, -ENOENT
 * when the line has no "hash_ids" field, -EINVAL when a field is not
 * "KEY": [non-negative integers, ...] (or "KEY": integer), -ENOMEM.
 */
int mooncake_parse(const char *line, struct mooncake_req *req, size_t *cap);

/* A trace file, read one request at a time. */
struct mooncake_reader {
	FILE *f;
	char *line;
	size_t line_cap, ids_cap;
	uint64_t lineno;	/* lines read so far, blank ones included */
	struct mooncake_req req;	/* the last request mooncake_next() read */
};

/* 0 or -errno (fopen). */
int mooncake_open(struct mooncake_reader *r, const char *path);

/*
 * The next request into r->req, skipping blank lines. Returns 1, 0 at the
 * end of the file, -EIO on a read error, or mooncake_parse()'s error for
 * line r->lineno (-ENOENT, -EINVAL, -ENOMEM); after -ENOENT or -EINVAL the
 * caller may go on with the next line.
 */
int mooncake_next(struct mooncake_reader *r);

void mooncake_close(struct mooncake_reader *r);

#endif /* BELUGA_MOONCAKE_H */
