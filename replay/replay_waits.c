/* replay_waits.c - the waits a side's posts and modifies need, worked out
 * before the run from the whole recording: a QP's move to ERR held until its
 * peer's successful sends were replayed (rp_err_waits), and a post on a QP
 * whose send CQ other queues share held until the QP's earlier send
 * completions were taken off that CQ (rp_sq_waits; streamed, before each
 * window's run, from that window's steps). replay_run.c does the waiting.
 * Runs before the start barrier or between windows only: never touches the
 * device's queues, never called on the data path.
 */
#include <errno.h>
#include <stdlib.h>

#include "replay/replay_int.h"

/* A QP's move to ERR flushes what its peer sends it from then on; every send
 * of the peer's that succeeded in the recording was taken by this QP before
 * its ERR (an RC QP in ERR acknowledges nothing). So before a modify to ERR,
 * the peer's replayed successful sends must have reached that count: the
 * order the recording proves, also where the program learnt it through memory
 * (ib_write_lat: the client disconnects once the server's last RDMA WRITE has
 * landed, which no completion on the client shows). Peers in this process
 * only; bounded like a poll. */
void rp_err_waits(struct rp_job *j, struct rp_side *s)
{
	for (int i = 0; i < s->nqp; i++) {
		struct rp_qp *q = &s->qp[i], *p;
		const struct rp_dir_qp *d;
		struct rp_side *ps;
		uint32_t ok = 0;

		if ((!q->qp && !q->dynamic) || q->rec.qp_type != IBV_QPT_RC ||
		    q->peer_dir < 0)
			continue;
		d = &j->dir.qps[q->peer_dir];
		if (d->side < 0 || d->side >= j->nside)
			continue;
		ps = &j->side[d->side];
		p = rp_qp_by_rec_qpn(ps, d->rec_qpn);
		if (!p || p == q || (!p->qp && !p->dynamic) || !p->scq)
			continue;
		ok = p->rec_send_ok;
		if (!ok)
			continue;
		q->err_peer = p;
		q->err_peer_ok = ok;
		p->count_live = 1;
		ps->cq[p->scq - 1].count_live = 1;
	}
}

/* Whether queues other than QP q's send queue deliver to its send CQ:
 * another QP's send queue, or any receive queue (its own too). */
static int rp_scq_shared(const struct rp_side *s, const struct rp_qp *q)
{
	for (int k = 0; k < s->nqp; k++)
		if ((&s->qp[k] != q && s->qp[k].scq == q->scq) ||
		    rp_qp_recv_on_cq(s, &s->qp[k], q->scq))
			return 1;
	for (int k = 0; k < s->nxqp; k++)
		if (s->xqp[k].rcq == q->scq)
			return 1;
	return 0;
}

/* Which recorded thread made a queue's posts, or polled a CQ, after the
 * prefix: none yet, one (its stream), or several. */
struct rp_one {
	uint32_t stream;
	uint8_t seen, several;
};

static void rp_one_saw(struct rp_one *o, uint32_t stream)
{
	if (o->seen && o->stream != stream)
		o->several = 1;
	o->seen = 1;
	o->stream = stream;
}

/* For every QP (q[]) and CQ (c[]) of the side, in one sweep of its steps. */
static void rp_sq_threads(const struct rp_side *s, struct rp_one *q, struct rp_one *c)
{
	for (int k = s->prefix; k < s->nstep; k++) {
		const struct rp_step *st = &s->step[k];
		uint32_t t = st->type;

		if (st->skipped)
			continue;
		if (t == RBT_EV_POST_SEND && st->qp)
			rp_one_saw(&q[st->qp - s->qp], st->stream);
		else if ((t == RBT_EV_POLL_CQ || t == RBT_EV_GET_CQ_EVENT) && st->cq)
			rp_one_saw(&c[st->cq - s->cq], st->stream);
	}
}

/* Whether one recorded thread made all of q's posts and all the polls (and
 * completion-event waits) of its send CQ after the prefix: the CQ's stash is
 * then that thread's alone. */
static int rp_sq_one_thread(const struct rp_one *q, const struct rp_one *c)
{
	return !q->several && !c->several &&
	       (!q->seen || !c->seen || q->stream == c->stream);
}

