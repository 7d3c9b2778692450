/* shim_poll.c - the poll wrappers: ibv_poll_cq and req_notify_cq through ctx->ops,
 * the ibv_cq_ex start/next/end_poll session, runs of empty polls folded into one
 * record, and the plain CQs that RBTRACE_NIC_TS stands in for with timestamped
 * ones.
 *
 * The hot path: never a lock, an allocation or a system call; returns exactly
 * what the provider returned and leaves errno alone.
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

/* ---- polling ------------------------------------------------------------------------- */
/* Runs of empty polls on one CQ become one record (count = N, ts = first entry,
 * ts_exit = last exit), kept in the ring struct until something else is
 * recorded, the run is a flush interval old, or the thread ends. Up to
 * RBT_FOLDS CQs polled in turn (send CQ, receive CQ, ...) fold at once. A last
 * poll far longer than the run's others (a provider that yielded or slept in it)
 * is written as a record of its own (rbt_fold_flush): the analyzer bounds a
 * completion's time by the last empty poll's entry, which it takes as the run's
 * end less one poll's length. */
static inline void rbt_rec_empty_poll(struct rbt_ring *r, void *cq, uint32_t asked,
				      uint32_t api, uint64_t t0, uint64_t t1)
{
	struct rbt_fold *f = r->folds;

	for (uint32_t i = 0; i < r->nfold; i++, f++) {
		if (f->cq == cq && f->asked == asked && f->api == api) {
			if (t1 - f->ts <
			    __atomic_load_n(&rbt_cfg.flush_ticks, __ATOMIC_RELAXED)) {
				f->n++;
				f->prev_exit = f->exit;
				f->exit = t1;
				f->last_ts = t0;
				return;
			}
			break; /* a flush interval old: write it and start again */
		}
	}
	if (f != r->folds + r->nfold || r->nfold == RBT_FOLDS)
		rbt_fold_flush(r);
	f = &r->folds[r->nfold++];
	f->cq = cq;
	f->ts = t0;
	f->exit = t1;
	f->last_ts = t0;
	f->n = 1;
	f->asked = asked;
	f->api = api;
}

/* Whether a completion needs rbt_flat_dwc_ext (not zero when it does). */
static inline __attribute__((always_inline)) uint32_t rbt_dwc_rare(const struct ibv_wc *c)
{
	uint32_t hi = (c->status | c->opcode | c->wc_flags) & ~0xffu;

	return c->vendor_err | c->src_qp | hi | c->pkey_index | c->slid | c->sl |
	       c->dlid_path_bits;
}

/* Completions are written dense (rbt_flat_dwc, rbt_format.h): 24 bytes with what
 * every completion has, and the 32 of rbt_flat_dwc_ext after it only when one of
 * the fields that are commonly zero is not (vendor_err, src_qp, pkey_index,
 * slid, sl, dlid_path_bits) or status, opcode or wc_flags does not fit a byte.
 * Returns the bytes written at o. */
static inline __attribute__((always_inline)) uint32_t rbt_dwc_put(uint8_t *o,
								  const struct ibv_wc *c)
{
	struct rbt_flat_dwc *d = (void *)o;
	uint32_t rare = rbt_dwc_rare(c);
	uint64_t w1 = (uint64_t)c->byte_len | (uint64_t)c->qp_num << 32;
	uint64_t w2 = (uint64_t)c->imm_data | (uint64_t)(c->status & 0xff) << 32 |
		      (uint64_t)(c->opcode & 0xff) << 40 |
		      (uint64_t)(c->wc_flags & 0xff) << 48 | (uint64_t)(rare != 0) << 56;

	d->wr_id = c->wr_id;
	memcpy(&d->byte_len, &w1, sizeof(w1));
	memcpy(&d->imm, &w2, sizeof(w2));
	if (RBT_LIKELY(!rare))
		return sizeof(*d);
	{
		struct rbt_flat_dwc_ext *x = (void *)(d + 1), *d = x;
		const struct ibv_wc *s = c;
		memset(x->pad, 0, sizeof(x->pad));
		RBT_DWC_EXT_FIELDS(RBT_FIELD_CP)
	}
	return sizeof(*d) + sizeof(struct rbt_flat_dwc_ext);
}

