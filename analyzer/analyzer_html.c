/* analyzer_html.c - the HTML sink: one self-contained page an engineer reads first:
 * the findings, each linked to its time in the plots; per QP a row of plots over
 * time (WR rate, send WRs outstanding, CQ occupancy against the CQ's depth, latency
 * p50/p99) from the analysis's series (analyzer_series.c); the round-trip split of
 * paired traces; the latency distributions; the full text report. The data go into
 * the page as one JSON blob that the embedded script (analyzer_html.js) draws.
 *
 * Reads the finished analysis only; writes only to the FILE * it is given. The page
 * must open offline: no external script, font or stylesheet. No string from a trace
 * goes into the JSON blob (only numbers and our own names), so nothing in a trace
 * can close its <script> element; the rest of the page is escaped.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "analyzer/analyzer_internal.h"

static void an_html_esc(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		const char *e = *s == '<'   ? "&lt;"
				: *s == '>' ? "&gt;"
				: *s == '&' ? "&amp;"
				: *s == '"' ? "&quot;"
					    : NULL;
		if (e)
			fputs(e, f);
		else
			fputc(*s, f);
	}
}

#include "analyzer/analyzer_html_js.h"

#define AN_HTML_QP_ROWS 16 /* QP rows per trace, the busiest */

/* Records every script error of the page in #rbt-errors and on <body>: a test reads
 * them from the DOM after the scripts ran. */
static const char an_html_head[] =
	"<script>window.rbtErrors=[];function rbtErr(m){window.rbtErrors.push(String(m));"
	"var p=document.getElementById('rbt-errors');if(p){p.textContent="
	"window.rbtErrors.join('\\n');p.style.display='block';}if(document.body)"
	"document.body.setAttribute('data-js-errors',String(window.rbtErrors.length));}"
	"window.onerror=function(m,s,l,c){rbtErr(m+' (line '+l+':'+c+')');};"
	"window.addEventListener('error',function(e){if(e.target&&e.target!==window)"
	"rbtErr('resource failed: '+(e.target.src||e.target.href));},true);</script>\n";

static const char an_html_style[] =
	"<style>body{font-family:sans-serif;margin:20px;color:#222;max-width:1260px}"
	"h2{border-bottom:1px solid #ccc;padding-bottom:2px;margin-top:28px}"
	".dir{font-weight:normal;overflow-wrap:anywhere}"
	"pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}"
	".error{color:#b00}.warning{color:#a60}.info{color:#06a}"
	"canvas{border:1px solid #ddd;margin:4px}"
	".qprow,.rtrow{border:1px solid #e4e4e4;border-radius:4px;padding:4px 6px;"
	"margin:8px 0;transition:background 0.6s}"
	".qprow.flash,.rtrow.flash,.trace.flash{background:#fff3c4}"
	".rowhead{font-size:13px;margin:2px 0 4px 2px}.rowhead b{font-family:monospace}"
	"svg.plot{margin:2px 6px 2px 0;background:#fff}"
	"svg.rtbar,.rtrow svg.plot{vertical-align:middle;margin-right:16px}"
	"svg text{font-size:10px;font-family:sans-serif}"
	"svg .ttl{font-size:11px;font-weight:bold;fill:#333}"
	"svg .ytick{text-anchor:end;fill:#555}svg .xtick{fill:#555}"
	"svg .end{text-anchor:end}svg .mid{text-anchor:middle}svg .legend{font-size:10px}"
	"svg .frame{fill:none;stroke:#999}svg .grid{stroke:#eee}"
	"svg .limit{stroke-dasharray:5 3;stroke-width:1.2}"
	"svg .rtlbl{fill:#fff;font-size:11px}"
	".fmark line{stroke:#b00;stroke-width:1;stroke-dasharray:2 2;opacity:0.6}"
	".fmark.info line{stroke:#06a}.fmark.warning line{stroke:#a60}"
	".fmark.hl line{stroke-width:3;opacity:1;stroke-dasharray:none}"
	"a.flink{font-size:12px;margin-left:6px}"
	"#rbt-errors{display:none;color:#b00;border:2px solid #b00}"
	".findings li{margin-bottom:6px}.findings pre{margin:2px 0;white-space:pre-wrap}"
	".note{color:#666;font-size:12px}</style>\n";

