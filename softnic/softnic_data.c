/*
 * softnic data path: post_send / post_recv / post_srq_recv / poll_cq,
 * completion notification, the ibv_wr_* builder and the extended-CQ
 * readers, plus the pending send queue (RNR and unreachable peers) and the
 * helper thread that retries it. Memory windows are bound and invalidated
 * here too (BIND_MW and LOCAL_INV run in send-queue order like any WR).
 *
 * The requester does all the work of a WR inside post_send: it claims a
 * receive from the responder's shared ring, copies into the responder's
 * registered memory (mapped from the fabric), and writes both completions.
 * The fast path must never make a syscall, allocate or block: no syscalls
 * except a FIFO write when a CQ is armed, no locks beyond a per-QP flag.
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

#include "softnic_int.h"

enum { SN_DONE = 0, SN_RETRY_RNR = 1, SN_RETRY_PEER = 2 };

struct sn_seg {
	char *p;
	size_t len;
};

#define SN_MAX_SEGS (SN_MAX_SGE * SN_MAX_RUNS + 2)

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

/* ---------------- completion queues ---------------- */

static uint64_t sn_model_ns(uint64_t bytes)
{
	uint64_t t = sn_g.lat_ns + bytes * sn_g.ns_per_kib / 1024;

	if (sn_g.jitter_ns) {
		static __thread uint64_t x = 88172645463325252ull;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		t += x % (sn_g.jitter_ns + 1);
	}
	return t;
}

static void sn_cq_overflow(struct sn_cq_shm *cq)
{
	if (!atomic_exchange(&cq->error, 1))
		sn_async_event(cq->async_path, NULL, IBV_EVENT_CQ_ERR, cq->cookie);
}

static void sn_delay_notify(struct sn_cq_shm *cq, uint64_t when);

/* Append one completion; false if the CQ overflowed (or already had). */
static bool sn_cq_push(struct sn_cq_shm *cq, const struct sn_cqe *src, int *chan_fd)
{
	uint64_t idx, cons;
	struct sn_cqe *e;
	uint32_t armed;

	if (SN_UNLIKELY(atomic_load_explicit(&cq->error, memory_order_relaxed)))
		return false;
	idx = atomic_fetch_add_explicit(&cq->prod, 1, memory_order_relaxed);
	cons = atomic_load_explicit(&cq->cons, memory_order_acquire);
	if (SN_UNLIKELY(idx - cons >= cq->cap)) {
		sn_cq_overflow(cq);
		return false;
	}
	e = &cq->e[idx & (cq->ring - 1)];
	e->wr_id = src->wr_id;
	e->ts = src->ts;
	e->visible_ns = src->visible_ns;
	e->local_qp = src->local_qp;
	e->status = src->status;
	e->opcode = src->opcode;
	e->byte_len = src->byte_len;
	e->imm = src->imm;
	e->qp_num = src->qp_num;
	e->src_qp = src->src_qp;
	e->wc_flags = src->wc_flags;
	e->vendor_err = src->vendor_err;
	e->sq_idx = src->sq_idx;
	e->slid = src->slid;
	e->pkey_index = src->pkey_index;
	e->sl = src->sl;
	e->dlid_path_bits = src->dlid_path_bits;
	e->solicited = src->solicited;
	atomic_store_explicit(&e->dropped, 0, memory_order_relaxed);
	/* seq_cst store then load: pairs with req_notify's store of armed and
	 * load of the ring (Dekker), so an arm and a new completion never miss
	 * each other */
	atomic_store_explicit(&e->seq, idx + 1, memory_order_seq_cst);
	if (SN_UNLIKELY(atomic_load_explicit(&cq->sleepers, memory_order_seq_cst))) {
		atomic_fetch_add(&cq->wake_seq, 1);
		syscall(SYS_futex, &cq->wake_seq, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
	}
	armed = atomic_load_explicit(&cq->armed, memory_order_seq_cst);
	if (SN_UNLIKELY(armed) &&
	    (armed == 1 || src->solicited || src->status != IBV_WC_SUCCESS) &&
	    atomic_exchange(&cq->armed, 0)) {
		/* with the latency model the event waits for the completion */
		if (SN_UNLIKELY(src->visible_ns) && src->visible_ns > sn_now_ns())
			sn_delay_notify(cq, src->visible_ns);
		else
			sn_notify_fd(chan_fd, cq->chan_path, cq->cookie);
	}
	return true;
}

static inline uint64_t sn_cqe_time(struct sn_cq_shm *cq, uint64_t *now, uint64_t visible)
{
	if (visible)
		return visible;
	if (!cq->wall)
		return 0;
	if (!*now)
		*now = sn_now_ns();
	return *now;
}

int sn_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc);
static void sn_progress_all(void);

static void sn_progress_all(void);
static _Atomic int sn_npending;

/* A QP's pend_head and pend_next_try_ns are written under its lock and read
 * without it by the helper thread (sn_helper_pass): relaxed atomic accesses,
 * plain moves on x86. */
#define SN_PEND_SET(f, v) __atomic_store_n(&(f), (v), __ATOMIC_RELAXED)
#define SN_PEND_GET(f)	  __atomic_load_n(&(f), __ATOMIC_RELAXED)

/* A program spinning on an empty CQ keeps spinning for a few microseconds,
 * then sleeps on the CQ (a futex in the CQ file that every producer wakes)
 * for at most 200 us per poll call: on an oversubscribed host the peer it
 * waits for needs that core, and a wake-up hands it back at once. */
/* A wait ended with a completion: if spinning alone got it, allow more. */
static void sn_spin_done(struct sn_cq *cq)
{
	if (!cq->slept && cq->spin_budget < 4096)
		cq->spin_budget *= 2;
	cq->slept = false;
	cq->empty_polls = 0;
}

static void sn_empty_poll(struct sn_cq *cq)
{
	struct sn_cq_shm *s = cq->shm;
	uint32_t n = ++cq->empty_polls, seq;
	uint64_t cons, wait = 200000;
	struct sn_cqe *e;
	struct timespec ts;

	if (SN_LIKELY(n < cq->spin_budget)) {
		/* a peer runnable on our own core gets it at once */
		if (SN_UNLIKELY(!(n & 63)))
			sched_yield();
		return;
	}
	if (atomic_load_explicit(&sn_npending, memory_order_relaxed)) {
		/* our own WRs wait for a peer's receive: keep retrying them
		 * (each poll does), only stepping aside now and then */
		if (!(n & 15))
			sched_yield();
		return;
	}
	seq = atomic_load(&s->wake_seq);
	atomic_fetch_add(&s->sleepers, 1);
	cons = atomic_load_explicit(&s->cons, memory_order_relaxed);
	e = &s->e[cons & (s->ring - 1)];
	if (atomic_load(&e->seq) == cons + 1) {
		uint64_t now;

		/* there is one, not yet visible (latency model): sleep until it is */
		if (!e->visible_ns || e->visible_ns <= (now = sn_now_ns()))
			wait = 0;
		else if (e->visible_ns - now < wait)
			wait = e->visible_ns - now;
	}
	if (wait) {
		ts.tv_sec = 0;
		ts.tv_nsec = (long)wait;
		syscall(SYS_futex, &s->wake_seq, FUTEX_WAIT, seq, &ts, NULL, 0);
		/* spinning did not pay: spin less next time (the peer likely
		 * shares our core) */
		if (!cq->slept && cq->spin_budget > 1024)
			cq->spin_budget /= 2;
		cq->slept = true;
	}
	atomic_fetch_sub(&s->sleepers, 1);
}

static inline int sn_poll_cq_body(struct sn_cq *cq, int n, struct ibv_wc *wc)
{
	struct sn_cq_shm *s = cq->shm;
	uint64_t cons = atomic_load_explicit(&s->cons, memory_order_relaxed);
	uint64_t now = 0;
	int got = 0;

	if (SN_UNLIKELY(atomic_load_explicit(&sn_npending, memory_order_relaxed)))
		sn_progress_all();
	while (got < n) {
		struct sn_cqe *e = &s->e[cons & (s->ring - 1)];
		struct ibv_wc *w;

		if (atomic_load_explicit(&e->seq, memory_order_acquire) != cons + 1)
			break;
		if (SN_UNLIKELY(e->visible_ns)) {
			if (!now)
				now = sn_now_ns();
			if (e->visible_ns > now)
				break;
		}
		cons++;
		if (SN_UNLIKELY(atomic_load_explicit(&e->dropped, memory_order_relaxed)))
			continue;
		w = &wc[got++];
		w->wr_id = e->wr_id;
		w->status = e->status;
		w->opcode = e->opcode;
		w->vendor_err = e->vendor_err;
		w->byte_len = e->byte_len;
		w->imm_data = e->imm;
		w->qp_num = e->qp_num;
		w->src_qp = e->src_qp;
		w->wc_flags = e->wc_flags;
		w->pkey_index = e->pkey_index;
		w->slid = e->slid;
		w->sl = e->sl;
		w->dlid_path_bits = e->dlid_path_bits;
		if (e->local_qp)
			atomic_store_explicit(&((struct sn_qp *)e->local_qp)->sq_tail,
					      e->sq_idx + 1, memory_order_release);
	}
	atomic_store_explicit(&s->cons, cons, memory_order_release);
	return got;
}

