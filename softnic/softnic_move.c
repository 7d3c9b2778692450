/*
 * softnic's page moves: registration moves a run's pages from the process's
 * private memory into a fabric file, deregistration moves them back, each by
 * copying the pages and mapping the copy over the same addresses. A store
 * another thread makes to those pages between the copy and the remap would
 * land in the old pages and be lost - to the buffer, or to any object that
 * shares one of its pages (rping's cm_id beside its buffers: a lost
 * `completed++`, a hang). So while a run moves, its range is write-protected
 * with userfaultfd: writers block in the kernel, readers go on; the new
 * mapping replaces the protected one (and its registration), then the
 * writers are woken and retry their stores on the new pages.
 *
 * The move runs on a short-lived thread of ours, on a stack of its own,
 * while the registering thread waits with its signals blocked: a range that
 * holds that thread's stack (its locals, the frames of the calls it makes)
 * would otherwise make it block on its own stores with nobody to wake it.
 * Between the protection and the wake-up the mover touches nothing but its
 * own stack and the new pages and makes raw system calls only: no
 * allocation (a heap page of the range, or a lock a blocked writer holds),
 * no sanitizer interceptor (which would reset the range's shadow) and nothing
 * a recorder may wrap.
 *
 * Where userfaultfd cannot protect a range (no kernel support, not
 * permitted, SOFTNIC_UFFD=0, memory it does not cover) the pages move
 * unprotected, as they always did; SOFTNIC_DEBUG=1 says so once. A fork()
 * child moves its runs unprotected: it has one thread. Control path only,
 * under the fabric lock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "softnic_int.h"

/* Newer than Debian 12's kernel headers */
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif

/* the mover's stack, which holds its TLS too (TSan's alone is ~900 KiB);
 * address space only but for what it touches, kept from one move to the next */
#define SN_MOVE_STACK (4u << 20)
#define SN_PAGE	      4096u

/* How this process gets a userfaultfd that write-protects (decided once). */
enum sn_uffd_how {
	SN_UFFD_UNKNOWN = 0,
	SN_UFFD_OFF,
	SN_UFFD_FULL,	/* userfaultfd(2): the kernel's own writes wait too */
	SN_UFFD_DEVICE, /* the same from /dev/userfaultfd (Linux 6.1) */
	SN_UFFD_USER,	/* UFFD_USER_MODE_ONLY: only user-mode stores wait */
};

static int sn_uffd_how;
static uint64_t sn_uffd_features;
static void *sn_mover_stack;

/* The mover's system calls, raw: no interceptor between us and the kernel. */
static long sn_sys_mmap(void *a, uint64_t len, int prot, int flags, int fd)
{
	return syscall(SYS_mmap, a, (long)len, (long)prot, (long)flags, (long)fd, 0L);
}

static long sn_sys_munmap(void *a, uint64_t len)
{
	return syscall(SYS_munmap, a, (long)len);
}

static long sn_sys_ioctl(int fd, unsigned long req, void *arg)
{
	return syscall(SYS_ioctl, (long)fd, req, arg);
}

static void sn_sys_close(int fd)
{
	syscall(SYS_close, (long)fd);
}

static bool sn_debug(void)
{
	const char *v = getenv("SOFTNIC_DEBUG");

	return v && *v && strcmp(v, "0");
}

/* Whole pages: other objects' bytes, freed or being written by other threads,
 * are copied as they are, so neither ASan nor TSan may look. */
__attribute__((no_sanitize("address", "thread"))) static void
sn_copy_pages(void *dst, const void *src, uint64_t len)
{
	const volatile uint64_t *s = src;
	uint64_t *d = dst;

	for (uint64_t i = 0; i < len / 8; i++)
		d[i] = s[i];
}

/* A page never touched has nothing to write-protect before Linux 6.4
 * (UFFD_FEATURE_WP_UNPOPULATED): a read maps it (the zero page) first. */
__attribute__((no_sanitize("address", "thread"))) static void sn_touch_pages(uint64_t va,
									     uint64_t len)
{
	for (uint64_t off = 0; off < len; off += SN_PAGE)
		(void)*(const volatile char *)(va + off);
}

/* The move itself: [va, va + len) into the fabric file fd (fd >= 0) or back
 * into private anonymous memory (fd < 0), same bytes at the same addresses.
 * 0 or -errno; on failure the range is as it was. */
