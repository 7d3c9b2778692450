/* replay_run.c - the replayer's engine: checks that the device can take the trace,
 * rebuilds every resource, pairs the QPs through the directory, translates every
 * recorded work request into one on the replayed resources, and runs each side's
 * timeline (one thread per local trace) with the chosen timing.
 *
 * Must never touch memory outside the MRs it registered: every recorded address is
 * rewritten to (replayed MR, offset) after a bounds check, and what does not fit
 * is pointed at scratch memory of the replayer's own. The post path does no
 * allocation and no syscall: everything is prepared before the start barrier.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "replay/replay_int.h"

/* ---- clock: TSC when it is there, calibrated against CLOCK_MONOTONIC ---------- */
static double rp_ns_per_tick;
static uint64_t rp_tsc0, rp_mono0;

static uint64_t rp_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void rp_clock_init(void)
{
#if defined(__x86_64__)
	uint64_t m0, m1, t0, t1;

	if (rp_ns_per_tick > 0)
		return;
	m0 = rp_mono_ns();
	t0 = __rdtsc();
	do {
		m1 = rp_mono_ns();
	} while (m1 - m0 < 20000000ull);
	t1 = __rdtsc();
	rp_tsc0 = t0;
	rp_mono0 = m0;
	rp_ns_per_tick = t1 > t0 ? (double)(m1 - m0) / (double)(t1 - t0) : 0;
#endif
}

/* Monotonic ns, on the CLOCK_MONOTONIC scale (so same-host traces line up). */
uint64_t rp_now_ns(void)
{
#if defined(__x86_64__)
	if (rp_ns_per_tick > 0)
		return rp_mono0 +
		       (uint64_t)((double)(__rdtsc() - rp_tsc0) * rp_ns_per_tick);
#endif
	return rp_mono_ns();
}

static void rp_wait_until(uint64_t deadline)
{
	for (;;) {
		uint64_t now = rp_now_ns();

		if (now >= deadline)
			return;
		/* Sleep when far, spin the last stretch: a sleep wakes up late. */
		if (deadline - now > 300000) {
			struct timespec ts = { 0, (long)(deadline - now - 200000) };

			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec = ts.tv_nsec / 1000000000L;
				ts.tv_nsec %= 1000000000L;
			}
			nanosleep(&ts, NULL);
		} else {
#if defined(__x86_64__)
			_mm_pause();
#endif
		}
	}
}

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

/* ---- refusals: everything the device must offer, checked before any resource -- */
static const char *rp_qpt_name(uint64_t t)
{
	const char *n = rbt_verbs_name(RBT_NAMES_QP_TYPE, t);

	return n ? n : "unknown";
}

static int rp_check_side(struct rp_job *j, struct rp_side *s)
{
	const struct ibv_device_attr *d = &s->dattr;
	const char *p = s->path;
	uint64_t mem = 0;

	if (s->nqp == 0) {
		fprintf(j->log,
			"rbtrace replay: %s: the trace creates no QP: nothing to "
			"replay\n",
			p);
		return -EINVAL;
	}
	if (s->mw_use) {
		fprintf(j->log,
			"rbtrace replay: %s: the trace uses memory windows (%s), which "
			"the replayer does not rebuild\n",
			p, s->mw_use);
		return -ENOTSUP;
	}
	for (int i = 0; i < s->nqp; i++) {
		const struct rbt_ev_qp_create *c = &s->qp[i].rec;

		if (c->qp_type != IBV_QPT_RC && c->qp_type != IBV_QPT_UC &&
		    c->qp_type != IBV_QPT_UD && !rp_is_xrc(c->qp_type)) {
			fprintf(j->log,
				"rbtrace replay: %s: QP %llu is of type %s, which the "
				"replayer "
				"cannot rebuild\n",
				p, (unsigned long long)c->qp_num,
				rp_qpt_name(c->qp_type));
			return -ENOTSUP;
		}
		if (c->qp_type == IBV_QPT_XRC_RECV && !s->qp[i].xrcdi) {
			fprintf(j->log,
				"rbtrace replay: %s: QP %llu (XRC_RECV) names an XRC "
				"domain the trace never opened\n",
				p, (unsigned long long)c->qp_num);
			return -EINVAL;
		}
		if (c->max_send_wr > (uint64_t)d->max_qp_wr ||
		    c->max_recv_wr > (uint64_t)d->max_qp_wr) {
			fprintf(j->log,
				"rbtrace replay: %s: QP %llu needs %llu send / %llu "
				"receive WRs; "
				"the device allows %d\n",
				p, (unsigned long long)c->qp_num,
				(unsigned long long)c->max_send_wr,
				(unsigned long long)c->max_recv_wr, d->max_qp_wr);
			return -ENOTSUP;
		}
		if (c->max_send_sge > (uint64_t)d->max_sge ||
		    c->max_recv_sge > (uint64_t)d->max_sge) {
			fprintf(j->log,
				"rbtrace replay: %s: QP %llu needs %llu SGEs; the device "
				"allows "
				"%d\n",
				p, (unsigned long long)c->qp_num,
				(unsigned long long)(c->max_send_sge > c->max_recv_sge
							     ? c->max_send_sge
							     : c->max_recv_sge),
				d->max_sge);
			return -ENOTSUP;
		}
	}
	for (int i = 0; i < s->ncq; i++)
		if (s->cq[i].rec.cqe_asked > (uint64_t)d->max_cqe) {
			fprintf(j->log,
				"rbtrace replay: %s: a CQ of %llu entries; the device "
				"allows %d\n",
				p, (unsigned long long)s->cq[i].rec.cqe_asked,
				d->max_cqe);
			return -ENOTSUP;
		}
	for (int i = 0; i < s->nsrq; i++) {
		const struct rp_srq *r = &s->srq[i];

		if (r->rec.srq_type != IBV_SRQT_BASIC &&
		    r->rec.srq_type != IBV_SRQT_XRC) {
			fprintf(j->log,
				"rbtrace replay: %s: SRQ %d is of type %llu (tag "
				"matching?), which the replayer cannot rebuild\n",
				p, i, (unsigned long long)r->rec.srq_type);
			return -ENOTSUP;
		}
		if (r->rec.srq_type == IBV_SRQT_XRC && (!r->xrcdi || !r->cqi)) {
			fprintf(j->log,
				"rbtrace replay: %s: XRC SRQ %llu names an XRC domain "
				"or CQ the trace never created\n",
				p, (unsigned long long)r->rec.srqn);
			return -EINVAL;
		}
	}
	for (int i = 0; i < s->nsrq; i++)
		if (s->srq[i].rec.max_wr > (uint64_t)d->max_srq_wr || d->max_srq == 0) {
			fprintf(j->log,
				"rbtrace replay: %s: an SRQ of %llu WRs; the device "
				"allows %d "
				"(max %d SRQs)\n",
				p, (unsigned long long)s->srq[i].rec.max_wr,
				d->max_srq_wr, d->max_srq);
			return -ENOTSUP;
		}
	if (s->uses_atomics && d->atomic_cap == IBV_ATOMIC_NONE) {
		fprintf(j->log,
			"rbtrace replay: %s: the trace posts atomics; the device has no "
			"atomic "
			"support\n",
			p);
		return -ENOTSUP;
	}
	if (s->max_rd_atomic > d->max_qp_rd_atom) {
		fprintf(j->log,
			"rbtrace replay: %s: the trace asks %d outstanding reads/atomics "
			"per QP; "
			"the device allows %d\n",
			p, s->max_rd_atomic, d->max_qp_rd_atom);
		return -ENOTSUP;
	}
	for (int i = 0; i < s->nstep; i++) {
		const struct rbt_event *e = &s->step[i].ev;

		if (e->type == RBT_EV_QP_MODIFY && !e->u.qp_modify.ret &&
		    (e->u.qp_modify.attr_mask & IBV_QP_PATH_MTU) &&
		    e->u.qp_modify.path_mtu > (uint64_t)s->pattr.active_mtu) {
			fprintf(j->log,
				"rbtrace replay: %s: the trace uses path MTU %d; the "
				"device's "
				"active MTU is %d\n",
				p, 128 << e->u.qp_modify.path_mtu,
				128 << s->pattr.active_mtu);
			return -ENOTSUP;
		}
	}
	for (int i = 0; i < s->nmr; i++) {
		if (s->mr[i].length > d->max_mr_size) {
			fprintf(j->log,
				"rbtrace replay: %s: an MR of %llu bytes; the device "
				"allows %llu\n",
				p, (unsigned long long)s->mr[i].length,
				(unsigned long long)d->max_mr_size);
			return -ENOTSUP;
		}
		mem += s->mr[i].length;
	}
	if (mem > (8ull << 30)) {
		fprintf(j->log,
			"rbtrace replay: %s: the trace registers %llu MiB of memory; "
			"refusing "
			"more than 8 GiB\n",
			p, (unsigned long long)(mem >> 20));
		return -ENOMEM;
	}
	return 0;
}