int sn_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct sn_cq *cq = sn_cq_of(ibcq);
	int got;

	if (SN_LIKELY(cq->single_threaded)) {
		got = sn_poll_cq_body(cq, n, wc);
	} else {
		sn_spin_lock(&cq->poll_lock);
		got = sn_poll_cq_body(cq, n, wc);
		sn_spin_unlock(&cq->poll_lock);
	}
	/* outside the lock: this may sleep */
	if (SN_UNLIKELY(!got))
		sn_empty_poll(cq);
	else if (SN_UNLIKELY(cq->empty_polls))
		sn_spin_done(cq);
	return got;
}

int sn_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct sn_cq *cq = sn_cq_of(ibcq);

	struct sn_cq_shm *s = cq->shm;
	uint64_t cons;
	struct sn_cqe *e;

	if (!cq->cq.channel)
		return EINVAL;
	atomic_store(&s->armed, solicited_only ? 2 : 1);
	/* With the latency model a completion may already sit in the ring,
	 * not yet visible: on hardware it would arrive after this arm, so it
	 * must raise the event when it becomes visible. */
	cons = atomic_load_explicit(&s->cons, memory_order_relaxed);
	e = &s->e[cons & (s->ring - 1)];
	if (SN_UNLIKELY(sn_g.model) &&
	    atomic_load_explicit(&e->seq, memory_order_acquire) == cons + 1 &&
	    e->visible_ns && e->visible_ns > sn_now_ns() && atomic_exchange(&s->armed, 0))
		sn_delay_notify(s, e->visible_ns);
	return 0;
}

/* Mark the completions of a QP that is going away so polls skip them. */
void sn_cq_clean(struct sn_cq *cq, uint64_t local_qp, uint32_t qpn)
{
	struct sn_cq_shm *s = cq->shm;
	uint64_t i, prod = atomic_load(&s->prod), cons = atomic_load(&s->cons);

	if (prod - cons > s->ring)
		prod = cons + s->ring;
	for (i = cons; i < prod; i++) {
		struct sn_cqe *e = &s->e[i & (s->ring - 1)];

		if (atomic_load(&e->seq) != i + 1)
			continue;
		if ((local_qp && e->local_qp == local_qp) ||
		    (!e->local_qp && e->qp_num == qpn))
			atomic_store(&e->dropped, 1);
	}
}

/* ---------------- receive queues ---------------- */

static inline struct sn_rwqe *sn_rq_slot(struct sn_rq_shm *rq, uint64_t i)
{
	return (struct sn_rwqe *)(rq->slots + (size_t)(i & (rq->ring - 1)) * rq->stride);
}

/* Claim the oldest receive; copy it out before the CAS so that the owner
 * cannot reuse the slot under us. */
static bool sn_rq_take(struct sn_rq_shm *rq, struct sn_rwqe *out)
{
	uint64_t c = atomic_load_explicit(&rq->cons, memory_order_acquire);

	for (;;) {
		uint64_t p = atomic_load_explicit(&rq->prod, memory_order_acquire);
		struct sn_rwqe *s;
		uint32_t ns;

		if (c >= p)
			return false;
		s = sn_rq_slot(rq, c);
		ns = s->num_sge <= rq->max_sge ? s->num_sge : rq->max_sge;
		memcpy(out, s, sizeof(*s) + ns * sizeof(struct ibv_sge));
		out->num_sge = ns;
		if (atomic_compare_exchange_weak_explicit(&rq->cons, &c, c + 1,
							  memory_order_acq_rel,
							  memory_order_acquire))
			return true;
	}
}

void sn_rq_flush(struct sn_rq_shm *rq, struct sn_cq_shm *cq, uint32_t qpn, int *chan_fd)
{
	unsigned char buf[sizeof(struct sn_rwqe) + SN_MAX_SGE * sizeof(struct ibv_sge)];
	struct sn_rwqe *w = (struct sn_rwqe *)buf;

	while (sn_rq_take(rq, w)) {
		struct sn_cqe c = { 0 };

		c.wr_id = w->wr_id;
		c.status = IBV_WC_WR_FLUSH_ERR;
		c.opcode = IBV_WC_RECV;
		c.qp_num = qpn;
		if (cq)
			sn_cq_push(cq, &c, chan_fd);
	}
}

static int sn_rq_post(struct sn_rq_shm *rq, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad)
{
	uint64_t prod = atomic_load_explicit(&rq->prod, memory_order_relaxed);

	for (; wr; wr = wr->next) {
		struct sn_rwqe *s;

		if (prod - atomic_load_explicit(&rq->cons, memory_order_acquire) >=
		    rq->max_wr) {
			*bad = wr;
			atomic_store_explicit(&rq->prod, prod, memory_order_release);
			return ENOMEM;
		}
		if ((uint32_t)wr->num_sge > rq->max_sge || wr->num_sge < 0) {
			*bad = wr;
			atomic_store_explicit(&rq->prod, prod, memory_order_release);
			return EINVAL;
		}
		s = sn_rq_slot(rq, prod);
		s->wr_id = wr->wr_id;
		s->num_sge = (uint32_t)wr->num_sge;
		memcpy(s->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(struct ibv_sge));
		prod++;
	}
	atomic_store_explicit(&rq->prod, prod, memory_order_release);
	return 0;
}

int sn_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct sn_qp *qp = sn_qp_of(ibqp);
	uint32_t st = atomic_load_explicit(&qp->shm->state, memory_order_relaxed);
	int ret;

	if (SN_UNLIKELY(qp->srq || st == IBV_QPS_RESET || !qp->rcq)) {
		*bad = wr;
		return EINVAL; /* on an SRQ, XRC, or too early */
	}
	sn_spin_lock(&qp->rq_lock);
	ret = sn_rq_post(&qp->shm->rq, wr, bad);
	sn_spin_unlock(&qp->rq_lock);
	/* a QP in ERR flushes what it is given, also if it got there while
	 * we were posting */
	if (SN_UNLIKELY(atomic_load(&qp->shm->state) == IBV_QPS_ERR))
		sn_rq_flush(&qp->shm->rq, qp->rcq->shm, qp->shm->qpn, &qp->rcq->chan_wfd);
	return ret;
}

int sn_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
		     struct ibv_recv_wr **bad)
{
	struct sn_srq *srq = (struct sn_srq *)ibsrq;
	int ret;

	sn_spin_lock(&srq->lock);
	ret = sn_rq_post(&srq->shm->rq, wr, bad);
	sn_spin_unlock(&srq->lock);
	return ret;
}

/* ---------------- moving data ---------------- */

static inline struct sn_mrt_ent *sn_key_ent(struct sn_mrt_shm *t, uint32_t key)
{
	uint32_t idx = (key >> 8) - 1;

	if (SN_UNLIKELY(idx >= SN_MAX_MR))
		return NULL;
	if (SN_UNLIKELY(atomic_load_explicit(&t->ent[idx].key, memory_order_acquire) !=
				key ||
			!key))
		return NULL;
	return &t->ent[idx];
}

static inline bool sn_in_range(const struct sn_mrt_ent *e, uint64_t addr, uint64_t len)
{
	return addr >= e->addr && len <= e->len && addr - e->addr <= e->len - len;
}

static int sn_xlate_mw(struct sn_rproc *p, uint32_t key, uint64_t addr, uint64_t len,
		       uint32_t need, uint32_t pd_id, uint32_t qpn, struct sn_seg *segs,
		       int *nseg);

/* Translate (key, addr, len) of process p into segments we can touch.
 * qpn is the responder QP of a remote access (its key may name a memory
 * window), 0 for an lkey (never a window). */
