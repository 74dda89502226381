// SPDX-License-Identifier: GPL-2.0
/*
 * belugactl: the operator's tool for the Beluga KV-cache pool.
 *
 *   belugactl attach /dev/dax0.0 [--block-size 2M]
 *   belugactl attach --node 1 --size 192M [--block-size 2M]
 *   belugactl attach --shared [--host-id N] [--format] /dev/dax0.0
 *   belugactl detach REGION_ID|NAME [--evict]
 *   belugactl status [--json | --prometheus]
 *   belugactl stats [--json | --prometheus]
 *   belugactl evict --ns N (--key HEX | --all)
 *   belugactl list [--json]
 *   belugactl apply [--check] [FILE]
 *
 * Exit codes: 0 ok, 1 the operation failed, 2 usage error. Every error
 * message says what went wrong and what to do about it.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "belugactl.h"

#define BELUGACTL_VERSION	"1.0.0"
#define DEFAULT_CONFIG		"/etc/beluga.conf"

/* From -d/--device; NULL lets libbeluga use $BELUGA_DEVICE or /dev/beluga. */
static const char *device_path;
static const char *cmd_name = "belugactl";

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *synopsis;
	const char *help;
};

static const struct command *find_command(const char *name);

/* ---- error helpers ---- */

/* A usage error: say what is wrong, point at --help, exit code 2. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "belugactl %s: ", cmd_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'belugactl %s --help'.\n", cmd_name);
	return EXIT_USAGE;
}

/* The operation failed: print libbeluga's message (cause and fix). */
static int op_failed(const struct beluga *b, int err)
{
	const char *msg = beluga_last_error(b);

	fprintf(stderr, "belugactl %s: %s\n", cmd_name,
		msg && *msg ? msg : beluga_strerror(err));
	return EXIT_FAILED;
}

static int open_device(int flags, struct beluga **b)
{
	int ret = beluga_open(device_path, flags, b);

	return ret ? op_failed(NULL, ret) : EXIT_OK;
}

/* getopt_long's complaint, reworded: name the option and the fix. */
static int bad_option(char **argv, int opt)
{
	const char *arg = argv[optind - 1];

	if (opt == ':')
		return usage_error("option '%s' needs a value", arg);
	return usage_error("unknown option '%s'", arg);
}

static int print_help(void)
{
	const struct command *c = find_command(cmd_name);

	printf("Usage: belugactl %s %s\n\n%s", c->name, c->synopsis, c->help);
	return EXIT_OK;
}

/* --block-size: validated here so a typo never reaches the module. */
static int parse_block_size(const char *s, uint64_t *out)
{
	if (parse_size(s, out))
		return usage_error("invalid block size '%s': use a number with an optional "
				   "K, M or G suffix, e.g. 2M", s);
	if (*out < BELUGA_BLOCK_SIZE_MIN || *out > BELUGA_BLOCK_SIZE_MAX || *out % 4096)
		return usage_error("invalid block size '%s': it must be a multiple of 4K "
				   "from 4K to 1G, e.g. 2M", s);
	return EXIT_OK;
}

/* ---- attach ---- */

static void print_attached(const struct beluga_attach *a)
{
	char bsz[32], total[32];

	printf("attached %s: region %u, %" PRIu64 " blocks of %s (%s) at offset %#" PRIx64 "\n",
	       a->name[0] ? a->name : "region", a->region_id, (uint64_t)a->nr_blocks,
	       format_size(bsz, sizeof(bsz), a->block_size),
	       format_size(total, sizeof(total), a->nr_blocks * a->block_size),
	       (uint64_t)a->first_offset);
}

static int cmd_attach(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "node", required_argument, NULL, 'n' },
		{ "size", required_argument, NULL, 's' },
		{ "block-size", required_argument, NULL, 'b' },
		{ "shared", no_argument, NULL, 'S' },
		{ "format", no_argument, NULL, 'F' },
		{ "host-id", required_argument, NULL, 'H' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t node = 0, bytes = 0, block_size = 0, host_id = 0;
	int have_node = 0, have_size = 0, opt, ret;
	int shared = 0, format = 0, have_host_id = 0;
	struct beluga_attach out;
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
		case 'H':
			if (parse_u64(optarg, &host_id) || host_id > 15)
				return usage_error("invalid host id '%s': give 0 to 15, unique "
						   "among the hosts sharing the pool", optarg);
			have_host_id = 1;
			break;
		case 'h':
			return print_help();
		default:
			return bad_option(argv, opt);
		}
	}
	if (optind < argc)
		dax = argv[optind++];
	if (optind < argc)
		return usage_error("unexpected argument '%s': attach one region at a time",
				   argv[optind]);
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
	if ((format || have_host_id) && !shared)
		return usage_error("--format and --host-id apply to --shared only");
	if (shared && !dax)
		return usage_error("--shared needs a dax device: a shared pool lives on CXL "
				   "memory that several hosts reach");

	ret = open_device(O_RDWR, &b);
	if (ret)
		return ret;
	if (shared)
		ret = beluga_attach_dax_shared(b, dax, block_size,
					       have_host_id ? (int)host_id : -1, format, &out);
	else if (dax)
		ret = beluga_attach_dax(b, dax, block_size, &out);
	else
		ret = beluga_attach_node(b, (int)node, bytes, block_size, &out);
	if (ret) {
		ret = op_failed(b, ret);
	} else {
		if (!out.name[0] && !dax)
			snprintf(out.name, sizeof(out.name), "node%d", (int)node);
		print_attached(&out);
		ret = EXIT_OK;
	}
	beluga_close(b);
	return ret;
}

