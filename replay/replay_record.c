/* replay_record.c - writes what a replay did as a trace of its own (-o), with the
 * writer API: the resources it built and every step with the replay's numbers,
 * times and results, so `rbtrace diff original replay` can compare the two.
 *
 * Runs after the replay has finished: never on the post path.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "replay/replay_int.h"

#define H(p) ((uint64_t)(uintptr_t)(p))

static int rr_put(struct rbt_writer *w, struct rbt_event *ev, uint64_t ts)
{
	ev->stream = (uint32_t)getpid();
	ev->ts = ts;
	return rbt_writer_append(w, ev);
}

/* A recording whose write failed (a full disk) is removed, so that no partial
 * replay is taken for a whole one; its old contents were truncated at open
 * anyway. Only a regular file: never a device such as /dev/full. */
static void rr_discard(const char *path)
{
	struct stat st;

	if (!stat(path, &st) && S_ISREG(st.st_mode))
		unlink(path);
}

/* The replayed scatter list of a WR as the trace's, at sg, named by the WR's
 * sges and n_sges; returns n. */
static int rr_sges(struct rbt_sge *sg, const struct ibv_sge *in, int n,
		   const struct rbt_sge **sges, uint32_t *n_sges)
{
	*sges = sg;
	*n_sges = (uint32_t)n;
	for (int x = 0; x < n; x++) {
		sg[x].addr = in[x].addr;
		sg[x].length = in[x].length;
		sg[x].lkey = in[x].lkey;
	}
	return n;
}

/* A fresh event of call type T (field f of the union) that returned at t. */
#define RR_BEGIN(ev, T, f, t)                   \
	do {                                    \
		memset((ev), 0, sizeof(*(ev))); \
		(ev)->type = RBT_EV_##T;        \
		(ev)->u.f.ts_exit = (t);        \
	} while (0)

