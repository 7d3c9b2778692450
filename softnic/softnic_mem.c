/*
 * softnic shared registered memory: memory the way DMA sees it.
 *
 * A NIC writes into physical pages, so every process that maps those pages
 * sees an RDMA WRITE. softnic's registration of private memory moves the
 * pages into a fabric file (softnic_fabric.c); doing that to pages that are
 * already shared would give the registering process new pages and leave
 * every other mapper on the old ones. So a run of registered memory that is
 * a shared mapping keeps its pages, and the MR table says how a peer maps
 * the same object:
 *   - a SysV segment (also SHM_HUGETLB) by its shmid: peers shmat() it;
 *   - any other shared file (a regular file, a tmpfs or hugetlbfs file, a
 *     memfd, the shmem object behind a MAP_SHARED|MAP_ANONYMOUS mapping
 *     inherited over fork) through a descriptor this process keeps open
 *     while the run is registered: peers open /proc/<pid>/fd/<fd>, which
 *     reopens the object itself (same uid or CAP_SYS_PTRACE).
 * That descriptor comes from /proc/self/map_files (needs CAP_SYS_ADMIN or
 * CAP_CHECKPOINT_RESTORE), else from a descriptor of the same inode the
 * program holds, else from the mapping's path. A shared anonymous mapping
 * has neither of the last two: unprivileged, softnic says so on stderr and
 * falls back to the private scheme for that range.
 *
 * Called from registration (under the fabric lock) and from a peer's first
 * access to a run; nothing here may run on the post/poll fast path.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "softnic_int.h"

struct sn_vma {
	uint64_t start, end, off, ino;
	dev_t dev;
	char perms[5];
	char path[256];
};

static int sn_vma_parse(const char *line, struct sn_vma *v)
{
	unsigned int maj, min;
	int n = 0;

	v->path[0] = 0;
	if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %" SCNu64 " %n",
		   &v->start, &v->end, v->perms, &v->off, &maj, &min, &v->ino, &n) < 7)
		return -1;
	v->dev = makedev(maj, min);
	if (n > 0) {
		snprintf(v->path, sizeof(v->path), "%s", line + n);
		v->path[strcspn(v->path, "\n")] = 0;
	}
	return 0;
}

/* One of our own fabric memory files ("m-<procid>-<n>"): pages softnic
 * backed at an earlier registration, private memory to the program. */
static bool sn_vma_ours(const struct sn_vma *v)
{
	const char *b = strrchr(v->path, '/');
	size_t n = strlen(sn_g.procid);

	return b && !strncmp(b + 1, "m-", 2) && !strncmp(b + 3, sn_g.procid, n) &&
	       b[3 + n] == '-';
}

/* Shared in the sense that matters here: another process may map these
 * pages and write them, and softnic must not replace them. */
static bool sn_vma_shared(const struct sn_vma *v)
{
	return v->perms[3] == 's' && v->perms[1] == 'w' && !sn_vma_ours(v);
}

/* The mapping that holds va, and the start of the first shared mapping
 * above va (UINT64_MAX when none). */
static int sn_vma_find(uint64_t va, struct sn_vma *out, uint64_t *next_shared)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char *line = NULL;
	size_t cap = 0;
	bool found = false;
	struct sn_vma v;

	*next_shared = UINT64_MAX;
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		if (sn_vma_parse(line, &v))
			continue;
		if (va >= v.start && va < v.end) {
			*out = v;
			found = true;
		} else if (v.start > va && sn_vma_shared(&v) && v.start < *next_shared) {
			*next_shared = v.start;
		}
		if (found && v.start > va && *next_shared != UINT64_MAX)
			break;
	}
	free(line);
	fclose(f);
	return found ? 0 : -EFAULT;
}

static bool sn_fd_is(int fd, const struct sn_vma *v)
{
	struct stat st;

	return fstat(fd, &st) == 0 && st.st_ino == v->ino && st.st_dev == v->dev;
}

