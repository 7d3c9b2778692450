/* shim_qpx.c - the ibv_qp_ex work-request API (ibv_wr_start ... ibv_wr_complete):
 * the WRs of a session are kept per QP and recorded as one post at wr_complete;
 * providers that reinstall their ibv_wr_* pointers are rewrapped.
 *
 * The setters are the hot path: never a lock, an allocation or a system call;
 * the provider's function is always called with the application's arguments.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "interpose/shim.h"
#include "interpose/shim_dp.h"

/* ---- ibv_qp_ex: ibv_wr_* ------------------------------------------------------------ */
/* clang-format off */
#define RBT_QPX_OPS(X)             \
	X(wr_atomic_cmp_swp)       \
	X(wr_atomic_fetch_add)     \
	X(wr_bind_mw)              \
	X(wr_local_inv)            \
	X(wr_rdma_read)            \
	X(wr_rdma_write)           \
	X(wr_rdma_write_imm)       \
	X(wr_send)                 \
	X(wr_send_imm)             \
	X(wr_send_inv)             \
	X(wr_send_tso)             \
	X(wr_set_ud_addr)          \
	X(wr_set_xrc_srqn)         \
	X(wr_set_inline_data)      \
	X(wr_set_inline_data_list) \
	X(wr_set_sge)              \
	X(wr_set_sge_list)         \
	X(wr_start)                \
	X(wr_complete)             \
	X(wr_abort)                \
	X(wr_atomic_write)
/* clang-format on */

#define RBT_QPX_WRS  32
#define RBT_QPX_SGES 8
/* A WR of an open session, built call by call: every field a WR can have. */
struct rbt_qpx_swr {
	uint64_t wr_id, remote_addr, compare_add, swap, ah;
	uint32_t opcode, send_flags, imm, rkey, remote_qpn, remote_qkey;
	uint32_t nsge, payload_len;
	uint32_t inl; /* its data came through wr_set_inline_data*: kept in e->inl */
};

struct rbt_qpx_wr {
	struct rbt_qpx_swr w;
	struct rbt_raw_sge sge[RBT_QPX_SGES];
};

/* Inline data is copied by the provider when it is set, and the application may
 * reuse its buffer at once: with payload capture on, it is kept here (up to this
 * much per WR; more inline data than this is unusual on any device). */
#define RBT_QPX_INLINE_MAX 1024

struct rbt_qpx_ent {
	struct ibv_qp_ex *qpx;
#define RBT_QPX_FIELD(f) __typeof__(((struct ibv_qp_ex *)0)->f) f;
	RBT_QPX_OPS(RBT_QPX_FIELD)
	uint64_t ts;
	uint32_t n;
	uint32_t inl_cap; /* bytes of inl per WR; 0 = payload capture off */
	uint8_t *inl;	  /* RBT_QPX_WRS * inl_cap: inline payloads of the session */
	struct rbt_qpx_wr wrs[RBT_QPX_WRS];
};

/* Payload bytes WR i of the session carries in the record: the inline data kept
 * when it was set, or (capture on, sge-based) the start of its buffers. */
static uint32_t rbt_qpx_payload_len(const struct rbt_qpx_ent *e, uint32_t i)
{
	const struct rbt_qpx_wr *c = &e->wrs[i];
	uint64_t n = 0;

	if (!e->inl_cap || !rbt_wr_has_payload(c->w.opcode))
		return 0;
	if (c->w.inl)
		return c->w.payload_len;
	for (uint32_t k = 0; k < c->w.nsge; k++)
		n += c->sge[k].length;
	return n > rbt_cfg.payload ? rbt_cfg.payload : (uint32_t)n;
}

static void rbt_qpx_copy_payload(const struct rbt_qpx_ent *e, uint32_t i, uint8_t *dst,
				 uint32_t len)
{
	const struct rbt_qpx_wr *c = &e->wrs[i];

	if (c->w.inl) {
		memcpy(dst, e->inl + (size_t)i * e->inl_cap, len);
		return;
	}
	for (uint32_t k = 0; k < c->w.nsge && len; k++) {
		uint32_t l = c->sge[k].length < len ? c->sge[k].length : len;
		memcpy(dst, (const void *)(uintptr_t)c->sge[k].addr, l);
		dst += l;
		len -= l;
	}
}