/* The device, port, PDs, MRs, channels, CQs and XRC domains the replay built. */
static int rr_resources(struct rbt_writer *w, struct rp_side *s, uint64_t t0)
{
	struct rbt_event ev;
	int rc;

	memset(&ev, 0, sizeof(ev));
	ev.type = RBT_EV_DEVICE_OPEN;
	ev.u.device_open.ctx = H(s->ctx);
	ev.u.device_open.name = s->ctx ? ibv_get_device_name(s->ctx->device) : "";
	rc = rr_put(w, &ev, t0);
	memset(&ev, 0, sizeof(ev));
	ev.type = RBT_EV_PORT_ATTR;
	ev.u.port_attr.ctx = H(s->ctx);
	ev.u.port_attr.port = 1;
	ev.u.port_attr.state = s->pattr.state;
	ev.u.port_attr.active_mtu = s->pattr.active_mtu;
	ev.u.port_attr.max_mtu = s->pattr.max_mtu;
	ev.u.port_attr.lid = s->pattr.lid;
	ev.u.port_attr.link_layer = s->pattr.link_layer;
	ev.u.port_attr.gid0.data = s->gid.raw;
	ev.u.port_attr.gid0.len = 16;
	rc = rc ?: rr_put(w, &ev, t0);
	for (int i = 0; i < s->npd && !rc; i++) {
		RR_BEGIN(&ev, PD_ALLOC, pd_alloc, t0);
		ev.u.pd_alloc.ctx = H(s->ctx);
		ev.u.pd_alloc.pd = H(s->pd[i]);
		rc = rr_put(w, &ev, t0);
	}
	/* MRs registered before the run (the others by their steps) */
	for (int i = 0; i < s->nmr && !rc; i++) {
		struct rp_mr *m = &s->mr[i];

		if (m->dynamic)
			continue;
		RR_BEGIN(&ev, MR_REG, mr_reg, t0);
		ev.u.mr_reg.pd = H(m->npd);
		ev.u.mr_reg.mr = H(m);
		ev.u.mr_reg.addr = H(m->buf);
		ev.u.mr_reg.iova = H(m->buf);
		ev.u.mr_reg.length = m->length;
		ev.u.mr_reg.access = m->access;
		ev.u.mr_reg.lkey = m->new_lkey;
		ev.u.mr_reg.rkey = m->new_rkey;
		rc = rr_put(w, &ev, t0);
	}
	for (int i = 0; i < s->nmw && !rc; i++) {
		RR_BEGIN(&ev, MW_ALLOC, mw_alloc, t0);
		ev.u.mw_alloc.pd = H(s->mw[i].mw->pd);
		ev.u.mw_alloc.mw = H(s->mw[i].mw);
		ev.u.mw_alloc.mw_type = s->mw[i].type;
		ev.u.mw_alloc.rkey = s->mw[i].rkey0;
		rc = rr_put(w, &ev, t0);
	}
	for (int i = 0; i < s->nch && !rc; i++) {
		RR_BEGIN(&ev, CHANNEL_CREATE, channel_create, t0);
		ev.u.channel_create.ctx = H(s->ctx);
		ev.u.channel_create.channel = H(s->ch[i]);
		ev.u.channel_create.fd = (uint64_t)s->ch[i]->fd;
		rc = rr_put(w, &ev, t0);
	}
	for (int i = 0; i < s->ncq && !rc; i++) {
		RR_BEGIN(&ev, CQ_CREATE, cq_create, t0);
		ev.u.cq_create = s->cq[i].rec;
		ev.u.cq_create.ts_exit = t0;
		ev.u.cq_create.ctx = H(s->ctx);
		ev.u.cq_create.cq = H(s->cq[i].cq);
		ev.u.cq_create.channel = H(s->cq[i].nch);
		ev.u.cq_create.cqe = (uint64_t)s->cq[i].cq->cqe;
		ev.u.cq_create.ex = 0;
		rc = rr_put(w, &ev, t0);
	}
	for (int i = 0; i < s->nxrcd && !rc; i++) {
		RR_BEGIN(&ev, XRCD_OPEN, xrcd_open, t0);
		ev.u.xrcd_open.ctx = H(s->ctx);
		ev.u.xrcd_open.xrcd = H(s->xrcd[i].xrcd);
		/* through a file when shared, as the program did (see rp_xrcd) */
		ev.u.xrcd_open.fd = s->xrcd[i].shared ? (uint64_t)s->xrcd[i].fd : ~0ull;
		ev.u.xrcd_open.oflags = O_CREAT;
		rc = rr_put(w, &ev, t0);
	}
	return rc;
}

