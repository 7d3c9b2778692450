/* replay_run.c - runs a side's timeline: each step (modify, post, poll, notify,
 * completion-event wait) at its deadline for the chosen timing, on the
 * replayer's own clock (replay_clock.c), with the waits between lanes, for
 * peers' WRITEs and UD receives. What comes after the last step is
 * replay_finish.c's.
 *
 * The post path does no allocation and no syscall: everything was prepared by
 * replay_translate.c before the start barrier. Must never block without a
 * bound: every wait has a timeout, shorter once the side has diverged, and
 * once a side's waits have found nothing for RBT_REPLAY_DIVERGED_WAIT_MS after
 * a divergence the side stops; SIGINT, SIGTERM and --max-time stop every side
 * at its next step (a sleep or a wait notices within 10 ms).
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "replay/replay_int.h"

/* ---- running a timeline ----------------------------------------------------------- */
struct rp_qp *rp_qp_by_new_qpn(struct rp_side *s, uint32_t qpn)
{
	/* the latest QP with that number (a destroyed one's can be reused) */
	for (int i = s->nqp - 1; i >= 0; i--)
		if (s->qp[i].new_qpn == qpn && (s->qp[i].qp || s->qp[i].gone))
			return &s->qp[i];
	for (int i = 0; i < s->nxqp; i++)
		if (s->xqp[i].peer_dir >= 0 && s->xqp[i].foreign_new_qpn == qpn)
			return &s->xqp[i];
	return NULL;
}

/* ibv_poll_cq, counting the send completions of each QP as they come off a
 * CQ whose QPs' posts wait for them (sq_track): the device frees a send
 * slot when its completion is polled. */
static int rp_cq_poll(struct rp_side *s, struct rp_cq *c, int n, struct ibv_wc *wc)
{
	int got = ibv_poll_cq(c->cq, n, wc);

	if (c->sq_track)
		for (int k = 0; k < got; k++) {
			struct rp_qp *q = rp_qp_by_new_qpn(s, wc[k].qp_num);

			if (q &&
			    !rp_wc_is_recv(q, wc[k].status, wc[k].opcode, wc[k].wr_id))
				q->sq_polled++;
		}
	return got;
}

/* More completions off c into its stash, after those it holds (for the poll
 * steps that follow): how many came, 0 when none or no room, < 0 an error. */
static int rp_stash_more(struct rp_side *s, struct rp_cq *c)
{
	int n;

	if (c->stash_head == c->stash_n) {
		c->stash_head = c->stash_n = 0;
	} else if (c->stash_n == c->stash_cap && c->stash_head) {
		memmove(c->stash, c->stash + c->stash_head,
			(c->stash_n - c->stash_head) * sizeof(*c->stash));
		c->stash_n -= c->stash_head;
		c->stash_head = 0;
	}
	if (c->stash_n == c->stash_cap)
		return 0;
	n = rp_cq_poll(s, c, (int)(c->stash_cap - c->stash_n), c->stash + c->stash_n);
	if (n > 0)
		c->stash_n += (uint32_t)n;
	return n;
}

static void rp_copy_payloads(struct rp_step *st)
{
	const struct rbt_ev_post_send *p = &st->ev->u.post_send;

	for (uint32_t w = 0; w < p->n_wrs; w++) {
		const struct rbt_blob *b = &p->wrs[w].payload;
		uint32_t off = 0;

		if (!b->len)
			continue;
		for (int g = 0; g < st->swr[w].num_sge && off < b->len; g++) {
			struct ibv_sge *sg = &st->swr[w].sg_list[g];
			uint32_t n =
				sg->length < b->len - off ? sg->length : b->len - off;

			memcpy((void *)(uintptr_t)sg->addr, b->data + off, n);
			off += n;
		}
	}
}

/* Keys of MRs registered mid-run, read as the post is issued (a key of an MR
 * not registered now: one no MR has, as softnic and hardware refuse). */
static void rp_apply_fixes(const struct rp_step *st)
{
	for (uint32_t k = 0; k < st->nfix; k++) {
		const struct rp_fix *f = &st->fix[k];

		*f->dst = !f->m->mr   ? 0x7ffe0001u
			  : f->remote ? f->m->mr->rkey
				      : f->m->mr->lkey;
	}
}

/* The WRs of a chain before bad (all when bad is NULL). */
static uint32_t rp_wrs_before(const struct ibv_recv_wr *w, const struct ibv_recv_wr *bad)
{
	uint32_t n = 0;

	for (; w && w != bad; w = w->next)
		n++;
	return n;
}

/* A verb that failed where the recording's succeeded, or the other way round. */
static void rp_check_ret(struct rp_job *j, struct rp_side *s, const struct rp_step *st,
			 int i, int64_t rec)
{
	if ((st->ret == 0) != (rec == 0))
		rp_diverge(j, "%s: step %d: %s returned %lld, recorded %lld", s->path,
			   rp_step_no(s, i), rbt_event_name(st->type), (long long)st->ret,
			   (long long)rec);
}

