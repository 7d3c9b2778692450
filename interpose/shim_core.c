/* shim_core.c - the recorder inside librbtrace.so: settings, clock calibration,
 * per-thread rings, the one background thread that turns raw records into trace
 * events for the writer, and survival across fork, signals and exit.
 *
 * Rules: application threads only copy fixed-layout records into their own ring
 * (no locks, no allocation, no syscalls once the ring exists); the background
 * thread alone owns the writer, compression and I/O. Nothing here may break the
 * program: every failure becomes one warning and the program runs on untraced.
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

struct rbt_config rbt_cfg;
_Atomic int rbt_state;
RBT_TLS int rbt_tls_inside;
RBT_TLS struct rbt_ring *rbt_tls_ring;

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

static void rbt_config_load(void)
{
	const char *s;
	size_t kb;

	rbt_cfg.debug = rbt_env_bool(RBT_ENV_DEBUG, 0);
	kb = rbt_env_ul(RBT_ENV_BUFFER_KB, 2048, 64, 1024 * 1024);
	rbt_cfg.ring_bytes = 1;
	while (rbt_cfg.ring_bytes < kb * 1024)
		rbt_cfg.ring_bytes <<= 1;
	rbt_cfg.flush_ms = rbt_env_ul(RBT_ENV_FLUSH_MS, 100, 1, 60000);
	/* Until the background thread has measured the TSC, assume 3 GHz: this only
	 * bounds how long a run of empty polls is folded into one record. */
	rbt_cfg.flush_ticks = 3000000ull * rbt_cfg.flush_ms;
	rbt_cfg.block_ms = rbt_env_ul(RBT_ENV_BLOCK_MS, 1000, 0, 600000);
	rbt_cfg.stacks = rbt_env_bool(RBT_ENV_STACKS, 1);
	rbt_cfg.nic_ts = rbt_env_bool(RBT_ENV_NIC_TS, 0);
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
}

/* ---- clock ------------------------------------------------------------------- */
static uint64_t rbt_clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void rbt_clock_pair(struct rbt_clock_pair *p)
{
	/* The TSC read sits between the two clocks it is paired with, so neither is
	 * more than one clock_gettime away. */
	uint64_t m0 = rbt_clock_ns(CLOCK_MONOTONIC);
	p->ticks = rbt_now();
	uint64_t m1 = rbt_clock_ns(CLOCK_MONOTONIC);
	p->mono_ns = m0 + (m1 - m0) / 2;
	p->real_ns = rbt_clock_ns(CLOCK_REALTIME);
}

static uint64_t rbt_tsc_hz;
static struct rbt_clock_pair rbt_start_pair;

/* Measured against CLOCK_MONOTONIC over `ms`; runs on the background thread so
 * the application never waits for it. */
static uint64_t rbt_calibrate(const struct rbt_clock_pair *from, unsigned ms)
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

/* ---- recorder state ----------------------------------------------------------- */
static pthread_mutex_t rbt_start_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t rbt_reg_lock = PTHREAD_MUTEX_INITIALIZER;    /* ring list */
static pthread_mutex_t rbt_writer_lock = PTHREAD_MUTEX_INITIALIZER; /* drain passes */
static struct rbt_ring *rbt_rings;
static pthread_key_t rbt_ring_key;
static pthread_t rbt_drainer;
static int rbt_drainer_running;
static int rbt_wake_pipe[2] = { -1, -1 };
static _Atomic int rbt_stop_req;
static _Atomic int rbt_closed;
static _Atomic int rbt_drainer_tid;
static int rbt_trace_fd = -1;
static struct rbt_writer *rbt_writer;
static int rbt_writer_failed;
static uint64_t rbt_lost_total;
static pid_t rbt_owner_pid;
static char rbt_path[PATH_MAX];
static int rbt_fork_gen;

static pid_t rbt_gettid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* ---- rings ---------------------------------------------------------------------- */
static void rbt_ring_thread_exit(void *arg)
{
	struct rbt_ring *r = arg;

	if (r->nfold)
		rbt_fold_flush(r);
	rbt_tls_ring = NULL;
	atomic_store_explicit(&r->dead, 1, memory_order_release);
}

static void rbt_emit_thread(struct rbt_ring *r)
{
	struct rbt_event ev = { .type = RBT_EV_THREAD, .ts = rbt_now() };
	char name[32] = "";

	prctl(PR_GET_NAME, name, 0, 0, 0);
	ev.u.thread.tid = r->tid;
	ev.u.thread.name = name;
	rbt_emit(&ev);
}

struct rbt_ring *rbt_ring_create(void)
{
	struct rbt_ring *r;
	int saved = errno;

	r = calloc(1, sizeof(*r));
	if (!r)
		goto fail;
	if (posix_memalign((void **)&r->buf, 4096, rbt_cfg.ring_bytes)) {
		free(r);
		goto fail;
	}
	/* Touch every page now: page faults on the post/poll path would cost more
	 * than the recording itself. */
	memset(r->buf, 0, rbt_cfg.ring_bytes);
	r->size = rbt_cfg.ring_bytes;
	r->mask = r->size - 1;
	r->tid = rbt_gettid();
	pthread_mutex_lock(&rbt_reg_lock);
	r->next = rbt_rings;
	rbt_rings = r;
	pthread_mutex_unlock(&rbt_reg_lock);
	pthread_setspecific(rbt_ring_key, r);
	rbt_tls_ring = r;
	rbt_emit_thread(r);
	errno = saved;
	return r;
fail:
	/* Without memory for a ring this thread cannot be traced; nothing else
	 * stops, and the static dummy below makes every record a counted loss. */
	{
		static struct rbt_ring dummy;
		dummy.size = 0;
		dummy.mask = 0;
		errno = saved;
		return &dummy;
	}
}

static void rbt_wake_drainer(void)
{
	char c = 1;
	int saved = errno;

	if (rbt_wake_pipe[1] >= 0) {
		ssize_t w = write(rbt_wake_pipe[1], &c, 1);
		(void)w;
	}
	errno = saved;
}

/* Set when a context starts NIC clock sampling, so the writer samples it on its
 * next wake-up instead of after its current (possibly long) idle wait. */
static _Atomic int rbt_nic_started;

void rbt_wake_writer(void)
{
	atomic_store(&rbt_nic_started, 1);
	rbt_wake_drainer();
}

/* Space for len bytes without any loss bookkeeping, padding at the ring's end. */
static void *rbt_ring_take(struct rbt_ring *r, uint32_t len)
{
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t pos = head & r->mask;
	uint64_t pad = pos + len > r->size ? r->size - pos : 0;

	if (!r->size)
		return NULL;
	if (head + pad + len - r->cached_tail > r->size) {
		r->cached_tail = atomic_load_explicit(&r->tail, memory_order_acquire);
		if (head + pad + len - r->cached_tail > r->size)
			return NULL;
	}
	if (pad) {
		struct rbt_raw_hdr *h = (void *)(r->buf + pos);
		h->len = pad;
		h->kind = RBT_RAW_PAD;
		h->flags = 0;
		head += pad;
		atomic_store_explicit(&r->head, head, memory_order_release);
	}
	r->reserved = head + len;
	return r->buf + (head & r->mask);
}

