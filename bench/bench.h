/* SPDX-License-Identifier: GPL-2.0 */
/*
 * belbench: Beluga measured against the designs it replaces, with every
 * baseline measured in the same run.
 *
 * One static program, several sections (meta, data, scale, replay) and the
 * baseline metadata server (server). Each section drives the same operations
 * through interchangeable backends:
 *
 *   kernel  ioctls on /dev/beluga (raw uapi, no libbeluga)
 *   core    the portable core (kmod/core/{pool,index,lru,client}.c) linked into this process:
 *           the per-key cost of the algorithm itself, no transport
 *   rpc     the same core in a separate process behind an AF_UNIX stream
 *           socket, one request/response per operation with the same
 *           batching: the RPC design (Mooncake master, Maru, the paper's
 *           baseline) with the transport isolated
 *
 * Absolute times are printed and recorded, but every figure that matters is
 * a ratio to a baseline measured in the same process, minutes apart at most.
 */
#ifndef BELBENCH_H
#define BELBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include <linux/beluga.h>

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int32_t s32;
typedef int64_t s64;

#define KiB (1ULL << 10)
#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- util.c: errors, time, statistics, output ------------------------ */

void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
/* Anonymous memory, written once so that every page is really there. */
void *anon_buf(size_t bytes, int fill);
void free_anon(void *p, size_t bytes);

static inline u64 now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (u64)ts.tv_sec * 1000000000ULL + (u64)ts.tv_nsec;
}

/* A spinning wait's pause (the polled server, SQPOLL's completion queue). */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

double median(double *v, int n);	/* sorts v */
double percentile(double *v, int n, double p);	/* v sorted */

/* Global options every section shares. */
#define RPC_CPU_AUTO (-2)

struct opts {
	const char *env;	/* "host", "guest-6.12": tags every record */
	const char *out_dir;	/* JSON lines and plot data go here */
	bool quick;		/* smoke run: fewer samples, shorter samples */
	/*
	 * Samples per figure and their length. Many short samples, median
	 * taken: on a shared host the TCG vCPUs are preempted for
	 * milliseconds at a time, and a short sample is more often clean.
	 */
	int samples;
	double sample_ms;
	/*
	 * CPU for the baseline server and for each client thread while it
	 * talks to it; -1: the scheduler's choice; RPC_CPU_AUTO (default):
	 * the CPU with the fastest same-CPU ping, probed once. A same-CPU
	 * round trip is the RPC's best case (two context switches, no
	 * cross-CPU wake-up); under TCG on a loaded host a cross-CPU wake-up
	 * costs milliseconds, which would flatter Beluga for the wrong reason.
	 */
	int rpc_cpu;
	/* CPU of the polled server (rpc-shm-polled); -1: one no client uses */
	int shm_cpu;
};
extern struct opts opt;
/*
 * The CPUs this process could use when it started (bit N: CPU N, the first
 * 64), before any section pinned it: the polled server's CPU and the
 * workers' CPUs are chosen from these.
 */
extern u64 bench_cpus_at_start;
void bench_note_cpus(void);

/*
 * Results: one JSON object per line in OUT/<section>-<env>.jsonl with a fixed
 * key order, so that shell tools (awk, jq) can read them back, and plot data
 * in OUT/<name>-<env>.dat. rec_begin() opens a record, rec_*() add fields,
 * rec_end() writes it.
 */
void out_open(const char *section);
void out_close(void);
void rec_begin(const char *kind);
void rec_str(const char *key, const char *val);
void rec_num(const char *key, double val);
void rec_int(const char *key, long long val);
void rec_end(void);
FILE *dat_open(const char *name, const char *header);

/* A figure measured as the median of samples of repeated operations. */
struct fig {
	double ns;		/* median ns per operation */
	double p10, p90;	/* spread of the samples */
	double min;		/* the fastest sample */
	u64 reps;		/* operations per sample */
	int samples;
	/* over independent runs (rounds with fresh targets): ns is their median */
	double run_min, run_max;
	int runs;
};

/*
 * Measure fn(arg) -- which performs @per_call operations and returns 0 --
 * as a median over opt.samples samples of reps calls each, reps calibrated
 * so that a sample lasts about opt.sample_ms. Dies on a non-zero return.
 */
typedef int (*op_fn)(void *arg);
struct fig measure(op_fn fn, void *arg, const char *what);
/* Calls of fn per sample so that a sample lasts about opt.sample_ms. */
u64 calibrate(op_fn fn, void *arg, const char *what);
/* The same with a fixed number of calls per sample (no calibration). */
struct fig measure_n(op_fn fn, void *arg, u64 reps, const char *what);

/*
 * One figure over independent runs (rounds with fresh targets): the median
 * of the runs' medians, run_min and run_max their extremes, and the other
 * fields from the run with the fastest sample.
 */
struct fig fig_over_runs(struct fig *const *runs, int n);
/* A record of kind "op": @f for @op of @n keys through @backend. */
void rec_fig(const char *backend, const char *op, int pin, u64 n,
	     const struct fig *f);
/*
 * Into an open record: value (the median of the @n per-run ratios @v),
 * run_min, run_max, runs, target ("", ">=" or "<="), goal and met. Sorts v.
 */
void rec_runs_verdict(double *v, int n, const char *target, double goal);

/* Keys: (ns, i) -> a 128-bit key; deterministic, no process seed. */
static inline struct beluga_key mkkey(u64 tag, u64 i)
{
	struct beluga_key k = { .lo = i + 1, .hi = tag };

	return k;
}

