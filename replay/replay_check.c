/* replay_check.c - the refusals: everything the device must offer for a trace
 * (QP types, queue depths, SGEs, CQ and SRQ sizes, atomics, path MTU, MR sizes
 * and total memory) and every connected QP's peer, checked after the device is
 * opened and before any resource is created.
 *
 * Owns the words of each refusal. Must never create a resource or issue any
 * verb but the queries already done: a refused replay costs nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>

#include "replay/replay_int.h"

/* QP types the replayer rebuilds, and queue sizes the device allows. */
static int rp_check_qps(struct rp_job *j, const struct rp_side *s)
{
	const struct ibv_device_attr *d = &s->dattr;
	const char *p = s->path;

	for (int i = 0; i < s->nqp; i++) {
		const struct rbt_ev_qp_create *c = &s->qp[i].rec;

		if (c->qp_type != IBV_QPT_RC && c->qp_type != IBV_QPT_UC &&
		    c->qp_type != IBV_QPT_UD && !rp_is_xrc(c->qp_type)) {
			return rp_fail(j, -ENOTSUP,
				       "%s: QP %llu is of type %s, which the replayer "
				       "cannot rebuild",
				       p, (unsigned long long)c->qp_num,
				       rp_qpt_name(c->qp_type));
		}
		if (c->qp_type == IBV_QPT_XRC_RECV && !s->qp[i].xrcdi) {
			return rp_fail(j, -EINVAL,
				       "%s: QP %llu (XRC_RECV) names an XRC domain the "
				       "trace never opened",
				       p, (unsigned long long)c->qp_num);
		}
		if (c->max_send_wr > (uint64_t)d->max_qp_wr ||
		    c->max_recv_wr > (uint64_t)d->max_qp_wr) {
			return rp_fail(j, -ENOTSUP,
				       "%s: QP %llu needs %llu send / %llu receive WRs; "
				       "the device allows %d",
				       p, (unsigned long long)c->qp_num,
				       (unsigned long long)c->max_send_wr,
				       (unsigned long long)c->max_recv_wr, d->max_qp_wr);
		}
		if (c->max_send_sge > (uint64_t)d->max_sge ||
		    c->max_recv_sge > (uint64_t)d->max_sge) {
			return rp_fail(
				j, -ENOTSUP,
				"%s: QP %llu needs %llu SGEs; the device allows %d", p,
				(unsigned long long)c->qp_num,
				(unsigned long long)(c->max_send_sge > c->max_recv_sge
							     ? c->max_send_sge
							     : c->max_recv_sge),
				d->max_sge);
		}
	}
	return 0;
}

/* CQ and SRQ types and sizes. */
static int rp_check_queues(struct rp_job *j, const struct rp_side *s)
{
	const struct ibv_device_attr *d = &s->dattr;
	const char *p = s->path;

	for (int i = 0; i < s->ncq; i++)
		if (s->cq[i].rec.cqe_asked > (uint64_t)d->max_cqe) {
			return rp_fail(j, -ENOTSUP,
				       "%s: a CQ of %llu entries; the device allows %d",
				       p, (unsigned long long)s->cq[i].rec.cqe_asked,
				       d->max_cqe);
		}
	for (int i = 0; i < s->nsrq; i++) {
		const struct rp_srq *r = &s->srq[i];

		if (r->rec.srq_type != IBV_SRQT_BASIC &&
		    r->rec.srq_type != IBV_SRQT_XRC) {
			return rp_fail(j, -ENOTSUP,
				       "%s: SRQ %d is of type %llu (tag matching?), "
				       "which the replayer cannot rebuild",
				       p, i, (unsigned long long)r->rec.srq_type);
		}
		if (r->rec.srq_type == IBV_SRQT_XRC && (!r->xrcdi || !r->cqi)) {
			return rp_fail(j, -EINVAL,
				       "%s: XRC SRQ %llu names an XRC domain or CQ the "
				       "trace never created",
				       p, (unsigned long long)r->rec.srqn);
		}
	}
	for (int i = 0; i < s->nsrq; i++)
		if (s->srq[i].rec.max_wr > (uint64_t)d->max_srq_wr || d->max_srq == 0) {
			return rp_fail(j, -ENOTSUP,
				       "%s: an SRQ of %llu WRs; the device allows %d "
				       "(max %d SRQs)",
				       p, (unsigned long long)s->srq[i].rec.max_wr,
				       d->max_srq_wr, d->max_srq);
		}
	return 0;
}