static void rbt_count_loss(struct rbt_ring *r, uint32_t len)
{
	uint64_t t = rbt_now();

	if (!r->lost_events)
		r->lost_first = t;
	r->lost_last = t;
	r->lost_events++;
	r->lost_bytes += len;
}

#define RBT_LOSS_LEN RBT_ALIGN8(sizeof(struct rbt_raw_hdr) + sizeof(struct rbt_event))

static int rbt_write_loss(struct rbt_ring *r)
{
	struct rbt_raw_hdr *h = rbt_ring_take(r, RBT_LOSS_LEN);
	struct rbt_event *ev;

	if (!h)
		return 0;
	h->len = RBT_LOSS_LEN;
	h->kind = RBT_RAW_EVENT;
	h->flags = 0;
	ev = (void *)(h + 1);
	memset(ev, 0, sizeof(*ev));
	ev->type = RBT_EV_LOSS;
	ev->ts = r->lost_last;
	ev->u.loss.lost_stream = r->tid;
	ev->u.loss.events = r->lost_events;
	ev->u.loss.bytes = r->lost_bytes;
	ev->u.loss.first_ts = r->lost_first;
	ev->u.loss.last_ts = r->lost_last;
	rbt_ring_commit(r);
	r->lost_events = r->lost_bytes = 0;
	return 1;
}

void *rbt_ring_reserve_slow(struct rbt_ring *r, uint32_t len)
{
	uint64_t deadline = 0, spin_until = 0;
	int woke = 0;

	if (!r->size || len > r->size / 2) {
		rbt_count_loss(r, len);
		return NULL;
	}
	if (r->dropping) {
		uint64_t used = atomic_load_explicit(&r->head, memory_order_relaxed) -
				atomic_load_explicit(&r->tail, memory_order_acquire);
		if (used > r->size / 2) {
			rbt_count_loss(r, len);
			return NULL;
		}
		r->dropping = 0;
	}
	for (;;) {
		void *p;

		if (!r->lost_events || rbt_write_loss(r)) {
			p = rbt_ring_take(r, len);
			if (p)
				return p;
		}
		/* Full. Wait for the background thread (bounded), then drop. */
		if (atomic_load_explicit(&rbt_state, memory_order_relaxed) != 1 ||
		    !rbt_cfg.block_ms || rbt_tls_inside > 1)
			break;
		uint64_t now = rbt_now();
		if (!deadline)
			deadline =
				now + rbt_cfg.block_ms *
					      (rbt_tsc_hz ? rbt_tsc_hz : 3000000000ull) /
					      1000;
		else if (now > deadline) {
			r->dropping = 1;
			break;
		}
		if (!woke++) {
			rbt_wake_drainer();
			spin_until =
				now + (rbt_tsc_hz ? rbt_tsc_hz : 3000000000ull) / 10000;
		}
		/* The writer frees space record by record as it drains: spin a
		 * little (100 us) before sleeping, since a sleep is 50 us at best
		 * and the ring refills in less. */
		if (now < spin_until) {
			for (int i = 0; i < 64; i++)
				_mm_pause();
			continue;
		}
		struct timespec d = { 0, 50000 };
		int saved = errno;
		nanosleep(&d, NULL);
		errno = saved;
	}
	rbt_count_loss(r, len);
	return NULL;
}

void rbt_fold_flush(struct rbt_ring *r)
{
	uint32_t nf = r->nfold;

	r->nfold = 0; /* first: reserve below re-enters through here otherwise */
	for (uint32_t i = 0; i < nf; i++) {
		const struct rbt_fold *f = &r->folds[i];
		struct rbt_raw_poll *p = rbt_ring_reserve(r, sizeof(*p));
		if (!p)
			continue;
		p->h.len = sizeof(*p);
		p->h.kind = RBT_RAW_POLL;
		p->h.flags = 0;
		p->ts = f->ts;
		p->ts_exit = f->exit;
		p->cq = (uintptr_t)f->cq;
		p->ret = 0;
		p->asked = f->asked;
		p->api = f->api;
		p->count = f->n > UINT32_MAX ? UINT32_MAX : (uint32_t)f->n;
		p->nwc = 0;
		p->pad = 0;
		rbt_ring_commit(r);
	}
}

/* ---- generic events ------------------------------------------------------------- */
/* A slow-path event travels as a copy of struct rbt_event followed by the bytes
 * of its strings, blobs and arrays; pointers hold offsets from the record start
 * until the background thread turns them back into pointers. */