/* Every connected QP must find its peer among the traces (or over the network). */
static int rp_check_pairs(struct rp_job *j)
{
	for (int si = 0; si < j->nside; si++) {
		struct rp_side *s = &j->side[si];

		for (int i = 0; i < s->nqp; i++) {
			struct rp_qp *q = &s->qp[i];
			int found = 0;

			if (!q->has_dest || q->rec.qp_type == IBV_QPT_UD)
				continue;
			for (int sj = 0; sj < j->nside && !found; sj++) {
				struct rp_qp *o =
					rp_qp_by_rec_qpn(&j->side[sj], q->rec_dest_qpn);

				if (o && o != q)
					found = 1;
			}
			if (!found && j->peer_is_responder && rp_is_xrc(q->rec.qp_type)) {
				fprintf(j->log,
					"rbtrace replay: %s: QP %llu is of type %s; the "
					"responder stands in for RC/UC peers only: give "
					"the "
					"trace of QP %u's end too\n",
					s->path, (unsigned long long)q->rec.qp_num,
					rp_qpt_name(q->rec.qp_type), q->rec_dest_qpn);
				return -ENOTSUP;
			}
			if (!found && j->net_fd < 0) {
				fprintf(j->log,
					"rbtrace replay: %s: QP %llu was connected to QP "
					"%u, which "
					"is in none of the given traces; give the peer's "
					"trace too, "
					"or --connect to a peer replayer or to "
					"'rbtrace replay --responder'\n",
					s->path, (unsigned long long)q->rec.qp_num,
					q->rec_dest_qpn);
				return -EINVAL;
			}
		}
	}
	return 0;
}

/* ---- building the resources ---------------------------------------------------- */
static void rp_pattern(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)((i * 131 + seed * 7 + 17) >> 1);
}

static int rp_build_side(struct rp_job *j, struct rp_side *s)
{
	s->pd = calloc((size_t)s->npd + 1, sizeof(*s->pd));
	s->ch = calloc((size_t)s->nch + 1, sizeof(*s->ch));
	if (!s->pd || !s->ch)
		return -ENOMEM;
	for (int i = 0; i < s->npd; i++) {
		s->pd[i] = ibv_alloc_pd(s->ctx);
		if (!s->pd[i])
			goto fail;
	}
	for (int i = 0; i < s->nmr; i++) {
		struct rp_mr *m = &s->mr[i];
		size_t len = m->length ? m->length : 1;
		int acc = (int)m->access;

		m->npd = rp_pd_by_h(s, m->pd);
		if (!m->npd) {
			fprintf(j->log, "rbtrace replay: %s: MR on an unknown PD\n",
				s->path);
			return -EINVAL;
		}
		if (posix_memalign((void **)&m->buf, 4096, (len + 4095) & ~4095ul))
			return -ENOMEM;
		rp_pattern(m->buf, len, (uint64_t)i);
		m->mr = ibv_reg_mr(m->npd, m->buf, len, acc);
		if (!m->mr) {
			fprintf(j->log,
				"rbtrace replay: %s: registering an MR of %zu bytes "
				"(access 0x%x) "
				"failed: %s\n",
				s->path, len, acc, strerror(errno));
			return -errno ? -errno : -EIO;
		}
	}
	for (int i = 0; i < s->nch; i++) {
		s->ch[i] = ibv_create_comp_channel(s->ctx);
		if (!s->ch[i])
			goto fail;
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
			goto fail;
		if (ch) {
			c->stash_cap = (uint32_t)c->cq->cqe + 1;
			c->stash = calloc(c->stash_cap, sizeof(*c->stash));
			if (!c->stash)
				return -ENOMEM;
		}
	}
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
					"domain "
					"file %s: %s\n",
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

			fprintf(j->log,
				"rbtrace replay: %s: the device cannot open an XRC "
				"domain: %s\n",
				s->path, strerror(e));
			return -e;
		}
	}
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
				goto fail;
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

			fprintf(j->log,
				"rbtrace replay: %s: the device refused XRC SRQ %llu "
				"(%llu WRs): %s\n",
				s->path, (unsigned long long)r->rec.srqn,
				(unsigned long long)r->rec.max_wr, strerror(e));
			return -e;
		}
	}
	for (int i = 0; i < s->nqp; i++) {
		struct rp_qp *q = &s->qp[i];
		struct rp_cq *scq = (q->scq ? &s->cq[q->scq - 1] : NULL);
		struct rp_cq *rcq = (q->rcq ? &s->cq[q->rcq - 1] : NULL);
		struct rp_srq *srq = q->srqi ? &s->srq[q->srqi - 1] : NULL;
		struct ibv_pd *pd = rp_pd_by_h(s, q->rec.pd);
		struct ibv_qp_init_attr a = {
			.send_cq = scq ? scq->cq : NULL,
			.recv_cq = rcq ? rcq->cq : NULL,
			.srq = srq ? srq->srq : NULL,
			.cap = { .max_send_wr = (uint32_t)q->rec.max_send_wr,
				 .max_recv_wr = (uint32_t)q->rec.max_recv_wr,
				 .max_send_sge = (uint32_t)q->rec.max_send_sge,
				 .max_recv_sge = (uint32_t)q->rec.max_recv_sge,
				 .max_inline_data = (uint32_t)q->rec.max_inline_data },
			.qp_type = (enum ibv_qp_type)q->rec.qp_type,
			.sq_sig_all = (int)q->rec.sq_sig_all,
		};

		/* an XRC_SEND has only a send queue, an XRC_RECV no queue at all */
		if (q->rec.qp_type == IBV_QPT_XRC_RECV
			    ? !q->xrcdi
			    : !pd || !a.send_cq ||
				      (q->rec.qp_type != IBV_QPT_XRC_SEND &&
				       !a.recv_cq)) {
			fprintf(j->log,
				"rbtrace replay: %s: QP %llu refers to a PD or CQ the "
				"trace "
				"never created\n",
				s->path, (unsigned long long)q->rec.qp_num);
			return -EINVAL;
		}
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
			fprintf(j->log,
				"rbtrace replay: %s: the device refused QP %llu (%s, "
				"%llu/%llu WRs, "
				"%llu inline bytes): %s\n",
				s->path, (unsigned long long)q->rec.qp_num,
				rp_qpt_name(q->rec.qp_type),
				(unsigned long long)q->rec.max_send_wr,
				(unsigned long long)q->rec.max_recv_wr,
				(unsigned long long)q->rec.max_inline_data,
				strerror(errno));
			return -ENOTSUP;
		}
		if (a.cap.max_inline_data < q->rec.max_inline_data) {
			fprintf(j->log,
				"rbtrace replay: %s: QP %llu needs %llu inline bytes; "
				"the device "
				"gives %u\n",
				s->path, (unsigned long long)q->rec.qp_num,
				(unsigned long long)q->rec.max_inline_data,
				a.cap.max_inline_data);
			return -ENOTSUP;
		}
		if (q->port < 1 || q->port > s->dattr.phys_port_cnt)
			q->port = 1;
	}
	return 0;
