/* replay_report.c - the fidelity report of a replay: how late each post was issued
 * against its schedule (a streamed side's from the sample its windows kept),
 * whether completions came back as recorded (matched by replay_match.c: per QP
 * and queue, count, opcode, status, byte_len), final QP states, and every
 * divergence (repeats counted, not listed).
 *
 * Runs after the replay: it may allocate and print, never issue a verb.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "replay/replay_int.h"
#include "util/rbt_json.h"

/* The message with the numbers that differ between repeats of one divergence
 * (step numbers, completion indexes, waited times) taken out. */
static char *rp_div_key(const char *msg)
{
	static const char *const marks[] = { "step ", "#", "waited " };
	char *k = strdup(msg), *o = k;

	if (!k)
		return NULL;
	for (const char *p = msg; *p;) {
		size_t ml = 0;

		for (size_t m = 0; m < sizeof(marks) / sizeof(marks[0]); m++)
			if (!strncmp(p, marks[m], strlen(marks[m])))
				ml = strlen(marks[m]);
		if (ml && p[ml] >= '0' && p[ml] <= '9') {
			memcpy(o, p, ml);
			o += ml;
			p += ml;
			*o++ = '*';
			while (*p >= '0' && *p <= '9')
				p++;
			continue;
		}
		*o++ = *p++;
	}
	*o = 0;
	return k;
}

static long long rp_div_step(const char *msg)
{
	const char *p = strstr(msg, "step ");

	return p && p[5] >= '0' && p[5] <= '9' ? atoll(p + 5) : -1;
}

/* Files a divergence: a repeat of one already filed is counted with it (a
 * thousand identical post failures are one line with their count). Any
 * divergence shortens every later wait of this process (rp_run.c). */
void rp_diverge(struct rp_job *j, const char *fmt, ...)
{
	va_list ap;
	char *msg = NULL, *key;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&msg, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	key = rp_div_key(msg);
	if (!key) {
		free(msg);
		return;
	}
	pthread_mutex_lock(&j->rep.lock);
	j->diverged = 1;
	j->rep.total++;
	for (int i = j->rep.ndiv - 1; i >= 0; i--) {
		struct rp_div *d = &j->rep.div[i];

		if (!strcmp(d->key, key)) {
			d->count++;
			d->last_step = rp_div_step(msg);
			pthread_mutex_unlock(&j->rep.lock);
			free(msg);
			free(key);
			return;
		}
	}
	if (!RP_GROW(j->rep.div, j->rep.ndiv, j->rep.capdiv)) {
		pthread_mutex_unlock(&j->rep.lock);
		free(msg);
		free(key);
		return;
	}
	j->rep.div[j->rep.ndiv++] =
		(struct rp_div){ .msg = msg, .key = key, .count = 1, .last_step = -1 };
	pthread_mutex_unlock(&j->rep.lock);
}

/* "MSG", or "MSG (x N, the last at step S)" for a divergence seen N times. */
static void rp_div_text(const struct rp_div *d, char *buf, size_t n)
{
	if (d->count == 1)
		snprintf(buf, n, "%s", d->msg);
	else if (d->last_step >= 0)
		snprintf(buf, n, "%s (x %llu, the last at step %lld)", d->msg,
			 (unsigned long long)d->count, d->last_step);
	else
		snprintf(buf, n, "%s (x %llu)", d->msg, (unsigned long long)d->count);
}

int rp_fail(struct rp_job *j, int err, const char *fmt, ...)
{
	va_list ap;

	fputs("rbtrace replay: ", j->log);
	va_start(ap, fmt);
	vfprintf(j->log, fmt, ap);
	va_end(ap);
	fputc('\n', j->log);
	return err;
}

const char *rp_state_name(uint32_t s)
{
	const char *n = s < 7 ? rbt_verbs_name(RBT_NAMES_QP_STATE, s) : NULL;

	return n ? n : "?";
}

/* Where a recorded final state came from (struct rp_qp.rec_final_src). */
static const char *const rp_final_src_name[] = { "modifies", "destroy", "exit" };

const char *rp_final_src_text(const struct rp_qp *q)
{
	return q->rec_final_src == 1   ? ", the device's at its destroy"
	       : q->rec_final_src == 2 ? ", the device's at exit"
				       : "";
}

static const char *rp_qp_type_name(uint64_t t)
{
	const char *n = rbt_verbs_name(RBT_NAMES_QP_TYPE, t);

	return n ? n : "?";
}

static double rp_pct(const uint64_t *v, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	i = (size_t)(p * (double)(n - 1) + 0.5);
	return (double)v[i < n ? i : n - 1];
}

