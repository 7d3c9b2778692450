/* replay_stream.c - a timeline of any length: the replay of a trace whose steps
 * do not all fit in memory, window by window. The first reading (replay_load.c)
 * keeps the resources, their lifetimes, the QP pairing, the prefix and the
 * first window's steps; past that it counts steps and keeps one step time in
 * RP_STREAM_MARK (the plan of the windows). If every side can be streamed, the
 * run reads each trace again (a reader and a model of its own) one window at a
 * time: the steps of every side up to one recorded time, at most about
 * RP_STREAM_WINDOW in all, prepared, run by each side's lane, then retired -
 * their completions matched against the recording's and dropped, their timing
 * added to counts and a sample - before the next window is fed to the model
 * and prepared. The windows' ends are planned before the run, so each side's
 * reader thread (replay_load.c: rp_ahead) decodes window N+1 while N runs,
 * and the run's thread feeds N+1 to the model while N's lanes run on threads
 * of their own (rp_stream_feed_ahead: into step arrays, completion lists and
 * arena blocks the running window does not use; made the window's once N is
 * retired). What is left of the pause is N+1's preparation.
 * Windows end at one recorded time on every side, so what a step waits for (a
 * peer's send before its poll) is in its window or an earlier one.
 *
 * What it cannot stream it leaves to the in-memory path (rp_stream_decide says
 * why on the log): recording the replay (-o), peer replayers, XRC QPs, memory
 * windows and ibv_rereg_mr. QPs made or destroyed mid-run are steps of their
 * window (the first reading marks those made by a step: mid_run). Memory
 * dependencies (RDMA WRITEs) are inferred per window with what the windows
 * before left pending (replay_deps.c), in every timing, --timing=deps too. UD streams: the receive counts a
 * UD send waits for are those of its window plus the windows before
 * (rp_ud_order_setup again for each window). Several threads per trace
 * stream: each window has a lane per thread that has steps in it (the gate
 * between lanes needs no more, as a window ends on every lane at once), and
 * what each thread ran adds up by its stream across windows.
 *
 * Must never change what an in-memory replay does: it only runs when
 * rp_stream_decide chose it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replay/replay_int.h"

int rp_stream_wanted(const struct rp_job *j)
{
	const struct rbt_replay_opts *o = j->o;

	return j->window > 0 && !o->out && !o->listen && !o->connect;
}

static int rp_is_work(uint32_t t)
{
	return t == RBT_EV_POST_SEND || t == RBT_EV_POST_RECV ||
	       t == RBT_EV_POST_SRQ_RECV || t == RBT_EV_POLL_CQ;
}

/* A post that binds or invalidates a memory window. */
static int rp_is_mw_post(const struct rbt_event *ev)
{
	for (uint32_t k = 0; k < ev->u.post_send.n_wrs; k++)
		switch (ev->u.post_send.wrs[k].opcode) {
		case IBV_WR_BIND_MW:
		case IBV_WR_LOCAL_INV:
		case IBV_WR_SEND_WITH_INV:
			return 1;
		default:
			break;
		}
	return 0;
}

/* Every step of the first reading, kept or not. */
void rp_stream_note(struct rp_loading *ld, const struct rbt_event *ev, uint64_t rec_ns)
{
	struct rp_stream *sm = ld->s->sm;
	uint32_t t = ev->type;

	if (sm->nstep_all % (uint64_t)ld->j->mark_every == 0 &&
	    RP_GROW(sm->mark, sm->nmark, sm->capmark))
		sm->mark[sm->nmark++] =
			(struct rp_mark){ rec_ns, rp_host_clock(ld->s, ev->ts) };
	sm->nstep_all++;
	/* an extended poll session of several completions is two steps */
	if (t == RBT_EV_POLL_CQ && ev->u.poll_cq.api == 1 && ev->u.poll_cq.n_wcs > 1)
		sm->nstep_all++;
	/* a QP made mid-run: made by its step in whichever window (its entry
	 * was just added, replay_load.c); MRs likewise, rereg is not streamed */
	if (ld->started && t == RBT_EV_QP_CREATE && ld->s->nqp)
		ld->s->qp[ld->s->nqp - 1].mid_run = 1;
	if (rp_is_work(t) && rec_ns > sm->last_work_ns)
		sm->last_work_ns = rec_ns;
	if (ld->started && rp_is_work(t) && t != RBT_EV_POLL_CQ)
		sm->nposts_all++;
	if (t == RBT_EV_POST_SEND)
		rp_deps_note(sm, ev);
	if (sm->why_not)
		return;
	if (t == RBT_EV_POST_SEND && rp_is_mw_post(ev))
		sm->why_not = "memory windows";
	else if (t == RBT_EV_MR_REREG && ld->started)
		sm->why_not = "ibv_rereg_mr mid-run";
}

