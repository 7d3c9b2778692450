/* shim_cm.c - the librdmacm functions librbtrace.so defines in front of the real
 * ones (Debian's librdmacm.so.1 on hardware, softnic's on softnic), listed with
 * their version nodes in rbt_verbs.h: each CM call (arguments, connection
 * parameters, return, errno), each event rdma_get_cm_event returns (before the
 * program can ack it), each ack, and snapshots of the ids (addresses, GIDs,
 * path, QP) after the calls and events that fill them.
 *
 * librdmacm calls its own exports through the PLT (rdma_create_qp ->
 * rdma_create_qp_ex, a synchronous id's rdma_resolve_addr -> rdma_get_cm_event,
 * rdma_create_ep -> rdma_create_id ...): those come back here, and a
 * thread-local nesting depth marks them (field `nested`). The verbs librdmacm
 * issues (ibv_create_qp, ibv_modify_qp ...) must still be recorded as verbs, so
 * the CM wrappers never raise rbt_tls_inside around the real call.
 *
 * The recorder never links librdmacm: the next definitions are found with
 * dlvsym(RTLD_NEXT) on first use, so a program that never loads librdmacm never
 * reaches this file. Shape of every wrapper as in shim_verbs.c, written once
 * (CM_WRAP, CM_WRAP_VOID): time, real call, time, record, return what the real
 * call returned with errno as it left it.
 * Nothing here may fail the program; no locks, no allocation.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <rdma/rdma_cma.h>

#include "interpose/shim.h"

RBT_VERBS_RDMACM(RBT_NEXT_VER)

/* Depth of CM wrappers this thread is inside (0: the program's own call). */
static RBT_TLS unsigned rbt_cm_depth;

#define CM_RESOLVE(name)                            \
	__typeof__(&name) real = rbt_next_##name(); \
	unsigned nested = rbt_cm_depth;

/* The real call with the depth raised (RBT_TIMED). */
#define CM_CALL(lhs, expr) RBT_TIMED(rbt_cm_depth, lhs = expr)
#define CM_VCALL(expr)	   RBT_TIMED(rbt_cm_depth, expr)

/* No librdmacm behind us (cannot happen for a program linked to it; a dlsym'd
 * call with the library unloaded): fail as a missing function would. */
#define CM_MISSING(ret)                    \
	do {                               \
		if (RBT_UNLIKELY(!real)) { \
			errno = ENOSYS;    \
			return ret;        \
		}                          \
	} while (0)

/* "a.b.c.d:port", "[v6]:port", "" for none or a family we do not spell. */
static void cm_addr_text(const struct sockaddr *sa, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN];

	buf[0] = 0;
	if (!sa)
		return;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)sa;
		if (inet_ntop(AF_INET, &s->sin_addr, a, sizeof(a)))
			snprintf(buf, len, "%s:%u", a, ntohs(s->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)sa;
		if (inet_ntop(AF_INET6, &s->sin6_addr, a, sizeof(a)))
			snprintf(buf, len, "[%s]:%u", a, ntohs(s->sin6_port));
	} else if (sa->sa_family == AF_IB) {
		snprintf(buf, len, "ib");
	}
}

struct cm_rec {
	struct rbt_event ev;
	char src[64], dst[64];
};

static struct rbt_ev_cm_call *cm_begin(struct cm_rec *r, enum rbt_cm_fn fn, uint64_t t0,
				       uint64_t t1, int ret, int err, unsigned nested,
				       struct rdma_cm_id *id)
{
	struct rbt_ev_cm_call *e = &r->ev.u.cm_call;

	memset(r, 0, sizeof(*r));
	r->ev.type = RBT_EV_CM_CALL;
	r->ev.ts = t0;
	e->ts_exit = t1;
	e->ret = ret;
	e->err = ret ? (uint64_t)err : 0;
	e->fn = fn;
	e->nested = nested;
	e->id = (uintptr_t)id;
	e->src = r->src;
	e->dst = r->dst;
	return e;
}

