/* shim_post.c - the post wrappers (ctx->ops.post_send, post_recv, post_srq_recv):
 * two TSC readings around the provider's call and one record per chain segment
 * in the thread's ring (send WRs in the dense layout).
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

/* Whether a send WR needs the extension: qp_ext, its QP is UD or XRC. */
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

#define RBT_INLINE static inline __attribute__((always_inline))

/* A send WR is written dense (rbt_flat_dswr, rbt_format.h): a 16-byte head
 * (wr_id, imm, opcode, the low byte of send_flags, shape, nsge) and its sges: 32
 * bytes for a one-sge send. The parts its shape names follow the head only
 * when needed: remote address and rkey when either is not zero (RDMA ops; a
 * SEND whose wr.rdma the program left set keeps it, as the trace always had
 * it), the extension for atomics, binds, TSO and UD/XRC QPs (with the remote
 * part, zero or not), send_flags above 255 and payloads. */
RBT_INLINE uint32_t rbt_dswr_shape(const struct ibv_send_wr *w, int qp_ext, uint32_t pay)
{
	uint32_t sh;

	if (RBT_UNLIKELY(rbt_swr_ext(qp_ext, w->opcode)))
		sh = RBT_DSWR_RDMA | RBT_DSWR_EXT;
	else
		sh = (w->wr.rdma.remote_addr | w->wr.rdma.rkey) ? RBT_DSWR_RDMA : 0;
	if (RBT_UNLIKELY(pay | (w->send_flags > 0xff)))
		sh |= RBT_DSWR_WIDE;
	return sh;
}

/* Bytes one send WR of shape sh takes in a record (after the rbt_raw_post). */
RBT_INLINE uint32_t rbt_dswr_len(const struct ibv_send_wr *w, uint32_t sh)
{
	uint32_t ns = rbt_nsge(w->num_sge);
	uint32_t len = sizeof(struct rbt_flat_dswr) + ns * sizeof(struct rbt_flat_sge);

	if (sh & RBT_DSWR_RDMA)
		len += sizeof(struct rbt_flat_dswr_rdma);
	if (RBT_UNLIKELY(sh & ~RBT_DSWR_RDMA)) {
		if (sh & RBT_DSWR_EXT)
			len += sizeof(struct rbt_flat_swr_ext);
		if (sh & RBT_DSWR_WIDE)
			len += sizeof(struct rbt_flat_dswr_wide) +
			       RBT_ALIGN8(rbt_payload_len(w, ns));
	}
	return len;
}

/* The remote part and the extension (32 bytes): atomics, binds, TSO, UD, XRC. */
static __attribute__((noinline)) void rbt_dswr_put_ext(struct rbt_flat_dswr_rdma *rd,
						       struct rbt_flat_swr_ext *x,
						       const struct ibv_send_wr *w,
						       enum ibv_qp_type qpt)
{
	memset(x, 0, sizeof(*x));
	rd->remote_addr = w->wr.rdma.remote_addr;
	rd->rkey = w->wr.rdma.rkey;
	rd->pad = 0;
	if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
	    w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		rd->remote_addr = w->wr.atomic.remote_addr;
		rd->rkey = w->wr.atomic.rkey;
		x->compare_add = w->wr.atomic.compare_add;
		x->swap = w->wr.atomic.swap;
	} else if (w->opcode == IBV_WR_BIND_MW) {
		const struct ibv_mw_bind_info *bi = &w->bind_mw.bind_info;
		rd->remote_addr = bi->addr;
		rd->rkey = w->bind_mw.rkey;
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
		rd->remote_addr = 0;
		rd->rkey = 0;
	} else if (qpt == IBV_QPT_XRC_SEND) {
		x->remote_qpn = w->qp_type.xrc.remote_srqn;
	}
}

/* Writes one send WR of shape sh at o; returns the bytes written (rbt_dswr_len's). */
RBT_INLINE uint32_t rbt_dswr_put(uint8_t *o, const struct ibv_send_wr *w,
				 enum ibv_qp_type qpt, uint32_t sh)
{
	struct rbt_flat_dswr *h = (void *)o;
	uint32_t ns = rbt_nsge(w->num_sge);
	uint8_t *s = o + sizeof(*h);
	/* the head's second half in one store: imm, opcode, flags, shape, nsge */
	uint64_t h2 = (uint64_t)rbt_swr_imm(w) | (uint64_t)(uint8_t)w->opcode << 32 |
		      (uint64_t)(w->send_flags & 0xff) << 40 | (uint64_t)sh << 48 |
		      (uint64_t)ns << 56;

