/*
 * softnic fabric: the shared directory every softnic process on a host uses
 * and its files (the fabric file, pid files, MR tables, event FIFOs), the
 * cleanup of what dead processes left, the port's LID and GIDs, the NIC
 * clock and the settings read from the environment. Memory registration is
 * in softnic_mr.c, reaching other processes' objects in softnic_peer.c.
 * Nothing here runs on the post/poll fast path except sn_now_ns.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netpacket/packet.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "softnic_int.h"
#include "softnic_sysfs.h"

struct sn_global sn_g = { .lock = PTHREAD_MUTEX_INITIALIZER };

#define SN_FAB_MAGIC 0x736e666162726963ull

uint64_t sn_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int64_t sn_clk_ppb;

uint64_t sn_nic_ticks(uint64_t host_ns)
{
	__int128 skew = (__int128)host_ns * sn_clk_ppb / 1000000000;
	uint64_t ns = (uint64_t)((int64_t)host_ns + (int64_t)skew + sn_g.clk_offset);

	/* mlx5: a free-running counter at hca_core_clock (156.25 MHz), not ns */
	if (SN_UNLIKELY(sn_g.quirk_mlx5))
		return (uint64_t)((unsigned __int128)ns * SN_MLX5_CLOCK_KHZ / 1000000);
	return ns;
}

void sn_path(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/%s", sn_g.dir, name);
}

void *sn_zalloc(size_t size)
{
	void *p = calloc(1, size);

	if (!p)
		errno = ENOMEM;
	return p;
}

int sn_shm_publish(char *name)
{
	char from[512], to[512];

	sn_path(from, sizeof(from), name);
	memmove(name, name + 1, strlen(name)); /* its NUL too */
	sn_path(to, sizeof(to), name);
	if (rename(from, to) < 0) {
		unlink(from);
		return -EIO;
	}
	return 0;
}

void sn_unlink(const char *name)
{
	char p[512];

	sn_path(p, sizeof(p), name);
	unlink(p);
}

int sn_shm_create(const char *name, size_t len, void **out)
{
	return sn_shm_create_reserve(name, len, len, out);
}

/* As sn_shm_create, but the mapping spans `reserve` bytes (>= len): the
 * file can grow later (sn_shm_grow) under every mapping made this way. */
int sn_shm_create_reserve(const char *name, size_t len, size_t reserve, void **out)
{
	char p[512];
	int fd;
	void *m;

	sn_path(p, sizeof(p), name);
	fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	/* reserve the pages now: a full tmpfs must fail here with ENOSPC, not
	 * later with SIGBUS in whichever process touches the page first */
	int e = posix_fallocate(fd, 0, (off_t)len);
	if (e) {
		close(fd);
		unlink(p);
		return -e;
	}
	m = mmap(NULL, reserve, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		unlink(p);
		return -ENOMEM;
	}
	*out = m;
	return 0;
}

/* Make a fabric file at least len bytes long, its new pages reserved now. */
int sn_shm_grow(const char *name, size_t len)
{
	char p[512];
	int fd, e;

	sn_path(p, sizeof(p), name);
	fd = open(p, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	e = posix_fallocate(fd, 0, (off_t)len);
	close(fd);
	return -e;
}

int sn_shm_map(const char *name, void **out, size_t *len)
{
	return sn_shm_map_reserve(name, 0, out, len);
}

/* Map a fabric file over at least `reserve` bytes (a CQ's ring may grow). */
int sn_shm_map_reserve(const char *name, size_t reserve, void **out, size_t *len)
{
	char p[512];
	struct stat st;
	int fd;
	void *m;

	sn_path(p, sizeof(p), name);
	fd = open(p, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || st.st_size == 0) {
		close(fd);
		return -ENOENT;
	}
	if (reserve < (size_t)st.st_size)
		reserve = (size_t)st.st_size;
	m = mmap(NULL, reserve, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -ENOMEM;
	*out = m;
	*len = reserve;
	return 0;
}

/* A number from the environment, at most max; anything else (not a number,
 * negative, trailing junk, too large) is said once on stderr and the default
 * used: a typo must not become 584 years of latency or a division by zero. */
static uint64_t env_u64(const char *name, uint64_t dflt, uint64_t max)
{
	const char *v = getenv(name);
	char *end;

	if (!v || !*v)
		return dflt;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 0);
	if (errno || end == v || *end || strchr(v, '-') || n > max) {
		fprintf(stderr,
			"softnic: %s=%s: not a number from 0 to %llu; using %llu\n", name,
			v, (unsigned long long)max, (unsigned long long)dflt);
		return dflt;
	}
	return n;
}

static uint64_t sn_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211ull;
	return h;
}

