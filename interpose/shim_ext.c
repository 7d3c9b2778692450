/* shim_ext.c - the extended verbs reached through struct verbs_context
 * (create_cq_ex, create_qp_ex, create_srq_ex, open/close_xrcd, query_device_ex,
 * query_rt_values, query_port) and the memory-window ops of ctx->ops.
 *
 * Slow path: records like the exported wrappers (shim_verbs.c) and returns
 * exactly what the provider returned with errno as it left it.
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

/* The context's op (a provider without it fails as ibv would: a NULL object with
 * errno EOPNOTSUPP, or EOPNOTSUPP returned), forwarded untraced when the recorder
 * is not recording. */
#define RBT_EXT_FORWARD(obj_ctx, op, args, ...)        \
	struct rbt_ctx_ent *c = rbt_ctx_find(obj_ctx); \
	if (!c || !c->op) {                            \
		__VA_ARGS__;                           \
	}                                              \
	if (!rbt_recording())                          \
		return c->op args;
#define RBT_EXT_ENTER_PTR(obj_ctx, op, args) \
	RBT_EXT_FORWARD(obj_ctx, op, args, errno = EOPNOTSUPP; return NULL)
#define RBT_EXT_ENTER_INT(obj_ctx, op, args) \
	RBT_EXT_FORWARD(obj_ctx, op, args, return EOPNOTSUPP)
/* The provider's call, timed, with the tracer flag raised (RBT_TIMED); err is
 * its errno when the object p it made is NULL. */
#define RBT_EXT_CALL(type, p, expr)               \
	RBT_TIMED(rbt_tls_inside, type p = expr); \
	int err = p ? 0 : rerrno;

/* ---- extended verbs through verbs_context ---------------------------------------- */
struct ibv_cq_ex *rbt_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *a)
{
	RBT_EXT_ENTER_PTR(ctx, create_cq_ex, (ctx, a));
	uint32_t cqe = a->cqe;
	RBT_EXT_CALL(struct ibv_cq_ex *, cq, c->create_cq_ex(ctx, a));
	int ts_src = (a->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) ? 1 : 0;
	rbt_rec_cq_create(t0, t1, err, ctx, cq ? ibv_cq_ex_to_cq(cq) : NULL, cqe,
			  a->channel, a->comp_vector, 1, a->wc_flags,
			  (a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) ? a->flags : 0,
			  ts_src);
	if (cq)
		rbt_wrap_cqx(cq, a->wc_flags, 0);
	if (cq && ts_src)
		rbt_dp_nic_cq_created(ctx);
	errno = rerrno;
	return cq;
}

