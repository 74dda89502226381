// SPDX-License-Identifier: GPL-2.0
/* The stand-in CUDA runtime; see cudart_stub.h. */
#include <string.h>

#include "cudart_stub.h"

#define STUB_EXPORT __attribute__((visibility("default")))

#define ERR_INVALID_VALUE		1
#define ERR_MEMORY_ALLOCATION		2
#define ERR_ALREADY_REGISTERED		712
#define ERR_NOT_REGISTERED		713

static struct cudart_stub state;

STUB_EXPORT struct cudart_stub *cudart_stub(void)
{
	return &state;
}

static int record(char op, uintptr_t ptr, size_t size, unsigned int flags, int ret)
{
	state.nr_calls++;
	if (state.fail_at && state.nr_calls >= state.fail_at &&
	    state.nr_calls < state.fail_at + (state.fail_count ? state.fail_count : 1) && !ret)
		ret = state.fail_err ? state.fail_err : ERR_MEMORY_ALLOCATION;
	if (state.nr_calls <= STUB_MAX_LOG)
		state.log[state.nr_calls - 1] = (struct stub_call){ op, ptr, size, flags, ret };
	if (ret)
		state.pending = ret;
	return ret;
}

STUB_EXPORT int cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
	uintptr_t p = (uintptr_t)ptr;
	unsigned int i;
	int ret = 0;

	if (!ptr || !size)
		ret = ERR_INVALID_VALUE;
	else if (size >= (512ULL << 30))
		ret = ERR_MEMORY_ALLOCATION;
	for (i = 0; !ret && i < state.nr_live; i++)
		if (p < state.live[i].ptr + state.live[i].size && state.live[i].ptr < p + size)
			ret = ERR_ALREADY_REGISTERED;
	if (!ret && state.nr_live == STUB_MAX_LIVE)
		ret = ERR_MEMORY_ALLOCATION;
	ret = record('R', p, size, flags, ret);
	if (!ret) {
		state.live[state.nr_live].ptr = p;
		state.live[state.nr_live].size = size;
		state.nr_live++;
	}
	return ret;
}

STUB_EXPORT int cudaHostUnregister(void *ptr)
{
	uintptr_t p = (uintptr_t)ptr;
	unsigned int i;
	int ret;

	for (i = 0; i < state.nr_live && state.live[i].ptr != p; i++)
		;
	ret = record('U', p, 0, 0, i < state.nr_live ? 0 : ERR_NOT_REGISTERED);
	if (!ret)
		state.live[i] = state.live[--state.nr_live];
	return ret;
}

STUB_EXPORT int cudaGetLastError(void)
{
	int err = state.pending;

	state.nr_get_last_error++;
	state.pending = 0;
	return err;
}

STUB_EXPORT const char *cudaGetErrorString(int err)
{
	switch (err) {
	case 0:
		return "no error";
	case ERR_INVALID_VALUE:
		return "invalid argument";
	case ERR_MEMORY_ALLOCATION:
		return "out of memory";
	case ERR_ALREADY_REGISTERED:
		return "part or all of the requested memory range is already mapped";
	case ERR_NOT_REGISTERED:
		return "pointer does not correspond to a registered memory region";
	default:
		return "stub error";
	}
}
