// SPDX-License-Identifier: GPL-2.0
/*
 * CUDA host registration without a GPU:
 *   - bel_cuda_plan() on pools of terabytes with awkward block sizes (pure
 *     arithmetic, nothing allocated);
 *   - bel_cuda_register_range() and beluga_cuda_register() against the stub
 *     runtime (tests/userspace/cudart_stub.c) loaded through BELUGA_CUDART: every piece
 *     a block multiple below 512 GiB, rollback of the registered pieces when
 *     one fails, the last-error state cleared in every runtime mapped.
 *
 *   test_cuda DIR            DIR holds libcudart-stub-{a,b}.so
 *   test_cuda --mapped DIR   without BELUGA_CUDART: the runtime already
 *                            mapped in the process is the one used
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libbeluga.h"
#include "cudart_stub.h"
#include "fake_kernel.h"
#include "internal.h"
#include "../lib/tap.h"

#define KiB	(1ULL << 10)
#define MiB	(1ULL << 20)
#define GiB	(1ULL << 30)
#define TiB	(1ULL << 40)

/* An address range that is never dereferenced: the stub only records it. */
#define FAKE_BASE	((void *)(uintptr_t)0x100000000000ULL)

static struct cudart_stub *stub_a, *stub_b;
static char dev_path[64];

/* Every piece of @p over @length is a @unit multiple below the cap, and they tile it. */
static int plan_ok(const struct bel_cuda_plan *p, size_t length, size_t unit)
{
	size_t i, covered = 0;

	if (!p->nr_chunks || !p->chunk || p->chunk >= BEL_CUDA_CALL_LIMIT)
		return 0;
	if (p->nr_chunks > 1 && p->chunk % unit)
		return 0;
	for (i = 0; i < p->nr_chunks; i++) {
		size_t len = length - covered < p->chunk ? length - covered : p->chunk;

		if (!len || covered % unit)
			return 0;
		covered += len;
	}
	return covered == length;
}

static void test_plan(void)
{
	static const size_t units[] = { 4 * KiB, 2 * MiB, 3 * MiB, 5 * MiB, 1 * GiB,
					300 * GiB, 512 * GiB - 4 * KiB };
	static const size_t lengths[] = { 4 * KiB, 255 * GiB, 256 * GiB, 511 * GiB, 512 * GiB,
					  2 * TiB, 2 * TiB + 3 * MiB, 17 * TiB + 5 * MiB };
	static const size_t targets[] = { BEL_CUDA_CHUNK_TARGET, 0, 1 * MiB, 600 * GiB };
	struct bel_cuda_plan p;
	unsigned int i, j, k, bad = 0, runs = 0;
	int ret;

	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		for (j = 0; j < sizeof(lengths) / sizeof(lengths[0]); j++)
			for (k = 0; k < sizeof(targets) / sizeof(targets[0]); k++) {
				size_t len = lengths[j] / units[i] * units[i];

				if (!len)
					continue;
				runs++;
				if (bel_cuda_plan(len, units[i], targets[k], &p) || !plan_ok(&p, len, units[i])) {
					if (!bad++)
						tap_diag("bad plan: length %zu unit %zu target %zu: chunk %zu x %zu",
							 len, units[i], targets[k], p.chunk, p.nr_chunks);
				}
			}
	tap_result(!bad && runs > 100,
		   "plan: %u cuts (4 KiB..512 GiB blocks, pools up to 17 TiB): pieces are block "
		   "multiples below 512 GiB that tile the pool (%u bad)", runs, bad);

	ret = bel_cuda_plan(2 * TiB, 1 * GiB, BEL_CUDA_CHUNK_TARGET, &p);
	tap_result(!ret && p.chunk == 256 * GiB && p.nr_chunks == 8,
		   "plan: 2 TiB of 1 GiB blocks is 8 pieces of 256 GiB (%zu x %zu)", p.nr_chunks, p.chunk);
	/* 256 GiB is not a multiple of 3 MiB: the old fixed cut split block 87381. */
	ret = bel_cuda_plan(2 * TiB / (3 * MiB) * 3 * MiB, 3 * MiB, BEL_CUDA_CHUNK_TARGET, &p);
	tap_result(!ret && p.chunk == 87381 * 3 * MiB && p.nr_chunks == 9,
		   "plan: 3 MiB blocks cut at 87381 blocks (256 GiB - 1 MiB), 9 pieces (%zu x %zu)",
		   p.nr_chunks, p.chunk);
	ret = bel_cuda_plan(2 * TiB / (5 * MiB) * 5 * MiB, 5 * MiB, BEL_CUDA_CHUNK_TARGET, &p);
	tap_result(!ret && p.chunk == 52428 * 5 * MiB && p.nr_chunks == 9,
		   "plan: 5 MiB blocks cut at 52428 blocks (256 GiB - 4 MiB), 9 pieces (%zu x %zu)",
		   p.nr_chunks, p.chunk);
	tap_result(!bel_cuda_plan(100 * GiB, 2 * MiB, BEL_CUDA_CHUNK_TARGET, &p) &&
		   p.chunk == 100 * GiB && p.nr_chunks == 1,
		   "plan: a pool below the target is one call");
	tap_result(!bel_cuda_plan(1200 * GiB, 300 * GiB, BEL_CUDA_CHUNK_TARGET, &p) &&
		   p.chunk == 300 * GiB && p.nr_chunks == 4,
		   "plan: a block above the target is a piece of its own (300 GiB x 4)");
	tap_result(bel_cuda_plan(0, 2 * MiB, 0, &p) == -EINVAL &&
		   bel_cuda_plan(2 * MiB, 0, 0, &p) == -EINVAL &&
		   bel_cuda_plan(1 * TiB, 512 * GiB, 0, &p) == -E2BIG,
		   "plan: zero length or unit is -EINVAL, a 512 GiB block -E2BIG");
}