/* A receive post, to the QP or its SRQ; a UD QP's senders wait for it. */
static void rp_step_recv(struct rp_step *st, int srq)
{
	struct ibv_recv_wr *br = NULL;

	rp_apply_fixes(st);
	st->t_issue = rp_now_ns();
	st->ret = srq ? ibv_post_srq_recv(st->srq->srq, st->rwr, &br)
		      : ibv_post_recv(st->qp->qp, st->rwr, &br);
	st->t_exit = rp_now_ns();
	if (!srq && st->qp->recv_ts)
		__atomic_add_fetch(&st->qp->recv_posted,
				   rp_wrs_before(st->rwr, st->ret ? br : NULL),
				   __ATOMIC_RELEASE);
}

/* An MR registered, deregistered or moved (ibv_rereg_mr: the predecessor's
 * ibv_mr onto the successor's memory) at its recorded time. */
static void rp_step_mr(struct rp_job *j, struct rp_side *s, struct rp_step *st, int i)
{
	const struct rbt_event *e = st->ev;
	struct rp_mr *m = st->mr, *o;
	int64_t rec;
	int fl;

	st->t_issue = rp_now_ns();
	switch (e->type) {
	case RBT_EV_MR_REG:
		if (!m->mr)
			m->mr = ibv_reg_mr(m->npd, m->buf, m->length ? m->length : 1,
					   (int)m->access);
		st->ret = m->mr ? 0 : -(errno ? errno : EIO);
		rec = e->u.mr_reg.ret;
		break;
	case RBT_EV_MR_DEREG:
		st->ret = m->mr ? ibv_dereg_mr(m->mr) : -ENOENT;
		if (!st->ret)
			m->mr = NULL;
		rec = e->u.mr_dereg.ret;
		break;
	default:
		o = m->succ_of ? &s->mr[m->succ_of - 1] : NULL;
		fl = (int)m->rereg_flags;
		st->ret = o && o->mr ? ibv_rereg_mr(o->mr, fl,
						    (fl & IBV_REREG_MR_CHANGE_PD) ? m->npd
										  : NULL,
						    m->buf, m->length,
						    (fl & IBV_REREG_MR_CHANGE_ACCESS)
							    ? (int)m->access
							    : 0)
				     : -ENOENT;
		if (!st->ret) {
			m->mr = o->mr;
			o->mr = NULL;
		}
		rec = e->u.mr_rereg.ret;
		break;
	}
	st->t_exit = rp_now_ns();
	if (m->mr) { /* for -o */
		m->new_lkey = m->mr->lkey;
		m->new_rkey = m->mr->rkey;
	}
	rp_check_ret(j, s, st, i, rec);
}

/* A QP created or destroyed at its recorded time. A destroy first takes the
 * QP's state, as the recorder did (its final state, for the report). */
static void rp_step_qp_life(struct rp_job *j, struct rp_side *s, struct rp_step *st,
			    int i)
{
	struct rp_qp *q = st->qp;

	st->t_issue = rp_now_ns();
	if (st->type == RBT_EV_QP_CREATE) {
		st->ret = q->qp ? 0 : rp_qp_create_now(s, q);
		if (!st->ret && q->dir_idx >= 0)
			__atomic_store_n(&j->dir.qps[q->dir_idx].new_qpn, q->new_qpn,
					 __ATOMIC_RELEASE);
	} else if (q->qp) {
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr ia;

		memset(&a, 0, sizeof(a));
		q->replay_state =
			ibv_query_qp(q->qp, &a, IBV_QP_STATE, &ia) ? 99 : a.qp_state;
		st->ret = ibv_destroy_qp(q->qp);
		if (!st->ret) {
			q->qp = NULL;
			q->gone = 1;
		}
	} else {
		st->ret = -ENOENT;
	}
	st->t_exit = rp_now_ns();
	if (st->ret)
		rp_diverge(j, "%s: step %d: %s of QP %llu failed in the replay: %s",
			   s->path, rp_step_no(s, i), rbt_event_name(st->type),
			   (unsigned long long)q->rec.qp_num,
			   strerror((int)(st->ret < 0 ? -st->ret : st->ret)));
}

/* Steps issued at their recorded offset in the timed modes: posts, and the
 * resource steps of the run (MRs registered, deregistered, rereg'd; QPs
 * created, destroyed). */
static int rp_timed_step(uint32_t t)
{
	return t == RBT_EV_POST_SEND || t == RBT_EV_POST_RECV ||
	       t == RBT_EV_POST_SRQ_RECV || t == RBT_EV_MR_REG || t == RBT_EV_MR_DEREG ||
	       t == RBT_EV_MR_REREG || t == RBT_EV_QP_CREATE || t == RBT_EV_QP_DESTROY;
}