/* What a recorded thread (stream) ran over the windows so far: its lane in
 * the report, and the carry of its budget into its next window's lane. NULL:
 * out of memory. */
static struct rp_lane *rp_stream_thread(struct rp_side *s, uint32_t stream)
{
	struct rp_stream *sm = s->sm;

	for (int k = 0; k < sm->nthr; k++)
		if (sm->thr[k].stream == stream)
			return &sm->thr[k];
	if (!RP_GROW(sm->thr, sm->nthr, sm->capthr))
		return NULL;
	sm->thr[sm->nthr] = (struct rp_lane){ .s = s, .stream = stream };
	return &sm->thr[sm->nthr++];
}

static const char *rp_side_why_not(const struct rp_side *s)
{
	const struct rp_stream *sm = s->sm;

	if (sm->why_not)
		return sm->why_not;
	if (s->nmw || s->nxrcd || s->nxqp)
		return "memory windows or XRC";
	return NULL;
}

void rp_stream_free(struct rp_side *s)
{
	if (!s->sm)
		return;
	rp_again_close(s);
	rp_deps_carry_free(s->sm);
	free(s->sm->next_step);
	free(s->sm->mark);
	free(s->sm->smp.late);
	free(s->sm->smp.own);
	free(s->sm->res_late.late);
	for (int k = 0; k < s->sm->nthr; k++)
		if (s->sm->thr[k].smp) {
			free(s->sm->thr[k].smp->late);
			free(s->sm->thr[k].smp);
		}
	free(s->sm->thr);
	free(s->sm);
	s->sm = NULL;
}

/* The side from the first reading down to its prefix and resources: its
 * recorded completions come again with the windows. */
static void rp_stream_trim(struct rp_side *s)
{
	s->nstep = s->prefix;
	s->lane = NULL; /* in the arena */
	s->nlane = 0;
	s->wc_seq = 0;
	for (int i = 0; i < s->nqp; i++)
		for (int d = 0; d < 2; d++)
			s->qp[i].rec_wc[d].n = 0;
}

int rp_stream_decide(struct rp_job *j, int *reload)
{
	const char *why = NULL;
	uint64_t all = 0; /* steps of every side */
	int over = 0;

	*reload = 0;
	for (int i = 0; i < j->nside; i++) {
		struct rp_side *s = &j->side[i];

		if (!s->sm)
			return 0;
		if (s->sm->nstep_all > (uint64_t)s->nstep)
			over = 1;
		all += s->sm->nstep_all;
		if (!why)
			why = rp_side_why_not(s);
	}
	if (over && why)
		fprintf(j->log,
			"rbtrace replay: a trace is longer than a window of %d steps but "
			"cannot be streamed (%s): replaying it from memory\n",
			j->window, why);
	/* longer than a window: read again whole when a trace cannot stream,
	 * or when the job fits in memory (no pauses between windows then) */
	*reload = over && (why || all <= j->mem_steps);
	if (!over || *reload) {
		for (int i = 0; i < j->nside; i++)
			rp_stream_free(&j->side[i]);
		return 0;
	}
	for (int i = 0; i < j->nside; i++) {
		struct rp_stream *sm = j->side[i].sm;

		sm->smp.late = malloc(RP_STREAM_SAMPLE * sizeof(*sm->smp.late));
		sm->smp.own = malloc(RP_STREAM_SAMPLE * sizeof(*sm->smp.own));
		sm->smp.cap = RP_STREAM_SAMPLE;
		if (!sm->smp.late || !sm->smp.own)
			return rp_fail(j, -ENOMEM, "out of memory while streaming");
		sm->first = sm->rfirst = UINT64_MAX;
		sm->smp.rng = 0x9e3779b97f4a7c15ull + (uint64_t)i;
		rp_stream_trim(&j->side[i]);
	}
	j->stream = 1;
	return 1;
}