/* ---- timing: how late each post was against its schedule ------------------- */
struct rp_tally {
	uint64_t *late, *own; /* per timed post: lateness, the replayer's own part */
	size_t n, cap;
	uint64_t first, last, rfirst, rlast; /* replayed and recorded span */
	uint64_t ntimed; /* timed posts (streamed sides: more than their sample) */
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
	uint32_t t = st->type;

	if (getenv("RBTRACE_REPLAY_DEBUG") && st->t_issue > st->deadline + 5000)
		fprintf(j->log,
			"late: %s step %d %s by %.2f us (step before: %s, took %.2f us, "
			"recorded %.2f us)\n",
			s->path, rp_step_no(s, i), rbt_event_name(t),
			(double)(st->t_issue - st->deadline) / 1e3,
			i ? rbt_event_name(s->step[i - 1].type) : "-",
			i ? (double)(s->step[i - 1].t_exit - s->step[i - 1].t_issue) / 1e3
			  : 0,
			i ? (double)(s->step[i - 1].rec_exit_ns - s->step[i - 1].rec_ns) /
					1e3
			  : 0);
}

/* Where one timed post goes: a tally's arrays, or a streamed side's sample. */
typedef void (*rp_late_fn)(void *to, uint64_t late, uint64_t own);

static void rp_late_tally(void *to, uint64_t late, uint64_t own)
{
	struct rp_tally *t = to;

	if (!rp_tally_room(t))
		return;
	t->own[t->n] = own;
	t->late[t->n++] = late;
}

/* Reservoir sampling: each timed post has the same chance to be among the
 * cap kept; the maxima are exact. */
static void rp_late_sample(void *to, uint64_t late, uint64_t own)
{
	struct rp_sample *sp = to;
	uint64_t k;

	sp->timed++;
	if (late > sp->late_max)
		sp->late_max = late;
	if (own > sp->own_max)
		sp->own_max = own;
	if (sp->nsample < sp->cap) {
		k = sp->nsample++;
	} else {
		sp->rng ^= sp->rng << 13;
		sp->rng ^= sp->rng >> 7;
		sp->rng ^= sp->rng << 17;
		k = sp->rng % sp->timed;
		if (k >= sp->nsample)
			return;
	}
	sp->late[k] = late;
	if (sp->own)
		sp->own[k] = own;
}

/* The side's steps (those in memory) onto spans, counts and fn. */
static void rp_late_steps(struct rp_job *j, struct rp_side *s, uint64_t *span,
			  uint64_t *posts, rp_late_fn fn, void *to)
{
	int timed = j->o->timing != RBT_REPLAY_ASAP;

	for (int i = s->prefix; i < s->nstep; i++) {
		struct rp_step *st = &s->step[i];
		uint32_t ty = st->type;
		uint64_t from;

		if (st->skipped || !st->t_issue)
			continue;
		if (st->t_issue < span[0])
			span[0] = st->t_issue;
		if (st->t_issue > span[1])
			span[1] = st->t_issue;
		if (st->rec_ns < span[2])
			span[2] = st->rec_ns;
		if (st->rec_ns > span[3])
			span[3] = st->rec_ns;
		if (ty != RBT_EV_POST_SEND && ty != RBT_EV_POST_RECV &&
		    ty != RBT_EV_POST_SRQ_RECV)
			continue;
		(*posts)++;
		if (!timed || !st->deadline)
			continue;
		rp_report_debug_late(j, s, i);
		from = st->ready > st->deadline ? st->ready : st->deadline;
		fn(to, st->t_issue > st->deadline ? st->t_issue - st->deadline : 0,
		   st->t_issue > from ? st->t_issue - from : 0);
	}
}

/* The resource steps among a side's steps (those in memory) onto c, their
 * lateness onto fn. */
static void rp_res_each(const struct rp_side *s, struct rp_res_count *c, rp_late_fn fn,
			void *to)
{
	for (int i = s->prefix; i < s->nstep; i++) {
		const struct rp_step *st = &s->step[i];
		uint32_t ty = st->type;

		if ((ty != RBT_EV_MR_REG && ty != RBT_EV_MR_DEREG &&
		     ty != RBT_EV_MR_REREG && ty != RBT_EV_QP_CREATE &&
		     ty != RBT_EV_QP_DESTROY) ||
		    st->skipped || !st->t_issue)
			continue;
		c->qcreate += ty == RBT_EV_QP_CREATE;
		c->qdestroy += ty == RBT_EV_QP_DESTROY;
		c->n++;
		c->reg += ty == RBT_EV_MR_REG;
		c->dereg += ty == RBT_EV_MR_DEREG;
		c->rereg += ty == RBT_EV_MR_REREG;
		c->verb_rep += st->t_exit - st->t_issue;
		c->verb_rec +=
			st->rec_exit_ns > st->rec_ns ? st->rec_exit_ns - st->rec_ns : 0;
		if (st->deadline)
			fn(to,
			   st->t_issue > st->deadline ? st->t_issue - st->deadline : 0,
			   0);
	}
}

