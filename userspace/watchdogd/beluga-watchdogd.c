// SPDX-License-Identifier: GPL-2.0
/*
 * beluga-watchdogd: the hardware watchdog of a host whose devices pin a
 * shared Beluga pool (beluga-watchdogd(8), <linux/beluga.h>
 * BELUGA_IOC_WATCHDOG).
 *
 * A fence cannot take back what a device pinned (cudaHostRegister,
 * ibv_reg_mr); a reset of the host can, since PCIe devices are reset with
 * it. This daemon owns /dev/watchdog with a timeout of W seconds and
 * registers W with every pool: the pools then allow device ranges, and the
 * other hosts wait lease + W + lease/2 of this host's silence before they
 * reuse what it held. Every W/4 (at most a second) it asks each pool
 * whether to pet the watchdog, and pets it only when all answer FEED. A
 * pool answers HOLD when the host fenced itself while devices may still
 * reach it: then the watchdog fires within W, unless the devices let go
 * in time and the pool answers FEED again.
 *
 * It disarms the watchdog (magic close) on SIGTERM or SIGINT only when no
 * pool has a device range and every pool answered FEED; otherwise it
 * exits leaving it armed, and the host resets within W unless a new
 * daemon takes over. If it dies, the same happens: that is the point.
 *
 * In a virtual machine, the watchdog is emulated and stops while the VM is
 * paused, yet passed-through devices keep writing: the daemon then starts
 * only with --pause-fence, the operator's word that beluga-vm-fence(8) on
 * the hypervisor stops the VM once paused that long.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <linux/watchdog.h>

#include "libbeluga.h"

#define PROG			"beluga-watchdogd"
#define DEFAULT_WATCHDOG	"/dev/watchdog"
#define DEFAULT_TIMEOUT_S	30
#define MAX_POOLS		64
/* The daemon queries every W/4, and at least this often. */
#define MAX_INTERVAL_MS		1000

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/*
 * The watchdog's ioctls go through this pointer so that the host tests
 * can put a stand-in behind a regular file (tests/userspace/fake_watchdog.c,
 * linked into the check build's beluga-watchdogd-fake only).
 */
static int real_wd_ioctl(int fd, unsigned long request, void *arg)
{
	return ioctl(fd, request, arg);
}

int (*wd_ioctl)(int fd, unsigned long request, void *arg) = real_wd_ioctl;

/* Prefix of the files that tell a VM; the fake build points it elsewhere. */
const char *sysroot = "";

struct pool {
	const char *path;
	struct beluga *b;
	int answered;		/* an answer was logged */
	uint32_t answer;	/* last: FEED, HOLD, or 0 when the query failed */
	uint32_t ranges;	/* last device_ranges */
};

static struct pool pools[MAX_POOLS];
static unsigned int nr_pools;
static int use_syslog;
static volatile sig_atomic_t stop_signal;

static void logmsg(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logmsg(int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (use_syslog) {
		vsyslog(prio, fmt, ap);
	} else {
		fprintf(stderr, PROG ": ");
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	}
	va_end(ap);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [--watchdog PATH] [--timeout SECONDS] [--device PATH]...\n"
		"                        [--once] [--foreground]\n"
		"Pets the hardware watchdog only while every Beluga pool answers FEED, so that\n"
		"devices that pin a shared pool cannot outlive a fence of this host by more\n"
		"than the watchdog's timeout (beluga-watchdogd(8)).\n\n"
		"  -w, --watchdog PATH   the watchdog device (default " DEFAULT_WATCHDOG ")\n"
		"  -t, --timeout SECONDS W, set on the watchdog (WDIOC_SETTIMEOUT) and\n"
		"                        registered with the pools (default %d)\n"
		"  -d, --device PATH     a pool's device, repeatable (default $BELUGA_DEVICE\n"
		"                        or /dev/beluga)\n"
		"  -p, --pause-fence SECONDS\n"
		"                        in a VM: beluga-vm-fence on the hypervisor stops this\n"
		"                        VM once paused this long (less than the pool's lease);\n"
		"                        required in a VM, where the watchdog stops with it\n"
		"  -1, --once            one query and pet, then stop as on SIGTERM (tests)\n"
		"  -f, --foreground      stay in the foreground, log to stderr (else: detach,\n"
		"                        log to syslog)\n"
		"  -h, --help            this text\n"
		"  -V, --version         print the version\n", DEFAULT_TIMEOUT_S);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, PROG ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '" PROG " --help'.\n");
	return EXIT_USAGE;
}

