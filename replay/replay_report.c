/* replay_report.c - the fidelity report of a replay: how late each post was issued
 * against its schedule, whether completions came back as recorded (per QP and
 * queue: count, opcode, status, byte_len), final QP states, and every divergence.
 *
 * Runs after the replay: it may allocate and print, never issue a verb.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "replay/replay_int.h"

void rp_diverge(struct rp_job *j, const char *fmt, ...)
{
	va_list ap;
	char *msg = NULL;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&msg, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	pthread_mutex_lock(&j->rep.lock);
	if (j->rep.ndiv == j->rep.capdiv) {
		int cap = j->rep.capdiv ? 2 * j->rep.capdiv : 32;
		char **d = realloc(j->rep.div, (size_t)cap * sizeof(*d));

		if (!d) {
			pthread_mutex_unlock(&j->rep.lock);
			free(msg);
			return;
		}
		j->rep.div = d;
		j->rep.capdiv = cap;
	}
	j->rep.div[j->rep.ndiv++] = msg;
	pthread_mutex_unlock(&j->rep.lock);
}

static const char *rp_state_name(uint32_t s)
{
	const char *n = s < 7 ? rbt_verbs_name(RBT_NAMES_QP_STATE, s) : NULL;

	return n ? n : "?";
}

static const char *rp_qp_type_name(uint64_t t)
{
	const char *n = rbt_verbs_name(RBT_NAMES_QP_TYPE, t);

	return n ? n : "?";
}

static int rp_wc_equal(const struct rp_wcrec *a, const struct rp_wcrec *b)
{
	if (a->status != b->status)
		return 0;
	if (a->status != IBV_WC_SUCCESS)
		return 1; /* opcode and length are undefined in error completions */
	if (a->opcode != b->opcode)
		return 0;
	/* byte_len is defined for receives, reads and atomics only (IB spec) */
	if ((a->opcode & IBV_WC_RECV) || a->opcode == IBV_WC_RDMA_READ ||
	    a->opcode == IBV_WC_COMP_SWAP || a->opcode == IBV_WC_FETCH_ADD)
		return a->no_len || b->no_len || a->byte_len == b->byte_len;
	return 1;
}

static void rp_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static double rp_pct(const uint64_t *v, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	i = (size_t)(p * (double)(n - 1) + 0.5);
	return (double)v[i < n ? i : n - 1];
}

/* ---- completions: the replay's against the recording, per QP and queue ---- */
static void rp_report_match_queue(struct rp_job *j, struct rp_side *s, struct rp_qp *q,
				  int d, struct rbt_replay_summary *sum)
{
	struct rp_wclist *r = &q->rec_wc[d], *p = &q->rep_wc[d];
	uint32_t n = r->n < p->n ? r->n : p->n, shown = 0;

	sum->completions_expected += r->n;
	for (uint32_t k = 0; k < n; k++) {
		if (rp_wc_equal(&r->v[k], &p->v[k])) {
			sum->completions_matched++;
			continue;
		}
		if (shown++ < 5)
			rp_diverge(j,
				   "%s: QP %llu %s completion #%u: "
				   "recorded "
				   "status %s opcode %u len %u, "
				   "replay status "
				   "%s opcode %u len %u",
				   s->path, (unsigned long long)q->rec.qp_num,
				   d ? "recv" : "send", k,
				   ibv_wc_status_str(r->v[k].status), r->v[k].opcode,
				   r->v[k].byte_len, ibv_wc_status_str(p->v[k].status),
				   p->v[k].opcode, p->v[k].byte_len);
	}
	if (shown > 5)
		rp_diverge(j,
			   "%s: QP %llu %s: %u more mismatching "
			   "completions",
			   s->path, (unsigned long long)q->rec.qp_num,
			   d ? "recv" : "send", shown - 5);
	if (r->n > p->n)
		rp_diverge(j,
			   "%s: QP %llu %s: recorded %u "
			   "completions, replay "
			   "%u",
			   s->path, (unsigned long long)q->rec.qp_num,
			   d ? "recv" : "send", r->n, p->n);
	/* Beyond the recorded count: completions of WRs the
	 * replay posted as recorded that the program never
	 * polled (it stopped polling, or its polls of a shared
	 * CQ took another QP's). Fine if they succeeded; an
	 * error the program never saw is still a divergence. */
	for (uint32_t k = r->n; k < p->n; k++) {
		if (p->v[k].status == IBV_WC_SUCCESS) {
			sum->completions_unpolled++;
			continue;
		}
		rp_diverge(j,
			   "%s: QP %llu %s completion #%u, which "
			   "the "
			   "program never polled: replay status %s",
			   s->path, (unsigned long long)q->rec.qp_num,
			   d ? "recv" : "send", k, ibv_wc_status_str(p->v[k].status));
	}
}

