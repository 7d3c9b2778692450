/* replay_build.c - the replayed resources: opens the device, rebuilds the PDs,
 * MRs (page-aligned memory of the recorded sizes, filled with a pattern),
 * memory windows, completion channels, CQs, XRC domains, SRQs and QPs of each side, publishes
 * what they became in the directory, and tears them down after the run.
 *
 * Owns every ibv_alloc/create/reg/open and destroy of the replay. Must never
 * post or poll, and never create a resource before replay_check.c accepted
 * the side.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "replay/replay_int.h"

/* ---- device ------------------------------------------------------------------ */
int rp_open_device(struct rp_job *j, struct rp_side *s, struct ibv_context **ctxp)
{
	struct ibv_device **list;
	struct ibv_device *dev = NULL;
	const char *want = j->o->device;
	int n = 0;

	list = ibv_get_device_list(&n);
	if (!list || n == 0) {
		fprintf(j->log, "rbtrace replay: no RDMA device found (run over softnic: "
				"rbtrace replay --softnic ...)\n");
		if (list)
			ibv_free_device_list(list);
		return -ENODEV;
	}
	for (int i = 0; i < n; i++) {
		const char *nm = ibv_get_device_name(list[i]);

		if (want && nm && !strcmp(nm, want))
			dev = list[i];
		if (!want && s && s->devname[0] && nm && !strcmp(nm, s->devname))
			dev = list[i];
	}
	if (!dev && want) {
		fprintf(j->log, "rbtrace replay: --device %s: no such RDMA device\n",
			want);
		ibv_free_device_list(list);
		return -ENODEV;
	}
	if (!dev)
		dev = list[0];
	*ctxp = ibv_open_device(dev);
	ibv_free_device_list(list);
	if (!*ctxp) {
		fprintf(j->log, "rbtrace replay: cannot open RDMA device: %s\n",
			strerror(errno));
		return -errno ? -errno : -ENODEV;
	}
	return 0;
}

/* ---- building the resources ---------------------------------------------------- */
/* A create the device refused, in one line. */
static int rp_build_failed(struct rp_job *j, struct rp_side *s)
{
	int e = errno ? errno : EIO;

	return rp_fail(j, -e, "%s: creating resources failed: %s", s->path, strerror(e));
}

static int rp_build_pds(struct rp_job *j, struct rp_side *s)
{
	for (int i = 0; i < s->npd; i++) {
		s->pd[i] = ibv_alloc_pd(s->ctx);
		if (!s->pd[i])
			return rp_build_failed(j, s);
	}
	return 0;
}

/* Which MRs are registered by their step of the timeline: those the
 * recording registered after the start (the prefix), when this replayer has
 * no peer process (a peer must know every rkey before the run: then all are
 * registered up front and their registration steps skipped); successors of a
 * rereg always get theirs from the rereg step. */
static void rp_mr_lifetimes(struct rp_job *j, struct rp_side *s)
{
	int last = -1; /* the side's last post or poll */

	for (int i = 0; i < s->nstep; i++) {
		uint32_t t = s->step[i].type;

		if (t == RBT_EV_POST_SEND || t == RBT_EV_POST_RECV ||
		    t == RBT_EV_POST_SRQ_RECV || t == RBT_EV_POLL_CQ)
			last = i;
	}
	for (int i = 0; i < s->nmr; i++)
		s->mr[i].dynamic = s->mr[i].succ_of != 0;
	for (int i = 0; i < s->nstep; i++) {
		struct rp_step *st = &s->step[i];
		uint32_t t = st->type;

		/* (after the last post or poll: skipped, see rp_mr_tail) */
		if (t != RBT_EV_MR_REG || !st->mr || st->skipped)
			continue;
		if (i >= s->prefix && i < last && j->net_fd < 0)
			st->mr->dynamic = 1;
		else
			st->skipped = 1; /* registered before the run */
	}
}

/* Page-aligned memory of each recorded MR's size, registered with its recorded
 * access now or by its step (rp_mr_lifetimes). Up to RP_MR_FILLED bytes it is
 * filled with a recognisable pattern; a larger MR is anonymous memory mapped
 * without reserve, resident only where the replay (or the device) touches it. */
#define RP_MR_FILLED (1u << 20)