/* The end of the next window in recorded time (the host's clock when every
 * side has the same, else abs ns of the job's clock): where the marks of all
 * sides, in time order, reach the window's size. */
static uint64_t rp_stream_plan(struct rp_job *j)
{
	uint64_t n = 0;

	for (;;) {
		struct rp_side *best = NULL;
		uint64_t t = UINT64_MAX;

		for (int i = 0; i < j->nside; i++) {
			struct rp_side *s = &j->side[i];
			struct rp_stream *sm = s->sm;
			uint64_t m;

			if (sm->mark_next >= sm->nmark)
				continue;
			m = sm->host_cut ? sm->mark[sm->mark_next].host
					 : sm->mark[sm->mark_next].ns -
						   (j->same_clock ? 0 : s->rec_epoch_ns);
			if (m < t) {
				t = m;
				best = s;
			}
		}
		if (!best)
			return UINT64_MAX;
		best->sm->mark_next++;
		n += (uint64_t)j->mark_every;
		if (n > (uint64_t)j->window)
			return t;
	}
}

/* Every window's end, in order (the last UINT64_MAX): the plan, made before
 * the run so that each side's reader can read ahead of it. NULL: out of
 * memory. */
static uint64_t *rp_stream_plan_all(struct rp_job *j, size_t *n)
{
	uint64_t *lim = NULL;
	size_t cap = 0;

	*n = 0;
	do {
		if (!RP_GROW(lim, *n, cap)) {
			free(lim);
			return NULL;
		}
		lim[*n] = rp_stream_plan(j);
	} while (lim[(*n)++] != UINT64_MAX);
	return lim;
}

/* A side's reading again, given the windows' ends on its own clock. */
static int rp_stream_open(struct rp_job *j, struct rp_side *s, const uint64_t *lim,
			  size_t n)
{
	uint64_t *l = malloc((n ? n : 1) * sizeof(*l));
	int rc;

	if (!l)
		return rp_fail(j, -ENOMEM, "out of memory while streaming");
	for (size_t w = 0; w < n; w++)
		l[w] = lim[w] != UINT64_MAX && !j->same_clock && !s->sm->host_cut
			       ? lim[w] + s->rec_epoch_ns
			       : lim[w];
	rc = rp_again_open(j, s, l, n);
	free(l);
	return rc;
}

/* Whether the next window is read while this one's nlane lanes run: when
 * the process has a CPU more than the lanes (else the reading takes a lane's
 * CPU, and the lanes slow down by more than the pause it saves: ss-sequencer
 * on 2 CPUs, 2 lanes, 15.7 s against 19 s). RBTRACE_REPLAY_FEED_AHEAD=1
 * always, =0 never (each window read in the pause before it). */
static int rp_feed_ahead_wanted(int nlane)
{
	const char *e = getenv("RBTRACE_REPLAY_FEED_AHEAD");

	if (e && *e)
		return strcmp(e, "0") != 0;
	return rp_ncpu() > nlane;
}

/* Side s's next window read (its events fed to the model, its steps made)
 * in the pause before it: rc of rp_again_load. */
static int rp_stream_feed(struct rp_job *j, struct rp_side *s)
{
	s->sm->arena_mark = rp_arena_mark(s);
	s->nstep = 0;
	return rp_again_load(j, s);
}

/* The side's step array (the one its window runs from, and the loader's
 * room in it) traded for the one the next window is read into. */
static void rp_steps_swap(struct rp_side *s)
{
	struct rp_stream *sm = s->sm;
	struct rp_step *step = s->step;
	int n = s->nstep, cap = sm->ld->capstep;

	s->step = sm->next_step;
	s->nstep = sm->next_nstep;
	sm->ld->capstep = sm->next_cap;
	sm->next_step = step;
	sm->next_nstep = n;
	sm->next_cap = cap;
}