/* Completion matching adds divergences: it runs before anything is printed. */
static void rp_report_match(struct rp_job *j, struct rbt_replay_summary *sum)
{
	for (int si = 0; si < j->nside; si++) {
		struct rp_side *s = &j->side[si];

		/* our QPs, then other processes' TGT QPs our XRC SRQs received
		 * through (no state of ours to compare) */
		for (int qi = 0; qi < s->nqp + s->nxqp; qi++) {
			struct rp_qp *q = qi < s->nqp ? &s->qp[qi] : &s->xqp[qi - s->nqp];

			for (int d = 0; d < 2; d++)
				rp_report_match_queue(j, s, q, d, sum);
			if (qi < s->nqp && q->replay_state != q->rec_final_state)
				rp_diverge(j, "%s: QP %llu ends in state %s, recorded %s",
					   s->path, (unsigned long long)q->rec.qp_num,
					   rp_state_name(q->replay_state),
					   rp_state_name(q->rec_final_state));
		}
	}
}

/* ---- timing: how late each post was against its schedule ------------------- */
struct rp_tally {
	uint64_t *late, *own; /* per timed post: lateness, the replayer's own part */
	size_t n, cap;
	uint64_t first, last, rfirst, rlast; /* replayed and recorded span */
};

static int rp_tally_room(struct rp_tally *t)
{
	size_t cap = t->cap ? 2 * t->cap : 1024;
	uint64_t *v, *w;

	if (t->n < t->cap)
		return 1;
	v = realloc(t->late, cap * sizeof(*v));
	if (!v)
		return 0;
	t->late = v;
	w = realloc(t->own, cap * sizeof(*w));
	if (!w)
		return 0;
	t->own = w;
	t->cap = cap;
	return 1;
}

static void rp_report_debug_late(struct rp_job *j, struct rp_side *s, int i)
{
	struct rp_step *st = &s->step[i];
	uint32_t t = st->ev.type;

	if (getenv("RBTRACE_REPLAY_DEBUG") && st->t_issue > st->deadline + 5000)
		fprintf(j->log,
			"late: %s step %d %s by %.2f us (step before: "
			"%s, took "
			"%.2f us, recorded %.2f us)\n",
			s->path, i, rbt_event_name(t),
			(double)(st->t_issue - st->deadline) / 1e3,
			i ? rbt_event_name(s->step[i - 1].ev.type) : "-",
			i ? (double)(s->step[i - 1].t_exit - s->step[i - 1].t_issue) / 1e3
			  : 0,
			i ? (double)(s->step[i - 1].rec_exit_ns - s->step[i - 1].rec_ns) /
					1e3
			  : 0);
}

static void rp_report_late_side(struct rp_job *j, struct rp_side *s, struct rp_tally *t,
				struct rbt_replay_summary *sum)
{
	int timed = j->o->timing != RBT_REPLAY_ASAP;