static int sn_xlate(struct sn_rproc *p, uint32_t key, uint64_t addr, uint64_t len,
		    uint32_t need, uint32_t pd_id, uint32_t qpn, struct sn_seg *segs,
		    int *nseg)
{
	struct sn_mrt_ent *e = sn_key_ent(sn_rproc_mrt(p), key);
	uint64_t va;

	if (SN_UNLIKELY(!e) && qpn && (key >> 8) > SN_MAX_MR)
		return sn_xlate_mw(p, key, addr, len, need, pd_id, qpn, segs, nseg);
	if (!e || e->pd_id != pd_id || (e->access & need) != need ||
	    !sn_in_range(e, addr, len))
		return -1;
	va = addr + (uint64_t)e->delta;
	while (len) {
		size_t contig;
		char *ptr = sn_remote_ptr(p, e, va, &contig);

		if (!ptr || *nseg >= SN_MAX_SEGS)
			return -1;
		if (contig > len)
			contig = len;
		segs[*nseg].p = ptr;
		segs[*nseg].len = contig;
		(*nseg)++;
		va += contig;
		len -= contig;
	}
	return 0;
}

/* ---------------- memory windows ---------------- */

static inline struct sn_mw_ent *sn_mw_of_key(struct sn_mrt_shm *t, uint32_t key)
{
	uint32_t idx = (key >> 8) - 1 - SN_MAX_MR;

	return (key >> 8) > SN_MAX_MR && idx < SN_MAX_MW ? &t->mw[idx] : NULL;
}

/* A remote access through a window: a consistent snapshot of its binding
 * (a rebind or invalidation may be running in another process), the checks
 * a responder makes (key, PD, type 2's QP, rights, bounds), then the MR
 * under it. */
static int sn_xlate_mw(struct sn_rproc *p, uint32_t key, uint64_t addr, uint64_t len,
		       uint32_t need, uint32_t pd_id, uint32_t qpn, struct sn_seg *segs,
		       int *nseg)
{
	struct sn_mrt_shm *t = sn_rproc_mrt(p);
	struct sn_mw_ent *m = sn_mw_of_key(t, key);
	uint32_t type, wkey, bound, wpd, wqpn, acc, mrkey, tries = 0;
	uint64_t waddr, wlen;

	if (!m)
		return -1;
	for (;;) {
		uint32_t s0 = atomic_load_explicit(&m->seq, memory_order_acquire);

		if (SN_LIKELY(!(s0 & 1))) {
			type = atomic_load_explicit(&m->type, memory_order_relaxed);
			wkey = m->key;
			bound = m->bound;
			wpd = m->pd_id;
			wqpn = m->qpn;
			acc = m->access;
			mrkey = m->mr_key;
			waddr = m->addr;
			wlen = m->len;
			atomic_thread_fence(memory_order_acquire);
			if (atomic_load_explicit(&m->seq, memory_order_relaxed) == s0)
				break;
		}
		/* a writer holds it for a few stores; one that died there
		 * leaves the window unusable, as a dead NIC would */
		if (++tries > (1u << 16))
			return -1;
		if (!(tries & 63))
			sched_yield();
	}
	if (!type || !bound || wkey != key || wpd != pd_id ||
	    (type == IBV_MW_TYPE_2 && wqpn != qpn) || (acc & need) != need ||
	    addr < waddr || len > wlen || addr - waddr > wlen - len)
		return -1;
	/* the MR cannot be deregistered while bound (EBUSY): re-checking its
	 * key costs one load and guards against a dead owner's reused slot */
	return sn_xlate(p, mrkey, addr, len, 0, pd_id, 0, segs, nseg);
}

/* Invalidate a type 2 window: LOCAL_INV (qpn 0: any QP of the PD) or the
 * SEND_WITH_INV a responder QP received (the window must be bound to it).
 * 0 or -1 when the key names no such bound window. */
static int sn_mw_invalidate(struct sn_mrt_shm *t, uint32_t key, uint32_t pd_id,
			    uint32_t qpn)
{
	struct sn_mw_ent *m = sn_mw_of_key(t, key);
	int ret = -1;

	if (!m || atomic_load(&m->type) != IBV_MW_TYPE_2 || !sn_mw_wlock(m))
		return -1;
	if (m->bound && m->key == key && m->pd_id == pd_id && (!qpn || m->qpn == qpn)) {
		m->bound = 0;
		m->len = 0;
		ret = 0;
	}
	sn_mw_wunlock(m);
	return ret;
}

/* BIND_MW, executed in order on the send queue of the window's owner. The
 * checks are the IB spec's (C10-72..75, o10-36/37) as rdma-core's rxe makes
 * them; any failure is IBV_WC_MW_BIND_ERR (and the QP goes to ERR). */
static uint32_t sn_mw_bind_exec(struct sn_qp *qp, struct sn_swr *w)
{
	const uint32_t remote = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
				IBV_ACCESS_REMOTE_ATOMIC;
	uint32_t acc = w->mw_access, type;
	struct sn_mrt_ent *e;
	struct sn_mw_ent *m;

	if (!w->mw)
		return IBV_WC_MW_BIND_ERR;
	m = &sn_g.mrt->mw[w->mw->slot];
	type = atomic_load(&m->type);
	/* zero-based windows are not implemented */
	if (!type || (w->rkey >> 8) != (m->key >> 8) || (acc & IBV_ACCESS_ZERO_BASED))
		return IBV_WC_MW_BIND_ERR;
	if (type == IBV_MW_TYPE_2 && (m->pd_id != qp->pd_id || !w->mw_len))
		return IBV_WC_MW_BIND_ERR;
	if (w->mw_len) {
		e = sn_key_ent(sn_g.mrt, w->mr_key);
		if (!e || e->pd_id != m->pd_id || !(e->access & IBV_ACCESS_MW_BIND) ||
		    (e->access & IBV_ACCESS_ZERO_BASED) ||
		    ((acc & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
		     !(e->access & IBV_ACCESS_LOCAL_WRITE)) ||
		    !sn_in_range(e, w->raddr, w->mw_len))
			return IBV_WC_MW_BIND_ERR;
	}
	if (!sn_mw_wlock(m))
		return IBV_WC_MW_BIND_ERR;
	/* a bound type 2 window must be invalidated before it binds again */
	if (type == IBV_MW_TYPE_2 && m->bound) {
		sn_mw_wunlock(m);
		return IBV_WC_MW_BIND_ERR;
	}
	m->key = w->rkey;
	m->bound = w->mw_len != 0;
	m->access = acc & remote;
	m->mr_key = w->mw_len ? w->mr_key : 0;
	m->addr = w->mw_len ? w->raddr : 0;
	m->len = w->mw_len;
	m->qpn = type == IBV_MW_TYPE_2 ? qp->shm->qpn : 0;
	sn_mw_wunlock(m);
	return IBV_WC_SUCCESS;
}

/* Posting threads race to fill the cache: atomics (each stores what the others
 * would; release/acquire publish the struct sn_rproc_get() filled; a stale pid
 * only looks the process up once more). */
static struct sn_rproc *sn_self_proc(void)
{
	static struct sn_rproc *self_slot;
	static pid_t self_pid;
	struct sn_rproc *self = __atomic_load_n(&self_slot, __ATOMIC_ACQUIRE);

	if (SN_UNLIKELY(!self ||
			__atomic_load_n(&self_pid, __ATOMIC_RELAXED) != sn_g.pid)) {
		self = sn_rproc_get(sn_g.procid);
		__atomic_store_n(&self_slot, self, __ATOMIC_RELEASE);
		__atomic_store_n(&self_pid, sn_g.pid, __ATOMIC_RELAXED);
	}
	return self;
}

/* Local SGEs of a send WR; inline data is read from the user's addresses. */
static int sn_local_segs(struct sn_qp *qp, struct sn_swr *w, uint32_t need,
			 struct sn_seg *segs, int *nseg, uint64_t *total)
{
	uint64_t t = 0;
	uint32_t i;

	*nseg = 0;
	if (w->inl) {
		segs[0].p = w->inl;
		segs[0].len = w->inl_len;
		*nseg = w->inl_len ? 1 : 0;
		*total = w->inl_len;
		return IBV_WC_SUCCESS;
	}
	for (i = 0; i < w->num_sge; i++) {
		struct ibv_sge *s = &w->sge[i];

		if (!s->length)
			continue;
		t += s->length;
		if (w->flags & IBV_SEND_INLINE) {
			segs[*nseg].p = (char *)(uintptr_t)s->addr;
			segs[*nseg].len = s->length;
			(*nseg)++;
			continue;
		}
		if (sn_xlate(sn_self_proc(), s->lkey, s->addr, s->length, need, qp->pd_id,
			     0, segs, nseg))
			return IBV_WC_LOC_PROT_ERR;
	}
	if (t > 0x80000000ull)
		return IBV_WC_LOC_LEN_ERR;
	*total = t;
	return IBV_WC_SUCCESS;
}

/* Copy src segments into dst segments; the very last byte is stored last
 * (after a release fence) because programs poll it. */
static void sn_copy(struct sn_seg *dst, int nd, struct sn_seg *src, int ns,
		    uint64_t total)
{
	int di = 0, si = 0;
	size_t doff = 0, soff = 0;
	uint64_t left = total;
	char *lastd = NULL, lastv = 0;

	if (!total)
		return;
	while (left) {
		size_t n = dst[di].len - doff;

		if (src[si].len - soff < n)
			n = src[si].len - soff;
		if (n > left)
			n = left;
		if (n == left) {
			/* final chunk: hold back its last byte */
			memcpy(dst[di].p + doff, src[si].p + soff, n - 1);
			lastd = dst[di].p + doff + n - 1;
			lastv = src[si].p[soff + n - 1];
			left = 0;
			break;
		}
		memcpy(dst[di].p + doff, src[si].p + soff, n);
		left -= n;
		doff += n;
		soff += n;
		if (doff == dst[di].len) {
			di++;
			doff = 0;
		}
		if (soff == src[si].len) {
			si++;
			soff = 0;
		}
	}
	atomic_thread_fence(memory_order_release);
	*(volatile char *)lastd = lastv;
}

static uint64_t sn_segs_len(struct sn_seg *s, int n)
{
	uint64_t t = 0;

	while (n--)
		t += s[n].len;
	return t;
}

/* Take a receive for a peer QP; an SRQ below its armed limit raises
 * IBV_EVENT_SRQ_LIMIT_REACHED once (the limit disarms, as on hardware). */
static bool sn_take(struct sn_rqp *peer, struct sn_rwqe *rw)
{
	if (!sn_rq_take(peer->rq, rw))
		return false;
	if (SN_UNLIKELY(peer->srq) &&
	    SN_UNLIKELY(atomic_load_explicit(&peer->rq->limit, memory_order_relaxed))) {
		uint32_t lim = atomic_load(&peer->rq->limit);
		uint64_t left =
			atomic_load(&peer->rq->prod) - atomic_load(&peer->rq->cons);

		if (lim && left < lim &&
		    atomic_compare_exchange_strong(&peer->rq->limit, &lim, 0))
			sn_async_event(peer->srq->async_path, NULL,
				       IBV_EVENT_SRQ_LIMIT_REACHED, peer->srq->cookie);
	}
	return true;
}

static void sn_remote_err(struct sn_rqp *peer, uint32_t ev)
{
	uint32_t st = atomic_exchange(&peer->shm->state, IBV_QPS_ERR);

	if (st == IBV_QPS_ERR)
		return;
	if (!peer->shm->has_srq && peer->rcq)
		sn_rq_flush(peer->rq, peer->rcq, peer->qpn, &peer->chan_fd);
	if (ev)
		sn_async_event(peer->shm->async_path, &peer->async_fd, ev,
			       peer->shm->cookie);
	atomic_fetch_add_explicit(&peer->shm->cnt.errors, 1, memory_order_relaxed);
}

static uint32_t sn_send_wc_opcode(uint32_t op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ:
		return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		return IBV_WC_COMP_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return IBV_WC_FETCH_ADD;
	case IBV_WR_BIND_MW:
		return IBV_WC_BIND_MW;
	case IBV_WR_LOCAL_INV:
		return IBV_WC_LOCAL_INV;
	default:
		return IBV_WC_SEND;
	}
}

