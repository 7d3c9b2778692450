/* shim_env.c - the recorder's settings (RBTRACE_* environment, the flight
 * recorder's and rotation's included), its logging
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
/* The leading number of s (base 10, or 0: with C's 0x / 0 prefixes), *end after
 * it; -1 when s does not start with one or it overflows. */
static int rbt_lead_num(const char *s, int base, unsigned long long *v, char **end)
{
	errno = 0;
	*v = strtoull(s, end, base);
	return errno || *end == s ? -1 : 0;
}

/* name's value in lo..hi (dflt when unset, or with a warning when not a number
 * in range). */
static unsigned long rbt_env_ul(const char *name, unsigned long dflt, unsigned long lo,
				unsigned long hi, int base)
{
	const char *s = getenv(name);
	char *end;
	unsigned long long v;

	if (!s || !*s)
		return dflt;
	if (rbt_lead_num(s, base, &v, &end) || *end || v < lo || v > hi) {
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

/* ---- flight recorder and rotation settings (shim_flight.c runs them) ------------- */
struct rbt_flight_cfg rbt_fcfg;

/* "64M", "512K", "1G", "1048576": bytes; 0 when it does not parse. */
static uint64_t rbt_parse_size(const char *s)
{
	char *end;
	unsigned long long v;

	if (rbt_lead_num(s, 10, &v, &end))
		return 0;
	uint64_t mul = 1;
	switch (*end) {
	case 'k':
	case 'K':
		mul = 1 << 10, end++;
		break;
	case 'M':
		mul = 1 << 20, end++;
		break;
	case 'g':
	case 'G':
		mul = 1 << 30, end++;
		break;
	}
	if (*end == 'B' || (*end == 'i' && end[1] == 'B' && (end += 1)))
		end++;
	if (*end)
		return 0;
	return v * mul;
}

/* "500ms", "10s", "5min", "2h": ms; 0 when it is not a duration. */
static uint64_t rbt_parse_ms(const char *s)
{
	static const struct {
		const char *unit;
		uint64_t ms;
	} units[] = { { "ms", 1 },
		      { "s", 1000 },
		      { "m", 60000 },
		      { "min", 60000 },
		      { "h", 3600000 } };
	char *end;
	unsigned long long v;

	if (rbt_lead_num(s, 10, &v, &end))
		return 0;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (!strcmp(end, units[i].unit))
			return v * units[i].ms;
	return 0;
}

/* A flight setting: decimal, 0..hi. */
static unsigned long rbt_fenv(const char *name, unsigned long dflt, unsigned long hi)
{
	return rbt_env_ul(name, dflt, 0, hi, 10);
}

void rbt_flight_config(void)
{
	const char *s = getenv(RBT_ENV_FLIGHT);
	memset(&rbt_fcfg, 0, sizeof(rbt_fcfg));
	if (s && *s && strcmp(s, "0")) {
		rbt_fcfg.flight_bytes = rbt_parse_size(s);
		if (rbt_fcfg.flight_bytes < (1 << 20) ||
		    rbt_fcfg.flight_bytes > (64ull << 30)) {
			rbt_warn("ignoring %s=%s (expected a size from 1M to 64G)",
				 RBT_ENV_FLIGHT, s);
			rbt_fcfg.flight_bytes = 0;
		}
	}
	rbt_fcfg.before_ms = rbt_fenv(RBT_ENV_FLIGHT_BEFORE_MS, 0, 86400000);
	rbt_fcfg.after_ms = rbt_fenv(RBT_ENV_FLIGHT_AFTER_MS, 100, 600000);
	rbt_fcfg.gap_ms = rbt_fenv(RBT_ENV_FLIGHT_GAP_MS, 1000, 86400000);
	rbt_fcfg.max_snaps = rbt_fenv(RBT_ENV_FLIGHT_MAX, 32, 100000);
	rbt_fcfg.stall_ms = rbt_fenv(RBT_ENV_FLIGHT_STALL_MS, 1000, 86400000);
	rbt_fcfg.slow_post_us = rbt_fenv(RBT_ENV_FLIGHT_SLOW_POST_US, 0, 100000000);
	rbt_fcfg.slow_poll_us = rbt_fenv(RBT_ENV_FLIGHT_SLOW_POLL_US, 0, 100000000);
	if (rbt_cfg.light && rbt_fcfg.flight_bytes &&
	    (rbt_fcfg.slow_post_us || rbt_fcfg.slow_poll_us))
		rbt_warn("%s/%s: no effect in light mode (%s=1: calls have no exit time)",
			 RBT_ENV_FLIGHT_SLOW_POST_US, RBT_ENV_FLIGHT_SLOW_POLL_US,
			 RBT_ENV_LIGHT);
	s = getenv(RBT_ENV_ROTATE);
	if (s && *s && strcmp(s, "0")) {
		uint64_t ms = rbt_parse_ms(s);
		if (ms)
			rbt_fcfg.rotate_ms = ms;
		else
			rbt_fcfg.rotate_bytes = rbt_parse_size(s);
		if (!ms && rbt_fcfg.rotate_bytes < (64 << 10)) {
			rbt_warn("ignoring %s=%s (expected a size of 64K or more, or a "
				 "duration such as 10s or 5min)",
				 RBT_ENV_ROTATE, s);
			rbt_fcfg.rotate_bytes = 0;
		}
	}
	if (rbt_fcfg.flight_bytes && (rbt_fcfg.rotate_bytes || rbt_fcfg.rotate_ms)) {
		rbt_warn("%s and %s do not go together: flight recorder only",
			 RBT_ENV_FLIGHT, RBT_ENV_ROTATE);
		rbt_fcfg.rotate_bytes = rbt_fcfg.rotate_ms = 0;
	}
}

int rbt_flight_mode(void)
{
	return rbt_fcfg.flight_bytes			     ? 1
	       : rbt_fcfg.rotate_bytes || rbt_fcfg.rotate_ms ? 2
							     : 0;
}

void rbt_config_load(void)
{
	const char *s;
	size_t kb;

	rbt_cfg.debug = rbt_env_bool(RBT_ENV_DEBUG, 0);
	kb = rbt_env_ul(RBT_ENV_BUFFER_KB, 2048, 64, 1024 * 1024, 0);
	rbt_cfg.ring_bytes = 1;
	while (rbt_cfg.ring_bytes < kb * 1024)
		rbt_cfg.ring_bytes <<= 1;
	rbt_cfg.flush_ms = rbt_env_ul(RBT_ENV_FLUSH_MS, 100, 1, 5000, 0);
	/* Until the background thread has measured the TSC, assume 3 GHz: this only
	 * bounds how long a run of empty polls is folded into one record. */
	rbt_cfg.flush_ticks = 3000000ull * rbt_cfg.flush_ms;
	rbt_cfg.block_ms = rbt_env_ul(RBT_ENV_BLOCK_MS, 1000, 0, 600000, 0);
	rbt_cfg.light = rbt_env_bool(RBT_ENV_LIGHT, 0);
	/* Light mode trades detail for rate: no stacks unless asked for. */
	rbt_cfg.stacks = rbt_env_bool(RBT_ENV_STACKS, !rbt_cfg.light);
	rbt_cfg.nic_ts = rbt_env_bool(RBT_ENV_NIC_TS, 0);
	rbt_cfg.writer_cpu = (int)rbt_env_ul(RBT_ENV_WRITER_CPU, (unsigned long)-1, 0,
					     CPU_SETSIZE - 1, 0);
	s = getenv(RBT_ENV_PAYLOAD);
	if (!s || !*s || !strcmp(s, "0") || !strcasecmp(s, "off"))
		rbt_cfg.payload = 0;
	else if (!strcasecmp(s, "on") || !strcasecmp(s, "yes"))
		rbt_cfg.payload = 256;
	else
		rbt_cfg.payload = rbt_env_ul(RBT_ENV_PAYLOAD, 0, 0, 65536, 0);
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
	/* The TSC and the real-time clock are read between two monotonic reads; of a
	 * few tries the tightest bracket is kept, so a thread preempted in the middle
	 * does not pair clocks read far apart (traces of one host are aligned on
	 * these pairs, model/model_res.c). */
	uint64_t best = UINT64_MAX;
	for (int i = 0; i < 4 && best > 1000; i++) {
		uint64_t m0 = rbt_clock_ns(CLOCK_MONOTONIC);
		uint64_t t = rbt_now();
		uint64_t r = rbt_clock_ns(CLOCK_REALTIME);
		uint64_t m1 = rbt_clock_ns(CLOCK_MONOTONIC);
		if (m1 - m0 >= best)
			continue;
		best = m1 - m0;
		p->ticks = t;
		p->mono_ns = m0 + (m1 - m0) / 2;
		p->real_ns = r;
	}
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