static void rp_step_modify(struct rp_job *j, struct rp_side *s, struct rp_step *st, int i)
{
	const struct rbt_ev_qp_modify *m = &st->ev->u.qp_modify;
	struct rp_qp *q = st->qp;
	uint32_t dest = (uint32_t)m->dest_qp_num, dlid = (uint32_t)m->ah_dlid;
	const uint8_t *dgid = m->ah_dgid.len == 16 ? m->ah_dgid.data : NULL;

	if (q->peer_dir >= 0) {
		const struct rp_dir_qp *d = &j->dir.qps[q->peer_dir];

		/* a peer created mid-run (by another side's or thread's step)
		 * may not exist yet: the recording connected to it after its
		 * creation, so wait for it, bounded like a poll */
		if ((m->attr_mask & IBV_QP_DEST_QPN) &&
		    !__atomic_load_n(&d->new_qpn, __ATOMIC_ACQUIRE)) {
			uint64_t t0 = rp_now_ns(),
				 lim = (uint64_t)j->poll_timeout_ms * 1000000ull;

			while (!__atomic_load_n(&d->new_qpn, __ATOMIC_ACQUIRE) &&
			       rp_now_ns() - t0 < lim && !rp_signal_caught())
				sched_yield();
			if (!__atomic_load_n(&d->new_qpn, __ATOMIC_ACQUIRE))
				rp_diverge(j,
					   "%s: step %d: QP %llu's peer QP %u was never "
					   "created in the replay",
					   s->path, rp_step_no(s, i),
					   (unsigned long long)q->rec.qp_num, d->rec_qpn);
		}
		dest = d->new_qpn;
		dlid = d->lid;
		dgid = d->gid;
	}
	st->t_issue = rp_now_ns();
	st->ret = rp_modify_to(q->qp, m, dest, dlid, dgid);
	st->t_exit = rp_now_ns();
	if ((st->ret == 0) != (m->ret == 0))
		rp_diverge(j,
			   "%s: step %d: modify QP %llu to state %llu: recorded %s, "
			   "replay %s",
			   s->path, rp_step_no(s, i), (unsigned long long)q->rec.qp_num,
			   (unsigned long long)m->qp_state,
			   m->ret ? "failed" : "succeeded",
			   st->ret ? strerror((int)st->ret) : "succeeded");
}

/* Whether a completion the replay got is of the kind the recording's poll got
 * at that place: the same QP and queue (send or receive). Errors match
 * anything (a flushed completion's opcode means nothing). */
static int rp_wc_fits(struct rp_side *s, const struct ibv_wc *w, const struct rbt_wc *r)
{
	const struct rp_qp *q;

	if (w->status != IBV_WC_SUCCESS || r->status != IBV_WC_SUCCESS)
		return 1;
	if (!!(w->opcode & IBV_WC_RECV) != !!(r->opcode & IBV_WC_RECV))
		return 0;
	q = rp_qp_by_new_qpn(s, w->qp_num);
	return !q || q->rec.qp_num == r->qp_num;
}

/* Several recorded threads: the poll hands out the completions of the kinds
 * the recording's poll got, in that order, so that another thread's step gated
 * on this poll waits for what it waited for in the recording (rping: its main
 * thread disconnects once the cq thread has polled the last receive, while the
 * CQ may hold the send's completion first). The others wait in the CQ's stash
 * for the polls after. 1: one taken; 0: none of that kind is there yet. */
static int rp_poll_fitting(struct rp_side *s, struct rp_step *st,
			   const struct rbt_ev_poll_cq *p)
{
	struct rp_cq *c = st->cq;
	int n;

	for (;;) {
		for (uint32_t x = c->stash_head; x < c->stash_n; x++) {
			if (!rp_wc_fits(s, &c->stash[x], &p->wcs[st->got]))
				continue;
			st->wcs[st->got++] = c->stash[x];
			memmove(&c->stash[x], &c->stash[x + 1],
				(c->stash_n - x - 1) * sizeof(*c->stash));
			c->stash_n--;
			if (c->stash_head == c->stash_n)
				c->stash_head = c->stash_n = 0;
			return 1;
		}
		if (c->stash_n == c->stash_cap) {
			/* no room to hold more back: the oldest, out of order */
			st->wcs[st->got++] = c->stash[c->stash_head++];
			return 1;
		}
		n = rp_stash_more(s, c);
		if (n <= 0)
			return n;
	}
}

/* How much longer than --poll-timeout a poll may wait before it diverges: what
 * the program itself waited for, in the recording. In deps timing, from its
 * last wait (rec_anchor) to this poll's return: the producer of what it waits
 * for may keep think time (or the start's schedule) that long. In recorded
 * and scale timing polls are not paced (they begin when the step before
 * ended), so until the schedule's time of the recorded poll's return: a
 * program that polled 1.5 s for a late answer gets those 1.5 s here too.
 * asap has no schedule to wait for: none. */
static uint64_t rp_poll_gap(const struct rp_job *j, const struct rp_lane *L,
			    const struct rp_step *st, uint64_t rec_anchor)
{
	const struct rbt_replay_opts *o = j->o;

	if (o->timing == RBT_REPLAY_DEPS)
		return st->rec_exit_ns > rec_anchor ? st->rec_exit_ns - rec_anchor : 0;
	if (o->timing == RBT_REPLAY_RECORDED || o->timing == RBT_REPLAY_SCALE) {
		uint64_t rec_epoch = j->same_clock ? j->rec_epoch : L->s->rec_epoch_ns;
		double scale = o->timing == RBT_REPLAY_SCALE ? o->scale : 1.0;
		int64_t off = (int64_t)(st->rec_exit_ns - rec_epoch);
		uint64_t due = j->t0 + (uint64_t)(off > 0 ? (double)off * scale : 0);
		uint64_t now = rp_now_ns();

		return due > now ? due - now : 0;
	}
	return 0;
}