/* Liveness of a softnic process: it holds an exclusive flock on its
 * "pid-<procid>" file for its whole life; the kernel drops the lock when
 * the process dies, however it dies. Unlike kill(pid, 0) this also works
 * across PID namespaces sharing one fabric (containers, build sandboxes). */
bool sn_proc_alive(const char *procid)
{
	char name[64], p[512];
	bool alive = true;
	int fd;

	if (!strcmp(procid, sn_g.procid))
		return true;
	snprintf(name, sizeof(name), "pid-%s", procid);
	sn_path(p, sizeof(p), name);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno != ENOENT;
	if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
		alive = false;
		flock(fd, LOCK_UN);
	}
	close(fd);
	return alive;
}

/* the procid in a fabric file name: "<kind>-<pid>-<hex>[-<n>]" */
static bool sn_name_procid(const char *n, char *out, size_t len)
{
	const char *a = strchr(n, '-'), *b;
	size_t l;

	if (!a)
		return false;
	b = strchr(a + 1, '-');
	if (!b)
		return false;
	b++;
	while (*b && *b != '-')
		b++;
	l = (size_t)(b - (a + 1));
	if (l + 1 > len)
		return false;
	memcpy(out, a + 1, l);
	out[l] = 0;
	return true;
}

/* True when no live softnic process has a "pid-" file in the fabric. */
static bool sn_fabric_unused(void)
{
	DIR *d = opendir(sn_g.dir);
	struct dirent *de;
	bool unused = true;

	if (!d)
		return false;
	while (unused && (de = readdir(d)))
		if (!strncmp(de->d_name, "pid-", 4) && sn_proc_alive(de->d_name + 4))
			unused = false;
	closedir(d);
	return unused;
}

/* The fabric file at path was made by another softnic build. When no process
 * uses it any more (a rebuild or an upgrade, the usual case) it is made anew for
 * this build: its counters zeroed, then its fingerprint set. The files of the
 * old processes go with them as dead (sn_cleanup_dead). Under an exclusive lock
 * of the file, so that one of several new processes does it; the others find it
 * done. True when the fabric is now this build's. */
static bool sn_fabric_renew(const char *path, uint64_t want)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	bool ok = false;

	if (fd < 0)
		return false;
	if (flock(fd, LOCK_EX) == 0) {
		uint64_t have = atomic_load(&sn_g.fab->magic);
		if (have == want) {
			ok = true;
		} else if (sn_fabric_unused()) {
			/* magic last: until then newcomers see a foreign fabric
			 * and wait for this lock */
			atomic_store(&sn_g.fab->next_qpn, 0);
			atomic_store(&sn_g.fab->next_srqn, 0);
			memset(&sn_g.fab->port, 0, sizeof(sn_g.fab->port));
			atomic_store(&sn_g.fab->magic, want);
			ok = true;
		}
		flock(fd, LOCK_UN);
	}
	close(fd);
	return ok;
}

/* The owner's procid from the header of a QP's or XRC SRQ's shared file
 * (the 32 bytes at `at`; empty if the file is shorter); -1 if the
 * file cannot be opened. */
static int sn_shm_owner(const char *name, size_t at, char procid[32])
{
	char p[512];
	int fd;

	sn_path(p, sizeof(p), name);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (pread(fd, procid, 32, (off_t)at) != 32)
		procid[0] = 0;
	procid[31] = 0;
	close(fd);
	return 0;
}

/* Remove files left by softnic processes that no longer exist. */
static void sn_cleanup_dead(void)
{
	DIR *d = opendir(sn_g.dir);
	struct dirent *de;
	char dead[16][32];
	int ndead = 0;

	if (!d)
		return;
	while ((de = readdir(d))) {
		const char *n = de->d_name;
		char procid[32] = "", p[512];
		bool is_dead = false;
		size_t at;

		if (n[0] == '.')
			continue;
		if (!strncmp(n, "qp-", 3)) {
			at = offsetof(struct sn_qp_shm, procid);
			if (sn_shm_owner(n, at, procid) < 0)
				continue;
		} else if (!strncmp(n, "xsrq-", 5)) {
			at = offsetof(struct sn_srq_shm, procid);
			if (sn_shm_owner(n, at, procid) < 0)
				continue;
		} else if (!sn_name_procid(n, procid, sizeof(procid))) {
			continue;
		}
		if (!procid[0] || !strcmp(procid, sn_g.procid))
			continue;
		for (int i = 0; i < ndead; i++)
			if (!strcmp(dead[i], procid))
				is_dead = true;
		if (!is_dead && !sn_proc_alive(procid)) {
			is_dead = true;
			if (ndead < 16)
				snprintf(dead[ndead++], sizeof(dead[0]), "%s", procid);
		}
		if (is_dead) {
			sn_path(p, sizeof(p), n);
			unlink(p);
		}
	}
	closedir(d);
}

