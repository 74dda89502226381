// SPDX-License-Identifier: GPL-2.0
/*
 * The Mooncake trace reader that beluga-demo and the benchmarks share
 * (userspace/trace/mooncake.h): the fields it reads, every malformed shape
 * it must refuse, the reader's line handling, and the real trace
 * ($BELUGA_TRACE; run-tests.sh points it at ../shared/data) against counts
 * taken a different way (lines and commas).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../userspace/trace/mooncake.h"
#include "../lib/tap.h"

static struct mooncake_req req;
static size_t cap;

static int parse(const char *line)
{
	return mooncake_parse(line, &req, &cap);
}

static void test_fields(void)
{
	const char *line = "{\"timestamp\": 0, \"input_length\": 6758, \"output_length\": 500, "
			   "\"hash_ids\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}\n";
	int ok = 1, r = parse(line);

	tap_result(r == 0 && req.nr_ids == 14 && req.input_length == 6758,
		   "a trace line: 14 ids, input_length 6758 (got %zu, %llu)", req.nr_ids,
		   (unsigned long long)req.input_length);
	for (size_t i = 0; i < 14 && ok; i++)
		ok = req.ids[i] == i;
	tap_result(ok, "the ids in prompt order");
	tap_result(parse("{\"hash_ids\":[18446744073709551615],\"input_length\":1}") == 0 &&
		   req.nr_ids == 1 && req.ids[0] == UINT64_MAX && req.input_length == 1,
		   "no spaces; the largest u64 id");
	tap_result(parse("{\"hash_ids\": [ 7 ,\t8 ]}") == 0 && req.nr_ids == 2 && req.ids[1] == 8 &&
		   req.input_length == 0, "spaces and tabs around ids; no input_length is 0");
	tap_result(parse("{\"hash_ids\": []}") == 0 && req.nr_ids == 0, "an empty request");
}

static void test_refusals(void)
{
	static const char *const bad[] = {
		"{\"hash_ids\": 5}",
		"{\"hash_ids\" [1, 2]}",
		"{\"hash_ids\": [1,, 2]}",
		"{\"hash_ids\": [1 2]}",
		"{\"hash_ids\": [, 1]}",
		"{\"hash_ids\": [-1]}",
		"{\"hash_ids\": [1, x]}",
		"{\"hash_ids\": [1.5]}",
		"{\"hash_ids\": [18446744073709551616]}",
		"{\"hash_ids\": [1, 2",
		"{\"hash_ids\": [1], \"input_length\": \"7\"}",
		"{\"hash_ids\": [1], \"input_length\": -7}",
	};

	tap_result(parse("{\"timestamp\": 0, \"input_length\": 3}") == -ENOENT,
		   "a line without hash_ids: -ENOENT");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		tap_result(parse(bad[i]) == -EINVAL, "refused with -EINVAL: %s", bad[i]);
}

/* Past the first allocation (256 ids): the array grows and keeps every id. */
static void test_growth(void)
{
	size_t n = 5000, len = 32 + n * 8;
	char *line = malloc(len), *p = line;
	int ok;

	p += sprintf(p, "{\"hash_ids\": [");
	for (size_t i = 0; i < n; i++)
		p += sprintf(p, "%s%zu", i ? ", " : "", i * 3);
	sprintf(p, "]}");
	ok = parse(line) == 0 && req.nr_ids == n;
	for (size_t i = 0; i < n && ok; i++)
		ok = req.ids[i] == i * 3;
	tap_result(ok, "%zu ids in one request (capacity %zu)", n, cap);
	free(line);
}

static void test_reader(void)
{
	char path[] = "/tmp/beluga-trace.XXXXXX";
	int fd = mkstemp(path), r1, r2, r3, r4, r5;
	struct mooncake_reader rd;
	FILE *f = fdopen(fd, "w");

	fputs("{\"hash_ids\": [1, 2], \"input_length\": 9}\n"
	      "\n   \t\n"
	      "{\"timestamp\": 4}\n"
	      "{\"hash_ids\": [3, oops]}\n"
	      "{\"hash_ids\": [4]}", f);	/* no newline at the end */
	fclose(f);
	tap_result(mooncake_open(&rd, path) == 0, "open");
	r1 = mooncake_next(&rd);
	tap_result(r1 == 1 && rd.req.nr_ids == 2 && rd.req.input_length == 9 && rd.lineno == 1,
		   "the first request (line 1)");
	r2 = mooncake_next(&rd);
	tap_result(r2 == -ENOENT && rd.lineno == 4,
		   "blank lines skipped; line 4 has no hash_ids (%d, line %llu)", r2,
		   (unsigned long long)rd.lineno);
	r3 = mooncake_next(&rd);
	tap_result(r3 == -EINVAL && rd.lineno == 5, "line 5 is malformed (%d)", r3);
	r4 = mooncake_next(&rd);
	tap_result(r4 == 1 && rd.req.nr_ids == 1 && rd.req.ids[0] == 4 && rd.lineno == 6,
		   "the reader goes on after an error; a last line without a newline");
	r5 = mooncake_next(&rd);
	tap_result(r5 == 0 && mooncake_next(&rd) == 0, "then the end, and it stays there");
	mooncake_close(&rd);
	tap_result(mooncake_open(&rd, "/nonexistent/trace.jsonl") == -ENOENT,
		   "a missing file: -ENOENT");
	f = fopen(path, "w");
	fclose(f);
	tap_result(mooncake_open(&rd, path) == 0 && mooncake_next(&rd) == 0 && rd.lineno == 0,
		   "an empty file: the end at once, no lines");
	mooncake_close(&rd);
	unlink(path);
}

/* Requests and ids counted without the reader: lines, and commas in [...]. */
static int count_plainly(const char *path, unsigned long long *reqs, unsigned long long *ids)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t len = 0;

	if (!f)
		return -errno;
	*reqs = *ids = 0;
	while (getline(&line, &len, f) > 0) {
		char *open = strchr(line, '['), *p;

		if (!open)
			continue;
		(*reqs)++;
		for (p = open + 1; *p == ' '; p++)
			;
		if (*p == ']')
			continue;
		(*ids)++;
		for (; *p && *p != ']'; p++)
			*ids += *p == ',';
	}
	free(line);
	fclose(f);
	return 0;
}

static void test_real_trace(void)
{
	const char *path = getenv("BELUGA_TRACE");
	unsigned long long reqs = 0, ids = 0, want_reqs, want_ids;
	struct mooncake_reader rd;
	int r, bad = 0;

	if (!path || access(path, R_OK) || count_plainly(path, &want_reqs, &want_ids)) {
		tap_skip("no Mooncake trace at $BELUGA_TRACE (see ../shared/data/README.md)",
			 "the real trace");
		return;
	}
	if (mooncake_open(&rd, path)) {
		tap_result(0, "open %s", path);
		return;
	}
	while ((r = mooncake_next(&rd)) != 0) {
		if (r < 0) {
			bad++;
			continue;
		}
		reqs++;
		ids += rd.req.nr_ids;
		bad += !rd.req.input_length;
	}
	mooncake_close(&rd);
	tap_result(!bad && reqs == want_reqs && ids == want_ids,
		   "the real trace: %llu requests with %llu ids, each with input_length "
		   "(counted plainly: %llu, %llu; %d bad)", reqs, ids, want_reqs, want_ids, bad);
}

int main(void)
{
	test_fields();
	test_refusals();
	test_growth();
	test_reader();
	test_real_trace();
	free(req.ids);
	return tap_done();
}
