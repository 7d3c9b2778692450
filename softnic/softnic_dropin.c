/*
 * softnic drop-in front end: what a libibverbs.so.1 does around a provider,
 * done here for softnic alone: the device list, opening a context, GID and
 * P_Key queries, completion channels and their events, async events, AHs
 * from work completions, and every core verb exported under its libibverbs
 * name. Nothing here may hold verbs semantics: those live in the core
 * (softnic_verbs.c and the data path), shared with the provider front end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "softnic_int.h"

static struct ibv_device sn_dev = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = SN_DEV_NAME,
	.dev_name = "uverbs0",
};
/* ---------------- devices ---------------- */

SN_EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	struct ibv_device **l;

	if (sn_init()) {
		if (num)
			*num = 0;
		errno = ENOSYS;
		return NULL;
	}
	snprintf(sn_dev.dev_path, sizeof(sn_dev.dev_path), "%s/sysfs/uverbs0", sn_g.dir);
	snprintf(sn_dev.ibdev_path, sizeof(sn_dev.ibdev_path), "%s/sysfs/softnic0",
		 sn_g.dir);
	l = calloc(2, sizeof(*l));
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	l[0] = &sn_dev;
	if (num)
		*num = 1;
	return l;
}

SN_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

SN_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

SN_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	return htobe64(sn_g.guid);
}

SN_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	return 0;
}

SN_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct sn_ctx *ctx;
	struct verbs_context *v;

	if (device != &sn_dev || sn_init()) {
		errno = ENODEV;
		return NULL;
	}
	ctx = sn_zalloc(sizeof(*ctx));
	if (!ctx)
		return NULL;
	v = &ctx->vctx;
	ctx->async_rfd = sn_mkfifo(ctx->async_path, sizeof(ctx->async_path), "as");
	if (ctx->async_rfd < 0) {
		free(ctx);
		errno = EIO;
		return NULL;
	}
	pthread_mutex_init(&ctx->lock, NULL);
	v->sz = sizeof(*v);
	v->query_port = sn_query_port_full;
	v->query_device_ex = sn_query_device_ex;
	v->create_cq_ex = sn_create_cq_ex;
	v->alloc_parent_domain = sn_alloc_parent_domain;
	v->modify_cq = sn_modify_cq;
	v->create_qp_ex = sn_create_qp_ex;
	v->query_rt_values = sn_query_rt_values;
	v->create_srq_ex = sn_create_srq_ex;
	v->get_srq_num = sn_get_srq_num;
	v->open_xrcd = sn_open_xrcd;
	v->close_xrcd = sn_close_xrcd;
	v->context.device = device;
	v->context.ops = sn_ops_template;
	v->context.cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	v->context.async_fd = ctx->async_rfd;
	v->context.num_comp_vectors = 1;
	pthread_mutex_init(&v->context.mutex, NULL);
	v->context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	return &v->context;
}

SN_EXPORT int ibv_close_device(struct ibv_context *context)
{
	struct sn_ctx *ctx = sn_ctx_of(context);

	close(ctx->async_rfd);
	if (context->cmd_fd >= 0)
		close(context->cmd_fd);
	sn_unlink(ctx->async_path);
	free(ctx);
	return 0;
}
#undef ibv_query_port
SN_EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
			     struct _compat_ibv_port_attr *port_attr)
{
	return sn_query_port_full(context, port_num, (struct ibv_port_attr *)port_attr,
				  offsetof(struct ibv_port_attr, flags));
}

SN_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
			    union ibv_gid *gid)
{
	if (port_num != 1 || index < 0 || index >= sn_g.ngid) {
		errno = EINVAL;
		return -1;
	}
	*gid = sn_g.gid[index];
	return 0;
}

SN_EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
				 unsigned int index, uint32_t *type)
{
	if (port_num != 1 || index >= (unsigned)sn_g.ngid)
		return -1;
	*type = sn_g.eth ? 1 /* RoCE v2 */ : 0 /* IB */;
	return 0;
}

