/*
 * softnic retry: completing and failing send WRs, the pending send queue of
 * WRs that wait for a receive (RNR) or an unreachable peer, the per-QP lock,
 * and the helper thread that retries pending WRs and delivers delayed
 * notifications of the latency model (those still held at exit() too). The
 * helper thread may sleep and lock; the paths called from post and poll only
 * try its lock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "softnic_data.h"

/* A QP's pend_head and pend_next_try_ns are written under its lock and read
 * without it by the helper thread (sn_helper_pass): relaxed atomic accesses,
 * plain moves on x86. */
#define SN_PEND_SET(f, v) __atomic_store_n(&(f), (v), __ATOMIC_RELAXED)
#define SN_PEND_GET(f)	  __atomic_load_n(&(f), __ATOMIC_RELAXED)

void sn_spin_lock(_Atomic int *l)
{
	int spins = 0;

	while (atomic_exchange_explicit(l, 1, memory_order_acquire)) {
		while (atomic_load_explicit(l, memory_order_relaxed))
			if (++spins > 200) {
				sched_yield();
				spins = 0;
			}
	}
}

void sn_qp_lock(struct sn_qp *qp)
{
	sn_spin_lock(&qp->lock);
}

void sn_qp_unlock(struct sn_qp *qp)
{
	atomic_store_explicit(&qp->lock, 0, memory_order_release);
}

/* ---------------- completing and failing send WRs ---------------- */

_Atomic int sn_npending; /* WRs on pending queues, process-wide */

static void sn_qp_to_err(struct sn_qp *qp);

static void sn_complete(struct sn_qp *qp, struct sn_swr *w, uint32_t st)
{
	struct sn_cqe c;
	uint64_t now = 0;

	if (st == IBV_WC_SUCCESS && !(w->flags & IBV_SEND_SIGNALED) && !qp->sig_all)
		return;
	memset(&c, 0, sizeof(c));
	c.wr_id = w->wr_id;
	c.status = st;
	c.opcode = sn_send_wc_opcode(w->opcode);
	c.byte_len = w->byte_len;
	c.qp_num = qp->shm->qpn;
	c.local_qp = (uint64_t)(uintptr_t)qp;
	c.sq_idx = w->sq_idx;
	c.visible_ns = st == IBV_WC_SUCCESS ? w->vis_ns : 0;
	c.ts = sn_cqe_time(qp->scq->shm, &now, c.visible_ns);
	if (!sn_cq_push(qp->scq->shm, &c, &qp->scq->chan_wfd) &&
	    st != IBV_WC_WR_FLUSH_ERR) {
		if (atomic_load(&qp->shm->state) != IBV_QPS_ERR)
			sn_async_event(qp->shm->async_path, NULL, IBV_EVENT_QP_FATAL,
				       qp->shm->cookie);
		sn_qp_to_err(qp);
	}
	if (st != IBV_WC_SUCCESS && st != IBV_WC_WR_FLUSH_ERR) {
		SN_ADD1(qp->shm->cnt.errors, 1);
		sn_qp_to_err(qp);
	}
}

static void sn_pend_pop_flush(struct sn_qp *qp)
{
	while (qp->pend_head) {
		struct sn_pend *p = qp->pend_head;

		SN_PEND_SET(qp->pend_head, p->next);
		if (!qp->pend_head) {
			qp->pend_tail = NULL;
			atomic_fetch_sub(&sn_npending, 1);
		}
		SN_ADD1(qp->shm->cnt.flushes, 1);
		sn_complete(qp, &p->w, IBV_WC_WR_FLUSH_ERR);
		free(p->w.inl);
		free(p);
	}
}

void sn_pend_free_all(struct sn_qp *qp)
{
	while (qp->pend_head) {
		struct sn_pend *p = qp->pend_head;

		SN_PEND_SET(qp->pend_head, p->next);
		if (!qp->pend_head)
			atomic_fetch_sub(&sn_npending, 1);
		free(p->w.inl);
		free(p);
	}
	qp->pend_tail = NULL;
}