struct ibv_qp *rbt_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a)
{
	RBT_EXT_ENTER_PTR(ctx, create_qp_ex, (ctx, a));
	struct ibv_qp_init_attr_ex asked = *a;
	RBT_EXT_CALL(struct ibv_qp *, qp, c->create_qp_ex(ctx, a));
	/* Caps as granted (written back into *a), the rest as asked. */
	asked.cap = a->cap;
	rbt_rec_qp_create(t0, t1, err, ctx, qp, &asked, 1);
	if (qp && (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		rbt_dp_wrap_qpx(qp);
	errno = rerrno;
	return qp;
}

struct ibv_srq *rbt_create_srq_ex(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *a)
{
	RBT_EXT_ENTER_PTR(ctx, create_srq_ex, (ctx, a));
	RBT_EXT_CALL(struct ibv_srq *, srq, c->create_srq_ex(ctx, a));
	rbt_rec_srq_create(t0, t1, err,
			   (a->comp_mask & IBV_SRQ_INIT_ATTR_PD) ? a->pd : NULL, srq, a);
	errno = rerrno;
	return srq;
}

struct ibv_xrcd *rbt_open_xrcd(struct ibv_context *ctx, struct ibv_xrcd_init_attr *a)
{
	RBT_EXT_ENTER_PTR(ctx, open_xrcd, (ctx, a));
	RBT_EXT_CALL(struct ibv_xrcd *, x, c->open_xrcd(ctx, a));
	struct rbt_event ev = { .type = RBT_EV_XRCD_OPEN, .ts = t0 };
	struct rbt_ev_xrcd_open *e = &ev.u.xrcd_open;
	RBT_EV_HEAD(e, t1, x ? 0 : -err, err);
	e->ctx = (uintptr_t)ctx;
	e->xrcd = (uintptr_t)x;
	e->fd = (a->comp_mask & IBV_XRCD_INIT_ATTR_FD) ? (uint64_t)a->fd : ~0ull;
	e->oflags = (a->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) ? a->oflags : 0;
	rbt_emit(&ev);
	rbt_emit_stack(RBT_EV_XRCD_OPEN);
	errno = rerrno;
	return x;
}

/* A context op that releases an object: the same record as the exported
 * release verbs (entry and exit time, return code, errno, the handle). */
#define RBT_CTX_RELEASE(fn, obj_t, op, EV, lname, field)        \
	int fn(obj_t *o)                                        \
	{                                                       \
		RBT_EXT_ENTER_INT(o->context, op, (o));         \
		uint64_t t0 = rbt_now();                        \
		int ret = c->op(o);                             \
		int err = ret ? errno : 0;                      \
		struct rbt_event ev = { .type = EV, .ts = t0 }; \
		RBT_EV_HEAD(&ev.u.lname, rbt_now(), ret, err);  \
		ev.u.lname.field = (uintptr_t)o;                \
		rbt_emit(&ev);                                  \
		errno = err ? err : errno;                      \
		return ret;                                     \
	}
RBT_CTX_RELEASE(rbt_close_xrcd, struct ibv_xrcd, close_xrcd, RBT_EV_XRCD_CLOSE,
		xrcd_close, xrcd)

int rbt_query_device_ex(struct ibv_context *ctx,
			const struct ibv_query_device_ex_input *in,
			struct ibv_device_attr_ex *attr, size_t sz)
{
	RBT_EXT_ENTER_INT(ctx, query_device_ex, (ctx, in, attr, sz));
	rbt_tls_inside++;
	int ret = c->query_device_ex(ctx, in, attr, sz);
	rbt_tls_inside--;
	int saved = errno;
	/* the clock fields when the caller's struct reaches them */
	int clock = sz >= offsetof(struct ibv_device_attr_ex, hca_core_clock) + 8;
	if (!ret)
		rbt_rec_device_attr(ctx, &attr->orig_attr,
				    clock ? attr->completion_timestamp_mask : 0,
				    clock ? attr->hca_core_clock : 0);
	errno = saved;
	return ret;
}

int rbt_query_rt_values(struct ibv_context *ctx, struct ibv_values_ex *v)
{
	RBT_EXT_ENTER_INT(ctx, query_rt_values, (ctx, v));
	uint64_t t0 = rbt_now();
	int ret = c->query_rt_values(ctx, v);
	uint64_t t1 = rbt_now();
	int saved = errno;
	if (!ret && (v->comp_mask & IBV_VALUES_MASK_RAW_CLOCK)) {
		/* The program's own clock readings are samples for the model too. */
		struct rbt_event ev = { .type = RBT_EV_CLOCK_SAMPLE,
					.ts = t0 + (t1 - t0) / 2 };
		ev.u.clock_sample.ctx = (uintptr_t)ctx;
		ev.u.clock_sample.nic_hz = c->nic_hz;
		ev.u.clock_sample.nic_ts = (uint64_t)v->raw_clock.tv_sec * 1000000000ull +
					   v->raw_clock.tv_nsec;
		rbt_emit(&ev);
	}
	errno = saved;
	return ret;
}

int rbt_query_port_ex(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *a,
		      size_t len)
{
	RBT_EXT_ENTER_INT(ctx, query_port, (ctx, port, a, len));
	rbt_tls_inside++;
	int ret = c->query_port(ctx, port, a, len);
	rbt_tls_inside--;
	int saved = errno;
	if (!ret && len >= sizeof(struct ibv_port_attr))
		rbt_rec_port_attr(ctx, port, a);
	errno = saved;
	return ret;
}

/* ---- memory windows (inline verbs through ctx->ops) ------------------------------ */
struct ibv_mw *rbt_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	RBT_EXT_ENTER_PTR(pd->context, alloc_mw, (pd, type));
	uint64_t t0 = rbt_now();
	struct ibv_mw *mw = c->alloc_mw(pd, type);
	int err = mw ? 0 : errno;
	struct rbt_event ev = { .type = RBT_EV_MW_ALLOC, .ts = t0 };
	struct rbt_ev_mw_alloc *e = &ev.u.mw_alloc;
	RBT_EV_HEAD(e, rbt_now(), mw ? 0 : -err, err);
	e->pd = (uintptr_t)pd;
	e->mw = (uintptr_t)mw;
	e->mw_type = type;
	e->rkey = mw ? mw->rkey : 0;
	rbt_emit(&ev);
	rbt_emit_stack(RBT_EV_MW_ALLOC);
	errno = err ? err : errno;
	return mw;
}

RBT_CTX_RELEASE(rbt_dealloc_mw, struct ibv_mw, dealloc_mw, RBT_EV_MW_DEALLOC, mw_dealloc,
		mw)
