/* shim_verbs.c - the exported libibverbs functions librbtrace.so defines in front
 * of the real ones (same names, same symbol versions, listed in rbt_verbs.h).
 *
 * Shape of every wrapper: take the time, call the next definition (found with
 * dlvsym(RTLD_NEXT)), take the time, record, then return exactly what the real
 * call returned with errno as it left it. Calls made while this thread is already
 * inside the tracer (or inside a wrapped verb, e.g. a provider calling an
 * exported verb) are forwarded untraced. Nothing here may fail the program.
 * The records the extended verbs share (CQ, QP, SRQ creates, attributes) and the
 * table of QPs alive are in shim_verbs_rec.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interpose/shim.h"

/* The next definition of a listed function (rbt_verbs.h), resolved once. */
#define RBT_RESOLVE(name) __typeof__(&name) real = rbt_next_##name()

/* Calls the real function with the tracer flag set (RBT_TIMED). */
#define RBT_CALL(lhs, expr) RBT_TIMED(rbt_tls_inside, lhs = expr)

/* Resolves name; without a next definition fails as the missing function would
 * (NULL with errno ENOSYS, or fail returned); forwards the call untraced when
 * the recorder is not recording. */
#define RBT_ENTER_PTR(name, args) \
	RBT_RESOLVE(name);        \
	if (!real) {              \
		errno = ENOSYS;   \
		return NULL;      \
	}                         \
	if (!rbt_recording()) {   \
		return real args; \
	}
#define RBT_ENTER_INT(name, fail, args) \
	RBT_RESOLVE(name);              \
	if (!real)                      \
		return fail;            \
	if (!rbt_recording()) {         \
		return real args;       \
	}

#define RBT_PERR(p) ((p) ? 0 : rerrno)
#define RBT_IERR(r) ((r) ? rerrno : 0)

/* ---- the wrappers' common shape ---------------------------------------------------
 * RBT_WRAP_PTR(ret_t, name, params, args, EV, lname, stack) and RBT_WRAP_INT(name,
 * fail, params, args, EV, lname, stack) define an exported wrapper in the common
 * shape: the entry (RBT_ENTER_*), the timed real call, the record's head, what
 * rbt_fill_<name>(ev, e, ret, params) adds, the record emitted (with a stack when
 * stack is set), and what the real call returned with its errno. Each macro ends
 * with the head of rbt_fill_<name>: its body follows the macro. (RBT_WRAP_REST,
 * the part they share, closes the wrapper's body.) */
#define RBT_ARGS(...) __VA_ARGS__
#define RBT_FILL_HEAD(ret_t, name, lname, params)                                   \
	static void rbt_fill_##name(struct rbt_event *ev, struct rbt_ev_##lname *e, \
				    ret_t ret, RBT_ARGS params)
