/* analyzer_attr.c - the attribution: each WR the model hands over (once, when its
 * completion was joined) is split into its post, NIC and poll phases (or bounds of
 * them) and added to the statistics of its (QP, opcode, size class); round trips
 * across the two ends of a connection; the first error of each QP as evidence.
 *
 * It never joins anything itself (the model did) and never names an output: the
 * timeline gets each WR through the streaming sinks. Nothing here may trust a
 * timestamp: durations are clamped, never negative.
 */
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "analyzer/analyzer_internal.h"

#define AN_RT_MAX 65536

int an_opcode_slot(int op)
{
	if (op >= 0 && op < 12)
		return op;
	if (op == 128)
		return 12;
	return 13;
}

int an_slot_opcode(int slot)
{
	return slot < 12 ? slot : slot == 12 ? 128 : 255;
}

static uint64_t an_ns(const struct an_trace *t, double ticks)
{
	return rbt_model_dur_ns(t->mt, ticks);
}

static struct an_group *an_group_get(struct rbt_analyzer *an, struct an_qp *qp,
				     int opcode, uint64_t bytes)
{
	int slot = an_opcode_slot(opcode), sc = an_size_class(bytes);
	struct an_group **g = &qp->groups[slot * AN_SIZE_CLASSES + sc];
	if (*g)
		return *g;
	if (rbt_grow(&an->groups, &an->cap_groups, an->n_groups + 1, sizeof(*an->groups),
		     64, 0))
		return NULL;
	*g = calloc(1, sizeof(**g));
	if (!*g)
		return NULL;
	(*g)->qp = qp;
	(*g)->opcode = an_slot_opcode(slot);
	(*g)->size_class = sc;
	an->groups[an->n_groups++] = *g;
	return *g;
}

/* ---- round trips across the two ends of a connection ----
 * Messages that consume a receive (SEND, WRITE_WITH_IMM, ...) are matched k-th to k-th
 * between a QP's posts and its peer's receive completions. A message posted by a
 * side that had just received one is the response to it; when that response arrives
 * back, the round trip is measured entirely on the requester's clock and split with
 * the responder's own measurement of its application time (its clock only). */

static bool an_consumes_recv(int op)
{
	return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM ||
	       op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND_WITH_INV;
}

static void an_rt_delivered(struct an_qp *rx, const struct an_rt_msg *m,
			    uint64_t poll_exit, uint64_t recv_post_exit)
{
	struct an_trace *t = rx->t;
	struct an_qp *tx = rx->peer;
	/* a receive posted after the message was sent: the message waited for it (RNR
	 * NAKs and retries on a real NIC); counted with the receive's post */
	double late = an_aligned_ns(t, (double)recv_post_exit) -
		      an_aligned_ns(tx->t, (double)(m->post_ts + m->post_dur));
	if (an_filter(t->an, t, rx->m->qpn, recv_post_exit, AN_TID_ANY)) {
		an_hist_add(&rx->late_recv, late > 0 ? (uint64_t)late : 0);
		if (late > rx->late_max_ns) {
			rx->late_max_ns = late;
			rx->late_max_ts = recv_post_exit;
		}
	}
	/* one-way time on the aligned clocks: its minimum per direction refines the
	 * alignment (NTP-style), see docs/report.md */
	double ow = an_aligned_ns(t, (double)poll_exit) -
		    an_aligned_ns(tx->t, (double)m->post_ts);
	if (!rx->have_min_in || ow < rx->min_in_ns) {
		rx->min_in_ns = ow;
		rx->have_min_in = true;
	}
	if (m->resp_to < 0 || !rx->rt_msgs)
		return;
	const struct an_rt_msg *req = &rx->rt_msgs[(uint64_t)m->resp_to % AN_RT_N];
	if (req->seq != (uint64_t)m->resp_to || poll_exit < req->post_ts)
		return;
	/* a round trip is counted with its request's post */
	if (!an_filter(t->an, t, rx->m->qpn, req->post_ts, AN_TID_ANY))
		return;
	double npt = t->mt->ns_per_tick;
	double rtt = (double)(poll_exit - req->post_ts) * npt;
	double post = (double)req->post_dur * npt;
	double rest = rtt - post - m->remote_app_ns;
	an_hist_add(&rx->rt_rtt, (uint64_t)rtt);
	an_hist_add(&rx->rt_local_post, (uint64_t)post);
	an_hist_add(&rx->rt_remote_app,
		    m->remote_app_ns > 0 ? (uint64_t)m->remote_app_ns : 0);
	an_hist_add(&rx->rt_nic_wire, rest > 0 ? (uint64_t)rest : 0);
	rx->rt_count++;
}

