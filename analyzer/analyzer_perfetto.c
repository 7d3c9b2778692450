/* analyzer_perfetto.c - the Perfetto timeline in Perfetto's own protobuf trace
 * format (a Trace of TracePackets), a streaming sink: written while the events are
 * analysed; what it keeps is sized by the tracks and the WRs outstanding, never by
 * the trace's length. The field numbers are those of Perfetto's published .proto
 * files (trace_packet, track_event, track_descriptor, counter_descriptor,
 * interned_data, clock_snapshot, debug_annotation); docs/report.md describes the
 * tracks and tests/perfetto_decode.py decodes it back.
 *
 * Encoding, chosen for size (docs/report.md has the bytes per WR measured):
 * - packet sequences: 1 holds the track descriptors and the few events of the whole
 *   run (findings, aggregated slices, rates) with absolute BOOTTIME timestamps; each
 *   recording thread has one for its verbs calls and each QP one for its WRs, both
 *   with a sequence-scoped incremental clock (a packet's timestamp is the delta to the
 *   previous one; one that would go back is written absolute on BOOTTIME), a default
 *   track, and names interned on first use (InternedData in the same packet).
 * - a WR is a slice on a lane of its QP from its post to the return of the poll that
 *   handed its completion (lanes are child tracks of one name, merged by the UI into
 *   one; a lane is reused only once its slice ended); the end carries the phase the
 *   slice does not show (NIC time or its lower bound) and, when not success, the
 *   status. The QP's outstanding sends / posted receives and its CQs' expected CQEs
 *   ride on the WR events as extra counter values (the sequence's default counter
 *   tracks), so a counter sample costs a few bytes.
 * - above perfetto_max_wrs WRs, those outside the detail window are aggregated per QP
 *   and time bin into one slice (count, bytes, p50/p99 end to end), with the counters
 *   sampled per bin.
 *
 * This file is the sink (tracks, lanes, the detail rule, aggregation);
 * analyzer_perfetto_enc.c is the encoding it writes through (strings, interned
 * names, packets, events, track descriptors).
 *
 * Never trusts a time: a damaged trace's times are clamped, and slices on one track
 * never overlap (a verbs call starting inside the previous one is cut).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer/analyzer_perfetto_int.h"

/* ---- the state of traces, threads, QPs, CQs ---- */

static struct an_pf_proc *pf_proc(struct an_pf *pf, const struct an_trace *t)
{
	return t->idx < pf->n_procs ? &pf->procs[t->idx] : NULL;
}

static uint64_t pf_ns(const struct an_trace *t, double ticks)
{
	return rbt_model_aligned_u64(t->mt, ticks);
}

static struct an_pf_ctr *pf_cq_ctr(struct an_pf *pf, struct an_trace *t, struct an_cq *cq)
{
	if (!cq)
		return NULL;
	if (!cq->pf) {
		struct an_pf_ctr *c = calloc(1, sizeof(*c));
		if (!c || rbt_grow(&pf->cq_ctrs, &pf->cap_cq_ctrs, pf->n_cq_ctrs + 1,
				   sizeof(*pf->cq_ctrs), 16, 0)) {
			free(c);
			return NULL;
		}
		pf->cq_ctrs[pf->n_cq_ctrs++] = c;
		char name[96];
		snprintf(name, sizeof(name), "CQ 0x%llx CQEs expected",
			 (unsigned long long)cq->m->res.handle);
		struct an_pf_proc *p = pf_proc(pf, t);
		c->uuid = an_pf_track(pf, p ? p->uuid : 0, name, 1);
		c->described = true;
		cq->pf = c;
	}
	cq->pf->cur = cq->m->outstanding;
	return cq->pf;
}

