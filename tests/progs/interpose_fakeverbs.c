/* interpose_fakeverbs.c - a tiny stand-in libibverbs.so.1 for the recorder's own
 * tests and benchmark: one fake device whose data path does almost nothing, so
 * that the cost and the behaviour of librbtrace.so show on their own.
 *
 * Semantics (just enough to be checkable): every posted send WR that is signaled
 * (or on a sq_sig_all QP) puts one successful completion on the QP's send CQ;
 * posted receives are counted and never complete. A CQ created with cqe >=
 * 1000000 is a benchmark CQ: every poll returns min(num_entries, cqe - 1000000)
 * completions without any state. Calls fail like a real provider would where the
 * tests need failures: ibv_reg_mr with length 0 and ibv_modify_qp with an empty
 * mask return EINVAL. QPs made by ibv_create_qp_ex with send_ops_flags support
 * ibv_wr_start/wr_send/wr_set_sge/wr_complete, and every move to RTS installs
 * another set of those pointers (as mlx5 does). FAKEVERBS_SZ=N makes the
 * verbs_context report size N; FAKEVERBS_STALL=FILE holds every ibv_post_send while
 * FILE exists (one byte appended to FILE.held per call held). Never use it for
 * anything but tests.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#undef ibv_reg_mr
#undef ibv_query_port
#undef ibv_get_device_list

#define EXPORT __attribute__((visibility("default")))

struct fake_cq {
	struct ibv_cq cq;
	int bench;	/* benchmark CQ: stateless */
	unsigned fixed; /* benchmark CQ: completions per poll */
	pthread_spinlock_t lock;
	uint64_t *ring;
	unsigned cap, head, tail;
	uint32_t qpn;
};

struct fake_qp {
	struct ibv_qp_ex qpx;
	int sig_all;
	uint64_t recvs;
	int ex;		   /* made by create_qp_ex with the ibv_wr_* API */
	unsigned n;	   /* WRs of the open wr_start session */
	uint64_t ids[64];  /* their wr_ids (signaled ones) */
	unsigned rewrites; /* times modify_qp reinstalled the wr_* ops */
};

static int push_completion(struct fake_cq *cq, uint64_t wr_id, uint32_t qpn);

static struct ibv_device fake_dev = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = "fake0",
	.dev_name = "uverbs0",
	.dev_path = "/nonexistent",
	.ibdev_path = "/nonexistent",
};
static struct ibv_device *fake_list[2] = { &fake_dev, NULL };
static _Atomic uint32_t next_qpn = 100;

/* FAKEVERBS_STALL=FILE: while FILE exists, ibv_post_send does not return (a call
 * that stays under way, for the recorder's end-of-trace accounting). Each call
 * held says so with a byte in FILE.held, so that a test can wait until every
 * thread is held (however long the machine takes) before it ends the process. */
static const char *fake_stall;

static void fake_hold(void)
{
	char held[PATH_MAX];

	if (!fake_stall || access(fake_stall, F_OK))
		return;
	snprintf(held, sizeof(held), "%s.held", fake_stall);
	int fd = open(held, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd >= 0) {
		ssize_t w = write(fd, "h", 1);
		(void)w;
		close(fd);
	}
	while (access(fake_stall, F_OK) == 0)
		usleep(10000);
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
			  struct ibv_send_wr **bad)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	struct fake_cq *cq = (struct fake_cq *)qp->send_cq;

	if (cq->bench)
		return 0;
	fake_hold();
	pthread_spin_lock(&cq->lock);
	for (; wr; wr = wr->next) {
		if (wr->num_sge < 0 || wr->num_sge > 16) {
			*bad = wr;
			pthread_spin_unlock(&cq->lock);
			return EINVAL;
		}
		if (!q->sig_all && !(wr->send_flags & IBV_SEND_SIGNALED))
			continue;
		if (cq->head - cq->tail >= cq->cap) {
			*bad = wr;
			pthread_spin_unlock(&cq->lock);
			return ENOMEM;
		}
		cq->ring[cq->head++ % cq->cap] = wr->wr_id;
	}
	cq->qpn = qp->qp_num;
	pthread_spin_unlock(&cq->lock);
	return 0;
}

