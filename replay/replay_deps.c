/* replay_deps.c - causality through memory: a post that, in the recording,
 * followed the landing of a peer's RDMA WRITE into an MR of its own process
 * (which the program found by polling that memory, as HERD's servers do) is
 * made to wait until the replayed WRITE has landed.
 *
 * The recorder cannot see memory being polled, so the dependency is inferred
 * after every side is loaded and translated (rp_deps_setup):
 *  - a WRITE W (RDMA_WRITE or RDMA_WRITE_WITH_IMM of at least 8 bytes on an
 *    RC/UC QP whose recorded post succeeded) lands in side B when its
 *    (remote_addr, rkey, length) fits one of B's recorded MRs and its QP's
 *    recorded destination is a QP of B; it landed no earlier than its post
 *    and no later than the poll that returned its completion (or that of the
 *    next signaled WR of its QP: a send queue completes in order);
 *  - a post P of B's recorded thread T depends on W when W's completion was
 *    polled before P was posted, no earlier post of T already depends on it,
 *    and T polled no receive completion between them (a message would then
 *    explain P, and the ordinary poll order keeps that);
 *  - W landing in side c's MR is waited for by side b too when c posts
 *    nothing (it only registers memory that other processes poll: HERD's
 *    master), b and c share a host, W is not b's and b writes nothing into c;
 *  - same host: one CLOCK_MONOTONIC, compared directly. Traces of different
 *    hosts have no common clock the replay can trust to a bound smaller than
 *    such gaps: those candidates are counted as ambiguous and not inferred.
 * Enforcement holds on real hardware: every replayed WRITE whose first SGE
 * has 8 bytes or more (streamed: that a thread may still wait for, struct
 * rp_waitable) carries a tag in the first 8 bytes of its payload (the
 * writer's key and the WRITE's ordinal on its QP; the rest of the recorded
 * payload is unchanged). At the start, not the end: a program that reuses a
 * slot (HERD's request window) writes it again from the same address with
 * another length (a GET, then a PUT), and that later WRITE must put its tag
 * where the earlier one's was, or a waiter that comes late finds the earlier
 * tag overwritten by payload and never its own. Before P the waiting thread
 * reads the destination bytes in its own
 * replayed MR until a tag of that writer with at least that ordinal is there
 * (a QP's WRITEs land in order), bounded like a poll: a timeout is counted
 * as a broken dependency and a divergence, never a hang.
 * RBTRACE_REPLAY_NO_DEPS=1 infers but does not wait (for tests: the replay
 * then diverges where the program depended on memory).
 *
 * Streamed (replay_stream.c), the inference runs for each window, and what
 * it needs from the windows before is carried (struct rp_deps_carry): each
 * QP's WRITE ordinal (the tags go on counting) and its send WRs not yet
 * completed (a WRITE's completion may be polled windows later), and for each
 * recorded thread of a waiting side the WRITEs still pending at its window's
 * end - only the latest per destination and writer, which is all a wait
 * needs (a QP's WRITEs land in order), at most RP_DEPS_CARRY of them. Whether
 * a side only registers memory and which rkeys a side's WRITEs name come from
 * the first reading (rp_deps_note).
 *
 * Runs before the start and off the hot path, except rp_deps_wait, which
 * does no allocation and no syscall but sched_yield.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "replay/replay_int.h"

/* WRITEs and posts of different traces are compared on the host's clock. */
static uint64_t rp_deps_clock(const struct rp_side *s, uint64_t ticks)
{
	return rp_host_clock(s, ticks);
}

/* A step's dependency state, made when it first needs one. */
static struct rp_step_deps *rp_dx(struct rp_side *s, struct rp_step *st)
{
	if (!st->dx)
		st->dx = rp_alloc(s, sizeof(*st->dx));
	return st->dx;
}

static uint32_t rp_deps_key(const struct rp_side *s, uint32_t qpn)
{
	uint32_t k = s->hdr.pid * 2654435761u ^ qpn * 40503u ^ 0x5eedu;

	return k ? k : 1;
}

static int rp_is_write(uint64_t opcode)
{
	return opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
}

/* Per QP of a side: its send WRs in post order, to date their completions. */
struct rp_sq {
	int64_t *w; /* the WRITE's gid, -1: another WR; signaled flag in sig */
	uint8_t *sig;
	int n, cap, head;
};

/* The WRITEs still pending for one recorded thread of a waiting side at the
 * end of a window (any: for a thread that had no step yet). */
struct rp_pending {
	uint32_t stream;
	int any, touched;
	struct rp_write *v;
	int n, cap;
	/* v by destination and writer (at, key): 1 + index, 0 empty; hcap a
	 * power of two over twice n, or 0 when it must be made again */
	int *hx;
	uint32_t hcap;
};

#define RP_DEPS_CARRY 65536 /* pending WRITEs a thread carries, at most */

struct rp_deps_carry {
	struct rp_sq *sq; /* per QP */
	uint32_t *ord;	  /* per QP: its WRITEs so far */
	int nqp;
	uint64_t gid; /* the side's WRITEs so far */
	struct rp_pending *slot;
	int nslot, capslot;
	uint64_t dropped; /* pending WRITEs over RP_DEPS_CARRY, not waited for */
};

