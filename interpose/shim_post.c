/* shim_post.c - the post wrappers (ctx->ops.post_send, post_recv, post_srq_recv):
 * two TSC readings around the provider's call and one fixed-layout record per
 * chain segment in the thread's ring.
 *
 * The hot path: never a lock, an allocation or a system call; returns exactly
 * what the provider returned and leaves errno alone.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "interpose/shim.h"
#include "interpose/shim_dp.h"

/* ---- post_send ---------------------------------------------------------------------- */
#define RBT_MAX_SGE 64	/* sges recorded per WR (more: the first 64) */
#define RBT_SEG_WRS 256 /* WRs per record; longer chains take several */

_Static_assert(sizeof(struct ibv_sge) == sizeof(struct rbt_raw_sge) &&
		       offsetof(struct ibv_sge, addr) ==
			       offsetof(struct rbt_raw_sge, addr) &&
		       offsetof(struct ibv_sge, length) ==
			       offsetof(struct rbt_raw_sge, length) &&
		       offsetof(struct ibv_sge, lkey) ==
			       offsetof(struct rbt_raw_sge, lkey),
	       "an ibv_sge is copied into a raw sge as it is");

static uint32_t rbt_payload_len(const struct ibv_send_wr *w, uint32_t nsge)
{
	uint64_t n = 0;

	if (!rbt_cfg.payload || !rbt_wr_has_payload(w->opcode))
		return 0;
	for (uint32_t i = 0; i < nsge; i++)
		n += w->sg_list[i].length;
	return n > rbt_cfg.payload ? rbt_cfg.payload : (uint32_t)n;
}

static void rbt_copy_payload(uint8_t *dst, const struct ibv_send_wr *w, uint32_t nsge,
			     uint32_t len)
{
	for (uint32_t i = 0; i < nsge && len; i++) {
		uint32_t l = w->sg_list[i].length < len ? w->sg_list[i].length : len;
		memcpy(dst, (const void *)(uintptr_t)w->sg_list[i].addr, l);
		dst += l;
		len -= l;
	}
}

static inline uint32_t rbt_nsge(int n)
{
	return n <= 0 ? 0 : n > RBT_MAX_SGE ? RBT_MAX_SGE : (uint32_t)n;
}

/* Opcodes as bits, so that a chain's per-WR tests are one AND each (opcodes
 * above 31 are none of these). */
#define RBT_OPBIT(op) ((op) < 32 ? 1u << (op) : 0u)
#define RBT_EXT_OPS                                                                \
	((1u << IBV_WR_ATOMIC_CMP_AND_SWP) | (1u << IBV_WR_ATOMIC_FETCH_AND_ADD) | \
	 (1u << IBV_WR_BIND_MW) | (1u << IBV_WR_TSO))
#define RBT_IMM_OPS ((1u << IBV_WR_SEND_WITH_IMM) | (1u << IBV_WR_RDMA_WRITE_WITH_IMM))
#define RBT_INV_OPS ((1u << IBV_WR_SEND_WITH_INV) | (1u << IBV_WR_LOCAL_INV))

/* Whether a send WR needs rbt_raw_swr_ext: qp_ext, its QP is UD or XRC. */
static inline int rbt_swr_ext(int qp_ext, enum ibv_wr_opcode op)
{
	return qp_ext | !!(RBT_OPBIT(op) & RBT_EXT_OPS);
}

/* The imm_data field of the trace (see RBT_REC_send_wr). */
static inline uint32_t rbt_swr_imm(const struct ibv_send_wr *w)
{
	uint32_t b = RBT_OPBIT(w->opcode);

	if (RBT_LIKELY(!(b & (RBT_IMM_OPS | RBT_INV_OPS))))
		return 0;
	return b & RBT_IMM_OPS ? be32toh(w->imm_data) : w->invalidate_rkey;
}

/* WRs after *bad_wr were never posted and may be half-built: they are not read. */
static void rbt_rec_send(struct ibv_qp *qp, struct ibv_send_wr *wr, int ret,
			 struct ibv_send_wr *bad, uint64_t t0, uint64_t t1)
{
	struct rbt_ring *r = rbt_ring_get();
	enum ibv_qp_type qpt = qp->qp_type;
	int qp_ext = qpt == IBV_QPT_UD || qpt == IBV_QPT_XRC_SEND;
	uint32_t pay = rbt_cfg.payload;
	uint32_t bad_idx = 0;
	struct ibv_send_wr *stop = NULL;

