// SPDX-License-Identifier: GPL-2.0
/*
 * belugactl attach, detach and apply: the commands that change which
 * regions the pool has. attach and apply attach through attach_one(),
 * which also guards a dax instance's /dev/daxX.Y node (daxnode.c); detach
 * gives the node its mode back.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "belugactl.h"

/* ---- attach ---- */

static void print_attached(const struct beluga_attach *a, enum progress_mode mode)
{
	char bsz[32], total[32];

	if (mode == PROGRESS_JSON) {
		struct json j;

		json_init_line(&j, stdout);
		json_object_begin(&j, NULL);
		json_string(&j, "event", "attached");
		json_string(&j, "name", a->name);
		json_u64(&j, "region_id", a->region_id);
		json_u64(&j, "nr_blocks", a->nr_blocks);
		json_u64(&j, "block_size", a->block_size);
		json_u64(&j, "first_offset", a->first_offset);
		json_object_end(&j);
		json_finish(&j);
		return;
	}

	printf("attached %s: region %u, %" PRIu64 " blocks of %s (%s) at offset %#" PRIx64 "\n",
	       a->name[0] ? a->name : "region", a->region_id, (uint64_t)a->nr_blocks,
	       format_size(bsz, sizeof(bsz), a->block_size),
	       format_size(total, sizeof(total), a->nr_blocks * a->block_size),
	       (uint64_t)a->first_offset);
}

/* One region to attach, from the command line or a config file line. */
struct attach_request {
	const char *dax;	/* "dax0.0" or "/dev/dax0.0"; NULL: a node */
	int node;
	uint64_t bytes;		/* node only */
	uint64_t block_size;	/* 0: the pool's */
	int shared;		/* dax only */
	int host_id;		/* shared: -1 for the module's host_id */
	unsigned int flags;	/* shared: LIBBELUGA_SHARED_FORMAT */
	int force;		/* dax: attach even though the node is held */
	int json;		/* --json: progress and result as JSON lines */
};

/* A refusal that attach_one() has reported itself. */
#define ATTACH_REFUSED	1

/* "pid 12 (fio), pid 34 (sh) and 2 more" */
static const char *format_holders(char *buf, size_t len, const struct dax_holder *h, int n,
				  int shown)
{
	size_t used = 0;
	int i;

	buf[0] = '\0';
	for (i = 0; i < shown && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%spid %d (%s)",
					 i ? ", " : "", h[i].pid, h[i].comm[0] ? h[i].comm : "?");
	if (n > shown && used < len)
		snprintf(buf + used, len - used, " and %d more", n - shown);
	return buf;
}

/*
 * Before a dax instance is attached: close its node to new openers (mode
 * 0000, daxnode.c), then look for processes that already have it open or
 * mapped: whatever they write there would land in the pool's blocks. A
 * holder refuses the attach unless --force. Returns 0, with @saved_now
 * set when the node's old mode was saved by this call (attach_one()
 * restores it if the attach fails; an earlier attach's is left alone), or
 * ATTACH_REFUSED after saying why.
 */
static int guard_dax_node(const struct attach_request *req, int *saved_now)
{
	struct dax_holder h[4];
	char path[PATH_MAX], who[256];
	int n, saved;

	*saved_now = 0;
	dax_node_path(req->dax, path, sizeof(path));
	if (access(path, F_OK) && errno == ENOENT)
		return 0;	/* no node: nobody opens it by that path */
	saved = dax_node_tighten(req->dax, path);
	*saved_now = saved == 0;
	if (saved < 0)
		fprintf(stderr, "belugactl %s: warning: cannot make %s mode 0000 while it is "
			"attached: %s\n", cmd_name, path, strerror(-saved));
	n = dax_node_holders(path, h, 4);
	if (n < 0)
		fprintf(stderr, "belugactl %s: warning: cannot tell who has %s open: %s\n",
			cmd_name, path, strerror(-n));
	if (n <= 0)
		return 0;
	format_holders(who, sizeof(who), h, n, n < 4 ? n : 4);
	if (req->force) {
		fprintf(stderr, "belugactl %s: warning: %s is open in %s (--force): it can "
			"still write the pool's blocks\n", cmd_name, path, who);
		return 0;
	}
	fprintf(stderr, "belugactl %s: %s is open in %s: it could write the pool's blocks "
		"behind Beluga's back; stop %s, or attach anyway with --force\n", cmd_name,
		path, who, n == 1 ? "it" : "them");
	if (*saved_now)
		dax_node_restore(req->dax, NULL);
	*saved_now = 0;
	return ATTACH_REFUSED;
}