/* ---- region lookup by id or name ---- */

static int max_regions(struct beluga *b)
{
	struct beluga_info info;

	if (beluga_info(b, &info) || !info.max_regions || info.max_regions > 1024)
		return BELUGA_MAX_REGIONS;
	return (int)info.max_regions;
}

/*
 * Find the region named @name ("dax0.0", "/dev/dax0.0", "node1").
 * Returns the slot, or -ENOENT.
 */
static int find_region_by_name(struct beluga *b, const char *name)
{
	struct beluga_region_info ri;
	const char *base = strrchr(name, '/');
	int i, n = max_regions(b);

	base = base ? base + 1 : name;
	for (i = 0; i < n; i++) {
		if (beluga_region_info(b, (uint32_t)i, &ri))
			continue;
		if (!strncmp(ri.name, base, sizeof(ri.name)))
			return i;
	}
	return -ENOENT;
}

/* ---- detach ---- */

static int cmd_detach(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "evict", no_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct beluga_region_info ri;
	uint64_t id, evicted = 0;
	int evict = 0, opt, ret, slot;
	const char *which;
	struct beluga *b;

	while ((opt = getopt_long(argc, argv, ":eh", opts, NULL)) != -1) {
		switch (opt) {
		case 'e':
			evict = 1;
			break;
		case 'h':
			return print_help();
		default:
			return bad_option(argv, opt);
		}
	}
	if (optind >= argc)
		return usage_error("detach what? give a region id or name (see `belugactl status`)");
	which = argv[optind++];
	if (optind < argc)
		return usage_error("unexpected argument '%s': detach one region at a time",
				   argv[optind]);

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
	ret = beluga_detach(b, (uint32_t)slot, evict, &evicted);
	if (ret) {
		ret = op_failed(b, ret);
	} else {
		printf("detached region %d (%.*s)", slot, (int)sizeof(ri.name), ri.name);
		if (evict)
			printf(", evicted %" PRIu64 " published blocks", evicted);
		printf("\n");
	}
	beluga_close(b);
	return ret;
}

/* ---- status ---- */

enum output_format { OUT_HUMAN, OUT_JSON, OUT_PROMETHEUS };

static const char *backend_name(uint32_t backend)
{
	switch (backend) {
	case BELUGA_BACKEND_DAX:
		return "dax";
	case BELUGA_BACKEND_NODE:
		return "node";
	default:
		return "unknown";
	}
}

