/*
 * softnic execution: one send WR carried out against its responder, by
 * opcode class (local operations, UD sends, RC/UC sends, RDMA WRITE and
 * READ, atomics). The requester does all the work inside post_send: it
 * claims a receive from the responder's shared ring, copies into the
 * responder's registered memory (mapped from the fabric) and writes the
 * receive completion. Never blocks, allocates or makes a syscall (but a FIFO
 * write to an armed CQ).
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

/* The responder's QP moved to ERR from state st (nothing to do if it was in ERR):
 * its receives flushed, event ev raised. */
static void sn_remote_err_from(struct sn_rqp *peer, uint32_t ev, uint32_t st)
{
	if (st == IBV_QPS_ERR)
		return;
	if (!peer->shm->has_srq && peer->rcq)
		sn_rq_flush(peer->rq, peer->rcq, peer->qpn, &peer->chan_fd);
	if (ev)
		sn_async_event(peer->shm->async_path, &peer->async_fd, ev,
			       peer->shm->cookie);
	atomic_fetch_add_explicit(&peer->shm->cnt.errors, 1, memory_order_relaxed);
}

static void sn_remote_err(struct sn_rqp *peer, uint32_t ev)
{
	sn_remote_err_from(peer, ev, atomic_exchange(&peer->shm->state, IBV_QPS_ERR));
}

uint32_t sn_send_wc_opcode(uint32_t op)
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

/* One WR on its way: what the opcode handlers share. */
struct sn_xfer {
	struct sn_qp *qp;
	struct sn_swr *w;
	struct sn_rqp *peer;
	struct sn_rwqe *rw;
	struct sn_seg lsegs[SN_MAX_SGE + 1], rsegs[SN_MAX_SEGS];
	int nl, nr;
	uint64_t total, vis;
	bool rc; /* reliable: RC or XRC_SEND */
	uint32_t st;
	_Alignas(8) unsigned char rwbuf[sizeof(struct sn_rwqe) +
					SN_MAX_SGE * sizeof(struct ibv_sge)];
};

/* What a handler tells sn_exec: its SN_DONE / SN_RETRY_* or one of these. */
enum {
	SN_X_OK = 10, /* the responder took it: advance the PSN, count it sent */
	SN_X_SENT,    /* it left (or was lost on the wire): count it sent */
	SN_X_GO,      /* the peer accepts requests: go on with the opcode */
};

/* A receive the peer could not take: RNR NAK for RC, lost for UC. */
static int sn_x_rnr(struct sn_xfer *x)
{
	atomic_fetch_add_explicit(&x->peer->shm->cnt.rnr_naks, 1, memory_order_relaxed);
	return x->rc ? SN_RETRY_RNR : SN_X_SENT;
}

/* The responder failed the request: its receive completes in error (when
 * it took one) and, on RC, the requester sees `rst` and the peer goes to ERR. */
static int sn_x_fail(struct sn_xfer *x, uint32_t recv_st, uint32_t rst)
{
	/* RC: the responder's QP is in ERR before its error completion can be
	 * polled (as on hardware), its other receives flushed after it */
	uint32_t st = x->rc ? atomic_exchange(&x->peer->shm->state, IBV_QPS_ERR) : 0;

	sn_push_recv(x->peer, x->qp, x->w, x->rw, recv_st, 0, 0, x->vis);
	if (x->rc) {
		sn_remote_err_from(x->peer, 0, st);
		x->st = rst;
	}
	return SN_DONE;
}

/* BIND_MW and LOCAL_INV: local operations, nothing goes on the wire. */
static int sn_exec_local(struct sn_xfer *x)
{
	struct sn_swr *w = x->w;

	w->byte_len = 0;
	if (w->opcode == IBV_WR_BIND_MW)
		x->st = sn_mw_bind_exec(x->qp, w);
	else if (sn_mw_invalidate(sn_g.mrt, w->rkey, x->qp->pd_id, 0))
		x->st = IBV_WC_LOC_QP_OP_ERR;
	return SN_DONE;
}

/* Drop `skip` bytes from the front of a segment list; returns the first
 * segment left. */
static int sn_segs_skip(struct sn_seg *s, int n, uint64_t skip)
{
	int k = 0;

	while (skip && k < n) {
		if (s[k].len <= skip) {
			skip -= s[k].len;
			s[k].len = 0;
			k++;
		} else {
			s[k].p += skip;
			s[k].len -= skip;
			skip = 0;
		}
	}
	while (k < n && !s[k].len)
		k++;
	return k;
}

