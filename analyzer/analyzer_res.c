/* analyzer_res.c - what the analyzer counts from the events themselves, around the
 * model: per post (chains, inline use, alignment, posts in a bad QP state), per
 * poll (empty polls), MR registrations on the data path and deregistrations under
 * a living QP, async events; and its own state attached to each object the model
 * makes.
 *
 * The model owns the resources and the join: nothing here looks an object up by
 * anything but the model's tables, and nothing here joins a completion.
 */
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "analyzer/analyzer_internal.h"

/* The analyzer's side of a new object of the model: each starts with a pointer to
 * the model's object (its "m"). */
void an_res_new(struct rbt_analyzer *an, struct rbt_model_res *r)
{
	static const size_t size[RBT_MODEL_KINDS] = {
		[RBT_MODEL_QP] = sizeof(struct an_qp),
		[RBT_MODEL_CQ] = sizeof(struct an_cq),
		[RBT_MODEL_SRQ] = sizeof(struct an_srq),
		[RBT_MODEL_MR] = sizeof(struct an_mr),
	};
	if ((unsigned)r->kind >= RBT_MODEL_KINDS || !size[r->kind])
		return;
	void *ext = calloc(1, size[r->kind]);
	if (!ext)
		return;
	memcpy(ext, &r, sizeof(r)); /* ext->m */
	r->user = ext;
	if (r->kind == RBT_MODEL_QP) {
		struct an_trace *t = an->traces[r->trace];
		struct an_qp *qp = ext;
		qp->t = t;
		qp->rt_wait.elem = sizeof(struct an_rt_wait);
		qp->next = t->qp_list;
		t->qp_list = qp;
	}
}

/* ---- posts ---- */

static void an_bad_state(struct an_qp *qp, uint64_t ts, bool recv, int64_t ret)
{
	qp->bad_state_posts++;
	if (qp->n_bad_state >= 8)
		return;
	qp->bad_state_ts[qp->n_bad_state] = ts;
	qp->bad_state_state[qp->n_bad_state] = (uint8_t)qp->m->state;
	qp->bad_state_recv[qp->n_bad_state] = recv;
	qp->bad_state_ret[qp->n_bad_state] = ret;
	qp->n_bad_state++;
}

static void an_mr_use(struct rbt_analyzer *an, struct an_trace *t, struct an_qp *qp,
		      uint64_t lkey)
{
	if (qp->lkey_cached && qp->last_lkey == lkey)
		return; /* common case: the same buffer (or the same unknown key) again */
	struct rbt_model_mr *mm = rbt_model_mr_by_lkey(an->model, t->idx, lkey);
	struct an_mr *mr = mm ? mm->res.user : NULL;
	qp->last_mr = mr;
	qp->last_lkey = lkey;
	qp->lkey_cached = true;
	if (!mr)
		return;
	for (uint32_t i = 0; i < mr->n_users; i++)
		if (mr->users[i] == qp)
			return;
	if (mr->n_users < 4)
		mr->users[mr->n_users++] = qp;
}

/* Inline use, alignment and buffers of one send WR the model queued as w. */
void an_send_wr_checks(struct rbt_analyzer *an, struct an_trace *t, struct an_qp *qp,
		       const struct rbt_send_wr *wr, const struct rbt_model_wr *w)
{
	bool inl = w->inl;
	uint64_t bytes = w->bytes;
	int op = (int)wr->opcode;
	bool data = op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM ||
		    op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM;
	uint64_t max_inline = qp->m->max_inline;
	if (data && max_inline > 0 && bytes > 0 && bytes <= max_inline) {
		qp->inline_eligible++;
		if (!inl)
			qp->inline_missed++;
	}
	if (!inl && bytes >= 256 && wr->n_sges) {
		qp->data_wrs_256++;
		for (uint32_t s = 0; s < wr->n_sges; s++)
			if (wr->sges[s].addr & 63) {
				qp->unaligned++;
				break;
			}
	}
	if ((op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) &&
	    (wr->remote_addr & 7)) {
		if (!qp->unaligned_atomic++)
			qp->unaligned_atomic_addr = wr->remote_addr;
	}
	if (!inl)
		for (uint32_t s = 0; s < wr->n_sges; s++)
			an_mr_use(an, t, qp, wr->sges[s].lkey);
	int slot = an_opcode_slot(op);
	if (!qp->op_posts[slot] || bytes < qp->op_min[slot])
		qp->op_min[slot] = bytes;
	if (bytes > qp->op_max[slot])
		qp->op_max[slot] = bytes;
	qp->op_posts[slot]++;
	qp->op_bytes[slot] += bytes;
	qp->post_wrs_signaled += w->signaled;
	qp->post_bytes += bytes;
	qp->inlined += inl;
}