/* Provider mode: the port's values in the fake sysfs that libibverbs reads
 * for ibv_get_device_guid, ibv_query_gid(_ex/_table) and ibv_query_pkey. */
static void sn_write_fake_sysfs(void)
{
	const char *root = getenv("SYSFS_PATH");
	const char *dev = "class/infiniband/" SN_SYSFS_IBDEV;
	char rel[160], v[64];
	uint64_t g = sn_g.guid;
	int i, k;

	if (!sn_sysfs_ours(root))
		return;
	snprintf(v, sizeof(v), "%04x:%04x:%04x:%04x\n", (unsigned)(g >> 48) & 0xffff,
		 (unsigned)(g >> 32) & 0xffff, (unsigned)(g >> 16) & 0xffff,
		 (unsigned)g & 0xffff);
	snprintf(rel, sizeof(rel), "%s/node_guid", dev);
	sn_sysfs_put(root, rel, v);
	snprintf(rel, sizeof(rel), "%s/sys_image_guid", dev);
	sn_sysfs_put(root, rel, v);
	for (i = 0; i < sn_g.ngid; i++) {
		char *p = v;

		for (k = 0; k < 8; k++)
			p += sprintf(p, "%02x%02x%s", sn_g.gid[i].raw[2 * k],
				     sn_g.gid[i].raw[2 * k + 1], k < 7 ? ":" : "\n");
		snprintf(rel, sizeof(rel), "%s/ports/1/gids/%d", dev, i);
		sn_sysfs_put(root, rel, v);
		snprintf(rel, sizeof(rel), "%s/ports/1/gid_attrs/types/%d", dev, i);
		sn_sysfs_put(root, rel, sn_g.eth ? "RoCE v2\n" : "IB/RoCE v1\n");
	}
	snprintf(rel, sizeof(rel), "%s/ports/1/pkeys/0", dev);
	sn_sysfs_put(root, rel, "0xffff\n");
	snprintf(rel, sizeof(rel), "%s/ports/1/link_layer", dev);
	sn_sysfs_put(root, rel, sn_g.eth ? "Ethernet\n" : "InfiniBand\n");
}

static void sn_write_sysfs(void)
{
	static const char *const files[][2] = {
		{ "node_type", "1: CA\n" },
		{ "fw_ver", "1.0.0\n" },
		{ "hw_rev", "1\n" },
		{ "hca_type", "softnic\n" },
		{ "board_id", "SOFTNIC0001\n" },
		{ "node_desc", "softnic userspace RDMA device\n" },
	};
	char p[512];
	size_t i;

	sn_path(p, sizeof(p), "sysfs");
	mkdir(p, 0700);
	sn_path(p, sizeof(p), "sysfs/softnic0");
	mkdir(p, 0700);
	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char f[600];
		int fd;

		snprintf(f, sizeof(f), "%s/%s", p, files[i][0]);
		fd = open(f, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd >= 0) {
			if (write(fd, files[i][1], strlen(files[i][1])) < 0) {
				/* informational only */
			}
			close(fd);
		}
	}
	sn_write_fake_sysfs();
}

