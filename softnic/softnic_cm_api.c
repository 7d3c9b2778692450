/*
 * softnic_cm_api.c - the exported id API of librdmacm: event channels,
 * creating, binding, resolving, listening on, connecting, accepting,
 * rejecting, disconnecting and migrating ids, QP attributes for programs
 * that make their own QP, options, ports, devices and event names.
 *
 * Never: call another exported rdma_* function (each export is a thin shell
 * over a hidden cm_* function), or return anything but librdmacm's 0 / -1
 * with errno.
 */
#include "softnic_cm_int.h"

/* ---------------- exported: channels and ids ---------------- */

CM_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct cm_chan *ch;

	pthread_mutex_lock(&cm_mu);
	cm_dev_init();
	pthread_mutex_unlock(&cm_mu);
	if (cm_dev.err) {
		errno = -cm_dev.err;
		return NULL;
	}
	ch = cm_chan_new();
	if (!ch)
		errno = ENOMEM;
	return ch ? &ch->ch : NULL;
}

CM_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	if (!channel)
		return;
	struct cm_chan *ch = (struct cm_chan *)channel;
	uint64_t one = 1;

	pthread_mutex_lock(&cm_mu);
	if (ch->users) {
		/* a thread waits in it: wake it to park; the memory stays */
		ch->dead = true;
		if (write(ch->evfd, &one, sizeof(one)) < 0)
			(void)0;
	} else {
		/* Nobody waits in it yet, but a thread may be on its way back
		 * in: an event thread that acked the last event while the main
		 * thread, woken by that ack in rdma_destroy_id, tears down and
		 * destroys the channel (rping). The struct stays, dead, so that
		 * such a call parks until exit instead of reading freed memory
		 * (librdmacm's EBADF there makes rping's event thread exit(-1)
		 * while main exits 0). */
		cm_chan_retire(ch);
	}
	pthread_mutex_unlock(&cm_mu);
}

int cm_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
		 void *context, enum rdma_port_space ps, enum ibv_qp_type qpt)
{
	struct cm_id *c;
	int ret;

	if (!id)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	ret = cm_dev_init();
	if (ret) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(-ret);
	}
	if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IPOIB &&
	    ps != RDMA_PS_IB) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	c = cm_id_new((struct cm_chan *)channel, context, ps, qpt);
	pthread_mutex_unlock(&cm_mu);
	if (!c)
		return cm_err(ENOMEM);
	*id = &c->id;
	return 0;
}

CM_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
			     void *context, enum rdma_port_space ps)
{
	return cm_create_id(channel, id, context, ps,
			    ps == RDMA_PS_IPOIB || ps == RDMA_PS_UDP ? IBV_QPT_UD
								     : IBV_QPT_RC);
}

CM_EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	if (!id)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	cm_destroy_locked((struct cm_id *)id);
	pthread_mutex_unlock(&cm_mu);
	return 0;
}

int cm_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	int ret;

	if (!id || !addr)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	ret = cm_bind((struct cm_id *)id, addr);
	pthread_mutex_unlock(&cm_mu);
	return ret ? cm_err(-ret) : 0;
}

CM_EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	return cm_bind_addr(id, addr);
}

int cm_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
		    struct sockaddr *dst_addr, int timeout_ms)
{
	struct cm_id *c = (struct cm_id *)id;
	socklen_t dlen = cm_addrlen(dst_addr);
	int ret = 0;

	(void)timeout_ms;
	if (!id || !dlen || (src_addr && !cm_addrlen(src_addr)))
		return cm_err(dst_addr && dst_addr->sa_family == AF_IB ? EAFNOSUPPORT
								       : EINVAL);
	pthread_mutex_lock(&cm_mu);
	if (c->state != S_IDLE && c->state != S_BOUND && c->state != S_ADDR) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	memset(&c->id.route.addr.dst_storage, 0, sizeof(c->id.route.addr.dst_storage));
	memcpy(&c->id.route.addr.dst_addr, dst_addr, dlen);
	if (!cm_addr_local(dst_addr) && !cm_addr_mcast(dst_addr)) {
		/* an address on no RDMA device: the event says so */
		cm_post(c, RDMA_CM_EVENT_ADDR_ERROR, -ENODEV);
		pthread_mutex_unlock(&cm_mu);
		return cm_complete(c);
	}
	if (c->state == S_IDLE) {
		struct sockaddr_storage src;

		memset(&src, 0, sizeof(src));
		if (src_addr)
			memcpy(&src, src_addr, cm_addrlen(src_addr));
		else if ((cm_addr_any(dst_addr) || cm_addr_mcast(dst_addr)) &&
			 dst_addr->sa_family == AF_INET)
			((struct sockaddr_in *)&src)->sin_family = AF_INET,
					     ((struct sockaddr_in *)&src)
						     ->sin_addr.s_addr =
						     htonl(INADDR_LOOPBACK);
		else {
			memcpy(&src, dst_addr, dlen);
			cm_set_port((struct sockaddr *)&src, 0);
		}
		ret = cm_bind(c, (struct sockaddr *)&src);
		if (ret) {
			pthread_mutex_unlock(&cm_mu);
			return cm_err(-ret);
		}
	}
	cm_attach_dev(c);
	c->state = S_ADDR;
	cm_post(c, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	pthread_mutex_unlock(&cm_mu);
	return cm_complete(c);
}

CM_EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
				struct sockaddr *dst_addr, int timeout_ms)
{
	return cm_resolve_addr(id, src_addr, dst_addr, timeout_ms);
}

