/* replay_job.c - rbt_replay_run: the order of the phases of one replay job
 * (load every trace, open the network peer, check, build, publish and
 * exchange, translate, run the prefixes, the start barrier, one thread per
 * side, the DONE barrier, the report, -o) and the freeing of everything.
 *
 * Owns the sequence only: each phase is another file's. Must never issue a
 * verb of its own beyond the device queries between check and build.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "replay/replay_int.h"

static void *rp_thread(void *arg)
{
	struct rp_thread_arg *a = arg;

	rp_go_realtime(a->j, 1);
	rp_run_lane(a->j, a->L);
	return NULL;
}

/* -o FILE with several traces: FILE.N, or X.N.rbt for X.rbt. */
static void rp_out_name(char *buf, size_t n, const char *out, int i)
{
	size_t l = strlen(out);

	if (l > 4 && !strcmp(out + l - 4, ".rbt"))
		snprintf(buf, n, "%.*s.%d.rbt", (int)(l - 4), out, i);
	else
		snprintf(buf, n, "%s.%d", out, i);
}

/* RBTRACE_REPLAY_MEMORY_STEPS: a job of up to this many steps replays from
 * memory even when longer than a window (streaming costs the pauses between
 * windows; see docs/replay.md "Any length"). Unset: RP_MEMORY_STEPS, or
 * fewer when an eighth of the machine's memory holds fewer at RP_STEP_BYTES
 * a step - or, when RBTRACE_REPLAY_WINDOW is set, that window (every job
 * longer than the window given streams, as it always did). */
static uint64_t rp_mem_steps(FILE *log, int window)
{
	const char *v = getenv("RBTRACE_REPLAY_MEMORY_STEPS");
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t n = RP_MEMORY_STEPS;

	if (v && *v) {
		char *end;
		unsigned long long x;

		errno = 0;
		x = strtoull(v, &end, 10);
		if (isdigit((unsigned char)*v) && !errno && !*end)
			return x;
		fprintf(log,
			"rbtrace replay: ignoring RBTRACE_REPLAY_MEMORY_STEPS=%s "
			"(expected a number of steps)\n",
			v);
	}
	if (getenv("RBTRACE_REPLAY_WINDOW"))
		return window > 0 ? (uint64_t)window : 0;
	if (pages > 0 && psz > 0 &&
	    (uint64_t)pages * (uint64_t)psz / 8 / RP_STEP_BYTES < n)
		n = (uint64_t)pages * (uint64_t)psz / 8 / RP_STEP_BYTES;
	return n;
}

static struct rp_job *rp_job_new(const struct rbt_replay_opts *o, int ntraces)
{
	struct rp_job *j = calloc(1, sizeof(*j));
	const char *tmp = getenv("TMPDIR");

	if (!j)
		return NULL;
	j->o = o;
	j->log = o->log ? o->log : stderr;
	j->net_fd = -1;
	for (int k = 0; k < RP_MAX_PEERS; k++)
		j->peer_fd[k] = -1;
	j->nside = ntraces;
	j->poll_timeout_ms = o->poll_timeout_ms > 0 ? o->poll_timeout_ms : 5000;
	/* RBTRACE_REPLAY_WINDOW: steps per window of a streamed replay (0: never
	 * stream) */
	j->window = getenv("RBTRACE_REPLAY_WINDOW")
			    ? atoi(getenv("RBTRACE_REPLAY_WINDOW"))
			    : RP_STREAM_WINDOW;
	j->mem_steps = rp_mem_steps(j->log, j->window);
	/* a window's end is chosen among kept step times: four per window */
	j->mark_every = j->window / 4 < 1		 ? 1
			: j->window / 4 > RP_STREAM_MARK ? RP_STREAM_MARK
							 : j->window / 4;
	pthread_mutex_init(&j->rep.lock, NULL);
	snprintf(j->xrcd_prefix, sizeof(j->xrcd_prefix), "%s/rbtrace-xrcd-%d-%llx",
		 tmp && *tmp ? tmp : "/tmp", (int)getpid(),
		 (unsigned long long)rp_now_ns());
	return j;
}