/* 1 when the side must stop (what the poll got so far is kept). gap_ns: see
 * rp_poll_gap(). */
static int rp_step_poll(struct rp_job *j, struct rp_lane *L, struct rp_step *st, int i,
			uint64_t gap_ns)
{
	struct rp_side *s = L->s;
	uint32_t want = st->nwc;
	/* Once the process has diverged, waiting the full time at every poll
	 * would only make the report late: 200 ms for a few, then 10 ms, and no
	 * more than the side's budget allows in all. */
	uint64_t tmo = (uint64_t)(L->timeouts == 0  ? j->poll_timeout_ms
				  : L->timeouts < 3 ? 200
						    : 10) *
		       1000000ull;
	uint64_t give_up;
	unsigned spins = 0;
	int stop = 0, fitting = s->nlane > 1 && st->cq->nch;

	if (tmo > (uint64_t)j->poll_timeout_ms * 1000000ull)
		tmo = (uint64_t)j->poll_timeout_ms * 1000000ull;
	if (L->timeouts == 0)
		tmo += gap_ns;
	st->t_issue = rp_now_ns();
	tmo = rp_wait_limit(j, L, tmo);
	if (!tmo)
		return 1;
	give_up = st->t_issue + tmo;
	while (st->got < want) {
		int n;

		if (fitting) {
			n = rp_poll_fitting(s, st, &st->ev->u.poll_cq);
			if (n < 0) {
				rp_diverge(j, "%s: step %d: ibv_poll_cq failed (%d)",
					   s->path, rp_step_no(s, i), n);
				break;
			}
			if (n > 0)
				continue;
		} else if (st->cq->stash_head < st->cq->stash_n) {
			/* completions an event wait already took off the CQ
			 * come first */
			st->wcs[st->got++] = st->cq->stash[st->cq->stash_head++];
			continue;
		}
		n = fitting ? 0
			    : rp_cq_poll(s, st->cq, (int)(want - st->got),
					 st->wcs + st->got);

		if (n < 0) {
			rp_diverge(j, "%s: step %d: ibv_poll_cq failed (%d)", s->path,
				   rp_step_no(s, i), n);
			break;
		}
		if (n > 0) {
			st->got += (uint32_t)n;
			continue;
		}
		if ((++spins & 255) == 0) {
			uint64_t now = rp_now_ns();

			if (rp_must_stop(j, L)) {
				stop = 1;
				break;
			}
			if (now > give_up && fitting &&
			    st->cq->stash_head < st->cq->stash_n) {
				/* not the kinds recorded: what came, in order */
				fitting = 0;
				continue;
			}
			if (now > give_up) {
				L->timeouts++;
				rp_wasted(j, L, st->t_issue);
				if (getenv("RBTRACE_REPLAY_DEBUG"))
					fprintf(j->log,
						"%s: step %d (thread %u, recorded at "
						"%.6f s, "
						"began at %.6f s): a poll of CQ %d\n",
						s->path, rp_step_no(s, i), L->stream,
						(double)(st->rec_ns - j->rec_epoch) / 1e9,
						(double)(st->t_issue - j->t0) / 1e9,
						(int)(st->cq - s->cq));
				rp_diverge(j,
					   "%s: step %d: expected %u completions, got %u "
					   "(waited %llu ms)",
					   s->path, rp_step_no(s, i), want, st->got,
					   (unsigned long long)(tmo / 1000000ull));
				break;
			}
			/* let softnic's helper thread (and on a 2-CPU machine the
			 * other side's thread) in: measured, this keeps lateness down */
			if ((spins & 1023) == 0)
				sched_yield();
		}
		/* several recorded threads: the one that will produce this
		 * completion may be waiting for this CPU */
		if (s->nlane > 1 && rp_wait_yield(j, spins))
			sched_yield();
	}
	st->t_exit = rp_now_ns();
	st->ret = st->got;
	if (st->cq->count_live)
		for (uint32_t k = 0; k < st->got; k++) {
			const struct ibv_wc *w = &st->wcs[k];
			struct rp_qp *q;

			if (w->status != IBV_WC_SUCCESS || (w->opcode & IBV_WC_RECV))
				continue;
			q = rp_qp_by_new_qpn(s, w->qp_num);
			if (q && q->count_live)
				__atomic_fetch_add(&q->live_send_ok, 1, __ATOMIC_RELEASE);
		}
	/* matched against the recording after the run (rp_collect_completions) */
	return stop;
}