static int sn_pages_copy_remap(uint64_t va, uint64_t len, int fd)
{
	const int rw = PROT_READ | PROT_WRITE;
	long tmp;

	if (fd >= 0) {
		tmp = sn_sys_mmap(NULL, len, rw, MAP_SHARED, fd);
		if (tmp == -1)
			return -errno;
		sn_copy_pages((void *)tmp, (const void *)va, len);
		sn_sys_munmap((void *)tmp, len);
		if (sn_sys_mmap((void *)va, len, rw, MAP_SHARED | MAP_FIXED, fd) == -1)
			return -errno;
		return 0;
	}
	tmp = sn_sys_mmap(NULL, len, rw, MAP_PRIVATE | MAP_ANONYMOUS, -1);
	if (tmp == -1)
		return -errno;
	sn_copy_pages((void *)tmp, (const void *)va, len);
	if (syscall(SYS_mremap, tmp, (long)len, (long)len,
		    (long)(MREMAP_MAYMOVE | MREMAP_FIXED), (void *)va) == -1) {
		int e = errno;

		sn_sys_munmap((void *)tmp, len);
		return -e;
	}
	return 0;
}

static int sn_uffd_new(int how)
{
	const int fl = O_CLOEXEC | O_NONBLOCK;
	int dev, fd;

	if (how == SN_UFFD_FULL)
		return (int)syscall(SYS_userfaultfd, (long)fl);
	if (how == SN_UFFD_USER)
		return (int)syscall(SYS_userfaultfd, (long)(fl | UFFD_USER_MODE_ONLY));
	dev = (int)syscall(SYS_openat, (long)AT_FDCWD, "/dev/userfaultfd",
			   (long)(O_RDWR | O_CLOEXEC));
	if (dev < 0)
		return -1;
	fd = (int)sn_sys_ioctl(dev, USERFAULTFD_IOC_NEW, (void *)(long)fl);
	sn_sys_close(dev);
	return fd;
}

/* SOFTNIC_UFFD: 0 (off), user (user-mode stores only), full (the kernel's
 * writes too, or nothing); by default full where this process may, else
 * user-mode only. */
static void sn_uffd_probe(void)
{
	static const int order[] = { SN_UFFD_FULL, SN_UFFD_DEVICE, SN_UFFD_USER };
	const char *v = getenv("SOFTNIC_UFFD");
	bool full = v && !strcmp(v, "full"), user = v && !strcmp(v, "user");
	int e = 0;

	sn_uffd_how = SN_UFFD_OFF;
	if (v && (!strcmp(v, "0") || !strcmp(v, "off"))) {
		e = -1;
		goto off;
	}
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		struct uffdio_api api = { .api = UFFD_API };
		int fd;
		bool wp;

		if ((user && order[i] != SN_UFFD_USER) ||
		    (full && order[i] == SN_UFFD_USER))
			continue;
		fd = sn_uffd_new(order[i]);
		if (fd < 0) {
			e = errno;
			continue;
		}
		errno = 0;
		wp = sn_sys_ioctl(fd, UFFDIO_API, &api) == 0 &&
		     (api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP);
		e = wp ? 0 : errno ? errno : EOPNOTSUPP;
		sn_sys_close(fd);
		if (wp) {
			sn_uffd_how = order[i];
			sn_uffd_features = api.features;
			break;
		}
	}
off:
	if (!sn_debug())
		return;
	if (sn_uffd_how == SN_UFFD_OFF)
		fprintf(stderr,
			"softnic: no userfaultfd write protection (%s): registered "
			"pages move unprotected, and a store another thread makes to "
			"them while they move is lost\n",
			e < 0 ? "SOFTNIC_UFFD=0" : strerror(e));
	else if (sn_uffd_how == SN_UFFD_USER)
		fprintf(stderr,
			"softnic: registered pages move write-protected, user-mode "
			"stores only (UFFD_USER_MODE_ONLY): the kernel's writes into "
			"them meanwhile fail with EFAULT\n");
	else
		fprintf(stderr, "softnic: registered pages move write-protected "
				"(userfaultfd)\n");
}

static void sn_move_unprotected(uint64_t va, uint64_t len, const char *why, int e)
{
	static bool said;

	if (said || !sn_debug())
		return;
	said = true;
	fprintf(stderr,
		"softnic: registered range %#llx+%llu moves unprotected (%s: %s); "
		"a store another thread makes to it meanwhile is lost\n",
		(unsigned long long)va, (unsigned long long)len, why, strerror(e));
}