SN_EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
				uint32_t gid_index, struct ibv_gid_entry *entry,
				uint32_t flags, size_t entry_size)
{
	struct ibv_gid_entry e;

	if (port_num != 1 || gid_index >= (uint32_t)sn_g.ngid || flags)
		return EINVAL;
	memset(&e, 0, sizeof(e));
	e.gid = sn_g.gid[gid_index];
	e.gid_index = gid_index;
	e.port_num = 1;
	e.gid_type = sn_g.eth ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_IB;
	e.ndev_ifindex = sn_g.eth ? 1 : 0;
	memcpy(entry, &e, entry_size < sizeof(e) ? entry_size : sizeof(e));
	return 0;
}

SN_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context,
				       struct ibv_gid_entry *entries, size_t max_entries,
				       uint32_t flags, size_t entry_size)
{
	size_t i;

	/* a buffer too small for the table is EINVAL (rdma-core's
	 * ibv_query_gid_table(3)), not a truncated table */
	if (flags || entry_size < sizeof(struct ibv_gid_entry) ||
	    max_entries < (size_t)sn_g.ngid)
		return -EINVAL;
	for (i = 0; i < (size_t)sn_g.ngid && i < max_entries; i++)
		_ibv_query_gid_ex(
			context, 1, (uint32_t)i,
			(struct ibv_gid_entry *)((char *)entries + i * entry_size), 0,
			entry_size);
	return (ssize_t)i;
}

SN_EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index,
			     __be16 *pkey)
{
	if (port_num != 1 || index != 0) {
		errno = EINVAL;
		return -1;
	}
	*pkey = htobe16(0xffff);
	return 0;
}

SN_EXPORT int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num,
				 __be16 pkey)
{
	if (port_num == 1 && (be16toh(pkey) & 0x7fff) == 0x7fff)
		return 0;
	errno = ENOENT;
	return -1;
}

/* ---------------- completion channels and CQs ---------------- */

static struct sn_cq *sn_cq_live(uint64_t cookie)
{
	struct sn_cq *cq;

	for (cq = sn_g.cqs; cq; cq = cq->next_live)
		if ((uint64_t)(uintptr_t)cq == cookie)
			return cq;
	return NULL;
}

/* An armed CQ of this channel whose oldest completion is visible is owed
 * an event: deliver it ourselves. This is the safety net under the FIFO
 * wake-ups (and what makes latency-model completions wake on time). */
static struct sn_cq *sn_owed_event(struct ibv_comp_channel *channel)
{
	struct sn_cq *cq, *found = NULL;
	uint64_t now = sn_now_ns();

	pthread_mutex_lock(&sn_g.lock);
	for (cq = sn_g.cqs; cq && !found; cq = cq->next_live) {
		struct sn_cq_shm *s = cq->shm;
		uint64_t cons;
		struct sn_cqe *e;

		if (cq->cq.channel != channel || !atomic_load(&s->armed))
			continue;
		cons = atomic_load(&s->cons);
		e = &s->e[cons & (s->ring - 1)];
		if (atomic_load(&e->seq) == cons + 1 &&
		    (!e->visible_ns || e->visible_ns <= now) &&
		    atomic_exchange(&s->armed, 0))
			found = cq;
	}
	pthread_mutex_unlock(&sn_g.lock);
	return found;
}

SN_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
			       void **cq_context)
{
	bool nonblock = fcntl(channel->fd, F_GETFL) & O_NONBLOCK;

	for (;;) {
		uint64_t cookie;
		struct sn_cq *c;
		struct pollfd p = { .fd = channel->fd, .events = POLLIN };
		ssize_t n;

		if (!nonblock && poll(&p, 1, sn_g.model ? 1 : 20) == 0) {
			c = sn_owed_event(channel);
			if (!c)
				continue;
		} else {
			n = read(channel->fd, &cookie, sizeof(cookie));
			if (n != sizeof(cookie)) {
				c = nonblock ? sn_owed_event(channel) : NULL;
				if (!c)
					return -1;
			} else {
				pthread_mutex_lock(&sn_g.lock);
				c = sn_cq_live(cookie);
				pthread_mutex_unlock(&sn_g.lock);
				if (!c || c->cq.channel != channel)
					continue; /* event of a CQ destroyed since */
			}
		}
		*cq = ibv_cq_ex_to_cq(&c->cq);
		*cq_context = c->cq.cq_context;
		return 0;
	}
}

