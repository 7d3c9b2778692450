/* cmd_info.c - `rbtrace info FILE`: what a trace holds, without printing events:
 * header, process, clock calibration, chunk and event counts, losses, and
 * whether the file was finished cleanly.
 *
 * Reads the whole file through the streaming reader (bounded memory); never
 * stops at damage, reports it in one line at the end.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/rbt_cli.h"
#include "trace_format/rbt_format.h"
#include "util/rbt_grow.h"

static const char usage[] =
	"usage: rbtrace info [-j N] FILE\n"
	"\n"
	"Shows a trace's header (host, process, command line, tool), its clock\n"
	"calibration, the number of chunks, streams and events of each type, the\n"
	"events the recorder lost, and whether the file was finished cleanly.\n"
	"A damaged or truncated trace is read as far as possible; the damage is\n"
	"described on stderr and the exit code is 1.\n"
	"\n" RBT_CLI_JOBS_HELP "\n"
	"example:\n"
	"  rbtrace info client.rbt\n";

static void put_realtime(uint64_t ns)
{
	time_t t = (time_t)(ns / 1000000000u);
	struct tm tm;
	char buf[64];
	if (!ns || !gmtime_r(&t, &tm) ||
	    !strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm)) {
		printf("(not recorded)");
		return;
	}
	printf("%s.%06u UTC", buf, (unsigned)(ns % 1000000000u / 1000));
}

static const char *clock_name(uint32_t src)
{
	switch (src) {
	case RBT_CLOCK_TSC:
		return "tsc";
	case RBT_CLOCK_MONO:
		return "CLOCK_MONOTONIC";
	default:
		return "unknown";
	}
}

/* The recording threads: stream ids, their names from thread events, and
 * their event counts. */
struct stream {
	uint32_t id;
	uint64_t events;
	char name[32];
};

struct streams {
	struct stream *v;
	uint32_t n, cap;
};

static struct stream *stream_get(struct streams *s, uint32_t id)
{
	for (size_t i = s->n; i-- > 0;)
		if (s->v[i].id == id)
			return &s->v[i];
	if (rbt_grow(&s->v, &s->cap, s->n + 1, sizeof(*s->v), 16, 0))
		return NULL;
	struct stream *t = &s->v[s->n++];
	memset(t, 0, sizeof(*t));
	t->id = id;
	return t;
}

static int cmp_stream(const void *a, const void *b)
{
	uint32_t x = ((const struct stream *)a)->id, y = ((const struct stream *)b)->id;
	return x < y ? -1 : x > y;
}