static void rp_pool_free(struct rp_job *j);

static void rp_job_free(struct rp_job *j)
{
	rp_pool_free(j);
	rp_net_close(j);
	for (int i = 0; i < j->nside; i++) {
		rp_teardown_side(&j->side[i]);
		rp_side_free(&j->side[i]);
	}
	for (int i = 0; i < j->rep.ndiv; i++) {
		free(j->rep.div[i].msg);
		free(j->rep.div[i].key);
	}
	free(j->rep.div);
	free(j->dir.qps);
	free(j->dir.mrs);
	free(j->dir.srqs);
	free(j->writes.v);
	pthread_mutex_destroy(&j->rep.lock);
	free(j);
}

/* Every trace, and the recorded epoch: one clock when all come from one host. */
static int rp_job_load(struct rp_job *j, const char *const *traces)
{
	int rc = 0;

	int reload = 0;

	for (int i = 0; i < j->nside && !rc; i++) {
		j->side[i].idx = i;
		rc = rp_side_load(j, &j->side[i], traces[i]);
	}
	if (!rc)
		rc = rp_stream_decide(j, &reload);
	if (rc < 0)
		return rc;
	rc = 0;
	/* too long for one window but not streamable: whole, from memory */
	for (int i = 0; reload && i < j->nside && !rc; i++) {
		rp_side_free(&j->side[i]);
		j->side[i].idx = i;
		j->window = 0;
		rc = rp_side_load(j, &j->side[i], traces[i]);
	}
	if (rc)
		return rc;
	j->same_clock = 1;
	j->rec_epoch = UINT64_MAX;
	for (int i = 0; i < j->nside; i++) {
		if (strcmp(j->side[i].host, j->side[0].host))
			j->same_clock = 0;
		if (rp_steps_of(&j->side[i]) && j->side[i].rec_epoch_ns < j->rec_epoch)
			j->rec_epoch = j->side[i].rec_epoch_ns;
	}
	return 0;
}

/* The device of each side, and what it offers, checked against the trace. */
static int rp_job_open(struct rp_job *j, struct rp_side *s)
{
	int rc = rp_open_device(j, s, &s->ctx);

	if (rc)
		return rc;
	if (ibv_query_device(s->ctx, &s->dattr) || ibv_query_port(s->ctx, 1, &s->pattr)) {
		return rp_fail(j, -EIO, "querying the device failed: %s",
			       strerror(errno));
	}
	if (ibv_query_gid(s->ctx, 1, 0, &s->gid))
		memset(&s->gid, 0, sizeof(s->gid));
	return rp_check_side(j, s);
}

/* Everything before the first step: the peer, the checks, the resources, the
 * directory (exchanged with the peer), every work request translated. */
static int rp_job_setup(struct rp_job *j)
{
	int rc = 0;

	/* Network peer first: whether QPs pair up depends on it. */
	if (j->o->listen || j->o->connect) {
		rc = rp_net_open(j);
		if (rc)
			return rc;
	}
	rc = rp_check_pairs(j);
	for (int i = 0; i < j->nside && !rc; i++)
		rc = rp_job_open(j, &j->side[i]);
	for (int i = 0; i < j->nside && !rc; i++)
		rc = rp_build_side(j, &j->side[i]);
	for (int i = 0; i < j->nside && !rc; i++) {
		struct rp_side *s = &j->side[i];

		for (int q = 0; q < s->nqp; q++)
			if (s->qp[q].is_global &&
			    ibv_query_gid(s->ctx, (uint8_t)s->qp[q].port,
					  (int)s->qp[q].sgid_index, &s->gid))
				memset(&s->gid, 0, sizeof(s->gid));
		rc = rp_publish_side(j, s);
	}
	if (!rc)
		rc = rp_deps_collect(j);
	if (!rc && j->net_fd >= 0)
		rc = rp_net_exchange(j);
	for (int i = 0; i < j->nside && !rc; i++)
		rc = rp_prepare_side(j, &j->side[i]);
	for (int i = 0; i < j->nside && !rc; i++) {
		rp_err_waits(j, &j->side[i]);
		rc = rp_sq_waits(&j->side[i]);
	}
	if (!rc)
		rc = rp_deps_setup(j);
	if (!rc)
		rc = rp_ud_order_setup(j);
	return rc;
}

