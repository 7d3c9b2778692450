/* analyzer_output.c - the report as text, JSON (schema in docs/report.md) and one
 * self-contained HTML file with canvas plots.
 *
 * Reads the finished analysis only; writes only to the FILE * it is given. The HTML
 * must open offline: no external script, font or stylesheet.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "analyzer/analyzer_internal.h"

static const char *const an_phase_name[RBT_PHASE_COUNT] = {
	"post",	  "nic",     "poll",	  "e2e",       "nic_lo",
	"nic_hi", "poll_hi", "recv_wait", "recv_poll", "recv_poll_hi",
};

static const char *an_sev_name(int s)
{
	return s == RBT_SEV_ERROR ? "error" : s == RBT_SEV_WARNING ? "warning" : "info";
}

static const char *an_qp_type_name(uint32_t t)
{
	const char *n = rbt_verbs_name(RBT_NAMES_QP_TYPE, t);

	return n ? n : "?";
}

static const char *fmt_ns(char *buf, size_t n, double ns)
{
	if (ns < 1e3)
		snprintf(buf, n, "%.0f ns", ns);
	else if (ns < 1e6)
		snprintf(buf, n, "%.2f us", ns / 1e3);
	else if (ns < 1e9)
		snprintf(buf, n, "%.3f ms", ns / 1e6);
	else
		snprintf(buf, n, "%.3f s", ns / 1e9);
	return buf;
}

/* Merged histograms of a trace (or all when t == NULL), per phase. */
static void an_trace_hists(const struct rbt_analyzer *an, const struct an_trace *t,
			   const struct an_qp *qp, struct an_hist h[RBT_PHASE_COUNT])
{
	memset(h, 0, sizeof(struct an_hist) * RBT_PHASE_COUNT);
	for (uint32_t i = 0; i < an->n_groups; i++) {
		const struct an_group *g = an->groups[i];
		if ((t && g->qp->t != t) || (qp && g->qp != qp))
			continue;
		for (int p = 0; p < RBT_PHASE_COUNT; p++)
			an_hist_merge(&h[p], &g->h[p]);
	}
}

static void an_hists_free(struct an_hist h[RBT_PHASE_COUNT])
{
	for (int p = 0; p < RBT_PHASE_COUNT; p++)
		an_hist_free(&h[p]);
}

static double an_trace_dur_ns(const struct an_trace *t)
{
	return t->mt->any_ts
		       ? (double)(t->mt->max_ts - t->mt->min_ts) * t->mt->ns_per_tick
		       : 0;
}

/* ---- text ---- */

static void an_text_row(FILE *f, const char *label, const struct an_hist *h)
{
	char a[5][32];
	struct rbt_phase_summary s;
	if (!h->count)
		return;
	an_hist_summary(h, &s);
	fprintf(f, "    %-22s %9llu %11s %11s %11s %11s %11s\n", label,
		(unsigned long long)s.count, fmt_ns(a[0], 32, s.p50),
		fmt_ns(a[1], 32, s.p90), fmt_ns(a[2], 32, s.p99),
		fmt_ns(a[3], 32, s.p999), fmt_ns(a[4], 32, s.max));
}

static void an_text_bound_row(FILE *f, const char *label, const struct an_hist *lo,
			      const struct an_hist *hi)
{
	char a[6][32];
	if (!hi->count)
		return;
	double q[3] = { 0.5, 0.99, 1.0 };
	fprintf(f, "    %-22s %9llu  p50 in [%s, %s]  p99 in [%s, %s]\n", label,
		(unsigned long long)hi->count,
		fmt_ns(a[0], 32, lo ? an_hist_quantile(lo, q[0]) : 0),
		fmt_ns(a[1], 32, an_hist_quantile(hi, q[0])),
		fmt_ns(a[2], 32, lo ? an_hist_quantile(lo, q[1]) : 0),
		fmt_ns(a[3], 32, an_hist_quantile(hi, q[1])));
}