int rbt_cmd_info(int argc, char **argv)
{
	char *pos[1];
	const char *jobs = NULL;
	unsigned threads;
	const struct rbt_cli_opt opts[] = {
		{ "jobs", 'j', &jobs, NULL },
		{ 0 },
	};
	int n;
	int rc = rbt_cli_parse_traces("info", argc, argv, opts, usage, pos, 1, &jobs,
				      &threads, &n);
	if (rc >= 0)
		return rc;
	const char *path = pos[0];
	struct rbt_reader *r = rbt_cli_open_trace_j("info", path, threads);
	if (!r)
		return RBT_EXIT_FAIL;

	struct streams streams = { 0 };
	uint64_t lost = 0, loss_events = 0, first_ts = 0, last_ts = 0;
	struct rbt_ev_snapshot snap[4];
	unsigned nsnap = 0;
	const struct rbt_event *ev;
	int err;
	while ((err = rbt_reader_next(r, &ev)) > 0) {
		struct stream *t = stream_get(&streams, ev->stream);
		if (t)
			t->events++;
		if (ev->type == RBT_EV_THREAD && ev->u.thread.tid <= UINT32_MAX &&
		    (t = stream_get(&streams, (uint32_t)ev->u.thread.tid)))
			snprintf(t->name, sizeof(t->name), "%s", ev->u.thread.name);
		if (!first_ts || ev->ts < first_ts)
			first_ts = ev->ts;
		if (ev->ts > last_ts)
			last_ts = ev->ts;
		if (ev->type == RBT_EV_LOSS) {
			lost += ev->u.loss.events;
			loss_events++;
		}
		if (ev->type == RBT_EV_SNAPSHOT && nsnap < 4)
			snap[nsnap++] = ev->u.snapshot;
	}
	const struct rbt_header *h = rbt_reader_header(r);
	const struct rbt_reader_stats *st = rbt_reader_stats(r);
	const struct rbt_trailer *t = rbt_reader_trailer(r);
	struct stat sb;

	printf("file:      %s", path);
	if (!stat(path, &sb))
		printf(" (%lld bytes)", (long long)sb.st_size);
	printf("\nformat:    version %u\n", h->version);
	printf("tool:      ");
	rbt_cli_put_text(*h->tool ? h->tool : "(unknown)");
	printf("\nhost:      ");
	rbt_cli_put_text(*h->host ? h->host : "(unknown)");
	printf("\nprocess:   pid %u, parent %u\n", h->pid, h->ppid);
	printf("command:   ");
	rbt_cli_put_text(h->cmdline);
	printf("\n");
	printf("clock:     %s, %.6f MHz\n", clock_name(h->clock_source),
	       (double)h->clock_hz / 1e6);
	printf("start:     ");
	put_realtime(h->start.real_ns);
	printf(" (ticks %" PRIu64 ", monotonic %.6f s)\n", h->start.ticks,
	       (double)h->start.mono_ns / 1e9);
	if (t && t->end.ticks) {
		printf("end:       ");
		put_realtime(t->end.real_ns);
		printf(" (ticks %" PRIu64 ", monotonic %.6f s)\n", t->end.ticks,
		       (double)t->end.mono_ns / 1e9);
		double span_ns = (double)(t->end.mono_ns - h->start.mono_ns);
		double ticks = (double)(t->end.ticks - h->start.ticks);
		printf("duration:  %.6f s", rbt_ticks_to_ns(h, t->end.ticks) / 1e9);
		if (span_ns > 0 && t->end.mono_ns > h->start.mono_ns)
			printf(" (clock check: %.6f MHz from the monotonic clock)",
			       ticks / span_ns * 1e3);
		printf("\n");
	} else if (st->events) {
		printf("duration:  %.6f s (first to last event)\n",
		       (rbt_ticks_to_ns(h, last_ts) - rbt_ticks_to_ns(h, first_ts)) /
			       1e9);
	}
	if (*h->series)
		printf("series:    %s, file %" PRIu64
		       " of the series; read with %u later "
		       "file%s (%" PRIu64 " carried-over events skipped)\n",
		       h->series, h->series_index, st->series_files,
		       st->series_files == 1 ? "" : "s", st->carried_skipped);
	for (unsigned i = 0; i < nsnap; i++) {
		const struct rbt_ev_snapshot *p = &snap[i];
		const char *tn = rbt_trigger_name(p->trigger);
		printf("snapshot:  trigger %s at %.6f s; window %.6f s to %.6f s",
		       tn ? tn : "(unknown)", rbt_ticks_to_ns(h, p->trigger_ts) / 1e9,
		       rbt_ticks_to_ns(h, p->window_start) / 1e9,
		       rbt_ticks_to_ns(h, p->window_end) / 1e9);
		if (p->trigger == RBT_TRIGGER_ERROR_WC)
			printf("; qp_num %" PRIu64 " wr_id %" PRIu64 " status %s",
			       p->qp_num, p->wr_id,
			       rbt_verbs_name(RBT_NAMES_WC_STATUS, p->detail)
				       ? rbt_verbs_name(RBT_NAMES_WC_STATUS, p->detail)
				       : "?");
		else if (p->trigger == RBT_TRIGGER_STALL ||
			 p->trigger == RBT_TRIGGER_SLOW_POST ||
			 p->trigger == RBT_TRIGGER_SLOW_POLL)
			printf("; %" PRIu64 " us", p->detail);
		else if (p->trigger == RBT_TRIGGER_ASYNC_EVENT)
			printf("; event type %" PRIu64, p->detail);
		if (p->also_fired)
			printf("; %" PRIu64 " more trigger%s", p->also_fired,
			       p->also_fired == 1 ? "" : "s");
		if (p->dropped_chunks)
			printf("; %" PRIu64 " older chunks not kept", p->dropped_chunks);
		printf("\n");
	}
	if (streams.n) /* no events: v is NULL, which qsort must not get */
		qsort(streams.v, streams.n, sizeof(*streams.v), cmp_stream);
	printf("streams:   %u", streams.n);
	for (size_t i = 0; i < streams.n && i < 16; i++)
		printf("%s%u", i ? " " : " (", streams.v[i].id);
	printf("%s\n", streams.n > 16 ? " ...)" : streams.n ? ")" : "");
	for (size_t i = 0; i < streams.n && i < 16; i++) {
		printf("  %-10u ", streams.v[i].id);
		rbt_cli_put_text(streams.v[i].name[0] ? streams.v[i].name : "-");
		printf("%*s %" PRIu64 " events\n",
		       16 - (int)strnlen(streams.v[i].name[0] ? streams.v[i].name : "-",
					 16),
		       "", streams.v[i].events);
	}
	printf("chunks:    %" PRIu64 " intact, %" PRIu64 " damaged\n", st->chunks,
	       st->bad_chunks);
	printf("events:    %" PRIu64 "\n", st->events);
	for (uint32_t i = 1; i <= RBT_EV_MAX_ID; i++)
		if (st->events_by_type[i])
			printf("  %-16s %" PRIu64 "\n",
			       rbt_event_name(i) ? rbt_event_name(i) : "(unknown id)",
			       st->events_by_type[i]);
	if (st->events_by_type[0])
		printf("  %-16s %" PRIu64 "\n", "(unknown id)", st->events_by_type[0]);
	printf("lost:      %" PRIu64 " events recorder-side (%" PRIu64 " loss records)",
	       lost, loss_events);
	if (st->bad_chunks || st->truncated) {
		if (t && t->events >= st->events)
			printf(", %" PRIu64 " in damaged chunks", t->events - st->events);
		else if (st->unreadable_regions && !st->lost_events_in_bad_chunks)
			printf(", an unknown number in damaged chunks");
		else
			printf(", %s%" PRIu64 " in damaged chunks",
			       st->unreadable_regions ? "at least " : "",
			       st->lost_events_in_bad_chunks);
	}
	printf("\n");
	if (t) {
		printf("finished:  yes (trailer: %" PRIu64 " events, %" PRIu64 " lost)\n",
		       t->events, t->lost_events);
		if (t->end_how == RBT_END_SIGNAL)
			printf("ended:     by signal %u (%s)\n", t->end_signal,
			       strsignal((int)t->end_signal));
		else if (t->end_how == RBT_END_EXIT)
			printf("ended:     exit(%d)\n", t->exit_code);
		else if (rbt_end_name(t->end_how) && t->end_how)
			printf("ended:     %s\n", rbt_end_name(t->end_how));
		if (t->lost_events)
			printf("complete:  no (%" PRIu64
			       " records the recorder could not keep)\n",
			       t->lost_events);
	} else {
		printf("finished:  no (no trailer)\n");
	}
	rc = rbt_cli_trace_verdict("info", path, r, err);
	free(streams.v);
	rbt_reader_close(r);
	return rc;
}