	s->late_from = t->n;
	for (int i = s->prefix; i < s->nstep; i++) {
		struct rp_step *st = &s->step[i];
		uint32_t ty = st->ev.type;
		uint64_t from;

		if (st->skipped || !st->t_issue)
			continue;
		if (st->t_issue < t->first)
			t->first = st->t_issue;
		if (st->t_issue > t->last)
			t->last = st->t_issue;
		if (st->rec_ns < t->rfirst)
			t->rfirst = st->rec_ns;
		if (st->rec_ns > t->rlast)
			t->rlast = st->rec_ns;
		if (ty != RBT_EV_POST_SEND && ty != RBT_EV_POST_RECV &&
		    ty != RBT_EV_POST_SRQ_RECV)
			continue;
		sum->posts++;
		if (!timed || !st->deadline || !rp_tally_room(t))
			continue;
		rp_report_debug_late(j, s, i);
		from = st->ready > st->deadline ? st->ready : st->deadline;
		t->own[t->n] = st->t_issue > from ? st->t_issue - from : 0;
		t->late[t->n++] =
			st->t_issue > st->deadline ? st->t_issue - st->deadline : 0;
	}
	s->late_to = t->n;
}

/* Sorts v[0..n) and gives its median, 99th percentile and maximum. */
static void rp_pcts(uint64_t *v, size_t n, double *p50, double *p99, double *max)
{
	qsort(v, n, sizeof(*v), rp_cmp_u64);
	*p50 = rp_pct(v, n, 0.5);
	*p99 = rp_pct(v, n, 0.99);
	*max = (double)v[n - 1];
}

static void rp_report_timing(struct rp_job *j, struct rp_tally *t,
			     struct rbt_replay_summary *sum)
{
	t->first = t->rfirst = UINT64_MAX;
	for (int si = 0; si < j->nside; si++)
		rp_report_late_side(j, &j->side[si], t, sum);
	for (int si = 0; si < j->nside; si++) {
		struct rp_side *s = &j->side[si];
		size_t n = s->late_to - s->late_from;

		if (!n)
			continue;
		rp_pcts(t->late + s->late_from, n, &s->late_p50, &s->late_p99,
			&s->late_max);
		rp_pcts(t->own + s->late_from, n, &s->own_p50, &s->own_p99, &s->own_max);
	}
	if (t->n) {
		rp_pcts(t->late, t->n, &sum->late_p50_ns, &sum->late_p99_ns,
			&sum->late_max_ns);
		rp_pcts(t->own, t->n, &sum->own_p50_ns, &sum->own_p99_ns,
			&sum->own_max_ns);
	}
	sum->wall_ns = t->last > t->first ? (double)(t->last - t->first) : 0;
	sum->rec_wall_ns = t->rlast > t->rfirst ? (double)(t->rlast - t->rfirst) : 0;
}

/* ---- printing ---------------------------------------------------------------- */
static const char *const timing_names[] = { "recorded", "asap", "scale", "deps" };

