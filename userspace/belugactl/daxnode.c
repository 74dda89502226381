// SPDX-License-Identifier: GPL-2.0
/*
 * The /dev/daxX.Y node of a device-dax instance that belugactl attaches.
 *
 * The module claims the instance's range while device_dax stays bound to
 * it (kmod/region.c says why), so the node still opens and maps the
 * pool's memory for whoever may open it. belugactl narrows that: attach
 * refuses an instance that another process holds open or mapped (unless
 * --force), and sets the node's mode to 0000 while the range is in a
 * pool, so that only a process with CAP_DAC_OVERRIDE can open it.
 * detach puts the mode back. The mode it had is kept in a state file,
 * $BELUGA_RUN_DIR/NAME.mode (/run/beluga by default): "PATH MODE" in
 * octal, written before the mode changes and removed once it is back.
 *
 * BELUGA_DEV_ROOT (default /dev) and BELUGA_RUN_DIR let the host tests
 * point at files of their own.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "belugactl.h"

#define DAX_NODE_TIGHT	0000

static const char *dev_root(void)
{
	const char *root = getenv("BELUGA_DEV_ROOT");

	return root && *root ? root : "/dev";
}

static const char *run_dir(void)
{
	const char *dir = getenv("BELUGA_RUN_DIR");

	return dir && *dir ? dir : "/run/beluga";
}

/* "dax0.0" of "dax0.0" or "/dev/dax0.0". */
static const char *dax_name(const char *dax)
{
	const char *slash = strrchr(dax, '/');

	return slash ? slash + 1 : dax;
}

void dax_node_path(const char *dax, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s", dev_root(), dax_name(dax));
}

/* mkdir -p of the state directory (/run may be missing in a small initramfs). */
static int make_run_dir(void)
{
	char dir[512];
	size_t i, len;

	len = strlen(run_dir());
	if (len >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, run_dir(), len + 1);
	for (i = 1; i <= len; i++) {
		if (dir[i] && dir[i] != '/')
			continue;
		dir[i] = '\0';
		if (mkdir(dir, 0700) && errno != EEXIST)
			return -errno;
		if (i < len)
			dir[i] = '/';
	}
	return 0;
}

static void state_path(const char *dax, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s.mode", run_dir(), dax_name(dax));
}

/* Is the file that @path names (after links) the node @node? */
static int same_node(const char *path, const struct stat *node)
{
	struct stat st;

	if (stat(path, &st))
		return 0;
	if (S_ISCHR(node->st_mode))
		return S_ISCHR(st.st_mode) && st.st_rdev == node->st_rdev;
	return st.st_dev == node->st_dev && st.st_ino == node->st_ino;
}

/* Does /proc/@pid/maps list a mapping of @node's inode? */
static int maps_node(long pid, const struct stat *node)
{
	char path[64], line[512];
	unsigned int maj, min;
	unsigned long long ino;
	int found = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		/* start-end perms offset MAJ:MIN inode [path] */
		if (sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &min, &ino) != 3)
			continue;
		found = ino && ino == (unsigned long long)node->st_ino &&
			maj == major(node->st_dev) && min == minor(node->st_dev);
	}
	fclose(f);
	return found;
}

/* Does process @pid hold @node open (an fd) or mapped? */
static int holds_node(long pid, const struct stat *node)
{
	char dir[64], fd[64 + 256];
	struct dirent *de;
	int found = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%ld/fd", pid);
	d = opendir(dir);
	if (d) {
		while (!found && (de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			snprintf(fd, sizeof(fd), "%s/%s", dir, de->d_name);
			found = same_node(fd, node);
		}
		closedir(d);
	}
	return found || maps_node(pid, node);
}

int dax_node_holders(const char *path, struct dax_holder *out, int max)
{
	struct stat node;
	struct dirent *de;
	int n = 0;
	DIR *d;

	if (stat(path, &node))
		return -errno;
	d = opendir("/proc");
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char *end, comm_path[64];
		long pid = strtol(de->d_name, &end, 10);
		FILE *f;

		if (*end || pid <= 0 || pid == (long)getpid())
			continue;
		if (!holds_node(pid, &node))
			continue;
		if (n < max) {
			out[n].pid = (int)pid;
			out[n].comm[0] = '\0';
			snprintf(comm_path, sizeof(comm_path), "/proc/%ld/comm", pid);
			f = fopen(comm_path, "re");
			if (f) {
				if (fgets(out[n].comm, sizeof(out[n].comm), f))
					out[n].comm[strcspn(out[n].comm, "\n")] = '\0';
				fclose(f);
			}
		}
		n++;
	}
	closedir(d);
	return n;
}

int dax_node_tighten(const char *dax, const char *path)
{
	char state[512];
	struct stat st;
	int ret = 0;
	FILE *f;

	if (stat(path, &st))
		return -errno;
	state_path(dax, state, sizeof(state));
	/* A mode saved by an earlier attach is the one to restore. */
	if (!access(state, F_OK)) {
		ret = 1;
	} else {
		ret = make_run_dir();
		if (ret)
			return ret;
		f = fopen(state, "we");
		if (!f)
			return -errno;
		fprintf(f, "%s %04o\n", path, (unsigned int)(st.st_mode & 07777));
		if (fclose(f)) {
			unlink(state);
			return -EIO;
		}
	}
	if (chmod(path, DAX_NODE_TIGHT))
		return -errno;
	return ret;
}

int dax_node_restore(const char *dax, unsigned int *mode)
{
	char state[512], path[512];
	unsigned int m;
	int ret = 0;
	FILE *f;

	state_path(dax, state, sizeof(state));
	f = fopen(state, "re");
	if (!f)
		return errno == ENOENT ? 1 : -errno;
	if (fscanf(f, "%511s %o", path, &m) != 2 || m > 07777)
		ret = -EINVAL;
	fclose(f);
	if (!ret && chmod(path, (mode_t)m) && errno != ENOENT)
		return -errno;
	unlink(state);
	if (!ret && mode)
		*mode = m;
	return ret;
}