/* Its SRQs, QPs (with their replayed numbers) and AHs. */
static int rr_queues(struct rbt_writer *w, struct rp_side *s, uint64_t t0)
{
	struct rbt_event ev;
	int rc = 0;

	for (int i = 0; i < s->nsrq && !rc; i++) {
		const struct rp_srq *r = &s->srq[i];

		RR_BEGIN(&ev, SRQ_CREATE, srq_create, t0);
		ev.u.srq_create = r->rec;
		ev.u.srq_create.ts_exit = t0;
		ev.u.srq_create.pd = H(rp_pd_by_h(s, r->pd));
		ev.u.srq_create.srq = H(r->srq);
		ev.u.srq_create.cq = H(r->cqi ? s->cq[r->cqi - 1].cq : NULL);
		ev.u.srq_create.xrcd = H(r->xrcdi ? s->xrcd[r->xrcdi - 1].xrcd : NULL);
		ev.u.srq_create.srqn = r->new_srqn;
		rc = rr_put(w, &ev, t0);
	}
	for (int i = 0; i < s->nqp && !rc; i++) {
		struct rp_qp *q = &s->qp[i];
		struct rp_cq *sc = (q->scq ? &s->cq[q->scq - 1] : NULL),
			     *rcq = (q->rcq ? &s->cq[q->rcq - 1] : NULL);
		struct rp_srq *srq = q->srqi ? &s->srq[q->srqi - 1] : NULL;

		RR_BEGIN(&ev, QP_CREATE, qp_create, t0);
		ev.u.qp_create = q->rec;
		ev.u.qp_create.ts_exit = t0;
		ev.u.qp_create.ctx = H(s->ctx);
		ev.u.qp_create.pd = H(rp_pd_by_h(s, q->rec.pd));
		if (q->dynamic)
			continue; /* by its step */
		ev.u.qp_create.qp = H(q);
		ev.u.qp_create.qp_num = q->new_qpn;
		ev.u.qp_create.send_cq = H(sc ? sc->cq : NULL);
		ev.u.qp_create.recv_cq = H(rcq ? rcq->cq : NULL);
		ev.u.qp_create.srq = H(srq ? srq->srq : NULL);
		ev.u.qp_create.xrcd = H(q->xrcdi ? s->xrcd[q->xrcdi - 1].xrcd : NULL);
		ev.u.qp_create.ex = rp_is_xrc(q->rec.qp_type);
		rc = rr_put(w, &ev, t0);
	}
	for (int i = 0; i < s->nah && !rc; i++) {
		RR_BEGIN(&ev, AH_CREATE, ah_create, t0);
		ev.u.ah_create = s->ah[i].rec;
		ev.u.ah_create.ts_exit = t0;
		ev.u.ah_create.pd = H(rp_pd_by_h(s, s->ah[i].pd));
		ev.u.ah_create.ah = H(s->ah[i].ah);
		ev.u.ah_create.ah_dgid.data = s->ah[i].dgid;
		ev.u.ah_create.ah_dgid.len = 16;
		rc = rr_put(w, &ev, t0);
	}
	return rc;
}

/* One zeroed block: room for a post's WRs (wr_size each), then for all their
 * replayed scatter lists (*sg). free() it; NULL without memory. */
static void *rr_lists(const struct rp_step *st, size_t wr_size, struct rbt_sge **sg)
{
	size_t n = 0, a = _Alignof(struct rbt_sge);
	size_t off = ((st->nwr + 1) * wr_size + a - 1) / a * a;
	char *p;

	for (uint32_t k = 0; k < st->nwr; k++)
		n += (size_t)(st->swr ? st->swr[k].num_sge : st->rwr[k].num_sge);
	p = calloc(1, off + (n + 1) * sizeof(**sg));
	if (p)
		*sg = (struct rbt_sge *)(p + off);
	return p;
}

/* The step's event written at its issue time, then its WR block freed. */
static int rr_put_free(struct rbt_writer *w, struct rbt_event *ev,
		       const struct rp_step *st, void *wrs)
{
	int rc = rr_put(w, ev, st->t_issue);

	free(wrs);
	return rc;
}

