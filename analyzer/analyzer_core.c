/* analyzer_core.c - the analyzer's entry points and its seat on the model: the
 * model reads the traces and joins each WR to its completion; its callbacks land
 * here and go to the resource counters (analyzer_res.c), the attribution
 * (analyzer_attr.c) and the streaming sinks; then the diagnosis and the queries.
 *
 * It never joins, never keeps a resource table of its own (the model's objects carry
 * the analyzer's state), and never names an output format.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "analyzer/analyzer_internal.h"

const char *const an_size_class_name[AN_SIZE_CLASSES] = { "<=64B",   "<=512B", "<=4KiB",
							  "<=64KiB", "<=1MiB", ">1MiB" };

int an_size_class(uint64_t b)
{
	if (b <= 64)
		return 0;
	if (b <= 512)
		return 1;
	if (b <= 4096)
		return 2;
	if (b <= 65536)
		return 3;
	if (b <= 1048576)
		return 4;
	return 5;
}

/* 128 is the analyzer's own slot for receives (not an ibv_wr_opcode). */
const char *an_wr_opcode_name(int op)
{
	const char *n =
		op >= 0 ? rbt_verbs_name(RBT_NAMES_WR_OPCODE, (uint64_t)op) : NULL;

	return n ? n : op == 128 ? "RECV" : "OTHER";
}

const char *an_wc_status_name(uint64_t st)
{
	const char *n = rbt_verbs_name(RBT_NAMES_WC_STATUS, st);

	return n ? n : "UNKNOWN_STATUS";
}

const char *an_qp_state_name(uint64_t st)
{
	const char *n = st < 7 ? rbt_verbs_name(RBT_NAMES_QP_STATE, st) : NULL;

	return n ? n : "UNKNOWN";
}

/* ---- streaming sinks ---- */

void an_sinks_call(struct rbt_analyzer *an, struct an_trace *t, uint32_t tid,
		   const char *name, uint64_t ts, uint64_t ts_exit, const char *args)
{
	for (int i = 0; i < an->n_stream; i++)
		if (an->stream[i]->call)
			an->stream[i]->call(an, t, tid, name, ts, ts_exit, args);
}

struct an_thread *an_thread_get(struct rbt_analyzer *an, struct an_trace *t, uint32_t tid)
{
	struct rbt_model_thread *th = rbt_model_thread(an->model, t->idx, tid);
	return th ? th->user : NULL;
}

struct an_cq *an_cq_next(const struct rbt_analyzer *an, const struct an_trace *t,
			 uint32_t *pos)
{
	for (struct rbt_model_res *r;
	     (r = rbt_model_table_next(an->model, t->idx, RBT_MODEL_CQ, pos));)
		if (r->user)
			return r->user;
	return NULL;
}

/* ---- the model's callbacks ---- */

static void an_cb_begin(void *arg)
{
	struct rbt_analyzer *an = arg;
	for (int i = 0; i < an->n_traces; i++)
		if (!an->traces[i]->mt)
			an->traces[i]->mt =
				rbt_model_trace(an->model, an->traces[i]->idx);
	for (int i = 0; i < an->n_stream; i++)
		if (an->stream[i]->begin)
			an->stream[i]->begin(an);
}

static void an_cb_res_new(void *arg, struct rbt_model_res *r)
{
	an_res_new(arg, r);
}

static void an_cb_thread(void *arg, int trace, struct rbt_model_thread *mth)
{
	struct rbt_analyzer *an = arg;
	struct an_thread *th = mth->user;
	if (!th) {
		th = calloc(1, sizeof(*th));
		if (!th)
			return;
		th->m = mth;
		mth->user = th;
		th->next = an->threads;
		an->threads = th;
	}
	for (int i = 0; i < an->n_stream; i++)
		if (an->stream[i]->thread)
			an->stream[i]->thread(an, an->traces[trace], th);
}

static void an_cb_before(void *arg, int trace, const struct rbt_event *ev,
			 struct rbt_model_res *r)
{
	struct rbt_analyzer *an = arg;
	if (an->filt_on && !an_filter_event(an, an->traces[trace], ev, r))
		return;
	an_before(an, an->traces[trace], ev, r);
}

/* Bytes this process has read so far: the reader uses pread(2), so this follows its
 * position in the files without an API for it. */
static uint64_t an_rchar(void)
{
	char buf[512];
	FILE *f = fopen("/proc/self/io", "r");
	uint64_t v = 0;
	if (!f)
		return 0;
	while (fgets(buf, sizeof(buf), f))
		if (sscanf(buf, "rchar: %lu", &v) == 1)
			break;
	fclose(f);
	return v;
}

