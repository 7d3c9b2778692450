/* model_res.c - the resource tables: every object of a trace by handle (the latest
 * one created with it), QPs by number, MRs by lkey and rkey, threads by tid; the
 * lifetimes (a handle created again is a new object), QP state histories and
 * set-up, and the pairing of QPs across traces.
 *
 * Never trusts an event: a destroy of an unknown handle, a modify of a destroyed QP
 * or a create that failed change nothing; objects named only in use are created
 * then (create_ts 0).
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_int.h"
#include "util/rbt_grow.h"

static const char *const mt_kind_names[RBT_MODEL_KINDS] = {
	[RBT_MODEL_CTX] = "ctx",   [RBT_MODEL_PD] = "pd",
	[RBT_MODEL_MR] = "mr",	   [RBT_MODEL_MW] = "mw",
	[RBT_MODEL_XRCD] = "xrcd", [RBT_MODEL_CHANNEL] = "channel",
	[RBT_MODEL_CQ] = "cq",	   [RBT_MODEL_SRQ] = "srq",
	[RBT_MODEL_QP] = "qp",	   [RBT_MODEL_AH] = "ah",
};

const char *rbt_model_kind_name(enum rbt_model_kind k)
{
	return (unsigned)k < RBT_MODEL_KINDS ? mt_kind_names[k] : "?";
}

static size_t mt_kind_size(enum rbt_model_kind k)
{
	switch (k) {
	case RBT_MODEL_QP:
		return sizeof(struct rbt_model_qp);
	case RBT_MODEL_CQ:
		return sizeof(struct rbt_model_cq);
	case RBT_MODEL_SRQ:
		return sizeof(struct rbt_model_srq);
	case RBT_MODEL_MR:
		return sizeof(struct rbt_model_mr);
	default:
		return sizeof(struct rbt_model_res);
	}
}

/* A new object; it replaces the table's entry for its handle (a QP known by number
 * only, handle 0, has none: a damaged trace's CQ may well be 0). */
static struct rbt_model_res *mt_res_new(struct rbt_model *m, struct mt_trace *t,
					enum rbt_model_kind k, uint64_t handle,
					const struct rbt_event *create)
{
	struct rbt_model_res *r = calloc(1, mt_kind_size(k));
	if (!r)
		return NULL;
	r->kind = k;
	r->trace = t->pub.idx;
	r->handle = handle;
	r->id = ++m->next_id;
	if (create) {
		r->created = true;
		r->create_ts = create->ts;
		if (m->keep_events)
			r->create = rbt_model_event_copy(create);
	}
	if ((handle || k != RBT_MODEL_QP) && rbt_map_put(&t->tab[k], handle, r)) {
		free((void *)r->create);
		free(r);
		return NULL;
	}
	r->next_of_kind = t->lists[k];
	t->lists[k] = r;
	if (m->ops.res_new)
		m->ops.res_new(m->arg, r);
	return r;
}

static void mt_res_keep(struct rbt_model *m, struct rbt_model_res *r,
			const struct rbt_event *ev)
{
	if (!m->keep_events)
		return;
	struct rbt_event *c = rbt_model_event_copy(ev);
	if (!c ||
	    rbt_grow(&r->mods, &r->cap_mods, r->n_mods + 1, sizeof(*r->mods), 4, 0)) {
		free(c);
		return;
	}
	((const struct rbt_event **)r->mods)[r->n_mods++] = c;
}

static void mt_res_destroy(struct rbt_model *m, struct rbt_model_res *r,
			   const struct rbt_event *ev)
{
	r->destroyed = true;
	r->destroy_ts = ev->ts;
	if (m->keep_events && !r->destroy)
		r->destroy = rbt_model_event_copy(ev);
}

