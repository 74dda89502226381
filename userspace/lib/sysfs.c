// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libbeluga: device-dax discovery through sysfs.
 *
 * The module attaches a device-dax range by physical address, which the
 * kernel publishes in /sys/bus/dax/devices/<name>/:
 *   resource     physical start, "%#llx" (first range)
 *   size         bytes, decimal (all ranges together)
 *   target_node  node the memory belongs to (where kmem would online it)
 *   numa_node    node of the device
 *   align        mapping alignment, decimal
 *   driver ->    the bound driver: device_dax, kmem, or absent
 *   mappingN/    one per physical range on dynamic (CXL, hmem) regions,
 *                with start, end, page_offset
 * The root is $BELUGA_SYSFS_ROOT (tests) or /sys.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* An unreadable sysfs attribute: the mount (or BELUGA_SYSFS_ROOT) is wrong. */
#define FIX_SYSFS	"check that sysfs is mounted there and readable (BELUGA_SYSFS_ROOT moves it)"

const char *bel_sysfs_root(void)
{
	const char *root = getenv("BELUGA_SYSFS_ROOT");

	return root && *root ? root : "/sys";
}

/* Does @s spell daxX.Y? */
static int is_dax_name(const char *s)
{
	const char *p = s;

	if (strncmp(p, "dax", 3))
		return 0;
	p += 3;
	if (*p < '0' || *p > '9')
		return 0;
	while (*p >= '0' && *p <= '9')
		p++;
	if (*p++ != '.')
		return 0;
	if (*p < '0' || *p > '9')
		return 0;
	while (*p >= '0' && *p <= '9')
		p++;
	return *p == '\0' && strlen(s) < BELUGA_NAME_LEN;
}

const char *bel_dax_basename(const char *dax)
{
	const char *base;

	if (!dax)
		return NULL;
	base = strrchr(dax, '/');
	base = base ? base + 1 : dax;
	return is_dax_name(base) ? base : NULL;
}

/* Read a one-line attribute into @buf without its newline; 0 or -errno. */
static int read_attr(const char *dir, const char *attr, char *buf, size_t len)
{
	char path[PATH_MAX];
	FILE *f;
	size_t n;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, attr) >= sizeof(path))
		return -ENAMETOOLONG;
	f = fopen(path, "re");
	if (!f)
		return -errno;
	n = fread(buf, 1, len - 1, f);
	if (ferror(f)) {
		int err = errno ? -errno : -EIO;

		fclose(f);
		return err;
	}
	fclose(f);
	buf[n] = '\0';
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return 0;
}

/* Parse a decimal or 0x-hex u64 attribute; -EINVAL for junk. */
static int read_u64(const char *dir, const char *attr, uint64_t *out)
{
	char buf[64], *end;
	unsigned long long v;
	int ret;

	ret = read_attr(dir, attr, buf, sizeof(buf));
	if (ret)
		return ret;
	if (!buf[0] || buf[0] == '-')
		return -EINVAL;
	errno = 0;
	v = strtoull(buf, &end, 0);
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

static int read_int(const char *dir, const char *attr, int *out)
{
	char buf[32], *end;
	long v;
	int ret;

	ret = read_attr(dir, attr, buf, sizeof(buf));
	if (ret)
		return ret;
	errno = 0;
	v = strtol(buf, &end, 10);
	if (errno || *end || end == buf || v < INT_MIN || v > INT_MAX)
		return -EINVAL;
	*out = (int)v;
	return 0;
}

/* Count mappingN/ subdirectories; 0 when the region lists none. */
static unsigned int count_mappings(const char *dir)
{
	struct dirent *de;
	unsigned int n = 0;
	DIR *d = opendir(dir);

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		const char *p = de->d_name;

		if (strncmp(p, "mapping", 7) || !p[7])
			continue;
		for (p += 7; *p >= '0' && *p <= '9'; p++)
			;
		if (!*p)
			n++;
	}
	closedir(d);
	return n;
}

static enum beluga_dax_source guess_source(const char *dir)
{
	char real[PATH_MAX];

	if (!realpath(dir, real))
		return BELUGA_DAX_SRC_UNKNOWN;
	/* The CXL root (ACPI0017) and its decoders sit above CXL regions. */
	if (strstr(real, "ACPI0017") || strstr(real, "/decoder"))
		return BELUGA_DAX_SRC_CXL;
	if (strstr(real, "/ndbus") || strstr(real, "/namespace"))
		return BELUGA_DAX_SRC_PMEM;
	if (strstr(real, "hmem"))
		return BELUGA_DAX_SRC_HMEM;
	return BELUGA_DAX_SRC_UNKNOWN;
}

BEL_EXPORT const char *beluga_dax_mode_name(enum beluga_dax_mode mode)
{
	switch (mode) {
	case BELUGA_DAX_UNBOUND:
		return "unbound";
	case BELUGA_DAX_DEVDAX:
		return "devdax";
	case BELUGA_DAX_SYSTEM_RAM:
		return "system-ram";
	default:
		return "other";
	}
}

BEL_EXPORT const char *beluga_dax_source_name(enum beluga_dax_source source)
{
	switch (source) {
	case BELUGA_DAX_SRC_CXL:
		return "cxl";
	case BELUGA_DAX_SRC_PMEM:
		return "pmem";
	case BELUGA_DAX_SRC_HMEM:
		return "hmem";
	default:
		return "unknown";
	}
}