#define RBT_SZ_U(x)
#define RBT_SZ_I(x)
#define RBT_SZ_T(x)
#define RBT_SZ_H(x)
#define RBT_SZ_D(x)
#define RBT_SZ_S(x)	     sz += RBT_ALIGN8((x) ? strlen(x) + 1 : 0);
#define RBT_SZ_B(x)	     sz += RBT_ALIGN8((x).len);
#define RBT_SZ_F(kind, name) RBT_SZ_##kind(e->name)
#define RBT_SZ_A(rec, name) \
	sz += RBT_ALIGN8((size_t)e->n_##name * sizeof(struct rbt_##rec));

#define RBT_CP_U(x)
#define RBT_CP_I(x)
#define RBT_CP_T(x)
#define RBT_CP_H(x)
#define RBT_CP_D(x)
#define RBT_CP_S(x)                                 \
	if (x) {                                    \
		size_t l_ = strlen(x) + 1;          \
		memcpy(base + off, (x), l_);        \
		(x) = (const char *)(uintptr_t)off; \
		off += RBT_ALIGN8(l_);              \
	}
#define RBT_CP_B(x)                                         \
	if ((x).len) {                                      \
		memcpy(base + off, (x).data, (x).len);      \
		(x).data = (const uint8_t *)(uintptr_t)off; \
		off += RBT_ALIGN8((x).len);                 \
	} else {                                            \
		(x).data = NULL;                            \
	}
#define RBT_CP_F(kind, name) RBT_CP_##kind(e->name)
#define RBT_CP_A(rec, name)                                                 \
	if (e->n_##name) {                                                  \
		size_t l_ = (size_t)e->n_##name * sizeof(struct rbt_##rec); \
		memcpy(base + off, e->name, l_);                            \
		e->name = (const struct rbt_##rec *)(uintptr_t)off;         \
		off += RBT_ALIGN8(l_);                                      \
	} else {                                                            \
		e->name = NULL;                                             \
	}

#define RBT_FX_U(x)
#define RBT_FX_I(x)
#define RBT_FX_T(x)
#define RBT_FX_H(x)
#define RBT_FX_D(x)
#define RBT_FX_S(x) (x) = (x) ? (const char *)(base + (uintptr_t)(x)) : "";
#define RBT_FX_B(x)  \
	if ((x).len) \
		(x).data = base + (uintptr_t)(x).data;
#define RBT_FX_F(kind, name) RBT_FX_##kind(e->name)
#define RBT_FX_A(rec, name) \
	if (e->n_##name)    \
		e->name = (const struct rbt_##rec *)(base + (uintptr_t)e->name);

static size_t rbt_event_extra(const struct rbt_event *ev)
{
	size_t sz = 0;

	switch (ev->type) {
#define RBT__SZ_CASE(NAME, id, lname)                          \
	case RBT_EV_##NAME: {                                  \
		const struct rbt_ev_##lname *e = &ev->u.lname; \
		(void)e;                                       \
		RBT_EV_##lname(RBT_SZ_F, RBT_SZ_A) break;      \
	}
		RBT_EVENT_LIST(RBT__SZ_CASE)
	default:
		break;
	}
	return sz;
}

static void rbt_event_pack(struct rbt_event *copy, uint8_t *base, size_t off)
{
	switch (copy->type) {
#define RBT__CP_CASE(NAME, id, lname)                      \
	case RBT_EV_##NAME: {                              \
		struct rbt_ev_##lname *e = &copy->u.lname; \
		(void)e;                                   \
		RBT_EV_##lname(RBT_CP_F, RBT_CP_A) break;  \
	}
		RBT_EVENT_LIST(RBT__CP_CASE)
	default:
		break;
	}
}

static void rbt_event_unpack(struct rbt_event *ev, const uint8_t *base)
{
	switch (ev->type) {
#define RBT__FX_CASE(NAME, id, lname)                     \
	case RBT_EV_##NAME: {                             \
		struct rbt_ev_##lname *e = &ev->u.lname;  \
		(void)e;                                  \
		RBT_EV_##lname(RBT_FX_F, RBT_FX_A) break; \
	}
		RBT_EVENT_LIST(RBT__FX_CASE)
	default:
		break;
	}
}

void rbt_emit(const struct rbt_event *ev)
{
	struct rbt_ring *r = rbt_ring_get();
	size_t head = RBT_ALIGN8(sizeof(struct rbt_raw_hdr) + sizeof(struct rbt_event));
	size_t len = head + rbt_event_extra(ev);
	struct rbt_raw_hdr *h;
	struct rbt_event *copy;

	if (len > UINT32_MAX / 2)
		return;
	h = rbt_ring_reserve(r, (uint32_t)len);
	if (!h)
		return;
	h->len = (uint32_t)len;
	h->kind = RBT_RAW_EVENT;
	h->flags = 0;
	copy = (void *)(h + 1);
	memcpy(copy, ev, sizeof(*ev));
	rbt_event_pack(copy, (uint8_t *)h, head);
	rbt_ring_commit(r);
}

void rbt_note(int level, const char *text)
{
	struct rbt_event ev = { .type = RBT_EV_NOTE, .ts = rbt_now() };

	if (level > 0)
		rbt_warn("%s", text);
	ev.u.note.level = level;
	ev.u.note.text = text;
	rbt_emit(&ev);
}

/* ---- stacks and modules ----------------------------------------------------------- */
static unsigned long long rbt_modules_adds = ~0ull;
static pthread_mutex_t rbt_modules_lock = PTHREAD_MUTEX_INITIALIZER;

static void rbt_build_id(const struct dl_phdr_info *info, char *out, size_t outlen)
{
	out[0] = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE)
			continue;
		const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
		const uint8_t *end = p + ph->p_memsz;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *n = (const void *)p;
			const uint8_t *name = p + sizeof(*n);
			const uint8_t *desc = name + ((n->n_namesz + 3u) & ~3u);
			if (desc + n->n_descsz > end)
				break;
			if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 &&
			    !memcmp(name, "GNU", 4)) {
				size_t k = 0;
				for (uint32_t j = 0; j < n->n_descsz && k + 3 < outlen;
				     j++)
					k += snprintf(out + k, outlen - k, "%02x",
						      desc[j]);
				return;
			}
			p = desc + ((n->n_descsz + 3u) & ~3u);
		}
	}
}

static int rbt_module_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	uintptr_t lo = UINTPTR_MAX, hi = 0, lo_off = 0;
	char path[PATH_MAX], bid[80];
	struct rbt_event ev = { .type = RBT_EV_MODULE_MAP, .ts = rbt_now() };

	(void)size;
	(void)arg;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		if (ph->p_vaddr < lo) {
			lo = ph->p_vaddr;
			lo_off = ph->p_vaddr;
		}
		if (ph->p_vaddr + ph->p_memsz > hi)
			hi = ph->p_vaddr + ph->p_memsz;
	}
	if (lo == UINTPTR_MAX)
		return 0;
	if (info->dlpi_name && info->dlpi_name[0]) {
		snprintf(path, sizeof(path), "%s", info->dlpi_name);
	} else {
		ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
		path[n > 0 ? n : 0] = 0;
	}
	rbt_build_id(info, bid, sizeof(bid));
	/* offset is the link-time address of base: ip - base + offset is the
	 * address to look up in the module's symbol table. */
	ev.u.module_map.base = info->dlpi_addr + lo;
	ev.u.module_map.size = hi - lo;
	ev.u.module_map.offset = lo_off;
	ev.u.module_map.path = path;
	ev.u.module_map.build_id = bid;
	rbt_emit(&ev);
	return 0;
}

static int rbt_adds_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
		*(unsigned long long *)arg =
			info->dlpi_adds + info->dlpi_subs * 1000003ull;
	return 1;
}

/* Module maps go into the stream of the thread that needs them, before its stack;
 * they are emitted again whenever the set of loaded objects changed. */
static void rbt_emit_modules(void)
{
	unsigned long long adds = 0;

	dl_iterate_phdr(rbt_adds_cb, &adds);
	pthread_mutex_lock(&rbt_modules_lock);
	if (adds != rbt_modules_adds) {
		rbt_modules_adds = adds;
		dl_iterate_phdr(rbt_module_cb, NULL);
	}
	pthread_mutex_unlock(&rbt_modules_lock);
}

static uintptr_t rbt_self_lo, rbt_self_hi;

static int rbt_self_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	uintptr_t me = (uintptr_t)arg;

	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && me >= lo &&
		    me < lo + ph->p_memsz) {
			rbt_self_lo = lo;
			rbt_self_hi = lo + ph->p_memsz;
			return 1;
		}
	}
	return 0;
}

static int rbt_self_contains(const void *ip)
{
	if (!rbt_self_hi)
		dl_iterate_phdr(rbt_self_cb, (void *)(uintptr_t)rbt_self_contains);
	return (uintptr_t)ip >= rbt_self_lo && (uintptr_t)ip < rbt_self_hi;
}

void rbt_emit_stack(uint32_t ref_type)
{
	void *ips[48];
	struct rbt_frame frames[48];
	struct rbt_event ev = { .type = RBT_EV_STACK, .ts = rbt_now() };
	int n, saved = errno;

	if (!rbt_cfg.stacks)
		return;
	n = unw_backtrace(ips, 48);
	/* The stack starts at the program's call into the verb: our own frames
	 * (this function, record helpers, the wrapper) are left out. */
	int skip = 0;
	while (skip < n && rbt_self_contains(ips[skip]))
		skip++;
	if (skip == n)
		skip = 0;
	for (int i = skip; i < n; i++)
		frames[i - skip].ip = (uintptr_t)ips[i];
	rbt_emit_modules();
	ev.u.stack.ref_type = ref_type;
	ev.u.stack.n_frames = n - skip;
	ev.u.stack.frames = frames;
	rbt_emit(&ev);
	errno = saved;
}