static uint8_t *rp_mr_memory(struct rp_mr *m, size_t len, uint64_t seed)
{
	size_t round = (len + 4095) & ~4095ul;
	void *p = NULL;

	if (len > RP_MR_FILLED) {
		p = mmap(NULL, round, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		m->map_len = round;
		return p;
	}
	if (posix_memalign(&p, 4096, round))
		return NULL;
	rp_pattern(p, len, seed);
	return p;
}

static int rp_build_mrs(struct rp_job *j, struct rp_side *s)
{
	rp_mr_lifetimes(j, s);
	for (int i = 0; i < s->nmr; i++) {
		struct rp_mr *m = &s->mr[i];
		size_t len = m->length ? m->length : 1;
		int acc = (int)m->access;

		m->npd = rp_pd_by_h(s, m->pd);
		if (!m->npd) {
			return rp_fail(j, -EINVAL, "%s: MR on an unknown PD", s->path);
		}
		if (!(m->buf = rp_mr_memory(m, len, (uint64_t)i)))
			return -ENOMEM;
		if (m->dynamic)
			continue;
		m->mr = ibv_reg_mr(m->npd, m->buf, len, acc);
		if (m->mr) {
			m->new_lkey = m->mr->lkey;
			m->new_rkey = m->mr->rkey;
		}
		if (!m->mr) {
			fprintf(j->log,
				"rbtrace replay: %s: registering an MR of %zu bytes "
				"(access 0x%x) failed: %s\n",
				s->path, len, acc, strerror(errno));
			return -errno ? -errno : -EIO;
		}
	}
	return 0;
}

/* Memory windows of the recorded types (after the MRs they bind). */
static int rp_build_mws(struct rp_job *j, struct rp_side *s)
{
	for (int i = 0; i < s->nmw; i++) {
		struct rp_mw *w = &s->mw[i];
		struct ibv_pd *pd = rp_pd_by_h(s, w->pd);

		w->mw = pd ? ibv_alloc_mw(pd, (enum ibv_mw_type)w->type) : NULL;
		if (w->mw)
			w->rkey0 = w->mw->rkey;
		if (!w->mw) {
			int e = errno ? errno : ENOTSUP;

			return rp_fail(j, -e,
				       "%s: the trace uses memory windows (type %u); the "
				       "device cannot allocate one: %s",
				       s->path, w->type, strerror(e));
		}
	}
	return 0;
}

/* Completion channels, then CQs on them (with room to stash completions an
 * event wait took off the CQ). */
static int rp_build_cqs(struct rp_job *j, struct rp_side *s)
{
	for (int i = 0; i < s->nch; i++) {
		s->ch[i] = ibv_create_comp_channel(s->ctx);
		if (!s->ch[i])
			return rp_build_failed(j, s);
	}
	for (int i = 0; i < s->ncq; i++) {
		struct rp_cq *c = &s->cq[i];
		struct ibv_comp_channel *ch = NULL;

		for (int k = 0; k < s->nch; k++)
			if (c->channel && s->ch_h[k] == c->channel)
				ch = s->ch[k];
		c->nch = ch;
		c->cq = ibv_create_cq(
			s->ctx, (int)(c->rec.cqe_asked ? c->rec.cqe_asked : c->rec.cqe),
			NULL, ch,
			(int)c->rec.comp_vector % (s->ctx->num_comp_vectors
							   ? s->ctx->num_comp_vectors
							   : 1));
		if (!c->cq)
			return rp_build_failed(j, s);
		if (ch) {
			c->stash_cap = (uint32_t)c->cq->cqe + 1;
			c->stash = calloc(c->stash_cap, sizeof(*c->stash));
			if (!c->stash)
				return -ENOMEM;
		}
	}
	return 0;
}

static int rp_build_xrcds(struct rp_job *j, struct rp_side *s)
{
	for (int i = 0; i < s->nxrcd; i++) {
		/* shared through a file, or private (fd -1): see struct rp_xrcd */
		struct ibv_xrcd_init_attr xa = {
			.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
			.fd = -1,
			.oflags = O_CREAT,
		};
		uint32_t hh = 2166136261u;

		if (s->xrcd[i].shared) {
			for (const char *c = s->host; *c; c++)
				hh = (hh ^ (uint8_t)*c) * 16777619u;
			snprintf(s->xrcd_path, sizeof(s->xrcd_path), "%s.%08x",
				 j->xrcd_prefix, hh);
			xa.fd = open(s->xrcd_path, O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
			if (xa.fd < 0) {
				int e = errno;

				fprintf(j->log,
					"rbtrace replay: %s: cannot create the XRC "
					"domain file %s: %s\n",
					s->path, s->xrcd_path, strerror(e));
				s->xrcd_path[0] = 0;
				return -e;
			}
		}
		s->xrcd[i].xrcd = ibv_open_xrcd(s->ctx, &xa);
		s->xrcd[i].fd = xa.fd;
		if (xa.fd >= 0) {
			int e = errno;

			close(xa.fd); /* the domain holds the file, not the fd */
			errno = e;
		}
		if (!s->xrcd[i].xrcd) {
			int e = errno ? errno : ENOTSUP;

			return rp_fail(j, -e,
				       "%s: the device cannot open an XRC domain: %s",
				       s->path, strerror(e));
		}
	}
	return 0;
}

static int rp_build_srqs(struct rp_job *j, struct rp_side *s)
{
	for (int i = 0; i < s->nsrq; i++) {
		struct rp_srq *r = &s->srq[i];
		struct ibv_srq_init_attr_ex a = {
			.attr = { .max_wr = (uint32_t)r->rec.max_wr,
				  .max_sge = (uint32_t)r->rec.max_sge,
				  .srq_limit = (uint32_t)r->rec.srq_limit },
		};
		struct ibv_pd *pd = rp_pd_by_h(s, r->pd);

		if (r->rec.srq_type != IBV_SRQT_XRC) {
			struct ibv_srq_init_attr b = { .attr = a.attr };

			r->srq = pd ? ibv_create_srq(pd, &b) : NULL;
			if (!r->srq)
				return rp_build_failed(j, s);
			continue;
		}
		a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
			      IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
		a.srq_type = IBV_SRQT_XRC;
		a.pd = pd;
		a.xrcd = s->xrcd[r->xrcdi - 1].xrcd;
		a.cq = s->cq[r->cqi - 1].cq;
		r->srq = pd ? ibv_create_srq_ex(s->ctx, &a) : NULL;
		if (!r->srq || ibv_get_srq_num(r->srq, &r->new_srqn)) {
			int e = errno ? errno : ENOTSUP;

			return rp_fail(
				j, -e,
				"%s: the device refused XRC SRQ %llu (%llu WRs): %s",
				s->path, (unsigned long long)r->rec.srqn,
				(unsigned long long)r->rec.max_wr, strerror(e));
		}
	}
	return 0;
}

/* Which QPs are created by their step: those created after the start (RC, UC)
 * when this replayer has no peer process (a peer needs every QP number before
 * the run). Destroys mid-run are steps likewise. A UD QP is created before the
 * run: its peers' sends name it by number (their remote QPNs are translated
 * before the run, rdma_cm's UD perftest included). */
void rp_qp_life_steps(struct rp_job *j, struct rp_side *s)
{
	/* streamed: the steps are those of a window; the first reading knew */
	for (int i = 0; s->sm && i < s->nqp; i++)
		if (s->qp[i].mid_run && j->net_fd < 0 &&
		    (s->qp[i].rec.qp_type == IBV_QPT_RC ||
		     s->qp[i].rec.qp_type == IBV_QPT_UC))
			s->qp[i].dynamic = 1;
	for (int i = 0; i < s->nstep; i++) {
		struct rp_step *st = &s->step[i];
		uint32_t t = st->type;
		uint64_t ty = st->qp ? st->qp->rec.qp_type : 0;

		if ((t != RBT_EV_QP_CREATE && t != RBT_EV_QP_DESTROY) || st->skipped)
			continue;
		if (j->net_fd >= 0 || i < s->prefix ||
		    (ty != IBV_QPT_RC && ty != IBV_QPT_UC))
			st->skipped = 1;
		else if (t == RBT_EV_QP_CREATE)
			st->qp->dynamic = 1;
	}
}

/* The recorded QP's creation attributes on the replay's CQs and SRQ. */
static struct ibv_qp_init_attr rp_qp_attr(const struct rp_side *s, const struct rp_qp *q)
{
	return (struct ibv_qp_init_attr){
		.send_cq = q->scq ? s->cq[q->scq - 1].cq : NULL,
		.recv_cq = q->rcq ? s->cq[q->rcq - 1].cq : NULL,
		.srq = q->srqi ? s->srq[q->srqi - 1].srq : NULL,
		.cap = { .max_send_wr = (uint32_t)q->rec.max_send_wr,
			 .max_recv_wr = (uint32_t)q->rec.max_recv_wr,
			 .max_send_sge = (uint32_t)q->rec.max_send_sge,
			 .max_recv_sge = (uint32_t)q->rec.max_recv_sge,
			 .max_inline_data = (uint32_t)q->rec.max_inline_data },
		.qp_type = (enum ibv_qp_type)q->rec.qp_type,
		.sq_sig_all = (int)q->rec.sq_sig_all,
	};
}

int rp_qp_create_now(struct rp_side *s, struct rp_qp *q)
{
	struct ibv_qp_init_attr a = rp_qp_attr(s, q);
	struct ibv_pd *pd = rp_pd_by_h(s, q->rec.pd);

	q->qp = pd ? ibv_create_qp(pd, &a) : NULL;
	if (!q->qp)
		return -(errno ? errno : EINVAL);
	q->new_qpn = q->qp->qp_num;
	return 0;
}

static int rp_build_qps(struct rp_job *j, struct rp_side *s)
{
	rp_qp_life_steps(j, s);
	for (int i = 0; i < s->nqp; i++) {
		struct rp_qp *q = &s->qp[i];
		struct ibv_pd *pd = rp_pd_by_h(s, q->rec.pd);
		struct ibv_qp_init_attr a = rp_qp_attr(s, q);

		/* an XRC_SEND has only a send queue, an XRC_RECV no queue at all */
		if (q->rec.qp_type == IBV_QPT_XRC_RECV
			    ? !q->xrcdi
			    : !pd || !a.send_cq ||
				      (q->rec.qp_type != IBV_QPT_XRC_SEND &&
				       !a.recv_cq)) {
			return rp_fail(j, -EINVAL,
				       "%s: QP %llu refers to a PD or CQ the trace never "
				       "created",
				       s->path, (unsigned long long)q->rec.qp_num);
		}
		if (q->port < 1 || q->port > s->dattr.phys_port_cnt)
			q->port = 1;
		if (q->dynamic)
			continue; /* by its step */
		if (rp_is_xrc(q->rec.qp_type)) {
			struct ibv_qp_init_attr_ex x = {
				.send_cq = a.send_cq,
				.recv_cq = a.recv_cq,
				.cap = a.cap,
				.qp_type = a.qp_type,
				.sq_sig_all = a.sq_sig_all,
			};

			if (q->rec.qp_type == IBV_QPT_XRC_RECV) {
				x.comp_mask = IBV_QP_INIT_ATTR_XRCD;
				x.xrcd = s->xrcd[q->xrcdi - 1].xrcd;
			} else {
				x.comp_mask = IBV_QP_INIT_ATTR_PD;
				x.pd = pd;
			}
			q->qp = ibv_create_qp_ex(s->ctx, &x);
			a.cap = x.cap;
		} else {
			q->qp = ibv_create_qp(pd, &a);
		}
		if (!q->qp) {
			return rp_fail(j, -ENOTSUP,
				       "%s: the device refused QP %llu (%s, %llu/%llu "
				       "WRs, %llu inline bytes): %s",
				       s->path, (unsigned long long)q->rec.qp_num,
				       rp_qpt_name(q->rec.qp_type),
				       (unsigned long long)q->rec.max_send_wr,
				       (unsigned long long)q->rec.max_recv_wr,
				       (unsigned long long)q->rec.max_inline_data,
				       strerror(errno));
		}
		if (a.cap.max_inline_data < q->rec.max_inline_data) {
			return rp_fail(j, -ENOTSUP,
				       "%s: QP %llu needs %llu inline bytes; the device "
				       "gives %u",
				       s->path, (unsigned long long)q->rec.qp_num,
				       (unsigned long long)q->rec.max_inline_data,
				       a.cap.max_inline_data);
		}
		q->new_qpn = q->qp->qp_num;
	}
	return 0;
}

int rp_build_side(struct rp_job *j, struct rp_side *s)
{
	static int (*const steps[])(struct rp_job *, struct rp_side *) = {
		rp_build_pds,	rp_build_mrs,  rp_build_mws, rp_build_cqs,
		rp_build_xrcds, rp_build_srqs, rp_build_qps, rp_cm_build_mcast,
	};
	int rc = 0;

	s->pd = calloc((size_t)s->npd + 1, sizeof(*s->pd));
	s->ch = calloc((size_t)s->nch + 1, sizeof(*s->ch));
	if (!s->pd || !s->ch)
		return -ENOMEM;
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]) && !rc; i++)
		rc = steps[i](j, s);
	return rc;
}