static int push_completion(struct fake_cq *cq, uint64_t wr_id, uint32_t qpn)
{
	int ret = 0;

	if (cq->bench)
		return 0;
	pthread_spin_lock(&cq->lock);
	if (cq->head - cq->tail >= cq->cap)
		ret = ENOMEM;
	else
		cq->ring[cq->head++ % cq->cap] = wr_id;
	cq->qpn = qpn;
	pthread_spin_unlock(&cq->lock);
	return ret;
}

/* The ibv_wr_* API, in two sets of ops: modify_qp swaps them, as mlx5 does
 * when a QP moves to RTS, so that a tracer that wrapped them at create time
 * loses them unless it re-wraps. */
static void fake_wr_start(struct ibv_qp_ex *q)
{
	((struct fake_qp *)q)->n = 0;
}

static void fake_wr_send(struct ibv_qp_ex *q)
{
	struct fake_qp *f = (struct fake_qp *)q;

	if (f->n < 64 && (f->sig_all || (q->wr_flags & IBV_SEND_SIGNALED)))
		f->ids[f->n++] = q->wr_id;
}

static void fake_wr_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr,
			    uint32_t len)
{
	(void)q;
	(void)lkey;
	(void)addr;
	(void)len;
}

static void fake_wr_set_inline_data(struct ibv_qp_ex *q, void *addr, size_t len)
{
	(void)q;
	(void)addr;
	(void)len;
}

static void fake_wr_set_inline_data_list(struct ibv_qp_ex *q, size_t n,
					 const struct ibv_data_buf *bufs)
{
	(void)q;
	(void)n;
	(void)bufs;
}

static int fake_wr_complete(struct ibv_qp_ex *q)
{
	struct fake_qp *f = (struct fake_qp *)q;
	int ret = 0;

	for (unsigned i = 0; i < f->n && !ret; i++)
		ret = push_completion((struct fake_cq *)q->qp_base.send_cq, f->ids[i],
				      q->qp_base.qp_num);
	f->n = 0;
	return ret;
}

static void fake_wr_abort(struct ibv_qp_ex *q)
{
	((struct fake_qp *)q)->n = 0;
}

/* The second set: same behaviour, different addresses. */
static void fake_wr_start2(struct ibv_qp_ex *q)
{
	fake_wr_start(q);
}

static void fake_wr_send2(struct ibv_qp_ex *q)
{
	fake_wr_send(q);
}

static void fake_wr_set_sge2(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr,
			     uint32_t len)
{
	fake_wr_set_sge(q, lkey, addr, len);
}

static int fake_wr_complete2(struct ibv_qp_ex *q)
{
	return fake_wr_complete(q);
}

static void fake_install_wr_ops(struct fake_qp *f)
{
	int second = f->rewrites++ & 1;

	f->qpx.wr_start = second ? fake_wr_start2 : fake_wr_start;
	f->qpx.wr_send = second ? fake_wr_send2 : fake_wr_send;
	f->qpx.wr_set_sge = second ? fake_wr_set_sge2 : fake_wr_set_sge;
	f->qpx.wr_complete = second ? fake_wr_complete2 : fake_wr_complete;
	f->qpx.wr_abort = fake_wr_abort;
	f->qpx.wr_set_inline_data = fake_wr_set_inline_data;
	f->qpx.wr_set_inline_data_list = fake_wr_set_inline_data_list;
}

static struct ibv_qp *fake_create_qp_ex(struct ibv_context *ctx,
					struct ibv_qp_init_attr_ex *a)
{
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp *qp;

	(void)ctx;
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD)) {
		errno = EINVAL;
		return NULL;
	}
	ia.send_cq = a->send_cq;
	ia.recv_cq = a->recv_cq;
	ia.srq = a->srq;
	ia.qp_type = a->qp_type;
	ia.sq_sig_all = a->sq_sig_all;
	ia.cap = a->cap;
	qp = ibv_create_qp(a->pd, &ia);
	if (qp && (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) {
		struct fake_qp *f = (struct fake_qp *)qp;
		f->ex = 1;
		fake_install_wr_ops(f);
	}
	a->cap = ia.cap;
	return qp;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad)
{
	struct fake_qp *q = (struct fake_qp *)qp;

	(void)bad;
	for (; wr; wr = wr->next)
		q->recvs++;
	return 0;
}