void rp_report_window(struct rp_job *j, struct rp_side *s)
{
	struct rp_stream *sm = s->sm;
	uint64_t span[4] = { sm->first, sm->last, sm->rfirst, sm->rlast };

	rp_late_steps(j, s, span, &sm->posts, rp_late_sample, &sm->smp);
	if (!sm->res_late.late &&
	    (sm->res_late.late = malloc(RP_THREAD_SAMPLE * sizeof(*sm->res_late.late))))
		sm->res_late.cap = RP_THREAD_SAMPLE;
	if (sm->res_late.cap)
		rp_res_each(s, &sm->res, rp_late_sample, &sm->res_late);
	sm->first = span[0];
	sm->last = span[1];
	sm->rfirst = span[2];
	sm->rlast = span[3];
}

static void rp_report_late_side(struct rp_job *j, struct rp_side *s, struct rp_tally *t,
				struct rbt_replay_summary *sum)
{
	uint64_t span[4] = { t->first, t->last, t->rfirst, t->rlast };
	struct rp_stream *sm = s->sm;

	s->late_from = t->n;
	rp_late_steps(j, s, span, &sum->posts, rp_late_tally, t);
	if (sm) {
		sum->posts += sm->posts;
		if (sm->posts) {
			span[0] = sm->first < span[0] ? sm->first : span[0];
			span[1] = sm->last > span[1] ? sm->last : span[1];
			span[2] = sm->rfirst < span[2] ? sm->rfirst : span[2];
			span[3] = sm->rlast > span[3] ? sm->rlast : span[3];
		}
		for (size_t k = 0; k < sm->smp.nsample; k++)
			rp_late_tally(t, sm->smp.late[k], sm->smp.own[k]);
	}
	t->first = span[0];
	t->last = span[1];
	t->rfirst = span[2];
	t->rlast = span[3];
	s->late_to = t->n;
	t->ntimed += sm ? sm->smp.timed : s->late_to - s->late_from;
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
		if (s->sm) { /* a sample: its maxima are the exact ones */
			s->late_max = (double)s->sm->smp.late_max;
			s->own_max = (double)s->sm->smp.own_max;
		}
	}
	if (t->n) {
		rp_pcts(t->late, t->n, &sum->late_p50_ns, &sum->late_p99_ns,
			&sum->late_max_ns);
		rp_pcts(t->own, t->n, &sum->own_p50_ns, &sum->own_p99_ns,
			&sum->own_max_ns);
		for (int si = 0; si < j->nside; si++) {
			const struct rp_side *s = &j->side[si];

			if (s->late_max > sum->late_max_ns)
				sum->late_max_ns = s->late_max;
			if (s->own_max > sum->own_max_ns)
				sum->own_max_ns = s->own_max;
		}
	}
	sum->wall_ns = t->last > t->first ? (double)(t->last - t->first) : 0;
	sum->rec_wall_ns = t->rlast > t->rfirst ? (double)(t->rlast - t->rfirst) : 0;
	sum->paused_ns = (double)j->paused_ns;
	if (sum->paused_ns > sum->wall_ns)
		sum->paused_ns = sum->wall_ns;
}

/* Each timed post of a lane (its steps in memory) onto fn. */
static void rp_lane_each(const struct rp_lane *L, rp_late_fn fn, void *to)
{
	const struct rp_side *s = L->s;

	for (int k = 0; L->idx && k < L->n; k++) {
		const struct rp_step *st = &s->step[L->idx[k]];
		uint32_t ty = st->type;

		if (st->skipped || !st->t_issue || !st->deadline ||
		    (ty != RBT_EV_POST_SEND && ty != RBT_EV_POST_RECV &&
		     ty != RBT_EV_POST_SRQ_RECV))
			continue;
		fn(to, st->t_issue > st->deadline ? st->t_issue - st->deadline : 0, 0);
	}
}

