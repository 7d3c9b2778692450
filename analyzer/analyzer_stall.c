/* analyzer_stall.c - stalls: send WRs that stay outstanding far longer than their QP's
 * usual latency while the program polls their CQ and finds it empty (a peer that
 * hung or stopped posting receives, a lost doorbell, a server that never answers),
 * and WRs left outstanding by a program that stopped polling.
 *
 * While the events are read it follows, per QP, the oldest send WR outstanding
 * while a completion is expected (a signaled WR is queued) and the empty polls of
 * the QP's send CQ meanwhile, keeping the longest such episode; before the model's
 * end it notes what is still outstanding. The findings are judged at the end
 * against the QP's own end-to-end p99. Memory: a few words per QP and per CQ.
 * It never changes the model's queues and never guesses: a WR the program did not
 * ask a completion for is never a stall.
 */
#include <string.h>

#include <infiniband/verbs.h>

#include "analyzer/analyzer_internal.h"

/* A stall is reported when it lasted longer than both of these. */
#define AN_STALL_MIN_NS	  1e9	/* 1 s, whatever the QP's usual latency */
#define AN_STALL_P99_MULT 100.0 /* times the QP's end-to-end p99 */
#define AN_STALL_SCAN	  1024	/* WRs looked at for a signaled one */

void an_stall_sender(struct an_cq *cq, struct an_qp *qp)
{
	if (rbt_grow(&cq->senders, &cq->cap_senders, cq->n_senders + 1,
		     sizeof(*cq->senders), 4, 0))
		return;
	cq->senders[cq->n_senders++] = qp;
}

/* Whether a completion is expected: a signaled WR in the first AN_STALL_SCAN. */
static bool an_expects(const struct rbt_model_ring *sq)
{
	uint32_t n = sq->n < AN_STALL_SCAN ? sq->n : AN_STALL_SCAN;
	for (uint32_t i = 0; i < n; i++)
		if (((const struct rbt_model_wr *)rbt_model_ring_at(sq, i))->signaled)
			return true;
	return false;
}

static uint64_t an_stall_len(const struct an_stall *s)
{
	return s->end > s->wr.post_exit ? s->end - s->wr.post_exit : 0;
}

/* count empty polls of cq between ts and ts_exit (ticks). */
void an_stall_poll(struct an_cq *cq, uint64_t ts, uint64_t ts_exit, uint64_t count)
{
	for (uint32_t i = 0; i < cq->n_senders; i++) {
		struct an_qp *qp = cq->senders[i];
		struct an_stall *s = &qp->st_cur;
		const struct rbt_model_ring *sq = &qp->m->sq;
		if (!sq->n || qp->m->res.destroyed || qp->m->state == IBV_QPS_ERR) {
			s->active = false;
			continue;
		}
		const struct rbt_model_wr *w = rbt_model_ring_at(sq, 0);
		if (!s->active || s->wr.post_ts != w->post_ts ||
		    s->wr.wr_id != w->wr_id) {
			if (!an_expects(sq)) {
				s->active = false;
				continue;
			}
			memset(s, 0, sizeof(*s));
			s->active = true;
			s->wr = *w;
			s->first_poll = ts;
		}
		s->empty_polls += count;
		s->last_poll = ts_exit;
		s->end = ts_exit;
		if (sq->n > s->outstanding)
			s->outstanding = sq->n;
		if (an_stall_len(s) > an_stall_len(&qp->st_best))
			qp->st_best = *s;
	}
}

void an_stall_end(struct rbt_analyzer *an)
{
	for (int i = 0; i < an->n_traces; i++) {
		struct an_trace *t = an->traces[i];
		for (struct an_qp *qp = t->qp_list; qp; qp = qp->next) {
			const struct rbt_model_ring *sq = &qp->m->sq;
			if (qp->peer) {
				qp->st_best.peer_known = true;
				qp->st_best.peer_rq = qp->peer->m->rq.n;
			}
			if (!sq->n || qp->m->state == IBV_QPS_ERR || !an_expects(sq))
				continue;
			struct an_stall *e = &qp->st_end;
			const struct rbt_model_wr *w = rbt_model_ring_at(sq, 0);
			e->active = true;
			e->wr = *w;
			e->outstanding = sq->n;
			e->end = qp->m->res.destroyed ? qp->m->res.destroy_ts
						      : t->mt->max_ts;
			if (qp->st_cur.active && qp->st_cur.wr.post_ts == w->post_ts &&
			    qp->st_cur.wr.wr_id == w->wr_id) {
				e->first_poll = qp->st_cur.first_poll;
				e->last_poll = qp->st_cur.last_poll;
				e->empty_polls = qp->st_cur.empty_polls;
			}
			if (qp->peer) {
				e->peer_known = true;
				e->peer_rq = qp->peer->m->rq.n;
			}
		}
	}
}

