/* replay_load.c - reads one trace into a side: every event is fed to the side's
 * model (model/rbt_model.h: resource tables with lifetimes, the clock, the
 * post -> completion join, whose callbacks are replay_join.c's), then to one
 * loader per event id (rp_loaders[]) for what the replay keeps: an entry per
 * object it rebuilds (PDs, MRs, channels, CQs, XRC domains, SRQs, QPs, AHs),
 * tied to the model's object, and the steps of its timeline
 * (replay_timeline.c); and what the reader says about damage.
 *
 * Must never issue a verb: loading happens before the replayer decides whether
 * it can replay at all. A failed create in the recording created nothing, so
 * it loads nothing. Everything the reader hands out is copied.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "replay/replay_int.h"

/* The model's object of kind k that the create of handle h made, tied to the
 * replay's entry idx (1 + index). */
static struct rbt_model_res *rp_tie(struct rp_loading *ld, enum rbt_model_kind k,
				    uint64_t h, int idx)
{
	struct rbt_model_res *r = rbt_model_by_handle(ld->s->model, 0, k, h);

	if (r)
		r->user = rp_res_user(idx);
	return r;
}

/* The replay's new entry (zeroed) in table arr of the side for a create event
 * p of handle field hf, tied to the model's object of kind k: NULL when the
 * create failed in the recording (it made nothing) or, with ld->err set, when
 * memory ran out. */
