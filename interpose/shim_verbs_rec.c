/* shim_verbs_rec.c - the resource records both wrapper files emit (CQ, QP and SRQ
 * creates, device and port attributes: shim_verbs.c and the extended verbs of
 * shim_ext.c), and the table of QPs alive, from which each QP's final state is
 * queried on the way out (right before ibv_destroy_qp, and at exit()).
 *
 * Called on the slow path only, by wrappers that are recording. Must never be
 * reached from a post or a poll, and never fail the program: a full table only
 * costs the final state of the QPs beyond it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "interpose/shim.h"

/* ---- resource records ---------------------------------------------------------------- */
void rbt_rec_cq_create(uint64_t t0, uint64_t t1, int err, struct ibv_context *ctx,
		       struct ibv_cq *cq, uint32_t cqe_asked, struct ibv_comp_channel *ch,
		       uint32_t vec, int ex, uint64_t wc_flags, uint32_t flags,
		       int ts_source)
{
	struct rbt_event ev = { .type = RBT_EV_CQ_CREATE, .ts = t0 };
	struct rbt_ev_cq_create *e = &ev.u.cq_create;

	RBT_EV_HEAD(e, t1, cq ? 0 : -err, err);
	e->ctx = (uintptr_t)ctx;
	e->cq = (uintptr_t)cq;
	e->cqe_asked = cqe_asked;
	e->cqe = cq ? (uint64_t)cq->cqe : 0;
	e->channel = (uintptr_t)ch;
	e->comp_vector = vec;
	e->ex = ex;
	e->wc_flags = wc_flags;
	e->flags = flags;
	e->ts_source = ts_source;
	rbt_emit(&ev);
	rbt_emit_stack(RBT_EV_CQ_CREATE);
}

void rbt_rec_qp_create(uint64_t t0, uint64_t t1, int err, struct ibv_context *ctx,
		       struct ibv_qp *qp, const struct ibv_qp_init_attr_ex *a, int ex)
{
	struct rbt_event ev = { .type = RBT_EV_QP_CREATE, .ts = t0 };
	struct rbt_ev_qp_create *e = &ev.u.qp_create;

	RBT_EV_HEAD(e, t1, qp ? 0 : -err, err);
	e->ctx = (uintptr_t)ctx;
	e->pd = (uintptr_t)((a->comp_mask & IBV_QP_INIT_ATTR_PD) || !ex ? a->pd : NULL);
	e->qp = (uintptr_t)qp;
	e->qp_num = qp ? qp->qp_num : 0;
	e->qp_type = a->qp_type;
	e->send_cq = (uintptr_t)a->send_cq;
	e->recv_cq = (uintptr_t)a->recv_cq;
	e->srq = (uintptr_t)a->srq;
	e->xrcd = (uintptr_t)((a->comp_mask & IBV_QP_INIT_ATTR_XRCD) ? a->xrcd : NULL);
	e->max_send_wr = a->cap.max_send_wr;
	e->max_recv_wr = a->cap.max_recv_wr;
	e->max_send_sge = a->cap.max_send_sge;
	e->max_recv_sge = a->cap.max_recv_sge;
	e->max_inline_data = a->cap.max_inline_data;
	e->sq_sig_all = a->sq_sig_all;
	e->ex = ex;
	e->create_flags =
		(a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) ? a->create_flags : 0;
	e->send_ops_flags =
		(a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ? a->send_ops_flags : 0;
	rbt_emit(&ev);
	rbt_emit_stack(RBT_EV_QP_CREATE);
	if (qp)
		rbt_live_add(qp);
}

void rbt_rec_srq_create(uint64_t t0, uint64_t t1, int err, struct ibv_pd *pd,
			struct ibv_srq *srq, const struct ibv_srq_init_attr_ex *a)
{
	struct rbt_event ev = { .type = RBT_EV_SRQ_CREATE, .ts = t0 };
	struct rbt_ev_srq_create *e = &ev.u.srq_create;