/* Side s's next window read while the window before runs, on the run's
 * thread: into next_step (s->step is the reading's for that while; the
 * lanes run from the pointer they were started with, L->step), its recorded
 * completions into rec_next, its memory from next_mark on. Nothing of it
 * is the running window's, nor read by its lanes; rp_stream_take makes it
 * the window once the one before is retired. */
static void rp_stream_feed_ahead(struct rp_job *j, struct rp_side *s)
{
	struct rp_stream *sm = s->sm;

	sm->next_mark = rp_arena_mark(s);
	rp_steps_swap(s);
	s->nstep = 0;
	sm->ld->ahead = 1;
	sm->next_rc = rp_again_load(j, s);
	sm->ld->ahead = 0;
	rp_steps_swap(s);
	sm->fed = 1;
}

/* The window read ahead becomes the side's (after the one before it was
 * retired: its part of the arena moved down to arena_mark): rc of its
 * reading. The retired window's step array is the next reading's room. */
static int rp_stream_take(struct rp_side *s)
{
	struct rp_stream *sm = s->sm;

	rp_steps_swap(s);
	sm->next_nstep = 0;
	sm->fed = 0;
	for (int i = 0; i < s->nqp; i++)
		for (int d = 0; d < 2; d++) {
			struct rp_wclist *l = &s->qp[i].rec_next[d];

			for (uint32_t k = 0; k < l->n; k++)
				rp_wclist_push(&s->qp[i].rec_wc[d], &l->v[k]);
			l->n = 0;
		}
	return sm->next_rc;
}

/* One window of every side read (now, or while the window before ran),
 * prepared and given its lanes. rc of the readings: 1 when some side has
 * more. */
static int rp_stream_fill(struct rp_job *j, int *more)
{
	int rc;

	*more = 0;
	for (int i = 0; i < j->nside; i++) {
		struct rp_side *s = &j->side[i];
		struct rp_stream *sm = s->sm;

		rc = sm->fed ? rp_stream_take(s) : rp_stream_feed(j, s);
		if (rc < 0)
			return rc;
		*more |= rc;
		rp_timeline_window(s);
		rp_qp_life_steps(j, s);
		if ((rc = rp_prepare_steps(j, s)) || rp_lanes_build(j, s) < 0)
			return rc ? rc
				  : rp_fail(j, -ENOMEM, "out of memory while streaming");
		for (int l2 = 0; l2 < s->nlane; l2++) {
			struct rp_lane *T = rp_stream_thread(s, s->lane[l2].stream);

			if (!T)
				return rp_fail(j, -ENOMEM,
					       "out of memory while streaming");
			s->lane[l2].timeouts = T->timeouts;
			s->lane[l2].wasted_ns = T->wasted_ns;
			s->lane[l2].anchored = T->anchored;
			memcpy(s->lane[l2].anchor, T->anchor, sizeof(T->anchor));
		}
		if ((uint64_t)s->nstep > sm->max_window)
			sm->max_window = (uint64_t)s->nstep;
	}
	/* once every side's window is read: the WRITEs and what waits for
	 * them (with what the windows before left pending), the posts that
	 * wait for their send completions, the UD sends for their receives */
	j->writes.n = 0;
	rc = rp_deps_collect(j);
	for (int i = 0; i < j->nside && !rc; i++)
		rc = rp_sq_waits(&j->side[i]);
	if (!rc)
		rc = rp_deps_setup(j);
	if (!rc)
		rc = rp_ud_order_setup(j);
	return rc < 0 ? rp_fail(j, rc, "out of memory while streaming") : 0;
}

/* The window's lanes, on threads of their own; meanwhile (more: there is a
 * next window) every side's next window is read. When the lanes ran. */
static uint64_t rp_stream_window_run(struct rp_job *j, int more)
{
	struct rp_lanes_run r;
	uint64_t end = 0;
	int nlane = 0, ahead;

	for (int i = 0; i < j->nside; i++)
		nlane += j->side[i].nlane;
	ahead = more && rp_feed_ahead_wanted(nlane);

	if (rp_lanes_start(j, &r, ahead) && ahead)
		for (int i = 0; i < j->nside; i++)
			rp_stream_feed_ahead(j, &j->side[i]);
	rp_lanes_join(j, &r);
	/* the run stood still from its last lane's end (the reading may have
	 * taken longer than the window) */
	for (int i = 0; i < j->nside; i++)
		for (int l = 0; l < j->side[i].nlane; l++)
			if (j->side[i].lane[l].ended_ns > end)
				end = j->side[i].lane[l].ended_ns;
	return end ? end : rp_now_ns();
}