/*
 * Attach @req and print what the pool got. Returns libbeluga's 0 or
 * -errno, for the caller to report (beluga_last_error(b) says why), or
 * ATTACH_REFUSED, reported already.
 */
static int attach_one(struct beluga *b, const struct attach_request *req)
{
	struct attach_progress progress;
	enum progress_mode mode;
	struct beluga_attach out;
	int saved_now = 0, ret;

	if (req->dax && guard_dax_node(req, &saved_now))
		return ATTACH_REFUSED;
	mode = req->json ? PROGRESS_JSON : isatty(STDERR_FILENO) ? PROGRESS_TTY : PROGRESS_OFF;
	attach_progress_start(&progress, b, mode, req->dax, req->node);
	if (req->shared)
		ret = beluga_attach_dax_shared(b, req->dax, req->block_size, req->host_id,
					       req->flags, &out);
	else if (req->dax)
		ret = beluga_attach_dax(b, req->dax, req->block_size, &out);
	else
		ret = beluga_attach_node(b, req->node, req->bytes, req->block_size, &out);
	attach_progress_stop(&progress);
	if (ret) {
		if (saved_now)
			dax_node_restore(req->dax, NULL);
		return ret;
	}
	if (!out.name[0] && req->dax)
		snprintf(out.name, sizeof(out.name), "%s", req->dax);
	else if (!out.name[0])
		snprintf(out.name, sizeof(out.name), "node%d", req->node);
	print_attached(&out, mode);
	return 0;
}

