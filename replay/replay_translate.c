/* replay_translate.c - turns recorded work into work on the replayed resources,
 * before the start barrier: pairs each connected QP with its peer in the
 * directory, creates the address handles (UD), and translates every recorded
 * work request: local buffers to (replayed MR, offset), remote addresses and
 * rkeys to the peer's replayed MR, XRC SRQ numbers and UD QP numbers to the
 * replayed ones.
 *
 * Must never touch memory outside the MRs it registered: what fits no MR is
 * pointed at scratch memory of the replayer's own (inline data) or posted with
 * a key no replayed MR has (so the device refuses it as it did when recorded).
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "replay/replay_int.h"

/* An XRC_SEND names the receiving SRQ by its number on the peer: the one of the
 * side its QP is connected to (SRQ numbers of two hosts can coincide), else
 * any side's. A number no trace has is replaced by one no replayed SRQ has, so
 * the device refuses the send as it did in the recording. */
static uint32_t rp_map_srqn(struct rp_job *j, struct rp_side *s, const struct rp_qp *q,
			    uint32_t rec_srqn, int post_idx)
{
	const struct rp_dir_srq *any = NULL;
	uint32_t n;

	for (int i = 0; i < j->dir.nsrq; i++) {
		const struct rp_dir_srq *d = &j->dir.srqs[i];

		if (d->rec_srqn != rec_srqn)
			continue;
		if (d->side == q->rel_side)
			return d->new_srqn;
		if (!any)
			any = d;
	}
	if (any)
		return any->new_srqn;
	n = 0xfff000u | (rec_srqn & 0xfffu);
	for (int again = 1; again;) {
		again = 0;
		for (int i = 0; i < j->dir.nsrq; i++)
			if (j->dir.srqs[i].new_srqn == n) {
				n = ((n + 1) & 0xfffu) | 0xfff000u;
				again = 1;
			}
	}
	fprintf(j->log,
		"rbtrace replay: %s: step %d: XRC send to SRQ %u, which is in no trace: "
		"replayed to SRQ %u, which does not exist either\n",
		s->path, post_idx, rec_srqn, n);
	return n;
}

/* The peer of a connected QP: the directory QP whose recorded number is our
 * recorded destination, preferably one that names us back and lives elsewhere. */
static int rp_find_peer(struct rp_job *j, const struct rp_side *s, const struct rp_qp *q)
{
	int best = -1, best_score = -1;

	for (int i = 0; i < j->dir.nqp; i++) {
		const struct rp_dir_qp *d = &j->dir.qps[i];
		int score = 0;

		if (d->rec_qpn != q->rec_dest_qpn)
			continue;
		if (d->side == s->idx && d->rec_qpn == (uint32_t)q->rec.qp_num)
			continue;
		if (d->rec_dest == (uint32_t)q->rec.qp_num)
			score += 2;
		if (d->side != s->idx)
			score += 1;
		if (score > best_score) {
			best = i;
			best_score = score;
		}
	}
	return best;
}

static const struct rp_dir_qp *rp_dir_qp_by_rec(struct rp_job *j, int prefer_not_side,
						uint32_t rec_qpn)
{
	const struct rp_dir_qp *any = NULL;

	for (int i = 0; i < j->dir.nqp; i++)
		if (j->dir.qps[i].rec_qpn == rec_qpn) {
			if (j->dir.qps[i].side != prefer_not_side)
				return &j->dir.qps[i];
			any = &j->dir.qps[i];
		}
	return any;
}

static const struct rp_dir_qp *rp_dir_qp_by_lid(struct rp_job *j, uint32_t rec_lid)
{
	for (int i = 0; i < j->dir.nqp; i++)
		if (j->dir.qps[i].rec_lid == rec_lid)
			return &j->dir.qps[i];
	return NULL;
}