/* Parse --json / --prometheus (when @allow_prom) / --help. */
static int parse_format(int argc, char **argv, int allow_prom, enum output_format *fmt)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "prometheus", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	*fmt = OUT_HUMAN;
	while ((opt = getopt_long(argc, argv, ":jph", opts, NULL)) != -1) {
		switch (opt) {
		case 'j':
		case 'p':
			if (opt == 'p' && !allow_prom)
				return usage_error("--prometheus is not available here "
						   "(only for status and stats)");
			if (*fmt != OUT_HUMAN)
				return usage_error("give one of --json and --prometheus");
			*fmt = opt == 'j' ? OUT_JSON : OUT_PROMETHEUS;
			break;
		case 'h':
			print_help();
			return -1;
		default:
			return bad_option(argv, opt);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	return EXIT_OK;
}

struct region_list {
	unsigned int nr;
	struct beluga_region_info ri[BELUGA_MAX_REGIONS];
};

static void read_regions(struct beluga *b, struct region_list *rl)
{
	int i, n = max_regions(b);

	if (n > BELUGA_MAX_REGIONS)
		n = BELUGA_MAX_REGIONS;
	rl->nr = 0;
	for (i = 0; i < n; i++)
		if (!beluga_region_info(b, (uint32_t)i, &rl->ri[rl->nr]))
			rl->nr++;
}

static void region_labels(char *buf, size_t len, const struct beluga_region_info *ri)
{
	char name[2 * BELUGA_NAME_LEN + 1], nul_terminated[BELUGA_NAME_LEN + 1];

	snprintf(nul_terminated, sizeof(nul_terminated), "%.*s", BELUGA_NAME_LEN, ri->name);
	snprintf(buf, len, "region=\"%s\",id=\"%u\",backend=\"%s\",node=\"%d\"",
		 prom_escape(name, sizeof(name), nul_terminated), ri->region_id,
		 backend_name(ri->backend), ri->node);
}

/*
 * A shared pool's hosts: one line per host record in the pool's sysfs
 * "hosts" (Documentation/ABI/testing/sysfs-class-misc-beluga), empty for a
 * pool that is not shared:
 *   ID STATE INCARNATION HEARTBEAT OWNED_HEX alive|dead SILENT_MS self|- NAME|-
 */
#define MAX_POOL_HOSTS	64

struct pool_host {
	unsigned int id, incarnation, owned;
	unsigned long long heartbeat, silent_ms;
	int alive, self;
	char state[16], name[64];	/* name "" for "-" */
};

struct host_list {
	int shared;		/* the hosts file exists */
	unsigned int nr;
	struct pool_host h[MAX_POOL_HOSTS];
};

/* Parse one line of "hosts"; 0, or -EINVAL for a line of another shape. */
static int parse_host_line(const char *line, struct pool_host *h)
{
	char alive[16], self[16];
	int end = 0;

	memset(h, 0, sizeof(*h));
	if (sscanf(line, "%u %15s %u %llu %x %15s %llu %15s %63s %n", &h->id, h->state,
		   &h->incarnation, &h->heartbeat, &h->owned, alive, &h->silent_ms, self,
		   h->name, &end) != 9 || line[end] != '\0')
		return -EINVAL;
	if (strcmp(alive, "alive") && strcmp(alive, "dead"))
		return -EINVAL;
	if (strcmp(self, "self") && strcmp(self, "-"))
		return -EINVAL;
	h->alive = !strcmp(alive, "alive");
	h->self = !strcmp(self, "self");
	if (!strcmp(h->name, "-"))
		h->name[0] = '\0';
	return 0;
}

/* The hosts of the pool behind the device belugactl talks to. */
static void read_hosts(struct host_list *hl)
{
	const char *dev = device_path ? device_path : getenv("BELUGA_DEVICE");
	const char *root = getenv("BELUGA_SYSFS_ROOT");
	const char *base;
	char path[512], line[256];
	FILE *f;

	hl->shared = 0;
	hl->nr = 0;
	if (!dev || !*dev)
		dev = BELUGA_DEVICE_PATH;
	base = strrchr(dev, '/');
	snprintf(path, sizeof(path), "%s/class/misc/%s/hosts", root && *root ? root : "/sys",
		 base ? base + 1 : dev);
	f = fopen(path, "r");
	if (!f)
		return;
	hl->shared = 1;
	while (hl->nr < MAX_POOL_HOSTS && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (!parse_host_line(line, &hl->h[hl->nr]))
			hl->nr++;
	}
	fclose(f);
}

static unsigned int popcount32(unsigned int x)
{
	unsigned int n = 0;

	for (; x; x &= x - 1)
		n++;
	return n;
}

static void status_hosts_human(const struct host_list *hl)
{
	unsigned int i;

	if (!hl->nr)
		return;
	printf("\nshared pool hosts:\n%-4s %-7s %-6s %5s %11s %10s %9s  %s\n", "HOST", "STATE",
	       "ALIVE", "INC", "HEARTBEAT", "SILENT_MS", "OWNED", "NAME");
	for (i = 0; i < hl->nr; i++) {
		const struct pool_host *h = &hl->h[i];

		printf("%-4u %-7s %-6s %5u %11llu %10llu %#9x  %s%s\n", h->id, h->state,
		       h->alive ? "alive" : "dead", h->incarnation, h->heartbeat, h->silent_ms,
		       h->owned, h->name[0] ? h->name : "-", h->self ? " (this host)" : "");
	}
}

/* Every record the pool has, as the kernel reports it (state "none": unused). */
static void status_hosts_json(struct json *j, const struct host_list *hl)
{
	unsigned int i, p;

	json_array_begin(j, "hosts");
	for (i = 0; i < hl->nr; i++) {
		const struct pool_host *h = &hl->h[i];

		json_object_begin(j, NULL);
		json_u64(j, "id", h->id);
		json_string(j, "state", h->state);
		json_u64(j, "incarnation", h->incarnation);
		json_u64(j, "heartbeat", h->heartbeat);
		json_bool(j, "alive", h->alive);
		json_u64(j, "silent_ms", h->silent_ms);
		json_bool(j, "self", h->self);
		if (h->name[0])
			json_string(j, "name", h->name);
		else
			json_null(j, "name");
		json_u64(j, "owned_mask", h->owned);
		json_array_begin(j, "owned_partitions");
		for (p = 0; p < 32; p++)
			if (h->owned & (1u << p))
				json_u64(j, NULL, p);
		json_array_end(j);
		json_object_end(j);
	}
	json_array_end(j);
}

/* Records in use only (state other than "none"), to keep the series few. */
static void status_hosts_prometheus(FILE *f, const struct host_list *hl)
{
	static const struct {
		const char *name;
		const char *help;
	} metrics[] = {
		{ "beluga_pool_host_info", "Host record of the shared pool (1); labels "
					   "name, state, self." },
		{ "beluga_pool_host_alive", "1 when this host sees the host alive (its "
					    "heartbeat moved within a lease)." },
		{ "beluga_pool_host_incarnation", "Incarnation of the host (+1 at each join)." },
		{ "beluga_pool_host_heartbeat", "Heartbeat counter of the host's record." },
		{ "beluga_pool_host_silent_milliseconds", "Time since this host saw the "
							  "host's heartbeat move." },
		{ "beluga_pool_host_owned_partitions", "Partitions the host's record owns." },
	};
	char labels[256], name[2 * 64 + 1];
	unsigned int m, i, alive = 0;

	if (!hl->shared)
		return;
	for (i = 0; i < hl->nr; i++)
		alive += hl->h[i].alive;
	prom_family(f, "beluga_pool_hosts_alive", "gauge",
		    "Hosts of the shared pool that this host sees alive (itself included).");
	prom_sample(f, "beluga_pool_hosts_alive", "", alive);
	for (m = 0; m < sizeof(metrics) / sizeof(metrics[0]); m++) {
		prom_family(f, metrics[m].name, "gauge", metrics[m].help);
		for (i = 0; i < hl->nr; i++) {
			const struct pool_host *h = &hl->h[i];
			uint64_t v;

			if (!strcmp(h->state, "none") && !h->self)
				continue;
			if (m == 0)
				snprintf(labels, sizeof(labels),
					 "host=\"%u\",name=\"%s\",state=\"%s\",self=\"%d\"", h->id,
					 prom_escape(name, sizeof(name), h->name), h->state,
					 h->self);
			else
				snprintf(labels, sizeof(labels), "host=\"%u\"", h->id);
			switch (m) {
			case 0: v = 1; break;
			case 1: v = (uint64_t)h->alive; break;
			case 2: v = h->incarnation; break;
			case 3: v = h->heartbeat; break;
			case 4: v = h->silent_ms; break;
			default: v = popcount32(h->owned); break;
			}
			prom_sample(f, metrics[m].name, labels, v);
		}
	}
}

static void status_prometheus(const struct beluga_info *info, const struct region_list *rl,
			      const struct host_list *hl)
{
	static const struct {
		const char *name;
		const char *help;
		size_t offset;
	} region_metrics[] = {
#define RM(n, field, h) { "beluga_region_" n, h, offsetof(struct beluga_region_info, field) }
		RM("size_bytes", length, "Bytes claimed by the region."),
		RM("blocks", nr_blocks, "Blocks in the region."),
		RM("free_blocks", free_blocks, "Free blocks in the region."),
		RM("allocated_blocks", allocated_blocks, "Allocated, unpublished blocks in the region."),
		RM("published_blocks", published_blocks, "Published blocks in the region."),
#undef RM
	};
	char labels[256];
	unsigned int m, i;
	FILE *f = stdout;

	prom_family(f, "beluga_abi_version", "gauge", "ABI version of the loaded module.");
	prom_sample(f, "beluga_abi_version", "", info->abi_version);
	prom_family(f, "beluga_regions", "gauge", "Regions attached to the pool.");
	prom_sample(f, "beluga_regions", "", info->nr_regions);
	prom_family(f, "beluga_block_size_bytes", "gauge", "Bytes per block.");
	prom_sample(f, "beluga_block_size_bytes", "", info->block_size);
	prom_family(f, "beluga_map_size_bytes", "gauge", "Bytes of the pool's offset space.");
	prom_sample(f, "beluga_map_size_bytes", "", info->map_size);
	for (m = 0; m < sizeof(region_metrics) / sizeof(region_metrics[0]); m++) {
		prom_family(f, region_metrics[m].name, "gauge", region_metrics[m].help);
		for (i = 0; i < rl->nr; i++) {
			uint64_t v;

			memcpy(&v, (const char *)&rl->ri[i] + region_metrics[m].offset, sizeof(v));
			region_labels(labels, sizeof(labels), &rl->ri[i]);
			prom_sample(f, region_metrics[m].name, labels, v);
		}
	}
	prom_family(f, "beluga_region_mappings", "gauge",
		    "Live mappings of /dev/beluga that cover the region.");
	for (i = 0; i < rl->nr; i++) {
		region_labels(labels, sizeof(labels), &rl->ri[i]);
		prom_sample(f, "beluga_region_mappings", labels, rl->ri[i].mappings);
	}
	status_hosts_prometheus(f, hl);
}

static void status_json(const struct beluga_info *info, const struct beluga_stats *st,
			const struct host_list *hl,
			const struct region_list *rl)
{
	char name[BELUGA_NAME_LEN + 1];
	struct json j;
	unsigned int i;

	json_init(&j, stdout);
	json_object_begin(&j, NULL);
	json_u64(&j, "abi_version", info->abi_version);
	json_u64(&j, "nr_regions", info->nr_regions);
	json_u64(&j, "block_size", info->block_size);
	json_u64(&j, "nr_blocks", info->nr_blocks);
	json_u64(&j, "map_size", info->map_size);
	json_u64(&j, "max_batch", info->max_batch);
	json_u64(&j, "max_regions", info->max_regions);
	json_u64(&j, "free_blocks", st->free_blocks);
	json_u64(&j, "allocated_blocks", st->allocated_blocks);
	json_u64(&j, "published_blocks", st->published_blocks);
	json_u64(&j, "pinned_blocks", st->pinned_blocks);
	json_u64(&j, "pins", st->pins);
	json_u64(&j, "clients", st->clients);
	json_array_begin(&j, "regions");
	for (i = 0; i < rl->nr; i++) {
		const struct beluga_region_info *ri = &rl->ri[i];

		snprintf(name, sizeof(name), "%.*s", BELUGA_NAME_LEN, ri->name);
		json_object_begin(&j, NULL);
		json_u64(&j, "id", ri->region_id);
		json_string(&j, "name", name);
		json_string(&j, "backend", backend_name(ri->backend));
		json_int(&j, "node", ri->node);
		json_u64(&j, "phys_start", ri->phys_start);
		json_u64(&j, "size", ri->length);
		json_u64(&j, "first_offset", ri->first_offset);
		json_u64(&j, "nr_blocks", ri->nr_blocks);
		json_u64(&j, "free_blocks", ri->free_blocks);
		json_u64(&j, "allocated_blocks", ri->allocated_blocks);
		json_u64(&j, "published_blocks", ri->published_blocks);
		json_u64(&j, "mappings", ri->mappings);
		json_object_end(&j);
	}
	json_array_end(&j);
	status_hosts_json(&j, hl);
	json_object_end(&j);
	json_finish(&j);
}

static void status_human(const struct beluga_info *info, const struct beluga_stats *st,
			 const struct region_list *rl)
{
	char bsz[32], total[32], msz[32], rsz[32];
	int name_width = 4;
	unsigned int i;

	if (!info->nr_regions) {
		printf("pool:    no regions attached: run `belugactl attach /dev/dax0.0` or "
		       "`belugactl attach --node N --size SIZE` (see `belugactl list`)\n");
		printf("clients: %" PRIu64 "\n", (uint64_t)st->clients);
		return;
	}
	printf("pool:    %u region%s, %" PRIu64 " blocks of %s (%s), map size %s, ABI %u\n",
	       info->nr_regions, info->nr_regions == 1 ? "" : "s", (uint64_t)info->nr_blocks,
	       format_size(bsz, sizeof(bsz), info->block_size),
	       format_size(total, sizeof(total), info->nr_blocks * info->block_size),
	       format_size(msz, sizeof(msz), info->map_size), info->abi_version);
	printf("blocks:  %" PRIu64 " free, %" PRIu64 " allocated, %" PRIu64 " published "
	       "(%" PRIu64 " pinned by %" PRIu64 " pins)\n",
	       (uint64_t)st->free_blocks, (uint64_t)st->allocated_blocks,
	       (uint64_t)st->published_blocks, (uint64_t)st->pinned_blocks, (uint64_t)st->pins);
	printf("clients: %" PRIu64 "\n\n", (uint64_t)st->clients);

	for (i = 0; i < rl->nr; i++) {
		int w = (int)strnlen(rl->ri[i].name, BELUGA_NAME_LEN);

		if (w > name_width)
			name_width = w;
	}
	printf("%-3s %-*s %-7s %4s %10s %10s %10s %10s %10s %8s  %s\n", "ID", name_width, "NAME",
	       "BACKEND", "NODE", "SIZE", "BLOCKS", "FREE", "ALLOC", "PUBLISHED", "MAPPINGS",
	       "OFFSET");
	for (i = 0; i < rl->nr; i++) {
		const struct beluga_region_info *ri = &rl->ri[i];

		printf("%-3u %-*.*s %-7s %4d %10s %10" PRIu64 " %10" PRIu64 " %10" PRIu64
		       " %10" PRIu64 " %8u  %#" PRIx64 "\n",
		       ri->region_id, name_width, BELUGA_NAME_LEN, ri->name,
		       backend_name(ri->backend), ri->node,
		       format_size(rsz, sizeof(rsz), ri->length), (uint64_t)ri->nr_blocks,
		       (uint64_t)ri->free_blocks, (uint64_t)ri->allocated_blocks,
		       (uint64_t)ri->published_blocks, ri->mappings, (uint64_t)ri->first_offset);
	}
}

static int cmd_status(int argc, char **argv)
{
	static struct host_list hl;
	struct beluga_stats st;
	struct beluga_info info;
	enum output_format fmt;
	struct region_list rl;
	struct beluga *b;
	int ret;

	ret = parse_format(argc, argv, 1, &fmt);
	if (ret)
		return ret < 0 ? EXIT_OK : ret;
	ret = open_device(O_RDONLY, &b);
	if (ret)
		return ret;
	ret = beluga_info(b, &info);
	if (!ret)
		ret = beluga_stats(b, &st);
	if (ret) {
		ret = op_failed(b, ret);
		beluga_close(b);
		return ret;
	}
	read_regions(b, &rl);
	beluga_close(b);
	read_hosts(&hl);

	if (fmt == OUT_JSON)
		status_json(&info, &st, &hl, &rl);
	else if (fmt == OUT_PROMETHEUS)
		status_prometheus(&info, &rl, &hl);
	else {
		status_human(&info, &st, &rl);
		status_hosts_human(&hl);
	}
	return EXIT_OK;
}

/* ---- stats ---- */

/* Field names are the JSON keys; the table keeps the three outputs in step. */
static const struct stat_field {
	const char *name;
	size_t offset;
	int counter;		/* monotonic since load (Prometheus counter) */
	const char *help;
} stat_fields[] = {
#define SF(f, c, h) { #f, offsetof(struct beluga_stats, f), c, h }
	SF(total_blocks, 0, "Blocks in the pool."),
	SF(free_blocks, 0, "Free blocks."),
	SF(allocated_blocks, 0, "Blocks allocated by a client, not yet published."),
	SF(published_blocks, 0, "Published blocks."),
	SF(retired_blocks, 0, "Blocks a memory error took out of service."),
	SF(pinned_blocks, 0, "Published blocks with at least one pin."),
	SF(pins, 0, "Pins held by all clients."),
	SF(clients, 0, "Open files of /dev/beluga."),
	SF(allocs, 1, "Blocks handed out by ALLOC."),
	SF(frees, 1, "Blocks returned by FREE, a lost publish race, or close."),
	SF(publishes, 1, "Blocks that became visible."),
	SF(publish_races, 1, "PUBLISH items that found their key present."),
	SF(lookups, 1, "LOOKUP calls."),
	SF(lookup_keys, 1, "Keys asked for by LOOKUP."),
	SF(lookup_hits, 1, "Keys found by LOOKUP (leading run)."),
	SF(releases, 1, "Pins dropped by RELEASE or close."),
	SF(evictions, 1, "Published blocks evicted."),
	SF(alloc_failures, 1, "ALLOC calls that failed with ENOSPC."),
#undef SF
};

#define NR_STAT_FIELDS	(sizeof(stat_fields) / sizeof(stat_fields[0]))

static uint64_t stat_value(const struct beluga_stats *st, const struct stat_field *f)
{
	uint64_t v;

	memcpy(&v, (const char *)st + f->offset, sizeof(v));
	return v;
}

static int cmd_stats(int argc, char **argv)
{
	enum output_format fmt;
	struct beluga_stats st;
	struct beluga *b;
	char name[64];
	unsigned int i;
	struct json j;
	int ret;

	ret = parse_format(argc, argv, 1, &fmt);
	if (ret)
		return ret < 0 ? EXIT_OK : ret;
	ret = open_device(O_RDONLY, &b);
	if (ret)
		return ret;
	ret = beluga_stats(b, &st);
	if (ret) {
		ret = op_failed(b, ret);
		beluga_close(b);
		return ret;
	}
	beluga_close(b);

	switch (fmt) {
	case OUT_JSON:
		json_init(&j, stdout);
		json_object_begin(&j, NULL);
		for (i = 0; i < NR_STAT_FIELDS; i++)
			json_u64(&j, stat_fields[i].name, stat_value(&st, &stat_fields[i]));
		json_object_end(&j);
		json_finish(&j);
		break;
	case OUT_PROMETHEUS:
		for (i = 0; i < NR_STAT_FIELDS; i++) {
			const struct stat_field *f = &stat_fields[i];

			/* total_blocks would read as a counter; it is the pool size. */
			if (!strcmp(f->name, "total_blocks"))
				snprintf(name, sizeof(name), "beluga_pool_blocks");
			else
				snprintf(name, sizeof(name), "beluga_%s%s", f->name,
					 f->counter ? "_total" : "");
			prom_family(stdout, name, f->counter ? "counter" : "gauge", f->help);
			prom_sample(stdout, name, "", stat_value(&st, f));
		}
		break;
	default:
		for (i = 0; i < NR_STAT_FIELDS; i++) {
			if (i == 7)
				printf("\n");
			printf("%-18s %" PRIu64 "\n", stat_fields[i].name,
			       stat_value(&st, &stat_fields[i]));
		}
		if (st.lookup_keys)
			printf("\n%-18s %.1f%%\n", "hit_ratio",
			       100.0 * (double)st.lookup_hits / (double)st.lookup_keys);
	}
	return EXIT_OK;
}

/* ---- evict ---- */

static int cmd_evict(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "ns", required_argument, NULL, 'n' },
		{ "key", required_argument, NULL, 'k' },
		{ "all", no_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int have_ns = 0, have_key = 0, all = 0, opt, ret;
	uint64_t ns = 0, evicted = 0, busy = 0;
	struct beluga_key key = { 0, 0 };
	struct beluga *b;

	while ((opt = getopt_long(argc, argv, ":n:k:ah", opts, NULL)) != -1) {
		switch (opt) {
		case 'n':
			if (parse_u64(optarg, &ns))
				return usage_error("invalid namespace '%s': give a number, e.g. --ns 0",
						   optarg);
			have_ns = 1;
			break;
		case 'k':
			if (parse_key(optarg, &key))
				return usage_error("invalid key '%s': give up to 32 hex digits "
						   "(the 128-bit key, high digits first)", optarg);
			have_key = 1;
			break;
		case 'a':
			all = 1;
			break;
		case 'h':
			return print_help();
		default:
			return bad_option(argv, opt);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (!have_ns)
		return usage_error("--ns is required: give the namespace, e.g. --ns 0");
	if (have_key == all)
		return usage_error("give exactly one of --key HEX and --all");

	ret = open_device(O_RDWR, &b);
	if (ret)
		return ret;
	if (all) {
		ret = beluga_evict_ns(b, ns, &evicted, &busy);
		if (!ret)
			printf("namespace %" PRIu64 ": evicted %" PRIu64 " blocks, %" PRIu64
			       " pinned blocks left in place\n", ns, evicted, busy);
	} else {
		ret = beluga_evict_key(b, ns, &key);
		if (!ret)
			printf("namespace %" PRIu64 ": evicted key %016" PRIx64 "%016" PRIx64 "\n",
			       ns, (uint64_t)key.hi, (uint64_t)key.lo);
	}
	if (ret)
		ret = op_failed(b, ret);
	beluga_close(b);
	return ret;
}

/* ---- list ---- */

static int dax_attachable(const struct beluga_dax_device *d)
{
	return d->mode == BELUGA_DAX_DEVDAX && d->nr_ranges <= 1 && d->size &&
	       !((d->start | d->size) & (BELUGA_DAX_ALIGN - 1));
}

/* The region slot holding @d, or -1. Without the module: always -1. */
static int dax_region_slot(const struct region_list *rl, const struct beluga_dax_device *d)
{
	unsigned int i;

	for (i = 0; i < rl->nr; i++)
		if (rl->ri[i].backend == BELUGA_BACKEND_DAX && rl->ri[i].phys_start == d->start &&
		    rl->ri[i].length)
			return (int)rl->ri[i].region_id;
	return -1;
}

static int cmd_list(int argc, char **argv)
{
	struct beluga_dax_device *devs;
	struct region_list rl = { .nr = 0 };
	enum output_format fmt;
	char sz[32], start[32], path[64], region[32];
	struct beluga *b;
	ssize_t nr, i;
	struct json j;
	int ret;

	ret = parse_format(argc, argv, 0, &fmt);
	if (ret)
		return ret < 0 ? EXIT_OK : ret;
	nr = beluga_dax_list(&devs);
	if (nr < 0)
		return op_failed(NULL, (int)nr);
	/* Which are attached: best effort, the module need not be loaded. */
	if (!beluga_open(device_path, O_RDONLY, &b)) {
		read_regions(b, &rl);
		beluga_close(b);
	}

	if (fmt == OUT_JSON) {
		json_init(&j, stdout);
		json_object_begin(&j, NULL);
		json_array_begin(&j, "devices");
		for (i = 0; i < nr; i++) {
			const struct beluga_dax_device *d = &devs[i];
			int slot = dax_region_slot(&rl, d);

			snprintf(path, sizeof(path), "/dev/%s", d->name);
			json_object_begin(&j, NULL);
			json_string(&j, "name", d->name);
			json_string(&j, "path", path);
			json_u64(&j, "size", d->size);
			json_u64(&j, "start", d->start);
			json_string(&j, "mode", beluga_dax_mode_name(d->mode));
			if (d->driver[0])
				json_string(&j, "driver", d->driver);
			else
				json_null(&j, "driver");
			json_int(&j, "target_node", d->target_node);
			json_int(&j, "numa_node", d->numa_node);
			json_u64(&j, "align", d->align);
			json_u64(&j, "ranges", d->nr_ranges);
			json_string(&j, "source", beluga_dax_source_name(d->source));
			json_bool(&j, "system_ram", d->mode == BELUGA_DAX_SYSTEM_RAM);
			json_bool(&j, "attachable", dax_attachable(d));
			if (slot >= 0)
				json_int(&j, "beluga_region", slot);
			else
				json_null(&j, "beluga_region");
			json_object_end(&j);
		}
		json_array_end(&j);
		json_object_end(&j);
		json_finish(&j);
		free(devs);
		return EXIT_OK;
	}

	if (!nr) {
		printf("no dax devices in %s/bus/dax/devices: create a CXL ram region "
		       "(see `cxl list -R`), a devdax namespace (`ndctl create-namespace -m devdax`), "
		       "or use `belugactl attach --node N --size SIZE`\n",
		       getenv("BELUGA_SYSFS_ROOT") ? getenv("BELUGA_SYSFS_ROOT") : "/sys");
		return EXIT_OK;
	}
	printf("%-10s %10s %-14s %-10s %-10s %4s %-7s %6s  %s\n", "NAME", "SIZE", "START",
	       "MODE", "DRIVER", "NODE", "SOURCE", "RANGES", "BELUGA");
	for (i = 0; i < nr; i++) {
		const struct beluga_dax_device *d = &devs[i];
		int slot = dax_region_slot(&rl, d);

		snprintf(start, sizeof(start), "%#" PRIx64, d->start);
		if (slot >= 0)
			snprintf(region, sizeof(region), "region %d", slot);
		else
			snprintf(region, sizeof(region), "%s",
				 dax_attachable(d) ? "attachable" : "-");
		printf("%-10s %10s %-14s %-10s %-10s %4d %-7s %6u  %s\n", d->name,
		       format_size(sz, sizeof(sz), d->size), start,
		       beluga_dax_mode_name(d->mode), d->driver[0] ? d->driver : "-",
		       d->target_node, beluga_dax_source_name(d->source), d->nr_ranges, region);
	}
	free(devs);
	return EXIT_OK;
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

static int cmd_apply(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "check", no_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = DEFAULT_CONFIG;
	unsigned int i, failed = 0;
	struct beluga_attach out;
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
		case 'h':
			return print_help();
		default:
			return bad_option(argv, opt);
		}
	}
	if (optind < argc)
		path = argv[optind++];
	if (optind < argc)
		return usage_error("unexpected argument '%s': give one config file", argv[optind]);

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
		if (e->backend == BELUGA_BACKEND_DAX)
			ret = beluga_attach_dax(b, e->dax, cfg.block_size, &out);
		else
			ret = beluga_attach_node(b, e->node, e->bytes, cfg.block_size, &out);
		if (ret) {
			fprintf(stderr, "belugactl apply: %s:%u: %s\n", path, e->line,
				beluga_last_error(b));
			failed++;
			continue;
		}
		if (!out.name[0])
			snprintf(out.name, sizeof(out.name), "%s", name);
		print_attached(&out);
	}
	beluga_close(b);
	if (failed) {
		fprintf(stderr, "belugactl apply: %u of %u regions failed to attach\n",
			failed, cfg.nr_entries);
		return EXIT_FAILED;
	}
	return EXIT_OK;
}

/* ---- dispatch ---- */

static const struct command commands[] = {
	{ "attach", cmd_attach,
	  "DAX_DEVICE [--block-size SIZE]\n"
	  "       belugactl attach --node N --size SIZE [--block-size SIZE]\n"
	  "       belugactl attach --shared [--host-id N] [--format] DAX_DEVICE",
	  "Add a memory region to the pool (needs root).\n\n"
	  "  DAX_DEVICE         a device-dax instance bound to device_dax, e.g. /dev/dax0.0\n"
	  "                     or dax0.0; attached whole (see `belugactl list`)\n"
	  "  --node N           reserve memory from NUMA node N (e.g. CXL memory online as\n"
	  "                     System RAM, or node 0 for development)\n"
	  "  --size SIZE        bytes to reserve with --node\n"
	  "  --block-size SIZE  bytes per block, a multiple of 4K from 4K to 1G; default:\n"
	  "                     the pool's, 2M for the first region\n"
	  "  --shared           the device holds a pool shared by several hosts (CXL\n"
	  "                     memory they all reach); joins it, or formats it when it\n"
	  "                     holds none. The pool must be empty; `status` shows hosts\n"
	  "  --host-id N        this host's id in a shared pool, 0-15, unique among its\n"
	  "                     hosts; default: the module's beluga.host_id\n"
	  "  --format           with --shared: start the shared pool over (refused while\n"
	  "                     other hosts are alive)\n\n"
	  "Sizes take K, M, G, T suffixes (powers of 1024).\n" },
	{ "detach", cmd_detach, "REGION_ID|NAME [--evict]",
	  "Remove a region from the pool (needs root). Refused while a process maps the\n"
	  "pool or holds blocks of the region.\n\n"
	  "  REGION_ID|NAME  slot number or name from `belugactl status` (dax0.0, node1)\n"
	  "  --evict         evict the region's unpinned published blocks first\n" },
	{ "status", cmd_status, "[--json | --prometheus]",
	  "Show pool geometry, occupancy, one line per region, and the hosts of a\n"
	  "shared pool (from /sys/class/misc/POOL/hosts).\n\n"
	  "  --json        JSON: abi_version, nr_regions, block_size, nr_blocks, map_size,\n"
	  "                max_batch, max_regions, free_blocks, allocated_blocks,\n"
	  "                published_blocks, pinned_blocks, pins, clients, regions[] with\n"
	  "                id, name, backend, node, phys_start, size, first_offset,\n"
	  "                nr_blocks, free_blocks, allocated_blocks, published_blocks,\n"
	  "                mappings; hosts[] of a shared pool with id, state,\n"
	  "                incarnation, heartbeat, alive, silent_ms, self, name,\n"
	  "                owned_mask, owned_partitions[]\n"
	  "  --prometheus  node_exporter textfile format (beluga_region_*{region=...},\n"
	  "                beluga_pool_host_*{host=...} for a shared pool)\n" },
	{ "stats", cmd_stats, "[--json | --prometheus]",
	  "Show occupancy and the counters since the module was loaded.\n\n"
	  "  --json        JSON object with the field names of struct beluga_stats\n"
	  "  --prometheus  node_exporter textfile format (gauges, and *_total counters)\n" },
	{ "evict", cmd_evict, "--ns N (--key HEX | --all)",
	  "Drop published keys (needs root). Pinned blocks are left in place.\n\n"
	  "  --ns N     the namespace\n"
	  "  --key HEX  one key: up to 32 hex digits, the 128-bit value (high digits first)\n"
	  "  --all      every key of the namespace\n" },
	{ "list", cmd_list, "[--json]",
	  "List device-dax instances from sysfs: size, physical start, mode (devdax,\n"
	  "system-ram, unbound), driver, NUMA node, source (cxl, pmem, hmem) and whether\n"
	  "Beluga can attach it or already has.\n\n"
	  "  --json  JSON: devices[] with name, path, size, start, mode, driver, target_node,\n"
	  "          numa_node, align, ranges, source, system_ram, attachable, beluga_region\n" },
	{ "apply", cmd_apply, "[--check] [FILE]",
	  "Attach the regions listed in FILE (default " DEFAULT_CONFIG "), skipping those\n"
	  "already attached. Used by beluga.service at boot.\n\n"
	  "  --check  only parse FILE and print what would be attached\n" },
};

#define NR_COMMANDS	(sizeof(commands) / sizeof(commands[0]))

static const struct command *find_command(const char *name)
{
	unsigned int i;

	for (i = 0; i < NR_COMMANDS; i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

static void main_usage(FILE *f)
{
	unsigned int i;

	fprintf(f, "Usage: belugactl [-d DEVICE] COMMAND [ARGS]\n\n"
		"Manage the Beluga KV-cache pool (/dev/beluga).\n\nCommands:\n");
	for (i = 0; i < NR_COMMANDS; i++)
		fprintf(f, "  %-7s %s\n", commands[i].name, commands[i].synopsis);
	fprintf(f, "\nOptions:\n"
		"  -d, --device PATH  the device (default: $BELUGA_DEVICE or /dev/beluga)\n"
		"  -h, --help         this help; `belugactl COMMAND --help` for a command\n"
		"  -V, --version      print the version\n\n"
		"Exit status: 0 ok, 1 the operation failed, 2 usage error.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const struct command *c;
	int opt;

	/* '+': stop at the command; its options are parsed by the command. */
	while ((opt = getopt_long(argc, argv, "+:d:hV", opts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			device_path = optarg;
			break;
		case 'h':
			main_usage(stdout);
			return EXIT_OK;
		case 'V':
			printf("belugactl %s (Beluga ABI %d)\n", BELUGACTL_VERSION,
			       BELUGA_ABI_VERSION);
			return EXIT_OK;
		case ':':
			fprintf(stderr, "belugactl: option '%s' needs a value\n", argv[optind - 1]);
			return EXIT_USAGE;
		default:
			fprintf(stderr, "belugactl: unknown option '%s'\nTry 'belugactl --help'.\n",
				argv[optind - 1]);
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		main_usage(stderr);
		return EXIT_USAGE;
	}
	if (!strcmp(argv[optind], "help")) {
		if (optind + 1 < argc && (c = find_command(argv[optind + 1]))) {
			cmd_name = c->name;
			return print_help();
		}
		main_usage(stdout);
		return EXIT_OK;
	}
	c = find_command(argv[optind]);
	if (!c) {
		fprintf(stderr, "belugactl: unknown command '%s' (commands: attach, detach, "
			"status, stats, evict, list, apply)\nTry 'belugactl --help'.\n",
			argv[optind]);
		return EXIT_USAGE;
	}
	cmd_name = c->name;
	argc -= optind;
	argv += optind;
	optind = 0;	/* glibc: restart getopt for the command's own options */
	return c->run(argc, argv);
}