/* A post as replayed: the replayed buffers, keys and remote addresses. */
static int rr_send(struct rbt_writer *w, const struct rp_step *st, struct rbt_event ev)
{
	struct rbt_sge *sg;
	struct rbt_send_wr *wr = rr_lists(st, sizeof(*wr), &sg);

	if (!wr)
		return -ENOMEM;
	for (uint32_t k = 0, g = 0; k < st->nwr; k++) {
		const struct ibv_send_wr *o = &st->swr[k];

		wr[k] = ev.u.post_send.wrs[k];
		wr[k].payload.len = 0;
		wr[k].payload.data = NULL;
		g += rr_sges(&sg[g], o->sg_list, o->num_sge, &wr[k].sges, &wr[k].n_sges);
		if (o->opcode == IBV_WR_RDMA_WRITE ||
		    o->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
		    o->opcode == IBV_WR_RDMA_READ) {
			wr[k].remote_addr = o->wr.rdma.remote_addr;
			wr[k].rkey = o->wr.rdma.rkey;
		} else if (o->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
			   o->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			wr[k].remote_addr = o->wr.atomic.remote_addr;
			wr[k].rkey = o->wr.atomic.rkey;
		}
		if (o->opcode == IBV_WR_BIND_MW && st->bind1) {
			wr[k].remote_addr = st->bind1->bind_info.addr;
			wr[k].rkey = st->bind1_mw->mw->rkey; /* after the bind */
			wr[k].ah = H(st->bind1_mw->mw);
		} else if (o->opcode == IBV_WR_BIND_MW) {
			wr[k].remote_addr = o->bind_mw.bind_info.addr;
			wr[k].rkey = o->bind_mw.rkey;
			wr[k].ah = H(o->bind_mw.mw);
		} else if (o->opcode == IBV_WR_LOCAL_INV ||
			   o->opcode == IBV_WR_SEND_WITH_INV) {
			wr[k].imm_data = o->invalidate_rkey;
		}
		if (st->qp->rec.qp_type == IBV_QPT_XRC_SEND)
			wr[k].remote_qpn = o->qp_type.xrc.remote_srqn;
		if (st->qp->rec.qp_type == IBV_QPT_UD) {
			wr[k].ah = H(o->wr.ud.ah);
			wr[k].remote_qpn = o->wr.ud.remote_qpn;
		}
	}
	ev.u.post_send.wrs = wr;
	ev.u.post_send.ts_exit = st->t_exit;
	ev.u.post_send.ret = st->ret;
	ev.u.post_send.qp = H(st->qp);
	ev.u.post_send.qp_num = st->qp->new_qpn;
	ev.u.post_send.api = 0;
	return rr_put_free(w, &ev, st, wr);
}

static int rr_recv(struct rbt_writer *w, const struct rp_step *st, struct rbt_event ev)
{
	struct rbt_recv_wr *wr;
	struct rbt_sge *sg;
	uint32_t g = 0;

	if (!(wr = rr_lists(st, sizeof(*wr), &sg)))
		return -ENOMEM;
	for (uint32_t k = 0; k < st->nwr; k++) {
		wr[k].wr_id = st->rwr[k].wr_id;
		g += rr_sges(&sg[g], st->rwr[k].sg_list, st->rwr[k].num_sge, &wr[k].sges,
			     &wr[k].n_sges);
	}
	if (ev.type == RBT_EV_POST_RECV) {
		ev.u.post_recv.wrs = wr;
		ev.u.post_recv.ts_exit = st->t_exit;
		ev.u.post_recv.ret = st->ret;
		ev.u.post_recv.qp = H(st->qp);
		ev.u.post_recv.qp_num = st->qp->new_qpn;
	} else {
		ev.u.post_srq_recv.wrs = wr;
		ev.u.post_srq_recv.ts_exit = st->t_exit;
		ev.u.post_srq_recv.ret = st->ret;
		ev.u.post_srq_recv.srq = H(st->srq->srq);
	}
	return rr_put_free(w, &ev, st, wr);
}

/* A poll with the completions the replay got. */
static int rr_poll(struct rbt_writer *w, const struct rp_step *st, struct rbt_event ev)
{
	struct rbt_wc *wc = calloc(st->got + 1, sizeof(*wc));
	int rc;

	if (!wc) {
		return -ENOMEM;
	}
	for (uint32_t k = 0; k < st->got; k++) {
		const struct ibv_wc *o = &st->wcs[k];

		wc[k].wr_id = o->wr_id;
		wc[k].status = o->status;
		wc[k].opcode = o->opcode;
		wc[k].vendor_err = o->vendor_err;
		wc[k].byte_len = o->byte_len;
		wc[k].imm_data = be32toh(o->imm_data);
		wc[k].qp_num = o->qp_num;
		wc[k].src_qp = o->src_qp;
		wc[k].wc_flags = o->wc_flags;
		wc[k].pkey_index = o->pkey_index;
		wc[k].slid = o->slid;
		wc[k].sl = o->sl;
		wc[k].dlid_path_bits = o->dlid_path_bits;
	}
	ev.u.poll_cq.wcs = wc;
	ev.u.poll_cq.n_wcs = st->got;
	ev.u.poll_cq.ret = st->got;
	ev.u.poll_cq.ts_exit = st->t_exit;
	ev.u.poll_cq.cq = H(st->cq->cq);
	ev.u.poll_cq.api = 0;
	ev.u.poll_cq.asked = st->ev->u.poll_cq.n_wcs;
	ev.u.poll_cq.count = 1;
	rc = rr_put(w, &ev, st->t_issue);
	free(wc);
	return rc;
}