void rp_report_lane_window(const struct rp_lane *L, struct rp_lane *T)
{
	if (!T->smp && (T->smp = calloc(1, sizeof(*T->smp)))) {
		T->smp->late = malloc(RP_THREAD_SAMPLE * sizeof(*T->smp->late));
		T->smp->cap = T->smp->late ? RP_THREAD_SAMPLE : 0;
		T->smp->rng = 0x2545f4914f6cdd1dull + T->stream;
	}
	if (T->smp && T->smp->cap)
		rp_lane_each(L, rp_late_sample, T->smp);
}

/* One recorded thread's lateness (timed posts), for sides of several threads:
 * count, p50, p99, max in ns; 0 when none was timed. A streamed side's
 * thread: from the sample its windows kept (exact maximum). */
static size_t rp_lane_late(const struct rp_lane *L, double *p50, double *p99, double *max)
{
	const struct rp_sample *sp = L->smp;
	struct rp_tally t = { 0 };
	size_t n;

	*p50 = *p99 = *max = 0;
	if (!L->idx) {
		if (sp)
			for (size_t k = 0; k < sp->nsample; k++)
				rp_late_tally(&t, sp->late[k], 0);
	} else {
		rp_lane_each(L, rp_late_tally, &t);
	}
	n = t.n;
	if (n)
		rp_pcts(t.late, n, p50, p99, max);
	if (n && !L->idx) {
		*max = (double)sp->late_max;
		n = sp->timed;
	}
	free(t.late);
	free(t.own);
	return n;
}

/* ---- printing ---------------------------------------------------------------- */
static const char *const stop_names[] = { "", "signal", "max-time", "divergence" };
static const char *const timing_names[] = { "recorded", "asap", "scale", "deps" };

/* {"p50":..,"p99":..,"max":..} in ns (count first when count >= 0). */
static void rp_json_pcts(struct rbt_json *w, const char *key, long long count, double p50,
			 double p99, double max)
{
	rbt_json_key(w, key);
	rbt_json_obj(w);
	if (count >= 0)
		rbt_json_ku64(w, "count", (uint64_t)count);
	rbt_json_kdbl(w, "p50", "%.0f", p50);
	rbt_json_kdbl(w, "p99", "%.0f", p99);
	rbt_json_kdbl(w, "max", "%.0f", max);
	rbt_json_obj_end(w);
}

/* {"recorded":..,"replayed":..} */
static void rp_json_pair(struct rbt_json *w, const char *key, uint64_t rec, uint64_t rep)
{
	rbt_json_key(w, key);
	rbt_json_obj(w);
	rbt_json_ku64(w, "recorded", rec);
	rbt_json_ku64(w, "replayed", rep);
	rbt_json_obj_end(w);
}

/* Memory dependencies (replay_deps.c): a post after a peer's RDMA WRITE into
 * memory the program polled. */
static void rp_json_deps(const struct rp_job *j, const struct rp_side *s,
			 struct rbt_json *w)
{
	uint64_t inf, infl, kept, tmo;

	rp_deps_totals(s, &inf, &infl, &kept, &tmo);
	rbt_json_key(w, "memory_deps");
	rbt_json_obj(w);
	rbt_json_ku64(w, "inferred", inf);
	rbt_json_ku64(w, "in_flight", infl);
	rbt_json_ku64(w, "kept", kept);
	rbt_json_ku64(w, "timed_out", tmo);
	rbt_json_ku64(w, "ambiguous", s->deps_ambiguous);
	rbt_json_kbool(w, "enforced", !j->deps_off);
	rbt_json_obj_end(w);
}

static void rp_text_deps(const struct rp_job *j, const struct rp_side *s, FILE *f)
{
	uint64_t inf, infl, kept, tmo;

	rp_deps_totals(s, &inf, &infl, &kept, &tmo);
	if (!inf && !s->deps_ambiguous)
		return;
	fprintf(f,
		"memory dependencies: %s: %llu inferred (a post after a peer's RDMA "
		"WRITE into its memory; %llu of them still in flight at the post), "
		"%llu kept, %llu timed out, %llu ambiguous (written from another "
		"host)%s\n",
		s->path, (unsigned long long)inf, (unsigned long long)infl,
		(unsigned long long)kept, (unsigned long long)tmo,
		(unsigned long long)s->deps_ambiguous,
		j->deps_off ? "; not enforced (RBTRACE_REPLAY_NO_DEPS)" : "");
}

