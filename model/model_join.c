/* model_join.c - the post -> completion join: outstanding WRs per queue, completions
 * joined on (QP number, wr_id), unsignaled WRs retired by the next signaled one,
 * receives from a QP's RQ, its SRQ or (XRC) any XRC SRQ of the trace, shared CQs and
 * completions without a QP number, completions read before their post, and WRs
 * whose NIC timestamp waits for a clock sample.
 *
 * Events of different threads arrive slightly out of order (chunks are per thread),
 * so a completion seen before its post is parked until the post shows up, and
 * bounds are only taken from polls earlier in time. Per-WR state lives only between
 * a post and its completion. Every lookup can miss; nothing here may trust a field.
 */
#include <stdlib.h>
#include <string.h>

#include "model/model_int.h"
#include "util/rbt_grow.h"

#define MT_PARK_MAX  4096
#define MT_DEFER_MAX 65536

static void mt_cq_track(struct rbt_model_cq *cq, int delta, uint64_t ts)
{
	if (!cq)
		return;
	cq->outstanding += delta;
	if (cq->outstanding > cq->peak) {
		cq->peak = cq->outstanding;
		cq->peak_ts = ts;
	}
}

static void mt_tracked(struct rbt_model *m)
{
	if (++m->stats.tracked_wrs > m->stats.peak_tracked_wrs)
		m->stats.peak_tracked_wrs = m->stats.tracked_wrs;
}

uint32_t rbt_model_posted(const struct rbt_event *ev)
{
	uint32_t n;
	int64_t ret;
	uint64_t bad;
	switch (ev->type) {
	case RBT_EV_POST_SEND:
		n = ev->u.post_send.n_wrs, ret = ev->u.post_send.ret;
		bad = ev->u.post_send.bad_wr;
		break;
	case RBT_EV_POST_RECV:
		n = ev->u.post_recv.n_wrs, ret = ev->u.post_recv.ret;
		bad = ev->u.post_recv.bad_wr;
		break;
	case RBT_EV_POST_SRQ_RECV:
		n = ev->u.post_srq_recv.n_wrs, ret = ev->u.post_srq_recv.ret;
		bad = ev->u.post_srq_recv.bad_wr;
		break;
	default:
		return 0;
	}
	if (ret != 0)
		return bad < n ? (uint32_t)bad : 0;
	return n;
}

/* ---- handing completed WRs over ---- */

/* ---- NIC timestamps: interpolated, not extrapolated ----
 * A completion's NIC time is mapped to host ticks through its device's clock
 * model once a clock sample at or after it has been read: between two samples
 * the fit interpolates; past the last one it would extrapolate at the rate
 * fitted so far - before the second sample, the nominal one - and a NIC clock
 * 50 ppm off its nominal rate put a quarter of the NIC times of a 10 ms
 * ibv_rc_pingpong -t outside their [post, poll] (softnic with
 * SOFTNIC_CLOCK_PPM=50). So WRs completed with a NIC timestamp wait, in order,
 * for such a sample (the recorder samples every 10 ms, then 100 ms, and at
 * close); up to MT_DEFER_MAX of them: past that the oldest is mapped with what
 * the fit knows then. At the end the ones left are mapped as they can be
 * (never sampled: bounds). */

/* The WR at the head of the deferred queue, handed over now: mapped through
 * its device's fit as it is (final), or only when a sample covers it. false
 * when it has to wait. */
static bool mt_hand_over(struct rbt_model *m, struct mt_trace *t, bool final)
{
	struct mt_deferred d = *(struct mt_deferred *)rbt_model_ring_at(&t->deferred, 0);
	const struct mt_clock *clk = mt_clock_of(t, d.c.ctx);

	if (!final && !mt_clock_covers(clk, d.c.hw_ts))
		return false;
	d.c.exact = mt_clock_map(clk, d.c.hw_ts, &d.c.host);
	if (!d.c.exact)
		t->pub.nic_unmapped++;
	d.c.hw_ts = 0;
	rbt_model_ring_drop(&t->deferred, 1);
	if (m->ops.wr_done)
		m->ops.wr_done(m->arg, d.qp, &d.w, &d.c, 1, d.w.recv ? 0 : d.w.signaled);
	return true;
}

