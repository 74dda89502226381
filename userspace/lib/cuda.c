// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libbeluga: optional CUDA host registration of the pool mapping.
 *
 * cudaHostRegister() pins the mapping (FOLL_LONGTERM, which the module
 * supports; on a shared pool only after a device range, device.c) so that copies between GPU memory and pool blocks run as DMA
 * instead of through a staging buffer, and so that GPU kernels can read and
 * write the blocks directly. The CUDA runtime is loaded at run time so that
 * libbeluga has no build-time CUDA dependency; the static busybox tools are
 * built with BELUGA_NO_DLOPEN and always answer -ENOSYS.
 *
 * Two driver facts shape the code (see lib/cuda.h): one call of 512 GiB or
 * more fails, and a block that spans two registrations breaks copies of it
 * (cudaMemcpyBatchAsync answers "invalid argument"), so the mapping is
 * registered in pieces whose boundaries fall on block boundaries.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "cuda.h"

/* cudaHostRegister flags, from the CUDA runtime API (stable since 4.0). */
#define BEL_CUDA_HOST_REGISTER_PORTABLE	0x01
#define BEL_CUDA_HOST_REGISTER_MAPPED	0x02
#define BEL_CUDA_HOST_REGISTER_READONLY	0x08

size_t bel_cuda_chunk_target = BEL_CUDA_CHUNK_TARGET;

int bel_cuda_plan(size_t length, size_t unit, size_t target, struct bel_cuda_plan *plan)
{
	size_t chunk;

	if (!length || !unit)
		return -EINVAL;
	if (unit >= BEL_CUDA_CALL_LIMIT)
		return -E2BIG;
	if (!target || target >= BEL_CUDA_CALL_LIMIT)
		target = BEL_CUDA_CALL_LIMIT - 1;
	chunk = target / unit * unit;
	if (!chunk)
		chunk = unit;
	if (chunk >= length) {
		plan->chunk = length;
		plan->nr_chunks = 1;
	} else {
		plan->chunk = chunk;
		plan->nr_chunks = length / chunk + (length % chunk != 0);
	}
	return 0;
}

#ifdef BELUGA_NO_DLOPEN

static int no_cuda(struct beluga *b)
{
	return bel_fail(b, -ENOSYS,
			"CUDA registration is not available in this static build of libbeluga: "
			"link against the shared libbeluga");
}

int bel_cuda_register_range(struct beluga *b, void *base, size_t length, size_t block_size,
			    unsigned int cuda_flags, struct bel_cuda_plan *plan)
{
	(void)base;
	(void)length;
	(void)block_size;
	(void)cuda_flags;
	(void)plan;
	return no_cuda(b);
}

int bel_cuda_unregister_range(struct beluga *b, void *base, size_t length,
			      const struct bel_cuda_plan *plan)
{
	(void)b;
	(void)base;
	(void)length;
	(void)plan;
	return 0;
}

BEL_EXPORT int beluga_cuda_register(struct beluga *b, unsigned int cuda_flags)
{
	(void)cuda_flags;
	return no_cuda(b);
}

BEL_EXPORT int beluga_cuda_unregister(struct beluga *b)
{
	(void)b;
	return 0;
}

#else /* !BELUGA_NO_DLOPEN */

#include <dlfcn.h>
#include <pthread.h>

typedef int (*cuda_host_register_fn)(void *ptr, size_t size, unsigned int flags);
typedef int (*cuda_host_unregister_fn)(void *ptr);
typedef int (*cuda_get_last_error_fn)(void);
typedef const char *(*cuda_get_error_string_fn)(int err);

/* Bytes of piece @i of @plan over @length. */
static size_t plan_piece_len(const struct bel_cuda_plan *plan, size_t length, size_t i)
{
	size_t start = i * plan->chunk;

	return length - start < plan->chunk ? length - start : plan->chunk;
}

static struct {
	void *lib;
	cuda_host_register_fn host_register;
	cuda_host_unregister_fn host_unregister;
	cuda_get_last_error_fn get_last_error;
	cuda_get_error_string_fn get_error_string;	/* optional */
	char why[384];		/* why no runtime was found */
} cuda;
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;

/*
 * ISO C forbids converting void * to a function pointer, POSIX requires it
 * to work for dlsym(); go through memcpy to say so.
 */
static void load_sym(void *lib, const char *name, void *fnp)
{
	void *sym = dlsym(lib, name);

	memcpy(fnp, &sym, sizeof(sym));
}

/*
 * The paths of the CUDA runtimes mapped in this process (libcudart*.so*,
 * including copies that packages bundle, such as PyTorch's
 * libcudart-<hash>.so.12), from /proc/self/maps. Calls @fn for each
 * distinct path until it returns non-zero.
 */
