/*
 * softnic_cm_qp.c - the resources an id can own and the endpoint API:
 * QPs (moved to the state the id's connection needs), their CQs and SRQs,
 * XRC, rdma_getaddrinfo over the host's resolver, and rdma_create_ep /
 * rdma_destroy_ep / rdma_get_request.
 *
 * Never: call an exported rdma_* function (but rdma_get_request's event
 * read, as cm_complete's), or free a resource the program gave the id (only
 * the ones made here).
 */
#include "softnic_cm_int.h"

/* ---------------- QPs, CQs, SRQs ---------------- */

static void cm_destroy_cqs(struct rdma_cm_id *id)
{
	if (id->qp_type == IBV_QPT_XRC_RECV && id->srq)
		return;
	if (id->recv_cq) {
		ibv_destroy_cq(id->recv_cq);
		if (id->send_cq && id->send_cq != id->recv_cq)
			ibv_destroy_cq(id->send_cq);
		id->recv_cq = id->send_cq = NULL;
	}
	if (id->recv_cq_channel) {
		ibv_destroy_comp_channel(id->recv_cq_channel);
		if (id->send_cq_channel && id->send_cq_channel != id->recv_cq_channel)
			ibv_destroy_comp_channel(id->send_cq_channel);
		id->recv_cq_channel = id->send_cq_channel = NULL;
	}
}

static int cm_create_cqs(struct rdma_cm_id *id, uint32_t send_size, uint32_t recv_size)
{
	if (recv_size) {
		id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->recv_cq_channel)
			goto err;
		id->recv_cq = ibv_create_cq(id->verbs, (int)recv_size, id,
					    id->recv_cq_channel, 0);
		if (!id->recv_cq)
			goto err;
	}
	if (send_size) {
		id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->send_cq_channel)
			goto err;
		id->send_cq = ibv_create_cq(id->verbs, (int)send_size, id,
					    id->send_cq_channel, 0);
		if (!id->send_cq)
			goto err;
	}
	return 0;
err:
	cm_destroy_cqs(id);
	return -1;
}

static struct ibv_xrcd *cm_xrcd(void)
{
	pthread_mutex_lock(&cm_mu);
	if (!cm_dev.xrcd) {
		struct ibv_xrcd_init_attr a = {
			.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
			.fd = -1,
			.oflags = O_CREAT,
		};

		cm_dev.xrcd = ibv_open_xrcd(cm_dev.ctx, &a);
	}
	pthread_mutex_unlock(&cm_mu);
	return cm_dev.xrcd;
}

static int cm_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct cm_id *c = (struct cm_id *)id;
	struct ibv_qp *qp;
	int ret;

	if (!id || !attr || id->qp || !id->verbs)
		return cm_err(EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		attr->pd = id->pd;
	} else if (id->verbs != attr->pd->context) {
		return cm_err(EINVAL);
	}
	if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
	    (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
		return cm_err(EINVAL);
	if (id->qp_type == IBV_QPT_XRC_RECV &&
	    (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd)) {
		attr->xrcd = cm_xrcd();
		if (!attr->xrcd)
			return -1;
		attr->comp_mask |= IBV_QP_INIT_ATTR_XRCD;
	}
	if (cm_create_cqs(id, attr->send_cq || id->send_cq ? 0 : attr->cap.max_send_wr,
			  attr->recv_cq || id->recv_cq ? 0 : attr->cap.max_recv_wr))
		return -1;
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq;
	if (id->srq && !attr->srq)
		attr->srq = id->srq;
	qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp) {
		cm_destroy_cqs(id);
		return -1;
	}
	pthread_mutex_lock(&cm_mu);
	id->qp = qp;
	if (cm_is_ud(c)) {
		ret = cm_modify(c, IBV_QPS_INIT);
		if (!ret)
			ret = cm_modify(c, IBV_QPS_RTR);
		if (!ret)
			ret = cm_modify(c, IBV_QPS_RTS);
	} else {
		/* access 0 until the connection says more, as the kernel does */
		bool remote = c->remote;

		c->remote = false;
		ret = cm_modify(c, IBV_QPS_INIT);
		c->remote = remote;
	}
	if (ret)
		id->qp = NULL;
	pthread_mutex_unlock(&cm_mu);
	if (ret) {
		ibv_destroy_qp(qp);
		cm_destroy_cqs(id);
		return cm_err(-ret);
	}
	id->pd = qp->pd;
	return 0;
}

CM_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id,
				struct ibv_qp_init_attr_ex *qp_init_attr)
{
	return cm_create_qp_ex(id, qp_init_attr);
}