BEL_EXPORT int beluga_dax_probe(const char *dax, struct beluga_dax_device *out)
{
	char dir[PATH_MAX], link[PATH_MAX], sub[PATH_MAX + 16];
	const char *name = bel_dax_basename(dax);
	const char *root = bel_sysfs_root();
	struct stat st;
	ssize_t n;
	int ret;

	memset(out, 0, sizeof(*out));
	out->target_node = -1;
	out->numa_node = -1;
	if (!name)
		return bel_fail(NULL, -EINVAL,
				"'%s' is not a dax device: expected daxX.Y or /dev/daxX.Y",
				dax ? dax : "(null)");
	snprintf(out->name, sizeof(out->name), "%s", name);
	snprintf(dir, sizeof(dir), "%s/bus/dax/devices/%s", root, name);
	if (stat(dir, &st)) {
		snprintf(link, sizeof(link), "%s/bus/dax", root);
		if (stat(link, &st))
			return bel_fail(NULL, -ENOENT,
					"%s: no dax bus in %s: the device_dax driver is not loaded: "
					"load it with `modprobe device_dax`", name, root);
		return bel_fail(NULL, -ENOENT, "%s: no such dax device in %s/bus/dax/devices: "
				"give one that `daxctl list` shows", name, root);
	}

	ret = read_u64(dir, "size", &out->size);
	if (ret)
		return bel_fail(NULL, -EIO, "%s: cannot read %s/size: %s: " FIX_SYSFS,
				name, dir, strerror(-ret));
	ret = read_u64(dir, "resource", &out->start);
	if (ret == -ENOENT) {
		/* Kernels before resource existed still list mapping0. */
		snprintf(sub, sizeof(sub), "%s/mapping0", dir);
		ret = read_u64(sub, "start", &out->start);
	}
	if (ret)
		return bel_fail(NULL, -EIO,
				"%s: cannot read its physical start from %s/resource: %s: "
				FIX_SYSFS, name, dir, strerror(-ret));
	if (read_int(dir, "target_node", &out->target_node))
		out->target_node = -1;
	if (read_int(dir, "numa_node", &out->numa_node))
		out->numa_node = -1;
	if (out->target_node < 0)
		out->target_node = out->numa_node;
	if (read_u64(dir, "align", &out->align))
		out->align = 0;
	out->nr_ranges = count_mappings(dir);

	snprintf(sub, sizeof(sub), "%s/driver", dir);
	n = readlink(sub, link, sizeof(link) - 1);
	if (n < 0) {
		out->mode = BELUGA_DAX_UNBOUND;
	} else {
		const char *drv;

		link[n] = '\0';
		drv = strrchr(link, '/');
		drv = drv ? drv + 1 : link;
		snprintf(out->driver, sizeof(out->driver), "%.*s",
			 (int)sizeof(out->driver) - 1, drv);
		if (!strcmp(drv, "device_dax"))
			out->mode = BELUGA_DAX_DEVDAX;
		else if (!strcmp(drv, "kmem"))
			out->mode = BELUGA_DAX_SYSTEM_RAM;
		else
			out->mode = BELUGA_DAX_OTHER;
	}
	out->source = guess_source(dir);
	return 0;
}

/* Order dax2.0 before dax10.0: compare digit runs by value. */
static int natural_cmp(const char *a, const char *b)
{
	while (*a && *b) {
		if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
			unsigned long long x = strtoull(a, (char **)&a, 10);
			unsigned long long y = strtoull(b, (char **)&b, 10);

			if (x != y)
				return x < y ? -1 : 1;
			continue;
		}
		if (*a != *b)
			return (unsigned char)*a - (unsigned char)*b;
		a++;
		b++;
	}
	return (unsigned char)*a - (unsigned char)*b;
}

static int dax_cmp(const void *x, const void *y)
{
	const struct beluga_dax_device *a = x, *b = y;

	return natural_cmp(a->name, b->name);
}

BEL_EXPORT ssize_t beluga_dax_list(struct beluga_dax_device **out)
{
	struct beluga_dax_device *devs = NULL, *bigger;
	char dir[PATH_MAX];
	size_t nr = 0, cap = 0;
	struct dirent *de;
	DIR *d;

	*out = NULL;
	snprintf(dir, sizeof(dir), "%s/bus/dax/devices", bel_sysfs_root());
	d = opendir(dir);
	if (!d) {
		if (errno == ENOENT)
			return 0;	/* no dax bus: no devices */
		return bel_fail(NULL, -errno, "cannot list %s: %s: " FIX_SYSFS, dir,
				strerror(errno));
	}
	while ((de = readdir(d))) {
		if (!bel_dax_basename(de->d_name))
			continue;
		if (nr == cap) {
			cap = cap ? 2 * cap : 8;
			bigger = realloc(devs, cap * sizeof(*devs));
			if (!bigger) {
				closedir(d);
				free(devs);
				return bel_fail(NULL, -ENOMEM, "out of memory listing dax devices: "
						"free memory and retry");
			}
			devs = bigger;
		}
		/* A device that vanishes or is unreadable is skipped, not fatal. */
		if (!beluga_dax_probe(de->d_name, &devs[nr]))
			nr++;
	}
	closedir(d);
	if (nr)
		qsort(devs, nr, sizeof(*devs), dax_cmp);
	*out = devs;
	return (ssize_t)nr;
}