#define RBT_WRAP_REST(ret_t, name, params, args, EV, lname, stack, r, err) \
	RBT_CALL(ret_t ret, real args);                                    \
	struct rbt_event ev = { .type = RBT_EV_##EV, .ts = t0 };           \
	RBT_EV_HEAD(&ev.u.lname, t1, r, err);                              \
	rbt_fill_##name(&ev, &ev.u.lname, ret, RBT_ARGS args);             \
	rbt_emit(&ev);                                                     \
	if (stack)                                                         \
		rbt_emit_stack(RBT_EV_##EV);                               \
	errno = rerrno;                                                    \
	return ret;                                                        \
	}                                                                  \
	RBT_FILL_HEAD(ret_t, name, lname, params)
#define RBT_WRAP_PTR(ret_t, name, params, args, EV, lname, stack)          \
	RBT_FILL_HEAD(ret_t, name, lname, params);                         \
	RBT_EXPORT ret_t name params                                       \
	{                                                                  \
		RBT_ENTER_PTR(name, args);                                 \
		RBT_WRAP_REST(ret_t, name, params, args, EV, lname, stack, \
			      ret ? 0 : -rerrno, RBT_PERR(ret))
#define RBT_WRAP_INT(name, fail, params, args, EV, lname, stack)              \
	RBT_FILL_HEAD(int, name, lname, params);                              \
	RBT_EXPORT int name params                                            \
	{                                                                     \
		RBT_ENTER_INT(name, fail, args);                              \
		RBT_WRAP_REST(int, name, params, args, EV, lname, stack, ret, \
			      RBT_IERR(ret))

/* ---- one-handle releases ----------------------------------------------------------- */
/* The verbs that release one object and return 0 or an errno all record the same
 * shape (ts_exit, ret, err, the handle), so they are written once. Columns: symbol
 * (its version is in rbt_verbs.h), handle type, event, its union member, its handle field, and whether the
 * data path keeps state for the object (forgotten once the release succeeded, after
 * the event so the event still names a live object). */
#define RBT_RELEASE_VERBS(X)                                                  \
	X(ibv_dealloc_pd, struct ibv_pd, PD_DEALLOC, pd_dealloc, pd, 0)       \
	X(ibv_dereg_mr, struct ibv_mr, MR_DEREG, mr_dereg, mr, 0)             \
	X(ibv_destroy_comp_channel, struct ibv_comp_channel, CHANNEL_DESTROY, \
	  channel_destroy, channel, 0)                                        \
	X(ibv_destroy_cq, struct ibv_cq, CQ_DESTROY, cq_destroy, cq, 1)       \
	X(ibv_destroy_srq, struct ibv_srq, SRQ_DESTROY, srq_destroy, srq, 0)  \
	X(ibv_destroy_ah, struct ibv_ah, AH_DESTROY, ah_destroy, ah, 0)

#define RBT_RELEASE_WRAPPER(name, htype, EV, lname, field, forget)       \
	RBT_EXPORT int name(htype *obj)                                  \
	{                                                                \
		RBT_RESOLVE(name);                                       \
		if (!real)                                               \
			return ENOSYS;                                   \
		if (!rbt_recording()) {                                  \
			int ret = real(obj);                             \
			if ((forget) && !ret)                            \
				rbt_dp_forget_obj(obj);                  \
			return ret;                                      \
		}                                                        \
		RBT_CALL(int ret, real(obj));                            \
		struct rbt_event ev = { .type = RBT_EV_##EV, .ts = t0 }; \
		RBT_EV_HEAD(&ev.u.lname, t1, ret, RBT_IERR(ret));        \
		ev.u.lname.field = (uintptr_t)obj;                       \
		rbt_emit(&ev);                                           \
		if ((forget) && !ret)                                    \
			rbt_dp_forget_obj(obj);                          \
		errno = rerrno;                                          \
		return ret;                                              \
	}

RBT_RELEASE_VERBS(RBT_RELEASE_WRAPPER)

/* ---- QP destroy: out of the table of QPs alive (shim_verbs_rec.c) first ------------ */
/* After the real destroy: forgotten, or (it failed) alive again. */
static void rbt_qp_destroyed(struct ibv_qp *qp, int ret, int had)
{
	if (!ret)
		rbt_dp_forget_obj(qp);
	else if (had)
		rbt_live_add(qp); /* still alive */
}

RBT_EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	RBT_RESOLVE(ibv_destroy_qp);
	if (!real)
		return ENOSYS;
	if (!rbt_recording()) {
		int had = rbt_live_take(qp, 0);
		int ret = real(qp);

		rbt_qp_destroyed(qp, ret, had);
		return ret;
	}
	/* out of the table first (exit's queries never meet a QP being
	 * destroyed), its state taken on the way */
	int had = rbt_live_take(qp, 1);
	RBT_CALL(int ret, real(qp));
	struct rbt_event ev = { .type = RBT_EV_QP_DESTROY, .ts = t0 };
	RBT_EV_HEAD(&ev.u.qp_destroy, t1, ret, RBT_IERR(ret));
	ev.u.qp_destroy.qp = (uintptr_t)qp;
	rbt_emit(&ev);
	rbt_qp_destroyed(qp, ret, had);
	errno = rerrno;
	return ret;
}

/* ---- devices ----------------------------------------------------------------------- */
RBT_EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	RBT_ENTER_PTR(ibv_get_device_list, (num));
	int n = 0;
	RBT_CALL(struct ibv_device * *list, real(&n));
	if (num)
		*num = n;
	struct rbt_event ev = { .type = RBT_EV_DEVICE_LIST, .ts = t0 };
	char names[1024] = "";
	size_t k = 0;
	for (int i = 0; list && i < n && k < sizeof(names) - 80; i++)
		k += snprintf(names + k, sizeof(names) - k, "%s%s", i ? "," : "",
			      list[i]->name);
	RBT_EV_HEAD(&ev.u.device_list, t1, list ? n : -rerrno, RBT_PERR(list));
	ev.u.device_list.names = names;
	rbt_emit(&ev);
	errno = rerrno;
	return list;
}

RBT_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	RBT_ENTER_PTR(ibv_open_device, (dev));
	RBT_CALL(struct ibv_context * ctx, real(dev));
	struct rbt_event ev = { .type = RBT_EV_DEVICE_OPEN, .ts = t0 };
	struct rbt_ev_device_open *e = &ev.u.device_open;
	__typeof__(&ibv_get_device_guid) guid = rbt_next_ibv_get_device_guid();
	RBT_EV_HEAD(e, t1, ctx ? 0 : -rerrno, RBT_PERR(ctx));
	e->ctx = (uintptr_t)ctx;
	e->name = dev ? dev->name : "";
	if (dev && guid) {
		rbt_tls_inside++;
		e->node_guid = be64toh(guid(dev));
		rbt_tls_inside--;
	}
	e->transport = dev ? (uint64_t)dev->transport_type : 0;
	e->node_type = dev ? (uint64_t)dev->node_type : 0;
	e->num_comp_vectors = ctx ? ctx->num_comp_vectors : 0;
	e->async_fd = ctx ? ctx->async_fd : 0;
	rbt_emit(&ev);
	rbt_emit_stack(RBT_EV_DEVICE_OPEN);
	if (ctx)
		rbt_dp_patch_context(ctx);
	errno = rerrno;
	return ctx;
}

RBT_EXPORT int ibv_close_device(struct ibv_context *ctx)
{
	RBT_RESOLVE(ibv_close_device);
	if (!real)
		return -1;
	/* Always, recording or not: the writer thread must stop reading this
	 * context's clock before the provider frees it. */
	struct rbt_nic_sample last;
	int have_last = rbt_dp_close_begin(ctx, &last);
	if (!rbt_recording()) {
		int r = real(ctx);
		int e = errno;
		rbt_dp_close_end(ctx, r);
		errno = e;
		return r;
	}
	if (have_last) {
		struct rbt_event cs;
		rbt_dp_nic_event(&last, &cs);
		rbt_emit(&cs);
	}
	RBT_CALL(int ret, real(ctx));
	rbt_dp_close_end(ctx, ret);
	struct rbt_event ev = { .type = RBT_EV_DEVICE_CLOSE, .ts = t0 };
	RBT_EV_HEAD(&ev.u.device_close, t1, ret, RBT_IERR(ret));
	ev.u.device_close.ctx = (uintptr_t)ctx;
	rbt_emit(&ev);
	if (!ret) {
		rbt_dp_forget_context(ctx);
		rbt_live_del_ctx(ctx); /* its QPs are gone with it */
	}
	errno = rerrno;
	return ret;
}

RBT_EXPORT int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	RBT_ENTER_INT(ibv_query_device, ENOSYS, (ctx, attr));
	RBT_CALL(int ret, real(ctx, attr));
	(void)t0;
	(void)t1;
	if (!ret)
		rbt_rec_device_attr(ctx, attr, 0, 0);
	errno = rerrno;
	return ret;
}

