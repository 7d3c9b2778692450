/* replay_join.c - what the program saw, per QP and queue: which recorded
 * completion belongs to which QP's send or receive queue (by QP number; a CQ
 * of one QP when the poll did not say; the wr_ids each queue was posted, for
 * error completions whose opcode is undefined; receives through another
 * process's TGT QP of a shared XRC domain), and the QP's recorded end state
 * that the completions imply.
 *
 * The replay's own completions are sorted onto the same queues with the same
 * rule (rp_wc_is_recv). Must never issue a verb: it runs while loading.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "replay/replay_int.h"

/* The QP a CQ serves, when it serves exactly one. */
static struct rp_qp *rp_only_qp_of_cq(struct rp_side *s, int cq)
{
	struct rp_qp *only = NULL;

	for (int i = 0; i < s->nqp; i++)
		if (s->qp[i].scq == cq || rp_qp_recv_on_cq(s, &s->qp[i], cq)) {
			if (only)
				return NULL;
			only = &s->qp[i];
		}
	return only;
}

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
 * cq (1 + index) through one of our XRC SRQs; NULL when cq is no XRC SRQ's. */
static struct rp_qp *rp_xqp_get(struct rp_side *s, int cq, uint32_t qpn)
{
	struct rp_qp *q, *v;
	int xrc = 0;

	for (int i = 0; i < s->nsrq; i++)
		if (s->srq[i].rec.srq_type == IBV_SRQT_XRC && s->srq[i].cqi == cq)
			xrc = 1;
	if (!xrc)
		return NULL;
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

/* Whether QP q takes the receives of SRQ srqi (1 + index): its own SRQ, or for
 * an XRC_RECV QP any XRC SRQ of its domain. */
static int rp_qp_takes_srq(const struct rp_side *s, const struct rp_qp *q, int srqi)
{
	return q->srqi == srqi || (q->rec.qp_type == IBV_QPT_XRC_RECV && q->xrcdi &&
				   q->xrcdi == s->srq[srqi - 1].xrcdi);
}

/* Which wr_ids each QP posted to which queue (SRQ receives: every QP on the
 * SRQ, or of the XRC SRQ's domain), in recorded order; sealed for lookups. */
void rp_join_ids(struct rp_side *s)
{
	for (int i = 0; i < s->nstep; i++) {
		const struct rp_step *st = &s->step[i];
		const struct rbt_event *e = &st->ev;

		if (!st->obj)
			continue;
		if (e->type == RBT_EV_POST_SEND)
			for (uint32_t k = 0; k < e->u.post_send.n_wrs; k++)
				rp_idset_add(&s->qp[st->obj - 1].send_ids,
					     e->u.post_send.wrs[k].wr_id);
		else if (e->type == RBT_EV_POST_RECV)
			for (uint32_t k = 0; k < e->u.post_recv.n_wrs; k++)
				rp_idset_add(&s->qp[st->obj - 1].recv_ids,
					     e->u.post_recv.wrs[k].wr_id);
		else if (e->type == RBT_EV_POST_SRQ_RECV)
			for (int q = 0; q < s->nqp; q++)
				if (rp_qp_takes_srq(s, &s->qp[q], st->obj))
					for (uint32_t k = 0; k < e->u.post_srq_recv.n_wrs;
					     k++)
						rp_idset_add(
							&s->qp[q].recv_ids,
							e->u.post_srq_recv.wrs[k].wr_id);
	}
	for (int q = 0; q < s->nqp; q++) {
		rp_idset_seal(&s->qp[q].send_ids);
		rp_idset_seal(&s->qp[q].recv_ids);
	}
}

/* The completions of one recorded poll (step st, resolved to its CQ) onto
 * their QPs' recorded lists. */
void rp_join_poll(struct rp_side *s, struct rp_step *st)
{
	const struct rbt_ev_poll_cq *p = &st->ev.u.poll_cq;

	for (uint32_t k = 0; k < p->n_wcs; k++) {
		const struct rbt_wc *w = &p->wcs[k];
		struct rp_qp *q = rp_qp_by_rec_qpn(s, (uint32_t)w->qp_num);
		struct rp_wcrec wr = {
			.wr_id = w->wr_id,
			.status = (uint32_t)w->status,
			.opcode = (uint32_t)w->opcode,
			.byte_len = (uint32_t)w->byte_len,
			.imm = (uint32_t)w->imm_data,
			.wc_flags = (uint32_t)w->wc_flags,
			/* an extended poll records what the app read:
			 * byte_len may not be among it */
			.no_len = (uint8_t)(st->cq && st->cq->rec.ex && !w->byte_len),
		};

		/* a TGT QP of another process in our XRC domain */
		if (!q && st->cq && w->qp_num) {
			q = rp_xqp_get(s, st->obj, (uint32_t)w->qp_num);
			if (q) {
				rp_wclist_push(&q->rec_wc[1], &wr);
				continue;
			}
		}
		/* ... nor the QP number: a CQ of one QP says it */
		if (!q && st->cq)
			q = rp_only_qp_of_cq(s, st->obj);
		if (!q)
			continue;
		rp_wclist_push(
			&q->rec_wc[rp_wc_is_recv(q, wr.status, wr.opcode, wr.wr_id)],
			&wr);
		/* an error, flushes included, means the QP is in ERR */
		if (wr.status != IBV_WC_SUCCESS) {
			q->rec_err_wc = 1;
			q->rec_final_state = IBV_QPS_ERR;
		}
	}
}