/* What the window's lanes did, onto the side; 1 when it stopped. */
static int rp_stream_lanes(struct rp_side *s)
{
	int stopped = 0;

	for (int l = 0; l < s->nlane; l++) {
		struct rp_lane *L = &s->lane[l];
		struct rp_lane *T = rp_stream_thread(s, L->stream);

		s->nran += L->ran;
		s->xwaits += L->xwaits;
		s->sq_waits += L->sq_waits;
		if (T) { /* found: every window lane got its thread at fill */
			rp_report_lane_window(L, T);
			T->n += L->n;
			T->ran += L->ran;
			T->xwaits += L->xwaits;
			T->sq_waits += L->sq_waits;
			T->deps_inferred += L->deps_inferred;
			T->deps_in_flight += L->deps_in_flight;
			T->deps_kept += L->deps_kept;
			T->deps_timed_out += L->deps_timed_out;
			T->timeouts = L->timeouts;
			T->wasted_ns = L->wasted_ns;
			T->anchored = L->anchored;
			memcpy(T->anchor, L->anchor, sizeof(L->anchor));
		}
		if (!L->stop_why)
			continue;
		stopped = 1;
		if (!s->stop_why || L->stop_why < s->stop_why)
			s->stop_why = L->stop_why;
		if (L->stop_at >= 0 && L->stop_at < s->stop_at)
			s->stop_at = L->stop_at;
	}
	return stopped;
}

/* The window done: its completions matched and dropped, its timing added,
 * its memory given back. */
static void rp_stream_retire(struct rp_job *j, struct rp_side *s)
{
	struct rp_stream *sm = s->sm;

	rp_report_window(j, s);
	rp_collect_completions(j, s);
	if (s->stop_why && !sm->cut) {
		sm->stop_at_all = sm->base + (uint64_t)s->stop_at;
		rp_side_cut(s);
		sm->cut = 1;
	}
	rp_match_trim(j, s);
	/* up to the next window's, when that one was read while this ran */
	rp_again_discard(s, sm->arena_mark, sm->fed ? sm->next_mark : SIZE_MAX);
	s->lane = NULL;
	s->nlane = 0;
	s->inline_pool = NULL;
	s->inline_used = s->inline_cap = 0;
	sm->base += (uint64_t)s->nstep;
	s->nstep = 0;
	sm->windows++;
}

/* Traces of one host with one kind of clock: their windows end at one
 * reading of the host's clock (each trace's conversion to ns differs by
 * microseconds, enough to put a send in the window after the poll that got
 * it). */
static void rp_stream_cut(struct rp_job *j)
{
	int host = j->same_clock;

	for (int i = 1; i < j->nside; i++)
		if (j->side[i].hdr.clock_source != j->side[0].hdr.clock_source)
			host = 0;
	for (int i = 0; i < j->nside; i++)
		j->side[i].sm->host_cut = host;
}

/* The time since the last window's run ended (the first: since the agreed
 * start) stood still: the schedule resumes where it left off, so a window's
 * steps are not late by the reading of it. Also the --timing=deps anchors
 * each thread carries. */
static void rp_stream_resume(struct rp_job *j, uint64_t ran_until, int first)
{
	uint64_t now = rp_now_ns(), d = now > ran_until ? now - ran_until : 0;

	if (!d)
		return;
	j->t0 += d;
	if (!first) /* the first is before the span's first step */
		j->paused_ns += d;
	for (int i = 0; i < j->nside; i++)
		for (int l = 0; l < j->side[i].nlane; l++)
			if (j->side[i].lane[l].anchored)
				j->side[i].lane[l].anchor[0] += d;
}