/* An MR step: the MR is named by its first entry (a rereg's successors are
 * the same MR), its keys the replay's. */
static int rr_mr(struct rbt_writer *w, const struct rp_side *s, const struct rp_step *st,
		 struct rbt_event ev)
{
	const struct rp_mr *m = st->mr, *root = m;

	while (root->succ_of)
		root = &s->mr[root->succ_of - 1];
	switch (ev.type) {
	case RBT_EV_MR_REG:
		ev.u.mr_reg.ts_exit = st->t_exit;
		ev.u.mr_reg.ret = st->ret;
		ev.u.mr_reg.mr = H(root);
		ev.u.mr_reg.pd = H(m->npd);
		ev.u.mr_reg.addr = ev.u.mr_reg.iova = H(m->buf);
		ev.u.mr_reg.api = 0;
		ev.u.mr_reg.lkey = m->new_lkey;
		ev.u.mr_reg.rkey = m->new_rkey;
		break;
	case RBT_EV_MR_DEREG:
		ev.u.mr_dereg.ts_exit = st->t_exit;
		ev.u.mr_dereg.ret = st->ret;
		ev.u.mr_dereg.mr = H(root);
		break;
	default:
		ev.u.mr_rereg.ts_exit = st->t_exit;
		ev.u.mr_rereg.ret = st->ret;
		ev.u.mr_rereg.mr = H(root);
		ev.u.mr_rereg.pd = H(m->npd);
		ev.u.mr_rereg.addr = H(m->buf);
		ev.u.mr_rereg.lkey = m->new_lkey;
		ev.u.mr_rereg.rkey = m->new_rkey;
		break;
	}
	return rr_put(w, &ev, st->t_issue);
}

/* One step as the replay ran it: its times and results, on its replayed objects. */
static int rr_step(struct rbt_writer *w, struct rp_job *j, const struct rp_side *s,
		   const struct rp_step *st)
{
	struct rbt_event ev = { 0 };
	int rc = 0;

	memcpy(&ev, st->ev, rbt_model_event_head_size(st->ev)); /* a compact copy */

	switch (ev.type) {
	case RBT_EV_QP_MODIFY:
		ev.u.qp_modify.ts_exit = st->t_exit;
		ev.u.qp_modify.ret = st->ret;
		ev.u.qp_modify.err = st->ret > 0 ? (uint64_t)st->ret : 0;
		ev.u.qp_modify.qp = H(st->qp);
		if (st->qp->peer_dir >= 0)
			ev.u.qp_modify.dest_qp_num = j->dir.qps[st->qp->peer_dir].new_qpn;
		rc = rr_put(w, &ev, st->t_issue);
		break;
	case RBT_EV_MR_REG:
	case RBT_EV_MR_DEREG:
	case RBT_EV_MR_REREG:
		return rr_mr(w, s, st, ev);
	case RBT_EV_QP_CREATE:
		ev.u.qp_create.ts_exit = st->t_exit;
		ev.u.qp_create.ret = st->ret;
		ev.u.qp_create.ctx = H(s->ctx);
		ev.u.qp_create.pd = H(rp_pd_by_h((struct rp_side *)s, st->qp->rec.pd));
		ev.u.qp_create.qp = H(st->qp);
		ev.u.qp_create.qp_num = st->qp->new_qpn;
		ev.u.qp_create.send_cq =
			H(st->qp->scq ? s->cq[st->qp->scq - 1].cq : NULL);
		ev.u.qp_create.recv_cq =
			H(st->qp->rcq ? s->cq[st->qp->rcq - 1].cq : NULL);
		ev.u.qp_create.srq =
			H(st->qp->srqi ? s->srq[st->qp->srqi - 1].srq : NULL);
		ev.u.qp_create.ex = 0;
		rc = rr_put(w, &ev, st->t_issue);
		break;
	case RBT_EV_QP_DESTROY:
		ev.u.qp_destroy.ts_exit = st->t_exit;
		ev.u.qp_destroy.ret = st->ret;
		ev.u.qp_destroy.qp = H(st->qp);
		rc = rr_put(w, &ev, st->t_issue);
		break;
	case RBT_EV_POST_SEND:
		return rr_send(w, st, ev);
	case RBT_EV_POST_RECV:
	case RBT_EV_POST_SRQ_RECV:
		return rr_recv(w, st, ev);
	case RBT_EV_POLL_CQ:
		return rr_poll(w, st, ev);
	case RBT_EV_REQ_NOTIFY:
		ev.u.req_notify.ts_exit = st->t_exit;
		ev.u.req_notify.ret = st->ret;
		ev.u.req_notify.cq = H(st->cq->cq);
		rc = rr_put(w, &ev, st->t_issue);
		break;
	case RBT_EV_GET_CQ_EVENT:
		ev.u.get_cq_event.ts_exit = st->t_exit;
		ev.u.get_cq_event.ret = st->ret;
		ev.u.get_cq_event.cq = H(st->cq->cq);
		ev.u.get_cq_event.channel = H(st->cq->nch);
		rc = rr_put(w, &ev, st->t_issue);
		break;
	}
	return rc;
}