static void mt_res_free(struct rbt_model_res *r)
{
	free((void *)r->create);
	free((void *)r->destroy);
	for (uint32_t i = 0; i < r->n_mods; i++)
		free((void *)r->mods[i]);
	free((void *)r->mods);
	if (r->kind == RBT_MODEL_QP) {
		struct rbt_model_qp *qp = (struct rbt_model_qp *)r;
		free(qp->hist);
		free(qp->parked);
		rbt_model_ring_free(&qp->sq);
		rbt_model_ring_free(&qp->rq);
	} else if (r->kind == RBT_MODEL_SRQ) {
		rbt_model_ring_free(&((struct rbt_model_srq *)r)->rq);
	}
	free(r);
}

void mt_trace_free(struct mt_trace *t)
{
	for (int k = 0; k < RBT_MODEL_KINDS; k++) {
		struct rbt_model_res *r = t->lists[k];
		while (r) {
			struct rbt_model_res *n = r->next_of_kind;
			mt_res_free(r);
			r = n;
		}
		rbt_map_free(&t->tab[k]);
	}
	for (uint32_t i = 0; i < t->clocks.cap; i++)
		free(t->clocks.vals[i]);
	for (uint32_t i = 0; i < t->threads.cap; i++) {
		struct rbt_model_thread *th = t->threads.vals[i];
		if (th)
			free((void *)th->name);
		free(th);
	}
	rbt_map_free(&t->qpns);
	rbt_map_free(&t->lkeys);
	rbt_map_free(&t->rkeys);
	rbt_map_free(&t->clocks);
	rbt_map_free(&t->threads);
	rbt_model_ring_free(&t->deferred);
	free(t->name);
	free(t->host);
	free(t->cmdline);
	free(t->tool);
	free(t);
}

/* Do traces a and b share one TSC (the same host, the same boot)? Their start
 * pairs then tell the same interval on the TSC and on the monotonic clock. */
static bool mt_same_tsc(const struct rbt_model_trace *a, const struct rbt_model_trace *b)
{
	if (a->hdr.clock_source != RBT_CLOCK_TSC ||
	    b->hdr.clock_source != RBT_CLOCK_TSC || !a->hdr.host || !b->hdr.host ||
	    strcmp(a->hdr.host, b->hdr.host))
		return false;
	double on_tsc = ((double)b->hdr.start.ticks - (double)a->hdr.start.ticks) *
			a->ns_per_tick;
	double on_mono = (double)b->hdr.start.mono_ns - (double)a->hdr.start.mono_ns;
	return fabs(on_tsc - on_mono) < 1e6; /* 1 ms: another boot is far off */
}

/* The timeline's origin: the earliest trace start in real time. Traces on the
 * origin's TSC are placed by their TSC starts (exact: the real-time clock is read
 * once beside each start, and a thread preempted between the two reads would skew
 * that trace by as long); the others by their real-time starts. */
void mt_set_origin(struct rbt_model *m)
{
	if (m->origin_set)
		return;
	m->origin_set = true;
	int o = -1;
	for (int i = 0; i < m->n_traces; i++)
		if (o < 0 || m->traces[i]->pub.hdr.start.real_ns <
				     m->traces[o]->pub.hdr.start.real_ns)
			o = i;
	for (int i = 0; i < m->n_traces; i++) {
		struct rbt_model_trace *t = &m->traces[i]->pub;
		const struct rbt_model_trace *ot = &m->traces[o]->pub;
		if (mt_same_tsc(ot, t))
			t->align_ns = (int64_t)llround(((double)t->hdr.start.ticks -
							(double)ot->hdr.start.ticks) *
						       ot->ns_per_tick);
		else
			t->align_ns =
				(int64_t)(t->hdr.start.real_ns - ot->hdr.start.real_ns);
	}
	if (m->ops.begin)
		m->ops.begin(m->arg);
}

/* ---- threads ---- */

struct rbt_model_thread *rbt_model_thread(struct rbt_model *m, int trace, uint32_t tid)
{
	if (trace < 0 || trace >= m->n_traces)
		return NULL;
	struct mt_trace *t = m->traces[trace];
	struct rbt_model_thread *th = rbt_map_get(&t->threads, tid + 1ULL);
	if (th)
		return th;
	th = calloc(1, sizeof(*th));
	if (!th)
		return NULL;
	th->tid = tid;
	th->idx = t->n_threads++;
	if (rbt_map_put(&t->threads, tid + 1ULL, th)) {
		free(th);
		return NULL;
	}
	if (m->ops.thread)
		m->ops.thread(m->arg, trace, th);
	return th;
}