/* A trace's file name in a heading; its directory after it, small. */
static void an_html_name(FILE *f, const struct an_trace *t)
{
	const char *name = t->mt->name ? t->mt->name : "";
	const char *base = strrchr(name, '/');
	an_html_esc(f, base ? base + 1 : name);
	if (!base)
		return;
	fputs(" <span class=\"note dir\">in ", f);
	char dir[4096];
	snprintf(dir, sizeof(dir), "%.*s", (int)(base - name), name);
	an_html_esc(f, dir[0] ? dir : "/");
	fputs("</span>", f);
}

/* The QPs of a trace with traffic, busiest first. */
static uint64_t an_html_traffic(const struct an_qp *qp)
{
	return qp->post_wrs + qp->recv_wrs;
}

static int an_html_qp_cmp(const void *a, const void *b)
{
	const struct an_qp *x = *(struct an_qp *const *)a, *y = *(struct an_qp *const *)b;
	uint64_t tx = an_html_traffic(x), ty = an_html_traffic(y);
	if (tx != ty)
		return tx < ty ? 1 : -1;
	return (x->m->qpn > y->m->qpn) - (x->m->qpn < y->m->qpn);
}

/* The QPs drawn for trace t (at most AN_HTML_QP_ROWS), *more: those left out. */
static uint32_t an_html_qps(const struct rbt_analyzer *an, const struct an_trace *t,
			    struct an_qp **out, uint32_t *more)
{
	uint32_t n = 0, all = 0;
	if (!an_filter_shows_trace(an, t)) {
		*more = 0;
		return 0;
	}
	for (struct an_qp *qp = t->qp_list; qp; qp = qp->next)
		all += qp->ser && an_filter_shows_qp(an, qp);
	struct an_qp **v = all ? calloc(all, sizeof(*v)) : NULL;
	if (v) {
		for (struct an_qp *qp = t->qp_list; qp; qp = qp->next)
			if (qp->ser && an_filter_shows_qp(an, qp))
				v[n++] = qp;
		qsort(v, n, sizeof(*v), an_html_qp_cmp);
	}
	*more = all - (n < AN_HTML_QP_ROWS ? n : AN_HTML_QP_ROWS);
	if (n > AN_HTML_QP_ROWS)
		n = AN_HTML_QP_ROWS;
	for (uint32_t i = 0; i < n; i++)
		out[i] = v[i];
	free(v);
	return n;
}

static void an_html_series(struct rbt_json *j, const char *key,
			   const struct rbt_analyzer *an, struct an_series *s, int n)
{
	an_series_sync(&an->tb, s);
	rbt_json_key(j, key);
	rbt_json_arr(j);
	for (int i = 0; i < n; i++)
		rbt_json_u64(j, s->v[i]);
	rbt_json_arr_end(j);
}

static void an_html_gauge(struct rbt_json *j, const char *key,
			  const struct rbt_analyzer *an, struct an_gauge *g, int n)
{
	uint64_t lv[AN_SERIES_BINS];
	an_gauge_sync(&an->tb, g);
	an_gauge_levels(g, n, lv);
	rbt_json_key(j, key);
	rbt_json_arr(j);
	for (int i = 0; i < n; i++)
		rbt_json_u64(j, lv[i]);
	rbt_json_arr_end(j);
}

static void an_html_cq(struct rbt_json *j, const struct rbt_analyzer *an,
		       struct an_cq *cq, const char *role, int n)
{
	rbt_json_obj(j);
	rbt_json_kstr(j, "role", role);
	rbt_json_ku64(j, "cqe", cq->m->cqe);
	if (cq->empty)
		an_html_series(j, "empty", an, cq->empty, n);
	if (cq->occ) {
		an_html_gauge(j, "occ", an, cq->occ, n);
	} else {
		rbt_json_key(j, "occ");
		rbt_json_arr(j);
		for (int i = 0; i < n; i++)
			rbt_json_u64(j, 0);
		rbt_json_arr_end(j);
	}
	rbt_json_obj_end(j);
}