static struct an_pf_qp *pf_qp(struct an_pf *pf, struct an_trace *t, struct an_qp *qp)
{
	if (qp->pf)
		return qp->pf;
	struct an_pf_qp *q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	q->qp = qp;
	char name[96];
	const char *type = an_qp_type_name(qp->m->type);
	snprintf(name, sizeof(name), "QP 0x%x %s", qp->m->qpn, type);
	struct an_pf_proc *p = pf_proc(pf, t);
	q->uuid = an_pf_track(pf, p ? p->uuid : 0, name, 0);
	q->out[0].uuid = pf->next_uuid++; /* described when first used */
	q->out[1].uuid = pf->next_uuid++;
	q->next = pf->qps;
	pf->qps = q;
	qp->pf = q;
	return q;
}

static void pf_ctr_describe(struct an_pf *pf, struct an_pf_qp *q, int kind)
{
	struct an_pf_ctr *c = &q->out[kind];
	if (c->described)
		return;
	c->described = true;
	char name[96];
	snprintf(name, sizeof(name), "QP 0x%x %s", q->qp->m->qpn,
		 kind ? "receives posted" : "sends outstanding");
	struct an_pb *pb = &pf->pb;
	an_pf_packet(pf, &pf->global, UINT64_MAX);
	an_pb_begin(pb, F_TP_TRACK_DESC);
	an_pb_varint(pb, F_TD_UUID, c->uuid);
	an_pb_varint(pb, F_TD_PARENT, q->uuid);
	an_pf_str(pb, F_TD_NAME, name);
	an_pb_begin(pb, F_TD_COUNTER);
	an_pb_varint(pb, F_CD_UNIT, UNIT_COUNT);
	an_pb_end(pb);
	an_pb_end(pb);
	an_pf_packet_end(pf);
}

/* A lane of kind (0 sends, 1 receives) free for a slice from s_ns on: one whose
 * last slice ended before it; -1 when the QP has PF_MAX_LANES busy. */
static int pf_lane(struct an_pf *pf, struct an_pf_qp *q, int kind, uint64_t s_ns)
{
	uint32_t n = q->n_lanes[kind];
	for (uint32_t i = 0; i < n; i++)
		if (!q->lanes[kind][i].open &&
		    (!q->lanes[kind][i].used || q->lanes[kind][i].end_ns < s_ns))
			return (int)i;
	if (n >= PF_MAX_LANES)
		return -1;
	struct an_pf_lane *l = realloc(q->lanes[kind], (n + 1) * sizeof(*l));
	if (!l)
		return -1;
	q->lanes[kind] = l;
	l[n].uuid = an_pf_track(pf, q->uuid, kind ? "receives" : "sends", 0);
	l[n].end_ns = 0;
	l[n].open = l[n].used = false;
	q->n_lanes[kind] = n + 1;
	return (int)n;
}

/* The QP's sequence, started on its first WR event. */
static struct an_pf_seq *pf_qp_seq(struct an_pf *pf, struct an_pf_qp *q, int kind,
				   uint64_t ns)
{
	if (!q->seq.started) {
		int lane = pf_lane(pf, q, kind, ns);
		pf_ctr_describe(pf, q, 0);
		struct an_pf_ctr *sc = pf_cq_ctr(pf, q->qp->t, q->qp->scq);
		struct an_pf_ctr *rc = pf_cq_ctr(pf, q->qp->t, q->qp->rcq);
		q->vsc = sc;
		q->vrc = rc != sc ? rc : NULL;
		uint64_t ctrs[4];
		int n = 0;
		ctrs[n++] = q->out[0].uuid;
		ctrs[n++] = sc ? sc->uuid : q->out[0].uuid;
		if (q->vrc)
			ctrs[n++] = q->vrc->uuid;
		ctrs[n++] = q->out[1].uuid;
		an_pf_seq_start(pf, &q->seq, ns,
				lane >= 0 ? q->lanes[kind][lane].uuid : q->uuid, ctrs, n);
	}
	return &q->seq;
}

static bool pf_dirty(const struct an_pf_ctr *c)
{
	return c && (!c->any_sent || c->cur != c->sent);
}

static int64_t pf_take(struct an_pf_ctr *c)
{
	c->sent = c->cur;
	c->any_sent = true;
	return c->cur;
}

/* The counter values riding on a WR event of q, in the order of the sequence's
 * defaults: the sends outstanding always; the CQs' expected CQEs when one changed
 * since last sent; the receives posted on a receive's event (or to fill the list). */