static void on_signal(int sig)
{
	stop_signal = sig;
}

/*
 * Whether a line of the file under sysroot that starts with @prefix holds
 * one of @words (NULL-terminated), whitespace- or colon-delimited.
 */
static int file_has_word(const char *path, const char *prefix, const char *const *words)
{
	char name[PATH_MAX], line[4096];
	size_t plen = strlen(prefix);
	int found = 0;
	FILE *f;

	snprintf(name, sizeof(name), "%s%s", sysroot, path);
	f = fopen(name, "re");
	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		const char *const *w;

		if (strncmp(line, prefix, plen))
			continue;
		for (w = words; !found && *w; w++) {
			size_t len = strlen(*w);
			char *p = line;

			while ((p = strstr(p, *w))) {
				if ((p == line || strchr(" \t:", p[-1])) && strchr(" \t\n", p[len])) {
					found = 1;
					break;
				}
				p += len;
			}
		}
	}
	fclose(f);
	return found;
}

/*
 * Why this host looks like a virtual machine, or NULL: the CPU's hypervisor
 * flag (x86), a hypervisor in /sys/hypervisor (Xen, KVM), or QEMU's SMBIOS
 * vendor (which stays when the flag is hidden for GPU passthrough).
 */
static const char *virtual_machine(void)
{
	static const char *const flag[] = { "hypervisor", NULL };
	static const char *const hypervisors[] = { "xen", "kvm", NULL };
	static const char *const vendor[] = { "QEMU", NULL };

	if (file_has_word("/proc/cpuinfo", "flags", flag))
		return "the CPU flag 'hypervisor' in /proc/cpuinfo";
	if (file_has_word("/sys/hypervisor/type", "", hypervisors))
		return "/sys/hypervisor/type";
	if (file_has_word("/sys/class/dmi/id/sys_vendor", "", vendor))
		return "the SMBIOS vendor QEMU in /sys/class/dmi/id/sys_vendor";
	return NULL;
}

/*
 * Open the watchdog, check that it is one that stays armed when this
 * process dies, set W and read it back. Returns the fd, or -1 after
 * logging why and what to do. An fd that was armed and then refused is
 * closed with the magic character (nothing depends on it yet).
 */