/* Whether WR c needs the ring record's rbt_raw_swr_ext. */
static inline int rbt_qpx_ext(const struct rbt_qpx_swr *w)
{
	return (w->compare_add | w->swap | w->ah | w->remote_qpn | w->remote_qkey) != 0;
}

/* A WR's fields the ring record keeps under their own names. */
/* clang-format off */
#define RBT_QPX_RAW_FIELDS(X) \
	X(wr_id) X(remote_addr) X(rkey) X(imm) X(send_flags) X(payload_len)
/* clang-format on */
#define RBT_QPX_TO_RAW(f) h->f = w->f;

static void rbt_qpx_emit(struct rbt_qpx_ent *e, int ret, uint64_t t1)
{
	struct rbt_ring *r = rbt_ring_get();
	size_t len = sizeof(struct rbt_raw_post);
	struct rbt_raw_post *p;

	for (uint32_t i = 0; i < e->n; i++) {
		struct rbt_qpx_swr *w = &e->wrs[i].w;
		w->payload_len = rbt_qpx_payload_len(e, i);
		len += sizeof(struct rbt_raw_swr) + w->nsge * sizeof(struct rbt_raw_sge) +
		       RBT_ALIGN8(w->payload_len);
		if (rbt_qpx_ext(w))
			len += sizeof(struct rbt_raw_swr_ext);
	}
	p = rbt_ring_reserve(r, (uint32_t)len);
	if (p) {
		p->h.len = (uint32_t)len;
		p->h.kind = RBT_RAW_POST_SEND;
		p->h.flags = 0;
		p->ts = e->ts;
		p->ts_exit = t1;
		p->obj = (uintptr_t)&e->qpx->qp_base;
		p->ret = ret;
		p->qp_num = e->qpx->qp_base.qp_num;
		p->bad_wr = 0;
		p->api = 1;
		p->nwr = (uint16_t)e->n;
		uint8_t *o = (uint8_t *)(p + 1);
		for (uint32_t i = 0; i < e->n; i++) {
			const struct rbt_qpx_swr *w = &e->wrs[i].w;
			struct rbt_raw_swr *h = (void *)o;
			RBT_QPX_RAW_FIELDS(RBT_QPX_TO_RAW)
			h->opcode = (uint8_t)w->opcode;
			h->ext = (uint8_t)rbt_qpx_ext(w);
			h->nsge = (uint16_t)w->nsge;
			h->pad = 0;
			o += sizeof(*h);
			if (h->ext) {
				struct rbt_raw_swr_ext *x = (void *)o;
				x->compare_add = w->compare_add;
				x->swap = w->swap;
				x->ah = w->ah;
				x->remote_qpn = w->remote_qpn;
				x->remote_qkey = w->remote_qkey;
				o += sizeof(*x);
			}
			memcpy(o, e->wrs[i].sge, w->nsge * sizeof(struct rbt_raw_sge));
			o += w->nsge * sizeof(struct rbt_raw_sge);
			if (w->payload_len) {
				rbt_qpx_copy_payload(e, i, o, w->payload_len);
				o += RBT_ALIGN8(w->payload_len);
			}
		}
		rbt_ring_commit(r);
	}
	e->n = 0;
}

/* Starts a new WR in the session from the qp_ex's wr_id/wr_flags. */
static inline struct rbt_qpx_swr *rbt_qpx_new(struct rbt_qpx_ent *e, struct ibv_qp_ex *q,
					      uint32_t opcode)
{
	if (!rbt_recording())
		return NULL;
	if (e->n == RBT_QPX_WRS) {
		uint64_t t = rbt_now();
		rbt_qpx_emit(e, 0, t);
		e->ts = t;
	}
	struct rbt_qpx_swr *w = &e->wrs[e->n++].w;
	memset(w, 0, sizeof(*w));
	w->wr_id = q->wr_id;
	w->send_flags = q->wr_flags;
	w->opcode = opcode;
	return w;
}

