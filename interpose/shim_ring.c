/* shim_ring.c - the per-thread record rings: creation on a thread's first record,
 * the slow side of reserving (waiting for the writer, bounded, then counting
 * losses), folded empty polls, and slow-path events (rbt_emit) copied into the
 * ring with their strings and arrays.
 *
 * Runs on the application's threads. Once a thread has its ring nothing here
 * takes a lock, allocates or makes a system call, except waking the writer when
 * a ring is full (a write(2) to its pipe) and the bounded wait after that.
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
#include "interpose/shim_dp.h"

#include "interpose/shim_rec.h"

/* Defined beside the ring's slow path, which reads them (as one file's globals
 * they are reached without the GOT). */
struct rbt_config rbt_cfg;
_Atomic int rbt_state;
RBT_TLS int rbt_tls_inside;
RBT_TLS struct rbt_ring *rbt_tls_ring;

pthread_mutex_t rbt_reg_lock = PTHREAD_MUTEX_INITIALIZER; /* ring list */
struct rbt_ring *rbt_rings;
pthread_key_t rbt_ring_key;
int rbt_wake_pipe[2] = { -1, -1 };

/* ---- rings ---------------------------------------------------------------------- */
void rbt_ring_thread_exit(void *arg)
{
	struct rbt_ring *r = arg;

	/* Folded polls are written by their thread while recording; once sealed,
	 * by the writer thread. */
	atomic_store_explicit(&r->busy, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	if (r->nfold && atomic_load(&rbt_state) == 1)
		rbt_fold_flush(r);
	atomic_store_explicit(&r->busy, 0, memory_order_release);
	rbt_tls_ring = NULL;
	atomic_store_explicit(&r->dead, 1, memory_order_release);
}

void rbt_emit_thread(struct rbt_ring *r)
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

void rbt_wake_drainer(void)
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
_Atomic int rbt_nic_started;

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
		int st = atomic_load_explicit(&rbt_state, memory_order_relaxed);
		if ((st != 1 && st != RBT_STATE_SEALED) || !rbt_cfg.block_ms ||
		    rbt_tls_inside > 1)
			break;
		uint64_t now = rbt_now();
		/* rbt_tsc_hz: 0 until the background thread calibrated */
		uint64_t hz = __atomic_load_n(&rbt_tsc_hz, __ATOMIC_RELAXED);
		if (!hz)
			hz = 3000000000ull;
		if (!deadline)
			deadline = now + rbt_cfg.block_ms * hz / 1000;
		else if (now > deadline) {
			r->dropping = 1;
			break;
		}
		if (!woke++) {
			rbt_wake_drainer();
			spin_until = now + hz / 10000;
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

static void rbt_fold_put(struct rbt_ring *r, const struct rbt_fold *f, uint64_t ts,
			 uint64_t exit, uint64_t n)
{
	rbt_poll_put(r,
		     &(struct rbt_raw_poll){ .ts = ts,
					     .ts_exit = exit,
					     .cq = (uintptr_t)f->cq,
					     .asked = f->asked,
					     .api = f->api,
					     .count = n > UINT32_MAX ? UINT32_MAX
								     : (uint32_t)n },
		     NULL, 0);
}

void rbt_fold_flush(struct rbt_ring *r)
{
	uint32_t nf = r->nfold;

	r->nfold = 0; /* first: reserve below re-enters through here otherwise */
	for (uint32_t i = 0; i < nf; i++) {
		const struct rbt_fold *f = &r->folds[i];
		/* a last poll longer than twice the run's period before it: its own
		 * record, its entry the bound (shim_poll.c) */
		if (f->n >= 2 && f->prev_exit > f->ts &&
		    f->exit - f->last_ts > 2 * ((f->prev_exit - f->ts) / (f->n - 1))) {
			rbt_fold_put(r, f, f->ts, f->prev_exit, f->n - 1);
			rbt_fold_put(r, f, f->last_ts, f->exit, 1);
		} else {
			rbt_fold_put(r, f, f->ts, f->exit, f->n);
		}
	}
}

/* ---- generic events ------------------------------------------------------------- */
/* A slow-path event travels as a copy of struct rbt_event followed by the bytes
 * of its strings, blobs and arrays; pointers hold offsets from the record start
 * until the background thread turns them back into pointers. */
enum { RBT_WALK_SIZE, RBT_WALK_PACK, RBT_WALK_UNPACK };
#define RBT_W_U(x)
#define RBT_W_I(x)
#define RBT_W_T(x)
#define RBT_W_H(x)
#define RBT_W_D(x)
#define RBT_W_S(x)                                                      \
	if (op == RBT_WALK_UNPACK) {                                    \
		(x) = (x) ? (const char *)(base + (uintptr_t)(x)) : ""; \
	} else if (x) {                                                 \
		size_t l_ = strlen(x) + 1;                              \
		if (op == RBT_WALK_PACK) {                              \
			memcpy(base + off, (x), l_);                    \
			(x) = (const char *)(uintptr_t)off;             \
		}                                                       \
		off += RBT_ALIGN8(l_);                                  \
	}
#define RBT_W_B(x)                                             \
	if (op == RBT_WALK_UNPACK) {                           \
		if ((x).len)                                   \
			(x).data = base + (uintptr_t)(x).data; \
	} else if (op == RBT_WALK_SIZE) {                      \
		off += RBT_ALIGN8((x).len);                    \
	} else if ((x).len) {                                  \
		memcpy(base + off, (x).data, (x).len);         \
		(x).data = (const uint8_t *)(uintptr_t)off;    \
		off += RBT_ALIGN8((x).len);                    \
	} else {                                               \
		(x).data = NULL;                               \
	}
#define RBT_W_F(kind, name) RBT_W_##kind(e->name)
#define RBT_W_A(rec, name)                                                               \
	if (op == RBT_WALK_UNPACK) {                                                     \
		if (e->n_##name)                                                         \
			e->name = (const struct rbt_##rec *)(base + (uintptr_t)e->name); \
	} else if (e->n_##name) {                                                        \
		size_t l_ = (size_t)e->n_##name * sizeof(struct rbt_##rec);              \
		if (op == RBT_WALK_PACK) {                                               \
			memcpy(base + off, e->name, l_);                                 \
			e->name = (const struct rbt_##rec *)(uintptr_t)off;              \
		}                                                                        \
		off += RBT_ALIGN8(l_);                                                   \
	} else if (op == RBT_WALK_PACK) {                                                \
		e->name = NULL;                                                          \
	}

/* One walk over ev's strings, blobs and arrays: SIZE adds up the bytes they
 * take after the record's head (ev is only read), PACK copies them from off on
 * and turns the pointers into offsets, UNPACK turns offsets back into
 * pointers. Returns off after them. */
static size_t rbt_event_walk(struct rbt_event *ev, int op, uint8_t *base, size_t off)
{
	switch (ev->type) {
#define RBT__W_CASE(NAME, id, lname)                     \
	case RBT_EV_##NAME: {                            \
		struct rbt_ev_##lname *e = &ev->u.lname; \
		(void)e;                                 \
		RBT_EV_##lname(RBT_W_F, RBT_W_A) break;  \
	}
		RBT_EVENT_LIST(RBT__W_CASE)
	default:
		break;
	}
	return off;
}

void rbt_event_unpack(struct rbt_event *ev, const uint8_t *base)
{
	/* UNPACK writes only ev, never base */
	rbt_event_walk(ev, RBT_WALK_UNPACK, (uint8_t *)base, 0);
}

void rbt_emit(const struct rbt_event *ev)
{
	struct rbt_ring *r = rbt_ring_get();
	size_t head = RBT_ALIGN8(sizeof(struct rbt_raw_hdr) + sizeof(struct rbt_event));
	size_t len =
		head + rbt_event_walk((struct rbt_event *)ev, RBT_WALK_SIZE, NULL, 0);
	struct rbt_raw_hdr *h;
	struct rbt_event *copy;
	/* Busy while writing, like a data-path call (which may be emitting). */
	int was_busy = atomic_load_explicit(&r->busy, memory_order_relaxed);

	if (len > UINT32_MAX / 2)
		return;
	atomic_store_explicit(&r->busy, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	if (!was_busy && atomic_load(&rbt_state) == RBT_STATE_SEALED) {
		/* Sealed before this thread was seen busy: the final drain may be
		 * over. Counted in the trailer instead. */
		atomic_fetch_add(&rbt_late_lost, 1);
		atomic_store_explicit(&r->busy, 0, memory_order_release);
		return;
	}
	h = rbt_ring_reserve(r, (uint32_t)len);
	if (h) {
		h->len = (uint32_t)len;
		h->kind = RBT_RAW_EVENT;
		h->flags = 0;
		copy = (void *)(h + 1);
		memcpy(copy, ev, sizeof(*ev));
		rbt_event_walk(copy, RBT_WALK_PACK, (uint8_t *)h, head);
		rbt_ring_commit(r);
	}
	atomic_store_explicit(&r->busy, was_busy, memory_order_release);
}

/* ---- data-path entry, the seal, parking ------------------------------------------- */
_Atomic uint64_t rbt_late_lost;
RBT_TLS int rbt_tls_finishing;

/* Not recording on the fast path: first call of the thread (no ring yet), the
 * recorder not started, a nested call, off, or sealed. */
int rbt_dp_recording_slow(void)
{
	struct rbt_ring *r = rbt_tls_ring;
	int s;

	if (rbt_tls_inside)
		return 0;
	if (r)
		atomic_store_explicit(&r->busy, 0, memory_order_release);
	s = atomic_load(&rbt_state);
	if (s == 0 && rbt_start_slow())
		s = 1;
	if (s == 1) {
		/* The ring is registered before the thread is marked busy, so a
		 * seal that follows sees it. */
		r = rbt_ring_get();
		atomic_store_explicit(&r->busy, 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_seq_cst);
		s = atomic_load(&rbt_state);
		if (s == 1)
			return 1;
		atomic_store_explicit(&r->busy, 0, memory_order_release);
	}
	if (s == RBT_STATE_SEALED)
		rbt_park();
	return 0;
}

/* The thread finishing the trace (and the writer) goes on untraced; every other
 * thread waits here until the process ends, so that no verb runs after the trace
 * was closed. A failed exec lets them go (state 2, untraced), and so does a
 * process still alive RBT_PARK_MAX_S after its trailer (an exit that waits for a
 * parked thread, e.g. a library destructor joining it): never a hang, and one
 * warning that the trace misses what they do then. */
#define RBT_PARK_MAX_S 10

void rbt_park(void)
{
	int saved = errno, after_close = 0;
	static _Atomic int warned;

	if (rbt_tls_finishing || rbt_tls_inside)
		return;
	while (atomic_load(&rbt_state) == RBT_STATE_SEALED) {
		struct timespec d = { 0, 1000000 };
		nanosleep(&d, NULL);
		if (atomic_load(&rbt_closed) && ++after_close >= RBT_PARK_MAX_S * 1000) {
			if (!atomic_exchange(&warned, 1))
				rbt_warn(
					"the process goes on %d s after its trace %s was "
					"finished: verbs called from now on are not in "
					"it",
					RBT_PARK_MAX_S, rbt_path);
			break;
		}
	}
	errno = saved;
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