#define RP_NEW(ld, arr, n, cap, k, p, hf)                                  \
	({                                                                 \
		struct rp_side *s_ = (ld)->s;                              \
		__typeof__(s_->arr) e_ = NULL;                             \
		if ((p)->hf && !(p)->err && (p)->ret >= 0) {               \
			if ((ld)->again) {                                 \
				rp_tie(ld, k, (p)->hf, ++(ld)->again_##n); \
			} else if (RP_GROW(s_->arr, s_->n, (ld)->cap)) {   \
				e_ = &s_->arr[s_->n++];                    \
				rp_tie(ld, k, (p)->hf, s_->n);             \
			} else {                                           \
				(ld)->err = -ENOMEM;                       \
			}                                                  \
		}                                                          \
		e_;                                                        \
	})

static int rp_load_device_open(struct rp_loading *ld, const struct rbt_event *ev)
{
	struct rp_side *s = ld->s;

	if (!s->devname[0] && ev->u.device_open.name)
		snprintf(s->devname, sizeof(s->devname), "%s", ev->u.device_open.name);
	return 0;
}

static int rp_load_port_attr(struct rp_loading *ld, const struct rbt_event *ev)
{
	struct rp_side *s = ld->s;
	const struct rbt_ev_port_attr *p = &ev->u.port_attr;

	if (s->rec_lid || s->rec_active_mtu)
		return 0;
	s->rec_lid = p->lid;
	s->rec_active_mtu = p->active_mtu;
	if (p->gid0.len == 16)
		memcpy(s->rec_gid, p->gid0.data, 16);
	return 0;
}

static int rp_load_pd(struct rp_loading *ld, const struct rbt_event *ev)
{
	const struct rbt_ev_pd_alloc *p = &ev->u.pd_alloc;
	uint64_t *h = RP_NEW(ld, pd_h, npd, cappd, RBT_MODEL_PD, p, pd);

	if (h)
		*h = p->pd;
	return ld->err;
}

static int rp_load_mr(struct rp_loading *ld, const struct rbt_event *ev)
{
	const struct rbt_ev_mr_reg *p = &ev->u.mr_reg;
	struct rp_mr *m = RP_NEW(ld, mr, nmr, capmr, RBT_MODEL_MR, p, mr);

	/* a window's reading: the entry is the first reading's (tied), the
	 * step is the window's */
	if (!m && ld->again && ld->started && p->mr && !p->err && p->ret >= 0)
		return rp_timeline_add(ld, ev);
	if (!m)
		return ld->err;
	m->h = p->mr;
	m->pd = p->pd;
	/* sges name the virtual address; peers name the iova */
	m->addr = p->addr;
	m->iova = (p->api == 1 || p->api == 2) ? p->iova : p->addr;
	m->length = p->length;
	m->access = p->access;
	m->lkey = p->lkey;
	m->rkey = p->rkey;
	m->t_reg = rp_abs_ns(ld->s, ev->ts);
	m->t_dead = UINT64_MAX;
	/* after the start a step of the timeline too: registered when recorded
	 * (replay_build.c decides) */
	return ld->started ? rp_timeline_add(ld, ev) : 0;
}

/* The latest incarnation of MR entry i (1 + index) after its rereg's. */
static int rp_mr_latest(const struct rp_side *s, int i)
{
	for (int n = 0; i && s->mr[i - 1].succ && n < 1000000; n++)
		i = s->mr[i - 1].succ;
	return i;
}

/* The step just added (if it was) names entry i. */
static void rp_step_names(struct rp_side *s, int nstep_before, int i)
{
	if (s->nstep > nstep_before)
		s->step[nstep_before].obj = i;
}

/* ibv_rereg_mr: a successor entry with the MR's new place and keys (the same
 * ibv_mr on the replay, given to it by the step). */
static int rp_load_mr_rereg(struct rp_loading *ld, const struct rbt_event *ev)
{
	const struct rbt_ev_mr_rereg *p = &ev->u.mr_rereg;
	struct rp_side *s = ld->s;
	int i = p->ret || ld->again ? 0 : rp_mr_latest(s, rp_mr_index(s, p->mr));
	int n = s->nstep, rc;
	struct rp_mr *m, *o;
	uint64_t now = rp_abs_ns(s, ev->ts);

	if (!i)
		return 0;
	if (!RP_GROW(s->mr, s->nmr, ld->capmr))
		return -ENOMEM;
	o = &s->mr[i - 1];
	m = &s->mr[s->nmr++];
	*m = *o;
	m->mr = NULL;
	m->succ = 0;
	m->succ_of = i;
	m->rereg_flags = (uint32_t)p->flags;
	if (p->flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		m->addr = m->iova = p->addr;
		m->length = p->length;
	}
	if (p->flags & IBV_REREG_MR_CHANGE_PD)
		m->pd = p->pd;
	if (p->flags & IBV_REREG_MR_CHANGE_ACCESS)
		m->access = p->access;
	m->lkey = p->lkey;
	m->rkey = p->rkey;
	m->t_reg = now;
	m->t_dead = UINT64_MAX;
	o->succ = s->nmr;
	o->dead = 1;
	o->t_dead = now;
	rc = rp_timeline_add(ld, ev); /* a successor always gets its MR by it */
	rp_step_names(s, n, s->nmr);
	return rc;
}

static int rp_load_channel(struct rp_loading *ld, const struct rbt_event *ev)
{
	const struct rbt_ev_channel_create *p = &ev->u.channel_create;
	uint64_t *h = RP_NEW(ld, ch_h, nch, capch, RBT_MODEL_CHANNEL, p, channel);

	if (h)
		*h = p->channel;
	return ld->err;
}

static int rp_load_cq(struct rp_loading *ld, const struct rbt_event *ev)
{
	const struct rbt_ev_cq_create *p = &ev->u.cq_create;
	struct rp_cq *c = RP_NEW(ld, cq, ncq, capcq, RBT_MODEL_CQ, p, cq);

	if (!c)
		return ld->err;
	c->h = p->cq;
	c->channel = p->channel;
	c->rec = *p;
	return 0;
}

static int rp_load_xrcd(struct rp_loading *ld, const struct rbt_event *ev)
{
	const struct rbt_ev_xrcd_open *p = &ev->u.xrcd_open;
	struct rp_xrcd *x = RP_NEW(ld, xrcd, nxrcd, capxrcd, RBT_MODEL_XRCD, p, xrcd);

	if (!x)
		return ld->err;
	x->shared = (int)(int32_t)p->fd >= 0;
	x->h = p->xrcd;
	return 0;
}

static int rp_load_srq(struct rp_loading *ld, const struct rbt_event *ev)
{
	const struct rbt_ev_srq_create *p = &ev->u.srq_create;
	struct rp_srq *r = RP_NEW(ld, srq, nsrq, capsrq, RBT_MODEL_SRQ, p, srq);

	if (!r)
		return ld->err;
	r->h = p->srq;
	r->pd = p->pd;
	r->rec = *p;
	r->xrcdi = rp_xrcd_index(ld->s, p->xrcd);
	r->cqi = rp_cq_index(ld->s, p->cq);
	return 0;
}

static int rp_load_qp(struct rp_loading *ld, const struct rbt_event *ev)
{
	const struct rbt_ev_qp_create *p = &ev->u.qp_create;
	struct rp_qp *q = RP_NEW(ld, qp, nqp, capqp, RBT_MODEL_QP, p, qp);
	struct rp_side *s = ld->s;

	/* a streamed window's: tied to the first reading's entry, a step */
	if (!q && ld->again && !ld->err && p->qp && !p->err && p->ret >= 0)
		return ld->started ? rp_timeline_add(ld, ev) : 0;
	if (!q)
		return ld->err;
	q->h = p->qp;
	q->rec = *p;
	q->scq = rp_cq_index(s, p->send_cq);
	q->rcq = rp_cq_index(s, p->recv_cq);
	q->srqi = rp_srq_index(s, p->srq);
	q->xrcdi = rp_xrcd_index(s, p->xrcd);
	q->rec_final_state = IBV_QPS_RESET;
	q->port = 1;
	q->rel_side = -1;
	q->peer_dir = -1;
	q->mq = (struct rbt_model_qp *)rbt_model_by_handle(s->model, 0, RBT_MODEL_QP,
							   p->qp);
	if (q->mq && rp_res_idx(&q->mq->res) != s->nqp)
		q->mq = NULL; /* the model made no QP of this create */
	q->dir_idx = -1;
	/* after the start a step of the timeline too (replay_build.c decides) */
	return ld->started ? rp_timeline_add(ld, ev) : 0;
}

static int rp_load_qp_destroy(struct rp_loading *ld, const struct rbt_event *ev)
{
	if (!ld->started || ev->u.qp_destroy.ret != 0)
		return 0;
	return rp_timeline_add(ld, ev);
}

static int rp_load_ah(struct rp_loading *ld, const struct rbt_event *ev)
{
	const struct rbt_ev_ah_create *p = &ev->u.ah_create;
	struct rp_ah *a = RP_NEW(ld, ah, nah, capah, RBT_MODEL_AH, p, ah);

	if (!a)
		return ld->err;
	a->h = p->ah;
	a->pd = p->pd;
	a->rec = *p;
	if (p->ah_dgid.len == 16)
		memcpy(a->dgid, p->ah_dgid.data, 16);
	a->rec.ah_dgid.data = NULL;
	return 0;
}

static int rp_load_mr_dereg(struct rp_loading *ld, const struct rbt_event *ev)
{
	struct rp_side *s = ld->s;
	int i = ev->u.mr_dereg.ret ? 0
				   : rp_mr_latest(s, rp_mr_index(s, ev->u.mr_dereg.mr));
	int n = s->nstep, rc;

	if (!i)
		return 0;
	if (!ld->again) { /* a window's reading: known from the first */
		s->mr[i - 1].dead = 1;
		s->mr[i - 1].t_dead = rp_abs_ns(s, ev->ts);
	}
	if (!ld->started)
		return 0; /* before the start: it never mattered */
	rc = rp_timeline_add(ld, ev);
	rp_step_names(s, n, i);
	return rc;
}

static int rp_load_mw(struct rp_loading *ld, const struct rbt_event *ev)
{
	const struct rbt_ev_mw_alloc *p = &ev->u.mw_alloc;
	struct rp_mw *w = RP_NEW(ld, mw, nmw, capmw, RBT_MODEL_MW, p, mw);

	if (!w)
		return ld->err;
	w->h = p->mw;
	w->pd = p->pd;
	w->type = (uint32_t)p->mw_type;
	w->rec_rkey = (uint32_t)p->rkey;
	return 0;
}

/* The live MR that holds [addr, addr + len) (its iova space), preferring one
 * registered for binding windows; 1 + index, 0 none. */
static int rp_bind_mr(const struct rp_side *s, uint64_t addr, uint64_t len)
{
	int any = 0;

	for (int i = s->nmr - 1; i >= 0; i--) {
		const struct rp_mr *m = &s->mr[i];

		if (m->dead || addr < m->iova || addr + len > m->iova + m->length)
			continue;
		if (m->access & IBV_ACCESS_MW_BIND)
			return i + 1;
		if (!any)
			any = i + 1;
	}
	return any;
}

/* A post's BIND_MW work requests name their window by handle and bind an MR
 * the record does not name: both resolved now, while the handles mean what
 * they meant (the step was just added). */
static int rp_load_post_send(struct rp_loading *ld, const struct rbt_event *ev)
{
	const struct rbt_ev_post_send *p = &ev->u.post_send;
	struct rp_side *s = ld->s;
	struct rp_step *st;
	int n = s->nstep, rc = rp_timeline_add(ld, ev);
	uint32_t k;

	if (rc || s->nstep == n)
		return rc;
	for (k = 0; k < p->n_wrs && p->wrs[k].opcode != IBV_WR_BIND_MW; k++)
		;
	if (k == p->n_wrs)
		return 0;
	st = &s->step[n];
	st->binds = rp_alloc(s, p->n_wrs * sizeof(*st->binds));
	if (!st->binds)
		return -ENOMEM;
	for (k = 0; k < p->n_wrs; k++) {
		const struct rbt_send_wr *w = &p->wrs[k];

		if (w->opcode != IBV_WR_BIND_MW)
			continue;
		st->binds[k].mw = rp_mw_index(s, w->ah);
		st->binds[k].mr = w->compare_add
					  ? rp_bind_mr(s, w->remote_addr, w->compare_add)
					  : 0;
	}
	return 0;
}

/* One loader per event id; events without one (closes, destroys, stacks,
 * notes, events of newer formats) mean nothing to the replay. */
static int (*const rp_loaders[RBT_EV_MAX_ID + 1])(struct rp_loading *,
						  const struct rbt_event *) = {
	[RBT_EV_DEVICE_OPEN] = rp_load_device_open,
	[RBT_EV_PORT_ATTR] = rp_load_port_attr,
	[RBT_EV_PD_ALLOC] = rp_load_pd,
	[RBT_EV_MR_REG] = rp_load_mr,
	[RBT_EV_MR_DEREG] = rp_load_mr_dereg,
	[RBT_EV_MR_REREG] = rp_load_mr_rereg,
	[RBT_EV_CHANNEL_CREATE] = rp_load_channel,
	[RBT_EV_CQ_CREATE] = rp_load_cq,
	[RBT_EV_XRCD_OPEN] = rp_load_xrcd,
	[RBT_EV_SRQ_CREATE] = rp_load_srq,
	[RBT_EV_QP_CREATE] = rp_load_qp,
	[RBT_EV_QP_DESTROY] = rp_load_qp_destroy,
	[RBT_EV_AH_CREATE] = rp_load_ah,
	[RBT_EV_MW_ALLOC] = rp_load_mw,
	[RBT_EV_POST_SEND] = rp_load_post_send,
	[RBT_EV_QP_MODIFY] = rp_timeline_add,
	[RBT_EV_POST_RECV] = rp_timeline_add,
	[RBT_EV_POST_SRQ_RECV] = rp_timeline_add,
	[RBT_EV_POLL_CQ] = rp_timeline_add,
	[RBT_EV_REQ_NOTIFY] = rp_timeline_add,
	[RBT_EV_GET_CQ_EVENT] = rp_timeline_add,
	[RBT_EV_ASYNC_EVENT] = rp_timeline_add,
	[RBT_EV_QP_QUERY] = rp_timeline_add,
	[RBT_EV_CM_CALL] = rp_load_cm,
	[RBT_EV_CM_EVENT] = rp_load_cm_event,
};

/* A damaged trace is refused unless --allow-damaged; then its intact part
 * replays. rc is the reader's last result. */
static int rp_load_damage(struct rp_job *j, struct rp_side *s, struct rbt_reader *r,
			  int rc)
{
	const char *path = s->path;

	if (rc < 0) {
		fprintf(j->log, "rbtrace replay: %s: %s\n", path,
			rbt_reader_error(r)[0] ? rbt_reader_error(r) : rbt_strerror(rc));
		if (!j->o->allow_damaged)
			return -EBADMSG;
	}
	if (!s->stats.bad_chunks && !s->stats.truncated)
		return 0;
	if (!j->o->allow_damaged) {
		return rp_fail(j, -EBADMSG,
			       "%s: trace is damaged (%llu bad chunks%s; %s); refusing "
			       "to replay (--allow-damaged replays the intact part)",
			       path, (unsigned long long)s->stats.bad_chunks,
			       s->stats.truncated ? ", truncated" : "",
			       rbt_reader_error(r));
	}
	fprintf(j->log,
		"rbtrace replay: %s: damaged (%llu bad chunks%s): replaying the intact "
		"part only\n",
		path, (unsigned long long)s->stats.bad_chunks,
		s->stats.truncated ? ", truncated" : "");
	return 0;
}

/* The model first (the join's callbacks run in it, on the replay's entries
 * made by earlier events), then the replay's loader. */
static int rp_load_event(struct rp_loading *ld, const struct rbt_event *ev)
{
	int rc;

	ld->cur_poll = ev->type == RBT_EV_POLL_CQ ? ev : NULL;
	ld->cur_cq = ld->cur_poll ? rp_cq_index(ld->s, ev->u.poll_cq.cq) : 0;
	ld->wc_next = 0;
	rc = rbt_model_feed(ld->s->model, 0, ev);
	ld->cur_poll = NULL;
	ld->cur_cq = 0;
	if (rc == -ENOMEM || ld->err)
		return -ENOMEM;
	if (ev->type > RBT_EV_MAX_ID || !rp_loaders[ev->type])
		return 0;
	if (ld->again && (ev->type == RBT_EV_CM_CALL || ev->type == RBT_EV_CM_EVENT))
		return 0; /* counted by the first reading */
	return rp_loaders[ev->type](ld, ev);
}

/* An event of a streamed window's batch, in memory the side keeps with the
 * window (rp_batch): a step takes it as it is (rp_timeline_add) instead of
 * copying it again. */
static int rp_load_kept(struct rp_loading *ld, struct rbt_event *ev)
{
	int rc;

	ld->kept = ev;
	rc = rp_load_event(ld, ev);
	ld->kept = NULL;
	return rc;
}

static int rp_load_model(struct rp_loading *ld, const struct rbt_header *hdr)
{
	const struct rbt_model_opts mo = { .ops = &rp_join_ops, .arg = ld };
	struct rp_side *s = ld->s;
	int rc = rbt_model_create(&mo, &s->model);

	if (rc < 0)
		return -ENOMEM;
	rc = rbt_model_add_trace(s->model, hdr, s->path);
	s->mtrace = rc < 0 ? NULL : rbt_model_trace(s->model, rc);
	return s->mtrace ? 0 : -ENOMEM;
}

/* ---- time order across threads -------------------------------------------------
 * The recorder writes each thread's events in chunks, each chunk when it fills
 * or at most its flush interval (100 ms by default) after its first event: a
 * thread that created every QP and then went quiet has its chunk written after
 * the chunks of the threads that already post on those QPs. The model must meet
 * the create first, so events go through a window ordered by time (per
 * stream never backwards, file order between equal times): an event leaves it
 * once the file has reached RP_REORDER_S seconds past it. */
#define RP_REORDER_S 2
/* and at most this many events: a trace's memory is not the rate times that
 * time (a chunk holds far fewer events; 4 M events a second would hold 8 M) */
#define RP_REORDER_MAX (1u << 17)

/* Memory for the events the time-order window holds: chunks handed out in
 * order, each one reused or freed once every event in it has left. Events
 * leave in about the order they came, so a few chunks serve a window of
 * thousands; one malloc and free an event, from two threads when streamed,
 * had cost the loading a quarter of its time (perf, the 8-thread bench
 * trace streamed: malloc, free and the arena's lock). */
#define RP_SLAB_CHUNK (256 * 1024)
#define RP_SLAB_SPARE 4

struct rp_slab_chunk {
	struct rp_slab_chunk *next; /* spare chunks */
	size_t used, size, live;
	max_align_t data[];
};

struct rp_slab {
	struct rp_slab_chunk *cur, *spare;
	int nspare;
};

static void rp_slab_drop(struct rp_slab *sl, struct rp_slab_chunk *c)
{
	if (c->size == RP_SLAB_CHUNK && sl->nspare < RP_SLAB_SPARE) {
		c->next = sl->spare;
		sl->spare = c;
		sl->nspare++;
	} else {
		free(c);
	}
}

/* n bytes, aligned for any type, and the chunk they lie in; NULL without
 * memory. */
static void *rp_slab_get(struct rp_slab *sl, size_t n, struct rp_slab_chunk **in)
{
	struct rp_slab_chunk *c = sl->cur;
	void *p;

	n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
	if (c && !c->live)
		c->used = 0; /* everything in it has left */
	if (!c || c->used + n > c->size) {
		if (c && !c->live)
			rp_slab_drop(sl, c);
		/* else the last of its events frees it (rp_slab_put) */
		if (n <= RP_SLAB_CHUNK && sl->spare) {
			c = sl->spare;
			sl->spare = c->next;
			sl->nspare--;
		} else {
			size_t size = n > RP_SLAB_CHUNK ? n : RP_SLAB_CHUNK;

			if (!(c = malloc(sizeof(*c) + size))) {
				sl->cur = NULL;
				return NULL;
			}
			c->size = size;
		}
		c->used = c->live = 0;
		sl->cur = c;
	}
	p = (char *)c->data + c->used;
	c->used += n;
	c->live++;
	*in = c;
	return p;
}

/* One event of chunk c has left. */
static void rp_slab_put(struct rp_slab *sl, struct rp_slab_chunk *c)
{
	if (!--c->live && c != sl->cur)
		rp_slab_drop(sl, c);
}

static void rp_slab_free(struct rp_slab *sl)
{
	struct rp_slab_chunk *c;

	free(sl->cur);
	while ((c = sl->spare)) {
		sl->spare = c->next;
		free(c);
	}
	*sl = (struct rp_slab){ 0 };
}

struct rp_held {
	uint64_t key, seq;
	struct rbt_event *ev;
	struct rp_slab_chunk *in; /* its memory */
};

/* One stream's events held, in its own order (a ring). */
struct rp_fifo { /* cap: a power of two */
	struct rp_held *v;
	size_t head, n, cap;
	uint32_t stream;
	uint64_t last; /* the key of its latest event */
	int at;	       /* its place in the heap of streams, -1 when empty */
};

/* Each stream's events are in time order in the file already (a chunk is one
 * thread's, written in its order): held per stream, they leave by a merge of
 * the streams' first events - a heap of streams, not of events. */
struct rp_reorder {
	struct rp_fifo *fifo;
	int nfifo, capfifo, last_fifo;
	int *heap; /* the non-empty fifos, a min-heap on their first event */
	int nheap;
	size_t n; /* events held */
	uint64_t seq, newest, window;
	int by_return;	     /* a streamed window's reading: waits by their return */
	struct rp_slab slab; /* the events' copies */
};

/* The time an event is ordered by: its entry, or with by_return the return of
 * a wait that got something (a poll with completions, a completion event).
 * Windows are cut by it (replay_stream.c): such a wait began before what it
 * waited for - a poll spinning before the peer's send - and belongs to the
 * window of that send or a later one, never an earlier one. Each thread's
 * next event begins after the return, so its own order is unchanged. */
static uint64_t rp_order_key(const struct rp_reorder *o, const struct rbt_event *ev)
{
	if (o->by_return) {
		if (ev->type == RBT_EV_POLL_CQ && ev->u.poll_cq.ret > 0 &&
		    ev->u.poll_cq.ts_exit > ev->ts)
			return ev->u.poll_cq.ts_exit;
		if (ev->type == RBT_EV_GET_CQ_EVENT && ev->u.get_cq_event.ret == 0 &&
		    ev->u.get_cq_event.ts_exit > ev->ts)
			return ev->u.get_cq_event.ts_exit;
	}
	return ev->ts;
}

static const struct rp_held *rp_fifo_first(const struct rp_reorder *o, int f)
{
	const struct rp_fifo *q = &o->fifo[f];

	return &q->v[q->head];
}

/* Whether fifo a's first event leaves before fifo b's: (key, file order). */
static int rp_fifo_less(const struct rp_reorder *o, int a, int b)
{
	const struct rp_held *x = rp_fifo_first(o, a), *y = rp_fifo_first(o, b);

	return x->key < y->key || (x->key == y->key && x->seq < y->seq);
}

static void rp_heap_set(struct rp_reorder *o, int i, int f)
{
	o->heap[i] = f;
	o->fifo[f].at = i;
}

static void rp_heap_up(struct rp_reorder *o, int i)
{
	int f = o->heap[i];

	for (; i && rp_fifo_less(o, f, o->heap[(i - 1) / 2]); i = (i - 1) / 2)
		rp_heap_set(o, i, o->heap[(i - 1) / 2]);
	rp_heap_set(o, i, f);
}

static void rp_heap_down(struct rp_reorder *o, int i)
{
	int f = o->heap[i];

	for (;;) {
		int c = 2 * i + 1;

		if (c >= o->nheap)
			break;
		if (c + 1 < o->nheap && rp_fifo_less(o, o->heap[c + 1], o->heap[c]))
			c++;
		if (!rp_fifo_less(o, o->heap[c], f))
			break;
		rp_heap_set(o, i, o->heap[c]);
		i = c;
	}
	rp_heap_set(o, i, f);
}

/* The fifo of a stream, made on its first event; -1 without memory. */
static int rp_fifo_of(struct rp_reorder *o, uint32_t stream)
{
	int f = o->last_fifo;

	if (f < o->nfifo && o->fifo[f].stream == stream)
		return f;
	for (f = 0; f < o->nfifo && o->fifo[f].stream != stream; f++)
		;
	if (f == o->nfifo) {
		int cap = o->capfifo;

		if (!RP_GROW(o->fifo, o->nfifo, o->capfifo))
			return -1;
		if (cap != o->capfifo) {
			int *h = realloc(o->heap, (size_t)o->capfifo * sizeof(*h));

			if (!h)
				return -1;
			o->heap = h;
		}
		o->fifo[f] = (struct rp_fifo){ .stream = stream, .at = -1 };
		o->nfifo++;
	}
	o->last_fifo = f;
	return f;
}

/* A copy of ev held until it may leave; 0 or -ENOMEM. */
static int rp_reorder_push(struct rp_reorder *o, const struct rbt_event *ev)
{
	struct rp_held x = { .key = rp_order_key(o, ev), .seq = o->seq++ };
	int f = rp_fifo_of(o, ev->stream);
	struct rp_fifo *q;

	if (f < 0)
		return -ENOMEM;
	q = &o->fifo[f];
	/* never backwards within a stream (a stack record carries no time) */
	if (x.key < q->last)
		x.key = q->last;
	q->last = x.key;
	if (x.key > o->newest)
		o->newest = x.key;
	if (q->n == q->cap) {
		size_t cap = q->cap ? 2 * q->cap : 64;
		struct rp_held *v = malloc(cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		for (size_t k = 0; k < q->n; k++)
			v[k] = q->v[(q->head + k) & (q->cap - 1)];
		free(q->v);
		q->v = v;
		q->cap = cap;
		q->head = 0;
	}
	x.ev = rp_slab_get(&o->slab, rbt_model_event_size(ev), &x.in);
	if (!x.ev)
		return -ENOMEM;
	rbt_model_event_copy_to(x.ev, ev);
	q->v[(q->head + q->n++) & (q->cap - 1)] = x;
	o->n++;
	if (q->at < 0) {
		o->heap[o->nheap] = f;
		rp_heap_up(o, o->nheap++);
	}
	return 0;
}

/* The earliest event held (NULL: none). */
static const struct rp_held *rp_reorder_first(const struct rp_reorder *o)
{
	return o->nheap ? rp_fifo_first(o, o->heap[0]) : NULL;
}

/* The earliest event held, if it may leave (all: at the end of the file);
 * valid until rp_slab_put(&o->slab, *in) says it is no longer needed. */
static struct rbt_event *rp_reorder_pop(struct rp_reorder *o, int all,
					struct rp_slab_chunk **in)
{
	const struct rp_held *h = rp_reorder_first(o);
	struct rbt_event *ev;
	struct rp_fifo *q;

	if (!h || (!all && o->n <= RP_REORDER_MAX && h->key + o->window > o->newest))
		return NULL;
	ev = h->ev;
	*in = h->in;
	q = &o->fifo[o->heap[0]];
	q->head = (q->head + 1) & (q->cap - 1);
	q->n--;
	o->n--;
	if (q->n) {
		rp_heap_down(o, 0);
		return ev;
	}
	q->at = -1;
	if (--o->nheap) {
		rp_heap_set(o, 0, o->heap[o->nheap]);
		rp_heap_down(o, 0);
	}
	return ev;
}

/* Feeds what may leave the window (all of it at the end); 0 or -ENOMEM. A
 * step copies its event into the side's arena (rp_timeline_add). */
static int rp_reorder_feed(struct rp_loading *ld, struct rp_reorder *o, int all)
{
	struct rp_slab_chunk *in;
	struct rbt_event *ev;
	int rc = 0;

	while ((ev = rp_reorder_pop(o, all, &in))) {
		if (!rc)
			rc = rp_load_event(ld, ev);
		rp_slab_put(&o->slab, in);
	}
	return rc;
}

static void rp_reorder_free(struct rp_reorder *o)
{
	struct rp_slab_chunk *in;

	while (rp_reorder_pop(o, 1, &in))
		rp_slab_put(&o->slab, in);
	rp_slab_free(&o->slab);
	for (int f = 0; f < o->nfifo; f++)
		free(o->fifo[f].v);
	free(o->fifo);
	free(o->heap);
}

int rp_side_load(struct rp_job *j, struct rp_side *s, const char *path)
{
	struct rp_reorder ro = { 0 };
	struct rp_loading ld = { .j = j, .s = s };
	struct rbt_reader *r = NULL;
	const struct rbt_event *ev;
	int rc;

	s->path = path;
	rc = rbt_reader_open(path, &r);
	if (rc < 0) {
		fprintf(j->log, "rbtrace replay: %s: cannot open trace: %s\n", path,
			rbt_strerror(rc));
		return rc;
	}
	s->hdr = *rbt_reader_header(r);
	snprintf(s->host, sizeof(s->host), "%s", s->hdr.host ? s->hdr.host : "");
	s->hdr.host = s->host;
	s->hdr.cmdline = NULL;
	s->hdr.tool = NULL;

	/* The model keeps &ld as its callbacks' argument: after loading it is
	 * only asked (lookups), never fed, so no callback runs again. */
	rc = rp_load_model(&ld, rbt_reader_header(r));
	if (!rc && rp_stream_wanted(j) && !(s->sm = calloc(1, sizeof(*s->sm))))
		rc = -ENOMEM;
	ro.window = (s->hdr.clock_hz ? s->hdr.clock_hz : 1000000000ull) * RP_REORDER_S;
	while (rc == 0 && (rc = rbt_reader_next(r, &ev)) == 1) {
		rc = rp_reorder_push(&ro, ev);
		if (!rc)
			rc = rp_reorder_feed(&ld, &ro, 0);
	}
	if (rc == 0)
		rc = rp_reorder_feed(&ld, &ro, 1);
	if (s->sm)
		s->sm->nstreams = (uint32_t)ro.nfifo;
	rp_reorder_free(&ro);
	/* rc: 0 at the end, the reader's error, or -ENOMEM */
	if (rc != -ENOMEM && (rbt_model_finish(s->model) < 0 || ld.err))
		rc = -ENOMEM;
	if (rc == -ENOMEM) {
		rbt_reader_close(r);
		return rp_fail(j, -ENOMEM, "%s: out of memory while loading", path);
	}
	s->stats = *rbt_reader_stats(r);
	rc = rp_load_damage(j, s, r, rc);
	rbt_reader_close(r);
	if (rc < 0)
		return rc;
	rp_timeline_finish(s);
	if (rp_lanes_build(j, s) < 0)
		return rp_fail(j, -ENOMEM, "%s: out of memory while loading", path);
	return 0;
}

/* ---- a streamed side's second reading (replay_stream.c) ------------------------
 * A reader, a model and a time-order window of their own, from the trace's first
 * event: resources are tied to the first reading's entries (the k-th create to
 * the k-th), steps from the start on become the window's, recorded completions
 * go onto the QPs' lists. The side's model is the second reading's while it
 * reads (lookups by handle then mean what they meant at that point).
 *
 * The reading itself - decoding, copying, the time-order window - is done by a
 * thread of the side's (rp_ahead), one window ahead of the run: while window N
 * runs it makes window N+1's events, in the order they leave the time-order
 * window, and hands them over when the run is done with N. It touches nothing
 * but its reader, its window and its two batches; the model, the steps and
 * the side are the run's thread's. Without a thread (it could not be made, or
 * RBTRACE_REPLAY_READ_AHEAD=0) the run's thread makes each window itself,
 * when it needs it: the same events in the same order. */

/* One window's events, in the order they leave the time-order window. rc: 1
 * when the trace has more, 0 at its end, or a negative errno. */
struct rp_batch {
	struct rbt_event **ev;
	size_t n, cap;
	int rc;
	uint64_t late; /* late events counted up to this window */
	/* the events' copies: blocks the side keeps with the window once
	 * taken (rp_again_load) */
	struct rp_arena mem;
};

struct rp_ahead {
	struct rbt_reader *r;
	struct rp_reorder ro;
	struct rbt_model_trace clock; /* the header's clock only: its own copy */
	int host_cut, tsc;
	uint64_t *lim; /* each window's end (rp_cut_time) */
	size_t nlim;
	uint64_t lim_read, late;
	int eof;
	struct rp_batch b[2]; /* window w in b[w % 2] */
	size_t made, taken;   /* windows made; handed to the run and done */
	int stop, threaded, finished;
	/* a retired window's memory, freed by the thread while the next runs */
	void **trash;
	size_t ntrash, captrash;
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
};

/* An event's time as windows are cut (replay_stream.c): the host's clock or
 * abs ns. */
static uint64_t rp_cut_time(const struct rp_ahead *a, uint64_t ticks)
{
	return a->host_cut && a->tsc ? ticks : rbt_model_mono_ns(&a->clock, ticks);
}

/* A copy of ev in the batch's memory; 0 or -ENOMEM. */
static int rp_batch_add(struct rp_batch *b, const struct rbt_event *ev)
{
	void *c;

	if (!RP_GROW(b->ev, b->n, b->cap) ||
	    !(c = rp_arena_get(&b->mem, rbt_model_event_size(ev), 0)))
		return -ENOMEM;
	b->ev[b->n++] = rbt_model_event_copy_to(c, ev);
	return 0;
}

/* A batch's memory given back (a window made and not taken). */
static void rp_batch_clear(struct rp_batch *b)
{
	for (size_t k = 0; k < b->mem.nallocs; k++)
		free(b->mem.allocs[k]);
	b->mem.nallocs = b->mem.bump_left = 0;
	b->n = 0;
}

/* Window w's events into b: what may leave the time-order window and lies
 * before the window's end, reading on as long as what is held does not reach
 * it. */
static void rp_ahead_make(struct rp_ahead *a, size_t w, struct rp_batch *b)
{
	struct rp_reorder *o = &a->ro;
	uint64_t lim = w < a->nlim ? a->lim[w] : UINT64_MAX;
	const struct rbt_event *rev;
	struct rp_slab_chunk *in;
	struct rbt_event *ev;
	int rc = 0;

	rp_batch_clear(b);
	for (;;) {
		while (o->n && rp_cut_time(a, rp_reorder_first(o)->key) < lim &&
		       (ev = rp_reorder_pop(o, a->eof, &in))) {
			if (!rc)
				rc = rp_batch_add(b, ev);
			rp_slab_put(&o->slab, in);
		}
		if (rc < 0)
			break;
		if (o->n && rp_cut_time(a, rp_reorder_first(o)->key) >= lim) {
			rc = 1;
			break;
		}
		if (a->eof) {
			rc = o->n ? 1 : 0;
			break;
		}
		rc = rbt_reader_next(a->r, &rev);
		if (rc == 1 && rp_cut_time(a, rp_order_key(o, rev)) < a->lim_read)
			a->late++;
		if (rc == 1)
			rc = rp_reorder_push(o, rev);
		else
			a->eof = 1; /* the first reading judged its damage */
		if (rc < 0 && !a->eof)
			break;
		rc = 0;
	}
	a->lim_read = lim;
	b->rc = rc;
	b->late = a->late;
}

static void rp_trash_free(void **v, size_t n)
{
	for (size_t k = 0; k < n; k++)
		free(v[k]);
	free(v);
}

static void *rp_ahead_thread(void *arg)
{
	struct rp_ahead *a = arg;

	pthread_mutex_lock(&a->mu);
	for (;;) {
		size_t w = a->made, ntrash;
		void **trash;
		int make;

		while (!a->stop && w >= a->taken + 2 && !a->ntrash)
			pthread_cond_wait(&a->cv, &a->mu);
		if (a->stop)
			break;
		make = w < a->taken + 2;
		trash = a->trash;
		ntrash = a->ntrash;
		a->trash = NULL;
		a->ntrash = a->captrash = 0;
		pthread_mutex_unlock(&a->mu);
		rp_trash_free(trash, ntrash);
		if (!make) {
			pthread_mutex_lock(&a->mu);
			continue;
		}
		rp_ahead_make(a, w, &a->b[w % 2]);
		pthread_mutex_lock(&a->mu);
		a->made = w + 1;
		pthread_cond_broadcast(&a->cv);
		if (a->b[w % 2].rc <= 0 && w + 1 >= a->nlim)
			break; /* nothing after the last window */
		if (a->b[w % 2].rc < 0)
			break;
	}
	a->finished = 1;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

/* The run's next window, made by the thread or now. */
static struct rp_batch *rp_ahead_take(struct rp_ahead *a)
{
	size_t w = a->taken;
	int past = 1;

	if (!a->threaded) {
		rp_ahead_make(a, w, &a->b[w % 2]);
		return &a->b[w % 2];
	}
	pthread_mutex_lock(&a->mu);
	while (a->made <= w && !a->finished)
		pthread_cond_wait(&a->cv, &a->mu);
	past = a->made <= w;
	pthread_mutex_unlock(&a->mu);
	/* past what the thread made before it ended: the reader is free */
	if (past)
		rp_ahead_make(a, w, &a->b[w % 2]);
	return &a->b[w % 2];
}

/* The run is done with its window: the thread may make the one after next. */
static void rp_ahead_done(struct rp_ahead *a)
{
	if (!a->threaded) {
		a->taken++;
		return;
	}
	pthread_mutex_lock(&a->mu);
	a->taken++;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

/* The arena of side s from mark on, given back: by the thread while the next
 * window runs (free costs the run's pause as much as malloc), else now. */
void rp_again_discard(struct rp_side *s, size_t mark, size_t end)
{
	struct rp_ahead *a = s->sm->ahead;
	size_t k = mark;

	if (end > s->ar.nallocs)
		end = s->ar.nallocs;
	if (a && a->threaded) {
		pthread_mutex_lock(&a->mu);
		for (; !a->finished && k < end; k++)
			if (RP_GROW(a->trash, a->ntrash, a->captrash))
				a->trash[a->ntrash++] = s->ar.allocs[k];
			else
				free(s->ar.allocs[k]);
		pthread_cond_broadcast(&a->cv);
		pthread_mutex_unlock(&a->mu);
	}
	/* the thread has [mark, k): what is left of the range is freed now */
	for (size_t i = mark; i < k; i++)
		s->ar.allocs[i] = NULL;
	rp_arena_release(s, mark, end);
}

static void rp_ahead_free(struct rp_ahead *a)
{
	if (!a)
		return;
	if (a->threaded) {
		pthread_mutex_lock(&a->mu);
		a->stop = 1;
		pthread_cond_broadcast(&a->cv);
		pthread_mutex_unlock(&a->mu);
		pthread_join(a->thr, NULL);
		pthread_mutex_destroy(&a->mu);
		pthread_cond_destroy(&a->cv);
	}
	rp_trash_free(a->trash, a->ntrash);
	for (int k = 0; k < 2; k++) {
		/* a window made and not taken: its events are still the batch's */
		rp_batch_clear(&a->b[k]);
		free(a->b[k].ev);
		rp_arena_free(&a->b[k].mem);
	}
	rp_reorder_free(&a->ro);
	if (a->r)
		rbt_reader_close(a->r);
	free(a->lim);
	free(a);
}

/* 1 unless RBTRACE_REPLAY_READ_AHEAD=0 (for tests and measurements: the
 * run's thread reads each window itself). */
static int rp_ahead_wanted(void)
{
	const char *e = getenv("RBTRACE_REPLAY_READ_AHEAD");

	return !e || strcmp(e, "0") != 0;
}

int rp_again_open(struct rp_job *j, struct rp_side *s, const uint64_t *lim, size_t nlim)
{
	struct rp_stream *sm = s->sm;
	struct rp_loading *ld = calloc(1, sizeof(*ld));
	struct rp_ahead *a = calloc(1, sizeof(*a));
	struct rbt_model *keep = s->model;
	const struct rbt_model_trace *keep_t = s->mtrace;
	sigset_t all, old;
	int rc;

	sm->ld = ld;
	sm->ahead = a;
	if (!ld || !a || !(a->lim = malloc((nlim ? nlim : 1) * sizeof(*a->lim))))
		return rp_fail(j, -ENOMEM, "%s: out of memory while streaming", s->path);
	*ld = (struct rp_loading){ .j = j, .s = s, .again = 1 };
	rc = rbt_reader_open(s->path, &a->r);
	if (rc < 0)
		return rp_fail(j, rc, "%s: cannot open trace again: %s", s->path,
			       rbt_strerror(rc));
	rc = rp_load_model(ld, rbt_reader_header(a->r));
	sm->model = s->model;
	sm->mtrace = s->mtrace;
	s->model = keep;
	s->mtrace = keep_t;
	if (rc)
		return rp_fail(j, rc, "%s: out of memory while streaming", s->path);
	a->ro.by_return = 1;
	/* one thread's events are in time order in the file already (a wait
	 * ordered by its return ends before the thread's next event begins) */
	a->ro.window = sm->nstreams > 1
			       ? (s->hdr.clock_hz ? s->hdr.clock_hz : 1000000000ull) *
					 RP_REORDER_S
			       : 0;
	a->clock.hdr = sm->mtrace->hdr;
	a->host_cut = sm->host_cut;
	a->tsc = s->hdr.clock_source == RBT_CLOCK_TSC;
	memcpy(a->lim, lim, nlim * sizeof(*lim));
	a->nlim = nlim;
	if (!rp_ahead_wanted() || pthread_mutex_init(&a->mu, NULL))
		return 0;
	if (pthread_cond_init(&a->cv, NULL)) {
		pthread_mutex_destroy(&a->mu);
		return 0;
	}
	/* signals are the run's (SIGINT ends it): the reader's thread takes
	 * none, its reads are never interrupted */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	a->threaded = !pthread_create(&a->thr, NULL, rp_ahead_thread, a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!a->threaded) {
		pthread_mutex_destroy(&a->mu);
		pthread_cond_destroy(&a->cv);
	}
	return 0;
}

int rp_again_load(struct rp_job *j, struct rp_side *s)
{
	struct rp_stream *sm = s->sm;
	struct rbt_model *keep = s->model;
	const struct rbt_model_trace *keep_t = s->mtrace;
	struct rp_batch *b = rp_ahead_take(sm->ahead);
	int rc = b->rc, fed = 0;

	s->model = sm->model;
	s->mtrace = sm->mtrace;
	/* the batch's memory is the window's from now on: its steps take
	 * their events where they are */
	if (rp_arena_room(&s->ar, b->mem.nallocs) < 0) {
		fed = -ENOMEM;
	} else {
		for (size_t k = 0; k < b->mem.nallocs; k++)
			rp_arena_keep(&s->ar, b->mem.allocs[k]);
		b->mem.nallocs = b->mem.bump_left = 0;
	}
	for (size_t i = 0; i < b->n && !fed; i++)
		fed = rp_load_kept(sm->ld, b->ev[i]);
	b->n = 0;
	sm->late_events = b->late;
	rp_ahead_done(sm->ahead);
	if (fed < 0)
		rc = fed;
	/* the end of the trace: once, however many windows the others take */
	if (rc == 0 && !sm->model_done && rbt_model_finish(s->model) < 0)
		rc = -ENOMEM;
	if (rc == 0)
		sm->model_done = 1;
	if (rc >= 0 && sm->ld->err)
		rc = sm->ld->err;
	s->model = keep;
	s->mtrace = keep_t;
	if (rc < 0)
		return rp_fail(j, rc, "%s: out of memory while streaming", s->path);
	return rc;
}

void rp_again_close(struct rp_side *s)
{
	struct rp_stream *sm = s->sm;

	rp_ahead_free(sm->ahead);
	rbt_model_destroy(sm->model);
	free(sm->ld);
	sm->ahead = NULL;
	sm->model = NULL;
	sm->ld = NULL;
}
