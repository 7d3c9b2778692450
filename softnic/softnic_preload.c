/*
 * softnic's preload for provider mode (libsoftnic-preload.so, loaded with
 * LD_PRELOAD by `rbtrace softnic`): what the system's libibverbs needs
 * around softnic's provider on a machine with no RDMA kernel support.
 *  - the fake sysfs: SYSFS_PATH (made here when unset) holds softnic0, and
 *    RDMAV_DRIVERS names the provider beside this library when unset;
 *  - the device node: stat and open of /dev/infiniband/uverbs_softnic0 go
 *    to /dev/null (the sysfs says 1:3), opened read-only so that any kernel
 *    command libibverbs writes there fails (EBADF) instead of "succeeding";
 *  - completion channels, a raw kernel command in libibverbs: for a
 *    softnic context the provider's own (handed over when it loads), for
 *    any other the next definition;
 *  - /sys/class/infiniband/softnic0 itself, for tools that read the real
 *    sysfs rather than SYSFS_PATH (rdma-core's pyverbs tests look for the
 *    device's network interface there, with stat and ls): stat, lstat,
 *    statx, fstatat, their *64 names, open and opendir of that subtree go
 *    to the fake one.
 * It must never change a call that is not about softnic, link libibverbs,
 * or allocate in the wrappers of stat and open.
 * Built a second time with SN_PRELOAD_SYSFS_ONLY as libsoftnic-sysfs.so,
 * which `rbtrace softnic` preloads in drop-in mode: the fake sysfs and the
 * wrappers of stat and open only (no verbs of its own, no RDMAV_DRIVERS).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "softnic_pabi.h"
#include "softnic_preload.h"
#include "softnic_sysfs.h"

#define SN_EXPORT __attribute__((visibility("default")))

#ifndef SN_PRELOAD_SYSFS_ONLY
static struct sn_preload_hooks sn_hooks;

SN_EXPORT void softnic_preload_attach(const struct sn_preload_hooks *h)
{
	if (h && h->magic == SN_PRELOAD_MAGIC)
		sn_hooks = *h;
}
#endif

static bool sn_is_cdev(const char *path)
{
	return path && !strcmp(path, SN_SYSFS_CDEV);
}

#define SN_SYS_DEV "/sys/class/infiniband/" SN_SYSFS_IBDEV

/* path itself, or its twin in our fake sysfs (in buf) when it names
 * softnic0 in the real /sys and SYSFS_PATH is a tree of ours. */
static const char *sn_sys(const char *path, char *buf, size_t n)
{
	size_t l = sizeof(SN_SYS_DEV) - 1;
	const char *root;

	if (!path || strncmp(path, SN_SYS_DEV, l) || (path[l] && path[l] != '/'))
		return path;
	root = getenv("SYSFS_PATH");
	if (!root || !*root || !sn_sysfs_ours(root))
		return path;
	if ((size_t)snprintf(buf, n, "%s%s", root, path + 4) >= n)
		return path;
	return buf;
}

#define SN_SYS(p)                 \
	char sn_sysbuf[PATH_MAX]; \
	p = sn_sys(p, sn_sysbuf, sizeof(sn_sysbuf))

/* for stat: the device node is /dev/null's (a real character device), and
 * softnic0's sysfs is ours */
#define SN_STAT_PATH(p)           \
	char sn_sysbuf[PATH_MAX]; \
	p = sn_is_cdev(p) ? "/dev/null" : sn_sys(p, sn_sysbuf, sizeof(sn_sysbuf))

/* the next definition of a libc function, looked up once; NULL with errno
 * ENOSYS when there is none */
static void *sn_next(void **slot, const char *name)
{
	if (!*slot)
		*slot = dlsym(RTLD_NEXT, name);
	if (!*slot)
		errno = ENOSYS;
	return *slot;
}

