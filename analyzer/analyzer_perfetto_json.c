/* analyzer_perfetto_json.c - the Chrome trace-event JSON timeline
 * (`--format=perfetto-json`), a streaming sink: written while the events are analysed
 * (nothing of it is kept in memory), through the one JSON writer, one trace event per
 * line. The compact protobuf timeline is analyzer_perfetto.c.
 *
 * Tracks: each recording thread shows its verbs calls (post, poll); each WR is a slice
 * from its post to the poll that returned it, with its phases as sub-slices, on a
 * "WR lane" track of the posting thread (lanes are picked so slices never overlap);
 * a flow arrow goes from the post call to the poll call, written with the slice once
 * the WR completed (both ends exist: a WR never polled has no arrow). Times are
 * microseconds on the aligned timeline (real time since the earliest trace start).
 */
#include <stdlib.h>
#include <string.h>

#include "analyzer/analyzer_internal.h"

#define AN_LANE_BASE  1000000000u
#define AN_MAX_LANES  4096u /* per thread and kind; beyond, slices share the last */
#define AN_LANE_SPACE (2 * AN_MAX_LANES)

static uint32_t an_pf_pid(const struct an_trace *t)
{
	return t->mt->hdr.pid ? t->mt->hdr.pid : (uint32_t)t->idx + 1;
}

static double an_us(const struct an_trace *t, double ticks)
{
	return an_aligned_ns(t, ticks) / 1000.0;
}

/* A trace event's common part: {"ph":..,"name":..,"pid":..[,"tid":..] (left open). */
static struct rbt_json *an_pf_event(struct rbt_analyzer *an, const char *ph,
				    const char *cat, const char *name,
				    const struct an_trace *t)
{
	struct rbt_json *j = &an->pf;
	rbt_json_obj(j);
	rbt_json_kstr(j, "ph", ph);
	if (cat)
		rbt_json_kstr(j, "cat", cat);
	rbt_json_kstr(j, "name", name);
	rbt_json_ku64(j, "pid", an_pf_pid(t));
	return j;
}

/* A metadata event naming a process or thread track: args {key: value}. */
static void an_pf_meta(struct rbt_analyzer *an, const char *name,
		       const struct an_trace *t, int64_t tid, const char *key,
		       const char *sval, uint64_t uval)
{
	struct rbt_json *j = an_pf_event(an, "M", NULL, name, t);
	if (tid >= 0)
		rbt_json_ku64(j, "tid", (uint64_t)tid);
	rbt_json_key(j, "args");
	rbt_json_obj(j);
	if (sval)
		rbt_json_kstr(j, key, sval);
	else
		rbt_json_ku64(j, key, uval);
	rbt_json_obj_end(j);
	rbt_json_obj_end(j);
}

static void an_pf_trace(struct rbt_analyzer *an, struct an_trace *t)
{
	char name[512];
	snprintf(name, sizeof(name), "%s (pid %u) %s", t->mt->name, t->mt->hdr.pid,
		 t->mt->hdr.cmdline);
	an_pf_meta(an, "process_name", t, -1, "name", name, 0);
}

static void an_pf_thread(struct rbt_analyzer *an, struct an_trace *t,
			 struct an_thread *th)
{
	char name[300];
	snprintf(name, sizeof(name), "thread %u%s%s", th->m->tid, th->m->name ? " " : "",
		 th->m->name ? th->m->name : "");
	an_pf_meta(an, "thread_name", t, th->m->tid, "name", name, 0);
}

static void an_pf_call(struct rbt_analyzer *an, struct an_trace *t, uint32_t tid,
		       const char *name, uint64_t ts, uint64_t ts_exit,
		       const char *args_json)
{
	an_thread_get(an, t, tid);
	struct rbt_json *j = an_pf_event(an, "X", "verbs", name, t);
	rbt_json_ku64(j, "tid", tid);
	rbt_json_kdbl(j, "ts", "%.3f", an_us(t, (double)ts));
	rbt_json_kdbl(j, "dur", "%.3f",
		      (double)(ts_exit - ts) * t->mt->ns_per_tick / 1000.0);
	if (args_json) {
		rbt_json_key(j, "args");
		rbt_json_raw(j, args_json);
	}
	rbt_json_obj_end(j);
}

