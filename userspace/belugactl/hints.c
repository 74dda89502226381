// SPDX-License-Identifier: GPL-2.0
/*
 * belugactl: what an operator can do about a failed library call with
 * belugactl itself. libbeluga's message already names the cause and the
 * fix in terms any caller can use ("dax1.0 is online as System RAM (kmem):
 * run `daxctl reconfigure-device --mode=devdax dax1.0`"); a hint adds the
 * belugactl way when there is one (" or use `belugactl attach --node 2
 * --size SIZE`"). It is appended to the library's message, so it begins
 * with its own separator; "" when there is nothing to add.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "belugactl.h"

#define BLOCK_SIZE_HINT	": see `belugactl status` for the pool's block size"
#define STATUS_HINT	" (see `belugactl status`)"

/* ATTACH of a dax device: the device's own state says what is wrong. */
static const char *dax_hint(char *buf, size_t len, int err, const char *dax)
{
	struct beluga_dax_device dev;
	int ret = beluga_dax_probe(dax, &dev);

	if (ret == -EINVAL)
		return " (see `belugactl list`)";
	if (ret)
		return "";
	if (err == EBUSY && dev.mode == BELUGA_DAX_SYSTEM_RAM) {
		if (dev.target_node >= 0)
			snprintf(buf, len, " or use `belugactl attach --node %d --size SIZE`",
				 dev.target_node);
		else
			snprintf(buf, len, " or use `belugactl attach --node N --size SIZE`");
		return buf;
	}
	/* The library explains a device of size 0 or an unaligned range. */
	if (err == EINVAL && dev.size && !((dev.start | dev.size) & (BELUGA_DAX_ALIGN - 1)))
		return BLOCK_SIZE_HINT;
	return "";
}

const char *cli_hint(char *buf, size_t len, const struct hint_context *ctx, int err)
{
	int attaching = !strcmp(cmd_name, "attach") || !strcmp(cmd_name, "apply");

	err = err < 0 ? -err : err;
	/* Opening: the library's message has the whole fix (modprobe, udev). */
	if (ctx->opening)
		return "";
	if (attaching) {
		switch (err) {
		case EEXIST:
			return STATUS_HINT;
		case ENOSPC:
			return " with `belugactl detach ID`";
		}
		if (ctx->dax)
			return dax_hint(buf, len, err, ctx->dax);
		return err == EINVAL ? BLOCK_SIZE_HINT : "";
	}
	if (err == ENODEV)
		return " with `belugactl attach /dev/dax0.0` (or `belugactl attach --node 0 "
		       "--size 1G`)";
	if (!strcmp(cmd_name, "detach")) {
		if (err == ENOENT)
			return STATUS_HINT;
		if (err == EBUSY)
			return ctx->evict ?
				" (`belugactl status` counts its mappings)" :
				" (`belugactl status` counts its mappings; add --evict to "
				"evict the published blocks)";
	}
	return "";
}