static void pf_wr_vals(struct an_pf *pf, struct an_pf_qp *q, int kind, struct pf_ev *e)
{
	pf_cq_ctr(pf, q->qp->t, q->qp->scq); /* refresh their values */
	pf_cq_ctr(pf, q->qp->t, q->qp->rcq);
	bool cq = pf_dirty(q->vsc) || pf_dirty(q->vrc);
	bool rq = kind || (q->out[1].described && pf_dirty(&q->out[1]));
	e->n_vals = 0;
	e->vals[e->n_vals++] = pf_take(&q->out[0]);
	if (!cq && !rq)
		return;
	e->vals[e->n_vals++] = q->vsc ? pf_take(q->vsc) : q->out[0].cur;
	if (q->vrc)
		e->vals[e->n_vals++] = pf_take(q->vrc);
	if (!rq)
		return;
	pf_ctr_describe(pf, q, 1);
	e->vals[e->n_vals++] = pf_take(&q->out[1]);
}

/* ---- the detail rule ---- */

static bool pf_detail(struct an_pf *pf, uint64_t ns)
{
	if (pf->all_detail)
		return true;
	if (pf->window)
		return ns >= pf->win_from && ns < pf->win_to &&
		       pf->detailed < pf->max_wrs;
	return pf->detailed < pf->max_wrs;
}

/* ---- aggregated bins ---- */

static void pf_agg_flush(struct an_pf *pf, struct an_pf_qp *q)
{
	if (!q->agg_any)
		return;
	q->agg_any = false;
	uint64_t s = q->agg_bin * pf->bin_ns;
	char name[64];
	snprintf(name, sizeof(name), "%llu WRs", (unsigned long long)q->agg_wrs);
	struct pf_ev b = { .type = T_BEGIN, .track = q->uuid, .name_s = name };
	an_pf_event(pf, &pf->global, s, &b);
	struct pf_ev e = {
		.type = T_END,
		.track = q->uuid,
		.n_args = 5,
		.args = { { .name_s = "wrs", .u = q->agg_wrs },
			  { .name_s = "bytes", .u = q->agg_bytes },
			  { .name_s = "p50_ns",
			    .u = (uint64_t)an_hist_quantile(&q->agg_e2e, 0.5) },
			  { .name_s = "p99_ns",
			    .u = (uint64_t)an_hist_quantile(&q->agg_e2e, 0.99) },
			  { .name_s = "errors", .u = q->agg_errors } },
	};
	an_pf_event(pf, &pf->global, s + pf->bin_ns, &e);
	an_hist_free(&q->agg_e2e);
	memset(&q->agg_e2e, 0, sizeof(q->agg_e2e));
	/* the counters, sampled once per bin while aggregated */
	for (int k = 0; k < 2; k++) {
		if (k == 0 || q->out[1].cur)
			pf_ctr_describe(pf, q, k);
		if (q->out[k].described && pf_dirty(&q->out[k]))
			an_pf_counter(pf, &q->out[k], s + pf->bin_ns);
	}
	struct an_cq *cqs[2] = { q->qp->scq, q->qp->rcq };
	for (int k = 0; k < 2; k++) {
		struct an_pf_ctr *c = cqs[k] ? cqs[k]->pf : NULL;
		if (pf_dirty(c))
			an_pf_counter(pf, c, s + pf->bin_ns);
	}
}

static void pf_agg_add(struct an_pf *pf, struct an_pf_qp *q, uint64_t end_ns,
		       uint64_t e2e, uint64_t bytes, bool err)
{
	uint64_t bin = end_ns / pf->bin_ns;
	if (q->agg_any && bin != q->agg_bin)
		pf_agg_flush(pf, q);
	if (!q->agg_any) {
		q->agg_any = true;
		q->agg_bin = bin;
		q->agg_wrs = q->agg_bytes = q->agg_errors = 0;
	}
	q->agg_wrs++;
	q->agg_bytes += bytes;
	q->agg_errors += err;
	an_hist_add(&q->agg_e2e, e2e);
}