/* ---- CQs and QPs ---- */

struct rbt_model_cq *mt_cq_get(struct rbt_model *m, struct mt_trace *t, uint64_t handle)
{
	struct rbt_model_cq *cq = rbt_map_get(&t->tab[RBT_MODEL_CQ], handle);
	if (cq)
		return cq;
	return (struct rbt_model_cq *)mt_res_new(m, t, RBT_MODEL_CQ, handle, NULL);
}

static struct rbt_model_qp *mt_qp_alloc(struct rbt_model *m, struct mt_trace *t,
					uint64_t handle, uint32_t qpn,
					const struct rbt_event *create)
{
	struct rbt_model_qp *qp =
		(struct rbt_model_qp *)mt_res_new(m, t, RBT_MODEL_QP, handle, create);
	if (!qp)
		return NULL;
	qp->qpn = qpn;
	qp->state = RBT_MODEL_STATE_UNKNOWN;
	qp->sq.elem = sizeof(struct rbt_model_wr);
	qp->rq.elem = sizeof(struct rbt_model_wr);
	t->c_qp = t->c_qpn = NULL;
	rbt_map_put(&t->qpns, qpn + 1ULL, qp);
	return qp;
}

struct rbt_model_qp *mt_qp_new(struct rbt_model *m, struct mt_trace *t, uint64_t handle,
			       uint32_t qpn)
{
	return mt_qp_alloc(m, t, handle, qpn, NULL);
}

static struct rbt_model_qp *mt_live_qp(const struct mt_trace *t, uint64_t handle)
{
	struct rbt_model_qp *qp = rbt_map_get(&t->tab[RBT_MODEL_QP], handle);
	return qp && !qp->res.destroyed ? qp : NULL;
}

/* The QP of a post: by handle while it lives, else by number (the trace began after
 * its creation), else a new one. */
struct rbt_model_qp *mt_qp_find(struct rbt_model *m, struct mt_trace *t, uint64_t handle,
				uint32_t qpn)
{
	if (t->c_qp && handle && t->c_qp->res.handle == handle)
		return t->c_qp;
	struct rbt_model_qp *qp = handle ? mt_live_qp(t, handle) : NULL;
	if (!qp)
		qp = rbt_map_get(&t->qpns, qpn + 1ULL);
	if (!qp)
		qp = mt_qp_new(m, t, handle, qpn);
	if (qp && handle && qp->res.handle == handle && !qp->res.destroyed)
		t->c_qp = qp;
	return qp;
}

void mt_qp_history(struct rbt_model_qp *qp, uint64_t ts, uint32_t to, uint64_t mask,
		   int64_t ret, bool implicit)
{
	/* a QP modified forever: keep the first 4096 */
	if (rbt_grow(&qp->hist, &qp->cap_hist, qp->n_hist + 1, sizeof(*qp->hist), 8,
		     4096))
		return;
	struct rbt_model_state_change *h = &qp->hist[qp->n_hist++];
	h->ts = ts;
	h->from = (uint8_t)qp->state;
	h->to = (uint8_t)to;
	h->mask = mask;
	h->ret = ret;
	h->implicit = implicit;
}

static void mt_try_pair(struct rbt_model *m, struct rbt_model_qp *qp)
{
	if (qp->peer || !qp->have_rtr)
		return;
	for (int i = 0; i < m->n_traces; i++) {
		struct rbt_model_qp *o =
			rbt_map_get(&m->traces[i]->qpns, qp->dest_qpn + 1ULL);
		if (!o || o == qp || o->peer || !o->have_rtr || o->dest_qpn != qp->qpn)
			continue;
		qp->peer = o;
		o->peer = qp;
		return;
	}
}