/* Lock held. Outstanding WRs are flushed, the RQ too unless on an SRQ. */
static void sn_qp_to_err(struct sn_qp *qp)
{
	uint32_t old = atomic_exchange(&qp->shm->state, IBV_QPS_ERR);

	qp->qpx.qp_base.state = IBV_QPS_ERR;
	if (old == IBV_QPS_ERR && !qp->pend_head)
		return;
	sn_pend_pop_flush(qp);
	if (!qp->srq && qp->rcq)
		sn_rq_flush(&qp->shm->rq, qp->rcq->shm, qp->shm->qpn, &qp->rcq->chan_wfd);
	else if (old != IBV_QPS_ERR)
		sn_async_event(qp->shm->async_path, NULL, IBV_EVENT_QP_LAST_WQE_REACHED,
			       qp->shm->cookie);
}

void sn_qp_flush(struct sn_qp *qp)
{
	sn_qp_lock(qp);
	sn_qp_to_err(qp);
	sn_qp_unlock(qp);
}

static bool sn_pend_add(struct sn_qp *qp, struct sn_swr *w)
{
	struct sn_pend *p = malloc(sizeof(*p) + w->num_sge * sizeof(struct ibv_sge));

	if (!p) {
		sn_complete(qp, w, IBV_WC_GENERAL_ERR);
		return false;
	}
	p->next = NULL;
	p->w = *w;
	if (!w->inl)
		memcpy(p->sges, w->sge, w->num_sge * sizeof(struct ibv_sge));
	p->w.sge = p->sges;
	if ((w->flags & IBV_SEND_INLINE) || w->inl) {
		/* inline data belongs to the caller only until post returns */
		uint32_t i, len = 0;
		char *buf;

		if (w->inl)
			len = w->inl_len;
		else
			for (i = 0; i < w->num_sge; i++)
				len += w->sge[i].length;
		buf = malloc(len ? len : 1);
		if (!buf) {
			free(p);
			sn_complete(qp, w, IBV_WC_GENERAL_ERR);
			return false;
		}
		if (w->inl) {
			memcpy(buf, w->inl, len);
		} else {
			len = 0;
			for (i = 0; i < w->num_sge; i++) {
				memcpy(buf + len, (void *)(uintptr_t)w->sge[i].addr,
				       w->sge[i].length);
				len += w->sge[i].length;
			}
		}
		p->w.inl = buf;
		p->w.inl_len = len;
	}
	if (qp->pend_tail)
		qp->pend_tail->next = p;
	else {
		SN_PEND_SET(qp->pend_head, p);
		qp->pend_deadline_ns = 0;
		SN_PEND_SET(qp->pend_next_try_ns, 0);
		atomic_fetch_add(&sn_npending, 1);
	}
	qp->pend_tail = p;
	return true;
}

static const uint32_t sn_rnr_us[32] = {
	655360, 10,    20,    30,    40,    60,	    80,	    120,    160,    240,    320,
	480,	640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240,  15360,
	20480,	30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
};

