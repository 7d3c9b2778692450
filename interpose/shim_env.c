/* shim_env.c - the recorder's settings (RBTRACE_* environment), its logging
 * (write(2) from a stack buffer, errno kept), the next-definition resolver, and
 * the TSC calibration against CLOCK_MONOTONIC.
 *
 * Must never allocate or lock on a path a wrapper takes per call, and never print
 * except through rbt_log/rbt_warn (RBTRACE_DEBUG gates the debug lines).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "interpose/rbt_interpose.h"
#include "interpose/shim.h"

#include "interpose/shim_rec.h"

/* ---- logging ------------------------------------------------------------------ */
static void rbt_vlog(const char *fmt, va_list ap)
{
	char buf[512];
	int saved = errno;
	int n = snprintf(buf, sizeof(buf), "rbtrace[%d]: ", (int)getpid());

	if (n < 0)
		n = 0;
	int m = vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
	if (m < 0)
		m = 0;
	n += m;
	if (n > (int)sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	ssize_t w = write(STDERR_FILENO, buf, n);
	(void)w;
	errno = saved;
}

void rbt_log(const char *fmt, ...)
{
	va_list ap;

	if (!rbt_cfg.debug)
		return;
	va_start(ap, fmt);
	rbt_vlog(fmt, ap);
	va_end(ap);
}

void rbt_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	rbt_vlog(fmt, ap);
	va_end(ap);
}

void *rbt_real(const char *name, const char *version)
{
	void *p = NULL;

	if (version)
		p = dlvsym(RTLD_NEXT, name, version);
	if (!p)
		p = dlsym(RTLD_NEXT, name);
	if (!p)
		rbt_log("no next definition of %s", name);
	return p;
}

/* ---- settings ----------------------------------------------------------------- */
static unsigned long rbt_env_ul(const char *name, unsigned long dflt, unsigned long lo,
				unsigned long hi)
{
	const char *s = getenv(name);
	char *end;
	unsigned long v;

	if (!s || !*s)
		return dflt;
	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || *end || v < lo || v > hi) {
		rbt_warn("ignoring %s=%s (expected %lu..%lu)", name, s, lo, hi);
		return dflt;
	}
	return v;
}

static int rbt_env_bool(const char *name, int dflt)
{
	const char *s = getenv(name);

	if (!s || !*s)
		return dflt;
	if (!strcmp(s, "1") || !strcasecmp(s, "on") || !strcasecmp(s, "yes") ||
	    !strcasecmp(s, "true"))
		return 1;
	if (!strcmp(s, "0") || !strcasecmp(s, "off") || !strcasecmp(s, "no") ||
	    !strcasecmp(s, "false"))
		return 0;
	rbt_warn("ignoring %s=%s (expected 0 or 1)", name, s);
	return dflt;
}

void rbt_config_load(void)
{
	const char *s;
	size_t kb;

	rbt_cfg.debug = rbt_env_bool(RBT_ENV_DEBUG, 0);
	kb = rbt_env_ul(RBT_ENV_BUFFER_KB, 2048, 64, 1024 * 1024);
	rbt_cfg.ring_bytes = 1;
	while (rbt_cfg.ring_bytes < kb * 1024)
		rbt_cfg.ring_bytes <<= 1;
	rbt_cfg.flush_ms = rbt_env_ul(RBT_ENV_FLUSH_MS, 100, 1, 5000);
	/* Until the background thread has measured the TSC, assume 3 GHz: this only
	 * bounds how long a run of empty polls is folded into one record. */
	rbt_cfg.flush_ticks = 3000000ull * rbt_cfg.flush_ms;
	rbt_cfg.block_ms = rbt_env_ul(RBT_ENV_BLOCK_MS, 1000, 0, 600000);
	rbt_cfg.light = rbt_env_bool(RBT_ENV_LIGHT, 0);
	/* Light mode trades detail for rate: no stacks unless asked for. */
	rbt_cfg.stacks = rbt_env_bool(RBT_ENV_STACKS, !rbt_cfg.light);
	rbt_cfg.nic_ts = rbt_env_bool(RBT_ENV_NIC_TS, 0);
	rbt_cfg.writer_cpu = (int)rbt_env_ul(RBT_ENV_WRITER_CPU, (unsigned long)-1, 0,
					     CPU_SETSIZE - 1);
	s = getenv(RBT_ENV_PAYLOAD);
	if (!s || !*s || !strcmp(s, "0") || !strcasecmp(s, "off"))
		rbt_cfg.payload = 0;
	else if (!strcasecmp(s, "on") || !strcasecmp(s, "yes"))
		rbt_cfg.payload = 256;
	else
		rbt_cfg.payload = rbt_env_ul(RBT_ENV_PAYLOAD, 0, 0, 65536);
	s = getenv(RBT_ENV_OUTPUT);
	snprintf(rbt_cfg.output, sizeof(rbt_cfg.output), "%s", s ? s : "");
	s = getenv(RBT_ENV_MANIFEST);
	snprintf(rbt_cfg.manifest, sizeof(rbt_cfg.manifest), "%s", s ? s : "");
	rbt_flight_config();
}

/* ---- clock ------------------------------------------------------------------- */
static uint64_t rbt_clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

void rbt_clock_pair(struct rbt_clock_pair *p)
{
	/* The TSC read sits between the two clocks it is paired with, so neither is
	 * more than one clock_gettime away. */
	uint64_t m0 = rbt_clock_ns(CLOCK_MONOTONIC);
	p->ticks = rbt_now();
	uint64_t m1 = rbt_clock_ns(CLOCK_MONOTONIC);
	p->mono_ns = m0 + (m1 - m0) / 2;
	p->real_ns = rbt_clock_ns(CLOCK_REALTIME);
}

uint64_t rbt_tsc_hz;
struct rbt_clock_pair rbt_start_pair;

/* Measured against CLOCK_MONOTONIC over `ms`; runs on the background thread so
 * the application never waits for it. */
uint64_t rbt_calibrate(const struct rbt_clock_pair *from, unsigned ms)
{
	struct rbt_clock_pair now;
	struct timespec d = { 0, ms * 1000000L };

	nanosleep(&d, NULL);
	rbt_clock_pair(&now);
	if (now.mono_ns <= from->mono_ns || now.ticks <= from->ticks)
		return 0;
	return (uint64_t)((double)(now.ticks - from->ticks) * 1e9 /
			  (double)(now.mono_ns - from->mono_ns));
}