/* The 40 bytes in front of a UD receive's payload: a GRH when the AH has
 * one (the receiver sees IBV_WC_GRH), else left as they were. */
static void sn_ud_grh(struct sn_xfer *x, const struct sn_ah *ah)
{
	unsigned char g[SN_UD_GRH] = { 0x60 };
	struct sn_seg gs = { (char *)g, SN_UD_GRH };
	uint32_t plen = htobe16((uint16_t)x->total) & 0xffff;

	memcpy(g + 4, &plen, 2);
	g[6] = 0x1b; /* next header: IB */
	g[7] = ah->attr.grh.hop_limit;
	memcpy(g + 8, &sn_g.gid[ah->attr.grh.sgid_index % SN_GID_TBL], 16);
	memcpy(g + 24, &ah->attr.grh.dgid, 16);
	sn_copy(x->rsegs, x->nr, &gs, 1, SN_UD_GRH);
}

/* UD SEND: one datagram to the QP the WR names, lost when nobody there
 * takes it (no receive, wrong qkey, not ready). */
static int sn_ud_deliver(struct sn_xfer *x, struct sn_rqp *peer, uint32_t qkey);

/* A datagram to a multicast group (QPN 0xffffff, a multicast GID or LID):
 * one copy into every QP attached to the group in the fabric, except the
 * sender's own. Each member gets its own receive translation. */
static int sn_exec_mcast(struct sn_xfer *x, const struct sn_ah *ah, uint32_t qkey)
{
	uint32_t qpn[SN_MC_QPS], me = x->qp->shm->qpn;
	union ibv_gid g;
	int n;

	if (!ah->attr.is_global)
		return SN_X_SENT; /* LID-only multicast: no group names it here */
	g = ah->attr.grh.dgid;
	n = sn_mc_members(&g, qpn, SN_MC_QPS);
	for (int i = 0; i < n; i++) {
		if (qpn[i] == me)
			continue;
		x->nr = 0;
		x->peer = sn_rqp_get(qpn[i]);
		sn_ud_deliver(x, x->peer, qkey);
	}
	return SN_X_SENT;
}

static int sn_exec_ud(struct sn_xfer *x)
{
	struct sn_swr *w = x->w;
	struct sn_ah *ah = (struct sn_ah *)w->ah;
	struct sn_rqp *peer;
	uint32_t qkey;

	if (x->total > SN_MTU_BYTES) {
		x->st = IBV_WC_LOC_LEN_ERR;
		return SN_DONE;
	}
	if (w->opcode != IBV_WR_SEND && w->opcode != IBV_WR_SEND_WITH_IMM) {
		x->st = IBV_WC_LOC_QP_OP_ERR;
		return SN_DONE;
	}
	if (SN_UNLIKELY(!ah || ah->path_bad))
		return SN_X_SENT; /* addressed to nobody here: lost */
	qkey = (w->rqkey & 0x80000000u) ? x->qp->attr.qkey : w->rqkey;
	if (SN_UNLIKELY(w->rqpn == SN_MC_QPN))
		return sn_exec_mcast(x, ah, qkey);
	peer = x->peer = sn_rqp_get(w->rqpn);
	return sn_ud_deliver(x, peer, qkey);
}