int cm_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct cm_id *c = (struct cm_id *)id;

	(void)timeout_ms;
	if (!id)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	if (c->state != S_ADDR && c->state != S_ROUTE) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	cm_fill_path(c);
	c->state = S_ROUTE;
	cm_post(c, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	pthread_mutex_unlock(&cm_mu);
	return cm_complete(c);
}

CM_EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	return cm_resolve_route(id, timeout_ms);
}

CM_EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct cm_id *c = (struct cm_id *)id;
	int ret = 0;

	if (!id)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	if (c->state == S_IDLE) {
		struct sockaddr_in any = { .sin_family = AF_INET };

		ret = cm_bind(c, (struct sockaddr *)&any);
	}
	if (!ret && c->state == S_LISTEN)
		goto out;
	if (!ret && c->state != S_BOUND)
		ret = -EINVAL;
	if (!ret && listen(c->bfd, backlog > 128 ? backlog : 128))
		ret = -errno;
	if (!ret)
		ret = cm_watch(cm_chan_of(c), c->bfd, c, K_BIND);
	if (!ret)
		c->state = S_LISTEN;
out:
	pthread_mutex_unlock(&cm_mu);
	return ret ? cm_err(-ret) : 0;
}

CM_EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	struct cm_id *c = (struct cm_id *)id;
	struct cm_wire *w;
	unsigned max;
	int ret;

	if (!id)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	if (c->state != S_ROUTE) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	if (!cm_is_ud(c) && c->id.ps == RDMA_PS_TCP &&
	    ((!c->id.qp && !p) ||
	     (p && p->responder_resources != RDMA_MAX_RESP_RES &&
	      p->responder_resources > cm_dev.max_resp_res) ||
	     (p && p->initiator_depth != RDMA_MAX_INIT_DEPTH &&
	      p->initiator_depth > cm_dev.max_init_depth))) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	max = cm_pd_max(c, cm_is_ud(c) ? CM_SIDR_REQ : CM_REQ_PD);
	if (p && p->private_data_len && c->connect_len + p->private_data_len > max) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	w = cm_zalloc(sizeof(*w));
	if (!w) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(ENOMEM);
	}
	c->init_depth = p && p->initiator_depth != RDMA_MAX_INIT_DEPTH
				? p->initiator_depth
				: cm_dev.max_init_depth;
	c->resp_res = p && p->responder_resources != RDMA_MAX_RESP_RES
			      ? p->responder_resources
			      : cm_dev.max_resp_res;
	c->retry = p ? p->retry_count & 7 : 7;
	c->rnr_retry = p ? p->rnr_retry_count & 7 : 7;
	w->type = cm_is_ud(c) ? M_SIDR_REQ : M_REQ;
	w->resp_res = c->resp_res;
	w->init_depth = c->init_depth;
	w->retry = c->retry;
	w->rnr_retry = c->rnr_retry;
	w->flow = p ? p->flow_control : 0;
	w->qpn = c->id.qp ? c->id.qp->qp_num : p ? p->qp_num : 0;
	w->srq = c->id.qp ? !!c->id.qp->srq : p ? p->srq : 0;
	w->psn = c->psn;
	w->qkey = RDMA_UDP_QKEY;
	memcpy(&w->src, &c->id.route.addr.src_storage, sizeof(w->src));
	memcpy(&w->dst, &c->id.route.addr.dst_storage, sizeof(w->dst));
	memcpy(w->pd, c->connect_pd, c->connect_len);
	w->pd_len = c->connect_len;
	if (p && p->private_data && p->private_data_len) {
		memcpy(w->pd + w->pd_len, p->private_data, p->private_data_len);
		w->pd_len = (uint8_t)(w->pd_len + p->private_data_len);
	}
	c->connect_len = 0;
	c->req = w;
	c->state = S_CONNECTING;
	c->deadline_ns = cm_now_ns() + cm_dev.timeout_ms * 1000000ull;
	ret = cm_try_connect(c);
	if (ret) {
		cm_free(c->req);
		c->req = NULL;
		cm_close_conn(c);
		c->state = S_ROUTE;
		pthread_mutex_unlock(&cm_mu);
		return cm_err(-ret);
	}
	pthread_mutex_unlock(&cm_mu);
	return cm_complete(c);
}