void rp_deps_note(struct rp_stream *sm, const struct rbt_event *ev)
{
	sm->posts_send = 1;
	for (uint32_t k = 0; k < ev->u.post_send.n_wrs; k++) {
		const struct rbt_send_wr *r = &ev->u.post_send.wrs[k];
		uint32_t key = (uint32_t)r->rkey;
		int n;

		if (r->opcode != IBV_WR_RDMA_WRITE &&
		    r->opcode != IBV_WR_RDMA_WRITE_WITH_IMM)
			continue;
		for (n = 0; n < sm->nwrkey && sm->wrkey[n] != key; n++)
			;
		if (n < sm->nwrkey)
			continue;
		if (sm->nwrkey == RP_STREAM_WRKEYS)
			sm->wrkey_all = 1;
		else
			sm->wrkey[sm->nwrkey++] = key;
	}
}

void rp_deps_carry_free(struct rp_stream *sm)
{
	struct rp_deps_carry *dc = sm->dc;

	if (!dc)
		return;
	for (int q = 0; dc->sq && q <= dc->nqp; q++) {
		free(dc->sq[q].w);
		free(dc->sq[q].sig);
	}
	for (int k = 0; k < dc->nslot; k++) {
		free(dc->slot[k].v);
		free(dc->slot[k].hx);
	}
	free(dc->sq);
	free(dc->ord);
	free(dc->slot);
	free(dc);
	sm->dc = NULL;
}

uint64_t rp_deps_dropped(const struct rp_stream *sm)
{
	return sm->dc ? sm->dc->dropped : 0;
}

/* A streamed side's carry, made with its first window; NULL: out of memory. */
static struct rp_deps_carry *rp_carry(struct rp_side *s)
{
	struct rp_stream *sm = s->sm;

	if (sm->dc)
		return sm->dc;
	sm->dc = calloc(1, sizeof(*sm->dc));
	if (!sm->dc)
		return NULL;
	sm->dc->nqp = s->nqp;
	sm->dc->sq = calloc((size_t)s->nqp + 1, sizeof(*sm->dc->sq));
	sm->dc->ord = calloc((size_t)s->nqp + 1, sizeof(*sm->dc->ord));
	if (!sm->dc->sq || !sm->dc->ord)
		rp_deps_carry_free(sm);
	return sm->dc;
}

static int rp_sq_push(struct rp_sq *q, int64_t w, int sig)
{
	if (q->n == q->cap) {
		int c = q->cap ? 2 * q->cap : 64;
		int64_t *nw = realloc(q->w, (size_t)c * sizeof(*nw));
		uint8_t *ns;

		if (!nw)
			return -ENOMEM;
		q->w = nw;
		ns = realloc(q->sig, (size_t)c);
		if (!ns)
			return -ENOMEM;
		q->sig = ns;
		q->cap = c;
	}
	q->w[q->n] = w;
	q->sig[q->n++] = (uint8_t)sig;
	return 0;
}

/* A WRITE of side si from a window before, completed at t: where some
 * thread still waits for it. */
static void rp_carry_done(struct rp_job *j, int si, uint64_t gid, uint64_t t)
{
	for (int b = 0; b < j->nside; b++) {
		struct rp_deps_carry *dc = j->side[b].sm ? j->side[b].sm->dc : NULL;

		for (int k = 0; dc && k < dc->nslot; k++)
			for (int e = 0; e < dc->slot[k].n; e++)
				if (dc->slot[k].v[e].side == si &&
				    dc->slot[k].v[e].gid == gid)
					dc->slot[k].v[e].t_done = t;
	}
}

/* The send queues of side si as one window's WRITEs are dated: those of
 * this window are ws->v[first..], numbered from gid0. */
struct rp_sqs {
	struct rp_job *j;
	int si, first;
	uint64_t gid0;
	struct rp_writes *ws;
};

/* A send completion polled at t on QP index qi: its WR and the unsignaled ones
 * before it completed by then. */
static void rp_sq_done(const struct rp_sqs *x, struct rp_sq *q, uint64_t t)
{
	while (q->head < q->n) {
		int64_t w = q->w[q->head];
		int sig = q->sig[q->head];

		q->head++;
		if (w >= 0 && (uint64_t)w >= x->gid0)
			x->ws->v[x->first + (int)((uint64_t)w - x->gid0)].t_done = t;
		else if (w >= 0)
			rp_carry_done(x->j, x->si, (uint64_t)w, t);
		if (sig)
			return;
	}
}

/* A window's end: what is still in flight goes to the queue's front. */
static void rp_sq_compact(struct rp_sq *q)
{
	if (!q->head)
		return;
	memmove(q->w, q->w + q->head, (size_t)(q->n - q->head) * sizeof(*q->w));
	memmove(q->sig, q->sig + q->head, (size_t)(q->n - q->head));
	q->n -= q->head;
	q->head = 0;
}