static void an_html_qp_json(struct rbt_json *j, const struct rbt_analyzer *an,
			    struct an_qp *qp, int n)
{
	struct an_qp_series *s = qp->ser;
	rbt_json_obj(j);
	rbt_json_ku64(j, "qpn", qp->m->qpn);
	rbt_json_ku64(j, "max_send_wr", qp->m->max_send_wr);
	rbt_json_ku64(j, "recvs_n", qp->recv_wrs);
	rbt_json_ku64(j, "sends_n", qp->post_wrs);
	an_json_peer(j, qp, "qpn");
	an_html_series(j, "posted", an, &s->posted, n);
	an_html_series(j, "done", an, &s->done, n);
	an_html_series(j, "recvs", an, &s->recvs, n);
	an_html_gauge(j, "out", an, &s->outstanding, n);
	rbt_json_key(j, "cqs");
	rbt_json_arr(j);
	if (qp->scq)
		an_html_cq(j, an, qp->scq, qp->rcq == qp->scq ? "send+recv" : "send", n);
	if (qp->rcq && qp->rcq != qp->scq)
		an_html_cq(j, an, qp->rcq, "recv", n);
	rbt_json_arr_end(j);
	if (s->lat) {
		an_lat_sync(&an->tb, s->lat);
		static const char *const qk[2] = { "p50", "p99" };
		static const double qv[2] = { 0.5, 0.99 };
		for (int k = 0; k < 2; k++) {
			rbt_json_key(j, qk[k]);
			rbt_json_arr(j);
			for (int i = 0; i < n; i++)
				rbt_json_dbl(j, "%.0f",
					     an_lat_quantile(s->lat, i, qv[k]));
			rbt_json_arr_end(j);
		}
	}
	rbt_json_key(j, "rt");
	if (!qp->rt_count) {
		rbt_json_null(j);
	} else {
		rbt_json_obj(j);
		rbt_json_ku64(j, "count", qp->rt_count);
		double c = (double)qp->rt_count;
		rbt_json_kdbl(j, "post", "%.1f", (double)qp->rt_local_post.sum / c);
		rbt_json_kdbl(j, "wire", "%.1f", (double)qp->rt_nic_wire.sum / c);
		rbt_json_kdbl(j, "app", "%.1f", (double)qp->rt_remote_app.sum / c);
		rbt_json_kdbl(j, "rtt_p50", "%.1f", an_hist_quantile(&qp->rt_rtt, 0.5));
		an_html_series(j, "n", an, &s->rt_n, n);
		an_html_series(j, "post_s", an, &s->rt_post, n);
		an_html_series(j, "wire_s", an, &s->rt_wire, n);
		an_html_series(j, "app_s", an, &s->rt_app, n);
		rbt_json_obj_end(j);
	}
	rbt_json_obj_end(j);
}

/* A finding's time on the series' axis (ns since the time base's start), < 0: none. */
static double an_html_ftime(const struct rbt_analyzer *an, const struct rbt_finding *fd)
{
	if (!an->tb.started || fd->trace < 0 || fd->trace >= an->n_traces)
		return -1;
	double t = fd->time_ns + (double)an->traces[fd->trace]->mt->align_ns -
		   (double)an->tb.t0;
	double span = (double)AN_SERIES_BINS * (double)(1ull << an->tb.shift);
	return t >= 0 && t <= span ? t : -1;
}