static void an_text_phases(FILE *f, struct an_hist h[RBT_PHASE_COUNT])
{
	fprintf(f, "    %-22s %9s %11s %11s %11s %11s %11s\n", "phase", "count", "p50",
		"p90", "p99", "p99.9", "max");
	an_text_row(f, "post (share of call)", &h[RBT_PHASE_POST]);
	an_text_row(f, "nic", &h[RBT_PHASE_NIC]);
	an_text_row(f, "poll", &h[RBT_PHASE_POLL]);
	an_text_bound_row(f, "nic (bound)", &h[RBT_PHASE_NIC_LO], &h[RBT_PHASE_NIC_HI]);
	an_text_bound_row(f, "poll (bound)", NULL, &h[RBT_PHASE_POLL_HI]);
	an_text_row(f, "end to end", &h[RBT_PHASE_E2E]);
	an_text_row(f, "recv: wait for peer", &h[RBT_PHASE_RECV_WAIT]);
	an_text_row(f, "recv: poll", &h[RBT_PHASE_RECV_POLL]);
	an_text_bound_row(f, "recv: poll (bound)", NULL, &h[RBT_PHASE_RECV_POLL_HI]);
}

static void an_text_qp(FILE *f, const struct rbt_analyzer *an, const struct an_trace *t,
		       const struct an_qp *qp)
{
	char a[4][32];
	fprintf(f, "  QP 0x%x %s, state %s", qp->m->qpn, an_qp_type_name(qp->m->type),
		an_qp_state_name(qp->m->state));
	if (qp->peer)
		fprintf(f, ", peer: trace %d QP 0x%x", qp->peer->t->idx,
			qp->peer->m->qpn);
	else if (qp->m->have_rtr)
		fprintf(f, ", dest QP 0x%llx", (unsigned long long)qp->m->dest_qpn);
	fprintf(f, "\n");
	if (qp->posts || qp->recv_posts)
		fprintf(f,
			"    %llu post_send (%llu WRs, %.2f WRs/post, max chain %llu), "
			"signaled "
			"%.1f%%, inline %.1f%%; %llu post_recv (%llu WRs)\n",
			(unsigned long long)qp->posts, (unsigned long long)qp->post_wrs,
			qp->posts ? (double)qp->post_wrs / (double)qp->posts : 0,
			(unsigned long long)qp->max_chain,
			qp->post_wrs ? 100.0 * (double)qp->post_wrs_signaled /
					       (double)qp->post_wrs
				     : 0,
			qp->post_wrs ? 100.0 * (double)qp->inlined / (double)qp->post_wrs
				     : 0,
			(unsigned long long)qp->recv_posts,
			(unsigned long long)qp->recv_wrs);
	fprintf(f, "    state history:");
	for (uint32_t i = 0; i < qp->m->n_hist && i < 16; i++)
		fprintf(f, " %.3fms:%s%s%s", an_ticks_ns(t, qp->m->hist[i].ts) / 1e6,
			an_qp_state_name(qp->m->hist[i].to),
			qp->m->hist[i].ret ? "(failed)" : "",
			qp->m->hist[i].implicit ? "(error completion)" : "");
	fprintf(f, "\n");
	for (int slot = 0; slot < 16; slot++)
		for (int sc = 0; sc < AN_SIZE_CLASSES; sc++) {
			const struct an_group *g =
				qp->groups[slot * AN_SIZE_CLASSES + sc];
			if (!g)
				continue;
			if (g->opcode == 128) {
				struct rbt_phase_summary w;
				an_hist_summary(&g->h[RBT_PHASE_RECV_WAIT], &w);
				fprintf(f,
					"    %-20s %-7s %8llu  wait for peer p50 "
					"%s p99 "
					"%s\n",
					"RECV", an_size_class_name[sc],
					(unsigned long long)g->wrs,
					fmt_ns(a[0], 32, w.p50), fmt_ns(a[1], 32, w.p99));
				continue;
			}
			struct rbt_phase_summary e;
			an_hist_summary(&g->h[RBT_PHASE_E2E], &e);
			/* wide enough for ATOMIC_FETCH_AND_ADD */
			fprintf(f, "    %-20s %-7s %8llu  e2e p50 %s p99 %s",
				an_wr_opcode_name(g->opcode), an_size_class_name[sc],
				(unsigned long long)g->wrs, fmt_ns(a[0], 32, e.p50),
				fmt_ns(a[1], 32, e.p99));
			if (g->h[RBT_PHASE_NIC].count)
				fprintf(f, "  nic p50 %s  poll p50 %s",
					fmt_ns(a[2], 32,
					       an_hist_quantile(&g->h[RBT_PHASE_NIC],
								0.5)),
					fmt_ns(a[3], 32,
					       an_hist_quantile(&g->h[RBT_PHASE_POLL],
								0.5)));
			else if (g->h[RBT_PHASE_NIC_HI].count)
				fprintf(f, "  nic p50 in [%s, %s]",
					fmt_ns(a[2], 32,
					       an_hist_quantile(&g->h[RBT_PHASE_NIC_LO],
								0.5)),
					fmt_ns(a[3], 32,
					       an_hist_quantile(&g->h[RBT_PHASE_NIC_HI],
								0.5)));
			if (g->errors)
				fprintf(f, "  errors %llu",
					(unsigned long long)g->errors);
			fprintf(f, "\n");
		}
	if (qp->rt_count)
		fprintf(f,
			"    round trips: %llu, p50 %s = local post %s + NIC and wire %s "
			"+ remote "
			"application %s (p50 of each)\n",
			(unsigned long long)qp->rt_count,
			fmt_ns(a[0], 32, an_hist_quantile(&qp->rt_rtt, 0.5)),
			fmt_ns(a[1], 32, an_hist_quantile(&qp->rt_local_post, 0.5)),
			fmt_ns(a[2], 32, an_hist_quantile(&qp->rt_nic_wire, 0.5)),
			fmt_ns(a[3], 32, an_hist_quantile(&qp->rt_remote_app, 0.5)));
	if (qp->peer && qp->have_min_in && qp->peer->have_min_in &&
	    qp->t->idx < qp->peer->t->idx) {
		double theta = (qp->peer->min_in_ns - qp->min_in_ns) / 2;
		fprintf(f,
			"    clock alignment refined by traffic: trace %d runs %s %s "
			"trace %d "
			"(from the least one-way times)\n",
			qp->peer->t->idx, fmt_ns(a[0], 32, fabs(theta)),
			theta >= 0 ? "ahead of" : "behind", t->idx);
	}
	(void)an;
}