	uint32_t pl = 0;

	h->wr_id = w->wr_id;
	memcpy(&h->imm, &h2, sizeof(h2));
	if (RBT_LIKELY(sh == 0 && ns == 1)) {
		memcpy(s, w->sg_list, sizeof(struct rbt_flat_sge));
		return sizeof(*h) + sizeof(struct rbt_flat_sge);
	}
	if (RBT_LIKELY(sh == RBT_DSWR_RDMA)) {
		struct rbt_flat_dswr_rdma *rd = (void *)s;
		rd->remote_addr = w->wr.rdma.remote_addr;
		rd->rkey = w->wr.rdma.rkey;
		rd->pad = 0;
		s += sizeof(*rd);
	} else if (sh) {
		struct rbt_flat_dswr_rdma *rd = (void *)s;
		if (sh & RBT_DSWR_EXT) {
			/* (shape has RBT_DSWR_RDMA too) */
			s += sizeof(*rd);
			rbt_dswr_put_ext(rd, (void *)s, w, qpt);
			s += sizeof(struct rbt_flat_swr_ext);
		} else if (sh & RBT_DSWR_RDMA) {
			rd->remote_addr = w->wr.rdma.remote_addr;
			rd->rkey = w->wr.rdma.rkey;
			rd->pad = 0;
			s += sizeof(*rd);
		}
		if (sh & RBT_DSWR_WIDE) {
			struct rbt_flat_dswr_wide *wd = (void *)s;
			pl = rbt_payload_len(w, ns);
			wd->send_flags = w->send_flags;
			wd->payload_len = pl;
			s += sizeof(*wd);
		}
	}
	/* ibv_sge and the flat sge are the same 16 bytes */
	if (RBT_LIKELY(ns == 1))
		memcpy(s, w->sg_list, sizeof(struct rbt_flat_sge));
	else if (ns) /* a bind has no sg_list at all */
		memcpy(s, w->sg_list, ns * sizeof(struct rbt_flat_sge));
	s += ns * sizeof(struct rbt_flat_sge);
	if (RBT_UNLIKELY(pl)) {
		rbt_copy_payload(s, w, ns, pl);
		s += RBT_ALIGN8(pl);
	}
	return (uint32_t)(s - o);
}

/* The commonest WR in straight-line code: one sge, no extension, send_flags in a
 * byte (slow: the QP or the recording needs more). Returns the bytes written,
 * or 0 when it is not such a WR or does not fit before end (nothing written). */
RBT_INLINE uint32_t rbt_dswr_put_simple(uint8_t *o, const uint8_t *end,
					const struct ibv_send_wr *w, int slow)
{
	uint32_t op = (uint32_t)w->opcode, fl = w->send_flags;
	uint64_t ra = w->wr.rdma.remote_addr;
	uint32_t rk = w->wr.rdma.rkey;
	uint32_t rdma = (ra | rk) != 0;
	uint32_t len =
		(uint32_t)(sizeof(struct rbt_flat_dswr) + sizeof(struct rbt_flat_sge)) +
		rdma * (uint32_t)sizeof(struct rbt_flat_dswr_rdma);

	if (RBT_UNLIKELY(slow | (op >= 32) | (fl > 0xff) | (w->num_sge != 1) |
			 !!((1u << (op & 31)) & RBT_EXT_OPS)))
		return 0;
	if (RBT_UNLIKELY(len > (size_t)(end - o)))
		return 0;
	struct rbt_flat_dswr *h = (void *)o;
	uint64_t h2 = (uint64_t)rbt_swr_imm(w) | (uint64_t)op << 32 | (uint64_t)fl << 40 |
		      (uint64_t)rdma << 48 | 1ull << 56;
	uint8_t *s = o + sizeof(*h);
	h->wr_id = w->wr_id;
	memcpy(&h->imm, &h2, sizeof(h2));
	if (rdma) {
		struct rbt_flat_dswr_rdma *rd = (void *)s;
		rd->remote_addr = ra;
		rd->rkey = rk;
		rd->pad = 0;
		s += sizeof(*rd);
	}
	memcpy(s, w->sg_list, sizeof(struct rbt_flat_sge));
	return len;
}

/* Any other WR (out of line: the chain's loop stays in registers). */
struct rbt_chain;
static __attribute__((noinline)) uint32_t rbt_dswr_put_other(uint8_t *o,
							     const uint8_t *end,
							     const struct ibv_send_wr *w,
							     const struct rbt_chain *c);