/* Whether a send answers the peer's last message is decided in the sender's own
 * event order, so the order in which the two traces are read does not matter. */
static void an_rt_send(struct an_qp *qp, uint64_t post_ts, uint64_t post_exit)
{
	struct an_qp *peer = qp->peer;
	if (!peer)
		return;
	if (!qp->rt_msgs) {
		qp->rt_msgs = malloc(AN_RT_N * sizeof(*qp->rt_msgs));
		if (!qp->rt_msgs)
			return;
		for (int i = 0; i < AN_RT_N; i++)
			qp->rt_msgs[i].seq = UINT64_MAX;
	}
	uint64_t seq = qp->rt_send_seq++;
	struct an_rt_msg *m = &qp->rt_msgs[seq % AN_RT_N];
	m->seq = seq;
	m->post_ts = post_ts;
	m->post_dur = post_exit - post_ts;
	m->resp_to = -1;
	m->remote_app_ns = 0;
	if (qp->rt_pending && post_exit >= qp->rt_req_poll_exit) {
		m->resp_to = (int64_t)qp->rt_req_seq;
		m->remote_app_ns = (double)(post_exit - qp->rt_req_poll_exit) *
				   qp->t->mt->ns_per_tick;
		qp->rt_pending = false;
	}
	/* the peer's receive of it may have been read already */
	while (peer->rt_wait.n) {
		struct an_rt_wait *w = rbt_model_ring_at(&peer->rt_wait, 0);
		if (w->seq > seq)
			break;
		uint64_t ws = w->seq, pe = w->poll_exit, rp = w->recv_post_exit;
		rbt_model_ring_drop(&peer->rt_wait, 1);
		if (ws == seq) {
			an_rt_delivered(peer, m, pe, rp);
			break;
		}
	}
}

static void an_rt_recv(struct an_qp *rx, uint64_t poll_exit, uint64_t recv_post_exit)
{
	struct an_qp *tx = rx->peer;
	if (!tx)
		return;
	uint64_t j = rx->rt_recv_seq++;
	rx->rt_pending = true;
	rx->rt_req_poll_exit = poll_exit;
	rx->rt_req_seq = j;
	if (j < tx->rt_send_seq) {
		const struct an_rt_msg *m =
			tx->rt_msgs ? &tx->rt_msgs[j % AN_RT_N] : NULL;
		if (m && m->seq == j)
			an_rt_delivered(rx, m, poll_exit, recv_post_exit);
		return;
	}
	if (rx->rt_wait.n >= AN_RT_MAX)
		rbt_model_ring_drop(&rx->rt_wait, 1);
	struct an_rt_wait *w = rbt_model_ring_push(&rx->rt_wait);
	if (w) {
		w->seq = j;
		w->poll_exit = poll_exit;
		w->recv_post_exit = recv_post_exit;
	}
}

/* A send WR entered its queue: the messages for round trips. */
void an_attr_posted(struct rbt_analyzer *an, struct an_qp *qp, uint64_t post_ts,
		    uint64_t post_exit, const struct rbt_send_wr *wr)
{
	if (an_consumes_recv((int)wr->opcode))
		an_rt_send(qp, post_ts, post_exit);
}

/* ---- errors ---- */