/* 1 when the side must stop instead. */
static int rp_step_cq_event(struct rp_job *j, struct rp_lane *L, struct rp_step *st)
{
	struct rp_side *s = L->s;
	struct rp_cq *c = st->cq;
	struct ibv_comp_channel *ch = c->nch;
	uint64_t tmo = (j->diverged ? 50 : 1000) * 1000000ull;
	uint64_t give_up;
	int stop = 0;
	struct pollfd pfd;
	struct ibv_cq *cq;
	void *ctx;

	st->t_issue = rp_now_ns();
	if (!ch) {
		st->skipped = 1;
		return 0;
	}
	tmo = rp_wait_limit(j, L, tmo);
	if (!tmo)
		return 1;
	give_up = st->t_issue + tmo;
	pfd.fd = ch->fd;
	pfd.events = POLLIN;
	/* The program slept here until a completion arrived after its arm. A replay
	 * running at another pace may find that completion already in the CQ, pushed
	 * before the arm (no event will come): so the wait also ends when the CQ
	 * holds completions, which are kept for the polls that follow. */
	st->ret = -1;
	if (c->stash_head == c->stash_n)
		c->stash_head = c->stash_n = 0;
	for (;;) {
		int n;

		if (c->stash_head < c->stash_n) {
			st->ret = 0;
			break;
		}
		if (poll(&pfd, 1, 0) == 1) {
			if (!ibv_get_cq_event(ch, &cq, &ctx)) {
				ibv_ack_cq_events(cq, 1);
				st->ret = 0;
			}
			break;
		}
		n = rp_stash_more(s, c);
		if (n > 0) {
			st->ret = 0;
			break;
		}
		if (rp_must_stop(j, L)) {
			stop = 1;
			break;
		}
		if (rp_now_ns() > give_up) {
			rp_wasted(j, L, st->t_issue);
			break;
		}
		if (poll(&pfd, 1, 1) == 1)
			continue;
	}
	if (st->ret && !stop) {
		__atomic_fetch_add(&s->cq_events_missed, 1, __ATOMIC_RELAXED);
		if (getenv("RBTRACE_REPLAY_DEBUG"))
			fprintf(j->log,
				"%s: step %d: no completion event on channel fd %d\n",
				s->path, rp_step_no(s, (int)(st - L->step)), ch->fd);
	}
	st->t_exit = rp_now_ns();
	return stop;
}

/* Another recorded thread's order: before a post or a modify at recorded time
 * t, every other lane of the side must have done the polls, completion-event
 * waits and modifies that had returned before t in the recording (each lane
 * publishes the earliest return among those it has not done). Bounded by the
 * poll timeout like any wait; 1 when the lane must stop. */

/* A lane's bounded wait for other threads' progress. The budget (what
 * rp_wait_limit leaves of the poll timeout) starts with the first wait made
 * with w and is shared by all of them. */
struct rp_spin {
	uint64_t t0, lim;
	unsigned spins;
};

/* One turn of a wait that found nothing yet. 0: go on; 1: the lane must
 * stop; 2: timed out (the time out counted; the caller says what did not
 * come). */
static int rp_spin_once(struct rp_job *j, struct rp_lane *L, struct rp_spin *w)
{
	if (!w->t0) {
		w->t0 = rp_now_ns();
		w->lim = rp_wait_limit(j, L, (uint64_t)j->poll_timeout_ms * 1000000ull);
		if (!w->lim)
			return 1;
	}
	/* the thread waited for may need this CPU (more recorded threads than
	 * CPUs): give it way often */
	if (rp_wait_yield(j, ++w->spins))
		sched_yield();
	if ((w->spins & 255) == 0) {
		if (rp_must_stop(j, L))
			return 1;
		if (rp_now_ns() - w->t0 > w->lim) {
			L->timeouts++;
			rp_wasted(j, L, w->t0);
			return 2;
		}
	}
#if defined(__x86_64__)
	_mm_pause();
#endif
	return 0;
}

/* Until *v reaches want: rp_spin_once's answers, 0 when reached. */
static int rp_spin_until(struct rp_job *j, struct rp_lane *L, struct rp_spin *w,
			 const uint64_t *v, uint64_t want)
{
	int r = 0;

	while (!r && __atomic_load_n(v, __ATOMIC_ACQUIRE) < want) {
		if (!w->t0)
			L->xwaits++;
		r = rp_spin_once(j, L, w);
	}
	return r;
}

/* A post on a QP whose send CQ other queues share waits until the replay has
 * taken off that CQ as many of the QP's send completions as the recording
 * had polled before the post (rp_sq_waits): what it takes of other queues
 * waits in the CQ's stash for the poll steps after. On time out it is posted
 * anyway. 1 when the lane must stop. */
static int rp_sq_wait(struct rp_job *j, struct rp_lane *L, struct rp_step *st, int i)
{
	struct rp_qp *q = st->qp;
	struct rp_cq *c = &L->s->cq[q->scq - 1];
	struct rp_spin w = { 0 };
	int r = 0;

	L->sq_waits++;
	while (!r && q->sq_polled < st->sq_need) {
		int n = rp_stash_more(L->s, c);

		if (n < 0) {
			rp_diverge(j, "%s: step %d: ibv_poll_cq failed (%d)", L->s->path,
				   rp_step_no(L->s, i), n);
			return 0;
		}
		if (!n)
			r = rp_spin_once(j, L, &w);
	}
	if (r == 2)
		rp_diverge(j,
			   "%s: step %d: post on QP %llu: %u of the %u send completions "
			   "the recording had polled before it came (waited %llu ms); "
			   "posted anyway",
			   L->s->path, rp_step_no(L->s, i),
			   (unsigned long long)q->rec.qp_num, q->sq_polled, st->sq_need,
			   (unsigned long long)(w.lim / 1000000ull));
	return r == 1;
}