/* A flow arrow's start ("s") or end ("f", bound to the enclosing slice). */
static void an_pf_flow(struct rbt_analyzer *an, struct an_trace *t, bool end,
		       uint32_t tid, double ts_us, uint64_t flow)
{
	struct rbt_json *j = &an->pf;
	rbt_json_obj(j);
	rbt_json_kstr(j, "ph", end ? "f" : "s");
	if (end)
		rbt_json_kstr(j, "bp", "e");
	rbt_json_kstr(j, "cat", "wr");
	rbt_json_kstr(j, "name", "wr");
	rbt_json_ku64(j, "id", flow);
	rbt_json_ku64(j, "pid", an_pf_pid(t));
	rbt_json_ku64(j, "tid", tid);
	rbt_json_kdbl(j, "ts", "%.3f", ts_us);
	rbt_json_obj_end(j);
}

static void an_pf_slice(struct rbt_analyzer *an, struct an_trace *t, uint32_t lane_tid,
			const char *name, double a, double b)
{
	if (b < a)
		b = a;
	struct rbt_json *j = an_pf_event(an, "X", "phase", name, t);
	rbt_json_ku64(j, "tid", lane_tid);
	rbt_json_kdbl(j, "ts", "%.3f", an_us(t, a));
	rbt_json_kdbl(j, "dur", "%.3f", (b - a) * t->mt->ns_per_tick / 1000.0);
	rbt_json_obj_end(j);
}

/* The lane of a WR slice from start to end: one whose last slice ended before this
 * one starts (slices are emitted at completion, not in start order, but a lane free
 * at our start holds only slices that ended before it, so none overlaps). Returns
 * its track id, 0 when the thread has no lane at all. */
static uint32_t an_pf_lane(struct rbt_analyzer *an, struct an_trace *t,
			   struct an_thread *th, int kind, uint64_t s_ns, uint64_t e_ns)
{
	uint32_t lane = 0, n = th->n_lanes[kind];
	uint32_t base = AN_LANE_BASE + th->m->idx * AN_LANE_SPACE + kind * AN_MAX_LANES;
	while (lane < n && th->lane_end[kind][lane] > s_ns)
		lane++;
	if (lane == n && n < AN_MAX_LANES) {
		uint64_t *nl = realloc(th->lane_end[kind], (n + 1) * sizeof(*nl));
		if (nl) {
			char name[64];
			th->lane_end[kind] = nl;
			nl[n] = 0;
			th->n_lanes[kind] = ++n;
			snprintf(name, sizeof(name), "%s of thread %u #%u",
				 kind ? "receives" : "WRs", th->m->tid, lane);
			an_pf_meta(an, "thread_name", t, base + lane, "name", name, 0);
			an_pf_meta(an, "thread_sort_index", t, base + lane, "sort_index",
				   NULL,
				   100 + th->m->idx * AN_LANE_SPACE +
					   kind * AN_MAX_LANES + lane);
		}
	}
	if (lane >= n) {
		if (!n)
			return 0;
		lane = n - 1;
	}
	if (e_ns > th->lane_end[kind][lane])
		th->lane_end[kind][lane] = e_ns;
	return base + lane;
}