/* The connection parameters (a call's or an event's: the same field names). */
#define CM_CONN_FIELDS(e, p)                                           \
	do {                                                           \
		(e)->responder_resources = (p)->responder_resources;   \
		(e)->initiator_depth = (p)->initiator_depth;           \
		(e)->flow_control = (p)->flow_control;                 \
		(e)->retry_count = (p)->retry_count;                   \
		(e)->rnr_retry_count = (p)->rnr_retry_count;           \
		(e)->srq = (p)->srq;                                   \
		(e)->conn_qp_num = (p)->qp_num;                        \
		CM_PDATA(e, (p)->private_data, (p)->private_data_len); \
	} while (0)

/* Private data: its length, and its bytes when payloads are captured. */
#define CM_PDATA(e, pdata, plen)                            \
	do {                                                \
		(e)->private_data_len = (plen);             \
		if (rbt_cfg.payload && (pdata) && (plen)) { \
			(e)->private_data.data = (pdata);   \
			(e)->private_data.len = (plen);     \
		}                                           \
	} while (0)

static void cm_conn(struct rbt_ev_cm_call *e, const struct rdma_conn_param *p)
{
	if (!p)
		return;
	e->conn_given = 1;
	CM_CONN_FIELDS(e, p);
}

static void cm_qp(struct rbt_ev_cm_call *e, const struct rdma_cm_id *id)
{
	if (id && id->qp) {
		e->qp = (uintptr_t)id->qp;
		e->qp_num = id->qp->qp_num;
	}
}

/* A snapshot of id (why: the call's fn, or 100 + an event type). */
static void cm_id_snap(const struct rdma_cm_id *id, unsigned why)
{
	struct rbt_event ev = { .type = RBT_EV_CM_ID, .ts = rbt_now() };
	struct rbt_ev_cm_id *e = &ev.u.cm_id;
	char src[64], dst[64];

	if (!id)
		return;
	e->why = why;
	e->id = (uintptr_t)id;
	e->channel = (uintptr_t)id->channel;
	e->ctx = (uintptr_t)id->verbs;
	e->qp = (uintptr_t)id->qp;
	e->qp_num = id->qp ? id->qp->qp_num : 0;
	e->ps = id->ps;
	e->qp_type = id->qp_type;
	e->port_num = id->port_num;
	cm_addr_text(&id->route.addr.src_addr, src, sizeof(src));
	cm_addr_text(&id->route.addr.dst_addr, dst, sizeof(dst));
	e->src = src;
	e->dst = dst;
	e->sgid.data = id->route.addr.addr.ibaddr.sgid.raw;
	e->sgid.len = 16;
	e->dgid.data = id->route.addr.addr.ibaddr.dgid.raw;
	e->dgid.len = 16;
	e->pkey = id->route.addr.addr.ibaddr.pkey;
	e->num_paths = id->route.num_paths > 0 ? (uint64_t)id->route.num_paths : 0;
	if (id->route.num_paths > 0 && id->route.path_rec) {
		const struct ibv_sa_path_rec *p = id->route.path_rec;
		e->path_mtu = p->mtu;
		e->path_sl = p->sl;
		e->path_rate = p->rate;
		e->packet_life_time = p->packet_life_time;
		e->hop_limit = p->hop_limit;
		e->dlid = ntohs(p->dlid);
		e->slid = ntohs(p->slid);
	}
	rbt_emit(&ev);
}

static int cm_is_ud(const struct rdma_cm_event *ev)
{
	if (ev->event == RDMA_CM_EVENT_MULTICAST_JOIN ||
	    ev->event == RDMA_CM_EVENT_MULTICAST_ERROR)
		return 1;
	return ev->id && (ev->id->ps == RDMA_PS_UDP || ev->id->ps == RDMA_PS_IPOIB);
}

/* ---- the wrappers' common shape ------------------------------------------------
 * CM_WRAP(name, fn, id, params, args) defines the exported wrapper in the common
 * shape: resolve, fail as a missing function without librdmacm, forward untraced
 * when not recording, time the real call with the depth raised, begin the call
 * record (fn, the id it names: id, an expression of the arguments and ret), let
 * cm_fill_<name> add what is particular, emit, snapshot the id it returned (if
 * any) as of fn, and return what the real call returned with its errno. The
 * macro ends with the head of cm_fill_<name>: its body follows the macro. */
