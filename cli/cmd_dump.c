/* cmd_dump.c - `rbtrace dump FILE`: every event, one line of text or one JSON
 * object each, optionally filtered by type, QP and stream; stacks symbolised
 * through the trace's module_map events.
 *
 * Streams the file (bounded memory); prints what can be salvaged from a damaged
 * trace and says on stderr what was lost. Never crashes on bad input.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer/rbt_analyzer.h"
#include "cli/cli_symbols.h"
#include "cli/rbt_cli.h"
#include "util/rbt_json.h"
#include "trace_format/rbt_format.h"

static const char usage[] =
	"usage: rbtrace dump FILE [--json] [--type=T,...] [--qp=N] [--stream=TID]\n"
	"                    [--from=T] [--to=T] [--around=T[,W]] [-j N]\n"
	"\n"
	"Prints every event of a trace in file order, one line each: time in seconds\n"
	"since the trace started, [thread id], type and the fields that are set\n"
	"(durations as +us from the event's start). Stacks are symbolised as\n"
	"module+offset (function+offset) from the trace's module_map events.\n"
	"\n"
	"  --json          one JSON object per line, with a \"type\" field; posts\n"
	"                  carry a \"wrs\" array, polls a \"wcs\" array\n"
	"  --type=T,...    only these event types (names as printed, e.g. post_send)\n"
	"  --qp=N          only events about QP number N (posts, polls with a\n"
	"                  completion of N, create/modify/query/destroy, async events)\n"
	"  --stream=TID    only events recorded by thread TID\n"
	"  --thread=TID    the same\n"
	"  --from=T        only events that started at T or later (T: ms since the\n"
	"                  start, a unit as in 2.5s, or finding:N: as in `rbtrace\n"
	"                  report --help`)\n"
	"  --to=T          only events that started before T\n"
	"  --around=T[,W]  only events that started in [T - W, T + W) (W: 100 "
	"ms)\n" RBT_CLI_JOBS_HELP "\n"
	"A damaged or truncated trace prints every event that could be salvaged, then\n"
	"one line on stderr with the byte offset of the damage and the events lost;\n"
	"the exit code is then 1.\n"
	"\n"
	"examples (client.rbt: recorded as in `rbtrace record --help`):\n"
	"  rbtrace dump client.rbt\n"
	"  rbtrace dump client.rbt --type=qp_create        # its QPs and their numbers\n"
	"  rbtrace dump client.rbt --type=post_send,poll_cq --qp=17   # one of them\n"
	"  rbtrace dump client.rbt --json --type=poll_cq | grep -Fv '\"wcs\":[]'"
	"   # polls that returned\n";

struct qpmap {
	struct {
		uint64_t handle, qpn;
	} * v;
	size_t n, cap;
};

static void qpmap_set(struct qpmap *m, uint64_t handle, uint64_t qpn)
{
	for (size_t i = 0; i < m->n; i++)
		if (m->v[i].handle == handle) {
			m->v[i].qpn = qpn;
			return;
		}
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		void *v = realloc(m->v, cap * sizeof(*m->v));
		if (!v)
			return;
		m->v = v;
		m->cap = cap;
	}
	m->v[m->n].handle = handle;
	m->v[m->n].qpn = qpn;
	m->n++;
}

static int qpmap_is(const struct qpmap *m, uint64_t handle, uint64_t qpn)
{
	for (size_t i = m->n; i-- > 0;)
		if (m->v[i].handle == handle)
			return m->v[i].qpn == qpn;
	return 0;
}

static int about_qp(const struct rbt_event *ev, const struct qpmap *m, uint64_t qpn)
{
	switch (ev->type) {
	case RBT_EV_POST_SEND:
		return ev->u.post_send.qp_num == qpn;
	case RBT_EV_POST_RECV:
		return ev->u.post_recv.qp_num == qpn;
	case RBT_EV_QP_CREATE:
		return ev->u.qp_create.qp_num == qpn;
	case RBT_EV_QP_MODIFY:
		return qpmap_is(m, ev->u.qp_modify.qp, qpn);
	case RBT_EV_QP_QUERY:
		return qpmap_is(m, ev->u.qp_query.qp, qpn);
	case RBT_EV_QP_DESTROY:
		return qpmap_is(m, ev->u.qp_destroy.qp, qpn);
	case RBT_EV_QP_FINAL_STATE:
		return ev->u.qp_final_state.qp_num == qpn;
	case RBT_EV_ASYNC_EVENT:
		return qpmap_is(m, ev->u.async_event.element, qpn);
	case RBT_EV_POLL_CQ:
		for (uint32_t i = 0; i < ev->u.poll_cq.n_wcs; i++)
			if (ev->u.poll_cq.wcs[i].qp_num == qpn)
				return 1;
		return 0;
	default:
		return 0;
	}
}

/* Whether the last non-stack event of each stream was printed: a stack event
 * belongs to it and follows it through the filters. */
