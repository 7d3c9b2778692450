/* replay_finish.c - a side after its last step: the completions the replay saw
 * onto their QPs' lists (in the order its polls returned them), those still
 * owed drained off shared CQs, a stopped side's recorded completions cut to
 * where it stopped, its lanes' outcome, and each QP's end state.
 *
 * Off the hot path. Must never wait without a bound: the drain waits like a
 * poll (rp_wait_limit), no longer.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "replay/replay_int.h"

/* A completion of the replay onto its QP's list, from the queue the QP's posts
 * say (unpolled: taken off the CQ after the last poll step); step is the poll
 * step's index, -1 for none. */
static void rp_push_replayed(struct rp_job *j, struct rp_side *s, const struct ibv_wc *w,
			     int unpolled, int step)
{
	struct rp_qp *q = rp_qp_by_new_qpn(s, w->qp_num);
	struct rp_wcrec r = {
		.wr_id = w->wr_id,
		.status = w->status,
		.opcode = w->opcode,
		.byte_len = w->byte_len,
		.unpolled = (uint8_t)unpolled,
		.src_qp = w->src_qp,
	};

	if (!q) {
		if (step >= 0)
			rp_diverge(j, "%s: step %d: completion for an unknown QP %u",
				   s->path, rp_step_no(s, step), w->qp_num);
		else
			rp_diverge(j, "%s: completion for an unknown QP %u", s->path,
				   w->qp_num);
		return;
	}
	rp_wclist_push(&q->rep_wc[rp_wc_is_recv(q, r.status, r.opcode, r.wr_id)], &r);
}

/* After the run, off the hot path: each side's completions, in the order its
 * polls returned them, onto the lists of their QPs and queues. */
void rp_collect_completions(struct rp_job *j, struct rp_side *s)
{
	for (int i = 0; i < s->nstep; i++) {
		struct rp_step *st = &s->step[i];

		if (st->type != RBT_EV_POLL_CQ || st->skipped)
			continue;
		for (uint32_t k = 0; k < st->got; k++)
			rp_push_replayed(j, s, &st->wcs[k], 0, i);
	}
}

/* Completions still owed on a CQ: per QP and queue served by CQ ci, what the
 * recording saw minus what the replay has so far. */
static uint32_t rp_cq_owed(const struct rp_side *s, int ci)
{
	uint32_t owed = 0;

	for (int i = 0; i < s->nqp; i++) {
		const struct rp_qp *q = &s->qp[i];

		for (int d = 0; d < 2; d++)
			if ((d ? rp_qp_recv_on_cq(s, q, ci + 1) : q->scq == ci + 1) &&
			    q->rep_wc[d].n < q->rec_wc[d].n)
				owed += q->rec_wc[d].n - q->rep_wc[d].n;
	}
	for (int i = 0; i < s->nxqp; i++) {
		const struct rp_qp *q = &s->xqp[i];

		if (q->rcq == ci + 1 && q->rep_wc[1].n < q->rec_wc[1].n)
			owed += q->rec_wc[1].n - q->rep_wc[1].n;
	}
	return owed;
}

/* After a side's last step, before the DONE barrier (the peer may still be
 * sending): a CQ shared by several QPs (or by a QP's two queues) gives each poll
 * whichever completion the device queued first, so when the program stopped
 * polling with completions left on the CQ, the replay's polls - the same number
 * of completions - can have taken another QP's. The replay then owes some QPs
 * completions the recording saw: keep polling that CQ until none is owed or the
 * poll timeout. What this takes off the CQ (and what an event wait stashed and no
 * poll step took) joins its QP's list as a completion the program never polled;
 * the report accepts those beyond the recorded count only as successes. */