/* Lock held: retry the head of the pending queue until it blocks again. */
static void sn_progress(struct sn_qp *qp)
{
	uint64_t now = sn_now_ns();

	while (qp->pend_head) {
		struct sn_pend *p = qp->pend_head;
		uint32_t st;
		int r;

		if (atomic_load(&qp->shm->state) == IBV_QPS_ERR) {
			sn_pend_pop_flush(qp);
			return;
		}
		r = sn_exec(qp, &p->w, &st);
		if (r != SN_DONE) {
			uint64_t period;

			if (r == SN_RETRY_RNR) {
				uint32_t t =
					qp->peer ? qp->peer->shm->min_rnr_timer & 31 : 12;

				period = (uint64_t)sn_rnr_us[t] * 1000;
			} else {
				period = qp->attr.timeout
						 ? 4096ull << (qp->attr.timeout & 31)
						 : 0;
			}
			if (!qp->pend_deadline_ns || qp->pend_kind != r) {
				qp->pend_kind = r;
				if (r == SN_RETRY_RNR)
					qp->pend_deadline_ns =
						qp->attr.rnr_retry == 7
							? UINT64_MAX
							: now + period * qp->attr.rnr_retry;
				else
					qp->pend_deadline_ns =
						period ? now + period * (qp->attr.retry_cnt +
									 1ull)
						       : UINT64_MAX;
			}
			if (now < qp->pend_deadline_ns) {
				uint64_t step = period ? period : 1000000;

				if (step > 10000000)
					step = 10000000;
				SN_PEND_SET(qp->pend_next_try_ns, now + step);
				SN_ADD1(qp->shm->cnt.retries, 1);
				return;
			}
			st = r == SN_RETRY_RNR ? IBV_WC_RNR_RETRY_EXC_ERR
					       : IBV_WC_RETRY_EXC_ERR;
		}
		SN_PEND_SET(qp->pend_head, p->next);
		if (!qp->pend_head) {
			qp->pend_tail = NULL;
			atomic_fetch_sub(&sn_npending, 1);
		}
		qp->pend_deadline_ns = 0;
		sn_complete(qp, &p->w, st);
		free(p->w.inl);
		free(p);
	}
}

/* Lock held. Returns true when the WR went to the pending queue. */
bool sn_submit(struct sn_qp *qp, struct sn_swr *w)
{
	uint32_t st;
	int r;

	if (SN_UNLIKELY(atomic_load_explicit(&qp->shm->state, memory_order_relaxed) ==
			IBV_QPS_ERR)) {
		SN_ADD1(qp->shm->cnt.flushes, 1);
		sn_complete(qp, w, IBV_WC_WR_FLUSH_ERR);
		return false;
	}
	if (SN_UNLIKELY(qp->pend_head)) {
		sn_pend_add(qp, w);
		sn_progress(qp);
		return qp->pend_head != NULL;
	}
	r = sn_exec(qp, w, &st);
	if (SN_LIKELY(r == SN_DONE)) {
		sn_complete(qp, w, st);
		return false;
	}
	if (!sn_pend_add(qp, w))
		return false;
	sn_progress(qp);
	return qp->pend_head != NULL;
}

/* ---------------- the helper thread ---------------- */

static pthread_mutex_t sn_hm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sn_hc;
static struct sn_qp *sn_hlist;
static bool sn_hstarted;

struct sn_dnote {
	struct sn_dnote *next;
	struct sn_cq_shm *cq;
	bool if_armed; /* moderation: only if the CQ is still armed then */
	uint64_t when, cookie;
	char path[SN_NAME];
};
static struct sn_dnote *sn_dnotes;

/* A CQ's dnote names the process whose helper owes its delayed event (its
 * pid), 0 when none is pending. */
static uint32_t sn_dnote_me(void)
{
	return (uint32_t)getpid();
}

/* Delivers the notes due by now (UINT64_MAX: all of them), with sn_hm held;
 * *earliest becomes the next one's time. */
static void sn_dnotes_pass_until(uint64_t *earliest, uint64_t now)
{
	struct sn_dnote **pp = &sn_dnotes, *d;
	uint32_t me = sn_dnote_me();

	while ((d = *pp)) {
		if (d->when <= now) {
			int fd = -1;
			uint32_t mine = me;

			/* only ours: another process may have taken the CQ over
			 * (it thought this one dead) */
			atomic_compare_exchange_strong(&d->cq->dnote, &mine, 0);
			if (!d->if_armed || atomic_exchange(&d->cq->armed, 0))
				sn_notify_fd(&fd, d->path, d->cookie);
			if (fd >= 0)
				close(fd);
			*pp = d->next;
			free(d);
			continue;
		}
		if (d->when < *earliest)
			*earliest = d->when;
		pp = &d->next;
	}
}

static void sn_dnotes_pass(uint64_t *earliest)
{
	sn_dnotes_pass_until(earliest, sn_now_ns());
}