static inline struct rbt_qpx_wr *rbt_qpx_cur(struct rbt_qpx_ent *e)
{
	return e->n && rbt_recording() ? &e->wrs[e->n - 1] : NULL;
}

static inline void rbt_qpx_add_sge(struct rbt_qpx_wr *c, uint64_t addr, uint32_t len,
				   uint32_t lkey)
{
	if (c->w.nsge < RBT_QPX_SGES) {
		c->sge[c->w.nsge].addr = addr;
		c->sge[c->w.nsge].length = len;
		c->sge[c->w.nsge].lkey = lkey;
		c->w.nsge++;
	}
}

#define RBT_QPX_ENT(q)                           \
	struct rbt_qpx_ent *e = rbt_obj_find(q); \
	if (RBT_UNLIKELY(!e))                    \
		return;

/* A new WR of op that names remote memory (rkey, ra); NULL as rbt_qpx_new. */
static inline struct rbt_qpx_swr *rbt_qpx_new_remote(struct rbt_qpx_ent *e,
						     struct ibv_qp_ex *q, uint32_t op,
						     uint32_t rkey, uint64_t ra)
{
	struct rbt_qpx_swr *w = rbt_qpx_new(e, q, op);

	if (w) {
		w->rkey = rkey;
		w->remote_addr = ra;
	}
	return w;
}

/* w (when there is one) with its immediate, or invalidated rkey, in imm. */
static inline struct rbt_qpx_swr *rbt_qpx_set_imm(struct rbt_qpx_swr *w, uint32_t imm)
{
	if (w)
		w->imm = imm;
	return w;
}

/* A new WR of op with imm (rbt_qpx_set_imm). */
static inline struct rbt_qpx_swr *
rbt_qpx_new_imm(struct rbt_qpx_ent *e, struct ibv_qp_ex *q, uint32_t op, uint32_t imm)
{
	return rbt_qpx_set_imm(rbt_qpx_new(e, q, op), imm);
}

static void rbt_wr_atomic_cmp_swp(struct ibv_qp_ex *q, uint32_t rkey, uint64_t ra,
				  uint64_t cmp, uint64_t swap)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w =
		rbt_qpx_new_remote(e, q, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, ra);
	if (w) {
		w->compare_add = cmp;
		w->swap = swap;
	}
	e->wr_atomic_cmp_swp(q, rkey, ra, cmp, swap);
}

static void rbt_wr_atomic_fetch_add(struct ibv_qp_ex *q, uint32_t rkey, uint64_t ra,
				    uint64_t add)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w =
		rbt_qpx_new_remote(e, q, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, ra);
	if (w)
		w->compare_add = add;
	e->wr_atomic_fetch_add(q, rkey, ra, add);
}

static void rbt_wr_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw, uint32_t rkey,
			   const struct ibv_mw_bind_info *bi)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w = rbt_qpx_new(e, q, IBV_WR_BIND_MW);
	if (w) {
		w->rkey = rkey;
		w->ah = (uintptr_t)mw;
		if (bi) {
			w->remote_addr = bi->addr;
			w->compare_add = bi->length;
			w->swap = bi->mw_access_flags;
		}
	}
	e->wr_bind_mw(q, mw, rkey, bi);
}

static void rbt_wr_local_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	RBT_QPX_ENT(q);
	rbt_qpx_new_imm(e, q, IBV_WR_LOCAL_INV, rkey);
	e->wr_local_inv(q, rkey);
}

static void rbt_wr_rdma_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t ra)
{
	RBT_QPX_ENT(q);
	rbt_qpx_new_remote(e, q, IBV_WR_RDMA_READ, rkey, ra);
	e->wr_rdma_read(q, rkey, ra);
}

static void rbt_wr_rdma_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t ra)
{
	RBT_QPX_ENT(q);
	rbt_qpx_new_remote(e, q, IBV_WR_RDMA_WRITE, rkey, ra);
	e->wr_rdma_write(q, rkey, ra);
}