SN_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

SN_EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num,
				  struct ibv_wc *wc, struct ibv_grh *grh,
				  struct ibv_ah_attr *ah_attr)
{
	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port_num;
	if (wc->wc_flags & IBV_WC_GRH) {
		ah_attr->is_global = 1;
		ah_attr->grh.dgid = grh->sgid;
		ah_attr->grh.sgid_index = 0;
		ah_attr->grh.hop_limit = 0xff;
		ah_attr->grh.flow_label = be32toh(grh->version_tclass_flow) & 0xfffff;
		ah_attr->grh.traffic_class =
			(be32toh(grh->version_tclass_flow) >> 20) & 0xff;
	} else if (sn_g.eth) {
		return -1;
	}
	return 0;
}

SN_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
					       struct ibv_grh *grh, uint8_t port_num)
{
	struct ibv_ah_attr a;

	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &a))
		return NULL;
	return ibv_create_ah(pd, &a);
}

/* ---------------- async events ---------------- */

/* what an async event's element names, by its type */
enum sn_ev_elem { SN_EV_PORT, SN_EV_CQ, SN_EV_QP, SN_EV_SRQ };

/* the types whose element is a CQ, a QP or an SRQ; the others name a port */
static const uint8_t sn_ev_elems[] = {
	[IBV_EVENT_CQ_ERR] = SN_EV_CQ,
	[IBV_EVENT_QP_FATAL] = SN_EV_QP,
	[IBV_EVENT_QP_REQ_ERR] = SN_EV_QP,
	[IBV_EVENT_QP_ACCESS_ERR] = SN_EV_QP,
	[IBV_EVENT_COMM_EST] = SN_EV_QP,
	[IBV_EVENT_SQ_DRAINED] = SN_EV_QP,
	[IBV_EVENT_PATH_MIG] = SN_EV_QP,
	[IBV_EVENT_PATH_MIG_ERR] = SN_EV_QP,
	[IBV_EVENT_QP_LAST_WQE_REACHED] = SN_EV_QP,
	[IBV_EVENT_SRQ_ERR] = SN_EV_SRQ,
	[IBV_EVENT_SRQ_LIMIT_REACHED] = SN_EV_SRQ,
};

static enum sn_ev_elem sn_ev_elem_of(enum ibv_event_type type)
{
	if ((unsigned)type < sizeof(sn_ev_elems))
		return (enum sn_ev_elem)sn_ev_elems[type];
	return SN_EV_PORT;
}

/* the element of a queued event, if it still exists (sn_g.lock held) */
static bool sn_ev_element(struct ibv_async_event *event, uint64_t handle)
{
	struct sn_cq *cq;
	struct sn_qp *qp;
	struct sn_srq *s;

	switch (sn_ev_elem_of(event->event_type)) {
	case SN_EV_CQ:
		cq = sn_cq_live(handle);
		if (cq)
			event->element.cq = ibv_cq_ex_to_cq(&cq->cq);
		return cq;
	case SN_EV_QP:
		for (qp = sn_g.qps; qp; qp = qp->next_live)
			if ((uint64_t)(uintptr_t)qp == handle) {
				event->element.qp = &qp->qpx.qp_base;
				return true;
			}
		return false;
	case SN_EV_SRQ:
		for (s = sn_g.srqs; s; s = s->next_live)
			if ((uint64_t)(uintptr_t)s == handle) {
				event->element.srq = &s->srq;
				return true;
			}
		return false;
	default:
		event->element.port_num = (int)handle;
		return true;
	}
}