/* A UD send to a QP of this process waits until that QP has had the receives
 * posted that it had when the recorded send began (rp_ud_order_setup): UD drops
 * a message that finds no receive, where the recording delivered it. On time
 * out it is sent anyway. 1 when the lane must stop. */
static int rp_ud_wait(struct rp_job *j, struct rp_lane *L, struct rp_step *st, int i)
{
	struct rp_spin w = { 0 };
	int r = rp_spin_until(j, L, &w, &st->ud_dest->recv_posted, st->ud_need);

	if (r == 2)
		rp_diverge(j,
			   "%s: step %d: UD send to QP %llu: its receive #%u did not "
			   "come (waited %llu ms); sent anyway",
			   L->s->path, rp_step_no(L->s, i),
			   (unsigned long long)st->ud_dest->rec.qp_num, st->ud_need,
			   (unsigned long long)(w.lim / 1000000ull));
	return r == 1;
}

static int rp_gate_wait(struct rp_job *j, struct rp_lane *L, const struct rp_step *st,
			int i)
{
	struct rp_side *s = L->s;
	struct rp_spin w = { 0 };
	uint64_t t = st->rec_ns;

	/* the polls of other lanes on its CQs (--thread-order=shared) */
	for (int k = 0; k < st->nxneed; k++) {
		const struct rp_xneed *x = &s->xneed[st->xneed + k];
		struct rp_lane *A = &s->lane[x->lane];
		int r = rp_spin_until(j, L, &w, &A->done, (uint64_t)x->pos + 1);

		if (r == 1)
			return 1;
		if (r == 2) {
			rp_diverge(j,
				   "%s: step %d: thread %u's poll before it (thread %u) "
				   "did not come (waited %llu ms)",
				   s->path, rp_step_no(s, i), L->stream, A->stream,
				   (unsigned long long)(w.lim / 1000000ull));
			break;
		}
	}

	for (int l = 0; l < s->nlane; l++) {
		struct rp_lane *A = &s->lane[l];
		int r = A == L ? 0 : rp_spin_until(j, L, &w, &A->gate, t);

		if (r == 1)
			return 1;
		if (r == 2)
			rp_diverge(j,
				   "%s: step %d: thread %u's step before it (thread %u) "
				   "did not come (waited %llu ms)",
				   s->path, rp_step_no(s, i), L->stream, A->stream,
				   (unsigned long long)(w.lim / 1000000ull));
	}
	return 0;
}

/* The peers' WRITEs a post waits for (replay_deps.c), in every timing: in
 * deps timing before the think time, which then counts from when the last of
 * them landed; in the others after the post's deadline (the writers keep
 * their schedule too). Bounded like a poll - in deps timing plus the gap the
 * program itself waited since its last poll, as the writer may be that far
 * in the future; 1 when the lane must stop. */
static int rp_run_deps(struct rp_job *j, struct rp_lane *L, struct rp_step *st, int i,
		       uint64_t *anchor_rep, uint64_t *anchor_rec)
{
	uint64_t t0 = rp_now_ns(), landed,
		 lim = (uint64_t)j->poll_timeout_ms * 1000000ull;
	int timed_out;

	if (j->o->timing == RBT_REPLAY_DEPS && st->rec_ns > *anchor_rec)
		lim += st->rec_ns - *anchor_rec;
	lim = rp_wait_limit(j, L, lim);
	if (!lim)
		return 1;
	landed = rp_deps_wait(j, L, st, i, lim, &timed_out);
	if (rp_must_stop(j, L))
		return 1;
	if (timed_out) {
		L->timeouts++;
		rp_wasted(j, L, t0);
	}
	/* The think time counts from the latest WRITE's replayed post when this
	 * process saw it (the recorded gap from its post to P then takes the
	 * place of the replayed flight, not added to it), else from its landing
	 * if the lane had to wait for it. One that was there already landed at
	 * some unknown time before: the lane's own schedule (its last poll, or
	 * the start) was what held it, and stays its anchor - "now" would add
	 * the think time again from a moment it did not wait for. */
	if (j->o->timing == RBT_REPLAY_DEPS) {
		uint64_t rec, rep;

		if (rp_deps_posted(st, &rec, &rep)) {
			if (rec > *anchor_rec) {
				*anchor_rec = rec;
				*anchor_rep = rep;
			}
		} else if (landed && st->dx->dep_land_ns > *anchor_rec) {
			*anchor_rec = st->dx->dep_land_ns;
			*anchor_rep = landed;
		}
	}
	return 0;
}

