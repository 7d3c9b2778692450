/*
 * softnic fabric: the shared directory every softnic process on a host uses,
 * the files in it (QPs, CQs, SRQs, MR tables, MR backing memory, event
 * FIFOs), the NIC clock, and the caches through which one process reaches
 * another's objects.
 *
 * Memory registration backs the registered pages with a file of the fabric
 * (copy, then mmap MAP_SHARED|MAP_FIXED over the same addresses) so that a
 * peer can map the same pages and move data with plain loads and stores.
 * Nothing here may run on the post/poll fast path except the lookups in
 * sn_remote_ptr (lock-free once a file is mapped) and sn_now_ns.
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

	return (uint64_t)((int64_t)host_ns + (int64_t)skew + sn_g.clk_offset);
}

void sn_path(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/%s", sn_g.dir, name);
}

void sn_unlink(const char *name)
{
	char p[512];

	sn_path(p, sizeof(p), name);
	unlink(p);
}

int sn_shm_create(const char *name, size_t len, void **out)
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
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		unlink(p);
		return -ENOMEM;
	}
	*out = m;
	return 0;
}

int sn_shm_map(const char *name, void **out, size_t *len)
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
	m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -ENOMEM;
	*out = m;
	*len = (size_t)st.st_size;
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

		if (n[0] == '.')
			continue;
		if (!strncmp(n, "qp-", 3)) {
			struct sn_qp_shm h;
			int fd;

			sn_path(p, sizeof(p), n);
			fd = open(p, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				continue;
			if (pread(fd, &h, offsetof(struct sn_qp_shm, qp_type), 0) ==
			    (ssize_t)offsetof(struct sn_qp_shm, qp_type)) {
				memcpy(procid, h.procid, sizeof(procid));
				procid[sizeof(procid) - 1] = 0;
			}
			close(fd);
		} else if (!strncmp(n, "xsrq-", 5)) {
			struct sn_srq_shm h;
			int fd;

			sn_path(p, sizeof(p), n);
			fd = open(p, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				continue;
			if (pread(fd, &h, offsetof(struct sn_srq_shm, async_path), 0) ==
			    (ssize_t)offsetof(struct sn_srq_shm, async_path)) {
				memcpy(procid, h.procid, sizeof(procid));
				procid[sizeof(procid) - 1] = 0;
			}
			close(fd);
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

struct sn_run {
	uint64_t va, len;
	uint32_t file_id;
	int refs;
};

static struct sn_run **sn_runs;
static int sn_nruns, sn_runs_cap;

/* Runs in the child of fork() (from softnic_data.c's handler, with the
 * global lock held across the fork). */
