/*
 * softnic_cm_mcast.c - multicast on an id (joins as the kernel CM makes
 * them: the MGID from the group's address, the QP attached when the join
 * event is read) and ECE, which softnic answers with no vendor options.
 *
 * Never: leave a group while its given events are unacked, or call an
 * exported rdma_* function.
 */
#include "softnic_cm_int.h"

/* ---------------- ECE: softnic has no vendor options ---------------- */

CM_EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || !ece || ece->comp_mask)
		return cm_err(EINVAL);
	return 0;
}

CM_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || !ece)
		return cm_err(EINVAL);
	memset(ece, 0, sizeof(*ece));
	return 0;
}

/* ---------------- multicast ---------------- */

/* The group's MGID as the kernel CM makes it: an IPv4 group in the IB
 * IPv4 multicast prefix (with rdma_cm's signature for the UDP port space),
 * IPv4-mapped on RoCE, an IPv6 group as itself. */
static void cm_mgid(const struct cm_id *c, const struct sockaddr *sa, union ibv_gid *g)
{
	bool eth = cm_dev.port.link_layer == IBV_LINK_LAYER_ETHERNET;

	memset(g, 0, sizeof(*g));
	if (sa->sa_family == AF_INET6) {
		memcpy(g->raw, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return;
	}
	memcpy(g->raw + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	if (eth) {
		g->raw[10] = g->raw[11] = 0xff;
		return;
	}
	g->raw[0] = 0xff;
	g->raw[1] = 0x12;
	g->raw[2] = 0x40;
	g->raw[3] = c->id.ps == RDMA_PS_UDP ? 0x01 : 0x1b;
	g->raw[4] = g->raw[5] = 0xff; /* the default pkey */
	g->raw[12] &= 0x0f;
}

static int cm_join(struct rdma_cm_id *id, const struct sockaddr *addr, void *context,
		   bool sendonly)
{
	struct cm_id *c = (struct cm_id *)id;
	socklen_t len = cm_addrlen(addr);
	struct cm_mc *m;
	struct cm_evt *e;
	uint64_t h;

	if (!id || !len || !cm_addr_mcast(addr) || !cm_is_ud(c))
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	if ((c->state != S_BOUND && c->state != S_ADDR && c->state != S_ROUTE) ||
	    !c->id.verbs) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	for (m = c->mcs; m; m = m->next)
		if (!memcmp(&m->addr, addr, len)) {
			pthread_mutex_unlock(&cm_mu);
			return cm_err(EADDRINUSE);
		}
	m = cm_zalloc(sizeof(*m));
	e = cm_evt_new(c, RDMA_CM_EVENT_MULTICAST_JOIN, 0);
	if (!m || !e) {
		cm_free(m);
		cm_free(e);
		pthread_mutex_unlock(&cm_mu);
		return cm_err(ENOMEM);
	}
	memcpy(&m->addr, addr, len);
	cm_mgid(c, addr, &m->mgid);
	h = 1469598103934665603ull;
	for (int i = 0; i < 16; i++)
		h = (h ^ m->mgid.raw[i]) * 1099511628211ull;
	/* the SA would hand out a multicast LID; one derived from the MGID
	 * gives every process of the fabric the same */
	m->mlid = cm_dev.port.link_layer == IBV_LINK_LAYER_ETHERNET
			  ? 0
			  : (uint16_t)(0xc001 + h % 0x3ffe);
	m->sendonly = sendonly;
	m->context = context;
	m->next = c->mcs;
	c->mcs = m;
	e->mc = m;
	e->ev.param.ud.private_data = context;
	e->ev.param.ud.ah_attr.is_global = 1;
	e->ev.param.ud.ah_attr.grh.dgid = m->mgid;
	e->ev.param.ud.ah_attr.grh.hop_limit =
		cm_dev.port.link_layer == IBV_LINK_LAYER_ETHERNET ? 64 : 0;
	e->ev.param.ud.ah_attr.dlid = m->mlid;
	e->ev.param.ud.ah_attr.port_num = 1;
	e->ev.param.ud.qp_num = 0xffffff;
	e->ev.param.ud.qkey = RDMA_UDP_QKEY;
	cm_chan_push(cm_chan_of(c), e);
	pthread_mutex_unlock(&cm_mu);
	return cm_complete(c);
}

CM_EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr,
				  void *context)
{
	return cm_join(id, addr, context, false);
}

CM_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id,
				     struct rdma_cm_join_mc_attr_ex *mc_join_attr,
				     void *context)
{
	struct rdma_cm_join_mc_attr_ex *a = mc_join_attr;

	if (!a || !(a->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) ||
	    !(a->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
	    a->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED ||
	    a->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED || !a->addr)
		return cm_err(EINVAL);
	return cm_join(id, a->addr, context,
		       a->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER);
}

CM_EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct cm_id *c = (struct cm_id *)id;
	socklen_t len = cm_addrlen(addr);
	struct cm_mc **pp, *m;
	struct cm_chan *ch;

	if (!id || !len)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	for (pp = &c->mcs; (m = *pp); pp = &m->next)
		if (!memcmp(&m->addr, addr, len))
			break;
	if (!m) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EADDRNOTAVAIL);
	}
	*pp = m->next;
	if (c->sync && c->id.event && ((struct cm_evt *)c->id.event)->mc == m) {
		cm_ack_locked(c->id.event);
		c->id.event = NULL;
	}
	if (m->attached && c->id.qp)
		ibv_detach_mcast(c->id.qp, &m->mgid, m->mlid);
	/* its events nobody was given go; the given ones must be acked */
	ch = cm_chan_of(c);
	{
		struct cm_evt **ep = &ch->head, *e;
		uint64_t v;

		ch->tail = NULL;
		while ((e = *ep)) {
			if (e->mc == m) {
				*ep = e->next;
				cm_free(e);
			} else {
				ch->tail = e;
				ep = &e->next;
			}
		}
		if (!ch->head && read(ch->evfd, &v, sizeof(v)) < 0)
			(void)0;
	}
	while (m->completed < m->reported)
		pthread_cond_wait(&cm_cv, &cm_mu);
	cm_free(m);
	pthread_mutex_unlock(&cm_mu);
	return 0;
}

/* rsockets are not part of softnic's CM */