CM_EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	struct cm_id *c = (struct cm_id *)id;
	int ret = 0;

	if (!id || id->qp)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	if (c->state != S_REP_RCVD)
		ret = -EINVAL;
	else {
		cm_send_simple(c, M_RTU, 0);
		c->state = S_ESTABLISHED;
	}
	pthread_mutex_unlock(&cm_mu);
	return ret ? cm_err(-ret) : 0;
}

/* the last message of an id's exchange (a SIDR_REP, a REJ): the
 * connection closes after it */
static int cm_send_last(struct cm_id *c, struct cm_wire *w)
{
	int ret = cm_send(c, w);

	cm_close_conn(c);
	c->state = S_CLOSED;
	return ret;
}

CM_EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	struct cm_id *c = (struct cm_id *)id;
	struct cm_wire w;
	int ret;

	if (!id || (!id->qp && !p))
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	if (c->state != S_REQ_RCVD) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	if (p && p->private_data_len > (cm_is_ud(c) ? CM_SIDR_REP : CM_REP_PD)) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	memset(&w, 0, sizeof(w));
	if (p && p->private_data && p->private_data_len) {
		memcpy(w.pd, p->private_data, p->private_data_len);
		w.pd_len = p->private_data_len;
	}
	if (cm_is_ud(c)) {
		w.type = M_SIDR_REP;
		w.qpn = id->qp ? id->qp->qp_num : p->qp_num;
		w.qkey = RDMA_UDP_QKEY;
		ret = cm_send_last(c, &w);
		pthread_mutex_unlock(&cm_mu);
		return ret ? cm_err(-ret) : 0;
	}
	if (!p || p->initiator_depth == RDMA_MAX_INIT_DEPTH) {
		if (c->init_depth > cm_dev.max_init_depth)
			c->init_depth = cm_dev.max_init_depth;
	} else {
		c->init_depth = p->initiator_depth;
	}
	if (!p || p->responder_resources == RDMA_MAX_RESP_RES) {
		if (c->resp_res > cm_dev.max_resp_res)
			c->resp_res = cm_dev.max_resp_res;
	} else {
		c->resp_res = p->responder_resources;
	}
	ret = cm_qp_connect(c);
	if (ret) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(-ret);
	}
	w.type = M_REP;
	w.qpn = id->qp ? id->qp->qp_num : p->qp_num;
	w.srq = id->qp ? !!id->qp->srq : p->srq;
	w.psn = c->psn;
	w.resp_res = c->resp_res;
	w.init_depth = c->init_depth;
	/* the REP's RNR retry count is for the active side's QP (IB CM) */
	w.rnr_retry = p ? p->rnr_retry_count & 7 : 7;
	w.flow = p ? p->flow_control : 0;
	ret = cm_send(c, &w);
	if (ret) {
		cm_qp_err(c);
		pthread_mutex_unlock(&cm_mu);
		return cm_err(-ret);
	}
	c->state = S_REP_SENT;
	cm_arm(c, cm_dev.timeout_ms);
	pthread_mutex_unlock(&cm_mu);
	return cm_complete(c);
}

static int cm_reject(struct rdma_cm_id *id, const void *pd, uint8_t len, int reason)
{
	struct cm_id *c = (struct cm_id *)id;
	struct cm_wire w;
	int ret = 0;

	if (!id)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	if ((c->state != S_REQ_RCVD && c->state != S_REP_RCVD) ||
	    len > (cm_is_ud(c) ? CM_SIDR_REP : CM_REJ_PD)) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	memset(&w, 0, sizeof(w));
	if (pd && len) {
		memcpy(w.pd, pd, len);
		w.pd_len = len;
	}
	if (cm_is_ud(c)) {
		w.type = M_SIDR_REP;
		w.status = CM_SIDR_REJECT;
	} else {
		w.type = M_REJ;
		w.status = reason;
	}
	ret = cm_send_last(c, &w);
	pthread_mutex_unlock(&cm_mu);
	return ret ? cm_err(-ret) : 0;
}

CM_EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data,
			  uint8_t private_data_len)
{
	return cm_reject(id, private_data, private_data_len, CM_REJ_CONSUMER);
}

CM_EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data,
			      uint8_t private_data_len)
{
	return cm_reject(id, private_data, private_data_len, CM_REJ_VENDOR_OPTION);
}

CM_EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	(void)event;
	return id ? 0 : cm_err(EINVAL);
}