/* ---- translating work requests -------------------------------------------------- */
static uint32_t rp_unused_lkey(const struct rp_side *s)
{
	uint32_t k = 0x7ffe0001u;

	for (int again = 1; again;) {
		again = 0;
		for (int i = 0; i < s->nmr; i++)
			if (s->mr[i].mr &&
			    (s->mr[i].mr->lkey == k || s->mr[i].mr->rkey == k)) {
				k += 0x101;
				again = 1;
			}
	}
	return k;
}

/* Scratch memory of the replayer's own, for inline data that came from outside
 * every MR and for local addresses that fit no MR. */
static uint8_t *rp_scratch(struct rp_side *s, size_t n)
{
	uint8_t *p;

	if (s->inline_used + n > s->inline_cap) {
		/* Old scratch stays referenced by prepared WRs: park it in the arena. */
		size_t cap = n > 65536 ? n : 65536;

		p = rp_alloc(s, cap);
		if (!p)
			return NULL;
		s->inline_pool = NULL;
		s->inline_cap = cap;
		s->inline_used = 0;
		s->inline_pool = p;
	}
	p = s->inline_pool + s->inline_used;
	s->inline_used += n;
	rp_pattern(p, n, 99);
	return p;
}

static int rp_map_sge(struct rp_job *j, struct rp_side *s, const struct rbt_sge *in,
		      struct ibv_sge *out, int is_inline, int is_recv, int post_idx)
{
	for (int i = s->nmr - 1; i >= 0; i--) {
		const struct rp_mr *m = &s->mr[i];

		if (m->lkey != in->lkey && !is_inline)
			continue;
		if (in->addr < m->addr || in->addr + in->length > m->addr + m->length)
			continue;
		out->addr = (uint64_t)(uintptr_t)m->buf + (in->addr - m->addr);
		out->length = (uint32_t)in->length;
		out->lkey = m->mr->lkey;
		return 0;
	}
	/* A receive buffer that begins in its MR and runs past the end: a NIC
	 * checks only the bytes a message writes (rdma_bench's ws-sequencer
	 * posts 4096-byte receives at 64-byte strides of a 4096-byte MR), so
	 * the recorded post worked. Posted up to the MR's end: a message that
	 * would have written past it fails as it would have there. */
	for (int i = s->nmr - 1; i >= 0 && is_recv; i--) {
		const struct rp_mr *m = &s->mr[i];

		if (m->lkey != in->lkey || in->addr < m->addr ||
		    in->addr >= m->addr + m->length || !m->mr)
			continue;
		out->addr = (uint64_t)(uintptr_t)m->buf + (in->addr - m->addr);
		out->length = (uint32_t)(m->addr + m->length - in->addr);
		out->lkey = m->mr->lkey;
		return 0;
	}
	/* Outside every MR: inline data is copied by the device at post time, so a
	 * private buffer is as good; otherwise the post is meant to fail. */
	out->addr = (uint64_t)(uintptr_t)rp_scratch(s, in->length ? in->length : 1);
	out->length = (uint32_t)in->length;
	if (!out->addr)
		return -ENOMEM;
	if (is_inline) {
		out->lkey = 0;
		return 0;
	}
	out->lkey = rp_unused_lkey(s);
	rp_diverge(j,
		   "%s: step %d: local buffer 0x%llx+%llu (lkey 0x%llx) lies in no "
		   "recorded MR: posted with an invalid lkey into scratch memory",
		   s->path, post_idx, (unsigned long long)in->addr,
		   (unsigned long long)in->length, (unsigned long long)in->lkey);
	return 0;
}