static void rbt_rec_poll(struct ibv_cq *cq, int asked, int ret, const struct ibv_wc *wc,
			 uint64_t t0, uint64_t t1)
{
	struct rbt_ring *r = rbt_ring_get();
	uint32_t nwc = ret > 0 ? (uint32_t)ret : 0, room, len;
	struct rbt_raw_poll *p;

	if (ret == 0) {
		/* light mode: the run ends at the last poll's entry */
		rbt_rec_empty_poll(r, cq, asked, 0, t0, t1 ? t1 : t0);
		return;
	}
	/* Room for the longest it can be where the head stands; else the exact
	 * length, counted first, through rbt_ring_reserve (pads, waits, drops). */
	len = sizeof(*p) + nwc * (uint32_t)(sizeof(struct rbt_flat_dwc) +
					    sizeof(struct rbt_flat_dwc_ext));
	p = rbt_ring_open(r, len, &room);
	if (RBT_UNLIKELY(!p)) {
		len = sizeof(*p) + nwc * (uint32_t)sizeof(struct rbt_flat_dwc);
		for (uint32_t i = 0; i < nwc; i++)
			if (rbt_dwc_rare(&wc[i]))
				len += sizeof(struct rbt_flat_dwc_ext);
		p = rbt_ring_reserve(r, len);
		if (!p)
			return;
	}
	*p = (struct rbt_raw_poll){ .h.kind = RBT_RAW_POLL,
				    .h.flags = RBT_RAW_DENSE,
				    .ts = t0,
				    .ts_exit = t1,
				    .cq = (uintptr_t)cq,
				    .ret = ret,
				    .asked = asked,
				    .count = 1,
				    .nwc = nwc };
	uint8_t *o = (uint8_t *)(p + 1);
	for (uint32_t i = 0; i < nwc; i++)
		o += rbt_dwc_put(o, &wc[i]);
	p->h.len = (uint32_t)(o - (uint8_t *)p);
	rbt_ring_commit_len(r, p->h.len);
}

struct rbt_cqx_ent;
static int rbt_poll_emulated(struct rbt_cqx_ent *e, struct ibv_cq *cq, int n,
			     struct ibv_wc *wc);
static int rbt_emulating; /* some CQ stands in for a plain one (RBTRACE_NIC_TS) */

int rbt_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(cq->context);

	if (RBT_UNLIKELY(!c))
		return -1;
	if (RBT_UNLIKELY(rbt_emulating)) {
		struct rbt_cqx_ent *e = rbt_obj_find(cq);
		if (e)
			return rbt_poll_emulated(e, cq, n, wc);
	}
	RBT_DP_CALL(c->poll_cq(cq, n, wc), rbt_now_exit(),
		    rbt_rec_poll(cq, n, ret, wc, t0, t1));
}

static void rbt_rec_notify(struct ibv_cq *cq, int solicited_only, int ret, uint64_t t0,
			   uint64_t t1)
{
	struct rbt_ring *r = rbt_ring_get();
	struct rbt_raw_notify *p = rbt_ring_reserve(r, sizeof(*p));

	if (!p)
		return;
	p->h.len = sizeof(*p);
	p->h.kind = RBT_RAW_NOTIFY;
	p->h.flags = 0;
	p->ts = t0;
	p->ts_exit = t1;
	p->cq = (uintptr_t)cq;
	p->ret = ret;
	p->solicited = solicited_only;
	rbt_ring_commit(r);
}

int rbt_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(cq->context);

	if (RBT_UNLIKELY(!c))
		return ENOSYS;
	RBT_DP_CALL(c->req_notify_cq(cq, solicited_only), rbt_now(),
		    rbt_rec_notify(cq, solicited_only, ret, t0, t1));
}

/* ---- ibv_cq_ex ------------------------------------------------------------------------ */
#define RBT_CQX_WCS 64
struct rbt_cqx_ent {
	struct ibv_cq_ex *cqx;
	int (*start_poll)(struct ibv_cq_ex *, struct ibv_poll_cq_attr *);
	int (*next_poll)(struct ibv_cq_ex *);
	void (*end_poll)(struct ibv_cq_ex *);
	uint64_t wc_flags;
	int emulated;
	/* the poll session in progress (one consumer per CQ at a time); rec: it
	 * is recorded (start_poll saw recording on) */
	int rec;
	uint64_t ts;
	uint32_t n;
	struct rbt_raw_wcx wcs[RBT_CQX_WCS];
};

