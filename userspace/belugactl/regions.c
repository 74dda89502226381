// SPDX-License-Identifier: GPL-2.0
/*
 * belugactl: finding the pool's regions, by id or by name.
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

/* ---- region lookup by id or name ---- */

int max_regions(struct beluga *b)
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
int find_region_by_name(struct beluga *b, const char *name)
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

const char *backend_name(uint32_t backend)
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


void read_regions(struct beluga *b, struct region_list *rl)
{
	int i, n = max_regions(b);

	if (n > BELUGA_MAX_REGIONS)
		n = BELUGA_MAX_REGIONS;
	rl->nr = 0;
	for (i = 0; i < n; i++)
		if (!beluga_region_info(b, (uint32_t)i, &rl->ri[rl->nr]))
			rl->nr++;
}
