// SPDX-License-Identifier: GPL-2.0
/*
 * belugactl: a small JSON writer (objects, arrays, numbers, strings).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../belugactl.h"

void json_init(struct json *j, FILE *f)
{
	memset(j, 0, sizeof(*j));
	j->f = f;
}

void json_init_line(struct json *j, FILE *f)
{
	json_init(j, f);
	j->one_line = 1;
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
	if (j->depth > 0 && j->one_line) {
		if (j->items[j->depth])
			fputs(", ", j->f);
	} else if (j->depth > 0) {
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
	if (had_items && !j->one_line) {
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
