// SPDX-License-Identifier: GPL-2.0
/*
 * The Mooncake trace reader (mooncake.h). A strict reader of the two fields
 * it needs, not a JSON parser: a line that has a field but not in the shape
 * the trace uses is an error, never a silently wrong request.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mooncake.h"

static const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	return p;
}

/* After "KEY" and the colon; NULL when @key is absent, "" when malformed. */
static const char *field(const char *line, const char *key)
{
	const char *p = strstr(line, key);

	if (!p)
		return NULL;
	p = skip_ws(p + strlen(key));
	if (*p++ != ':')
		return "";
	return skip_ws(p);
}

/* A non-negative decimal integer at *@p, which moves past it. */
static int number(const char **p, uint64_t *v)
{
	char *end;

	if (**p < '0' || **p > '9')
		return -EINVAL;
	errno = 0;
	*v = strtoull(*p, &end, 10);
	if (errno)
		return -EINVAL;
	*p = end;
	return 0;
}

int mooncake_parse(const char *line, struct mooncake_req *req, size_t *cap)
{
	const char *p = field(line, "\"hash_ids\"");
	const char *il = field(line, "\"input_length\"");
	size_t n = 0;

	req->nr_ids = 0;
	req->input_length = 0;
	if (!p)
		return -ENOENT;
	if (*p++ != '[')
		return -EINVAL;
	for (;;) {
		uint64_t id;

		p = skip_ws(p);
		if (*p == ']')
			break;
		if (n && *p++ != ',')
			return -EINVAL;
		p = skip_ws(p);
		if (number(&p, &id))
			return -EINVAL;
		if (n == *cap) {
			size_t new_cap = *cap ? 2 * *cap : 256;
			uint64_t *ids = realloc(req->ids, new_cap * sizeof(*ids));

			if (!ids)
				return -ENOMEM;
			req->ids = ids;
			*cap = new_cap;
		}
		req->ids[n++] = id;
	}
	if (il && number(&il, &req->input_length))
		return -EINVAL;
	req->nr_ids = n;
	return 0;
}

int mooncake_open(struct mooncake_reader *r, const char *path)
{
	memset(r, 0, sizeof(*r));
	r->f = fopen(path, "re");
	return r->f ? 0 : -errno;
}

int mooncake_next(struct mooncake_reader *r)
{
	while (getline(&r->line, &r->line_cap, r->f) > 0) {
		int ret;

		r->lineno++;
		if (!*skip_ws(r->line))
			continue;	/* blank line */
		ret = mooncake_parse(r->line, &r->req, &r->ids_cap);
		return ret ? ret : 1;
	}
	return ferror(r->f) ? -EIO : 0;
}

void mooncake_close(struct mooncake_reader *r)
{
	if (r->f)
		fclose(r->f);
	free(r->line);
	free(r->req.ids);
	memset(r, 0, sizeof(*r));
}
