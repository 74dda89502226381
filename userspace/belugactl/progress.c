// SPDX-License-Identifier: GPL-2.0
/*
 * Progress of an ATTACH. The module zeroes a device-dax range (allocates a
 * node region's memory) before the region joins the pool, inside the ioctl:
 * seconds per GiB on real memory, minutes on emulated CXL. Meanwhile the
 * pool's sysfs attribute "attaching" lists each region being prepared as
 * "NAME DONE LENGTH" (Documentation/ABI/testing/sysfs-class-misc-beluga).
 * A thread reads it while the calling thread sits in the ioctl, and shows
 *   - on a terminal (stderr): one line rewritten in place, after a second,
 *     so that a quick attach prints nothing more than before;
 *   - with --json: a JSON object per line on stdout, each time DONE moves;
 *   - otherwise (a unit, a pipe, a log): nothing.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "belugactl.h"

/* First terminal line after this long; then a refresh every PROGRESS_TICK_MS. */
#define PROGRESS_QUIET_MS	1000
#define PROGRESS_TICK_MS	500

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * The pool's "attaching" attribute: through /sys/dev/char/MAJ:MIN for a
 * character device (whatever the node is called), else by the device's
 * name under class/misc (the fake kernel of the tests opens a plain file).
 */
static void attaching_path(struct beluga *b, char *buf, size_t len)
{
	const char *root = getenv("BELUGA_SYSFS_ROOT");
	const char *dev = device_path;
	const char *base;
	struct stat st;

	if (!root || !*root)
		root = "/sys";
	if (!fstat(beluga_fd(b), &st) && S_ISCHR(st.st_mode)) {
		snprintf(buf, len, "%s/dev/char/%u:%u/attaching", root, major(st.st_rdev),
			 minor(st.st_rdev));
		return;
	}
	if (!dev || !*dev)
		dev = getenv("BELUGA_DEVICE");
	if (!dev || !*dev)
		dev = "/dev/beluga";
	base = strrchr(dev, '/');
	snprintf(buf, len, "%s/class/misc/%s/attaching", root, base ? base + 1 : dev);
}

/* The line of region @name in the attribute at @path: 1 if there, else 0. */
static int read_attaching(const char *path, const char *name, uint64_t *done, uint64_t *length)
{
	char line[128], who[BELUGA_NAME_LEN];
	unsigned long long d, l;
	int found = 0;
	FILE *f;

	f = fopen(path, "re");
	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%31s %llu %llu", who, &d, &l) == 3 && !strcmp(who, name)) {
			*done = d;
			*length = l;
			found = 1;
		}
	}
	fclose(f);
	return found;
}

/* Clear the terminal line the progress used. */
static void erase_line(struct attach_progress *p)
{
	if (p->shown)
		fputs("\r\033[K", stderr);
	p->shown = 0;
}

static void show(struct attach_progress *p, uint64_t done, uint64_t length, uint64_t elapsed_ms)
{
	char d[32], l[32], left[48] = "";
	unsigned int pct = length ? (unsigned int)(done * 100 / length) : 0;

	if (p->mode == PROGRESS_JSON) {
		struct json j;

		json_init_line(&j, stdout);
		json_object_begin(&j, NULL);
		json_string(&j, "event", "progress");
		json_string(&j, "name", p->name);
		json_u64(&j, "done", done);
		json_u64(&j, "length", length);
		json_u64(&j, "elapsed_ms", elapsed_ms);
		json_object_end(&j);
		json_finish(&j);
		fflush(stdout);
		return;
	}
	/* At the rate so far; only once there is one. */
	if (done && done < length)
		snprintf(left, sizeof(left), ", about %" PRIu64 " s left",
			 (uint64_t)((double)(length - done) * (double)elapsed_ms / (double)done / 1000) + 1);
	fprintf(stderr, "\r\033[Kbelugactl %s: %s: %s %s of %s (%u%%), %" PRIu64 " s%s", cmd_name,
		p->name, p->dax ? "zeroing" : "allocating", format_size(d, sizeof(d), done),
		format_size(l, sizeof(l), length), pct, elapsed_ms / 1000, left);
	fflush(stderr);
	p->shown = 1;
}

static void *progress_thread(void *arg)
{
	struct attach_progress *p = arg;
	uint64_t done, length, last = UINT64_MAX, start = now_ms(), deadline, t;
	struct timespec ts;
	int stop = 0;

	while (!stop) {
		/* Sleep a tick, or until attach_progress_stop() says so. */
		clock_gettime(CLOCK_MONOTONIC, &ts);
		deadline = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 +
			   PROGRESS_TICK_MS;
		ts.tv_sec = (time_t)(deadline / 1000);
		ts.tv_nsec = (long)(deadline % 1000) * 1000000;
		pthread_mutex_lock(&p->lock);
		while (!p->stop && now_ms() < deadline)
			if (pthread_cond_timedwait(&p->cond, &p->lock, &ts) == ETIMEDOUT)
				break;
		stop = p->stop;
		pthread_mutex_unlock(&p->lock);
		if (stop)
			break;
		t = now_ms() - start;
		if (!read_attaching(p->path, p->name, &done, &length))
			continue;
		if (p->mode == PROGRESS_TTY ? t >= PROGRESS_QUIET_MS : done != last)
			show(p, done, length, t);
		last = done;
	}
	return NULL;
}

void attach_progress_start(struct attach_progress *p, struct beluga *b, enum progress_mode mode,
			   const char *dax, int node)
{
	pthread_condattr_t attr;

	memset(p, 0, sizeof(*p));
	p->mode = mode;
	if (mode == PROGRESS_OFF)
		return;
	p->dax = dax != NULL;
	if (dax)
		snprintf(p->name, sizeof(p->name), "%s", strrchr(dax, '/') ? strrchr(dax, '/') + 1 : dax);
	else
		snprintf(p->name, sizeof(p->name), "node%d", node);
	attaching_path(b, p->path, sizeof(p->path));
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cond, &attr);
	pthread_condattr_destroy(&attr);
	/* Without the thread the attach goes on, only without progress. */
	p->running = !pthread_create(&p->thread, NULL, progress_thread, p);
}

void attach_progress_stop(struct attach_progress *p)
{
	if (p->mode == PROGRESS_OFF)
		return;
	if (p->running) {
		pthread_mutex_lock(&p->lock);
		p->stop = 1;
		pthread_cond_signal(&p->cond);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->thread, NULL);
	}
	erase_line(p);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
}