static int fake_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct fake_cq *cq = (struct fake_cq *)ibcq;
	int k = 0;

	if (cq->bench) {
		k = n < (int)cq->fixed ? n : (int)cq->fixed;
		/* Every field written, as a provider does (the fields that do not
		 * apply to an RC send completion are zero), so the recorder copies
		 * what a real poll returns rather than the program's stale stack. */
		for (int i = 0; i < k; i++)
			wc[i] = (struct ibv_wc){ .wr_id = (uint64_t)i,
						 .status = IBV_WC_SUCCESS,
						 .opcode = IBV_WC_SEND,
						 .byte_len = 64,
						 .qp_num = cq->qpn };
		return k;
	}
	pthread_spin_lock(&cq->lock);
	while (k < n && cq->tail != cq->head) {
		memset(&wc[k], 0, sizeof(wc[k]));
		wc[k].wr_id = cq->ring[cq->tail++ % cq->cap];
		wc[k].status = IBV_WC_SUCCESS;
		wc[k].opcode = IBV_WC_SEND;
		wc[k].qp_num = cq->qpn;
		k++;
	}
	pthread_spin_unlock(&cq->lock);
	return k;
}

static int fake_req_notify(struct ibv_cq *cq, int solicited)
{
	(void)cq;
	(void)solicited;
	return 0;
}

static int fake_query_port_ex(struct ibv_context *ctx, uint8_t port,
			      struct ibv_port_attr *a, size_t len)
{
	(void)ctx;
	if (port != 1)
		return EINVAL;
	memset(a, 0, len);
	a->state = IBV_PORT_ACTIVE;
	a->max_mtu = a->active_mtu = IBV_MTU_4096;
	a->lid = 1;
	a->gid_tbl_len = 1;
	a->link_layer = IBV_LINK_LAYER_INFINIBAND;
	a->phys_state = 5;
	return 0;
}

static int fake_query_device_ex(struct ibv_context *ctx,
				const struct ibv_query_device_ex_input *in,
				struct ibv_device_attr_ex *a, size_t sz)
{
	(void)ctx;
	(void)in;
	memset(a, 0, sz);
	strcpy(a->orig_attr.fw_ver, "0.0.1");
	a->orig_attr.vendor_id = 0xfa4e;
	a->orig_attr.max_qp = 1 << 16;
	a->orig_attr.max_qp_wr = 1 << 16;
	a->orig_attr.max_sge = 16;
	a->orig_attr.max_cqe = 1 << 22;
	a->orig_attr.phys_port_cnt = 1;
	return 0;
}

EXPORT struct ibv_device **ibv_get_device_list(int *n)
{
	if (n)
		*n = 1;
	return fake_list;
}

EXPORT void ibv_free_device_list(struct ibv_device **l)
{
	(void)l;
}

EXPORT const char *ibv_get_device_name(struct ibv_device *d)
{
	return d->name;
}

EXPORT __be64 ibv_get_device_guid(struct ibv_device *d)
{
	(void)d;
	return htobe64(0xfa4e000000000001ull);
}

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *d)
{
	struct verbs_context *v = calloc(1, sizeof(*v));

	if (!v)
		return NULL;
	v->sz = sizeof(*v);
	v->context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	v->context.device = d;
	v->context.num_comp_vectors = 1;
	v->context.async_fd = -1;
	v->context.cmd_fd = -1;
	v->context.ops.post_send = fake_post_send;
	v->context.ops.post_recv = fake_post_recv;
	v->context.ops.poll_cq = fake_poll_cq;
	v->context.ops.req_notify_cq = fake_req_notify;
	v->query_port = fake_query_port_ex;
	v->query_device_ex = fake_query_device_ex;
	v->create_qp_ex = fake_create_qp_ex;
	/* FAKEVERBS_SZ: pretend to be a provider with another verbs_context size. */
	fake_stall = getenv("FAKEVERBS_STALL");
	if (getenv("FAKEVERBS_SZ"))
		v->sz = strtoul(getenv("FAKEVERBS_SZ"), NULL, 0);
	return &v->context;
}

EXPORT int ibv_close_device(struct ibv_context *ctx)
{
	free(verbs_get_ctx(ctx));
	return 0;
}