/* Atomics, outstanding reads, path MTU. */
static int rp_check_limits(struct rp_job *j, const struct rp_side *s)
{
	const struct ibv_device_attr *d = &s->dattr;
	const char *p = s->path;

	if (s->uses_atomics && d->atomic_cap == IBV_ATOMIC_NONE) {
		return rp_fail(
			j, -ENOTSUP,
			"%s: the trace posts atomics; the device has no atomic support",
			p);
	}
	if (s->max_rd_atomic > d->max_qp_rd_atom) {
		return rp_fail(j, -ENOTSUP,
			       "%s: the trace asks %d outstanding reads/atomics per QP; "
			       "the device allows %d",
			       p, s->max_rd_atomic, d->max_qp_rd_atom);
	}
	for (int i = 0; i < s->nstep; i++) {
		const struct rbt_event *e = s->step[i].ev;

		if (e->type == RBT_EV_QP_MODIFY && !e->u.qp_modify.ret &&
		    (e->u.qp_modify.attr_mask & IBV_QP_PATH_MTU) &&
		    e->u.qp_modify.path_mtu > (uint64_t)s->pattr.active_mtu) {
			return rp_fail(j, -ENOTSUP,
				       "%s: the trace uses path MTU %d; the device's "
				       "active MTU is %d",
				       p, 128 << e->u.qp_modify.path_mtu,
				       128 << s->pattr.active_mtu);
		}
	}
	return 0;
}

/* Each MR, and all of them together. */
static int rp_check_memory(struct rp_job *j, const struct rp_side *s)
{
	const struct ibv_device_attr *d = &s->dattr;
	const char *p = s->path;
	uint64_t mem = 0;

	for (int i = 0; i < s->nmr; i++) {
		if (s->mr[i].length > d->max_mr_size) {
			return rp_fail(j, -ENOTSUP,
				       "%s: an MR of %llu bytes; the device allows %llu",
				       p, (unsigned long long)s->mr[i].length,
				       (unsigned long long)d->max_mr_size);
		}
		mem += s->mr[i].length;
	}
	if (mem > (8ull << 30)) {
		return rp_fail(j, -ENOMEM,
			       "%s: the trace registers %llu MiB of memory; refusing "
			       "more than 8 GiB",
			       p, (unsigned long long)(mem >> 20));
	}
	return 0;
}

int rp_check_side(struct rp_job *j, struct rp_side *s)
{
	const char *p = s->path;
	int rc;

	if (s->nqp == 0) {
		return rp_fail(j, -EINVAL,
			       "%s: the trace creates no QP: nothing to replay", p);
	}
	if ((rc = rp_check_qps(j, s)) || (rc = rp_check_queues(j, s)) ||
	    (rc = rp_check_limits(j, s)))
		return rc;
	return rp_check_memory(j, s);
}

/* Every connected QP must find its peer among the traces (or over the network). */
int rp_check_pairs(struct rp_job *j)
{
	for (int si = 0; si < j->nside; si++) {
		struct rp_side *s = &j->side[si];

		for (int i = 0; i < s->nqp; i++) {
			struct rp_qp *q = &s->qp[i];
			int found = 0;

			if (!q->has_dest || q->rec.qp_type == IBV_QPT_UD)
				continue;
			for (int sj = 0; sj < j->nside && !found; sj++) {
				struct rp_qp *o =
					rp_qp_by_rec_qpn(&j->side[sj], q->rec_dest_qpn);

				if (o && o != q)
					found = 1;
			}
			if (!found && j->peer_is_responder && rp_is_xrc(q->rec.qp_type)) {
				return rp_fail(j, -ENOTSUP,
					       "%s: QP %llu is of type %s; the responder "
					       "stands in for RC/UC peers only: give the "
					       "trace of QP %u's end too",
					       s->path, (unsigned long long)q->rec.qp_num,
					       rp_qpt_name(q->rec.qp_type),
					       q->rec_dest_qpn);
			}
			if (!found && j->net_fd < 0 && !q->send_ids.n && !q->recv_ids.n) {
				/* a window that begins after the peer's end (a
				 * snapshot, a later file of a series): nothing goes
				 * over it, so it needs no peer */
				fprintf(j->log,
					"rbtrace replay: %s: QP %llu was connected to QP "
					"%u, which is in none of the given traces; it "
					"posts nothing here, so it is left unpaired\n",
					s->path, (unsigned long long)q->rec.qp_num,
					q->rec_dest_qpn);
				q->has_dest = 0;
				continue;
			}
			if (!found && j->net_fd < 0) {
				return rp_fail(
					j, -EINVAL,
					"%s: QP %llu was connected to QP %u, which is in "
					"none of the given traces; give the peer's trace "
					"too, or --connect to a peer replayer or to "
					"'rbtrace replay --responder'",
					s->path, (unsigned long long)q->rec.qp_num,
					q->rec_dest_qpn);
			}
		}
	}
	return 0;
}
