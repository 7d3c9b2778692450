/*
 * softnic core verbs: device and port attributes, PDs, MRs, memory windows,
 * CQs, SRQs, XRC domains and AHs (QPs in softnic_qp.c). Shared by both
 * front ends (the drop-in libibverbs and the rdma-core provider), which
 * reach these as sn_* and never the other way round. Control path only: it
 * may lock, allocate and make syscalls, but it must never leave a shared
 * object half-built where a peer could see it, and must fail with the errno
 * a hardware provider gives.
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

uint32_t sn_next_id(void)
{
	uint32_t id;

	pthread_mutex_lock(&sn_g.lock);
	id = ++sn_g.next_obj;
	pthread_mutex_unlock(&sn_g.lock);
	return id;
}

uint32_t sn_pow2(uint32_t v)
{
	uint32_t r = 1;

	while (r < v)
		r <<= 1;
	return r;
}

/* A FIFO of the fabric for events ("kind" names it), open for reading. */
int sn_mkfifo(char *name, size_t n, const char *kind)
{
	char p[512];
	int fd;

	snprintf(name, n, "%s-%s-%u", kind, sn_g.procid, sn_next_id());
	sn_path(p, sizeof(p), name);
	unlink(p);
	if (mkfifo(p, 0600) < 0)
		return -1;
	/* O_RDWR: we are always a writer too, so reads block instead of
	 * seeing EOF, and peers' O_NONBLOCK opens never fail with ENXIO */
	fd = open(p, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		unlink(p);
	return fd;
}

/* ---------------- queries ---------------- */

static void sn_fill_dev_attr(struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "1.0.0");
	a->node_guid = htobe64(sn_g.guid);
	a->sys_image_guid = htobe64(sn_g.guid);
	a->max_mr_size = 1ull << 40;
	a->page_size_cap = 0xfffff000;
	a->vendor_id = SN_VENDOR_ID;
	a->vendor_part_id = SN_VENDOR_PART;
	a->hw_ver = 1;
	a->max_qp = 65536;
	a->max_qp_wr = SN_MAX_QP_WR;
	/* What softnic implements, so that programs (and rbtrace replay) that
	 * check a capability before using it find it. */
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT |
			      IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_SHUTDOWN_PORT |
			      IBV_DEVICE_XRC | IBV_DEVICE_MEM_WINDOW |
			      IBV_DEVICE_MEM_WINDOW_TYPE_2B;
	a->max_sge = SN_MAX_SGE;
	a->max_sge_rd = SN_MAX_SGE;
	a->max_cq = 65536;
	a->max_cqe = SN_MAX_CQE;
	a->max_mr = SN_MAX_MR;
	a->max_mw = SN_MAX_MW;
	a->max_pd = 65536;
	a->max_qp_rd_atom = SN_MAX_RD_ATOM;
	a->max_res_rd_atom = SN_MAX_RD_ATOM * 65536;
	a->max_qp_init_rd_atom = SN_MAX_RD_ATOM;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_ah = 65536;
	a->max_mcast_grp = 65536; /* files of the fabric: no real bound */
	a->max_mcast_qp_attach = SN_MC_QPS;
	a->max_total_mcast_qp_attach = SN_MC_QPS * 65536;
	a->max_srq = 65536;
	a->max_srq_wr = SN_MAX_QP_WR;
	a->max_srq_sge = SN_MAX_SGE;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 15;
	a->phys_port_cnt = 1;
}

int sn_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
	sn_fill_dev_attr(attr);
	return 0;
}

int sn_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
		       struct ibv_device_attr_ex *attr, size_t len)
{
	struct ibv_device_attr_ex a;