#define CM_ARGS(...) __VA_ARGS__
#define CM_FILL_HEAD(name, params)                                                    \
	static const struct rdma_cm_id *cm_fill_##name(                               \
		struct cm_rec *r, struct rbt_ev_cm_call *e, int ret, unsigned nested, \
		CM_ARGS params)
#define CM_WRAP(name, fn, id, params, args)                                \
	CM_FILL_HEAD(name, params);                                        \
	RBT_EXPORT int name params                                         \
	{                                                                  \
		CM_RESOLVE(name);                                          \
		CM_MISSING(-1);                                            \
		if (!rbt_recording())                                      \
			return real args;                                  \
		CM_CALL(int ret, real args);                               \
		struct cm_rec r;                                           \
		struct rbt_ev_cm_call *e =                                 \
			cm_begin(&r, fn, t0, t1, ret, rerrno, nested, id); \
		const struct rdma_cm_id *snap =                            \
			cm_fill_##name(&r, e, ret, nested, CM_ARGS args);  \
		rbt_emit(&r.ev);                                           \
		if (snap)                                                  \
			cm_id_snap(snap, fn);                              \
		errno = rerrno;                                            \
		return ret;                                                \
	}                                                                  \
	CM_FILL_HEAD(name, params)

/* The id a successful call made (create_id, create_ep, get_request). */
#define CM_NEW_ID(pid) (!ret && (pid) ? *(pid) : NULL)

/* The ones that return nothing take one argument: CM_WRAP_VOID(name, fn, type,
 * arg, id, before) records the same way, with before (an expression of arg) read
 * ahead of the real call and handed to cm_fill_<name> as pre. */
#define CM_WRAP_VOID(name, fn, type, arg, id, before)                                  \
	static void cm_fill_##name(struct rbt_ev_cm_call *e, uintptr_t pre, type arg); \
	RBT_EXPORT void name(type arg)                                                 \
	{                                                                              \
		CM_RESOLVE(name);                                                      \
		if (!real)                                                             \
			return;                                                        \
		if (!rbt_recording()) {                                                \
			real(arg);                                                     \
			return;                                                        \
		}                                                                      \
		uintptr_t pre = (before);                                              \
		CM_VCALL(real(arg));                                                   \
		struct cm_rec r;                                                       \
		cm_fill_##name(cm_begin(&r, fn, t0, t1, 0, 0, nested, id), pre, arg);  \
		rbt_emit(&r.ev);                                                       \
		errno = rerrno;                                                        \
	}                                                                              \
	static void cm_fill_##name(struct rbt_ev_cm_call *e, uintptr_t pre, type arg)

/* ---- channels ----------------------------------------------------------------- */
RBT_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	CM_RESOLVE(rdma_create_event_channel);
	CM_MISSING(NULL);
	if (!rbt_recording())
		return real();
	CM_CALL(struct rdma_event_channel * ch, real());
	struct cm_rec r;
	struct rbt_ev_cm_call *e = cm_begin(&r, RBT_CM_CREATE_EVENT_CHANNEL, t0, t1,
					    ch ? 0 : -1, rerrno, nested, NULL);
	e->channel = (uintptr_t)ch;
	e->arg = ch ? (uint64_t)ch->fd : 0;
	rbt_emit(&r.ev);
	errno = rerrno;
	return ch;
}

CM_WRAP_VOID(rdma_destroy_event_channel, RBT_CM_DESTROY_EVENT_CHANNEL,
	     struct rdma_event_channel *, channel, NULL, 0)
{
	e->channel = (uintptr_t)channel;
}

/* ---- ids ------------------------------------------------------------------------ */
CM_WRAP(rdma_create_id, RBT_CM_CREATE_ID, CM_NEW_ID(id),
	(struct rdma_event_channel * channel, struct rdma_cm_id **id, void *context,
	 enum rdma_port_space ps),
	(channel, id, context, ps))
{
	struct rdma_cm_id *nid = CM_NEW_ID(id);

	e->channel = (uintptr_t)(nid ? nid->channel : channel);
	e->arg = ps;
	e->arg2 = nid ? nid->qp_type : 0;
	return NULL;
}