struct shown {
	struct {
		uint32_t stream;
		int shown;
	} v[64];
	size_t n;
};

static int *shown_slot(struct shown *s, uint32_t stream)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i].stream == stream)
			return &s->v[i].shown;
	size_t i = s->n < 64 ? s->n++ : stream % 64; /* many threads: approximate */
	s->v[i].stream = stream;
	s->v[i].shown = 0;
	return &s->v[i].shown;
}

/* A stack event as one JSON object, through the one JSON writer. */
static void print_stack_json(const struct rbt_header *h, const struct rbt_event *ev,
			     struct rbt_symbolizer *sym)
{
	const struct rbt_ev_stack *s = &ev->u.stack;
	const char *ref = rbt_event_name((uint32_t)s->ref_type);
	struct rbt_json j;
	rbt_json_init(&j, stdout);
	rbt_json_obj(&j);
	rbt_json_kstr(&j, "type", "stack");
	rbt_json_ku64(&j, "stream", ev->stream);
	rbt_json_ku64(&j, "ts", ev->ts);
	rbt_json_kdbl(&j, "t_ns", "%.1f", rbt_ticks_to_ns(h, ev->ts));
	rbt_json_ku64(&j, "ref_type", s->ref_type);
	rbt_json_kstr(&j, "ref", ref ? ref : "");
	rbt_json_key(&j, "frames");
	rbt_json_arr(&j);
	for (uint32_t i = 0; i < s->n_frames; i++) {
		struct rbt_sym y;
		uint64_t ip = s->frames[i].ip;
		rbt_sym_lookup(sym, ip, i > 0, &y);
		rbt_json_obj(&j);
		rbt_json_ku64(&j, "ip", ip);
		if (y.module) {
			rbt_json_kstr(&j, "module", y.module);
			rbt_json_ku64(&j, "module_off", y.module_off);
		}
		if (y.function) {
			rbt_json_kstr(&j, "function", y.function);
			rbt_json_ku64(&j, "function_off", y.function_off);
		}
		rbt_json_obj_end(&j);
	}
	rbt_json_arr_end(&j);
	rbt_json_obj_end(&j);
	putchar('\n');
}

static void print_stack(const struct rbt_header *h, const struct rbt_event *ev,
			struct rbt_symbolizer *sym, int json)
{
	const struct rbt_ev_stack *s = &ev->u.stack;
	const char *ref = rbt_event_name((uint32_t)s->ref_type);
	if (json) {
		print_stack_json(h, ev, sym);
		return;
	}
	printf("%.9f [%u] stack ref=%s frames=%u\n", rbt_ticks_to_ns(h, ev->ts) / 1e9,
	       ev->stream, ref ? ref : "?", s->n_frames);
	for (uint32_t i = 0; i < s->n_frames; i++) {
		struct rbt_sym y;
		uint64_t ip = s->frames[i].ip;
		rbt_sym_lookup(sym, ip, i > 0, &y);
		printf("    #%-2u 0x%" PRIx64, i, ip);
		if (y.module) {
			putchar(' ');
			rbt_cli_put_text(y.module);
			printf("+0x%" PRIx64, y.module_off);
		}
		if (y.function) {
			printf(" (");
			rbt_cli_put_text(y.function);
			printf("+0x%" PRIx64 ")", y.function_off);
		}
		printf("\n");
	}
}

/* ev_ts in [from, to) of the window, in ns since the trace's start. */
static int in_window(const struct rbt_header *h, const struct rbt_analyzer_filter *w,
		     uint64_t ev_ts)
{
	if (!w->has_from && !w->has_to)
		return 1;
	double ns = ((double)ev_ts - (double)h->start.ticks) *
		    (h->clock_hz ? 1e9 / (double)h->clock_hz : 1);
	return (!w->has_from || ns >= w->from_ns) && (!w->has_to || ns < w->to_ns);
}