/* Streamed: the recorded QPs a WRITE to which a thread may wait for in this
 * window or a later one - those of the sides with posts left, and of the
 * sides they poll (rp_deps_polled_by). NULL with n 0: any (in memory, or out
 * of memory). */
struct rp_waitable {
	uint32_t *qpn;
	int n;
};

static int rp_cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static int rp_side_posts(const struct rp_side *s)
{
	int n = 0;

	for (int i = 0; i < s->nstep; i++)
		n += s->step[i].type == RBT_EV_POST_SEND ||
		     s->step[i].type == RBT_EV_POST_RECV ||
		     s->step[i].type == RBT_EV_POST_SRQ_RECV;
	return n;
}

static int rp_deps_polled_by(struct rp_job *j, struct rp_side *c, struct rp_side *b);

/* The waitable QPs of the window just read; each side's posts of the windows
 * so far and can_wait advanced with it (once a window: rp_deps_collect). */
static void rp_waitable_make(struct rp_job *j, struct rp_waitable *wt)
{
	int n = 0;

	*wt = (struct rp_waitable){ 0 };
	for (int i = 0; i < j->nside; i++) {
		struct rp_stream *sm = j->side[i].sm;
		int here = rp_side_posts(&j->side[i]);

		if (!sm)
			return; /* in memory: every side waits, as it may */
		sm->posts_seen += (uint64_t)here;
		sm->can_wait = here > 0 || sm->posts_seen < sm->nposts_all;
		n += j->side[i].nqp;
	}
	wt->qpn = malloc(((size_t)n + 1) * sizeof(*wt->qpn));
	for (int c = 0; wt->qpn && c < j->nside; c++) {
		struct rp_side *C = &j->side[c];
		int in = 0;

		for (int b = 0; b < j->nside && !in; b++)
			in = j->side[b].sm->can_wait &&
			     (b == c || rp_deps_polled_by(j, C, &j->side[b]));
		for (int q = 0; q < C->nqp && in; q++)
			wt->qpn[wt->n++] = (uint32_t)C->qp[q].rec.qp_num;
	}
	if (wt->qpn)
		qsort(wt->qpn, (size_t)wt->n, sizeof(*wt->qpn), rp_cmp_u32);
}

/* Whether a WRITE to recorded QP qpn may be waited for. */
static int rp_waitable_has(const struct rp_waitable *wt, uint32_t qpn)
{
	return !wt || !wt->qpn ||
	       bsearch(&qpn, wt->qpn, (size_t)wt->n, sizeof(*wt->qpn), rp_cmp_u32);
}

/* Side s's WRITEs: tagged at post time, dated by their completions; streamed,
 * only those a thread may wait for (wt). */
