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

void prom_sample(FILE *f, const char *name, const char *labels, uint64_t v)
{
	if (labels && *labels)
		fprintf(f, "%s{%s} %" PRIu64 "\n", name, labels, v);
	else
		fprintf(f, "%s %" PRIu64 "\n", name, v);
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