RBT_EXPORT int ibv_query_port(struct ibv_context *ctx, uint8_t port,
			      struct _compat_ibv_port_attr *attr)
{
	RBT_ENTER_INT(ibv_query_port, ENOSYS, (ctx, port, attr));
	RBT_CALL(int ret, real(ctx, port, attr));
	(void)t0;
	(void)t1;
	if (!ret) {
		/* The compat struct is struct ibv_port_attr up to link_layer. */
		struct ibv_port_attr a;
		memset(&a, 0, sizeof(a));
		memcpy(&a, attr, offsetof(struct ibv_port_attr, link_layer) + 1);
		rbt_rec_port_attr(ctx, port, &a);
	}
	errno = rerrno;
	return ret;
}

/* ---- PD, MR ------------------------------------------------------------------------- */
RBT_WRAP_PTR(struct ibv_pd *, ibv_alloc_pd, (struct ibv_context * ctx), (ctx), PD_ALLOC,
	     pd_alloc, 1)
{
	e->ctx = (uintptr_t)ctx;
	e->pd = (uintptr_t)ret;
}

static void rbt_rec_mr(uint64_t t0, uint64_t t1, int err, struct ibv_pd *pd,
		       struct ibv_mr *mr, void *addr, size_t len, uint64_t iova,
		       unsigned access, int api, int fd, uint64_t off)
{
	struct rbt_event ev = { .type = RBT_EV_MR_REG, .ts = t0 };
	struct rbt_ev_mr_reg *e = &ev.u.mr_reg;

	RBT_EV_HEAD(e, t1, mr ? 0 : -err, err);
	e->pd = (uintptr_t)pd;
	e->mr = (uintptr_t)mr;
	e->addr = (uintptr_t)addr;
	e->length = len;
	e->iova = iova;
	e->access = access;
	e->lkey = mr ? mr->lkey : 0;
	e->rkey = mr ? mr->rkey : 0;
	e->api = api;
	e->dmabuf_fd = fd;
	e->dmabuf_offset = off;
	rbt_emit(&ev);
	rbt_emit_stack(RBT_EV_MR_REG);
}