/* Bytes one receive WR takes in a record (after the rbt_raw_post). */
static inline uint32_t rbt_rwr_len(const struct ibv_recv_wr *w)
{
	return sizeof(struct rbt_raw_rwr) +
	       rbt_nsge(w->num_sge) * sizeof(struct rbt_raw_sge);
}

static inline uint32_t rbt_rwr_put(uint8_t *o, const struct ibv_recv_wr *w)
{
	struct rbt_raw_rwr *h = (void *)o;
	uint32_t ns = rbt_nsge(w->num_sge);

	h->wr_id = w->wr_id;
	h->nsge = ns;
	h->pad = 0;
	if (RBT_LIKELY(ns == 1))
		memcpy(h + 1, w->sg_list, sizeof(struct rbt_raw_sge));
	else
		memcpy(h + 1, w->sg_list, ns * sizeof(struct rbt_raw_sge));
	return sizeof(*h) + ns * sizeof(struct rbt_raw_sge);
}

/* ---- a chain into records ------------------------------------------------------------
 * One record per RBT_SEG_WRS WRs, written in one pass over the chain: the record
 * is begun where the ring's head stands and each WR is written while it fits
 * (rbt_ring_open). Only near the ring's end, when it is full or has a loss to
 * report first, is the chain walked once more to count its exact length for
 * rbt_ring_reserve (which pads, waits or drops). send is 1 for ibv_send_wr
 * chains, 0 for ibv_recv_wr ones: a constant wherever this is inlined. */
struct rbt_chain {
	struct rbt_raw_post head; /* every field but h.len and nwr */
	enum ibv_qp_type qpt;
	int qp_ext;
	uint32_t pay;
};

static uint32_t rbt_dswr_put_other(uint8_t *o, const uint8_t *end,
				   const struct ibv_send_wr *w, const struct rbt_chain *c)
{
	uint32_t sh = rbt_dswr_shape(w, c->qp_ext, c->pay);

	if (rbt_dswr_len(w, sh) > (size_t)(end - o))
		return 0;
	return rbt_dswr_put(o, w, c->qpt, sh);
}

RBT_INLINE const void *rbt_wr_next(const void *w, int send)
{
	return send ? (const void *)((const struct ibv_send_wr *)w)->next
		    : (const void *)((const struct ibv_recv_wr *)w)->next;
}

RBT_INLINE uint32_t rbt_wr_len(const void *w, const struct rbt_chain *c, int send)
{
	return send ? rbt_dswr_len(w, rbt_dswr_shape(w, c->qp_ext, c->pay))
		    : rbt_rwr_len(w);
}

/* Writes the WRs from wr on (at most RBT_SEG_WRS, up to stop) while they fit in
 * room bytes from p, and the record's head; returns the first WR not written. */
RBT_INLINE const void *rbt_chain_fill(struct rbt_raw_post *p, uint32_t room,
				      const void *wr, const void *stop,
				      const struct rbt_chain *c, int send)
{
	uint8_t *o = (uint8_t *)(p + 1), *end = (uint8_t *)p + room;
	uint32_t n = 0;

	for (; wr && wr != stop && n < RBT_SEG_WRS; wr = rbt_wr_next(wr, send), n++) {
		if (send) {
			uint32_t l = rbt_dswr_put_simple(o, end, wr, c->qp_ext | c->pay);
			if (RBT_LIKELY(l)) {
				o += l;
				continue;
			}
			l = rbt_dswr_put_other(o, end, wr, c);
			if (!l)
				break;
			o += l;
			continue;
		}
		if (rbt_rwr_len(wr) > (size_t)(end - o))
			break;
		o += rbt_rwr_put(o, wr);
	}
	*p = c->head;
	p->h.len = (uint32_t)(o - (uint8_t *)p);
	p->nwr = (uint16_t)n;
	return wr;
}

RBT_INLINE void rbt_rec_chain(const struct rbt_chain *c, const void *wr, const void *stop,
			      int send)
{
	struct rbt_ring *r = rbt_ring_get();

	while (wr && wr != stop) {
		uint32_t room, need = sizeof(struct rbt_raw_post), n = 0;
		struct rbt_raw_post *p;
		const void *w;

		p = rbt_ring_open(r, need + rbt_wr_len(wr, c, send), &room);
		if (RBT_LIKELY(p)) {
			w = rbt_chain_fill(p, room, wr, stop, c, send);
			if (!w || w == stop || p->nwr == RBT_SEG_WRS) {
				rbt_ring_commit_len(r, p->h.len);
				wr = w;
				continue;
			}
		}
		for (w = wr; w && w != stop && n < RBT_SEG_WRS;
		     w = rbt_wr_next(w, send), n++)
			need += rbt_wr_len(w, c, send);
		p = rbt_ring_reserve(r, need);
		if (p) {
			rbt_chain_fill(p, need, wr, stop, c, send);
			rbt_ring_commit_len(r, need);
		}
		wr = w;
	}
}