static struct rbt_model_res *mt_on_qp_create(struct rbt_model *m, struct mt_trace *t,
					     const struct rbt_event *ev)
{
	const struct rbt_ev_qp_create *p = &ev->u.qp_create;
	if (p->ret != 0 || !p->qp)
		return NULL;
	struct rbt_model_qp *qp = mt_qp_alloc(m, t, p->qp, (uint32_t)p->qp_num, ev);
	if (!qp)
		return NULL;
	qp->type = (uint32_t)p->qp_type;
	qp->state = IBV_QPS_RESET;
	qp->pd = p->pd;
	qp->xrcd = p->xrcd;
	qp->max_send_wr = p->max_send_wr;
	qp->max_recv_wr = p->max_recv_wr;
	qp->max_inline = p->max_inline_data;
	qp->sq_sig_all = p->sq_sig_all;
	qp->scq = p->send_cq ? mt_cq_get(m, t, p->send_cq) : NULL;
	qp->rcq = p->recv_cq ? mt_cq_get(m, t, p->recv_cq) : NULL;
	qp->srq = p->srq ? rbt_map_get(&t->tab[RBT_MODEL_SRQ], p->srq) : NULL;
	for (int k = 0; k < 2; k++) {
		struct rbt_model_cq *cq = k ? qp->rcq : qp->scq;
		if (cq && (k == 0 || cq != qp->scq) && cq->n_qps < 4)
			cq->qps[cq->n_qps++] = qp;
	}
	if (qp->scq)
		qp->scq->capacity += p->max_send_wr;
	if (qp->rcq && !qp->srq)
		qp->rcq->capacity += p->max_recv_wr;
	mt_qp_history(qp, ev->ts, IBV_QPS_RESET, 0, 0, false);
	if (qp->hist)
		qp->hist[0].from = IBV_QPS_RESET;
	return &qp->res;
}

static void mt_qp_setup(struct rbt_model_qp *qp, const struct rbt_ev_qp_modify *p)
{
	uint64_t m = p->attr_mask;
	if (m & IBV_QP_PATH_MTU)
		qp->path_mtu = p->path_mtu;
	if (m & IBV_QP_DEST_QPN)
		qp->dest_qpn = p->dest_qp_num;
	if (m & IBV_QP_RQ_PSN)
		qp->rq_psn = p->rq_psn;
	if (m & IBV_QP_SQ_PSN)
		qp->sq_psn = p->sq_psn;
	if (m & IBV_QP_MIN_RNR_TIMER)
		qp->min_rnr_timer = p->min_rnr_timer;
	if (m & IBV_QP_TIMEOUT)
		qp->timeout = p->timeout;
	if (m & IBV_QP_RETRY_CNT)
		qp->retry_cnt = p->retry_cnt;
	if (m & IBV_QP_RNR_RETRY)
		qp->rnr_retry = p->rnr_retry;
	if (m & IBV_QP_MAX_QP_RD_ATOMIC)
		qp->max_rd_atomic = p->max_rd_atomic;
	if (m & IBV_QP_MAX_DEST_RD_ATOMIC)
		qp->max_dest_rd_atomic = p->max_dest_rd_atomic;
	if (m & IBV_QP_AV)
		qp->ah_dlid = p->ah_dlid;
	if (m & IBV_QP_PORT)
		qp->port = p->port_num;
}

static struct rbt_model_res *mt_on_qp_modify(struct rbt_model *m, struct mt_trace *t,
					     const struct rbt_event *ev)
{
	const struct rbt_ev_qp_modify *p = &ev->u.qp_modify;
	struct rbt_model_qp *qp = mt_live_qp(t, p->qp);
	if (!qp)
		return NULL;
	uint64_t mask = p->attr_mask;
	uint64_t when = p->ts_exit ? p->ts_exit : ev->ts;
	mt_res_keep(m, &qp->res, ev);
	if (p->ret != 0) {
		mt_qp_history(qp, when, qp->state, mask, p->ret, false);
		return &qp->res;
	}
	bool st = mask & IBV_QP_STATE;
	if (st) {
		mt_qp_history(qp, when, (uint32_t)p->qp_state, mask, 0, false);
		qp->state = (uint32_t)p->qp_state;
	}
	mt_qp_setup(qp, p);
	if (st && p->qp_state == IBV_QPS_RTR) {
		qp->have_rtr = true;
		qp->rtr_ts = when;
		mt_try_pair(m, qp);
	}
	if (st && p->qp_state == IBV_QPS_RTS) {
		qp->have_rts = true;
		qp->rts_ts = when;
	}
	if (st && p->qp_state == IBV_QPS_ERR && !qp->modified_to_err) {
		qp->modified_to_err = true;
		qp->modify_to_err_ts = when;
	}
	return &qp->res;
}