EXPORT int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
	struct ibv_device_attr_ex ax;

	fake_query_device_ex(ctx, NULL, &ax, sizeof(ax));
	*a = ax.orig_attr;
	return 0;
}

EXPORT int ibv_query_port(struct ibv_context *ctx, uint8_t port,
			  struct _compat_ibv_port_attr *a)
{
	/* The compat struct is struct ibv_port_attr up to link_layer. */
	struct ibv_port_attr full;
	int ret = fake_query_port_ex(ctx, port, &full, sizeof(full));

	memcpy(a, &full, offsetof(struct ibv_port_attr, link_layer) + 1);
	return ret;
}

EXPORT int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index,
			 union ibv_gid *gid)
{
	(void)ctx;
	(void)port;
	(void)index;
	memset(gid, 0, sizeof(*gid));
	gid->raw[15] = 1;
	return 0;
}

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));

	if (pd)
		pd->context = ctx;
	return pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	free(pd);
	return 0;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	static _Atomic uint32_t key = 1000;
	struct ibv_mr *mr;

	(void)access;
	if (!len) {
		errno = EINVAL;
		return NULL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = len;
	mr->lkey = mr->rkey = key++;
	return mr;
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len,
				       uint64_t iova, unsigned int access)
{
	(void)iova;
	return ibv_reg_mr(pd, addr, len, (int)access);
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	free(mr);
	return 0;
}

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct ibv_comp_channel *ch = calloc(1, sizeof(*ch));

	if (ch) {
		ch->context = ctx;
		ch->fd = -1;
	}
	return ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	free(ch);
	return 0;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				    struct ibv_comp_channel *ch, int vec)
{
	struct fake_cq *cq = calloc(1, sizeof(*cq));

	(void)vec;
	if (!cq || cqe <= 0) {
		free(cq);
		errno = EINVAL;
		return NULL;
	}
	cq->cq.context = ctx;
	cq->cq.channel = ch;
	cq->cq.cq_context = cq_context;
	if (cqe >= 1000000) {
		cq->bench = 1;
		cq->fixed = cqe - 1000000;
		cq->cq.cqe = cqe;
		return &cq->cq;
	}
	cq->cap = cqe;
	cq->ring = calloc(cqe, sizeof(uint64_t));
	pthread_spin_init(&cq->lock, 0);
	cq->cq.cqe = cqe;
	return &cq->cq;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	struct fake_cq *cq = (struct fake_cq *)ibcq;

	free(cq->ring);
	free(cq);
	return 0;
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	(void)cq;
	(void)n;
}

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	struct fake_qp *q = calloc(1, sizeof(*q));

	if (!q)
		return NULL;
	q->qpx.qp_base.context = pd->context;
	q->qpx.qp_base.pd = pd;
	q->qpx.qp_base.send_cq = a->send_cq;
	q->qpx.qp_base.recv_cq = a->recv_cq;
	q->qpx.qp_base.srq = a->srq;
	q->qpx.qp_base.qp_type = a->qp_type;
	q->qpx.qp_base.qp_num = next_qpn++;
	q->qpx.qp_base.state = IBV_QPS_RESET;
	q->sig_all = a->sq_sig_all;
	a->cap.max_inline_data = 64;
	return &q->qpx.qp_base;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	if (!mask)
		return EINVAL;
	if (mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RTS &&
	    ((struct fake_qp *)qp)->ex)
		fake_install_wr_ops((struct fake_qp *)qp);
	return 0;
}

EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	return ((struct fake_qp *)qp)->ex ? (struct ibv_qp_ex *)qp : NULL;
}

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
			struct ibv_qp_init_attr *init)
{
	(void)mask;
	memset(attr, 0, sizeof(*attr));
	memset(init, 0, sizeof(*init));
	attr->qp_state = qp->state;
	attr->cap.max_inline_data = 64;
	return 0;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	free(qp);
	return 0;
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx)
{
	(void)ch;
	(void)cq;
	(void)ctx;
	errno = EAGAIN;
	return -1;
}

EXPORT int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	(void)ctx;
	(void)ev;
	errno = EAGAIN;
	return -1;
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *ev)
{
	(void)ev;
}

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status s)
{
	return s == IBV_WC_SUCCESS ? "success" : "error";
}