static int rp_deps_writes(struct rp_job *j, int si, struct rp_writes *ws,
			  const struct rp_waitable *wt)
{
	struct rp_side *s = &j->side[si];
	struct rp_deps_carry *dc = s->sm ? rp_carry(s) : NULL;
	struct rp_sq *sq = dc ? dc->sq : calloc((size_t)s->nqp + 1, sizeof(*sq));
	uint32_t *ord = dc ? dc->ord : calloc((size_t)s->nqp + 1, sizeof(*ord));
	int rc = 0, host = rp_host_id(j, s->host);
	struct rp_sqs x = { j, si, ws->n, dc ? dc->gid : 0, ws };
	uint64_t gid = x.gid0;

	if (s->sm && !dc)
		return -ENOMEM;
	if (!sq || !ord) {
		free(sq);
		free(ord);
		return -ENOMEM;
	}
	for (int i = 0; i < s->nstep && !rc; i++) {
		struct rp_step *st = &s->step[i];
		const struct rbt_event *e = st->ev;

		/* a QP whose WRITEs no thread can wait for any more (the
		 * waitable only shrink: its later WRITEs neither) is neither
		 * tagged nor dated */
		if (st->type == RBT_EV_POST_SEND && st->qp &&
		    !rp_waitable_has(wt, (uint32_t)st->qp->rec_dest_qpn))
			continue;
		if (e->type == RBT_EV_POST_SEND && st->qp && e->u.post_send.ret == 0) {
			const struct rbt_ev_post_send *p = &e->u.post_send;
			int qi = (int)(st->qp - s->qp);
			int rcuc = st->qp->rec.qp_type == IBV_QPT_RC ||
				   st->qp->rec.qp_type == IBV_QPT_UC;

			for (uint32_t w = 0; w < p->n_wrs && rcuc && !rc; w++) {
				const struct rbt_send_wr *r = &p->wrs[w];
				uint64_t len = 0;
				int wi = -1;

				for (uint32_t g = 0; g < r->n_sges; g++)
					len += r->sges[g].length;
				if (rp_is_write(r->opcode) && len >= 8 &&
				    r->sges[0].length >= 8) {
					if (!RP_GROW(ws->v, ws->n, ws->cap)) {
						rc = -ENOMEM;
						break;
					}
					wi = ws->n++;
					ws->v[wi] = (struct rp_write){
						.side = si,
						.host = host,
						.step = i,
						.wr = (int)w,
						.rec_dest = st->qp->rec_dest_qpn,
						.qp = st->qp,
						.rkey = (uint32_t)r->rkey,
						.key = rp_deps_key(
							s, (uint32_t)st->qp->rec.qp_num),
						.ord = ++ord[qi],
						.raddr = r->remote_addr,
						.len = len,
						.clk = s->hdr.clock_source,
						.stream = e->stream,
						.t_post = rp_deps_clock(s, e->ts),
						.t_done = UINT64_MAX,
						.gid = gid++,
					};
					if (!rp_dx(s, st)) {
						rc = -ENOMEM;
						break;
					}
					if (!st->dx->tags) {
						st->dx->tags = rp_alloc(
							s,
							p->n_wrs * sizeof(*st->dx->tags));
						if (!rp_dx(s, st)) {
							rc = -ENOMEM;
							break;
						}
						if (!st->dx->tags) {
							rc = -ENOMEM;
							break;
						}
					}
					st->dx->tags[w] = (uint64_t)ws->v[wi].key << 32 |
							  ws->v[wi].ord;
				}
				rc = rc ? rc
					: rp_sq_push(
						  &sq[qi],
						  wi >= 0 ? (int64_t)ws->v[wi].gid : -1,
						  (r->send_flags & IBV_SEND_SIGNALED) ||
							  st->qp->rec.sq_sig_all);
			}
		} else if (e->type == RBT_EV_POLL_CQ) {
			const struct rbt_ev_poll_cq *p = &e->u.poll_cq;

			for (uint32_t k = 0; k < p->n_wcs; k++) {
				const struct rbt_wc *w = &p->wcs[k];
				struct rp_qp *q;

				if (w->status == IBV_WC_SUCCESS &&
				    (w->opcode & IBV_WC_RECV))
					continue;
				q = NULL;
				for (int n = 0; w->qp_num && n < s->nqp && !q; n++)
					if (s->qp[n].rec.qp_num == w->qp_num)
						q = &s->qp[n];
				if (q && rp_waitable_has(wt, (uint32_t)q->rec_dest_qpn))
					rp_sq_done(&x, &sq[q - s->qp],
						   rp_deps_clock(s, p->ts_exit));
			}
		}
	}
	if (dc) { /* streamed: kept for the next window */
		dc->gid = gid;
		for (int q = 0; q < s->nqp; q++)
			rp_sq_compact(&sq[q]);
		return rc;
	}
	for (int q = 0; q < s->nqp; q++) {
		free(sq[q].w);
		free(sq[q].sig);
	}
	free(sq);
	free(ord);
	return rc;
}

/* Where W lands in side b's replayed memory (its last 8 bytes), or NULL. */
static uint8_t *rp_deps_target(struct rp_side *b, const struct rp_write *w)
{
	int peer = 0;

	for (int q = 0; q < b->nqp && !peer; q++)
		peer = b->qp[q].rec.qp_num == w->rec_dest && w->rec_dest;
	if (!peer)
		return NULL;
	for (int m = 0; m < b->nmr; m++) {
		struct rp_mr *r = &b->mr[m];

		if (r->rkey == w->rkey && r->buf && w->raddr >= r->iova &&
		    w->raddr - r->iova + w->len <= r->length)
			return r->buf + (w->raddr - r->iova);
	}
	return NULL;
}

/* Whether side b's posts may have been waiting for WRITEs landing in side
 * c's memory although c is another process: c only registers memory (it
 * posts nothing: HERD's master, whose SysV segment its worker processes
 * poll), the two were recorded on one host, and b writes nothing into c (a
 * client of the same server is not one of its workers). c's replayed memory
 * is in this process: a registrar in another replayer process is not seen. */
static int rp_deps_polled_by(struct rp_job *j, struct rp_side *c, struct rp_side *b)
{
	if (c == b || strcmp(c->host, b->host))
		return 0;
	if (c->sm && b->sm) { /* streamed: from the first reading, whole */
		if (c->sm->posts_send || b->sm->wrkey_all)
			return 0;
		for (int k = 0; k < b->sm->nwrkey; k++)
			for (int m = 0; m < c->nmr; m++)
				if (c->mr[m].rkey == b->sm->wrkey[k])
					return 0;
		return 1;
	}
	for (int i = 0; i < c->nstep; i++)
		if (c->step[i].type == RBT_EV_POST_SEND)
			return 0;
	for (int k = 0; k < j->writes.n; k++)
		if (j->writes.v[k].side == b->idx && rp_deps_target(c, &j->writes.v[k]))
			return 0;
	return 1;
}

static int rp_cmp_post(const void *a, const void *b)
{
	const struct rp_write *x = a, *y = b;

	return x->t_post < y->t_post ? -1 : x->t_post > y->t_post;
}