/* An RC/UC responder has one requester: no locked instruction needed. */
static inline void sn_count_rx(struct sn_rqp *peer, struct sn_qp *qp, uint64_t len)
{
	if (SN_LIKELY(qp->qpx.qp_base.qp_type != IBV_QPT_UD)) {
		SN_ADD1(peer->shm->cnt.rx_pkts, 1);
		SN_ADD1(peer->shm->cnt.rx_bytes, len);
	} else {
		atomic_fetch_add_explicit(&peer->shm->cnt.rx_pkts, 1,
					  memory_order_relaxed);
		atomic_fetch_add_explicit(&peer->shm->cnt.rx_bytes, len,
					  memory_order_relaxed);
	}
}

static void sn_push_recv(struct sn_rqp *peer, struct sn_qp *qp, struct sn_swr *w,
			 struct sn_rwqe *rw, uint32_t status, uint32_t len,
			 uint32_t flags, uint64_t vis)
{
	struct sn_cqe c = { 0 };
	uint64_t now = 0;

	c.wr_id = rw->wr_id;
	c.status = status;
	c.opcode = w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM
							   : IBV_WC_RECV;
	c.byte_len = len;
	c.qp_num = peer->qpn;
	c.src_qp = qp->shm->qpn;
	c.slid = sn_g.lid;
	c.wc_flags = flags;
	c.solicited = (w->flags & IBV_SEND_SOLICITED) ? 1 : 0;
	if (w->opcode == IBV_WR_SEND_WITH_IMM ||
	    w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
		c.imm = w->imm;
		c.wc_flags |= IBV_WC_WITH_IMM;
	} else if (w->opcode == IBV_WR_SEND_WITH_INV && status == IBV_WC_SUCCESS) {
		c.imm = w->rkey; /* ibv_wc.invalidated_rkey, host order */
		c.wc_flags |= IBV_WC_WITH_INV;
	}
	if (qp->qpx.qp_base.qp_type == IBV_QPT_UD && w->ah)
		c.sl = ((struct sn_ah *)w->ah)->attr.sl;
	c.visible_ns = vis;
	c.ts = sn_cqe_time(peer->rcq, &now, vis);
	if (peer->rcq && !sn_cq_push(peer->rcq, &c, &peer->chan_fd))
		sn_remote_err(peer, IBV_EVENT_QP_FATAL); /* its CQ overflowed */
	if (status == IBV_WC_SUCCESS)
		sn_count_rx(peer, qp, len);
}

/* Execute one WR against its responder. SN_DONE with *st the requester's
 * status, or SN_RETRY_* when the WR must wait (RNR, peer unreachable). */
