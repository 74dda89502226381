/* SPDX-License-Identifier: GPL-2.0 */
/*
 * belugactl internals, shared by the command families (attach.c, status.c,
 * evict.c), the region lookup (regions.c), util/ (parsing, JSON,
 * Prometheus text) and the boot-time config reader (config.c).
 */
#ifndef BELUGACTL_H
#define BELUGACTL_H

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "libbeluga.h"

/* Exit codes, as documented in `belugactl --help`. */
enum {
	EXIT_OK = 0,
	EXIT_FAILED = 1,	/* the operation failed */
	EXIT_USAGE = 2,		/* bad arguments or config syntax */
};

/* ---- the command line (belugactl.c) ---- */

#define DEFAULT_CONFIG		"/etc/beluga.conf"

/* From -d/--device; NULL lets libbeluga use $BELUGA_DEVICE or /dev/beluga. */
extern const char *device_path;
/* The command being run, for messages ("attach"). */
extern const char *cmd_name;

/* A usage error: say what is wrong, point at --help; returns EXIT_USAGE. */
int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* What cli_hint() needs to know about the failed call besides its error. */
struct hint_context {
	int opening;		/* beluga_open() failed */
	const char *dax;	/* attach: the dax device, NULL for a node */
	int evict;		/* detach: --evict was given */
};

/* A failed library call: its message and a hint; returns EXIT_FAILED. */
int op_failed(const struct beluga *b, int err);
int op_failed_ctx(const struct beluga *b, int err, const struct hint_context *ctx);
/*
 * The fix for error @err of a library call made by @cmd_name (hints.c),
 * to append to the library's message: "" or text starting with its own
 * separator. May format into @buf.
 */
const char *cli_hint(char *buf, size_t len, const struct hint_context *ctx, int err);
/* beluga_open() with @flags, reporting failure; EXIT_OK or EXIT_FAILED. */
int open_device(int flags, struct beluga **b);
/* getopt_long's complaint about argv[optind - 1], reworded. */
int bad_option(char **argv, int opt);
/* The running command's --help. */
int print_help(void);
/* --help ('h') or bad_option(): the default of every option switch. */
int other_option(char **argv, int opt);
/* At most one argument after the options (none if @arg is NULL). */
int last_argument(int argc, char **argv, const char **arg, const char *hint);
/* --block-size, validated so that a typo never reaches the module. */
int parse_block_size(const char *s, uint64_t *out);

/* ---- the commands ---- */

int cmd_attach(int argc, char **argv);		/* attach.c */
int cmd_detach(int argc, char **argv);
int cmd_apply(int argc, char **argv);
int cmd_status(int argc, char **argv);		/* status.c */
int cmd_stats(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_evict(int argc, char **argv);		/* evict.c */

/* ---- regions (regions.c) ---- */

struct region_list {
	unsigned int nr;
	struct beluga_region_info ri[BELUGA_MAX_REGIONS];
};

/* Region slots the module has (BELUGA_MAX_REGIONS if it cannot say). */
int max_regions(struct beluga *b);
/* The slot of the region named @name ("dax0.0", "/dev/dax0.0", "node1"), or -ENOENT. */
int find_region_by_name(struct beluga *b, const char *name);
/* Every attached region's REGION_INFO. */
void read_regions(struct beluga *b, struct region_list *rl);
/* "dax", "node" or "unknown". */
const char *backend_name(uint32_t backend);

/* ---- the /dev/daxX.Y node of an attached instance (daxnode.c) ---- */

/* A process that holds a dax node open or mapped. */
struct dax_holder {
	int pid;
	char comm[32];
};

/* The node of @dax ("dax0.0" or "/dev/dax0.0"): $BELUGA_DEV_ROOT/dax0.0. */
void dax_node_path(const char *dax, char *buf, size_t len);
/*
 * Processes other than this one that hold @path open or mapped: how many
 * (the first @max go to @out), or -errno when @path or /proc is unreadable.
 */
int dax_node_holders(const char *path, struct dax_holder *out, int max);
/*
 * Save @path's mode for dax_node_restore(), then make it 0000: 0, 1 when a
 * mode saved earlier (an attach before this one) is kept, or -errno.
 */
int dax_node_tighten(const char *dax, const char *path);
/*
 * Put back the mode dax_node_tighten() saved for @dax (into @mode if not
 * NULL): 0, 1 when none was saved, or -errno.
 */
int dax_node_restore(const char *dax, unsigned int *mode);

/* ---- progress of an ATTACH, from the pool's sysfs "attaching" (progress.c) ---- */

enum progress_mode {
	PROGRESS_OFF,		/* stderr is not a terminal, and no --json */
	PROGRESS_TTY,		/* one line on stderr, rewritten in place */
	PROGRESS_JSON,		/* {"event": "progress", ...} lines on stdout */
};

struct attach_progress {
	enum progress_mode mode;
	char path[PATH_MAX];		/* the pool's sysfs "attaching" */
	char name[BELUGA_NAME_LEN];	/* the region followed: dax0.0, node1 */
	int dax;			/* zeroing a dax range, else allocating */
	int shown;			/* a terminal line is on screen */
	int running, stop;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
};

/*
 * Follow the ATTACH of @dax ("dax0.0", "/dev/dax0.0"), or of node @node when
 * @dax is NULL, on the pool behind @b, until attach_progress_stop(), which
 * also erases the terminal line.
 */
void attach_progress_start(struct attach_progress *p, struct beluga *b, enum progress_mode mode,
			   const char *dax, int node);
void attach_progress_stop(struct attach_progress *p);

/* ---- argument parsing (util/parse.c) ---- */

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

/* ---- JSON writer (util/json.c) ---- */

#define JSON_MAX_DEPTH	8

/* A streaming pretty-printing writer; values are keyed inside objects. */
struct json {
	FILE *f;
	int depth;
	int items[JSON_MAX_DEPTH];	/* values written at each depth */
	int one_line;			/* JSON Lines: the document on one line */
};

void json_init(struct json *j, FILE *f);
/* A writer whose document is one line (a JSON Lines record). */
void json_init_line(struct json *j, FILE *f);
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

/* ---- Prometheus text format (util/prom.c) ---- */

void prom_family(FILE *f, const char *name, const char *type, const char *help);
/*
 * One sample, labelled pool="NAME" (the device's name: beluga, beluga1)
 * and then @labels, preformatted ("" or `region="dax0.0",id="0"`).
 */
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