/* A descriptor of the object behind v that a peer can reopen. */
static int sn_vma_fd(const struct sn_vma *v)
{
	char p[320];
	struct dirent *d;
	DIR *dir;
	int fd;

	snprintf(p, sizeof(p), "/proc/self/map_files/%" PRIx64 "-%" PRIx64, v->start,
		 v->end);
	fd = open(p, O_RDWR | O_CLOEXEC);
	if (fd >= 0 && sn_fd_is(fd, v))
		return fd;
	if (fd >= 0)
		close(fd);
	dir = opendir("/proc/self/fd");
	while (dir && (d = readdir(dir))) {
		int n = atoi(d->d_name);

		if (d->d_name[0] < '0' || d->d_name[0] > '9' || n == dirfd(dir))
			continue;
		if (!sn_fd_is(n, v) || (fcntl(n, F_GETFL) & O_ACCMODE) != O_RDWR)
			continue;
		fd = fcntl(n, F_DUPFD_CLOEXEC, 3);
		if (fd >= 0) {
			closedir(dir);
			return fd;
		}
	}
	if (dir)
		closedir(dir);
	if (v->path[0] == '/' && !strstr(v->path, " (deleted)")) {
		fd = open(v->path, O_RDWR | O_CLOEXEC);
		if (fd >= 0 && sn_fd_is(fd, v))
			return fd;
		if (fd >= 0)
			close(fd);
	}
	return -EACCES;
}

static void sn_mem_warn(const struct sn_vma *v)
{
	static bool said;

	if (said)
		return;
	said = true;
	fprintf(stderr,
		"softnic: registered memory %#" PRIx64 "-%#" PRIx64
		" is shared (%s) but cannot be reopened by peers without "
		"CAP_SYS_ADMIN; other processes mapping it will not see RDMA "
		"writes into it\n",
		v->start, v->end, v->path[0] ? v->path : "anonymous");
}

int64_t sn_mem_probe(uint64_t va, uint64_t len, struct sn_mem_src *src)
{
	uint64_t next_shared, n;
	struct sn_vma v;
	int ret = sn_vma_find(va, &v, &next_shared);

	memset(src, 0, sizeof(*src));
	if (ret)
		return ret;
	if (!sn_vma_shared(&v)) {
		/* private (or read-only, or pages softnic backed before): the
		 * fabric scheme, up to where shared memory begins (mappings in
		 * between are checked by the caller) */
		n = next_shared - va;
		return (int64_t)(n < len ? n : len);
	}
	n = v.end - va < len ? v.end - va : len;
	src->off = v.off + (va - v.start);
	if (!strncmp(v.path, "/SYSV", 5)) {
		struct shmid_ds ds;

		/* the inode of a SysV segment's file is its shmid */
		if (shmctl((int)v.ino, IPC_STAT, &ds) == 0 &&
		    src->off + n <= ds.shm_segsz) {
			src->kind = SN_MEM_SYSV;
			src->id = (int32_t)v.ino;
			return (int64_t)n;
		}
	}
	ret = sn_vma_fd(&v);
	if (ret < 0) {
		sn_mem_warn(&v);
		src->off = 0;
		return (int64_t)n;
	}
	src->kind = SN_MEM_FD;
	src->id = ret;
	src->pid = (uint32_t)getpid();
	return (int64_t)n;
}

void sn_mem_release(struct sn_mem_src *src)
{
	if (src->kind == SN_MEM_FD && src->id >= 0)
		close(src->id);
	src->kind = SN_MEM_FABRIC;
	src->id = -1;
}

void *sn_mem_peer_map(const struct sn_mem_src *src, uint64_t len)
{
	char p[64];
	struct stat st;
	uint64_t a, off0, mlen;
	void *m;
	int fd;

	if (src->kind == SN_MEM_SYSV) {
		struct shmid_ds ds;

		if (shmctl(src->id, IPC_STAT, &ds) || src->off + len > ds.shm_segsz)
			return NULL;
		m = shmat(src->id, NULL, 0);
		return m == (void *)-1 ? NULL : (char *)m + src->off;
	}
	if (src->kind != SN_MEM_FD)
		return NULL;
	snprintf(p, sizeof(p), "/proc/%u/fd/%d", src->pid, src->id);
	fd = open(p, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	/* hugetlbfs maps in huge pages: st_blksize is the page size */
	a = fstat(fd, &st) == 0 && st.st_blksize > 4096 ? (uint64_t)st.st_blksize : 4096;
	off0 = src->off & ~(a - 1);
	mlen = (src->off - off0 + len + a - 1) & ~(a - 1);
	m = mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off0);
	close(fd);
	return m == MAP_FAILED ? NULL : (char *)m + (src->off - off0);
}
