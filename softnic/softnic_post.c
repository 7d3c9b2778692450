/*
 * softnic posting: receive queues (post_recv, post_srq_recv, taking and
 * flushing receives) and post_send, which checks each WR and hands it to the
 * executor or to the pending queue. No allocation and no syscalls here.
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

/* ---------------- receive queues ---------------- */

static inline struct sn_rwqe *sn_rq_slot(struct sn_rq_shm *rq, uint64_t i)
{
	return (struct sn_rwqe *)(rq->slots + (size_t)(i & (rq->ring - 1)) * rq->stride);
}

/* Claim the oldest receive; copy it out before the CAS so that the owner
 * cannot reuse the slot under us. */
bool sn_rq_take(struct sn_rq_shm *rq, struct sn_rwqe *out)
{
	uint64_t c = atomic_load_explicit(&rq->cons, memory_order_acquire);

	for (;;) {
		uint64_t p = atomic_load_explicit(&rq->prod, memory_order_acquire);
		struct sn_rwqe *s;
		uint32_t ns;

		if (c >= p)
			return false;
		s = sn_rq_slot(rq, c);
		ns = s->num_sge <= rq->max_sge ? s->num_sge : rq->max_sge;
		memcpy(out, s, sizeof(*s) + ns * sizeof(struct ibv_sge));
		out->num_sge = ns;
		if (atomic_compare_exchange_weak_explicit(&rq->cons, &c, c + 1,
							  memory_order_acq_rel,
							  memory_order_acquire))
			return true;
	}
}

void sn_rq_flush(struct sn_rq_shm *rq, struct sn_cq_shm *cq, uint32_t qpn, int *chan_fd)
{
	unsigned char buf[sizeof(struct sn_rwqe) + SN_MAX_SGE * sizeof(struct ibv_sge)];
	struct sn_rwqe *w = (struct sn_rwqe *)buf;

	while (sn_rq_take(rq, w)) {
		struct sn_cqe c = { 0 };

		c.wr_id = w->wr_id;
		c.status = IBV_WC_WR_FLUSH_ERR;
		c.opcode = IBV_WC_RECV;
		c.qp_num = qpn;
		if (cq)
			sn_cq_push(cq, &c, chan_fd);
	}
}

static int sn_rq_post(struct sn_rq_shm *rq, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad)
{
	uint64_t prod = atomic_load_explicit(&rq->prod, memory_order_relaxed);

	for (; wr; wr = wr->next) {
		struct sn_rwqe *s;

		if (prod - atomic_load_explicit(&rq->cons, memory_order_acquire) >=
		    rq->max_wr) {
			*bad = wr;
			atomic_store_explicit(&rq->prod, prod, memory_order_release);
			return ENOMEM;
		}
		if ((uint32_t)wr->num_sge > rq->max_sge || wr->num_sge < 0) {
			*bad = wr;
			atomic_store_explicit(&rq->prod, prod, memory_order_release);
			return EINVAL;
		}
		s = sn_rq_slot(rq, prod);
		s->wr_id = wr->wr_id;
		s->num_sge = (uint32_t)wr->num_sge;
		memcpy(s->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(struct ibv_sge));
		prod++;
	}
	atomic_store_explicit(&rq->prod, prod, memory_order_release);
	return 0;
}

int sn_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct sn_qp *qp = sn_qp_of(ibqp);
	uint32_t st = atomic_load_explicit(&qp->shm->state, memory_order_relaxed);
	int ret;

	if (SN_UNLIKELY(qp->srq || st == IBV_QPS_RESET || !qp->rcq)) {
		*bad = wr;
		return EINVAL; /* on an SRQ, XRC, or too early */
	}
	sn_spin_lock(&qp->rq_lock);
	ret = sn_rq_post(&qp->shm->rq, wr, bad);
	sn_spin_unlock(&qp->rq_lock);
	/* a QP in ERR flushes what it is given, also if it got there while
	 * we were posting */
	if (SN_UNLIKELY(atomic_load(&qp->shm->state) == IBV_QPS_ERR))
		sn_rq_flush(&qp->shm->rq, qp->rcq->shm, qp->shm->qpn, &qp->rcq->chan_wfd);
	return ret;
}

int sn_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
		     struct ibv_recv_wr **bad)
{
	struct sn_srq *srq = (struct sn_srq *)ibsrq;
	int ret;

	sn_spin_lock(&srq->lock);
	ret = sn_rq_post(&srq->shm->rq, wr, bad);
	sn_spin_unlock(&srq->lock);
	return ret;
}
/* ---------------- post_send ---------------- */