/* The device frees a QP's send slot when its completion is polled (a
 * signaled WR's frees it and the unsignaled ones before it). A poll step takes
 * the recorded number of completions off its CQ, whichever queue's the device
 * queued first: on a CQ other queues share, the replay's polls can have taken
 * other QPs' completions where the recording's took this QP's, and its next
 * post then finds the send queue full (ENOMEM) where the recording's did not
 * (perftest's ib_send_bw -q 4: four QPs on one CQ, each kept as full as its
 * queue allows). So each post on such a QP waits until the replay has taken
 * off the CQ as many of the QP's send completions as the recording had polled
 * before the post began (rp_sq_wait). Only where one recorded thread makes
 * the QP's posts and the CQ's polls (streamed: in the window). For each
 * window of a streamed side again, its steps and the recorded completions
 * not yet matched. */
int rp_sq_waits(struct rp_side *s)
{
	struct rp_one *qo = calloc((size_t)s->nqp + 1, sizeof(*qo));
	struct rp_one *co = calloc((size_t)s->ncq + 1, sizeof(*co));
	uint8_t *wait = calloc((size_t)s->nqp + 1, 1);
	/* per QP where the last post's search ended, and its time: one thread
	 * posts on a waiting QP, in time order, so the next search goes on from
	 * there (a step back in time searches the whole list again) */
	uint32_t *at = calloc((size_t)s->nqp + 1, sizeof(*at));
	uint64_t *at_ts = calloc((size_t)s->nqp + 1, sizeof(*at_ts));
	int rc = 0, any = 0;

	if (!qo || !co || !wait || !at || !at_ts) {
		rc = -ENOMEM;
		goto out;
	}
	rp_sq_threads(s, qo, co);
	for (int i = 0; i < s->nqp; i++) {
		struct rp_qp *q = &s->qp[i];
		const struct rp_wclist *l = &q->rec_wc[0];
		struct rp_cq *c;

		if (!q->scq || (!l->n && !q->wc_base[0]) || !rp_scq_shared(s, q))
			continue;
		c = &s->cq[q->scq - 1];
		if (!c->cq || !rp_sq_one_thread(&qo[i], &co[q->scq - 1]))
			continue;
		/* streamed: the CQ counts from this window on, as a later
		 * window's posts may wait for the completions polled in it */
		c->sq_track |= s->sm != NULL;
		wait[i] = 1;
		any = 1;
	}
	for (int k = s->prefix; any && k < s->nstep; k++) {
		struct rp_step *st = &s->step[k];
		const struct rp_wclist *l;
		uint32_t lo = 0, hi;
		size_t q;

		if (st->skipped || st->type != RBT_EV_POST_SEND || !st->qp ||
		    !wait[st->qp - s->qp])
			continue;
		/* the list is in poll order: those polled before it */
		q = (size_t)(st->qp - s->qp);
		l = &st->qp->rec_wc[0];
		hi = l->n;
		if (st->ev->ts >= at_ts[q]) {
			lo = at[q];
			while (lo < hi && l->v[lo].ts < st->ev->ts)
				lo++;
		} else {
			while (lo < hi) {
				uint32_t mid = lo + (hi - lo) / 2;

				if (l->v[mid].ts < st->ev->ts)
					lo = mid + 1;
				else
					hi = mid;
			}
		}
		at[q] = lo;
		at_ts[q] = st->ev->ts;
		/* streamed: the windows before matched wc_base of them */
		st->sq_need = (uint32_t)(st->qp->wc_base[0] + lo);
		s->cq[st->qp->scq - 1].sq_track |= st->sq_need > 0;
	}
	for (int i = 0; i < s->nqp && !rc; i++) {
		struct rp_cq *c = wait[i] ? &s->cq[s->qp[i].scq - 1] : NULL;

		if (!c || !c->sq_track || c->stash)
			continue;
		c->stash_cap = (uint32_t)c->cq->cqe + 1;
		c->stash = calloc(c->stash_cap, sizeof(*c->stash));
		if (!c->stash)
			rc = -ENOMEM;
	}
out:
	free(qo);
	free(co);
	free(wait);
	free(at);
	free(at_ts);
	return rc;
}