fail:
	fprintf(j->log, "rbtrace replay: %s: creating resources failed: %s\n", s->path,
		strerror(errno));
	return -errno ? -errno : -EIO;
}

static void rp_teardown_side(struct rp_side *s)
{
	for (int i = 0; i < s->nqp; i++)
		if (s->qp[i].qp)
			ibv_destroy_qp(s->qp[i].qp);
	for (int i = 0; i < s->nah; i++)
		if (s->ah[i].ah)
			ibv_destroy_ah(s->ah[i].ah);
	for (int i = 0; i < s->nsrq; i++)
		if (s->srq[i].srq)
			ibv_destroy_srq(s->srq[i].srq);
	for (int i = 0; i < s->nxrcd; i++)
		if (s->xrcd[i].xrcd)
			ibv_close_xrcd(s->xrcd[i].xrcd);
	/* both replayers opened it before DONE: the name is no longer needed */
	if (s->xrcd_path[0])
		unlink(s->xrcd_path);
	s->xrcd_path[0] = 0;
	for (int i = 0; i < s->ncq; i++)
		if (s->cq[i].cq)
			ibv_destroy_cq(s->cq[i].cq);
	for (int i = 0; i < s->nch; i++)
		if (s->ch && s->ch[i])
			ibv_destroy_comp_channel(s->ch[i]);
	for (int i = 0; i < s->nmr; i++) {
		if (s->mr[i].mr)
			ibv_dereg_mr(s->mr[i].mr);
		free(s->mr[i].buf);
		s->mr[i].buf = NULL;
	}
	for (int i = 0; i < s->npd; i++)
		if (s->pd && s->pd[i])
			ibv_dealloc_pd(s->pd[i]);
	if (s->ctx)
		ibv_close_device(s->ctx);
	s->ctx = NULL;
}