static int sn_exec(struct sn_qp *qp, struct sn_swr *w, uint32_t *st)
{
	struct sn_seg lsegs[SN_MAX_SGE + 1], rsegs[SN_MAX_SEGS];
	unsigned char rwbuf[sizeof(struct sn_rwqe) + SN_MAX_SGE * sizeof(struct ibv_sge)];
	struct sn_rwqe *rw = (struct sn_rwqe *)rwbuf;
	uint32_t type = qp->qpx.qp_base.qp_type, op = w->opcode;
	bool rc = type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND, ud = type == IBV_QPT_UD;
	uint32_t ptype = type == IBV_QPT_XRC_SEND ? IBV_QPT_XRC_RECV : type;
	int nl = 0, nr = 0;
	uint64_t total = 0, vis = 0;
	struct sn_rqp *peer;
	uint32_t need_local = 0;

	*st = IBV_WC_SUCCESS;
	if (SN_UNLIKELY(op == IBV_WR_BIND_MW || op == IBV_WR_LOCAL_INV)) {
		/* local operations: nothing goes on the wire */
		w->byte_len = 0;
		if (op == IBV_WR_BIND_MW)
			*st = sn_mw_bind_exec(qp, w);
		else if (sn_mw_invalidate(sn_g.mrt, w->rkey, qp->pd_id, 0))
			*st = IBV_WC_LOC_QP_OP_ERR;
		return SN_DONE;
	}
	if (op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP ||
	    op == IBV_WR_ATOMIC_FETCH_AND_ADD)
		need_local = IBV_ACCESS_LOCAL_WRITE;
	*st = (uint32_t)sn_local_segs(qp, w, need_local, lsegs, &nl, &total);
	if (*st != IBV_WC_SUCCESS)
		return SN_DONE;
	w->byte_len = (uint32_t)total;
	if (SN_UNLIKELY(sn_g.model))
		vis = w->vis_ns =
			(w->post_ns ? w->post_ns : sn_now_ns()) + sn_model_ns(total);

	if (ud) {
		uint32_t qkey;

		if (total > SN_MTU_BYTES) {
			*st = IBV_WC_LOC_LEN_ERR;
			return SN_DONE;
		}
		if (op != IBV_WR_SEND && op != IBV_WR_SEND_WITH_IMM) {
			*st = IBV_WC_LOC_QP_OP_ERR;
			return SN_DONE;
		}
		if (SN_UNLIKELY(!w->ah || ((struct sn_ah *)w->ah)->path_bad))
			goto sent; /* addressed to nobody here: lost */
		peer = sn_rqp_get(w->rqpn);
		qkey = (w->rqkey & 0x80000000u) ? qp->attr.qkey : w->rqkey;
		if (!peer || !sn_rqp_alive(peer) || peer->shm->qp_type != IBV_QPT_UD ||
		    atomic_load(&peer->shm->state) < IBV_QPS_RTR ||
		    atomic_load(&peer->shm->state) > IBV_QPS_SQE ||
		    peer->shm->qkey != qkey)
			goto sent; /* unreliable: silently lost */
		if (!sn_take(peer, rw)) {
			atomic_fetch_add_explicit(&peer->shm->cnt.rnr_naks, 1,
						  memory_order_relaxed);
			goto sent;
		}
		{
			struct sn_ah *ah = (struct sn_ah *)w->ah;
			uint32_t i;
			uint64_t cap = 0;
			bool grh = ah && ah->attr.is_global;

			for (i = 0; i < rw->num_sge; i++)
				if (sn_xlate(peer->proc, rw->sge[i].lkey, rw->sge[i].addr,
					     rw->sge[i].length, IBV_ACCESS_LOCAL_WRITE,
					     peer->pd_id, 0, rsegs, &nr)) {
					sn_push_recv(peer, qp, w, rw, IBV_WC_LOC_PROT_ERR,
						     0, 0, vis);
					goto sent;
				}
			cap = sn_segs_len(rsegs, nr);
			if (cap < total + SN_UD_GRH) {
				sn_push_recv(peer, qp, w, rw, IBV_WC_LOC_LEN_ERR, 0, 0,
					     vis);
				goto sent;
			}
			if (grh) {
				unsigned char g[SN_UD_GRH] = { 0x60 };
				struct sn_seg gs = { (char *)g, SN_UD_GRH };
				uint32_t plen = htobe16((uint16_t)total) & 0xffff;

				memcpy(g + 4, &plen, 2);
				g[6] = 0x1b; /* next header: IB */
				g[7] = ah->attr.grh.hop_limit;
				memcpy(g + 8,
				       &sn_g.gid[ah->attr.grh.sgid_index % SN_GID_TBL],
				       16);
				memcpy(g + 24, &ah->attr.grh.dgid, 16);
				sn_copy(rsegs, nr, &gs, 1, SN_UD_GRH);
			}
			/* skip the GRH space */
			{
				uint64_t skip = SN_UD_GRH;
				int k = 0;

				while (skip && k < nr) {
					if (rsegs[k].len <= skip) {
						skip -= rsegs[k].len;
						rsegs[k].len = 0;
						k++;
					} else {
						rsegs[k].p += skip;
						rsegs[k].len -= skip;
						skip = 0;
					}
				}
				while (k < nr && !rsegs[k].len)
					k++;
				sn_copy(rsegs + k, nr - k, lsegs, nl, total);
			}
			sn_push_recv(peer, qp, w, rw, IBV_WC_SUCCESS,
				     (uint32_t)total + SN_UD_GRH, grh ? IBV_WC_GRH : 0,
				     vis);
		}
		goto sent;
	}

	/* RC / UC */
	if (SN_UNLIKELY(qp->path_bad)) {
		/* a LID/GID of no port here: no response ever comes */
		if (!rc)
			goto sent;
		return SN_RETRY_PEER;
	}
	peer = qp->peer;
	if (SN_UNLIKELY(!peer || peer->dead)) {
		peer = qp->peer = sn_rqp_get(qp->attr.dest_qp_num);
		if (!peer) {
			if (!rc)
				goto sent;
			return SN_RETRY_PEER;
		}
	}
	{
		uint32_t pst =
			atomic_load_explicit(&peer->shm->state, memory_order_relaxed);

		if (SN_UNLIKELY(pst < IBV_QPS_RTR || pst == IBV_QPS_ERR ||
				peer->shm->qp_type != ptype)) {
			if (!rc)
				goto sent;
			return SN_RETRY_PEER;
		}
		if (SN_UNLIKELY(!sn_rqp_alive(peer))) {
			qp->peer = NULL;
			if (!rc)
				goto sent;
			return SN_RETRY_PEER;
		}
		/* the first request reaching a responder still in RTR */
		if (SN_UNLIKELY(pst == IBV_QPS_RTR) &&
		    !atomic_load(&peer->shm->comm_est) &&
		    !atomic_exchange(&peer->shm->comm_est, 1))
			sn_async_event(peer->shm->async_path, &peer->async_fd,
				       IBV_EVENT_COMM_EST, peer->shm->cookie);
	}

	/* PSNs: a request the responder does not expect is dropped there; RC
	 * retransmits it until the retry budget runs out, UC resynchronises on
	 * the next message (hardware's behaviour for both). */
	{
		uint32_t mtu = 128u
			       << (qp->attr.path_mtu ? qp->attr.path_mtu : IBV_MTU_4096);
		uint32_t npk = total ? (uint32_t)((total + mtu - 1) / mtu) : 1;
		uint32_t exp =
			atomic_load_explicit(&peer->shm->exp_psn, memory_order_relaxed);

		if (SN_UNLIKELY(exp != qp->next_psn)) {
			if (rc)
				return SN_RETRY_PEER;
			qp->next_psn = (qp->next_psn + npk) & 0xffffff;
			atomic_store_explicit(&peer->shm->exp_psn, qp->next_psn,
					      memory_order_relaxed);
			goto sent;
		}
		w->npk = npk;
	}
	if (type == IBV_QPT_XRC_SEND) {
		/* XRC: the TGT QP hands the request to the SRQ it names */
		struct sn_rqp *v = sn_rqp_xrc(peer, w->xsrqn);

		if (!v) {
			sn_remote_err(peer, 0);
			*st = IBV_WC_REM_INV_REQ_ERR;
			return SN_DONE;
		}
		peer = v;
	}

	switch (op) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_SEND_WITH_INV: {
		uint32_t i;
		uint64_t cap;

		if (!sn_take(peer, rw)) {
			atomic_fetch_add_explicit(&peer->shm->cnt.rnr_naks, 1,
						  memory_order_relaxed);
			if (!rc)
				goto sent;
			return SN_RETRY_RNR;
		}
		for (i = 0; i < rw->num_sge && sn_segs_len(rsegs, nr) < total; i++) {
			uint64_t need = total - sn_segs_len(rsegs, nr);
			uint32_t l = rw->sge[i].length < need ? rw->sge[i].length
							      : (uint32_t)need;

			if (!l)
				continue;
			if (sn_xlate(peer->proc, rw->sge[i].lkey, rw->sge[i].addr, l,
				     IBV_ACCESS_LOCAL_WRITE, peer->pd_id, 0, rsegs,
				     &nr)) {
				sn_push_recv(peer, qp, w, rw, IBV_WC_LOC_PROT_ERR, 0, 0,
					     vis);
				if (rc) {
					sn_remote_err(peer, 0);
					*st = IBV_WC_REM_OP_ERR;
				}
				return SN_DONE;
			}
		}
		cap = sn_segs_len(rsegs, nr);
		if (cap < total) {
			sn_push_recv(peer, qp, w, rw, IBV_WC_LOC_LEN_ERR, 0, 0, vis);
			if (rc) {
				sn_remote_err(peer, 0);
				*st = IBV_WC_REM_INV_REQ_ERR;
			}
			return SN_DONE;
		}
		/* the window is invalid before the receive completes; a key
		 * naming no type 2 window bound to this QP fails the receive
		 * (as rdma-core's rxe: Class J) and the request */
		if (SN_UNLIKELY(op == IBV_WR_SEND_WITH_INV) &&
		    sn_mw_invalidate(sn_rproc_mrt(peer->proc), w->rkey, peer->pd_id,
				     peer->qpn)) {
			sn_push_recv(peer, qp, w, rw, IBV_WC_REM_INV_REQ_ERR, 0, 0, vis);
			if (rc) {
				sn_remote_err(peer, 0);
				*st = IBV_WC_REM_INV_REQ_ERR;
			}
			return SN_DONE;
		}
		sn_copy(rsegs, nr, lsegs, nl, total);
		sn_push_recv(peer, qp, w, rw, IBV_WC_SUCCESS, (uint32_t)total, 0, vis);
		break;
	}
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		if (!(peer->shm->access & IBV_ACCESS_REMOTE_WRITE) ||
		    (total && sn_xlate(peer->proc, w->rkey, w->raddr, total,
				       IBV_ACCESS_REMOTE_WRITE, peer->pd_id, peer->qpn,
				       rsegs, &nr))) {
			if (!rc)
				goto sent;
			sn_remote_err(peer, IBV_EVENT_QP_ACCESS_ERR);
			*st = IBV_WC_REM_ACCESS_ERR;
			return SN_DONE;
		}
		if (op == IBV_WR_RDMA_WRITE_WITH_IMM && !sn_take(peer, rw)) {
			atomic_fetch_add_explicit(&peer->shm->cnt.rnr_naks, 1,
						  memory_order_relaxed);
			if (!rc)
				goto sent;
			return SN_RETRY_RNR;
		}
		sn_copy(rsegs, nr, lsegs, nl, total);
		if (op == IBV_WR_RDMA_WRITE_WITH_IMM)
			sn_push_recv(peer, qp, w, rw, IBV_WC_SUCCESS, (uint32_t)total, 0,
				     vis);
		else
			sn_count_rx(peer, qp, total);
		break;
	case IBV_WR_RDMA_READ:
		if (!rc) {
			*st = IBV_WC_LOC_QP_OP_ERR;
			return SN_DONE;
		}
		if (!(peer->shm->access & IBV_ACCESS_REMOTE_READ) ||
		    (total && sn_xlate(peer->proc, w->rkey, w->raddr, total,
				       IBV_ACCESS_REMOTE_READ, peer->pd_id, peer->qpn,
				       rsegs, &nr))) {
			sn_remote_err(peer, IBV_EVENT_QP_ACCESS_ERR);
			*st = IBV_WC_REM_ACCESS_ERR;
			return SN_DONE;
		}
		sn_copy(lsegs, nl, rsegs, nr, total);
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD: {
		uint64_t old, *rp;

		if (!rc) {
			*st = IBV_WC_LOC_QP_OP_ERR;
			return SN_DONE;
		}
		if (total != 8 || nl != 1) {
			*st = IBV_WC_LOC_LEN_ERR;
			return SN_DONE;
		}
		if (w->raddr & 7) {
			sn_remote_err(peer, 0);
			*st = IBV_WC_REM_INV_REQ_ERR;
			return SN_DONE;
		}
		if (!(peer->shm->access & IBV_ACCESS_REMOTE_ATOMIC) ||
		    sn_xlate(peer->proc, w->rkey, w->raddr, 8, IBV_ACCESS_REMOTE_ATOMIC,
			     peer->pd_id, peer->qpn, rsegs, &nr) ||
		    nr != 1) {
			sn_remote_err(peer, IBV_EVENT_QP_ACCESS_ERR);
			*st = IBV_WC_REM_ACCESS_ERR;
			return SN_DONE;
		}
		rp = (uint64_t *)rsegs[0].p;
		if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			old = __atomic_fetch_add(rp, w->cmp_add, __ATOMIC_SEQ_CST);
		} else {
			old = w->cmp_add;
			__atomic_compare_exchange_n(rp, &old, w->swap, false,
						    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
		}
		memcpy(lsegs[0].p, &old, 8);
		break;
	}
	default:
		*st = IBV_WC_LOC_QP_OP_ERR;
		return SN_DONE;
	}
	qp->next_psn = (qp->next_psn + w->npk) & 0xffffff;
	atomic_store_explicit(&peer->shm->exp_psn, qp->next_psn, memory_order_relaxed);
