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
		s->path, rp_step_no(s, post_idx), rec_srqn, n);
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

/* A key of st known only when its MR is registered (mid-run): filled at post
 * time. Room for every SGE and WR of the step is made on the first. */
static int rp_fix_add(struct rp_side *s, struct rp_step *st, uint32_t *dst,
		      const struct rp_mr *m, int remote, uint32_t room)
{
	if (!st->fix && !(st->fix = rp_alloc(s, room * sizeof(*st->fix))))
		return -ENOMEM;
	if (st->nfix < room)
		st->fix[st->nfix++] = (struct rp_fix){ dst, m, remote };
	return 0;
}

/* Whether the recording's MR m was alive at t (abs ns). */
static int rp_mr_alive(const struct rp_mr *m, uint64_t t)
{
	return t >= m->t_reg && t < m->t_dead;
}

static int rp_map_sge(struct rp_job *j, struct rp_side *s, const struct rbt_sge *in,
		      struct ibv_sge *out, int is_inline, int is_recv, int post_idx,
		      struct rp_step *st, uint32_t room)
{
	/* the MR alive at the post first (keys and addresses get reused after a
	 * dereg), then any (a trace whose registration is not in it) */
	for (int pass = 0; pass < 2; pass++)
		for (int i = s->nmr - 1; i >= 0; i--) {
			const struct rp_mr *m = &s->mr[i];

			if (m->lkey != in->lkey && !is_inline)
				continue;
			if (in->addr < m->addr ||
			    in->addr + in->length > m->addr + m->length)
				continue;
			if (!pass && !rp_mr_alive(m, st->rec_ns))
				continue;
			out->addr = (uint64_t)(uintptr_t)m->buf + (in->addr - m->addr);
			out->length = (uint32_t)in->length;
			if (!m->dynamic) {
				out->lkey = m->mr ? m->mr->lkey : rp_unused_lkey(s);
				return 0;
			}
			out->lkey = 0;
			return rp_fix_add(s, st, &out->lkey, m, 0, room);
		}
	/* A receive buffer that begins in its MR and runs past the end: a NIC
	 * checks only the bytes a message writes (rdma_bench's ws-sequencer
	 * posts 4096-byte receives at 64-byte strides of a 4096-byte MR), so
	 * the recorded post worked. Posted up to the MR's end: a message that
	 * would have written past it fails as it would have there. */
	for (int i = s->nmr - 1; i >= 0 && is_recv; i--) {
		const struct rp_mr *m = &s->mr[i];

		if (m->lkey != in->lkey || in->addr < m->addr ||
		    in->addr >= m->addr + m->length || (!m->mr && !m->dynamic))
			continue;
		out->addr = (uint64_t)(uintptr_t)m->buf + (in->addr - m->addr);
		out->length = (uint32_t)(m->addr + m->length - in->addr);
		if (!m->dynamic) {
			out->lkey = m->mr->lkey;
			return 0;
		}
		out->lkey = 0;
		return rp_fix_add(s, st, &out->lkey, m, 0, room);
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
		   s->path, rp_step_no(s, post_idx), (unsigned long long)in->addr,
		   (unsigned long long)in->length, (unsigned long long)in->lkey);
	return 0;
}

static int rp_map_remote(struct rp_job *j, struct rp_side *s, struct rp_qp *q,
			 uint64_t raddr, uint32_t rkey, uint64_t len, uint64_t *naddr,
			 uint32_t *nrkey, int post_idx, struct rp_step *st, uint32_t room)
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
			/* an MR of this process: the one alive at the post */
			if (!hit || (d->live && j->same_clock &&
				     rp_mr_alive(d->live, st->rec_ns)))
				hit = d;
			if (!d->live || !j->same_clock ||
			    rp_mr_alive(d->live, st->rec_ns))
				break;
		}
	}
	if (hit) {
		*naddr = hit->new_addr + (raddr - hit->rec_addr);
		*nrkey = hit->new_rkey;
		if (hit->live && hit->live->dynamic)
			return rp_fix_add(s, st, nrkey, hit->live, 1, room);
		return 0;
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
		s->path, rp_step_no(s, post_idx), (unsigned long long)raddr,
		(unsigned long long)len, rkey,
		key_known ? "lies outside the peer's MR" : "names no MR of the peer");
	return 0;
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