	if (in && in->comp_mask)
		return EINVAL;
	if (len < sizeof(a.orig_attr))
		return EINVAL;
	memset(&a, 0, sizeof(a));
	sn_fill_dev_attr(&a.orig_attr);
	a.completion_timestamp_mask = UINT64_MAX;
	/* kHz: one tick per nanosecond (mlx5 quirk: its 156.25 MHz) */
	a.hca_core_clock = sn_g.quirk_mlx5 ? SN_MLX5_CLOCK_KHZ : 1000000;
	a.cq_mod_caps.max_cq_count = SN_CQ_MOD_MAX_COUNT;
	a.cq_mod_caps.max_cq_period = SN_CQ_MOD_MAX_PERIOD_US;
	a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
	a.phys_port_cnt_ex = 1;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

int sn_query_port_full(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a,
		       size_t len)
{
	struct ibv_port_attr p;

	if (port != 1)
		return EINVAL;
	memset(&p, 0, sizeof(p));
	p.state = IBV_PORT_ACTIVE;
	p.max_mtu = IBV_MTU_4096;
	p.active_mtu = IBV_MTU_4096;
	p.gid_tbl_len = sn_g.ngid;
	p.port_cap_flags = sn_g.eth ? 0x04010000 : 0x02510868;
	p.max_msg_sz = 0x80000000;
	p.pkey_tbl_len = 1;
	p.lid = sn_g.lid;
	p.sm_lid = sn_g.lid;
	p.max_vl_num = 1;
	p.subnet_timeout = 18;
	p.active_width = 2;  /* 4x */
	p.active_speed = 32; /* EDR */
	p.phys_state = 5;    /* LinkUp */
	p.link_layer = sn_g.eth ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
	memcpy(a, &p, len < sizeof(p) ? len : sizeof(p));
	return 0;
}

int sn_query_rt_values(struct ibv_context *c, struct ibv_values_ex *v)
{
	uint32_t want = v->comp_mask;

	v->comp_mask = 0;
	if (want & IBV_VALUES_MASK_RAW_CLOCK) {
		/* as mlx5 reports it: raw ticks in tv_nsec */
		v->raw_clock.tv_sec = 0;
		v->raw_clock.tv_nsec = (long)sn_nic_ticks(sn_now_ns());
		v->comp_mask |= IBV_VALUES_MASK_RAW_CLOCK;
	}
	return 0;
}

/* ---------------- PD / MR ---------------- */

struct ibv_pd *sn_alloc_pd(struct ibv_context *context)
{
	struct sn_pd *pd = sn_zalloc(sizeof(*pd));

	if (!pd)
		return NULL;
	pd->pd.context = context;
	pd->id = sn_next_id();
	pd->pd.handle = pd->id;
	return &pd->pd;
}

/* A parent domain: a PD for every verb (its protection domain's keys and
 * checks) whose allocators serve its QPs' process-local buffers. softnic
 * has no thread domains (no alloc_td), so td must be NULL. */
struct ibv_pd *sn_alloc_parent_domain(struct ibv_context *c,
				      struct ibv_parent_domain_init_attr *a)
{
	struct sn_pd *prot, *pd;

	if (!a || !a->pd || a->pd->context != c || a->td ||
	    (a->comp_mask & ~(uint32_t)(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
					IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)) ||
	    ((a->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) &&
	     (!a->alloc || !a->free))) {
		errno = EINVAL;
		return NULL;
	}
	prot = (struct sn_pd *)a->pd;
	if (prot->parent) {
		errno = EINVAL; /* a parent of a parent */
		return NULL;
	}
	pd = sn_zalloc(sizeof(*pd));
	if (!pd)
		return NULL;
	pd->pd.context = c;
	pd->pd.handle = prot->pd.handle;
	pd->id = prot->id;
	pd->parent = true;
	if (a->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) {
		pd->alloc = a->alloc;
		pd->free = a->free;
	}
	if (a->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)
		pd->pd_context = a->pd_context;
	return &pd->pd;
}

int sn_dealloc_pd(struct ibv_pd *pd)
{
	free(pd);
	return 0;
}

#define SN_ACCESS_KNOWN                                                              \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
	 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |     \
	 IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING)