static void rp_map_remote(struct rp_job *j, struct rp_side *s, struct rp_qp *q,
			  uint64_t raddr, uint32_t rkey, uint64_t len, uint64_t *naddr,
			  uint32_t *nrkey, int post_idx)
{
	const struct rp_dir_mr *hit = NULL;
	int key_known = 0;

	for (int i = 0; i < j->dir.nmr; i++) {
		const struct rp_dir_mr *d = &j->dir.mrs[i];

		if (q->rel_side >= 0 && d->side != q->rel_side)
			continue;
		if (d->rec_rkey != rkey)
			continue;
		key_known = 1;
		if (raddr >= d->rec_addr && raddr + len <= d->rec_addr + d->len) {
			hit = d;
			break;
		}
	}
	if (hit) {
		*naddr = hit->new_addr + (raddr - hit->rec_addr);
		*nrkey = hit->new_rkey;
		return;
	}
	/* A recorded access the peer would refuse: reproduce the refusal with a key
	 * no replayed MR has, so no memory is ever touched. */
	*naddr = 0;
	*nrkey = 0x7fff0000u | (rkey & 0xffffu);
	for (int again = 1; again;) {
		again = 0;
		for (int i = 0; i < j->dir.nmr; i++)
			if (j->dir.mrs[i].new_rkey == *nrkey) {
				*nrkey += 0x10001;
				again = 1;
			}
	}
	fprintf(j->log,
		"rbtrace replay: %s: step %d: remote 0x%llx+%llu rkey 0x%x %s: replayed "
		"with an invalid rkey (the recorded access would fail too)\n",
		s->path, post_idx, (unsigned long long)raddr, (unsigned long long)len,
		rkey,
		key_known ? "lies outside the peer's MR" : "names no MR of the peer");
}

/* Each connected QP to its peer in the directory. */
static int rp_pair_qps(struct rp_job *j, struct rp_side *s)
{
	for (int i = 0; i < s->nqp; i++) {
		struct rp_qp *q = &s->qp[i];

		if (!q->has_dest || q->rec.qp_type == IBV_QPT_UD)
			continue;
		q->peer_dir = rp_find_peer(j, s, q);
		if (q->peer_dir < 0) {
			return rp_fail(j, -EINVAL,
				       "%s: QP %llu: its peer QP %u is in no trace and "
				       "no peer published it",
				       s->path, (unsigned long long)q->rec.qp_num,
				       q->rec_dest_qpn);
		}
		q->rel_side = j->dir.qps[q->peer_dir].side;
	}
	return 0;
}

/* TGT QPs of other processes that delivered into our XRC SRQs. */
static int rp_pair_xqps(struct rp_job *j, struct rp_side *s)
{
	for (int i = 0; i < s->nxqp; i++) {
		struct rp_qp *x = &s->xqp[i];

		for (int k = 0; k < j->dir.nqp && x->peer_dir < 0; k++)
			if (j->dir.qps[k].side != s->idx &&
			    j->dir.qps[k].type == IBV_QPT_XRC_RECV &&
			    j->dir.qps[k].rec_qpn == (uint32_t)x->rec.qp_num)
				x->peer_dir = k;
		if (x->peer_dir < 0) {
			return rp_fail(j, -EINVAL,
				       "%s: XRC receives came through QP %llu of another "
				       "process, which is in no trace",
				       s->path, (unsigned long long)x->rec.qp_num);
		}
		x->foreign_new_qpn = j->dir.qps[x->peer_dir].new_qpn;
		x->rel_side = j->dir.qps[x->peer_dir].side;
	}
	return 0;
}

/* Address handles (UD), to the peer's replayed LID and GID. */
static int rp_build_ahs(struct rp_job *j, struct rp_side *s)
{
	for (int i = 0; i < s->nah; i++) {
		struct rp_ah *a = &s->ah[i];
		const struct rp_dir_qp *d = rp_dir_qp_by_lid(j, (uint32_t)a->rec.ah_dlid);
		struct ibv_ah_attr aa = {
			.dlid = (uint16_t)(d ? d->lid : a->rec.ah_dlid),
			.sl = (uint8_t)a->rec.ah_sl,
			.src_path_bits = (uint8_t)a->rec.ah_src_path_bits,
			.static_rate = (uint8_t)a->rec.ah_static_rate,
			.is_global = (uint8_t)a->rec.ah_is_global,
			.port_num =
				(uint8_t)(a->rec.ah_port_num ? a->rec.ah_port_num : 1),
		};
		struct ibv_pd *pd = rp_pd_by_h(s, a->pd);

		if (aa.is_global) {
			memcpy(aa.grh.dgid.raw, d ? d->gid : a->dgid, 16);
			aa.grh.flow_label = (uint32_t)a->rec.ah_flow_label;
			aa.grh.sgid_index = (uint8_t)a->rec.ah_sgid_index;
			aa.grh.hop_limit = (uint8_t)a->rec.ah_hop_limit;
			aa.grh.traffic_class = (uint8_t)a->rec.ah_traffic_class;
		}
		a->ah = pd ? ibv_create_ah(pd, &aa) : NULL;
		if (!a->ah) {
			return rp_fail(j, -EIO,
				       "%s: creating an address handle failed: %s",
				       s->path, strerror(errno));
		}
	}
	return 0;
}

