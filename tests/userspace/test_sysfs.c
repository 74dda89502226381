// SPDX-License-Identifier: GPL-2.0
/*
 * Device-dax discovery and beluga_attach_dax() against a fake sysfs tree
 * ($BELUGA_SYSFS_ROOT), laid out like Linux 6.x:
 *
 *   bus/dax/devices/daxX.Y -> ../../../devices/.../daxX.Y
 *   devices/.../daxX.Y/{size,resource,target_node,numa_node,align}
 *   devices/.../daxX.Y/driver -> bus/dax/drivers/{device_dax,kmem}
 *   devices/.../daxX.Y/mappingN/{start,end,page_offset}
 *
 * `test_sysfs --make-tree DIR` only builds the tree (for the CLI tests).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libbeluga.h"
#include "fake_kernel.h"
#include "internal.h"
#include "../lib/tap.h"

#define MB	(1ULL << 20)

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void mkdirs(const char *path)
{
	char buf[PATH_MAX], *p;

	snprintf(buf, sizeof(buf), "%s", path);
	for (p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) && errno != EEXIST)
			die(buf);
		*p = '/';
	}
	if (mkdir(buf, 0755) && errno != EEXIST)
		die(buf);
}

static void write_file(const char *dir, const char *name, const char *fmt, ...)
{
	char path[PATH_MAX];
	va_list ap;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		die(path);
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fclose(f);
}

struct fake_dax {
	const char *name;
	const char *parent;	/* under devices/ */
	const char *driver;	/* NULL: unbound */
	uint64_t start, size;
	int target_node;	/* -2: attribute absent */
	int numa_node;
	unsigned int ranges;	/* mappingN/ entries */
};

static const struct fake_dax fake_devices[] = {
	{ "dax0.0", "platform/ACPI0017:00/root0/decoder0.0/region0/dax_region0", "device_dax",
	  0x390000000ULL, 256 * MB, 1, 0, 1 },
	{ "dax1.0", "platform/ACPI0017:00/root0/decoder0.1/region1/dax_region1", "kmem",
	  0x3a0000000ULL, 256 * MB, 2, 0, 1 },
	{ "dax2.0", "platform/ACPI0017:00/root0/decoder0.2/region2/dax_region2", NULL,
	  0x3b0000000ULL, 256 * MB, 3, 0, 1 },
	{ "dax3.0", "platform/ACPI0017:00/root0/decoder0.3/region3/dax_region3", "device_dax",
	  0x3c0000000ULL, 512 * MB, 1, 0, 2 },
	{ "dax4.0", "platform/hmem.0/dax_region4", "device_dax",
	  0x3d0100000ULL, 64 * MB, 1, 0, 1 },
	{ "dax5.0", "platform/ACPI0017:00/root0/decoder0.4/region5/dax_region5", "device_dax",
	  0x3e0000000ULL, 0, 1, 0, 0 },
	{ "dax10.0", "LNXSYSTM:00/LNXSYBUS:00/ACPI0012:00/ndbus0/region10/dax10.0", "device_dax",
	  0x100000000ULL, 1024 * MB, -2, 0, 0 },
};

static void make_tree(const char *root)
{
	char dir[PATH_MAX], link[PATH_MAX], sub[PATH_MAX + 32];
	size_t i;
	unsigned int m;

	snprintf(dir, sizeof(dir), "%s/bus/dax/drivers/device_dax", root);
	mkdirs(dir);
	snprintf(dir, sizeof(dir), "%s/bus/dax/drivers/kmem", root);
	mkdirs(dir);
	snprintf(dir, sizeof(dir), "%s/bus/dax/devices", root);
	mkdirs(dir);
	for (i = 0; i < sizeof(fake_devices) / sizeof(fake_devices[0]); i++) {
		const struct fake_dax *d = &fake_devices[i];

		snprintf(dir, sizeof(dir), "%s/devices/%s/%s", root, d->parent, d->name);
		mkdirs(dir);
		write_file(dir, "size", "%llu\n", (unsigned long long)d->size);
		write_file(dir, "resource", "%#llx\n", (unsigned long long)d->start);
		if (d->target_node != -2)
			write_file(dir, "target_node", "%d\n", d->target_node);
		write_file(dir, "numa_node", "%d\n", d->numa_node);
		write_file(dir, "align", "%llu\n", 2 * MB);
		for (m = 0; m < d->ranges; m++) {
			snprintf(sub, sizeof(sub), "%s/mapping%u", dir, m);
			mkdirs(sub);
			write_file(sub, "start", "%#llx\n",
				   (unsigned long long)(d->start + m * (d->size / d->ranges)));
		}
		if (d->driver) {
			snprintf(link, sizeof(link), "%s/bus/dax/drivers/%s", root, d->driver);
			snprintf(sub, sizeof(sub), "%s/driver", dir);
			if (symlink(link, sub))
				die(sub);
		}
		snprintf(link, sizeof(link), "../../../devices/%s/%s", d->parent, d->name);
		snprintf(sub, sizeof(sub), "%s/bus/dax/devices/%s", root, d->name);
		if (symlink(link, sub))
			die(sub);
	}
}

