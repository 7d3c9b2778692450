/*
 * softnic ibv_wr_* builder: the ibv_qp_ex send ops. WRs are gathered in a
 * per-QP buffer between wr_start and wr_complete and then submitted like
 * post_send's. No allocation after QP creation.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "softnic_data.h"

/* ---------------- ibv_wr_* (ibv_qp_ex) ---------------- */

#define sn_qpx(q) ((struct sn_qp *)(q))

static struct sn_swr *sn_wr_cur(struct sn_qp *qp)
{
	return qp->wr_nwr
		       ? (struct sn_swr *)(qp->wr_buf + (qp->wr_nwr - 1) * qp->wr_stride)
		       : NULL;
}

static struct sn_swr *sn_wr_new(struct ibv_qp_ex *qx, uint32_t op)
{
	struct sn_qp *qp = sn_qpx(qx);
	struct sn_swr *w;

	if (!qp->wr_buf || qp->wr_nwr >= qp->max_send_wr) {
		qp->wr_err = ENOMEM;
		return NULL;
	}
	if (sn_check_op(qx->qp_base.qp_type, op)) {
		qp->wr_err = EINVAL;
		return NULL;
	}
	w = (struct sn_swr *)(qp->wr_buf + qp->wr_nwr * qp->wr_stride);
	qp->wr_nwr++;
	memset(w, 0, sizeof(*w));
	w->sge = (struct ibv_sge *)(w + 1);
	w->wr_id = qx->wr_id;
	w->flags = qx->wr_flags;
	w->opcode = op;
	return w;
}

/* The ibv_wr_* builder's buffers; from the QP's parent domain's allocator
 * when it has one (SN_RES_TYPE_QP), else the heap. 0 or -ENOMEM. */
int sn_qp_wr_buf_alloc(struct sn_qp *qp)
{
	struct sn_pd *pd = (struct sn_pd *)qp->qpx.qp_base.pd;
	size_t n;

	qp->wr_stride = (uint32_t)(sizeof(struct sn_swr) +
				   (qp->max_send_sge ? qp->max_send_sge : 1) *
					   sizeof(struct ibv_sge));
	n = (size_t)(qp->max_send_wr ? qp->max_send_wr : 1) * qp->wr_stride;
	if (pd && pd->parent && pd->alloc) {
		void *p = pd->alloc(&pd->pd, pd->pd_context, n, 64, SN_RES_TYPE_QP);

		if (!p)
			return -ENOMEM;
		if (p != IBV_ALLOCATOR_USE_DEFAULT) {
			memset(p, 0, n);
			qp->wr_buf = p;
			qp->wr_buf_pd = pd;
		}
	}
	if (!qp->wr_buf)
		qp->wr_buf = calloc(1, n);
	qp->wr_inl_cap = 1 << 20;
	qp->wr_inl = malloc(qp->wr_inl_cap);
	return qp->wr_buf && qp->wr_inl ? 0 : -ENOMEM;
}

void sn_qp_wr_buf_free(struct sn_qp *qp)
{
	if (qp->wr_buf_pd && qp->wr_buf_pd->free)
		qp->wr_buf_pd->free(&qp->wr_buf_pd->pd, qp->wr_buf_pd->pd_context,
				    qp->wr_buf, SN_RES_TYPE_QP);
	else if (!qp->wr_buf_pd)
		free(qp->wr_buf);
	free(qp->wr_inl);
	qp->wr_buf = qp->wr_inl = NULL;
	qp->wr_buf_pd = NULL;
}

static void sn_wr_start(struct ibv_qp_ex *qx)
{
	struct sn_qp *qp = sn_qpx(qx);

	if (!qp->wr_buf)
		sn_qp_wr_buf_alloc(qp); /* failing, the first wr_* says ENOMEM */
	qp->wr_nwr = 0;
	qp->wr_err = 0;
	qp->wr_inl_used = 0;
}

static void sn_wr_send(struct ibv_qp_ex *qx)
{
	sn_wr_new(qx, IBV_WR_SEND);
}

static void sn_wr_send_imm(struct ibv_qp_ex *qx, __be32 imm)
{
	struct sn_swr *w = sn_wr_new(qx, IBV_WR_SEND_WITH_IMM);

	if (w)
		w->imm = imm;
}

/* a WR naming remote memory: RDMA and atomics */
static struct sn_swr *sn_wr_remote(struct ibv_qp_ex *qx, uint32_t op, uint32_t rkey,
				   uint64_t raddr)
{
	struct sn_swr *w = sn_wr_new(qx, op);

	if (w) {
		w->rkey = rkey;
		w->raddr = raddr;
	}
	return w;
}