static void an_html_data(struct rbt_analyzer *an, FILE *f, struct an_qp ***rows,
			 const uint32_t *n_rows)
{
	int n = an_tb_bins(&an->tb);
	struct rbt_json j;
	fputs("<script type=\"application/json\" id=\"rbt-data\">", f);
	rbt_json_init(&j, f);
	rbt_json_obj(&j);
	rbt_json_ku64(&j, "t0_ns", an->tb.started ? an->tb.t0 : 0);
	rbt_json_ku64(&j, "bin_ns", an->tb.started ? 1ull << an->tb.shift : 0);
	rbt_json_ki64(&j, "bins", n);
	rbt_json_key(&j, "findings");
	rbt_json_arr(&j);
	for (int i = 0; i < an->n_findings; i++) {
		const struct rbt_finding *fd = &an->findings[i].f;
		double t = an_html_ftime(an, fd);
		rbt_json_obj(&j);
		rbt_json_kstr(&j, "code", fd->code);
		rbt_json_kstr(&j, "sev", an_sev_name(fd->severity));
		rbt_json_ki64(&j, "trace", fd->trace);
		rbt_json_ku64(&j, "qpn", fd->qp_num);
		rbt_json_key(&j, "t");
		if (t >= 0)
			rbt_json_dbl(&j, "%.0f", t);
		else
			rbt_json_null(&j);
		rbt_json_obj_end(&j);
	}
	rbt_json_arr_end(&j);
	rbt_json_key(&j, "traces");
	rbt_json_arr(&j);
	for (int i = 0; i < an->n_traces; i++) {
		struct an_trace *t = an->traces[i];
		struct an_hist h[RBT_PHASE_COUNT];
		rbt_json_obj(&j);
		an_trace_hists(an, t, NULL, h);
		rbt_json_key(&j, "hist");
		rbt_json_obj(&j);
		for (int p = 0; p < RBT_PHASE_COUNT; p++) {
			if (!h[p].count)
				continue;
			rbt_json_key(&j, an_phase_name[p]);
			rbt_json_arr(&j);
			uint32_t idx = 0;
			double lo, hi;
			uint64_t cnt;
			while (an_hist_next_bucket(&h[p], &idx, &lo, &hi, &cnt)) {
				rbt_json_arr(&j);
				rbt_json_dbl(&j, "%.0f", lo);
				rbt_json_dbl(&j, "%.0f", hi);
				rbt_json_u64(&j, cnt);
				rbt_json_arr_end(&j);
			}
			rbt_json_arr_end(&j);
		}
		rbt_json_obj_end(&j);
		an_hists_free(h);
		rbt_json_key(&j, "qps");
		rbt_json_arr(&j);
		for (uint32_t k = 0; k < n_rows[i]; k++)
			an_html_qp_json(&j, an, rows[i][k], n);
		rbt_json_arr_end(&j);
		rbt_json_obj_end(&j);
	}
	rbt_json_arr_end(&j);
	rbt_json_obj_end(&j);
	fputs("</script>\n", f);
}

static void an_html_findings(struct rbt_analyzer *an, FILE *f)
{
	fprintf(f, "<h2>Findings (%d)</h2>\n<ul class=\"findings\">\n", an->n_findings);
	for (int i = 0; i < an->n_findings; i++) {
		const struct rbt_finding *fd = &an->findings[i].f;
		fprintf(f, "<li class=\"%s\"><b>[%s] %s</b>: ", an_sev_name(fd->severity),
			an_sev_name(fd->severity), fd->code);
		an_html_esc(f, fd->title);
		double t = an_html_ftime(an, fd);
		if (t >= 0) {
			char target[48];
			if (fd->qp_num)
				snprintf(target, sizeof(target), "qp-%d-%u", fd->trace,
					 fd->qp_num);
			else
				snprintf(target, sizeof(target), "trace-%d", fd->trace);
			fprintf(f,
				" <a class=\"flink\" href=\"#%s\" data-f=\"%d\">"
				"&#9656; t=%.3f ms in the plots</a>",
				target, i, fd->time_ns / 1e6);
		}
		fputs("<pre>", f);
		an_html_esc(f, fd->evidence);
		fputs("</pre><i>", f);
		an_html_esc(f, fd->advice);
		fputs("</i></li>\n", f);
	}
	if (!an->n_findings)
		fputs("<li>no problems found</li>\n", f);
	fputs("</ul>\n", f);
}

static void an_html_rows(struct rbt_analyzer *an, FILE *f, int ti, struct an_qp **rows,
			 uint32_t n, uint32_t more)
{
	char b[32];
	for (uint32_t k = 0; k < n; k++) {
		struct an_qp *qp = rows[k];
		fprintf(f,
			"<div class=\"qprow\" id=\"qp-%d-%u\"><div class=\"rowhead\">"
			"<b>QP 0x%x</b> %s",
			ti, qp->m->qpn, qp->m->qpn, an_qp_type_name(qp->m->type));
		if (qp->peer)
			fprintf(f, " &rarr; trace %d QP 0x%x", qp->peer->t->idx,
				qp->peer->m->qpn);
		fprintf(f, " &middot; %llu send WRs, %llu receives",
			(unsigned long long)qp->post_wrs,
			(unsigned long long)qp->recv_wrs);
		if (qp->scq)
			fprintf(f, " &middot; send CQ depth %llu",
				(unsigned long long)qp->scq->m->cqe);
		if (qp->rcq && qp->rcq != qp->scq)
			fprintf(f, ", recv CQ depth %llu",
				(unsigned long long)qp->rcq->m->cqe);
		struct rbt_phase_summary ps;
		if (!rbt_analyzer_phase(an, ti, qp->m->qpn, -1, RBT_PHASE_E2E, &ps))
			fprintf(f, " &middot; send p50 %s",
				an_fmt_ns(b, sizeof(b), ps.p50));
		fputs("</div></div>\n", f);
	}
	if (more)
		fprintf(f,
			"<p class=\"note\">%u more QPs with traffic not drawn (the %d "
			"busiest are).</p>\n",
			more, AN_HTML_QP_ROWS);
}