static void rp_report_json(struct rp_job *j, FILE *f, size_t nlate,
			   const struct rbt_replay_summary *sum)
{
	fprintf(f, "{\"timing\":\"%s\",\"scale\":%g,\"posts\":%llu,",
		timing_names[j->o->timing & 3],
		j->o->timing == RBT_REPLAY_SCALE ? j->o->scale : 1.0,
		(unsigned long long)sum->posts);
	fprintf(f,
		"\"lateness_ns\":{\"count\":%zu,\"p50\":%.0f,\"p99\":%.0f,"
		"\"max\":%.0f},",
		nlate, sum->late_p50_ns, sum->late_p99_ns, sum->late_max_ns);
	fprintf(f, "\"own_lateness_ns\":{\"p50\":%.0f,\"p99\":%.0f,\"max\":%.0f},",
		sum->own_p50_ns, sum->own_p99_ns, sum->own_max_ns);
	fprintf(f, "\"sides\":[");
	for (int si = 0; si < j->nside; si++) {
		struct rp_side *s = &j->side[si];

		fprintf(f, "%s{\"trace\":", si ? "," : "");
		rp_json_str(f, s->path);
		fprintf(f,
			",\"posts_timed\":%zu,\"lateness_ns\":{\"p50\":%.0f,"
			"\"p99\":%.0f,"
			"\"max\":%.0f},\"own_lateness_ns\":{\"p50\":%.0f,\"p99\":"
			"%.0f,"
			"\"max\":%.0f},\"cq_events_missed\":%llu}",
			s->late_to - s->late_from, s->late_p50, s->late_p99, s->late_max,
			s->own_p50, s->own_p99, s->own_max,
			(unsigned long long)s->cq_events_missed);
	}
	fprintf(f, "],");
	fprintf(f, "\"wall_ns\":%.0f,\"recorded_wall_ns\":%.0f,", sum->wall_ns,
		sum->rec_wall_ns);
	fprintf(f,
		"\"completions\":{\"expected\":%llu,\"matched\":%llu},"
		"\"completions_unpolled\":%llu,\"qps\":[",
		(unsigned long long)sum->completions_expected,
		(unsigned long long)sum->completions_matched,
		(unsigned long long)sum->completions_unpolled);
	for (int si = 0, c = 0; si < j->nside; si++)
		for (int qi = 0; qi < j->side[si].nqp; qi++) {
			struct rp_qp *q = &j->side[si].qp[qi];

			fprintf(f, "%s{\"trace\":", c++ ? "," : "");
			rp_json_str(f, j->side[si].path);
			fprintf(f,
				",\"qp_num\":%llu,\"replay_qp_num\":%u,\"send\":{"
				"\"recorded\":%u,"
				"\"replayed\":%u},\"recv\":{\"recorded\":%u,"
				"\"replayed\":%u},"
				"\"state\":{\"recorded\":\"%s\",\"replayed\":\"%"
				"s\"},\"type\":\"%s\"}",
				(unsigned long long)q->rec.qp_num,
				q->qp ? q->qp->qp_num : 0, q->rec_wc[0].n, q->rep_wc[0].n,
				q->rec_wc[1].n, q->rep_wc[1].n,
				rp_state_name(q->rec_final_state),
				rp_state_name(q->replay_state),
				rp_qp_type_name(q->rec.qp_type));
		}
	/* another process's TGT QP our XRC SRQs received through */
	for (int si = 0; si < j->nside; si++)
		for (int qi = 0; qi < j->side[si].nxqp; qi++) {
			struct rp_qp *q = &j->side[si].xqp[qi];

			fprintf(f, ",{\"trace\":");
			rp_json_str(f, j->side[si].path);
			fprintf(f,
				",\"qp_num\":%llu,\"replay_qp_num\":%u,"
				"\"other_process\":true,\"type\":\"XRC_RECV\","
				"\"send\":{\"recorded\":0,\"replayed\":0},"
				"\"recv\":{\"recorded\":%u,\"replayed\":%u}}",
				(unsigned long long)q->rec.qp_num, q->foreign_new_qpn,
				q->rec_wc[1].n, q->rep_wc[1].n);
		}
	fprintf(f, "],\"divergences\":[");
	for (int i = 0; i < j->rep.ndiv; i++) {
		if (i)
			fputc(',', f);
		rp_json_str(f, j->rep.div[i]);
	}
	fprintf(f, "]}\n");
}

/* Each side's lateness (own: the replayer's own part), with several sides. */
static void rp_text_side_late(struct rp_job *j, FILE *f, int own)
{
	for (int si = 0; si < j->nside; si++) {
		const struct rp_side *s = &j->side[si];

		if (s->late_to > s->late_from)
			fprintf(f,
				"  %s: %slateness p50 %.2f us, p99 %.2f us, max %.2f "
				"us\n",
				s->path, own ? "own " : "",
				(own ? s->own_p50 : s->late_p50) / 1e3,
				(own ? s->own_p99 : s->late_p99) / 1e3,
				(own ? s->own_max : s->late_max) / 1e3);
	}
}