/* A string recorded from the traced process (host name, command line): its
 * control characters as \xNN, so that it cannot break the report's lines or
 * send escape sequences to a terminal. */
static void an_text_str(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
}

static void an_text_trace(FILE *f, struct rbt_analyzer *an, struct an_trace *t)
{
	char a[4][32];
	fprintf(f, "== trace %d: %s\n", t->idx, t->mt->name);
	fprintf(f, "  pid %u on ", t->mt->hdr.pid);
	an_text_str(f, t->mt->hdr.host);
	fputs(": ", f);
	an_text_str(f, t->mt->hdr.cmdline);
	fputc('\n', f);
	fprintf(f, "  %llu events over %s; clock %.3f MHz (%s)\n",
		(unsigned long long)t->mt->events, fmt_ns(a[0], 32, an_trace_dur_ns(t)),
		(double)t->mt->hdr.clock_hz / 1e6,
		t->mt->hdr.clock_source == RBT_CLOCK_TSC ? "TSC" : "CLOCK_MONOTONIC");
	struct rbt_clock_fit fit;
	if (rbt_analyzer_clock_fit(an, t->idx, &fit) == 0 && fit.samples < 2)
		fprintf(f,
			"  NIC clock: 1 sample, slope from the device's nominal rate "
			"(%.6f ns per "
			"NIC tick); its drift is not measured: record longer for a "
			"fitted model\n",
			fit.ns_per_nic_tick);
	else if (rbt_analyzer_clock_fit(an, t->idx, &fit) == 0)
		fprintf(f,
			"  NIC clock: fitted to %llu samples, %.6f ns per NIC tick; the "
			"model as "
			"used was off by at most %s (rms of the final fit %s)\n",
			(unsigned long long)fit.samples, fit.ns_per_nic_tick,
			fmt_ns(a[0], 32, fit.max_residual_ns),
			fmt_ns(a[1], 32, fit.rms_residual_ns));
	else
		fprintf(f,
			"  NIC timestamps: %s - NIC and poll phases are bounds [lo, hi] "
			"from the "
			"polls that came back empty\n",
			t->mt->nic_unmapped
				? "recorded, but no clock sample of their device "
				  "maps them"
				: "none");
	if (t->mt->nic_unmapped)
		fprintf(f,
			"  %llu NIC timestamps could not be mapped (no clock sample of "
			"their "
			"device): bounds used instead\n",
			(unsigned long long)t->mt->nic_unmapped);
	if (t->nic_outside)
		fprintf(f,
			"  %llu NIC timestamps mapped outside [post, poll] (clamped)\n",
			(unsigned long long)t->nic_outside);
	fprintf(f,
		"  %llu posts (%llu failed), %llu polls (%.1f%% empty); MRs: %llu "
		"registered, %llu "
		"reg + %llu dereg during traffic\n",
		(unsigned long long)t->posts, (unsigned long long)t->post_fail,
		(unsigned long long)t->polls,
		t->polls ? 100.0 * (double)t->empty_polls / (double)t->polls : 0,
		(unsigned long long)t->mr_regs, (unsigned long long)t->mr_regs_traffic,
		(unsigned long long)t->mr_deregs_traffic);
	uint64_t peak = 0, total = 0;
	int bins = 0;
	for (int i = 0; i < AN_RATE_BINS; i++) {
		if (t->rate.wrs[i])
			bins = i + 1;
		total += t->rate.wrs[i];
		if (t->rate.wrs[i] > peak)
			peak = t->rate.wrs[i];
	}
	if (bins)
		fprintf(f,
			"  rate: %.3g WRs/s on average, %.3g at peak (bins of %s; the "
			"JSON and HTML "
			"have the series)\n",
			(double)total * 1e9 / ((double)bins * (double)t->rate.width),
			(double)peak * 1e9 / (double)t->rate.width,
			fmt_ns(a[1], 32, (double)t->rate.width));
	struct an_hist h[RBT_PHASE_COUNT];
	an_trace_hists(an, t, NULL, h);
	fprintf(f, "  all WRs of this process:\n");
	an_text_phases(f, h);
	an_hists_free(h);
	for (struct an_qp *qp = t->qp_list; qp; qp = qp->next)
		an_text_qp(f, an, t, qp);
	uint32_t cq_pos = 0;
	for (struct rbt_model_res *cr;
	     (cr = rbt_model_table_next(an->model, t->idx, RBT_MODEL_CQ, &cq_pos));) {
		const struct an_cq *cq = cr->user;
		if (!cq)
			continue;
		if (!cq->polls && !cq->m->cqe)
			continue;
		fprintf(f,
			"  CQ 0x%llx: depth %llu, peak outstanding %lld (QPs on it can "
			"have %llu), "
			"%llu polls (%.1f%% empty), %llu completions\n",
			(unsigned long long)cq->m->res.handle,
			(unsigned long long)cq->m->cqe, (long long)cq->m->peak,
			(unsigned long long)cq->m->capacity,
			(unsigned long long)cq->polls,
			cq->polls ? 100.0 * (double)cq->empty_polls / (double)cq->polls
				  : 0,
			(unsigned long long)cq->polled_wcs);
	}
	fprintf(f, "\n");
}