struct ibv_mr *sn_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
			       uint64_t iova, unsigned int access)
{
	struct sn_mr *mr;
	int ret;

	access &= ~IBV_ACCESS_OPTIONAL_RANGE; /* best-effort bits: ignore */
	if ((access & ~SN_ACCESS_KNOWN) ||
	    ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	     !(access & IBV_ACCESS_LOCAL_WRITE)) ||
	    (!addr && length)) {
		errno = EINVAL;
		return NULL;
	}
	mr = sn_zalloc(sizeof(*mr));
	if (!mr)
		return NULL;
	ret = sn_mr_register(mr, addr, length, iova, access, ((struct sn_pd *)pd)->id);
	if (ret) {
		free(mr);
		errno = -ret;
		return NULL;
	}
	mr->mr.context = pd->context;
	mr->mr.pd = pd;
	mr->mr.addr = addr;
	mr->mr.length = length;
	mr->mr.handle = mr->idx;
	mr->vmr_access = (int)access;
	return &mr->mr;
}

#undef ibv_reg_mr_iova
struct ibv_mr *sn_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return sn_reg_mr_iova2(pd, addr, length, (uint64_t)(uintptr_t)addr,
			       (unsigned)access);
}

struct ibv_mr *sn_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
			      int access)
{
	return sn_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

int sn_dereg_mr(struct ibv_mr *ibmr)
{
	struct sn_mr *mr = (struct sn_mr *)ibmr;
	int ret = sn_mr_unregister(mr);

	if (ret) {
		errno = -ret;
		return -ret; /* a window is still bound to it */
	}
	free(mr);
	return 0;
}

/* ---------------- memory windows ---------------- */

/* Reached through ctx->ops (ibv_alloc_mw is inline in verbs.h). The window
 * starts unbound; its rkey's index names a slot of our shared MR table, so
 * requesters in other processes find it as they find MRs. */
struct ibv_mw *sn_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct sn_mw *mw;
	int ret;

	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
		errno = EINVAL;
		return NULL;
	}
	mw = sn_zalloc(sizeof(*mw));
	if (!mw)
		return NULL;
	ret = sn_mw_alloc(mw, (uint32_t)type, ((struct sn_pd *)pd)->id);
	if (ret) {
		free(mw);
		errno = -ret;
		return NULL;
	}
	mw->mw.context = pd->context;
	mw->mw.pd = pd;
	mw->mw.type = type;
	mw->mw.handle = mw->slot;
	return &mw->mw;
}

int sn_dealloc_mw(struct ibv_mw *ibmw)
{
	struct sn_mw *mw = (struct sn_mw *)ibmw;

	sn_mw_free(mw);
	free(mw);
	return 0;
}

/* Also the provider's rereg_mr (rdma-core checks the flags, then sets pd,
 * addr and length itself on success; the drop-in relies on us for that). */