static int cm_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
			struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex ax;
	int ret;

	if (!id || !qp_init_attr)
		return cm_err(EINVAL);
	memset(&ax, 0, sizeof(ax));
	memcpy(&ax, qp_init_attr, sizeof(*qp_init_attr));
	ax.comp_mask = IBV_QP_INIT_ATTR_PD;
	ax.pd = pd ? pd : id->pd;
	ret = cm_create_qp_ex(id, &ax);
	memcpy(qp_init_attr, &ax, sizeof(*qp_init_attr));
	return ret;
}

CM_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	return cm_create_qp(id, pd, qp_init_attr);
}

/* what rdma_destroy_qp, rdma_destroy_srq and rdma_destroy_ep release: the
 * id's QP and/or SRQ, each followed by the CQs made for it */
static void cm_release(struct rdma_cm_id *id, bool qp, bool srq)
{
	if (qp) {
		if (id->qp)
			ibv_destroy_qp(id->qp);
		id->qp = NULL;
		cm_destroy_cqs(id);
	}
	if (srq) {
		if (id->srq)
			ibv_destroy_srq(id->srq);
		id->srq = NULL;
		cm_destroy_cqs(id);
	}
}

CM_EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (id)
		cm_release(id, true, false);
}

static int cm_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq *srq;

	if (!id || !attr || !id->verbs || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		return cm_err(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	if (attr->srq_type == IBV_SRQT_XRC) {
		if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd) {
			attr->xrcd = cm_xrcd();
			if (!attr->xrcd)
				return -1;
		}
		if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq) {
			if (cm_create_cqs(id, 0, attr->attr.max_wr))
				return -1;
			attr->cq = id->recv_cq;
		}
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	}
	srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq) {
		cm_destroy_cqs(id);
		return -1;
	}
	if (!id->pd)
		id->pd = attr->pd;
	id->srq = srq;
	return 0;
}

CM_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	return cm_create_srq_ex(id, attr);
}

CM_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd,
			      struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex ax;
	int ret;

	if (!id || !attr)
		return cm_err(EINVAL);
	ax = (struct ibv_srq_init_attr_ex){
		.srq_context = attr->srq_context,
		.attr = attr->attr,
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD,
		.srq_type =
			id->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC,
		.pd = pd,
	};
	ret = cm_create_srq_ex(id, &ax);
	attr->attr = ax.attr; /* the limits the device gave */
	return ret;
}

CM_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (id)
		cm_release(id, false, true);
}

/* ---------------- the endpoint API ---------------- */

static int cm_copy_addr(struct sockaddr **dst, socklen_t *dlen,
			const struct sockaddr *src, socklen_t len)
{
	*dst = malloc(len);
	if (!*dst)
		return -ENOMEM;
	memcpy(*dst, src, len);
	*dlen = len;
	return 0;
}

static void cm_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *n = res->ai_next;

		free(res->ai_connect);
		free(res->ai_route);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res);
		res = n;
	}
}

CM_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	cm_freeaddrinfo(res);
}

CM_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
			       const struct rdma_addrinfo *hints,
			       struct rdma_addrinfo **res)
{
	static const struct rdma_addrinfo nohints;
	struct rdma_addrinfo *rai;
	int ret = 0;

	if ((!service && !node && !hints) || !res)
		return cm_err(EINVAL);
	if (!hints)
		hints = &nohints;
	rai = calloc(1, sizeof(*rai));
	if (!rai)
		return cm_err(ENOMEM);
	if (node || service) {
		struct addrinfo ah, *ai;

		memset(&ah, 0, sizeof(ah));
		if (hints->ai_flags & RAI_PASSIVE)
			ah.ai_flags |= AI_PASSIVE;
		if (hints->ai_flags & RAI_NUMERICHOST)
			ah.ai_flags |= AI_NUMERICHOST;
		if (hints->ai_family != AF_IB)
			ah.ai_family = hints->ai_family;
		switch (hints->ai_qp_type) {
		case IBV_QPT_RC:
		case IBV_QPT_UC:
		case IBV_QPT_XRC_SEND:
		case IBV_QPT_XRC_RECV:
			ah.ai_socktype = SOCK_STREAM;
			break;
		case IBV_QPT_UD:
			ah.ai_socktype = SOCK_DGRAM;
			break;
		default:
			break;
		}
		switch (hints->ai_port_space) {
		case RDMA_PS_TCP:
			ah.ai_protocol = IPPROTO_TCP;
			break;
		case RDMA_PS_IB:
			ah.ai_protocol = hints->ai_qp_type == IBV_QPT_UD ? IPPROTO_UDP
									 : IPPROTO_TCP;
			break;
		case RDMA_PS_IPOIB:
		case RDMA_PS_UDP:
			ah.ai_protocol = IPPROTO_UDP;
			break;
		default:
			break;
		}
		if (hints == &nohints)
			ret = getaddrinfo(node, service, NULL, &ai);
		else
			ret = getaddrinfo(node, service, &ah, &ai);
		if (ret) {
			free(rai);
			return ret;
		}
		rai->ai_qp_type = hints->ai_qp_type		  ? hints->ai_qp_type
				  : ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD
								  : IBV_QPT_RC;
		rai->ai_port_space = hints->ai_port_space ? hints->ai_port_space
				     : ai->ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP
								      : RDMA_PS_TCP;
		rai->ai_family = ai->ai_family;
		if (ai->ai_flags & AI_PASSIVE) {
			rai->ai_flags = RAI_PASSIVE;
			if (ai->ai_canonname)
				rai->ai_src_canonname = strdup(ai->ai_canonname);
			ret = cm_copy_addr(&rai->ai_src_addr, &rai->ai_src_len,
					   ai->ai_addr, ai->ai_addrlen);
		} else {
			if (ai->ai_canonname)
				rai->ai_dst_canonname = strdup(ai->ai_canonname);
			ret = cm_copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len,
					   ai->ai_addr, ai->ai_addrlen);
		}
		freeaddrinfo(ai);
	} else {
		rai->ai_flags = hints->ai_flags;
		rai->ai_family = hints->ai_family;
		rai->ai_qp_type = hints->ai_qp_type;
		rai->ai_port_space = hints->ai_port_space;
		if (hints->ai_dst_len)
			ret = cm_copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len,
					   hints->ai_dst_addr, hints->ai_dst_len);
	}
	if (!ret && !rai->ai_src_len && hints->ai_src_len)
		ret = cm_copy_addr(&rai->ai_src_addr, &rai->ai_src_len,
				   hints->ai_src_addr, hints->ai_src_len);
	if (ret) {
		cm_freeaddrinfo(rai);
		return cm_err(-ret);
	}
	*res = rai;
	return 0;
}

