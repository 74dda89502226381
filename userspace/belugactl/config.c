// SPDX-License-Identifier: GPL-2.0
/*
 * belugactl: reader of the boot-time config (/etc/beluga.conf), used by
 * `belugactl apply`. The format, documented in packaging/beluga.conf:
 *
 *   # comment                 (also after a value)
 *   block_size = 2M           pool block size, at most once
 *   dax = dax0.0              attach a device-dax instance (or /dev/dax0.0)
 *   node = 1 192G             reserve 192 GiB from NUMA node 1
 *
 * Keys may repeat (dax, node) and their order is the attach order.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "belugactl.h"

static char *trim(char *s)
{
	char *end;

	while (isspace((unsigned char)*s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	return s;
}

static int syntax_error(char *err, size_t errlen, const char *path, unsigned int line,
			const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int syntax_error(char *err, size_t errlen, const char *path, unsigned int line,
			const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(err, errlen, "%s:%u: ", path, line);
	if (n < 0 || (size_t)n >= errlen)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* "1 192G" -> node 1, 192 GiB */
static int parse_node_value(char *value, struct config_entry *e)
{
	char *node_str = strtok(value, " \t");
	char *size_str = strtok(NULL, " \t");
	uint64_t node;

	if (!node_str || !size_str || strtok(NULL, " \t"))
		return -EINVAL;
	if (parse_u64(node_str, &node) || node > 65535)
		return -EINVAL;
	if (parse_size(size_str, &e->bytes) || !e->bytes)
		return -EINVAL;
	e->node = (int)node;
	return 0;
}

int config_read(const char *path, struct config *cfg, char *err, size_t errlen)
{
	unsigned int lineno = 0;
	int seen_block_size = 0;
	char line[512];
	FILE *f;

	memset(cfg, 0, sizeof(*cfg));
	f = fopen(path, "re");
	if (!f) {
		int ret = -errno;

		snprintf(err, errlen, "cannot read %s: %s%s", path, strerror(-ret),
			 ret == -ENOENT ? ": create it from the documented example "
			 "(packaging/beluga.conf)" : "");
		return ret;
	}
	while (fgets(line, sizeof(line), f)) {
		struct config_entry *e;
		char *key, *value, *hash;
		const char *dax;

		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			fclose(f);
			return syntax_error(err, errlen, path, lineno,
					    "line longer than %zu characters", sizeof(line) - 2);
		}
		hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		key = trim(line);
		if (!*key)
			continue;
		value = strchr(key, '=');
		if (!value) {
			fclose(f);
			return syntax_error(err, errlen, path, lineno,
					    "expected 'key = value' (keys: block_size, dax, node)");
		}
		*value++ = '\0';
		key = trim(key);
		value = trim(value);

		if (!strcmp(key, "block_size")) {
			if (seen_block_size++) {
				fclose(f);
				return syntax_error(err, errlen, path, lineno,
						    "block_size given twice: a pool has one block size");
			}
			if (parse_size(value, &cfg->block_size) ||
			    cfg->block_size < BELUGA_BLOCK_SIZE_MIN ||
			    cfg->block_size > BELUGA_BLOCK_SIZE_MAX ||
			    cfg->block_size % 4096) {
				fclose(f);
				return syntax_error(err, errlen, path, lineno,
						    "invalid block_size '%s': a multiple of 4K "
						    "from 4K to 1G, e.g. 2M", value);
			}
			continue;
		}
		if (strcmp(key, "dax") && strcmp(key, "node")) {
			fclose(f);
			return syntax_error(err, errlen, path, lineno,
					    "unknown key '%s' (expected block_size, dax or node)", key);
		}
		if (cfg->nr_entries == CONFIG_MAX_ENTRIES) {
			fclose(f);
			return syntax_error(err, errlen, path, lineno,
					    "more than %d regions listed", CONFIG_MAX_ENTRIES);
		}
		e = &cfg->entries[cfg->nr_entries];
		memset(e, 0, sizeof(*e));
		e->line = lineno;
		if (!strcmp(key, "dax")) {
			dax = strrchr(value, '/');
			dax = dax ? dax + 1 : value;
			if (strncmp(dax, "dax", 3) || strlen(dax) >= sizeof(e->dax) ||
			    !strchr(dax, '.') || strpbrk(dax, " \t")) {
				fclose(f);
				return syntax_error(err, errlen, path, lineno,
						    "invalid dax device '%s': expected daxX.Y or /dev/daxX.Y",
						    value);
			}
			e->backend = BELUGA_BACKEND_DAX;
			e->node = -1;
			snprintf(e->dax, sizeof(e->dax), "%s", dax);
		} else {
			char copy[sizeof(line)];

			snprintf(copy, sizeof(copy), "%s", value);
			if (parse_node_value(copy, e)) {
				fclose(f);
				return syntax_error(err, errlen, path, lineno,
						    "invalid node entry '%s': expected 'node = NODE SIZE', "
						    "e.g. 'node = 1 192G'", value);
			}
			e->backend = BELUGA_BACKEND_NODE;
		}
		cfg->nr_entries++;
	}
	fclose(f);
	return 0;
}