/* The registrations differ only in their arguments and in what they tell rbt_rec_mr:
 * address, length, iova, access, which call (api), dma-buf fd and offset. */
#define RBT_REG_MR_VERBS(X)                                                        \
	X(ibv_reg_mr, (struct ibv_pd * pd, void *addr, size_t len, int access),    \
	  (pd, addr, len, access), (addr, len, (uintptr_t)addr, access, 0, -1, 0)) \
	X(ibv_reg_mr_iova,                                                         \
	  (struct ibv_pd * pd, void *addr, size_t len, uint64_t iova, int access), \
	  (pd, addr, len, iova, access), (addr, len, iova, access, 1, -1, 0))      \
	X(ibv_reg_mr_iova2,                                                        \
	  (struct ibv_pd * pd, void *addr, size_t len, uint64_t iova,              \
	   unsigned int access),                                                   \
	  (pd, addr, len, iova, access), (addr, len, iova, access, 2, -1, 0))      \
	X(ibv_reg_dmabuf_mr,                                                       \
	  (struct ibv_pd * pd, uint64_t offset, size_t len, uint64_t iova, int fd, \
	   int access),                                                            \
	  (pd, offset, len, iova, fd, access), (NULL, len, iova, access, 3, fd, offset))

#define RBT_REG_MR_WRAPPER(name, params, args, rec)                     \
	RBT_EXPORT struct ibv_mr *name params                           \
	{                                                               \
		RBT_ENTER_PTR(name, args);                              \
		RBT_CALL(struct ibv_mr *mr, real args);                 \
		rbt_rec_mr(t0, t1, RBT_PERR(mr), pd, mr, RBT_ARGS rec); \
		errno = rerrno;                                         \
		return mr;                                              \
	}

RBT_REG_MR_VERBS(RBT_REG_MR_WRAPPER)

RBT_WRAP_INT(ibv_rereg_mr, ENOSYS,
	     (struct ibv_mr * mr, int flags, struct ibv_pd *pd, void *addr, size_t len,
	      int access),
	     (mr, flags, pd, addr, len, access), MR_REREG, mr_rereg, 1)
{
	e->mr = (uintptr_t)mr;
	e->flags = flags;
	e->pd = (uintptr_t)pd;
	e->addr = (uintptr_t)addr;
	e->length = len;
	e->access = access;
	e->lkey = mr ? mr->lkey : 0;
	e->rkey = mr ? mr->rkey : 0;
}

/* ---- completion channels and CQs ------------------------------------------------------ */
RBT_WRAP_PTR(struct ibv_comp_channel *, ibv_create_comp_channel,
	     (struct ibv_context * ctx), (ctx), CHANNEL_CREATE, channel_create, 1)
{
	e->ctx = (uintptr_t)ctx;
	e->channel = (uintptr_t)ret;
	e->fd = ret ? ret->fd : 0;
}

RBT_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe,
					void *cq_context,
					struct ibv_comp_channel *channel, int comp_vector)
{
	RBT_ENTER_PTR(ibv_create_cq, (ctx, cqe, cq_context, channel, comp_vector));
	struct ibv_cq *cq = NULL;
	int ts_source = 0;
	uint64_t t0 = rbt_now();
	if (rbt_cfg.nic_ts) {
		rbt_tls_inside++;
		cq = rbt_dp_create_ts_cq(ctx, cqe, cq_context, channel, comp_vector);
		rbt_tls_inside--;
		if (cq)
			ts_source = 2;
		else
			rbt_note(0,
				 "RBTRACE_NIC_TS: device gives no completion timestamps; "
				 "CQ created without");
	}
	if (!cq) {
		rbt_tls_inside++;
		cq = real(ctx, cqe, cq_context, channel, comp_vector);
		rbt_tls_inside--;
	}
	int rerrno = errno;
	uint64_t t1 = rbt_now();
	rbt_rec_cq_create(t0, t1, RBT_PERR(cq), ctx, cq, cqe, channel, comp_vector, 0,
			  ts_source ? IBV_WC_STANDARD_FLAGS |
					      IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
				    : 0,
			  0, ts_source);
	if (ts_source)
		rbt_dp_nic_cq_created(ctx);
	errno = rerrno;
	return cq;
}