/* Destroys what each entry of a side's table holds (field), if anything. */
#define RP_DESTROY_ALL(arr, n, field, destroy) \
	for (int i_ = 0; i_ < (n); i_++)       \
		if ((arr) && (arr)[i_].field)  \
	(void)destroy((arr)[i_].field)

void rp_teardown_side(struct rp_side *s)
{
	RP_DESTROY_ALL(s->qp, s->nqp, qp, ibv_destroy_qp);
	RP_DESTROY_ALL(s->mw, s->nmw, mw, ibv_dealloc_mw);
	RP_DESTROY_ALL(s->ah, s->nah, ah, ibv_destroy_ah);
	RP_DESTROY_ALL(s->srq, s->nsrq, srq, ibv_destroy_srq);
	RP_DESTROY_ALL(s->xrcd, s->nxrcd, xrcd, ibv_close_xrcd);
	/* both replayers opened it before DONE: the name is no longer needed */
	if (s->xrcd_path[0])
		unlink(s->xrcd_path);
	s->xrcd_path[0] = 0;
	RP_DESTROY_ALL(s->cq, s->ncq, cq, ibv_destroy_cq);
	for (int i = 0; i < s->nch; i++)
		if (s->ch && s->ch[i])
			ibv_destroy_comp_channel(s->ch[i]);
	RP_DESTROY_ALL(s->mr, s->nmr, mr, ibv_dereg_mr);
	for (int i = 0; i < s->nmr; i++) {
		if (s->mr[i].map_len)
			munmap(s->mr[i].buf, s->mr[i].map_len);
		else
			free(s->mr[i].buf);
		s->mr[i].buf = NULL;
		s->mr[i].map_len = 0;
	}
	for (int i = 0; i < s->npd; i++)
		if (s->pd && s->pd[i])
			ibv_dealloc_pd(s->pd[i]);
	if (s->ctx)
		ibv_close_device(s->ctx);
	s->ctx = NULL;
}