/* ---- the directory: what each side's QPs and MRs became ------------------------ */
static int rp_publish_side(struct rp_job *j, struct rp_side *s)
{
	for (int i = 0; i < s->nqp; i++) {
		struct rp_dir_qp d = {
			.side = s->idx,
			.rec_qpn = (uint32_t)s->qp[i].rec.qp_num,
			.rec_dest = s->qp[i].rec_dest_qpn,
			.new_qpn = s->qp[i].qp->qp_num,
			.type = (uint32_t)s->qp[i].rec.qp_type,
			.lid = s->pattr.lid,
			.rec_lid = (uint32_t)s->rec_lid,
		};

		memcpy(d.gid, s->gid.raw, 16);
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
			.new_rkey = s->mr[i].mr->rkey,
		};

		if (rp_dir_add_mr(&j->dir, &d) < 0)
			return -ENOMEM;
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

/* An XRC_SEND names the receiving SRQ by its number on the peer: the one of the
 * side its QP is connected to (SRQ numbers of two hosts can coincide), else
 * any side's. A number no trace has is replaced by one no replayed SRQ has, so
 * the device refuses the send as it did in the recording. */
static uint32_t rp_map_srqn(struct rp_job *j, struct rp_side *s, const struct rp_qp *q,
			    uint32_t rec_srqn, int post_idx)
{
	const struct rp_dir_srq *any = NULL;
	uint32_t n;

	for (int i = 0; i < j->dir.nsrq; i++) {
		const struct rp_dir_srq *d = &j->dir.srqs[i];

		if (d->rec_srqn != rec_srqn)
			continue;
		if (d->side == q->rel_side)
			return d->new_srqn;
		if (!any)
			any = d;
	}
	if (any)
		return any->new_srqn;
	n = 0xfff000u | (rec_srqn & 0xfffu);
	for (int again = 1; again;) {
		again = 0;
		for (int i = 0; i < j->dir.nsrq; i++)
			if (j->dir.srqs[i].new_srqn == n) {
				n = ((n + 1) & 0xfffu) | 0xfff000u;
				again = 1;
			}
	}
	fprintf(j->log,
		"rbtrace replay: %s: step %d: XRC send to SRQ %u, which is in no trace: "
		"replayed to SRQ %u, which does not exist either\n",
		s->path, post_idx, rec_srqn, n);
	return n;
}

/* The peer of a connected QP: the directory QP whose recorded number is our
 * recorded destination, preferably one that names us back and lives elsewhere. */
static int rp_find_peer(struct rp_job *j, const struct rp_side *s, const struct rp_qp *q)
{
	int best = -1, best_score = -1;

	for (int i = 0; i < j->dir.nqp; i++) {
		const struct rp_dir_qp *d = &j->dir.qps[i];
		int score = 0;

		if (d->rec_qpn != q->rec_dest_qpn)
			continue;
		if (d->side == s->idx && d->rec_qpn == (uint32_t)q->rec.qp_num)
			continue;
		if (d->rec_dest == (uint32_t)q->rec.qp_num)
			score += 2;
		if (d->side != s->idx)
			score += 1;
		if (score > best_score) {
			best = i;
			best_score = score;
		}
	}
	return best;
}

static const struct rp_dir_qp *rp_dir_qp_by_rec(struct rp_job *j, int prefer_not_side,
						uint32_t rec_qpn)
{
	const struct rp_dir_qp *any = NULL;

	for (int i = 0; i < j->dir.nqp; i++)
		if (j->dir.qps[i].rec_qpn == rec_qpn) {
			if (j->dir.qps[i].side != prefer_not_side)
				return &j->dir.qps[i];
			any = &j->dir.qps[i];
		}
	return any;
}

static const struct rp_dir_qp *rp_dir_qp_by_lid(struct rp_job *j, uint32_t rec_lid)
{
	for (int i = 0; i < j->dir.nqp; i++)
		if (j->dir.qps[i].rec_lid == rec_lid)
			return &j->dir.qps[i];
	return NULL;
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

/* ---- translating work requests -------------------------------------------------- */
static uint32_t rp_unused_lkey(const struct rp_side *s)
{
	uint32_t k = 0x7ffe0001u;

	for (int again = 1; again;) {
		again = 0;
		for (int i = 0; i < s->nmr; i++)
			if (s->mr[i].mr &&
			    (s->mr[i].mr->lkey == k || s->mr[i].mr->rkey == k)) {
				k += 0x101;
				again = 1;
			}
	}
	return k;
}

/* Scratch memory of the replayer's own, for inline data that came from outside
 * every MR and for local addresses that fit no MR. */
static uint8_t *rp_scratch(struct rp_side *s, size_t n)
{
	uint8_t *p;

	if (s->inline_used + n > s->inline_cap) {
		/* Old scratch stays referenced by prepared WRs: park it in the arena. */
		size_t cap = n > 65536 ? n : 65536;

		p = rp_alloc(s, cap);
		if (!p)
			return NULL;
		s->inline_pool = NULL;
		s->inline_cap = cap;
		s->inline_used = 0;
		s->inline_pool = p;
	}
	p = s->inline_pool + s->inline_used;
	s->inline_used += n;
	rp_pattern(p, n, 99);
	return p;
}

static int rp_map_sge(struct rp_job *j, struct rp_side *s, const struct rbt_sge *in,
		      struct ibv_sge *out, int is_inline, int post_idx)
{
	for (int i = s->nmr - 1; i >= 0; i--) {
		const struct rp_mr *m = &s->mr[i];

		if (m->lkey != in->lkey && !is_inline)
			continue;
		if (in->addr < m->addr || in->addr + in->length > m->addr + m->length)
			continue;
		out->addr = (uint64_t)(uintptr_t)m->buf + (in->addr - m->addr);
		out->length = (uint32_t)in->length;
		out->lkey = m->mr->lkey;
		return 0;
	}
	/* Outside every MR: inline data is copied by the device at post time, so a
	 * private buffer is as good; otherwise the post is meant to fail. */
	out->addr = (uint64_t)(uintptr_t)rp_scratch(s, in->length ? in->length : 1);
	out->length = (uint32_t)in->length;
	if (!out->addr)
		return -ENOMEM;
	if (is_inline) {
		out->lkey = 0;
		return 0;
	}
	out->lkey = rp_unused_lkey(s);
	rp_diverge(
		j,
		"%s: step %d: local buffer 0x%llx+%llu (lkey 0x%llx) lies in no recorded "
		"MR: posted with an invalid lkey into scratch memory",
		s->path, post_idx, (unsigned long long)in->addr,
		(unsigned long long)in->length, (unsigned long long)in->lkey);
	return 0;
}

static void rp_map_remote(struct rp_job *j, struct rp_side *s, struct rp_qp *q,
			  uint64_t raddr, uint32_t rkey, uint64_t len, uint64_t *naddr,
			  uint32_t *nrkey, int post_idx)
{
	const struct rp_dir_mr *hit = NULL;
	int key_known = 0;

	for (int i = 0; i < j->dir.nmr; i++) {
		const struct rp_dir_mr *d = &j->dir.mrs[i];

		if (q->rel_side >= 0 && d->side != q->rel_side)
			continue;
		if (d->rec_rkey != rkey)
			continue;
		key_known = 1;
		if (raddr >= d->rec_addr && raddr + len <= d->rec_addr + d->len) {
			hit = d;
			break;
		}
	}
	if (hit) {
		*naddr = hit->new_addr + (raddr - hit->rec_addr);
		*nrkey = hit->new_rkey;
		return;
	}
	/* A recorded access the peer would refuse: reproduce the refusal with a key
	 * no replayed MR has, so no memory is ever touched. */
	*naddr = 0;
	*nrkey = 0x7fff0000u | (rkey & 0xffffu);
	for (int again = 1; again;) {
		again = 0;
		for (int i = 0; i < j->dir.nmr; i++)
			if (j->dir.mrs[i].new_rkey == *nrkey) {
				*nrkey += 0x10001;
				again = 1;
			}
	}
	fprintf(j->log,
		"rbtrace replay: %s: step %d: remote 0x%llx+%llu rkey 0x%x %s: replayed "
		"with "
		"an invalid rkey (the recorded access would fail too)\n",
		s->path, post_idx, (unsigned long long)raddr, (unsigned long long)len,
		rkey,
		key_known ? "lies outside the peer's MR" : "names no MR of the peer");
}

static int rp_prepare_side(struct rp_job *j, struct rp_side *s)
{
	/* pairing */
	for (int i = 0; i < s->nqp; i++) {
		struct rp_qp *q = &s->qp[i];

		if (!q->has_dest || q->rec.qp_type == IBV_QPT_UD)
			continue;
		q->peer_dir = rp_find_peer(j, s, q);
		if (q->peer_dir < 0) {
			fprintf(j->log,
				"rbtrace replay: %s: QP %llu: its peer QP %u is in no "
				"trace and "
				"no peer published it\n",
				s->path, (unsigned long long)q->rec.qp_num,
				q->rec_dest_qpn);
			return -EINVAL;
		}
		q->rel_side = j->dir.qps[q->peer_dir].side;
	}
	/* TGT QPs of other processes that delivered into our XRC SRQs */
	for (int i = 0; i < s->nxqp; i++) {
		struct rp_qp *x = &s->xqp[i];

		for (int k = 0; k < j->dir.nqp && x->peer_dir < 0; k++)
			if (j->dir.qps[k].side != s->idx &&
			    j->dir.qps[k].type == IBV_QPT_XRC_RECV &&
			    j->dir.qps[k].rec_qpn == (uint32_t)x->rec.qp_num)
				x->peer_dir = k;
		if (x->peer_dir < 0) {
			fprintf(j->log,
				"rbtrace replay: %s: XRC receives came through QP %llu "
				"of another process, which is in no trace\n",
				s->path, (unsigned long long)x->rec.qp_num);
			return -EINVAL;
		}
		x->foreign_new_qpn = j->dir.qps[x->peer_dir].new_qpn;
		x->rel_side = j->dir.qps[x->peer_dir].side;
	}
	/* address handles (UD) */
	for (int i = 0; i < s->nah; i++) {
		struct rp_ah *a = &s->ah[i];
		const struct rp_dir_qp *d = rp_dir_qp_by_lid(j, (uint32_t)a->rec.ah_dlid);
		struct ibv_ah_attr aa = {
			.dlid = (uint16_t)(d ? d->lid : a->rec.ah_dlid),
			.sl = (uint8_t)a->rec.ah_sl,
			.src_path_bits = (uint8_t)a->rec.ah_src_path_bits,
			.static_rate = (uint8_t)a->rec.ah_static_rate,
			.is_global = (uint8_t)a->rec.ah_is_global,
			.port_num =
				(uint8_t)(a->rec.ah_port_num ? a->rec.ah_port_num : 1),
		};
		struct ibv_pd *pd = rp_pd_by_h(s, a->pd);

		if (aa.is_global) {
			memcpy(aa.grh.dgid.raw, d ? d->gid : a->dgid, 16);
			aa.grh.flow_label = (uint32_t)a->rec.ah_flow_label;
			aa.grh.sgid_index = (uint8_t)a->rec.ah_sgid_index;
			aa.grh.hop_limit = (uint8_t)a->rec.ah_hop_limit;
			aa.grh.traffic_class = (uint8_t)a->rec.ah_traffic_class;
		}
		a->ah = pd ? ibv_create_ah(pd, &aa) : NULL;
		if (!a->ah) {
			fprintf(j->log,
				"rbtrace replay: %s: creating an address handle failed: "
				"%s\n",
				s->path, strerror(errno));
			return -EIO;
		}
	}
	/* work requests */
	for (int i = 0; i < s->nstep; i++) {
		struct rp_step *st = &s->step[i];
		const struct rbt_event *e = &st->ev;

		if (e->type == RBT_EV_POST_SEND) {
			const struct rbt_ev_post_send *p = &e->u.post_send;
			uint32_t nsge = 0, k = 0;

			if (!st->qp || !st->qp->qp) {
				st->skipped = 1;
				continue;
			}
			for (uint32_t w = 0; w < p->n_wrs; w++)
				nsge += p->wrs[w].n_sges;
			st->nwr = p->n_wrs;
			st->swr = rp_alloc(s, p->n_wrs * sizeof(*st->swr));
			st->sges = rp_alloc(s, nsge * sizeof(*st->sges));
			if (!st->swr || !st->sges)
				return -ENOMEM;
			for (uint32_t w = 0; w < p->n_wrs; w++) {
				const struct rbt_send_wr *r = &p->wrs[w];
				struct ibv_send_wr *o = &st->swr[w];
				uint64_t len = 0;
				int inl = (r->send_flags & IBV_SEND_INLINE) != 0;

				o->wr_id = r->wr_id;
				o->next = w + 1 < p->n_wrs ? &st->swr[w + 1] : NULL;
				o->sg_list = &st->sges[k];
				o->num_sge = (int)r->n_sges;
				o->opcode = (enum ibv_wr_opcode)r->opcode;
				o->send_flags = (unsigned)r->send_flags;
				o->imm_data = htobe32((uint32_t)r->imm_data);
				for (uint32_t g = 0; g < r->n_sges; g++, k++) {
					if (rp_map_sge(j, s, &r->sges[g], &st->sges[k],
						       inl, i))
						return -ENOMEM;
					len += r->sges[g].length;
				}
				switch (r->opcode) {
				case IBV_WR_RDMA_WRITE:
				case IBV_WR_RDMA_WRITE_WITH_IMM:
				case IBV_WR_RDMA_READ:
					rp_map_remote(j, s, st->qp, r->remote_addr,
						      (uint32_t)r->rkey, len,
						      &o->wr.rdma.remote_addr,
						      &o->wr.rdma.rkey, i);
					break;
				case IBV_WR_ATOMIC_CMP_AND_SWP:
				case IBV_WR_ATOMIC_FETCH_AND_ADD:
					rp_map_remote(j, s, st->qp, r->remote_addr,
						      (uint32_t)r->rkey, 8,
						      &o->wr.atomic.remote_addr,
						      &o->wr.atomic.rkey, i);
					o->wr.atomic.compare_add = r->compare_add;
					o->wr.atomic.swap = r->swap;
					break;
				default:
					break;
				}
				if (st->qp->rec.qp_type == IBV_QPT_XRC_SEND)
					o->qp_type.xrc.remote_srqn = rp_map_srqn(
						j, s, st->qp, (uint32_t)r->remote_qpn, i);
				if (st->qp->rec.qp_type == IBV_QPT_UD) {
					struct rp_ah *a = rp_ah_by_h(s, r->ah);
					const struct rp_dir_qp *d = rp_dir_qp_by_rec(
						j, s->idx, (uint32_t)r->remote_qpn);

					o->wr.ud.ah = a ? a->ah : NULL;
					o->wr.ud.remote_qpn =
						d ? d->new_qpn : (uint32_t)r->remote_qpn;
					o->wr.ud.remote_qkey = (uint32_t)r->remote_qkey;
					if (!a) {
						st->skipped = 1;
						rp_diverge(j,
							   "%s: step %d: UD send names "
							   "an unknown "
							   "address handle: skipped",
							   s->path, i);
					}
				}
			}
		} else if (e->type == RBT_EV_POST_RECV ||
			   e->type == RBT_EV_POST_SRQ_RECV) {
			uint32_t n = e->type == RBT_EV_POST_RECV
					     ? e->u.post_recv.n_wrs
					     : e->u.post_srq_recv.n_wrs;
			const struct rbt_recv_wr *wrs = e->type == RBT_EV_POST_RECV
								? e->u.post_recv.wrs
								: e->u.post_srq_recv.wrs;
			uint32_t nsge = 0, k = 0;

			if (e->type == RBT_EV_POST_RECV ? !st->qp || !st->qp->qp
							: !st->srq || !st->srq->srq) {
				st->skipped = 1;
				continue;
			}
			for (uint32_t w = 0; w < n; w++)
				nsge += wrs[w].n_sges;
			st->nwr = n;
			st->rwr = rp_alloc(s, n * sizeof(*st->rwr));
			st->sges = rp_alloc(s, nsge * sizeof(*st->sges));
			if (!st->rwr || !st->sges)
				return -ENOMEM;
			for (uint32_t w = 0; w < n; w++) {
				struct ibv_recv_wr *o = &st->rwr[w];

				o->wr_id = wrs[w].wr_id;
				o->next = w + 1 < n ? &st->rwr[w + 1] : NULL;
				o->sg_list = &st->sges[k];
				o->num_sge = (int)wrs[w].n_sges;
				for (uint32_t g = 0; g < wrs[w].n_sges; g++, k++)
					if (rp_map_sge(j, s, &wrs[w].sges[g],
						       &st->sges[k], 0, i))
						return -ENOMEM;
			}
		} else if (e->type == RBT_EV_POLL_CQ) {
			if (!st->cq || !st->cq->cq) {
				st->skipped = 1;
				continue;
			}
			/* written on the hot path: touch the pages now, not there */
			st->wcs = malloc(e->u.poll_cq.n_wcs * sizeof(*st->wcs));
			if (!st->wcs)
				return -ENOMEM;
			memset(st->wcs, 0, e->u.poll_cq.n_wcs * sizeof(*st->wcs));
		} else if (e->type == RBT_EV_QP_MODIFY) {
			if (!st->qp || !st->qp->qp)
				st->skipped = 1;
		} else if (e->type == RBT_EV_REQ_NOTIFY ||
			   e->type == RBT_EV_GET_CQ_EVENT) {
			if (!st->cq || !st->cq->cq)
				st->skipped = 1;
		}
	}
	return 0;
}

/* ---- running a timeline ----------------------------------------------------------- */
static struct rp_qp *rp_qp_by_new_qpn(struct rp_side *s, uint32_t qpn)
{
	for (int i = 0; i < s->nqp; i++)
		if (s->qp[i].qp && s->qp[i].qp->qp_num == qpn)
			return &s->qp[i];
	for (int i = 0; i < s->nxqp; i++)
		if (s->xqp[i].peer_dir >= 0 && s->xqp[i].foreign_new_qpn == qpn)
			return &s->xqp[i];
	return NULL;
}

static void rp_copy_payloads(struct rp_step *st)
{
	const struct rbt_ev_post_send *p = &st->ev.u.post_send;

	for (uint32_t w = 0; w < p->n_wrs; w++) {
		const struct rbt_blob *b = &p->wrs[w].payload;
		uint32_t off = 0;

		if (!b->len)
			continue;
		for (int g = 0; g < st->swr[w].num_sge && off < b->len; g++) {
			struct ibv_sge *sg = &st->swr[w].sg_list[g];
			uint32_t n =
				sg->length < b->len - off ? sg->length : b->len - off;

			memcpy((void *)(uintptr_t)sg->addr, b->data + off, n);
			off += n;
		}
	}
}

static void rp_step_modify(struct rp_job *j, struct rp_side *s, struct rp_step *st, int i)
{
	const struct rbt_ev_qp_modify *m = &st->ev.u.qp_modify;
	struct rp_qp *q = st->qp;
	uint32_t dest = (uint32_t)m->dest_qp_num, dlid = (uint32_t)m->ah_dlid;
	const uint8_t *dgid = m->ah_dgid.len == 16 ? m->ah_dgid.data : NULL;

	if (q->peer_dir >= 0) {
		const struct rp_dir_qp *d = &j->dir.qps[q->peer_dir];

		dest = d->new_qpn;
		dlid = d->lid;
		dgid = d->gid;
	}
	st->t_issue = rp_now_ns();
	st->ret = rp_modify_to(q->qp, m, dest, dlid, dgid);
	st->t_exit = rp_now_ns();
	if ((st->ret == 0) != (m->ret == 0))
		rp_diverge(j,
			   "%s: step %d: modify QP %llu to state %llu: recorded %s, "
			   "replay %s",
			   s->path, i, (unsigned long long)q->rec.qp_num,
			   (unsigned long long)m->qp_state,
			   m->ret ? "failed" : "succeeded",
			   st->ret ? strerror((int)st->ret) : "succeeded");
}

static void rp_step_poll(struct rp_job *j, struct rp_side *s, struct rp_step *st, int i)
{
	const struct rbt_ev_poll_cq *p = &st->ev.u.poll_cq;
	uint32_t want = p->n_wcs;
	/* Once a side has diverged, waiting the full time at every poll would only
	 * make the report late: 200 ms for a few, then 10 ms. */
	int tmo = s->timeouts == 0 ? j->poll_timeout_ms : s->timeouts < 3 ? 200 : 10;

	if (tmo > j->poll_timeout_ms)
		tmo = j->poll_timeout_ms;
	uint64_t give_up = rp_now_ns() + (uint64_t)tmo * 1000000ull;
	unsigned spins = 0;

	st->t_issue = rp_now_ns();
	while (st->got < want) {
		int n;

		/* completions an event wait already took off the CQ come first */
		if (st->cq->stash_head < st->cq->stash_n) {
			st->wcs[st->got++] = st->cq->stash[st->cq->stash_head++];
			continue;
		}
		n = ibv_poll_cq(st->cq->cq, (int)(want - st->got), st->wcs + st->got);

		if (n < 0) {
			rp_diverge(j, "%s: step %d: ibv_poll_cq failed (%d)", s->path, i,
				   n);
			break;
		}
		if (n > 0) {
			st->got += (uint32_t)n;
			continue;
		}
		if ((++spins & 255) == 0) {
			if (rp_now_ns() > give_up) {
				s->timeouts++;
				rp_diverge(j,
					   "%s: step %d: expected %u completions, got %u "
					   "within "
					   "%d ms",
					   s->path, i, want, st->got, tmo);
				break;
			}
			/* let softnic's helper thread (and on a 2-CPU machine the
			 * other side's thread) in: measured, this keeps lateness down */
			if ((spins & 1023) == 0)
				sched_yield();
		}
	}
	st->t_exit = rp_now_ns();
	st->ret = st->got;
	/* matched against the recording after the run (rp_collect_completions) */
}

static void rp_step_cq_event(struct rp_job *j, struct rp_side *s, struct rp_step *st)
{
	struct rp_cq *c = st->cq;
	struct ibv_comp_channel *ch = c->nch;
	int tmo = s->timeouts ? 50 : 1000;
	uint64_t give_up;
	struct pollfd pfd;
	struct ibv_cq *cq;
	void *ctx;

	st->t_issue = rp_now_ns();
	if (!ch) {
		st->skipped = 1;
		return;
	}
	give_up = st->t_issue + (uint64_t)tmo * 1000000ull;
	pfd.fd = ch->fd;
	pfd.events = POLLIN;
	/* The program slept here until a completion arrived after its arm. A replay
	 * running at another pace may find that completion already in the CQ, pushed
	 * before the arm (no event will come): so the wait also ends when the CQ
	 * holds completions, which are kept for the polls that follow. */
	st->ret = -1;
	if (c->stash_head == c->stash_n)
		c->stash_head = c->stash_n = 0;
	for (;;) {
		int n;

		if (c->stash_head < c->stash_n) {
			st->ret = 0;
			break;
		}
		if (poll(&pfd, 1, 0) == 1) {
			if (!ibv_get_cq_event(ch, &cq, &ctx)) {
				ibv_ack_cq_events(cq, 1);
				st->ret = 0;
			}
			break;
		}
		n = ibv_poll_cq(c->cq, (int)(c->stash_cap - c->stash_n),
				c->stash + c->stash_n);
		if (n > 0) {
			c->stash_n += (uint32_t)n;
			st->ret = 0;
			break;
		}
		if (rp_now_ns() > give_up)
			break;
		if (poll(&pfd, 1, 1) == 1)
			continue;
	}
	if (st->ret) {
		s->cq_events_missed++;
		if (getenv("RBTRACE_REPLAY_DEBUG"))
			fprintf(j->log,
				"%s: step %d: no completion event on channel fd %d\n",
				s->path, (int)(st - s->step), ch->fd);
	}
	st->t_exit = rp_now_ns();
}

struct rp_thread_arg {
	struct rp_job *j;
	struct rp_side *s;
	int from, to;
};

static void rp_run_steps(struct rp_job *j, struct rp_side *s, int from, int to)
{
	const struct rbt_replay_opts *o = j->o;
	double scale = o->timing == RBT_REPLAY_SCALE ? o->scale : 1.0;
	uint64_t anchor_rep = j->t0,
		 anchor_rec = j->same_clock ? j->rec_epoch : s->rec_epoch_ns;
	uint64_t rec_epoch = anchor_rec;

	for (int i = from; i < to; i++) {
		struct rp_step *st = &s->step[i];
		const struct rbt_event *e = &st->ev;
		struct ibv_send_wr *bs;
		struct ibv_recv_wr *br;

		if (st->skipped)
			continue;
		st->deadline = 0;
		if (i >= s->prefix &&
		    (e->type == RBT_EV_POST_SEND || e->type == RBT_EV_POST_RECV ||
		     e->type == RBT_EV_POST_SRQ_RECV)) {
			if (o->timing == RBT_REPLAY_RECORDED ||
			    o->timing == RBT_REPLAY_SCALE) {
				int64_t off = (int64_t)(st->rec_ns - rec_epoch);

				st->deadline =
					j->t0 +
					(uint64_t)(off > 0 ? (double)off * scale : 0);
			} else if (o->timing == RBT_REPLAY_DEPS) {
				int64_t off = (int64_t)(st->rec_ns - anchor_rec);

				st->deadline = anchor_rep + (uint64_t)(off > 0 ? off : 0);
			}
			st->ready = rp_now_ns();
			if (st->deadline)
				rp_wait_until(st->deadline);
		}
		switch (e->type) {
		case RBT_EV_QP_MODIFY:
			rp_step_modify(j, s, st, i);
			break;
		case RBT_EV_POST_SEND:
			rp_copy_payloads(st);
			st->t_issue = rp_now_ns();
			st->ret = ibv_post_send(st->qp->qp, st->swr, &bs);
			st->t_exit = rp_now_ns();
			break;
		case RBT_EV_POST_RECV:
			st->t_issue = rp_now_ns();
			st->ret = ibv_post_recv(st->qp->qp, st->rwr, &br);
			st->t_exit = rp_now_ns();
			break;
		case RBT_EV_POST_SRQ_RECV:
			st->t_issue = rp_now_ns();
			st->ret = ibv_post_srq_recv(st->srq->srq, st->rwr, &br);
			st->t_exit = rp_now_ns();
			break;
		case RBT_EV_POLL_CQ:
			rp_step_poll(j, s, st, i);
			anchor_rep = st->t_exit;
			anchor_rec = st->rec_exit_ns;
			break;
		case RBT_EV_REQ_NOTIFY:
			st->t_issue = rp_now_ns();
			st->ret = ibv_req_notify_cq(st->cq->cq,
						    (int)e->u.req_notify.solicited_only);
			if ((st->ret == 0) != (e->u.req_notify.ret == 0))
				rp_diverge(
					j,
					"%s: step %d: ibv_req_notify_cq returned %lld, "
					"recorded %lld",
					s->path, i, (long long)st->ret,
					(long long)e->u.req_notify.ret);
			st->t_exit = st->t_issue;
			break;
		case RBT_EV_GET_CQ_EVENT:
			rp_step_cq_event(j, s, st);
			anchor_rep = st->t_exit;
			anchor_rec = st->rec_exit_ns;
			break;
		}
		if (e->type == RBT_EV_POST_SEND || e->type == RBT_EV_POST_RECV ||
		    e->type == RBT_EV_POST_SRQ_RECV) {
			int64_t rec = e->type == RBT_EV_POST_SEND ? e->u.post_send.ret
				      : e->type == RBT_EV_POST_RECV
					      ? e->u.post_recv.ret
					      : e->u.post_srq_recv.ret;

			if ((rec == 0) != (st->ret == 0))
				rp_diverge(j,
					   "%s: step %d: %s returned %lld, recorded %lld",
					   s->path, i, rbt_event_name(e->type),
					   (long long)st->ret, (long long)rec);
		}
	}
}

/* A shared machine preempts a spinning replayer for milliseconds; SCHED_FIFO keeps
 * the schedule (the kernel's RT throttling still leaves others 5% of each CPU). */
static void rp_go_realtime(struct rp_job *j, int on)
{
	struct sched_param sp = { .sched_priority = on ? 1 : 0 };

	if (!j->o->realtime)
		return;
	if (pthread_setschedparam(pthread_self(), on ? SCHED_FIFO : SCHED_OTHER, &sp) &&
	    on)
		fprintf(j->log,
			"rbtrace replay: --realtime: cannot use SCHED_FIFO (%s); "
			"running with normal priority\n",
			strerror(errno ? errno : EPERM));
}

static void rp_side_finish(struct rp_job *j, struct rp_side *s);

static void *rp_thread(void *arg)
{
	struct rp_thread_arg *a = arg;

	rp_go_realtime(a->j, 1);

	rp_run_steps(a->j, a->s, a->from, a->to);
	rp_side_finish(a->j, a->s);
	return NULL;
}

/* -o FILE with several traces: FILE.N, or X.N.rbt for X.rbt. */
static void rp_out_name(char *buf, size_t n, const char *out, int i)
{
	size_t l = strlen(out);

	if (l > 4 && !strcmp(out + l - 4, ".rbt"))
		snprintf(buf, n, "%.*s.%d.rbt", (int)(l - 4), out, i);
	else
		snprintf(buf, n, "%s.%d", out, i);
}

/* After the run, off the hot path: each side's completions, in the order its
 * polls returned them, onto the lists of their QPs and queues. */
static void rp_collect_completions(struct rp_job *j, struct rp_side *s)
{
	for (int i = 0; i < s->nstep; i++) {
		struct rp_step *st = &s->step[i];

		if (st->ev.type != RBT_EV_POLL_CQ || st->skipped)
			continue;
		for (uint32_t k = 0; k < st->got; k++) {
			const struct ibv_wc *w = &st->wcs[k];
			struct rp_qp *q = rp_qp_by_new_qpn(s, w->qp_num);
			struct rp_wcrec r = {
				.wr_id = w->wr_id,
				.status = w->status,
				.opcode = w->opcode,
				.byte_len = w->byte_len,
				.imm = be32toh(w->imm_data),
				.wc_flags = w->wc_flags,
			};

			if (!q) {
				rp_diverge(j,
					   "%s: step %d: completion for an unknown QP %u",
					   s->path, i, w->qp_num);
				continue;
			}
			rp_wclist_push(
				&q->rep_wc[rp_wc_is_recv(q, r.status, r.opcode, r.wr_id)],
				&r);
		}
	}
}

/* Completions still owed on a CQ: per QP and queue served by CQ ci, what the
 * recording saw minus what the replay has so far. */
static uint32_t rp_cq_owed(const struct rp_side *s, int ci)
{
	uint32_t owed = 0;

	for (int i = 0; i < s->nqp; i++) {
		const struct rp_qp *q = &s->qp[i];

		for (int d = 0; d < 2; d++)
			if ((d ? rp_qp_recv_on_cq(s, q, ci + 1) : q->scq == ci + 1) &&
			    q->rep_wc[d].n < q->rec_wc[d].n)
				owed += q->rec_wc[d].n - q->rep_wc[d].n;
	}
	for (int i = 0; i < s->nxqp; i++) {
		const struct rp_qp *q = &s->xqp[i];

		if (q->rcq == ci + 1 && q->rep_wc[1].n < q->rec_wc[1].n)
			owed += q->rec_wc[1].n - q->rep_wc[1].n;
	}
	return owed;
}

/* After a side's last step, before the DONE barrier (the peer may still be
 * sending): a CQ shared by several QPs (or by a QP's two queues) gives each poll
 * whichever completion the device queued first, so when the program stopped
 * polling with completions left on the CQ, the replay's polls - the same number
 * of completions - can have taken another QP's. The replay then owes some QPs
 * completions the recording saw: keep polling that CQ until none is owed or the
 * poll timeout. What this takes off the CQ (and what an event wait stashed and no
 * poll step took) joins its QP's list as a completion the program never polled;
 * the report accepts those beyond the recorded count only as successes. */
static void rp_drain_owed(struct rp_job *j, struct rp_side *s)
{
	for (int ci = 0; ci < s->ncq; ci++) {
		struct rp_cq *c = &s->cq[ci];
		int tmo = s->timeouts == 0  ? j->poll_timeout_ms
			  : s->timeouts < 3 ? 200
					    : 10;
		uint64_t give_up;
		unsigned spins = 0;

		if (!c->cq || !rp_cq_owed(s, ci))
			continue;
		if (tmo > j->poll_timeout_ms)
			tmo = j->poll_timeout_ms;
		give_up = rp_now_ns() + (uint64_t)tmo * 1000000ull;
		while (rp_cq_owed(s, ci)) {
			struct ibv_wc wc[16];
			int n = 0;

			if (c->stash && c->stash_head < c->stash_n) {
				wc[0] = c->stash[c->stash_head++];
				n = 1;
			} else {
				n = ibv_poll_cq(c->cq, 16, wc);
			}
			if (n < 0) {
				rp_diverge(j, "%s: ibv_poll_cq failed (%d)", s->path, n);
				break;
			}
			for (int k = 0; k < n; k++) {
				struct rp_qp *q = rp_qp_by_new_qpn(s, wc[k].qp_num);
				struct rp_wcrec r = {
					.wr_id = wc[k].wr_id,
					.status = wc[k].status,
					.opcode = wc[k].opcode,
					.byte_len = wc[k].byte_len,
					.imm = be32toh(wc[k].imm_data),
					.wc_flags = wc[k].wc_flags,
					.unpolled = 1,
				};

				if (!q) {
					rp_diverge(j,
						   "%s: completion for an unknown QP %u",
						   s->path, wc[k].qp_num);
					continue;
				}
				rp_wclist_push(&q->rep_wc[rp_wc_is_recv(
						       q, r.status, r.opcode, r.wr_id)],
					       &r);
			}
			if (n)
				continue;
			if ((++spins & 255) == 0) {
				/* the report names what is still missing */
				if (rp_now_ns() > give_up) {
					s->timeouts++;
					break;
				}
				if ((spins & 1023) == 0)
					sched_yield();
			}
		}
	}
}

static void rp_side_finish(struct rp_job *j, struct rp_side *s)
{
	rp_collect_completions(j, s);
	rp_drain_owed(j, s);
}

/* ---- the whole run ---------------------------------------------------------------- */
static void rp_final_states(struct rp_job *j, struct rp_side *s)
{
	for (int i = 0; i < s->nqp; i++) {
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr ia;

		if (!s->qp[i].qp)
			continue;
		memset(&a, 0, sizeof(a));
		if (ibv_query_qp(s->qp[i].qp, &a, IBV_QP_STATE, &ia) == 0)
			s->qp[i].replay_state = a.qp_state;
		else
			s->qp[i].replay_state = 99;
	}
	(void)j;
}

int rbt_replay_run(const char *const *traces, int ntraces,
		   const struct rbt_replay_opts *o, struct rbt_replay_summary *sum)
{
	struct rp_job *j;
	int rc = 0;

	if (o->responder)
		return rp_responder_run(o);
	if (ntraces < 1 || ntraces > RP_MAX_SIDES) {
		fprintf(o->log ? o->log : stderr,
			"rbtrace replay: give 1 to %d traces (got %d)\n", RP_MAX_SIDES,
			ntraces);
		return -EINVAL;
	}
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->o = o;
	j->log = o->log ? o->log : stderr;
	j->net_fd = -1;
	j->nside = ntraces;
	j->poll_timeout_ms = o->poll_timeout_ms > 0 ? o->poll_timeout_ms : 5000;
	pthread_mutex_init(&j->rep.lock, NULL);
	memset(sum, 0, sizeof(*sum));
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	rp_clock_init();

	for (int i = 0; i < ntraces && !rc; i++) {
		j->side[i].idx = i;
		rc = rp_side_load(j, &j->side[i], traces[i]);
	}
	if (rc)
		goto out;
	j->same_clock = 1;
	j->rec_epoch = UINT64_MAX;
	for (int i = 0; i < ntraces; i++) {
		if (strcmp(j->side[i].host, j->side[0].host))
			j->same_clock = 0;
		if (j->side[i].nstep && j->side[i].rec_epoch_ns < j->rec_epoch)
			j->rec_epoch = j->side[i].rec_epoch_ns;
	}
	{
		const char *tmp = getenv("TMPDIR");

		snprintf(j->xrcd_prefix, sizeof(j->xrcd_prefix),
			 "%s/rbtrace-xrcd-%d-%llx", tmp && *tmp ? tmp : "/tmp",
			 (int)getpid(), (unsigned long long)rp_now_ns());
	}
	/* Network peer first: whether QPs pair up depends on it. */
	if (o->listen || o->connect) {
		rc = rp_net_open(j);
		if (rc)
			goto out;
	}
	rc = rp_check_pairs(j);
	if (rc)
		goto out;
	for (int i = 0; i < ntraces && !rc; i++) {
		struct rp_side *s = &j->side[i];

		rc = rp_open_device(j, s, &s->ctx);
		if (rc)
			break;
		if (ibv_query_device(s->ctx, &s->dattr) ||
		    ibv_query_port(s->ctx, 1, &s->pattr)) {
			fprintf(j->log,
				"rbtrace replay: querying the device failed: %s\n",
				strerror(errno));
			rc = -EIO;
			break;
		}
		if (ibv_query_gid(s->ctx, 1, 0, &s->gid))
			memset(&s->gid, 0, sizeof(s->gid));
		rc = rp_check_side(j, s);
	}
	for (int i = 0; i < ntraces && !rc; i++)
		rc = rp_build_side(j, &j->side[i]);
	for (int i = 0; i < ntraces && !rc; i++) {
		struct rp_side *s = &j->side[i];

		for (int q = 0; q < s->nqp; q++)
			if (s->qp[q].is_global &&
			    ibv_query_gid(s->ctx, (uint8_t)s->qp[q].port,
					  (int)s->qp[q].sgid_index, &s->gid))
				memset(&s->gid, 0, sizeof(s->gid));
		rc = rp_publish_side(j, s);
	}
	if (!rc && j->net_fd >= 0)
		rc = rp_net_exchange(j);
	for (int i = 0; i < ntraces && !rc; i++)
		rc = rp_prepare_side(j, &j->side[i]);
	if (rc)
		goto out;

	/* Prefixes (connect, pre-post receives), then everyone starts together. */
	j->t0 = rp_now_ns();
	for (int i = 0; i < ntraces; i++)
		rp_run_steps(j, &j->side[i], 0, j->side[i].prefix);
	if (j->net_fd >= 0 && (rc = rp_net_barrier(j, "READY")) < 0)
		goto out;
	/* Everyone starts 2 ms after the barrier (two processes: the later of
	 * their two proposals): time to get off the barrier's syscalls, nothing
	 * more - every QP is connected by now, and a responder in RTR or RTS
	 * receives at once (tests/softnic_race_test.cc holds softnic to that). */
	j->t0 = rp_now_ns() + 2000000;
	if (j->net_fd >= 0 && !j->peer_is_responder &&
	    (rc = rp_net_agree_t0(j, &j->t0)) < 0)
		goto out;
	{
		struct rp_thread_arg args[RP_MAX_SIDES];

		for (int i = 0; i < ntraces; i++) {
			args[i] =
				(struct rp_thread_arg){ j, &j->side[i], j->side[i].prefix,
							j->side[i].nstep };
			if (ntraces == 1 ||
			    pthread_create(&j->side[i].thr, NULL, rp_thread, &args[i]))
				j->side[i].thr = 0;
		}
		if (ntraces == 1) {
			rp_go_realtime(j, 1);
			rp_run_steps(j, &j->side[0], args[0].from, args[0].to);
			rp_side_finish(j, &j->side[0]);
			rp_go_realtime(j, 0);
		}
		for (int i = 0; i < ntraces; i++)
			if (j->side[i].thr)
				pthread_join(j->side[i].thr, NULL);
			else if (ntraces > 1) {
				rp_run_steps(j, &j->side[i], args[i].from, args[i].to);
				rp_side_finish(j, &j->side[i]);
			}
	}
	/* Let the peer finish before anyone destroys a QP it still talks to. */
	if (j->net_fd >= 0)
		rp_net_barrier(j, "DONE");
	for (int i = 0; i < ntraces; i++)
		rp_final_states(j, &j->side[i]);
	rp_report_print(j, sum);
	if (o->out)
		for (int i = 0; i < ntraces; i++) {
			char path[4096];
			int r;

			if (ntraces == 1)
				snprintf(path, sizeof(path), "%s", o->out);
			else
				rp_out_name(path, sizeof(path), o->out, i);
			r = rp_record_side(j, &j->side[i], path);
			if (r < 0) {
				/* One line: the next file would fail the same way
				 * (a full disk). */
				fprintf(j->log, "rbtrace replay: -o %s: %s\n", path,
					rbt_strerror(r));
				rc = r;
				break;
			}
		}
out:
	rp_net_close(j);
	for (int i = 0; i < ntraces; i++) {
		rp_teardown_side(&j->side[i]);
		rp_side_free(&j->side[i]);
	}
	for (int i = 0; i < j->rep.ndiv; i++)
		free(j->rep.div[i]);
	free(j->rep.div);
	free(j->dir.qps);
	free(j->dir.mrs);
	free(j->dir.srqs);
	pthread_mutex_destroy(&j->rep.lock);
	free(j);
	return rc;
}