CM_EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	struct cm_id *c = (struct cm_id *)id;
	bool wait = false;
	int ret = 0;

	if (!id || !id->verbs)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	cm_qp_err(c);
	switch (c->state) {
	case S_ESTABLISHED:
	case S_REP_SENT:
	case S_REP_RCVD:
		if (cm_is_ud(c)) {
			ret = -EINVAL;
			break;
		}
		cm_send_simple(c, M_DREQ, 0);
		c->state = S_DREQ_SENT;
		cm_arm(c, cm_dev.timeout_ms);
		wait = true;
		break;
	case S_DISCONNECTED:
		/* the DREQ came first: its DREP is gone already */
		wait = cm_chan_of(c)->head != NULL;
		break;
	case S_DREQ_SENT:
		break;
	default:
		ret = -EINVAL;
	}
	pthread_mutex_unlock(&cm_mu);
	if (ret)
		return cm_err(-ret);
	return wait ? cm_complete(c) : 0;
}

CM_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel,
				struct rdma_cm_event **event)
{
	if (!channel || !event)
		return cm_err(EINVAL);
	return cm_get_event((struct cm_chan *)channel, event);
}

CM_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	cm_ack_locked(event);
	pthread_mutex_unlock(&cm_mu);
	return 0;
}

CM_EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct cm_id *c = (struct cm_id *)id;
	struct cm_chan *old, *nu;
	struct cm_evt *e, *n;
	bool sync = !channel;

	if (!id || (c->sync && !channel))
		return cm_err(EINVAL);
	nu = channel ? (struct cm_chan *)channel : cm_chan_new();
	if (!nu)
		return cm_err(ENOMEM);
	pthread_mutex_lock(&cm_mu);
	old = cm_chan_of(c);
	if (old == nu) {
		pthread_mutex_unlock(&cm_mu);
		return 0;
	}
	if (c->bfd >= 0 && c->state == S_LISTEN) {
		cm_unwatch(old, c->bfd);
		cm_watch(nu, c->bfd, c, K_BIND);
	}
	if (c->cfd >= 0 && c->cfd_chan == old) {
		cm_unwatch(old, c->cfd);
		c->cfd_chan = cm_watch(nu, c->cfd, c, K_CONN) ? NULL : nu;
	}
	if (c->tfd >= 0) {
		cm_unwatch(old, c->tfd);
		cm_watch(nu, c->tfd, c, K_TIMER);
	}
	for (uint32_t i = 0; i < cm_tab_n; i++) {
		struct cm_id *k = cm_tab[i];

		if (k && k->listener == c && k->state == S_PENDING &&
		    k->cfd_chan == old) {
			cm_unwatch(old, k->cfd);
			k->cfd_chan = cm_watch(nu, k->cfd, k, K_CONN) ? NULL : nu;
		}
	}
	for (e = cm_chan_take(old, c); e; e = n) {
		n = e->next;
		cm_chan_push(nu, e);
	}
	if (c->sync) {
		if (c->id.event) {
			cm_ack_locked(c->id.event);
			c->id.event = NULL;
		}
	}
	c->id.channel = &nu->ch;
	if (c->sync)
		cm_chan_free(old);
	c->sync = sync;
	while (c->completed < c->reported)
		pthread_cond_wait(&cm_cv, &cm_mu);
	pthread_mutex_unlock(&cm_mu);
	return 0;
}

CM_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr,
				int *qp_attr_mask)
{
	int ret;

	if (!id || !qp_attr || !qp_attr_mask)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	ret = cm_qp_attr((struct cm_id *)id, qp_attr, qp_attr_mask);
	pthread_mutex_unlock(&cm_mu);
	return ret ? cm_err(-ret) : 0;
}

CM_EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval,
			      size_t optlen)
{
	struct cm_id *c = (struct cm_id *)id;

	if (!id || !optval)
		return cm_err(EINVAL);
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			return optlen == sizeof(uint8_t) ? 0 : cm_err(EINVAL);
		case RDMA_OPTION_ID_REUSEADDR:
		case RDMA_OPTION_ID_AFONLY:
			return optlen == sizeof(int) ? 0 : cm_err(EINVAL);
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			if (optlen != sizeof(uint8_t))
				return cm_err(EINVAL);
			c->ack_timeout = *(uint8_t *)optval & 31;
			return 0;
		default:
			return cm_err(ENOSYS);
		}
	}
	if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH)
		return optlen >= sizeof(struct ibv_path_data) ? 0 : cm_err(EINVAL);
	return cm_err(ENOSYS);
}

CM_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return htons(cm_get_port(&id->route.addr.src_addr));
}

CM_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return htons(cm_get_port(&id->route.addr.dst_addr));
}

CM_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context **l = calloc(2, sizeof(*l));

	pthread_mutex_lock(&cm_mu);
	cm_dev_init();
	pthread_mutex_unlock(&cm_mu);
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	l[0] = cm_dev.ctx;
	if (num_devices)
		*num_devices = cm_dev.ctx ? 1 : 0;
	return l;
}

CM_EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

CM_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	return cm_ev_name(event);
}