int rbt_analyzer_write_text(struct rbt_analyzer *an, FILE *f)
{
	if (!an->finished)
		return -EINVAL;
	fprintf(f,
		"rbtrace report: %d trace%s, %llu events, %llu send WRs (%llu with NIC "
		"timestamps, %llu bounded), %llu receives\n\n",
		an->n_traces, an->n_traces == 1 ? "" : "s",
		(unsigned long long)an->counts.events,
		(unsigned long long)an->counts.wrs_completed,
		(unsigned long long)an->counts.wrs_nic_exact,
		(unsigned long long)an->counts.wrs_bounded,
		(unsigned long long)an->counts.recvs_completed);
	for (int i = 0; i < an->n_traces; i++)
		an_text_trace(f, an, an->traces[i]);
	if (an->counts.unmatched_completions || an->counts.outstanding_at_end) {
		const struct rbt_analyzer_counts *c = &an->counts;

		/* receives left posted at exit are normal; sends left are not */
		fprintf(f,
			"%llu completions matched no recorded post; at the end %llu send "
			"WRs "
			"had not completed and %llu receives were still posted\n\n",
			(unsigned long long)c->unmatched_completions,
			(unsigned long long)(c->outstanding_at_end -
					     c->recvs_outstanding_at_end),
			(unsigned long long)c->recvs_outstanding_at_end);
	}
	an_cm_write_text(an, f);
	fprintf(f, "== findings: %d\n", an->n_findings);
	for (int i = 0; i < an->n_findings; i++) {
		const struct rbt_finding *fd = &an->findings[i].f;
		fprintf(f, "[%s] %s: %s\n", an_sev_name(fd->severity), fd->code,
			fd->title);
		const char *p = fd->evidence;
		while (p && *p) {
			const char *nl = strchr(p, '\n');
			int len = nl ? (int)(nl - p) : (int)strlen(p);
			fprintf(f, "    %.*s\n", len, p);
			p = nl ? nl + 1 : p + len;
		}
		fprintf(f, "    -> %s\n", fd->advice);
	}
	if (!an->n_findings)
		fprintf(f, "no problems found\n");
	return ferror(f) ? -EIO : 0;
}