/* What a post_send or post_recv call is, whatever it posted: a failure counted, a
 * post in a state that refuses it, the call on the timeline. Returns the WRs
 * posted. */
static uint32_t an_post_call(struct rbt_analyzer *an, struct an_trace *t,
			     const struct rbt_event *ev, struct an_qp *qp, bool recv,
			     bool bad_state, int64_t ret, uint64_t ts_exit)
{
	if (ret != 0)
		t->post_fail++;
	if (bad_state)
		an_bad_state(qp, ev->ts, recv, ret);
	uint64_t exit = ts_exit >= ev->ts ? ts_exit : ev->ts;
	an_sinks_call(an, t, ev->stream, recv ? "ibv_post_recv" : "ibv_post_send", ev->ts,
		      exit, NULL);
	return rbt_model_posted(ev);
}

static void an_post_send(struct rbt_analyzer *an, struct an_trace *t,
			 const struct rbt_event *ev, struct an_qp *qp)
{
	const struct rbt_ev_post_send *p = &ev->u.post_send;
	t->posts++;
	if (!t->any_post) {
		t->any_post = true;
		t->first_post_ts = ev->ts;
	}
	if (ev->ts > t->last_post_ts) {
		t->last_post_ts = ev->ts;
		/* registrations seen so far happened before this post: on the data path */
		t->mr_traffic = t->mr_seen;
	}
	bool bad = qp->m->state != IBV_QPS_RTS && qp->m->state != RBT_MODEL_STATE_UNKNOWN;
	uint32_t posted = an_post_call(an, t, ev, qp, false, bad, p->ret, p->ts_exit);
	if (!posted)
		return;
	qp->posts++;
	qp->post_wrs += posted;
	if (posted > qp->max_chain)
		qp->max_chain = posted;
	if (qp->m->sq.n)
		qp->posts_busy++;
	/* each WR: an_send_wr_checks() when the model queues it */
}

static void an_post_recv(struct rbt_analyzer *an, struct an_trace *t,
			 const struct rbt_event *ev, struct an_qp *qp)
{
	const struct rbt_ev_post_recv *p = &ev->u.post_recv;
	uint32_t posted = an_post_call(an, t, ev, qp, true, qp->m->state == IBV_QPS_RESET,
				       p->ret, p->ts_exit);
	if (!posted)
		return;
	qp->recv_posts++;
	qp->recv_wrs += posted;
	qp->last_recv_post_ts = ev->ts;
	if (qp->rq_empty) {
		qp->rq_empty = false;
		if (ev->ts > qp->rq_empty_since &&
		    ev->ts - qp->rq_empty_since > qp->rq_empty_longest) {
			qp->rq_empty_longest = ev->ts - qp->rq_empty_since;
			qp->rq_empty_longest_ts = qp->rq_empty_since;
		}
	}
}

/* What the diagnoses follow of every poll, counted by the filter or not. */
void an_poll_seen(struct an_trace *t, const struct rbt_event *ev, struct an_cq *cq)
{
	const struct rbt_ev_poll_cq *p = &ev->u.poll_cq;
	uint64_t exit = p->ts_exit >= ev->ts ? p->ts_exit : ev->ts;
	(void)t;
	if (exit > cq->last_poll)
		cq->last_poll = exit;
	if (p->n_wcs == 0 && cq->n_senders)
		an_stall_poll(cq, ev->ts, exit, p->count ? p->count : 1);
}

