/* replay_join.c - replay's side of the model's post -> completion join: the
 * recorded completions the model joins (model/rbt_model.h) onto the lists of
 * their replayed QP and queue, in the order the program polled them (receives
 * through another process's TGT QP of a shared XRC domain onto a stand-in of
 * that QP); the wr_ids each queue was posted, by which the replay's own error
 * completions (undefined opcode) are told to a queue; each QP's recorded end
 * state, from the model and later evidence (queries, async events).
 *
 * Must never join anything itself (the model does) and never issue a verb: it
 * runs while loading, inside the model's callbacks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "replay/replay_int.h"

/* Error completions carry no valid opcode, so the queue they came from is told by
 * the wr_id: was it posted as a receive on this QP (or its SRQ)? */
static int rp_has_id(const struct rp_idset *set, uint64_t id)
{
	return set->n && bsearch(&id, set->v, set->n, sizeof(id), rp_cmp_u64) != NULL;
}

static void rp_idset_add(struct rp_idset *set, uint64_t id)
{
	if (set->n == set->cap) {
		uint32_t cap = set->cap ? 2 * set->cap : 16;
		uint64_t *v = realloc(set->v, cap * sizeof(*v));

		if (!v)
			return;
		set->v = v;
		set->cap = cap;
	}
	set->v[set->n++] = id;
}

static void rp_idset_seal(struct rp_idset *set)
{
	uint32_t k = 0;

	if (!set->n)
		return;
	qsort(set->v, set->n, sizeof(*set->v), rp_cmp_u64);
	for (uint32_t i = 0; i < set->n; i++)
		if (!k || set->v[k - 1] != set->v[i])
			set->v[k++] = set->v[i];
	set->n = k;
}

/* Whether QP q takes the receives of SRQ srqi (1 + index): its own SRQ, or for
 * an XRC_RECV QP any XRC SRQ of its domain. */
int rp_qp_takes_srq(const struct rp_side *s, const struct rp_qp *q, int srqi)
{
	return q->srqi == srqi || (q->rec.qp_type == IBV_QPT_XRC_RECV && q->xrcdi &&
				   q->xrcdi == s->srq[srqi - 1].xrcdi);
}

/* The queue a completion came from. An error completion's opcode is undefined on
 * hardware, so its wr_id decides when it was posted to one queue only. */
int rp_wc_is_recv(const struct rp_qp *q, uint32_t status, uint32_t opcode, uint64_t wr_id)
{
	int in_r, in_s;

	/* an XRC TGT QP has no send queue */
	if (q->rec.qp_type == IBV_QPT_XRC_RECV)
		return 1;
	if (status == IBV_WC_SUCCESS)
		return (opcode & IBV_WC_RECV) != 0;
	in_r = rp_has_id(&q->recv_ids, wr_id);
	in_s = rp_has_id(&q->send_ids, wr_id);
	if (in_r != in_s)
		return in_r;
	if (status == IBV_WC_WR_FLUSH_ERR)
		return opcode & IBV_WC_RECV ? 1 : 0;
	return 0;
}

/* The stand-in for TGT QP qpn of another process, whose receives arrived on CQ
 * cq (1 + index) through one of our XRC SRQs. */
static struct rp_qp *rp_xqp_get(struct rp_side *s, int cq, uint32_t qpn)
{
	struct rp_qp *q, *v;

	for (int i = 0; i < s->nxqp; i++)
		if ((uint32_t)s->xqp[i].rec.qp_num == qpn)
			return &s->xqp[i];
	v = realloc(s->xqp, (size_t)(s->nxqp + 1) * sizeof(*v));
	if (!v)
		return NULL;
	s->xqp = v;
	q = &s->xqp[s->nxqp++];
	memset(q, 0, sizeof(*q));
	q->rec.qp_num = qpn;
	q->rec.qp_type = IBV_QPT_XRC_RECV;
	q->rcq = cq;
	q->rel_side = -1;
	q->peer_dir = -1;
	return q;
}

/* ---- the model's callbacks ---------------------------------------------------- */
static void rp_join_posted(void *arg, struct rbt_model_res *q, struct rbt_model_wr *w,
			   const struct rbt_send_wr *sw)
{
	struct rp_loading *ld = arg;
	struct rp_side *s = ld->s;
	int i = rp_res_idx(q);

	/* a streamed load keeps the ids of its first window's posts only */
	if (!i || ld->over || ld->again)
		return;
	if (q->kind == RBT_MODEL_QP) {
		struct rp_qp *qp = &s->qp[i - 1];

		rp_idset_add(w->recv ? &qp->recv_ids : &qp->send_ids, w->wr_id);
	} else if (q->kind == RBT_MODEL_SRQ) {
		for (int k = 0; k < s->nqp; k++)
			if (rp_qp_takes_srq(s, &s->qp[k], i))
				rp_idset_add(&s->qp[k].recv_ids, w->wr_id);
	}
}

/* The entry of the poll being fed that the model hands over as c: it hands
 * them over in the poll's order, skipping those it holds back, so the next
 * one from the cursor on that names the same WR. NULL for a completion the
 * model held until its post came (no poll is being fed then). */
static const struct rbt_wc *rp_join_wc(struct rp_loading *ld,
				       const struct rbt_model_comp *c, uint32_t *k)
{
	const struct rbt_ev_poll_cq *p = ld->cur_poll ? &ld->cur_poll->u.poll_cq : NULL;

	for (*k = ld->wc_next; p && *k < p->n_wcs; (*k)++) {
		const struct rbt_wc *w = &p->wcs[*k];

		if (w->wr_id == c->wr_id && w->status == c->status &&
		    w->byte_len == c->byte_len) {
			ld->wc_next = *k + 1;
			return w;
		}
	}
	return NULL;
}