/* One UD datagram into one QP's receive queue (or lost, as UD may be). */
static int sn_ud_deliver(struct sn_xfer *x, struct sn_rqp *peer, uint32_t qkey)
{
	struct sn_swr *w = x->w;
	struct sn_ah *ah = (struct sn_ah *)w->ah;
	struct sn_rwqe *rw = x->rw;
	uint64_t need = x->total + SN_UD_GRH;
	uint32_t i, pst;
	int k;

	if (!peer || !sn_rqp_alive(peer) || peer->shm->qp_type != IBV_QPT_UD)
		return SN_X_SENT; /* unreliable: silently lost */
	pst = atomic_load(&peer->shm->state);
	if (pst < IBV_QPS_RTR || pst > IBV_QPS_SQE || peer->shm->qkey != qkey)
		return SN_X_SENT;
	if (!sn_take(peer, rw)) {
		atomic_fetch_add_explicit(&peer->shm->cnt.rnr_naks, 1,
					  memory_order_relaxed);
		return SN_X_SENT;
	}
	/* the SGEs are checked for the bytes written into them (the GRH space,
	 * then the payload), as on RC and as hardware and rxe do: a receive
	 * posted larger than what is left of its MR takes a short datagram */
	for (i = 0; i < rw->num_sge && sn_segs_len(x->rsegs, x->nr) < need; i++) {
		uint64_t left = need - sn_segs_len(x->rsegs, x->nr);
		uint32_t l =
			rw->sge[i].length < left ? rw->sge[i].length : (uint32_t)left;

		if (l &&
		    sn_xlate(peer->proc, rw->sge[i].lkey, rw->sge[i].addr, l,
			     IBV_ACCESS_LOCAL_WRITE, peer->pd_id, 0, x->rsegs, &x->nr)) {
			sn_push_recv(peer, x->qp, w, rw, IBV_WC_LOC_PROT_ERR, 0, 0,
				     x->vis);
			return SN_X_SENT;
		}
	}
	if (sn_segs_len(x->rsegs, x->nr) < need) {
		sn_push_recv(peer, x->qp, w, rw, IBV_WC_LOC_LEN_ERR, 0, 0, x->vis);
		return SN_X_SENT;
	}
	if (ah->attr.is_global)
		sn_ud_grh(x, ah);
	k = sn_segs_skip(x->rsegs, x->nr, SN_UD_GRH);
	sn_copy(x->rsegs + k, x->nr - k, x->lsegs, x->nl, x->total);
	sn_push_recv(peer, x->qp, w, rw, IBV_WC_SUCCESS, (uint32_t)x->total + SN_UD_GRH,
		     ah->attr.is_global ? IBV_WC_GRH : 0, x->vis);
	return SN_X_SENT;
}

/* RC/UC/XRC: find the responder and check it takes requests now. A UC
 * request nobody takes is lost; RC retries it. */
static int sn_exec_peer(struct sn_xfer *x)
{
	struct sn_qp *qp = x->qp;
	uint32_t type = qp->qpx.qp_base.qp_type;
	uint32_t ptype = type == IBV_QPT_XRC_SEND ? IBV_QPT_XRC_RECV : type;
	int lost = x->rc ? SN_RETRY_PEER : SN_X_SENT;
	struct sn_rqp *peer;
	uint32_t pst;

	if (SN_UNLIKELY(qp->path_bad))
		return lost; /* a LID/GID of no port here: no response ever comes */
	peer = qp->peer;
	if (SN_UNLIKELY(!peer || peer->dead)) {
		peer = qp->peer = sn_rqp_get(qp->attr.dest_qp_num);
		if (!peer)
			return lost;
	}
	x->peer = peer;
	pst = atomic_load_explicit(&peer->shm->state, memory_order_relaxed);
	if (SN_UNLIKELY(pst < IBV_QPS_RTR || pst == IBV_QPS_ERR ||
			peer->shm->qp_type != ptype))
		return lost;
	if (SN_UNLIKELY(!sn_rqp_alive(peer))) {
		qp->peer = NULL;
		return lost;
	}
	/* the first request reaching a responder still in RTR */
	if (SN_UNLIKELY(pst == IBV_QPS_RTR) && !atomic_load(&peer->shm->comm_est) &&
	    !atomic_exchange(&peer->shm->comm_est, 1))
		sn_async_event(peer->shm->async_path, &peer->async_fd, IBV_EVENT_COMM_EST,
			       peer->shm->cookie);
	return SN_X_GO;
}

/* PSNs: a request the responder does not expect is dropped there; RC
 * retransmits it until the retry budget runs out, UC resynchronises on the
 * next message (hardware's behaviour for both). */
static int sn_exec_psn(struct sn_xfer *x)
{
	struct sn_qp *qp = x->qp;
	uint32_t mtu = 128u << (qp->attr.path_mtu ? qp->attr.path_mtu : IBV_MTU_4096);
	uint32_t npk = x->total ? (uint32_t)((x->total + mtu - 1) / mtu) : 1;
	uint32_t exp = atomic_load_explicit(&x->peer->shm->exp_psn, memory_order_relaxed);

	if (SN_UNLIKELY(exp != qp->next_psn)) {
		if (x->rc)
			return SN_RETRY_PEER;
		qp->next_psn = (qp->next_psn + npk) & 0xffffff;
		atomic_store_explicit(&x->peer->shm->exp_psn, qp->next_psn,
				      memory_order_relaxed);
		return SN_X_SENT;
	}
	x->w->npk = npk;
	return SN_X_GO;
}

/* SEND, SEND_WITH_IMM, SEND_WITH_INV on RC/UC/XRC: into the receive's
 * SGEs, each checked for the bytes it actually gets. */