static void an_poll(struct rbt_analyzer *an, struct an_trace *t,
		    const struct rbt_event *ev, struct an_cq *cq)
{
	const struct rbt_ev_poll_cq *p = &ev->u.poll_cq;
	uint64_t count = p->count ? p->count : 1;
	uint64_t exit = p->ts_exit >= ev->ts ? p->ts_exit : ev->ts;
	an_poll_seen(t, ev, cq);
	if (p->n_wcs == 0) {
		t->polls += count;
		t->empty_polls += count;
		cq->polls += count;
		cq->empty_polls += count;
		an_ser_empty(an, t, cq, ev->ts, exit, count);
		return;
	}
	t->polls++;
	cq->polls++;
	cq->polled_wcs += p->n_wcs;
	if (an->n_stream) {
		char args[64];
		snprintf(args, sizeof(args), "{\"wcs\":%u}", p->n_wcs);
		an_sinks_call(an, t, ev->stream, "ibv_poll_cq", ev->ts, exit, args);
	}
}

/* ---- MRs ---- */

/* A QP created, or connected (to RTR), after the registrations since the last
 * post: those were the setup of a connection (perftest -R registers its buffers
 * after the rdma_cm handshake's posts, then creates the QPs that use them), not
 * the data path. */
static void an_mr_setup(struct an_trace *t)
{
	t->mr_seen = t->mr_traffic;
}

/* The QPs' last-MR caches, after the keys changed. */
static void an_mr_forget(struct an_trace *t)
{
	for (struct an_qp *q = t->qp_list; q; q = q->next) {
		q->last_mr = NULL;
		q->lkey_cached = false;
	}
}

static void an_mr_reg(struct an_trace *t, const struct rbt_event *ev)
{
	const struct rbt_ev_mr_reg *p = &ev->u.mr_reg;
	if (p->ret != 0 || !p->mr)
		return;
	t->mr_regs++;
	an_mr_forget(t);
	if (!t->any_post)
		return;
	t->mr_seen.regs++;
	if (t->mr_seen.n_ts < 8)
		t->mr_reg_ts[t->mr_seen.n_ts++] = ev->ts;
	if (p->ts_exit > ev->ts)
		t->mr_seen.ns += rbt_model_dur_ns(t->mt, (double)(p->ts_exit - ev->ts));
}

static void an_mr_dereg(struct an_trace *t, const struct rbt_event *ev,
			struct rbt_model_res *r)
{
	const struct rbt_ev_mr_dereg *p = &ev->u.mr_dereg;
	struct an_mr *mr = r ? r->user : NULL;
	if (p->ret != 0 || !mr)
		return;
	if (t->any_post) {
		t->mr_seen.deregs++; /* confirmed by a later post */
		if (p->ts_exit > ev->ts)
			t->mr_seen.ns +=
				rbt_model_dur_ns(t->mt, (double)(p->ts_exit - ev->ts));
	}
	for (uint32_t i = 0; i < mr->n_users; i++) {
		struct an_qp *qp = mr->users[i];
		if (qp->m->res.destroyed)
			continue;
		if (!t->early_dereg++) {
			t->early_dereg_ts = ev->ts;
			t->early_dereg_addr = mr->m->addr;
			t->early_dereg_len = mr->m->length;
			t->early_dereg_lkey = mr->m->lkey;
			t->early_dereg_qpn = qp->m->qpn;
			t->early_dereg_outstanding = qp->m->sq.n || qp->m->rq.n;
		}
		break;
	}
	an_mr_forget(t);
}

