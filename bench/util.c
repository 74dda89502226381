// SPDX-License-Identifier: GPL-2.0
/* belbench: errors, statistics, timing loops and result files. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "bench.h"

struct opts opt = {
	.env = "host",
	.out_dir = "build/bench",
	.samples = 31,
	.sample_ms = 2,
	.rpc_cpu = RPC_CPU_AUTO,
	.shm_cpu = -1,
};

u64 bench_cpus_at_start;

void bench_note_cpus(void)
{
	cpu_set_t set;
	int cpu;

	if (sched_getaffinity(0, sizeof(set), &set))
		return;
	for (cpu = 0; cpu < 64; cpu++)
		if (CPU_ISSET(cpu, &set))
			bench_cpus_at_start |= 1ULL << cpu;
}

void die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "belbench: error: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(1);
}

void note(const char *fmt, ...)
{
	va_list ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		die("out of memory (%zu bytes)", n);
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (!p)
		die("out of memory (%zu x %zu bytes)", n, size);
	return p;
}

void *anon_buf(size_t bytes, int fill)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap of %zu anonymous bytes: %s", bytes, strerror(errno));
	/* Written, so that reads see real pages and not the zero page. */
	memset(p, fill, bytes);
	return p;
}

void free_anon(void *p, size_t bytes)
{
	munmap(p, bytes);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double percentile(double *v, int n, double p)
{
	double pos, frac;
	int i;

	if (n <= 0)
		return 0;
	pos = p * (n - 1);
	i = (int)pos;
	frac = pos - i;
	if (i + 1 >= n)
		return v[n - 1];
	return v[i] + frac * (v[i + 1] - v[i]);
}

double median(double *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return percentile(v, n, 0.5);
}

/* One call of a measured operation; a failure ends the run, with its errno. */
static inline void run_op(op_fn fn, void *arg, const char *what)
{
	int ret = fn(arg);

	if (ret)
		die("%s failed: %s", what,
		    ret < 0 ? strerror(-ret) : "nonzero return");
}

struct fig measure_n(op_fn fn, void *arg, u64 reps, const char *what)
{
	double v[64];
	struct fig f = { .reps = reps, .samples = opt.samples };
	int s;

	if (f.samples > (int)ARRAY_SIZE(v))
		f.samples = ARRAY_SIZE(v);
	for (s = 0; s < f.samples; s++) {
		u64 t0 = now_ns(), i;

		for (i = 0; i < reps; i++)
			run_op(fn, arg, what);
		v[s] = (double)(now_ns() - t0) / (double)reps;
	}
	f.ns = median(v, f.samples);
	f.min = v[0];
	f.p10 = percentile(v, f.samples, 0.1);
	f.p90 = percentile(v, f.samples, 0.9);
	f.run_min = f.run_max = f.ns;
	f.runs = 1;
	return f;
}

u64 calibrate(op_fn fn, void *arg, const char *what)
{
	u64 reps = 1, t0, dt, target = (u64)(opt.sample_ms * 1e6);

	run_op(fn, arg, what);	/* warm up */
	/* Double until a run lasts a tenth of a sample, then scale. */
	for (;;) {
		u64 i;

		t0 = now_ns();
		for (i = 0; i < reps; i++)
			run_op(fn, arg, what);
		dt = now_ns() - t0;
		if (dt * 10 >= target || reps >= (1ULL << 24))
			break;
		reps *= 2;
	}
	reps = dt ? (u64)((double)reps * (double)target / (double)dt) : reps;
	return reps < 1 ? 1 : reps;
}

struct fig measure(op_fn fn, void *arg, const char *what)
{
	return measure_n(fn, arg, calibrate(fn, arg, what), what);
}

/* ---- output ---------------------------------------------------------- */

static FILE *out_f;
static const char *out_section;
static int rec_fields;

static void mkdir_p(const char *path)
{
	char buf[512], *p;

	snprintf(buf, sizeof(buf), "%s", path);
	for (p = buf + 1; *p; p++) {
		if (*p == '/') {
			*p = 0;
			mkdir(buf, 0755);
			*p = '/';
		}
	}
	mkdir(buf, 0755);
}

void out_open(const char *section)
{
	char path[512];

	mkdir_p(opt.out_dir);
	snprintf(path, sizeof(path), "%s/%s-%s.jsonl", opt.out_dir, section,
		 opt.env);
	out_f = fopen(path, "w");
	if (!out_f)
		die("cannot write %s: %s", path, strerror(errno));
	out_section = section;
}

void out_close(void)
{
	if (out_f)
		fclose(out_f);
	out_f = NULL;
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

void rec_begin(const char *kind)
{
	if (!out_f)
		die("rec_begin without out_open");
	fprintf(out_f, "{\"section\":");
	json_str(out_f, out_section);
	fprintf(out_f, ",\"env\":");
	json_str(out_f, opt.env);
	fprintf(out_f, ",\"kind\":");
	json_str(out_f, kind);
	rec_fields = 3;
}

void rec_str(const char *key, const char *val)
{
	fputc(',', out_f);
	json_str(out_f, key);
	fputc(':', out_f);
	json_str(out_f, val);
	rec_fields++;
}

void rec_num(const char *key, double val)
{
	fputc(',', out_f);
	json_str(out_f, key);
	if (!isfinite(val))	/* NaN and infinities are not JSON */
		fprintf(out_f, ":null");
	else
		fprintf(out_f, ":%.6g", val);
	rec_fields++;
}

void rec_int(const char *key, long long val)
{
	fputc(',', out_f);
	json_str(out_f, key);
	fprintf(out_f, ":%lld", val);
	rec_fields++;
}

void rec_end(void)
{
	fprintf(out_f, "}\n");
	fflush(out_f);
}

FILE *dat_open(const char *name, const char *header)
{
	char path[512];
	FILE *f;

	mkdir_p(opt.out_dir);
	snprintf(path, sizeof(path), "%s/%s-%s.dat", opt.out_dir, name,
		 opt.env);
	f = fopen(path, "w");
	if (!f)
		die("cannot write %s: %s", path, strerror(errno));
	fprintf(f, "# %s (%s)\n# %s\n", name, opt.env, header);
	return f;
}

/* ---- parsing ----------------------------------------------------------- */

u64 parse_size(const char *s)
{
	char *end;
	u64 v = strtoull(s, &end, 0);

	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'B')
		end++;
	if (*end == 'B')
		end++;
	if (*end)
		die("bad size '%s'", s);
	return v;
}

int parse_list(const char *s, u64 *out, int max)
{
	char buf[256], *tok, *save = NULL;
	int n = 0;

	snprintf(buf, sizeof(buf), "%s", s);
	for (tok = strtok_r(buf, ",", &save); tok && n < max;
	     tok = strtok_r(NULL, ",", &save))
		out[n++] = parse_size(tok);
	return n;
}

/* ---- figures over rounds ------------------------------------------------ */

struct fig fig_over_runs(struct fig *const *runs, int n)
{
	double v[64], lo = 0;
	const struct fig *best = NULL;
	struct fig out;
	int r;

	if (n < 1 || n > (int)ARRAY_SIZE(v))
		die("fig_over_runs: %d runs (1 to %zu)", n, ARRAY_SIZE(v));
	for (r = 0; r < n; r++) {
		v[r] = runs[r]->ns;
		if (!best || runs[r]->min < lo) {
			lo = runs[r]->min;
			best = runs[r];
		}
	}
	out = *best;
	out.ns = median(v, n);	/* sorts v */
	out.run_min = v[0];
	out.run_max = v[n - 1];
	out.runs = n;
	out.min = lo;
	out.samples = best->samples * n;
	return out;
}

void rec_fig(const char *backend, const char *op, int pin, u64 n,
	     const struct fig *f)
{
	rec_begin("op");
	rec_str("backend", backend);
	rec_str("op", op);
	rec_int("pin", pin);
	rec_int("n", (long long)n);
	rec_num("ns_per_op", f->ns);
	rec_num("min", f->min);
	rec_num("p10", f->p10);
	rec_num("p90", f->p90);
	rec_int("reps", (long long)f->reps);
	rec_int("samples", f->samples);
	rec_num("run_min", f->run_min);
	rec_num("run_max", f->run_max);
	rec_int("runs", f->runs);
	rec_end();
}

void rec_runs_verdict(double *v, int n, const char *target, double goal)
{
	double med = median(v, n);	/* sorts v */

	rec_num("value", med);
	rec_num("run_min", v[0]);
	rec_num("run_max", v[n - 1]);
	rec_int("runs", n);
	rec_str("target", target);
	rec_num("goal", goal);
	rec_int("met", !*target ? 1 : !strcmp(target, ">=") ? med >= goal :
		med <= goal);
}