SN_EXPORT int ibv_get_async_event(struct ibv_context *context,
				  struct ibv_async_event *event)
{
	for (;;) {
		struct sn_async_rec r;
		ssize_t n = read(context->async_fd, &r, sizeof(r));
		bool found;

		if (n != sizeof(r))
			return -1;
		event->event_type = (enum ibv_event_type)r.type;
		pthread_mutex_lock(&sn_g.lock);
		found = sn_ev_element(event, r.element);
		pthread_mutex_unlock(&sn_g.lock);
		if (found)
			return 0;
	}
}

static void sn_ev_ack(pthread_mutex_t *mutex, pthread_cond_t *cond, uint32_t *completed)
{
	pthread_mutex_lock(mutex);
	(*completed)++;
	pthread_cond_signal(cond);
	pthread_mutex_unlock(mutex);
}

SN_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	struct ibv_cq *cq = event->element.cq;
	struct ibv_qp *qp = event->element.qp;
	struct ibv_srq *srq = event->element.srq;

	switch (sn_ev_elem_of(event->event_type)) {
	case SN_EV_CQ:
		sn_ev_ack(&cq->mutex, &cq->cond, &cq->async_events_completed);
		break;
	case SN_EV_QP:
		sn_ev_ack(&qp->mutex, &qp->cond, &qp->events_completed);
		break;
	case SN_EV_SRQ:
		sn_ev_ack(&srq->mutex, &srq->cond, &srq->events_completed);
		break;
	default:
		break;
	}
}

/* ---------------- the core verbs, exported ---------------- */

SN_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	return sn_create_comp_channel(context);
}

SN_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	return sn_destroy_comp_channel(channel);
}

#undef ibv_reg_mr
#undef ibv_reg_mr_iova
SN_EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
	return sn_query_device(context, attr);
}

SN_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	return sn_alloc_pd(context);
}

SN_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	return sn_dealloc_pd(pd);
}

SN_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
					  uint64_t iova, unsigned int access)
{
	return sn_reg_mr_iova2(pd, addr, length, iova, access);
}

SN_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
				    int access)
{
	return sn_reg_mr(pd, addr, length, access);
}

SN_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
					 uint64_t iova, int access)
{
	return sn_reg_mr_iova(pd, addr, length, iova, access);
}

SN_EXPORT int ibv_dereg_mr(struct ibv_mr *ibmr)
{
	return sn_dereg_mr(ibmr);
}

SN_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
			   size_t length, int access)
{
	return sn_rereg_mr(mr, flags, pd, addr, length, access);
}

SN_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe,
				       void *cq_context, struct ibv_comp_channel *channel,
				       int comp_vector)
{
	return sn_create_cq(context, cqe, cq_context, channel, comp_vector);
}

SN_EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	return sn_resize_cq(cq, cqe);
}

SN_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	return sn_destroy_cq(ibcq);
}

SN_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd,
					 struct ibv_srq_init_attr *init)
{
	return sn_create_srq(pd, init);
}

SN_EXPORT int ibv_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask)
{
	return sn_modify_srq(ibsrq, attr, mask);
}

SN_EXPORT int ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	return sn_query_srq(ibsrq, attr);
}

SN_EXPORT int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
	return sn_destroy_srq(ibsrq);
}

SN_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *init)
{
	return sn_create_qp(pd, init);
}

SN_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *ibqp)
{
	return sn_qp_to_qp_ex(ibqp);
}

SN_EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask)
{
	return sn_modify_qp(ibqp, attr, mask);
}

SN_EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask,
			   struct ibv_qp_init_attr *init)
{
	return sn_query_qp(ibqp, attr, mask, init);
}

SN_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
	return sn_destroy_qp(ibqp);
}

SN_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	return sn_create_ah(pd, attr);
}

SN_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	return sn_destroy_ah(ah);
}
