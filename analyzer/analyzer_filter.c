/* analyzer_filter.c - zooming in: a time window (--from/--to), QPs (--qp), a process
 * (--pid) and a thread (--thread) select what the report counts and shows (the
 * rules are in rbt_analyzer.h and docs/report.md, "Zooming in").
 *
 * The model is always fed every event: resources, QP states and the post ->
 * completion join never depend on the filter. The analysis asks an_filter*() about
 * each post, poll and WR it would count; the findings are sifted after the
 * diagnosis. Nothing here keeps per-WR state, and nothing here names an output
 * format beyond the two lines every sink shares (the text line, the JSON member).
 */
#include <stdlib.h>
#include <string.h>

#include "analyzer/analyzer_internal.h"

static bool an_filter_has_qp(const struct rbt_analyzer *an, uint32_t qpn)
{
	for (int i = 0; i < an->filt.n_qps; i++)
		if (an->filt.qps[i] == qpn)
			return true;
	return false;
}

static bool an_filter_time(const struct rbt_analyzer *an, const struct an_trace *t,
			   double aligned_ns)
{
	(void)t;
	if (an->filt.has_from && !(aligned_ns >= an->filt.from_ns))
		return false;
	if (an->filt.has_to && !(aligned_ns < an->filt.to_ns))
		return false;
	return true;
}

bool an_filter_slow(const struct rbt_analyzer *an, const struct an_trace *t, uint32_t qpn,
		    uint64_t ts, uint32_t tid)
{
	if (an->filt.has_pid && t->mt->hdr.pid != an->filt.pid)
		return false;
	if (an->filt.has_tid && tid != AN_TID_ANY && tid != an->filt.tid)
		return false;
	if (an->filt.n_qps && qpn != AN_QP_ANY && !an_filter_has_qp(an, qpn))
		return false;
	if (an->filt.has_from || an->filt.has_to)
		return an_filter_time(an, t, rbt_model_aligned_ns(t->mt, (double)ts));
	return true;
}

/* A CQ is selected with --qp when one of the QPs feeding it is. */
static bool an_filter_cq(const struct rbt_analyzer *an, const struct an_cq *cq)
{
	if (!an->filt.n_qps)
		return true;
	for (uint32_t i = 0; i < cq->m->n_qps; i++)
		if (an_filter_has_qp(an, cq->m->qps[i]->qpn))
			return true;
	for (uint32_t i = 0; i < cq->n_senders; i++)
		if (an_filter_has_qp(an, cq->senders[i]->m->qpn))
			return true;
	return false;
}

bool an_filter_event(struct rbt_analyzer *an, struct an_trace *t,
		     const struct rbt_event *ev, struct rbt_model_res *r)
{
	void *u = r ? r->user : NULL;
	switch (ev->type) {
	case RBT_EV_POST_SEND:
	case RBT_EV_POST_RECV:
		if (!u || !r || r->kind != RBT_MODEL_QP)
			return true;
		return an_filter_slow(an, t, ((struct an_qp *)u)->m->qpn, ev->ts,
				      ev->stream);
	case RBT_EV_POST_SRQ_RECV:
		/* counted as a failure only; its WRs are judged one by one */
		return an_filter_slow(an, t, AN_QP_ANY, ev->ts, ev->stream);
	case RBT_EV_POLL_CQ: {
		if (!u || !r || r->kind != RBT_MODEL_CQ)
			return true;
		struct an_cq *cq = u;
		if (an_filter_cq(an, cq) &&
		    an_filter_slow(an, t, AN_QP_ANY, ev->ts, ev->stream))
			return true;
		/* the stall diagnosis follows every poll: a WR of the window may be
		 * polled for after it */
		an_poll_seen(t, ev, cq);
		return false;
	}
	default:
		return true;
	}
}

/* Findings about a selected trace and QP, proved by an event inside the window. */
static bool an_filter_finding(const struct rbt_analyzer *an, const struct rbt_finding *f)
{
	if (!strcmp(f->code, "trace_incomplete"))
		return true; /* about every window of the trace */
	const struct an_trace *t =
		f->trace >= 0 && f->trace < an->n_traces ? an->traces[f->trace] : NULL;
	if (an->filt.has_pid && t && t->mt->hdr.pid != an->filt.pid)
		return false;
	if (an->filt.n_qps && f->qp_num && !an_filter_has_qp(an, f->qp_num))
		return false;
	if (f->time_ns == 0)
		return true; /* a pattern over the selected WRs, no moment of its own */
	return an_filter_time(an, t, rbt_analyzer_finding_timeline_ns(an, f));
}