static struct cudart_stub *load_stub(const char *dir, const char *name)
{
	char path[4096];
	cudart_stub_fn fn;
	void *lib, *sym;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		printf("# dlopen %s: %s\n", path, dlerror());
		exit(1);
	}
	sym = dlsym(lib, "cudart_stub");
	memcpy(&fn, &sym, sizeof(fn));
	return fn();
}

static void stub_reset(struct cudart_stub *s)
{
	memset(s, 0, sizeof(*s));
}

/* The register calls in @s's log are contiguous pieces of @unit multiples from @base. */
static int log_tiles(const struct cudart_stub *s, const void *base, size_t length, size_t unit,
		     unsigned int flags)
{
	uintptr_t next = (uintptr_t)base;
	unsigned int i;

	for (i = 0; i < s->nr_calls && i < STUB_MAX_LOG; i++) {
		const struct stub_call *c = &s->log[i];

		if (c->op != 'R' || c->ret || c->ptr != next || (c->ptr - (uintptr_t)base) % unit ||
		    c->size >= BEL_CUDA_CALL_LIMIT || c->flags != flags)
			return 0;
		next += c->size;
	}
	return next == (uintptr_t)base + length;
}

static void test_range(void)
{
	struct bel_cuda_plan plan;
	size_t len = 2 * TiB / (5 * MiB) * 5 * MiB;
	unsigned int i, unreg;
	int ret;

	stub_reset(stub_a);
	ret = bel_cuda_register_range(NULL, FAKE_BASE, len, 5 * MiB, 1, &plan);
	tap_result(!ret && stub_a->nr_calls == 9 && log_tiles(stub_a, FAKE_BASE, len, 5 * MiB, 1) &&
		   stub_a->nr_live == 9,
		   "range: 2 TiB of 5 MiB blocks goes to the runtime as 9 calls, each a block "
		   "multiple below 512 GiB (ret %d, %u calls: %s)", ret, stub_a->nr_calls,
		   beluga_last_error(NULL));
	ret = bel_cuda_unregister_range(NULL, FAKE_BASE, len, &plan);
	unreg = 0;
	for (i = 9; i < stub_a->nr_calls; i++)
		unreg += stub_a->log[i].op == 'U' && !stub_a->log[i].ret;
	tap_result(!ret && unreg == 9 && stub_a->nr_live == 0,
		   "range: unregister undoes every piece (%u of 9)", unreg);

	/* The third piece fails: the first two are rolled back. */
	stub_reset(stub_a);
	stub_reset(stub_b);
	stub_a->fail_at = 3;
	stub_b->pending = 2;	/* the other runtime's copy of the error */
	ret = bel_cuda_register_range(NULL, FAKE_BASE, len, 5 * MiB, 1, &plan);
	tap_result(ret == -EIO && strstr(beluga_last_error(NULL), "piece 3 of 9") &&
		   strstr(beluga_last_error(NULL), "out of memory (CUDA error 2)"),
		   "range: a failing piece is -EIO naming the piece and CUDA's error (%s)",
		   beluga_last_error(NULL));
	tap_result(stub_a->nr_live == 0 && stub_a->nr_calls == 5 && stub_a->log[3].op == 'U' &&
		   stub_a->log[3].ptr == (uintptr_t)FAKE_BASE && stub_a->log[4].op == 'U' &&
		   stub_a->log[4].ptr == (uintptr_t)FAKE_BASE + plan.chunk,
		   "range: the two pieces registered before it are unregistered (%u live, %u calls)",
		   stub_a->nr_live, stub_a->nr_calls);
	tap_result(stub_a->pending == 0 && stub_a->nr_get_last_error >= 1,
		   "range: the runtime's last error is cleared after the failure (pending %d)",
		   stub_a->pending);
	tap_result(stub_b->pending == 0 && stub_b->nr_get_last_error >= 1,
		   "range: so is the last error of a second libcudart mapped in the process");

	/* The first piece fails: nothing to roll back. */
	stub_reset(stub_a);
	stub_a->fail_at = 1;
	ret = bel_cuda_register_range(NULL, FAKE_BASE, len, 5 * MiB, 1, &plan);
	tap_result(ret == -EIO && stub_a->nr_calls == 1 && stub_a->nr_live == 0 && !stub_a->pending,
		   "range: a failing first piece leaves nothing registered and no pending error");

	/* A rollback that fails itself still ends reported and cleared. */
	stub_reset(stub_a);
	stub_a->fail_at = 3;
	stub_a->fail_count = 2;	/* the third register and the first rollback unregister */
	ret = bel_cuda_register_range(NULL, FAKE_BASE, len, 5 * MiB, 1, &plan);
	tap_result(ret == -EIO && !stub_a->pending && stub_a->nr_calls == 5 && stub_a->nr_live == 1,
		   "range: a failing rollback still tries every piece, stays -EIO, clears the error");

	stub_reset(stub_a);
	ret = bel_cuda_register_range(NULL, FAKE_BASE, 1 * TiB, 512 * GiB, 1, &plan);
	tap_result(ret == -E2BIG && stub_a->nr_calls == 0,
		   "range: a 512 GiB block is refused before calling CUDA (%s)", beluga_last_error(NULL));
}