/* real: the definition of fn after ours, of our own type */
#define SN_NEXT(fn)                \
	static void *sn_next_slot; \
	__typeof__(&fn) real = (__typeof__(&fn))sn_next(&sn_next_slot, #fn)

SN_EXPORT int lstat(const char *restrict path, struct stat *restrict st)
{
	SN_NEXT(lstat);

	SN_SYS(path);
	return real ? real(path, st) : -1;
}

SN_EXPORT int statx(int dirfd, const char *restrict path, int flags, unsigned int mask,
		    struct statx *restrict st)
{
	SN_NEXT(statx);

	SN_SYS(path);
	return real ? real(dirfd, path, flags, mask, st) : -1;
}

/* Python and others built for large files call the *64 names */
SN_EXPORT int stat64(const char *restrict path, struct stat64 *restrict st)
{
	SN_NEXT(stat64);

	SN_STAT_PATH(path);
	return real ? real(path, st) : -1;
}

SN_EXPORT int lstat64(const char *restrict path, struct stat64 *restrict st)
{
	SN_NEXT(lstat64);

	SN_SYS(path);
	return real ? real(path, st) : -1;
}

SN_EXPORT int fstatat64(int dirfd, const char *restrict path, struct stat64 *restrict st,
			int flags)
{
	SN_NEXT(fstatat64);

	SN_SYS(path); /* only an absolute path can name /sys */
	return real ? real(dirfd, path, st, flags) : -1;
}

SN_EXPORT DIR *opendir(const char *path)
{
	SN_NEXT(opendir);

	SN_SYS(path);
	return real ? real(path) : NULL;
}

SN_EXPORT int stat(const char *restrict path, struct stat *restrict st)
{
	SN_NEXT(stat);

	SN_STAT_PATH(path);
	return real ? real(path, st) : -1;
}

static int sn_open_real(const char *path, int flags, mode_t mode, const char *name)
{
	int (*real)(const char *, int, ...) =
		(int (*)(const char *, int, ...))dlsym(RTLD_NEXT, name);

	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	if (sn_is_cdev(path))
		return real("/dev/null", O_RDONLY | (flags & O_CLOEXEC));
	SN_SYS(path);
	return real(path, flags, mode);
}

static mode_t sn_open_mode(int flags, va_list ap)
{
	return (flags & (O_CREAT | __O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

/* open and open64 alike (the mode is there only with O_CREAT or O_TMPFILE) */
#define SN_OPEN(fn)                                          \
	SN_EXPORT int fn(const char *path, int flags, ...)   \
	{                                                    \
		va_list ap;                                  \
		mode_t mode;                                 \
                                                             \
		va_start(ap, flags);                         \
		mode = sn_open_mode(flags, ap);              \
		va_end(ap);                                  \
		return sn_open_real(path, flags, mode, #fn); \
	}
SN_OPEN(open)
SN_OPEN(open64)

#ifndef SN_PRELOAD_SYSFS_ONLY
/* ---------------- completion channels ---------------- */

static bool sn_ours(struct ibv_context *c)
{
	return c && sn_hooks.dev_ops && c->device &&
	       ((struct sn_pabi_device *)c->device)->ops == sn_hooks.dev_ops;
}

/* The next definition of a libibverbs function: after this library in the
 * global scope, else in the libibverbs.so.1 loaded (a program that dlopens it
 * locally, as Python's extension modules do, keeps it out of that scope: this
 * preload in front of softnic's drop-in under pyverbs). */
static void *sn_next_verb(const char *name)
{
	void *f = dlvsym(RTLD_NEXT, name, "IBVERBS_1.0"), *h;

	if (f)
		return f;
	h = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (!h)
		return NULL;
	f = dlvsym(h, name, "IBVERBS_1.0");
	dlclose(h);
	return f;
}

SN_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	struct ibv_comp_channel *(*real)(struct ibv_context *);

	if (sn_ours(c))
		return sn_hooks.create_comp_channel(c);
	real = (struct ibv_comp_channel * (*)(struct ibv_context *))
		sn_next_verb("ibv_create_comp_channel");
	if (!real) {
		errno = ENOSYS;
		return NULL;
	}
	return real(c);
}

SN_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	int (*real)(struct ibv_comp_channel *);

	if (ch && sn_ours(ch->context))
		return sn_hooks.destroy_comp_channel(ch);
	real = (int (*)(struct ibv_comp_channel *))sn_next_verb(
		"ibv_destroy_comp_channel");
	if (!real)
		return ENOSYS;
	return real(ch);
}
#endif

/* ---------------- set-up, before main ---------------- */

static void sn_say(const char *what, int err)
{
	fprintf(stderr, "softnic preload: %s: %s\n", what, strerror(err));
}

/* SYSFS_PATH: ours (per user and link layer) when unset; another tree given by the user is left as
 * it is (then softnic0 is in it or not). */
static void sn_preload_sysfs(void)
{
	const char *root = getenv("SYSFS_PATH");
	char def[SN_SYSFS_PATH], p[SN_SYSFS_PATH + 32];
	int ret;

	if (!root || !*root) {
		const char *link = getenv("SOFTNIC_LINK");
		bool eth = link && (!strcmp(link, "eth") || !strcmp(link, "ethernet") ||
				    !strcmp(link, "roce"));

		/* the GID files differ between link layers */
		snprintf(def, sizeof(def), "/tmp/softnic-sysfs-%u-%s", (unsigned)getuid(),
			 eth ? "eth" : "ib");
		setenv("SYSFS_PATH", def, 1);
		root = def;
	}
	if (sn_sysfs_ours(root)) {
		/* ours, perhaps from an older softnic: what it lacks, added */
		ret = sn_sysfs_make(root);
		if (ret)
			sn_say(root, -ret);
		return;
	}
	snprintf(p, sizeof(p), "%s/class", root);
	if (access(p, F_OK) == 0)
		return; /* someone else's tree */
	ret = sn_sysfs_make(root);
	if (ret)
		sn_say(root, -ret);
}

#ifndef SN_PRELOAD_SYSFS_ONLY
/* RDMAV_DRIVERS: the provider beside this library (libsoftnic-rdmav34.so
 * is named without its suffix), unless the user named providers. */
static void sn_preload_driver(void)
{
	Dl_info info;
	char dir[PATH_MAX], v[PATH_MAX + 16];
	char *slash;

	if (getenv("RDMAV_DRIVERS") || getenv("IBV_DRIVERS"))
		return;
	if (!dladdr((void *)sn_preload_driver, &info) || !info.dli_fname ||
	    !realpath(info.dli_fname, dir))
		return;
	slash = strrchr(dir, '/');
	if (!slash)
		return;
	*slash = 0;
	snprintf(v, sizeof(v), "%s/libsoftnic", dir);
	setenv("RDMAV_DRIVERS", v, 1);
}
#endif

__attribute__((constructor)) static void sn_preload_init(void)
{
	int e = errno;

	sn_preload_sysfs();
#ifndef SN_PRELOAD_SYSFS_ONLY
	sn_preload_driver();
#endif
	errno = e;
}