RBT_WRAP_INT(ibv_resize_cq, ENOSYS, (struct ibv_cq * cq, int cqe), (cq, cqe), CQ_RESIZE,
	     cq_resize, 0)
{
	e->cq = (uintptr_t)cq;
	e->cqe = ret ? (uint64_t)cqe : (uint64_t)cq->cqe;
}

RBT_WRAP_INT(ibv_get_cq_event, -1,
	     (struct ibv_comp_channel * ch, struct ibv_cq **cq, void **cq_context),
	     (ch, cq, cq_context), GET_CQ_EVENT, get_cq_event, 0)
{
	e->channel = (uintptr_t)ch;
	e->cq = ret == 0 && cq ? (uintptr_t)*cq : 0;
}

RBT_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	RBT_RESOLVE(ibv_ack_cq_events);
	if (!real)
		return;
	if (!rbt_recording()) {
		real(cq, nevents);
		return;
	}
	int saved = errno;
	struct rbt_event ev = { .type = RBT_EV_ACK_CQ_EVENTS, .ts = rbt_now() };
	rbt_tls_inside++;
	real(cq, nevents);
	rbt_tls_inside--;
	ev.u.ack_cq_events.cq = (uintptr_t)cq;
	ev.u.ack_cq_events.nevents = nevents;
	rbt_emit(&ev);
	errno = saved;
}

/* ---- SRQ ------------------------------------------------------------------------------- */
RBT_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd,
					  struct ibv_srq_init_attr *attr)
{
	RBT_ENTER_PTR(ibv_create_srq, (pd, attr));
	RBT_CALL(struct ibv_srq * srq, real(pd, attr));
	struct ibv_srq_init_attr_ex a = { 0 };
	a.attr = attr->attr;
	a.comp_mask = IBV_SRQ_INIT_ATTR_PD;
	a.pd = pd;
	rbt_rec_srq_create(t0, t1, RBT_PERR(srq), pd, srq, &a);
	errno = rerrno;
	return srq;
}

RBT_WRAP_INT(ibv_modify_srq, ENOSYS,
	     (struct ibv_srq * srq, struct ibv_srq_attr *attr, int mask),
	     (srq, attr, mask), SRQ_MODIFY, srq_modify, 0)
{
	e->srq = (uintptr_t)srq;
	e->attr_mask = mask;
	e->max_wr = attr->max_wr;
	e->srq_limit = attr->srq_limit;
}

/* ---- QP ------------------------------------------------------------------------------------ */
RBT_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	RBT_ENTER_PTR(ibv_create_qp, (pd, attr));
	RBT_CALL(struct ibv_qp * qp, real(pd, attr));
	struct ibv_qp_init_attr_ex a = { 0 };
	a.send_cq = attr->send_cq;
	a.recv_cq = attr->recv_cq;
	a.srq = attr->srq;
	a.cap = attr->cap; /* as granted: the provider writes them back */
	a.qp_type = attr->qp_type;
	a.sq_sig_all = attr->sq_sig_all;
	a.pd = pd;
	rbt_rec_qp_create(t0, t1, RBT_PERR(qp), pd ? pd->context : NULL, qp, &a, 0);
	errno = rerrno;
	return qp;
}

RBT_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	RBT_RESOLVE(ibv_qp_to_qp_ex);
	if (!real)
		return NULL;
	rbt_tls_inside++;
	struct ibv_qp_ex *q = real(qp);
	rbt_tls_inside--;
	int saved = errno;
	if (q && rbt_recording())
		rbt_dp_wrap_qpx(qp);
	errno = saved;
	return q;
}