static void test_stub_cap(const char *dir)
{
	int (*reg)(void *, size_t, unsigned int);
	char path[4096];
	void *lib, *sym;

	snprintf(path, sizeof(path), "%s/libcudart-stub-a.so", dir);
	lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	sym = lib ? dlsym(lib, "cudaHostRegister") : NULL;
	memcpy(&reg, &sym, sizeof(reg));
	stub_reset(stub_a);
	tap_result(reg && reg(FAKE_BASE, 512 * GiB, 1) == 2 && stub_a->pending == 2 &&
		   reg(FAKE_BASE, 512 * GiB - 4 * KiB, 1) == 0,
		   "stub: like the driver, the stand-in refuses one call of 512 GiB, not less");
	stub_reset(stub_a);
}

static struct beluga *open_pool(int flags)
{
	struct beluga *b;

	if (beluga_open(dev_path, flags, &b)) {
		printf("# beluga_open: %s\n", beluga_last_error(NULL));
		exit(1);
	}
	return b;
}

/* The public entry point on a fake pool of 3 MiB blocks, with small pieces. */
static void test_handle(void)
{
	struct beluga *b, *ro;
	void *base;
	int ret;

	fake_kernel_reset(3 * MiB, 64);
	fake_kernel_add_region("node0", BELUGA_BACKEND_NODE, 0, 0, 30 * MiB);
	bel_cuda_chunk_target = 8 * MiB;	/* 2 blocks a piece: 5 pieces */
	b = open_pool(O_RDWR);

	stub_reset(stub_a);
	ret = beluga_cuda_register(b, 0);
	base = beluga_map_base(b);
	tap_result(!ret && base && stub_a->nr_calls == 5 &&
		   log_tiles(stub_a, base, 30 * MiB, 3 * MiB, 0x01 | 0x02),
		   "register: the pool of 3 MiB blocks maps and registers in 5 pieces of 2 blocks, "
		   "portable and mapped (ret %d, %u calls: %s)", ret, stub_a->nr_calls, beluga_last_error(b));
	tap_result(!beluga_cuda_register(b, 0) && stub_a->nr_calls == 5,
		   "register: a second call is a no-op");
	beluga_unmap(b);
	tap_result(stub_a->nr_live == 0 && stub_a->nr_calls == 10,
		   "register: unmap unregisters every piece first (%u live)", stub_a->nr_live);

	stub_reset(stub_a);
	stub_a->fail_at = 4;
	ret = beluga_cuda_register(b, 0);
	tap_result(ret == -EIO && stub_a->nr_live == 0 && !stub_a->pending &&
		   strstr(beluga_last_error(b), "cudaHostRegister of pool bytes 18874368..25165824"),
		   "register: piece 4 failing is -EIO, nothing stays registered, error cleared (%s)",
		   beluga_last_error(b));
	stub_a->fail_at = 0;
	ret = beluga_cuda_register(b, 0);
	tap_result(!ret && stub_a->nr_live == 5, "register: a retry after the failure succeeds");
	tap_result(!beluga_cuda_unregister(b) && stub_a->nr_live == 0 && !beluga_cuda_unregister(b),
		   "unregister: every piece, then a no-op");

	ro = open_pool(O_RDONLY);
	stub_reset(stub_a);
	ret = beluga_cuda_register(ro, 0);
	tap_result(!ret &&
		   log_tiles(stub_a, beluga_map_base(ro), 30 * MiB, 3 * MiB, 0x01 | 0x02 | 0x08),
		   "register: a read-only handle adds cudaHostRegisterReadOnly");
	beluga_close(ro);
	tap_result(stub_a->nr_live == 0, "close: unregisters");

	stub_reset(stub_a);
	stub_a->fail_at = 2;
	ret = beluga_cuda_register(b, 0);
	stub_a->fail_at = 0;
	beluga_close(b);
	tap_result(ret == -EIO && stub_a->nr_live == 0 && stub_a->nr_calls == 3,
		   "close after a failed register unregisters nothing twice (%u calls)", stub_a->nr_calls);
	bel_cuda_chunk_target = BEL_CUDA_CHUNK_TARGET;
}