static void sn_helper_pass(uint64_t *earliest)
{
	struct sn_qp **pp = &sn_hlist, *qp;
	uint64_t now = sn_now_ns();

	while ((qp = *pp)) {
		if (!atomic_exchange_explicit(&qp->lock, 1, memory_order_acquire)) {
			if (qp->pend_head && now >= qp->pend_next_try_ns)
				sn_progress(qp);
			sn_qp_unlock(qp);
		}
		/* the QP may be busy (its lock taken by a poster): both reads
		 * below are racy by design, hence SN_PEND_GET */
		if (!SN_PEND_GET(qp->pend_head)) {
			qp->on_helper = false;
			*pp = qp->helper_next;
			continue;
		}
		if (earliest && SN_PEND_GET(qp->pend_next_try_ns) < *earliest)
			*earliest = SN_PEND_GET(qp->pend_next_try_ns);
		pp = &qp->helper_next;
	}
}

static void *sn_helper_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&sn_hm);
	for (;;) {
		uint64_t earliest = UINT64_MAX;
		struct timespec ts;

		sn_helper_pass(&earliest);
		sn_dnotes_pass(&earliest);
		if (earliest == UINT64_MAX) {
			pthread_cond_wait(&sn_hc, &sn_hm);
			continue;
		}
		if (earliest < sn_now_ns() + 20000)
			earliest = sn_now_ns() + 20000;
		ts.tv_sec = (time_t)(earliest / 1000000000ull);
		ts.tv_nsec = (long)(earliest % 1000000000ull);
		pthread_cond_timedwait(&sn_hc, &sn_hm, &ts);
	}
	return NULL;
}

/* fork: the helper thread does not follow into the child, and its mutex
 * must not be copied while held */
static pid_t sn_hpid;

static void sn_hm_prepare(void)
{
	/* the helper's order: its mutex, then the global one */
	pthread_mutex_lock(&sn_hm);
	pthread_mutex_lock(&sn_g.lock);
}

static void sn_hm_parent(void)
{
	pthread_mutex_unlock(&sn_g.lock);
	pthread_mutex_unlock(&sn_hm);
}

static void sn_hm_child(void)
{
	sn_fabric_atfork_child();
	pthread_mutex_unlock(&sn_g.lock);
	pthread_mutex_unlock(&sn_hm);
	sn_hstarted = false;
	sn_hlist = NULL;
	sn_dnotes = NULL; /* leaked: they were the parent's */
	atomic_store(&sn_npending, 0);
}

__attribute__((constructor)) static void sn_data_init(void)
{
	pthread_atfork(sn_hm_prepare, sn_hm_parent, sn_hm_child);
}

void sn_helper_kick(struct sn_qp *qp)
{
	pthread_mutex_lock(&sn_hm);
	if (!sn_hstarted || sn_hpid != getpid()) {
		pthread_condattr_t a;
		pthread_attr_t ta;
		pthread_t t;

		pthread_condattr_init(&a);
		pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
		pthread_cond_init(&sn_hc, &a);
		pthread_attr_init(&ta);
		pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &ta, sn_helper_main, NULL) == 0) {
			sn_hstarted = true;
			sn_hpid = getpid();
		}
		pthread_attr_destroy(&ta);
	}
	if (qp && !qp->on_helper) {
		qp->on_helper = true;
		qp->helper_next = sn_hlist;
		sn_hlist = qp;
	}
	pthread_cond_signal(&sn_hc);
	pthread_mutex_unlock(&sn_hm);
}

static void sn_delay_notify_how(struct sn_cq_shm *cq, uint64_t when, bool if_armed);

void sn_delay_notify(struct sn_cq_shm *cq, uint64_t when)
{
	sn_delay_notify_how(cq, when, false);
}

void sn_delay_notify_armed(struct sn_cq_shm *cq, uint64_t when)
{
	sn_delay_notify_how(cq, when, true);
}

/* Claims the CQ's pending delayed event for this process: false when a live
 * process already owes one. An owner that died (kill -9, _exit) before its
 * helper delivered is taken over, or the CQ's delayed events would merge
 * into one that never comes. */