/* A userfaultfd registered for write protection over the range, or -1. */
static int sn_uffd_arm(uint64_t va, uint64_t len)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg = { .range = { .start = va, .len = len },
				       .mode = UFFDIO_REGISTER_MODE_WP };
	int fd;

	if (sn_uffd_how == SN_UFFD_UNKNOWN)
		sn_uffd_probe();
	if (sn_uffd_how == SN_UFFD_OFF)
		return -1;
	fd = sn_uffd_new(sn_uffd_how);
	if (fd < 0) {
		sn_move_unprotected(va, len, "userfaultfd", errno);
		return -1;
	}
	api.features = sn_uffd_features & UFFD_FEATURE_WP_UNPOPULATED;
	errno = 0;
	if (sn_sys_ioctl(fd, UFFDIO_API, &api) ||
	    sn_sys_ioctl(fd, UFFDIO_REGISTER, &reg) ||
	    !(reg.ioctls & (1ull << _UFFDIO_WRITEPROTECT))) {
		/* e.g. a private file mapping, or a fabric on a disk */
		sn_move_unprotected(va, len, "UFFDIO_REGISTER", errno ? errno : ENOTSUP);
		sn_sys_close(fd);
		return -1;
	}
	return fd;
}

/* What the mover is given. It may live in the range (on the registering
 * thread's stack): the mover reads it first and writes err only after the
 * wake-up, when its pages are the new ones. */
struct sn_move {
	uint64_t va, len;
	int fd, uffd;
	int err; /* 0, -errno, or 1: nothing done (not protected) */
};

static void *sn_mover_main(void *arg)
{
	struct sn_move *mv = arg;
	const uint64_t va = mv->va, len = mv->len;
	const int fd = mv->fd, uffd = mv->uffd;
	struct uffdio_writeprotect wp = { .range = { .start = va, .len = len },
					  .mode = UFFDIO_WRITEPROTECT_MODE_WP };
	struct uffdio_range all = { .start = va, .len = len };
	int err;

	sn_touch_pages(va, len);
	if (sn_sys_ioctl(uffd, UFFDIO_WRITEPROTECT, &wp)) {
		wp.mode = 0; /* whatever part it protected, and its writers */
		sn_sys_ioctl(uffd, UFFDIO_WRITEPROTECT, &wp);
		mv->err = 1;
		return NULL;
	}
	err = sn_pages_copy_remap(va, len, fd);
	if (err) {
		/* the old pages stay: unprotect them (which wakes their writers) */
		wp.mode = 0;
		sn_sys_ioctl(uffd, UFFDIO_WRITEPROTECT, &wp);
	}
	/* the writers that blocked on the old pages retry on the new ones */
	sn_sys_ioctl(uffd, UFFDIO_WAKE, &all);
	mv->err = err;
	return NULL;
}

int sn_pages_move(uint64_t va, uint64_t len, int fd, bool alone)
{
	struct sn_move mv = { .va = va, .len = len, .fd = fd, .uffd = -1, .err = 1 };
	int cpu = sched_getcpu();
	sigset_t all, old;
	cpu_set_t cpus;
	pthread_attr_t at;
	pthread_t t;
	void *stk;
	int ret;

	if (alone) {
		/* a fork() child: its one thread is this one; no signal
		 * handler may store there meanwhile either */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		ret = sn_pages_copy_remap(va, len, fd);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		return ret;
	}
	mv.uffd = sn_uffd_arm(va, len);
	if (mv.uffd < 0)
		return sn_pages_copy_remap(va, len, fd);
	if (!sn_mover_stack) {
		stk = mmap(NULL, SN_MOVE_STACK, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1,
			   0);
		if (stk == MAP_FAILED) {
			sn_move_unprotected(va, len, "mover stack", errno);
			goto out;
		}
		sn_mover_stack = stk;
	}
	stk = sn_mover_stack;
	pthread_attr_init(&at);
	pthread_attr_setstack(&at, stk, SN_MOVE_STACK);
	if (cpu >= 0) {
		/* the CPU we leave idle while we wait: no other to wake
		 * (a 4 KiB register + deregister: 320-410 -> 210-240 us) */
		CPU_ZERO(&cpus);
		CPU_SET(cpu, &cpus);
		pthread_attr_setaffinity_np(&at, sizeof(cpus), &cpus);
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* the mover inherits it */
	ret = pthread_create(&t, &at, sn_mover_main, &mv);
	if (!ret)
		pthread_join(t, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&at);
	if (ret)
		sn_move_unprotected(va, len, "mover thread", ret);
	else if (mv.err == 1)
		sn_move_unprotected(va, len, "UFFDIO_WRITEPROTECT", ENOTSUP);
out:
	sn_sys_close(mv.uffd); /* drops the registration where the move failed */
	return mv.err == 1 ? sn_pages_copy_remap(va, len, fd) : mv.err;
}