static void an_pf_wr(struct rbt_analyzer *an, struct an_trace *t, struct an_qp *qp,
		     const struct rbt_model_wr *w, const struct rbt_model_comp *c)
{
	bool recv = w->recv;
	struct an_thread *th = an_thread_get(an, t, w->tid);
	if (!th)
		return;
	double start = (double)w->post_ts;
	double end = (double)(c->poll_exit > w->post_ts ? c->poll_exit : w->post_ts);
	double pe = (double)(w->post_exit < c->poll_exit ? w->post_exit : c->poll_exit);
	if (pe < start)
		pe = start;
	uint32_t lane_tid =
		an_pf_lane(an, t, th, recv ? 1 : 0, rbt_model_aligned_u64(t->mt, start),
			   rbt_model_aligned_u64(t->mt, end));
	if (!lane_tid)
		return;
	uint64_t flow = recv ? 0 : ++an->flow_seq;
	char name[64];
	snprintf(name, sizeof(name), "%s %llu B", an_wr_opcode_name(w->opcode),
		 (unsigned long long)w->bytes);
	struct rbt_json *j = an_pf_event(an, "X", "wr", name, t);
	rbt_json_ku64(j, "tid", lane_tid);
	rbt_json_kdbl(j, "ts", "%.3f", an_us(t, start));
	rbt_json_kdbl(j, "dur", "%.3f", (end - start) * t->mt->ns_per_tick / 1000.0);
	rbt_json_key(j, "args");
	rbt_json_obj(j);
	rbt_json_ku64(j, "qp_num", qp->m->qpn);
	rbt_json_ku64(j, "wr_id", w->wr_id);
	rbt_json_kstr(j, "status", an_wc_status_name(c->status));
	rbt_json_ku64(j, "flow", flow);
	rbt_json_kbool(j, "nic_ts", c->exact);
	rbt_json_obj_end(j);
	rbt_json_obj_end(j);
	an_pf_slice(an, t, lane_tid, "post", start, pe);
	if (c->exact) {
		double comp = c->host < pe ? pe : c->host > end ? end : c->host;
		an_pf_slice(an, t, lane_tid, recv ? "wait" : "nic", pe, comp);
		an_pf_slice(an, t, lane_tid, "poll", comp, end);
	} else {
		double lo = (double)(c->lo > w->post_ts ? c->lo : w->post_ts);
		if (lo < pe)
			lo = pe;
		if (lo > end)
			lo = end;
		an_pf_slice(an, t, lane_tid, recv ? "wait (at least)" : "nic (at least)",
			    pe, lo);
		an_pf_slice(an, t, lane_tid, "completion window", lo, end);
	}
	if (!recv) {
		an_pf_flow(an, t, false, w->tid, an_us(t, (double)w->post_ts), flow);
		an_pf_flow(an, t, true, c->poll_tid, an_us(t, (double)c->poll_ts), flow);
	}
}

static void an_pf_begin(struct rbt_analyzer *an)
{
	struct rbt_json *j = &an->pf;
	rbt_json_init(j, an->opts.perfetto);
	j->line_depth = 2; /* one trace event per line */
	rbt_json_obj(j);
	rbt_json_kstr(j, "displayTimeUnit", "ns");
	rbt_json_key(j, "traceEvents");
	rbt_json_arr(j);
	fputc('\n', j->f);
	for (int i = 0; i < an->n_traces; i++)
		an_pf_trace(an, an->traces[i]);
}

static void an_pf_end(struct rbt_analyzer *an)
{
	struct rbt_json *j = &an->pf;
	for (int i = 0; i < an->n_findings; i++) {
		const struct rbt_finding *fd = &an->findings[i].f;
		const struct an_trace *t = an->traces[fd->trace >= 0 ? fd->trace : 0];
		rbt_json_obj(j);
		rbt_json_kstr(j, "ph", "i");
		rbt_json_kstr(j, "s", "p");
		rbt_json_kstr(j, "cat", "finding");
		rbt_json_kstr(j, "name", fd->code);
		rbt_json_ku64(j, "pid", an_pf_pid(t));
		rbt_json_ku64(j, "tid", 0);
		rbt_json_kdbl(j, "ts", "%.3f",
			      (fd->time_ns + (double)t->mt->align_ns) / 1000.0);
		rbt_json_key(j, "args");
		rbt_json_obj(j);
		rbt_json_kstr(j, "title", fd->title);
		rbt_json_obj_end(j);
		rbt_json_obj_end(j);
	}
	fputc('\n', j->f);
	rbt_json_arr_end(j);
	rbt_json_obj_end(j);
	fputc('\n', j->f);
	fflush(j->f);
}

const struct an_sink_ops an_sink_perfetto_json = {
	.name = "perfetto-json",
	.per_wr = true,
	.begin = an_pf_begin,
	.thread = an_pf_thread,
	.call = an_pf_call,
	.wr = an_pf_wr,
	.end = an_pf_end,
};