int sn_check_op(uint32_t type, uint32_t op)
{
	if (type == IBV_QPT_XRC_RECV)
		return EINVAL; /* a TGT QP has no send queue */
	switch (op) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		return 0;
	case IBV_WR_BIND_MW: /* ibv_bind_mw(3): UC, RC or XRC_SEND */
	case IBV_WR_LOCAL_INV:
	case IBV_WR_SEND_WITH_INV:
		return type == IBV_QPT_UD ? EINVAL : 0;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return type == IBV_QPT_UD ? EINVAL : 0;
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND ? 0 : EINVAL;
	case IBV_WR_TSO:
	case IBV_WR_DRIVER1:
	case IBV_WR_ATOMIC_WRITE:
		return EOPNOTSUPP; /* real opcodes softnic does not implement */
	default:
		return EINVAL;
	}
}

int sn_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct sn_qp *qp = sn_qp_of(ibqp);
	uint32_t type = ibqp->qp_type;
	uint32_t st = atomic_load_explicit(&qp->shm->state, memory_order_relaxed);
	bool kick = false;
	int ret = 0;

	if (SN_UNLIKELY(st < IBV_QPS_RTS ||
			(st > IBV_QPS_RTS && st != IBV_QPS_ERR && st != IBV_QPS_SQE))) {
		*bad = wr;
		return EINVAL;
	}
	sn_qp_lock(qp);
	for (; wr; wr = wr->next) {
		struct sn_swr w;

		if (SN_UNLIKELY((uint32_t)wr->num_sge > qp->max_send_sge ||
				wr->num_sge < 0)) {
			ret = EINVAL;
			break;
		}
		ret = sn_check_op(type, wr->opcode);
		if (SN_UNLIKELY(ret))
			break;
		if (SN_UNLIKELY(qp->sq_head -
					atomic_load_explicit(&qp->sq_tail,
							     memory_order_acquire) >=
				qp->max_send_wr)) {
			ret = ENOMEM;
			break;
		}
		if (wr->send_flags & IBV_SEND_INLINE) {
			uint32_t len = 0;
			int i;

			for (i = 0; i < wr->num_sge; i++)
				len += wr->sg_list[i].length;
			if (SN_UNLIKELY(len > qp->max_inline)) {
				ret = EINVAL;
				break;
			}
		}
		w.wr_id = wr->wr_id;
		w.opcode = wr->opcode;
		w.flags = wr->send_flags;
		w.num_sge = (uint32_t)wr->num_sge;
		w.sge = wr->sg_list;
		w.imm = wr->imm_data;
		w.inl = NULL;
		w.inl_len = 0;
		w.ah = NULL;
		w.byte_len = 0;
		w.vis_ns = 0;
		w.xsrqn = type == IBV_QPT_XRC_SEND ? wr->qp_type.xrc.remote_srqn : 0;
		w.mw = NULL;
		if (SN_UNLIKELY(wr->opcode >= IBV_WR_LOCAL_INV &&
				wr->opcode <= IBV_WR_SEND_WITH_INV)) {
			if (wr->opcode == IBV_WR_BIND_MW) {
				const struct ibv_mw_bind_info *bi =
					&wr->bind_mw.bind_info;

				w.mw = (struct sn_mw *)wr->bind_mw.mw;
				w.rkey = wr->bind_mw.rkey;
				w.raddr = bi->addr;
				w.mw_len = bi->length;
				w.mr_key = bi->mr ? bi->mr->lkey : 0;
				w.mw_access = bi->mw_access_flags;
			} else {
				w.rkey = wr->invalidate_rkey;
			}
			if (wr->opcode != IBV_WR_SEND_WITH_INV)
				w.num_sge = 0; /* no data */
		} else if (type == IBV_QPT_UD) {
			w.ah = wr->wr.ud.ah;
			w.rqpn = wr->wr.ud.remote_qpn;
			w.rqkey = wr->wr.ud.remote_qkey;
		} else if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
			   wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			w.raddr = wr->wr.atomic.remote_addr;
			w.rkey = wr->wr.atomic.rkey;
			w.cmp_add = wr->wr.atomic.compare_add;
			w.swap = wr->wr.atomic.swap;
		} else {
			w.raddr = wr->wr.rdma.remote_addr;
			w.rkey = wr->wr.rdma.rkey;
		}
		w.sq_idx = qp->sq_head++;
		w.post_ns = SN_UNLIKELY(sn_g.model) ? sn_now_ns() : 0;
		kick |= sn_submit(qp, &w);
	}
	sn_qp_unlock(qp);
	if (ret)
		*bad = wr;
	if (SN_UNLIKELY(kick))
		sn_helper_kick(qp);
	return ret;
}