CM_WRAP(rdma_create_ep, RBT_CM_CREATE_EP, CM_NEW_ID(id),
	(struct rdma_cm_id * *id, struct rdma_addrinfo *res, struct ibv_pd *pd,
	 struct ibv_qp_init_attr *qp_init_attr),
	(id, res, pd, qp_init_attr))
{
	struct rdma_cm_id *nid = CM_NEW_ID(id);

	if (res) {
		cm_addr_text(res->ai_src_addr, r->src, sizeof(r->src));
		cm_addr_text(res->ai_dst_addr, r->dst, sizeof(r->dst));
		e->arg = (uint64_t)res->ai_port_space;
		e->arg2 = (uint64_t)res->ai_qp_type;
	}
	if (nid)
		e->channel = (uintptr_t)nid->channel;
	cm_qp(e, nid);
	return nid;
}

CM_WRAP_VOID(rdma_destroy_ep, RBT_CM_DESTROY_EP, struct rdma_cm_id *, id, id, 0)
{
}

RBT_EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	CM_RESOLVE(rdma_destroy_id);
	CM_MISSING(-1);
	if (!rbt_recording())
		return real(id);
	/* destroy waits for every delivered event to be acked: say it began, so a
	 * destroy that never returns is still in the trace. */
	struct cm_rec r;
	cm_begin(&r, RBT_CM_DESTROY_ID_BEGIN, rbt_now(), 0, 0, 0, nested, id);
	r.ev.u.cm_call.ts_exit = r.ev.ts;
	rbt_emit(&r.ev);
	CM_CALL(int ret, real(id));
	cm_begin(&r, RBT_CM_DESTROY_ID, t0, t1, ret, rerrno, nested, id);
	rbt_emit(&r.ev);
	errno = rerrno;
	return ret;
}

CM_WRAP(rdma_migrate_id, RBT_CM_MIGRATE_ID, id,
	(struct rdma_cm_id * id, struct rdma_event_channel *channel), (id, channel))
{
	e->channel = (uintptr_t)(!ret && id ? id->channel : channel);
	return NULL;
}

CM_WRAP(rdma_set_option, RBT_CM_SET_OPTION, id,
	(struct rdma_cm_id * id, int level, int optname, void *optval, size_t optlen),
	(id, level, optname, optval, optlen))
{
	e->arg = (uint64_t)(unsigned)optname;
	e->arg2 = (uint64_t)(unsigned)level;
	return NULL;
}

/* ---- addresses and routes -------------------------------------------------------- */
CM_WRAP(rdma_bind_addr, RBT_CM_BIND_ADDR, id,
	(struct rdma_cm_id * id, struct sockaddr *addr), (id, addr))
{
	cm_addr_text(addr, r->src, sizeof(r->src));
	return !ret ? id : NULL;
}

CM_WRAP(rdma_resolve_addr, RBT_CM_RESOLVE_ADDR, id,
	(struct rdma_cm_id * id, struct sockaddr *src_addr, struct sockaddr *dst_addr,
	 int timeout_ms),
	(id, src_addr, dst_addr, timeout_ms))
{
	cm_addr_text(src_addr, r->src, sizeof(r->src));
	cm_addr_text(dst_addr, r->dst, sizeof(r->dst));
	e->arg = (uint64_t)(unsigned)timeout_ms;
	return NULL;
}

CM_WRAP(rdma_resolve_route, RBT_CM_RESOLVE_ROUTE, id,
	(struct rdma_cm_id * id, int timeout_ms), (id, timeout_ms))
{
	e->arg = (uint64_t)(unsigned)timeout_ms;
	return NULL;
}

/* ---- QPs ------------------------------------------------------------------------- */
/* Made for the program (not inside another CM call): the id is snapshot. */
CM_WRAP(rdma_create_qp, RBT_CM_CREATE_QP, id,
	(struct rdma_cm_id * id, struct ibv_pd *pd,
	 struct ibv_qp_init_attr *qp_init_attr),
	(id, pd, qp_init_attr))
{
	e->arg = qp_init_attr ? qp_init_attr->qp_type : 0;
	cm_qp(e, id);
	return !ret && !nested ? id : NULL;
}