/* ---- draining: raw records to events ----------------------------------------------- */
struct rbt_scratch {
	void *p;
	size_t cap;
};

static void *rbt_scratch(struct rbt_scratch *s, size_t n)
{
	if (n > s->cap) {
		size_t cap = s->cap ? s->cap : 4096;
		while (cap < n)
			cap *= 2;
		void *p = realloc(s->p, cap);
		if (!p)
			return NULL;
		s->p = p;
		s->cap = cap;
	}
	return s->p;
}

static struct rbt_scratch rbt_sc_wr, rbt_sc_sge, rbt_sc_wc;
static uint64_t rbt_events_appended;

static void rbt_append(struct rbt_event *ev, uint32_t stream)
{
	int err;

	if (!rbt_writer || rbt_writer_failed)
		return;
	ev->stream = stream;
	err = rbt_writer_append(rbt_writer, ev);
	if (err < 0) {
		rbt_writer_failed = 1;
		rbt_warn("cannot write trace %s: %s; the program runs on untraced",
			 rbt_path, rbt_strerror(err));
		atomic_store(&rbt_state, 2);
		return;
	}
	rbt_events_appended++;
	if (ev->type == RBT_EV_LOSS)
		rbt_lost_total += ev->u.loss.events;
}

static void rbt_decode_post(const struct rbt_raw_hdr *h, uint32_t stream)
{
	const struct rbt_raw_post *p = (const void *)h;
	const uint8_t *q = (const uint8_t *)(p + 1);
	/* Not zeroed: every field of the member used below is set, and the
	 * encoder reads no other (zeroing the whole union cost more than the
	 * rest of this function). */
	struct rbt_event ev;
	ev.ts = p->ts;
	/* Every sge takes 16 bytes of the record: that bounds their number without
	 * a counting pass. */
	size_t nsge = h->len / sizeof(struct rbt_raw_sge);
	const uint8_t *s;
	struct rbt_sge *sges =
		rbt_scratch(&rbt_sc_sge, (nsge + 1) * sizeof(struct rbt_sge));
	size_t wsz = h->kind == RBT_RAW_POST_SEND ? sizeof(struct rbt_send_wr)
						  : sizeof(struct rbt_recv_wr);
	void *wrs = rbt_scratch(&rbt_sc_wr, (p->nwr + 1) * wsz);
	if (!sges || !wrs)
		return;
	size_t k = 0;
	s = q;
	for (uint32_t i = 0; i < p->nwr; i++) {
		const struct rbt_raw_sge *rs;
		uint32_t n;
		if (h->kind == RBT_RAW_POST_SEND) {
			const struct rbt_raw_swr *w = (const void *)s;
			struct rbt_send_wr *o = (struct rbt_send_wr *)wrs + i;
			o->wr_id = w->wr_id;
			o->opcode = w->opcode;
			o->send_flags = w->send_flags;
			o->imm_data = w->imm;
			o->remote_addr = w->remote_addr;
			o->rkey = w->rkey;
			if (w->ext) {
				const struct rbt_raw_swr_ext *x = (const void *)(w + 1);
				o->compare_add = x->compare_add;
				o->swap = x->swap;
				o->ah = x->ah;
				o->remote_qpn = x->remote_qpn;
				o->remote_qkey = x->remote_qkey;
				rs = (const void *)(x + 1);
			} else {
				o->compare_add = 0;
				o->swap = 0;
				o->ah = 0;
				o->remote_qpn = 0;
				o->remote_qkey = 0;
				rs = (const void *)(w + 1);
			}
			n = w->nsge;
			o->n_sges = n;
			o->sges = sges + k;
			o->payload.len = w->payload_len;
			o->payload.data =
				w->payload_len ? (const uint8_t *)(rs + n) : NULL;
			s = (const uint8_t *)(rs + n) + RBT_ALIGN8(w->payload_len);
		} else {
			const struct rbt_raw_rwr *w = (const void *)s;
			struct rbt_recv_wr *o = (struct rbt_recv_wr *)wrs + i;
			o->wr_id = w->wr_id;
			o->payload.data = NULL;
			o->payload.len = 0;
			n = w->nsge;
			rs = (const void *)(w + 1);
			o->n_sges = n;
			o->sges = sges + k;
			s = (const uint8_t *)(rs + n);
		}
		for (uint32_t j = 0; j < n; j++, k++) {
			sges[k].addr = rs[j].addr;
			sges[k].length = rs[j].length;
			sges[k].lkey = rs[j].lkey;
		}
	}
	switch (h->kind) {
	case RBT_RAW_POST_SEND:
		ev.type = RBT_EV_POST_SEND;
		ev.u.post_send.ts_exit = p->ts_exit;
		ev.u.post_send.ret = p->ret;
		ev.u.post_send.qp = p->obj;
		ev.u.post_send.qp_num = p->qp_num;
		ev.u.post_send.bad_wr = p->bad_wr;
		ev.u.post_send.api = p->api;
		ev.u.post_send.n_wrs = p->nwr;
		ev.u.post_send.wrs = wrs;
		break;
	case RBT_RAW_POST_RECV:
		ev.type = RBT_EV_POST_RECV;
		ev.u.post_recv.ts_exit = p->ts_exit;
		ev.u.post_recv.ret = p->ret;
		ev.u.post_recv.qp = p->obj;
		ev.u.post_recv.qp_num = p->qp_num;
		ev.u.post_recv.bad_wr = p->bad_wr;
		ev.u.post_recv.n_wrs = p->nwr;
		ev.u.post_recv.wrs = wrs;
		break;
	default:
		ev.type = RBT_EV_POST_SRQ_RECV;
		ev.u.post_srq_recv.ts_exit = p->ts_exit;
		ev.u.post_srq_recv.ret = p->ret;
		ev.u.post_srq_recv.srq = p->obj;
		ev.u.post_srq_recv.bad_wr = p->bad_wr;
		ev.u.post_srq_recv.n_wrs = p->nwr;
		ev.u.post_srq_recv.wrs = wrs;
		break;
	}
	rbt_append(&ev, stream);
}