static int sn_exec_send(struct sn_xfer *x)
{
	struct sn_rqp *peer = x->peer;
	struct sn_swr *w = x->w;
	struct sn_rwqe *rw = x->rw;
	uint32_t i;

	if (!sn_take(peer, rw))
		return sn_x_rnr(x);
	for (i = 0; i < rw->num_sge && sn_segs_len(x->rsegs, x->nr) < x->total; i++) {
		uint64_t need = x->total - sn_segs_len(x->rsegs, x->nr);
		uint32_t l =
			rw->sge[i].length < need ? rw->sge[i].length : (uint32_t)need;

		if (!l)
			continue;
		if (sn_xlate(peer->proc, rw->sge[i].lkey, rw->sge[i].addr, l,
			     IBV_ACCESS_LOCAL_WRITE, peer->pd_id, 0, x->rsegs, &x->nr))
			return sn_x_fail(x, IBV_WC_LOC_PROT_ERR, IBV_WC_REM_OP_ERR);
	}
	if (sn_segs_len(x->rsegs, x->nr) < x->total)
		return sn_x_fail(x, IBV_WC_LOC_LEN_ERR, IBV_WC_REM_INV_REQ_ERR);
	/* the window is invalid before the receive completes; a key naming no
	 * type 2 window bound to this QP fails the receive (as rdma-core's rxe:
	 * Class J) and the request */
	if (SN_UNLIKELY(w->opcode == IBV_WR_SEND_WITH_INV) &&
	    sn_mw_invalidate(sn_rproc_mrt(peer->proc), w->rkey, peer->pd_id, peer->qpn))
		return sn_x_fail(x, IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_INV_REQ_ERR);
	sn_copy(x->rsegs, x->nr, x->lsegs, x->nl, x->total);
	sn_push_recv(peer, x->qp, w, rw, IBV_WC_SUCCESS, (uint32_t)x->total, 0, x->vis);
	return SN_X_OK;
}

/* A remote access the responder refuses: RC fails the QP, UC loses it. */
static int sn_x_access_err(struct sn_xfer *x)
{
	if (!x->rc)
		return SN_X_SENT;
	sn_remote_err(x->peer, IBV_EVENT_QP_ACCESS_ERR);
	x->st = IBV_WC_REM_ACCESS_ERR;
	return SN_DONE;
}

/* RDMA WRITE (with immediate: also consumes a receive). */
static int sn_exec_write(struct sn_xfer *x)
{
	struct sn_rqp *peer = x->peer;
	struct sn_swr *w = x->w;
	bool imm = w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;

	if (!(peer->shm->access & IBV_ACCESS_REMOTE_WRITE) ||
	    (x->total &&
	     sn_xlate(peer->proc, w->rkey, w->raddr, x->total, IBV_ACCESS_REMOTE_WRITE,
		      peer->pd_id, peer->qpn, x->rsegs, &x->nr)))
		return sn_x_access_err(x);
	if (imm && !sn_take(peer, x->rw))
		return sn_x_rnr(x);
	sn_copy(x->rsegs, x->nr, x->lsegs, x->nl, x->total);
	if (imm)
		sn_push_recv(peer, x->qp, w, x->rw, IBV_WC_SUCCESS, (uint32_t)x->total, 0,
			     x->vis);
	else
		sn_count_rx(peer, x->qp, x->total);
	return SN_X_OK;
}

/* RDMA READ: RC only. */
static int sn_exec_read(struct sn_xfer *x)
{
	struct sn_rqp *peer = x->peer;
	struct sn_swr *w = x->w;

	if (!x->rc) {
		x->st = IBV_WC_LOC_QP_OP_ERR;
		return SN_DONE;
	}
	if (!(peer->shm->access & IBV_ACCESS_REMOTE_READ) ||
	    (x->total &&
	     sn_xlate(peer->proc, w->rkey, w->raddr, x->total, IBV_ACCESS_REMOTE_READ,
		      peer->pd_id, peer->qpn, x->rsegs, &x->nr)))
		return sn_x_access_err(x);
	sn_copy(x->lsegs, x->nl, x->rsegs, x->nr, x->total);
	return SN_X_OK;
}

