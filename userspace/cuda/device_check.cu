// SPDX-License-Identifier: GPL-2.0
/*
 * The GPU device check (run by scripts/device-check-cuda.sh), for a machine
 * with an NVIDIA GPU where beluga.ko cannot load. It builds a stand-in for
 * the pool mapping with the same layout (MAP_SHARED, 2 MiB aligned, hugetlb
 * when the machine has huge pages reserved, else shared memory), registers
 * it through libbeluga's own code path (bel_cuda_register_range(), in
 * block-aligned pieces), and then:
 *
 *   - checks that a refused registration leaves no pending CUDA error in
 *     this program's runtime (libbeluga finds it mapped and clears it);
 *   - gathers blocks of a vLLM-shaped paged cache (per layer (2, blocks,
 *     tokens, heads, dim)) into pool blocks with libbeluga-kvcopy's kernel
 *     and compares them byte for byte with the CPU reference copy;
 *   - scatters them back into other GPU blocks of a cleared cache and
 *     compares every byte of the cache with what it must hold;
 *   - measures both directions against cudaMemcpy of the same bytes between
 *     device memory and cudaMallocHost memory, in the same run: median of
 *     several runs, min and max, and the ratio of the medians (plus, for
 *     context, cudaMemcpy from the registered stand-in and from pageable
 *     memory).
 *
 * Output is TAP. Without a usable GPU it prints one SKIP line with the
 * reason and exits 0. Bandwidth figures are comments (a benchmark, not a
 * pass/fail criterion); BELUGA_DEVICE_CHECK_JSON=path also writes them as
 * JSON.
 */
#include <algorithm>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <vector>

#include <cuda_runtime.h>

extern "C" {
#include "libbeluga.h"
#include "cuda.h"
}
#include "kvcopy_plan.h"

/* Llama-like geometry: 48 layers x K,V x 16 tokens x 8 heads x 128 dims x bf16 = 3 MiB. */
static const uint32_t LAYERS = 48, NUM_KV = 2, TOKENS = 16;
static const uint64_t ROW = 8 * 128 * 2;
static const uint64_t GPU_BLOCKS = 512, POOL_BLOCKS = 640, BATCH = 256;
static const int RUNS = 7;

static int tap_n, tap_failed;

