/* replay_timeline.c - a side's timeline: the recorded events the replayer
 * reissues (modifies, posts, polls, notifications, completion-event waits) as
 * steps in recorded time order, each a deep copy resolved through the model to
 * the object it names when it was read; then wired to its QP, CQ or SRQ and
 * its recorded exit time (the model's clock), with what a step says that the
 * model does not keep (GID use, evidence of a QP's state); and the prefix that
 * runs before the start barrier.
 *
 * Must never issue a verb: it runs while loading. Everything the reader hands
 * out is copied into the side's arena (it is only valid until the next event).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "replay/replay_int.h"

/* A deep copy of an event in one block of the side's arena (rp_alloc);
 * NULL without memory. The event itself when it lies in memory the side
 * keeps already (rp_loading.kept). */
static struct rbt_event *rp_copy_event(struct rp_loading *ld, const struct rbt_event *ev)
{
	struct rbt_event *c;

	if (ev == ld->kept)
		return ld->kept;
	c = rp_alloc(ld->s, rbt_model_event_size(ev));
	return c ? rbt_model_event_copy_to(c, ev) : NULL;
}

static int rp_step_cmp(const void *a, const void *b)
{
	const struct rp_step *x = a, *y = b;

	if (x->rec_ns != y->rec_ns)
		return x->rec_ns < y->rec_ns ? -1 : 1;
	/* file order breaks ties: t_issue holds it during loading */
	return x->t_issue < y->t_issue ? -1 : (x->t_issue > y->t_issue);
}

/* Where the handle of the object a step names lies in its event, and its kind:
 * read through one table, resolved when the event is read (handles get reused). */