/* CMP_AND_SWP and FETCH_AND_ADD: RC only, 8 aligned bytes. */
static int sn_exec_atomic(struct sn_xfer *x)
{
	struct sn_rqp *peer = x->peer;
	struct sn_swr *w = x->w;
	uint64_t old, *rp;

	if (!x->rc) {
		x->st = IBV_WC_LOC_QP_OP_ERR;
		return SN_DONE;
	}
	if (x->total != 8 || x->nl != 1) {
		x->st = IBV_WC_LOC_LEN_ERR;
		return SN_DONE;
	}
	if (w->raddr & 7) {
		sn_remote_err(peer, 0);
		x->st = IBV_WC_REM_INV_REQ_ERR;
		return SN_DONE;
	}
	if (!(peer->shm->access & IBV_ACCESS_REMOTE_ATOMIC) ||
	    sn_xlate(peer->proc, w->rkey, w->raddr, 8, IBV_ACCESS_REMOTE_ATOMIC,
		     peer->pd_id, peer->qpn, x->rsegs, &x->nr) ||
	    x->nr != 1) {
		sn_remote_err(peer, IBV_EVENT_QP_ACCESS_ERR);
		x->st = IBV_WC_REM_ACCESS_ERR;
		return SN_DONE;
	}
	rp = (uint64_t *)x->rsegs[0].p;
	if (w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		old = __atomic_fetch_add(rp, w->cmp_add, __ATOMIC_SEQ_CST);
	} else {
		old = w->cmp_add;
		__atomic_compare_exchange_n(rp, &old, w->swap, false, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST);
	}
	memcpy(x->lsegs[0].p, &old, 8);
	return SN_X_OK;
}

/* The connected transports: responder, PSN, XRC's SRQ, then the opcode. */
static int sn_exec_conn(struct sn_xfer *x)
{
	int r = sn_exec_peer(x);

	if (r == SN_X_GO)
		r = sn_exec_psn(x);
	if (r != SN_X_GO)
		return r;
	if (x->qp->qpx.qp_base.qp_type == IBV_QPT_XRC_SEND) {
		/* XRC: the TGT QP hands the request to the SRQ it names */
		struct sn_rqp *v = sn_rqp_xrc(x->peer, x->w->xsrqn);

		if (!v) {
			sn_remote_err(x->peer, 0);
			x->st = IBV_WC_REM_INV_REQ_ERR;
			return SN_DONE;
		}
		x->peer = v;
	}
	switch (x->w->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_SEND_WITH_INV:
		return sn_exec_send(x);
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return sn_exec_write(x);
	case IBV_WR_RDMA_READ:
		return sn_exec_read(x);
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return sn_exec_atomic(x);
	default:
		x->st = IBV_WC_LOC_QP_OP_ERR;
		return SN_DONE;
	}
}

/* Execute one WR against its responder. SN_DONE with *st the requester's
 * status, or SN_RETRY_* when the WR must wait (RNR, peer unreachable). */
int sn_exec(struct sn_qp *qp, struct sn_swr *w, uint32_t *st)
{
	struct sn_xfer x;
	uint32_t type = qp->qpx.qp_base.qp_type, op = w->opcode, need_local = 0;
	int r;

	x.qp = qp;
	x.w = w;
	x.peer = NULL;
	x.rw = (struct sn_rwqe *)x.rwbuf;
	x.nl = x.nr = 0;
	x.total = x.vis = 0;
	x.rc = type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND;
	x.st = IBV_WC_SUCCESS;
	if (SN_UNLIKELY(op == IBV_WR_BIND_MW || op == IBV_WR_LOCAL_INV)) {
		r = sn_exec_local(&x);
		*st = x.st;
		return r;
	}
	if (op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP ||
	    op == IBV_WR_ATOMIC_FETCH_AND_ADD)
		need_local = IBV_ACCESS_LOCAL_WRITE;
	*st = (uint32_t)sn_local_segs(qp, w, need_local, x.lsegs, &x.nl, &x.total);
	if (*st != IBV_WC_SUCCESS)
		return SN_DONE;
	w->byte_len = (uint32_t)x.total;
	if (SN_UNLIKELY(sn_g.model))
		x.vis = w->vis_ns =
			(w->post_ns ? w->post_ns : sn_now_ns()) + sn_model_ns(x.total);
	r = type == IBV_QPT_UD ? sn_exec_ud(&x) : sn_exec_conn(&x);
	*st = x.st;
	if (r == SN_X_OK) {
		qp->next_psn = (qp->next_psn + w->npk) & 0xffffff;
		atomic_store_explicit(&x.peer->shm->exp_psn, qp->next_psn,
				      memory_order_relaxed);
	}
	if (r == SN_X_OK || r == SN_X_SENT) {
		SN_ADD1(qp->shm->cnt.tx_pkts, 1);
		SN_ADD1(qp->shm->cnt.tx_bytes, x.total);
		r = SN_DONE;
	}
	return r;
}