static void rp_json_sides(struct rp_job *j, struct rbt_json *w)
{
	rbt_json_key(w, "sides");
	rbt_json_arr(w);
	for (int si = 0; si < j->nside; si++) {
		const struct rp_side *s = &j->side[si];

		rbt_json_obj(w);
		rbt_json_kstr(w, "trace", s->path);
		rbt_json_ku64(w, "posts_timed", rp_timed_of(s));
		rp_json_pcts(w, "lateness_ns", -1, s->late_p50, s->late_p99, s->late_max);
		rp_json_pcts(w, "own_lateness_ns", -1, s->own_p50, s->own_p99,
			     s->own_max);
		rbt_json_ku64(w, "cq_events_missed", s->cq_events_missed);
		rbt_json_ku64(w, "steps", rp_steps_of(s));
		rbt_json_ku64(w, "steps_run", (uint64_t)s->nran);
		/* streamed: the windows it ran in (0: from memory) */
		rbt_json_ku64(w, "windows", s->sm ? s->sm->windows : 0);
		rbt_json_ku64(w, "threads", (uint64_t)s->nlane);
		rbt_json_ku64(w, "cross_thread_waits", s->xwaits);
		rbt_json_ku64(w, "send_queue_waits", s->sq_waits);
		rp_json_deps(j, s, w);
		rbt_json_key(w, "per_thread");
		rbt_json_arr(w);
		for (int l = 0; s->nlane > 1 && l < s->nlane; l++) {
			const struct rp_lane *L = &s->lane[l];
			double p50, p99, max;
			size_t n = rp_lane_late(L, &p50, &p99, &max);

			rbt_json_obj(w);
			rbt_json_ku64(w, "thread", L->stream);
			rbt_json_ku64(w, "steps", (uint64_t)L->n);
			rbt_json_ku64(w, "steps_run", (uint64_t)L->ran);
			rbt_json_ku64(w, "cross_thread_waits", L->xwaits);
			rp_json_pcts(w, "lateness_ns", (long long)n, p50, p99, max);
			rbt_json_obj_end(w);
		}
		rbt_json_arr_end(w);
		rbt_json_kstr(w, "stopped", stop_names[s->stop_why & 3]);
		rp_cm_json(s, w);
		rbt_json_obj_end(w);
	}
	rbt_json_arr_end(w);
}

/* A QP's object opened: its trace, recorded and replayed numbers. */
static void rp_json_qp(struct rbt_json *w, const struct rp_side *s, const struct rp_qp *q,
		       uint32_t replay_qpn)
{
	rbt_json_obj(w);
	rbt_json_kstr(w, "trace", s->path);
	rbt_json_ku64(w, "qp_num", q->rec.qp_num);
	rbt_json_ku64(w, "replay_qp_num", replay_qpn);
}

/* Every QP; then each other process's TGT QP our XRC SRQs received through. */
static void rp_json_qps(struct rp_job *j, struct rbt_json *w)
{
	rbt_json_key(w, "qps");
	rbt_json_arr(w);
	for (int si = 0; si < j->nside; si++)
		for (int qi = 0; qi < j->side[si].nqp; qi++) {
			const struct rp_qp *q = &j->side[si].qp[qi];

			rp_json_qp(w, &j->side[si], q, q->new_qpn);
			rp_json_pair(w, "send", q->wc_base[0] + q->rec_wc[0].n,
				     q->wc_base[0] + q->rep_wc[0].n);
			rp_json_pair(w, "recv", q->wc_base[1] + q->rec_wc[1].n,
				     q->wc_base[1] + q->rep_wc[1].n);
			rbt_json_key(w, "state");
			rbt_json_obj(w);
			rbt_json_kstr(w, "recorded", rp_state_name(q->rec_final_state));
			rbt_json_kstr(w, "replayed", rp_state_name(q->replay_state));
			rbt_json_kstr(w, "recorded_from",
				      rp_final_src_name[q->rec_final_src]);
			rbt_json_obj_end(w);
			rbt_json_kstr(w, "type", rp_qp_type_name(q->rec.qp_type));
			rbt_json_obj_end(w);
		}
	for (int si = 0; si < j->nside; si++)
		for (int qi = 0; qi < j->side[si].nxqp; qi++) {
			const struct rp_qp *q = &j->side[si].xqp[qi];

			rp_json_qp(w, &j->side[si], q, q->foreign_new_qpn);
			rbt_json_kbool(w, "other_process", true);
			rbt_json_kstr(w, "type", "XRC_RECV");
			rp_json_pair(w, "send", 0, 0);
			rp_json_pair(w, "recv", q->rec_wc[1].n, q->rep_wc[1].n);
			rbt_json_obj_end(w);
		}
	rbt_json_arr_end(w);
}