static void sn_make_gids(void)
{
	struct ifaddrs *ifa = NULL, *i;
	unsigned char mac[6] = { 0x02, 0x53, 0x4e, 0, 0, 1 };
	uint32_t ip4 = 0;
	union ibv_gid *g = sn_g.gid;

	memset(g, 0, sizeof(sn_g.gid));
	if (!sn_g.eth) {
		g[0].global.subnet_prefix = htobe64(0xfe80000000000000ull);
		g[0].global.interface_id = htobe64(sn_g.guid);
		sn_g.ngid = 1;
		return;
	}
	if (getifaddrs(&ifa) == 0) {
		for (i = ifa; i; i = i->ifa_next) {
			if (!i->ifa_addr || (i->ifa_flags & IFF_LOOPBACK))
				continue;
			if (i->ifa_addr->sa_family == AF_PACKET) {
				struct sockaddr_ll *ll =
					(struct sockaddr_ll *)i->ifa_addr;

				if (ll->sll_halen == 6)
					memcpy(mac, ll->sll_addr, 6);
			} else if (i->ifa_addr->sa_family == AF_INET && !ip4) {
				ip4 = ((struct sockaddr_in *)i->ifa_addr)
					      ->sin_addr.s_addr;
			}
		}
		freeifaddrs(ifa);
	}
	/* RoCE v2: index 0 the link-local EUI-64 of the MAC, index 1 the
	 * IPv4-mapped address, as the kernel fills a RoCE GID table. */
	g[0].raw[0] = 0xfe;
	g[0].raw[1] = 0x80;
	g[0].raw[8] = mac[0] ^ 2;
	g[0].raw[9] = mac[1];
	g[0].raw[10] = mac[2];
	g[0].raw[11] = 0xff;
	g[0].raw[12] = 0xfe;
	g[0].raw[13] = mac[3];
	g[0].raw[14] = mac[4];
	g[0].raw[15] = mac[5];
	if (!ip4)
		ip4 = htonl(0x7f000001);
	g[1].raw[10] = 0xff;
	g[1].raw[11] = 0xff;
	memcpy(&g[1].raw[12], &ip4, 4);
	sn_g.ngid = 2;
}

/* The fabric holds a copy of every registered MR: /dev/shm (memory) when it is
 * writable and roomy, else /tmp. Containers often give /dev/shm only 64 MiB. */
static bool sn_shm_roomy(const char *dir)
{
	struct statvfs v;

	return access(dir, W_OK) == 0 && statvfs(dir, &v) == 0 &&
	       (uint64_t)v.f_bavail * v.f_frsize >= (512ull << 20);
}

