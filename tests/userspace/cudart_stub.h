/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A stand-in CUDA runtime for the host tests of libbeluga's registration
 * (tests/userspace/cudart_stub.c, built as libcudart-stub-{a,b}.so). It exports the
 * four runtime calls libbeluga uses with the behaviour of a real runtime
 * that matters there, and records every call:
 *
 *   cudaHostRegister    refuses a NULL pointer or size 0 (1, invalid value),
 *                       a range overlapping a registered one (712, already
 *                       registered) and, like r580+ drivers, one call of
 *                       512 GiB or more (2, out of memory). It never touches
 *                       the memory, so tests may register fake addresses.
 *   cudaHostUnregister  refuses a pointer that does not start a registration
 *                       (713, not registered)
 *   cudaGetLastError    returns and resets the pending error
 *   cudaGetErrorString  a fixed text per code
 *
 * Each failure leaves its code pending (the runtime's last-error state)
 * until cudaGetLastError. fail_at makes the Nth register/unregister call
 * (and fail_count - 1 after it) fail with fail_err. Tests reach the state with dlsym("cudart_stub").
 */
#ifndef BELUGA_CUDART_STUB_H
#define BELUGA_CUDART_STUB_H

#include <stddef.h>
#include <stdint.h>

#define STUB_MAX_LOG	1024
#define STUB_MAX_LIVE	1024

struct stub_call {
	char op;		/* 'R' register, 'U' unregister */
	uintptr_t ptr;
	size_t size;		/* register only */
	unsigned int flags;	/* register only */
	int ret;
};

struct cudart_stub {
	unsigned int nr_calls;	/* register + unregister calls */
	struct stub_call log[STUB_MAX_LOG];
	unsigned int fail_at;	/* 1-based call number to fail; 0: none */
	unsigned int fail_count; /* calls failing from fail_at on; 0 means 1 */
	int fail_err;
	int pending;		/* last error not yet read */
	unsigned int nr_get_last_error;
	unsigned int nr_live;
	struct {
		uintptr_t ptr;
		size_t size;
	} live[STUB_MAX_LIVE];
};

typedef struct cudart_stub *(*cudart_stub_fn)(void);

#endif /* BELUGA_CUDART_STUB_H */