/* Holds a WR whose completion has a NIC timestamp until a clock sample covers
 * it; false without memory (it is then handed over as it is). */
static bool mt_defer(struct rbt_model *m, struct mt_trace *t, struct rbt_model_qp *qp,
		     const struct rbt_model_wr *w, const struct rbt_model_comp *c)
{
	if (t->deferred.n >= MT_DEFER_MAX)
		mt_hand_over(m, t, true);
	t->deferred.elem = sizeof(struct mt_deferred);
	struct mt_deferred *d = rbt_model_ring_push(&t->deferred);
	if (!d)
		return false;
	d->qp = qp;
	d->w = *w;
	d->c = *c;
	return true;
}

static void mt_done(struct rbt_model *m, struct mt_trace *t, struct rbt_model_qp *qp,
		    const struct rbt_model_wr *w, const struct rbt_model_comp *c,
		    uint32_t n, uint32_t nsig)
{
	if (!m->ops.wr_done)
		return;
	/* behind others that wait, in order, or not covered by a sample yet */
	if (c->hw_ts && (t->deferred.n || !c->exact ||
			 !mt_clock_covers(mt_clock_of(t, c->ctx), c->hw_ts))) {
		uint32_t k = 0;
		while (k < n && mt_defer(m, t, qp, w, c))
			k++;
		if (k == n)
			return;
		n -= k;
	}
	m->ops.wr_done(m->arg, qp, w, c, n, nsig);
}

/* Hands over the deferred WRs a clock sample now covers; at the end (final)
 * all of them, the ones never sampled with bounds. */
void mt_drain_deferred(struct rbt_model *m, struct mt_trace *t, bool final)
{
	while (t->deferred.n && mt_hand_over(m, t, final))
		;
}

/* An error completion moves its QP to ERR (after the consumer saw it). */
static void mt_joined(struct rbt_model *m, struct rbt_model_qp *qp,
		      const struct rbt_model_comp *c, const struct rbt_model_wr *w)
{
	if (m->ops.completion)
		m->ops.completion(m->arg, qp, c, w);
	if (c->status && qp->state != IBV_QPS_ERR) {
		mt_qp_history(qp, c->poll_ts, IBV_QPS_ERR, 0, 0, true);
		qp->state = IBV_QPS_ERR;
	}
}

/* ---- sends ---- */

/* The WRs of one chain alike in every phase, from k on, handed over at once (only
 * with opts.batch: a timeline wants each WR). */
static uint32_t mt_run_len(struct rbt_model *m, struct rbt_model_ring *r, uint32_t k,
			   uint32_t i, bool may_defer, uint32_t *nsig)
{
	const struct rbt_model_wr *x = rbt_model_ring_at(r, k);
	uint32_t n = 1;
	*nsig = x->signaled;
	while (m->batch && k + n <= i) {
		const struct rbt_model_wr *y = rbt_model_ring_at(r, k + n);
		if (y->post_ts != x->post_ts || y->opcode != x->opcode ||
		    y->bytes != x->bytes || y->inl != x->inl ||
		    (y->signaled && k + n < i) ||
		    (y->signaled != x->signaled && may_defer))
			break;
		*nsig += y->signaled;
		n++;
	}
	return n;
}