/* mkdir -p: SOFTNIC_FABRIC may name a directory whose parents do not exist yet. */
static int sn_mkdirs(const char *dir)
{
	char p[sizeof(sn_g.dir)];

	snprintf(p, sizeof(p), "%s", dir);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, 0700) < 0 && errno != EEXIST)
			return -1;
		*s = '/';
	}
	if (mkdir(p, 0700) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

/* Where the fabric lives: SOFTNIC_FABRIC, else /dev/shm or /tmp per user. */
static int sn_init_dir(void)
{
	const char *dir = getenv("SOFTNIC_FABRIC");
	uid_t uid = getuid();
	struct timespec ts;

	if (dir && *dir)
		snprintf(sn_g.dir, sizeof(sn_g.dir), "%s", dir);
	else if (sn_shm_roomy("/dev/shm"))
		snprintf(sn_g.dir, sizeof(sn_g.dir), "/dev/shm/softnic-%u",
			 (unsigned)uid);
	else
		snprintf(sn_g.dir, sizeof(sn_g.dir), "/tmp/softnic-%u", (unsigned)uid);
	if (sn_mkdirs(sn_g.dir) < 0)
		return -errno;
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(sn_g.procid, sizeof(sn_g.procid), "%d-%08lx", (int)sn_g.pid,
		 (unsigned long)((ts.tv_nsec ^ (ts.tv_sec << 20)) & 0xffffffff));
	return 0;
}

/* The fabric file: created by whoever comes first, same size for all, and
 * every process of a fabric must share the layouts of its files. */
static int sn_init_fabric_file(void)
{
	uint64_t want = SN_FAB_MAGIC ^ ((uint64_t)sizeof(struct sn_qp_shm) << 40) ^
			((uint64_t)sizeof(struct sn_cq_shm) << 28) ^
			((uint64_t)sizeof(struct sn_cqe) << 20) ^
			((uint64_t)sizeof(struct sn_mrt_ent) << 8) ^
			((uint64_t)sizeof(struct sn_mw_ent) << 52) ^
			sizeof(struct sn_srq_shm);
	uint64_t have = 0;
	static bool said;
	struct stat st;
	char p[512];
	void *m;
	int fd;

	sn_path(p, sizeof(p), "fabric");
	fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) == 0 && st.st_size < (off_t)sizeof(struct sn_fabric_shm) &&
	    ftruncate(fd, sizeof(struct sn_fabric_shm)) < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	m = mmap(NULL, sizeof(struct sn_fabric_shm), PROT_READ | PROT_WRITE, MAP_SHARED,
		 fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -ENOMEM;
	sn_g.fab = m;
	if (atomic_compare_exchange_strong(&sn_g.fab->magic, &have, want) ||
	    have == want || sn_fabric_renew(p, want))
		return 0;
	if (!said)
		fprintf(stderr,
			"softnic: %s: fabric in use by processes of another softnic "
			"build; set SOFTNIC_FABRIC to a fresh directory\n",
			sn_g.dir);
	said = true;
	munmap(m, sizeof(struct sn_fabric_shm));
	sn_g.fab = NULL;
	return -EPROTO;
}

/* Our pid file, locked while we live: lock first, then rename into place,
 * so nobody may ever see it unlocked and take us for dead. */
static int sn_init_alive(void)
{
	char name[64], p[512], tmp[512];

	snprintf(name, sizeof(name), ".pid-%s", sn_g.procid);
	sn_path(tmp, sizeof(tmp), name);
	snprintf(name, sizeof(name), "pid-%s", sn_g.procid);
	sn_path(p, sizeof(p), name);
	sn_g.alive_fd = open(tmp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (sn_g.alive_fd < 0 || flock(sn_g.alive_fd, LOCK_EX) < 0 || rename(tmp, p) < 0)
		return -errno;
	return 0;
}

/* The port (link layer, LID, GUID, GIDs), the NIC clock and the latency
 * model, from the environment. */
static void sn_init_settings(void)
{
	const char *v = getenv("SOFTNIC_LINK");
	const char *p = getenv("SOFTNIC_CLOCK_PPM");
	char host[256] = "softnic";
	char *end = NULL;
	double ppm = p && *p ? strtod(p, &end) : 3.5;

	sn_g.eth =
		v && (!strcmp(v, "eth") || !strcmp(v, "ethernet") || !strcmp(v, "roce"));
	sn_g.lid = sn_g.eth ? 0 : (uint16_t)env_u64("SOFTNIC_LID", 1, 0xbfff);
	if (!sn_g.eth && !sn_g.lid)
		sn_g.lid = 1;
	gethostname(host, sizeof(host) - 1);
	sn_g.guid = 0x02534e0000000000ull | (sn_hash(host) & 0xffffffffffull);
	sn_make_gids();
	sn_g.clk_offset = (int64_t)env_u64("SOFTNIC_CLOCK_OFFSET_NS", 1000000000000000ull,
					   INT64_MAX / 2);
	if (p && *p && (*end || !(ppm >= -1000.0 && ppm <= 1000.0))) {
		fprintf(stderr,
			"softnic: SOFTNIC_CLOCK_PPM=%s: not a number from -1000 to 1000; "
			"using 3.5\n",
			p);
		ppm = 3.5;
	}
	sn_clk_ppb = (int64_t)(ppm * 1000.0);
	v = getenv("SOFTNIC_QUIRKS");
	if (v && !strcmp(v, "mlx5"))
		sn_g.quirk_mlx5 = true;
	else if (v && *v && strcmp(v, "none"))
		fprintf(stderr,
			"softnic: SOFTNIC_QUIRKS=%s: not mlx5 or none; no quirks\n", v);
	sn_g.lat_ns = env_u64("SOFTNIC_LATENCY_NS", 0, 60000000000ull);
	sn_g.ns_per_kib = env_u64("SOFTNIC_NS_PER_KIB", 0, 1000000000ull);
	sn_g.jitter_ns = env_u64("SOFTNIC_JITTER_NS", 0, 60000000000ull);
	sn_g.model = sn_g.lat_ns || sn_g.ns_per_kib || sn_g.jitter_ns;
}

int sn_init(void)
{
	char name[64];
	int ret = 0;
	void *m;

	pthread_mutex_lock(&sn_g.lock);
	if (sn_g.inited)
		goto out;
	sn_g.pid = getpid();
	ret = sn_init_dir();
	if (!ret)
		ret = sn_init_fabric_file();
	if (!ret)
		ret = sn_init_alive();
	if (ret)
		goto out;
	sn_cleanup_dead();
	snprintf(name, sizeof(name), "mrt-%s", sn_g.procid);
	ret = sn_shm_create(name, sizeof(struct sn_mrt_shm), &m);
	if (ret)
		goto out;
	sn_g.mrt = m;
	sn_init_settings();
	sn_write_sysfs();
	if (!atomic_load(&sn_g.fab->next_qpn)) {
		uint32_t z = 0;

		atomic_compare_exchange_strong(&sn_g.fab->next_qpn, &z, 0x10);
	}
	sn_g.inited = true;
out:
	if (ret && ret != -EPROTO && !sn_g.said_init_error) {
		/* without this line a program only sees "no devices" (ENOSYS) */
		fprintf(stderr, "softnic: cannot use fabric directory %s: %s\n", sn_g.dir,
			strerror(-ret));
		sn_g.said_init_error = true;
	}
	pthread_mutex_unlock(&sn_g.lock);
	return ret;
}