sent:
	SN_ADD1(qp->shm->cnt.tx_pkts, 1);
	SN_ADD1(qp->shm->cnt.tx_bytes, total);
	return SN_DONE;
}

/* ---------------- completing and failing send WRs ---------------- */

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
static bool sn_submit(struct sn_qp *qp, struct sn_swr *w)
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

static void sn_delay_notify(struct sn_cq_shm *cq, uint64_t when)
{
	struct sn_dnote *d;

	if (atomic_exchange(&cq->dnote, 1))
		return; /* one event per arm: a pending one will do */
	d = calloc(1, sizeof(*d));
	if (!d) {
		atomic_store(&cq->dnote, 0);
		return;
	}
	d->cq = cq;
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

static void sn_progress_all(void)
{
	if (pthread_mutex_trylock(&sn_hm))
		return;
	sn_helper_pass(NULL);
	pthread_mutex_unlock(&sn_hm);
}

/* ---------------- post_send ---------------- */

static int sn_check_op(uint32_t type, uint32_t op)
{
	if (type == IBV_QPT_XRC_RECV)
		return EINVAL; /* a TGT QP has no send queue */
	switch (op) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		return 0;
	case IBV_WR_BIND_MW: /* ibv_bind_mw(3): UC, RC or XRC_SEND */
	case IBV_WR_LOCAL_INV:
	case IBV_WR_SEND_WITH_INV:
		return type == IBV_QPT_UD ? EINVAL : 0;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return type == IBV_QPT_UD ? EINVAL : 0;
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND ? 0 : EINVAL;
	default:
		return EINVAL;
	}
}

int sn_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct sn_qp *qp = sn_qp_of(ibqp);
	uint32_t type = ibqp->qp_type;
	uint32_t st = atomic_load_explicit(&qp->shm->state, memory_order_relaxed);
	bool kick = false;
	int ret = 0;

	if (SN_UNLIKELY(st < IBV_QPS_RTS ||
			(st > IBV_QPS_RTS && st != IBV_QPS_ERR && st != IBV_QPS_SQE))) {
		*bad = wr;
		return EINVAL;
	}
	sn_qp_lock(qp);
	for (; wr; wr = wr->next) {
		struct sn_swr w;

		if (SN_UNLIKELY((uint32_t)wr->num_sge > qp->max_send_sge ||
				wr->num_sge < 0 || sn_check_op(type, wr->opcode))) {
			ret = EINVAL;
			break;
		}
		if (SN_UNLIKELY(qp->sq_head -
					atomic_load_explicit(&qp->sq_tail,
							     memory_order_acquire) >=
				qp->max_send_wr)) {
			ret = ENOMEM;
			break;
		}
		if (wr->send_flags & IBV_SEND_INLINE) {
			uint32_t len = 0;
			int i;

			for (i = 0; i < wr->num_sge; i++)
				len += wr->sg_list[i].length;
			if (SN_UNLIKELY(len > qp->max_inline)) {
				ret = EINVAL;
				break;
			}
		}
		w.wr_id = wr->wr_id;
		w.opcode = wr->opcode;
		w.flags = wr->send_flags;
		w.num_sge = (uint32_t)wr->num_sge;
		w.sge = wr->sg_list;
		w.imm = wr->imm_data;
		w.inl = NULL;
		w.inl_len = 0;
		w.ah = NULL;
		w.byte_len = 0;
		w.vis_ns = 0;
		w.xsrqn = type == IBV_QPT_XRC_SEND ? wr->qp_type.xrc.remote_srqn : 0;
		w.mw = NULL;
		if (SN_UNLIKELY(wr->opcode >= IBV_WR_LOCAL_INV &&
				wr->opcode <= IBV_WR_SEND_WITH_INV)) {
			if (wr->opcode == IBV_WR_BIND_MW) {
				const struct ibv_mw_bind_info *bi =
					&wr->bind_mw.bind_info;

				w.mw = (struct sn_mw *)wr->bind_mw.mw;
				w.rkey = wr->bind_mw.rkey;
				w.raddr = bi->addr;
				w.mw_len = bi->length;
				w.mr_key = bi->mr ? bi->mr->lkey : 0;
				w.mw_access = bi->mw_access_flags;
			} else {
				w.rkey = wr->invalidate_rkey;
			}
			if (wr->opcode != IBV_WR_SEND_WITH_INV)
				w.num_sge = 0; /* no data */
		} else if (type == IBV_QPT_UD) {
			w.ah = wr->wr.ud.ah;
			w.rqpn = wr->wr.ud.remote_qpn;
			w.rqkey = wr->wr.ud.remote_qkey;
		} else if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
			   wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			w.raddr = wr->wr.atomic.remote_addr;
			w.rkey = wr->wr.atomic.rkey;
			w.cmp_add = wr->wr.atomic.compare_add;
			w.swap = wr->wr.atomic.swap;
		} else {
			w.raddr = wr->wr.rdma.remote_addr;
			w.rkey = wr->wr.rdma.rkey;
		}
		w.sq_idx = qp->sq_head++;
		w.post_ns = SN_UNLIKELY(sn_g.model) ? sn_now_ns() : 0;
		kick |= sn_submit(qp, &w);
	}
	sn_qp_unlock(qp);
	if (ret)
		*bad = wr;
	if (SN_UNLIKELY(kick))
		sn_helper_kick(qp);
	return ret;
}

/* ---------------- ibv_wr_* (ibv_qp_ex) ---------------- */

#define sn_qpx(q) ((struct sn_qp *)(q))

static struct sn_swr *sn_wr_cur(struct sn_qp *qp)
{
	return qp->wr_nwr
		       ? (struct sn_swr *)(qp->wr_buf + (qp->wr_nwr - 1) * qp->wr_stride)
		       : NULL;
}