enum { RP_OBJ_NONE, RP_OBJ_QP, RP_OBJ_CQ, RP_OBJ_SRQ, RP_OBJ_MR };
#define RP_H(ev, field, kind) \
	[RBT_EV_##ev] = { offsetof(struct rbt_event, u.field), kind }
static const struct {
	size_t off;
	int kind;
} rp_obj_of[RBT_EV_MAX_ID + 1] = {
	RP_H(QP_MODIFY, qp_modify.qp, RP_OBJ_QP),
	RP_H(QP_QUERY, qp_query.qp, RP_OBJ_QP),
	RP_H(ASYNC_EVENT, async_event.element, RP_OBJ_QP),
	RP_H(POST_SEND, post_send.qp, RP_OBJ_QP),
	RP_H(POST_RECV, post_recv.qp, RP_OBJ_QP),
	RP_H(POST_SRQ_RECV, post_srq_recv.srq, RP_OBJ_SRQ),
	RP_H(POLL_CQ, poll_cq.cq, RP_OBJ_CQ),
	RP_H(REQ_NOTIFY, req_notify.cq, RP_OBJ_CQ),
	RP_H(GET_CQ_EVENT, get_cq_event.cq, RP_OBJ_CQ),
	RP_H(MR_REG, mr_reg.mr, RP_OBJ_MR), /* MR_DEREG, MR_REREG: replay_load.c */
	RP_H(QP_CREATE, qp_create.qp, RP_OBJ_QP),
	RP_H(QP_DESTROY, qp_destroy.qp, RP_OBJ_QP),
};

/* 1 + the index of the object a step names, as of the moment it is read. */
static int rp_resolve(struct rp_side *s, const struct rbt_event *e)
{
	uint64_t h;

	if (e->type > RBT_EV_MAX_ID || !rp_obj_of[e->type].kind)
		return 0;
	memcpy(&h, (const char *)e + rp_obj_of[e->type].off, sizeof(h));
	switch (rp_obj_of[e->type].kind) {
	case RP_OBJ_QP:
		return rp_qp_index(s, h);
	case RP_OBJ_CQ:
		return rp_cq_index(s, h);
	case RP_OBJ_MR:
		return rp_mr_index(s, h);
	default:
		return rp_srq_index(s, h);
	}
}

/* One recorded event as a step (two for an extended poll session that
 * returned several completions). Empty polls only spun: nothing to reissue. */
int rp_timeline_add(struct rp_loading *ld, const struct rbt_event *ev)
{
	struct rp_side *s = ld->s;
	struct rp_step *st, *st2;
	struct rbt_event *rest;
	size_t head;

	if (ev->type == RBT_EV_POLL_CQ && ev->u.poll_cq.n_wcs == 0)
		return 0;
	if (ev->type == RBT_EV_POST_SEND || ev->type == RBT_EV_POLL_CQ ||
	    ev->type == RBT_EV_GET_CQ_EVENT)
		ld->started = 1;
	/* a window's reading: the prefix ran from the first */
	if (ld->again && !ld->started)
		return 0;
	if (s->sm && !ld->again) {
		rp_stream_note(ld, ev, rp_abs_ns(s, ev->ts));
		/* the prefix is kept whole: it runs before the windows */
		if (s->nstep >= ld->j->window && ld->started)
			ld->over = 1;
		if (ld->over)
			return 0;
	}
	if (!RP_GROW(s->step, s->nstep, ld->capstep))
		return -ENOMEM;
	st = &s->step[s->nstep++];
	memset(st, 0, sizeof(*st)); /* a streamed window reuses the array */
	if (!(st->ev = rp_copy_event(ld, ev)))
		return -ENOMEM;
	st->type = ev->type;
	st->stream = ev->stream;
	st->rec_ns = rp_abs_ns(s, ev->ts);
	st->t_issue = ld->seq++;
	st->obj = rp_resolve(s, ev);
	switch (ev->type) {
	case RBT_EV_POST_SEND:
		st->rec_ret = ev->u.post_send.ret;
		break;
	case RBT_EV_POST_RECV:
		st->rec_ret = ev->u.post_recv.ret;
		break;
	case RBT_EV_POST_SRQ_RECV:
		st->rec_ret = ev->u.post_srq_recv.ret;
		break;
	case RBT_EV_REQ_NOTIFY:
		st->rec_ret = ev->u.req_notify.ret;
		break;
	case RBT_EV_POLL_CQ:
		st->nwc = ev->u.poll_cq.n_wcs;
		break;
	}
	/* An extended poll session (start_poll .. end_poll) may post in between,
	 * as ibv_rc_pingpong -t does: only its first completion is known to
	 * precede those posts; the rest are collected at end_poll, by a step of
	 * their own. */
	if (ev->type != RBT_EV_POLL_CQ || ev->u.poll_cq.api != 1 ||
	    ev->u.poll_cq.n_wcs <= 1)
		return 0;
	/* the rest: an event of its own, its completions in the first's copy */
	head = rbt_model_event_head_size(ev);
	rest = rp_alloc(s, head);
	if (!rest || !RP_GROW(s->step, s->nstep, ld->capstep))
		return -ENOMEM;
	st = &s->step[s->nstep - 1];
	st2 = &s->step[s->nstep++];
	*st2 = *st;
	memcpy(rest, st->ev, head); /* st->ev is a compact copy (model/rbt_model.h) */
	st->ev->u.poll_cq.n_wcs = st->nwc = 1;
	rest->u.poll_cq.n_wcs--;
	st2->nwc = rest->u.poll_cq.n_wcs;
	rest->u.poll_cq.wcs++;
	rest->ts = ev->u.poll_cq.ts_exit;
	st2->ev = rest;
	st2->rec_ns = rp_abs_ns(s, ev->u.poll_cq.ts_exit);
	st2->t_issue = ld->seq++;
	return 0;
}

/* ---- wiring each step, one function per event type -------------------------- */
static struct rp_qp *rp_step_qp(struct rp_side *s, const struct rp_step *st)
{
	return st->obj ? &s->qp[st->obj - 1] : NULL;
}

static struct rp_cq *rp_step_cq(struct rp_side *s, const struct rp_step *st)
{
	return st->obj ? &s->cq[st->obj - 1] : NULL;
}

/* What a successful modify says that the model does not keep: the address
 * vector's GID use, and the most outstanding reads any QP asks for. */
static void rp_wire_modify(struct rp_side *s, struct rp_step *st)
{
	const struct rbt_ev_qp_modify *m = &st->ev->u.qp_modify;
	struct rp_qp *q = st->qp = rp_step_qp(s, st);
	uint64_t mask = m->attr_mask;

	st->rec_exit_ns = rp_abs_ns(s, m->ts_exit);
	if (!q || m->ret != 0)
		return;
	if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && (int)m->max_rd_atomic > s->max_rd_atomic)
		s->max_rd_atomic = (int)m->max_rd_atomic;
	if (mask & IBV_QP_AV) {
		q->is_global = (int)m->ah_is_global;
		q->sgid_index = (uint32_t)m->ah_sgid_index;
	}
}