static void rbt_decode_poll(const struct rbt_raw_hdr *h, uint32_t stream)
{
	const struct rbt_raw_poll *p = (const void *)h;
	struct rbt_event ev; /* not zeroed: see rbt_decode_post() */
	struct rbt_wc *wcs =
		rbt_scratch(&rbt_sc_wc, (p->nwc + 1) * sizeof(struct rbt_wc));

	if (!wcs)
		return;
	for (uint32_t i = 0; i < p->nwc; i++) {
		const struct ibv_wc *w;
		uint64_t hw = 0;
		if (h->flags & RBT_POLL_WCX) {
			const struct rbt_raw_wcx *x =
				(const struct rbt_raw_wcx *)(p + 1) + i;
			w = &x->wc;
			hw = x->hw_ts;
		} else {
			w = (const struct ibv_wc *)(p + 1) + i;
		}
		wcs[i].payload.data = NULL;
		wcs[i].payload.len = 0;
		wcs[i].wr_id = w->wr_id;
		wcs[i].status = w->status;
		wcs[i].opcode = w->opcode;
		wcs[i].vendor_err = w->vendor_err;
		wcs[i].byte_len = w->byte_len;
		wcs[i].imm_data = w->wc_flags & IBV_WC_WITH_INV ? w->invalidated_rkey
								: be32toh(w->imm_data);
		wcs[i].qp_num = w->qp_num;
		wcs[i].src_qp = w->src_qp;
		wcs[i].wc_flags = w->wc_flags;
		wcs[i].pkey_index = w->pkey_index;
		wcs[i].slid = w->slid;
		wcs[i].sl = w->sl;
		wcs[i].dlid_path_bits = w->dlid_path_bits;
		wcs[i].hw_ts = hw;
	}
	ev.type = RBT_EV_POLL_CQ;
	ev.ts = p->ts;
	ev.u.poll_cq.ts_exit = p->ts_exit;
	ev.u.poll_cq.ret = p->ret;
	ev.u.poll_cq.cq = p->cq;
	ev.u.poll_cq.asked = p->asked;
	ev.u.poll_cq.api = p->api;
	ev.u.poll_cq.count = p->count ? p->count : 1;
	ev.u.poll_cq.n_wcs = p->nwc;
	ev.u.poll_cq.wcs = wcs;
	rbt_append(&ev, stream);
}

static void rbt_decode(const struct rbt_raw_hdr *h, uint32_t stream)
{
	switch (h->kind) {
	case RBT_RAW_EVENT: {
		struct rbt_event ev;
		memcpy(&ev, h + 1, sizeof(ev));
		rbt_event_unpack(&ev, (const uint8_t *)h);
		rbt_append(&ev, stream);
		break;
	}
	case RBT_RAW_POST_SEND:
	case RBT_RAW_POST_RECV:
	case RBT_RAW_POST_SRQ:
		rbt_decode_post(h, stream);
		break;
	case RBT_RAW_POLL:
		rbt_decode_poll(h, stream);
		break;
	case RBT_RAW_NOTIFY: {
		const struct rbt_raw_notify *n = (const void *)h;
		struct rbt_event ev = { .type = RBT_EV_REQ_NOTIFY, .ts = n->ts };
		ev.u.req_notify.ts_exit = n->ts_exit;
		ev.u.req_notify.ret = n->ret;
		ev.u.req_notify.cq = n->cq;
		ev.u.req_notify.solicited_only = n->solicited;
		rbt_append(&ev, stream);
		break;
	}
	default:
		break;
	}
}

/* Moves what r held when called into one chunk of its stream, and returns its
 * size in bytes. It does not chase records published meanwhile: reading right
 * behind the producer would pull the lines it is writing away from its core.
 * Called with rbt_writer_lock held, on the background thread (or at exit). */
static uint64_t rbt_drain_ring(struct rbt_ring *r)
{
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	uint64_t start = tail;
	int chunk = 0;

	while (tail != head) {
		const struct rbt_raw_hdr *h = (const void *)(r->buf + (tail & r->mask));
		if (h->len < sizeof(*h) || (h->len & 7) || h->len > r->size) {
			/* Cannot happen unless memory was trampled: drop the rest. */
			rbt_log("ring of thread %u damaged; dropping %llu bytes", r->tid,
				(unsigned long long)(head - tail));
			tail = head;
			break;
		}
		if (h->kind != RBT_RAW_PAD && rbt_writer && !rbt_writer_failed) {
			if (!chunk) {
				if (rbt_writer_begin_chunk(rbt_writer, r->tid) == 0)
					chunk = 1;
			}
			rbt_decode(h, r->tid);
		}
		tail += h->len;
		atomic_store_explicit(&r->tail, tail, memory_order_release);
	}
	atomic_store_explicit(&r->tail, tail, memory_order_release);
	if (chunk && rbt_writer && !rbt_writer_failed) {
		int err = rbt_writer_end_chunk(rbt_writer);
		if (err < 0) {
			rbt_writer_failed = 1;
			rbt_warn(
				"cannot write trace %s: %s; the program runs on untraced",
				rbt_path, rbt_strerror(err));
			atomic_store(&rbt_state, 2);
		}
	}
	return tail - start;
}

static void rbt_clock_sample_into(uint32_t stream)
{
	struct rbt_event ev = { .type = RBT_EV_CLOCK_SAMPLE };
	struct rbt_clock_pair p;

	rbt_clock_pair(&p);
	ev.ts = p.ticks;
	ev.u.clock_sample.mono_ns = p.mono_ns;
	ev.u.clock_sample.real_ns = p.real_ns;
	rbt_append(&ev, stream);
}

/* NIC clock samples of the contexts with timestamped CQs that are due (all: of
 * every one, at the end). Returns when the next is due (UINT64_MAX: none). With
 * rbt_writer_lock held. */
static uint64_t rbt_nic_sample_pass(uint32_t stream, int all)
{
	struct rbt_nic_sample s[16];
	struct rbt_event ev;
	uint64_t next;
	int n = rbt_dp_nic_samples(s, 16, rbt_tsc_hz / 1000 + 1, all, &next);

	if (!n || !rbt_writer || rbt_writer_failed)
		return next;
	if (rbt_writer_begin_chunk(rbt_writer, stream) < 0)
		return next;
	for (int i = 0; i < n; i++) {
		rbt_dp_nic_event(&s[i], &ev);
		rbt_append(&ev, stream);
	}
	rbt_writer_end_chunk(rbt_writer);
	return next;
}

static void rbt_clock_sample(uint32_t stream)
{
	if (!rbt_writer || rbt_writer_failed)
		return;
	if (rbt_writer_begin_chunk(rbt_writer, stream) < 0)
		return;
	rbt_clock_sample_into(stream);
	rbt_writer_end_chunk(rbt_writer);
}

/* Losses a producer counted but could not yet write (its ring stayed full, or the
 * thread ended first): written by the background thread. Only for rings whose
 * producer is gone or stopped. */
static void rbt_write_pending_loss(struct rbt_ring *r)
{
	if (!r->lost_events || !rbt_writer || rbt_writer_failed)
		return;
	struct rbt_event ev = { .type = RBT_EV_LOSS, .ts = r->lost_last };
	ev.u.loss.lost_stream = r->tid;
	ev.u.loss.events = r->lost_events;
	ev.u.loss.bytes = r->lost_bytes;
	ev.u.loss.first_ts = r->lost_first;
	ev.u.loss.last_ts = r->lost_last;
	if (rbt_writer_begin_chunk(rbt_writer, r->tid) == 0) {
		rbt_append(&ev, r->tid);
		rbt_writer_end_chunk(rbt_writer);
	}
	r->lost_events = 0;
	r->lost_bytes = 0;
}

