// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libbeluga: optional CUDA host registration of the pool mapping.
 *
 * cudaHostRegister() pins the mapping (FOLL_LONGTERM, which the module
 * supports) so that cudaMemcpyAsync between GPU memory and pool blocks runs
 * as DMA instead of through a staging buffer. The CUDA runtime is loaded
 * at run time so that libbeluga has no build-time CUDA dependency; the
 * static busybox tools are built with BELUGA_NO_DLOPEN and always answer
 * -ENOSYS.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

/* cudaHostRegister flags, from the CUDA runtime API (stable since 4.0). */
#define BEL_CUDA_HOST_REGISTER_PORTABLE	0x01
#define BEL_CUDA_HOST_REGISTER_READONLY	0x08

/*
 * Newer drivers refuse a single registration of 512 GiB or more, so a
 * multi-terabyte pool is registered piecewise. 256 GiB keeps every piece
 * well below that and is a multiple of 2 MiB.
 */
#define BEL_CUDA_CHUNK	(256ULL << 30)

#ifdef BELUGA_NO_DLOPEN

BEL_EXPORT int beluga_cuda_register(struct beluga *b, unsigned int cuda_flags)
{
	(void)cuda_flags;
	return bel_fail(b, -ENOSYS,
			"CUDA registration is not available in this static build of libbeluga: "
			"link against the shared libbeluga");
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
typedef const char *(*cuda_get_error_string_fn)(int err);

static struct {
	cuda_host_register_fn host_register;
	cuda_host_unregister_fn host_unregister;
	cuda_get_error_string_fn get_error_string;	/* optional */
} cuda;
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;

static void cuda_load(void)
{
	/* The unversioned name exists only with the CUDA dev package. */
	static const char *const names[] = {
		"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
	};
	void *lib = NULL;
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]) && !lib; i++)
		lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return;
	/*
	 * ISO C forbids converting void * to a function pointer, POSIX
	 * requires it to work for dlsym(); go through memcpy to say so.
	 */
	{
		void *sym;

		sym = dlsym(lib, "cudaHostRegister");
		memcpy(&cuda.host_register, &sym, sizeof(sym));
		sym = dlsym(lib, "cudaHostUnregister");
		memcpy(&cuda.host_unregister, &sym, sizeof(sym));
		sym = dlsym(lib, "cudaGetErrorString");
		memcpy(&cuda.get_error_string, &sym, sizeof(sym));
	}
	if (!cuda.host_register || !cuda.host_unregister) {
		cuda.host_register = NULL;
		cuda.host_unregister = NULL;
	}
	/* Never dlclose() the CUDA runtime: it does not survive unloading. */
}

static const char *cuda_error_text(int err)
{
	const char *s = cuda.get_error_string ? cuda.get_error_string(err) : NULL;

	return s ? s : "unknown CUDA error";
}

static size_t cuda_chunk_len(size_t length, size_t done)
{
	return length - done < BEL_CUDA_CHUNK ? length - done : (size_t)BEL_CUDA_CHUNK;
}

BEL_EXPORT int beluga_cuda_register(struct beluga *b, unsigned int cuda_flags)
{
	size_t done = 0, undo;
	int ret, err;

	pthread_once(&cuda_once, cuda_load);
	if (!cuda.host_register)
		return bel_fail(b, -ENOSYS,
				"no CUDA runtime found (dlopen of libcudart.so, .so.13, .so.12, .so.11.0 "
				"failed): install the CUDA runtime or add its directory to "
				"LD_LIBRARY_PATH");
	if (b->cuda_registered)
		return 0;
	if (!b->map_base) {
		ret = beluga_map(b);
		if (ret)
			return ret;
	}
	if (!cuda_flags)
		cuda_flags = BEL_CUDA_HOST_REGISTER_PORTABLE;
	if (b->flags == O_RDONLY)
		cuda_flags |= BEL_CUDA_HOST_REGISTER_READONLY;

	while (done < b->map_length) {
		size_t len = cuda_chunk_len(b->map_length, done);

		err = cuda.host_register((char *)b->map_base + done, len, cuda_flags);
		if (err) {
			for (undo = 0; undo < done; undo += cuda_chunk_len(b->map_length, undo))
				cuda.host_unregister((char *)b->map_base + undo);
			return bel_fail(b, -EIO,
					"cudaHostRegister of pool bytes %zu..%zu failed: %s (CUDA error %d): "
					"check that the module supports long-term pinning and the "
					"GPU driver is loaded", done, done + len, cuda_error_text(err), err);
		}
		done += len;
	}
	b->cuda_registered = 1;
	return 0;
}

BEL_EXPORT int beluga_cuda_unregister(struct beluga *b)
{
	size_t done;
	int err, first_err = 0;

	if (!b->cuda_registered)
		return 0;
	for (done = 0; done < b->map_length; done += cuda_chunk_len(b->map_length, done)) {
		err = cuda.host_unregister((char *)b->map_base + done);
		if (err && !first_err)
			first_err = err;
	}
	b->cuda_registered = 0;
	if (first_err)
		return bel_fail(b, -EIO, "cudaHostUnregister failed: %s (CUDA error %d)",
				cuda_error_text(first_err), first_err);
	return 0;
}

#endif /* BELUGA_NO_DLOPEN */