static int open_watchdog(const char *path, unsigned int want_s, unsigned int *got_s)
{
	struct watchdog_info info;
	int fd, t;

	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		int err = errno;

		switch (err) {
		case ENOENT:
			logmsg(LOG_ERR, "%s not found: load the watchdog's driver (the board's, e.g. "
			       "iTCO_wdt, sp5100_tco, i6300esb in a VM; softdog, which only covers a "
			       "hung kernel, as a last resort), or give --watchdog /dev/watchdogN",
			       path);
			break;
		case EBUSY:
			logmsg(LOG_ERR, "%s is busy: another process owns it (watchdog(8), wdmd, "
			       "systemd's RuntimeWatchdogSec=): stop it, or give this daemon another "
			       "watchdog (--watchdog /dev/watchdogN)", path);
			break;
		case EACCES:
		case EPERM:
			logmsg(LOG_ERR, "no permission to open %s: run " PROG " as root", path);
			break;
		default:
			logmsg(LOG_ERR, "cannot open %s: %s: give the watchdog's device with "
			       "--watchdog", path, strerror(err));
		}
		return -1;
	}
	memset(&info, 0, sizeof(info));
	if (wd_ioctl(fd, WDIOC_GETSUPPORT, &info)) {
		logmsg(LOG_ERR, "%s is not a watchdog device (WDIOC_GETSUPPORT: %s): give the "
		       "watchdog's device node with --watchdog (/dev/watchdog or /dev/watchdogN)",
		       path, strerror(errno));
		close(fd);
		return -1;
	}
	/*
	 * Without magic close, closing the device stops the watchdog: a
	 * crash of this daemon would disarm it, and a host could outlive a
	 * fence with its devices running.
	 */
	if (!(info.options & WDIOF_MAGICCLOSE)) {
		logmsg(LOG_ERR, "%s (%.32s) stops when its device is closed (no magic close), so "
		       "a crash of " PROG " would disarm it: use a watchdog whose driver has magic "
		       "close (iTCO_wdt, i6300esb, softdog)", path, (const char *)info.identity);
		close(fd);
		return -1;
	}
	t = (int)want_s;
	if (!(info.options & WDIOF_SETTIMEOUT) || wd_ioctl(fd, WDIOC_SETTIMEOUT, &t)) {
		logmsg(LOG_ERR, "%s (%.32s) refused a timeout of %u s%s: give a --timeout its driver "
		       "accepts (/sys/class/watchdog/*/min_timeout and max_timeout)", path,
		       (const char *)info.identity, want_s,
		       info.options & WDIOF_SETTIMEOUT ? "" : " (it cannot set one)");
		goto disarm;
	}
	if (wd_ioctl(fd, WDIOC_GETTIMEOUT, &t) || t <= 0) {
		logmsg(LOG_ERR, "%s (%.32s): cannot read its timeout back (WDIOC_GETTIMEOUT: %s): "
		       "use another watchdog", path, (const char *)info.identity,
		       t <= 0 ? "not positive" : strerror(errno));
		goto disarm;
	}
	if ((uint64_t)t * 1000 > BELUGA_WATCHDOG_MAX_MS) {
		logmsg(LOG_ERR, "%s: a timeout of %d s is more than a pool takes (%u ms): give a "
		       "smaller --timeout", path, t, BELUGA_WATCHDOG_MAX_MS);
		goto disarm;
	}
	if ((unsigned int)t != want_s)
		logmsg(LOG_NOTICE, "%s (%.32s) rounded the timeout of %u s to %d s: W is %d s", path,
		       (const char *)info.identity, want_s, t, t);
	*got_s = (unsigned int)t;
	return fd;
disarm:
	if (write(fd, "V", 1) != 1)
		logmsg(LOG_WARNING, "%s: could not write the magic close character: it may "
		       "reset the host", path);
	close(fd);
	return -1;
}

/* QUERY every registered pool; 1 when all answered FEED. Logs the changes. */
static int query_pools(const char *wd_path, unsigned int w_s)
{
	unsigned int i;
	int all_feed = 1;

	for (i = 0; i < nr_pools; i++) {
		struct pool *p = &pools[i];
		uint32_t answer = 0, ranges = p->ranges;
		int ret = beluga_watchdog_query(p->b, &answer, &ranges);

		if (ret) {
			if (!p->answered || p->answer)
				logmsg(LOG_ERR, "%s: query failed: %s: not petting %s; it resets the "
				       "host within %u s", p->path, beluga_last_error(p->b), wd_path,
				       w_s);
			answer = 0;
		} else if (!p->answered || answer != p->answer) {
			const char *from = !p->answered ? "" : p->answer == BELUGA_WATCHDOG_FEED ?
					   "FEED -> " : p->answer == BELUGA_WATCHDOG_HOLD ?
					   "HOLD -> " : "(query failed) -> ";

			if (answer == BELUGA_WATCHDOG_FEED)
				logmsg(p->answered ? LOG_NOTICE : LOG_INFO,
				       "%s: %sFEED (device ranges: %" PRIu32 ")%s", p->path, from,
				       ranges, p->answered ? ": petting the watchdog again" : "");
			else
				logmsg(LOG_CRIT, "%s: %sHOLD (device ranges: %" PRIu32 "): the host "
				       "fenced itself while devices may reach the pool: not petting %s; "
				       "it resets the host within %u s unless they let go", p->path,
				       from, ranges, wd_path, w_s);
		}
		p->answered = 1;
		p->answer = answer;
		p->ranges = ret ? p->ranges : ranges;
		if (answer != BELUGA_WATCHDOG_FEED)
			all_feed = 0;
	}
	return all_feed;
}

/*
 * Stop: disarm only when nothing can outlive a fence; else leave the
 * watchdog armed (the kernel keeps it running when the file is closed
 * without the magic character) and say so. Returns the exit status.
 */
