/* analyzer_text.c - the text sink: the report as `rbtrace report` prints it (a line
 * of totals, one section per trace with its phases, QPs and CQs, then the findings).
 *
 * Reads the finished analysis only; writes only to the FILE * it is given.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "analyzer/analyzer_internal.h"

static void an_text_row(FILE *f, const char *label, const struct an_hist *h)
{
	char a[5][32];
	struct rbt_phase_summary s;
	if (!h->count)
		return;
	an_hist_summary(h, &s);
	fprintf(f, "    %-22s %9llu %11s %11s %11s %11s %11s\n", label,
		(unsigned long long)s.count, an_fmt_ns(a[0], 32, s.p50),
		an_fmt_ns(a[1], 32, s.p90), an_fmt_ns(a[2], 32, s.p99),
		an_fmt_ns(a[3], 32, s.p999), an_fmt_ns(a[4], 32, s.max));
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
		an_fmt_ns(a[0], 32, lo ? an_hist_quantile(lo, q[0]) : 0),
		an_fmt_ns(a[1], 32, an_hist_quantile(hi, q[0])),
		an_fmt_ns(a[2], 32, lo ? an_hist_quantile(lo, q[1]) : 0),
		an_fmt_ns(a[3], 32, an_hist_quantile(hi, q[1])));
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
					an_fmt_ns(a[0], 32, w.p50),
					an_fmt_ns(a[1], 32, w.p99));
				continue;
			}
			struct rbt_phase_summary e;
			an_hist_summary(&g->h[RBT_PHASE_E2E], &e);
			/* wide enough for ATOMIC_FETCH_AND_ADD */
			fprintf(f, "    %-20s %-7s %8llu  e2e p50 %s p99 %s",
				an_wr_opcode_name(g->opcode), an_size_class_name[sc],
				(unsigned long long)g->wrs, an_fmt_ns(a[0], 32, e.p50),
				an_fmt_ns(a[1], 32, e.p99));
			if (g->h[RBT_PHASE_NIC].count)
				fprintf(f, "  nic p50 %s  poll p50 %s",
					an_fmt_ns(a[2], 32,
						  an_hist_quantile(&g->h[RBT_PHASE_NIC],
								   0.5)),
					an_fmt_ns(a[3], 32,
						  an_hist_quantile(&g->h[RBT_PHASE_POLL],
								   0.5)));
			else if (g->h[RBT_PHASE_NIC_HI].count)
				fprintf(f, "  nic p50 in [%s, %s]",
					an_fmt_ns(a[2], 32,
						  an_hist_quantile(
							  &g->h[RBT_PHASE_NIC_LO], 0.5)),
					an_fmt_ns(a[3], 32,
						  an_hist_quantile(
							  &g->h[RBT_PHASE_NIC_HI], 0.5)));
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
			an_fmt_ns(a[0], 32, an_hist_quantile(&qp->rt_rtt, 0.5)),
			an_fmt_ns(a[1], 32, an_hist_quantile(&qp->rt_local_post, 0.5)),
			an_fmt_ns(a[2], 32, an_hist_quantile(&qp->rt_nic_wire, 0.5)),
			an_fmt_ns(a[3], 32, an_hist_quantile(&qp->rt_remote_app, 0.5)));
	if (qp->peer && qp->have_min_in && qp->peer->have_min_in &&
	    qp->t->idx < qp->peer->t->idx) {
		double theta = (qp->peer->min_in_ns - qp->min_in_ns) / 2;
		fprintf(f,
			"    clock alignment refined by traffic: trace %d runs %s %s "
			"trace %d "
			"(from the least one-way times)\n",
			qp->peer->t->idx, an_fmt_ns(a[0], 32, fabs(theta)),
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
		(unsigned long long)t->mt->events,
		an_fmt_ns(a[0], 32, an_trace_dur_ns(t)),
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
			an_fmt_ns(a[0], 32, fit.max_residual_ns),
			an_fmt_ns(a[1], 32, fit.rms_residual_ns));
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
		(unsigned long long)t->mr_regs, (unsigned long long)t->mr_traffic.regs,
		(unsigned long long)t->mr_traffic.deregs);
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
			an_fmt_ns(a[1], 32, (double)t->rate.width));
	struct an_hist h[RBT_PHASE_COUNT];
	an_trace_hists(an, t, NULL, h);
	fprintf(f, "  all WRs of this process:\n");
	an_text_phases(f, h);
	an_hists_free(h);
	for (struct an_qp *qp = t->qp_list; qp; qp = qp->next)
		if (an_filter_shows_qp(an, qp))
			an_text_qp(f, an, t, qp);
	uint32_t pos = 0;
	for (const struct an_cq *cq; (cq = an_cq_next(an, t, &pos));) {
		if ((!cq->polls && !cq->m->cqe) || !an_filter_shows_cq(an, cq))
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

static int an_text_write(struct rbt_analyzer *an, FILE *f)
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
	an_filter_write_text(an, f);
	for (int i = 0; i < an->n_traces; i++)
		if (an_filter_shows_trace(an, an->traces[i]))
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

const struct an_sink_ops an_sink_text = {
	.name = "text",
	.write = an_text_write,
};