static void rbt_wr_rdma_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t ra,
				  __be32 imm)
{
	RBT_QPX_ENT(q);
	rbt_qpx_set_imm(rbt_qpx_new_remote(e, q, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, ra),
			be32toh(imm));
	e->wr_rdma_write_imm(q, rkey, ra, imm);
}

static void rbt_wr_send(struct ibv_qp_ex *q)
{
	RBT_QPX_ENT(q);
	rbt_qpx_new(e, q, IBV_WR_SEND);
	e->wr_send(q);
}

static void rbt_wr_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
	RBT_QPX_ENT(q);
	rbt_qpx_new_imm(e, q, IBV_WR_SEND_WITH_IMM, be32toh(imm));
	e->wr_send_imm(q, imm);
}

static void rbt_wr_send_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	RBT_QPX_ENT(q);
	rbt_qpx_new_imm(e, q, IBV_WR_SEND_WITH_INV, rkey);
	e->wr_send_inv(q, rkey);
}

static void rbt_wr_send_tso(struct ibv_qp_ex *q, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w = rbt_qpx_new(e, q, IBV_WR_TSO);
	if (w) {
		w->remote_addr = (uintptr_t)hdr;
		w->compare_add = hdr_sz;
		w->swap = mss;
	}
	e->wr_send_tso(q, hdr, hdr_sz, mss);
}

static void rbt_wr_set_ud_addr(struct ibv_qp_ex *q, struct ibv_ah *ah, uint32_t qpn,
			       uint32_t qkey)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_wr *c = rbt_qpx_cur(e);
	if (c) {
		c->w.ah = (uintptr_t)ah;
		c->w.remote_qpn = qpn;
		c->w.remote_qkey = qkey;
	}
	e->wr_set_ud_addr(q, ah, qpn, qkey);
}

static void rbt_wr_set_xrc_srqn(struct ibv_qp_ex *q, uint32_t srqn)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_wr *c = rbt_qpx_cur(e);
	if (c)
		c->w.remote_qpn = srqn;
	e->wr_set_xrc_srqn(q, srqn);
}

/* Appends inline data of the current WR to its kept payload (capture on). */
static void rbt_qpx_keep_inline(struct rbt_qpx_ent *e, struct rbt_qpx_wr *c,
				const void *addr, size_t len)
{
	uint32_t cap = e->inl_cap < rbt_cfg.payload ? e->inl_cap : rbt_cfg.payload;
	uint32_t have = c->w.payload_len;

	c->w.inl = 1;
	if (!e->inl || have >= cap)
		return;
	size_t n = len < cap - have ? len : cap - have;
	memcpy(e->inl + (size_t)(c - e->wrs) * e->inl_cap + have, addr, n);
	c->w.payload_len = (uint32_t)(have + n);
}

static void rbt_wr_set_inline_data(struct ibv_qp_ex *q, void *addr, size_t len)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_wr *c = rbt_qpx_cur(e);
	if (c) {
		c->w.send_flags |= IBV_SEND_INLINE;
		rbt_qpx_add_sge(c, (uintptr_t)addr, (uint32_t)len, 0);
		rbt_qpx_keep_inline(e, c, addr, len);
	}
	e->wr_set_inline_data(q, addr, len);
}

static void rbt_wr_set_inline_data_list(struct ibv_qp_ex *q, size_t n,
					const struct ibv_data_buf *bufs)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_wr *c = rbt_qpx_cur(e);
	if (c) {
		c->w.send_flags |= IBV_SEND_INLINE;
		for (size_t i = 0; i < n; i++) {
			rbt_qpx_add_sge(c, (uintptr_t)bufs[i].addr,
					(uint32_t)bufs[i].length, 0);
			rbt_qpx_keep_inline(e, c, bufs[i].addr, bufs[i].length);
		}
	}
	e->wr_set_inline_data_list(q, n, bufs);
}

static void rbt_wr_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr,
			   uint32_t len)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_wr *c = rbt_qpx_cur(e);
	if (c)
		rbt_qpx_add_sge(c, addr, len, lkey);
	e->wr_set_sge(q, lkey, addr, len);
}

