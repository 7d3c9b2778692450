/* replay_report.c - the fidelity report of a replay: how late each post was issued
 * against its schedule, whether completions came back as recorded (per QP and
 * queue: count, opcode, status, byte_len), final QP states, and every divergence.
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

static const char *rp_state_name(uint32_t s)
{
	const char *n = s < 7 ? rbt_verbs_name(RBT_NAMES_QP_STATE, s) : NULL;

	return n ? n : "?";
}

/* Where a recorded final state came from (struct rp_qp.rec_final_src). */
static const char *const rp_final_src_name[] = { "modifies", "destroy", "exit" };

static const char *rp_final_src_text(const struct rp_qp *q)
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

static double rp_pct(const uint64_t *v, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	i = (size_t)(p * (double)(n - 1) + 0.5);
	return (double)v[i < n ? i : n - 1];
}

static int rp_cmp_sender(const void *a, const void *b)
{
	const struct rp_wcrec *x = a, *y = b;

	if (x->src_qp != y->src_qp)
		return x->src_qp < y->src_qp ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* A UD QP receives from many senders: the order between two senders'
 * messages is the fabric's timing (HERD's workers answering one client),
 * only each sender's own order is the program's. Both lists are put in
 * sender order (the recorded number of the sender; the replay's translated
 * through the directory), each sender's messages in the order they came. */
static void rp_by_sender(struct rp_job *j, struct rp_wclist *r, struct rp_wclist *p)
{
	for (uint32_t k = 0; k < p->n; k++) {
		struct rp_wcrec *w = &p->v[k];

		for (int i = 0; i < j->dir.nqp; i++)
			if (j->dir.qps[i].new_qpn == w->src_qp) {
				w->src_qp = j->dir.qps[i].rec_qpn;
				break;
			}
		w->order = k;
	}
	for (uint32_t k = 0; k < r->n; k++)
		r->v[k].order = k;
	qsort(r->v, r->n, sizeof(*r->v), rp_cmp_sender);
	qsort(p->v, p->n, sizeof(*p->v), rp_cmp_sender);
}