void an_note_error(struct an_qp *qp, const struct rbt_model_comp *c,
		   const struct rbt_model_wr *w)
{
	if (!c->status)
		return;
	if (c->status == IBV_WC_WR_FLUSH_ERR) {
		qp->flushes++;
		return;
	}
	if (qp->err_seen)
		return;
	qp->err_seen = true;
	qp->first_err = *c;
	if (qp->peer) {
		/* the peer's receive queue as the traces show it now */
		const struct rbt_model_qp *pm = qp->peer->m;
		qp->first_err_peer_known = true;
		qp->first_err_peer_rq = pm->srq ? pm->srq->rq.n : pm->rq.n;
		qp->first_err_peer_recvs = qp->peer->recv_wrs;
	}
	if (w && !w->recv) {
		qp->first_err_wr_opcode = w->opcode;
		qp->first_err_wr_bytes = w->bytes;
		qp->first_err_remote_addr = w->remote_addr;
		qp->first_err_rkey = w->rkey;
		qp->first_err_lkey = w->lkey;
		qp->first_err_sge_addr = w->sge_addr;
	} else {
		qp->first_err_wr_opcode = 255;
	}
}

/* A completion joined to its WR (before the WRs are handed over). */
void an_attr_completion(struct rbt_analyzer *an, struct an_qp *qp,
			const struct rbt_model_comp *c, const struct rbt_model_wr *w)
{
	if (an_filter_wr(an, qp, w)) {
		an_note_error(qp, c, w);
		qp->wc_status[c->status < 31 ? c->status : 31]++;
	}
	if (!c->recv)
		return;
	const struct rbt_model_qp *m = qp->m;
	bool xrc = !m->srq && m->type == IBV_QPT_XRC_RECV;
	if (!m->srq && !xrc && m->rq.n == 0) {
		qp->rq_empty = true;
		qp->rq_empty_since = c->poll_exit;
		qp->rq_empty_count++;
	}
	if (!c->status)
		an_rt_recv(qp, c->poll_exit, w->post_exit);
}

/* ---- attribution ---- */

static void an_stream_wr(struct rbt_analyzer *an, struct an_trace *t, struct an_qp *qp,
			 const struct rbt_model_wr *w, const struct rbt_model_comp *c)
{
	for (int i = 0; i < an->n_stream; i++)
		if (an->stream[i]->wr)
			an->stream[i]->wr(an, t, qp, w, c);
}

void an_wr_times(const struct an_trace *t, const struct rbt_model_wr *w,
		 const struct rbt_model_comp *c, struct an_wr_times *x)
{
	memset(x, 0, sizeof(*x));
	if (w->recv) {
		uint64_t poll_exit =
			c->poll_exit > w->post_exit ? c->poll_exit : w->post_exit;
		x->poll_exit = poll_exit;
		x->recv_wait = an_ns(t, (double)(poll_exit - w->post_exit));
		if (c->exact) {
			double comp = c->host;
			if (comp < (double)w->post_ts)
				comp = (double)w->post_ts;
			if (comp > (double)poll_exit)
				comp = (double)poll_exit;
			x->poll = an_ns(t, (double)poll_exit - comp);
		} else {
			uint64_t lo = c->lo > w->post_ts ? c->lo : w->post_ts;
			if (lo > poll_exit)
				lo = poll_exit;
			x->poll_hi = an_ns(t, (double)(poll_exit - lo));
		}
		return;
	}
	uint64_t pe = w->post_exit > w->post_ts ? w->post_exit : w->post_ts;
	uint64_t poll_exit = c->poll_exit > pe ? c->poll_exit : pe;
	x->poll_exit = poll_exit;
	x->post = an_ns(t, (double)w->share);
	x->e2e = an_ns(t, (double)w->share + (double)(poll_exit - pe));
	if (c->exact) {
		double comp = c->host;
		x->outside = comp < (double)w->post_ts || comp > (double)c->poll_exit;
		if (comp < (double)pe)
			comp = (double)pe;
		if (comp > (double)poll_exit)
			comp = (double)poll_exit;
		x->nic = an_ns(t, comp - (double)pe);
		x->poll = an_ns(t, (double)poll_exit - comp);
		return;
	}
	uint64_t lo = c->lo > w->post_ts ? c->lo : w->post_ts;
	if (lo > poll_exit)
		lo = poll_exit;
	x->nic_lo = lo > pe ? an_ns(t, (double)(lo - pe)) : 0;
	x->nic_hi = an_ns(t, (double)(poll_exit - pe));
	x->poll_hi = an_ns(t, (double)(poll_exit - lo));
}