/* Worker k of the job's pool: the k-th lane of every window it is given. */
static void *rp_pool_thread(void *arg)
{
	const struct rp_pool_arg *a = arg;
	struct rp_pool *p = &a->j->pool;
	const int k = a->k;
	uint64_t seen = 0;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->stop)
			break;
		seen = p->gen;
		if (k >= p->nwork)
			continue;
		struct rp_thread_arg w = p->work[k];

		pthread_mutex_unlock(&p->mu);
		rp_go_realtime(w.j, 1);
		rp_run_lane(w.j, w.L);
		pthread_mutex_lock(&p->mu);
		if (++p->ndone == p->nwork)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* The pool grown to n workers (made by the run's thread, with its signal
 * mask, as any lane thread); how many it has. */
static int rp_pool_grow(struct rp_job *j, int n)
{
	struct rp_pool *p = &j->pool;

	if (!p->inited) {
		if (pthread_mutex_init(&p->mu, NULL))
			return 0;
		if (pthread_cond_init(&p->go, NULL)) {
			pthread_mutex_destroy(&p->mu);
			return 0;
		}
		if (pthread_cond_init(&p->done, NULL)) {
			pthread_cond_destroy(&p->go);
			pthread_mutex_destroy(&p->mu);
			return 0;
		}
		p->inited = 1;
	}
	while (p->nthr < n) {
		pthread_t *t = realloc(p->thr, (size_t)(p->nthr + 1) * sizeof(*t));
		struct rp_pool_arg **v =
			realloc(p->args, (size_t)(p->nthr + 1) * sizeof(*v));
		struct rp_pool_arg *a;

		if (t)
			p->thr = t;
		if (v)
			p->args = v;
		if (!t || !v || !(a = malloc(sizeof(*a))))
			break;
		*a = (struct rp_pool_arg){ j, p->nthr };
		if (pthread_create(&p->thr[p->nthr], NULL, rp_pool_thread, a)) {
			free(a);
			break;
		}
		p->args[p->nthr++] = a;
	}
	return p->nthr;
}

/* The pool's workers ended and joined (at the job's end). */
static void rp_pool_free(struct rp_job *j)
{
	struct rp_pool *p = &j->pool;

	if (!p->inited)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int k = 0; k < p->nthr; k++)
		pthread_join(p->thr[k], NULL);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->mu);
	for (int k = 0; k < p->nthr; k++)
		free(p->args[k]);
	free(p->thr);
	free(p->args);
	*p = (struct rp_pool){ 0 };
}

/* Lane l of side i, made to run from the side's steps as they are now. */
static struct rp_lane *rp_lane_ready(struct rp_job *j, int i, int l)
{
	struct rp_lane *L = &j->side[i].lane[l];

	L->stop_why = j->side[i].pre.stop_why;
	L->step = j->side[i].step;
	L->nstep = j->side[i].nstep;
	return L;
}

/* rp_lanes_start for a streamed job: its n lanes given to the pool's
 * workers (the first ones, as many as it has: the rest run in
 * rp_lanes_join). */