static int an_html_write(struct rbt_analyzer *an, FILE *f)
{
	if (!an->finished)
		return -EINVAL;
	struct an_qp ***rows = calloc(an->n_traces ? an->n_traces : 1, sizeof(*rows));
	uint32_t *n_rows = calloc(an->n_traces ? an->n_traces : 1, sizeof(*n_rows));
	uint32_t *more = calloc(an->n_traces ? an->n_traces : 1, sizeof(*more));
	int ret = -ENOMEM;
	if (!rows || !n_rows || !more)
		goto out;
	for (int i = 0; i < an->n_traces; i++) {
		rows[i] = calloc(AN_HTML_QP_ROWS, sizeof(**rows));
		if (!rows[i])
			goto out;
		n_rows[i] = an_html_qps(an, an->traces[i], rows[i], &more[i]);
	}
	fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>rbtrace "
	      "report</title>\n",
	      f);
	fputs(an_html_head, f);
	fputs(an_html_style, f);
	fputs("</head><body data-js-errors=\"0\">\n<pre id=\"rbt-errors\"></pre>\n"
	      "<h1>rbtrace report</h1>\n",
	      f);
	if (an->tb.started) {
		char b[32];
		fprintf(f,
			"<p class=\"note\">%d trace%s; the plots share one time axis, "
			"in ms since the first trace's start (the traces' clocks "
			"aligned), from the first work request on, in %d bins of %s. "
			"Times in the findings are on each trace's own clock.</p>\n",
			an->n_traces, an->n_traces == 1 ? "" : "s", an_tb_bins(&an->tb),
			an_fmt_ns(b, sizeof(b), (double)(1ull << an->tb.shift)));
	}
	an_html_findings(an, f);
	an_cm_write_html(an, f);
	bool any_rt = false;
	for (int i = 0; i < an->n_traces; i++) {
		fprintf(f, "<div class=\"trace\" id=\"trace-%d\"><h2>Trace %d: ", i, i);
		an_html_name(f, an->traces[i]);
		fputs("</h2>\n", f);
		if (!an->opts.series)
			fputs("<p class=\"note\">no plots over time: the analysis ran "
			      "without its series (rbt_analyzer_opts.series)</p>\n",
			      f);
		else if (!n_rows[i])
			fputs("<p class=\"note\">no work requests</p>\n", f);
		an_html_rows(an, f, i, rows[i], n_rows[i], more[i]);
		fputs("</div>\n", f);
		for (uint32_t k = 0; k < n_rows[i]; k++)
			any_rt |= rows[i][k]->rt_count != 0;
	}
	if (any_rt) {
		fputs("<h2>Round trips</h2>\n<p class=\"note\">Measured on the "
		      "requester's clock from its post to its poll of the answer, split "
		      "with the responder's own measure of its application time; the "
		      "rest "
		      "is NIC and wire (both ways). See docs/report.md.</p>\n",
		      f);
		for (int i = 0; i < an->n_traces; i++)
			fprintf(f, "<div id=\"rt-%d\"></div>\n", i);
	}
	fputs("<h2>Latency distributions</h2>\n", f);
	for (int i = 0; i < an->n_traces; i++) {
		fprintf(f, "<h3>Trace %d: ", i);
		an_html_name(f, an->traces[i]);
		fprintf(f, "</h3>\n<div id=\"dist-%d\"></div>\n", i);
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
	an_html_data(an, f, rows, n_rows);
	fputs("<script>\n", f);
	fputs(an_html_js, f);
	fputs("</script>\n</body></html>\n", f);
	ret = ferror(f) ? -EIO : 0;
out:
	for (int i = 0; rows && i < an->n_traces; i++)
		free(rows[i]);
	free(rows);
	free(n_rows);
	free(more);
	return ret;
}

const struct an_sink_ops an_sink_html = {
	.name = "html",
	.write = an_html_write,
};
