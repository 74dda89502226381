// SPDX-License-Identifier: GPL-2.0
/*
 * Who may read and write Beluga's sysfs files: the module parameters are
 * fixed at load (0444, writes refused even for root), and the pool's
 * attributes that move with its use are root-only (0400) while its
 * geometry stays world-readable (kmod/sysfs.c explains the choice;
 * Documentation/ABI/testing/sysfs-class-misc-beluga lists the modes).
 */
#include "beluga_test.h"

#include <grp.h>

#define PARAMS	"/sys/module/beluga/parameters/"
#define POOL	"/sys/class/misc/beluga/"

/* Parameters read at load: read-only afterwards. */
static const char *const load_params[] = {
	"pools", "block_size", "dax", "node",
	"host_id", "mh_heartbeat_ms", "mh_lease_ms",
};

/* Pool attributes that use moves, or that hold physical addresses. */
static const char *const root_only[] = {
	"free_blocks", "allocated_blocks", "published_blocks",
	"pinned_blocks", "pins", "clients",
	"stats/allocs", "stats/frees", "stats/publishes",
	"stats/publish_races", "stats/lookups", "stats/lookup_keys",
	"stats/lookup_hits", "stats/releases", "stats/evictions",
	"stats/alloc_failures", "stats/pte_faults", "stats/pmd_faults",
	"region%u/free_blocks", "region%u/allocated_blocks",
	"region%u/published_blocks", "region%u/mappings",
	"region%u/phys_start",
};

/* Geometry: anyone may read it. */
static const char *const world_readable[] = {
	"abi_version", "block_size", "nr_regions", "map_size",
	"total_blocks",
	"region%u/name", "region%u/backend", "region%u/node",
	"region%u/length", "region%u/first_offset", "region%u/nr_blocks",
};

static void attr_path(char *buf, size_t len, const char *fmt, uint32_t slot)
{
	char rel[96];

	/* the only conversion in the names is the region's slot */
	snprintf(rel, sizeof(rel), fmt, slot);
	snprintf(buf, len, POOL "%s", rel);
}

static int read_text(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	return 0;
}

/* The module parameters: no runtime writes, whatever the caller. */
TEST(load_params_read_only)
{
	char path[128], before[256], after[256];
	struct stat st;
	unsigned int i;
	int r;

	for (i = 0; i < ARRAY_SIZE(load_params); i++) {
		snprintf(path, sizeof(path), PARAMS "%s", load_params[i]);
		ASSERT_EQ(0, stat(path, &st)) TH_LOG("%s: %s", path,
						     strerror(errno));
		EXPECT_EQ(0444, st.st_mode & 07777)
			TH_LOG("%s has mode %o", path, st.st_mode & 07777);
		ASSERT_EQ(0, read_text(path, before, sizeof(before)));
		/* the value it has: harmless if the write got through */
		r = bt_write_str(path, before);
		EXPECT_NE(0, r) TH_LOG("root could write %s at runtime",
				       path);
		ASSERT_EQ(0, read_text(path, after, sizeof(after)));
		EXPECT_STREQ(before, after);
	}
	/* the heartbeat stall is a debugfs fault attribute, not a parameter */
	EXPECT_NE(0, stat(PARAMS "mh_stall_heartbeat", &st));
	EXPECT_EQ(ENOENT, errno);
}

FIXTURE(sysfs) {
	struct bt_ctx c;
};

FIXTURE_SETUP(sysfs)
{
	uint64_t off;

	if (!bt_setup(&self->c, BT_ANY_BACKEND, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
	/* something for the counters to show */
	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &off));
}

FIXTURE_TEARDOWN(sysfs)
{
	bt_teardown(&self->c);
}

/*
 * A child that drops to uid 65534 cannot open the counters; it can read
 * the geometry. Root reads both, and the counters agree with STATS.
 */
TEST_F(sysfs, counters_root_only)
{
	uint32_t slot = self->c.att[0].region_id;
	struct beluga_stats st;
	char path[128], text[64];
	unsigned int i;
	uint64_t v;
	pid_t pid;
	int r;

	for (i = 0; i < ARRAY_SIZE(root_only); i++) {
		struct stat sb;

		attr_path(path, sizeof(path), root_only[i], slot);
		ASSERT_EQ(0, stat(path, &sb)) TH_LOG("%s: %s", path,
						     strerror(errno));
		EXPECT_EQ(0400, sb.st_mode & 07777)
			TH_LOG("%s has mode %o", path, sb.st_mode & 07777);
		r = read_text(path, text, sizeof(text));
		EXPECT_EQ(0, r) TH_LOG("root cannot read %s: %s", path,
				       strerror(-r));
	}
	for (i = 0; i < ARRAY_SIZE(world_readable); i++) {
		struct stat sb;

		attr_path(path, sizeof(path), world_readable[i], slot);
		ASSERT_EQ(0, stat(path, &sb)) TH_LOG("%s: %s", path,
						     strerror(errno));
		EXPECT_EQ(0444, sb.st_mode & 07777)
			TH_LOG("%s has mode %o", path, sb.st_mode & 07777);
	}
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	ASSERT_EQ(0, bt_read_sysfs_u64(POOL "allocated_blocks", &v));
	EXPECT_EQ(st.allocated_blocks, v);
	EXPECT_EQ(1, v);
	ASSERT_EQ(0, bt_read_sysfs_u64(POOL "stats/allocs", &v));
	EXPECT_EQ(st.allocs, v);

	pid = bt_fork(&self->c);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		CHILD_CHECK(setgroups(0, NULL) == 0);
		CHILD_CHECK(setresgid(65534, 65534, 65534) == 0);
		CHILD_CHECK(setresuid(65534, 65534, 65534) == 0);
		for (i = 0; i < ARRAY_SIZE(root_only); i++) {
			attr_path(path, sizeof(path), root_only[i], slot);
			r = read_text(path, text, sizeof(text));
			if (r != -EACCES)
				fprintf(stderr, "# child: %s: %s\n", path,
					r ? strerror(-r) : "readable");
			CHILD_CHECK(r == -EACCES);
		}
		for (i = 0; i < ARRAY_SIZE(world_readable); i++) {
			attr_path(path, sizeof(path), world_readable[i], slot);
			r = read_text(path, text, sizeof(text));
			if (r)
				fprintf(stderr, "# child: %s: %s\n", path,
					strerror(-r));
			CHILD_CHECK(r == 0);
		}
		_exit(0);
	}
	r = bt_wait(&self->c, pid);
	EXPECT_EQ(0, r) TH_LOG("the unprivileged child failed (%d)", r);
}

TEST_HARNESS_MAIN