static int rp_step_polled_recv(const struct rp_step *st)
{
	const struct rbt_ev_poll_cq *p;

	if (st->type != RBT_EV_POLL_CQ)
		return 0;
	p = &st->ev->u.poll_cq;
	for (uint32_t k = 0; k < p->n_wcs; k++)
		if (p->wcs[k].status == IBV_WC_SUCCESS &&
		    (p->wcs[k].opcode & IBV_WC_RECV))
			return 1;
	return 0;
}

static uint32_t rp_dest_hash(const struct rp_write *w)
{
	uint64_t h = ((uint64_t)(uintptr_t)w->at ^ ((uint64_t)w->key << 40)) *
		     0x9e3779b97f4a7c15ull;

	return (uint32_t)(h >> 32);
}

/* p's index of its entries by destination and writer, made again for n+1. */
static int rp_pending_index(struct rp_pending *p)
{
	uint32_t cap = p->hcap ? p->hcap : 64;

	while ((uint64_t)cap < 2 * ((uint64_t)p->n + 1))
		cap *= 2;
	if (cap != p->hcap || !p->hx) {
		int *hx = realloc(p->hx, cap * sizeof(*hx));

		if (!hx)
			return -ENOMEM;
		p->hx = hx;
	}
	memset(p->hx, 0, cap * sizeof(*p->hx));
	p->hcap = cap;
	for (int k = 0; k < p->n; k++) {
		uint32_t h = rp_dest_hash(&p->v[k]) & (cap - 1);

		while (p->hx[h])
			h = (h + 1) & (cap - 1);
		p->hx[h] = k + 1;
	}
	return 0;
}

/* What a thread carries: only the latest WRITE per destination and writer
 * (waiting for it is waiting for the earlier ones; its completion is the
 * later one), kept so as they come (rp_pending_push); here the latest
 * RP_DEPS_CARRY of those, by post time. */
static void rp_pending_trim(struct rp_deps_carry *dc, struct rp_pending *p)
{
	int n = p->n;

	if (!n)
		return;
	/* in the order they came, but where a later one took an earlier's
	 * place: a few runs */
	rp_sort_runs(p->v, (size_t)n, sizeof(*p->v), rp_cmp_post);
	if (n > RP_DEPS_CARRY) {
		dc->dropped += (uint64_t)(n - RP_DEPS_CARRY);
		memmove(p->v, p->v + n - RP_DEPS_CARRY, RP_DEPS_CARRY * sizeof(*p->v));
		n = RP_DEPS_CARRY;
	}
	p->n = n;
	p->hcap = 0; /* the places moved */
}

/* w onto p: in place of p's WRITE to the same destination by the same
 * writer when w is later, else after them. */
static int rp_pending_push(struct rp_pending *p, const struct rp_write *w)
{
	uint32_t h;

	if ((!p->hcap || 2 * ((uint64_t)p->n + 1) > p->hcap) && rp_pending_index(p) < 0)
		return -ENOMEM;
	for (h = rp_dest_hash(w) & (p->hcap - 1); p->hx[h]; h = (h + 1) & (p->hcap - 1)) {
		struct rp_write *o = &p->v[p->hx[h] - 1];

		if (o->at == w->at && o->key == w->key) {
			if (w->ord > o->ord)
				*o = *w;
			return 0;
		}
	}
	if (!RP_GROW(p->v, p->n, p->cap))
		return -ENOMEM;
	p->v[p->n++] = *w;
	p->hx[h] = p->n;
	return 0;
}

/* The dependencies of one lane of side b on the WRITEs that land in it (cand,
 * sorted by post time, with their targets). rest (streamed): what is still
 * pending after its last step, for its next window. */
