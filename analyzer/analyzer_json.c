/* analyzer_json.c - the JSON sink: the report as one JSON document (schema in
 * docs/report.md), strings escaped by the one rule of util/rbt_json.h.
 *
 * Reads the finished analysis only; writes only to the FILE * it is given.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "analyzer/analyzer_internal.h"

static void an_json_summary(FILE *f, const struct an_hist *h)
{
	struct rbt_phase_summary s;
	an_hist_summary(h, &s);
	fprintf(f,
		"{\"count\":%llu,\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"p999\":%.1f,"
		"\"max\":%.1f,\"mean\":%.1f}",
		(unsigned long long)s.count, s.p50, s.p90, s.p99, s.p999, s.max, s.mean);
}

static void an_json_phases(FILE *f, const struct an_hist h[RBT_PHASE_COUNT])
{
	fputc('{', f);
	bool first = true;
	for (int p = 0; p < RBT_PHASE_COUNT; p++) {
		if (!h[p].count)
			continue;
		fprintf(f, "%s\"%s\":", first ? "" : ",", an_phase_name[p]);
		an_json_summary(f, &h[p]);
		first = false;
	}
	fputc('}', f);
}

static void an_json_evidence(FILE *f, const char *ev)
{
	fputc('[', f);
	bool first = true;
	const char *p = ev;
	while (p && *p) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		char *line = strndup(p, len);
		if (!first)
			fputc(',', f);
		rbt_json_fput_str(f, line);
		free(line);
		first = false;
		p = nl ? nl + 1 : p + len;
	}
	fputc(']', f);
}

static void an_json_qp(FILE *f, const struct an_trace *t, const struct an_qp *qp)
{
	fprintf(f,
		"{\"qp_num\":%u,\"handle\":\"0x%llx\",\"type\":\"%s\",\"state\":\"%s\",",
		qp->m->qpn, (unsigned long long)qp->m->res.handle,
		an_qp_type_name(qp->m->type), an_qp_state_name(qp->m->state));
	if (qp->peer)
		fprintf(f, "\"peer\":{\"trace\":%d,\"qp_num\":%u},", qp->peer->t->idx,
			qp->peer->m->qpn);
	else
		fprintf(f, "\"peer\":null,");
	fprintf(f,
		"\"caps\":{\"max_send_wr\":%llu,\"max_recv_wr\":%llu,\"max_inline_data\":"
		"%llu,"
		"\"sq_sig_all\":%llu},",
		(unsigned long long)qp->m->max_send_wr,
		(unsigned long long)qp->m->max_recv_wr,
		(unsigned long long)qp->m->max_inline,
		(unsigned long long)qp->m->sq_sig_all);
	fprintf(f,
		"\"setup\":{\"path_mtu\":%llu,\"dest_qp_num\":%llu,\"rq_psn\":%llu,\"sq_"
		"psn\":%llu,"
		"\"min_rnr_timer\":%llu,\"timeout\":%llu,\"retry_cnt\":%llu,\"rnr_"
		"retry\":%llu},",
		(unsigned long long)qp->m->path_mtu, (unsigned long long)qp->m->dest_qpn,
		(unsigned long long)qp->m->rq_psn, (unsigned long long)qp->m->sq_psn,
		(unsigned long long)qp->m->min_rnr_timer,
		(unsigned long long)qp->m->timeout, (unsigned long long)qp->m->retry_cnt,
		(unsigned long long)qp->m->rnr_retry);
	fprintf(f,
		"\"posts\":%llu,\"wrs\":%llu,\"wrs_per_post\":%.3f,\"max_chain\":%llu,"
		"\"signaled_fraction\":%.4f,\"inline_fraction\":%.4f,\"recv_posts\":%llu,"
		"\"recv_wrs\":%llu,\"posts_while_busy\":%llu,\"errors_flushed\":%llu,",
		(unsigned long long)qp->posts, (unsigned long long)qp->post_wrs,
		qp->posts ? (double)qp->post_wrs / (double)qp->posts : 0,
		(unsigned long long)qp->max_chain,
		qp->post_wrs ? (double)qp->post_wrs_signaled / (double)qp->post_wrs : 0,
		qp->post_wrs ? (double)qp->inlined / (double)qp->post_wrs : 0,
		(unsigned long long)qp->recv_posts, (unsigned long long)qp->recv_wrs,
		(unsigned long long)qp->posts_busy, (unsigned long long)qp->flushes);
	fprintf(f, "\"history\":[");
	for (uint32_t i = 0; i < qp->m->n_hist; i++)
		fprintf(f,
			"%s{\"time_ns\":%.0f,\"from\":\"%s\",\"to\":\"%s\",\"attr_mask\":"
			"%llu,"
			"\"ret\":%lld,\"by_error_completion\":%s}",
			i ? "," : "", an_ticks_ns(t, qp->m->hist[i].ts),
			an_qp_state_name(qp->m->hist[i].from),
			an_qp_state_name(qp->m->hist[i].to),
			(unsigned long long)qp->m->hist[i].mask,
			(long long)qp->m->hist[i].ret,
			qp->m->hist[i].implicit ? "true" : "false");
	fprintf(f, "],\"groups\":[");
	bool first = true;
	for (int k = 0; k < 16 * AN_SIZE_CLASSES; k++) {
		const struct an_group *g = qp->groups[k];
		if (!g)
			continue;
		fprintf(f,
			"%s{\"opcode\":\"%s\",\"size_class\":\"%s\",\"wrs\":%llu,"
			"\"bytes\":%llu,"
			"\"errors\":%llu,\"signaled\":%llu,\"inline\":%llu,\"nic_exact\":"
			"%llu,"
			"\"bounded\":%llu,\"phases\":",
			first ? "" : ",", an_wr_opcode_name(g->opcode),
			an_size_class_name[g->size_class], (unsigned long long)g->wrs,
			(unsigned long long)g->bytes, (unsigned long long)g->errors,
			(unsigned long long)g->signaled, (unsigned long long)g->inlined,
			(unsigned long long)g->exact, (unsigned long long)g->bounded);
		an_json_phases(f, g->h);
		fputc('}', f);
		first = false;
	}
	fprintf(f, "],\"roundtrips\":");
	if (qp->rt_count) {
		fprintf(f, "{\"count\":%llu,\"rtt\":", (unsigned long long)qp->rt_count);
		an_json_summary(f, &qp->rt_rtt);
		fprintf(f, ",\"local_post\":");
		an_json_summary(f, &qp->rt_local_post);
		fprintf(f, ",\"nic_wire\":");
		an_json_summary(f, &qp->rt_nic_wire);
		fprintf(f, ",\"remote_app\":");
		an_json_summary(f, &qp->rt_remote_app);
		fputc('}', f);
	} else {
		fprintf(f, "null");
	}
	if (qp->peer && qp->have_min_in && qp->peer->have_min_in)
		fprintf(f, ",\"peer_clock_offset_ns\":%.1f",
			(qp->peer->min_in_ns - qp->min_in_ns) / 2);
	fputc('}', f);
}

static void an_json_trace(FILE *f, struct rbt_analyzer *an, struct an_trace *t)
{
	fprintf(f, "{\"index\":%d,\"name\":", t->idx);
	rbt_json_fput_str(f, t->mt->name);
	fprintf(f, ",\"pid\":%u,\"host\":", t->mt->hdr.pid);
	rbt_json_fput_str(f, t->mt->hdr.host);
	fprintf(f, ",\"cmdline\":");
	rbt_json_fput_str(f, t->mt->hdr.cmdline);
	fprintf(f,
		",\"clock_hz\":%llu,\"start_real_ns\":%llu,\"align_ns\":%lld,\"events\":%"
		"llu,"
		"\"duration_ns\":%.0f,",
		(unsigned long long)t->mt->hdr.clock_hz,
		(unsigned long long)t->mt->hdr.start.real_ns, (long long)t->mt->align_ns,
		(unsigned long long)t->mt->events, an_trace_dur_ns(t));
	fprintf(f,
		"\"integrity\":{\"finished\":%s,\"bad_chunks\":%llu,\"truncated\":%s,"
		"\"lost_events\":%llu},",
		!t->mt->have_stats || t->mt->finished ? "true" : "false",
		(unsigned long long)t->mt->rstats.bad_chunks,
		t->mt->rstats.truncated ? "true" : "false",
		(unsigned long long)(t->lost_events +
				     t->mt->rstats.lost_events_in_bad_chunks));
	struct rbt_clock_fit fit;
	if (rbt_analyzer_clock_fit(an, t->idx, &fit) == 0)
		fprintf(f,
			"\"nic_clock\":{\"samples\":%llu,\"ns_per_nic_tick\":%.9f,"
			"\"max_residual_ns\":%.1f,\"rms_residual_ns\":%.1f},",
			(unsigned long long)fit.samples, fit.ns_per_nic_tick,
			fit.max_residual_ns, fit.rms_residual_ns);
	else
		fprintf(f, "\"nic_clock\":null,");
	fprintf(f,
		"\"posts\":%llu,\"post_failures\":%llu,\"polls\":%llu,\"empty_polls\":%"
		"llu,"
		"\"empty_poll_fraction\":%.4f,\"mr_registrations\":%llu,"
		"\"mr_registrations_during_traffic\":%llu,\"mr_deregistrations_during_"
		"traffic\":%llu,"
		"\"nic_ts_outside_bound\":%llu,\"nic_ts_unmapped\":%llu,",
		(unsigned long long)t->posts, (unsigned long long)t->post_fail,
		(unsigned long long)t->polls, (unsigned long long)t->empty_polls,
		t->polls ? (double)t->empty_polls / (double)t->polls : 0,
		(unsigned long long)t->mr_regs, (unsigned long long)t->mr_regs_traffic,
		(unsigned long long)t->mr_deregs_traffic,
		(unsigned long long)t->nic_outside,
		(unsigned long long)t->mt->nic_unmapped);
	fprintf(f, "\"rate\":{\"start_ns\":%llu,\"bin_ns\":%llu,\"wrs\":[",
		(unsigned long long)t->rate.t0, (unsigned long long)t->rate.width);
	int last = -1;
	for (int i = 0; i < AN_RATE_BINS; i++)
		if (t->rate.wrs[i])
			last = i;
	for (int i = 0; i <= last; i++)
		fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)t->rate.wrs[i]);
	fprintf(f, "],\"bytes\":[");
	for (int i = 0; i <= last; i++)
		fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)t->rate.bytes[i]);
	fprintf(f, "]},\"phases\":");
	struct an_hist h[RBT_PHASE_COUNT];
	an_trace_hists(an, t, NULL, h);
	an_json_phases(f, h);
	an_hists_free(h);
	fprintf(f, ",\"qps\":[");
	for (struct an_qp *qp = t->qp_list; qp; qp = qp->next) {
		an_json_qp(f, t, qp);
		if (qp->next)
			fputc(',', f);
	}
	fprintf(f, "],\"cqs\":[");
	bool first = true;
	uint32_t cq_pos = 0;
	for (struct rbt_model_res *cr;
	     (cr = rbt_model_table_next(an->model, t->idx, RBT_MODEL_CQ, &cq_pos));) {
		const struct an_cq *cq = cr->user;
		if (!cq)
			continue;
		fprintf(f,
			"%s{\"handle\":\"0x%llx\",\"cqe\":%llu,\"peak_outstanding\":%lld,"
			"\"capacity\":%llu,\"polls\":%llu,\"empty_polls\":%llu,"
			"\"completions\":%llu,"
			"\"overrun\":%s}",
			first ? "" : ",", (unsigned long long)cq->m->res.handle,
			(unsigned long long)cq->m->cqe, (long long)cq->m->peak,
			(unsigned long long)cq->m->capacity,
			(unsigned long long)cq->polls,
			(unsigned long long)cq->empty_polls,
			(unsigned long long)cq->polled_wcs,
			cq->overrun ? "true" : "false");
		first = false;
	}
	fprintf(f, "]}");
}

static void an_json_findings(FILE *f, const struct rbt_analyzer *an)
{
	fputc('[', f);
	for (int i = 0; i < an->n_findings; i++) {
		const struct rbt_finding *fd = &an->findings[i].f;
		fprintf(f,
			"%s{\"severity\":\"%s\",\"code\":\"%s\",\"title\":", i ? "," : "",
			an_sev_name(fd->severity), fd->code);
		rbt_json_fput_str(f, fd->title);
		fprintf(f, ",\"evidence\":");
		an_json_evidence(f, fd->evidence);
		fprintf(f, ",\"advice\":");
		rbt_json_fput_str(f, fd->advice);
		fprintf(f, ",\"trace\":%d,\"qp_num\":%u,\"time_ns\":%.0f}", fd->trace,
			fd->qp_num, fd->time_ns);
	}
	fputc(']', f);
}

static int an_json_write(struct rbt_analyzer *an, FILE *f)
{
	if (!an->finished)
		return -EINVAL;
	const struct rbt_analyzer_counts *c = &an->counts;
	fprintf(f,
		"{\"rbtrace_report\":1,\"counts\":{\"events\":%llu,\"wrs_completed\":%"
		"llu,"
		"\"wrs_nic_exact\":%llu,\"wrs_bounded\":%llu,\"recvs_completed\":%llu,"
		"\"unmatched_completions\":%llu,\"outstanding_at_end\":%llu,"
		"\"recvs_outstanding_at_end\":%llu,"
		"\"nic_outside_bound\":%llu,\"peak_tracked_wrs\":%llu},\n\"traces\":[",
		(unsigned long long)c->events, (unsigned long long)c->wrs_completed,
		(unsigned long long)c->wrs_nic_exact, (unsigned long long)c->wrs_bounded,
		(unsigned long long)c->recvs_completed,
		(unsigned long long)c->unmatched_completions,
		(unsigned long long)c->outstanding_at_end,
		(unsigned long long)c->recvs_outstanding_at_end,
		(unsigned long long)c->nic_outside_bound,
		(unsigned long long)c->peak_tracked_wrs);
	for (int i = 0; i < an->n_traces; i++) {
		if (i)
			fputs(",\n", f);
		an_json_trace(f, an, an->traces[i]);
	}
	fprintf(f, "],\n\"findings\":");
	an_json_findings(f, an);
	fprintf(f, "}\n");
	return ferror(f) ? -EIO : 0;
}

const struct an_sink_ops an_sink_json = {
	.name = "json",
	.write = an_json_write,
};
