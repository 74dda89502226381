// SPDX-License-Identifier: GPL-2.0
/*
 * The Mooncake conversation trace (FAST'25 release, see
 * ../shared/data/README.md): one JSON object per line with "input_length"
 * and "hash_ids", read by the reader the demo uses too
 * (../userspace/trace/mooncake.h), into compact arrays. It also computes
 * the infinite-cache bound: the block references that hit when nothing is
 * ever evicted, counting, like LOOKUP, only the leading run of each request.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "../userspace/trace/mooncake.h"

int trace_load(struct trace *t, const char *path)
{
	struct mooncake_reader rd;
	size_t cap_req = 16384, cap_ids = 1 << 19;
	u64 max_id = 0, i;
	u8 *seen;
	u32 r;
	int ret;

	ret = mooncake_open(&rd, path);
	if (ret)
		return ret;
	memset(t, 0, sizeof(*t));
	t->start = xmalloc(cap_req * sizeof(u32));
	t->input_len = xmalloc(cap_req * sizeof(u32));
	t->ids = xmalloc(cap_ids * sizeof(u32));
	t->start[0] = 0;
	while ((ret = mooncake_next(&rd)) != 0) {
		u32 n = 0;

		if (ret == -ENOENT)
			continue;	/* not a request line */
		if (ret == -ENOMEM)
			die("out of memory reading %s", path);
		if (ret < 0)
			die("%s:%llu: %s", path, (unsigned long long)rd.lineno,
			    ret == -EIO ? "read error" : "malformed \"hash_ids\" or \"input_length\"");
		if (t->nr_req + 2 >= cap_req) {
			cap_req *= 2;
			t->start = realloc(t->start, cap_req * sizeof(u32));
			t->input_len = realloc(t->input_len,
					       cap_req * sizeof(u32));
			if (!t->start || !t->input_len)
				die("out of memory reading %s", path);
		}
		if (rd.req.nr_ids > BELUGA_MAX_BATCH)
			die("%s: a request of %zu blocks (above one batch)", path,
			    rd.req.nr_ids);
		while (t->start[t->nr_req] + rd.req.nr_ids + 1 >= cap_ids) {
			cap_ids *= 2;
			t->ids = realloc(t->ids, cap_ids * sizeof(u32));
			if (!t->ids)
				die("out of memory reading %s", path);
		}
		for (; n < rd.req.nr_ids; n++) {
			u64 v = rd.req.ids[n];

			if (v > 0xfffffffeULL)
				die("%s: hash id %llu above 2^32", path,
				    (unsigned long long)v);
			t->ids[t->start[t->nr_req] + n] = (u32)v;
			if (v > max_id)
				max_id = v;
		}
		if (n > t->max_len)
			t->max_len = n;
		t->input_len[t->nr_req] = (u32)rd.req.input_length;
		t->start[t->nr_req + 1] = t->start[t->nr_req] + n;
		t->nr_req++;
	}
	mooncake_close(&rd);
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