/* Completes the send WR of c and the unsignaled ones before it. */
static bool mt_complete_send(struct rbt_model *m, struct mt_trace *t,
			     struct rbt_model_qp *qp, const struct rbt_model_comp *c)
{
	struct rbt_model_ring *r = &qp->sq;
	uint32_t i;
	/* only a signaled WR completes successfully: unsignaled ones with the same
	 * wr_id (perftest uses one wr_id for all) are retired with it, not by it */
	for (i = 0; i < r->n; i++) {
		const struct rbt_model_wr *x = rbt_model_ring_at(r, i);
		if (x->wr_id == c->wr_id && (x->signaled || c->status))
			break;
	}
	if (i == r->n)
		return false;
	struct rbt_model_wr *w = rbt_model_ring_at(r, i);
	if (w->signaled)
		mt_cq_track(qp->scq, -1, c->poll_ts);
	mt_joined(m, qp, c, w);
	bool all_unsig = true;
	for (uint32_t k = 0; k < i; k++)
		if (((struct rbt_model_wr *)rbt_model_ring_at(r, k))->signaled)
			all_unsig = false;
	struct rbt_model_comp cu = *c;
	cu.status = c->status == IBV_WC_SUCCESS ? 0 : c->status;
	bool may_defer = !cu.exact && cu.hw_ts;
	/* unsignaled WRs before it complete with it; a signaled one stays */
	for (uint32_t k = 0; k <= i;) {
		struct rbt_model_wr *x = rbt_model_ring_at(r, k);
		if (k < i && x->signaled) {
			k++;
			continue;
		}
		uint32_t nsig, n = mt_run_len(m, r, k, i, may_defer, &nsig);
		mt_done(m, t, qp, x, &cu, n, nsig);
		k += n;
	}
	if (all_unsig) {
		rbt_model_ring_drop(r, i + 1);
	} else {
		for (int k = (int)i; k >= 0; k--)
			if (k == (int)i ||
			    !((struct rbt_model_wr *)rbt_model_ring_at(r, k))->signaled)
				rbt_model_ring_remove(r, (uint32_t)k);
	}
	m->stats.tracked_wrs -= i + 1;
	return true;
}

/* ---- receives ---- */

static int mt_ring_find(const struct rbt_model_ring *r, uint64_t wr_id)
{
	for (uint32_t i = 0; i < r->n; i++)
		if (((const struct rbt_model_wr *)rbt_model_ring_at(r, i))->wr_id ==
		    wr_id)
			return (int)i;
	return -1;
}

/* An XRC TGT QP has no SRQ of its own: the sender picked one of the domain's XRC
 * SRQs, so the receive is the one of any SRQ of the trace posted with this wr_id. */
static struct rbt_model_ring *mt_xrc_ring(struct mt_trace *t, uint64_t wr_id)
{
	const struct rbt_map *tab = &t->tab[RBT_MODEL_SRQ];
	for (uint32_t k = 0; k < tab->cap; k++) {
		struct rbt_model_srq *s = tab->vals[k];
		if (s && mt_ring_find(&s->rq, wr_id) >= 0)
			return &s->rq;
	}
	return NULL;
}

static bool mt_complete_recv(struct rbt_model *m, struct mt_trace *t,
			     struct rbt_model_qp *qp, const struct rbt_model_comp *c)
{
	struct rbt_model_ring *r = qp->srq ? &qp->srq->rq : &qp->rq;
	bool xrc = !qp->srq && qp->type == IBV_QPT_XRC_RECV;
	if (xrc && !(r = mt_xrc_ring(t, c->wr_id)))
		return false;
	int i = mt_ring_find(r, c->wr_id);
	if (i < 0)
		return false;
	struct rbt_model_wr rw =
		*(struct rbt_model_wr *)rbt_model_ring_at(r, (uint32_t)i);
	rbt_model_ring_remove(r, (uint32_t)i);
	m->stats.tracked_wrs--;
	if (!qp->srq && !xrc)
		mt_cq_track(qp->rcq, -1, c->poll_ts);
	mt_joined(m, qp, c, &rw);
	mt_done(m, t, qp, &rw, c, 1, 0);
	return true;
}

/* ---- completions before their post ---- */

static inline uint64_t mt_park_bit(uint64_t wr_id)
{
	return 1ull << ((wr_id * 0x9e3779b97f4a7c15ull) >> 58);
}

static void mt_park_mask(struct rbt_model_qp *qp)
{
	qp->park_mask = 0;
	for (uint32_t i = 0; i < qp->n_parked; i++)
		qp->park_mask |= mt_park_bit(qp->parked[i].c.wr_id);
}

/* Parked completions whose post never came (lost events) would slow every post:
 * the ones 10 s older than now are given up and counted as unmatched. */
static void mt_park_expire(struct rbt_model *m, struct mt_trace *t,
			   struct rbt_model_qp *qp, uint64_t now)
{
	uint64_t horizon = (uint64_t)(10e9 / t->pub.ns_per_tick);
	for (uint32_t i = 0; i < qp->n_parked;) {
		if (qp->parked[i].c.poll_exit + horizon < now) {
			qp->parked[i] = qp->parked[--qp->n_parked];
			m->stats.unmatched_completions++;
			continue;
		}
		i++;
	}
	mt_park_mask(qp);
}