/* One pass over all rings. all: drain every ring with data (flush time); else only
 * those at least a quarter full or whose thread is gone. */
static uint64_t rbt_drain_pass(int all, uint64_t *drained)
{
	struct rbt_ring *r, **pp;
	uint64_t seen = 0;

	*drained = 0;

	pthread_mutex_lock(&rbt_writer_lock);
	pthread_mutex_lock(&rbt_reg_lock);
	r = rbt_rings;
	pthread_mutex_unlock(&rbt_reg_lock);
	/* New rings are pushed at the list head, so walking from a snapshot of the
	 * head is safe without the lock; only this thread unlinks and frees. */
	for (; r; r = r->next) {
		uint64_t used = atomic_load_explicit(&r->head, memory_order_acquire) -
				atomic_load_explicit(&r->tail, memory_order_relaxed);
		seen += used;
		if (used && (all || used >= r->size / 4 || atomic_load(&r->dead)))
			*drained += rbt_drain_ring(r);
	}
	pthread_mutex_lock(&rbt_reg_lock);
	for (pp = &rbt_rings; (r = *pp);) {
		if (atomic_load(&r->dead) &&
		    atomic_load(&r->head) == atomic_load(&r->tail)) {
			rbt_write_pending_loss(r);
			*pp = r->next;
			free(r->buf);
			free(r);
		} else {
			pp = &r->next;
		}
	}
	pthread_mutex_unlock(&rbt_reg_lock);
	pthread_mutex_unlock(&rbt_writer_lock);
	return seen;
}

static void rbt_read_cmdline(char *buf, size_t len)
{
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t n = 0;

	buf[0] = 0;
	if (fd < 0)
		return;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0) {
		buf[0] = 0;
		return;
	}
	while (n > 0 && buf[n - 1] == 0)
		n--;
	for (ssize_t i = 0; i < n; i++)
		if (!buf[i])
			buf[i] = ' ';
	buf[n] = 0;
}

static int rbt_open_writer(void)
{
	struct rbt_header hdr = { 0 };
	char host[256] = "", cmd[4096];
	int err;

	gethostname(host, sizeof(host) - 1);
	rbt_read_cmdline(cmd, sizeof(cmd));
	hdr.pid = getpid();
	hdr.ppid = getppid();
	hdr.clock_source = RBT_CLOCK_TSC;
	hdr.clock_hz = rbt_tsc_hz;
	hdr.start = rbt_start_pair;
	hdr.host = host;
	hdr.cmdline = cmd;
	hdr.tool = RBT_TOOL_NAME;
	/* The writer's default zstd level (3): on a recorded ib_write_bw stream
	 * it was both smaller and faster than level 1 or the negative levels. */
	err = rbt_writer_open_fd(rbt_trace_fd, &hdr, NULL, &rbt_writer);
	rbt_trace_fd = -1; /* the writer owns it now, even on failure */
	if (err < 0) {
		rbt_writer = NULL;
		rbt_writer_failed = 1;
		rbt_warn("cannot write trace %s: %s; the program runs on untraced",
			 rbt_path, rbt_strerror(err));
		atomic_store(&rbt_state, 2);
		return err;
	}
	return 0;
}

static void rbt_close_writer(void)
{
	struct rbt_trailer tr = { 0 };

	if (!rbt_writer)
		return;
	rbt_clock_pair(&tr.end);
	tr.events = rbt_events_appended;
	tr.lost_events = rbt_lost_total;
	int err = rbt_writer_close(rbt_writer, &tr);
	if (err < 0 && !rbt_writer_failed)
		rbt_warn("cannot finish trace %s: %s", rbt_path, rbt_strerror(err));
	rbt_writer = NULL;
	rbt_log("trace %s: %llu events, %llu lost", rbt_path,
		(unsigned long long)rbt_events_appended,
		(unsigned long long)rbt_lost_total);
}

/* Losses still pending in producers when recording ends are written by the
 * background thread (the producers are gone or being stopped). */
static void rbt_final_losses(void)
{
	for (struct rbt_ring *r = rbt_rings; r; r = r->next)
		rbt_write_pending_loss(r);
}

static void *rbt_drainer_main(void *arg)
{
	uint32_t me = rbt_gettid();
	uint64_t next_flush, next_sample, next_nic = 0;
	unsigned tick = rbt_cfg.flush_ms < 20 ? rbt_cfg.flush_ms : 5;
	sigset_t all;

	(void)arg;
	rbt_tls_inside = 2; /* nothing this thread does is traced */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	prctl(PR_SET_NAME, "rbtrace-writer", 0, 0, 0);
	atomic_store(&rbt_drainer_tid, me);
	if (!rbt_tsc_hz) {
		rbt_tsc_hz = rbt_calibrate(&rbt_start_pair, 20);
		if (!rbt_tsc_hz)
			rbt_tsc_hz = 1000000000ull;
		rbt_cfg.flush_ticks = rbt_tsc_hz / 1000 * rbt_cfg.flush_ms;
	}
	pthread_mutex_lock(&rbt_writer_lock);
	rbt_open_writer();
	rbt_clock_sample(me);
	pthread_mutex_unlock(&rbt_writer_lock);
	next_flush = rbt_now() + rbt_cfg.flush_ticks;
	next_sample = rbt_now() + rbt_tsc_hz;
	int wait_ms = tick;
	while (!atomic_load(&rbt_stop_req)) {
		struct pollfd pfd = { .fd = rbt_wake_pipe[0], .events = POLLIN };
		char junk[64];
		if (poll(&pfd, 1, wait_ms) > 0) {
			ssize_t n = read(rbt_wake_pipe[0], junk, sizeof(junk));
			(void)n;
		}
		uint64_t now = rbt_now();
		int all = now >= next_flush;
		uint64_t drained;
		uint64_t seen = rbt_drain_pass(all, &drained);
		if (all)
			next_flush = now + rbt_cfg.flush_ticks;
		if (now >= next_sample) {
			pthread_mutex_lock(&rbt_writer_lock);
			rbt_clock_sample(me);
			pthread_mutex_unlock(&rbt_writer_lock);
			next_sample = now + rbt_tsc_hz;
		}
		/* NIC clock samples feed the analyzer's clock model. Checked every
		 * wake-up: a context that just got a timestamped CQ wakes us. */
		if (now >= next_nic || atomic_exchange(&rbt_nic_started, 0)) {
			pthread_mutex_lock(&rbt_writer_lock);
			next_nic = rbt_nic_sample_pass(me, 0);
			pthread_mutex_unlock(&rbt_writer_lock);
		}
		/* Drained a ring that was a quarter full: data comes at least that
		 * fast, look again at once. Busy: look again soon, before a ring
		 * fills (sooner when it fills fast). Idle: sleep until the next flush or sample (a producer with
		 * a full ring wakes us early). */
		if (drained) {
			wait_ms = 0;
		} else if (seen >= (64 << 10)) {
			wait_ms = 1;
		} else if (seen) {
			wait_ms = tick;
		} else {
			uint64_t next =
				next_flush < next_sample ? next_flush : next_sample;
			if (next_nic < next)
				next = next_nic;
			uint64_t t = rbt_now();
			uint64_t ms =
				next > t ? (next - t) / (rbt_tsc_hz / 1000 + 1) + 1 : 1;
			wait_ms = ms > 1000 ? 1000 : (int)ms;
		}
	}
	uint64_t drained;
	rbt_drain_pass(1, &drained);
	pthread_mutex_lock(&rbt_writer_lock);
	rbt_final_losses();
	rbt_nic_sample_pass(me, 1);
	rbt_clock_sample(me);
	rbt_close_writer();
	pthread_mutex_unlock(&rbt_writer_lock);
	if (rbt_cfg.debug) {
		/* What the recording cost this thread, for tuning (bench/). */
		struct timespec cpu;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
		double ns = (double)cpu.tv_sec * 1e9 + (double)cpu.tv_nsec;
		rbt_log("writer thread: %.1f ms CPU for %llu events, %.0f ns/event",
			ns / 1e6, (unsigned long long)rbt_events_appended,
			rbt_events_appended ? ns / (double)rbt_events_appended : 0.0);
	}
	atomic_store(&rbt_closed, 1);
	return NULL;
}