static void pf_rate_flush(struct an_pf *pf, struct an_pf_proc *p)
{
	if (!p->rate_any)
		return;
	struct pf_ev e = { .type = T_COUNTER,
			   .track = p->rate.uuid,
			   .counter = true,
			   .dbl = true,
			   .dv = (double)p->rate_wrs * 1e9 / (double)pf->bin_ns };
	an_pf_event(pf, &pf->global, p->rate_bin * pf->bin_ns, &e);
	p->rate_any = false;
}

static void pf_rate_add(struct an_pf *pf, struct an_pf_proc *p, uint64_t ns)
{
	uint64_t bin = ns / pf->bin_ns;
	if (p->rate_any && bin != p->rate_bin) {
		uint64_t last = p->rate_bin;
		pf_rate_flush(pf, p);
		if (bin > last + 1) { /* the rate fell to zero in between */
			struct pf_ev z = { .type = T_COUNTER,
					   .track = p->rate.uuid,
					   .counter = true,
					   .dbl = true };
			an_pf_event(pf, &pf->global, (last + 1) * pf->bin_ns, &z);
		}
	}
	if (!p->rate_any) {
		p->rate_any = true;
		p->rate_bin = bin;
		p->rate_wrs = 0;
	}
	p->rate_wrs++;
}

/* ---- the sink ---- */

static void pf_begin(struct rbt_analyzer *an)
{
	struct an_pf *pf = calloc(1, sizeof(*pf));
	an->pft = pf;
	if (!pf)
		return;
	pf->f = an->opts.perfetto;
	pf->next_uuid = 1;
	pf->global.id = 1;
	pf->next_seq = 2;
	pf->max_wrs = an->opts.perfetto_max_wrs ? an->opts.perfetto_max_wrs
						: PF_DEFAULT_MAX_WRS;
	pf->bin_ns = (an->opts.perfetto_bin_us ? an->opts.perfetto_bin_us : 1000) * 1000;
	pf->all_detail = an->posted_wrs && an->posted_wrs <= pf->max_wrs;
	if (an->opts.perfetto_detail) {
		double a = an->opts.perfetto_detail_from_ms * 1e6,
		       b = an->opts.perfetto_detail_to_ms * 1e6;
		pf->window = true;
		pf->win_from = a > 0 ? (uint64_t)a : 0;
		pf->win_to = b > 0 ? (b < 9e18 ? (uint64_t)b : UINT64_MAX) : 0;
	}
	/* the names of every WR's events first: ids below 128 are one byte */
	pf->id_post = an_pf_name(pf, "ibv_post_send");
	pf->id_verbs = an_pf_name(pf, "verbs");
	pf->id_wr = an_pf_name(pf, "wr");
	pf->id_poll = an_pf_name(pf, "ibv_poll_cq");
	pf->id_wcs = an_pf_name(pf, "wcs");
	pf->id_nic = an_pf_name(pf, "nic_ns");
	pf->id_nic_min = an_pf_name(pf, "nic_min_ns");
	pf->id_poll_ns = an_pf_name(pf, "poll_ns");
	pf->id_status = an_pf_name(pf, "status");
	pf->id_bytes = an_pf_name(pf, "bytes");
	pf->id_args = an_pf_name(pf, "args");
	pf->procs = calloc(an->n_traces ? an->n_traces : 1, sizeof(*pf->procs));
	if (!pf->procs) {
		pf->err = -ENOMEM;
		return;
	}
	pf->n_procs = an->n_traces;
	for (int i = 0; i < an->n_traces; i++) {
		const struct an_trace *t = an->traces[i];
		struct an_pf_proc *p = &pf->procs[i];
		p->pid = t->mt->hdr.pid ? t->mt->hdr.pid : (uint32_t)t->idx + 1;
		p->uuid = pf->next_uuid++;
		char name[512];
		snprintf(name, sizeof(name), "%s (pid %u) %s", t->mt->name,
			 t->mt->hdr.pid, t->mt->hdr.cmdline);
		struct an_pb *pb = &pf->pb;
		an_pf_packet(pf, &pf->global, UINT64_MAX);
		an_pb_begin(pb, F_TP_TRACK_DESC);
		an_pb_varint(pb, F_TD_UUID, p->uuid);
		an_pb_begin(pb, F_TD_PROCESS);
		an_pb_varint(pb, F_PD_PID, p->pid);
		an_pf_str(pb, F_PD_NAME, name);
		an_pb_end(pb);
		an_pb_end(pb);
		an_pf_packet_end(pf);
		p->rate.uuid = an_pf_track(pf, p->uuid, "WRs completed per second", 2);
	}
}