static void an_send_phases(struct an_trace *t, struct an_group *g,
			   const struct rbt_model_wr *w, const struct rbt_model_comp *c,
			   uint32_t n, struct rbt_analyzer_counts *counts)
{
	struct an_wr_times x;
	an_wr_times(t, w, c, &x);
	an_hist_add_n(&g->h[RBT_PHASE_POST], x.post, n);
	an_hist_add_n(&g->h[RBT_PHASE_E2E], x.e2e, n);
	if (c->exact) {
		if (x.outside) {
			counts->nic_outside_bound += n;
			t->nic_outside += n;
		}
		an_hist_add_n(&g->h[RBT_PHASE_NIC], x.nic, n);
		an_hist_add_n(&g->h[RBT_PHASE_POLL], x.poll, n);
		g->exact += n;
		counts->wrs_nic_exact += n;
		return;
	}
	an_hist_add_n(&g->h[RBT_PHASE_NIC_LO], x.nic_lo, n);
	an_hist_add_n(&g->h[RBT_PHASE_NIC_HI], x.nic_hi, n);
	an_hist_add_n(&g->h[RBT_PHASE_POLL_HI], x.poll_hi, n);
	g->bounded += n;
	counts->wrs_bounded += n;
}

static void an_attribute_send(struct rbt_analyzer *an, struct an_trace *t,
			      struct an_qp *qp, const struct rbt_model_wr *w,
			      const struct rbt_model_comp *c, uint32_t n, uint32_t nsig)
{
	struct an_group *g = an_group_get(an, qp, w->opcode, w->bytes);
	an->counts.wrs_completed += n;
	if (!g)
		return;
	g->wrs += n;
	g->bytes += w->bytes * n;
	g->signaled += nsig;
	g->inlined += w->inl * n;
	if (c->status)
		g->errors += n;
	an_send_phases(t, g, w, c, n, &an->counts);
	an_rate_add(&t->rate, rbt_model_aligned_u64(t->mt, (double)c->poll_exit), n,
		    w->bytes * n);
	an_stream_wr(an, t, qp, w, c);
}

static void an_attribute_recv(struct rbt_analyzer *an, struct an_trace *t,
			      struct an_qp *qp, const struct rbt_model_wr *r,
			      const struct rbt_model_comp *c)
{
	struct an_group *g = an_group_get(an, qp, 128, c->byte_len);
	an->counts.recvs_completed++;
	if (!g)
		return;
	g->wrs++;
	g->bytes += c->byte_len;
	if (c->status)
		g->errors++;
	struct an_wr_times x;
	an_wr_times(t, r, c, &x);
	an_hist_add(&g->h[RBT_PHASE_RECV_WAIT], x.recv_wait);
	if (c->exact) {
		an_hist_add(&g->h[RBT_PHASE_RECV_POLL], x.poll);
		g->exact++;
	} else {
		an_hist_add(&g->h[RBT_PHASE_RECV_POLL_HI], x.poll_hi);
		g->bounded++;
	}
	an_rate_add(&t->rate, rbt_model_aligned_u64(t->mt, (double)c->poll_exit), 1,
		    c->byte_len);
	if (an->n_stream) {
		struct rbt_model_wr w = *r;
		w.bytes = c->byte_len;
		an_stream_wr(an, t, qp, &w, c);
	}
}

/* The model's wr_done: a WR completed (c) or outstanding at the end (c NULL). */
void an_attr_done(struct rbt_analyzer *an, struct an_qp *qp, const struct rbt_model_wr *w,
		  const struct rbt_model_comp *c, uint32_t n, uint32_t nsig)
{
	if (an->filt_on && (!qp || !an_filter_wr(an, qp, w)))
		return; /* (an SRQ's receive outstanding at the end has no QP) */
	if (!c) {
		an->counts.outstanding_at_end += n;
		if (w->recv)
			an->counts.recvs_outstanding_at_end += n;
		return;
	}
	if (!qp)
		return;
	if (w->recv)
		an_attribute_recv(an, qp->t, qp, w, c);
	else
		an_attribute_send(an, qp->t, qp, w, c, n, nsig);
}
