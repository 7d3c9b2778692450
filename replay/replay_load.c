/* replay_load.c - reads one trace into the replayer's model: the resources it
 * created (PDs, MRs, channels, CQs, XRC domains, SRQs, QPs, AHs), the timeline
 * of steps to reissue (modifies, posts, polls, notifications) in recorded time
 * order, and the completions the program saw, per QP and queue.
 *
 * Must never issue a verb: loading happens before the replayer decides whether it
 * can replay at all. Everything the reader hands out is copied (it is only valid
 * until the next event).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "replay/replay_int.h"

void *rp_alloc(struct rp_side *s, size_t n)
{
	void *p;

	if (s->nallocs == s->capallocs) {
		size_t cap = s->capallocs ? 2 * s->capallocs : 256;
		void **a = realloc(s->allocs, cap * sizeof(*a));

		if (!a)
			return NULL;
		s->allocs = a;
		s->capallocs = cap;
	}
	p = calloc(1, n ? n : 1);
	if (p)
		s->allocs[s->nallocs++] = p;
	return p;
}

static void *rp_dup(struct rp_side *s, const void *src, size_t n)
{
	void *p = rp_alloc(s, n);

	if (p && n)
		memcpy(p, src, n);
	return p;
}

/* The name of a memory-window opcode among the WRs of p, or NULL. */
static const char *rp_mw_opcode(const struct rbt_ev_post_send *p)
{
	for (uint32_t i = 0; i < p->n_wrs; i++)
		switch (p->wrs[i].opcode) {
		case IBV_WR_BIND_MW:
			return "a BIND_MW work request";
		case IBV_WR_LOCAL_INV:
			return "a LOCAL_INV work request";
		case IBV_WR_SEND_WITH_INV:
			return "a SEND_WITH_INV work request";
		default:
			break;
		}
	return NULL;
}