static struct sn_swr *sn_wr_new(struct ibv_qp_ex *qx, uint32_t op)
{
	struct sn_qp *qp = sn_qpx(qx);
	struct sn_swr *w;

	if (!qp->wr_buf || qp->wr_nwr >= qp->max_send_wr) {
		qp->wr_err = ENOMEM;
		return NULL;
	}
	if (sn_check_op(qx->qp_base.qp_type, op)) {
		qp->wr_err = EINVAL;
		return NULL;
	}
	w = (struct sn_swr *)(qp->wr_buf + qp->wr_nwr * qp->wr_stride);
	qp->wr_nwr++;
	memset(w, 0, sizeof(*w));
	w->sge = (struct ibv_sge *)(w + 1);
	w->wr_id = qx->wr_id;
	w->flags = qx->wr_flags;
	w->opcode = op;
	return w;
}

static void sn_wr_start(struct ibv_qp_ex *qx)
{
	struct sn_qp *qp = sn_qpx(qx);

	if (!qp->wr_buf) {
		qp->wr_stride = (uint32_t)(sizeof(struct sn_swr) +
					   (qp->max_send_sge ? qp->max_send_sge : 1) *
						   sizeof(struct ibv_sge));
		qp->wr_buf = calloc(qp->max_send_wr ? qp->max_send_wr : 1, qp->wr_stride);
		qp->wr_inl_cap = 1 << 20;
		qp->wr_inl = malloc(qp->wr_inl_cap);
	}
	qp->wr_nwr = 0;
	qp->wr_err = 0;
	qp->wr_inl_used = 0;
}

static void sn_wr_send(struct ibv_qp_ex *qx)
{
	sn_wr_new(qx, IBV_WR_SEND);
}

static void sn_wr_send_imm(struct ibv_qp_ex *qx, __be32 imm)
{
	struct sn_swr *w = sn_wr_new(qx, IBV_WR_SEND_WITH_IMM);

	if (w)
		w->imm = imm;
}

static void sn_wr_rdma(struct ibv_qp_ex *qx, uint32_t op, uint32_t rkey, uint64_t raddr,
		       __be32 imm)
{
	struct sn_swr *w = sn_wr_new(qx, op);

	if (w) {
		w->rkey = rkey;
		w->raddr = raddr;
		w->imm = imm;
	}
}

static void sn_wr_rdma_write(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t raddr)
{
	sn_wr_rdma(qx, IBV_WR_RDMA_WRITE, rkey, raddr, 0);
}

static void sn_wr_rdma_write_imm(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t raddr,
				 __be32 imm)
{
	sn_wr_rdma(qx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, raddr, imm);
}

static void sn_wr_rdma_read(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t raddr)
{
	sn_wr_rdma(qx, IBV_WR_RDMA_READ, rkey, raddr, 0);
}

static void sn_wr_cmp_swp(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t raddr,
			  uint64_t cmp, uint64_t swap)
{
	struct sn_swr *w = sn_wr_new(qx, IBV_WR_ATOMIC_CMP_AND_SWP);

	if (w) {
		w->rkey = rkey;
		w->raddr = raddr;
		w->cmp_add = cmp;
		w->swap = swap;
	}
}

static void sn_wr_fetch_add(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t raddr,
			    uint64_t add)
{
	struct sn_swr *w = sn_wr_new(qx, IBV_WR_ATOMIC_FETCH_AND_ADD);

	if (w) {
		w->rkey = rkey;
		w->raddr = raddr;
		w->cmp_add = add;
	}
}

static void sn_wr_unsupported(struct ibv_qp_ex *qx)
{
	sn_qpx(qx)->wr_err = EOPNOTSUPP;
}

static void sn_wr_bind_mw(struct ibv_qp_ex *qx, struct ibv_mw *mw, uint32_t rkey,
			  const struct ibv_mw_bind_info *bi)
{
	struct sn_swr *w = sn_wr_new(qx, IBV_WR_BIND_MW);

	if (w) {
		w->mw = (struct sn_mw *)mw;
		w->rkey = rkey;
		w->raddr = bi->addr;
		w->mw_len = bi->length;
		w->mr_key = bi->mr ? bi->mr->lkey : 0;
		w->mw_access = bi->mw_access_flags;
	}
}

static void sn_wr_local_inv(struct ibv_qp_ex *qx, uint32_t rkey)
{
	struct sn_swr *w = sn_wr_new(qx, IBV_WR_LOCAL_INV);

	if (w)
		w->rkey = rkey;
}

static void sn_wr_send_inv(struct ibv_qp_ex *qx, uint32_t rkey)
{
	struct sn_swr *w = sn_wr_new(qx, IBV_WR_SEND_WITH_INV);

	if (w)
		w->rkey = rkey;
}

/* ibv_bind_mw (type 1; verbs.h has checked the type, the MR's PD): a BIND_MW
 * WR with the key's next tag. mw->rkey takes the new key now, as rdma-core's
 * providers do; ibv_bind_mw(3) leaves restoring it to the application if
 * the completion reports an error. */
int sn_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
	struct ibv_send_wr wr, *bad;
	int ret;

	if (b->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED)
		return EINVAL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = b->wr_id;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = b->send_flags;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = b->bind_info;
	ret = sn_post_send(qp, &wr, &bad);
	if (!ret)
		mw->rkey = wr.bind_mw.rkey;
	return ret;
}

static void sn_wr_send_tso(struct ibv_qp_ex *qx, void *hdr, uint16_t hsz, uint16_t mss)
{
	sn_wr_unsupported(qx);
}

static void sn_wr_set_xrc_srqn(struct ibv_qp_ex *qx, uint32_t srqn)
{
	struct sn_swr *w = sn_wr_cur(sn_qpx(qx));

	if (w)
		w->xsrqn = srqn;
}

static void sn_wr_atomic_write(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t raddr,
			       const void *data)
{
	sn_wr_unsupported(qx);
}

static void sn_wr_set_ud_addr(struct ibv_qp_ex *qx, struct ibv_ah *ah, uint32_t qpn,
			      uint32_t qkey)
{
	struct sn_swr *w = sn_wr_cur(sn_qpx(qx));

	if (w) {
		w->ah = ah;
		w->rqpn = qpn;
		w->rqkey = qkey;
	}
}

static void sn_wr_set_sge_list(struct ibv_qp_ex *qx, size_t n, const struct ibv_sge *sg)
{
	struct sn_qp *qp = sn_qpx(qx);
	struct sn_swr *w = sn_wr_cur(qp);

	if (!w)
		return;
	if (n > qp->max_send_sge) {
		qp->wr_err = EINVAL;
		return;
	}
	memcpy(w->sge, sg, n * sizeof(*sg));
	w->num_sge = (uint32_t)n;
}

static void sn_wr_set_sge(struct ibv_qp_ex *qx, uint32_t lkey, uint64_t addr,
			  uint32_t len)
{
	struct ibv_sge s = { .addr = addr, .length = len, .lkey = lkey };

	sn_wr_set_sge_list(qx, 1, &s);
}

static void sn_wr_set_inline_data_list(struct ibv_qp_ex *qx, size_t n,
				       const struct ibv_data_buf *bufs)
{
	struct sn_qp *qp = sn_qpx(qx);
	struct sn_swr *w = sn_wr_cur(qp);
	size_t i, len = 0;

	if (!w)
		return;
	for (i = 0; i < n; i++)
		len += bufs[i].length;
	if (len > qp->max_inline || qp->wr_inl_used + len > qp->wr_inl_cap) {
		qp->wr_err = len > qp->max_inline ? EINVAL : ENOMEM;
		return;
	}
	w->inl = qp->wr_inl + qp->wr_inl_used;
	for (i = 0; i < n; i++) {
		memcpy(qp->wr_inl + qp->wr_inl_used, bufs[i].addr, bufs[i].length);
		qp->wr_inl_used += (uint32_t)bufs[i].length;
	}
	w->inl_len = (uint32_t)len;
	w->flags |= IBV_SEND_INLINE;
}

static void sn_wr_set_inline_data(struct ibv_qp_ex *qx, void *addr, size_t len)
{
	struct ibv_data_buf b = { .addr = addr, .length = len };

	sn_wr_set_inline_data_list(qx, 1, &b);
}