static void rbt_fill_ah(struct rbt_event *ev, const struct ibv_ah_attr *a, int modify)
{
#define RBT_AH_SET(dst)                                               \
	dst.ah_dlid = a->dlid;                                        \
	dst.ah_sl = a->sl;                                            \
	dst.ah_src_path_bits = a->src_path_bits;                      \
	dst.ah_static_rate = a->static_rate;                          \
	dst.ah_is_global = a->is_global;                              \
	dst.ah_dgid.data = a->is_global ? a->grh.dgid.raw : NULL;     \
	dst.ah_dgid.len = a->is_global ? sizeof(a->grh.dgid.raw) : 0; \
	dst.ah_flow_label = a->grh.flow_label;                        \
	dst.ah_sgid_index = a->grh.sgid_index;                        \
	dst.ah_hop_limit = a->grh.hop_limit;                          \
	dst.ah_traffic_class = a->grh.traffic_class;                  \
	dst.ah_port_num = a->port_num;
	if (modify) {
		RBT_AH_SET(ev->u.qp_modify)
	} else {
		RBT_AH_SET(ev->u.ah_create)
	}
}

/* The fields of struct ibv_qp_attr a modify's record keeps under their names. */
/* clang-format off */
#define RBT_QP_ATTR_FIELDS(X) \
	X(qp_state) X(cur_qp_state) X(path_mtu) X(qkey) X(rq_psn) X(sq_psn) \
	X(dest_qp_num) X(qp_access_flags) X(pkey_index) X(port_num) \
	X(max_rd_atomic) X(max_dest_rd_atomic) X(min_rnr_timer) X(timeout) \
	X(retry_cnt) X(rnr_retry) X(sq_draining) X(rate_limit)
/* clang-format on */

RBT_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	RBT_ENTER_INT(ibv_modify_qp, ENOSYS, (qp, attr, mask));
	RBT_CALL(int ret, real(qp, attr, mask));
	struct rbt_event ev = { .type = RBT_EV_QP_MODIFY, .ts = t0 };
	struct rbt_ev_qp_modify *e = &ev.u.qp_modify;
	RBT_EV_HEAD(e, t1, ret, RBT_IERR(ret));
	e->qp = (uintptr_t)qp;
	e->attr_mask = mask;
	const struct ibv_qp_attr *a = attr;
	RBT_QP_ATTR_FIELDS(RBT_COPY_FIELD)
	if (mask & IBV_QP_AV)
		rbt_fill_ah(&ev, &attr->ah_attr, 1);
	rbt_emit(&ev);
	rbt_emit_stack(RBT_EV_QP_MODIFY);
	/* Providers may reinstall their ibv_wr_* pointers on a state change. */
	rbt_dp_recheck_qpx(qp);
	errno = rerrno;
	return ret;
}

RBT_WRAP_INT(ibv_query_qp, ENOSYS,
	     (struct ibv_qp * qp, struct ibv_qp_attr *attr, int mask,
	      struct ibv_qp_init_attr *init),
	     (qp, attr, mask, init), QP_QUERY, qp_query, 0)
{
	e->qp = (uintptr_t)qp;
	e->attr_mask = mask;
	if (!ret) {
		e->qp_state = attr->qp_state;
		e->max_inline_data = attr->cap.max_inline_data;
		e->dest_qp_num = attr->dest_qp_num;
		e->path_mtu = attr->path_mtu;
	}
}

/* ---- AH ------------------------------------------------------------------------------------ */
RBT_WRAP_PTR(struct ibv_ah *, ibv_create_ah,
	     (struct ibv_pd * pd, struct ibv_ah_attr *attr), (pd, attr), AH_CREATE,
	     ah_create, 1)
{
	e->pd = (uintptr_t)pd;
	e->ah = (uintptr_t)ret;
	rbt_fill_ah(ev, attr, 0);
}

/* The attributes the library derived from the completion, derived again the same
 * (side-effect free) way. */
RBT_WRAP_PTR(struct ibv_ah *, ibv_create_ah_from_wc,
	     (struct ibv_pd * pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port),
	     (pd, wc, grh, port), AH_CREATE, ah_create, 1)
{
	__typeof__(&ibv_init_ah_from_wc) init = rbt_next_ibv_init_ah_from_wc();
	struct ibv_ah_attr attr;

	e->pd = (uintptr_t)pd;
	e->ah = (uintptr_t)ret;
	memset(&attr, 0, sizeof(attr));
	rbt_tls_inside++;
	if (ret && init && !init(pd->context, port, wc, grh, &attr))
		rbt_fill_ah(ev, &attr, 0);
	rbt_tls_inside--;
}

