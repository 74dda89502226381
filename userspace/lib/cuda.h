/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libbeluga internals of the CUDA host registration (lib/cuda.c), shared
 * with the host tests and the GPU device check. Nothing here is exported
 * from libbeluga.so: the tests and the device check link libbeluga.a.
 */
#ifndef BELUGA_LIB_CUDA_H
#define BELUGA_LIB_CUDA_H

#include <stddef.h>

struct beluga;

/*
 * One cudaHostRegister() call of 512 GiB or more fails on current NVIDIA
 * drivers (r580+ size a per-call page table with kvzalloc(), which stops
 * at INT_MAX bytes: 16 bytes per 4 KiB page). The cap is per call.
 */
#define BEL_CUDA_CALL_LIMIT	(512ULL << 30)

/* The piece size aimed at: half the cap, as SGLang's and vLLM's default. */
#define BEL_CUDA_CHUNK_TARGET	(256ULL << 30)

/*
 * How a range is cut: pieces of @chunk bytes from the start, the last one
 * shorter (length - (nr_chunks - 1) * chunk). @chunk is a multiple of the
 * unit asked for and below BEL_CUDA_CALL_LIMIT, so no block of that size
 * (counted from the range's start) spans two registrations.
 */
struct bel_cuda_plan {
	size_t chunk;
	size_t nr_chunks;
};

/*
 * bel_cuda_plan - cut @length bytes into registration pieces
 * @unit: every piece boundary is a multiple of it (the pool block size,
 *	or a multiple of it that is also a multiple of the page size)
 * @target: the largest piece wanted; capped below BEL_CUDA_CALL_LIMIT,
 *	rounded down to a multiple of @unit, and never below one @unit
 *
 * Pure arithmetic: no allocation, no CUDA. Returns 0, -EINVAL for a zero
 * @length or @unit, or -E2BIG when one @unit is already too large for
 * one call.
 */
int bel_cuda_plan(size_t length, size_t unit, size_t target, struct bel_cuda_plan *plan);

/*
 * The piece size bel_cuda_register_range() aims at; BEL_CUDA_CHUNK_TARGET
 * unless a test lowers it to exercise many pieces on a small mapping.
 */
extern size_t bel_cuda_chunk_target;

/*
 * bel_cuda_register_range - cudaHostRegister() any address range in the
 * pieces of bel_cuda_plan(), all or nothing
 * @b: handle for the error message, or NULL for the per-thread message
 * @base, @length: the range; @base is the block offset 0 of the layout
 * @block_size: the pool's block size
 * @cuda_flags: cudaHostRegister flags, passed as given
 * @plan: receives the cut, needed by bel_cuda_unregister_range()
 *
 * Checks every return code. When a piece fails, the pieces registered
 * before it are unregistered again and CUDA's last-error state is cleared
 * in every CUDA runtime mapped in the process, so that the failure is not
 * reported later by an unrelated call (PyTorch checks cudaGetLastError()
 * after each kernel launch). Returns 0, -ENOSYS (no CUDA runtime),
 * -EINVAL/-E2BIG (see bel_cuda_plan()) or -EIO (CUDA refused a piece).
 */
int bel_cuda_register_range(struct beluga *b, void *base, size_t length, size_t block_size,
			    unsigned int cuda_flags, struct bel_cuda_plan *plan);

/*
 * bel_cuda_unregister_range - undo bel_cuda_register_range() with the
 * same @plan; every piece is tried. Returns 0 or -EIO with the first
 * failure (last-error state cleared as above).
 */
int bel_cuda_unregister_range(struct beluga *b, void *base, size_t length,
			      const struct bel_cuda_plan *plan);

#endif /* BELUGA_LIB_CUDA_H */