	if (ret && bad) {
		for (struct ibv_send_wr *w = wr; w && w != bad; w = w->next)
			bad_idx++;
		stop = bad->next;
	}
	while (wr && wr != stop) {
		size_t len = sizeof(struct rbt_raw_post);
		uint32_t n = 0;
		struct ibv_send_wr *w;

		for (w = wr; w && w != stop && n < RBT_SEG_WRS; w = w->next, n++) {
			uint32_t ns = rbt_nsge(w->num_sge);
			len += sizeof(struct rbt_raw_swr) +
			       ns * sizeof(struct rbt_raw_sge);
			if (RBT_UNLIKELY(rbt_swr_ext(qp_ext, w->opcode)))
				len += sizeof(struct rbt_raw_swr_ext);
			if (RBT_UNLIKELY(pay))
				len += RBT_ALIGN8(rbt_payload_len(w, ns));
		}
		struct rbt_raw_post *p = rbt_ring_reserve(r, (uint32_t)len);
		if (p) {
			p->h.len = (uint32_t)len;
			p->h.kind = RBT_RAW_POST_SEND;
			p->h.flags = 0;
			p->ts = t0;
			p->ts_exit = t1;
			p->obj = (uintptr_t)qp;
			p->ret = ret;
			p->qp_num = qp->qp_num;
			p->bad_wr = ret ? bad_idx : 0;
			p->api = 0;
			p->nwr = (uint16_t)n;
			uint8_t *o = (uint8_t *)(p + 1);
			uint32_t k = n;
			for (w = wr; k--; w = w->next) {
				struct rbt_raw_swr *h = (void *)o;
				uint32_t ns = rbt_nsge(w->num_sge);
				h->wr_id = w->wr_id;
				h->remote_addr = w->wr.rdma.remote_addr;
				h->rkey = w->wr.rdma.rkey;
				h->imm = rbt_swr_imm(w);
				h->send_flags = w->send_flags;
				h->payload_len = 0;
				h->opcode = (uint8_t)w->opcode;
				h->ext = 0;
				h->nsge = (uint16_t)ns;
				h->pad = 0;
				o += sizeof(*h);
				if (RBT_UNLIKELY(rbt_swr_ext(qp_ext, w->opcode))) {
					struct rbt_raw_swr_ext *x = (void *)o;
					memset(x, 0, sizeof(*x));
					h->ext = 1;
					if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
					    w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
						h->remote_addr = w->wr.atomic.remote_addr;
						h->rkey = w->wr.atomic.rkey;
						x->compare_add = w->wr.atomic.compare_add;
						x->swap = w->wr.atomic.swap;
					} else if (w->opcode == IBV_WR_BIND_MW) {
						const struct ibv_mw_bind_info *bi =
							&w->bind_mw.bind_info;
						h->remote_addr = bi->addr;
						h->rkey = w->bind_mw.rkey;
						x->compare_add = bi->length;
						x->swap = bi->mw_access_flags;
						x->ah = (uintptr_t)w->bind_mw.mw;
					} else if (w->opcode == IBV_WR_TSO) {
						x->compare_add = w->tso.hdr_sz;
						x->swap = w->tso.mss;
					}
					if (qpt == IBV_QPT_UD) {
						x->ah = (uintptr_t)w->wr.ud.ah;
						x->remote_qpn = w->wr.ud.remote_qpn;
						x->remote_qkey = w->wr.ud.remote_qkey;
						h->remote_addr = 0;
						h->rkey = 0;
					} else if (qpt == IBV_QPT_XRC_SEND) {
						x->remote_qpn =
							w->qp_type.xrc.remote_srqn;
					}
					o += sizeof(*x);
				}
				struct rbt_raw_sge *sg = (void *)o;
				/* ibv_sge and the raw sge are the same 16 bytes */
				if (RBT_LIKELY(ns == 1))
					memcpy(sg, w->sg_list, sizeof(*sg));
				else if (ns) /* a bind has no sg_list at all */
					memcpy(sg, w->sg_list, ns * sizeof(*sg));
				o += ns * sizeof(*sg);
				if (RBT_UNLIKELY(pay)) {
					uint32_t pl = rbt_payload_len(w, ns);
					h->payload_len = pl;
					if (pl)
						rbt_copy_payload(o, w, ns, pl);
					o += RBT_ALIGN8(pl);
				}
			}
			rbt_ring_commit(r);
		}
		for (uint32_t k = 0; k < n; k++)
			wr = wr->next;
	}
}