CM_WRAP(rdma_create_qp_ex, RBT_CM_CREATE_QP_EX, id,
	(struct rdma_cm_id * id, struct ibv_qp_init_attr_ex *attr), (id, attr))
{
	e->arg = attr ? attr->qp_type : 0;
	cm_qp(e, id);
	return !ret && !nested ? id : NULL;
}

/* the QP's handle is read before it is destroyed */
CM_WRAP_VOID(rdma_destroy_qp, RBT_CM_DESTROY_QP, struct rdma_cm_id *, id, id,
	     (uintptr_t)(id ? id->qp : NULL))
{
	e->qp = pre;
}

CM_WRAP(rdma_init_qp_attr, RBT_CM_INIT_QP_ATTR, id,
	(struct rdma_cm_id * id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask),
	(id, qp_attr, qp_attr_mask))
{
	if (!ret && qp_attr && qp_attr_mask) {
		e->arg = (uint64_t)(unsigned)*qp_attr_mask;
		e->arg2 = qp_attr->qp_state;
	}
	cm_qp(e, id);
	return NULL;
}

/* ---- connections ----------------------------------------------------------------- */
/* connect, accept: the parameters, the id and its QP (connect: where to) */
CM_WRAP(rdma_accept, RBT_CM_ACCEPT, id,
	(struct rdma_cm_id * id, struct rdma_conn_param *conn_param), (id, conn_param))
{
	cm_conn(e, conn_param);
	cm_qp(e, id);
	return NULL;
}

CM_WRAP(rdma_connect, RBT_CM_CONNECT, id,
	(struct rdma_cm_id * id, struct rdma_conn_param *conn_param), (id, conn_param))
{
	cm_fill_rdma_accept(r, e, ret, nested, id, conn_param);
	if (id)
		cm_addr_text(&id->route.addr.dst_addr, r->dst, sizeof(r->dst));
	return NULL;
}

/* establish, disconnect: the id and its QP */
CM_WRAP(rdma_establish, RBT_CM_ESTABLISH, id, (struct rdma_cm_id * id), (id))
{
	cm_qp(e, id);
	return NULL;
}

CM_WRAP(rdma_listen, RBT_CM_LISTEN, id, (struct rdma_cm_id * id, int backlog),
	(id, backlog))
{
	e->arg = (uint64_t)(unsigned)backlog;
	if (id)
		cm_addr_text(&id->route.addr.src_addr, r->src, sizeof(r->src));
	return !ret ? id : NULL;
}

CM_WRAP(rdma_get_request, RBT_CM_GET_REQUEST, CM_NEW_ID(id),
	(struct rdma_cm_id * listen, struct rdma_cm_id **id), (listen, id))
{
	struct rdma_cm_id *nid = CM_NEW_ID(id);

	e->listen_id = (uintptr_t)listen;
	cm_qp(e, nid);
	return nid;
}

/* rdma_reject_ece is recorded as a reject (the ECE values are not in the trace) */
CM_WRAP(rdma_reject, RBT_CM_REJECT, id,
	(struct rdma_cm_id * id, const void *private_data, uint8_t private_data_len),
	(id, private_data, private_data_len))
{
	CM_PDATA(e, private_data, private_data_len);
	return NULL;
}

CM_WRAP(rdma_reject_ece, RBT_CM_REJECT, id,
	(struct rdma_cm_id * id, const void *private_data, uint8_t private_data_len),
	(id, private_data, private_data_len))
{
	return cm_fill_rdma_reject(r, e, ret, nested, id, private_data, private_data_len);
}

CM_WRAP(rdma_disconnect, RBT_CM_DISCONNECT, id, (struct rdma_cm_id * id), (id))
{
	return cm_fill_rdma_establish(r, e, ret, nested, id);
}