static double ms(const struct an_trace *t, uint64_t ticks)
{
	return an_ticks_ns(t, ticks) / 1e6;
}

/* The QP's usual end-to-end latency (p99 of its completed sends, else of its
 * trace's; 0 when none completed). */
static double an_usual_ns(const struct rbt_analyzer *an, const struct an_qp *qp)
{
	struct rbt_phase_summary s;
	for (int k = 0; k < 2; k++) {
		double p99 = 0;
		struct an_hist h = { 0 };
		for (uint32_t i = 0; i < an->n_groups; i++) {
			const struct an_group *g = an->groups[i];
			if (g->opcode == RBT_MODEL_RECV ||
			    (k == 0 ? g->qp != qp : g->qp->t != qp->t))
				continue;
			an_hist_merge(&h, &g->h[RBT_PHASE_E2E]);
		}
		if (h.count) {
			an_hist_summary(&h, &s);
			p99 = s.p99;
		}
		an_hist_free(&h);
		if (p99 > 0)
			return p99;
	}
	return 0;
}

/* The peer's ticks as ms since our trace's start (the shared timeline). */
static double peer_ms(const struct an_trace *t, const struct an_trace *pt, uint64_t ticks)
{
	return (an_aligned_ns(pt, (double)ticks) - (double)t->mt->align_ns) / 1e6;
}

static void an_peer_view(struct an_str *e, const struct an_qp *qp,
			 const struct an_stall *s)
{
	const struct an_qp *p = qp->peer;
	if (!p) {
		an_str_printf(e, "the peer's trace was not given (record both ends and "
				 "report them together for its view)\n");
		return;
	}
	const struct an_trace *pt = p->t;
	an_str_printf(e, "the peer, trace %d QP 0x%x (state %s): ", pt->idx, p->m->qpn,
		      an_qp_state_name(p->m->state));
	if (s->peer_known)
		an_str_printf(e, "%llu receives posted at the end, ",
			      (unsigned long long)s->peer_rq);
	if (p->recv_posts)
		an_str_printf(e, "its last post_recv at t=%.3f ms, ",
			      peer_ms(qp->t, pt, p->last_recv_post_ts));
	else
		an_str_printf(e, "never posted a receive, ");
	if (p->rcq && p->rcq->polls)
		an_str_printf(e, "its receive CQ last polled at t=%.3f ms, ",
			      peer_ms(qp->t, pt, p->rcq->last_poll));
	an_str_printf(e, "its trace ends at t=%.3f ms (times on this trace's clock)\n",
		      peer_ms(qp->t, pt, pt->mt->max_ts));
}