static void rp_drain_owed(struct rp_job *j, struct rp_side *s)
{
	struct rp_lane *L = &s->pre; /* its timeouts and budget: all lanes' */

	for (int ci = 0; ci < s->ncq; ci++) {
		struct rp_cq *c = &s->cq[ci];
		uint64_t tmo = (uint64_t)(L->timeouts == 0  ? j->poll_timeout_ms
					  : L->timeouts < 3 ? 200
							    : 10) *
			       1000000ull;
		uint64_t give_up, t_start;
		unsigned spins = 0;

		if (!c->cq || !rp_cq_owed(s, ci))
			continue;
		if (tmo > (uint64_t)j->poll_timeout_ms * 1000000ull)
			tmo = (uint64_t)j->poll_timeout_ms * 1000000ull;
		t_start = rp_now_ns();
		tmo = rp_wait_limit(j, L, tmo);
		if (!tmo) {
			L->stop_why = 0; /* every step ran: only the drain ends */
			return;
		}
		give_up = t_start + tmo;
		while (rp_cq_owed(s, ci)) {
			struct ibv_wc wc[16];
			int n = 0;

			if (c->stash && c->stash_head < c->stash_n) {
				wc[0] = c->stash[c->stash_head++];
				n = 1;
			} else {
				n = ibv_poll_cq(c->cq, 16, wc);
			}
			if (n < 0) {
				rp_diverge(j, "%s: ibv_poll_cq failed (%d)", s->path, n);
				break;
			}
			for (int k = 0; k < n; k++)
				rp_push_replayed(j, s, &wc[k], 1, -1);
			if (n)
				continue;
			if ((++spins & 255) == 0) {
				/* the report names what is still missing */
				uint64_t now = rp_now_ns();

				if (now > give_up || rp_signal_caught()) {
					L->timeouts++;
					rp_wasted(j, L, t_start);
					break;
				}
				if ((spins & 1023) == 0)
					sched_yield();
			}
		}
	}
}

/* A side that stopped early is compared up to where it stopped: the recorded
 * completions of the poll steps it never reached are set aside (rec_all keeps
 * how many there were). */
void rp_side_cut(struct rp_side *s)
{
	uint64_t cut = s->stop_at < s->nstep ? s->step[s->stop_at].rec_ns : UINT64_MAX;

	if (s->sm && s->sm->cut)
		return; /* streamed: cut in the window it stopped in */

	for (int i = 0; i < s->nqp + s->nxqp; i++) {
		struct rp_qp *q = i < s->nqp ? &s->qp[i] : &s->xqp[i - s->nqp];

		for (int d = 0; d < 2; d++) {
			struct rp_wclist *l = &q->rec_wc[d];
			uint32_t n = 0;

			q->rec_all[d] = l->n;
			while (cut != UINT64_MAX && n < l->n &&
			       rp_abs_ns(s, l->v[n].ts) < cut)
				n++;
			if (cut != UINT64_MAX)
				l->n = n;
		}
	}
}

/* Every lane's thread has ended: the side stopped where its earliest lane
 * stopped (for the cut), for the first reason; the drain after it gets all
 * lanes' timeouts and the most any lane spent of its budget. */
void rp_lanes_done(struct rp_side *s)
{
	struct rp_lane *P = &s->pre;

	s->stop_why = P->stop_why;
	s->stop_at = P->stop_why ? P->stop_at : s->nstep;
	s->nran = P->ran;
	for (int l = 0; l < s->nlane; l++) {
		struct rp_lane *L = &s->lane[l];

		s->nran += L->ran;
		s->xwaits += L->xwaits;
		s->sq_waits += L->sq_waits;
		P->timeouts += L->timeouts;
		if (L->wasted_ns > P->wasted_ns)
			P->wasted_ns = L->wasted_ns;
		if (!L->stop_why)
			continue;
		if (!s->stop_why || L->stop_why < s->stop_why)
			s->stop_why = L->stop_why;
		if (L->stop_at >= 0 && L->stop_at < s->stop_at)
			s->stop_at = L->stop_at;
	}
}

void rp_side_finish(struct rp_job *j, struct rp_side *s)
{
	rp_collect_completions(j, s);
	rp_side_cut(s);
	/* a side that stopped owes nothing more: its report is what it ran */
	if (!s->stop_why)
		rp_drain_owed(j, s);
}

/* ---- after the run: each QP's end state, for the report ------------------------ */
void rp_final_states(struct rp_side *s)
{
	for (int i = 0; i < s->nqp; i++) {
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr ia;

		if (!s->qp[i].qp)
			continue; /* never created, or destroyed by its step (its
				   * state was taken then) */
		memset(&a, 0, sizeof(a));
		if (ibv_query_qp(s->qp[i].qp, &a, IBV_QP_STATE, &ia) == 0)
			s->qp[i].replay_state = a.qp_state;
		else
			s->qp[i].replay_state = 99;
	}
}