void rp_stream_run(struct rp_job *j)
{
	int more = 1, stopped = 0, why = 0;
	uint64_t t0 = j->t0, ran_until = t0, *lim;
	size_t nlim;

	rp_stream_cut(j);
	lim = rp_stream_plan_all(j, &nlim);
	for (int i = 0; i < j->nside; i++) {
		struct rp_side *s = &j->side[i];

		s->sm->base = (uint64_t)s->prefix;
		s->nran = s->pre.ran;
		s->stop_why = s->pre.stop_why;
		if (s->stop_why)
			stopped = 1;
		if (!lim || rp_stream_open(j, s, lim, nlim) < 0) {
			rp_diverge(j, "%s: streaming: the trace could not be read again",
				   s->path);
			why = RBT_REPLAY_STOP_DIVERGED;
			stopped = 1;
		}
		s->nstep = 0;
	}
	free(lim);
	while (more && !stopped) {
		if (rp_stream_fill(j, &more) < 0) {
			why = RBT_REPLAY_STOP_DIVERGED;
			rp_diverge(j, "streaming: a window could not be read: stopped");
			stopped = 1;
		} else {
			for (int i = 0; i < j->nside; i++) {
				j->side[i].stop_at = j->side[i].nstep;
				for (int l = 0; l < j->side[i].nlane; l++)
					j->side[i].lane[l].stop_why = 0;
			}
			rp_stream_resume(j, ran_until, ran_until == t0);
			ran_until = rp_stream_window_run(j, more);
		}
		for (int i = 0; i < j->nside; i++) {
			struct rp_side *s = &j->side[i];

			if (rp_stream_lanes(s)) {
				stopped = 1;
				if (!why || s->stop_why < why)
					why = s->stop_why;
			}
			if (rp_signal_caught() && !s->stop_why)
				stopped = 1;
		}
		/* the sides that did not stop end where their window did */
		for (int i = 0; stopped && i < j->nside; i++) {
			struct rp_side *s = &j->side[i];

			if (!s->stop_why) {
				s->stop_why = why ? why : RBT_REPLAY_STOP_SIGNAL;
				s->stop_at = s->nstep;
			}
		}
		for (int i = 0; i < j->nside; i++)
			rp_stream_retire(j, &j->side[i]);
	}
	for (int i = 0; stopped && i < j->nside; i++)
		if (!j->side[i].stop_why)
			j->side[i].stop_why = why ? why : RBT_REPLAY_STOP_SIGNAL;
	for (int i = 0; i < j->nside; i++) {
		struct rp_side *s = &j->side[i];

		if (!s->sm->cut)
			s->sm->stop_at_all = s->sm->base;
		/* the report's lanes: each recorded thread, what it ran in
		 * all windows (no steps of its own left: idx NULL) */
		s->lane = s->sm->thr;
		s->nlane = s->sm->nthr;
		s->stop_at = 0;
		for (int l = 0; l < s->nlane; l++) {
			s->pre.timeouts += s->lane[l].timeouts;
			if (s->lane[l].wasted_ns > s->pre.wasted_ns)
				s->pre.wasted_ns = s->lane[l].wasted_ns;
		}
		if (s->sm->late_events)
			fprintf(j->log,
				"rbtrace replay: %s: %llu events came in the file after "
				"the window of their time was read (beyond the loader's "
				"time-order window): replayed in the next window\n",
				s->path, (unsigned long long)s->sm->late_events);
		if (rp_deps_dropped(s->sm))
			fprintf(j->log,
				"rbtrace replay: %s: %llu pending WRITEs over those a "
				"thread carries from one window to the next were not "
				"waited for\n",
				s->path, (unsigned long long)rp_deps_dropped(s->sm));
		rp_again_close(s);
		rp_side_finish(j, s);
	}
}

uint64_t rp_steps_of(const struct rp_side *s)
{
	return s->sm ? s->sm->nstep_all : (uint64_t)s->nstep;
}

uint64_t rp_stop_of(const struct rp_side *s)
{
	return s->sm ? s->sm->stop_at_all : (uint64_t)s->stop_at;
}

uint64_t rp_timed_of(const struct rp_side *s)
{
	return s->sm ? s->sm->smp.timed : s->late_to - s->late_from;
}