int cmd_attach(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "node", required_argument, NULL, 'n' },
		{ "size", required_argument, NULL, 's' },
		{ "block-size", required_argument, NULL, 'b' },
		{ "shared", no_argument, NULL, 'S' },
		{ "format", no_argument, NULL, 'F' },
		{ "host-id", required_argument, NULL, 'H' },
		{ "force", no_argument, NULL, 'f' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t node = 0, bytes = 0, block_size = 0, host_id = 0;
	int have_node = 0, have_size = 0, force = 0, json = 0, opt, ret;
	int shared = 0, format = 0, have_host_id = 0;
	struct attach_request req;
	const char *dax = NULL;
	struct beluga *b;

	while ((opt = getopt_long(argc, argv, ":n:s:b:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'n':
			if (parse_u64(optarg, &node) || node > 65535)
				return usage_error("invalid NUMA node '%s': give a node number "
						   "such as 1 (see `belugactl list`)", optarg);
			have_node = 1;
			break;
		case 's':
			if (parse_size(optarg, &bytes) || !bytes)
				return usage_error("invalid size '%s': use a number with an optional "
						   "K, M, G or T suffix, e.g. 192M", optarg);
			have_size = 1;
			break;
		case 'b':
			ret = parse_block_size(optarg, &block_size);
			if (ret)
				return ret;
			break;
		case 'S':
			shared = 1;
			break;
		case 'F':
			format = 1;
			break;
		case 'f':
			force = 1;
			break;
		case 'j':
			json = 1;
			break;
		case 'H':
			if (parse_u64(optarg, &host_id) || host_id > 15)
				return usage_error("invalid host id '%s': give 0 to 15, unique "
						   "among the hosts sharing the pool", optarg);
			have_host_id = 1;
			break;
		default:
			return other_option(argv, opt);
		}
	}
	ret = last_argument(argc, argv, &dax, "attach one region at a time");
	if (ret)
		return ret;
	if (dax && have_node)
		return usage_error("give either a dax device or --node, not both");
	if (!dax && !have_node)
		return usage_error("attach what? give a dax device (e.g. /dev/dax0.0) "
				   "or --node N --size SIZE");
	if (dax && have_size)
		return usage_error("--size applies to --node only: a dax device is attached whole");
	if (have_node && !have_size)
		return usage_error("--node needs --size, the bytes to reserve (e.g. --size 192M)");
	if (dax && !strncmp(dax, "/dev/", 5) && strncmp(dax, "/dev/dax", 8))
		return usage_error("'%s' is not a device-dax path: expected /dev/daxX.Y", dax);
	if (force && !dax)
		return usage_error("--force applies to a dax device only");
	if ((format || have_host_id) && !shared)
		return usage_error("--format and --host-id apply to --shared only");
	if (shared && !dax)
		return usage_error("--shared needs a dax device: a shared pool lives on CXL "
				   "memory that several hosts reach");

	req = (struct attach_request){
		.dax = dax, .node = (int)node, .bytes = bytes, .block_size = block_size,
		.shared = shared, .host_id = have_host_id ? (int)host_id : -1,
		.flags = format ? LIBBELUGA_SHARED_FORMAT : 0, .force = force, .json = json,
	};
	ret = open_device(O_RDWR, &b);
	if (ret)
		return ret;
	ret = attach_one(b, &req);
	if (ret == ATTACH_REFUSED) {
		ret = EXIT_FAILED;
	} else if (ret) {
		const struct hint_context ctx = { .dax = dax };

		ret = op_failed_ctx(b, ret, &ctx);
	} else {
		ret = EXIT_OK;
	}
	beluga_close(b);
	return ret;
}

/* ---- detach ---- */

/* After DETACH of region @name: its dax node gets back the mode attach saved. */
static void restore_dax_node(const char *name)
{
	int ret;

	if (strncmp(name, "dax", 3))
		return;
	ret = dax_node_restore(name, NULL);
	if (ret < 0)
		fprintf(stderr, "belugactl %s: warning: cannot give the node of %s its mode "
			"back: %s\n", cmd_name, name, strerror(-ret));
}

int cmd_detach(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "evict", no_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct beluga_region_info ri;
	uint64_t id, evicted = 0;
	int evict = 0, opt, ret, slot;
	const char *which = NULL;
	struct beluga *b;

	while ((opt = getopt_long(argc, argv, ":eh", opts, NULL)) != -1) {
		switch (opt) {
		case 'e':
			evict = 1;
			break;
		default:
			return other_option(argv, opt);
		}
	}
	if (optind >= argc)
		return usage_error("detach what? give a region id or name (see `belugactl status`)");
	ret = last_argument(argc, argv, &which, "detach one region at a time");
	if (ret)
		return ret;

	ret = open_device(O_RDWR, &b);
	if (ret)
		return ret;
	if (!parse_u64(which, &id)) {
		if (id >= (uint64_t)max_regions(b)) {
			fprintf(stderr, "belugactl detach: no region %s: region ids are 0..%d; "
				"see `belugactl status`\n", which, max_regions(b) - 1);
			beluga_close(b);
			return EXIT_FAILED;
		}
		slot = (int)id;
	} else {
		slot = find_region_by_name(b, which);
		if (slot < 0) {
			fprintf(stderr, "belugactl detach: no attached region named '%s': "
				"see `belugactl status`\n", which);
			beluga_close(b);
			return EXIT_FAILED;
		}
	}
	if (beluga_region_info(b, (uint32_t)slot, &ri))
		snprintf(ri.name, sizeof(ri.name), "region %d", slot);
	ret = beluga_detach(b, (uint32_t)slot, evict ? BELUGA_DETACH_EVICT : 0, &evicted);
	if (ret) {
		const struct hint_context ctx = { .evict = evict };

		ret = op_failed_ctx(b, ret, &ctx);
	} else {
		printf("detached region %d (%.*s)", slot, (int)sizeof(ri.name), ri.name);
		if (evict)
			printf(", evicted %" PRIu64 " published blocks", evicted);
		printf("\n");
		restore_dax_node(ri.name);
	}
	beluga_close(b);
	return ret;
}

/* ---- apply ---- */

static void print_plan(const char *path, const struct config *cfg)
{
	char bsz[32], sz[32];
	unsigned int i;

	printf("%s: block size %s, %u region%s\n", path,
	       cfg->block_size ? format_size(bsz, sizeof(bsz), cfg->block_size) : "default (2 MiB)",
	       cfg->nr_entries, cfg->nr_entries == 1 ? "" : "s");
	for (i = 0; i < cfg->nr_entries; i++) {
		const struct config_entry *e = &cfg->entries[i];

		if (e->backend == BELUGA_BACKEND_DAX)
			printf("  attach %s\n", e->dax);
		else
			printf("  attach node %d, %s\n", e->node,
			       format_size(sz, sizeof(sz), e->bytes));
	}
}

int cmd_apply(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "check", no_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = DEFAULT_CONFIG;
	unsigned int i, failed = 0;
	struct region_list rl;
	struct config cfg;
	int check = 0, opt, ret, slot;
	struct beluga *b;
	char err[512];

	while ((opt = getopt_long(argc, argv, ":ch", opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			check = 1;
			break;
		default:
			return other_option(argv, opt);
		}
	}
	ret = last_argument(argc, argv, &path, "give one config file");
	if (ret)
		return ret;

	ret = config_read(path, &cfg, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "belugactl apply: %s\n", err);
		return ret == -EINVAL ? EXIT_USAGE : EXIT_FAILED;
	}
	if (check) {
		print_plan(path, &cfg);
		return EXIT_OK;
	}
	if (!cfg.nr_entries) {
		printf("%s lists no regions: nothing to attach\n", path);
		return EXIT_OK;
	}

	ret = open_device(O_RDWR, &b);
	if (ret)
		return ret;
	read_regions(b, &rl);
	/*
	 * Attach what is not attached yet, keep going past failures so one
	 * missing device does not cost the others, and fail at the end.
	 */
	for (i = 0; i < cfg.nr_entries; i++) {
		const struct config_entry *e = &cfg.entries[i];
		struct attach_request req = {
			.dax = e->backend == BELUGA_BACKEND_DAX ? e->dax : NULL,
			.node = e->node, .bytes = e->bytes, .block_size = cfg.block_size,
		};
		char name[BELUGA_NAME_LEN];

		if (e->backend == BELUGA_BACKEND_DAX)
			snprintf(name, sizeof(name), "%s", e->dax);
		else
			snprintf(name, sizeof(name), "node%d", e->node);
		slot = find_region_by_name(b, name);
		if (slot >= 0) {
			printf("%s: already attached as region %d\n", name, slot);
			continue;
		}
		ret = attach_one(b, &req);
		if (ret == ATTACH_REFUSED) {
			failed++;
		} else if (ret) {
			const struct hint_context ctx = { .dax = req.dax };
			char hint[256];

			fprintf(stderr, "belugactl apply: %s:%u: %s%s\n", path, e->line,
				beluga_last_error(b), cli_hint(hint, sizeof(hint), &ctx, ret));
			failed++;
		}
	}
	beluga_close(b);
	if (failed) {
		fprintf(stderr, "belugactl apply: %u of %u regions failed to attach\n",
			failed, cfg.nr_entries);
		return EXIT_FAILED;
	}
	return EXIT_OK;
}