/* xorshift64*: reproducible pseudo-random numbers */
static inline u64 rnd_next(u64 *s)
{
	u64 x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* "1,16,64" -> array; returns the count */
int parse_list(const char *s, u64 *out, int max);
u64 parse_size(const char *s);	/* 4096, 4K, 2M, 1G */

/* ---- backends (backend_*.c, rpc.c) ---------------------------------- */

/*
 * One client of a pool: an open file of /dev/beluga, a bel_client of the
 * in-process core, or a connection to the baseline server. Ownership of
 * allocations and pins follows the client in all three.
 */
struct bk {
	const char *name;
	/* the cheapest round trip: kernel -ENOTTY ioctl, rpc ping, core none */
	int (*floor)(struct bk *b);
	int (*lookup)(struct bk *b, u64 ns, u32 n,
		      const struct beluga_key *keys, bool pin, u64 *offsets,
		      u32 *hits);
	int (*alloc)(struct bk *b, u32 n, u64 *offsets);
	int (*publish)(struct bk *b, u64 ns, u32 n, const u64 *offsets,
		       const struct beluga_key *keys, u32 *ok, u32 *exists);
	int (*release)(struct bk *b, u32 n, const u64 *offsets);
	int (*free)(struct bk *b, u32 n, const u64 *offsets);
	/*
	 * The data path: the blocks of the leading run of @keys that hits,
	 * copied into @dst (block i at dst + i * block_size); *hits of them.
	 */
	int (*get)(struct bk *b, u64 ns, u32 n, const struct beluga_key *keys,
		   void *dst, u32 *hits);
	void (*close)(struct bk *b);
	/* private */
	int fd;
	u64 block_size;
	u8 *map;		/* kernel: mapping of /dev/beluga; core: arena */
	u64 map_size;
	void *priv;
	void *scratch;		/* per-client buffers, no malloc per call */
	u64 *offs;
};

/* backend_kernel.c */
bool kernel_available(void);
/*
 * A pool region for a section: "dax:/dev/daxX.Y" (attach the first @bytes
 * of that device-dax instance, 2 MiB aligned) or "node:N" (reserve @bytes
 * from node N). @bytes 0: the whole device (dax only).
 */
struct kregion {
	int admin_fd;
	u32 region_id;
	u64 nr_blocks;
	u64 first_offset;
	u64 block_size;
	u64 length;
	u64 dax_start;		/* physical start of the device-dax instance */
	u64 dax_size;
	char dax_path[64];
	bool attached;
};
int kregion_attach(struct kregion *r, const char *spec, u64 bytes, u64 bs);
void kregion_detach(struct kregion *r);
/* Size of the device-dax instance named by a "dax:" spec (0 when not). */
u64 dax_spec_size(const char *spec);
struct bk *kernel_open(bool map);
int kernel_info(struct bk *b, struct beluga_info *info);
int kernel_info_op(struct bk *b);	/* one BELUGA_IOC_INFO */
int kernel_stats(struct bk *b, struct beluga_stats *st);

/* backend_core.c */
struct bel_pool;
struct bel_pool *core_pool_new(u64 nr_blocks, u64 bs);
void core_pool_free(struct bel_pool *p);
/* @arena: block i of the pool at arena + i * bs (may be NULL: no data) */
struct bk *core_open(struct bel_pool *p, u8 *arena);

/* rpc.c: the baseline server and its client */
struct rpc_server {
	pid_t pid;
	u64 bs;
	char path[108];
};
/*
 * Start the server in a separate process (fork + exec of this program):
 * a pool of @nr_blocks of @bs, and for the data path an arena holding the
 * blocks' bytes: NULL (none), "anon", or a device/file path mapped shared
 * read-only. Waits until it accepts connections.
 */
void rpc_server_start(struct rpc_server *s, u64 nr_blocks, u64 bs,
		      const char *arena);
void rpc_server_stop(struct rpc_server *s);
struct bk *rpc_open(struct rpc_server *s);
/*
 * Single-threaded sections run every target on the CPU the baseline server
 * gets (opt.rpc_cpu), so that no target has a quieter CPU than another.
 */
void bench_pin_cpu(void);
int server_main(int argc, char **argv);

/* shmrpc.c: the spin-polling shared-memory baseline and its client */
#define SHM_MAX_CLIENTS 8
struct shm_area;
struct shm_server {
	pid_t pid;
	int cpu;		/* the server's own CPU */
	u64 bs;
	struct shm_area *area;
};
void shm_server_start(struct shm_server *s, u64 nr_blocks, u64 bs);
void shm_server_stop(struct shm_server *s);
struct bk *shmrpc_open(struct shm_server *s);
int shm_server_cpu(void);
int shm_server_main(int argc, char **argv);

/* ---- sections -------------------------------------------------------- */
int sec_meta(int argc, char **argv);
int sec_data(int argc, char **argv);
int sec_scale(int argc, char **argv);
int sec_replay(int argc, char **argv);
int sec_conc(int argc, char **argv);
int sec_ring(int argc, char **argv);

/* trace.c */
struct trace {
	u32 nr_req;
	u32 *start;		/* hash ids of request i: ids[start[i] .. start[i+1]) */
	u32 *ids;
	u32 *input_len;
	u64 nr_refs;
	u64 nr_distinct;
	u64 bound_hits;		/* infinite cache, leading-run hits */
	u32 max_len;
};
int trace_load(struct trace *t, const char *path);

#endif /* BELBENCH_H */