static void mt_park(struct rbt_model *m, struct mt_trace *t, struct rbt_model_qp *qp,
		    const struct rbt_model_comp *c)
{
	if (qp->n_parked >= MT_PARK_MAX)
		mt_park_expire(m, t, qp, c->poll_ts);
	if (qp->n_parked >= MT_PARK_MAX) {
		m->stats.unmatched_completions++;
		return;
	}
	if (rbt_grow(&qp->parked, &qp->cap_parked, qp->n_parked + 1, sizeof(*qp->parked),
		     8, 0)) {
		m->stats.unmatched_completions++;
		return;
	}
	qp->parked[qp->n_parked++].c = *c;
	qp->park_mask |= mt_park_bit(c->wr_id);
}

static void mt_unpark(struct rbt_model *m, struct mt_trace *t, struct rbt_model_qp *qp)
{
	for (uint32_t i = 0; i < qp->n_parked;) {
		struct rbt_model_parked p = qp->parked[i];
		bool ok = p.c.recv ? mt_complete_recv(m, t, qp, &p.c)
				   : mt_complete_send(m, t, qp, &p.c);
		if (ok) {
			qp->parked[i] = qp->parked[--qp->n_parked];
			continue;
		}
		i++;
	}
	mt_park_mask(qp);
}

/* ---- posts ---- */

void mt_on_post_send(struct rbt_model *m, struct mt_trace *t, const struct rbt_event *ev,
		     struct rbt_model_qp *qp)
{
	const struct rbt_ev_post_send *p = &ev->u.post_send;
	uint32_t posted = rbt_model_posted(ev);
	if (!posted)
		return;
	uint64_t exit = p->ts_exit >= ev->ts ? p->ts_exit : ev->ts;
	uint64_t share = (exit - ev->ts) / posted, posted_bits = 0;
	for (uint32_t i = 0; i < posted; i++) {
		const struct rbt_send_wr *wr = &p->wrs[i];
		uint64_t bytes = 0;
		for (uint32_t s = 0; s < wr->n_sges; s++)
			bytes += wr->sges[s].length;
		struct rbt_model_wr *w = rbt_model_ring_push(&qp->sq);
		if (!w)
			continue;
		/* field by field: zeroing the whole struct first costs a rep stos per
		 * WR, a quarter of this loop */
		w->wr_id = wr->wr_id;
		w->post_ts = ev->ts;
		w->post_exit = exit;
		w->share = share;
		w->bytes = bytes;
		w->remote_addr = wr->remote_addr;
		w->rkey = wr->rkey;
		w->lkey = wr->n_sges ? wr->sges[0].lkey : 0;
		w->sge_addr = wr->n_sges ? wr->sges[0].addr : 0;
		w->user = 0;
		w->tid = ev->stream;
		w->opcode = (uint8_t)wr->opcode;
		w->signaled = (wr->send_flags & IBV_SEND_SIGNALED) || qp->sq_sig_all;
		w->inl = (wr->send_flags & IBV_SEND_INLINE) != 0;
		w->recv = 0;

		if (m->ops.wr_posted)
			m->ops.wr_posted(m->arg, &qp->res, w, wr);
		if (w->signaled)
			mt_cq_track(qp->scq, 1, ev->ts);
		mt_tracked(m);
		posted_bits |= mt_park_bit(wr->wr_id);
	}
	if (qp->n_parked && (posted_bits & qp->park_mask))
		mt_unpark(m, t, qp);
}

static void mt_push_recvs(struct rbt_model *m, struct rbt_model_res *q,
			  struct rbt_model_ring *r, const struct rbt_event *ev,
			  const struct rbt_recv_wr *wrs, uint32_t posted, uint64_t exit)
{
	for (uint32_t i = 0; i < posted; i++) {
		struct rbt_model_wr *w = rbt_model_ring_push(r);
		if (!w)
			return;
		w->wr_id = wrs[i].wr_id;
		w->post_ts = ev->ts;
		w->post_exit = exit;
		w->share = w->bytes = w->remote_addr = w->rkey = w->user = 0;
		w->lkey = wrs[i].n_sges ? wrs[i].sges[0].lkey : 0;
		w->sge_addr = wrs[i].n_sges ? wrs[i].sges[0].addr : 0;
		w->tid = ev->stream;
		w->opcode = RBT_MODEL_RECV;
		w->signaled = w->inl = 0;
		w->recv = 1;
		if (m->ops.wr_posted)
			m->ops.wr_posted(m->arg, q, w, NULL);
		mt_tracked(m);
	}
}