static bool sn_dnote_claim(struct sn_cq_shm *cq)
{
	uint32_t me = sn_dnote_me(), cur = atomic_load(&cq->dnote);
	int e = errno; /* the program's, on its post path */
	bool ours = false;

	for (;;) {
		if (cur && (cur == me || kill((pid_t)cur, 0) == 0 || errno == EPERM))
			break;
		if (atomic_compare_exchange_weak(&cq->dnote, &cur, me)) {
			ours = true;
			break;
		}
	}
	errno = e;
	return ours;
}

static void sn_delay_notify_how(struct sn_cq_shm *cq, uint64_t when, bool if_armed)
{
	struct sn_dnote *d;
	uint32_t me = sn_dnote_me();

	if (!sn_dnote_claim(cq)) {
		/* one event per arm: a pending one will do, but it must not
		 * wait for an arm this caller already took */
		if (!if_armed) {
			pthread_mutex_lock(&sn_hm);
			for (d = sn_dnotes; d; d = d->next)
				if (d->cq == cq)
					d->if_armed = false;
			pthread_mutex_unlock(&sn_hm);
		}
		return;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		atomic_compare_exchange_strong(&cq->dnote, &me, 0);
		return;
	}
	d->cq = cq;
	d->if_armed = if_armed;
	d->when = when;
	d->cookie = cq->cookie;
	memcpy(d->path, cq->chan_path, sizeof(d->path));
	pthread_mutex_lock(&sn_hm);
	d->next = sn_dnotes;
	sn_dnotes = d;
	pthread_mutex_unlock(&sn_hm);
	sn_helper_kick(NULL);
}

/* exit(): the helper thread dies with the process, and the events it holds
 * belong to CQs that other processes wait on (a producer that posts its
 * last SEND and exits). Each is delivered at its time - the helper keeps
 * running while this waits, at most a second - and what is left then at
 * once: the waiter may wake before the completion shows, and its next arm
 * owes it the event at the completion's time (sn_cq_owed). A process that
 * dies without exit() loses them; the CQ's next delayed event takes the
 * claim over (sn_dnote_claim). */
__attribute__((destructor)) static void sn_dnotes_at_exit(void)
{
	uint64_t last = 0, now, earliest = UINT64_MAX;
	struct sn_dnote *d;

	if (!sn_hstarted || sn_hpid != getpid())
		return;
	pthread_mutex_lock(&sn_hm);
	for (d = sn_dnotes; d; d = d->next)
		if (d->when > last)
			last = d->when;
	pthread_mutex_unlock(&sn_hm);
	if (!last)
		return;
	now = sn_now_ns();
	if (last > now) {
		uint64_t ns = last - now < 1000000000ull ? last - now : 1000000000ull;
		struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000ull),
				       .tv_nsec = (long)(ns % 1000000000ull) };

		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
	}
	pthread_mutex_lock(&sn_hm);
	sn_dnotes_pass_until(&earliest, UINT64_MAX);
	pthread_mutex_unlock(&sn_hm);
}

void sn_dnotes_forget(struct sn_cq_shm *cq)
{
	struct sn_dnote **pp, *d;

	pthread_mutex_lock(&sn_hm);
	for (pp = &sn_dnotes; (d = *pp);) {
		if (d->cq == cq) {
			*pp = d->next;
			free(d);
		} else {
			pp = &d->next;
		}
	}
	pthread_mutex_unlock(&sn_hm);
}

void sn_helper_forget(struct sn_qp *qp)
{
	struct sn_qp **pp;

	pthread_mutex_lock(&sn_hm);
	for (pp = &sn_hlist; *pp; pp = &(*pp)->helper_next)
		if (*pp == qp) {
			*pp = qp->helper_next;
			break;
		}
	qp->on_helper = false;
	pthread_mutex_unlock(&sn_hm);
}

void sn_progress_all(void)
{
	if (pthread_mutex_trylock(&sn_hm))
		return;
	sn_helper_pass(NULL);
	pthread_mutex_unlock(&sn_hm);
}
