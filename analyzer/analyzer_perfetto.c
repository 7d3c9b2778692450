/* analyzer_perfetto.c - the Perfetto / Chrome trace-event JSON timeline, streamed while
 * the events are analysed (nothing of it is kept in memory).
 *
 * Tracks: each recording thread shows its verbs calls (post, poll); each WR is a slice
 * from its post to the poll that returned it, with its phases as sub-slices, on a
 * "WR lane" track of the posting thread (lanes are picked so slices never overlap);
 * a flow arrow goes from the post call to the poll call. Times are microseconds on the
 * aligned timeline (real time since the earliest trace start).
 */
#include <stdlib.h>
#include <string.h>

#include "analyzer/analyzer_internal.h"

#define AN_LANE_BASE  1000000000u
#define AN_MAX_LANES  4096u /* per thread and kind; beyond, slices share the last */
#define AN_LANE_SPACE (2 * AN_MAX_LANES)

static void an_pf_sep(struct rbt_analyzer *an)
{
	FILE *f = an->opts.perfetto;
	if (!an->perfetto_first)
		fputs(",\n", f);
	an->perfetto_first = false;
}

static uint32_t an_pf_pid(const struct an_trace *t)
{
	return t->mt->hdr.pid ? t->mt->hdr.pid : (uint32_t)t->idx + 1;
}

static double an_us(const struct an_trace *t, double ticks)
{
	return an_aligned_ns(t, ticks) / 1000.0;
}

static void an_pf_trace(struct rbt_analyzer *an, struct an_trace *t)
{
	FILE *f = an->opts.perfetto;
	char name[512];
	snprintf(name, sizeof(name), "%s (pid %u) %s", t->mt->name, t->mt->hdr.pid,
		 t->mt->hdr.cmdline);
	an_pf_sep(an);
	fprintf(f,
		"{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%u,\"args\":{\"name\":",
		an_pf_pid(t));
	rbt_json_fput_str(f, name);
	fputs("}}", f);
}

static void an_pf_thread(struct rbt_analyzer *an, struct an_trace *t,
			 struct an_thread *th)
{
	FILE *f = an->opts.perfetto;
	char name[300];
	snprintf(name, sizeof(name), "thread %u%s%s", th->m->tid, th->m->name ? " " : "",
		 th->m->name ? th->m->name : "");
	an_pf_sep(an);
	fprintf(f,
		"{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%u,\"tid\":%u,\"args\":{"
		"\"name\":",
		an_pf_pid(t), th->m->tid);
	rbt_json_fput_str(f, name);
	fputs("}}", f);
}

static void an_pf_call(struct rbt_analyzer *an, struct an_trace *t, uint32_t tid,
		       const char *name, uint64_t ts, uint64_t ts_exit,
		       const char *args_json)
{
	FILE *f = an->opts.perfetto;
	an_thread_get(an, t, tid);
	an_pf_sep(an);
	fprintf(f,
		"{\"ph\":\"X\",\"cat\":\"verbs\",\"name\":\"%s\",\"pid\":%u,\"tid\":%u,"
		"\"ts\":%.3f,\"dur\":%.3f%s%s}",
		name, an_pf_pid(t), tid, an_us(t, (double)ts),
		(double)(ts_exit - ts) * t->mt->ns_per_tick / 1000.0,
		args_json ? ",\"args\":" : "", args_json ? args_json : "");
}

static void an_pf_flow_start(struct rbt_analyzer *an, struct an_trace *t, uint32_t tid,
			     uint64_t ts, uint64_t flow)
{
	an_pf_sep(an);
	fprintf(an->opts.perfetto,
		"{\"ph\":\"s\",\"cat\":\"wr\",\"name\":\"wr\",\"id\":%llu,\"pid\":%u,"
		"\"tid\":%u,"
		"\"ts\":%.3f}",
		(unsigned long long)flow, an_pf_pid(t), tid, an_us(t, (double)ts));
}

static void an_pf_slice(struct rbt_analyzer *an, struct an_trace *t, uint32_t lane_tid,
			const char *name, double a, double b)
{
	if (b < a)
		b = a;
	an_pf_sep(an);
	fprintf(an->opts.perfetto,
		"{\"ph\":\"X\",\"cat\":\"phase\",\"name\":\"%s\",\"pid\":%u,\"tid\":%u,"
		"\"ts\":%.3f,\"dur\":%.3f}",
		name, an_pf_pid(t), lane_tid, an_us(t, a),
		(b - a) * t->mt->ns_per_tick / 1000.0);
}

