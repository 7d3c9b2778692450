/* fuzz_analyzer.c - libFuzzer harness for the analyzer (and, once it exists, the
 * model): the input is a trace, the reader decodes whatever it can, and every
 * decoded event is fed to rbt_analyzer_feed() as a damaged trace would feed it -
 * handles that never existed, completions of WRs never posted, time running
 * backwards, counts at their extremes. Then the report is finished and written as
 * text, JSON, HTML and Perfetto (to /dev/null). The analyzer must never trust an
 * event: a crash, leak, hang or sanitizer report here is its bug.
 *
 * The same events then go to the model (model/rbt_model.h) on its own, every
 * callback set and reading every field it is handed, with copies of the resource
 * events kept, then every query asked: the model must never trust an event either.
 *
 * An input whose last byte is odd is fed as two traces at once (each event to
 * both, interleaved), to reach the cross-trace pairing; the byte before it picks
 * the model's batching; the byte before that, when odd, zooms the analyzer in
 * (struct rbt_analyzer_filter: a window, a QP, a thread, the process, by its bits).
 * Built like fuzz_reader.c.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analyzer/rbt_analyzer.h"
#include "model/rbt_model.h"
#include "trace_format/rbt_format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the callbacks read goes here, so that no read is optimised away. */
static volatile uint64_t sink;

static void touch_res(const struct rbt_model_res *r)
{
	if (!r)
		return;
	sink += r->kind + r->handle + r->id + r->create_ts + r->destroy_ts;
	if (r->create)
		sink += r->create->type + r->create->ts;
	for (uint32_t i = 0; i < r->n_mods; i++)
		sink += r->mods[i]->type;
	if (r->destroy)
		sink += r->destroy->ts;
	if (r->kind == RBT_MODEL_QP) {
		const struct rbt_model_qp *q = (const struct rbt_model_qp *)r;
		sink += q->qpn + q->state + q->sq.n + q->rq.n + q->n_hist;
		for (uint32_t i = 0; i < q->n_hist && i < 4096; i++)
			sink += q->hist[i].to;
		if (q->peer)
			sink += q->peer->qpn;
	}
}

static void touch_wr(const struct rbt_model_wr *w)
{
	if (w)
		sink += w->wr_id + w->post_ts + w->bytes + w->opcode + w->tid;
}

static void touch_comp(const struct rbt_model_comp *c)
{
	if (c)
		sink += c->poll_ts + c->status + c->byte_len + (uint64_t)c->host;
}

static void m_res_new(void *arg, struct rbt_model_res *r)
{
	(void)arg;
	touch_res(r);
}

static void m_thread(void *arg, int trace, struct rbt_model_thread *th)
{
	(void)arg;
	sink += (uint64_t)trace + th->tid + th->idx +
		(th->name ? (uint8_t)th->name[0] : 0);
}

static void m_event(void *arg, int trace, const struct rbt_event *ev,
		    struct rbt_model_res *r)
{
	(void)arg;
	sink += (uint64_t)trace + ev->type + rbt_model_posted(ev);
	touch_res(r);
}

static void m_posted(void *arg, struct rbt_model_res *q, struct rbt_model_wr *w,
		     const struct rbt_send_wr *sw)
{
	(void)arg;
	touch_res(q);
	touch_wr(w);
	if (sw)
		sink += sw->opcode + sw->n_sges;
}

static void m_completion(void *arg, struct rbt_model_qp *qp,
			 const struct rbt_model_comp *c, const struct rbt_model_wr *w)
{
	(void)arg;
	touch_res(qp ? &qp->res : NULL);
	touch_comp(c);
	touch_wr(w);
}

static void m_wr_done(void *arg, struct rbt_model_qp *qp, const struct rbt_model_wr *w,
		      const struct rbt_model_comp *c, uint32_t n, uint32_t nsig)
{
	(void)arg;
	touch_res(qp ? &qp->res : NULL);
	touch_wr(w);
	touch_comp(c);
	sink += n + nsig;
}

static void m_unmatched(void *arg, struct rbt_model_qp *qp,
			const struct rbt_model_comp *c)
{
	(void)arg;
	touch_res(qp ? &qp->res : NULL);
	touch_comp(c);
}

static const struct rbt_model_ops model_ops = {
	.res_new = m_res_new,
	.thread = m_thread,
	.before = m_event,
	.after = m_event,
	.wr_posted = m_posted,
	.completion = m_completion,
	.wr_done = m_wr_done,
	.unmatched = m_unmatched,
};