/* ---- resource steps: MRs registered, deregistered, rereg'd mid-run -------- */
struct rp_res_tally {
	struct rp_res_count c;
	uint64_t timed;
	double p50, p99, max; /* lateness against the schedule (ns) */
};

static void rp_res_steps(struct rp_job *j, struct rp_res_tally *r)
{
	struct rp_tally t = { 0 };
	uint64_t max = 0;

	memset(r, 0, sizeof(*r));
	for (int si = 0; si < j->nside; si++) {
		const struct rp_side *s = &j->side[si];
		const struct rp_res_count *w = s->sm ? &s->sm->res : NULL;

		size_t before = t.n;

		rp_res_each(s, &r->c, rp_late_tally, &t);
		r->timed += t.n - before;
		if (!w) /* streamed: what its windows added up */
			continue;
		r->c.n += w->n;
		r->c.reg += w->reg;
		r->c.dereg += w->dereg;
		r->c.rereg += w->rereg;
		r->c.qcreate += w->qcreate;
		r->c.qdestroy += w->qdestroy;
		r->c.verb_rep += w->verb_rep;
		r->c.verb_rec += w->verb_rec;
		for (size_t k = 0; k < s->sm->res_late.nsample; k++)
			rp_late_tally(&t, s->sm->res_late.late[k], 0);
		r->timed += s->sm->res_late.timed;
		if (s->sm->res_late.late_max > max)
			max = s->sm->res_late.late_max;
	}
	if (t.n)
		rp_pcts(t.late, t.n, &r->p50, &r->p99, &r->max);
	if ((double)max > r->max)
		r->max = (double)max;
	free(t.late);
	free(t.own);
}

static void rp_res_json(struct rp_job *j, struct rbt_json *w)
{
	struct rp_res_tally r;

	rp_res_steps(j, &r);
	rbt_json_key(w, "resource_steps");
	rbt_json_obj(w);
	rbt_json_ku64(w, "count", r.c.n);
	rbt_json_ku64(w, "mr_reg", r.c.reg);
	rbt_json_ku64(w, "mr_dereg", r.c.dereg);
	rbt_json_ku64(w, "mr_rereg", r.c.rereg);
	rbt_json_ku64(w, "qp_create", r.c.qcreate);
	rbt_json_ku64(w, "qp_destroy", r.c.qdestroy);
	rp_json_pcts(w, "lateness_ns", (long long)r.timed, r.p50, r.p99, r.max);
	rbt_json_ku64(w, "verb_ns_replayed", r.c.verb_rep);
	rbt_json_ku64(w, "verb_ns_recorded", r.c.verb_rec);
	rbt_json_obj_end(w);
}

static void rp_res_text(struct rp_job *j, FILE *f)
{
	struct rp_res_tally r;

	rp_res_steps(j, &r);
	if (!r.c.n)
		return;
	fprintf(f,
		"resource steps: %llu during the run (MR reg %llu, dereg %llu, rereg "
		"%llu; QP create %llu, destroy %llu); time in those verbs: replayed "
		"%.2f us, recorded %.2f us\n",
		(unsigned long long)r.c.n, (unsigned long long)r.c.reg,
		(unsigned long long)r.c.dereg, (unsigned long long)r.c.rereg,
		(unsigned long long)r.c.qcreate, (unsigned long long)r.c.qdestroy,
		r.c.verb_rep / 1e3, r.c.verb_rec / 1e3);
	if (r.timed)
		fprintf(f,
			"  lateness of resource steps vs schedule: p50 %.2f us, p99 %.2f "
			"us, max %.2f us (%llu steps)\n",
			r.p50 / 1e3, r.p99 / 1e3, r.max / 1e3,
			(unsigned long long)r.timed);
}