static void for_each_mapped_runtime(int (*fn)(const char *path, void *arg), void *arg)
{
	char line[4096], seen[8][512];
	unsigned int nr_seen = 0, i;
	FILE *f = fopen("/proc/self/maps", "re");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *path = strchr(line, '/'), *name, *nl;

		if (!path)
			continue;
		nl = strchr(path, '\n');
		if (nl)
			*nl = '\0';
		name = strrchr(path, '/') + 1;
		if (strncmp(name, "libcudart", 9) || !strstr(name, ".so") ||
		    strlen(path) >= sizeof(seen[0]))
			continue;
		for (i = 0; i < nr_seen && strcmp(seen[i], path); i++)
			;
		if (i < nr_seen)
			continue;
		if (nr_seen < sizeof(seen) / sizeof(seen[0]))
			snprintf(seen[nr_seen++], sizeof(seen[0]), "%s", path);
		if (fn(path, arg))
			break;
	}
	fclose(f);
}

static int take_mapped_runtime(const char *path, void *arg)
{
	void **lib = arg;

	*lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	return *lib != NULL;
}

static void cuda_load(void)
{
	/* The unversioned name exists only with the CUDA dev package. */
	static const char *const names[] = {
		"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
	};
	const char *env = getenv("BELUGA_CUDART");
	void *lib = NULL;
	size_t i;

	if (env && *env) {
		lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
		if (!lib) {
			snprintf(cuda.why, sizeof(cuda.why),
				 "BELUGA_CUDART=%s cannot be loaded (%s): point it at a libcudart.so "
				 "or unset it", env, dlerror());
			return;
		}
	} else {
		/*
		 * A runtime the process already uses (the engine's) comes
		 * first: no second copy is loaded, and a failure lands in the
		 * error state the engine reads (cleared below). RTLD_NOLOAD
		 * with the path from /proc/self/maps finds a library loaded
		 * under another name too (glibc matches the file).
		 */
		for_each_mapped_runtime(take_mapped_runtime, &lib);
		for (i = 0; i < sizeof(names) / sizeof(names[0]) && !lib; i++)
			lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (!lib) {
			snprintf(cuda.why, sizeof(cuda.why),
				 "no CUDA runtime found (none mapped in the process, and dlopen of "
				 "libcudart.so, .so.13, .so.12, .so.11.0 failed): install the CUDA "
				 "runtime, add its directory to LD_LIBRARY_PATH, or set BELUGA_CUDART");
			return;
		}
	}
	load_sym(lib, "cudaHostRegister", &cuda.host_register);
	load_sym(lib, "cudaHostUnregister", &cuda.host_unregister);
	load_sym(lib, "cudaGetLastError", &cuda.get_last_error);
	load_sym(lib, "cudaGetErrorString", &cuda.get_error_string);
	if (!cuda.host_register || !cuda.host_unregister || !cuda.get_last_error) {
		cuda.host_register = NULL;
		snprintf(cuda.why, sizeof(cuda.why),
			 "no CUDA runtime found: the library loaded as %s lacks cudaHostRegister, "
			 "cudaHostUnregister or cudaGetLastError: point BELUGA_CUDART at a libcudart.so",
			 env && *env ? env : "libcudart");
		return;
	}
	cuda.lib = lib;
	/* Never dlclose() the CUDA runtime: it does not survive unloading. */
}

static const char *cuda_error_text(int err)
{
	const char *s = cuda.get_error_string ? cuda.get_error_string(err) : NULL;

	return s ? s : "unknown CUDA error";
}

static int clear_runtime_error(const char *path, void *arg)
{
	cuda_get_last_error_fn get_last_error;
	void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);

	(void)arg;
	if (!lib)
		return 0;
	if (lib != cuda.lib) {
		load_sym(lib, "cudaGetLastError", &get_last_error);
		if (get_last_error)
			get_last_error();
	}
	/* Only the reference RTLD_NOLOAD took: the runtime stays loaded. */
	dlclose(lib);
	return 0;
}

/*
 * A failed runtime call leaves its error in the calling thread's last-error
 * state of that runtime copy. Read it back (which resets it) in the runtime
 * used here and in every other libcudart mapped in the process, since an
 * engine may check a copy of its own.
 */
static void clear_last_error(void)
{
	cuda.get_last_error();
	for_each_mapped_runtime(clear_runtime_error, NULL);
}

static int cuda_ready(struct beluga *b)
{
	pthread_once(&cuda_once, cuda_load);
	if (!cuda.host_register)
		return bel_fail(b, -ENOSYS, "%s", cuda.why);
	return 0;
}