void mt_on_post_recv(struct rbt_model *m, struct mt_trace *t, const struct rbt_event *ev,
		     struct rbt_model_qp *qp)
{
	const struct rbt_ev_post_recv *p = &ev->u.post_recv;
	uint32_t posted = rbt_model_posted(ev);
	if (!posted)
		return;
	uint64_t exit = p->ts_exit >= ev->ts ? p->ts_exit : ev->ts;
	for (uint32_t i = 0; i < posted; i++)
		mt_cq_track(qp->rcq, 1, ev->ts);
	mt_push_recvs(m, &qp->res, &qp->rq, ev, p->wrs, posted, exit);
	uint64_t posted_bits = 0;
	for (uint32_t i = 0; i < posted; i++)
		posted_bits |= mt_park_bit(p->wrs[i].wr_id);
	if (qp->n_parked && (posted_bits & qp->park_mask))
		mt_unpark(m, t, qp);
}

void mt_on_post_srq_recv(struct rbt_model *m, struct mt_trace *t,
			 const struct rbt_event *ev, struct rbt_model_srq *srq)
{
	const struct rbt_ev_post_srq_recv *p = &ev->u.post_srq_recv;
	uint64_t exit = p->ts_exit >= ev->ts ? p->ts_exit : ev->ts;
	mt_push_recvs(m, &srq->res, &srq->rq, ev, p->wrs, rbt_model_posted(ev), exit);
	for (struct rbt_model_res *r = t->lists[RBT_MODEL_QP]; r; r = r->next_of_kind) {
		struct rbt_model_qp *qp = (struct rbt_model_qp *)r;
		if (qp->srq == srq && qp->n_parked)
			mt_unpark(m, t, qp);
	}
}

/* ---- polls ---- */

static bool mt_in_send_ring(const struct rbt_model_qp *qp, uint64_t wr_id)
{
	return mt_ring_find(&qp->sq, wr_id) >= 0;
}

/* A completion without a QP number (an extended poll that did not read it): the QP
 * of its CQ, or among several the one with that wr_id outstanding. */
static struct rbt_model_qp *mt_cq_qp_for(struct rbt_model_cq *cq, uint64_t wr_id)
{
	if (cq->n_qps == 1)
		return cq->qps[0];
	for (uint32_t i = 0; i < cq->n_qps; i++) {
		struct rbt_model_qp *qp = cq->qps[i];
		if (mt_in_send_ring(qp, wr_id))
			return qp;
		if (mt_ring_find(qp->srq ? &qp->srq->rq : &qp->rq, wr_id) >= 0)
			return qp;
	}
	return NULL;
}

/* The QP a completion came through. */
static struct rbt_model_qp *mt_wc_qp(struct rbt_model *m, struct mt_trace *t,
				     struct rbt_model_cq *cq, const struct rbt_wc *wc)
{
	struct rbt_model_qp *qp = t->c_qpn && t->c_qpn->qpn == wc->qp_num
					  ? t->c_qpn
					  : rbt_map_get(&t->qpns, wc->qp_num + 1ULL);
	t->c_qpn = qp;
	if (!qp && !wc->qp_num)
		qp = mt_cq_qp_for(cq, wc->wr_id);
	/* a receive on one of our XRC SRQs through another process's TGT QP (they
	 * share the XRC domain): that QP, known by number only */
	if (!qp && wc->qp_num && mt_xrc_ring(t, wc->wr_id)) {
		qp = mt_qp_new(m, t, 0, (uint32_t)wc->qp_num);
		if (qp)
			qp->type = IBV_QPT_XRC_RECV;
	}
	return qp;
}