int rbt_cmd_dump(int argc, char **argv)
{
	const char *types = NULL, *qp = NULL, *stream = NULL, *jobs = NULL;
	unsigned threads;
	int json = 0;
	struct rbt_cli_filter_args fa = { 0 };
	const struct rbt_cli_opt opts[] = {
		{ "json", 0, NULL, &json },	{ "type", 't', &types, NULL },
		{ "qp", 0, &qp, NULL },		{ "stream", 0, &stream, NULL },
		{ "thread", 0, &stream, NULL }, { "from", 0, &fa.from, NULL },
		{ "to", 0, &fa.to, NULL },	{ "around", 0, &fa.around, NULL },
		{ "jobs", 'j', &jobs, NULL },	{ 0 },
	};
	char *pos[1];
	int n;
	int rc = rbt_cli_parse_traces("dump", argc, argv, opts, usage, pos, 1, NULL, NULL,
				      &n);
	if (rc >= 0)
		return rc;

	uint64_t want_types = 0, qpn = 0, tid = 0;
	if (types) {
		char *copy = strdup(types), *save = NULL;
		for (char *t = strtok_r(copy, ",", &save); t;
		     t = strtok_r(NULL, ",", &save)) {
			uint32_t id = rbt_event_type_from_name(t);
			if (!id) {
				rc = rbt_cli_usage("dump", "--type: no event type '%s'",
						   t);
				free(copy);
				return rc;
			}
			want_types |= 1ull << id;
		}
		free(copy);
		if (!want_types)
			return rbt_cli_usage("dump", "--type: no event type given");
	}
	if ((qp && rbt_cli_u64("dump", "qp", qp, &qpn)) ||
	    (stream && rbt_cli_u64("dump", "stream", stream, &tid)) ||
	    rbt_cli_jobs("dump", jobs, &threads))
		return RBT_EXIT_USAGE;
	struct rbt_analyzer_filter win;
	rc = rbt_cli_filter_build("dump", &fa, pos, 1, &win);
	if (rc != RBT_EXIT_OK)
		return rc;

	const char *path = pos[0];
	struct rbt_reader *r = rbt_cli_open_trace_j("dump", path, threads);
	if (!r)
		return RBT_EXIT_FAIL;
	const struct rbt_header *h = rbt_reader_header(r);
	struct rbt_symbolizer *sym = rbt_sym_new();
	struct qpmap qps = { 0 };
	struct shown shown = { .n = 0 };
	size_t cap = 1 << 16;
	char *buf = malloc(cap);
	const struct rbt_event *ev;
	int err = 0;
	/* Stop at the first failed write (a full disk): main() reports it. */
	while (buf && !ferror(stdout) && (err = rbt_reader_next(r, &ev)) > 0) {
		if (ev->type == RBT_EV_MODULE_MAP)
			rbt_sym_add_module(sym, ev->u.module_map.base,
					   ev->u.module_map.size, ev->u.module_map.offset,
					   ev->u.module_map.path);
		if (ev->type == RBT_EV_QP_CREATE && !ev->u.qp_create.ret)
			qpmap_set(&qps, ev->u.qp_create.qp, ev->u.qp_create.qp_num);
		int *last = shown_slot(&shown, ev->stream);
		int show = (!stream || ev->stream == tid) && in_window(h, &win, ev->ts);
		if (ev->type == RBT_EV_STACK) {
			int listed =
				ev->type <= RBT_EV_MAX_ID && (want_types >> ev->type & 1);
			show = show && (*last || (listed && !qp));
			if (show)
				print_stack(h, ev, sym, json);
			continue;
		}
		if (want_types &&
		    !(ev->type <= RBT_EV_MAX_ID && (want_types >> ev->type & 1)))
			show = 0;
		if (qp && !about_qp(ev, &qps, qpn))
			show = 0;
		*last = show;
		if (!show)
			continue;
		size_t need = json ? rbt_event_format_json(h, ev, buf, cap)
				   : rbt_event_format_text(h, ev, buf, cap);
		if (need >= cap) {
			char *nb = realloc(buf, need + 1);
			if (!nb) {
				rbt_cli_error("dump", "out of memory");
				break;
			}
			buf = nb;
			cap = need + 1;
			json ? rbt_event_format_json(h, ev, buf, cap)
			     : rbt_event_format_text(h, ev, buf, cap);
		}
		fputs(buf, stdout);
		fputc('\n', stdout);
	}
	if (!buf) {
		rbt_cli_error("dump", "out of memory");
		err = -12;
	}
	fflush(stdout);
	/* Cut short by a failed write, the rest of the file was not read: no
	 * verdict on it (main() reports the write error). */
	rc = ferror(stdout) ? RBT_EXIT_FAIL : rbt_cli_trace_verdict("dump", path, r, err);
	free(buf);
	free(qps.v);
	rbt_sym_free(sym);
	rbt_reader_close(r);
	return rc;
}