static void pf_thread(struct rbt_analyzer *an, struct an_trace *t, struct an_thread *th)
{
	struct an_pf *pf = an->pft;
	struct an_pf_proc *p = pf ? pf_proc(pf, t) : NULL;
	if (!p)
		return;
	if (!th->pf) {
		th->pf = calloc(1, sizeof(*th->pf));
		if (!th->pf)
			return;
		th->pf->track = pf->next_uuid++;
		th->pf->next_alloc = pf->seqs;
		pf->seqs = th->pf;
	}
	char name[300];
	snprintf(name, sizeof(name), "thread %u%s%s", th->m->tid, th->m->name ? " " : "",
		 th->m->name ? th->m->name : "");
	struct an_pb *pb = &pf->pb;
	an_pf_packet(pf, &pf->global, UINT64_MAX);
	an_pb_begin(pb, F_TP_TRACK_DESC);
	an_pb_varint(pb, F_TD_UUID, th->pf->track);
	an_pb_varint(pb, F_TD_PARENT, p->uuid);
	an_pb_begin(pb, F_TD_THREAD);
	an_pb_varint(pb, F_THD_PID, p->pid);
	an_pb_varint(pb, F_THD_TID, th->m->tid);
	an_pf_str(pb, F_THD_NAME, name);
	an_pb_end(pb);
	an_pb_end(pb);
	an_pf_packet_end(pf);
}

static void pf_call(struct rbt_analyzer *an, struct an_trace *t, uint32_t tid,
		    const char *name, uint64_t ts, uint64_t ts_exit, const char *args)
{
	struct an_pf *pf = an->pft;
	struct an_thread *th = an_thread_get(an, t, tid);
	if (!pf || !th || !th->pf)
		return;
	uint64_t s = pf_ns(t, (double)ts), e = pf_ns(t, (double)ts_exit);
	if (!pf_detail(pf, s))
		return;
	struct an_pf_seq *q = th->pf;
	if (!q->started)
		an_pf_seq_start(pf, q, s, q->track, NULL, 0);
	if (s < q->call_end) { /* a damaged trace: calls of a thread never overlap */
		if (e <= q->call_end)
			return;
		s = q->call_end;
	}
	if (e < s)
		e = s;
	struct pf_ev b = { .type = T_BEGIN,
			   .name = an_pf_name(pf, name),
			   .cat = pf->id_verbs };
	if (!b.name)
		b.name_s = name;
	if (args) {
		unsigned wcs;
		if (sscanf(args, "{\"wcs\":%u}", &wcs) == 1)
			b.args[0] = (struct pf_arg){ .name = pf->id_wcs, .u = wcs };
		else
			b.args[0] = (struct pf_arg){ .name = pf->id_args, .s = args };
		b.n_args = 1;
	}
	an_pf_event(pf, q, s, &b);
	struct pf_ev en = { .type = T_END };
	an_pf_event(pf, q, e, &en);
	q->call_end = e;
}

static const char *pf_wr_name(char *buf, size_t n, const struct rbt_model_wr *w)
{
	if (w->recv)
		return "RECV";
	snprintf(buf, n, "%s %llu B", an_wr_opcode_name(w->opcode),
		 (unsigned long long)w->bytes);
	return buf;
}