/* The replayed key of a recorded rkey of side `side` (an MR's, or a key a
 * window of it was bound with), for an invalidation; a key no side had is
 * replaced by one no replayed MR or window has, so the invalidation fails as
 * it did when recorded. */
static uint32_t rp_map_key(struct rp_job *j, int side, uint32_t rkey)
{
	uint32_t n;

	for (int i = 0; i < j->dir.nmr; i++)
		if (j->dir.mrs[i].rec_rkey == rkey &&
		    (side < 0 || j->dir.mrs[i].side == side))
			return j->dir.mrs[i].new_rkey;
	n = 0x7fff0000u | (rkey & 0xffffu);
	for (int again = 1; again;) {
		again = 0;
		for (int i = 0; i < j->dir.nmr; i++)
			if (j->dir.mrs[i].new_rkey == n) {
				n += 0x10001;
				again = 1;
			}
	}
	return n;
}

/* A BIND_MW work request onto the replayed window and MR: posted (type 2),
 * or made the step's ibv_bind_mw (type 1, the only WR of its post). 1 when
 * the window is in no trace (the step is skipped, with a divergence). */
static int rp_translate_bind(struct rp_job *j, struct rp_side *s, struct rp_step *st,
			     int i, uint32_t w, struct ibv_send_wr *o)
{
	const struct rbt_send_wr *r = &st->ev->u.post_send.wrs[w];
	const struct rp_bindref *b = st->binds ? &st->binds[w] : NULL;
	struct rp_mw *mw = b && b->mw ? &s->mw[b->mw - 1] : NULL;
	const struct rp_mr *m = b && b->mr ? &s->mr[b->mr - 1] : NULL;
	struct ibv_mw_bind_info bi = { 0 };

	if (!mw || !mw->mw) {
		rp_diverge(j,
			   "%s: step %d: BIND_MW names a memory window the trace "
			   "never allocated: skipped",
			   s->path, rp_step_no(s, i));
		return 1;
	}
	if (m && m->mr) {
		bi.mr = m->mr;
		bi.addr = (uint64_t)(uintptr_t)m->buf + (r->remote_addr - m->iova);
	}
	bi.length = r->compare_add;
	bi.mw_access_flags = (unsigned)r->swap;
	if (mw->type == IBV_MW_TYPE_1 && st->ev->u.post_send.n_wrs == 1) {
		st->bind1 = rp_alloc(s, sizeof(*st->bind1));
		if (!st->bind1)
			return -ENOMEM;
		st->bind1->wr_id = r->wr_id;
		st->bind1->send_flags = (unsigned)r->send_flags;
		st->bind1->bind_info = bi;
		st->bind1_mw = mw;
		return 0;
	}
	o->bind_mw.mw = mw->mw;
	o->bind_mw.rkey = rp_mw_key(mw, (uint32_t)r->rkey);
	o->bind_mw.bind_info = bi;
	return 0;
}

/* Where a recorded remote access or XRC/UD destination goes on the replay. */
static int rp_translate_dest(struct rp_job *j, struct rp_side *s, struct rp_step *st,
			     int i, const struct rbt_send_wr *r, struct ibv_send_wr *o,
			     uint64_t len, uint32_t room)
{
	int rc = 0;

	switch (r->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		rc = rp_map_remote(j, s, st->qp, r->remote_addr, (uint32_t)r->rkey, len,
				   &o->wr.rdma.remote_addr, &o->wr.rdma.rkey, i, st,
				   room);
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		rc = rp_map_remote(j, s, st->qp, r->remote_addr, (uint32_t)r->rkey, 8,
				   &o->wr.atomic.remote_addr, &o->wr.atomic.rkey, i, st,
				   room);
		o->wr.atomic.compare_add = r->compare_add;
		o->wr.atomic.swap = r->swap;
		break;
	default:
		break;
	}
	if (rc)
		return rc;
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
				   s->path, rp_step_no(s, i));
		}
	}
	return 0;
}

