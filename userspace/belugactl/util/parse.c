// SPDX-License-Identifier: GPL-2.0
/*
 * belugactl: parsing of sizes, numbers and keys, and human sizes.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../belugactl.h"

int parse_u64(const char *s, uint64_t *out)
{
	unsigned long long v;
	char *end;

	/* strtoull accepts "-1" and leading blanks; a count must not. */
	if (!s || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno == ERANGE)
		return -ERANGE;
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

int parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	unsigned int shift = 0;
	char *end;

	if (!s || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	switch (toupper((unsigned char)*end)) {
	case '\0':
		break;
	case 'K':
		shift = 10;
		break;
	case 'M':
		shift = 20;
		break;
	case 'G':
		shift = 30;
		break;
	case 'T':
		shift = 40;
		break;
	default:
		return -EINVAL;
	}
	if (shift) {
		end++;
		/* Accept 2M, 2MB, 2MiB (all binary: sizes here are in pages). */
		if (!strcasecmp(end, "iB") || !strcasecmp(end, "B"))
			end += strlen(end);
	}
	if (*end)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = (char)tolower((unsigned char)c);
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int parse_key(const char *s, struct beluga_key *out)
{
	uint64_t hi = 0, lo = 0;
	size_t len;

	if (!s)
		return -EINVAL;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		s += 2;
	len = strlen(s);
	if (!len || len > 32)
		return -EINVAL;
	for (; *s; s++) {
		int d = hex_digit(*s);

		if (d < 0)
			return -EINVAL;
		hi = (hi << 4) | (lo >> 60);
		lo = (lo << 4) | (uint64_t)d;
	}
	out->hi = hi;
	out->lo = lo;
	return 0;
}

const char *format_size(char *buf, size_t len, uint64_t bytes)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	unsigned int u = 0;

	/* Exact multiples print exactly: block sizes and region sizes usually are. */
	while (u + 1 < sizeof(units) / sizeof(units[0]) && bytes &&
	       !(bytes & ((1ULL << (10 * (u + 1))) - 1)))
		u++;
	if (u && bytes < (1ULL << (10 * (u + 1))) * 1024)
		snprintf(buf, len, "%" PRIu64 " %s", bytes >> (10 * u), units[u]);
	else if (bytes < 1024)
		snprintf(buf, len, "%" PRIu64 " B", bytes);
	else {
		double v = (double)bytes;

		u = 0;
		while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
			v /= 1024;
			u++;
		}
		snprintf(buf, len, "%.2f %s", v, units[u]);
	}
	return buf;
}