static void result(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void result(bool ok, const char *fmt, ...)
{
	va_list ap;

	printf("%sok %d - device: ", ok ? "" : "not ", ++tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	tap_failed += !ok;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void fill_random(void *p, size_t len)
{
	uint64_t *q = (uint64_t *)p;

	for (size_t i = 0; i < len / 8; i++)
		q[i] = rng();
}

/* The stand-in pool: MAP_SHARED at a 2 MiB aligned address, like beluga_map(). */
static void *stand_in_pool(size_t len, const char **backing)
{
	const size_t align = 2UL << 20;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);

	if (p != MAP_FAILED) {
		*backing = "hugetlb (2 MiB pages)";
		return p;
	}
	p = mmap(NULL, len + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	uintptr_t base = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
	void *q = mmap((void *)base, len, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED | MAP_POPULATE, -1, 0);
	if (q == MAP_FAILED)
		return NULL;
	madvise(q, len, MADV_HUGEPAGE);
	*backing = "shared memory (no huge pages reserved), 2 MiB aligned";
	return q;
}

struct stats {
	double median, min, max;
};

static struct stats summarize(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return { v[v.size() / 2], v.front(), v.back() };
}

#define CHECK_CUDA(call)                                                                       \
	do {                                                                                   \
		cudaError_t e_ = (call);                                                       \
		if (e_ != cudaSuccess) {                                                       \
			result(false, "%s: %s", #call, cudaGetErrorString(e_));                \
			printf("1..%d\n", tap_n);                                              \
			return 1;                                                              \
		}                                                                              \
	} while (0)

int main(void)
{
	const uint64_t layer_bytes = NUM_KV * GPU_BLOCKS * TOKENS * ROW;
	struct beluga_kv_layout lay;
	struct bel_cuda_plan plan;
	char err[512] = "";
	const char *backing = "";
	int count = 0, ret;
	cudaError_t e;

	e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || !count) {
		printf("ok 1 - device # SKIP no usable GPU: cudaGetDeviceCount: %s\n",
		       e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		return 0;
	}
	cudaDeviceProp prop;
	int drv = 0, same = 0;
	CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
	CHECK_CUDA(cudaDriverGetVersion(&drv));
	CHECK_CUDA(cudaDeviceGetAttribute(&same, cudaDevAttrCanUseHostPointerForRegisteredMem, 0));
	printf("# device 0: %s, sm_%d%d, %.1f GiB, driver API %d, host pointers for registered "
	       "memory: %s\n", prop.name, prop.major, prop.minor,
	       prop.totalGlobalMem / (double)(1ULL << 30), drv, same ? "yes" : "no");

	lay = beluga_kv_layout{};
	lay.num_layers = LAYERS;
	lay.num_kv = NUM_KV;
	lay.block_tokens = TOKENS;
	lay.row_bytes = ROW;
	lay.gpu_kv_stride = GPU_BLOCKS * TOKENS * ROW;
	lay.gpu_block_stride = TOKENS * ROW;
	lay.gpu_token_stride = ROW;
	lay.gpu_num_blocks = GPU_BLOCKS;
	beluga_kv_layout_canonical(&lay);
	const uint64_t block = beluga_kv_block_bytes(&lay);
	const size_t pool_len = POOL_BLOCKS * block;
	lay.pool_length = pool_len;

	/* 1. the stand-in mapping, registered in block-aligned pieces */
	char *pool = (char *)stand_in_pool(pool_len, &backing);
	result(pool != NULL, "stand-in pool of %llu blocks of %llu MiB: %s",
	       (unsigned long long)POOL_BLOCKS, (unsigned long long)(block >> 20),
	       pool ? backing : strerror(errno));
	if (!pool)
		return 1;
	bel_cuda_chunk_target = 256ULL << 20;	/* several pieces on a small pool */
	ret = bel_cuda_register_range(NULL, pool, pool_len, block, 0x01 | 0x02, &plan);
	result(!ret && plan.nr_chunks > 1 && plan.chunk % block == 0 &&
	       cudaPeekAtLastError() == cudaSuccess,
	       "registered through libbeluga in %zu pieces of %zu blocks (%s)", plan.nr_chunks,
	       plan.chunk / block, ret ? beluga_last_error(NULL) : "ok");
	if (ret)
		return 1;

	/* 2. a refused registration leaves no error pending in this runtime */
	struct bel_cuda_plan again;
	ret = bel_cuda_register_range(NULL, pool, pool_len, block, 0x01 | 0x02, &again);
	if (ret == -EIO) {
		e = cudaGetLastError();
		result(e == cudaSuccess,
		       "a refused registration (%s) leaves no pending error (cudaGetLastError: %s)",
		       beluga_last_error(NULL), cudaGetErrorString(e));
	} else {
		if (!ret)
			bel_cuda_unregister_range(NULL, pool, pool_len, &again);
		printf("ok %d - device: refused registration clears the error # SKIP the driver "
		       "accepted registering a range twice (ret %d)\n", ++tap_n, ret);
	}

	/* 3. a vLLM-shaped cache with random bytes, and its host image */
	std::vector<char *> host(LAYERS);
	std::vector<uint64_t> gpu(LAYERS), hostaddr(LAYERS);
	for (uint32_t l = 0; l < LAYERS; l++) {
		void *d;

		host[l] = (char *)malloc(layer_bytes);
		if (!host[l]) {
			result(false, "host memory for the cache image");
			return 1;
		}
		fill_random(host[l], layer_bytes);
		CHECK_CUDA(cudaMalloc(&d, layer_bytes));
		CHECK_CUDA(cudaMemcpy(d, host[l], layer_bytes, cudaMemcpyHostToDevice));
		gpu[l] = (uint64_t)(uintptr_t)d;
		hostaddr[l] = (uint64_t)(uintptr_t)host[l];
	}
	memset(pool, 0, pool_len);

	/* distinct GPU blocks -> distinct pool slots, shuffled */
	std::vector<uint64_t> gperm(GPU_BLOCKS), pperm(POOL_BLOCKS), back(GPU_BLOCKS);
	for (uint64_t i = 0; i < GPU_BLOCKS; i++)
		gperm[i] = back[i] = i;
	for (uint64_t i = 0; i < POOL_BLOCKS; i++)
		pperm[i] = i;
	for (uint64_t i = GPU_BLOCKS - 1; i > 0; i--)
		std::swap(gperm[i], gperm[rng() % (i + 1)]);
	for (uint64_t i = POOL_BLOCKS - 1; i > 0; i--)
		std::swap(pperm[i], pperm[rng() % (i + 1)]);
	for (uint64_t i = GPU_BLOCKS - 1; i > 0; i--)
		std::swap(back[i], back[rng() % (i + 1)]);
	std::vector<beluga_kv_pair> out(BATCH), in(BATCH);
	for (uint64_t i = 0; i < BATCH; i++) {
		out[i] = { gperm[i], pperm[i] * block };
		in[i] = { back[i], pperm[i] * block };
	}

	/* 4. gather, compared with the CPU reference */
	ret = beluga_kv_copy(BELUGA_KV_TO_POOL, &lay, gpu.data(), pool, out.data(), BATCH, 0, 1,
			     err, sizeof(err));
	result(!ret, "gather of %llu blocks in one launch (%s)", (unsigned long long)BATCH,
	       ret ? err : "ok");
	{
		char *expect = (char *)calloc(pool_len, 1);
		struct bel_kv_plan p;
		uint64_t *table;
		size_t bad = 0;

		if (!expect || bel_kv_prepare(BELUGA_KV_TO_POOL, &lay, hostaddr.data(), expect,
					      out.data(), BATCH, &p, &table, err, sizeof(err))) {
			result(false, "CPU reference: %s", err);
			return 1;
		}
		bel_kv_copy_cpu(&p, table);
		free(table);
		for (uint64_t s = 0; s < POOL_BLOCKS; s++)
			bad += memcmp(pool + s * block, expect + s * block, block) != 0;
		result(!ret && !bad, "pool blocks equal the CPU reference byte for byte, other blocks "
		       "untouched (%zu of %llu blocks differ)", bad, (unsigned long long)POOL_BLOCKS);
		free(expect);
	}

	/* 5. scatter into other GPU blocks of a cleared cache */
	for (uint32_t l = 0; l < LAYERS; l++)
		CHECK_CUDA(cudaMemset((void *)(uintptr_t)gpu[l], 0, layer_bytes));
	ret = beluga_kv_copy(BELUGA_KV_FROM_POOL, &lay, gpu.data(), pool, in.data(), BATCH, 0, 1,
			     err, sizeof(err));
	result(!ret, "scatter of %llu blocks in one launch (%s)", (unsigned long long)BATCH,
	       ret ? err : "ok");
	{
		std::vector<int64_t> src_of(GPU_BLOCKS, -1);
		char *got = (char *)malloc(layer_bytes);
		size_t bad = 0;

		for (uint64_t i = 0; i < BATCH; i++)
			src_of[back[i]] = (int64_t)gperm[i];
		for (uint32_t l = 0; got && l < LAYERS; l++) {
			CHECK_CUDA(cudaMemcpy(got, (void *)(uintptr_t)gpu[l], layer_bytes,
					      cudaMemcpyDeviceToHost));
			for (uint32_t kv = 0; kv < NUM_KV; kv++)
				for (uint64_t b = 0; b < GPU_BLOCKS; b++) {
					const char *g = got + kv * lay.gpu_kv_stride + b * lay.gpu_block_stride;
					size_t n = TOKENS * ROW;

					if (src_of[b] < 0) {
						for (size_t i = 0; i < n; i++)
							bad += g[i] != 0;
					} else {
						bad += memcmp(g, host[l] + kv * lay.gpu_kv_stride +
							      src_of[b] * lay.gpu_block_stride, n) != 0;
					}
				}
		}
		result(got && !ret && !bad, "GPU -> pool -> GPU is bit-exact in every layer, K and V, "
		       "other GPU blocks stay zero (%zu tiles differ)", bad);
		free(got);
	}

	/* 6. bandwidth against cudaMemcpy with cudaMallocHost memory, same bytes */
	const size_t bytes = BATCH * block;
	void *pinned, *dev;
	CHECK_CUDA(cudaMallocHost(&pinned, bytes));
	CHECK_CUDA(cudaMalloc(&dev, bytes));
	memset(pinned, 1, bytes);
	/* context: the same bytes from the registered stand-in and from pageable memory */
	char *pageable = (char *)malloc(bytes);
	if (!pageable) {
		result(false, "host memory for the pageable baseline");
		return 1;
	}
	memset(pageable, 2, bytes);
	std::vector<double> gather, scatter, d2h, h2d, reg_h2d, page_h2d;
	bool all_ok = true;
	for (int r = 0; r < RUNS + 1; r++) {
		double t0 = now();
		all_ok &= !beluga_kv_copy(BELUGA_KV_TO_POOL, &lay, gpu.data(), pool, out.data(), BATCH,
					  0, 1, err, sizeof(err));
		double t1 = now();
		all_ok &= !beluga_kv_copy(BELUGA_KV_FROM_POOL, &lay, gpu.data(), pool, in.data(), BATCH,
					  0, 1, err, sizeof(err));
		double t2 = now();
		all_ok &= cudaMemcpy(pinned, dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
		double t3 = now();
		all_ok &= cudaMemcpy(dev, pinned, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
		double t4 = now();
		all_ok &= cudaMemcpy(dev, pool, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
		double t5 = now();
		all_ok &= cudaMemcpy(dev, pageable, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
		double t6 = now();
		if (!r)
			continue;	/* warm-up */
		reg_h2d.push_back(bytes / (t5 - t4) / 1e9);
		page_h2d.push_back(bytes / (t6 - t5) / 1e9);
		gather.push_back(bytes / (t1 - t0) / 1e9);
		scatter.push_back(bytes / (t2 - t1) / 1e9);
		d2h.push_back(bytes / (t3 - t2) / 1e9);
		h2d.push_back(bytes / (t4 - t3) / 1e9);
	}
	struct stats g = summarize(gather), s = summarize(scatter), dh = summarize(d2h),
		     hd = summarize(h2d), rh = summarize(reg_h2d), ph = summarize(page_h2d);
	printf("# bandwidth, %d runs of %llu blocks (%zu MiB), GB/s median [min, max]:\n", RUNS,
	       (unsigned long long)BATCH, bytes >> 20);
	printf("#   gather GPU->pool (kvcopy)          %7.2f [%7.2f, %7.2f]\n", g.median, g.min, g.max);
	printf("#   cudaMemcpy D2H to cudaMallocHost   %7.2f [%7.2f, %7.2f]\n", dh.median, dh.min, dh.max);
	printf("#   scatter pool->GPU (kvcopy)         %7.2f [%7.2f, %7.2f]\n", s.median, s.min, s.max);
	printf("#   cudaMemcpy H2D from cudaMallocHost %7.2f [%7.2f, %7.2f]\n", hd.median, hd.min, hd.max);
	printf("#   cudaMemcpy H2D, registered pool    %7.2f [%7.2f, %7.2f] (contiguous)\n", rh.median,
	       rh.min, rh.max);
	printf("#   cudaMemcpy H2D, pageable malloc    %7.2f [%7.2f, %7.2f]\n", ph.median, ph.min, ph.max);
	printf("#   ratio gather/D2H %.3f, scatter/H2D %.3f (pool: %s)\n", g.median / dh.median,
	       s.median / hd.median, backing);
	result(all_ok, "bandwidth measured against cudaMemcpy in the same run (%s)",
	       all_ok ? "figures above" : err);
	const char *json = getenv("BELUGA_DEVICE_CHECK_JSON");
	if (json && *json) {
		FILE *f = fopen(json, "w");

		if (f) {
			fprintf(f, "{\"device\": \"%s\", \"block_bytes\": %llu, \"batch_blocks\": %llu, "
				"\"runs\": %d, \"pool_backing\": \"%s\",\n", prop.name,
				(unsigned long long)block, (unsigned long long)BATCH, RUNS, backing);
			fprintf(f, " \"gbps\": {\"gather\": [%.3f, %.3f, %.3f], \"d2h_pinned\": [%.3f, %.3f, %.3f], "
				"\"scatter\": [%.3f, %.3f, %.3f], \"h2d_pinned\": [%.3f, %.3f, %.3f], "
				"\"h2d_registered_pool\": [%.3f, %.3f, %.3f], \"h2d_pageable\": [%.3f, %.3f, %.3f]},\n",
				g.median, g.min, g.max, dh.median, dh.min, dh.max, s.median, s.min, s.max,
				hd.median, hd.min, hd.max, rh.median, rh.min, rh.max, ph.median, ph.min, ph.max);
			fprintf(f, " \"ratio\": {\"gather_vs_d2h\": %.4f, \"scatter_vs_h2d\": %.4f}}\n",
				g.median / dh.median, s.median / hd.median);
			fclose(f);
		}
	}

	cudaFreeHost(pinned);
	cudaFree(dev);
	free(pageable);
	for (uint32_t l = 0; l < LAYERS; l++) {
		cudaFree((void *)(uintptr_t)gpu[l]);
		free(host[l]);
	}

	/* 7. unregister every piece */
	ret = bel_cuda_unregister_range(NULL, pool, pool_len, &plan);
	result(!ret && cudaGetLastError() == cudaSuccess, "unregistered every piece (%s)",
	       ret ? beluga_last_error(NULL) : "ok");
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}