/* Where a recorded remote access or XRC/UD destination goes on the replay. */
static void rp_translate_dest(struct rp_job *j, struct rp_side *s, struct rp_step *st,
			      int i, const struct rbt_send_wr *r, struct ibv_send_wr *o,
			      uint64_t len)
{
	switch (r->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		rp_map_remote(j, s, st->qp, r->remote_addr, (uint32_t)r->rkey, len,
			      &o->wr.rdma.remote_addr, &o->wr.rdma.rkey, i);
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		rp_map_remote(j, s, st->qp, r->remote_addr, (uint32_t)r->rkey, 8,
			      &o->wr.atomic.remote_addr, &o->wr.atomic.rkey, i);
		o->wr.atomic.compare_add = r->compare_add;
		o->wr.atomic.swap = r->swap;
		break;
	default:
		break;
	}
	if (st->qp->rec.qp_type == IBV_QPT_XRC_SEND)
		o->qp_type.xrc.remote_srqn =
			rp_map_srqn(j, s, st->qp, (uint32_t)r->remote_qpn, i);
	if (st->qp->rec.qp_type == IBV_QPT_UD) {
		struct rp_ah *a = rp_ah_by_h(s, r->ah);
		const struct rp_dir_qp *d =
			rp_dir_qp_by_rec(j, s->idx, (uint32_t)r->remote_qpn);

		o->wr.ud.ah = a ? a->ah : NULL;
		o->wr.ud.remote_qpn = d ? d->new_qpn : (uint32_t)r->remote_qpn;
		o->wr.ud.remote_qkey = (uint32_t)r->remote_qkey;
		if (!a) {
			st->skipped = 1;
			rp_diverge(j,
				   "%s: step %d: UD send names an unknown address "
				   "handle: skipped",
				   s->path, i);
		}
	}
}

/* A recorded ibv_post_send as a chain of ibv_send_wr on the replayed QP. */
static int rp_translate_send(struct rp_job *j, struct rp_side *s, struct rp_step *st,
			     int i)
{
	const struct rbt_ev_post_send *p = &st->ev->u.post_send;
	uint32_t nsge = 0, k = 0;

	if (!st->qp || !st->qp->qp) {
		st->skipped = 1;
		return 0;
	}
	for (uint32_t w = 0; w < p->n_wrs; w++)
		nsge += p->wrs[w].n_sges;
	st->nwr = p->n_wrs;
	st->swr = rp_alloc(s, p->n_wrs * sizeof(*st->swr));
	st->sges = rp_alloc(s, nsge * sizeof(*st->sges));
	if (!st->swr || !st->sges)
		return -ENOMEM;
	for (uint32_t w = 0; w < p->n_wrs; w++) {
		const struct rbt_send_wr *r = &p->wrs[w];
		struct ibv_send_wr *o = &st->swr[w];
		uint64_t len = 0;
		int inl = (r->send_flags & IBV_SEND_INLINE) != 0;

		o->wr_id = r->wr_id;
		o->next = w + 1 < p->n_wrs ? &st->swr[w + 1] : NULL;
		o->sg_list = &st->sges[k];
		o->num_sge = (int)r->n_sges;
		o->opcode = (enum ibv_wr_opcode)r->opcode;
		o->send_flags = (unsigned)r->send_flags;
		o->imm_data = htobe32((uint32_t)r->imm_data);
		for (uint32_t g = 0; g < r->n_sges; g++, k++) {
			if (rp_map_sge(j, s, &r->sges[g], &st->sges[k], inl, 0, i))
				return -ENOMEM;
			len += r->sges[g].length;
		}
		rp_translate_dest(j, s, st, i, r, o, len);
	}
	return 0;
}