static void an_async(struct rbt_analyzer *an, struct an_trace *t,
		     const struct rbt_event *ev)
{
	const struct rbt_ev_async_event *p = &ev->u.async_event;
	if (p->ret != 0)
		return;
	t->async_events++;
	if (p->event_type != IBV_EVENT_CQ_ERR)
		return;
	struct rbt_model_res *r =
		rbt_model_by_handle(an->model, t->idx, RBT_MODEL_CQ, p->element);
	struct an_cq *cq = r ? r->user : NULL;
	t->cq_err_events++;
	if (cq && !cq->overrun) {
		cq->overrun = true;
		cq->overrun_ts = ev->ts;
	}
}

/* Before the model applies an event: r is the object it names. */
void an_before(struct rbt_analyzer *an, struct an_trace *t, const struct rbt_event *ev,
	       struct rbt_model_res *r)
{
	void *u = r ? r->user : NULL;
	switch (ev->type) {
	case RBT_EV_POST_SEND:
		if (u)
			an_post_send(an, t, ev, u);
		break;
	case RBT_EV_POST_RECV:
		if (u)
			an_post_recv(an, t, ev, u);
		break;
	case RBT_EV_POST_SRQ_RECV:
		if (u && ev->u.post_srq_recv.ret != 0)
			t->post_fail++;
		break;
	case RBT_EV_POLL_CQ:
		if (u)
			an_poll(an, t, ev, u);
		break;
	case RBT_EV_LOSS:
		t->lost_events += ev->u.loss.events;
		break;
	case RBT_EV_MR_REG:
		an_mr_reg(t, ev);
		break;
	case RBT_EV_MR_DEREG:
		an_mr_dereg(t, ev, r);
		break;
	case RBT_EV_MR_REREG:
		an_mr_forget(t);
		break;
	case RBT_EV_QP_CREATE:
		if (ev->u.qp_create.ret == 0)
			an_mr_setup(t);
		break;
	case RBT_EV_QP_MODIFY:
		if (ev->u.qp_modify.ret == 0 &&
		    (ev->u.qp_modify.attr_mask & IBV_QP_STATE) &&
		    ev->u.qp_modify.qp_state == IBV_QPS_RTR)
			an_mr_setup(t);
		break;
	case RBT_EV_ASYNC_EVENT:
		an_async(an, t, ev);
		break;
	default:
		break;
	}
}

/* After: the links the model made (a new QP's CQs and SRQ, a pair). */
void an_after(struct rbt_analyzer *an, struct an_trace *t, const struct rbt_event *ev,
	      struct rbt_model_res *r)
{
	if (r && r->user &&
	    (ev->type == RBT_EV_POLL_CQ || ev->type == RBT_EV_POST_RECV)) {
		/* the levels after the model applied the event */
		if (ev->type == RBT_EV_POLL_CQ && r->kind == RBT_MODEL_CQ &&
		    ev->u.poll_cq.n_wcs)
			an_ser_poll(an, t, r->user, ev->u.poll_cq.ts_exit);
		struct an_qp *rq = r->kind == RBT_MODEL_QP ? r->user : NULL;
		if (ev->type == RBT_EV_POST_RECV && rq && rbt_model_posted(ev)) {
			an_qp_series_get(an, rq); /* a row of its own in the plots */
			if (rq->rcq)
				an_ser_cq(an, t, rq->rcq, ev->u.post_recv.ts_exit, -2);
		}
		return;
	}
	struct an_qp *qp = r && r->kind == RBT_MODEL_QP ? r->user : NULL;
	if (!qp)
		return;
	if (ev->type == RBT_EV_QP_CREATE) {
		qp->scq = an_cq_of(qp->m->scq);
		qp->rcq = an_cq_of(qp->m->rcq);
		if (qp->scq)
			an_stall_sender(qp->scq, qp);
		qp->srq = qp->m->srq ? qp->m->srq->res.user : NULL;
	} else if (ev->type == RBT_EV_QP_MODIFY && qp->m->peer && !qp->peer) {
		qp->peer = an_qp_of(qp->m->peer);
		if (qp->peer)
			qp->peer->peer = qp;
	}
}
