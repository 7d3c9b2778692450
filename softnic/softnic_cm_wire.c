/*
 * softnic_cm_wire.c - the connection state machine: the QP attributes the
 * kernel CM would give at each step, and what a message (REQ, REP, RTU, REJ,
 * DREQ, DREP, SIDR), a peer's EOF, a timer or an accepted socket does to an
 * id, as the events it posts.
 *
 * Never: block (it runs inside rdma_get_cm_event with cm_mu held), hand an
 * event to the program directly (it only queues them), or call an exported
 * rdma_* function.
 */
#include "softnic_cm_int.h"

/* ---------------- QP attributes (the kernel CM's rules) ---------------- */

int cm_qp_attr(struct cm_id *c, struct ibv_qp_attr *a, int *mask)
{
	enum ibv_qp_state st = a->qp_state;
	bool rc_like = c->id.qp_type == IBV_QPT_RC || c->id.qp_type == IBV_QPT_XRC_RECV;

	if (!c->id.verbs)
		return -EINVAL;
	memset(a, 0, sizeof(*a));
	a->qp_state = st;
	if (cm_is_ud(c)) {
		switch (st) {
		case IBV_QPS_INIT:
			a->pkey_index = 0;
			a->port_num = 1;
			a->qkey = RDMA_UDP_QKEY;
			*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				IBV_QP_QKEY;
			return 0;
		case IBV_QPS_RTR:
			*mask = IBV_QP_STATE;
			return 0;
		case IBV_QPS_RTS:
			a->sq_psn = 0;
			*mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
			return 0;
		default:
			return -EINVAL;
		}
	}
	switch (st) {
	case IBV_QPS_INIT:
		a->pkey_index = 0;
		a->port_num = 1;
		if (c->remote)
			a->qp_access_flags =
				IBV_ACCESS_REMOTE_WRITE |
				(c->resp_res ? IBV_ACCESS_REMOTE_READ |
						       IBV_ACCESS_REMOTE_ATOMIC
					     : 0);
		*mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
			IBV_QP_PORT;
		return 0;
	case IBV_QPS_RTR:
		if (!c->remote)
			return -EINVAL;
		cm_ah_attr(&a->ah_attr);
		a->path_mtu = cm_dev.port.active_mtu;
		a->dest_qp_num = c->rqpn;
		a->rq_psn = c->rpsn;
		*mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN;
		if (rc_like) {
			a->max_dest_rd_atomic = c->resp_res;
			a->min_rnr_timer = 0; /* what the kernel CM sets */
			*mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
		return 0;
	case IBV_QPS_RTS:
		if (!c->remote)
			return -EINVAL;
		a->sq_psn = c->psn;
		*mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
		if (c->id.qp_type != IBV_QPT_XRC_RECV) {
			a->timeout = c->ack_timeout;
			a->retry_cnt = c->retry;
			a->rnr_retry = c->rnr_retry;
			a->max_rd_atomic = c->init_depth;
			*mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				 IBV_QP_MAX_QP_RD_ATOMIC;
		}
		return 0;
	default:
		return -EINVAL;
	}
}

int cm_modify(struct cm_id *c, enum ibv_qp_state st)
{
	struct ibv_qp_attr a = { .qp_state = st };
	int mask, ret = cm_qp_attr(c, &a, &mask);

	if (ret)
		return ret;
	ret = ibv_modify_qp(c->id.qp, &a, mask);
	return ret > 0 ? -ret : ret < 0 ? -(errno ? errno : EINVAL) : 0;
}

/* INIT again with the real access flags, then RTR and RTS */
int cm_qp_connect(struct cm_id *c)
{
	int ret;

	if (!c->id.qp)
		return 0;
	ret = cm_modify(c, IBV_QPS_INIT);
	if (!ret)
		ret = cm_modify(c, IBV_QPS_RTR);
	if (!ret)
		ret = cm_modify(c, IBV_QPS_RTS);
	return ret;
}

/* ---------------- message handling ---------------- */

/* what a REQ or a REP says of the peer: its QP and PSN, and its resources
 * (the two sides' values swap) */
static void cm_learn_peer(struct cm_id *c, const struct cm_wire *w)
{
	c->remote = true;
	c->rqpn = w->qpn;
	c->rpsn = w->psn;
	c->resp_res = w->init_depth;
	c->init_depth = w->resp_res;
	c->rnr_retry = w->rnr_retry;
}

/* a REQ's or a REP's connection parameters as its event gives them */
static void cm_conn_param(struct cm_evt *e, const struct cm_id *c,
			  const struct cm_wire *w, unsigned pd_full)
{
	cm_conn_pd(e, w, pd_full);
	e->ev.param.conn.responder_resources = c->resp_res;
	e->ev.param.conn.initiator_depth = c->init_depth;
	e->ev.param.conn.flow_control = w->flow;
	e->ev.param.conn.rnr_retry_count = w->rnr_retry;
	e->ev.param.conn.srq = w->srq;
	e->ev.param.conn.qp_num = w->qpn;
}

static void cm_on_req(struct cm_id *c, const struct cm_wire *w)
{
	struct cm_id *l = c->listener;
	struct cm_chan *lch, *cch = cm_chan_of(c);
	struct cm_evt *e;
	socklen_t len;

	if (!l || l->state != S_LISTEN) {
		cm_destroy_locked(c);
		return;
	}
	lch = cm_chan_of(l);
	e = cm_evt_new(l, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (!e) {
		cm_destroy_locked(c);
		return;
	}
	len = cm_addrlen((const struct sockaddr *)&w->dst);
	if (len)
		memcpy(&c->id.route.addr.src_storage, &w->dst, len);
	len = cm_addrlen((const struct sockaddr *)&w->src);
	if (len)
		memcpy(&c->id.route.addr.dst_storage, &w->src, len);
	cm_attach_dev(c);
	cm_fill_path(c);
	c->id.pd = l->id.pd ? l->id.pd : cm_dev.pd;
	cm_learn_peer(c, w);
	c->retry = w->retry;
	c->state = S_REQ_RCVD;
	if (cch != lch && c->cfd >= 0) {
		cm_unwatch(lch, c->cfd);
		if (!cm_watch(cch, c->cfd, c, K_CONN))
			c->cfd_chan = cch;
		else
			c->cfd_chan = NULL;
	}
	e->ev.id = &c->id;
	e->ev.listen_id = &l->id;
	if (w->type == M_SIDR_REQ) {
		memcpy(e->pd, w->pd, w->pd_len);
		e->ev.param.ud.private_data = e->pd;
		e->ev.param.ud.private_data_len = cm_pd_max(c, CM_SIDR_REQ);
		cm_ah_attr(&e->ev.param.ud.ah_attr);
		e->ev.param.ud.qp_num = w->qpn;
		e->ev.param.ud.qkey = w->qkey;
	} else {
		cm_conn_param(e, c, w, cm_pd_max(c, CM_REQ_PD));
		e->ev.param.conn.retry_count = w->retry;
	}
	cm_chan_push(lch, e);
}

static void cm_on_rep(struct cm_id *c, const struct cm_wire *w)
{
	struct cm_evt *e;
	int ret;

	cm_disarm(c);
	cm_learn_peer(c, w);
	e = cm_evt_new(c, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
	if (!e)
		return;
	cm_conn_param(e, c, w, CM_REP_PD);
	if (!c->id.qp) {
		c->state = S_REP_RCVD;
	} else if ((ret = cm_qp_connect(c))) {
		/* as librdmacm reports it: CONNECT_ERROR, status -1, and the
		 * passive side is told with a REJ */
		cm_qp_err(c);
		cm_send_simple(c, M_REJ, CM_REJ_CONSUMER);
		cm_close_conn(c);
		c->state = S_CLOSED;
		e->ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
		e->ev.status = -1;
	} else {
		cm_send_simple(c, M_RTU, 0);
		c->state = S_ESTABLISHED;
		e->ev.event = RDMA_CM_EVENT_ESTABLISHED;
	}
	cm_chan_push(cm_chan_of(c), e);
}

static void cm_on_rej(struct cm_id *c, const struct cm_wire *w)
{
	struct cm_evt *e = cm_evt_new(c, RDMA_CM_EVENT_REJECTED, w->status);

	cm_disarm(c);
	cm_qp_err(c);
	cm_close_conn(c);
	c->state = S_CLOSED;
	if (!e)
		return;
	cm_conn_pd(e, w, CM_REJ_PD);
	cm_chan_push(cm_chan_of(c), e);
}

static void cm_on_sidr_rep(struct cm_id *c, const struct cm_wire *w)
{
	struct cm_evt *e;

	cm_disarm(c);
	cm_close_conn(c);
	if (w->status) {
		c->state = S_CLOSED;
		cm_post(c, RDMA_CM_EVENT_UNREACHABLE, w->status);
		return;
	}
	c->state = S_ESTABLISHED;
	e = cm_evt_new(c, RDMA_CM_EVENT_ESTABLISHED, 0);
	if (!e)
		return;
	memcpy(e->pd, w->pd, w->pd_len);
	e->ev.param.ud.private_data = e->pd;
	e->ev.param.ud.private_data_len = CM_SIDR_REP;
	cm_ah_attr(&e->ev.param.ud.ah_attr);
	e->ev.param.ud.qp_num = w->qpn;
	e->ev.param.ud.qkey = w->qkey;
	cm_chan_push(cm_chan_of(c), e);
}

/* the peer closed its end: what its kernel CM would have sent on its death */
static void cm_on_eof(struct cm_id *c)
{
	enum cm_state st = c->state;

	cm_disarm(c);
	cm_close_conn(c);
	switch (st) {
	case S_PENDING:
		cm_destroy_locked(c);
		return;
	case S_CONNECTING:
		c->state = S_CLOSED;
		cm_qp_err(c);
		if (cm_is_ud(c))
			cm_post(c, RDMA_CM_EVENT_UNREACHABLE, CM_SIDR_REJECT);
		else
			cm_post(c, RDMA_CM_EVENT_REJECTED, CM_REJ_CONSUMER);
		return;
	case S_REQ_RCVD:
	case S_REP_SENT:
	case S_REP_RCVD:
		if (cm_is_ud(c))
			return; /* a SIDR exchange needs no connection */
		c->state = S_CLOSED;
		cm_qp_err(c);
		cm_post(c, RDMA_CM_EVENT_REJECTED,
			st == S_REQ_RCVD ? CM_REJ_TIMEOUT : CM_REJ_CONSUMER);
		return;
	case S_ESTABLISHED:
	case S_DREQ_SENT:
		c->state = S_DISCONNECTED;
		cm_post(c, RDMA_CM_EVENT_DISCONNECTED, 0);
		return;
	default:
		return;
	}
}

/* an exchange that ends well: its timer goes, the id moves on, the
 * program hears of it */
static void cm_settle(struct cm_id *c, enum cm_state st, enum rdma_cm_event_type ev)
{
	cm_disarm(c);
	c->state = st;
	cm_post(c, ev, 0);
}

static void cm_on_rtu(struct cm_id *c, const struct cm_wire *w)
{
	cm_settle(c, S_ESTABLISHED, RDMA_CM_EVENT_ESTABLISHED);
}

static void cm_on_dreq(struct cm_id *c, const struct cm_wire *w)
{
	cm_send_simple(c, M_DREP, 0);
	cm_settle(c, S_DISCONNECTED, RDMA_CM_EVENT_DISCONNECTED);
}

static void cm_on_drep(struct cm_id *c, const struct cm_wire *w)
{
	cm_settle(c, S_DISCONNECTED, RDMA_CM_EVENT_DISCONNECTED);
}

#define CM_IN(s) (1u << (s))

/* the states in which an id takes each message, and what it does with it;
 * a message in any other state is dropped */
static const struct cm_msg_rule {
	unsigned states;
	void (*on)(struct cm_id *c, const struct cm_wire *w);
} cm_msg_rules[] = {
	[M_REQ] = { CM_IN(S_PENDING), cm_on_req },
	[M_SIDR_REQ] = { CM_IN(S_PENDING), cm_on_req },
	[M_REP] = { CM_IN(S_CONNECTING), cm_on_rep },
	[M_SIDR_REP] = { CM_IN(S_CONNECTING), cm_on_sidr_rep },
	[M_RTU] = { CM_IN(S_REP_SENT), cm_on_rtu },
	[M_REJ] = { CM_IN(S_CONNECTING) | CM_IN(S_REP_SENT) | CM_IN(S_REP_RCVD) |
			    CM_IN(S_REQ_RCVD),
		    cm_on_rej },
	[M_DREQ] = { CM_IN(S_ESTABLISHED) | CM_IN(S_DREQ_SENT) | CM_IN(S_REP_SENT) |
			     CM_IN(S_REP_RCVD),
		     cm_on_dreq },
	[M_DREP] = { CM_IN(S_DREQ_SENT), cm_on_drep },
};

static void cm_on_msg(struct cm_id *c, const struct cm_wire *w)
{
	const struct cm_msg_rule *r;

	if (w->type >= sizeof(cm_msg_rules) / sizeof(cm_msg_rules[0]))
		return;
	r = &cm_msg_rules[w->type];
	if (r->on && (r->states & CM_IN(c->state)))
		r->on(c, w);
}

static void cm_on_conn(struct cm_id *c);

static void cm_on_timer(struct cm_id *c)
{
	uint64_t v;

	if (read(c->tfd, &v, sizeof(v)) != sizeof(v))
		return;
	switch (c->state) {
	case S_CONNECTING:
		if (c->req && cm_now_ns() < c->deadline_ns) {
			cm_try_connect(c); /* the listener's backlog was full */
			return;
		}
		cm_close_conn(c);
		c->state = S_CLOSED;
		cm_post(c, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
		return;
	case S_REP_SENT:
		cm_close_conn(c);
		c->state = S_CLOSED;
		cm_post(c, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
		return;
	case S_DREQ_SENT:
		cm_close_conn(c);
		c->state = S_DISCONNECTED;
		cm_post(c, RDMA_CM_EVENT_DISCONNECTED, -ETIMEDOUT);
		return;
	default:
		return;
	}
}

static void cm_on_accept(struct cm_id *l)
{
	for (;;) {
		int fd = accept4(l->bfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct cm_id *c;

		if (fd < 0)
			return;
		c = cm_id_new(l->sync ? NULL : cm_chan_of(l), l->id.context, l->id.ps,
			      l->id.qp_type);
		if (!c) {
			close(fd);
			continue;
		}
		c->state = S_PENDING;
		c->listener = l;
		c->cfd = fd;
		if (cm_watch(cm_chan_of(l), fd, c, K_CONN)) {
			cm_destroy_locked(c);
			continue;
		}
		c->cfd_chan = cm_chan_of(l);
		cm_on_conn(c); /* the REQ is usually there already */
	}
}

static void cm_on_conn(struct cm_id *c)
{
	for (;;) {
		struct cm_wire w;
		ssize_t n = recv(c->cfd, &w, sizeof(w), MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			cm_on_eof(c);
			return;
		}
		if (n == (ssize_t)sizeof(w) && w.magic == CM_WIRE_MAGIC) {
			bool req = w.type == M_REQ || w.type == M_SIDR_REQ;

			cm_on_msg(c, &w);
			if (req)
				return; /* c may be gone; its next message comes anyway */
		}
		if (c->cfd < 0)
			return;
	}
}

void cm_dispatch(uint64_t data)
{
	struct cm_id *c = cm_lookup(data);

	if (!c)
		return;
	switch (data & 3) {
	case K_BIND:
		if (c->state == S_LISTEN)
			cm_on_accept(c);
		return;
	case K_CONN:
		if (c->cfd >= 0)
			cm_on_conn(c);
		return;
	case K_TIMER:
		if (c->tfd >= 0)
			cm_on_timer(c);
		return;
	default:
		return;
	}
}

/* (re)try the connect() of a REQ: the listener may be absent or full */
int cm_try_connect(struct cm_id *c)
{
	struct sockaddr_un un;
	socklen_t len =
		cm_name(&un, cm_space(c), cm_get_port(&c->id.route.addr.dst_addr));
	int ret;

	if (c->cfd < 0) {
		c->cfd =
			socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (c->cfd < 0)
			return -errno;
	}
	if (connect(c->cfd, (struct sockaddr *)&un, len)) {
		ret = errno;
		if (ret == EAGAIN) {
			uint64_t left = (c->deadline_ns - cm_now_ns()) / 1000000;

			return cm_arm(c, left < 10 ? (left ? left : 1) : 10);
		}
		close(c->cfd);
		c->cfd = -1;
		cm_free(c->req);
		c->req = NULL;
		if (ret != ECONNREFUSED && ret != ENOENT)
			return -ret;
		/* nobody listens there: an invalid service id */
		c->state = S_CLOSED;
		cm_qp_err(c);
		if (cm_is_ud(c)) {
			cm_post(c, RDMA_CM_EVENT_UNREACHABLE, CM_SIDR_UNSUPPORTED);
		} else {
			struct cm_evt *e = cm_evt_new(c, RDMA_CM_EVENT_REJECTED,
						      CM_REJ_INVALID_SERVICE);

			if (e) {
				e->ev.param.conn.private_data = e->pd;
				e->ev.param.conn.private_data_len = CM_REJ_PD;
				cm_chan_push(cm_chan_of(c), e);
			}
		}
		return 0;
	}
	ret = cm_watch(cm_chan_of(c), c->cfd, c, K_CONN);
	if (ret)
		return ret;
	c->cfd_chan = cm_chan_of(c);
	ret = cm_send(c, c->req);
	cm_free(c->req);
	c->req = NULL;
	if (ret)
		return ret;
	return cm_arm(c, (c->deadline_ns - cm_now_ns()) / 1000000 + 1);
}