static uint64_t an_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The progress line: looked at every 16 Ki events (a clock read), drawn once the run
 * has taken progress_delay_ms, redrawn at most 5 times a second. */
static void an_progress(struct rbt_analyzer *an)
{
	an->progress_next = an->counts.events + (1u << 14);
	uint64_t now = an_now_ns();
	uint64_t delay =
		(uint64_t)(an->opts.progress_delay_ms ? an->opts.progress_delay_ms
						      : 1000) *
		1000000ull;
	if (now - an->progress_t0 < delay ||
	    (an->progress_drawn && now - an->progress_last < 200000000ull))
		return;
	an->progress_last = now;
	an->progress_drawn = true;
	const char *name = an->opts.progress_name ? an->opts.progress_name : "rbtrace";
	double events = (double)an->counts.events / 1e6;
	uint64_t rchar = an_rchar();
	if (!an->opts.progress_bytes || !rchar) {
		fprintf(stderr, "\r%s: %.1f M events read\033[K", name, events);
		return;
	}
	double done =
		rchar > an->progress_rchar0 ? (double)(rchar - an->progress_rchar0) : 0;
	double total = (double)an->opts.progress_bytes;
	if (done > total)
		done = total;
	fprintf(stderr, "\r%s: %.1f M events, %.1f of %.1f MB read (%.0f%%)\033[K", name,
		events, done / 1e6, total / 1e6, 100 * done / total);
}

static void an_cb_after(void *arg, int trace, const struct rbt_event *ev,
			struct rbt_model_res *r)
{
	struct rbt_analyzer *an = arg;
	an_after(an, an->traces[trace], ev, r);
	an_cm_feed(an, an->traces[trace], ev);
	an->counts.events++;
	if (an->opts.progress && an->counts.events >= an->progress_next)
		an_progress(an);
}

static void an_cb_wr_posted(void *arg, struct rbt_model_res *q, struct rbt_model_wr *w,
			    const struct rbt_send_wr *sw)
{
	struct rbt_analyzer *an = arg;
	if (!sw)
		return;
	struct an_trace *t = an->traces[q->trace];
	struct an_qp *qp = q->user;
	bool in = !qp || an_filter_wr(an, qp, w);
	if (qp) {
		if (in)
			an_send_wr_checks(an, t, qp, sw, w);
		an_attr_posted(an, qp, w->post_ts, w->post_exit, sw);
	}
	if (!an->n_stream || !in)
		return;
	w->user = ++an->flow_seq;
	for (int i = 0; i < an->n_stream; i++)
		if (an->stream[i]->wr_posted)
			an->stream[i]->wr_posted(an, an->traces[q->trace], w->tid,
						 w->post_ts, w->user);
}

static void an_cb_completion(void *arg, struct rbt_model_qp *qp,
			     const struct rbt_model_comp *c, const struct rbt_model_wr *w)
{
	if (qp->res.user)
		an_attr_completion(arg, qp->res.user, c, w);
}

static void an_cb_wr_done(void *arg, struct rbt_model_qp *qp,
			  const struct rbt_model_wr *w, const struct rbt_model_comp *c,
			  uint32_t n, uint32_t nsig)
{
	an_attr_done(arg, an_qp_of(qp), w, c, n, nsig);
}

static void an_cb_unmatched(void *arg, struct rbt_model_qp *qp,
			    const struct rbt_model_comp *c)
{
	struct an_qp *aq = qp->res.user;
	if (aq && an_filter(arg, aq->t, qp->qpn, c->poll_ts, c->poll_tid))
		an_note_error(aq, c, NULL);
}

static const struct rbt_model_ops an_model_ops = {
	.begin = an_cb_begin,
	.res_new = an_cb_res_new,
	.thread = an_cb_thread,
	.before = an_cb_before,
	.after = an_cb_after,
	.wr_posted = an_cb_wr_posted,
	.completion = an_cb_completion,
	.wr_done = an_cb_wr_done,
	.unmatched = an_cb_unmatched,
};

/* ---- create / destroy ---- */

int rbt_analyzer_create(const struct rbt_analyzer_opts *opts, struct rbt_analyzer **out)
{
	struct rbt_analyzer *an = calloc(1, sizeof(*an));
	if (!an)
		return -ENOMEM;
	if (opts)
		an->opts = *opts;
	if (an->opts.filter) {
		an->filt = *an->opts.filter;
		an->opts.filter = NULL;
		if (an->filt.n_qps < 0 || an->filt.n_qps > RBT_ANALYZER_FILTER_QPS) {
			free(an);
			return -EINVAL;
		}
		an->filt_on = an->filt.has_from || an->filt.has_to || an->filt.n_qps ||
			      an->filt.has_pid || an->filt.has_tid;
	}
	bool per_wr = false;
	if (an->opts.perfetto)
		an->stream[an->n_stream++] = &an_sink_perfetto;
	if (an->opts.export_wrs)
		an->stream[an->n_stream++] = &an_sink_export;
	for (int i = 0; i < an->n_stream; i++)
		per_wr |= an->stream[i]->per_wr;
	struct rbt_model_opts mo = {
		.ops = &an_model_ops,
		.arg = an,
		.batch = !per_wr,
	};
	int ret = rbt_model_create(&mo, &an->model);
	if (ret) {
		free(an);
		return ret;
	}
	*out = an;
	return 0;
}