static int rp_deps_lane(struct rp_side *b, struct rp_lane *L, const struct rp_write *cand,
			uint8_t *const *at, int ncand, struct rp_pending *rest)
{
	int *pend = malloc(((size_t)ncand + 1) * sizeof(*pend));
	int npend = 0, c = 0;

	if (!pend)
		return -ENOMEM;
	for (int k = 0; k < L->n; k++) {
		struct rp_step *st = &b->step[L->idx[k]];
		uint64_t t = rp_deps_clock(b, st->ev->ts);
		int keep = 0;

		/* one clock: a WRITE whose post began before P's cannot have
		 * depended on P */
		while (c < ncand && cand[c].t_post < t) {
			/* a thread learns of its own WRITE by its completion */
			if (cand[c].side != b->idx || cand[c].stream != L->stream)
				pend[npend++] = c;
			c++;
		}
		if (rp_step_polled_recv(st)) {
			/* a message explains what follows: the WRITEs that had
			 * surely landed before it are no longer waited for */
			for (int p = 0; p < npend; p++)
				if (cand[pend[p]].t_done > t)
					pend[keep++] = pend[p];
			npend = keep;
			continue;
		}
		if (st->type != RBT_EV_POST_SEND || st->skipped || !npend ||
		    st->ev->u.post_send.ret != 0)
			continue;
		if (rp_dx(b, st))
			st->dx->deps = rp_alloc(b, (size_t)npend * sizeof(*st->dx->deps));
		if (!st->dx || !st->dx->deps) {
			free(pend);
			return -ENOMEM;
		}
		/* one wait per destination and writer: its latest WRITE there */
		for (int p = 0; p < npend; p++) {
			const struct rp_write *w = &cand[pend[p]];
			/* when it landed, for --timing=deps' think time: by its
			 * completion if that was polled before P, else (an
			 * unsignaled WRITE: HERD's requests) the recording cannot
			 * tell, and a poller finds a WRITE as soon as it lands:
			 * its post. Taking P's own time there would drop the
			 * program's whole wait (a server thread still starting
			 * up) and run that thread ahead of its peers that keep
			 * their schedule. */
			uint64_t land = w->t_done < t ? w->t_done : w->t_post;

			if (b->hdr.clock_source == RBT_CLOCK_TSC)
				land = rp_abs_ns(b, land);
			uint32_t d;

			for (d = 0; d < st->dx->ndeps; d++)
				if (st->dx->deps[d].at == at[pend[p]] &&
				    (uint32_t)(st->dx->deps[d].tag >> 32) == w->key)
					break;
			if (d == st->dx->ndeps)
				st->dx->ndeps++;
			st->dx->deps[d].at = at[pend[p]];
			st->dx->deps[d].tag = (uint64_t)w->key << 32 | w->ord;
			st->dx->deps[d].in_flight = w->t_done > t;
			st->dx->deps[d].wqp = w->qp;
			st->dx->deps[d].post_ns = b->hdr.clock_source == RBT_CLOCK_TSC
							  ? rp_abs_ns(b, w->t_post)
							  : w->t_post;
			if (land > st->dx->dep_land_ns)
				st->dx->dep_land_ns = land;
		}
		L->deps_inferred += st->dx->ndeps;
		for (uint32_t d = 0; d < st->dx->ndeps; d++)
			L->deps_in_flight += st->dx->deps[d].in_flight;
		npend = 0;
	}
	for (int p = 0; rest && p < npend; p++)
		if (rp_pending_push(rest, &cand[pend[p]]) < 0)
			goto oom;
	for (; rest && c < ncand; c++)
		if ((cand[c].side != b->idx || cand[c].stream != L->stream) &&
		    rp_pending_push(rest, &cand[c]) < 0)
			goto oom;
	free(pend);
	return 0;
oom:
	free(pend);
	return -ENOMEM;
}

static struct rp_pending *rp_slot_find(struct rp_deps_carry *dc, uint32_t stream, int any)
{
	for (int k = 0; k < dc->nslot; k++)
		if (dc->slot[k].any == any && (any || dc->slot[k].stream == stream))
			return &dc->slot[k];
	return NULL;
}

static struct rp_pending *rp_slot(struct rp_deps_carry *dc, uint32_t stream, int any)
{
	struct rp_pending *p = rp_slot_find(dc, stream, any);

	if (p)
		return p;
	if (!RP_GROW(dc->slot, dc->nslot, dc->capslot))
		return NULL;
	dc->slot[dc->nslot] = (struct rp_pending){ .stream = stream, .any = any };
	return &dc->slot[dc->nslot++];
}

/* Streamed side b's lanes in this window: each starts with what its thread
 * (or, new, any thread) carried, then its window's WRITEs (cand); the
 * threads without steps in it carry those on. */
static int rp_deps_window(struct rp_side *b, const struct rp_write *cand, int ncand)
{
	struct rp_deps_carry *dc = rp_carry(b);
	struct rp_write *lc = NULL;
	uint8_t **lat = NULL;
	int rc = 0;

	if (!dc || !rp_slot(dc, 0, 1))
		return -ENOMEM;
	for (int k = 0; k < dc->nslot; k++)
		dc->slot[k].touched = 0;
	for (int l = 0; l < b->nlane && !rc; l++) {
		struct rp_lane *L = &b->lane[l];
		struct rp_pending *from, *to, next = { 0 };
		int n;

		from = rp_slot_find(dc, L->stream, 0);
		if (!from) /* a thread with no step before: what any thread had */
			from = rp_slot_find(dc, 0, 1);
		n = from->n;
		lc = malloc(((size_t)n + (size_t)ncand + 1) * sizeof(*lc));
		lat = malloc(((size_t)n + (size_t)ncand + 1) * sizeof(*lat));
		if (!lc || !lat)
			rc = -ENOMEM;
		if (!rc) {
			if (n)
				memcpy(lc, from->v, (size_t)n * sizeof(*lc));
			if (ncand)
				memcpy(lc + n, cand, (size_t)ncand * sizeof(*lc));
			n += ncand;
			/* two runs by post time: what it carried, the window's */
			rp_sort_runs(lc, (size_t)n, sizeof(*lc), rp_cmp_post);
			for (int k = 0; k < n; k++)
				lat[k] = lc[k].at;
			/* nothing carried, nothing new: no step of it waits */
			if (n)
				rc = rp_deps_lane(b, L, lc, lat, n, &next);
		}
		free(lc);
		free(lat);
		lc = NULL;
		lat = NULL;
		to = rp_slot(dc, L->stream, 0);
		if (!to) {
			free(next.v);
			free(next.hx);
			return -ENOMEM;
		}
		free(to->v);
		free(to->hx);
		next.stream = L->stream;
		next.touched = 1;
		*to = next;
		rp_pending_trim(dc, to);
	}
	for (int k = 0; k < dc->nslot && !rc; k++) {
		struct rp_pending *p = &dc->slot[k];

		if (p->touched)
			continue;
		for (int c = 0; c < ncand && !rc; c++)
			if (p->any || cand[c].side != b->idx ||
			    cand[c].stream != p->stream)
				rc = rp_pending_push(p, &cand[c]);
		rp_pending_trim(dc, p);
	}
	return rc;
}