static int rp_lanes_pool(struct rp_job *j, struct rp_lanes_run *r, int n)
{
	struct rp_pool *p = &j->pool;
	int m = rp_pool_grow(j, n), k = 0;

	if (m > n) /* a window before had more lanes */
		m = n;

	for (int i = 0; i < j->nside; i++)
		for (int l = 0; l < j->side[i].nlane; l++, k++) {
			r->args[k] = (struct rp_thread_arg){ j, rp_lane_ready(j, i, l) };
			r->own[k] = k < m;
		}
	if (!m)
		return 0;
	pthread_mutex_lock(&p->mu);
	p->work = r->args;
	p->nwork = m;
	p->ndone = 0;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	r->pooled = 1;
	return m == n;
}

long rp_ncpu(void)
{
	cpu_set_t set;

	return sched_getaffinity(0, sizeof(set), &set) == 0
		       ? CPU_COUNT(&set)
		       : sysconf(_SC_NPROCESSORS_ONLN);
}

/* One thread per recorded thread (lane) of every side (the caller's own when
 * there is one in all and others is 0, or when a thread cannot be had: such a
 * lane runs in rp_lanes_join, after the others, which then wait for its order
 * only up to the poll timeout), all from the agreed start. Each lane takes the
 * side's steps as they are now; a streamed job's lanes run on its pool's
 * threads (rp_lanes_pool). 1 when every lane is on a thread of its own (the
 * caller is free until rp_lanes_join). */
int rp_lanes_start(struct rp_job *j, struct rp_lanes_run *r, int others)
{
	int n = 0, k = 0, all = 1;
	long ncpu = rp_ncpu();

	for (int i = 0; i < j->nside; i++)
		n += j->side[i].nlane;
	j->crowded = n > 1 && n > ncpu;
	if (j->crowded && n > j->crowd_lanes) {
		j->crowd_lanes = n;
		j->crowd_cpus = ncpu;
	}
	r->args = calloc((size_t)n + 1, sizeof(*r->args));
	r->own = calloc((size_t)n + 1, 1);
	r->pooled = 0;
	if (j->stream && (n > 1 || others) && r->args && r->own)
		return rp_lanes_pool(j, r, n);
	for (int i = 0; i < j->nside; i++)
		for (int l = 0; l < j->side[i].nlane; l++, k++) {
			struct rp_lane *L = rp_lane_ready(j, i, l);

			if (r->args && r->own) {
				r->args[k] = (struct rp_thread_arg){ j, L };
				r->own[k] = (n > 1 || others) &&
					    !pthread_create(&L->thr, NULL, rp_thread,
							    &r->args[k]);
			}
			all &= r->own && r->own[k];
		}
	return all;
}

void rp_lanes_join(struct rp_job *j, struct rp_lanes_run *r)
{
	int k = 0;

	if (r->pooled) {
		struct rp_pool *p = &j->pool;

		pthread_mutex_lock(&p->mu);
		while (p->ndone < p->nwork)
			pthread_cond_wait(&p->done, &p->mu);
		p->nwork = 0;
		p->work = NULL;
		pthread_mutex_unlock(&p->mu);
	}

	for (int i = 0; i < j->nside; i++)
		for (int l = 0; l < j->side[i].nlane; l++, k++) {
			struct rp_lane *L = &j->side[i].lane[l];

			if (r->own && r->own[k]) {
				if (!r->pooled)
					pthread_join(L->thr, NULL);
				continue;
			}
			rp_go_realtime(j, 1);
			rp_run_lane(j, L);
			rp_go_realtime(j, 0);
		}
	free(r->args);
	free(r->own);
	*r = (struct rp_lanes_run){ 0 };
}

/* Every lane of every side run, then each side's completions, and those it
 * owes. */
void rp_run_lanes(struct rp_job *j)
{
	struct rp_lanes_run r;

	rp_lanes_start(j, &r, 0);
	rp_lanes_join(j, &r);
}

static void rp_job_run_sides(struct rp_job *j)
{
	if (j->stream) {
		rp_stream_run(j);
		return;
	}
	rp_run_lanes(j);
	for (int i = 0; i < j->nside; i++) {
		rp_lanes_done(&j->side[i]);
		rp_side_finish(j, &j->side[i]);
	}
}