static void an_qp_free(struct an_qp *qp)
{
	rbt_model_ring_free(&qp->rt_wait);
	free(qp->rt_msgs);
	an_hist_free(&qp->rt_rtt);
	an_hist_free(&qp->rt_local_post);
	an_hist_free(&qp->rt_remote_app);
	an_hist_free(&qp->rt_nic_wire);
	an_hist_free(&qp->late_recv);
	free(qp);
}

static void an_trace_free(struct rbt_analyzer *an, struct an_trace *t)
{
	struct an_qp *qp = t->qp_list;
	while (qp) {
		struct an_qp *n = qp->next;
		an_qp_free(qp);
		qp = n;
	}
	static const enum rbt_model_kind kinds[] = { RBT_MODEL_CQ, RBT_MODEL_SRQ,
						     RBT_MODEL_MR };
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
		for (struct rbt_model_res *r =
			     rbt_model_list(an->model, t->idx, kinds[k]);
		     r; r = r->next_of_kind) {
			if (r->user && kinds[k] == RBT_MODEL_CQ)
				free(((struct an_cq *)r->user)->senders);
			free(r->user);
		}
	free(t);
}

void rbt_analyzer_destroy(struct rbt_analyzer *an)
{
	if (!an)
		return;
	for (uint32_t i = 0; i < an->n_groups; i++) {
		for (int p = 0; p < RBT_PHASE_COUNT; p++)
			an_hist_free(&an->groups[i]->h[p]);
		free(an->groups[i]);
	}
	free(an->groups);
	for (int i = 0; i < an->n_traces; i++) {
		an_trace_free(an, an->traces[i]);
	}
	free(an->traces);
	while (an->threads) {
		struct an_thread *th = an->threads;
		an->threads = th->next;
		free(th->lane_end[0]);
		free(th->lane_end[1]);
		free(th);
	}
	for (int i = 0; i < an->n_findings; i++) {
		free(an->findings[i].title);
		free(an->findings[i].evidence);
		free(an->findings[i].advice);
	}
	free(an->findings);
	free(an->pub_findings);
	an_cm_free(an);
	rbt_model_destroy(an->model);
	free(an);
}

/* The analyzer's side of the model's trace idx (its mt is set once the model has
 * the trace). */
static int an_trace_push(struct rbt_analyzer *an, int idx)
{
	if (rbt_grow(&an->traces, &an->cap_traces, (uint32_t)an->n_traces + 1,
		     sizeof(*an->traces), 4, 0))
		return -ENOMEM;
	struct an_trace *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->idx = idx;
	t->an = an;
	t->mt = rbt_model_trace(an->model, idx);
	an->traces[an->n_traces++] = t;
	return 0;
}

int rbt_analyzer_add_trace(struct rbt_analyzer *an, const struct rbt_header *hdr,
			   const char *name)
{
	int idx = rbt_model_add_trace(an->model, hdr, name);
	if (idx < 0)
		return idx;
	int ret = an_trace_push(an, idx);
	return ret < 0 ? ret : idx;
}

int rbt_analyzer_feed(struct rbt_analyzer *an, int trace, const struct rbt_event *ev)
{
	if (trace < 0 || trace >= an->n_traces || an->finished)
		return -EINVAL;
	return rbt_model_feed(an->model, trace, ev);
}

void rbt_analyzer_set_reader_stats(struct rbt_analyzer *an, int trace,
				   const struct rbt_reader_stats *st, int finished)
{
	rbt_model_set_reader_stats(an->model, trace, st, finished);
}

int rbt_analyzer_run_files(struct rbt_analyzer *an, const char *const *paths, int n,
			   char *errbuf, size_t errlen)
{
	/* the model adds the traces: the analyzer's side follows them */
	int before = rbt_model_n_traces(an->model);
	if (an->opts.progress) {
		an->progress_t0 = an_now_ns();
		an->progress_rchar0 = an_rchar();
	}
	for (int i = 0; i < n; i++)
		if (an_trace_push(an, before + i) < 0)
			return -ENOMEM;
	int ret = rbt_model_run_files(an->model, paths, n, errbuf, errlen);
	/* traces the model did not take (an error opening one) */
	int have = rbt_model_n_traces(an->model);
	while (an->n_traces > have)
		free(an->traces[--an->n_traces]);
	if (an->progress_drawn) {
		fprintf(stderr, "\r\033[K");
		an->progress_drawn = false;
	}
	return ret;
}