static int sn_wr_complete(struct ibv_qp_ex *qx)
{
	struct sn_qp *qp = sn_qpx(qx);
	uint32_t i, st = atomic_load(&qp->shm->state);
	bool kick = false;
	int ret = qp->wr_err;

	if (!ret && st != IBV_QPS_RTS && st != IBV_QPS_ERR && st != IBV_QPS_SQE)
		ret = EINVAL;
	if (ret) {
		qp->wr_nwr = 0;
		return ret;
	}
	sn_qp_lock(qp);
	if (qp->sq_head + qp->wr_nwr - atomic_load(&qp->sq_tail) > qp->max_send_wr) {
		sn_qp_unlock(qp);
		qp->wr_nwr = 0;
		return ENOMEM;
	}
	for (i = 0; i < qp->wr_nwr; i++) {
		struct sn_swr *w = (struct sn_swr *)(qp->wr_buf + i * qp->wr_stride);

		w->sge = (struct ibv_sge *)(w + 1);
		w->sq_idx = qp->sq_head++;
		w->post_ns = SN_UNLIKELY(sn_g.model) ? sn_now_ns() : 0;
		kick |= sn_submit(qp, w);
	}
	sn_qp_unlock(qp);
	qp->wr_nwr = 0;
	if (kick)
		sn_helper_kick(qp);
	return 0;
}

static void sn_wr_abort(struct ibv_qp_ex *qx)
{
	sn_qpx(qx)->wr_nwr = 0;
}

void sn_qp_ex_init(struct sn_qp *qp)
{
	struct ibv_qp_ex *x = &qp->qpx;

	x->wr_atomic_cmp_swp = sn_wr_cmp_swp;
	x->wr_atomic_fetch_add = sn_wr_fetch_add;
	x->wr_bind_mw = sn_wr_bind_mw;
	x->wr_local_inv = sn_wr_local_inv;
	x->wr_rdma_read = sn_wr_rdma_read;
	x->wr_rdma_write = sn_wr_rdma_write;
	x->wr_rdma_write_imm = sn_wr_rdma_write_imm;
	x->wr_send = sn_wr_send;
	x->wr_send_imm = sn_wr_send_imm;
	x->wr_send_inv = sn_wr_send_inv;
	x->wr_send_tso = sn_wr_send_tso;
	x->wr_set_ud_addr = sn_wr_set_ud_addr;
	x->wr_set_xrc_srqn = sn_wr_set_xrc_srqn;
	x->wr_set_inline_data = sn_wr_set_inline_data;
	x->wr_set_inline_data_list = sn_wr_set_inline_data_list;
	x->wr_set_sge = sn_wr_set_sge;
	x->wr_set_sge_list = sn_wr_set_sge_list;
	x->wr_start = sn_wr_start;
	x->wr_complete = sn_wr_complete;
	x->wr_abort = sn_wr_abort;
	x->wr_atomic_write = sn_wr_atomic_write;
}

/* ---------------- extended CQ ---------------- */

static bool sn_cq_pull(struct sn_cq *cq, struct sn_cqe *out)
{
	struct sn_cq_shm *s = cq->shm;
	uint64_t cons = atomic_load_explicit(&s->cons, memory_order_relaxed);

	for (;;) {
		struct sn_cqe *e = &s->e[cons & (s->ring - 1)];

		if (atomic_load_explicit(&e->seq, memory_order_acquire) != cons + 1)
			return false;
		if (e->visible_ns && e->visible_ns > sn_now_ns())
			return false;
		cons++;
		if (atomic_load(&e->dropped)) {
			atomic_store_explicit(&s->cons, cons, memory_order_release);
			continue;
		}
		memcpy(out, e, sizeof(*out));
		if (e->local_qp)
			atomic_store(&((struct sn_qp *)e->local_qp)->sq_tail,
				     e->sq_idx + 1);
		atomic_store_explicit(&s->cons, cons, memory_order_release);
		return true;
	}
}

static int sn_next_poll(struct ibv_cq_ex *cx)
{
	struct sn_cq *cq = (struct sn_cq *)cx;

	if (!sn_cq_pull(cq, &cq->cur))
		return ENOENT;
	cx->wr_id = cq->cur.wr_id;
	cx->status = cq->cur.status;
	return 0;
}

static int sn_start_poll(struct ibv_cq_ex *cx, struct ibv_poll_cq_attr *attr)
{
	if (attr && attr->comp_mask)
		return EINVAL;
	struct sn_cq *cq = (struct sn_cq *)cx;
	int ret;

	if (SN_UNLIKELY(atomic_load_explicit(&sn_npending, memory_order_relaxed)))
		sn_progress_all();
	/* the CQ is ours from start_poll to end_poll (not after ENOENT) */
	if (!cq->single_threaded)
		sn_spin_lock(&cq->poll_lock);
	ret = sn_next_poll(cx);
	if (ret) {
		if (!cq->single_threaded)
			sn_spin_unlock(&cq->poll_lock);
		sn_empty_poll(cq); /* outside the lock: this may sleep */
	} else if (SN_UNLIKELY(cq->empty_polls)) {
		sn_spin_done(cq);
	}
	return ret;
}

static void sn_end_poll(struct ibv_cq_ex *cx)
{
	struct sn_cq *cq = (struct sn_cq *)cx;

	if (!cq->single_threaded)
		sn_spin_unlock(&cq->poll_lock);
}

#define SN_CUR(cx) (((struct sn_cq *)(cx))->cur)
static enum ibv_wc_opcode sn_read_opcode(struct ibv_cq_ex *cx)
{
	return SN_CUR(cx).opcode;
}
static uint32_t sn_read_vendor_err(struct ibv_cq_ex *cx)
{
	return SN_CUR(cx).vendor_err;
}
static uint32_t sn_read_byte_len(struct ibv_cq_ex *cx)
{
	return SN_CUR(cx).byte_len;
}
static __be32 sn_read_imm(struct ibv_cq_ex *cx)
{
	return SN_CUR(cx).imm;
}
static uint32_t sn_read_qp_num(struct ibv_cq_ex *cx)
{
	return SN_CUR(cx).qp_num;
}
static uint32_t sn_read_src_qp(struct ibv_cq_ex *cx)
{
	return SN_CUR(cx).src_qp;
}
static unsigned int sn_read_wc_flags(struct ibv_cq_ex *cx)
{
	return SN_CUR(cx).wc_flags;
}
static uint32_t sn_read_slid(struct ibv_cq_ex *cx)
{
	return SN_CUR(cx).slid;
}
static uint8_t sn_read_sl(struct ibv_cq_ex *cx)
{
	return SN_CUR(cx).sl;
}
static uint8_t sn_read_dlid_path_bits(struct ibv_cq_ex *cx)
{
	return SN_CUR(cx).dlid_path_bits;
}
static uint64_t sn_read_ts(struct ibv_cq_ex *cx)
{
	return sn_nic_ticks(SN_CUR(cx).ts);
}
static uint64_t sn_read_wallclock(struct ibv_cq_ex *cx)
{
	struct timespec rt;
	uint64_t mono = sn_now_ns(), real;

	clock_gettime(CLOCK_REALTIME, &rt);
	real = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
	return SN_CUR(cx).ts + (real - mono);
}
static uint16_t sn_read_cvlan(struct ibv_cq_ex *cx)
{
	return 0;
}
static uint32_t sn_read_flow_tag(struct ibv_cq_ex *cx)
{
	return 0;
}
static void sn_read_tm_info(struct ibv_cq_ex *cx, struct ibv_wc_tm_info *ti)
{
	memset(ti, 0, sizeof(*ti));
}

void sn_cq_ex_init(struct sn_cq *cq)
{
	struct ibv_cq_ex *x = &cq->cq;

	x->start_poll = sn_start_poll;
	x->next_poll = sn_next_poll;
	x->end_poll = sn_end_poll;
	x->read_opcode = sn_read_opcode;
	x->read_vendor_err = sn_read_vendor_err;
	x->read_byte_len = sn_read_byte_len;
	x->read_imm_data = sn_read_imm;
	x->read_qp_num = sn_read_qp_num;
	x->read_src_qp = sn_read_src_qp;
	x->read_wc_flags = sn_read_wc_flags;
	x->read_slid = sn_read_slid;
	x->read_sl = sn_read_sl;
	x->read_dlid_path_bits = sn_read_dlid_path_bits;
	x->read_completion_ts = sn_read_ts;
	x->read_cvlan = sn_read_cvlan;
	x->read_flow_tag = sn_read_flow_tag;
	x->read_tm_info = sn_read_tm_info;
	x->read_completion_wallclock_ns = sn_read_wallclock;
}

const struct ibv_context_ops sn_ops_template = {
	.poll_cq = sn_poll_cq,
	.req_notify_cq = sn_req_notify_cq,
	.post_srq_recv = sn_post_srq_recv,
	.post_send = sn_post_send,
	.post_recv = sn_post_recv,
	.alloc_mw = sn_alloc_mw,
	.dealloc_mw = sn_dealloc_mw,
	.bind_mw = sn_bind_mw,
};