int sn_rereg_mr(struct ibv_mr *ibmr, int flags, struct ibv_pd *pd, void *addr,
		size_t length, int access)
{
	struct sn_mr *mr = (struct sn_mr *)ibmr;
	struct ibv_pd *npd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : ibmr->pd;
	bool tr = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
	void *naddr = tr ? addr : ibmr->addr;
	size_t nlen = tr ? length : ibmr->length;
	unsigned int nacc = (flags & IBV_REREG_MR_CHANGE_ACCESS)
				    ? (unsigned)access
				    : (unsigned)mr->vmr_access;
	int ret;

	if ((flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) || !flags || !npd ||
	    npd->context != ibmr->context || (tr && (!addr || !length)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	nacc &= ~IBV_ACCESS_OPTIONAL_RANGE;
	if ((nacc & ~SN_ACCESS_KNOWN) ||
	    ((nacc & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	     !(nacc & IBV_ACCESS_LOCAL_WRITE))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	ret = sn_mr_reregister(mr, naddr, nlen, (uint64_t)(uintptr_t)naddr, nacc,
			       ((struct sn_pd *)npd)->id);
	if (ret) {
		errno = -ret;
		return IBV_REREG_MR_ERR_CMD;
	}
	ibmr->pd = npd;
	ibmr->addr = naddr;
	ibmr->length = nlen;
	mr->vmr_access = (int)nacc;
	return 0;
}
/* ---------------- completion channels ---------------- */

struct ibv_comp_channel *sn_create_comp_channel(struct ibv_context *context)
{
	struct sn_chan *ch = sn_zalloc(sizeof(*ch));

	if (!ch)
		return NULL;
	ch->ch.context = context;
	ch->ch.fd = sn_mkfifo(ch->path, sizeof(ch->path), "ch");
	if (ch->ch.fd < 0) {
		free(ch);
		errno = EIO;
		return NULL;
	}
	return &ch->ch;
}

int sn_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct sn_chan *ch = (struct sn_chan *)channel;
	struct sn_cq *cq;

	pthread_mutex_lock(&sn_g.lock);
	for (cq = sn_g.cqs; cq; cq = cq->next_live)
		if (cq->cq.channel == channel) {
			pthread_mutex_unlock(&sn_g.lock);
			return EBUSY;
		}
	pthread_mutex_unlock(&sn_g.lock);
	close(ch->ch.fd);
	sn_unlink(ch->path);
	free(ch);
	return 0;
}

static struct sn_cq *sn_cq_create(struct ibv_context *context, int cqe, void *cq_context,
				  struct ibv_comp_channel *channel, uint64_t wc_flags)
{
	struct sn_cq *cq;
	uint32_t ring;
	void *m;
	int ret;

	if (cqe < 1 || cqe > SN_MAX_CQE) {
		errno = EINVAL;
		return NULL;
	}
	cq = sn_zalloc(sizeof(*cq));
	if (!cq)
		return NULL;
	ring = sn_pow2((uint32_t)cqe + 1);
	snprintf(cq->name, sizeof(cq->name), "cq-%s-%u", sn_g.procid, sn_next_id());
	cq->shm_len = SN_CQ_RESERVE; /* the ring may grow (sn_cq_resize) */
	ret = sn_shm_create_reserve(
		cq->name, sizeof(struct sn_cq_shm) + ring * sizeof(struct sn_cqe),
		cq->shm_len, &m);
	if (ret) {
		free(cq);
		errno = -ret;
		return NULL;
	}
	cq->shm = m;
	cq->shm->ring = ring;
	cq->shm->cap = ring - 1;
	cq->shm->wall = (wc_flags & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
				     IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK))
				? 1
				: 0;
	cq->shm->cookie = (uint64_t)(uintptr_t)cq;
	cq->shm->owner = getpid();
	if (channel)
		snprintf(cq->shm->chan_path, sizeof(cq->shm->chan_path), "%s",
			 ((struct sn_chan *)channel)->path);
	snprintf(cq->shm->async_path, sizeof(cq->shm->async_path), "%s",
		 sn_ctx_of(context)->async_path);
	cq->chan_wfd = -1;
	cq->spin_budget = 1024;
	cq->wc_flags = wc_flags;
	cq->cq.context = context;
	cq->cq.channel = channel;
	cq->cq.cq_context = cq_context;
	cq->cq.cqe = (int)(ring - 1);
	cq->cq.handle = sn_next_id();
	pthread_mutex_init(&cq->cq.mutex, NULL);
	pthread_cond_init(&cq->cq.cond, NULL);
	sn_cq_ex_init(cq);
	pthread_mutex_lock(&sn_g.lock);
	cq->next_live = sn_g.cqs;
	sn_g.cqs = cq;
	pthread_mutex_unlock(&sn_g.lock);
	return cq;
}

struct ibv_cq *sn_create_cq(struct ibv_context *context, int cqe, void *cq_context,
			    struct ibv_comp_channel *channel, int comp_vector)
{
	struct sn_cq *cq;

	if (comp_vector < 0 || comp_vector >= context->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	cq = sn_cq_create(context, cqe, cq_context, channel, 0);
	return cq ? ibv_cq_ex_to_cq(&cq->cq) : NULL;
}

#define SN_WC_EX_OK                                                             \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | \
	 IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |      \
	 IBV_WC_EX_WITH_DLID_PATH_BITS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |  \
	 IBV_WC_EX_WITH_CVLAN | IBV_WC_EX_WITH_FLOW_TAG |                       \
	 IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)

struct ibv_cq_ex *sn_create_cq_ex(struct ibv_context *c, struct ibv_cq_init_attr_ex *a)
{
	struct sn_cq *cq;

	if (a->comp_vector >= (uint32_t)c->num_comp_vectors) {
		errno = EINVAL; /* as ibv_create_cq's */
		return NULL;
	}
	if ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) &&
	    (!a->parent_domain || a->parent_domain->context != c ||
	     !((struct sn_pd *)a->parent_domain)->parent)) {
		errno = EINVAL; /* only a parent domain may be named here */
		return NULL;
	}
	if ((a->wc_flags & ~(uint64_t)SN_WC_EX_OK) ||
	    (a->comp_mask &
	     ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	cq = sn_cq_create(c, (int)a->cqe, a->cq_context, a->channel, a->wc_flags);
	if (cq && (a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    (a->flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED))
		cq->single_threaded = true;
	return cq ? &cq->cq : NULL;
}

int sn_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct sn_cq *cq = sn_cq_of(ibcq);
	int ret;

	if (cqe < 1 || cqe > SN_MAX_CQE)
		return EINVAL;
	if (!cq->single_threaded)
		sn_spin_lock(&cq->poll_lock);
	ret = sn_cq_resize(cq, (uint32_t)cqe);
	if (!cq->single_threaded)
		sn_spin_unlock(&cq->poll_lock);
	return ret;
}

/* Events this CQ raised that nobody read: rdma-core's ibv_get_cq_event
 * (provider mode) would hand out the dead CQ, as the kernel never does (it
 * drops them with the CQ). Read the channel through a descriptor of our own
 * that never blocks, and put the other CQs' events back in their order. */
static void sn_chan_forget(struct sn_cq *cq)
{
	struct sn_chan *ch = (struct sn_chan *)cq->cq.channel;
	uint64_t rec[512], keep[512], me = (uint64_t)(uintptr_t)cq;
	char p[512];
	size_t nk = 0;
	ssize_t n;
	int fd;

	if (!ch || !ch->path[0])
		return;
	sn_path(p, sizeof(p), ch->path);
	fd = open(p, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, rec, sizeof(rec));
	for (ssize_t i = 0; n > 0 && i < n / (ssize_t)sizeof(rec[0]); i++)
		if (rec[i] != me)
			keep[nk++] = rec[i];
	if (nk && write(fd, keep, nk * sizeof(keep[0])) < 0) {
		/* the FIFO took them a moment ago: cannot be full now */
	}
	close(fd);
}

int sn_destroy_cq(struct ibv_cq *ibcq)
{
	struct sn_cq *cq = sn_cq_of(ibcq), **pp;
	struct sn_qp *qp;

	pthread_mutex_lock(&sn_g.lock);
	for (qp = sn_g.qps; qp; qp = qp->next_live)
		if (qp->scq == cq || qp->rcq == cq) {
			pthread_mutex_unlock(&sn_g.lock);
			return EBUSY;
		}
	for (pp = &sn_g.cqs; *pp; pp = &(*pp)->next_live)
		if (*pp == cq) {
			*pp = cq->next_live;
			break;
		}
	pthread_mutex_unlock(&sn_g.lock);
	sn_dnotes_forget(cq->shm);
	sn_chan_forget(cq);
	if (cq->chan_wfd >= 0)
		close(cq->chan_wfd);
	sn_unlink(cq->name);
	munmap(cq->shm, cq->shm_len);
	free(cq);
	return 0;
}
/* ---------------- SRQ ---------------- */

static struct ibv_srq *sn_srq_create(struct ibv_pd *pd, struct ibv_srq_attr *attr,
				     void *srq_context, struct sn_xrcd *xrcd,
				     struct sn_cq *xcq)
{
	struct sn_srq *srq;
	uint32_t ring, stride, sge;
	void *m;
	int ret;

	if (!attr->max_wr || attr->max_wr > SN_MAX_QP_WR || attr->max_sge > SN_MAX_SGE ||
	    attr->srq_limit > attr->max_wr) {
		errno = EINVAL;
		return NULL;
	}
	srq = sn_zalloc(sizeof(*srq));
	if (!srq)
		return NULL;
	sge = attr->max_sge ? attr->max_sge : 1;
	ring = sn_pow2(attr->max_wr);
	stride = (uint32_t)(sizeof(struct sn_rwqe) + sge * sizeof(struct ibv_sge));
	{
		uint32_t srqn = atomic_fetch_add(&sn_g.fab->next_srqn, 1) + 1;

		/* XRC SRQs are found by number (xsrq-<srqn>): built hidden,
		 * published by rename below */
		if (xrcd)
			snprintf(srq->name, sizeof(srq->name), ".xsrq-%u", srqn);
		else
			snprintf(srq->name, sizeof(srq->name), "srq-%s-%u", sn_g.procid,
				 sn_next_id());
		srq->shm_len = sizeof(struct sn_srq_shm) + (size_t)ring * stride;
		ret = sn_shm_create(srq->name, srq->shm_len, &m);
		if (ret) {
			free(srq);
			errno = -ret;
			return NULL;
		}
		srq->shm = m;
		srq->shm->srqn = srqn;
	}
	srq->shm->pd_id = ((struct sn_pd *)pd)->id;
	srq->shm->pid = getpid();
	snprintf(srq->shm->procid, sizeof(srq->shm->procid), "%s", sn_g.procid);
	snprintf(srq->shm->async_path, sizeof(srq->shm->async_path), "%s",
		 sn_ctx_of(pd->context)->async_path);
	srq->shm->cookie = (uint64_t)(uintptr_t)srq;
	srq->shm->rq.ring = ring;
	srq->shm->rq.max_wr = attr->max_wr;
	srq->shm->rq.max_sge = sge;
	srq->shm->rq.stride = stride;
	atomic_store(&srq->shm->rq.limit, attr->srq_limit);
	if (xrcd) {
		/* the header is whole before the rename makes it findable */
		srq->shm->xrcd_id = xrcd->id;
		snprintf(srq->shm->cq_name, sizeof(srq->shm->cq_name), "%s", xcq->name);
		if (sn_shm_publish(srq->name)) {
			munmap(m, srq->shm_len);
			free(srq);
			errno = EIO;
			return NULL;
		}
	}
	srq->pd_id = ((struct sn_pd *)pd)->id;
	srq->srq.context = pd->context;
	srq->srq.srq_context = srq_context;
	srq->srq.pd = pd;
	srq->srq.handle = sn_next_id();
	pthread_mutex_init(&srq->srq.mutex, NULL);
	pthread_cond_init(&srq->srq.cond, NULL);
	attr->max_sge = sge;
	pthread_mutex_lock(&sn_g.lock);
	srq->next_live = sn_g.srqs;
	sn_g.srqs = srq;
	pthread_mutex_unlock(&sn_g.lock);
	return &srq->srq;
}

struct ibv_srq *sn_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *init)
{
	return sn_srq_create(pd, &init->attr, init->srq_context, NULL, NULL);
}

struct ibv_srq *sn_create_srq_ex(struct ibv_context *c, struct ibv_srq_init_attr_ex *a)
{
	bool xrc = (a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type == IBV_SRQT_XRC;

	if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !a->pd ||
	    ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type != IBV_SRQT_BASIC &&
	     a->srq_type != IBV_SRQT_XRC)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (xrc && (!(a->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !a->xrcd ||
		    !(a->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !a->cq)) {
		errno = EINVAL;
		return NULL;
	}
	return sn_srq_create(a->pd, &a->attr, a->srq_context,
			     xrc ? (struct sn_xrcd *)a->xrcd : NULL,
			     xrc ? sn_cq_of(a->cq) : NULL);
}

int sn_get_srq_num(struct ibv_srq *srq, uint32_t *num)
{
	*num = ((struct sn_srq *)srq)->shm->srqn;
	return 0;
}

/* An XRC domain: processes that open it through the same file share it
 * (its id is the file's device and inode); without a file it is private. */
struct ibv_xrcd *sn_open_xrcd(struct ibv_context *c, struct ibv_xrcd_init_attr *a)
{
	struct sn_xrcd *x;
	struct stat st;

	if (!(a->comp_mask & IBV_XRCD_INIT_ATTR_FD) ||
	    !(a->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) ||
	    (a->oflags & ~(O_CREAT | O_EXCL))) {
		errno = EINVAL;
		return NULL;
	}
	x = sn_zalloc(sizeof(*x));
	if (!x)
		return NULL;
	if (a->fd >= 0) {
		if (fstat(a->fd, &st) < 0) {
			free(x);
			return NULL;
		}
		x->id = ((uint64_t)st.st_dev << 40) ^ (uint64_t)st.st_ino ^ 1;
	} else {
		x->id = ((uint64_t)getpid() << 32) | (sn_next_id() | 0x80000000u);
	}
	x->xrcd.context = c;
	return &x->xrcd;
}

int sn_close_xrcd(struct ibv_xrcd *x)
{
	free(x);
	return 0;
}

int sn_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask)
{
	struct sn_srq *srq = (struct sn_srq *)ibsrq;

	if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))
		return EINVAL;
	if (mask & IBV_SRQ_MAX_WR)
		return EINVAL; /* no resize, like most hardware */
	if (mask & IBV_SRQ_LIMIT) {
		if (attr->srq_limit > srq->shm->rq.max_wr)
			return EINVAL;
		atomic_store(&srq->shm->rq.limit, attr->srq_limit);
	}
	return 0;
}

