/*
 * softnic's fake sysfs for provider mode: the tree under SYSFS_PATH through
 * which rdma-core's libibverbs, finding no kernel devices, discovers
 * softnic0 (class/infiniband_verbs/<uverbs>/{ibdev,dev,abi_version} and
 * class/infiniband/softnic0/...), and later reads the GUID, the GIDs and
 * the P_Keys that it never asks a provider for. The preload writes the
 * static part before libibverbs looks; the provider adds the port's
 * values when softnic starts. Every file is written whole (a temporary,
 * then rename) because other processes may read it meanwhile. No state,
 * no allocation: it is linked into both libraries.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "softnic_sysfs.h"

/* mkdir -p of the directories of root/rel (and rel itself if dir) */
static int sn_sysfs_mkdirs(const char *root, const char *rel, bool last_too)
{
	char p[SN_SYSFS_PATH];
	size_t rl = strlen(root);
	int n = snprintf(p, sizeof(p), "%s/%s", root, rel);
	char *s;

	if (n < 0 || (size_t)n >= sizeof(p))
		return -ENAMETOOLONG;
	for (s = p + rl + 1; (s = strchr(s, '/')); s++) {
		*s = 0;
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (last_too && mkdir(p, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int sn_sysfs_put(const char *root, const char *rel, const char *text)
{
	char p[SN_SYSFS_PATH], tmp[SN_SYSFS_PATH + 32];
	size_t len = strlen(text);
	int fd, ret;

	ret = sn_sysfs_mkdirs(root, rel, false);
	if (ret)
		return ret;
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	snprintf(tmp, sizeof(tmp), "%s.%d.tmp", p, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (write(fd, text, len) != (ssize_t)len) {
		ret = errno ? -errno : -EIO;
		close(fd);
		unlink(tmp);
		return ret;
	}
	close(fd);
	if (rename(tmp, p) < 0) {
		ret = -errno;
		unlink(tmp);
		return ret;
	}
	return 0;
}

int sn_sysfs_make(const char *root)
{
	static const char *const files[][2] = {
		{ "class/infiniband_verbs/abi_version", "6\n" },
		{ "class/infiniband_verbs/" SN_SYSFS_UVERBS "/ibdev",
		  SN_SYSFS_IBDEV "\n" },
		/* the character device libibverbs opens: /dev/null's number,
		 * the preload sends its open there */
		{ "class/infiniband_verbs/" SN_SYSFS_UVERBS "/dev", "1:3\n" },
		{ "class/infiniband_verbs/" SN_SYSFS_UVERBS "/abi_version", "1\n" },
		{ "class/infiniband/" SN_SYSFS_IBDEV "/node_type", "1: CA\n" },
		{ "class/infiniband/" SN_SYSFS_IBDEV "/fw_ver", "1.0.0\n" },
		{ "class/infiniband/" SN_SYSFS_IBDEV "/hw_rev", "1\n" },
		{ "class/infiniband/" SN_SYSFS_IBDEV "/hca_type", "softnic\n" },
		{ "class/infiniband/" SN_SYSFS_IBDEV "/board_id", "SOFTNIC0001\n" },
		{ "class/infiniband/" SN_SYSFS_IBDEV "/node_desc",
		  "softnic userspace RDMA device\n" },
		/* the port's network interface: the loopback one, which
		 * carries the host addresses softnic's CM resolves to its port */
		{ "class/infiniband/" SN_SYSFS_IBDEV "/device/net/lo/ifindex", "1\n" },
		{ "class/infiniband/" SN_SYSFS_IBDEV "/" SN_SYSFS_MARK, "softnic\n" },
		{ "class/infiniband/" SN_SYSFS_IBDEV "/" SN_SYSFS_NETMARK, "softnic\n" },
	};
	char p[SN_SYSFS_PATH];
	size_t i;
	int ret;

	snprintf(p, sizeof(p), "%s/class/infiniband/%s/%s", root, SN_SYSFS_IBDEV,
		 SN_SYSFS_NETMARK);
	if (access(p, F_OK) == 0)
		return 0; /* made before (by us or another process) */
	if (mkdir(root, 0755) < 0 && errno != EEXIST)
		return -errno;
	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		ret = sn_sysfs_put(root, files[i][0], files[i][1]);
		if (ret)
			return ret;
	}
	return 0;
}

bool sn_sysfs_ours(const char *root)
{
	char p[SN_SYSFS_PATH];

	if (!root || !*root)
		return false;
	snprintf(p, sizeof(p), "%s/class/infiniband/%s/%s", root, SN_SYSFS_IBDEV,
		 SN_SYSFS_MARK);
	return access(p, F_OK) == 0;
}