static void rp_wire_send(struct rp_side *s, struct rp_step *st)
{
	const struct rbt_ev_post_send *p = &st->ev->u.post_send;

	st->qp = rp_step_qp(s, st);
	st->rec_exit_ns = rp_abs_ns(s, p->ts_exit);
	for (uint32_t k = 0; k < p->n_wrs; k++)
		if (p->wrs[k].opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
		    p->wrs[k].opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
			s->uses_atomics = 1;
}

static void rp_wire_recv(struct rp_side *s, struct rp_step *st)
{
	st->qp = rp_step_qp(s, st);
	st->rec_exit_ns = rp_abs_ns(s, st->ev->u.post_recv.ts_exit);
}

static void rp_wire_srq_recv(struct rp_side *s, struct rp_step *st)
{
	st->srq = st->obj ? &s->srq[st->obj - 1] : NULL;
	st->rec_exit_ns = rp_abs_ns(s, st->ev->u.post_srq_recv.ts_exit);
}

static void rp_wire_poll(struct rp_side *s, struct rp_step *st)
{
	st->cq = rp_step_cq(s, st);
	st->rec_exit_ns = rp_abs_ns(s, st->ev->u.poll_cq.ts_exit);
}

static void rp_wire_notify(struct rp_side *s, struct rp_step *st)
{
	st->cq = rp_step_cq(s, st);
}

static void rp_wire_cq_event(struct rp_side *s, struct rp_step *st)
{
	st->cq = rp_step_cq(s, st);
	st->rec_exit_ns = rp_abs_ns(s, st->ev->u.get_cq_event.ts_exit);
}

/* Evidence of a QP's state, later than what the model knows when it is the
 * latest (replay_join.c weighs it). Steps are in time order here. */
static void rp_evidence(struct rp_qp *q, const struct rp_step *st, uint32_t state)
{
	q->has_evidence = 1;
	q->evidence_state = state;
	q->evidence_ts = st->ev->ts;
}

/* What the device said the state was: evidence, never reissued. */
static void rp_wire_query(struct rp_side *s, struct rp_step *st)
{
	const struct rbt_ev_qp_query *qq = &st->ev->u.qp_query;
	struct rp_qp *q = rp_step_qp(s, st);

	st->skipped = 1;
	if (q && qq->ret == 0 && (qq->attr_mask & IBV_QP_STATE))
		rp_evidence(q, st, (uint32_t)qq->qp_state);
}

/* Only evidence of a QP's fate: never reissued. */
static void rp_wire_async(struct rp_side *s, struct rp_step *st)
{
	uint64_t t = st->ev->u.async_event.event_type;
	struct rp_qp *q = rp_step_qp(s, st);

	st->skipped = 1;
	if (q && (t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR ||
		  t == IBV_EVENT_QP_ACCESS_ERR))
		rp_evidence(q, st, IBV_QPS_ERR);
}

/* An MR's registration, deregistration or rereg: the entry it acts on (for a
 * rereg, the successor), resolved when read. */
static void rp_wire_mr(struct rp_side *s, struct rp_step *st)
{
	const struct rbt_event *e = st->ev;

	st->mr = st->obj ? &s->mr[st->obj - 1] : NULL;
	st->rec_exit_ns =
		rp_abs_ns(s, e->type == RBT_EV_MR_REG	  ? e->u.mr_reg.ts_exit
			     : e->type == RBT_EV_MR_DEREG ? e->u.mr_dereg.ts_exit
							  : e->u.mr_rereg.ts_exit);
	if (!st->mr)
		st->skipped = 1;
}

static void rp_wire_qp_life(struct rp_side *s, struct rp_step *st)
{
	const struct rbt_event *e = st->ev;

	st->qp = rp_step_qp(s, st);
	st->rec_exit_ns =
		rp_abs_ns(s, e->type == RBT_EV_QP_CREATE ? e->u.qp_create.ts_exit
							 : e->u.qp_destroy.ts_exit);
	if (!st->qp)
		st->skipped = 1;
}

static void (*const rp_wire[RBT_EV_MAX_ID + 1])(struct rp_side *, struct rp_step *) = {
	[RBT_EV_QP_CREATE] = rp_wire_qp_life,
	[RBT_EV_QP_DESTROY] = rp_wire_qp_life,
	[RBT_EV_MR_REG] = rp_wire_mr,
	[RBT_EV_MR_DEREG] = rp_wire_mr,
	[RBT_EV_MR_REREG] = rp_wire_mr,
	[RBT_EV_QP_MODIFY] = rp_wire_modify,
	[RBT_EV_POST_SEND] = rp_wire_send,
	[RBT_EV_POST_RECV] = rp_wire_recv,
	[RBT_EV_POST_SRQ_RECV] = rp_wire_srq_recv,
	[RBT_EV_POLL_CQ] = rp_wire_poll,
	[RBT_EV_REQ_NOTIFY] = rp_wire_notify,
	[RBT_EV_GET_CQ_EVENT] = rp_wire_cq_event,
	[RBT_EV_QP_QUERY] = rp_wire_query,
	[RBT_EV_ASYNC_EVENT] = rp_wire_async,
};

/* Resource steps: MRs and QPs that come and go mid-run. */
static int rp_is_mr_step(uint32_t t)
{
	return t == RBT_EV_MR_REG || t == RBT_EV_MR_DEREG || t == RBT_EV_MR_REREG ||
	       t == RBT_EV_QP_CREATE || t == RBT_EV_QP_DESTROY;
}

/* The steps in recorded time order (file order between equal times), wired. */
static void rp_timeline_order(struct rp_side *s)
{
	/* read in time order but for the waits a streamed window orders by
	 * their return (replay_load.c), and threads' chunks */
	rp_sort_nearly(s->step, (size_t)s->nstep, sizeof(*s->step), rp_step_cmp);
	for (int i = 0; i < s->nstep; i++) {
		struct rp_step *st = &s->step[i];

		st->t_issue = 0;
		if (st->type <= RBT_EV_MAX_ID && rp_wire[st->type])
			rp_wire[st->type](s, st);
	}
}

/* A registration or deregistration after the side's last post or poll is
 * its teardown (or an MR never used): done before or after the run as
 * before, not a step (a peer replayer, or the peer's side, may not be done
 * with the MR: the recording's sync was out of band). Nor is it a thread's
 * work (rp_lanes_build). */
static void rp_mr_tail(struct rp_side *s)
{
	int last = -1;

	for (int i = 0; i < s->nstep; i++) {
		uint32_t t = s->step[i].type;

		if (t == RBT_EV_POST_SEND || t == RBT_EV_POST_RECV ||
		    t == RBT_EV_POST_SRQ_RECV || t == RBT_EV_POLL_CQ)
			last = i;
	}
	for (int i = last + 1; i < s->nstep; i++)
		if (s->step[i].type == RBT_EV_MR_REG ||
		    s->step[i].type == RBT_EV_MR_DEREG ||
		    s->step[i].type == RBT_EV_QP_CREATE ||
		    s->step[i].type == RBT_EV_QP_DESTROY)
			s->step[i].skipped = 1;
}

/* After the last event: recorded time order (streams, i.e. threads, were
 * written chunk by chunk), every step wired, the model's join of what the
 * program saw sealed, and the prefix: creating, connecting and pre-posting
 * receives, up to the first step that needs the peer, runs before the start
 * barrier. */
void rp_timeline_finish(struct rp_side *s)
{
	rp_timeline_order(s);
	rp_join_finish(s);
	rp_mr_tail(s);
	for (s->prefix = 0; s->prefix < s->nstep; s->prefix++) {
		uint32_t t = s->step[s->prefix].type;

		if (t == RBT_EV_POST_SEND || t == RBT_EV_POLL_CQ ||
		    t == RBT_EV_GET_CQ_EVENT)
			break;
	}
	if (s->nstep)
		s->rec_epoch_ns =
			s->step[s->prefix < s->nstep ? s->prefix : s->nstep - 1].rec_ns;
}

/* A window's steps (replay_stream.c), read in time order already: ordered by
 * time as the whole timeline is, wired, their recorded completions sorted; no
 * prefix (the first reading's ran before the start). */
void rp_timeline_window(struct rp_side *s)
{
	rp_timeline_order(s);
	rp_join_window(s);
	s->prefix = 0;
	/* past the side's last post or poll: its teardown, as rp_mr_tail */
	for (int i = 0; i < s->nstep; i++)
		if (rp_is_mr_step(s->step[i].type) &&
		    s->step[i].rec_ns > s->sm->last_work_ns)
			s->step[i].skipped = 1;
}

/* Gating steps: what another thread's later post may have relied on. With
 * --thread-order=shared, polls and completion-event waits gate only the posts
 * on queues of their CQ (rp_xneeds); creates, modifies and registrations gate
 * every later post of every thread. */
static int rp_gates(const struct rp_step *st, int all)
{
	uint32_t t = st->type;

	if (st->skipped)
		return 0;
	if (t == RBT_EV_POLL_CQ || t == RBT_EV_GET_CQ_EVENT)
		return all;
	return t == RBT_EV_QP_MODIFY || t == RBT_EV_QP_CREATE || t == RBT_EV_MR_REG ||
	       t == RBT_EV_MR_REREG;
}

static int rp_is_gated(uint32_t t)
{
	return t == RBT_EV_POST_SEND || t == RBT_EV_POST_RECV ||
	       t == RBT_EV_POST_SRQ_RECV || t == RBT_EV_QP_MODIFY;
}

/* A poll or completion-event wait of a lane, by its recorded return. */
struct rp_xpoll {
	uint64_t r;
	int lane, pos, cq;
};

static int rp_xpoll_cmp(const void *a, const void *b)
{
	const struct rp_xpoll *x = a, *y = b;

	return x->r < y->r ? -1 : x->r > y->r;
}

struct rp_xsweep {
	struct rp_side *s;
	int *last; /* [cq * nlane + lane]: its last poll on cq returned so far */
	int *seen; /* [lane * nlane + other]: what lane waits for of other */
	struct rp_xneed *v;
	int n, cap;
};

/* The needs of step st (lane l) for CQ c: each other lane's last poll of c
 * that returned before st began, unless an earlier step of l waited for it. */
static int rp_xneed_cq(struct rp_xsweep *x, struct rp_step *st, int l, int c)
{
	int nl = x->s->nlane;

	for (int a = 0; a < nl; a++) {
		int p = x->last[c * nl + a];

		if (a == l || p <= x->seen[l * nl + a])
			continue;
		x->seen[l * nl + a] = p;
		if (!RP_GROW(x->v, x->n, x->cap))
			return -ENOMEM;
		if (!st->nxneed)
			st->xneed = x->n;
		x->v[x->n++] = (struct rp_xneed){ a, p };
		st->nxneed++;
	}
	return 0;
}

/* The CQs step st's queues complete on: its QP's two, or for an SRQ
 * receive the receive CQs of the QPs that take from that SRQ. */
static int rp_xneed_step(struct rp_xsweep *x, struct rp_step *st, int l)
{
	struct rp_side *s = x->s;
	int rc = 0;

	if (st->type == RBT_EV_POST_SRQ_RECV) {
		int srqi = st->srq ? (int)(st->srq - s->srq) + 1 : 0;

		for (int q = 0; srqi && q < s->nqp && !rc; q++)
			if (s->qp[q].rcq && rp_qp_takes_srq(s, &s->qp[q], srqi))
				rc = rp_xneed_cq(x, st, l, s->qp[q].rcq - 1);
		return rc;
	}
	if (!st->qp)
		return 0;
	if (st->qp->scq)
		rc = rp_xneed_cq(x, st, l, st->qp->scq - 1);
	if (!rc && st->qp->rcq && st->qp->rcq != st->qp->scq)
		rc = rp_xneed_cq(x, st, l, st->qp->rcq - 1);
	return rc;
}

/* --thread-order=shared: each post's and modify's waits for the other lanes'
 * polls on its CQs, in one sweep of the steps in recorded order with the polls
 * taken in the order they returned. -ENOMEM or 0. */
static int rp_xneeds(struct rp_side *s, int all, const int *lane_of, const int *pos_of)
{
	int nl = s->nlane, np = 0, rc = 0, next = 0;
	struct rp_xsweep x = { .s = s };
	struct rp_xpoll *pv = NULL;

	s->xneed = NULL;
	for (int i = 0; i < s->nstep; i++)
		s->step[i].nxneed = 0;
	if (all || nl < 2 || !s->ncq)
		return 0;
	x.last = malloc((size_t)s->ncq * (size_t)nl * sizeof(*x.last));
	x.seen = malloc((size_t)nl * (size_t)nl * sizeof(*x.seen));
	pv = malloc((size_t)s->nstep * sizeof(*pv));
	if (!x.last || !x.seen || !pv) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t k = 0; k < (size_t)s->ncq * (size_t)nl; k++)
		x.last[k] = -1;
	for (size_t k = 0; k < (size_t)nl * (size_t)nl; k++)
		x.seen[k] = -1;
	/* in step order the returns are nearly in order already */
	for (int i = 0; i < s->nstep; i++) {
		const struct rp_step *st = &s->step[i];
		uint32_t t = st->type;

		if (lane_of[i] >= 0 &&
		    (t == RBT_EV_POLL_CQ || t == RBT_EV_GET_CQ_EVENT) && !st->skipped &&
		    st->cq)
			pv[np++] = (struct rp_xpoll){ st->rec_exit_ns > st->rec_ns
							      ? st->rec_exit_ns
							      : st->rec_ns,
						      lane_of[i], pos_of[i],
						      (int)(st->cq - s->cq) };
	}
	rp_sort_nearly(pv, (size_t)np, sizeof(*pv), rp_xpoll_cmp);
	for (int i = 0; i < s->nstep && !rc; i++) {
		struct rp_step *st = &s->step[i];

		if (lane_of[i] < 0 || st->skipped || !rp_is_gated(st->type))
			continue;
		for (; next < np && pv[next].r < st->rec_ns; next++) {
			int *p = &x.last[pv[next].cq * nl + pv[next].lane];

			if (pv[next].pos > *p)
				*p = pv[next].pos;
		}
		rc = rp_xneed_step(&x, st, lane_of[i]);
	}
	if (!rc && x.n && rp_keep(s, x.v) < 0)
		rc = -ENOMEM;
	if (!rc && x.n)
		s->xneed = x.v;
	else
		free(x.v);
out:
	free(x.last);
	free(x.seen);
	free(pv);
	return rc;
}