/* ---- MRs ---- */

static void mt_mr_unkey(struct mt_trace *t, struct rbt_model_mr *mr)
{
	if (rbt_map_get(&t->lkeys, mr->lkey + 1ULL) == mr)
		rbt_map_del(&t->lkeys, mr->lkey + 1ULL);
	if (rbt_map_get(&t->rkeys, mr->rkey + 1ULL) == mr)
		rbt_map_del(&t->rkeys, mr->rkey + 1ULL);
}

static struct rbt_model_mr *mt_live_mr(const struct mt_trace *t, uint64_t handle)
{
	struct rbt_model_mr *mr = rbt_map_get(&t->tab[RBT_MODEL_MR], handle);
	return mr && !mr->res.destroyed ? mr : NULL;
}

static struct rbt_model_res *mt_on_mr_reg(struct rbt_model *m, struct mt_trace *t,
					  const struct rbt_event *ev)
{
	const struct rbt_ev_mr_reg *p = &ev->u.mr_reg;
	if (p->ret != 0 || !p->mr)
		return NULL;
	struct rbt_model_mr *old = mt_live_mr(t, p->mr);
	if (old) /* registered again without a dereg we saw: drop its old keys */
		mt_mr_unkey(t, old);
	struct rbt_model_mr *mr =
		(struct rbt_model_mr *)mt_res_new(m, t, RBT_MODEL_MR, p->mr, ev);
	if (!mr)
		return NULL;
	mr->pd = p->pd;
	mr->addr = p->addr;
	mr->length = p->length;
	mr->access = p->access;
	mr->lkey = p->lkey;
	mr->rkey = p->rkey;
	rbt_map_put(&t->lkeys, p->lkey + 1ULL, mr);
	rbt_map_put(&t->rkeys, p->rkey + 1ULL, mr);
	return &mr->res;
}

static struct rbt_model_res *mt_on_mr_dereg(struct rbt_model *m, struct mt_trace *t,
					    const struct rbt_event *ev)
{
	const struct rbt_ev_mr_dereg *p = &ev->u.mr_dereg;
	struct rbt_model_mr *mr = p->ret == 0 ? mt_live_mr(t, p->mr) : NULL;
	if (!mr)
		return NULL;
	mt_mr_unkey(t, mr);
	mt_res_destroy(m, &mr->res, ev);
	return &mr->res;
}

/* ---- the rest ---- */

static struct rbt_model_res *mt_on_cq_create(struct rbt_model *m, struct mt_trace *t,
					     const struct rbt_event *ev)
{
	const struct rbt_ev_cq_create *p = &ev->u.cq_create;
	if (p->ret != 0 || !p->cq)
		return NULL;
	struct rbt_model_cq *cq =
		(struct rbt_model_cq *)mt_res_new(m, t, RBT_MODEL_CQ, p->cq, ev);
	if (!cq)
		return NULL;
	t->c_cq = NULL;
	cq->cqe = p->cqe ? p->cqe : p->cqe_asked;
	cq->ctx = p->ctx;
	cq->ts_source = p->ts_source;
	return &cq->res;
}

static struct rbt_model_res *mt_on_srq_create(struct rbt_model *m, struct mt_trace *t,
					      const struct rbt_event *ev)
{
	const struct rbt_ev_srq_create *p = &ev->u.srq_create;
	struct rbt_model_res *old = rbt_map_get(&t->tab[RBT_MODEL_SRQ], p->srq);
	if (p->ret != 0 || !p->srq || (old && !old->destroyed))
		return NULL;
	struct rbt_model_srq *s =
		(struct rbt_model_srq *)mt_res_new(m, t, RBT_MODEL_SRQ, p->srq, ev);
	if (!s)
		return NULL;
	s->srq_type = p->srq_type;
	s->srqn = p->srqn;
	s->max_wr = p->max_wr;
	s->rq.elem = sizeof(struct rbt_model_wr);
	return &s->res;
}