/* ---- multicast ------------------------------------------------------------------- */
CM_WRAP(rdma_join_multicast, RBT_CM_JOIN_MULTICAST, id,
	(struct rdma_cm_id * id, struct sockaddr *addr, void *context),
	(id, addr, context))
{
	cm_addr_text(addr, r->dst, sizeof(r->dst));
	return NULL;
}

CM_WRAP(rdma_join_multicast_ex, RBT_CM_JOIN_MULTICAST, id,
	(struct rdma_cm_id * id, struct rdma_cm_join_mc_attr_ex *attr, void *context),
	(id, attr, context))
{
	if (attr) {
		cm_addr_text(attr->addr, r->dst, sizeof(r->dst));
		e->arg = attr->join_flags;
		e->arg2 = 1; /* the _ex form */
	}
	return NULL;
}

CM_WRAP(rdma_leave_multicast, RBT_CM_LEAVE_MULTICAST, id,
	(struct rdma_cm_id * id, struct sockaddr *addr), (id, addr))
{
	cm_addr_text(addr, r->dst, sizeof(r->dst));
	return NULL;
}

/* ---- events ---------------------------------------------------------------------- */
RBT_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel,
				 struct rdma_cm_event **event)
{
	CM_RESOLVE(rdma_get_cm_event);
	CM_MISSING(-1);
	if (!rbt_recording())
		return real(channel, event);
	CM_CALL(int ret, real(channel, event));
	struct rbt_event ev = { .type = RBT_EV_CM_EVENT, .ts = t0 };
	struct rbt_ev_cm_event *e = &ev.u.cm_event;
	const struct rdma_cm_event *c = !ret && event ? *event : NULL;

	e->ts_exit = t1;
	e->ret = ret;
	e->err = ret ? (uint64_t)rerrno : 0;
	e->nested = nested;
	e->channel = (uintptr_t)channel;
	if (c) {
		e->ev = (uintptr_t)c;
		e->id = (uintptr_t)c->id;
		e->listen_id = (uintptr_t)c->listen_id;
		e->event = c->event;
		e->status = c->status;
		if (cm_is_ud(c)) {
			e->ud = 1;
			e->ud_qp_num = c->param.ud.qp_num;
			e->qkey = c->param.ud.qkey;
			/* the peer's or the group's address (MULTICAST_JOIN: the
			 * MGID and LID a replay attaches its QP to) */
			e->ud_dlid = c->param.ud.ah_attr.dlid;
			if (c->param.ud.ah_attr.is_global) {
				e->ud_dgid.data = c->param.ud.ah_attr.grh.dgid.raw;
				e->ud_dgid.len = 16;
			}
			CM_PDATA(e, c->param.ud.private_data,
				 c->param.ud.private_data_len);
		} else {
			CM_CONN_FIELDS(e, &c->param.conn);
		}
	}
	rbt_emit(&ev);
	if (c) {
		switch (c->event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
		case RDMA_CM_EVENT_CONNECT_REQUEST:
		case RDMA_CM_EVENT_CONNECT_RESPONSE:
		case RDMA_CM_EVENT_ESTABLISHED:
		case RDMA_CM_EVENT_MULTICAST_JOIN:
			cm_id_snap(c->id, 100 + (unsigned)c->event);
			break;
		default:
			break;
		}
	}
	errno = rerrno;
	return ret;
}

RBT_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	CM_RESOLVE(rdma_ack_cm_event);
	CM_MISSING(-1);
	if (!rbt_recording())
		return real(event);
	/* read before the call: the ack frees the event */
	uint64_t id = event ? (uintptr_t)event->id : 0;
	uint64_t type = event ? (uint64_t)event->event : 0;
	CM_CALL(int ret, real(event));
	struct rbt_event ev = { .type = RBT_EV_CM_ACK, .ts = t0 };
	struct rbt_ev_cm_ack *e = &ev.u.cm_ack;

	e->ts_exit = t1;
	e->ret = ret;
	e->err = ret ? (uint64_t)rerrno : 0;
	e->nested = nested;
	e->ev = (uintptr_t)event;
	e->id = id;
	e->event = type;
	rbt_emit(&ev);
	errno = rerrno;
	return ret;
}
