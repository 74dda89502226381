// SPDX-License-Identifier: GPL-2.0
/*
 * The Mooncake conversation trace (FAST'25 release, see
 * ../shared/data/README.md): one JSON object per line with "input_length"
 * and "hash_ids". A minimal reader for exactly that shape; it also computes
 * the infinite-cache bound: the block references that hit when nothing is
 * ever evicted, counting, like LOOKUP, only the leading run of each request.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const char *find_key(const char *line, const char *key)
{
	const char *p = strstr(line, key);

	if (!p)
		return NULL;
	p += strlen(key);
	while (*p == ' ' || *p == ':' || *p == '"')
		p++;
	return p;
}

int trace_load(struct trace *t, const char *path)
{
	FILE *f = fopen(path, "r");
	size_t cap_req = 16384, cap_ids = 1 << 19, len = 0;
	char *line = NULL;
	u64 max_id = 0, i;
	u8 *seen;
	u32 r;

	if (!f)
		return -errno;
	memset(t, 0, sizeof(*t));
	t->start = xmalloc(cap_req * sizeof(u32));
	t->input_len = xmalloc(cap_req * sizeof(u32));
	t->ids = xmalloc(cap_ids * sizeof(u32));
	t->start[0] = 0;
	while (getline(&line, &len, f) > 0) {
		const char *p = find_key(line, "\"hash_ids\"");
		const char *il = find_key(line, "\"input_length\"");
		u32 n = 0;

		if (!p || *p != '[')
			continue;
		if (t->nr_req + 2 >= cap_req) {
			cap_req *= 2;
			t->start = realloc(t->start, cap_req * sizeof(u32));
			t->input_len = realloc(t->input_len,
					       cap_req * sizeof(u32));
			if (!t->start || !t->input_len)
				die("out of memory reading %s", path);
		}
		p++;
		for (;;) {
			char *end;
			unsigned long long v;

			while (*p == ' ' || *p == ',')
				p++;
			if (*p == ']' || !*p)
				break;
			v = strtoull(p, &end, 10);
			if (end == p)
				die("%s: bad hash id near '%.20s'", path, p);
			p = end;
			if (t->start[t->nr_req] + n + 1 >= cap_ids) {
				cap_ids *= 2;
				t->ids = realloc(t->ids, cap_ids * sizeof(u32));
				if (!t->ids)
					die("out of memory reading %s", path);
			}
			if (v > 0xfffffffeULL)
				die("%s: hash id %llu above 2^32", path, v);
			t->ids[t->start[t->nr_req] + n++] = (u32)v;
			if (v > max_id)
				max_id = v;
		}
		if (n > BELUGA_MAX_BATCH)
			die("%s: a request of %u blocks (above one batch)", path,
			    n);
		if (n > t->max_len)
			t->max_len = n;
		t->input_len[t->nr_req] = il ? (u32)strtoul(il, NULL, 10) : 0;
		t->start[t->nr_req + 1] = t->start[t->nr_req] + n;
		t->nr_req++;
	}
	free(line);
	fclose(f);
	t->nr_refs = t->start[t->nr_req];

	/* Distinct blocks and the infinite-cache bound (leading runs). */
	seen = xcalloc(max_id + 1, 1);
	for (r = 0; r < t->nr_req; r++) {
		bool lead = true;

		for (i = t->start[r]; i < t->start[r + 1]; i++) {
			u32 id = t->ids[i];

			if (seen[id]) {
				if (lead)
					t->bound_hits++;
			} else {
				lead = false;
				seen[id] = 1;
				t->nr_distinct++;
			}
		}
	}
	free(seen);
	return 0;
}