/* A modify of a live object: kept, and for a CQ / SRQ / MR its new values. */
static struct rbt_model_res *mt_on_modify(struct rbt_model *m, struct mt_trace *t,
					  enum rbt_model_kind k, uint64_t h,
					  const struct rbt_event *ev)
{
	struct rbt_model_res *r = rbt_map_get(&t->tab[k], h);
	if (!r || r->destroyed)
		return NULL;
	mt_res_keep(m, r, ev);
	if (ev->type == RBT_EV_CQ_RESIZE && ev->u.cq_resize.ret == 0)
		((struct rbt_model_cq *)r)->cqe = ev->u.cq_resize.cqe;
	if (ev->type == RBT_EV_SRQ_MODIFY && ev->u.srq_modify.ret == 0 &&
	    (ev->u.srq_modify.attr_mask & IBV_SRQ_MAX_WR))
		((struct rbt_model_srq *)r)->max_wr = ev->u.srq_modify.max_wr;
	return r;
}

/* ---- the event -> object table ----
 * Which events create, modify or destroy an object of which kind, and where the
 * handle is. Every one of them starts with ts_exit, ret, err (struct mt_call). */

struct mt_call {
	uint64_t ts_exit;
	int64_t ret;
	uint64_t err;
};

enum { MT_CREATE, MT_MODIFY, MT_DESTROY };

#define MT_H(lname, field) offsetof(struct rbt_event, u.lname.field)
static const struct mt_life {
	uint32_t type;
	uint8_t kind, what;
	uint16_t h_off;
} mt_lives[] = {
	{ RBT_EV_DEVICE_OPEN, RBT_MODEL_CTX, MT_CREATE, MT_H(device_open, ctx) },
	{ RBT_EV_DEVICE_CLOSE, RBT_MODEL_CTX, MT_DESTROY, MT_H(device_close, ctx) },
	{ RBT_EV_PD_ALLOC, RBT_MODEL_PD, MT_CREATE, MT_H(pd_alloc, pd) },
	{ RBT_EV_PD_DEALLOC, RBT_MODEL_PD, MT_DESTROY, MT_H(pd_dealloc, pd) },
	{ RBT_EV_MR_REG, RBT_MODEL_MR, MT_CREATE, MT_H(mr_reg, mr) },
	{ RBT_EV_MR_REREG, RBT_MODEL_MR, MT_MODIFY, MT_H(mr_rereg, mr) },
	{ RBT_EV_MR_DEREG, RBT_MODEL_MR, MT_DESTROY, MT_H(mr_dereg, mr) },
	{ RBT_EV_MW_ALLOC, RBT_MODEL_MW, MT_CREATE, MT_H(mw_alloc, mw) },
	{ RBT_EV_MW_DEALLOC, RBT_MODEL_MW, MT_DESTROY, MT_H(mw_dealloc, mw) },
	{ RBT_EV_XRCD_OPEN, RBT_MODEL_XRCD, MT_CREATE, MT_H(xrcd_open, xrcd) },
	{ RBT_EV_XRCD_CLOSE, RBT_MODEL_XRCD, MT_DESTROY, MT_H(xrcd_close, xrcd) },
	{ RBT_EV_CHANNEL_CREATE, RBT_MODEL_CHANNEL, MT_CREATE,
	  MT_H(channel_create, channel) },
	{ RBT_EV_CHANNEL_DESTROY, RBT_MODEL_CHANNEL, MT_DESTROY,
	  MT_H(channel_destroy, channel) },
	{ RBT_EV_CQ_CREATE, RBT_MODEL_CQ, MT_CREATE, MT_H(cq_create, cq) },
	{ RBT_EV_CQ_RESIZE, RBT_MODEL_CQ, MT_MODIFY, MT_H(cq_resize, cq) },
	{ RBT_EV_CQ_DESTROY, RBT_MODEL_CQ, MT_DESTROY, MT_H(cq_destroy, cq) },
	{ RBT_EV_SRQ_CREATE, RBT_MODEL_SRQ, MT_CREATE, MT_H(srq_create, srq) },
	{ RBT_EV_SRQ_MODIFY, RBT_MODEL_SRQ, MT_MODIFY, MT_H(srq_modify, srq) },
	{ RBT_EV_SRQ_DESTROY, RBT_MODEL_SRQ, MT_DESTROY, MT_H(srq_destroy, srq) },
	{ RBT_EV_QP_CREATE, RBT_MODEL_QP, MT_CREATE, MT_H(qp_create, qp) },
	{ RBT_EV_QP_MODIFY, RBT_MODEL_QP, MT_MODIFY, MT_H(qp_modify, qp) },
	{ RBT_EV_QP_DESTROY, RBT_MODEL_QP, MT_DESTROY, MT_H(qp_destroy, qp) },
	{ RBT_EV_QP_FINAL_STATE, RBT_MODEL_QP, MT_MODIFY, MT_H(qp_final_state, qp) },
	{ RBT_EV_AH_CREATE, RBT_MODEL_AH, MT_CREATE, MT_H(ah_create, ah) },
	{ RBT_EV_AH_DESTROY, RBT_MODEL_AH, MT_DESTROY, MT_H(ah_destroy, ah) },
};
#undef MT_H

