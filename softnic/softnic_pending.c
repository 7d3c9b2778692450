/*
 * softnic retry: completing and failing send WRs, the pending send queue of
 * WRs that wait for a receive (RNR) or an unreachable peer, the per-QP lock,
 * and the helper thread that retries pending WRs and delivers delayed
 * notifications of the latency model. The helper thread may sleep and lock;
 * the paths called from post and poll only try its lock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <sched.h>
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

static void sn_dnotes_pass(uint64_t *earliest)
{
	struct sn_dnote **pp = &sn_dnotes, *d;
	uint64_t now = sn_now_ns();

	while ((d = *pp)) {
		if (d->when <= now) {
			int fd = -1;

			atomic_store(&d->cq->dnote, 0);
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

static void sn_delay_notify_how(struct sn_cq_shm *cq, uint64_t when, bool if_armed)
{
	struct sn_dnote *d;

	if (atomic_exchange(&cq->dnote, 1)) {
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
		atomic_store(&cq->dnote, 0);
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
