// SPDX-License-Identifier: GPL-2.0
/*
 * belugactl evict: drop published keys from the pool.
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

/* ---- evict ---- */

int cmd_evict(int argc, char **argv)
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
		default:
			return other_option(argv, opt);
		}
	}
	ret = last_argument(argc, argv, NULL, NULL);
	if (ret)
		return ret;
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