/* ---- the end ---- */

int rbt_analyzer_finish(struct rbt_analyzer *an)
{
	if (an->finished)
		return -EALREADY;
	an->finished = true;
	an_stall_end(an);
	rbt_model_finish(an->model);
	struct rbt_model_stats ms;
	rbt_model_stats(an->model, &ms);
	an->counts.unmatched_completions = ms.unmatched_completions;
	an->counts.peak_tracked_wrs = ms.peak_tracked_wrs;
	an_diagnose(an);
	an_cm_diagnose(an);
	an_filter_findings(an);
	an_sort_findings(an);
	for (int i = 0; i < an->n_stream; i++)
		if (an->stream[i]->end)
			an->stream[i]->end(an);
	return 0;
}

static int an_sev_cmp(const void *a, const void *b)
{
	const struct an_finding_priv *x = a, *y = b;
	if (x->f.severity != y->f.severity)
		return y->f.severity - x->f.severity;
	return (x->f.time_ns > y->f.time_ns) - (x->f.time_ns < y->f.time_ns);
}

void an_sort_findings(struct rbt_analyzer *an)
{
	if (an->n_findings)
		qsort(an->findings, an->n_findings, sizeof(*an->findings), an_sev_cmp);
	free(an->pub_findings);
	an->pub_findings =
		calloc(an->n_findings ? an->n_findings : 1, sizeof(*an->pub_findings));
	if (!an->pub_findings)
		return;
	for (int i = 0; i < an->n_findings; i++)
		an->pub_findings[i] = an->findings[i].f;
}

int rbt_analyzer_findings(const struct rbt_analyzer *an, const struct rbt_finding **out)
{
	*out = an->pub_findings;
	return an->pub_findings ? an->n_findings : 0;
}

void rbt_analyzer_counts(const struct rbt_analyzer *an, struct rbt_analyzer_counts *out)
{
	*out = an->counts;
}

int rbt_analyzer_phase(const struct rbt_analyzer *an, int trace, uint32_t qp_num,
		       int opcode, enum rbt_phase phase, struct rbt_phase_summary *out)
{
	if ((int)phase < 0 || phase >= RBT_PHASE_COUNT)
		return -EINVAL;
	struct an_hist h = { 0 };
	for (uint32_t i = 0; i < an->n_groups; i++) {
		const struct an_group *g = an->groups[i];
		if (trace >= 0 && g->qp->t->idx != trace)
			continue;
		if (qp_num && g->qp->m->qpn != qp_num)
			continue;
		if (opcode >= 0 && g->opcode != opcode)
			continue;
		an_hist_merge(&h, &g->h[phase]);
	}
	memset(out, 0, sizeof(*out));
	if (!h.count) {
		an_hist_free(&h);
		return -ENOENT;
	}
	an_hist_summary(&h, out);
	an_hist_free(&h);
	return 0;
}

int rbt_analyzer_clock_fit(const struct rbt_analyzer *an, int trace,
			   struct rbt_clock_fit *out)
{
	struct rbt_model_clock_fit f;
	memset(out, 0, sizeof(*out));
	int ret = rbt_model_clock_fit(an->model, trace, &f);
	if (ret)
		return ret;
	out->samples = f.samples;
	out->ns_per_nic_tick = f.ns_per_nic_tick;
	out->max_residual_ns = f.max_residual_ns;
	out->rms_residual_ns = f.rms_residual_ns;
	return 0;
}

int rbt_analyzer_roundtrip(const struct rbt_analyzer *an, int trace, uint32_t qp_num,
			   struct rbt_roundtrip_summary *out)
{
	memset(out, 0, sizeof(*out));
	if (trace < 0 || trace >= an->n_traces)
		return -EINVAL;
	for (struct an_qp *qp = an->traces[trace]->qp_list; qp; qp = qp->next) {
		if (qp->m->qpn != qp_num || !qp->rt_count)
			continue;
		out->count = qp->rt_count;
		out->rtt_p50 = an_hist_quantile(&qp->rt_rtt, 0.5);
		out->local_post_p50 = an_hist_quantile(&qp->rt_local_post, 0.5);
		out->remote_app_p50 = an_hist_quantile(&qp->rt_remote_app, 0.5);
		out->nic_wire_p50 = an_hist_quantile(&qp->rt_nic_wire, 0.5);
		return 0;
	}
	return -ENOENT;
}