static char dev_path[64];

static void test_probe(void)
{
	struct beluga_dax_device d;
	int ret;

	ret = beluga_dax_probe("dax0.0", &d);
	tap_result(!ret && !strcmp(d.name, "dax0.0") && d.start == 0x390000000ULL &&
		   d.size == 256 * MB && d.target_node == 1 && d.numa_node == 0 &&
		   d.align == 2 * MB && d.nr_ranges == 1 && d.mode == BELUGA_DAX_DEVDAX &&
		   d.source == BELUGA_DAX_SRC_CXL && !strcmp(d.driver, "device_dax"),
		   "probe: a CXL devdax device, every field");
	ret = beluga_dax_probe("/dev/dax0.0", &d);
	tap_result(!ret && !strcmp(d.name, "dax0.0"), "probe: /dev/daxX.Y paths are accepted");

	ret = beluga_dax_probe("dax1.0", &d);
	tap_result(!ret && d.mode == BELUGA_DAX_SYSTEM_RAM && !strcmp(d.driver, "kmem") &&
		   !strcmp(beluga_dax_mode_name(d.mode), "system-ram"),
		   "probe: a kmem-bound device is System RAM");
	ret = beluga_dax_probe("dax2.0", &d);
	tap_result(!ret && d.mode == BELUGA_DAX_UNBOUND && !d.driver[0],
		   "probe: no driver link is unbound");
	ret = beluga_dax_probe("dax10.0", &d);
	tap_result(!ret && d.source == BELUGA_DAX_SRC_PMEM && d.target_node == 0 &&
		   d.nr_ranges == 0, "probe: a pmem namespace; numa_node stands in for target_node");
	ret = beluga_dax_probe("dax4.0", &d);
	tap_result(!ret && d.source == BELUGA_DAX_SRC_HMEM, "probe: an hmem device");

	ret = beluga_dax_probe("dax9.9", &d);
	tap_result(ret == -ENOENT && strstr(beluga_last_error(NULL), "dax9.9: no such dax device") &&
		   strstr(beluga_last_error(NULL), ": give one that `daxctl list` shows") &&
		   !strstr(beluga_last_error(NULL), "belugactl"),
		   "probe: a missing device is -ENOENT naming it and the fix, no front end");
	ret = beluga_dax_probe("/dev/sda", &d);
	tap_result(ret == -EINVAL && strstr(beluga_last_error(NULL), "daxX.Y"),
		   "probe: a non-dax name is -EINVAL");
	tap_result(beluga_dax_probe("dax0.0x", &d) == -EINVAL &&
		   beluga_dax_probe("dax.0", &d) == -EINVAL,
		   "probe: malformed dax names are refused");
}

static void test_list(const char *root)
{
	struct beluga_dax_device *devs;
	char empty[PATH_MAX];
	ssize_t n;

	n = beluga_dax_list(&devs);
	tap_result(n == 7 && !strcmp(devs[0].name, "dax0.0") && !strcmp(devs[5].name, "dax5.0") &&
		   !strcmp(devs[6].name, "dax10.0"),
		   "list: every device, in natural order (dax10.0 last)");
	free(devs);

	snprintf(empty, sizeof(empty), "%s/empty", root);
	mkdirs(empty);
	setenv("BELUGA_SYSFS_ROOT", empty, 1);
	n = beluga_dax_list(&devs);
	tap_result(n == 0 && !devs, "list: no dax bus is an empty list");
	tap_result(beluga_dax_probe("dax0.0", &(struct beluga_dax_device){ 0 }) == -ENOENT &&
		   strstr(beluga_last_error(NULL), "the device_dax driver is not loaded: load it "
			  "with `modprobe device_dax`"),
		   "probe: no dax bus says device_dax is not loaded, and how to load it");
	setenv("BELUGA_SYSFS_ROOT", root, 1);
}

/* ATTACHes of the tree's devices that fail: the error and what it says. */
struct attach_refusal {
	const char *dev;
	uint64_t block_size;
	int err;
	const char *msg;	/* in beluga_last_error(): the cause */
	const char *fix;	/* in beluga_last_error() after the cause */
	const char *what;
};