/* Paths that do not fit are cut short, and then simply fail to open. */
#define RBT_PATHF(buf, ...)                                       \
	do {                                                      \
		int n_ = snprintf(buf, sizeof(buf), __VA_ARGS__); \
		if (n_ < 0 || n_ >= (int)sizeof(buf))             \
			buf[0] = 0;                               \
	} while (0)

/* ---- output file ------------------------------------------------------------------ */
static int rbt_is_dir(const char *p)
{
	struct stat st;
	size_t n = strlen(p);

	if (n && p[n - 1] == '/')
		return 1;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

#define RBT_ENV_CLAIMED "RBTRACE_OUTPUT_CLAIMED"

static int rbt_open_output(void)
{
	const char *out = rbt_cfg.output;
	int fd = -1, flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, claimed_file = 0;
	const char *prog = program_invocation_short_name;
	const char *claim = getenv(RBT_ENV_CLAIMED);

	if (!prog || !*prog)
		prog = "program";
	/* Under `rbtrace record` the name is free when the run starts ("excl"):
	 * whichever process of the run creates it first has it, also when that
	 * is not an ancestor of the others (sh -c 'a; b'). */
	if (*out && !rbt_fork_gen && claim && !strcmp(claim, "excl") &&
	    !rbt_is_dir(out)) {
		fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0) {
			RBT_PATHF(rbt_path, "%s", out);
			setenv(RBT_ENV_CLAIMED, "1", 1);
			claimed_file = 1;
		}
	}
	if (fd >= 0) {
		/* claimed above */
	} else if (!*out || rbt_is_dir(out)) {
		const char *dir = *out ? out : ".";
		size_t n = strlen(dir);
		RBT_PATHF(rbt_path, "%s%srbtrace-%s-%d.rbt", dir,
			  n && dir[n - 1] == '/' ? "" : "/", prog, (int)getpid());
	} else if (!rbt_fork_gen && !claim) {
		/* The first process of the tree takes the file name itself; forked
		 * children and exec'd programs that inherit the setting write beside
		 * it, so that no process overwrites another's trace. */
		RBT_PATHF(rbt_path, "%s", out);
		setenv(RBT_ENV_CLAIMED, "1", 1);
		claimed_file = 1;
	} else {
		size_t n = strlen(out);
		if (n > 4 && !strcmp(out + n - 4, ".rbt"))
			n -= 4;
		RBT_PATHF(rbt_path, "%.*s-%d.rbt", (int)n, out, (int)getpid());
	}
	if (fd >= 0) {
		/* created with O_EXCL above */
	} else if (!claimed_file) {
		/* Never overwrite another trace of this run: an exec'd program keeps
		 * the pid (and often the name) of the one before it. */
		size_t n = strlen(rbt_path);
		if (n > 4 && !strcmp(rbt_path + n - 4, ".rbt"))
			n -= 4;
		char base[PATH_MAX - 32];
		RBT_PATHF(base, "%.*s", (int)n, rbt_path);
		flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
		fd = open(rbt_path, flags, 0600);
		for (int i = 2; fd < 0 && errno == EEXIST && i < 1000; i++) {
			RBT_PATHF(rbt_path, "%s.%d.rbt", base, i);
			fd = open(rbt_path, flags, 0600);
		}
	} else {
		fd = open(rbt_path, flags, 0600);
	}
	if (fd < 0) {
		rbt_warn("cannot create trace %s: %s; the program runs on untraced",
			 rbt_path, strerror(errno));
		return -1;
	}
	/* An existing file keeps its mode through O_TRUNC: make it private too (but
	 * never change a device node such as /dev/null). */
	struct stat st;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
		fchmod(fd, 0600);
	if (rbt_cfg.manifest[0]) {
		int mfd = open(rbt_cfg.manifest, O_WRONLY | O_APPEND | O_CLOEXEC);
		if (mfd >= 0) {
			char line[3 * PATH_MAX], cwd[PATH_MAX] = "";
			int l;
			if (rbt_path[0] != '/' && getcwd(cwd, sizeof(cwd)))
				l = snprintf(line, sizeof(line), "%s/%s\n", cwd,
					     rbt_path);
			else
				l = snprintf(line, sizeof(line), "%s\n", rbt_path);
			if (l < 0 || l >= (int)sizeof(line))
				l = 0;
			ssize_t w = write(mfd, line, l);
			(void)w;
			close(mfd);
		}
	}
	return fd;
}

/* ---- start, fork, signals, exit ---------------------------------------------------- */
static void rbt_fork_prepare(void);
static void rbt_fork_parent(void);
static void rbt_fork_child(void);
static void rbt_install_signals(void);

static int rbt_start_recorder(void)
{
	pthread_attr_t attr;
	int err;

	atomic_store(&rbt_stop_req, 0);
	atomic_store(&rbt_closed, 0);
	rbt_writer = NULL;
	rbt_writer_failed = 0;
	rbt_events_appended = 0;
	rbt_lost_total = 0;
	rbt_owner_pid = getpid();
	rbt_trace_fd = rbt_open_output();
	if (rbt_trace_fd < 0)
		return -1;
	if (pipe2(rbt_wake_pipe, O_CLOEXEC | O_NONBLOCK)) {
		rbt_wake_pipe[0] = rbt_wake_pipe[1] = -1;
	}
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	rbt_tls_inside++;
	err = pthread_create(&rbt_drainer, &attr, rbt_drainer_main, NULL);
	rbt_tls_inside--;
	pthread_attr_destroy(&attr);
	if (err) {
		rbt_warn("cannot start the trace writer thread: %s; the program runs on "
			 "untraced",
			 strerror(err));
		close(rbt_trace_fd);
		rbt_trace_fd = -1;
		return -1;
	}
	rbt_drainer_running = 1;
	return 0;
}