static void rbt_rec_recv(uint16_t kind, void *obj, uint32_t qpn, struct ibv_recv_wr *wr,
			 int ret, struct ibv_recv_wr *bad, uint64_t t0, uint64_t t1)
{
	struct rbt_ring *r = rbt_ring_get();
	uint32_t bad_idx = 0;
	struct ibv_recv_wr *stop = NULL;

	if (ret && bad) {
		for (struct ibv_recv_wr *w = wr; w && w != bad; w = w->next)
			bad_idx++;
		stop = bad->next;
	}
	while (wr && wr != stop) {
		size_t len = sizeof(struct rbt_raw_post);
		uint32_t n = 0;
		struct ibv_recv_wr *w;

		for (w = wr; w && w != stop && n < RBT_SEG_WRS; w = w->next, n++)
			len += sizeof(struct rbt_raw_rwr) +
			       rbt_nsge(w->num_sge) * sizeof(struct rbt_raw_sge);
		struct rbt_raw_post *p = rbt_ring_reserve(r, (uint32_t)len);
		if (p) {
			p->h.len = (uint32_t)len;
			p->h.kind = kind;
			p->h.flags = 0;
			p->ts = t0;
			p->ts_exit = t1;
			p->obj = (uintptr_t)obj;
			p->ret = ret;
			p->qp_num = qpn;
			p->bad_wr = ret ? bad_idx : 0;
			p->api = 0;
			p->nwr = (uint16_t)n;
			struct rbt_raw_rwr *o = (void *)(p + 1);
			uint32_t k = n;
			for (w = wr; k--; w = w->next) {
				uint32_t ns = rbt_nsge(w->num_sge);
				o->wr_id = w->wr_id;
				o->nsge = ns;
				o->pad = 0;
				struct rbt_raw_sge *s = (void *)(o + 1);
				if (RBT_LIKELY(ns == 1))
					memcpy(s, w->sg_list, sizeof(*s));
				else
					memcpy(s, w->sg_list, ns * sizeof(*s));
				o = (void *)(s + ns);
			}
			rbt_ring_commit(r);
		}
		/* advance past this segment */
		for (uint32_t k = 0; k < n; k++)
			wr = wr->next;
	}
}

int rbt_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(qp->context);

	if (RBT_UNLIKELY(!c))
		return ENOSYS;
	if (!rbt_dp_recording())
		return c->post_send(qp, wr, bad_wr);
	uint64_t t0 = rbt_now();
	int ret = c->post_send(qp, wr, bad_wr);
	uint64_t t1 = rbt_now_exit();
	rbt_rec_send(qp, wr, ret, ret && bad_wr ? *bad_wr : NULL, t0, t1);
	rbt_dp_done();
	return ret;
}

int rbt_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(qp->context);

	if (RBT_UNLIKELY(!c))
		return ENOSYS;
	if (!rbt_dp_recording())
		return c->post_recv(qp, wr, bad_wr);
	uint64_t t0 = rbt_now();
	int ret = c->post_recv(qp, wr, bad_wr);
	uint64_t t1 = rbt_now_exit();
	rbt_rec_recv(RBT_RAW_POST_RECV, qp, qp->qp_num, wr, ret,
		     ret && bad_wr ? *bad_wr : NULL, t0, t1);
	rbt_dp_done();
	return ret;
}

int rbt_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad_wr)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(srq->context);

	if (RBT_UNLIKELY(!c))
		return ENOSYS;
	if (!rbt_dp_recording())
		return c->post_srq_recv(srq, wr, bad_wr);
	uint64_t t0 = rbt_now();
	int ret = c->post_srq_recv(srq, wr, bad_wr);
	uint64_t t1 = rbt_now_exit();
	rbt_rec_recv(RBT_RAW_POST_SRQ, srq, 0, wr, ret, ret && bad_wr ? *bad_wr : NULL,
		     t0, t1);
	rbt_dp_done();
	return ret;
}

/* ibv_bind_mw posts a BIND_MW WR: recorded as a one-WR post_send. */
int rbt_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(qp->context);

	if (!c || !c->bind_mw)
		return EOPNOTSUPP;
	if (!rbt_dp_recording())
		return c->bind_mw(qp, mw, b);
	uint64_t t0 = rbt_now();
	int ret = c->bind_mw(qp, mw, b);
	uint64_t t1 = rbt_now_exit();
	struct ibv_send_wr wr = { .wr_id = b->wr_id,
				  .opcode = IBV_WR_BIND_MW,
				  .send_flags = b->send_flags };
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = mw->rkey; /* the new key: the provider updated it */
	wr.bind_mw.bind_info = b->bind_info;
	rbt_rec_send(qp, &wr, ret, ret ? &wr : NULL, t0, t1);
	rbt_dp_done();
	return ret;
}