/* The begin of a WR's slice on a free lane; its lane + 1, 0 when none. */
static uint64_t pf_wr_begin(struct an_pf *pf, struct an_pf_qp *q,
			    const struct rbt_model_wr *w, uint64_t s)
{
	int kind = w->recv ? 1 : 0;
	struct an_pf_seq *seq = pf_qp_seq(pf, q, kind, s);
	int lane = pf_lane(pf, q, kind, s);
	if (lane < 0)
		return 0;
	q->lanes[kind][lane].open = q->lanes[kind][lane].used = true;
	char buf[64];
	const char *name = pf_wr_name(buf, sizeof(buf), w);
	struct pf_ev b = { .type = T_BEGIN,
			   .track = q->lanes[kind][lane].uuid,
			   .name = an_pf_name(pf, name),
			   .cat = pf->id_wr };
	if (!b.name) {
		b.name = an_pf_name(pf, an_wr_opcode_name(w->opcode));
		if (!b.name)
			b.name_s = name;
	}
	pf_wr_vals(pf, q, kind, &b);
	an_pf_event(pf, seq, s, &b);
	return (uint64_t)lane + 1;
}

static void pf_wr_posted(struct rbt_analyzer *an, struct an_trace *t, struct an_qp *qp,
			 struct rbt_model_wr *w)
{
	struct an_pf *pf = an->pft;
	if (!pf)
		return;
	if (!qp) { /* an SRQ's receive: its slice is written once it has a QP */
		w->user = UINT64_MAX;
		return;
	}
	struct an_pf_qp *q = pf_qp(pf, t, qp);
	if (!q)
		return;
	int kind = w->recv ? 1 : 0;
	q->out[kind].cur++;
	uint64_t s = pf_ns(t, (double)w->post_ts);
	w->user = 0;
	if (!pf_detail(pf, s))
		return;
	pf->detailed++;
	w->user = pf_wr_begin(pf, q, w, s);
}

static void pf_wr(struct rbt_analyzer *an, struct an_trace *t, struct an_qp *qp,
		  const struct rbt_model_wr *w, const struct rbt_model_comp *c)
{
	struct an_pf *pf = an->pft;
	struct an_pf_qp *q = pf ? pf_qp(pf, t, qp) : NULL;
	if (!q)
		return;
	int kind = w->recv ? 1 : 0;
	uint64_t user = w->user;
	uint64_t s = pf_ns(t, (double)w->post_ts);
	if (user == UINT64_MAX) { /* an SRQ's receive: decided now */
		user = 0;
		if (pf_detail(pf, s)) {
			pf->detailed++;
			q->out[kind].cur++; /* it was posted, for its own begin */
			user = pf_wr_begin(pf, q, w, s);
			q->out[kind].cur--;
		}
	} else if (q->out[kind].cur > 0) {
		q->out[kind].cur--;
	}
	struct an_wr_times x;
	an_wr_times(t, w, c, &x);
	uint64_t e = pf_ns(t, (double)x.poll_exit);
	if (e < s)
		e = s;
	struct an_pf_proc *p = pf_proc(pf, t);
	if (p)
		pf_rate_add(pf, p, e);
	if (!user || user > q->n_lanes[kind]) {
		pf_cq_ctr(pf, t, kind ? qp->rcq : qp->scq);
		pf_agg_add(pf, q, e, kind ? x.recv_wait : x.e2e, w->bytes,
			   c->status != 0);
		return;
	}
	struct an_pf_lane *l = &q->lanes[kind][user - 1];
	l->open = false;
	l->end_ns = e;
	struct pf_ev en = { .type = T_END, .track = l->uuid };
	if (kind) {
		en.args[en.n_args++] =
			(struct pf_arg){ .name = pf->id_bytes, .u = w->bytes };
		if (c->exact)
			en.args[en.n_args++] =
				(struct pf_arg){ .name = pf->id_poll_ns, .u = x.poll };
	} else if (c->exact) {
		en.args[en.n_args++] = (struct pf_arg){ .name = pf->id_nic, .u = x.nic };
	} else {
		en.args[en.n_args++] =
			(struct pf_arg){ .name = pf->id_nic_min, .u = x.nic_lo };
	}
	if (c->status)
		en.args[en.n_args++] =
			(struct pf_arg){ .name = pf->id_status,
					 .s = an_wc_status_name(c->status) };
	pf_wr_vals(pf, q, kind, &en);
	an_pf_event(pf, pf_qp_seq(pf, q, kind, e), e, &en);
}