static void an_stall_finding(struct rbt_analyzer *an, struct an_qp *qp,
			     const struct an_stall *s, bool stopped, bool at_end,
			     double usual)
{
	struct an_trace *t = qp->t;
	double len = an_ticks_ns(t, s->end) - an_ticks_ns(t, s->wr.post_exit);
	struct an_str e = { 0 }, title = { 0 }, adv = { 0 };
	char b1[32], b2[32];
	an_str_printf(&e,
		      "t=%.3f ms post_send(QP 0x%x): %s wr_id=0x%llx %llu bytes%s, the "
		      "oldest of %u send WRs outstanding\n",
		      ms(t, s->wr.post_ts), qp->m->qpn, an_wr_opcode_name(s->wr.opcode),
		      (unsigned long long)s->wr.wr_id, (unsigned long long)s->wr.bytes,
		      s->wr.signaled ? " signaled" : "", s->outstanding);
	if (s->empty_polls)
		an_str_printf(
			&e,
			"t=%.3f .. %.3f ms: %llu polls of its send CQ came back empty\n",
			ms(t, s->first_poll), ms(t, s->last_poll),
			(unsigned long long)s->empty_polls);
	if (stopped)
		an_str_printf(&e,
			      "t=%.3f ms: the last poll of its send CQ; no poll after "
			      "it until the end at t=%.3f ms\n",
			      ms(t, qp->scq ? qp->scq->last_poll : 0), ms(t, s->end));
	an_str_printf(&e, "%s after %s; the QP's usual end-to-end latency (p99) is %s\n",
		      at_end ? "still outstanding at the end" : "completed or gone",
		      an_fmt_ns(b1, sizeof(b1), len),
		      usual > 0 ? an_fmt_ns(b2, sizeof(b2), usual)
				: "unknown (none completed)");
	if (qp->m->have_rts)
		an_str_printf(&e,
			      "t=%.3f ms modify_qp(QP 0x%x -> RTS): retry_cnt=%llu "
			      "rnr_retry=%llu timeout=%llu\n",
			      ms(t, qp->m->rts_ts), qp->m->qpn,
			      (unsigned long long)qp->m->retry_cnt,
			      (unsigned long long)qp->m->rnr_retry,
			      (unsigned long long)qp->m->timeout);
	an_peer_view(&e, qp, s);
	if (stopped) {
		an_str_printf(&title,
			      "QP 0x%x: the program stopped polling with %u send WRs "
			      "outstanding for %s",
			      qp->m->qpn, s->outstanding, an_fmt_ns(b1, sizeof(b1), len));
		an_str_printf(&adv,
			      "A WR's completion must be polled: keep polling the "
			      "send CQ (or arm it and wait on its channel) until the "
			      "outstanding WRs complete, before leaving or blocking.");
	} else {
		an_str_printf(&title,
			      "QP 0x%x: a %s outstanding for %s while its CQ was polled "
			      "empty %llu times",
			      qp->m->qpn, an_wr_opcode_name(s->wr.opcode),
			      an_fmt_ns(b1, sizeof(b1), len),
			      (unsigned long long)s->empty_polls);
		bool rnr = s->peer_known && !s->peer_rq && s->wr.opcode == IBV_WR_SEND;
		if (rnr || (!qp->peer && qp->m->rnr_retry == 7))
			an_str_printf(
				&adv,
				"%s with rnr_retry=%llu a SEND to a peer without a "
				"receive posted is retried for ever: make sure the "
				"peer keeps receives posted (or use rnr_retry < 7 to "
				"get an error instead of a hang). ",
				rnr ? "The peer had no receive posted:" : "Likely:",
				(unsigned long long)qp->m->rnr_retry);
		an_str_printf(&adv,
			      "The completion never came: check that the peer is "
			      "alive and answering, the QP's path (dest QP, LID/GID, "
			      "PSNs), and that the post reached the NIC (a lost "
			      "doorbell).");
	}
	an_add_finding(an, at_end && !stopped ? RBT_SEV_ERROR : RBT_SEV_WARNING,
		       stopped ? RBT_FINDING_polling_stopped : RBT_FINDING_wr_stalled,
		       t->idx, qp->m->qpn, an_ticks_ns(t, s->wr.post_ts), title.s, e.s,
		       adv.s);
	an_str_free(&e);
	an_str_free(&title);
	an_str_free(&adv);
}

void an_stall_diagnose(struct rbt_analyzer *an)
{
	for (int i = 0; i < an->n_traces; i++) {
		struct an_trace *t = an->traces[i];
		for (struct an_qp *qp = t->qp_list; qp; qp = qp->next) {
			if (!qp->st_best.active && !qp->st_end.active)
				continue;
			double usual = an_usual_ns(an, qp);
			double thr = usual * AN_STALL_P99_MULT;
			if (thr < AN_STALL_MIN_NS)
				thr = AN_STALL_MIN_NS;
			/* a damaged trace's clock can put the threshold past 2^64 ticks */
			double thr_t = thr / t->mt->ns_per_tick;
			uint64_t thr_ticks = thr_t >= 0x1p64 ? UINT64_MAX
					     : thr_t > 0     ? (uint64_t)thr_t
							     : 0;
			const struct an_stall *e = &qp->st_end;
			/* at the end: how long since the program last polled for it */
			uint64_t since = e->wr.post_exit;
			if (qp->scq && qp->scq->last_poll > since)
				since = qp->scq->last_poll;
			if (e->active && an_stall_len(e) > thr_ticks &&
			    e->end - since > thr_ticks) {
				an_stall_finding(an, qp, e, true, true, usual);
				continue;
			}
			const struct an_stall *b = &qp->st_best;
			if (b->active && an_stall_len(b) > thr_ticks) {
				bool at_end = e->active &&
					      e->wr.post_ts == b->wr.post_ts &&
					      e->wr.wr_id == b->wr.wr_id;
				an_stall_finding(an, qp, b, false, at_end, usual);
			}
		}
	}
}