static const struct attach_refusal refused[] = {
	{ "dax2.0", 0, -EBUSY, "not bound to device_dax",
	  ": run `daxctl reconfigure-device --mode=devdax dax2.0` (or `echo dax2.0 > "
	  "/sys/bus/dax/drivers/device_dax/new_id`)",
	  "an unbound device is refused with the bind command" },
	{ "dax3.0", 0, -EOPNOTSUPP, "2 physical ranges",
	  "recreate it as one range (`daxctl destroy-device dax3.0`",
	  "a multi-range device is refused, with the fix" },
	{ "dax4.0", 0, -EINVAL, "2 MiB aligned",
	  ": recreate the device with `daxctl create-device -a 2M`",
	  "an unaligned range is refused, with the fix" },
	{ "dax5.0", 0, -EINVAL, "size 0",
	  ": give it capacity with `daxctl create-device` or `daxctl reconfigure-device "
	  "-s SIZE dax5.0`", "a zero-size device is refused, with the fix" },
	{ "dax7.0", 0, -ENOENT, "no such dax device", ": give one that `daxctl list` shows",
	  "a missing device is -ENOENT, with the fix" },
	/* dax0.0 was attached first */
	{ "dax0.0", 0, -EEXIST, "already attached",
	  ": detach that region first, or attach another range",
	  "the module's -EEXIST is explained, with the fix" },
	/* the pool's blocks are 2 MiB */
	{ "dax10.0", 4096, -EINVAL, "block size 4096", "must be a multiple of 4 KiB",
	  "a block size mismatch names the block size and the rule" },
};

static void test_attach(void)
{
	struct beluga_attach out;
	struct beluga *b;
	size_t i;
	int ret;

	fake_kernel_reset(2 * MB, BELUGA_MAX_BATCH);
	if (beluga_open(dev_path, O_RDWR, &b)) {
		tap_result(0, "attach: open: %s", beluga_last_error(NULL));
		return;
	}
	ret = beluga_attach_dax(b, "/dev/dax0.0", 0, &out);
	tap_result(!ret && out.backend == BELUGA_BACKEND_DAX && out.node == -1 &&
		   out.phys_start == 0x390000000ULL && out.length == 256 * MB &&
		   !strcmp(out.name, "dax0.0") && out.nr_blocks == 128 && out.region_id == 0,
		   "attach: resource and size from sysfs go to ATTACH");

	ret = beluga_attach_dax(b, "dax1.0", 0, NULL);
	tap_result(ret == -EBUSY && strstr(beluga_last_error(b),
		   "dax1.0 is online as System RAM (kmem): run `daxctl reconfigure-device "
		   "--mode=devdax dax1.0`") &&
		   !strstr(beluga_last_error(b), "belugactl"),
		   "attach: System RAM (kmem) is refused naming the state and the fix, no front end");
	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		const struct attach_refusal *r = &refused[i];

		ret = beluga_attach_dax(b, r->dev, r->block_size, NULL);
		const char *msg = beluga_last_error(b), *cause = strstr(msg, r->msg);

		if (!tap_result(ret == r->err && cause && strstr(cause, r->fix),
				"attach: %s", r->what))
			tap_diag("got %d '%s'", ret, msg);
	}
	fake.fail_cmd = BELUGA_CMD_ATTACH;
	fake.fail_nth = fake_kernel_calls(BELUGA_CMD_ATTACH) + 1;
	fake.fail_errno = EBUSY;
	ret = beluga_attach_dax(b, "dax10.0", 0, NULL);
	tap_result(ret == -EBUSY && strstr(beluga_last_error(b), "bound to device_dax") &&
		   strstr(beluga_last_error(b), ": run `daxctl reconfigure-device --mode=devdax "
			  "dax10.0`"),
		   "attach: the module's -EBUSY is explained, with the fix");
	fake.fail_nth++;
	fake.fail_errno = ENODEV;
	ret = beluga_attach_node(b, 3, 64 * MB, 0, NULL);
	tap_result(ret == -ENODEV && strstr(beluga_last_error(b), "node 3 is not online: give a "
					       "node that /sys/devices/system/node/online lists"),
		   "attach: an offline node is explained, with the fix");
	fake.fail_nth++;
	fake.fail_errno = ENOMEM;
	ret = beluga_attach_node(b, 0, 64 * MB, 0, NULL);
	tap_result(ret == -ENOMEM && strstr(beluga_last_error(b), "node 0 has not"),
		   "attach: a node without enough free memory is explained");
	beluga_close(b);
}

int main(int argc, char **argv)
{
	char root[] = "/tmp/beluga-sysfs.XXXXXX";
	char cmd[PATH_MAX + 16];
	int fd;

	if (argc == 3 && !strcmp(argv[1], "--make-tree")) {
		make_tree(argv[2]);
		return 0;
	}
	if (!mkdtemp(root))
		die("mkdtemp");
	make_tree(root);
	setenv("BELUGA_SYSFS_ROOT", root, 1);
	snprintf(dev_path, sizeof(dev_path), "/tmp/beluga-test-dev.XXXXXX");
	fd = mkstemp(dev_path);
	if (fd < 0)
		die("mkstemp");
	close(fd);

	test_probe();
	test_list(root);
	test_attach();

	unlink(dev_path);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd))
		tap_diag("could not remove %s", root);
	return tap_done();
}
