// SPDX-License-Identifier: GPL-2.0
/*
 * belugactl: parsing of sizes, numbers and keys; human sizes; a small JSON
 * writer; Prometheus text exposition helpers.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "belugactl.h"

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

/* ---- JSON ---- */

void json_init(struct json *j, FILE *f)
{
	memset(j, 0, sizeof(*j));
	j->f = f;
}

static void json_indent(struct json *j)
{
	int i;

	for (i = 0; i < j->depth; i++)
		fputs("  ", j->f);
}

static void json_put_string(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	fputc('"', f);
	for (; *p; p++) {
		switch (*p) {
		case '"':
			fputs("\\\"", f);
			break;
		case '\\':
			fputs("\\\\", f);
			break;
		case '\n':
			fputs("\\n", f);
			break;
		case '\t':
			fputs("\\t", f);
			break;
		default:
			if (*p < 0x20)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
}

/* Comma, newline, indent and "key": before the next value. */
static void json_prefix(struct json *j, const char *key)
{
	if (j->depth > 0) {
		fputs(j->items[j->depth] ? ",\n" : "\n", j->f);
		json_indent(j);
	}
	j->items[j->depth]++;
	if (key) {
		json_put_string(j->f, key);
		fputs(": ", j->f);
	}
}

static void json_open(struct json *j, const char *key, char bracket)
{
	json_prefix(j, key);
	fputc(bracket, j->f);
	if (j->depth + 1 < JSON_MAX_DEPTH)
		j->depth++;
	j->items[j->depth] = 0;
}

static void json_close(struct json *j, char bracket)
{
	int had_items = j->items[j->depth];

	if (j->depth > 0)
		j->depth--;
	if (had_items) {
		fputc('\n', j->f);
		json_indent(j);
	}
	fputc(bracket, j->f);
}

void json_object_begin(struct json *j, const char *key)
{
	json_open(j, key, '{');
}

void json_object_end(struct json *j)
{
	json_close(j, '}');
}

void json_array_begin(struct json *j, const char *key)
{
	json_open(j, key, '[');
}

void json_array_end(struct json *j)
{
	json_close(j, ']');
}

void json_u64(struct json *j, const char *key, uint64_t v)
{
	json_prefix(j, key);
	fprintf(j->f, "%" PRIu64, v);
}

void json_int(struct json *j, const char *key, long long v)
{
	json_prefix(j, key);
	fprintf(j->f, "%lld", v);
}

void json_bool(struct json *j, const char *key, int v)
{
	json_prefix(j, key);
	fputs(v ? "true" : "false", j->f);
}

void json_null(struct json *j, const char *key)
{
	json_prefix(j, key);
	fputs("null", j->f);
}

void json_string(struct json *j, const char *key, const char *s)
{
	json_prefix(j, key);
	json_put_string(j->f, s);
}

void json_finish(struct json *j)
{
	fputc('\n', j->f);
}

/* ---- Prometheus ---- */

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