void sn_fabric_atfork_child(void)
{
	int i;

	/* The child must not share registered pages with its parent (fork
	 * semantics are copy-on-write): give it private copies. */
	for (i = 0; i < sn_nruns; i++) {
		struct sn_run *r = sn_runs[i];
		void *tmp = mmap(NULL, r->len, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (tmp == MAP_FAILED)
			continue;
		memcpy(tmp, (void *)r->va, r->len);
		mremap(tmp, r->len, r->len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)r->va);
	}
	sn_nruns = 0;
	if (sn_g.alive_fd > 0)
		close(sn_g.alive_fd); /* the lock says the parent lives, not us */
	sn_g.alive_fd = -1;
	sn_g.inited = false;
	sn_g.cqs = NULL;
	sn_g.qps = NULL;
	sn_g.srqs = NULL;
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

int sn_init(void)
{
	const char *dir, *v;
	char name[64];
	uid_t uid = getuid();
	int ret = 0;
	void *m;

	pthread_mutex_lock(&sn_g.lock);
	if (sn_g.inited)
		goto out;
	sn_g.pid = getpid();
	dir = getenv("SOFTNIC_FABRIC");
	if (dir && *dir)
		snprintf(sn_g.dir, sizeof(sn_g.dir), "%s", dir);
	else if (sn_shm_roomy("/dev/shm"))
		snprintf(sn_g.dir, sizeof(sn_g.dir), "/dev/shm/softnic-%u",
			 (unsigned)uid);
	else
		snprintf(sn_g.dir, sizeof(sn_g.dir), "/tmp/softnic-%u", (unsigned)uid);
	if (sn_mkdirs(sn_g.dir) < 0) {
		ret = -errno;
		goto out;
	}
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		snprintf(sn_g.procid, sizeof(sn_g.procid), "%d-%08lx", (int)sn_g.pid,
			 (unsigned long)((ts.tv_nsec ^ (ts.tv_sec << 20)) & 0xffffffff));
	}
	/* the fabric file: created by whoever comes first, same size for all */
	{
		char p[512];
		int fd;
		struct stat st;

		sn_path(p, sizeof(p), "fabric");
		fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0) {
			ret = -errno;
			goto out;
		}
		if (fstat(fd, &st) == 0 &&
		    st.st_size < (off_t)sizeof(struct sn_fabric_shm) &&
		    ftruncate(fd, sizeof(struct sn_fabric_shm)) < 0) {
			ret = -errno;
			close(fd);
			goto out;
		}
		m = mmap(NULL, sizeof(struct sn_fabric_shm), PROT_READ | PROT_WRITE,
			 MAP_SHARED, fd, 0);
		close(fd);
		if (m == MAP_FAILED) {
			ret = -ENOMEM;
			goto out;
		}
		sn_g.fab = m;
		{
			/* every process of a fabric must share these layouts */
			uint64_t want = SN_FAB_MAGIC ^
					((uint64_t)sizeof(struct sn_qp_shm) << 40) ^
					((uint64_t)sizeof(struct sn_cq_shm) << 28) ^
					((uint64_t)sizeof(struct sn_cqe) << 20) ^
					((uint64_t)sizeof(struct sn_mrt_ent) << 8) ^
					((uint64_t)sizeof(struct sn_mw_ent) << 52) ^
					sizeof(struct sn_srq_shm);
			uint64_t have = 0;

			if (!atomic_compare_exchange_strong(&sn_g.fab->magic, &have,
							    want) &&
			    have != want && !sn_fabric_renew(p, want)) {
				static bool said;

				if (!said)
					fprintf(stderr,
						"softnic: %s: fabric in use by processes "
						"of another softnic build; "
						"set SOFTNIC_FABRIC to a fresh "
						"directory\n",
						sn_g.dir);
				said = true;
				munmap(m, sizeof(struct sn_fabric_shm));
				sn_g.fab = NULL;
				ret = -EPROTO;
				goto out;
			}
		}
	}
	{
		char p[512];

		char tmp[512];

		/* lock first, then rename into place: nobody may ever see our
		 * pid file unlocked and take us for dead */
		snprintf(name, sizeof(name), ".pid-%s", sn_g.procid);
		sn_path(tmp, sizeof(tmp), name);
		snprintf(name, sizeof(name), "pid-%s", sn_g.procid);
		sn_path(p, sizeof(p), name);
		sn_g.alive_fd = open(tmp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (sn_g.alive_fd < 0 || flock(sn_g.alive_fd, LOCK_EX) < 0 ||
		    rename(tmp, p) < 0) {
			ret = -errno;
			goto out;
		}
	}
	sn_cleanup_dead();
	snprintf(name, sizeof(name), "mrt-%s", sn_g.procid);
	ret = sn_shm_create(name, sizeof(struct sn_mrt_shm), &m);
	if (ret)
		goto out;
	sn_g.mrt = m;
	v = getenv("SOFTNIC_LINK");
	sn_g.eth =
		v && (!strcmp(v, "eth") || !strcmp(v, "ethernet") || !strcmp(v, "roce"));
	sn_g.lid = sn_g.eth ? 0 : (uint16_t)env_u64("SOFTNIC_LID", 1, 0xbfff);
	if (!sn_g.eth && !sn_g.lid)
		sn_g.lid = 1;
	{
		char host[256] = "softnic";

		gethostname(host, sizeof(host) - 1);
		sn_g.guid = 0x02534e0000000000ull | (sn_hash(host) & 0xffffffffffull);
	}
	sn_make_gids();
	sn_g.clk_offset = (int64_t)env_u64("SOFTNIC_CLOCK_OFFSET_NS", 1000000000000000ull,
					   INT64_MAX / 2);
	{
		const char *p = getenv("SOFTNIC_CLOCK_PPM");
		char *end = NULL;
		double ppm = p && *p ? strtod(p, &end) : 3.5;

		if (p && *p && (*end || !(ppm >= -1000.0 && ppm <= 1000.0))) {
			fprintf(stderr,
				"softnic: SOFTNIC_CLOCK_PPM=%s: not a number from -1000 "
				"to 1000; using 3.5\n",
				p);
			ppm = 3.5;
		}
		sn_clk_ppb = (int64_t)(ppm * 1000.0);
	}
	sn_g.lat_ns = env_u64("SOFTNIC_LATENCY_NS", 0, 60000000000ull);
	sn_g.ns_per_kib = env_u64("SOFTNIC_NS_PER_KIB", 0, 1000000000ull);
	sn_g.jitter_ns = env_u64("SOFTNIC_JITTER_NS", 0, 60000000000ull);
	sn_g.model = sn_g.lat_ns || sn_g.ns_per_kib || sn_g.jitter_ns;
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

/* ---------------- local memory registration ---------------- */

static struct sn_run *sn_run_find(uint64_t va)
{
	int i;

	for (i = 0; i < sn_nruns; i++)
		if (va >= sn_runs[i]->va && va < sn_runs[i]->va + sn_runs[i]->len)
			return sn_runs[i];
	return NULL;
}

static uint64_t sn_run_next_start(uint64_t va)
{
	uint64_t best = UINT64_MAX;
	int i;

	for (i = 0; i < sn_nruns; i++)
		if (sn_runs[i]->va > va && sn_runs[i]->va < best)
			best = sn_runs[i]->va;
	return best;
}

/* Whole pages: other objects' bytes, freed or being written by other threads,
 * are copied as they are, so neither ASan nor TSan may look. */
__attribute__((no_sanitize("address", "thread"))) static void
sn_copy_pages(void *dst, const void *src, size_t len)
{
	const volatile uint64_t *s = src;
	uint64_t *d = dst;

	for (size_t i = 0; i < len / 8; i++)
		d[i] = s[i];
}

static struct sn_run *sn_run_new(uint64_t va, uint64_t len)
{
	char name[96], p[512];
	struct sn_run *r;
	int fd;
	void *m;

	if (sn_nruns == sn_runs_cap) {
		int cap = sn_runs_cap ? sn_runs_cap * 2 : 64;
		struct sn_run **n = realloc(sn_runs, (size_t)cap * sizeof(*n));

		if (!n)
			return NULL;
		sn_runs = n;
		sn_runs_cap = cap;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->file_id = ++sn_g.next_file;
	snprintf(name, sizeof(name), "m-%s-%u", sn_g.procid, r->file_id);
	sn_path(p, sizeof(p), name);
	fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		goto fail;
	if ((errno = posix_fallocate(fd, 0, (off_t)len)) != 0)
		goto fail_fd; /* ENOSPC on a full fabric: the registration fails */
	/* copy what the process has there now (whole pages: more than the
	 * caller's buffer, so a sanitizer must not look) */
	{
		unsigned char *vec = malloc(len / 4096 + 1);
		void *tmp;
		int bad;

		if (!vec)
			goto fail_fd;
		bad = mincore((void *)va, len, vec); /* ENOMEM: not all mapped */
		free(vec);
		if (bad) {
			errno = EFAULT;
			goto fail_fd;
		}
		tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (tmp == MAP_FAILED)
			goto fail_fd;
		sn_copy_pages(tmp, (const void *)va, len);
		munmap(tmp, len);
	}
	m = mmap((void *)va, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	if (m == MAP_FAILED)
		goto fail_fd;
	close(fd);
	r->va = va;
	r->len = len;
	sn_runs[sn_nruns++] = r;
	return r;
fail_fd:
	close(fd);
	unlink(p);
fail:
	free(r);
	return NULL;
}

static void sn_run_put(struct sn_run *r)
{
	char name[96];
	int i;

	if (--r->refs > 0)
		return;
	/* The pages stay backed by the (now unlinked) file: the process keeps
	 * seeing its own data; peers that mapped it keep a stale view only. */
	snprintf(name, sizeof(name), "m-%s-%u", sn_g.procid, r->file_id);
	sn_unlink(name);
	for (i = 0; i < sn_nruns; i++)
		if (sn_runs[i] == r) {
			sn_runs[i] = sn_runs[--sn_nruns];
			break;
		}
	free(r);
}

int sn_mr_register(struct sn_mr *mr, void *addr, size_t len, uint64_t iova,
		   uint32_t access, uint32_t pd_id)
{
	uint64_t pg = 4096, a0 = (uint64_t)addr & ~(pg - 1);
	uint64_t a1 = ((uint64_t)addr + len + pg - 1) & ~(pg - 1);
	uint64_t cur = a0;
	struct sn_mrt_ent *e = NULL;
	uint32_t i;
	int ret = 0;

	pthread_mutex_lock(&sn_g.lock);
	for (i = 0; i < SN_MAX_MR; i++)
		if (!atomic_load(&sn_g.mrt->ent[i].key)) {
			e = &sn_g.mrt->ent[i];
			break;
		}
	if (!e) {
		ret = -ENOMEM;
		goto out;
	}
	mr->nruns = 0;
	while (cur < a1) {
		struct sn_run *r = sn_run_find(cur);

		if (mr->nruns == SN_MAX_RUNS) {
			ret = -ENOMEM;
			break;
		}
		if (!r) {
			uint64_t end = sn_run_next_start(cur);

			if (end > a1)
				end = a1;
			r = sn_run_new(cur, end - cur);
			if (!r) {
				ret = errno == EFAULT ? -EFAULT : -ENOMEM;
				break;
			}
		}
		r->refs++;
		mr->runs[mr->nruns++] = r;
		cur = r->va + r->len;
	}
	if (ret) {
		while (mr->nruns)
			sn_run_put(mr->runs[--mr->nruns]);
		goto out;
	}
	mr->idx = i;
	e->addr = iova;
	e->len = len;
	e->delta = (int64_t)((uint64_t)addr - iova);
	e->access = access;
	e->pd_id = pd_id;
	e->nruns = (uint32_t)mr->nruns;
	for (int k = 0; k < mr->nruns; k++) {
		e->runs[k].va = mr->runs[k]->va;
		e->runs[k].len = mr->runs[k]->len;
		e->runs[k].file_id = mr->runs[k]->file_id;
	}
	{
		static uint8_t gen;
		uint32_t key;

		gen = (uint8_t)(gen + 0x35);
		if (!gen)
			gen = 1;
		key = ((i + 1) << 8) | gen;
		mr->mr.lkey = mr->mr.rkey = key;
		atomic_store_explicit(&e->key, key, memory_order_release);
	}
out:
	pthread_mutex_unlock(&sn_g.lock);
	return ret;
}

/* EBUSY while a memory window is bound to the MR (ibv_dereg_mr(3)): the
 * window's accesses translate through the MR's entry. */
int sn_mr_unregister(struct sn_mr *mr)
{
	uint32_t key = mr->mr.lkey;

	pthread_mutex_lock(&sn_g.lock);
	for (uint32_t i = 0; i < SN_MAX_MW; i++) {
		struct sn_mw_ent *m = &sn_g.mrt->mw[i];

		if (!atomic_load(&m->type))
			continue;
		/* acquire: the latest binding (one racing with this dereg is
		 * the application's race, as on hardware) */
		(void)atomic_load(&m->seq);
		if (m->bound && m->mr_key == key) {
			pthread_mutex_unlock(&sn_g.lock);
			return -EBUSY;
		}
	}
	atomic_store(&sn_g.mrt->ent[mr->idx].key, 0);
	while (mr->nruns)
		sn_run_put(mr->runs[--mr->nruns]);
	pthread_mutex_unlock(&sn_g.lock);
	return 0;
}

/* ---------------- memory windows ---------------- */

bool sn_mw_wlock(struct sn_mw_ent *m)
{
	/* writers hold it for a few stores; a holder that died mid-way
	 * (kill -9) must not hang us: give up after ~a second of trying */
	for (uint32_t spins = 0; spins < (1u << 20); spins++) {
		uint32_t s = atomic_load_explicit(&m->seq, memory_order_relaxed);

		if (!(s & 1) && atomic_compare_exchange_weak_explicit(
					&m->seq, &s, s + 1, memory_order_acquire,
					memory_order_relaxed))
			return true;
		if ((spins & 255) == 255)
			sched_yield();
	}
	return false;
}

void sn_mw_wunlock(struct sn_mw_ent *m)
{
	atomic_fetch_add_explicit(&m->seq, 1, memory_order_release);
}

int sn_mw_alloc(struct sn_mw *mw, uint32_t type, uint32_t pd_id)
{
	static uint8_t gen;
	int ret = -ENOMEM;

	pthread_mutex_lock(&sn_g.lock);
	for (uint32_t i = 0; i < SN_MAX_MW; i++) {
		struct sn_mw_ent *m = &sn_g.mrt->mw[i];

		if (atomic_load(&m->type))
			continue;
		gen = (uint8_t)(gen + 0x4b);
		m->key = ((SN_MAX_MR + i + 1) << 8) | gen;
		m->bound = 0;
		m->pd_id = pd_id;
		m->qpn = 0;
		m->access = 0;
		m->mr_key = 0;
		m->addr = m->len = 0;
		atomic_store_explicit(&m->type, type, memory_order_release);
		mw->slot = i;
		mw->mw.rkey = m->key;
		ret = 0;
		break;
	}
	pthread_mutex_unlock(&sn_g.lock);
	return ret;
}

void sn_mw_free(struct sn_mw *mw)
{
	struct sn_mw_ent *m = &sn_g.mrt->mw[mw->slot];
	bool locked = sn_mw_wlock(m);

	m->bound = 0; /* deallocation unbinds (ibv_alloc_mw(3)) */
	if (locked)
		sn_mw_wunlock(m);
	atomic_store(&m->type, 0);
}

/* ---------------- peers ---------------- */

struct sn_maptab {
	uint32_t n;
	_Atomic(void *) slot[];
};

struct sn_rproc {
	char procid[32];
	bool self;
	struct sn_mrt_shm *mrt;
	/* mappings of its memory files, indexed by file_id; read without the
	 * lock, so the table and its size are published together */
	_Atomic(struct sn_maptab *) maps;
	struct sn_rproc *next;
};

static struct sn_rproc *sn_procs;

struct sn_rproc *sn_rproc_get(const char *procid)
{
	struct sn_rproc *p;
	char name[64];
	void *m;
	size_t len;

	pthread_mutex_lock(&sn_g.lock);
	for (p = sn_procs; p; p = p->next)
		if (!strcmp(p->procid, procid))
			goto out;
	p = calloc(1, sizeof(*p));
	if (!p)
		goto out;
	snprintf(p->procid, sizeof(p->procid), "%s", procid);
	p->self = !strcmp(procid, sn_g.procid);
	if (p->self) {
		p->mrt = sn_g.mrt;
	} else {
		snprintf(name, sizeof(name), "mrt-%s", procid);
		if (sn_shm_map(name, &m, &len) || len < sizeof(struct sn_mrt_shm)) {
			free(p);
			p = NULL;
			goto out;
		}
		p->mrt = m;
	}
	p->next = sn_procs;
	sn_procs = p;
out:
	pthread_mutex_unlock(&sn_g.lock);
	return p;
}

struct sn_mrt_shm *sn_rproc_mrt(struct sn_rproc *p)
{
	return p->mrt;
}

static void *sn_rproc_map(struct sn_rproc *p, uint32_t file_id)
{
	struct sn_maptab *t = atomic_load_explicit(&p->maps, memory_order_acquire);
	void *m = NULL;
	char name[96];
	size_t len;

	if (t && file_id < t->n) {
		m = atomic_load_explicit(&t->slot[file_id], memory_order_acquire);
		if (m)
			return m;
	}
	pthread_mutex_lock(&sn_g.lock);
	t = atomic_load_explicit(&p->maps, memory_order_relaxed);
	if (!t || file_id >= t->n) {
		uint32_t n = t ? t->n : 64;
		struct sn_maptab *nt;

		while (n <= file_id)
			n *= 2;
		/* Another thread (the helper, or a post on another QP) may be
		 * reading the old table right now: it is leaked, never freed,
		 * and the new one is published whole, its size with it. */
		nt = calloc(1, sizeof(*nt) + n * sizeof(nt->slot[0]));
		if (!nt)
			goto out;
		nt->n = n;
		for (uint32_t i = 0; t && i < t->n; i++)
			atomic_store_explicit(
				&nt->slot[i],
				atomic_load_explicit(&t->slot[i], memory_order_relaxed),
				memory_order_relaxed);
		atomic_store_explicit(&p->maps, nt, memory_order_release);
		t = nt;
	}
	m = atomic_load_explicit(&t->slot[file_id], memory_order_relaxed);
	if (!m) {
		snprintf(name, sizeof(name), "m-%s-%u", p->procid, file_id);
		if (sn_shm_map(name, &m, &len) == 0)
			atomic_store_explicit(&t->slot[file_id], m, memory_order_release);
		else
			m = NULL;
	}
out:
	pthread_mutex_unlock(&sn_g.lock);
	return m;
}

void *sn_remote_ptr(struct sn_rproc *p, const struct sn_mrt_ent *e, uint64_t va,
		    size_t *contig)
{
	uint32_t i, n = e->nruns < SN_MAX_RUNS ? e->nruns : SN_MAX_RUNS;

	for (i = 0; i < n; i++) {
		const struct sn_mr_run *r = &e->runs[i];

		if (va >= r->va && va < r->va + r->len) {
			char *base;

			*contig = (size_t)(r->va + r->len - va);
			if (p->self)
				return (void *)va;
			base = sn_rproc_map(p, r->file_id);
			return base ? base + (va - r->va) : NULL;
		}
	}
	return NULL;
}

#define SN_RQP_HASH 256
static struct sn_rqp *sn_rqps[SN_RQP_HASH];

static struct sn_rqp *sn_rqp_open(uint32_t qpn)
{
	struct sn_rqp *r = calloc(1, sizeof(*r));
	char name[64];
	void *m;
	size_t len;

	if (!r)
		return NULL;
	r->chan_fd = r->async_fd = -1;
	r->qpn = qpn;
	snprintf(name, sizeof(name), "qp-%u", qpn);
	if (sn_shm_map(name, &m, &len))
		goto fail;
	r->shm = m;
	r->shm_len = len;
	if (atomic_load(&r->shm->destroyed))
		goto fail;
	r->rq = &r->shm->rq;
	if (r->shm->has_srq) {
		if (sn_shm_map(r->shm->srq_name, &m, &len))
			goto fail;
		r->srq = m;
		r->rq = &r->srq->rq;
	}
	if (r->shm->rcq_name[0]) {
		if (sn_shm_map(r->shm->rcq_name, &m, &len))
			goto fail;
		r->rcq = m;
	}
	r->proc = sn_rproc_get(r->shm->procid);
	if (!r->proc)
		goto fail;
	r->pd_id = r->srq ? r->srq->pd_id : r->shm->pd_id;
	return r;
fail:
	free(r); /* mappings are leaked on purpose: cheap and rare */
	return NULL;
}

struct sn_rqp *sn_rqp_get(uint32_t qpn)
{
	struct sn_rqp *r, **pp;

	pthread_mutex_lock(&sn_g.lock);
	for (pp = &sn_rqps[qpn % SN_RQP_HASH]; (r = *pp); pp = &r->hnext) {
		if (r->qpn != qpn)
			continue;
		if (!atomic_load(&r->shm->destroyed) && !r->dead)
			goto out;
		*pp = r->hnext; /* stale: forget it, look again */
		break;
	}
	pthread_mutex_unlock(&sn_g.lock);
	r = sn_rqp_open(qpn);
	pthread_mutex_lock(&sn_g.lock);
	if (r) {
		r->hnext = sn_rqps[qpn % SN_RQP_HASH];
		sn_rqps[qpn % SN_RQP_HASH] = r;
	}
out:
	pthread_mutex_unlock(&sn_g.lock);
	return r;
}

uint64_t sn_coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Cheap enough for every post: a shared flag, and a look at the peer's
 * liveness lock at most every few milliseconds. */
/* XRC: a view of TGT QP tgt that delivers into XRC SRQ srqn (same domain
 * only): the SRQ's ring, CQ, PD and owner process. Cached forever. */
struct sn_rqp *sn_rqp_xrc(struct sn_rqp *tgt, uint32_t srqn)
{
	static struct sn_rqp *views;
	struct sn_rqp *v;
	char name[64];
	void *m;
	size_t len;

	pthread_mutex_lock(&sn_g.lock);
	for (v = views; v; v = v->hnext)
		if (v->qpn == tgt->qpn && v->xsrqn == srqn && v->shm == tgt->shm)
			break;
	pthread_mutex_unlock(&sn_g.lock);
	if (v)
		return v;
	v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	*v = *tgt;
	v->chan_fd = v->async_fd = -1;
	v->xsrqn = srqn;
	snprintf(name, sizeof(name), "xsrq-%u", srqn);
	if (sn_shm_map(name, &m, &len))
		goto fail;
	v->srq = m;
	if (!v->srq->xrcd_id || v->srq->xrcd_id != tgt->shm->xrcd_id)
		goto fail; /* not an XRC SRQ of the TGT's domain */
	v->rq = &v->srq->rq;
	if (sn_shm_map(v->srq->cq_name, &m, &len))
		goto fail;
	v->rcq = m;
	v->proc = sn_rproc_get(v->srq->procid);
	if (!v->proc)
		goto fail;
	v->pd_id = v->srq->pd_id;
	pthread_mutex_lock(&sn_g.lock);
	v->hnext = views;
	views = v;
	pthread_mutex_unlock(&sn_g.lock);
	return v;
fail:
	free(v);
	return NULL;
}

bool sn_rqp_alive(struct sn_rqp *r)
{
	uint64_t now;

	if (r->dead || atomic_load_explicit(&r->shm->destroyed, memory_order_relaxed)) {
		r->dead = true;
		return false;
	}
	now = sn_coarse_ns();
	if (now >= r->next_alive_ns) {
		r->next_alive_ns = now + 2000000;
		if (!sn_proc_alive(r->shm->procid)) {
			r->dead = true;
			return false;
		}
	}
	return true;
}

static void sn_fifo_write(int *fdp, const char *path, const void *rec, size_t n)
{
	if (!path[0])
		return;
	if (*fdp < 0) {
		char p[512];

		sn_path(p, sizeof(p), path);
		*fdp = open(p, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
		if (*fdp < 0)
			return;
	}
	if (write(*fdp, rec, n) < 0 && errno != EAGAIN) {
		close(*fdp);
		*fdp = -1;
	}
}

void sn_notify_fd(int *fdp, const char *path, uint64_t cookie)
{
	sn_fifo_write(fdp, path, &cookie, sizeof(cookie));
}

void sn_async_event(const char *path, int *fdp, uint32_t type, uint64_t cookie)
{
	uint64_t rec[2] = { type, cookie };
	int tmp = -1;

	sn_fifo_write(fdp ? fdp : &tmp, path, rec, sizeof(rec));
	if (!fdp && tmp >= 0)
		close(tmp);
}