/*
 * Piece boundaries fall on block boundaries and, for blocks that are not a
 * multiple of the page size (4 KiB blocks on a 64 KiB page kernel), on page
 * boundaries too: the least common multiple of both.
 */
static size_t piece_unit(size_t block_size)
{
	long sc = sysconf(_SC_PAGESIZE);
	size_t page = sc > 0 ? (size_t)sc : 4096, a = block_size, c = page, t;

	while (c) {
		t = a % c;
		a = c;
		c = t;
	}
	if (block_size / a > SIZE_MAX / page)
		return block_size;
	return block_size / a * page;
}

int bel_cuda_register_range(struct beluga *b, void *base, size_t length, size_t block_size,
			    unsigned int cuda_flags, struct bel_cuda_plan *plan)
{
	size_t i, undo;
	int ret, err;

	ret = cuda_ready(b);
	if (ret)
		return ret;
	if (!block_size)
		return bel_fail(b, -EINVAL, "CUDA registration: block size 0: attach a region first");
	ret = bel_cuda_plan(length, piece_unit(block_size), bel_cuda_chunk_target, plan);
	if (ret == -E2BIG)
		return bel_fail(b, ret,
				"CUDA registration: a block of %zu bytes is larger than one "
				"cudaHostRegister call can take (%llu): use smaller blocks",
				block_size, (unsigned long long)BEL_CUDA_CALL_LIMIT);
	if (ret)
		return bel_fail(b, ret, "CUDA registration: empty range: " BEL_FIX_ATTACH);

	for (i = 0; i < plan->nr_chunks; i++) {
		size_t start = i * plan->chunk, len = plan_piece_len(plan, length, i);

		err = cuda.host_register((char *)base + start, len, cuda_flags);
		if (!err)
			continue;
		clear_last_error();
		for (undo = 0; undo < i; undo++)
			if (cuda.host_unregister((char *)base + undo * plan->chunk))
				clear_last_error();
		return bel_fail(b, -EIO,
				"cudaHostRegister of pool bytes %zu..%zu (piece %zu of %zu) failed: "
				"%s (CUDA error %d)%s: check that the module supports long-term "
				"pinning and the GPU driver is loaded", start, start + len, i + 1,
				plan->nr_chunks, cuda_error_text(err), err,
				i ? "; the pieces before it were unregistered" : "");
	}
	return 0;
}

int bel_cuda_unregister_range(struct beluga *b, void *base, size_t length,
			      const struct bel_cuda_plan *plan)
{
	size_t i;
	int err, first_err = 0;

	(void)length;
	if (cuda_ready(b))
		return 0;
	for (i = 0; i < plan->nr_chunks; i++) {
		err = cuda.host_unregister((char *)base + i * plan->chunk);
		if (err && !first_err)
			first_err = err;
	}
	if (!first_err)
		return 0;
	clear_last_error();
	return bel_fail(b, -EIO, "cudaHostUnregister failed: %s (CUDA error %d): check the "
			"GPU driver (nvidia-smi); the registration ends with the process",
			cuda_error_text(first_err), first_err);
}

BEL_EXPORT int beluga_cuda_register(struct beluga *b, unsigned int cuda_flags)
{
	struct beluga_info info;
	int ret;

	ret = cuda_ready(b);
	if (ret)
		return ret;
	if (b->cuda_registered)
		return 0;
	if (!b->map_base) {
		ret = beluga_map(b);
		if (ret)
			return ret;
	}
	ret = beluga_info(b, &info);
	if (ret)
		return ret;
	/* A shared pool: declare the device range, map again (device.c). */
	ret = bel_device_prepare(b);
	if (ret)
		return ret;
	/* Mapped: kernels (libbeluga-kvcopy) read and write the blocks in place. */
	if (!cuda_flags)
		cuda_flags = BEL_CUDA_HOST_REGISTER_PORTABLE | BEL_CUDA_HOST_REGISTER_MAPPED;
	if (b->flags == O_RDONLY)
		cuda_flags |= BEL_CUDA_HOST_REGISTER_READONLY;

	ret = bel_cuda_register_range(b, b->map_base, b->map_length, (size_t)info.block_size,
				      cuda_flags, &b->cuda_plan);
	if (ret)
		return ret;
	b->cuda_registered = 1;
	return 0;
}

BEL_EXPORT int beluga_cuda_unregister(struct beluga *b)
{
	if (!b->cuda_registered)
		return 0;
	b->cuda_registered = 0;
	return bel_cuda_unregister_range(b, b->map_base, b->map_length, &b->cuda_plan);
}

#endif /* BELUGA_NO_DLOPEN */