/* ---- the directory: what each side's QPs and MRs became ------------------------ */
int rp_publish_side(struct rp_job *j, struct rp_side *s)
{
	for (int i = 0; i < s->nqp; i++) {
		struct rp_dir_qp d = {
			.side = s->idx,
			.rec_qpn = (uint32_t)s->qp[i].rec.qp_num,
			.rec_dest = s->qp[i].rec_dest_qpn,
			.new_qpn = s->qp[i].new_qpn, /* 0 until created (dynamic) */
			.type = (uint32_t)s->qp[i].rec.qp_type,
			.lid = s->pattr.lid,
			.rec_lid = (uint32_t)s->rec_lid,
		};

		memcpy(d.gid, s->gid.raw, 16);
		s->qp[i].dir_idx = j->dir.nqp;
		if (rp_dir_add_qp(&j->dir, &d) < 0)
			return -ENOMEM;
	}
	for (int i = 0; i < s->nmr; i++) {
		struct rp_dir_mr d = {
			.side = s->idx,
			.rec_addr = s->mr[i].iova,
			.len = s->mr[i].length,
			.new_addr = (uint64_t)(uintptr_t)s->mr[i].buf,
			.rec_rkey = (uint32_t)s->mr[i].rkey,
			.new_rkey = s->mr[i].mr ? s->mr[i].mr->rkey : 0,
			.live = &s->mr[i],
		};

		if (rp_dir_add_mr(&j->dir, &d) < 0)
			return -ENOMEM;
	}
	/* each key a window was bound with: a remote access naming it goes to the
	 * bound MR's replayed memory, with the replayed window's key */
	for (int i = 0; i < s->nstep; i++) {
		const struct rp_step *st = &s->step[i];

		for (uint32_t k = 0; st->binds && k < st->ev->u.post_send.n_wrs; k++) {
			const struct rbt_send_wr *w = &st->ev->u.post_send.wrs[k];
			const struct rp_bindref *b = &st->binds[k];
			const struct rp_mr *m = b->mr ? &s->mr[b->mr - 1] : NULL;
			struct rp_dir_mr d = { .side = s->idx };

			if (w->opcode != IBV_WR_BIND_MW || !b->mw || !m || !m->mr)
				continue;
			d.rec_addr = m->iova;
			d.len = m->length;
			d.new_addr = (uint64_t)(uintptr_t)m->buf;
			d.rec_rkey = (uint32_t)w->rkey;
			d.new_rkey = rp_mw_key(&s->mw[b->mw - 1], (uint32_t)w->rkey);
			if (rp_dir_add_mr(&j->dir, &d) < 0)
				return -ENOMEM;
		}
	}
	for (int i = 0; i < s->nsrq; i++) {
		struct rp_dir_srq d = {
			.side = s->idx,
			.rec_srqn = (uint32_t)s->srq[i].rec.srqn,
			.new_srqn = s->srq[i].new_srqn,
		};

		if (s->srq[i].rec.srq_type != IBV_SRQT_XRC)
			continue;
		if (rp_dir_add_srq(&j->dir, &d) < 0)
			return -ENOMEM;
	}
	return 0;
}