void mt_on_poll(struct rbt_model *m, struct mt_trace *t, const struct rbt_event *ev,
		struct rbt_model_cq *cq)
{
	const struct rbt_ev_poll_cq *p = &ev->u.poll_cq;
	uint64_t exit = p->ts_exit >= ev->ts ? p->ts_exit : ev->ts;
	if (p->n_wcs == 0) {
		/* Folded empty polls: the last one began about one poll's length before
		 * the fold's end; the CQE arrived after that. */
		uint64_t count = p->count ? p->count : 1;
		uint64_t lo = exit - (exit - ev->ts) / count;
		if (!cq->have_drained || lo >= cq->drained_lo) {
			cq->have_drained = true;
			cq->drained_lo = lo;
			cq->drained_ts = ev->ts;
		}
		return;
	}
	struct mt_clock *clk = NULL;
	bool clk_looked = false;
	for (uint32_t i = 0; i < p->n_wcs; i++) {
		const struct rbt_wc *wc = &p->wcs[i];
		struct rbt_model_comp c = { 0 };
		c.poll_ts = ev->ts;
		c.poll_exit = exit;
		c.poll_tid = ev->stream;
		c.status = wc->status;
		c.vendor_err = wc->vendor_err;
		c.byte_len = wc->byte_len;
		c.opcode = wc->opcode;
		c.wr_id = wc->wr_id;
		if (cq->have_drained && cq->drained_lo <= ev->ts)
			c.lo = cq->drained_lo;
		if (wc->hw_ts) {
			if (!clk_looked) {
				clk = mt_clock_of(t, cq->ctx);
				clk_looked = true;
			}
			c.exact = mt_clock_map(clk, wc->hw_ts, &c.host);
			c.hw_ts = wc->hw_ts;
			c.ctx = cq->ctx;
		}
		struct rbt_model_qp *qp = mt_wc_qp(m, t, cq, wc);
		if (!qp) {
			m->stats.unmatched_completions++;
			continue;
		}
		if (wc->status == IBV_WC_SUCCESS)
			c.recv = (wc->opcode & IBV_WC_RECV) != 0;
		else
			c.recv = !mt_in_send_ring(qp, wc->wr_id);
		bool ok = c.recv ? mt_complete_recv(m, t, qp, &c)
				 : mt_complete_send(m, t, qp, &c);
		if (!ok)
			mt_park(m, t, qp, &c);
	}
	if (p->api == 0 && p->asked > p->n_wcs) {
		/* this poll emptied the CQ: later CQEs arrived after its start */
		cq->have_drained = true;
		cq->drained_lo = ev->ts;
		cq->drained_ts = ev->ts;
	}
}

/* ---- the end ---- */

static void mt_abandon(struct rbt_model *m, struct rbt_model_qp *qp,
		       struct rbt_model_ring *r)
{
	if (!m->ops.wr_done)
		return;
	for (uint32_t i = 0; i < r->n; i++)
		m->ops.wr_done(m->arg, qp, rbt_model_ring_at(r, i), NULL, 1, 0);
}

void mt_join_finish(struct rbt_model *m, struct mt_trace *t)
{
	mt_drain_deferred(m, t, true);
	for (struct rbt_model_res *r = t->lists[RBT_MODEL_QP]; r; r = r->next_of_kind) {
		struct rbt_model_qp *qp = (struct rbt_model_qp *)r;
		m->stats.unmatched_completions += qp->n_parked;
		for (uint32_t k = 0; k < qp->n_parked; k++) {
			if (m->ops.unmatched)
				m->ops.unmatched(m->arg, qp, &qp->parked[k].c);
			if (qp->parked[k].c.status && qp->state != IBV_QPS_ERR) {
				mt_qp_history(qp, qp->parked[k].c.poll_ts, IBV_QPS_ERR, 0,
					      0, true);
				qp->state = IBV_QPS_ERR;
			}
		}
		mt_abandon(m, qp, &qp->sq);
		mt_abandon(m, qp, &qp->rq);
	}
	const struct rbt_map *tab = &t->tab[RBT_MODEL_SRQ];
	for (uint32_t k = 0; k < tab->cap; k++)
		if (tab->vals[k])
			mt_abandon(m, NULL, &((struct rbt_model_srq *)tab->vals[k])->rq);
}