/*
 * A shared pool (the fake's host records): the range is declared over the
 * whole mapping and the pool mapped again in place before the first
 * cudaHostRegister, once per handle; without a watchdog daemon nothing is
 * registered.
 */
static void test_shared(void)
{
	unsigned int maps, ranges_calls;
	struct beluga *b, *wd, *local;
	uint64_t count = 0;
	void *base;
	int ret, efd;

	fake_kernel_reset(2 * MiB, 64);
	fake_kernel_add_region("dax0.0", BELUGA_BACKEND_DAX, -1, 0x390000000ULL, 16 * MiB);
	local = open_pool(O_RDWR);
	stub_reset(stub_a);
	ret = beluga_cuda_register(local, 0);
	tap_result(!ret && fake_kernel_calls(BELUGA_CMD_DEVICE_RANGE) == 0 &&
		   beluga_device_eventfd(local) == -ENOENT && stub_a->nr_live == 1,
		   "shared: a pool that is not shared registers without a device range");
	beluga_close(local);

	fake.nr_hosts = 1;
	memset(&fake.hosts[0], 0, sizeof(fake.hosts[0]));
	fake.hosts[0].state = BELUGA_HOST_ACTIVE;
	fake.hosts[0].flags = BELUGA_HOST_ALIVE | BELUGA_HOST_SELF | BELUGA_HOST_LEASE_AWARE;
	b = open_pool(O_RDWR);
	tap_result(!beluga_map(b) && !fake.last_map_pinnable,
		   "shared: a plain mapping of a shared pool would refuse pins");
	base = beluga_map_base(b);
	stub_reset(stub_a);
	ret = beluga_cuda_register(b, 0);
	tap_result(ret == -ENOLINK && stub_a->nr_calls == 0 &&
		   strstr(beluga_last_error(b), "start beluga-watchdogd"),
		   "shared: without a watchdog daemon, -ENOLINK and no cudaHostRegister (%s)",
		   beluga_last_error(b));

	wd = open_pool(O_RDONLY);
	if (beluga_watchdog_register(wd, 6000))
		tap_diag("watchdog: %s", beluga_last_error(wd));
	maps = fake.pool_maps;
	ret = beluga_cuda_register(b, 0);
	efd = beluga_device_eventfd(b);
	tap_result(!ret && efd >= 0 && beluga_device_fence_ms(b) == 6000 &&
		   fake_kernel_device_ranges() == 1,
		   "shared: with the daemon, a range is declared (W %u ms, eventfd %d: %s)",
		   beluga_device_fence_ms(b), efd, ret ? beluga_last_error(b) : "ok");
	tap_result(fake.pool_maps == maps + 1 && fake.last_map == base && beluga_map_base(b) == base &&
		   fake.last_map_length == 16 * MiB && fake.last_map_pinnable,
		   "shared: the pool is mapped again at the same address after the declaration");
	tap_result(stub_a->nr_live == 1 && stub_a->log[0].ptr == (uintptr_t)base,
		   "shared: and that mapping is what CUDA registers");
	tap_result(efd >= 0 && (fcntl(efd, F_GETFL) & O_NONBLOCK) &&
		   (fcntl(efd, F_GETFD) & FD_CLOEXEC),
		   "shared: the eventfd is non-blocking and close-on-exec");
	tap_result(fake_kernel_fence() == 1 && efd >= 0 &&
		   read(efd, &count, sizeof(count)) == sizeof(count) && count == 1,
		   "shared: a fence makes the eventfd readable");
	fake_kernel_unfence();
	beluga_cuda_unregister(b);
	ranges_calls = fake_kernel_calls(BELUGA_CMD_DEVICE_RANGE);
	maps = fake.pool_maps;
	ret = beluga_cuda_register(b, 0);
	tap_result(!ret && fake_kernel_calls(BELUGA_CMD_DEVICE_RANGE) == ranges_calls &&
		   fake.pool_maps == maps && stub_a->nr_live == 1,
		   "shared: registering again reuses the range and the mapping");
	beluga_unmap(b);
	maps = fake.pool_maps;
	ret = beluga_cuda_register(b, 0);
	tap_result(!ret && fake.pool_maps == maps + 1 && fake.last_map_pinnable &&
		   fake_kernel_calls(BELUGA_CMD_DEVICE_RANGE) == ranges_calls,
		   "shared: a new mapping after the range is pinnable as made, not made twice");
	beluga_close(b);
	tap_result(stub_a->nr_live == 0 && fake_kernel_device_ranges() == 0,
		   "shared: close unregisters and ends the range");
	beluga_close(wd);
}