int rp_modify_to(struct ibv_qp *qp, const struct rbt_ev_qp_modify *m, uint32_t dest_qpn,
		 uint32_t dlid, const uint8_t *dgid)
{
	struct ibv_qp_attr a;
	int mask = (int)m->attr_mask;

	memset(&a, 0, sizeof(a));
	a.qp_state = (enum ibv_qp_state)m->qp_state;
	a.cur_qp_state = (enum ibv_qp_state)m->cur_qp_state;
	a.path_mtu = (enum ibv_mtu)m->path_mtu;
	a.qkey = (uint32_t)m->qkey;
	a.rq_psn = (uint32_t)m->rq_psn;
	a.sq_psn = (uint32_t)m->sq_psn;
	a.dest_qp_num = dest_qpn;
	a.qp_access_flags = (unsigned)m->qp_access_flags;
	a.pkey_index = (uint16_t)m->pkey_index;
	a.port_num = (uint8_t)m->port_num;
	a.max_rd_atomic = (uint8_t)m->max_rd_atomic;
	a.max_dest_rd_atomic = (uint8_t)m->max_dest_rd_atomic;
	a.min_rnr_timer = (uint8_t)m->min_rnr_timer;
	a.timeout = (uint8_t)m->timeout;
	a.retry_cnt = (uint8_t)m->retry_cnt;
	a.rnr_retry = (uint8_t)m->rnr_retry;
	a.sq_draining = (uint8_t)m->sq_draining;
	a.rate_limit = (uint32_t)m->rate_limit;
	a.ah_attr.dlid = (uint16_t)dlid;
	a.ah_attr.sl = (uint8_t)m->ah_sl;
	a.ah_attr.src_path_bits = (uint8_t)m->ah_src_path_bits;
	a.ah_attr.static_rate = (uint8_t)m->ah_static_rate;
	a.ah_attr.is_global = (uint8_t)m->ah_is_global;
	a.ah_attr.port_num = (uint8_t)(m->ah_port_num ? m->ah_port_num : m->port_num);
	if (a.ah_attr.is_global) {
		if (dgid)
			memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
		a.ah_attr.grh.flow_label = (uint32_t)m->ah_flow_label;
		a.ah_attr.grh.sgid_index = (uint8_t)m->ah_sgid_index;
		a.ah_attr.grh.hop_limit = (uint8_t)m->ah_hop_limit;
		a.ah_attr.grh.traffic_class = (uint8_t)m->ah_traffic_class;
	}
	return ibv_modify_qp(qp, &a, mask);
}