static void rp_report_text(struct rp_job *j, FILE *f, size_t nlate,
			   const struct rbt_replay_summary *sum)
{
	fprintf(f, "replay: %d trace(s), timing %s", j->nside,
		timing_names[j->o->timing & 3]);
	if (j->o->timing == RBT_REPLAY_SCALE)
		fprintf(f, " x%g", j->o->scale);
	fprintf(f, ", %llu posts\n", (unsigned long long)sum->posts);
	if (nlate)
		fprintf(f,
			"post lateness vs schedule: p50 %.2f us, p99 %.2f us, "
			"max %.2f us "
			"(%zu posts)\n",
			sum->late_p50_ns / 1e3, sum->late_p99_ns / 1e3,
			sum->late_max_ns / 1e3, nlate);
	if (nlate)
		fprintf(f,
			"  of which the replayer's own (past the deadline and "
			"past the "
			"end of the step before): p50 %.2f us, p99 %.2f us, max "
			"%.2f us\n",
			sum->own_p50_ns / 1e3, sum->own_p99_ns / 1e3,
			sum->own_max_ns / 1e3);
	fprintf(f, "span: replay %.3f ms, recorded %.3f ms", sum->wall_ns / 1e6,
		sum->rec_wall_ns / 1e6);
	if (sum->wall_ns > 0 && sum->rec_wall_ns > 0)
		fprintf(f, " (post rate %.0f/s vs recorded %.0f/s)",
			(double)sum->posts * 1e9 / sum->wall_ns,
			(double)sum->posts * 1e9 / sum->rec_wall_ns);
	fputc('\n', f);
	if (j->nside > 1) {
		rp_text_side_late(j, f, 0);
		rp_text_side_late(j, f, 1);
	}
	for (int si = 0; si < j->nside; si++)
		for (int qi = 0; qi < j->side[si].nqp; qi++) {
			struct rp_qp *q = &j->side[si].qp[qi];

			fprintf(f,
				"  %s QP %llu -> %u: send %u/%u, recv %u/%u "
				"completions "
				"(replayed/recorded), state %s (recorded %s)\n",
				j->side[si].path, (unsigned long long)q->rec.qp_num,
				q->qp ? q->qp->qp_num : 0, q->rep_wc[0].n, q->rec_wc[0].n,
				q->rep_wc[1].n, q->rec_wc[1].n,
				rp_state_name(q->replay_state),
				rp_state_name(q->rec_final_state));
		}
	for (int si = 0; si < j->nside; si++)
		for (int qi = 0; qi < j->side[si].nxqp; qi++) {
			struct rp_qp *q = &j->side[si].xqp[qi];

			fprintf(f,
				"  %s XRC receives through QP %llu -> %u of "
				"another trace: recv %u/%u completions "
				"(replayed/recorded)\n",
				j->side[si].path, (unsigned long long)q->rec.qp_num,
				q->foreign_new_qpn, q->rep_wc[1].n, q->rec_wc[1].n);
		}
	fprintf(f, "completions matched: %llu of %llu\n",
		(unsigned long long)sum->completions_matched,
		(unsigned long long)sum->completions_expected);
	if (sum->completions_unpolled)
		fprintf(f,
			"plus %llu successful completions the program never "
			"polled (beyond its recorded ones on a QP; see "
			"docs/replay.md)\n",
			(unsigned long long)sum->completions_unpolled);
	if (j->rep.ndiv) {
		fprintf(f, "divergences (%d):\n", j->rep.ndiv);
		for (int i = 0; i < j->rep.ndiv; i++)
			fprintf(f, "  %s\n", j->rep.div[i]);
	} else {
		fprintf(f, "no divergence\n");
	}
}

void rp_report_print(struct rp_job *j, struct rbt_replay_summary *sum)
{
	FILE *f = j->o->report ? j->o->report : stdout;
	struct rp_tally t = { 0 };

	rp_report_match(j, sum);
	rp_report_timing(j, &t, sum);
	sum->divergences = (uint64_t)j->rep.ndiv;
	if (j->o->json)
		rp_report_json(j, f, t.n, sum);
	else
		rp_report_text(j, f, t.n, sum);
	fflush(f);
	free(t.late);
	free(t.own);
}