static void rp_report_json(struct rp_job *j, FILE *f, size_t nlate,
			   const struct rbt_replay_summary *sum)
{
	struct rbt_json w;

	rbt_json_init(&w, f);
	rbt_json_obj(&w);
	rbt_json_kstr(&w, "timing", timing_names[j->o->timing & 3]);
	rbt_json_kdbl(&w, "scale", "%g",
		      j->o->timing == RBT_REPLAY_SCALE ? j->o->scale : 1.0);
	rbt_json_ku64(&w, "posts", sum->posts);
	rp_json_pcts(&w, "lateness_ns", (long long)nlate, sum->late_p50_ns,
		     sum->late_p99_ns, sum->late_max_ns);
	rp_json_pcts(&w, "own_lateness_ns", -1, sum->own_p50_ns, sum->own_p99_ns,
		     sum->own_max_ns);
	rp_res_json(j, &w);
	rp_json_sides(j, &w);
	rbt_json_kdbl(&w, "wall_ns", "%.0f", sum->wall_ns);
	rbt_json_kdbl(&w, "recorded_wall_ns", "%.0f", sum->rec_wall_ns);
	rbt_json_kdbl(&w, "paused_ns", "%.0f", sum->paused_ns);
	rbt_json_key(&w, "completions");
	rbt_json_obj(&w);
	rbt_json_ku64(&w, "expected", sum->completions_expected);
	rbt_json_ku64(&w, "matched", sum->completions_matched);
	rbt_json_ku64(&w, "recorded", sum->completions_recorded);
	rbt_json_obj_end(&w);
	rbt_json_kstr(&w, "stopped", stop_names[sum->stopped & 3]);
	if (sum->stopped == RBT_REPLAY_STOP_SIGNAL)
		rbt_json_kstr(&w, "signal",
			      sum->stop_signal == SIGTERM ? "SIGTERM" : "SIGINT");
	rbt_json_ku64(&w, "divergences_total", sum->divergences);
	rbt_json_ku64(&w, "completions_unpolled", sum->completions_unpolled);
	rp_json_qps(j, &w);
	rbt_json_key(&w, "divergences");
	rbt_json_arr(&w);
	for (int i = 0; i < j->rep.ndiv; i++) {
		char line[2048];

		rp_div_text(&j->rep.div[i], line, sizeof(line));
		rbt_json_str(&w, line);
	}
	rbt_json_arr_end(&w);
	rbt_json_obj_end(&w);
	fputc('\n', f);
}

