// SPDX-License-Identifier: GPL-2.0
/*
 * Who may read and write Beluga's sysfs files: the module parameters are
 * fixed at load (0444, writes refused even for root).
 */
#include "beluga_test.h"

#define PARAMS	"/sys/module/beluga/parameters/"

/* Parameters read at load: read-only afterwards. */
static const char *const load_params[] = {
	"pools", "block_size", "dax", "node",
	"host_id", "mh_heartbeat_ms", "mh_lease_ms",
};

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
	/* the test knob is meant to be written at runtime, by root only */
	ASSERT_EQ(0, stat(PARAMS "mh_stall_heartbeat", &st));
	EXPECT_EQ(0600, st.st_mode & 07777);
}

TEST_HARNESS_MAIN