static void fuzz_model(const uint8_t *data, size_t size, int two, int batch)
{
	struct rbt_reader *r;
	if (rbt_reader_open_mem(data, size, &r))
		return;
	struct rbt_model_opts o = { .ops = &model_ops, .batch = batch, .keep_events = 1 };
	struct rbt_model *m;
	if (rbt_model_create(&o, &m)) {
		rbt_reader_close(r);
		return;
	}
	int t0 = rbt_model_add_trace(m, rbt_reader_header(r), "fuzz-a");
	int t1 = two ? rbt_model_add_trace(m, rbt_reader_header(r), "fuzz-b") : -1;
	const struct rbt_event *ev;
	while (rbt_reader_next(r, &ev) > 0) {
		if (t0 >= 0)
			rbt_model_feed(m, t0, ev);
		if (t1 >= 0)
			rbt_model_feed(m, t1, ev);
	}
	for (int t = 0; t < rbt_model_n_traces(m); t++)
		rbt_model_set_reader_stats(m, t, rbt_reader_stats(r),
					   rbt_reader_trailer(r) != NULL);
	rbt_model_finish(m);
	for (int t = 0; t < rbt_model_n_traces(m); t++) {
		const struct rbt_model_trace *tr = rbt_model_trace(m, t);
		sink += rbt_model_dur_ns(tr, (double)tr->max_ts - (double)tr->min_ts);
		sink += rbt_model_mono_ns(tr, tr->max_ts);
		sink += rbt_model_aligned_u64(tr, (double)tr->min_ts);
		struct rbt_model_clock_fit fit;
		if (!rbt_model_clock_fit(m, t, &fit))
			sink += fit.samples;
		double host;
		/* a damaged clock maps anywhere: used, not converted out of range */
		if (!rbt_model_nic_to_host(m, t, 0, tr->max_ts, &host))
			sink += host > 0 && host < 1e19 ? (uint64_t)host : 1;
		for (int k = 0; k < RBT_MODEL_KINDS; k++) {
			sink += (uintptr_t)rbt_model_kind_name((enum rbt_model_kind)k);
			for (struct rbt_model_res *x =
				     rbt_model_list(m, t, (enum rbt_model_kind)k);
			     x; x = x->next_of_kind)
				touch_res(x);
			uint32_t pos = 0;
			for (struct rbt_model_res *x;
			     (x = rbt_model_table_next(m, t, (enum rbt_model_kind)k,
						       &pos));)
				touch_res(rbt_model_by_handle(m, t, x->kind, x->handle));
		}
		touch_res((struct rbt_model_res *)rbt_model_qp_by_num(m, t, 1));
		touch_res((struct rbt_model_res *)rbt_model_mr_by_lkey(m, t, 1));
		touch_res((struct rbt_model_res *)rbt_model_mr_by_rkey(m, t, 1));
	}
	struct rbt_model_stats st;
	rbt_model_stats(m, &st);
	rbt_model_destroy(m);
	rbt_reader_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static FILE *devnull;
	if (!devnull)
		devnull = fopen("/dev/null", "w");
	if (!devnull)
		return 0;
	struct rbt_reader *r;
	if (rbt_reader_open_mem(data, size, &r))
		return 0;
	/* both timelines, and the protobuf one's aggregation, by the input's size */
	struct rbt_analyzer_opts o = { .perfetto = devnull,
				       .series = 1,
				       .perfetto_json = (int)(size >> 1 & 1),
				       .perfetto_max_wrs = size & 4 ? 16 : 0 };
	struct rbt_analyzer_filter f = { 0 };
	if (size > 2 && data[size - 3] & 1) {
		uint8_t b = data[size - 3];
		f.has_from = b & 2;
		f.from_ns = (double)(b >> 6) * 1e5;
		f.has_to = b & 4;
		f.to_ns = f.from_ns + (double)data[0] * 1e4 + 1;
		if (b & 8)
			f.qps[f.n_qps++] = data[1];
		f.has_tid = b & 16;
		f.tid = data[0];
		f.has_pid = b & 32;
		f.pid = rbt_reader_header(r)->pid;
		o.filter = &f;
	}
	struct rbt_analyzer *an;
	if (rbt_analyzer_create(&o, &an)) {
		rbt_reader_close(r);
		return 0;
	}
	int two = size && data[size - 1] & 1;
	int t0 = rbt_analyzer_add_trace(an, rbt_reader_header(r), "fuzz-a");
	int t1 = two ? rbt_analyzer_add_trace(an, rbt_reader_header(r), "fuzz-b") : -1;
	const struct rbt_event *ev;
	while (rbt_reader_next(r, &ev) > 0) {
		if (t0 >= 0)
			rbt_analyzer_feed(an, t0, ev);
		if (t1 >= 0)
			rbt_analyzer_feed(an, t1, ev);
	}
	const struct rbt_reader_stats *st = rbt_reader_stats(r);
	int finished = rbt_reader_trailer(r) != NULL;
	if (t0 >= 0)
		rbt_analyzer_set_reader_stats(an, t0, st, finished);
	if (t1 >= 0)
		rbt_analyzer_set_reader_stats(an, t1, st, finished);
	if (!rbt_analyzer_finish(an)) {
		rbt_analyzer_write_text(an, devnull);
		rbt_analyzer_write_json(an, devnull);
		rbt_analyzer_write_html(an, devnull);
	}
	rbt_analyzer_destroy(an);
	rbt_reader_close(r);
	fuzz_model(data, size, two, size > 1 && data[size - 2] & 1);
	return 0;
}