static const struct mt_life *mt_life_of(uint32_t type)
{
	for (size_t i = 0; i < sizeof(mt_lives) / sizeof(mt_lives[0]); i++)
		if (mt_lives[i].type == type)
			return &mt_lives[i];
	return NULL;
}

static uint64_t mt_life_handle(const struct mt_life *l, const struct rbt_event *ev)
{
	uint64_t h;
	memcpy(&h, (const char *)ev + l->h_off, sizeof(h));
	return h;
}

static struct rbt_model_res *mt_on_generic(struct rbt_model *m, struct mt_trace *t,
					   const struct mt_life *l,
					   const struct rbt_event *ev)
{
	struct mt_call call, *c = &call;
	memcpy(&call, &ev->u, sizeof(call)); /* the common first fields */
	uint64_t h = mt_life_handle(l, ev);
	struct rbt_model_res *r = rbt_map_get(&t->tab[l->kind], h);
	if (l->what == MT_CREATE) /* a handle returned and no error */
		return h && !c->err && c->ret >= 0 ? mt_res_new(m, t, l->kind, h, ev)
						   : NULL;
	if (!r || r->destroyed)
		return NULL;
	if (l->what == MT_MODIFY) {
		mt_res_keep(m, r, ev);
		return r;
	}
	if (c->ret != 0)
		return NULL;
	mt_res_destroy(m, r, ev);
	return r;
}

/* The state the device reported for a live QP at its end (a failed query says
 * nothing). The QP's history is the program's and the model's: left alone. */
static struct rbt_model_res *mt_on_final_state(struct mt_trace *t,
					       const struct rbt_event *ev)
{
	const struct rbt_ev_qp_final_state *p = &ev->u.qp_final_state;
	struct rbt_model_qp *qp = mt_live_qp(t, p->qp);

	if (!qp || p->ret != 0)
		return NULL;
	qp->have_final = true;
	qp->final_state = (uint32_t)p->qp_state;
	qp->final_why = (uint32_t)p->why;
	qp->final_ts = ev->ts;
	return &qp->res;
}