void an_filter_findings(struct rbt_analyzer *an)
{
	if (!an->filt_on)
		return;
	int keep = 0;
	for (int i = 0; i < an->n_findings; i++) {
		struct an_finding_priv *f = &an->findings[i];
		if (an_filter_finding(an, &f->f)) {
			an->findings[keep++] = *f;
			continue;
		}
		an->filt_findings_out++;
		free(f->title);
		free(f->evidence);
		free(f->advice);
	}
	an->n_findings = keep;
}

double rbt_analyzer_finding_timeline_ns(const struct rbt_analyzer *an,
					const struct rbt_finding *f)
{
	if (f->trace >= 0 && f->trace < an->n_traces && an->traces[f->trace]->mt)
		return f->time_ns + (double)an->traces[f->trace]->mt->align_ns;
	return f->time_ns;
}

int rbt_analyzer_has_qp(const struct rbt_analyzer *an, uint32_t qp_num)
{
	for (int i = 0; i < an->n_traces; i++)
		for (const struct an_qp *qp = an->traces[i]->qp_list; qp; qp = qp->next)
			if (qp->m->qpn == qp_num)
				return 1;
	return 0;
}

bool an_filter_shows_trace(const struct rbt_analyzer *an, const struct an_trace *t)
{
	return !an->filt.has_pid || t->mt->hdr.pid == an->filt.pid;
}

bool an_filter_shows_qp(const struct rbt_analyzer *an, const struct an_qp *qp)
{
	return !an->filt.n_qps || an_filter_has_qp(an, qp->m->qpn);
}

bool an_filter_shows_cq(const struct rbt_analyzer *an, const struct an_cq *cq)
{
	return an_filter_cq(an, cq);
}

void an_filter_write_text(const struct rbt_analyzer *an, FILE *f)
{
	if (!an->filt_on)
		return;
	char a[2][32];
	const struct rbt_analyzer_filter *x = &an->filt;
	fprintf(f, "filter: WRs posted");
	if (x->has_from || x->has_to)
		fprintf(f, " in [%s, %s)",
			x->has_from ? an_fmt_ns(a[0], 32, x->from_ns) : "start",
			x->has_to ? an_fmt_ns(a[1], 32, x->to_ns) : "end");
	if (x->n_qps) {
		fprintf(f, " on QP");
		for (int i = 0; i < x->n_qps; i++)
			fprintf(f, "%s0x%x", i ? "," : " ", x->qps[i]);
	}
	if (x->has_pid)
		fprintf(f, " by pid %u", x->pid);
	if (x->has_tid)
		fprintf(f, " by thread %u", x->tid);
	fprintf(f, "; %llu finding%s outside it not shown\n\n",
		(unsigned long long)an->filt_findings_out,
		an->filt_findings_out == 1 ? "" : "s");
}

void an_filter_write_json(const struct rbt_analyzer *an, struct rbt_json *j)
{
	if (!an->filt_on)
		return;
	const struct rbt_analyzer_filter *x = &an->filt;
	rbt_json_key(j, "filter");
	rbt_json_obj(j);
	rbt_json_key(j, "from_ns");
	if (x->has_from)
		rbt_json_dbl(j, "%.0f", x->from_ns);
	else
		rbt_json_null(j);
	rbt_json_key(j, "to_ns");
	if (x->has_to)
		rbt_json_dbl(j, "%.0f", x->to_ns);
	else
		rbt_json_null(j);
	rbt_json_key(j, "qps");
	if (x->n_qps) {
		rbt_json_arr(j);
		for (int i = 0; i < x->n_qps; i++)
			rbt_json_u64(j, x->qps[i]);
		rbt_json_arr_end(j);
	} else {
		rbt_json_null(j);
	}
	rbt_json_key(j, "pid");
	if (x->has_pid)
		rbt_json_u64(j, x->pid);
	else
		rbt_json_null(j);
	rbt_json_key(j, "thread");
	if (x->has_tid)
		rbt_json_u64(j, x->tid);
	else
		rbt_json_null(j);
	rbt_json_ku64(j, "findings_outside", an->filt_findings_out);
	rbt_json_obj_end(j);
}