/* Why a side stopped, for the text report. */
static const char *rp_stop_text(struct rp_job *j, int why,
				const struct rbt_replay_summary *sum)
{
	static __thread char buf[96];

	if (why == RBT_REPLAY_STOP_SIGNAL)
		snprintf(buf, sizeof(buf), "%s",
			 sum->stop_signal == SIGTERM ? "SIGTERM" : "SIGINT");
	else if (why == RBT_REPLAY_STOP_MAX_TIME)
		snprintf(buf, sizeof(buf), "--max-time %.3f s",
			 (double)j->o->max_time_ms / 1e3);
	else
		snprintf(buf, sizeof(buf),
			 "after a divergence its waits found nothing for %d ms",
			 RBT_REPLAY_DIVERGED_WAIT_MS);
	return buf;
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
			"post lateness vs schedule: p50 %.2f us, p99 %.2f us, max %.2f "
			"us (%zu posts)\n",
			sum->late_p50_ns / 1e3, sum->late_p99_ns / 1e3,
			sum->late_max_ns / 1e3, nlate);
	if (nlate)
		fprintf(f,
			"  of which the replayer's own (past the deadline and past the "
			"end of the step before): p50 %.2f us, p99 %.2f us, max %.2f "
			"us\n",
			sum->own_p50_ns / 1e3, sum->own_p99_ns / 1e3,
			sum->own_max_ns / 1e3);
	fprintf(f, "span: replay %.3f ms, recorded %.3f ms", sum->wall_ns / 1e6,
		sum->rec_wall_ns / 1e6);
	if (sum->wall_ns > 0 && sum->rec_wall_ns > 0)
		fprintf(f, " (post rate %.0f/s vs recorded %.0f/s)",
			(double)sum->posts * 1e9 / sum->wall_ns,
			(double)sum->posts * 1e9 / sum->rec_wall_ns);
	fputc('\n', f);
	if (sum->paused_ns > 0)
		fprintf(f,
			"  of the replay's span, %.3f ms stood still between windows "
			"(reading the next; the schedule resumed after each)\n",
			sum->paused_ns / 1e6);
	if (sum->paused_ns > 0 && sum->wall_ns > sum->paused_ns)
		fprintf(f, "  post rate while running %.0f/s\n",
			(double)sum->posts * 1e9 / (sum->wall_ns - sum->paused_ns));
	rp_res_text(j, f);
	if (j->crowd_lanes)
		fprintf(f,
			"threads: %d lanes on %ld CPUs: a lane that waits gives its CPU "
			"away at every empty turn, and the run's rate follows the "
			"switches between them\n",
			j->crowd_lanes, j->crowd_cpus);
	for (int si = 0; si < j->nside; si++) {
		const struct rp_side *s = &j->side[si];

		if (s->stop_why)
			fprintf(f, "stopped: %s ran %d of %llu steps (%s)\n", s->path,
				s->nran, (unsigned long long)rp_steps_of(s),
				rp_stop_text(j, s->stop_why, sum));
		rp_text_deps(j, s, f);
		if (s->sq_waits)
			fprintf(f,
				"send queues: %s: %llu posts waited for completions of "
				"their QP that the recording had polled before them (a "
				"CQ shared with other queues)\n",
				s->path, (unsigned long long)s->sq_waits);
		if (s->nlane > 1)
			fprintf(f,
				"threads: %s: %d recorded threads, each replayed by its "
				"own; %llu posts/modifies waited for another thread's "
				"step recorded before them\n",
				s->path, s->nlane, (unsigned long long)s->xwaits);
		for (int l = 0; s->nlane > 1 && j->o->timing != RBT_REPLAY_ASAP &&
				l < s->nlane && l < 16;
		     l++) {
			double p50, p99, max;
			size_t n = rp_lane_late(&s->lane[l], &p50, &p99, &max);

			if (n)
				fprintf(f,
					"  thread %u: lateness p50 %.2f us, p99 %.2f us, "
					"max %.2f us (%zu posts)\n",
					s->lane[l].stream, p50 / 1e3, p99 / 1e3,
					max / 1e3, n);
		}
	}
	if (j->nside > 1) {
		rp_text_side_late(j, f, 0);
		rp_text_side_late(j, f, 1);
	}
	for (int si = 0; si < j->nside; si++)
		for (int qi = 0; qi < j->side[si].nqp; qi++) {
			struct rp_qp *q = &j->side[si].qp[qi];

			fprintf(f,
				"  %s QP %llu -> %u: send %llu/%llu, recv %llu/%llu "
				"completions "
				"(replayed/recorded), state %s (recorded %s)%s\n",
				j->side[si].path, (unsigned long long)q->rec.qp_num,
				q->new_qpn,
				(unsigned long long)(q->wc_base[0] + q->rep_wc[0].n),
				(unsigned long long)(q->wc_base[0] + q->rec_wc[0].n),
				(unsigned long long)(q->wc_base[1] + q->rep_wc[1].n),
				(unsigned long long)(q->wc_base[1] + q->rec_wc[1].n),
				rp_state_name(q->replay_state),
				rp_state_name(q->rec_final_state), rp_final_src_text(q));
		}
	for (int si = 0; si < j->nside; si++)
		for (int qi = 0; qi < j->side[si].nxqp; qi++) {
			struct rp_qp *q = &j->side[si].xqp[qi];

			fprintf(f,
				"  %s XRC receives through QP %llu -> %u of another "
				"trace: recv %u/%u completions (replayed/recorded)\n",
				j->side[si].path, (unsigned long long)q->rec.qp_num,
				q->foreign_new_qpn, q->rep_wc[1].n, q->rec_wc[1].n);
		}
	rp_cm_text(j, f);
	fprintf(f, "completions matched: %llu of %llu",
		(unsigned long long)sum->completions_matched,
		(unsigned long long)sum->completions_expected);
	if (sum->completions_recorded > sum->completions_expected)
		fprintf(f,
			" (the recorded ones up to where the replay stopped; %llu in "
			"all)",
			(unsigned long long)sum->completions_recorded);
	fputc('\n', f);
	if (sum->completions_unpolled)
		fprintf(f,
			"plus %llu successful completions the program never polled "
			"(beyond its recorded ones on a QP; see docs/replay.md)\n",
			(unsigned long long)sum->completions_unpolled);
	if (j->rep.ndiv) {
		if (j->rep.total > (uint64_t)j->rep.ndiv)
			fprintf(f, "divergences (%llu, %d distinct):\n",
				(unsigned long long)j->rep.total, j->rep.ndiv);
		else
			fprintf(f, "divergences (%d):\n", j->rep.ndiv);
		for (int i = 0; i < j->rep.ndiv; i++) {
			char line[2048];

			rp_div_text(&j->rep.div[i], line, sizeof(line));
			fprintf(f, "  %s\n", line);
		}
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
	for (int si = 0; si < j->nside; si++) {
		int w = j->side[si].stop_why;

		/* a signal over --max-time over a divergence's stop */
		if (w && (!sum->stopped || w < sum->stopped))
			sum->stopped = w;
	}
	if (sum->stopped == RBT_REPLAY_STOP_SIGNAL)
		sum->stop_signal = rp_signal_caught();
	sum->divergences = j->rep.total;
	sum->divergences_distinct = (uint64_t)j->rep.ndiv;
	if (j->o->json)
		rp_report_json(j, f, (size_t)t.ntimed, sum);
	else
		rp_report_text(j, f, (size_t)t.ntimed, sum);
	fflush(f);
	free(t.late);
	free(t.own);
}