/* Every local side's WRITEs (before the exchange: the peer replayer gets
 * them too, replay_net.c). */
int rp_deps_collect(struct rp_job *j)
{
	struct rp_waitable wt;
	int rc = 0;

	rp_waitable_make(j, &wt);
	for (int i = 0; i < j->nside && !rc; i++) {
		const struct rp_stream *sm = j->side[i].sm;

		/* streamed, and the first reading saw it post no RDMA WRITE:
		 * each window's sweep of its steps would find none */
		if (sm && !sm->nwrkey && !sm->wrkey_all)
			continue;
		rc = rp_deps_writes(j, i, &j->writes, &wt);
	}
	free(wt.qpn);
	return rc;
}

int rp_deps_setup(struct rp_job *j)
{
	struct rp_writes ws = j->writes;
	int rc = 0;

	/* the source of each tag: the first 8 bytes of the WRITE's payload */
	for (int k = 0; k < ws.n && !rc; k++) {
		struct rp_side *s;
		struct rp_step *st;
		struct ibv_send_wr *o;
		struct ibv_sge *g;

		if (ws.v[k].side >= RP_MAX_SIDES)
			continue; /* the peer replayer's */
		s = &j->side[ws.v[k].side];
		st = &s->step[ws.v[k].step];
		if (!st->swr || st->skipped || !st->dx) {
			if (st->dx)
				st->dx->tags = NULL;
			continue;
		}
		o = &st->swr[ws.v[k].wr];
		g = &o->sg_list[0];

		if (!st->dx->tag_at) {
			st->dx->tag_at = rp_alloc(s, st->nwr * sizeof(*st->dx->tag_at));
			if (!st->dx->tag_at)
				rc = -ENOMEM;
		}
		if (!rc && !st->qp->wpost) { /* kept across windows: not the arena */
			st->qp->wpost = calloc(1, sizeof(*st->qp->wpost));
			if (!st->qp->wpost)
				rc = -ENOMEM;
		}
		if (!rc)
			st->dx->tag_at[ws.v[k].wr] = (uint8_t *)(uintptr_t)g->addr;
	}
	for (int b = 0; b < j->nside && !rc; b++) {
		struct rp_side *B = &j->side[b];

		/* streamed, no post left: it never waits, nor carries */
		if (B->sm && !B->sm->can_wait)
			continue;
		struct rp_write *cand = malloc(((size_t)ws.n + 1) * sizeof(*cand));
		uint8_t **at = malloc(((size_t)ws.n + 1) * sizeof(*at));
		int nc = 0, polled[RP_MAX_SIDES];

		for (int c = 0; c < j->nside; c++)
			polled[c] = rp_deps_polled_by(j, &j->side[c], B);
		if (!cand || !at) {
			free(cand);
			free(at);
			rc = -ENOMEM;
			break;
		}
		for (int k = 0; k < ws.n; k++) {
			struct rp_side *T = B;

			ws.v[k].at = rp_deps_target(B, &ws.v[k]);
			for (int c = 0; !ws.v[k].at && c < j->nside; c++)
				if (polled[c] && ws.v[k].side != b)
					ws.v[k].at =
						rp_deps_target(T = &j->side[c], &ws.v[k]);
			if (!ws.v[k].at)
				continue;
			if (ws.v[k].host < 0 || strcmp(j->hosts[ws.v[k].host], T->host) ||
			    ws.v[k].clk != B->hdr.clock_source) {
				B->deps_ambiguous++;
				continue;
			}
			cand[nc++] = ws.v[k];
		}
		/* each side's WRITEs came in its steps' time order: a run each */
		rp_sort_runs(cand, (size_t)nc, sizeof(*cand), rp_cmp_post);
		for (int k = 0; k < nc; k++)
			at[k] = cand[k].at;
		for (int l = 0; l < B->nlane && !rc && !B->sm; l++)
			rc = rp_deps_lane(B, &B->lane[l], cand, at, nc, NULL);
		if (B->sm && !rc)
			rc = rp_deps_window(B, cand, nc);
		free(cand);
		free(at);
	}
	j->deps_off = getenv("RBTRACE_REPLAY_NO_DEPS") &&
		      strcmp(getenv("RBTRACE_REPLAY_NO_DEPS"), "0");
	return rc;
}

/* Before the post: the tags of this post's WRITEs into their sources, and
 * when they were posted (for the waiters' think time in deps timing). */