/* The record's head and, for a failed post, where the chain stops being read:
 * WRs after *bad_wr were never posted and may be half-built. */
static const void *rbt_chain_begin(struct rbt_chain *c, uint16_t kind, const void *obj,
				   uint32_t qpn, const void *wr, int ret, const void *bad,
				   int send, uint64_t t0, uint64_t t1)
{
	const void *stop = NULL;
	uint32_t bad_idx = 0;

	if (ret && bad) {
		for (const void *w = wr; w && w != bad; w = rbt_wr_next(w, send))
			bad_idx++;
		stop = rbt_wr_next(bad, send);
	}
	c->head = (struct rbt_raw_post){ .h.kind = kind,
					 .h.flags = send ? RBT_RAW_DENSE : 0,
					 .ts = t0,
					 .ts_exit = t1,
					 .obj = (uintptr_t)obj,
					 .ret = ret,
					 .qp_num = qpn,
					 .bad_wr = ret ? bad_idx : 0 };
	return stop;
}

static void rbt_rec_send(struct ibv_qp *qp, struct ibv_send_wr *wr, int ret,
			 struct ibv_send_wr *bad, uint64_t t0, uint64_t t1)
{
	struct rbt_chain c = { .qpt = qp->qp_type, .pay = rbt_cfg.payload };
	const void *stop = rbt_chain_begin(&c, RBT_RAW_POST_SEND, qp, qp->qp_num, wr, ret,
					   bad, 1, t0, t1);

	c.qp_ext = c.qpt == IBV_QPT_UD || c.qpt == IBV_QPT_XRC_SEND;
	rbt_rec_chain(&c, wr, stop, 1);
}

static void rbt_rec_recv(uint16_t kind, void *obj, uint32_t qpn, struct ibv_recv_wr *wr,
			 int ret, struct ibv_recv_wr *bad, uint64_t t0, uint64_t t1)
{
	struct rbt_chain c = { .pay = 0 };
	const void *stop = rbt_chain_begin(&c, kind, obj, qpn, wr, ret, bad, 0, t0, t1);

	rbt_rec_chain(&c, wr, stop, 0);
}

int rbt_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(qp->context);

	if (RBT_UNLIKELY(!c))
		return ENOSYS;
	RBT_DP_CALL(c->post_send(qp, wr, bad_wr), rbt_now_exit(),
		    rbt_rec_send(qp, wr, ret, ret && bad_wr ? *bad_wr : NULL, t0, t1));
}

int rbt_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(qp->context);

	if (RBT_UNLIKELY(!c))
		return ENOSYS;
	RBT_DP_CALL(c->post_recv(qp, wr, bad_wr), rbt_now_exit(),
		    rbt_rec_recv(RBT_RAW_POST_RECV, qp, qp->qp_num, wr, ret,
				 ret && bad_wr ? *bad_wr : NULL, t0, t1));
}

int rbt_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad_wr)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(srq->context);

	if (RBT_UNLIKELY(!c))
		return ENOSYS;
	RBT_DP_CALL(c->post_srq_recv(srq, wr, bad_wr), rbt_now_exit(),
		    rbt_rec_recv(RBT_RAW_POST_SRQ, srq, 0, wr, ret,
				 ret && bad_wr ? *bad_wr : NULL, t0, t1));
}

/* ibv_bind_mw posts a BIND_MW WR: recorded as a one-WR post_send. */
static void rbt_rec_bind(struct ibv_qp *qp, struct ibv_mw *mw,
			 const struct ibv_mw_bind *b, int ret, uint64_t t0, uint64_t t1)
{
	struct ibv_send_wr wr = { .wr_id = b->wr_id,
				  .opcode = IBV_WR_BIND_MW,
				  .send_flags = b->send_flags };

	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = mw->rkey; /* the new key: the provider updated it */
	wr.bind_mw.bind_info = b->bind_info;
	rbt_rec_send(qp, &wr, ret, ret ? &wr : NULL, t0, t1);
}

int rbt_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(qp->context);

	if (!c || !c->bind_mw)
		return EOPNOTSUPP;
	RBT_DP_CALL(c->bind_mw(qp, mw, b), rbt_now_exit(),
		    rbt_rec_bind(qp, mw, b, ret, t0, t1));
}