static int shut_down(int wd, const char *wd_path, unsigned int w_s, int status, int keep_armed)
{
	unsigned int i, ranges = 0;
	int all_feed;

	all_feed = query_pools(wd_path, w_s);
	for (i = 0; i < nr_pools; i++)
		ranges += pools[i].ranges;
	if (keep_armed) {
		logmsg(LOG_CRIT, "stopping without disarming %s: a pool may hold device ranges "
		       "that count on it: it resets the host within its timeout unless a "
		       PROG " with that timeout takes over", wd_path);
	} else if (all_feed && !ranges) {
		if (write(wd, "V", 1) == 1 && !close(wd)) {
			logmsg(LOG_NOTICE, "stopping: no device ranges and every pool answered "
			       "FEED: %s disarmed (magic close; a driver loaded with nowayout=1 "
			       "keeps running)", wd_path);
			wd = -1;
		} else {
			logmsg(LOG_ERR, "stopping: the magic close of %s failed (%s): it resets the "
			       "host within %u s", wd_path, strerror(errno), w_s);
			status = EXIT_FAIL;
		}
	} else {
		for (i = 0; i < nr_pools; i++)
			if (pools[i].ranges || pools[i].answer != BELUGA_WATCHDOG_FEED)
				logmsg(LOG_CRIT, "%s: %s, device ranges: %" PRIu32, pools[i].path,
				       pools[i].answer == BELUGA_WATCHDOG_FEED ? "FEED" :
				       pools[i].answer == BELUGA_WATCHDOG_HOLD ? "HOLD" :
				       "query failed", pools[i].ranges);
		logmsg(LOG_CRIT, "stopping without disarming %s: %s: it resets the host within "
		       "%u s unless a new " PROG " pets it", wd_path,
		       ranges ? "device ranges are declared" : "a pool did not answer FEED", w_s);
	}
	/* Closing without 'V': the watchdog stays armed. */
	if (wd >= 0)
		close(wd);
	for (i = 0; i < nr_pools; i++)
		beluga_close(pools[i].b);
	return status;
}

static int parse_uint(const char *s, unsigned int max, unsigned int *out)
{
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v > max)
		return -1;
	*out = (unsigned int)v;
	return 0;
}