static void rbt_cqx_capture(struct rbt_cqx_ent *e, struct ibv_cq_ex *cq,
			    struct rbt_raw_wcx *x)
{
	uint64_t f = e->wc_flags;

	memset(x, 0, sizeof(*x));
	x->wc.wr_id = cq->wr_id;
	x->wc.status = cq->status;
	if (cq->read_vendor_err)
		x->wc.vendor_err = cq->read_vendor_err(cq);
	if ((f & IBV_WC_EX_WITH_QP_NUM) && cq->read_qp_num)
		x->wc.qp_num = cq->read_qp_num(cq);
	/* For a failed completion only wr_id, status, vendor_err and qp_num mean
	 * anything, and some providers do not decode the rest. */
	if (cq->status != IBV_WC_SUCCESS)
		return;
	if (cq->read_opcode)
		x->wc.opcode = cq->read_opcode(cq);
	if (cq->read_wc_flags)
		x->wc.wc_flags = cq->read_wc_flags(cq);
	if ((f & IBV_WC_EX_WITH_BYTE_LEN) && cq->read_byte_len)
		x->wc.byte_len = cq->read_byte_len(cq);
	/* the immediate (network order) or the invalidated rkey (host order) */
	if ((f & IBV_WC_EX_WITH_IMM) && cq->read_imm_data &&
	    (x->wc.wc_flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV)))
		x->wc.imm_data = cq->read_imm_data(cq);
	if ((f & IBV_WC_EX_WITH_SRC_QP) && cq->read_src_qp)
		x->wc.src_qp = cq->read_src_qp(cq);
	if ((f & IBV_WC_EX_WITH_SLID) && cq->read_slid)
		x->wc.slid = cq->read_slid(cq);
	if ((f & IBV_WC_EX_WITH_SL) && cq->read_sl)
		x->wc.sl = cq->read_sl(cq);
	if ((f & IBV_WC_EX_WITH_DLID_PATH_BITS) && cq->read_dlid_path_bits)
		x->wc.dlid_path_bits = cq->read_dlid_path_bits(cq);
	if ((f & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) && cq->read_completion_ts)
		x->hw_ts = cq->read_completion_ts(cq);
}

/* The completions of a session so far, as one POLL record of cq (the program's
 * ibv_cq for an emulated plain poll, which is api 0). */
static void rbt_cqx_emit(struct rbt_cqx_ent *e, const void *cq, int ret, uint32_t asked,
			 uint32_t api, uint64_t t0, uint64_t t1)
{
	rbt_poll_put(rbt_ring_get(),
		     &(struct rbt_raw_poll){ .h.flags = RBT_POLL_WCX,
					     .ts = t0,
					     .ts_exit = t1,
					     .cq = (uintptr_t)cq,
					     .ret = ret,
					     .asked = asked,
					     .api = api,
					     .count = 1,
					     .nwc = e->n },
		     e->wcs, sizeof(e->wcs[0]));
	e->n = 0;
}

static inline void rbt_cqx_take(struct rbt_cqx_ent *e, struct ibv_cq_ex *cq)
{
	if (e->n == RBT_CQX_WCS) {
		/* A long session is written in pieces (each a poll_cq event). */
		uint64_t t = rbt_now();
		rbt_cqx_emit(e, e->cqx, RBT_CQX_WCS, 0, 1, e->ts, t);
		e->ts = t;
	}
	rbt_cqx_capture(e, cq, &e->wcs[e->n++]);
}

static int rbt_cqx_start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
	struct rbt_cqx_ent *e = rbt_obj_find(cq);

	if (RBT_UNLIKELY(!e))
		return EINVAL;
	if (!rbt_dp_recording())
		return e->start_poll(cq, attr);
	uint64_t t0 = rbt_now();
	int ret = e->start_poll(cq, attr);
	uint64_t t1 = rbt_now();
	if (ret == ENOENT) {
		rbt_rec_empty_poll(rbt_ring_get(), cq, 0, 1, t0, t1);
	} else if (ret) {
		e->n = 0;
		rbt_cqx_emit(e, cq, -ret, 0, 1, t0, t1);
	} else {
		/* A session: the thread stays busy until end_poll. */
		e->ts = t0;
		e->n = 0;
		e->rec = 1;
		rbt_cqx_take(e, cq);
		return ret;
	}
	rbt_dp_done();
	return ret;
}