/* ---- JSON ---- */

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

int rbt_analyzer_write_json(struct rbt_analyzer *an, FILE *f)
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
	fputc(']', f);
	an_cm_write_json(an, f);
	fprintf(f, ",\n\"findings\":");
	an_json_findings(f, an);
	fprintf(f, "}\n");
	return ferror(f) ? -EIO : 0;
}

/* ---- HTML ---- */

static void an_html_esc(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		switch (*s) {
		case '<':
			fputs("&lt;", f);
			break;
		case '>':
			fputs("&gt;", f);
			break;
		case '&':
			fputs("&amp;", f);
			break;
		case '"':
			fputs("&quot;", f);
			break;
		default:
			fputc(*s, f);
		}
	}
}

static void an_html_hist_data(FILE *f, const struct an_hist *h)
{
	uint32_t idx = 0;
	double lo, hi;
	uint64_t n;
	bool first = true;
	fputc('[', f);
	while (an_hist_next_bucket(h, &idx, &lo, &hi, &n)) {
		fprintf(f, "%s[%.0f,%.0f,%llu]", first ? "" : ",", lo, hi,
			(unsigned long long)n);
		first = false;
	}
	fputc(']', f);
}

static const char an_html_script[] =
	"<script>\n"
	"(function(){\n"
	"var D=JSON.parse(document.getElementById('rbt-data').textContent);\n"
	"var "
	"COL={post:'#1f77b4',nic:'#ff7f0e',poll:'#2ca02c',e2e:'#7f7f7f',nic_lo:'#ffbb78',"
	"nic_hi:'#d62728',poll_hi:'#98df8a',recv_wait:'#9467bd',recv_poll:'#8c564b',"
	"recv_poll_hi:'#c49c94'};\n"
	"function fmt(ns){if(ns<1e3)return ns.toFixed(0)+'ns';if(ns<1e6)return "
	"(ns/1e3).toFixed(1)+'us';"
	"if(ns<1e9)return (ns/1e6).toFixed(2)+'ms';return (ns/1e9).toFixed(2)+'s';}\n"
	"function axes(c,x0,x1,logx,title){var g=c.getContext('2d');g.fillStyle='#fff';"
	"g.fillRect(0,0,c.width,c.height);g.strokeStyle='#333';g.beginPath();g.moveTo(50,"
	"10);"
	"g.lineTo(50,c.height-30);g.lineTo(c.width-10,c.height-30);g.stroke();g."
	"fillStyle='#000';"
	"g.font='12px sans-serif';g.fillText(title,60,14);for(var i=0;i<=4;i++){var "
	"v=logx?"
	"Math.exp(Math.log(x0)+(Math.log(x1)-Math.log(x0))*i/4):x0+(x1-x0)*i/4;"
	"g.textAlign=i==4?'right':i==0?'left':'center';"
	"g.fillText(logx?fmt(v):(v/1e6).toFixed(1)+'ms',50+(c.width-70)*i/4,"
	"c.height-12);}g.textAlign='left';return g;}\n"
	"function xpos(c,v,x0,x1){return 50+(c.width-70)*(Math.log(v)-Math.log(x0))/"
	"(Math.log(x1)-Math.log(x0));}\n"
	"var drawn=0;\n"
	"function plots(tr,el){var ph=tr.hist;var "
	"names=Object.keys(ph).filter(function(k){"
	"return ph[k].length>0;});if(!names.length)return;var x0=1e30,x1=1;"
	"names.forEach(function(k){ph[k].forEach(function(b){x0=Math.min(x0,Math.max(b[0]"
	",1));"
	"x1=Math.max(x1,b[1]);});});if(x1<=x0)x1=x0*10;\n"
	" var "
	"c=document.createElement('canvas');c.width=560;c.height=260;el.appendChild(c);"
	"var g=axes(c,x0,x1,true,'latency histogram per phase (count, log time)');var "
	"mx=0;"
	"names.forEach(function(k){ph[k].forEach(function(b){mx=Math.max(mx,b[2]);});});"
	"names.forEach(function(k,ki){g.fillStyle=COL[k]||'#000';g.globalAlpha=0.6;ph[k]."
	"forEach(function(b){"
	"var xa=xpos(c,Math.max(b[0],1),x0,x1),xb=xpos(c,b[1],x0,x1);var "
	"h=(c.height-45)*b[2]/mx;"
	"g.fillRect(xa,c.height-30-h,Math.max(xb-xa,1.5),h);});g.globalAlpha=1;"
	"g.fillText(k,c.width-110,30+14*ki);});drawn++;\n"
	" var "
	"d=document.createElement('canvas');d.width=560;d.height=260;el.appendChild(d);"
	"var h=axes(d,x0,x1,true,'CDF per phase');names.forEach(function(k,ki){var tot=0;"
	"ph[k].forEach(function(b){tot+=b[2];});var "
	"cum=0;h.strokeStyle=COL[k]||'#000';h.beginPath();"
	"h.moveTo(xpos(d,Math.max(ph[k][0][0],1),x0,x1),d.height-30);ph[k].forEach("
	"function(b){cum+=b[2];"
	"h.lineTo(xpos(d,b[1],x0,x1),d.height-30-(d.height-45)*cum/tot);});h.stroke();"
	"h.fillStyle=COL[k]||'#000';h.fillText(k,d.width-110,30+14*ki);});drawn++;}\n"
	"function rate(tr,el){var r=tr.rate;if(!r.wrs.length)return;var "
	"c=document.createElement('canvas');"
	"c.width=560;c.height=200;el.appendChild(c);var "
	"g=axes(c,0,r.bin_ns*r.wrs.length,false,"
	"'WRs completed per second over time');var "
	"mx=0;r.wrs.forEach(function(v){mx=Math.max(mx,v);});"
	"var "
	"w=(c.width-70)/r.wrs.length;g.fillStyle='#1f77b4';r.wrs.forEach(function(v,i){"
	"var h=(c.height-45)*v/mx;g.fillRect(50+i*w,c.height-30-h,Math.max(w-1,1),h);});"
	"g.fillStyle='#000';g.fillText('peak '+(mx*1e9/r.bin_ns).toExponential(2)+' "
	"WR/s',c.width-160,30);"
	"drawn++;}\n"
	"D.traces.forEach(function(tr,i){var "
	"el=document.getElementById('plots-'+i);plots(tr,el);"
	"rate(tr,el);});\n"
	"document.body.setAttribute('data-plots-drawn',String(drawn));\n"
	"document.title='rbtrace report (plots drawn: '+drawn+')';\n"
	"})();\n"
	"</script>\n";