int sn_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct sn_srq *srq = (struct sn_srq *)ibsrq;

	attr->max_wr = srq->shm->rq.max_wr;
	attr->max_sge = srq->shm->rq.max_sge;
	attr->srq_limit = atomic_load(&srq->shm->rq.limit);
	return 0;
}

int sn_destroy_srq(struct ibv_srq *ibsrq)
{
	struct sn_srq *srq = (struct sn_srq *)ibsrq, **pp;
	struct sn_qp *qp;

	pthread_mutex_lock(&sn_g.lock);
	for (qp = sn_g.qps; qp; qp = qp->next_live)
		if (qp->srq == srq) {
			pthread_mutex_unlock(&sn_g.lock);
			return EBUSY;
		}
	for (pp = &sn_g.srqs; *pp; pp = &(*pp)->next_live)
		if (*pp == srq) {
			*pp = srq->next_live;
			break;
		}
	pthread_mutex_unlock(&sn_g.lock);
	sn_unlink(srq->name);
	munmap(srq->shm, srq->shm_len);
	free(srq);
	return 0;
}

/* ---------------- AH ---------------- */

struct ibv_ah *sn_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct sn_ah *ah;

	if (sn_check_av(attr)) {
		errno = EINVAL;
		return NULL;
	}
	ah = sn_zalloc(sizeof(*ah));
	if (!ah)
		return NULL;
	ah->ah.context = pd->context;
	ah->ah.pd = pd;
	ah->ah.handle = sn_next_id();
	ah->attr = *attr;
	ah->path_bad = !sn_av_reaches(attr);
	return &ah->ah;
}

int sn_destroy_ah(struct ibv_ah *ah)
{
	free(ah);
	return 0;
}
