// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libbeluga.so.1's compatibility symbols: functions as programs built
 * against an older libbeluga.h call them, where a struct of the uapi grew
 * since. Linked into the shared library only (a static link has no old
 * callers); the version script (libbeluga.map) names the versions.
 */
#include "internal.h"

/*
 * beluga_hosts@LIBBELUGA_1: libbeluga 1.1's, whose struct beluga_host
 * was BELUGA_HOST_SIZE_V1 (72) bytes. Its callers' arrays take records of
 * that size.
 */
__asm__(".symver bel_hosts_1_1, beluga_hosts@LIBBELUGA_1");
BEL_EXPORT int bel_hosts_1_1(struct beluga *b, void *hosts, unsigned int max);
BEL_EXPORT int bel_hosts_1_1(struct beluga *b, void *hosts, unsigned int max)
{
	return bel_hosts(b, hosts, max, BELUGA_HOST_SIZE_V1);
}