/* Prefixes (connect, pre-post receives), then everyone starts together. */
static int rp_job_run(struct rp_job *j)
{
	int rc;

	j->t0 = rp_now_ns();
	for (int i = 0; i < j->nside; i++) {
		struct rp_side *s = &j->side[i];

		s->stop_at = s->nstep;
		s->pre = (struct rp_lane){ .s = s, .from = 0, .to = s->prefix };
		rp_run_lane(j, &s->pre);
	}
	if (j->net_fd >= 0 && (rc = rp_net_barrier(j, "READY")) < 0)
		return rc;
	/* Everyone starts 2 ms after the barrier (two processes: the later of
	 * their two proposals): time to get off the barrier's syscalls, nothing
	 * more - every QP is connected by now, and a responder in RTR or RTS
	 * receives at once (tests/softnic_race_test.cc holds softnic to that). */
	j->t0 = rp_now_ns() + 2000000;
	if (j->net_fd >= 0 && !j->peer_is_responder &&
	    (rc = rp_net_agree_t0(j, &j->t0)) < 0)
		return rc;
	if (j->o->max_time_ms)
		j->end_ns = j->t0 + j->o->max_time_ms * 1000000ull;
	rp_job_run_sides(j);
	for (int i = 0; i < j->nside; i++) {
		struct rp_side *s = &j->side[i];

		if (s->stop_why == RBT_REPLAY_STOP_DIVERGED)
			rp_diverge(j,
				   "%s: stopped before step %llu of %llu: after a "
				   "divergence, its waits found nothing for %d ms in all",
				   s->path, (unsigned long long)rp_stop_of(s),
				   (unsigned long long)rp_steps_of(s),
				   RBT_REPLAY_DIVERGED_WAIT_MS);
	}
	/* Let the peer finish before anyone destroys a QP it still talks to. */
	if (j->net_fd >= 0)
		rp_net_barrier(j, "DONE");
	for (int i = 0; i < j->nside; i++)
		rp_final_states(&j->side[i]);
	return 0;
}

/* -o: each side's replay as a trace of its own. */
static int rp_job_record(struct rp_job *j)
{
	for (int i = 0; i < j->nside; i++) {
		char path[4096];
		int r;

		if (j->nside == 1)
			snprintf(path, sizeof(path), "%s", j->o->out);
		else
			rp_out_name(path, sizeof(path), j->o->out, i);
		r = rp_record_side(j, &j->side[i], path);
		if (r < 0) {
			/* One line: the next file would fail the same way (a full disk). */
			fprintf(j->log, "rbtrace replay: -o %s: %s\n", path,
				rbt_strerror(r));
			return r;
		}
	}
	return 0;
}

int rbt_replay_run(const char *const *traces, int ntraces,
		   const struct rbt_replay_opts *o, struct rbt_replay_summary *sum)
{
	struct rp_job *j;
	int rc;

	if (o->responder)
		return rp_responder_run(o);
	if (ntraces < 1 || ntraces > RP_MAX_SIDES) {
		fprintf(o->log ? o->log : stderr,
			"rbtrace replay: give 1 to %d traces (got %d)\n", RP_MAX_SIDES,
			ntraces);
		return -EINVAL;
	}
	memset(sum, 0, sizeof(*sum));
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	rp_clock_init();
	j = rp_job_new(o, ntraces);
	if (!j)
		return -ENOMEM;
	/* From here a SIGINT/SIGTERM (or --max-time) ends the run with the
	 * report of what ran - none of it when the signal came while loading
	 * and setting up; a second signal ends the process. */
	rp_signals_catch(1);
	rc = rp_job_load(j, traces);
	if (!rc)
		rc = rp_job_setup(j);
	if (!rc)
		rc = rp_job_run(j);
	if (!rc) {
		rp_report_print(j, sum);
		if (o->out)
			rc = rp_job_record(j);
	}
	rp_signals_catch(0);
	rp_job_free(j);
	return rc;
}