/* ---- completions: the replay's against the recording, per QP and queue ---- */
static void rp_report_match_queue(struct rp_job *j, struct rp_side *s, struct rp_qp *q,
				  int d, struct rbt_replay_summary *sum)
{
	struct rp_wclist *r = &q->rec_wc[d], *p = &q->rep_wc[d];
	uint32_t n = r->n < p->n ? r->n : p->n, shown = 0;

	if (d == 1 && q->rec.qp_type == IBV_QPT_UD && r->n == p->n && r->n)
		rp_by_sender(j, r, p);

	sum->completions_expected += r->n;
	sum->completions_recorded += q->rec_all[d] > r->n ? q->rec_all[d] : r->n;
	for (uint32_t k = 0; k < n; k++) {
		if (rp_wc_equal(&r->v[k], &p->v[k])) {
			sum->completions_matched++;
			continue;
		}
		if (shown++ < 5)
			rp_diverge(j,
				   "%s: QP %llu %s completion #%u: recorded status %s "
				   "opcode %u len %u, replay status %s opcode %u len %u",
				   s->path, (unsigned long long)q->rec.qp_num,
				   d ? "recv" : "send", k,
				   ibv_wc_status_str(r->v[k].status), r->v[k].opcode,
				   r->v[k].byte_len, ibv_wc_status_str(p->v[k].status),
				   p->v[k].opcode, p->v[k].byte_len);
	}
	if (shown > 5)
		rp_diverge(j, "%s: QP %llu %s: %u more mismatching completions", s->path,
			   (unsigned long long)q->rec.qp_num, d ? "recv" : "send",
			   shown - 5);
	if (r->n > p->n)
		rp_diverge(j, "%s: QP %llu %s: recorded %u completions, replay %u",
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
			   "%s: QP %llu %s completion #%u, which the program never "
			   "polled: replay status %s",
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
			/* a side stopped early (signal, --max-time, divergence)
			 * did not get to the recorded end state */
			if (qi < s->nqp && !s->stop_why &&
			    q->replay_state != q->rec_final_state)
				rp_diverge(j,
					   "%s: QP %llu ends in state %s, recorded %s%s",
					   s->path, (unsigned long long)q->rec.qp_num,
					   rp_state_name(q->replay_state),
					   rp_state_name(q->rec_final_state),
					   rp_final_src_text(q));
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
	uint32_t t = st->ev->type;

	if (getenv("RBTRACE_REPLAY_DEBUG") && st->t_issue > st->deadline + 5000)
		fprintf(j->log,
			"late: %s step %d %s by %.2f us (step before: %s, took %.2f us, "
			"recorded %.2f us)\n",
			s->path, i, rbt_event_name(t),
			(double)(st->t_issue - st->deadline) / 1e3,
			i ? rbt_event_name(s->step[i - 1].ev->type) : "-",
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
		uint32_t ty = st->ev->type;
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

/* One recorded thread's lateness (timed posts), for sides of several threads:
 * count, p50, p99, max in ns; 0 when none was timed. */
static size_t rp_lane_late(const struct rp_lane *L, double *p50, double *p99, double *max)
{
	const struct rp_side *s = L->s;
	uint64_t *v = malloc(((size_t)L->n + 1) * sizeof(*v));
	size_t n = 0;

	*p50 = *p99 = *max = 0;
	if (!v)
		return 0;
	for (int k = 0; k < L->n; k++) {
		const struct rp_step *st = &s->step[L->idx[k]];
		uint32_t ty = st->ev->type;

		if (st->skipped || !st->t_issue || !st->deadline ||
		    (ty != RBT_EV_POST_SEND && ty != RBT_EV_POST_RECV &&
		     ty != RBT_EV_POST_SRQ_RECV))
			continue;
		v[n++] = st->t_issue > st->deadline ? st->t_issue - st->deadline : 0;
	}
	if (n)
		rp_pcts(v, n, p50, p99, max);
	free(v);
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
		rbt_json_ku64(w, "posts_timed", s->late_to - s->late_from);
		rp_json_pcts(w, "lateness_ns", -1, s->late_p50, s->late_p99, s->late_max);
		rp_json_pcts(w, "own_lateness_ns", -1, s->own_p50, s->own_p99,
			     s->own_max);
		rbt_json_ku64(w, "cq_events_missed", s->cq_events_missed);
		rbt_json_ku64(w, "steps", (uint64_t)s->nstep);
		rbt_json_ku64(w, "steps_run", (uint64_t)s->nran);
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

/* Every QP; then each other process's TGT QP our XRC SRQs received through. */
static void rp_json_qps(struct rp_job *j, struct rbt_json *w)
{
	rbt_json_key(w, "qps");
	rbt_json_arr(w);
	for (int si = 0; si < j->nside; si++)
		for (int qi = 0; qi < j->side[si].nqp; qi++) {
			const struct rp_qp *q = &j->side[si].qp[qi];

			rbt_json_obj(w);
			rbt_json_kstr(w, "trace", j->side[si].path);
			rbt_json_ku64(w, "qp_num", q->rec.qp_num);
			rbt_json_ku64(w, "replay_qp_num", q->new_qpn);
			rp_json_pair(w, "send", q->rec_wc[0].n, q->rep_wc[0].n);
			rp_json_pair(w, "recv", q->rec_wc[1].n, q->rep_wc[1].n);
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

			rbt_json_obj(w);
			rbt_json_kstr(w, "trace", j->side[si].path);
			rbt_json_ku64(w, "qp_num", q->rec.qp_num);
			rbt_json_ku64(w, "replay_qp_num", q->foreign_new_qpn);
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
	uint64_t n, reg, dereg, rereg, qcreate, qdestroy, timed;
	double p50, p99, max;	     /* lateness against the schedule (ns) */
	uint64_t verb_rep, verb_rec; /* ns inside the verbs, replayed / recorded */
};

static void rp_res_steps(struct rp_job *j, struct rp_res_tally *r)
{
	uint64_t *late = NULL;
	size_t nl = 0, cap = 0;

	memset(r, 0, sizeof(*r));
	for (int si = 0; si < j->nside; si++) {
		const struct rp_side *s = &j->side[si];

		for (int i = s->prefix; i < s->nstep; i++) {
			const struct rp_step *st = &s->step[i];
			uint32_t ty = st->ev->type;

			if ((ty != RBT_EV_MR_REG && ty != RBT_EV_MR_DEREG &&
			     ty != RBT_EV_MR_REREG && ty != RBT_EV_QP_CREATE &&
			     ty != RBT_EV_QP_DESTROY) ||
			    st->skipped || !st->t_issue)
				continue;
			r->qcreate += ty == RBT_EV_QP_CREATE;
			r->qdestroy += ty == RBT_EV_QP_DESTROY;
			r->n++;
			r->reg += ty == RBT_EV_MR_REG;
			r->dereg += ty == RBT_EV_MR_DEREG;
			r->rereg += ty == RBT_EV_MR_REREG;
			r->verb_rep += st->t_exit - st->t_issue;
			r->verb_rec += st->rec_exit_ns > st->rec_ns
					       ? st->rec_exit_ns - st->rec_ns
					       : 0;
			if (!st->deadline)
				continue;
			if (nl == cap) {
				uint64_t *p =
					realloc(late, (cap ? 2 * cap : 64) * sizeof(*p));

				if (!p)
					continue;
				late = p;
				cap = cap ? 2 * cap : 64;
			}
			late[nl++] = st->t_issue > st->deadline
					     ? st->t_issue - st->deadline
					     : 0;
		}
	}
	r->timed = nl;
	if (nl)
		rp_pcts(late, nl, &r->p50, &r->p99, &r->max);
	free(late);
}

static void rp_res_json(struct rp_job *j, struct rbt_json *w)
{
	struct rp_res_tally r;

	rp_res_steps(j, &r);
	rbt_json_key(w, "resource_steps");
	rbt_json_obj(w);
	rbt_json_ku64(w, "count", r.n);
	rbt_json_ku64(w, "mr_reg", r.reg);
	rbt_json_ku64(w, "mr_dereg", r.dereg);
	rbt_json_ku64(w, "mr_rereg", r.rereg);
	rbt_json_ku64(w, "qp_create", r.qcreate);
	rbt_json_ku64(w, "qp_destroy", r.qdestroy);
	rp_json_pcts(w, "lateness_ns", (long long)r.timed, r.p50, r.p99, r.max);
	rbt_json_ku64(w, "verb_ns_replayed", r.verb_rep);
	rbt_json_ku64(w, "verb_ns_recorded", r.verb_rec);
	rbt_json_obj_end(w);
}

static void rp_res_text(struct rp_job *j, FILE *f)
{
	struct rp_res_tally r;

	rp_res_steps(j, &r);
	if (!r.n)
		return;
	fprintf(f,
		"resource steps: %llu during the run (MR reg %llu, dereg %llu, rereg "
		"%llu; QP create %llu, destroy %llu); time in those verbs: replayed "
		"%.2f us, recorded %.2f us\n",
		(unsigned long long)r.n, (unsigned long long)r.reg,
		(unsigned long long)r.dereg, (unsigned long long)r.rereg,
		(unsigned long long)r.qcreate, (unsigned long long)r.qdestroy,
		r.verb_rep / 1e3, r.verb_rec / 1e3);
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
	rp_res_text(j, f);
	for (int si = 0; si < j->nside; si++) {
		const struct rp_side *s = &j->side[si];

		if (s->stop_why)
			fprintf(f, "stopped: %s ran %d of %d steps (%s)\n", s->path,
				s->nran, s->nstep, rp_stop_text(j, s->stop_why, sum));
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
				"  %s QP %llu -> %u: send %u/%u, recv %u/%u completions "
				"(replayed/recorded), state %s (recorded %s)%s\n",
				j->side[si].path, (unsigned long long)q->rec.qp_num,
				q->new_qpn, q->rep_wc[0].n, q->rec_wc[0].n,
				q->rep_wc[1].n, q->rec_wc[1].n,
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
		rp_report_json(j, f, t.n, sum);
	else
		rp_report_text(j, f, t.n, sum);
	fflush(f);
	free(t.late);
	free(t.own);
}
