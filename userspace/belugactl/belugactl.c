// SPDX-License-Identifier: GPL-2.0
/*
 * belugactl: the operator's tool for the Beluga KV-cache pool.
 *
 *   belugactl attach /dev/dax0.0 [--block-size 2M] [--force]
 *   belugactl attach --node 1 --size 192M [--block-size 2M]
 *   belugactl attach --shared [--host-id N] [--format] /dev/dax0.0
 *   belugactl detach REGION_ID|NAME [--evict]
 *   belugactl status [--json | --prometheus]
 *   belugactl stats [--json | --prometheus]
 *   belugactl evict --ns N (--key HEX | --all)
 *   belugactl list [--json]
 *   belugactl apply [--check] [FILE]
 *

 * One file a command family: attach.c (attach, detach, apply), status.c
 * (status, stats, list), evict.c; regions.c finds regions; util/ parses
 * arguments and writes JSON and Prometheus text.
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


/* From -d/--device; NULL lets libbeluga use $BELUGA_DEVICE or /dev/beluga. */
const char *device_path;
const char *cmd_name = "belugactl";

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *synopsis;
	const char *help;
};

static const struct command *find_command(const char *name);

/* ---- error helpers ---- */

/* A usage error: say what is wrong, point at --help, exit code 2. */
int usage_error(const char *fmt, ...)
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
int op_failed_ctx(const struct beluga *b, int err, const struct hint_context *ctx)
{
	const char *msg = beluga_last_error(b);
	char buf[256];

	fprintf(stderr, "belugactl %s: %s%s\n", cmd_name,
		msg && *msg ? msg : beluga_strerror(err), cli_hint(buf, sizeof(buf), ctx, err));
	return EXIT_FAILED;
}

int op_failed(const struct beluga *b, int err)
{
	const struct hint_context none = { 0 };

	return op_failed_ctx(b, err, &none);
}

int open_device(int flags, struct beluga **b)
{
	int ret = beluga_open(device_path, flags, b);

	const struct hint_context opening = { .opening = 1 };

	return ret ? op_failed_ctx(NULL, ret, &opening) : EXIT_OK;
}

/* getopt_long's complaint, reworded: name the option and the fix. */
int bad_option(char **argv, int opt)
{
	const char *arg = argv[optind - 1];

	if (opt == ':')
		return usage_error("option '%s' needs a value", arg);
	return usage_error("unknown option '%s'", arg);
}

/* The end of every command's option switch: --help, or a bad option. */
int other_option(char **argv, int opt)
{
	return opt == 'h' ? print_help() : bad_option(argv, opt);
}

/*
 * The arguments after the options: at most one, into *@arg (left as it is
 * when there is none), or none at all when @arg is NULL. A usage error
 * names the first one too many, with @hint (what to give instead) if any.
 */
int last_argument(int argc, char **argv, const char **arg, const char *hint)
{
	if (arg && optind < argc)
		*arg = argv[optind++];
	if (optind >= argc)
		return EXIT_OK;
	return usage_error("unexpected argument '%s'%s%s", argv[optind],
			   hint ? ": " : "", hint ? hint : "");
}

int print_help(void)
{
	const struct command *c = find_command(cmd_name);

	printf("Usage: belugactl %s %s\n\n%s", c->name, c->synopsis, c->help);
	return EXIT_OK;
}

/* --block-size: validated here so a typo never reaches the module. */
int parse_block_size(const char *s, uint64_t *out)
{
	if (parse_size(s, out))
		return usage_error("invalid block size '%s': use a number with an optional "
				   "K, M or G suffix, e.g. 2M", s);
	if (*out < BELUGA_BLOCK_SIZE_MIN || *out > BELUGA_BLOCK_SIZE_MAX || *out % 4096)
		return usage_error("invalid block size '%s': it must be a multiple of 4K "
				   "from 4K to 1G, e.g. 2M", s);
	return EXIT_OK;
}

/* ---- dispatch ---- */

static const struct command commands[] = {
	{ "attach", cmd_attach,
	  "DAX_DEVICE [--block-size SIZE] [--force] [--json]\n"
	  "       belugactl attach --node N --size SIZE [--block-size SIZE] [--json]\n"
	  "       belugactl attach --shared [--host-id N] [--format] DAX_DEVICE [--json]",
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
	  "                     other hosts are alive)\n"
	  "  --force            attach DAX_DEVICE even though another process has its\n"
	  "                     node open or mapped (it could write the pool's blocks)\n"
	  "  --json             JSON lines on stdout: {\"event\": \"progress\", \"name\",\n"
	  "                     \"done\", \"length\", \"elapsed_ms\"} while the module prepares\n"
	  "                     the region, then {\"event\": \"attached\", \"name\",\n"
	  "                     \"region_id\", \"nr_blocks\", \"block_size\", \"first_offset\"}\n\n"
	  "The module zeroes a dax device (allocates a node's memory) before the region\n"
	  "joins the pool: seconds per GiB, minutes on emulated CXL. On a terminal, attach\n"
	  "shows its progress on stderr (from the pool's sysfs \"attaching\").\n"
	  "While a dax device is attached its node (/dev/daxX.Y) is mode 0000; detach\n"
	  "restores the mode it had (kept in /run/beluga). Without --force, attach refuses\n"
	  "a device that another process has open or mapped and names the process.\n"
	  "Sizes take K, M, G, T suffixes (powers of 1024).\n" },
	{ "detach", cmd_detach, "REGION_ID|NAME [--evict]",
	  "Remove a region from the pool (needs root). Refused while a process maps the\n"
	  "pool or holds blocks of the region.\n\n"
	  "  REGION_ID|NAME  slot number or name from `belugactl status` (dax0.0, node1)\n"
	  "  --evict         evict the region's unpinned published blocks first\n" },
	{ "status", cmd_status, "[--json | --prometheus]",
	  "Show pool geometry, occupancy, one line per region, and the hosts of a\n"
	  "shared pool.\n\n"
	  "  --json        JSON: abi_version, nr_regions, block_size, nr_blocks, map_size,\n"
	  "                max_batch, max_regions, free_blocks, allocated_blocks,\n"
	  "                published_blocks, pinned_blocks, pins, clients, regions[] with\n"
	  "                id, name, backend, node, phys_start, size, first_offset,\n"
	  "                nr_blocks, free_blocks, allocated_blocks, published_blocks,\n"
	  "                mappings; hosts[] of a shared pool with id, state,\n"
	  "                incarnation, heartbeat, alive, silent_ms, self, name,\n"
	  "                owned_mask, owned_partitions[]\n"
	  "  --prometheus  node_exporter textfile format (beluga_region_*{region=...},\n"
	  "                beluga_pool_host_*{host=...} for a shared pool); every\n"
	  "                series has pool=\"NAME\", the device's name (beluga, beluga1)\n" },
	{ "stats", cmd_stats, "[--json | --prometheus]",
	  "Show occupancy and the counters since the module was loaded.\n\n"
	  "  --json        JSON object with the field names of struct beluga_stats\n"
	  "  --prometheus  node_exporter textfile format (gauges, and *_total counters),\n"
	  "                every series labelled pool=\"NAME\", the device's name\n" },
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
			printf("belugactl %s (Beluga ABI %d)\n", LIBBELUGA_VERSION,
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