static void sn_wr_rdma(struct ibv_qp_ex *qx, uint32_t op, uint32_t rkey, uint64_t raddr,
		       __be32 imm)
{
	struct sn_swr *w = sn_wr_remote(qx, op, rkey, raddr);

	if (w)
		w->imm = imm;
}

static void sn_wr_rdma_write(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t raddr)
{
	sn_wr_rdma(qx, IBV_WR_RDMA_WRITE, rkey, raddr, 0);
}

static void sn_wr_rdma_write_imm(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t raddr,
				 __be32 imm)
{
	sn_wr_rdma(qx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, raddr, imm);
}

static void sn_wr_rdma_read(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t raddr)
{
	sn_wr_rdma(qx, IBV_WR_RDMA_READ, rkey, raddr, 0);
}

static void sn_wr_cmp_swp(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t raddr,
			  uint64_t cmp, uint64_t swap)
{
	struct sn_swr *w = sn_wr_remote(qx, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, raddr);

	if (w) {
		w->cmp_add = cmp;
		w->swap = swap;
	}
}

static void sn_wr_fetch_add(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t raddr,
			    uint64_t add)
{
	struct sn_swr *w = sn_wr_remote(qx, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, raddr);

	if (w)
		w->cmp_add = add;
}

static void sn_wr_unsupported(struct ibv_qp_ex *qx)
{
	sn_qpx(qx)->wr_err = EOPNOTSUPP;
}

static void sn_wr_bind_mw(struct ibv_qp_ex *qx, struct ibv_mw *mw, uint32_t rkey,
			  const struct ibv_mw_bind_info *bi)
{
	struct sn_swr *w = sn_wr_new(qx, IBV_WR_BIND_MW);

	if (w) {
		w->mw = (struct sn_mw *)mw;
		w->rkey = rkey;
		w->raddr = bi->addr;
		w->mw_len = bi->length;
		w->mr_key = bi->mr ? bi->mr->lkey : 0;
		w->mw_access = bi->mw_access_flags;
	}
}

static void sn_wr_local_inv(struct ibv_qp_ex *qx, uint32_t rkey)
{
	struct sn_swr *w = sn_wr_new(qx, IBV_WR_LOCAL_INV);

	if (w)
		w->rkey = rkey;
}

static void sn_wr_send_inv(struct ibv_qp_ex *qx, uint32_t rkey)
{
	struct sn_swr *w = sn_wr_new(qx, IBV_WR_SEND_WITH_INV);

	if (w)
		w->rkey = rkey;
}

/* ibv_bind_mw (type 1; verbs.h has checked the type, the MR's PD): a BIND_MW
 * WR with the key's next tag. mw->rkey takes the new key now, as rdma-core's
 * providers do; ibv_bind_mw(3) leaves restoring it to the application if
 * the completion reports an error. */
int sn_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
	struct ibv_send_wr wr, *bad;
	int ret;

	if (b->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED)
		return EINVAL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = b->wr_id;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = b->send_flags;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = b->bind_info;
	ret = sn_post_send(qp, &wr, &bad);
	if (!ret)
		mw->rkey = wr.bind_mw.rkey;
	return ret;
}

static void sn_wr_send_tso(struct ibv_qp_ex *qx, void *hdr, uint16_t hsz, uint16_t mss)
{
	sn_wr_unsupported(qx);
}

static void sn_wr_set_xrc_srqn(struct ibv_qp_ex *qx, uint32_t srqn)
{
	struct sn_swr *w = sn_wr_cur(sn_qpx(qx));

	if (w)
		w->xsrqn = srqn;
}

static void sn_wr_atomic_write(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t raddr,
			       const void *data)
{
	sn_wr_unsupported(qx);
}

static void sn_wr_set_ud_addr(struct ibv_qp_ex *qx, struct ibv_ah *ah, uint32_t qpn,
			      uint32_t qkey)
{
	struct sn_swr *w = sn_wr_cur(sn_qpx(qx));

	if (w) {
		w->ah = ah;
		w->rqpn = qpn;
		w->rqkey = qkey;
	}
}

static void sn_wr_set_sge_list(struct ibv_qp_ex *qx, size_t n, const struct ibv_sge *sg)
{
	struct sn_qp *qp = sn_qpx(qx);
	struct sn_swr *w = sn_wr_cur(qp);

	if (!w)
		return;
	if (n > qp->max_send_sge) {
		qp->wr_err = EINVAL;
		return;
	}
	memcpy(w->sge, sg, n * sizeof(*sg));
	w->num_sge = (uint32_t)n;
}

static void sn_wr_set_sge(struct ibv_qp_ex *qx, uint32_t lkey, uint64_t addr,
			  uint32_t len)
{
	struct ibv_sge s = { .addr = addr, .length = len, .lkey = lkey };

	sn_wr_set_sge_list(qx, 1, &s);
}