/* ---- async events ----------------------------------------------------------------------- */
/* What each async event names: its CQ, QP, SRQ or port (0: nothing). */
enum { RBT_AE_CQ = 1, RBT_AE_QP, RBT_AE_SRQ, RBT_AE_PORT };
static const uint8_t rbt_async_of[] = {
	[IBV_EVENT_CQ_ERR] = RBT_AE_CQ,
	[IBV_EVENT_QP_FATAL] = RBT_AE_QP,
	[IBV_EVENT_QP_REQ_ERR] = RBT_AE_QP,
	[IBV_EVENT_QP_ACCESS_ERR] = RBT_AE_QP,
	[IBV_EVENT_COMM_EST] = RBT_AE_QP,
	[IBV_EVENT_SQ_DRAINED] = RBT_AE_QP,
	[IBV_EVENT_PATH_MIG] = RBT_AE_QP,
	[IBV_EVENT_PATH_MIG_ERR] = RBT_AE_QP,
	[IBV_EVENT_QP_LAST_WQE_REACHED] = RBT_AE_QP,
	[IBV_EVENT_SRQ_ERR] = RBT_AE_SRQ,
	[IBV_EVENT_SRQ_LIMIT_REACHED] = RBT_AE_SRQ,
	[IBV_EVENT_PORT_ACTIVE] = RBT_AE_PORT,
	[IBV_EVENT_PORT_ERR] = RBT_AE_PORT,
	[IBV_EVENT_LID_CHANGE] = RBT_AE_PORT,
	[IBV_EVENT_PKEY_CHANGE] = RBT_AE_PORT,
	[IBV_EVENT_SM_CHANGE] = RBT_AE_PORT,
	[IBV_EVENT_CLIENT_REREGISTER] = RBT_AE_PORT,
	[IBV_EVENT_GID_CHANGE] = RBT_AE_PORT,
};

RBT_EXPORT int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *event)
{
	RBT_ENTER_INT(ibv_get_async_event, -1, (ctx, event));
	RBT_CALL(int ret, real(ctx, event));
	struct rbt_event ev = { .type = RBT_EV_ASYNC_EVENT, .ts = t0 };
	ev.u.async_event.ts_exit = t1;
	ev.u.async_event.ret = ret;
	ev.u.async_event.ctx = (uintptr_t)ctx;
	if (!ret) {
		__typeof__(&event->element) el = &event->element;
		unsigned t = event->event_type;

		ev.u.async_event.event_type = t;
		switch (t < sizeof(rbt_async_of) ? rbt_async_of[t] : 0) {
		case RBT_AE_CQ:
			ev.u.async_event.element = (uintptr_t)el->cq;
			break;
		case RBT_AE_QP:
			ev.u.async_event.element = (uintptr_t)el->qp;
			break;
		case RBT_AE_SRQ:
			ev.u.async_event.element = (uintptr_t)el->srq;
			break;
		case RBT_AE_PORT:
			ev.u.async_event.port = el->port_num;
			break;
		}
	}
	rbt_emit(&ev);
	errno = rerrno;
	return ret;
}

/* ---- provider direct verbs: not traced, but said so --------------------------------------- */
static void rbt_dv_note(const char *fn)
{
	static _Atomic int said;
	char text[160];

	if (!rbt_recording() || atomic_exchange(&said, 1))
		return;
	snprintf(text, sizeof(text),
		 "mlx5dv direct verbs in use (%s): data path not traced for objects they "
		 "drive",
		 fn);
	rbt_note(1, text);
}

#define RBT_DV(ret_t, name, params, args)   \
	RBT_EXPORT ret_t name params        \
	{                                   \
		RBT_RESOLVE(name);          \
		int saved = errno;          \
		rbt_dv_note(#name);         \
		errno = saved;              \
		if (!real) {                \
			errno = EOPNOTSUPP; \
			return (ret_t)0;    \
		}                           \
		return real args;           \
	}

RBT_DV(int, mlx5dv_init_obj, (void *obj, uint64_t type), (obj, type))
RBT_DV(void *, mlx5dv_create_qp, (void *ctx, void *a, void *b), (ctx, a, b))
RBT_DV(void *, mlx5dv_create_cq, (void *ctx, void *a, void *b), (ctx, a, b))
RBT_DV(void *, mlx5dv_open_device, (void *dev, void *a), (dev, a))