static void pf_end(struct rbt_analyzer *an)
{
	struct an_pf *pf = an->pft;
	if (!pf)
		return;
	for (struct an_pf_qp *q = pf->qps; q; q = q->next)
		pf_agg_flush(pf, q);
	for (int i = 0; i < pf->n_procs; i++)
		pf_rate_flush(pf, &pf->procs[i]);
	for (int i = 0; i < an->n_findings; i++) {
		const struct rbt_finding *fd = &an->findings[i].f;
		int ti = fd->trace >= 0 && fd->trace < pf->n_procs ? fd->trace : 0;
		if (!pf->n_procs)
			break;
		const struct an_trace *t = an->traces[ti];
		double ns = fd->time_ns + (double)t->mt->align_ns;
		struct pf_ev e = {
			.type = T_INSTANT,
			.track = pf->procs[ti].uuid,
			.name_s = fd->code,
			.n_args = 2,
			.args = { { .name_s = "severity",
				    .s = an_sev_name(fd->severity) },
				  { .name_s = "title", .s = fd->title } },
		};
		/* a damaged trace's clock can put it past any time: saturated */
		an_pf_event(pf, &pf->global,
			    !(ns > 0)	   ? 0
			    : ns >= 1.8e19 ? UINT64_MAX
					   : (uint64_t)ns,
			    &e);
	}
	int err = an_pb_flush(&pf->pb, pf->f);
	if (err && !pf->err)
		pf->err = err;
	if (fflush(pf->f) && !pf->err)
		pf->err = -EIO;
}

static void pf_free(struct rbt_analyzer *an)
{
	struct an_pf *pf = an->pft;
	if (!pf)
		return;
	an_pb_free(&pf->pb);
	while (pf->qps) {
		struct an_pf_qp *q = pf->qps;
		pf->qps = q->next;
		q->qp->pf = NULL;
		free(q->lanes[0]);
		free(q->lanes[1]);
		free(q->seq.defined);
		an_hist_free(&q->agg_e2e);
		free(q);
	}
	while (pf->seqs) {
		struct an_pf_seq *s = pf->seqs;
		pf->seqs = s->next_alloc;
		free(s->defined);
		free(s);
	}
	for (uint32_t i = 0; i < pf->n_cq_ctrs; i++)
		free(pf->cq_ctrs[i]);
	free(pf->cq_ctrs);
	for (uint32_t i = 0; i < pf->n_names; i++)
		free(pf->names[i]);
	free(pf->names);
	free(pf->hash);
	free(pf->global.defined);
	free(pf->procs);
	free(pf);
	an->pft = NULL;
}

int an_pf_count_wrs(const char *const *paths, int n, uint64_t *out)
{
	uint64_t total = 0;
	for (int i = 0; i < n; i++) {
		struct rbt_reader *r;
		int ret = rbt_reader_open(paths[i], &r);
		if (ret)
			return ret;
		const struct rbt_event *ev;
		while ((ret = rbt_reader_next(r, &ev)) == 1)
			if (ev->type == RBT_EV_POST_SEND ||
			    ev->type == RBT_EV_POST_RECV ||
			    ev->type == RBT_EV_POST_SRQ_RECV)
				total += rbt_model_posted(ev);
		rbt_reader_close(r);
		if (ret < 0)
			return ret;
	}
	*out = total;
	return 0;
}

int an_pf_status(const struct rbt_analyzer *an)
{
	return an->pft ? an->pft->err : 0;
}

const struct an_sink_ops an_sink_perfetto = {
	.name = "perfetto",
	.per_wr = true,
	.begin = pf_begin,
	.thread = pf_thread,
	.call = pf_call,
	.wr_posted = pf_wr_posted,
	.wr = pf_wr,
	.end = pf_end,
	.free = pf_free,
};