int rp_record_side(struct rp_job *j, struct rp_side *s, const char *path)
{
	struct rbt_header hdr = { 0 };
	struct rbt_writer *w = NULL;
	struct timespec rt;
	char host[128] = "";
	uint64_t t0 = UINT64_MAX, now = rp_now_ns();
	int rc;

	for (int i = 0; i < s->nstep; i++)
		if (s->step[i].t_issue && s->step[i].t_issue < t0)
			t0 = s->step[i].t_issue;
	if (t0 == UINT64_MAX)
		t0 = now;
	t0 -= 1000;
	clock_gettime(CLOCK_REALTIME, &rt);
	gethostname(host, sizeof(host) - 1);
	hdr.pid = (uint32_t)getpid();
	hdr.ppid = (uint32_t)getppid();
	hdr.clock_source = RBT_CLOCK_MONO;
	hdr.clock_hz = 1000000000ull;
	hdr.start.ticks = t0;
	hdr.start.mono_ns = t0;
	hdr.start.real_ns =
		(uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec - (now - t0);
	hdr.host = host;
	hdr.cmdline = s->path;
	hdr.tool = "rbtrace replay";
	rc = rbt_writer_open(path, &hdr, NULL, &w);
	if (rc < 0)
		return rc;

	rc = rr_resources(w, s, t0);
	if (!rc)
		rc = rr_queues(w, s, t0);
	for (int i = 0; i < s->nstep && !rc; i++)
		if (!s->step[i].skipped && s->step[i].t_issue)
			rc = rr_step(w, j, s, &s->step[i]);
	if (rc) {
		rbt_writer_close(w, NULL);
		rr_discard(path);
		return rc;
	}
	{
		struct rbt_trailer tr = { 0 };
		struct timespec m;

		clock_gettime(CLOCK_MONOTONIC, &m);
		clock_gettime(CLOCK_REALTIME, &rt);
		tr.end.ticks = (uint64_t)m.tv_sec * 1000000000ull + (uint64_t)m.tv_nsec;
		tr.end.mono_ns = tr.end.ticks;
		tr.end.real_ns =
			(uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
		rc = rbt_writer_close(w, &tr);
		if (rc)
			rr_discard(path);
		return rc;
	}
}