static int rbt_cqx_next_poll(struct ibv_cq_ex *cq)
{
	struct rbt_cqx_ent *e = rbt_obj_find(cq);

	if (RBT_UNLIKELY(!e))
		return EINVAL;
	int ret = e->next_poll(cq);
	if (ret == 0 && e->rec)
		rbt_cqx_take(e, cq);
	return ret;
}

static void rbt_cqx_end_poll(struct ibv_cq_ex *cq)
{
	struct rbt_cqx_ent *e = rbt_obj_find(cq);

	if (RBT_UNLIKELY(!e))
		return;
	e->end_poll(cq);
	if (e->rec) {
		if (e->n)
			rbt_cqx_emit(e, cq, e->n, 0, 1, e->ts, rbt_now());
		e->rec = 0;
		rbt_dp_done();
	}
}

struct rbt_cqx_ent *rbt_wrap_cqx(struct ibv_cq_ex *cq, uint64_t wc_flags, int emulated)
{
	struct rbt_cqx_ent *e;

	if (cq->start_poll == rbt_cqx_start_poll)
		return rbt_obj_find(cq);
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->cqx = cq;
	e->start_poll = cq->start_poll;
	e->next_poll = cq->next_poll;
	e->end_poll = cq->end_poll;
	e->wc_flags = wc_flags;
	e->emulated = emulated;
	if (!e->start_poll || !e->next_poll || !e->end_poll ||
	    rbt_obj_insert(cq, e) < 0) {
		free(e);
		rbt_note(1, "extended CQ not traced (no poll ops, or too many CQs)");
		return NULL;
	}
	cq->start_poll = rbt_cqx_start_poll;
	cq->next_poll = rbt_cqx_next_poll;
	cq->end_poll = rbt_cqx_end_poll;
	return e;
}

/* ibv_poll_cq on a CQ that the recorder made a timestamping cq_ex behind the
 * program's back: the same semantics as poll_cq, built on start/next/end_poll. */
static int rbt_poll_emulated(struct rbt_cqx_ent *e, struct ibv_cq *cq, int n,
			     struct ibv_wc *wc)
{
	struct ibv_cq_ex *cqx = e->cqx;
	struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
	struct rbt_raw_wcx x;
	int rec, got = 0;
	uint64_t t0;
	int ret;

	if (n <= 0)
		return 0;
	rec = rbt_dp_recording();
	t0 = rbt_now();
	ret = e->start_poll(cqx, &attr);
	if (ret == ENOENT) {
		if (rec) {
			rbt_rec_empty_poll(rbt_ring_get(), cq, n, 0, t0, rbt_now());
			rbt_dp_done();
		}
		return 0;
	}
	if (ret) {
		if (rec)
			rbt_dp_done();
		return -1;
	}
	if (rec) {
		e->ts = t0;
		e->n = 0;
	}
	for (;;) {
		if (rec) {
			rbt_cqx_take(e, cqx);
			wc[got] = e->wcs[e->n - 1].wc;
		} else {
			rbt_cqx_capture(e, cqx, &x);
			wc[got] = x.wc;
		}
		got++;
		if (got == n || e->next_poll(cqx))
			break;
	}
	e->end_poll(cqx);
	if (rec) {
		/* api 0: to the program this was an ordinary ibv_poll_cq. */
		rbt_cqx_emit(e, cq, got, (uint32_t)n, 0, e->ts, rbt_now());
		rbt_dp_done();
	}
	return got;
}

struct ibv_cq *rbt_dp_create_ts_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				   struct ibv_comp_channel *channel, int comp_vector)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(ctx);
	struct ibv_cq_init_attr_ex a = { 0 };
	struct ibv_cq_ex *cqx;

	if (!c || !c->create_cq_ex || !c->ts_mask)
		return NULL;
	a.cqe = cqe;
	a.cq_context = cq_context;
	a.channel = channel;
	a.comp_vector = comp_vector;
	a.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	cqx = c->create_cq_ex(ctx, &a);
	if (!cqx)
		return NULL;
	if (!rbt_wrap_cqx(cqx, a.wc_flags, 1)) {
		/* Cannot poll it for the program: give it back, fall back. */
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
		return NULL;
	}
	rbt_emulating = 1;
	return ibv_cq_ex_to_cq(cqx);
}