/* A recorded ibv_post_send as a chain of ibv_send_wr on the replayed QP. */
static int rp_translate_send(struct rp_job *j, struct rp_side *s, struct rp_step *st,
			     int i)
{
	const struct rbt_ev_post_send *p = &st->ev->u.post_send;
	uint32_t nsge = 0, k = 0;

	if (!st->qp || (!st->qp->qp && !st->qp->dynamic)) {
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
		if (r->payload.len)
			st->payloads = 1;
		for (uint32_t g = 0; g < r->n_sges; g++, k++) {
			if (rp_map_sge(j, s, &r->sges[g], &st->sges[k], inl, 0, i, st,
				       nsge + p->n_wrs))
				return -ENOMEM;
			len += r->sges[g].length;
		}
		if (rp_translate_dest(j, s, st, i, r, o, len, nsge + p->n_wrs))
			return -ENOMEM;
		/* memory windows: the window and MR bound, the keys invalidated
		 * (the local side's, or the peer's for SEND_WITH_INV) */
		if (r->opcode == IBV_WR_BIND_MW) {
			int rc = rp_translate_bind(j, s, st, i, w, o);

			if (rc < 0)
				return rc;
			if (rc)
				st->skipped = 1;
		} else if (r->opcode == IBV_WR_LOCAL_INV) {
			o->invalidate_rkey = rp_map_key(j, s->idx, (uint32_t)r->imm_data);
		} else if (r->opcode == IBV_WR_SEND_WITH_INV) {
			o->invalidate_rkey =
				rp_map_key(j, st->qp->rel_side, (uint32_t)r->imm_data);
		}
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

	if (srq ? !st->srq || !st->srq->srq
		: !st->qp || (!st->qp->qp && !st->qp->dynamic)) {
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
			if (rp_map_sge(j, s, &wrs[w].sges[g], &st->sges[k], 0, 1, i, st,
				       nsge))
				return -ENOMEM;
	}
	return 0;
}

/* One step made ready to run; a step whose object was never rebuilt is skipped. */
static int rp_translate_step(struct rp_job *j, struct rp_side *s, struct rp_step *st,
			     int i)
{
	switch (st->type) {
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
		/* written on the hot path: rp_alloc touched its pages */
		st->wcs = rp_alloc(s, st->ev->u.poll_cq.n_wcs * sizeof(*st->wcs));
		return st->wcs ? 0 : -ENOMEM;
	case RBT_EV_QP_MODIFY:
		if (!st->qp || (!st->qp->qp && !st->qp->dynamic))
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
	return rp_prepare_steps(j, s);
}

int rp_prepare_steps(struct rp_job *j, struct rp_side *s)
{
	int rc;

	for (int i = 0; i < s->nstep; i++)
		if ((rc = rp_translate_step(j, s, &s->step[i], i)))
			return rc;
	return 0;
}

/* ---- UD: a send does not overtake the receive the recording had posted ---- */
static int rp_u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* How many WRs of a recorded post_recv reached the queue. */
static uint32_t rp_recv_posted(const struct rbt_ev_post_recv *p)
{
	uint64_t n = p->ret ? p->bad_wr : p->n_wrs;

	return (uint32_t)(n < p->n_wrs ? n : p->n_wrs);
}

/* Whether side s has a UD QP: a side without one has no step for the sweeps
 * of rp_ud_order_setup (a window's steps each cost a read of their own). */
static int rp_has_ud(const struct rp_side *s)
{
	for (int q = 0; q < s->nqp; q++)
		if (s->qp[q].rec.qp_type == IBV_QPT_UD)
			return 1;
	return 0;
}

/* UD drops a message that finds no receive posted. The recording delivered
 * it, so the receive was there: a replayed UD send to a QP of this process
 * (recorded on the same host, one TSC) waits until that QP has had as many
 * receives posted as it had when the recorded send began (rp_run.c).
 * Streamed, it is done again for each window's steps: the receives of the
 * windows before count as posted before (recv_base), and a window ends at one
 * recorded time on every side, so a send's receives are in its window or an
 * earlier one. */
int rp_ud_order_setup(struct rp_job *j)
{
	for (int si = 0; si < j->nside; si++) {
		struct rp_side *s = &j->side[si];
		int ud = rp_has_ud(s);

		/* streamed: the receives of the windows before this one */
		for (int q = 0; q < s->nqp; q++) {
			s->qp[q].recv_base += s->qp[q].nrecv_ts;
			s->qp[q].nrecv_ts = 0;
			s->qp[q].recv_ts = NULL;
		}
		if (!ud)
			continue;
		for (int i = 0; i < s->nstep; i++) {
			struct rp_step *st = &s->step[i];

			if (st->type == RBT_EV_POST_RECV && st->qp && !st->skipped &&
			    st->qp->rec.qp_type == IBV_QPT_UD)
				st->qp->nrecv_ts += rp_recv_posted(&st->ev->u.post_recv);
		}
		for (int q = 0; q < s->nqp; q++) {
			struct rp_qp *qp = &s->qp[q];

			if (!qp->nrecv_ts)
				continue;
			qp->recv_ts = rp_alloc(s, qp->nrecv_ts * sizeof(*qp->recv_ts));
			if (!qp->recv_ts)
				return -ENOMEM;
			qp->nrecv_ts = 0;
		}
		for (int i = 0; i < s->nstep; i++) {
			struct rp_step *st = &s->step[i];
			uint32_t n;

			if (st->type != RBT_EV_POST_RECV || !st->qp || st->skipped ||
			    !st->qp->recv_ts)
				continue;
			n = rp_recv_posted(&st->ev->u.post_recv);
			while (n--)
				st->qp->recv_ts[st->qp->nrecv_ts++] = st->ev->ts;
		}
		/* the steps are in time order: nearly always one run */
		for (int q = 0; q < s->nqp; q++)
			if (s->qp[q].recv_ts)
				rp_sort_runs(s->qp[q].recv_ts, s->qp[q].nrecv_ts,
					     sizeof(uint64_t), rp_u64_cmp);
	}
	for (int si = 0; si < j->nside; si++) {
		struct rp_side *s = &j->side[si];

		if (!rp_has_ud(s))
			continue;
		for (int i = 0; i < s->nstep; i++) {
			struct rp_step *st = &s->step[i];
			const struct rbt_ev_post_send *p = &st->ev->u.post_send;

			if (st->type != RBT_EV_POST_SEND || !st->qp || st->skipped ||
			    st->qp->rec.qp_type != IBV_QPT_UD || p->ret)
				continue;
			for (uint32_t w = 0; w < p->n_wrs; w++) {
				const struct rp_dir_qp *d;
				struct rp_qp *q;
				uint32_t lo = 0, hi;

				/* a list of sends to one QP (a postlist): its
				 * wait is the first WR's */
				if (w && p->wrs[w].remote_qpn == p->wrs[w - 1].remote_qpn)
					continue;
				/* the QP the send goes to (rp_translate_dest) */
				d = rp_dir_qp_by_rec(j, s->idx,
						     (uint32_t)p->wrs[w].remote_qpn);
				if (!d || d->side < 0 || d->side >= j->nside ||
				    strcmp(j->side[d->side].host, s->host))
					continue;
				q = rp_qp_by_rec_qpn(&j->side[d->side], d->rec_qpn);
				if (!q || !q->recv_ts || q->srqi)
					continue;
				/* receives whose post began before the send did */
				hi = q->nrecv_ts;
				while (lo < hi) {
					uint32_t mid = lo + (hi - lo) / 2;

					if (q->recv_ts[mid] < st->ev->ts)
						lo = mid + 1;
					else
						hi = mid;
				}
				lo += q->recv_base;
				if (lo > st->ud_need || !st->ud_dest) {
					st->ud_dest = q;
					st->ud_need = lo;
				}
			}
		}
	}
	return 0;
}
