// SPDX-License-Identifier: GPL-2.0
/*
 * belugactl: Prometheus text exposition helpers.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../belugactl.h"

void prom_family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/*
 * The pool label every sample carries: the name of the device node that
 * belugactl opens, found as libbeluga finds it (-d, else $BELUGA_DEVICE,
 * else /dev/beluga), so "beluga", or "beluga1" with pools=N. Two pools'
 * files then never hold the same series.
 */
static const char *pool_label(void)
{
	static char label[2 * 255 + 16];
	char name[2 * 255 + 1];
	const char *path = device_path, *base;

	if (label[0])
		return label;
	if (!path || !*path)
		path = getenv("BELUGA_DEVICE");
	if (!path || !*path)
		path = BELUGA_DEVICE_PATH;
	base = strrchr(path, '/');
	base = base && base[1] ? base + 1 : path;
	snprintf(label, sizeof(label), "pool=\"%s\"", prom_escape(name, sizeof(name), base));
	return label;
}

void prom_sample(FILE *f, const char *name, const char *labels, uint64_t v)
{
	fprintf(f, "%s{%s%s%s} %" PRIu64 "\n", name, pool_label(),
		labels && *labels ? "," : "", labels ? labels : "", v);
}

const char *prom_escape(char *buf, size_t len, const char *s)
{
	size_t n = 0;

	for (; *s && n + 3 < len; s++) {
		if (*s == '\\' || *s == '"') {
			buf[n++] = '\\';
			buf[n++] = *s;
		} else if (*s == '\n') {
			buf[n++] = '\\';
			buf[n++] = 'n';
		} else {
			buf[n++] = *s;
		}
	}
	buf[n] = '\0';
	return buf;
}