int rbt_start_slow(void)
{
	int saved = errno;

	pthread_mutex_lock(&rbt_start_lock);
	if (atomic_load(&rbt_state) == 0) {
		int state = 2;
		rbt_config_load();
		const char *dis = getenv(RBT_ENV_DISABLE);
		if (!(dis && *dis && strcmp(dis, "0"))) {
			rbt_clock_pair(&rbt_start_pair);
			pthread_key_create(&rbt_ring_key, rbt_ring_thread_exit);
			if (rbt_start_recorder() == 0) {
				static int atfork_done;
				if (!atfork_done++)
					pthread_atfork(rbt_fork_prepare, rbt_fork_parent,
						       rbt_fork_child);
				rbt_install_signals();
				state = 1;
			}
		}
		atomic_store(&rbt_state, state);
		rbt_log("recording %s to %s", state == 1 ? "on" : "off", rbt_path);
	}
	pthread_mutex_unlock(&rbt_start_lock);
	errno = saved;
	return atomic_load(&rbt_state) == 1;
}

static void rbt_fork_prepare(void)
{
	pthread_mutex_lock(&rbt_start_lock);
	pthread_mutex_lock(&rbt_writer_lock);
	pthread_mutex_lock(&rbt_reg_lock);
}

static void rbt_fork_parent(void)
{
	pthread_mutex_unlock(&rbt_reg_lock);
	pthread_mutex_unlock(&rbt_writer_lock);
	pthread_mutex_unlock(&rbt_start_lock);
}

/* The child writes its own trace: the parent's rings (including what this thread
 * recorded before fork) stay with the parent, whose writer still owns them. */
static void rbt_fork_child(void)
{
	struct rbt_ring *r, *next, *mine = rbt_tls_ring;

	pthread_mutex_init(&rbt_reg_lock, NULL);
	pthread_mutex_init(&rbt_writer_lock, NULL);
	pthread_mutex_init(&rbt_start_lock, NULL);
	pthread_mutex_init(&rbt_modules_lock, NULL);
	rbt_modules_adds = ~0ull;
	rbt_dp_fork_child();
	for (r = rbt_rings; r; r = next) {
		next = r->next;
		if (r != mine) {
			free(r->buf);
			free(r);
		}
	}
	rbt_rings = NULL;
	if (mine) {
		uint64_t h = atomic_load(&mine->head);
		atomic_store(&mine->tail, h);
		mine->cached_tail = h;
		mine->lost_events = mine->lost_bytes = 0;
		mine->nfold = 0;
		mine->dropping = 0;
		mine->tid = rbt_gettid();
		mine->next = NULL;
		rbt_rings = mine;
	}
	/* The parent's writer and descriptors belong to the parent. */
	rbt_writer = NULL;
	if (rbt_wake_pipe[0] >= 0) {
		close(rbt_wake_pipe[0]);
		close(rbt_wake_pipe[1]);
		rbt_wake_pipe[0] = rbt_wake_pipe[1] = -1;
	}
	if (rbt_trace_fd >= 0) {
		close(rbt_trace_fd);
		rbt_trace_fd = -1;
	}
	rbt_drainer_running = 0;
	if (atomic_load(&rbt_state) != 1)
		return;
	rbt_fork_gen++;
	rbt_clock_pair(&rbt_start_pair);
	if (rbt_start_recorder() != 0) {
		atomic_store(&rbt_state, 2);
		return;
	}
	if (mine)
		rbt_emit_thread(mine);
}

/* Stops recording and finishes the trace file. From a signal handler only the
 * async-signal-safe part runs: ask the background thread and wait, bounded. */
static void rbt_finish(int from_signal)
{
	if (atomic_load(&rbt_state) != 1 || !rbt_drainer_running ||
	    rbt_owner_pid != getpid())
		return;
	if (atomic_load(&rbt_drainer_tid) == rbt_gettid())
		return;
	if (rbt_tls_ring && rbt_tls_ring->nfold && rbt_tls_inside == 0) {
		rbt_tls_inside++;
		rbt_fold_flush(rbt_tls_ring);
		rbt_tls_inside--;
	}
	atomic_store(&rbt_stop_req, 1);
	rbt_wake_drainer();
	if (from_signal) {
		for (int i = 0; i < 2000 && !atomic_load(&rbt_closed); i++) {
			struct timespec d = { 0, 1000000 };
			nanosleep(&d, NULL);
		}
	} else {
		pthread_join(rbt_drainer, NULL);
		rbt_drainer_running = 0;
	}
	atomic_store(&rbt_state, 2);
}

static const int rbt_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGSEGV,
				   SIGBUS, SIGILL,  SIGFPE, SIGABRT };

static void rbt_on_signal(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;
	struct sigaction dfl = { .sa_handler = SIG_DFL };

	(void)uc;
	rbt_finish(1);
	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	/* A fault (SEGV, BUS, ILL, FPE raised by an instruction) fires again when
	 * the handler returns; a signal that was sent is raised again and
	 * delivered, with the default action, once this handler returns. */
	int fault = (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE) &&
		    si && si->si_code > 0;
	if (!fault)
		raise(sig);
	errno = saved;
}

/* Only signals still at their default action get our handler: a program that
 * handles a signal itself keeps its behaviour (and exits through our exit
 * hook). */
static void rbt_install_signals(void)
{
	static int done;

	if (done++)
		return;
	for (size_t i = 0; i < sizeof(rbt_signals) / sizeof(rbt_signals[0]); i++) {
		struct sigaction old, sa = { .sa_sigaction = rbt_on_signal };
		if (sigaction(rbt_signals[i], NULL, &old))
			continue;
		if (old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
			continue;
		sigemptyset(&sa.sa_mask);
		sa.sa_flags = SA_RESTART | SA_ONSTACK | SA_SIGINFO;
		sigaction(rbt_signals[i], &sa, NULL);
	}
}

__attribute__((destructor)) static void rbt_fini(void)
{
	rbt_finish(0);
}

/* exec replaces the image without running destructors: finish the trace first.
 * If exec fails, recording is over for this process (said once on stderr). */
static void rbt_before_exec(void)
{
	if (atomic_load(&rbt_state) == 1 && rbt_owner_pid == getpid()) {
		rbt_finish(0);
		rbt_log("trace finished before exec");
	}
}

RBT_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	int (*real)(const char *, char *const[], char *const[]) = rbt_next_execve();

	rbt_before_exec();
	return real(path, argv, envp);
}

RBT_EXPORT int execv(const char *path, char *const argv[])
{
	int (*real)(const char *, char *const[]) = rbt_next_execv();

	rbt_before_exec();
	return real(path, argv);
}

RBT_EXPORT int execvp(const char *file, char *const argv[])
{
	int (*real)(const char *, char *const[]) = rbt_next_execvp();

	rbt_before_exec();
	return real(file, argv);
}

RBT_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	int (*real)(const char *, char *const[], char *const[]) = rbt_next_execvpe();

	rbt_before_exec();
	return real(file, argv, envp);
}