/* A recorded completion onto its QP's list. cq: the CQ of the poll that
 * returned it when known (0: one the model held until its post came). */
static void rp_join_push(struct rp_loading *ld, struct rbt_model_qp *mq, int cq,
			 const struct rbt_model_comp *c)
{
	uint32_t k = 0;
	const struct rbt_wc *w = rp_join_wc(ld, c, &k);
	const struct rbt_ev_poll_cq *p = w ? &ld->cur_poll->u.poll_cq : NULL;
	struct rp_side *s = ld->s;
	int i = mq ? rp_res_idx(&mq->res) : 0;
	struct rp_qp *q;

	if (i)
		q = &s->qp[i - 1];
	else if (mq && mq->type == IBV_QPT_XRC_RECV && cq)
		q = rp_xqp_get(s, cq, mq->qpn); /* another process's TGT QP */
	else
		return;
	if (!q) {
		ld->err = -ENOMEM;
		return;
	}
	if (!cq)
		cq = c->recv ? q->rcq : q->scq;
	struct rp_wcrec r = {
		.wr_id = c->wr_id,
		.status = (uint32_t)c->status,
		.opcode = (uint32_t)c->opcode,
		.byte_len = (uint32_t)c->byte_len,
		/* an extended poll records what the app read: byte_len may not
		 * be among it */
		.no_len = (uint8_t)(cq && s->cq[cq - 1].rec.ex && !c->byte_len),
		/* the time of its poll step: the rest of an extended poll
		 * session is a step at the session's end (replay_timeline.c) */
		.ts = p && p->api == 1 && k > 0 ? p->ts_exit : c->poll_ts,
		.seq = s->wc_seq++,
		.imm = w ? (uint32_t)w->imm_data : 0,
		.with_imm = (uint8_t)(w && (w->wc_flags & IBV_WC_WITH_IMM)),
		.src_qp = w ? (uint32_t)w->src_qp : 0,
	};
	if (!ld->again) {
		q->rec_send_ok += !c->recv && r.status == IBV_WC_SUCCESS;
		q->rec_count[c->recv ? 1 : 0]++;
	}
	if (!ld->over)
		rp_wclist_push(&(ld->ahead ? q->rec_next : q->rec_wc)[c->recv ? 1 : 0],
			       &r);
}

static void rp_join_completion(void *arg, struct rbt_model_qp *qp,
			       const struct rbt_model_comp *c,
			       const struct rbt_model_wr *w)
{
	struct rp_loading *ld = arg;

	rp_join_push(ld, qp, ld->cur_cq, c);
}

/* No post for it in the trace (it began after the post): still what the
 * program saw. */
static void rp_join_unmatched(void *arg, struct rbt_model_qp *qp,
			      const struct rbt_model_comp *c)
{
	rp_join_push(arg, qp, 0, c);
}

const struct rbt_model_ops rp_join_ops = {
	.wr_posted = rp_join_posted,
	.completion = rp_join_completion,
	.unmatched = rp_join_unmatched,
};

/* ---- after the last event -------------------------------------------------------- */
static int rp_wcrec_cmp(const void *a, const void *b)
{
	const struct rp_wcrec *x = a, *y = b;

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void rp_join_sort(struct rp_qp *q)
{
	for (int d = 0; d < 2; d++)
		if (q->rec_wc[d].n > 1)
			rp_sort_nearly(q->rec_wc[d].v, q->rec_wc[d].n,
				       sizeof(*q->rec_wc[d].v), rp_wcrec_cmp);
}

/* What the recording says about a QP at its end: the state the device reported
 * when the recorder queried it at the QP's destroy or at exit; without one, the
 * model's state (modifies, error completions), unless a query or async event
 * told otherwise later; and
 * its connection as the model's successful modifies left it. */
static void rp_join_qp_end(struct rp_qp *q)
{
	const struct rbt_model_qp *mq = q->mq;
	uint64_t last;

	if (!mq)
		return;
	last = mq->n_hist ? mq->hist[mq->n_hist - 1].ts : 0;
	q->rec_final_state =
		mq->state == RBT_MODEL_STATE_UNKNOWN ? IBV_QPS_RESET : mq->state;
	if (q->has_evidence && q->evidence_ts >= last)
		q->rec_final_state = q->evidence_state;
	/* what the device said at the end is the last word */
	if (mq->have_final) {
		q->rec_final_state = mq->final_state;
		q->rec_final_src = mq->final_why ? 2 : 1;
	}
	q->rec_dest_qpn = (uint32_t)mq->dest_qpn;
	q->has_dest = mq->dest_qpn != 0;
	q->port = mq->port ? (uint32_t)mq->port : 1;
	q->rec_sq_psn = (uint32_t)mq->sq_psn;
	q->rec_rq_psn = (uint32_t)mq->rq_psn;
	q->rec_path_mtu = (uint32_t)mq->path_mtu;
	q->rec_max_rd_atomic = (uint32_t)mq->max_rd_atomic;
}

void rp_join_window(struct rp_side *s)
{
	for (int i = 0; i < s->nqp; i++)
		rp_join_sort(&s->qp[i]);
}

void rp_join_finish(struct rp_side *s)
{
	for (int i = 0; i < s->nqp; i++) {
		rp_join_sort(&s->qp[i]);
		rp_idset_seal(&s->qp[i].send_ids);
		rp_idset_seal(&s->qp[i].recv_ids);
		rp_join_qp_end(&s->qp[i]);
	}
	for (int i = 0; i < s->nxqp; i++)
		rp_join_sort(&s->xqp[i]);
}