void rp_deps_tag(struct rp_step *st)
{
	struct rp_wpost *wp = st->qp->wpost;
	uint64_t now = wp ? rp_now_ns() : 0;

	for (uint32_t w = 0; w < st->nwr; w++)
		if (st->dx->tags[w] && st->dx->tag_at[w]) {
			uint32_t ord = (uint32_t)st->dx->tags[w];

			memcpy(st->dx->tag_at[w], &st->dx->tags[w], 8);
			if (wp) {
				__atomic_store_n(&wp->ns[ord % RP_WPOST], now,
						 __ATOMIC_RELAXED);
				__atomic_store_n(&wp->ord[ord % RP_WPOST], ord,
						 __ATOMIC_RELEASE);
			}
		}
}

/* For --timing=deps, after the waits: the latest of the post's WRITEs by
 * recorded post time whose replayed post this process saw (the writer is a
 * side of this replayer and its post is still in the QP's ring): 1 with the
 * recorded and replayed post times, 0 when none is known. */
int rp_deps_posted(const struct rp_step *st, uint64_t *rec_ns, uint64_t *rep_ns)
{
	const struct rp_dep *best = NULL;

	for (uint32_t d = 0; d < st->dx->ndeps; d++) {
		const struct rp_dep *x = &st->dx->deps[d];

		if (x->wqp && x->wqp->wpost && (!best || x->post_ns > best->post_ns))
			best = x;
	}
	if (!best)
		return 0;
	uint32_t ord = (uint32_t)best->tag, k = ord % RP_WPOST;

	if (__atomic_load_n(&best->wqp->wpost->ord[k], __ATOMIC_ACQUIRE) != ord)
		return 0;
	*rec_ns = best->post_ns;
	*rep_ns = __atomic_load_n(&best->wqp->wpost->ns[k], __ATOMIC_RELAXED);
	return *rep_ns != 0;
}

/* The device writes this memory behind the compiler's back, as a NIC's DMA
 * does: outside the threads' memory model, so not ThreadSanitizer's business
 * (softnic's memcpy in another thread would be reported as a race). */
__attribute__((no_sanitize("thread"))) static int rp_dep_landed(const struct rp_dep *d)
{
	uint64_t v;

	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	memcpy(&v, d->at, 8);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return (uint32_t)(v >> 32) == (uint32_t)(d->tag >> 32) &&
	       (uint32_t)v >= (uint32_t)d->tag;
}

/* Before post step st (index i) of lane L: every WRITE it depends on has
 * landed. Bounded by lim_ns (0: the lane must stop); a WRITE that does not
 * land in time is counted and reported, and the post goes on. Returns when
 * the last one landed (0 when none waited). */
uint64_t rp_deps_wait(struct rp_job *j, struct rp_lane *L, struct rp_step *st, int i,
		      uint64_t lim_ns, int *timed_out)
{
	uint64_t t0 = 0, landed = 0;

	*timed_out = 0;
	for (uint32_t d = 0; d < st->dx->ndeps; d++) {
		unsigned spins = 0;

		while (!rp_dep_landed(&st->dx->deps[d])) {
			if (!t0)
				t0 = rp_now_ns();
			if (rp_wait_yield(j, ++spins))
				sched_yield();
			if ((spins & 255) == 0 && rp_signal_caught())
				return landed;
			if ((spins & 255) == 0 && rp_now_ns() - t0 > lim_ns) {
				*timed_out = 1;
				L->deps_timed_out++;
				if (getenv("RBTRACE_REPLAY_DEBUG")) {
					uint64_t v;

					memcpy(&v, st->dx->deps[d].at, 8);
					fprintf(j->log,
						"%s: step %d (thread %u, recorded at "
						"%.6f s): waited for tag %016llx "
						"(wait %u of %u), found %016llx\n",
						L->s->path, rp_step_no(L->s, i),
						L->stream,
						(double)(st->rec_ns -
							 L->s->rec_epoch_ns) /
							1e9,
						(unsigned long long)st->dx->deps[d].tag,
						d + 1, st->dx->ndeps,
						(unsigned long long)v);
				}
				rp_diverge(j,
					   "%s: step %d: a peer's RDMA WRITE it waited "
					   "for did not land (waited %llu ms)",
					   L->s->path, rp_step_no(L->s, i),
					   (unsigned long long)(lim_ns / 1000000ull));
				goto next;
			}
#if defined(__x86_64__)
			_mm_pause();
#endif
		}
		L->deps_kept++;
		if (t0)
			landed = rp_now_ns();
	next:;
	}
	return landed;
}

void rp_deps_totals(const struct rp_side *s, uint64_t *inferred, uint64_t *in_flight,
		    uint64_t *kept, uint64_t *timed_out)
{
	*inferred = *in_flight = *kept = *timed_out = 0;
	for (int l = 0; l < s->nlane; l++) {
		*inferred += s->lane[l].deps_inferred;
		*in_flight += s->lane[l].deps_in_flight;
		*kept += s->lane[l].deps_kept;
		*timed_out += s->lane[l].deps_timed_out;
	}
}
