// SPDX-License-Identifier: GPL-2.0
/*
 * belugactl: what to do about a failed library call, in the operator's
 * commands. libbeluga reports -errno and a neutral message naming the
 * cause ("dax1.0 is online as System RAM (kmem)"); the fix that names a
 * tool (belugactl, daxctl, modprobe) is belugactl's to give, and this file
 * gives it. A hint is appended to the library's message, so it begins
 * with its own separator; "" when there is nothing to add.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "belugactl.h"

#define BLOCK_SIZE_HINT	": see `belugactl status` for the pool's block size"

static const char *open_hint(int err)
{
	switch (err) {
	case ENOENT:
	case ENXIO:
	case ENODEV:
		return ": load the module with `modprobe beluga`";
	case EACCES:
	case EPERM:
	case EROFS:
		return ": run as root, or give your group access with a udev rule "
		       "(KERNEL==\"beluga\", MODE=\"0660\")";
	case ENOTTY:
		return ": point BELUGA_DEVICE at /dev/beluga or load the module with "
		       "`modprobe beluga`";
	}
	return "";
}

/* ATTACH of a dax device: the device's own state says what is wrong. */
static const char *dax_hint(char *buf, size_t len, int err, const char *dax)
{
	struct beluga_dax_device dev;
	int ret = beluga_dax_probe(dax, &dev);

	if (ret == -EINVAL)
		return " (see `belugactl list`)";
	if (ret == -ENOENT)
		return ": see `belugactl list` or `daxctl list` (without a dax bus, load "
		       "device_dax with `modprobe device_dax`)";
	if (ret)
		return "";
	switch (err) {
	case EBUSY:
		switch (dev.mode) {
		case BELUGA_DAX_DEVDAX:
			return ": check `belugactl list`";
		case BELUGA_DAX_SYSTEM_RAM:
			if (dev.target_node >= 0)
				snprintf(buf, len, ": run `daxctl reconfigure-device --mode=devdax %s` "
					 "or use `belugactl attach --node %d --size SIZE`",
					 dev.name, dev.target_node);
			else
				snprintf(buf, len, ": run `daxctl reconfigure-device --mode=devdax %s` "
					 "or use `belugactl attach --node N --size SIZE`", dev.name);
			return buf;
		case BELUGA_DAX_UNBOUND:
			snprintf(buf, len, ": run `daxctl reconfigure-device --mode=devdax %s` "
				 "(or `echo %s > /sys/bus/dax/drivers/device_dax/new_id`)",
				 dev.name, dev.name);
			return buf;
		default:
			snprintf(buf, len, ": run `daxctl reconfigure-device --mode=devdax %s`",
				 dev.name);
			return buf;
		}
	case EOPNOTSUPP:
		return " (`daxctl destroy-device` + `daxctl create-device -s SIZE`)";
	case EINVAL:
		if (!dev.size) {
			snprintf(buf, len, ": give it capacity with `daxctl create-device` or "
				 "`daxctl reconfigure-device -s SIZE %s`", dev.name);
			return buf;
		}
		if ((dev.start | dev.size) & (BELUGA_DAX_ALIGN - 1))
			return ": recreate the device with `daxctl create-device -a 2M`";
		return BLOCK_SIZE_HINT;
	}
	return "";
}

const char *cli_hint(char *buf, size_t len, const struct hint_context *ctx, int err)
{
	int attaching = !strcmp(cmd_name, "attach") || !strcmp(cmd_name, "apply");

	err = err < 0 ? -err : err;
	if (ctx->opening)
		return open_hint(err);
	if (err == EPERM)
		return ": run as root";
	if (attaching) {
		switch (err) {
		case EEXIST:
			return ": see `belugactl status`";
		case ENOSPC:
			return " with `belugactl detach ID`";
		case ENODEV:
			if (!ctx->dax)
				return ": see `belugactl list`";
			break;
		}
		if (ctx->dax)
			return dax_hint(buf, len, err, ctx->dax);
		return err == EINVAL ? BLOCK_SIZE_HINT : "";
	}
	if (err == ENODEV)
		return ": run `belugactl attach /dev/dax0.0` (or `belugactl attach --node 0 "
		       "--size 1G`)";
	if (!strcmp(cmd_name, "detach")) {
		if (err == ENOENT)
			return ": see `belugactl status`";
		if (err == EBUSY)
			return ctx->evict ?
				": stop its clients (see `belugactl status`, column MAPPINGS)" :
				": stop its clients (see `belugactl status`, column MAPPINGS), "
				"or add --evict to drop its published blocks";
	}
	return "";
}