static void sleep_until(struct timespec *next, unsigned int interval_ms)
{
	next->tv_nsec += (long)(interval_ms % 1000) * 1000000L;
	next->tv_sec += interval_ms / 1000 + next->tv_nsec / 1000000000L;
	next->tv_nsec %= 1000000000L;
	/* EINTR: a signal; the loop looks at stop_signal. */
	clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, next, NULL);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "watchdog", required_argument, NULL, 'w' },
		{ "timeout", required_argument, NULL, 't' },
		{ "device", required_argument, NULL, 'd' },
		{ "pause-fence", required_argument, NULL, 'p' },
		{ "once", no_argument, NULL, '1' },
		{ "foreground", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *wd_path = DEFAULT_WATCHDOG;
	unsigned int want_s = DEFAULT_TIMEOUT_S, w_s = 0, interval_ms, i;
	int once = 0, foreground = 0, opt, wd, ret;
	double pause_fence_s = 0;
	const char *vm;
	struct sigaction sa;
	struct timespec next;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":w:t:d:p:1fhV", opts, NULL)) != -1) {
		switch (opt) {
		case 'w':
			wd_path = optarg;
			break;
		case 't':
			if (parse_uint(optarg, BELUGA_WATCHDOG_MAX_MS / 1000, &want_s) || !want_s)
				return usage_error("--timeout '%s': give whole seconds, 1..%u", optarg,
						   BELUGA_WATCHDOG_MAX_MS / 1000);
			break;
		case 'd':
			if (nr_pools == MAX_POOLS)
				return usage_error("more than %d --device options", MAX_POOLS);
			pools[nr_pools++].path = optarg;
			break;
		case 'p': {
			char *end;

			errno = 0;
			pause_fence_s = strtod(optarg, &end);
			if (errno || end == optarg || *end || !isfinite(pause_fence_s) ||
			    pause_fence_s <= 0 || pause_fence_s > BELUGA_WATCHDOG_MAX_MS / 1000)
				return usage_error("--pause-fence '%s': give seconds, more than 0 (a "
						   "fraction is fine: 0.5)", optarg);
			break;
		}
		case '1':
			once = 1;
			break;
		case 'f':
			foreground = 1;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		case 'V':
			printf(PROG " %s (Beluga ABI %d)\n", LIBBELUGA_VERSION, BELUGA_ABI_VERSION);
			return EXIT_OK;
		case ':':
			return usage_error("option '%s' needs an argument", argv[optind - 1]);
		default:
			if (optopt)
				return usage_error("unknown option '-%c'", optopt);
			return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (!nr_pools) {
		const char *env = getenv("BELUGA_DEVICE");

		pools[nr_pools++].path = env && *env ? env : BELUGA_DEVICE_PATH;
	}

	/* The pools first: the watchdog is armed from its open() on. */
	for (i = 0; i < nr_pools; i++) {
		if (beluga_open(pools[i].path, O_RDONLY, &pools[i].b)) {
			logmsg(LOG_ERR, "%s", beluga_last_error(NULL));
			while (i--)
				beluga_close(pools[i].b);
			return EXIT_FAIL;
		}
	}
	vm = virtual_machine();
	if (vm && !pause_fence_s) {
		logmsg(LOG_ERR, "this host is a virtual machine (%s): while it is paused its "
		       "watchdog stops with it, but passed-through devices keep writing into the "
		       "pool after the other hosts reuse its blocks. Run beluga-vm-fence on the "
		       "hypervisor host (it stops the VM once paused too long), then give its "
		       "--max-pause here as --pause-fence SECONDS", vm);
		wd = -1;
	} else {
		wd = open_watchdog(wd_path, want_s, &w_s);
	}
	if (wd < 0) {
		for (i = 0; i < nr_pools; i++)
			beluga_close(pools[i].b);
		return EXIT_FAIL;
	}
	for (i = 0; i < nr_pools; i++) {
		ret = beluga_watchdog_register(pools[i].b, w_s * 1000);
		if (ret) {
			unsigned int j;

			logmsg(LOG_ERR, "%s: %s", pools[i].path, beluga_last_error(pools[i].b));
			/*
			 * The ones registered decide about disarming, unless
			 * this one is busy: device ranges may hold another W
			 * there, declared while a daemon that left petted this
			 * very watchdog, which must then stay armed.
			 */
			for (j = i; j < nr_pools; j++)
				beluga_close(pools[j].b);
			nr_pools = i;
			return shut_down(wd, wd_path, w_s, EXIT_FAIL, ret == -EBUSY);
		}
	}
	interval_ms = w_s * 1000 / 4 < MAX_INTERVAL_MS ? w_s * 1000 / 4 : MAX_INTERVAL_MS;
	logmsg(LOG_INFO, "%s armed with W = %u s; %u pool%s registered; querying every %u ms",
	       wd_path, w_s, nr_pools, nr_pools == 1 ? "" : "s", interval_ms);
	if (vm)
		logmsg(LOG_INFO, "a virtual machine: a pause is fenced by the hypervisor's "
		       "beluga-vm-fence within %g s (--pause-fence)", pause_fence_s);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	if (!foreground && !once) {
		/* Errors so far went to the terminal; from here on, syslog. */
		openlog(PROG, LOG_PID, LOG_DAEMON);
		use_syslog = 1;
		if (daemon(0, 0)) {
			use_syslog = 0;
			logmsg(LOG_ERR, "cannot detach (daemon(3): %s): run with --foreground",
			       strerror(errno));
			return shut_down(wd, wd_path, w_s, EXIT_FAIL, 0);
		}
	}

	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!stop_signal) {
		if (query_pools(wd_path, w_s) && wd_ioctl(wd, WDIOC_KEEPALIVE, NULL))
			logmsg(LOG_ERR, "%s: WDIOC_KEEPALIVE failed: %s", wd_path, strerror(errno));
		if (once)
			break;
		sleep_until(&next, interval_ms);
	}
	if (stop_signal)
		logmsg(LOG_INFO, "%s received", strsignal(stop_signal));
	return shut_down(wd, wd_path, w_s, EXIT_OK, 0);
}
