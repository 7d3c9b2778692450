/* analyzer_json.c - the JSON sink: the report as one JSON document (schema in
 * docs/report.md), written through the one JSON writer (util/rbt_json.h).
 *
 * Reads the finished analysis only; writes only to the FILE * it is given.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer/analyzer_internal.h"

static void an_json_summary(struct rbt_json *j, const struct an_hist *h)
{
	struct rbt_phase_summary s;
	an_hist_summary(h, &s);
	rbt_json_obj(j);
	rbt_json_ku64(j, "count", s.count);
	rbt_json_kdbl(j, "p50", "%.1f", s.p50);
	rbt_json_kdbl(j, "p90", "%.1f", s.p90);
	rbt_json_kdbl(j, "p99", "%.1f", s.p99);
	rbt_json_kdbl(j, "p999", "%.1f", s.p999);
	rbt_json_kdbl(j, "max", "%.1f", s.max);
	rbt_json_kdbl(j, "mean", "%.1f", s.mean);
	rbt_json_obj_end(j);
}

static void an_json_phases(struct rbt_json *j, const struct an_hist h[RBT_PHASE_COUNT])
{
	rbt_json_obj(j);
	for (int p = 0; p < RBT_PHASE_COUNT; p++) {
		if (!h[p].count)
			continue;
		rbt_json_key(j, an_phase_name[p]);
		an_json_summary(j, &h[p]);
	}
	rbt_json_obj_end(j);
}

static void an_json_hex(struct rbt_json *j, const char *key, uint64_t v)
{
	char buf[24];
	snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)v);
	rbt_json_kstr(j, key, buf);
}

static void an_json_evidence(struct rbt_json *j, const char *ev)
{
	rbt_json_arr(j);
	const char *p = ev;
	while (p && *p) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		char *line = strndup(p, len);
		rbt_json_str(j, line ? line : "");
		free(line);
		p = nl ? nl + 1 : p + len;
	}
	rbt_json_arr_end(j);
}

static double an_frac(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

static void an_json_qp_setup(struct rbt_json *j, const struct an_qp *qp)
{
	const struct rbt_model_qp *m = qp->m;
	rbt_json_key(j, "caps");
	rbt_json_obj(j);
	rbt_json_ku64(j, "max_send_wr", m->max_send_wr);
	rbt_json_ku64(j, "max_recv_wr", m->max_recv_wr);
	rbt_json_ku64(j, "max_inline_data", m->max_inline);
	rbt_json_ku64(j, "sq_sig_all", m->sq_sig_all);
	rbt_json_obj_end(j);
	rbt_json_key(j, "setup");
	rbt_json_obj(j);
	rbt_json_ku64(j, "path_mtu", m->path_mtu);
	rbt_json_ku64(j, "dest_qp_num", m->dest_qpn);
	rbt_json_ku64(j, "rq_psn", m->rq_psn);
	rbt_json_ku64(j, "sq_psn", m->sq_psn);
	rbt_json_ku64(j, "min_rnr_timer", m->min_rnr_timer);
	rbt_json_ku64(j, "timeout", m->timeout);
	rbt_json_ku64(j, "retry_cnt", m->retry_cnt);
	rbt_json_ku64(j, "rnr_retry", m->rnr_retry);
	rbt_json_obj_end(j);
}

static void an_json_qp_history(struct rbt_json *j, const struct an_trace *t,
			       const struct rbt_model_qp *m)
{
	rbt_json_key(j, "history");
	rbt_json_arr(j);
	for (uint32_t i = 0; i < m->n_hist; i++) {
		const struct rbt_model_state_change *h = &m->hist[i];
		rbt_json_obj(j);
		rbt_json_kdbl(j, "time_ns", "%.0f", an_ticks_ns(t, h->ts));
		rbt_json_kstr(j, "from", an_qp_state_name(h->from));
		rbt_json_kstr(j, "to", an_qp_state_name(h->to));
		rbt_json_ku64(j, "attr_mask", h->mask);
		rbt_json_ki64(j, "ret", h->ret);
		rbt_json_kbool(j, "by_error_completion", h->implicit);
		rbt_json_obj_end(j);
	}
	rbt_json_arr_end(j);
}

static void an_json_qp_groups(struct rbt_json *j, const struct an_qp *qp)
{
	rbt_json_key(j, "groups");
	rbt_json_arr(j);
	for (int k = 0; k < 16 * AN_SIZE_CLASSES; k++) {
		const struct an_group *g = qp->groups[k];
		if (!g)
			continue;
		rbt_json_obj(j);
		rbt_json_kstr(j, "opcode", an_wr_opcode_name(g->opcode));
		rbt_json_kstr(j, "size_class", an_size_class_name[g->size_class]);
		rbt_json_ku64(j, "wrs", g->wrs);
		rbt_json_ku64(j, "bytes", g->bytes);
		rbt_json_ku64(j, "errors", g->errors);
		rbt_json_ku64(j, "signaled", g->signaled);
		rbt_json_ku64(j, "inline", g->inlined);
		rbt_json_ku64(j, "nic_exact", g->exact);
		rbt_json_ku64(j, "bounded", g->bounded);
		rbt_json_key(j, "phases");
		an_json_phases(j, g->h);
		rbt_json_obj_end(j);
	}
	rbt_json_arr_end(j);
}

static void an_json_qp_roundtrips(struct rbt_json *j, const struct an_qp *qp)
{
	rbt_json_key(j, "roundtrips");
	if (!qp->rt_count) {
		rbt_json_null(j);
	} else {
		rbt_json_obj(j);
		rbt_json_ku64(j, "count", qp->rt_count);
		rbt_json_key(j, "rtt");
		an_json_summary(j, &qp->rt_rtt);
		rbt_json_key(j, "local_post");
		an_json_summary(j, &qp->rt_local_post);
		rbt_json_key(j, "nic_wire");
		an_json_summary(j, &qp->rt_nic_wire);
		rbt_json_key(j, "remote_app");
		an_json_summary(j, &qp->rt_remote_app);
		rbt_json_obj_end(j);
	}
	if (qp->peer && qp->have_min_in && qp->peer->have_min_in)
		rbt_json_kdbl(j, "peer_clock_offset_ns", "%.1f",
			      (qp->peer->min_in_ns - qp->min_in_ns) / 2);
}

void an_json_peer(struct rbt_json *j, const struct an_qp *qp, const char *qpn_key)
{
	rbt_json_key(j, "peer");
	if (!qp->peer) {
		rbt_json_null(j);
		return;
	}
	rbt_json_obj(j);
	rbt_json_ki64(j, "trace", qp->peer->t->idx);
	rbt_json_ku64(j, qpn_key, qp->peer->m->qpn);
	rbt_json_obj_end(j);
}

static void an_json_qp(struct rbt_json *j, const struct an_trace *t,
		       const struct an_qp *qp)
{
	rbt_json_obj(j);
	rbt_json_ku64(j, "qp_num", qp->m->qpn);
	an_json_hex(j, "handle", qp->m->res.handle);
	rbt_json_kstr(j, "type", an_qp_type_name(qp->m->type));
	rbt_json_kstr(j, "state", an_qp_state_name(qp->m->state));
	an_json_peer(j, qp, "qp_num");
	an_json_qp_setup(j, qp);
	rbt_json_ku64(j, "posts", qp->posts);
	rbt_json_ku64(j, "wrs", qp->post_wrs);
	rbt_json_kdbl(j, "wrs_per_post", "%.3f", an_frac(qp->post_wrs, qp->posts));
	rbt_json_ku64(j, "max_chain", qp->max_chain);
	rbt_json_kdbl(j, "signaled_fraction", "%.4f",
		      an_frac(qp->post_wrs_signaled, qp->post_wrs));
	rbt_json_kdbl(j, "inline_fraction", "%.4f", an_frac(qp->inlined, qp->post_wrs));
	rbt_json_ku64(j, "recv_posts", qp->recv_posts);
	rbt_json_ku64(j, "recv_wrs", qp->recv_wrs);
	rbt_json_ku64(j, "posts_while_busy", qp->posts_busy);
	rbt_json_ku64(j, "errors_flushed", qp->flushes);
	an_json_qp_history(j, t, qp->m);
	an_json_qp_groups(j, qp);
	an_json_qp_roundtrips(j, qp);
	rbt_json_obj_end(j);
}

static void an_json_trace_head(struct rbt_json *j, struct rbt_analyzer *an,
			       struct an_trace *t)
{
	const struct rbt_model_trace *mt = t->mt;
	rbt_json_ki64(j, "index", t->idx);
	rbt_json_kstr(j, "name", mt->name);
	rbt_json_ku64(j, "pid", mt->hdr.pid);
	rbt_json_kstr(j, "host", mt->hdr.host);
	rbt_json_kstr(j, "cmdline", mt->hdr.cmdline);
	rbt_json_ku64(j, "clock_hz", mt->hdr.clock_hz);
	rbt_json_ku64(j, "start_real_ns", mt->hdr.start.real_ns);
	rbt_json_ki64(j, "align_ns", mt->align_ns);
	rbt_json_ku64(j, "events", mt->events);
	rbt_json_kdbl(j, "duration_ns", "%.0f", an_trace_dur_ns(t));
	rbt_json_key(j, "integrity");
	rbt_json_obj(j);
	rbt_json_kbool(j, "finished", !mt->have_stats || mt->finished);
	rbt_json_ku64(j, "bad_chunks", mt->rstats.bad_chunks);
	rbt_json_kbool(j, "truncated", mt->rstats.truncated);
	rbt_json_ku64(j, "lost_events",
		      t->lost_events + mt->rstats.lost_events_in_bad_chunks);
	rbt_json_obj_end(j);
	struct rbt_clock_fit fit;
	rbt_json_key(j, "nic_clock");
	if (rbt_analyzer_clock_fit(an, t->idx, &fit) == 0) {
		rbt_json_obj(j);
		rbt_json_ku64(j, "samples", fit.samples);
		rbt_json_kdbl(j, "ns_per_nic_tick", "%.9f", fit.ns_per_nic_tick);
		rbt_json_kdbl(j, "max_residual_ns", "%.1f", fit.max_residual_ns);
		rbt_json_kdbl(j, "rms_residual_ns", "%.1f", fit.rms_residual_ns);
		rbt_json_obj_end(j);
	} else {
		rbt_json_null(j);
	}
	rbt_json_ku64(j, "posts", t->posts);
	rbt_json_ku64(j, "post_failures", t->post_fail);
	rbt_json_ku64(j, "polls", t->polls);
	rbt_json_ku64(j, "empty_polls", t->empty_polls);
	rbt_json_kdbl(j, "empty_poll_fraction", "%.4f",
		      an_frac(t->empty_polls, t->polls));
	rbt_json_ku64(j, "mr_registrations", t->mr_regs);
	rbt_json_ku64(j, "mr_registrations_during_traffic", t->mr_traffic.regs);
	rbt_json_ku64(j, "mr_deregistrations_during_traffic", t->mr_traffic.deregs);
	rbt_json_ku64(j, "nic_ts_outside_bound", t->nic_outside);
	rbt_json_ku64(j, "nic_ts_unmapped", mt->nic_unmapped);
}

static void an_json_rate(struct rbt_json *j, const struct an_rate *r)
{
	rbt_json_key(j, "rate");
	rbt_json_obj(j);
	rbt_json_ku64(j, "start_ns", r->t0);
	rbt_json_ku64(j, "bin_ns", r->width);
	int last = -1;
	for (int i = 0; i < AN_RATE_BINS; i++)
		if (r->wrs[i])
			last = i;
	for (int s = 0; s < 2; s++) {
		rbt_json_key(j, s ? "bytes" : "wrs");
		rbt_json_arr(j);
		for (int i = 0; i <= last; i++)
			rbt_json_u64(j, s ? r->bytes[i] : r->wrs[i]);
		rbt_json_arr_end(j);
	}
	rbt_json_obj_end(j);
}

static void an_json_cqs(struct rbt_json *j, struct rbt_analyzer *an, struct an_trace *t)
{
	rbt_json_key(j, "cqs");
	rbt_json_arr(j);
	uint32_t pos = 0;
	for (const struct an_cq *cq; (cq = an_cq_next(an, t, &pos));) {
		if (!an_filter_shows_cq(an, cq))
			continue;
		rbt_json_obj(j);
		an_json_hex(j, "handle", cq->m->res.handle);
		rbt_json_ku64(j, "cqe", cq->m->cqe);
		rbt_json_ki64(j, "peak_outstanding", cq->m->peak);
		rbt_json_ku64(j, "capacity", cq->m->capacity);
		rbt_json_ku64(j, "polls", cq->polls);
		rbt_json_ku64(j, "empty_polls", cq->empty_polls);
		rbt_json_ku64(j, "completions", cq->polled_wcs);
		rbt_json_kbool(j, "overrun", cq->overrun);
		rbt_json_obj_end(j);
	}
	rbt_json_arr_end(j);
}

static void an_json_trace(struct rbt_json *j, struct rbt_analyzer *an, struct an_trace *t)
{
	rbt_json_obj(j);
	an_json_trace_head(j, an, t);
	an_json_rate(j, &t->rate);
	struct an_hist h[RBT_PHASE_COUNT];
	an_trace_hists(an, t, NULL, h);
	rbt_json_key(j, "phases");
	an_json_phases(j, h);
	an_hists_free(h);
	rbt_json_key(j, "qps");
	rbt_json_arr(j);
	for (struct an_qp *qp = t->qp_list; qp; qp = qp->next)
		if (an_filter_shows_qp(an, qp))
			an_json_qp(j, t, qp);
	rbt_json_arr_end(j);
	an_json_cqs(j, an, t);
	rbt_json_obj_end(j);
}

static void an_json_findings(struct rbt_json *j, const struct rbt_analyzer *an)
{
	rbt_json_arr(j);
	for (int i = 0; i < an->n_findings; i++) {
		const struct rbt_finding *fd = &an->findings[i].f;
		rbt_json_obj(j);
		rbt_json_kstr(j, "severity", an_sev_name(fd->severity));
		rbt_json_kstr(j, "code", fd->code);
		rbt_json_kstr(j, "title", fd->title);
		rbt_json_key(j, "evidence");
		an_json_evidence(j, fd->evidence);
		rbt_json_kstr(j, "advice", fd->advice);
		rbt_json_ki64(j, "trace", fd->trace);
		rbt_json_ku64(j, "qp_num", fd->qp_num);
		rbt_json_kdbl(j, "time_ns", "%.0f", fd->time_ns);
		rbt_json_obj_end(j);
	}
	rbt_json_arr_end(j);
}

static int an_json_write(struct rbt_analyzer *an, FILE *f)
{
	const struct rbt_analyzer_counts *c = &an->counts;
	struct rbt_json j;
	rbt_json_init(&j, f);
	rbt_json_obj(&j);
	rbt_json_ku64(&j, "rbtrace_report", 1);
	rbt_json_key(&j, "counts");
	rbt_json_obj(&j);
	rbt_json_ku64(&j, "events", c->events);
	rbt_json_ku64(&j, "wrs_completed", c->wrs_completed);
	rbt_json_ku64(&j, "wrs_nic_exact", c->wrs_nic_exact);
	rbt_json_ku64(&j, "wrs_bounded", c->wrs_bounded);
	rbt_json_ku64(&j, "recvs_completed", c->recvs_completed);
	rbt_json_ku64(&j, "unmatched_completions", c->unmatched_completions);
	rbt_json_ku64(&j, "outstanding_at_end", c->outstanding_at_end);
	rbt_json_ku64(&j, "recvs_outstanding_at_end", c->recvs_outstanding_at_end);
	rbt_json_ku64(&j, "nic_outside_bound", c->nic_outside_bound);
	rbt_json_ku64(&j, "peak_tracked_wrs", c->peak_tracked_wrs);
	rbt_json_obj_end(&j);
	an_filter_write_json(an, &j);
	rbt_json_key(&j, "traces");
	rbt_json_arr(&j);
	for (int i = 0; i < an->n_traces; i++)
		if (an_filter_shows_trace(an, an->traces[i]))
			an_json_trace(&j, an, an->traces[i]);
	rbt_json_arr_end(&j);
	an_cm_write_json(an, &j);
	rbt_json_key(&j, "findings");
	an_json_findings(&j, an);
	rbt_json_obj_end(&j);
	fputc('\n', f);
	return ferror(f) ? -EIO : 0;
}

const struct an_sink_ops an_sink_json = {
	.name = "json",
	.write = an_json_write,
};