/* The lane of stream id among the side's (its index), made when new; -1
 * without memory. hint: the lane found last. */
static int rp_lane_of(struct rp_side *s, uint32_t id, int *cap, int hint)
{
	int l = 0;

	if (hint < s->nlane && s->lane[hint].stream == id)
		return hint;
	while (l < s->nlane && s->lane[l].stream != id)
		l++;
	if (l == s->nlane) {
		if (!RP_GROW(s->lane, s->nlane, *cap))
			return -1;
		s->lane[s->nlane++] = (struct rp_lane){ .s = s, .stream = id };
	}
	return l;
}

int rp_lanes_build(const struct rp_job *j, struct rp_side *s)
{
	int all = j->o->thread_order == RBT_REPLAY_ORDER_RECORDED;
	int cap = 0, l = 0, rc = -ENOMEM;
	/* each step's lane (-1: none) and place in it */
	int *lane_of = malloc(((size_t)s->nstep + 1) * sizeof(*lane_of));
	int *pos_of = malloc(((size_t)s->nstep + 1) * sizeof(*pos_of));

	s->nlane = 0;
	if (!lane_of || !pos_of)
		goto out;
	for (int i = 0; i < s->nstep; i++) {
		lane_of[i] = -1;
		if (i < s->prefix ||
		    (s->step[i].skipped && rp_is_mr_step(s->step[i].type)))
			continue;
		if ((l = rp_lane_of(s, s->step[i].stream, &cap, l)) < 0)
			goto out;
		lane_of[i] = l;
		s->lane[l].n++;
	}
	if (s->lane && rp_keep(s, s->lane) < 0)
		goto out;
	for (l = 0; l < s->nlane; l++) {
		struct rp_lane *L = &s->lane[l];

		L->idx = rp_alloc(s, (size_t)L->n * sizeof(*L->idx));
		L->gate_at = rp_alloc(s, ((size_t)L->n + 1) * sizeof(*L->gate_at));
		if (!L->idx || !L->gate_at)
			goto out;
		L->n = 0;
	}
	for (int i = s->prefix; i < s->nstep; i++)
		if (lane_of[i] >= 0) {
			struct rp_lane *L = &s->lane[lane_of[i]];

			pos_of[i] = L->n;
			L->idx[L->n++] = i;
		}
	for (l = 0; l < s->nlane; l++) {
		struct rp_lane *L = &s->lane[l];

		L->gate_at[L->n] = UINT64_MAX;
		for (int k = L->n - 1; k >= 0; k--) {
			const struct rp_step *st = &s->step[L->idx[k]];
			uint64_t r = st->rec_exit_ns > st->rec_ns ? st->rec_exit_ns
								  : st->rec_ns;

			L->gate_at[k] = rp_gates(st, all) && r < L->gate_at[k + 1]
						? r
						: L->gate_at[k + 1];
		}
	}
	rc = rp_xneeds(s, all, lane_of, pos_of);
out:
	free(lane_of);
	free(pos_of);
	return rc;
}
