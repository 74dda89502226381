// SPDX-License-Identifier: GPL-2.0
/*
 * belugactl status, stats and list: what the pool and the machine have,
 * for people (a table), scripts (--json) and Prometheus (--prometheus).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "belugactl.h"

enum output_format { OUT_HUMAN, OUT_JSON, OUT_PROMETHEUS };

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

static void region_labels(char *buf, size_t len, const struct beluga_region_info *ri)
{
	char name[2 * BELUGA_NAME_LEN + 1], nul_terminated[BELUGA_NAME_LEN + 1];

	snprintf(nul_terminated, sizeof(nul_terminated), "%.*s", BELUGA_NAME_LEN, ri->name);
	snprintf(buf, len, "region=\"%s\",id=\"%u\",backend=\"%s\",node=\"%d\"",
		 prom_escape(name, sizeof(name), nul_terminated), ri->region_id,
		 backend_name(ri->backend), ri->node);
}

/* A shared pool's hosts, from libbeluga's beluga_hosts() (BELUGA_IOC_HOSTS). */
struct pool_host {
	unsigned int id, incarnation;
	uint64_t owned;
	unsigned long long heartbeat, silent_ms;
	int alive, self;
	/* The device lease: its devices may pin, for W = fence_ms (issue 21). */
	int device_pins, lease_aware;
	unsigned int fence_ms;
	char state[16], name[BELUGA_NAME_LEN];	/* name "" for none */
};

struct host_list {
	int shared;		/* the pool has host records */
	unsigned int nr;
	struct pool_host h[BELUGA_MAX_HOSTS];
};

static const char *host_state_name(uint32_t state)
{
	switch (state) {
	case BELUGA_HOST_NONE: return "none";
	case BELUGA_HOST_ACTIVE: return "active";
	case BELUGA_HOST_LEFT: return "left";
	default: return "?";
	}
}

/*
 * The hosts of the pool behind @b; none when it is not shared, or when the
 * module is older than the command (status still shows the rest).
 */
static void read_hosts(struct beluga *b, struct host_list *hl)
{
	struct beluga_host hosts[BELUGA_MAX_HOSTS];
	int n, i;

	hl->shared = 0;
	hl->nr = 0;
	n = beluga_hosts(b, hosts, BELUGA_MAX_HOSTS);
	if (n <= 0)
		return;
	hl->shared = 1;
	hl->nr = n < BELUGA_MAX_HOSTS ? (unsigned int)n : BELUGA_MAX_HOSTS;
	for (i = 0; i < (int)hl->nr; i++) {
		struct pool_host *h = &hl->h[i];

		memset(h, 0, sizeof(*h));
		h->id = hosts[i].host_id;
		snprintf(h->state, sizeof(h->state), "%s", host_state_name(hosts[i].state));
		h->incarnation = hosts[i].incarnation;
		h->heartbeat = hosts[i].heartbeat;
		h->silent_ms = hosts[i].silent_ns / 1000000;
		h->owned = hosts[i].owned;
		h->alive = !!(hosts[i].flags & BELUGA_HOST_ALIVE);
		h->self = !!(hosts[i].flags & BELUGA_HOST_SELF);
		h->device_pins = !!(hosts[i].flags & BELUGA_HOST_DEVICE_PINS);
		h->lease_aware = !!(hosts[i].flags & BELUGA_HOST_LEASE_AWARE);
		h->fence_ms = h->device_pins ? hosts[i].device_fence_ms : 0;
		snprintf(h->name, sizeof(h->name), "%.*s", BELUGA_NAME_LEN - 1, hosts[i].name);
	}
}

static unsigned int popcount64(uint64_t x)
{
	unsigned int n = 0;

	for (; x; x &= x - 1)
		n++;
	return n;
}

/* W for people: "10 s", "1.5 s"; "-" for a host whose devices do not pin. */
static const char *fence_text(char *buf, size_t len, const struct pool_host *h)
{
	if (!h->device_pins)
		snprintf(buf, len, "-");
	else if (h->fence_ms % 1000)
		snprintf(buf, len, "%u.%03u s", h->fence_ms / 1000, h->fence_ms % 1000);
	else
		snprintf(buf, len, "%u s", h->fence_ms / 1000);
	return buf;
}

static void status_hosts_human(const struct host_list *hl)
{
	unsigned int i;
	char w[32];

	if (!hl->nr)
		return;
	printf("\nshared pool hosts:\n%-4s %-7s %-6s %5s %11s %10s %9s %-7s %9s %-5s  %s\n",
	       "HOST", "STATE", "ALIVE", "INC", "HEARTBEAT", "SILENT_MS", "OWNED", "DEVPINS", "W",
	       "AWARE", "NAME");
	for (i = 0; i < hl->nr; i++) {
		const struct pool_host *h = &hl->h[i];

		printf("%-4u %-7s %-6s %5u %11llu %10llu %#9" PRIx64 " %-7s %9s %-5s  %s%s\n",
		       h->id, h->state, h->alive ? "alive" : "dead", h->incarnation, h->heartbeat,
		       h->silent_ms, h->owned, h->device_pins ? "yes" : "no",
		       fence_text(w, sizeof(w), h), h->lease_aware ? "yes" : "no",
		       h->name[0] ? h->name : "-", h->self ? " (this host)" : "");
	}
	printf("(DEVPINS: the host's devices may pin the pool, and the others wait lease + W + "
	       "lease/2 of its silence; AWARE: its module honours device leases)\n");
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
		json_bool(j, "device_pins", h->device_pins);
		if (h->device_pins)
			json_u64(j, "device_fence_ms", h->fence_ms);
		else
			json_null(j, "device_fence_ms");
		json_bool(j, "lease_aware", h->lease_aware);
		json_array_begin(j, "owned_partitions");
		for (p = 0; p < 64; p++)
			if (h->owned & (1ULL << p))
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
		{ "beluga_pool_host_device_pins", "1 when the host's devices may pin the pool "
						  "(its record carries a device lease)." },
		{ "beluga_pool_host_device_fence_milliseconds", "W of the host's device lease: "
								"its watchdog's timeout (0 without)." },
		{ "beluga_pool_host_lease_aware", "1 when the host's module honours device "
						  "leases (format 1.3 or later)." },
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
			case 5: v = popcount64(h->owned); break;
			case 6: v = (uint64_t)h->device_pins; break;
			case 7: v = h->fence_ms; break;
			default: v = (uint64_t)h->lease_aware; break;
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

int cmd_status(int argc, char **argv)
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
	read_hosts(b, &hl);
	beluga_close(b);

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

/*
 * Field names are the JSON keys; the table keeps the three outputs in step.
 * Generated from the uapi's field list, with its help texts.
 */
static const struct stat_field {
	const char *name;
	size_t offset;
	int counter;		/* monotonic since load (Prometheus counter) */
	const char *help;
} stat_fields[] = {
#define SF(f, kind, help) \
	{ #f, offsetof(struct beluga_stats, f), BELUGA_STAT_##kind == BELUGA_STAT_COUNTER, help },
	BELUGA_STATS_FIELDS(SF)
#undef SF
};

#define NR_STAT_FIELDS	(sizeof(stat_fields) / sizeof(stat_fields[0]))

static uint64_t stat_value(const struct beluga_stats *st, const struct stat_field *f)
{
	uint64_t v;

	memcpy(&v, (const char *)st + f->offset, sizeof(v));
	return v;
}

int cmd_stats(int argc, char **argv)
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
			/* A blank line between the occupancy and the counters. */
			if (i && stat_fields[i].counter && !stat_fields[i - 1].counter)
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

int cmd_list(int argc, char **argv)
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