/* Without BELUGA_CUDART, a libcudart already mapped is preferred to loading one. */
static void test_mapped(void)
{
	struct bel_cuda_plan plan;
	int ret;

	stub_reset(stub_b);
	ret = bel_cuda_register_range(NULL, FAKE_BASE, 8 * MiB, 2 * MiB, 1, &plan);
	tap_result(!ret && stub_b->nr_calls == 1 && stub_b->nr_live == 1,
		   "mapped: the runtime already in the process is used (ret %d: %s)", ret,
		   ret ? beluga_last_error(NULL) : "ok");
	tap_result(!bel_cuda_unregister_range(NULL, FAKE_BASE, 8 * MiB, &plan) && !stub_b->nr_live,
		   "mapped: and unregisters there");
}

int main(int argc, char **argv)
{
	int mapped = argc > 2 && !strcmp(argv[1], "--mapped");
	const char *dir = argv[argc - 1];
	char path[4096];
	int fd;

	if (argc < 2) {
		fprintf(stderr, "usage: test_cuda [--mapped] DIR\n");
		return 2;
	}
	if (mapped) {
		unsetenv("BELUGA_CUDART");
		stub_b = load_stub(dir, "libcudart-stub-b.so");
		test_mapped();
		return tap_done();
	}
	snprintf(path, sizeof(path), "%s/libcudart-stub-a.so", dir);
	setenv("BELUGA_CUDART", path, 1);
	stub_a = load_stub(dir, "libcudart-stub-a.so");
	stub_b = load_stub(dir, "libcudart-stub-b.so");

	snprintf(dev_path, sizeof(dev_path), "/tmp/beluga-test-cuda.XXXXXX");
	fd = mkstemp(dev_path);
	if (fd < 0) {
		perror("mkstemp");
		return 1;
	}
	close(fd);

	test_plan();
	test_stub_cap(dir);
	test_range();
	test_handle();
	test_shared();
	unlink(dev_path);
	return tap_done();
}