static void rbt_wr_set_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *sg)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_wr *c = rbt_qpx_cur(e);
	if (c)
		for (size_t i = 0; i < n; i++)
			rbt_qpx_add_sge(c, sg[i].addr, sg[i].length, sg[i].lkey);
	e->wr_set_sge_list(q, n, sg);
}

static void rbt_wr_atomic_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t ra,
				const void *data)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w = rbt_qpx_new(e, q, IBV_WR_ATOMIC_WRITE);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = ra;
		if (data)
			memcpy(&w->compare_add, data, 8);
	}
	e->wr_atomic_write(q, rkey, ra, data);
}

static void rbt_qpx_recheck(struct rbt_qpx_ent *e);

static void rbt_wr_start(struct ibv_qp_ex *q)
{
	RBT_QPX_ENT(q);
	/* Providers rewrite the wr_* pointers (mlx5 on every move to RTS/RESET): make
	 * sure the session's ops are still ours before it starts. */
	rbt_qpx_recheck(e);
	e->n = 0;
	e->ts = rbt_now();
	e->wr_start(q);
}

static int rbt_wr_complete(struct ibv_qp_ex *q)
{
	struct rbt_qpx_ent *e = rbt_obj_find(q);

	if (RBT_UNLIKELY(!e))
		return EINVAL;
	/* The WRs are posted here: a thread that finds the trace sealed parks
	 * before they are. */
	int rec = rbt_dp_recording();
	int ret = e->wr_complete(q);
	uint64_t t1 = rbt_now();
	if (rec) {
		if (e->n)
			rbt_qpx_emit(e, ret, t1);
		rbt_dp_done();
	}
	e->n = 0;
	return ret;
}

static void rbt_wr_abort(struct ibv_qp_ex *q)
{
	RBT_QPX_ENT(q);
	e->n = 0; /* nothing was posted */
	e->wr_abort(q);
}

static void rbt_qpx_recheck(struct rbt_qpx_ent *e)
{
	struct ibv_qp_ex *q = e->qpx;

#define RBT_QPX_REWRAP(f)              \
	if (q->f && q->f != rbt_##f) { \
		e->f = q->f;           \
		q->f = rbt_##f;        \
	}
	RBT_QPX_OPS(RBT_QPX_REWRAP)
}

void rbt_dp_wrap_qpx(struct ibv_qp *qp)
{
	struct ibv_qp_ex *q;
	struct rbt_qpx_ent *e;

	if (!qp || !rbt_ctx_find(qp->context))
		return;
	e = rbt_obj_find(qp);
	if (e) {
		rbt_qpx_recheck(e);
		return;
	}
	/* rdma-core marks QPs created through create_qp_ex with the ibv_wr_* API
	 * (IBV_QP_INIT_ATTR_SEND_OPS_FLAGS); ibv_qp_to_qp_ex is the only sanctioned
	 * way to get at the qp_ex. */
	struct ibv_qp_ex *(*to_qpx)(struct ibv_qp *) = rbt_next_ibv_qp_to_qp_ex();
	if (!to_qpx)
		return;
	rbt_tls_inside++;
	q = to_qpx(qp);
	rbt_tls_inside--;
	if (!q || !q->wr_start || !q->wr_complete)
		return;
	e = calloc(1, sizeof(*e));
	if (!e)
		return;
	if (rbt_cfg.payload) {
		e->inl_cap = rbt_cfg.payload < RBT_QPX_INLINE_MAX ? rbt_cfg.payload
								  : RBT_QPX_INLINE_MAX;
		e->inl = malloc((size_t)RBT_QPX_WRS * e->inl_cap);
		if (!e->inl)
			e->inl_cap = 0;
	}
	e->qpx = q;
	if (rbt_obj_insert(qp, e) < 0) {
		free(e->inl);
		free(e);
		rbt_note(1, "ibv_wr_* API of a QP not traced (too many QPs)");
		return;
	}
	rbt_qpx_recheck(e);
}

void rbt_dp_recheck_qpx(struct ibv_qp *qp)
{
	struct rbt_qpx_ent *e = qp ? rbt_obj_find(qp) : NULL;

	if (e)
		rbt_qpx_recheck(e);
}