static void an_pf_wr(struct rbt_analyzer *an, struct an_trace *t, struct an_qp *qp,
		     const struct rbt_model_wr *w, const struct rbt_model_comp *c)
{
	FILE *f = an->opts.perfetto;
	bool recv = w->recv;
	struct an_thread *th = an_thread_get(an, t, w->tid);
	if (!th)
		return;
	double start = (double)w->post_ts;
	double end = (double)(c->poll_exit > w->post_ts ? c->poll_exit : w->post_ts);
	double pe = (double)(w->post_exit < c->poll_exit ? w->post_exit : c->poll_exit);
	if (pe < start)
		pe = start;
	/* A lane whose last slice ended before this one starts: slices are emitted at
	 * completion, not in start order, but a lane free at our start holds only
	 * slices that ended before it, so none overlaps. */
	uint64_t s_ns = rbt_model_aligned_u64(t->mt, start),
		 e_ns = rbt_model_aligned_u64(t->mt, end);
	int kind = recv ? 1 : 0;
	uint32_t lane = 0, n = th->n_lanes[kind];
	while (lane < n && th->lane_end[kind][lane] > s_ns)
		lane++;
	if (lane == n) {
		if (n < AN_MAX_LANES) {
			uint64_t *nl = realloc(th->lane_end[kind], (n + 1) * sizeof(*nl));
			if (nl) {
				th->lane_end[kind] = nl;
				nl[n] = 0;
				th->n_lanes[kind] = ++n;
				uint32_t tid = AN_LANE_BASE + th->m->idx * AN_LANE_SPACE +
					       kind * AN_MAX_LANES + lane;
				an_pf_sep(an);
				fprintf(f,
					"{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%"
					"u,"
					"\"tid\":%u,\"args\":{\"name\":\"%s of thread %u "
					"#%u\"}}",
					an_pf_pid(t), tid, recv ? "receives" : "WRs",
					th->m->tid, lane);
				an_pf_sep(an);
				fprintf(f,
					"{\"ph\":\"M\",\"name\":\"thread_sort_index\","
					"\"pid\":%u,"
					"\"tid\":%u,\"args\":{\"sort_index\":%u}}",
					an_pf_pid(t), tid,
					100 + th->m->idx * AN_LANE_SPACE +
						kind * AN_MAX_LANES + lane);
			}
		}
		if (lane >= n) {
			if (!n)
				return;
			lane = n - 1;
		}
	}
	if (e_ns > th->lane_end[kind][lane])
		th->lane_end[kind][lane] = e_ns;
	uint32_t lane_tid =
		AN_LANE_BASE + th->m->idx * AN_LANE_SPACE + kind * AN_MAX_LANES + lane;
	/* the WR */
	an_pf_sep(an);
	fprintf(f,
		"{\"ph\":\"X\",\"cat\":\"wr\",\"name\":\"%s %llu "
		"B\",\"pid\":%u,\"tid\":%u,"
		"\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"qp_num\":%u,\"wr_id\":%llu,"
		"\"status\":\"%s\","
		"\"flow\":%llu,\"nic_ts\":%s}}",
		an_wr_opcode_name(w->opcode), (unsigned long long)w->bytes, an_pf_pid(t),
		lane_tid, an_us(t, start), (end - start) * t->mt->ns_per_tick / 1000.0,
		qp->m->qpn, (unsigned long long)w->wr_id, an_wc_status_name(c->status),
		(unsigned long long)w->user, c->exact ? "true" : "false");
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
	if (w->user) {
		an_pf_sep(an);
		fprintf(f,
			"{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"wr\",\"name\":\"wr\","
			"\"id\":%llu,"
			"\"pid\":%u,\"tid\":%u,\"ts\":%.3f}",
			(unsigned long long)w->user, an_pf_pid(t), c->poll_tid,
			an_us(t, (double)c->poll_ts));
	}
}

static void an_pf_end(struct rbt_analyzer *an)
{
	FILE *f = an->opts.perfetto;
	for (int i = 0; i < an->n_findings; i++) {
		const struct rbt_finding *fd = &an->findings[i].f;
		const struct an_trace *t = an->traces[fd->trace >= 0 ? fd->trace : 0];
		an_pf_sep(an);
		fprintf(f,
			"{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"finding\",\"name\":\"%s\","
			"\"pid\":%u,"
			"\"tid\":0,\"ts\":%.3f,\"args\":{\"title\":",
			fd->code, an_pf_pid(t),
			(fd->time_ns + (double)t->mt->align_ns) / 1000.0);
		rbt_json_fput_str(f, fd->title);
		fputs("}}", f);
	}
	fputs("\n]}\n", f);
	fflush(f);
}

static void an_pf_begin(struct rbt_analyzer *an)
{
	fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", an->opts.perfetto);
	for (int i = 0; i < an->n_traces; i++)
		an_pf_trace(an, an->traces[i]);
}

const struct an_sink_ops an_sink_perfetto = {
	.name = "perfetto",
	.per_wr = true,
	.begin = an_pf_begin,
	.thread = an_pf_thread,
	.call = an_pf_call,
	.wr_posted = an_pf_flow_start,
	.wr = an_pf_wr,
	.end = an_pf_end,
};