static void cm_destroy_ep(struct rdma_cm_id *id)
{
	struct cm_id *c = (struct cm_id *)id;

	cm_release(id, id->qp, id->srq);
	pthread_mutex_lock(&cm_mu);
	cm_destroy_locked(c);
	pthread_mutex_unlock(&cm_mu);
}

CM_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (id)
		cm_destroy_ep(id);
}

CM_EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res,
			     struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cid;
	struct cm_id *c;
	int ret;

	if (!id || !res)
		return cm_err(EINVAL);
	ret = cm_create_id(NULL, &cid, NULL, (enum rdma_port_space)res->ai_port_space,
			   (enum ibv_qp_type)res->ai_qp_type);
	if (ret)
		return ret;
	c = (struct cm_id *)cid;
	if (res->ai_flags & RAI_PASSIVE) {
		ret = cm_bind_addr(cid, res->ai_src_addr);
		if (ret)
			goto err;
		if (pd)
			cid->pd = pd;
		if (qp_init_attr) {
			c->ep_attr = cm_zalloc(sizeof(*c->ep_attr));
			if (!c->ep_attr) {
				ret = cm_err(ENOMEM);
				goto err;
			}
			*c->ep_attr = *qp_init_attr;
			c->ep_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
		}
		*id = cid;
		return 0;
	}
	ret = cm_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr, 2000);
	if (!ret)
		ret = cm_resolve_route(cid, 2000);
	if (ret)
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
		ret = cm_create_qp(cid, pd, qp_init_attr);
		if (ret)
			goto err;
	}
	if (res->ai_connect_len) {
		if (res->ai_connect_len > sizeof(c->connect_pd)) {
			ret = cm_err(EINVAL);
			goto err;
		}
		memcpy(c->connect_pd, res->ai_connect, res->ai_connect_len);
		c->connect_len = (uint8_t)res->ai_connect_len;
	}
	*id = cid;
	return 0;
err : {
	int e = errno;

	cm_destroy_ep(cid);
	errno = e;
	return ret;
}
}

CM_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct cm_id *l = (struct cm_id *)listen;
	struct rdma_cm_event *ev;
	int ret;

	if (!listen || !id || !l->sync)
		return cm_err(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event); /* the PLT, as cm_complete */
		listen->event = NULL;
	}
	ret = rdma_get_cm_event(&cm_chan_of(l)->ch, &ev);
	if (ret)
		return ret;
	if (ev->event == RDMA_CM_EVENT_REJECTED) {
		ret = cm_err(ECONNREFUSED);
		goto err;
	}
	if (ev->status) {
		ret = cm_err(ev->status < 0 ? -ev->status : ev->status);
		goto err;
	}
	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		ret = cm_err(EINVAL);
		goto err;
	}
	if (l->ep_attr) {
		struct ibv_qp_init_attr a = *l->ep_attr;

		ret = cm_create_qp(ev->id, listen->pd, &a);
		if (ret)
			goto err;
	}
	*id = ev->id;
	(*id)->event = ev;
	return 0;
err:
	listen->event = ev;
	return ret;
}