	RBT_EV_HEAD(e, t1, srq ? 0 : -err, err);
	e->pd = (uintptr_t)pd;
	e->srq = (uintptr_t)srq;
	e->max_wr = a->attr.max_wr;
	e->max_sge = a->attr.max_sge;
	e->srq_limit = a->attr.srq_limit;
	e->srq_type =
		(a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? a->srq_type : IBV_SRQT_BASIC;
	e->xrcd = (uintptr_t)((a->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) ? a->xrcd : NULL);
	e->cq = (uintptr_t)((a->comp_mask & IBV_SRQ_INIT_ATTR_CQ) ? a->cq : NULL);
	if (srq && e->srq_type == IBV_SRQT_XRC &&
	    srq->context->abi_compat == __VERBS_ABI_IS_EXTENDED) {
		uint32_t n = 0;
		struct verbs_context *v = verbs_get_ctx(srq->context);
		if (v->sz >= sizeof(struct verbs_context) -
				     offsetof(struct verbs_context, get_srq_num) &&
		    v->get_srq_num && !v->get_srq_num(srq, &n))
			e->srqn = n;
	}
	rbt_emit(&ev);
	rbt_emit_stack(RBT_EV_SRQ_CREATE);
}

/* The fields of struct ibv_port_attr and of struct ibv_device_attr a record keeps
 * under their own names. */
/* clang-format off */
#define RBT_PORT_ATTR_FIELDS(X) \
	X(state) X(max_mtu) X(active_mtu) X(lid) X(sm_lid) X(link_layer) \
	X(gid_tbl_len) X(active_speed) X(active_width)
#define RBT_DEVICE_ATTR_FIELDS(X) \
	X(vendor_id) X(vendor_part_id) X(max_mr_size) X(max_qp) X(max_qp_wr) \
	X(max_sge) X(max_cq) X(max_cqe) X(max_mr) X(max_pd) X(max_qp_rd_atom) \
	X(max_qp_init_rd_atom) X(max_srq) X(max_srq_wr) X(atomic_cap) \
	X(phys_port_cnt)
/* clang-format on */

void rbt_rec_port_attr(struct ibv_context *ctx, uint8_t port,
		       const struct ibv_port_attr *a)
{
	struct rbt_event ev = { .type = RBT_EV_PORT_ATTR, .ts = rbt_now() };
	struct rbt_ev_port_attr *e = &ev.u.port_attr;
	__typeof__(&ibv_query_gid) qgid = rbt_next_ibv_query_gid();
	union ibv_gid gid;

	e->ctx = (uintptr_t)ctx;
	e->port = port;
	RBT_PORT_ATTR_FIELDS(RBT_COPY_FIELD)
	rbt_tls_inside++;
	if (qgid && a->gid_tbl_len > 0 && !qgid(ctx, port, 0, &gid)) {
		e->gid0.data = gid.raw;
		e->gid0.len = sizeof(gid.raw);
	}
	rbt_tls_inside--;
	rbt_emit(&ev);
}

void rbt_rec_device_attr(struct ibv_context *ctx, const struct ibv_device_attr *a,
			 uint64_t ts_mask, uint64_t core_clock)
{
	struct rbt_event ev = { .type = RBT_EV_DEVICE_ATTR, .ts = rbt_now() };
	struct rbt_ev_device_attr *e = &ev.u.device_attr;
	char fw[sizeof(a->fw_ver) + 1];

	memcpy(fw, a->fw_ver, sizeof(a->fw_ver));
	fw[sizeof(a->fw_ver)] = 0;
	e->ctx = (uintptr_t)ctx;
	e->fw_ver = fw;
	RBT_DEVICE_ATTR_FIELDS(RBT_COPY_FIELD)
	e->completion_timestamp_mask = ts_mask;
	e->hca_core_clock = core_clock;
	rbt_emit(&ev);
}

/* ---- QPs alive, and each one's final state ------------------------------------------
 * The state a QP ended in is what the device says, not what the program last asked
 * for (a responder goes to ERR on a remote access error by itself): the recorder
 * queries it on the way out, right before ibv_destroy_qp, and at exit() for every
 * QP still alive. Never on a post or a poll. The table is touched only by creates,
 * destroys, closes and exit, under its lock. */
#define RBT_LIVE_QPS 16384
static struct {
	struct ibv_qp *qp;
	struct ibv_context *ctx;
} rbt_live[RBT_LIVE_QPS];
static int rbt_nlive;
static pthread_mutex_t rbt_live_lock = PTHREAD_MUTEX_INITIALIZER;

/* A QP the trace created (beyond RBT_LIVE_QPS alive: only its destroy is seen). */
void rbt_live_add(struct ibv_qp *qp)
{
	pthread_mutex_lock(&rbt_live_lock);
	if (rbt_nlive < RBT_LIVE_QPS) {
		rbt_live[rbt_nlive].qp = qp;
		rbt_live[rbt_nlive].ctx = qp->context;
		rbt_nlive++;
	}
	pthread_mutex_unlock(&rbt_live_lock);
}

/* Under rbt_live_lock: drops qp (or every QP of ctx); 1 if it was there. */
static int rbt_live_del_locked(struct ibv_qp *qp, struct ibv_context *ctx)
{
	int found = 0;

	for (int i = rbt_nlive - 1; i >= 0; i--)
		if (qp ? rbt_live[i].qp == qp : rbt_live[i].ctx == ctx) {
			rbt_live[i] = rbt_live[--rbt_nlive];
			found = 1;
		}
	return found;
}

void rbt_live_del_ctx(struct ibv_context *ctx)
{
	pthread_mutex_lock(&rbt_live_lock);
	rbt_live_del_locked(NULL, ctx);
	pthread_mutex_unlock(&rbt_live_lock);
}

/* The child writes its own trace, which does not hold the parent's QPs. */
void rbt_live_qps_forget(void)
{
	pthread_mutex_init(&rbt_live_lock, NULL);
	rbt_nlive = 0;
}

/* Queries qp's state (untraced: the tracer's own call) and records it. */
static void rbt_rec_final_state(struct ibv_qp *qp, int why)
{
	__typeof__(&ibv_query_qp) query = rbt_next_ibv_query_qp();
	struct rbt_event ev = { .type = RBT_EV_QP_FINAL_STATE };
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int saved = errno, ret;

	memset(&a, 0, sizeof(a));
	ev.ts = rbt_now();
	rbt_tls_inside++;
	ret = query ? query(qp, &a, IBV_QP_STATE, &ia) : ENOSYS;
	rbt_tls_inside--;
	ev.u.qp_final_state.ts_exit = rbt_now();
	ev.u.qp_final_state.ret = ret;
	ev.u.qp_final_state.qp = (uintptr_t)qp;
	ev.u.qp_final_state.qp_num = qp->qp_num;
	ev.u.qp_final_state.qp_state = ret ? 0 : (uint64_t)a.qp_state;
	ev.u.qp_final_state.why = (uint64_t)why;
	rbt_emit(&ev);
	errno = saved;
}

int rbt_live_take(struct ibv_qp *qp, int final_state)
{
	int had;

	if (!qp)
		return 0;
	pthread_mutex_lock(&rbt_live_lock);
	had = rbt_live_del_locked(qp, NULL);
	if (final_state)
		rbt_rec_final_state(qp, 0);
	pthread_mutex_unlock(&rbt_live_lock);
	return had;
}

/* exit(): every QP still alive, before the trace is finished. Under the lock:
 * another thread's ibv_destroy_qp takes its QP out of the table (under it)
 * before destroying it, so no QP queried here is being destroyed. */
void rbt_final_states_at_exit(void)
{
	/* recording, and not finishing (never park in exit()) */
	if (atomic_load(&rbt_state) != 1 || rbt_tls_inside)
		return;
	pthread_mutex_lock(&rbt_live_lock);
	for (int i = 0; i < rbt_nlive; i++)
		rbt_rec_final_state(rbt_live[i].qp, 1);
	pthread_mutex_unlock(&rbt_live_lock);
}
