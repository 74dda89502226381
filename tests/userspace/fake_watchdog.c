// SPDX-License-Identifier: GPL-2.0
/*
 * A stand-in hardware watchdog for the host tests of beluga-watchdogd,
 * linked into the check build's beluga-watchdogd-fake only: with
 * BELUGA_FAKE_WATCHDOG set, the daemon's watchdog ioctls on a regular
 * file (--watchdog FILE) answer as a watchdog driver would, and each one
 * that acts is written to the file as a line, next to what the daemon
 * itself writes there (the magic close character 'V'):
 *   T<seconds>   WDIOC_SETTIMEOUT
 *   K            WDIOC_KEEPALIVE (a pet)
 * BELUGA_FAKE_WATCHDOG=magic      a driver with magic close (softdog, iTCO_wdt)
 * BELUGA_FAKE_WATCHDOG=nomagic    one that stops when closed
 * BELUGA_FAKE_WATCHDOG_ROUND=N    timeouts are rounded up to a multiple of N s
 * BELUGA_FAKE_SYSROOT=DIR         where the daemon looks for /proc/cpuinfo and
 *                                 the rest that tells a VM (any mode)
 * The daemon cannot tell: the file is the whole device. Real watchdogs
 * (softdog, i6300esb) are the guest tests' (tests/multihost).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <linux/watchdog.h>

/* userspace/watchdogd/beluga-watchdogd.c */
extern int (*wd_ioctl)(int fd, unsigned long request, void *arg);
extern const char *sysroot;

static int timeout_s = 60;
static int round_s = 1;
static int magic = 1;

static void note(int fd, const char *line)
{
	(void)!write(fd, line, strlen(line));
}

static int fake_wd_ioctl(int fd, unsigned long request, void *arg)
{
	struct stat st;
	char line[32];

	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		errno = ENOTTY;
		return -1;
	}
	switch (request) {
	case WDIOC_GETSUPPORT: {
		struct watchdog_info *info = arg;

		memset(info, 0, sizeof(*info));
		info->options = WDIOF_SETTIMEOUT | WDIOF_KEEPALIVEPING |
				(magic ? WDIOF_MAGICCLOSE : 0);
		snprintf((char *)info->identity, sizeof(info->identity), "fake watchdog");
		return 0;
	}
	case WDIOC_SETTIMEOUT: {
		int *t = arg;

		if (*t < 1 || *t > 65535) {
			errno = EINVAL;
			return -1;
		}
		timeout_s = (*t + round_s - 1) / round_s * round_s;
		*t = timeout_s;
		snprintf(line, sizeof(line), "T%d\n", timeout_s);
		note(fd, line);
		return 0;
	}
	case WDIOC_GETTIMEOUT:
		*(int *)arg = timeout_s;
		return 0;
	case WDIOC_KEEPALIVE:
		note(fd, "K\n");
		return 0;
	}
	errno = ENOTTY;
	return -1;
}

__attribute__((constructor)) static void fake_watchdog_from_env(void)
{
	const char *mode = getenv("BELUGA_FAKE_WATCHDOG");
	const char *r = getenv("BELUGA_FAKE_WATCHDOG_ROUND");
	const char *root = getenv("BELUGA_FAKE_SYSROOT");

	if (root)
		sysroot = root;
	if (!mode)
		return;
	magic = strcmp(mode, "nomagic") != 0;
	if (r && atoi(r) > 0)
		round_s = atoi(r);
	wd_ioctl = fake_wd_ioctl;
}