static int rp_err_wait(struct rp_job *j, struct rp_lane *L, struct rp_step *st, int i)
{
	const struct rp_qp *q = st->qp, *p = q ? q->err_peer : NULL;
	uint64_t t0, lim;
	unsigned spins = 0;

	if (!p || __atomic_load_n(&p->live_send_ok, __ATOMIC_ACQUIRE) >= q->err_peer_ok)
		return 0;
	t0 = rp_now_ns();
	lim = rp_wait_limit(j, L, (uint64_t)j->poll_timeout_ms * 1000000ull);
	if (!lim)
		return 1;
	L->xwaits++;
	while (__atomic_load_n(&p->live_send_ok, __ATOMIC_ACQUIRE) < q->err_peer_ok) {
		if (rp_wait_yield(j, ++spins))
			sched_yield();
		if ((spins & 255) == 0) {
			if (rp_must_stop(j, L))
				return 1;
			if (rp_now_ns() - t0 > lim) {
				L->timeouts++;
				rp_wasted(j, L, t0);
				rp_diverge(
					j,
					"%s: step %d: QP %llu to ERR: its peer's sends "
					"that succeeded in the recording did not all "
					"come "
					"(%u of %u, waited %llu ms)",
					L->s->path, rp_step_no(L->s, i),
					(unsigned long long)q->rec.qp_num,
					__atomic_load_n(&p->live_send_ok,
							__ATOMIC_ACQUIRE),
					q->err_peer_ok,
					(unsigned long long)(lim / 1000000ull));
				return 0;
			}
		}
#if defined(__x86_64__)
		_mm_pause();
#endif
	}
	return 0;
}

static void rp_lane_publish(struct rp_lane *L, int k)
{
	__atomic_store_n(&L->done, (uint64_t)k, __ATOMIC_RELEASE);
	if (L->gate_at)
		__atomic_store_n(&L->gate, k < L->n ? L->gate_at[k] : UINT64_MAX,
				 __ATOMIC_RELEASE);
}

/* A step's deadline for the timing, and the waits before it: the schedule, a
 * peer's WRITE it depends on. anchor: the last wait's replayed and recorded
 * times (--timing=deps). 1 when the lane must stop instead. */
static int rp_lane_pace(struct rp_job *j, struct rp_lane *L, struct rp_step *st, int i,
			uint64_t *anchor)
{
	const struct rbt_replay_opts *o = j->o;
	const struct rp_side *s = L->s;
	uint64_t rec_epoch = j->same_clock ? j->rec_epoch : s->rec_epoch_ns;
	double scale = o->timing == RBT_REPLAY_SCALE ? o->scale : 1.0;
	int deps = st->dx && st->dx->ndeps && !j->deps_off;

	st->deadline = 0;
	if (i < s->prefix || !rp_timed_step(st->type))
		return 0;
	if (o->timing == RBT_REPLAY_DEPS && deps &&
	    rp_run_deps(j, L, st, i, &anchor[0], &anchor[1]))
		return 1;
	if (o->timing == RBT_REPLAY_RECORDED || o->timing == RBT_REPLAY_SCALE) {
		int64_t off = (int64_t)(st->rec_ns - rec_epoch);

		st->deadline = j->t0 + (uint64_t)(off > 0 ? (double)off * scale : 0);
	} else if (o->timing == RBT_REPLAY_DEPS) {
		int64_t off = (int64_t)(st->rec_ns - anchor[1]);

		st->deadline = anchor[0] + (uint64_t)(off > 0 ? off : 0);
	}
	st->ready = rp_now_ns();
	if (st->deadline && rp_wait_until(j, L, st->deadline))
		return 1;
	if (o->timing != RBT_REPLAY_DEPS && deps) {
		uint64_t before = rp_now_ns();

		if (rp_run_deps(j, L, st, i, &anchor[0], &anchor[1]))
			return 1;
		/* waiting for a WRITE is waiting, like a poll */
		if (rp_now_ns() - before > 1000)
			st->ready = rp_now_ns();
	}
	return 0;
}