int rbt_analyzer_write_html(struct rbt_analyzer *an, FILE *f)
{
	if (!an->finished)
		return -EINVAL;
	fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>rbtrace "
	      "report</title>\n"
	      "<style>body{font-family:sans-serif;margin:20px;color:#222}"
	      "pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}"
	      ".error{color:#b00}.warning{color:#a60}.info{color:#06a}"
	      "canvas{border:1px solid #ddd;margin:4px}</style></head><body>\n"
	      "<h1>rbtrace report</h1>\n",
	      f);
	fprintf(f, "<h2>Findings (%d)</h2>\n<ul>\n", an->n_findings);
	for (int i = 0; i < an->n_findings; i++) {
		const struct rbt_finding *fd = &an->findings[i].f;
		fprintf(f, "<li class=\"%s\"><b>[%s] %s</b>: ", an_sev_name(fd->severity),
			an_sev_name(fd->severity), fd->code);
		an_html_esc(f, fd->title);
		fputs("<pre>", f);
		an_html_esc(f, fd->evidence);
		fputs("</pre><i>", f);
		an_html_esc(f, fd->advice);
		fputs("</i></li>\n", f);
	}
	if (!an->n_findings)
		fputs("<li>no problems found</li>\n", f);
	fputs("</ul>\n", f);
	an_cm_write_html(an, f);
	for (int i = 0; i < an->n_traces; i++) {
		fprintf(f, "<h2>Trace %d: ", i);
		an_html_esc(f, an->traces[i]->mt->name);
		fprintf(f, "</h2>\n<div id=\"plots-%d\"></div>\n", i);
	}
	/* the full text report too, for the numbers */
	fputs("<h2>Details</h2>\n<pre>", f);
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	if (m) {
		rbt_analyzer_write_text(an, m);
		fclose(m);
		an_html_esc(f, buf);
		free(buf);
	}
	fputs("</pre>\n", f);
	fputs("<script type=\"application/json\" id=\"rbt-data\">{\"traces\":[", f);
	for (int i = 0; i < an->n_traces; i++) {
		struct an_trace *t = an->traces[i];
		struct an_hist h[RBT_PHASE_COUNT];
		an_trace_hists(an, t, NULL, h);
		fprintf(f, "%s{\"hist\":{", i ? "," : "");
		bool first = true;
		for (int p = 0; p < RBT_PHASE_COUNT; p++) {
			if (!h[p].count)
				continue;
			fprintf(f, "%s\"%s\":", first ? "" : ",", an_phase_name[p]);
			an_html_hist_data(f, &h[p]);
			first = false;
		}
		an_hists_free(h);
		int last = -1;
		for (int k = 0; k < AN_RATE_BINS; k++)
			if (t->rate.wrs[k])
				last = k;
		fprintf(f, "},\"rate\":{\"bin_ns\":%llu,\"wrs\":[",
			(unsigned long long)t->rate.width);
		for (int k = 0; k <= last; k++)
			fprintf(f, "%s%llu", k ? "," : "",
				(unsigned long long)t->rate.wrs[k]);
		fputs("]}}", f);
	}
	fputs("]}</script>\n", f);
	fputs(an_html_script, f);
	fputs("</body></html>\n", f);
	return ferror(f) ? -EIO : 0;
}

const struct an_sink_ops an_sink_text = { .name = "text",
					  .write = rbt_analyzer_write_text };
const struct an_sink_ops an_sink_json = { .name = "json",
					  .write = rbt_analyzer_write_json };
const struct an_sink_ops an_sink_html = { .name = "html",
					  .write = rbt_analyzer_write_html };