static void sn_wr_set_inline_data_list(struct ibv_qp_ex *qx, size_t n,
				       const struct ibv_data_buf *bufs)
{
	struct sn_qp *qp = sn_qpx(qx);
	struct sn_swr *w = sn_wr_cur(qp);
	size_t i, len = 0;

	if (!w)
		return;
	for (i = 0; i < n; i++)
		len += bufs[i].length;
	if (len > qp->max_inline || qp->wr_inl_used + len > qp->wr_inl_cap) {
		qp->wr_err = len > qp->max_inline ? EINVAL : ENOMEM;
		return;
	}
	w->inl = qp->wr_inl + qp->wr_inl_used;
	for (i = 0; i < n; i++) {
		memcpy(qp->wr_inl + qp->wr_inl_used, bufs[i].addr, bufs[i].length);
		qp->wr_inl_used += (uint32_t)bufs[i].length;
	}
	w->inl_len = (uint32_t)len;
	w->flags |= IBV_SEND_INLINE;
}

static void sn_wr_set_inline_data(struct ibv_qp_ex *qx, void *addr, size_t len)
{
	struct ibv_data_buf b = { .addr = addr, .length = len };

	sn_wr_set_inline_data_list(qx, 1, &b);
}

static int sn_wr_complete(struct ibv_qp_ex *qx)
{
	struct sn_qp *qp = sn_qpx(qx);
	uint32_t i, st = atomic_load(&qp->shm->state);
	bool kick = false;
	int ret = qp->wr_err;

	if (!ret && st != IBV_QPS_RTS && st != IBV_QPS_ERR && st != IBV_QPS_SQE)
		ret = EINVAL;
	if (ret) {
		qp->wr_nwr = 0;
		return ret;
	}
	sn_qp_lock(qp);
	if (qp->sq_head + qp->wr_nwr - atomic_load(&qp->sq_tail) > qp->max_send_wr) {
		sn_qp_unlock(qp);
		qp->wr_nwr = 0;
		return ENOMEM;
	}
	for (i = 0; i < qp->wr_nwr; i++) {
		struct sn_swr *w = (struct sn_swr *)(qp->wr_buf + i * qp->wr_stride);

		w->sge = (struct ibv_sge *)(w + 1);
		w->sq_idx = qp->sq_head++;
		w->post_ns = SN_UNLIKELY(sn_g.model) ? sn_now_ns() : 0;
		kick |= sn_submit(qp, w);
	}
	sn_qp_unlock(qp);
	qp->wr_nwr = 0;
	if (kick)
		sn_helper_kick(qp);
	return 0;
}

static void sn_wr_abort(struct ibv_qp_ex *qx)
{
	sn_qpx(qx)->wr_nwr = 0;
}

void sn_qp_ex_init(struct sn_qp *qp)
{
	struct ibv_qp_ex *x = &qp->qpx;

	x->wr_atomic_cmp_swp = sn_wr_cmp_swp;
	x->wr_atomic_fetch_add = sn_wr_fetch_add;
	x->wr_bind_mw = sn_wr_bind_mw;
	x->wr_local_inv = sn_wr_local_inv;
	x->wr_rdma_read = sn_wr_rdma_read;
	x->wr_rdma_write = sn_wr_rdma_write;
	x->wr_rdma_write_imm = sn_wr_rdma_write_imm;
	x->wr_send = sn_wr_send;
	x->wr_send_imm = sn_wr_send_imm;
	x->wr_send_inv = sn_wr_send_inv;
	x->wr_send_tso = sn_wr_send_tso;
	x->wr_set_ud_addr = sn_wr_set_ud_addr;
	x->wr_set_xrc_srqn = sn_wr_set_xrc_srqn;
	x->wr_set_inline_data = sn_wr_set_inline_data;
	x->wr_set_inline_data_list = sn_wr_set_inline_data_list;
	x->wr_set_sge = sn_wr_set_sge;
	x->wr_set_sge_list = sn_wr_set_sge_list;
	x->wr_start = sn_wr_start;
	x->wr_complete = sn_wr_complete;
	x->wr_abort = sn_wr_abort;
	x->wr_atomic_write = sn_wr_atomic_write;
}

/* SOFTNIC_QUIRKS=mlx5: as mlx5 does on every move to RTS and to RESET, the
 * qp_ex's wr_* pointers are written again (over whatever a wrapper such as
 * the recorder put there), and in RTS wr_complete is another function. */
static int sn_wr_complete_rts(struct ibv_qp_ex *qx)
{
	return sn_wr_complete(qx);
}

void sn_qp_ex_rewrite(struct sn_qp *qp, uint32_t state)
{
	sn_qp_ex_init(qp);
	if (state == IBV_QPS_RTS)
		qp->qpx.wr_complete = sn_wr_complete_rts;
}