/* Runs a lane's steps (lane pre: the range from..to, on one thread). */
void rp_run_lane(struct rp_job *j, struct rp_lane *L)
{
	struct rp_side *s = L->s;
	/* --timing=deps: the replayed and recorded times of the last wait */
	uint64_t anchor[2] = { j->t0, j->same_clock ? j->rec_epoch : s->rec_epoch_ns };
	int n = L->idx ? L->n : L->to - L->from, cur = -1;

	if (!L->step) { /* not started by rp_lanes_start */
		L->step = s->step;
		L->nstep = s->nstep;
	}
	if (L->anchored) /* streamed: where its window before left it */
		memcpy(anchor, L->anchor, sizeof(anchor));
	L->stop_at = -1;
	if (L->stop_why) {
		L->stop_at = L->idx ? (L->n ? L->idx[0] : L->nstep) : L->from;
		L->ended_ns = rp_now_ns();
		return;
	}
	for (int k = 0; k < n; k++) {
		int i = L->idx ? L->idx[k] : L->from + k;
		struct rp_step *st = &L->step[i];
		const struct rbt_event *e = st->ev; /* read only off the common path */
		uint32_t ty = st->type;
		struct ibv_send_wr *bs;

		cur = i;
		if (k + 1 <
		    n) { /* the lane's next step: its lines, while this one runs */
			const char *nx =
				(const char *)&L->step[L->idx ? L->idx[k + 1] : i + 1];

			for (size_t b = 0; b < sizeof(*st); b += 64)
				__builtin_prefetch(nx + b, 1);
		}
		rp_lane_publish(L, k);
		if (st->skipped)
			continue;
		if (rp_lane_pace(j, L, st, i, anchor))
			goto stop;
		if (rp_must_stop(j, L))
			goto stop;
		if (s->nlane > 1 && L->idx &&
		    (ty == RBT_EV_POST_SEND || ty == RBT_EV_POST_RECV ||
		     ty == RBT_EV_POST_SRQ_RECV || ty == RBT_EV_QP_MODIFY) &&
		    rp_gate_wait(j, L, st, i))
			goto stop;
		/* a QP created mid-run whose creation failed (diverged there) */
		if ((ty == RBT_EV_POST_SEND || ty == RBT_EV_POST_RECV ||
		     ty == RBT_EV_QP_MODIFY) &&
		    !st->qp->qp) {
			st->skipped = 1;
			rp_diverge(j,
				   "%s: step %d: %s on QP %llu, which the replay does "
				   "not have (now)",
				   s->path, rp_step_no(s, i), rbt_event_name(ty),
				   (unsigned long long)st->qp->rec.qp_num);
			continue;
		}
		if (ty == RBT_EV_QP_MODIFY && (e->u.qp_modify.attr_mask & IBV_QP_STATE) &&
		    e->u.qp_modify.qp_state == IBV_QPS_ERR && rp_err_wait(j, L, st, i))
			goto stop;
		switch (ty) {
		case RBT_EV_QP_MODIFY:
			rp_step_modify(j, s, st, i);
			break;
		case RBT_EV_QP_CREATE:
		case RBT_EV_QP_DESTROY:
			rp_step_qp_life(j, s, st, i);
			break;
		case RBT_EV_MR_REG:
		case RBT_EV_MR_DEREG:
		case RBT_EV_MR_REREG:
			rp_step_mr(j, s, st, i);
			break;
		case RBT_EV_POST_SEND:
			if (st->sq_need && st->qp->sq_polled < st->sq_need &&
			    !j->deps_off && rp_sq_wait(j, L, st, i))
				goto stop;
			if (st->ud_dest && !j->deps_off && rp_ud_wait(j, L, st, i))
				goto stop;
			if (st->payloads)
				rp_copy_payloads(st);
			rp_apply_fixes(st);
			if (st->dx && st->dx->tags)
				rp_deps_tag(st);
			st->t_issue = rp_now_ns();
			if (st->bind1) /* a type 1 window: ibv_bind_mw */
				st->ret = ibv_bind_mw(st->qp->qp, st->bind1_mw->mw,
						      st->bind1);
			else
				st->ret = ibv_post_send(st->qp->qp, st->swr, &bs);
			st->t_exit = rp_now_ns();
			break;
		case RBT_EV_POST_RECV:
		case RBT_EV_POST_SRQ_RECV:
			rp_step_recv(st, ty == RBT_EV_POST_SRQ_RECV);
			break;
		case RBT_EV_POLL_CQ:
			if (rp_step_poll(j, L, st, i, rp_poll_gap(j, L, st, anchor[1])))
				goto stop;
			anchor[0] = st->t_exit;
			anchor[1] = st->rec_exit_ns;
			break;
		case RBT_EV_REQ_NOTIFY:
			st->t_issue = rp_now_ns();
			st->ret = ibv_req_notify_cq(st->cq->cq,
						    (int)e->u.req_notify.solicited_only);
			if ((st->ret == 0) != (st->rec_ret == 0))
				rp_diverge(j,
					   "%s: step %d: ibv_req_notify_cq returned "
					   "%lld, recorded %lld",
					   s->path, rp_step_no(s, i), (long long)st->ret,
					   (long long)st->rec_ret);
			st->t_exit = st->t_issue;
			break;
		case RBT_EV_GET_CQ_EVENT:
			if (rp_step_cq_event(j, L, st))
				goto stop;
			anchor[0] = st->t_exit;
			anchor[1] = st->rec_exit_ns;
			break;
		}
		if (ty == RBT_EV_POST_SEND || ty == RBT_EV_POST_RECV ||
		    ty == RBT_EV_POST_SRQ_RECV)
			rp_check_ret(j, s, st, i, st->rec_ret);
		L->ran++;
	}
	goto out;
stop:
	L->stop_at = cur;
out:
	memcpy(L->anchor, anchor, sizeof(anchor));
	L->anchored = 1;
	rp_lane_publish(L, n);
	L->ended_ns = rp_now_ns();
}

/* A shared machine preempts a spinning replayer for milliseconds; SCHED_FIFO keeps
 * the schedule (the kernel's RT throttling still leaves others 5% of each CPU). */
void rp_go_realtime(struct rp_job *j, int on)
{
	struct sched_param sp = { .sched_priority = on ? 1 : 0 };

	if (!j->o->realtime)
		return;
	if (pthread_setschedparam(pthread_self(), on ? SCHED_FIFO : SCHED_OTHER, &sp) &&
	    on)
		fprintf(j->log,
			"rbtrace replay: --realtime: cannot use SCHED_FIFO (%s); running "
			"with normal priority\n",
			strerror(errno ? errno : EPERM));
}