/* A recorded ibv_post_recv or ibv_post_srq_recv as a chain of ibv_recv_wr. */
static int rp_translate_recv(struct rp_job *j, struct rp_side *s, struct rp_step *st,
			     int i)
{
	const struct rbt_event *e = st->ev;
	int srq = e->type == RBT_EV_POST_SRQ_RECV;
	uint32_t n = srq ? e->u.post_srq_recv.n_wrs : e->u.post_recv.n_wrs;
	const struct rbt_recv_wr *wrs = srq ? e->u.post_srq_recv.wrs : e->u.post_recv.wrs;
	uint32_t nsge = 0, k = 0;

	if (srq ? !st->srq || !st->srq->srq : !st->qp || !st->qp->qp) {
		st->skipped = 1;
		return 0;
	}
	for (uint32_t w = 0; w < n; w++)
		nsge += wrs[w].n_sges;
	st->nwr = n;
	st->rwr = rp_alloc(s, n * sizeof(*st->rwr));
	st->sges = rp_alloc(s, nsge * sizeof(*st->sges));
	if (!st->rwr || !st->sges)
		return -ENOMEM;
	for (uint32_t w = 0; w < n; w++) {
		struct ibv_recv_wr *o = &st->rwr[w];

		o->wr_id = wrs[w].wr_id;
		o->next = w + 1 < n ? &st->rwr[w + 1] : NULL;
		o->sg_list = &st->sges[k];
		o->num_sge = (int)wrs[w].n_sges;
		for (uint32_t g = 0; g < wrs[w].n_sges; g++, k++)
			if (rp_map_sge(j, s, &wrs[w].sges[g], &st->sges[k], 0, 1, i))
				return -ENOMEM;
	}
	return 0;
}

/* One step made ready to run; a step whose object was never rebuilt is skipped. */
static int rp_translate_step(struct rp_job *j, struct rp_side *s, struct rp_step *st,
			     int i)
{
	switch (st->ev->type) {
	case RBT_EV_POST_SEND:
		return rp_translate_send(j, s, st, i);
	case RBT_EV_POST_RECV:
	case RBT_EV_POST_SRQ_RECV:
		return rp_translate_recv(j, s, st, i);
	case RBT_EV_POLL_CQ:
		if (!st->cq || !st->cq->cq) {
			st->skipped = 1;
			return 0;
		}
		/* written on the hot path: touch the pages now, not there
		 * (calloc could hand out untouched zero pages) */
		st->wcs = malloc(st->ev->u.poll_cq.n_wcs * sizeof(*st->wcs));
		if (!st->wcs)
			return -ENOMEM;
		memset(st->wcs, 0, st->ev->u.poll_cq.n_wcs * sizeof(*st->wcs));
		return 0;
	case RBT_EV_QP_MODIFY:
		if (!st->qp || !st->qp->qp)
			st->skipped = 1;
		return 0;
	case RBT_EV_REQ_NOTIFY:
	case RBT_EV_GET_CQ_EVENT:
		if (!st->cq || !st->cq->cq)
			st->skipped = 1;
		return 0;
	default:
		return 0;
	}
}

int rp_prepare_side(struct rp_job *j, struct rp_side *s)
{
	int rc;

	if ((rc = rp_pair_qps(j, s)) || (rc = rp_pair_xqps(j, s)) ||
	    (rc = rp_build_ahs(j, s)))
		return rc;
	for (int i = 0; i < s->nstep; i++)
		if ((rc = rp_translate_step(j, s, &s->step[i], i)))
			return rc;
	return 0;
}
