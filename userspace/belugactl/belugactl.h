/* SPDX-License-Identifier: GPL-2.0 */
/*
 * belugactl internals: output helpers (human sizes, JSON, Prometheus text),
 * argument parsing, and the boot-time config reader.
 */
#ifndef BELUGACTL_H
#define BELUGACTL_H

#include <stdint.h>
#include <stdio.h>

#include "beluga.h"

/* Exit codes, as documented in `belugactl --help`. */
enum {
	EXIT_OK = 0,
	EXIT_FAILED = 1,	/* the operation failed */
	EXIT_USAGE = 2,		/* bad arguments or config syntax */
};

/* ---- argument parsing (output.c) ---- */

/*
 * Parse a byte size: digits with an optional K, M, G or T suffix (powers
 * of 1024, case-insensitive, optionally followed by "iB" or "B").
 * 0, or -EINVAL (not a size) / -ERANGE (above 2^64-1).
 */
int parse_size(const char *s, uint64_t *out);
/* Decimal or 0x-hex unsigned 64-bit number; 0 or -EINVAL/-ERANGE. */
int parse_u64(const char *s, uint64_t *out);
/* A 128-bit key as up to 32 hex digits, optional 0x; the number hi:lo. */
int parse_key(const char *s, struct beluga_key *out);
/* "2 MiB" for exact multiples, else "1.50 GiB". */
const char *format_size(char *buf, size_t len, uint64_t bytes);

/* ---- JSON writer (output.c) ---- */

#define JSON_MAX_DEPTH	8

/* A streaming pretty-printing writer; values are keyed inside objects. */
struct json {
	FILE *f;
	int depth;
	int items[JSON_MAX_DEPTH];	/* values written at each depth */
};

void json_init(struct json *j, FILE *f);
/* @key is NULL at the top level and inside arrays. */
void json_object_begin(struct json *j, const char *key);
void json_object_end(struct json *j);
void json_array_begin(struct json *j, const char *key);
void json_array_end(struct json *j);
void json_u64(struct json *j, const char *key, uint64_t v);
void json_int(struct json *j, const char *key, long long v);
void json_bool(struct json *j, const char *key, int v);
void json_null(struct json *j, const char *key);
void json_string(struct json *j, const char *key, const char *s);
/* Ends the document with a newline. */
void json_finish(struct json *j);

/* ---- Prometheus text format (output.c) ---- */

void prom_family(FILE *f, const char *name, const char *type, const char *help);
/* One sample; @labels is preformatted ("" or `region="dax0.0",id="0"`). */
void prom_sample(FILE *f, const char *name, const char *labels, uint64_t v);
/* Escape a label value (backslash, quote, newline) into @buf. */
const char *prom_escape(char *buf, size_t len, const char *s);

/* ---- boot-time config (config.c) ---- */

#define CONFIG_MAX_ENTRIES	64

struct config_entry {
	enum beluga_backend backend;
	char dax[BELUGA_NAME_LEN];	/* DAX: "dax0.0" */
	int node;			/* NODE */
	uint64_t bytes;			/* NODE */
	unsigned int line;
};

struct config {
	uint64_t block_size;		/* 0: the module's default */
	unsigned int nr_entries;
	struct config_entry entries[CONFIG_MAX_ENTRIES];
};

/*
 * Read @path. On a syntax error returns -EINVAL with "FILE:LINE: what is
 * wrong and what is expected" in @err; -errno when the file is unreadable.
 */
int config_read(const char *path, struct config *cfg, char *err, size_t errlen);

#endif /* BELUGACTL_H */