/* Applies a resource event; returns its object (NULL: none, or it changed nothing). */
struct rbt_model_res *mt_on_resource(struct rbt_model *m, struct mt_trace *t,
				     const struct rbt_event *ev)
{
	const struct mt_life *l = mt_life_of(ev->type);
	if (!l)
		return NULL;
	switch (ev->type) {
	case RBT_EV_MR_REG:
		return mt_on_mr_reg(m, t, ev);
	case RBT_EV_MR_DEREG:
		return mt_on_mr_dereg(m, t, ev);
	case RBT_EV_CQ_CREATE:
		return mt_on_cq_create(m, t, ev);
	case RBT_EV_CQ_RESIZE:
	case RBT_EV_SRQ_MODIFY:
		return mt_on_modify(m, t, l->kind, mt_life_handle(l, ev), ev);
	case RBT_EV_SRQ_CREATE:
		return mt_on_srq_create(m, t, ev);
	case RBT_EV_QP_CREATE:
		return mt_on_qp_create(m, t, ev);
	case RBT_EV_QP_MODIFY:
		return mt_on_qp_modify(m, t, ev);
	case RBT_EV_QP_FINAL_STATE:
		return mt_on_final_state(t, ev);
	case RBT_EV_QP_DESTROY:
		if (ev->u.qp_destroy.ret != 0)
			return NULL;
		t->c_qp = t->c_qpn = NULL;
		return mt_on_generic(m, t, l, ev);
	default:
		return mt_on_generic(m, t, l, ev);
	}
}

/* The live object a modify or destroy names, before the model applies it. */
struct rbt_model_res *mt_resource_of(struct mt_trace *t, const struct rbt_event *ev)
{
	const struct mt_life *l = mt_life_of(ev->type);
	if (!l || l->what == MT_CREATE)
		return NULL;
	struct rbt_model_res *r = rbt_map_get(&t->tab[l->kind], mt_life_handle(l, ev));
	return r && !r->destroyed ? r : NULL;
}

/* ---- queries ---- */

static struct mt_trace *mt_trace_of(const struct rbt_model *m, int trace)
{
	return trace >= 0 && trace < m->n_traces ? m->traces[trace] : NULL;
}

static void *mt_lookup(const struct rbt_model *m, int trace, size_t map_off, uint64_t key)
{
	struct mt_trace *t = mt_trace_of(m, trace);
	return t ? rbt_map_get((const struct rbt_map *)((const char *)t + map_off), key)
		 : NULL;
}

struct rbt_model_res *rbt_model_by_handle(const struct rbt_model *m, int trace,
					  enum rbt_model_kind kind, uint64_t handle)
{
	if ((unsigned)kind >= RBT_MODEL_KINDS)
		return NULL;
	return mt_lookup(m, trace,
			 offsetof(struct mt_trace, tab) + kind * sizeof(struct rbt_map),
			 handle);
}

struct rbt_model_qp *rbt_model_qp_by_num(const struct rbt_model *m, int trace,
					 uint32_t qpn)
{
	return mt_lookup(m, trace, offsetof(struct mt_trace, qpns), qpn + 1ULL);
}

struct rbt_model_mr *rbt_model_mr_by_lkey(const struct rbt_model *m, int trace,
					  uint64_t lkey)
{
	return mt_lookup(m, trace, offsetof(struct mt_trace, lkeys), lkey + 1ULL);
}

struct rbt_model_mr *rbt_model_mr_by_rkey(const struct rbt_model *m, int trace,
					  uint64_t rkey)
{
	return mt_lookup(m, trace, offsetof(struct mt_trace, rkeys), rkey + 1ULL);
}

struct rbt_model_res *rbt_model_list(const struct rbt_model *m, int trace,
				     enum rbt_model_kind kind)
{
	struct mt_trace *t = mt_trace_of(m, trace);
	return t && (unsigned)kind < RBT_MODEL_KINDS ? t->lists[kind] : NULL;
}

struct rbt_model_res *rbt_model_table_next(const struct rbt_model *m, int trace,
					   enum rbt_model_kind kind, uint32_t *pos)
{
	struct mt_trace *t = mt_trace_of(m, trace);
	if (!t || (unsigned)kind >= RBT_MODEL_KINDS)
		return NULL;
	const struct rbt_map *tab = &t->tab[kind];
	while (*pos < tab->cap) {
		void *v = tab->vals[(*pos)++];
		if (v)
			return v;
	}
	return NULL;
}