void rp_wclist_push(struct rp_wclist *l, const struct rp_wcrec *w)
{
	if (l->n == l->cap) {
		uint32_t cap = l->cap ? 2 * l->cap : 64;
		struct rp_wcrec *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = *w;
}

uint64_t rp_abs_ns(const struct rp_side *s, uint64_t ticks)
{
	const struct rbt_header *h = &s->hdr;
	double d = (double)(int64_t)(ticks - h->start.ticks);
	double hz = h->clock_hz ? (double)h->clock_hz : 1e9;

	return h->start.mono_ns + (uint64_t)(int64_t)(d * 1e9 / hz);
}

struct rp_qp *rp_qp_by_h(struct rp_side *s, uint64_t h)
{
	for (int i = s->nqp - 1; i >= 0; i--)
		if (s->qp[i].h == h)
			return &s->qp[i];
	return NULL;
}

struct rp_qp *rp_qp_by_rec_qpn(struct rp_side *s, uint32_t qpn)
{
	for (int i = s->nqp - 1; i >= 0; i--)
		if ((uint32_t)s->qp[i].rec.qp_num == qpn)
			return &s->qp[i];
	return NULL;
}

struct rp_cq *rp_cq_by_h(struct rp_side *s, uint64_t h)
{
	for (int i = s->ncq - 1; i >= 0; i--)
		if (s->cq[i].h == h)
			return &s->cq[i];
	return NULL;
}

struct rp_srq *rp_srq_by_h(struct rp_side *s, uint64_t h)
{
	for (int i = s->nsrq - 1; i >= 0; i--)
		if (s->srq[i].h == h)
			return &s->srq[i];
	return NULL;
}

struct rp_ah *rp_ah_by_h(struct rp_side *s, uint64_t h)
{
	for (int i = s->nah - 1; i >= 0; i--)
		if (s->ah[i].h == h)
			return &s->ah[i];
	return NULL;
}

struct ibv_pd *rp_pd_by_h(struct rp_side *s, uint64_t h)
{
	for (int i = s->npd - 1; i >= 0; i--)
		if (s->pd_h[i] == h)
			return s->pd[i];
	return NULL;
}

/* 1 + the index of the object a step names, as of the moment it is read: a
 * handle (a pointer in the recording process) is reused once its object is
 * destroyed, so the latest object created with it is the one meant. */
static int rp_resolve(struct rp_side *s, const struct rbt_event *e)
{
	uint64_t h = 0;
	int kind = 0; /* 1 QP, 2 CQ, 3 SRQ */

	switch (e->type) {
	case RBT_EV_QP_MODIFY:
		h = e->u.qp_modify.qp, kind = 1;
		break;
	case RBT_EV_QP_QUERY:
		h = e->u.qp_query.qp, kind = 1;
		break;
	case RBT_EV_ASYNC_EVENT:
		h = e->u.async_event.element, kind = 1;
		break;
	case RBT_EV_POST_SEND:
		h = e->u.post_send.qp, kind = 1;
		break;
	case RBT_EV_POST_RECV:
		h = e->u.post_recv.qp, kind = 1;
		break;
	case RBT_EV_POST_SRQ_RECV:
		h = e->u.post_srq_recv.srq, kind = 3;
		break;
	case RBT_EV_POLL_CQ:
		h = e->u.poll_cq.cq, kind = 2;
		break;
	case RBT_EV_REQ_NOTIFY:
		h = e->u.req_notify.cq, kind = 2;
		break;
	case RBT_EV_GET_CQ_EVENT:
		h = e->u.get_cq_event.cq, kind = 2;
		break;
	}
	if (kind == 1) {
		for (int i = s->nqp - 1; i >= 0; i--)
			if (s->qp[i].h == h)
				return i + 1;
	} else if (kind == 2) {
		for (int i = s->ncq - 1; i >= 0; i--)
			if (s->cq[i].h == h)
				return i + 1;
	} else if (kind == 3) {
		for (int i = s->nsrq - 1; i >= 0; i--)
			if (s->srq[i].h == h)
				return i + 1;
	}
	return 0;
}

int rp_is_xrc(uint64_t qp_type)
{
	return qp_type == IBV_QPT_XRC_SEND || qp_type == IBV_QPT_XRC_RECV;
}

/* Whether receive completions of QP q can arrive on CQ cq (1 + index): its own
 * receive CQ, or - for an XRC_RECV QP, which has none - the CQ of any XRC SRQ of
 * its domain, since the sender picks the SRQ (and so the CQ) in each send. */
int rp_qp_recv_on_cq(const struct rp_side *s, const struct rp_qp *q, int cq)
{
	if (q->rcq == cq)
		return 1;
	if (q->rec.qp_type != IBV_QPT_XRC_RECV || !q->xrcdi)
		return 0;
	for (int i = 0; i < s->nsrq; i++)
		if (s->srq[i].xrcdi == q->xrcdi && s->srq[i].cqi == cq)
			return 1;
	return 0;
}

/* The QP a CQ serves, when it serves exactly one. */
static struct rp_qp *rp_only_qp_of_cq(struct rp_side *s, int cq)
{
	struct rp_qp *only = NULL;

	for (int i = 0; i < s->nqp; i++)
		if (s->qp[i].scq == cq || rp_qp_recv_on_cq(s, &s->qp[i], cq)) {
			if (only)
				return NULL;
			only = &s->qp[i];
		}
	return only;
}

/* Error completions carry no valid opcode, so the queue they came from is told by
 * the wr_id: was it posted as a receive on this QP (or its SRQ)? */
static int rp_cmp_id(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int rp_has_id(const struct rp_idset *set, uint64_t id)
{
	return set->n && bsearch(&id, set->v, set->n, sizeof(id), rp_cmp_id) != NULL;
}

static void rp_idset_add(struct rp_idset *set, uint64_t id)
{
	if (set->n == set->cap) {
		uint32_t cap = set->cap ? 2 * set->cap : 16;
		uint64_t *v = realloc(set->v, cap * sizeof(*v));

		if (!v)
			return;
		set->v = v;
		set->cap = cap;
	}
	set->v[set->n++] = id;
}

static void rp_idset_seal(struct rp_idset *set)
{
	uint32_t k = 0;

	if (!set->n)
		return;
	qsort(set->v, set->n, sizeof(*set->v), rp_cmp_id);
	for (uint32_t i = 0; i < set->n; i++)
		if (!k || set->v[k - 1] != set->v[i])
			set->v[k++] = set->v[i];
	set->n = k;
}

/* The queue a completion came from. An error completion's opcode is undefined on
 * hardware, so its wr_id decides when it was posted to one queue only. */
int rp_wc_is_recv(const struct rp_qp *q, uint32_t status, uint32_t opcode, uint64_t wr_id)
{
	int in_r, in_s;

	/* an XRC TGT QP has no send queue */
	if (q->rec.qp_type == IBV_QPT_XRC_RECV)
		return 1;
	if (status == IBV_WC_SUCCESS)
		return (opcode & IBV_WC_RECV) != 0;
	in_r = rp_has_id(&q->recv_ids, wr_id);
	in_s = rp_has_id(&q->send_ids, wr_id);
	if (in_r != in_s)
		return in_r;
	if (status == IBV_WC_WR_FLUSH_ERR)
		return opcode & IBV_WC_RECV ? 1 : 0;
	return 0;
}

/* The stand-in for TGT QP qpn of another process, whose receives arrived on CQ
 * cq (1 + index) through one of our XRC SRQs; NULL when cq is no XRC SRQ's. */
static struct rp_qp *rp_xqp_get(struct rp_side *s, int cq, uint32_t qpn)
{
	struct rp_qp *q, *v;
	int xrc = 0;

	for (int i = 0; i < s->nsrq; i++)
		if (s->srq[i].rec.srq_type == IBV_SRQT_XRC && s->srq[i].cqi == cq)
			xrc = 1;
	if (!xrc)
		return NULL;
	for (int i = 0; i < s->nxqp; i++)
		if ((uint32_t)s->xqp[i].rec.qp_num == qpn)
			return &s->xqp[i];
	v = realloc(s->xqp, (size_t)(s->nxqp + 1) * sizeof(*v));
	if (!v)
		return NULL;
	s->xqp = v;
	q = &s->xqp[s->nxqp++];
	memset(q, 0, sizeof(*q));
	q->rec.qp_num = qpn;
	q->rec.qp_type = IBV_QPT_XRC_RECV;
	q->rcq = cq;
	q->rel_side = -1;
	q->peer_dir = -1;
	return q;
}

/* Copies the arrays of an event into the side's arena. */
static int rp_copy_event(struct rp_side *s, struct rbt_event *dst,
			 const struct rbt_event *ev)
{
	*dst = *ev;
	switch (ev->type) {
	case RBT_EV_POST_SEND: {
		const struct rbt_ev_post_send *p = &ev->u.post_send;
		struct rbt_send_wr *w = rp_dup(s, p->wrs, p->n_wrs * sizeof(*w));

		if (!w)
			return -ENOMEM;
		for (uint32_t i = 0; i < p->n_wrs; i++) {
			w[i].sges = rp_dup(s, p->wrs[i].sges,
					   p->wrs[i].n_sges * sizeof(*w[i].sges));
			if (p->wrs[i].payload.len) {
				w[i].payload.data = rp_dup(s, p->wrs[i].payload.data,
							   p->wrs[i].payload.len);
			} else {
				w[i].payload.data = NULL;
			}
			if (!w[i].sges)
				return -ENOMEM;
		}
		dst->u.post_send.wrs = w;
		break;
	}
	case RBT_EV_POST_RECV:
	case RBT_EV_POST_SRQ_RECV: {
		uint32_t n = ev->type == RBT_EV_POST_RECV ? ev->u.post_recv.n_wrs
							  : ev->u.post_srq_recv.n_wrs;
		const struct rbt_recv_wr *src = ev->type == RBT_EV_POST_RECV
							? ev->u.post_recv.wrs
							: ev->u.post_srq_recv.wrs;
		struct rbt_recv_wr *w = rp_dup(s, src, n * sizeof(*w));

		if (!w)
			return -ENOMEM;
		for (uint32_t i = 0; i < n; i++) {
			w[i].sges = rp_dup(s, src[i].sges,
					   src[i].n_sges * sizeof(*w[i].sges));
			w[i].payload.data = NULL;
			w[i].payload.len = 0;
			if (!w[i].sges)
				return -ENOMEM;
		}
		if (ev->type == RBT_EV_POST_RECV)
			dst->u.post_recv.wrs = w;
		else
			dst->u.post_srq_recv.wrs = w;
		break;
	}
	case RBT_EV_POLL_CQ: {
		const struct rbt_ev_poll_cq *p = &ev->u.poll_cq;
		struct rbt_wc *w = rp_dup(s, p->wcs, p->n_wcs * sizeof(*w));

		if (!w)
			return -ENOMEM;
		for (uint32_t i = 0; i < p->n_wcs; i++) {
			w[i].payload.data = NULL;
			w[i].payload.len = 0;
		}
		dst->u.poll_cq.wcs = w;
		break;
	}
	case RBT_EV_QP_MODIFY: {
		struct rbt_ev_qp_modify *m = &dst->u.qp_modify;

		m->ah_dgid.data = rp_dup(s, ev->u.qp_modify.ah_dgid.data, m->ah_dgid.len);
		break;
	}
	default:
		break;
	}
	return 0;
}

static int rp_step_cmp(const void *a, const void *b)
{
	const struct rp_step *x = a, *y = b;

	if (x->rec_ns != y->rec_ns)
		return x->rec_ns < y->rec_ns ? -1 : 1;
	/* file order breaks ties: t_issue holds it during loading */
	return x->t_issue < y->t_issue ? -1 : (x->t_issue > y->t_issue);
}

static int rp_is_create_ok(int64_t ret, uint64_t err, uint64_t h)
{
	return h != 0 && err == 0 && ret >= 0;
}

int rp_side_load(struct rp_job *j, struct rp_side *s, const char *path)
{
	struct rbt_reader *r = NULL;
	const struct rbt_event *ev;
	int rc, capmr = 0, cappd = 0, capch = 0, capcq = 0, capsrq = 0, capqp = 0,
		capah = 0, capstep = 0, capxrcd = 0;
	uint64_t seq = 0;

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

	while ((rc = rbt_reader_next(r, &ev)) == 1) {
		switch (ev->type) {
		case RBT_EV_DEVICE_OPEN:
			if (!s->devname[0] && ev->u.device_open.name)
				snprintf(s->devname, sizeof(s->devname), "%s",
					 ev->u.device_open.name);
			break;
		case RBT_EV_PORT_ATTR:
			if (!s->rec_lid && !s->rec_active_mtu) {
				s->rec_lid = ev->u.port_attr.lid;
				s->rec_active_mtu = ev->u.port_attr.active_mtu;
				if (ev->u.port_attr.gid0.len == 16)
					memcpy(s->rec_gid, ev->u.port_attr.gid0.data, 16);
			}
			break;
		case RBT_EV_PD_ALLOC: {
			const struct rbt_ev_pd_alloc *p = &ev->u.pd_alloc;

			if (!rp_is_create_ok(p->ret, p->err, p->pd))
				break;
			if (!RP_GROW(s->pd_h, s->npd, cappd))
				goto nomem;
			s->pd_h[s->npd++] = p->pd;
			break;
		}
		case RBT_EV_MR_REG: {
			const struct rbt_ev_mr_reg *p = &ev->u.mr_reg;
			struct rp_mr *m;

			if (!rp_is_create_ok(p->ret, p->err, p->mr))
				break;
			if (!RP_GROW(s->mr, s->nmr, capmr))
				goto nomem;
			m = &s->mr[s->nmr++];
			m->h = p->mr;
			m->pd = p->pd;
			/* sges name the virtual address; peers name the iova */
			m->addr = p->addr;
			m->iova = (p->api == 1 || p->api == 2) ? p->iova : p->addr;
			m->length = p->length;
			m->access = p->access;
			m->lkey = p->lkey;
			m->rkey = p->rkey;
			break;
		}
		case RBT_EV_CHANNEL_CREATE: {
			const struct rbt_ev_channel_create *p = &ev->u.channel_create;

			if (!rp_is_create_ok(p->ret, p->err, p->channel))
				break;
			if (!RP_GROW(s->ch_h, s->nch, capch))
				goto nomem;
			s->ch_h[s->nch++] = p->channel;
			break;
		}
		case RBT_EV_CQ_CREATE: {
			const struct rbt_ev_cq_create *p = &ev->u.cq_create;

			if (!rp_is_create_ok(p->ret, p->err, p->cq))
				break;
			if (!RP_GROW(s->cq, s->ncq, capcq))
				goto nomem;
			s->cq[s->ncq].h = p->cq;
			s->cq[s->ncq].channel = p->channel;
			s->cq[s->ncq++].rec = *p;
			break;
		}
		case RBT_EV_XRCD_OPEN: {
			const struct rbt_ev_xrcd_open *p = &ev->u.xrcd_open;

			if (!rp_is_create_ok(p->ret, p->err, p->xrcd))
				break;
			if (!RP_GROW(s->xrcd, s->nxrcd, capxrcd))
				goto nomem;
			s->xrcd[s->nxrcd].shared = (int)(int32_t)p->fd >= 0;
			s->xrcd[s->nxrcd++].h = p->xrcd;
			break;
		}
		case RBT_EV_SRQ_CREATE: {
			const struct rbt_ev_srq_create *p = &ev->u.srq_create;
			struct rp_srq *r;

			if (!rp_is_create_ok(p->ret, p->err, p->srq))
				break;
			if (!RP_GROW(s->srq, s->nsrq, capsrq))
				goto nomem;
			r = &s->srq[s->nsrq++];
			r->h = p->srq;
			r->pd = p->pd;
			r->rec = *p;
			/* the latest object of a handle is the one meant */
			for (int k = s->nxrcd - 1; k >= 0 && p->xrcd && !r->xrcdi; k--)
				if (s->xrcd[k].h == p->xrcd)
					r->xrcdi = k + 1;
			for (int k = s->ncq - 1; k >= 0 && p->cq && !r->cqi; k--)
				if (s->cq[k].h == p->cq)
					r->cqi = k + 1;
			break;
		}
		case RBT_EV_QP_CREATE: {
			const struct rbt_ev_qp_create *p = &ev->u.qp_create;
			struct rp_qp *q;

			if (!rp_is_create_ok(p->ret, p->err, p->qp))
				break;
			if (!RP_GROW(s->qp, s->nqp, capqp))
				goto nomem;
			q = &s->qp[s->nqp++];
			q->h = p->qp;
			q->rec = *p;
			for (int k = s->ncq - 1; k >= 0 && !q->scq; k--)
				if (s->cq[k].h == p->send_cq)
					q->scq = k + 1;
			for (int k = s->ncq - 1; k >= 0 && !q->rcq; k--)
				if (s->cq[k].h == p->recv_cq)
					q->rcq = k + 1;
			for (int k = s->nsrq - 1; k >= 0 && p->srq && !q->srqi; k--)
				if (s->srq[k].h == p->srq)
					q->srqi = k + 1;
			for (int k = s->nxrcd - 1; k >= 0 && p->xrcd && !q->xrcdi; k--)
				if (s->xrcd[k].h == p->xrcd)
					q->xrcdi = k + 1;
			q->rec_final_state = IBV_QPS_RESET;
			q->port = 1;
			q->rel_side = -1;
			q->peer_dir = -1;
			break;
		}
		case RBT_EV_AH_CREATE: {
			const struct rbt_ev_ah_create *p = &ev->u.ah_create;
			struct rp_ah *a;

			if (!rp_is_create_ok(p->ret, p->err, p->ah))
				break;
			if (!RP_GROW(s->ah, s->nah, capah))
				goto nomem;
			a = &s->ah[s->nah++];
			a->h = p->ah;
			a->pd = p->pd;
			a->rec = *p;
			if (p->ah_dgid.len == 16)
				memcpy(a->dgid, p->ah_dgid.data, 16);
			a->rec.ah_dgid.data = NULL;
			break;
		}
		case RBT_EV_MW_ALLOC:
			if (!s->mw_use)
				s->mw_use = "ibv_alloc_mw";
			break;
		case RBT_EV_QP_MODIFY:
		case RBT_EV_POST_SEND:
		case RBT_EV_POST_RECV:
		case RBT_EV_POST_SRQ_RECV:
		case RBT_EV_POLL_CQ:
		case RBT_EV_REQ_NOTIFY:
		case RBT_EV_GET_CQ_EVENT:
		case RBT_EV_ASYNC_EVENT:
		case RBT_EV_QP_QUERY: {
			struct rp_step *st;

			if (ev->type == RBT_EV_POST_SEND && !s->mw_use)
				s->mw_use = rp_mw_opcode(&ev->u.post_send);

			/* Empty and failed polls only spun: nothing to reissue. */
			if (ev->type == RBT_EV_POLL_CQ && ev->u.poll_cq.n_wcs == 0)
				break;
			if (!RP_GROW(s->step, s->nstep, capstep))
				goto nomem;
			st = &s->step[s->nstep++];
			if (rp_copy_event(s, &st->ev, ev) < 0)
				goto nomem;
			st->rec_ns = rp_abs_ns(s, ev->ts);
			st->t_issue = seq++;
			st->obj = rp_resolve(s, ev);
			/* An extended poll session (start_poll .. end_poll) may post in
			 * between, as ibv_rc_pingpong -t does: only its first completion
			 * is known to precede those posts; the rest are collected at
			 * end_poll, by a step of their own. */
			if (ev->type == RBT_EV_POLL_CQ && ev->u.poll_cq.api == 1 &&
			    ev->u.poll_cq.n_wcs > 1) {
				struct rp_step *st2;

				if (!RP_GROW(s->step, s->nstep, capstep))
					goto nomem;
				st = &s->step[s->nstep - 1];
				st2 = &s->step[s->nstep++];
				*st2 = *st;
				st->ev.u.poll_cq.n_wcs = 1;
				st2->ev.u.poll_cq.n_wcs--;
				st2->ev.u.poll_cq.wcs++;
				st2->ev.ts = ev->u.poll_cq.ts_exit;
				st2->rec_ns = rp_abs_ns(s, ev->u.poll_cq.ts_exit);
				st2->t_issue = seq++;
			}
			break;
		}
		default:
			break;
		}
	}
	s->stats = *rbt_reader_stats(r);
	if (rc < 0) {
		fprintf(j->log, "rbtrace replay: %s: %s\n", path,
			rbt_reader_error(r)[0] ? rbt_reader_error(r) : rbt_strerror(rc));
		if (!j->o->allow_damaged) {
			rbt_reader_close(r);
			return -EBADMSG;
		}
	}
	if (s->stats.bad_chunks || s->stats.truncated) {
		if (!j->o->allow_damaged) {
			fprintf(j->log,
				"rbtrace replay: %s: trace is damaged (%llu bad "
				"chunks%s; %s); "
				"refusing to replay (--allow-damaged replays the intact "
				"part)\n",
				path, (unsigned long long)s->stats.bad_chunks,
				s->stats.truncated ? ", truncated" : "",
				rbt_reader_error(r));
			rbt_reader_close(r);
			return -EBADMSG;
		}
		fprintf(j->log,
			"rbtrace replay: %s: damaged (%llu bad chunks%s): replaying the "
			"intact part only\n",
			path, (unsigned long long)s->stats.bad_chunks,
			s->stats.truncated ? ", truncated" : "");
	}
	rbt_reader_close(r);

	/* Recorded time order; streams (threads) were written chunk by chunk. */
	if (s->nstep)
		qsort(s->step, (size_t)s->nstep, sizeof(*s->step), rp_step_cmp);
	/* which wr_ids each QP posted to which queue (SRQ receives: every QP on it) */
	for (int i = 0; i < s->nstep; i++) {
		const struct rp_step *st = &s->step[i];
		const struct rbt_event *e = &st->ev;

		if (!st->obj)
			continue;
		if (e->type == RBT_EV_POST_SEND)
			for (uint32_t k = 0; k < e->u.post_send.n_wrs; k++)
				rp_idset_add(&s->qp[st->obj - 1].send_ids,
					     e->u.post_send.wrs[k].wr_id);
		else if (e->type == RBT_EV_POST_RECV)
			for (uint32_t k = 0; k < e->u.post_recv.n_wrs; k++)
				rp_idset_add(&s->qp[st->obj - 1].recv_ids,
					     e->u.post_recv.wrs[k].wr_id);
		else if (e->type == RBT_EV_POST_SRQ_RECV)
			for (int q = 0; q < s->nqp; q++)
				if (s->qp[q].srqi == st->obj ||
				    (s->qp[q].rec.qp_type == IBV_QPT_XRC_RECV &&
				     s->qp[q].xrcdi &&
				     s->qp[q].xrcdi == s->srq[st->obj - 1].xrcdi))
					for (uint32_t k = 0; k < e->u.post_srq_recv.n_wrs;
					     k++)
						rp_idset_add(
							&s->qp[q].recv_ids,
							e->u.post_srq_recv.wrs[k].wr_id);
	}
	for (int q = 0; q < s->nqp; q++) {
		rp_idset_seal(&s->qp[q].send_ids);
		rp_idset_seal(&s->qp[q].recv_ids);
	}
	for (int i = 0; i < s->nstep; i++) {
		struct rp_step *st = &s->step[i];
		const struct rbt_event *e = &st->ev;

		st->t_issue = 0;
		switch (e->type) {
		case RBT_EV_QP_MODIFY: {
			const struct rbt_ev_qp_modify *m = &e->u.qp_modify;
			struct rp_qp *q = st->obj ? &s->qp[st->obj - 1] : NULL;

			st->qp = q;
			st->rec_exit_ns = rp_abs_ns(s, m->ts_exit);
			if (!q || m->ret != 0)
				break;
			if (m->attr_mask & IBV_QP_STATE)
				q->rec_final_state = (uint32_t)m->qp_state;
			if (m->attr_mask & IBV_QP_PORT)
				q->port = (uint32_t)m->port_num;
			if (m->attr_mask & IBV_QP_DEST_QPN) {
				q->rec_dest_qpn = (uint32_t)m->dest_qp_num;
				q->has_dest = 1;
			}
			if (m->attr_mask & IBV_QP_SQ_PSN)
				q->rec_sq_psn = (uint32_t)m->sq_psn;
			if (m->attr_mask & IBV_QP_RQ_PSN)
				q->rec_rq_psn = (uint32_t)m->rq_psn;
			if (m->attr_mask & IBV_QP_PATH_MTU)
				q->rec_path_mtu = (uint32_t)m->path_mtu;
			if (m->attr_mask & IBV_QP_MAX_QP_RD_ATOMIC)
				q->rec_max_rd_atomic = (uint32_t)m->max_rd_atomic;
			if (m->attr_mask & IBV_QP_AV) {
				q->is_global = (int)m->ah_is_global;
				q->sgid_index = (uint32_t)m->ah_sgid_index;
			}
			if ((m->attr_mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
			    (int)m->max_rd_atomic > s->max_rd_atomic)
				s->max_rd_atomic = (int)m->max_rd_atomic;
			break;
		}
		case RBT_EV_POST_SEND: {
			const struct rbt_ev_post_send *p = &e->u.post_send;

			st->qp = st->obj ? &s->qp[st->obj - 1] : NULL;
			st->rec_exit_ns = rp_abs_ns(s, p->ts_exit);
			for (uint32_t k = 0; k < p->n_wrs; k++)
				if (p->wrs[k].opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
				    p->wrs[k].opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
					s->uses_atomics = 1;
			break;
		}
		case RBT_EV_POST_RECV:
			st->qp = st->obj ? &s->qp[st->obj - 1] : NULL;
			st->rec_exit_ns = rp_abs_ns(s, e->u.post_recv.ts_exit);
			break;
		case RBT_EV_POST_SRQ_RECV:
			st->srq = st->obj ? &s->srq[st->obj - 1] : NULL;
			st->rec_exit_ns = rp_abs_ns(s, e->u.post_srq_recv.ts_exit);
			break;
		case RBT_EV_POLL_CQ: {
			const struct rbt_ev_poll_cq *p = &e->u.poll_cq;

			st->cq = st->obj ? &s->cq[st->obj - 1] : NULL;
			st->rec_exit_ns = rp_abs_ns(s, p->ts_exit);
			for (uint32_t k = 0; k < p->n_wcs; k++) {
				const struct rbt_wc *w = &p->wcs[k];
				struct rp_qp *q =
					rp_qp_by_rec_qpn(s, (uint32_t)w->qp_num);
				struct rp_wcrec wr = {
					.wr_id = w->wr_id,
					.status = (uint32_t)w->status,
					.opcode = (uint32_t)w->opcode,
					.byte_len = (uint32_t)w->byte_len,
					.imm = (uint32_t)w->imm_data,
					.wc_flags = (uint32_t)w->wc_flags,
					/* an extended poll records what the app read:
					 * byte_len may not be among it */
					.no_len = (uint8_t)(st->cq && st->cq->rec.ex &&
							    !w->byte_len),
				};

				/* a TGT QP of another process in our XRC domain */
				if (!q && st->cq && w->qp_num) {
					q = rp_xqp_get(s, st->obj, (uint32_t)w->qp_num);
					if (q) {
						rp_wclist_push(&q->rec_wc[1], &wr);
						continue;
					}
				}
				/* ... nor the QP number: a CQ of one QP says it */
				if (!q && st->cq)
					q = rp_only_qp_of_cq(s, st->obj);
				if (!q)
					continue;
				rp_wclist_push(
					&q->rec_wc[rp_wc_is_recv(q, wr.status, wr.opcode,
								 wr.wr_id)],
					&wr);
				/* an error, flushes included, means the QP is in ERR */
				if (wr.status != IBV_WC_SUCCESS) {
					q->rec_err_wc = 1;
					q->rec_final_state = IBV_QPS_ERR;
				}
			}
			break;
		}
		case RBT_EV_REQ_NOTIFY:
			st->cq = st->obj ? &s->cq[st->obj - 1] : NULL;
			break;
		case RBT_EV_QP_QUERY: {
			/* what the device said the state was: evidence, never reissued */
			const struct rbt_ev_qp_query *qq = &e->u.qp_query;
			struct rp_qp *q = st->obj ? &s->qp[st->obj - 1] : NULL;

			st->skipped = 1;
			if (q && qq->ret == 0 && (qq->attr_mask & IBV_QP_STATE))
				q->rec_final_state = (uint32_t)qq->qp_state;
			break;
		}
		case RBT_EV_ASYNC_EVENT: {
			/* only evidence of a QP's fate: never reissued */
			uint64_t t = e->u.async_event.event_type;
			struct rp_qp *q = st->obj ? &s->qp[st->obj - 1] : NULL;

			st->skipped = 1;
			if (q && (t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR ||
				  t == IBV_EVENT_QP_ACCESS_ERR))
				q->rec_final_state = IBV_QPS_ERR;
			break;
		}
		case RBT_EV_GET_CQ_EVENT:
			st->cq = st->obj ? &s->cq[st->obj - 1] : NULL;
			st->rec_exit_ns = rp_abs_ns(s, e->u.get_cq_event.ts_exit);
			break;
		}
	}
	/* The prefix runs before the start barrier: creating, connecting and
	 * pre-posting receives, up to the first step that needs the peer. */
	for (s->prefix = 0; s->prefix < s->nstep; s->prefix++) {
		uint32_t t = s->step[s->prefix].ev.type;

		if (t == RBT_EV_POST_SEND || t == RBT_EV_POLL_CQ ||
		    t == RBT_EV_GET_CQ_EVENT)
			break;
	}
	if (s->nstep)
		s->rec_epoch_ns =
			s->step[s->prefix < s->nstep ? s->prefix : s->nstep - 1].rec_ns;
	return 0;
nomem:
	rbt_reader_close(r);
	fprintf(j->log, "rbtrace replay: %s: out of memory while loading\n", path);
	return -ENOMEM;
}

void rp_side_free(struct rp_side *s)
{
	for (size_t i = 0; i < s->nallocs; i++)
		free(s->allocs[i]);
	free(s->allocs);
	for (int i = 0; i < s->nqp; i++) {
		for (int k = 0; k < 2; k++) {
			free(s->qp[i].rec_wc[k].v);
			free(s->qp[i].rep_wc[k].v);
		}
		free(s->qp[i].send_ids.v);
		free(s->qp[i].recv_ids.v);
	}
	for (int i = 0; i < s->nstep; i++)
		free(s->step[i].wcs);
	free(s->pd_h);
	free(s->pd);
	free(s->mr);
	free(s->ch_h);
	free(s->ch);
	for (int i = 0; i < s->ncq; i++)
		free(s->cq[i].stash);
	free(s->cq);
	for (int i = 0; i < s->nxqp; i++)
		for (int k = 0; k < 2; k++) {
			free(s->xqp[i].rec_wc[k].v);
			free(s->xqp[i].rep_wc[k].v);
		}
	free(s->xqp);
	free(s->srq);
	free(s->xrcd);
	free(s->qp);
	free(s->ah);
	free(s->step);
	memset(s, 0, sizeof(*s));
}
