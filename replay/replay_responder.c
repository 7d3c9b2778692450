/* replay_responder.c - `rbtrace replay --responder`: stands in for a missing
 * peer of RC/UC QPs. Told over the replayer's channel (replay_net.c) what the
 * traced end needs, it builds QPs and MRs of the recorded sizes, posts the
 * receives the traffic needs and sends what the traced end had received.
 *
 * Owns its own verbs objects; it has no trace. Must never touch memory outside
 * the MRs it registered, and never wait without the channel's timeout.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replay/replay_int.h"

/* ---- the responder ------------------------------------------------------------------ */
struct rs_send {
	uint32_t qpn; /* recorded qpn of the stand-in */
	uint64_t after, imm;
	int with_imm;
	uint32_t len;
	int done;
};

struct rs_qp {
	uint32_t rec_qpn, peer_rec_qpn, type, peer_qpn, peer_lid, sq_psn, rq_psn, mtu,
		rd_atomic, sgid_index;
	int is_global;
	uint8_t peer_gid[16];
	uint64_t nrecv, maxlen, posted, received, sent, send_done;
	uint32_t depth;
	int *sidx, nsidx, cur; /* this QP's scripted sends, in order */
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
};

struct rs_mr {
	uint32_t rkey;
	uint64_t lo, hi;
	uint8_t *buf;
	struct ibv_mr *mr;
};

struct responder {
	FILE *log;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_port_attr pattr;
	union ibv_gid gid;
	struct rs_qp *qp;
	int nqp;
	struct rs_mr *mr;
	int nmr;
	struct rs_send *snd;
	int nsnd;
	struct ibv_mr *smr;
	uint8_t *sbuf;
	uint64_t smax;
};

static struct rs_qp *rs_qp_find(struct responder *r, uint32_t rec_qpn)
{
	for (int i = 0; i < r->nqp; i++)
		if (r->qp[i].rec_qpn == rec_qpn)
			return &r->qp[i];
	return NULL;
}

static int rs_read_needs(struct responder *r, int fd)
{
	char line[512];

	for (;;) {
		int n = rp_readline(fd, line, sizeof(line), RP_NET_TIMEOUT_MS);

		if (n < 0)
			return n;
		if (!strcmp(line, "E"))
			return 0;
		if (!strncmp(line, "NQ ", 3)) {
			struct rs_qp q = { 0 };
			unsigned long long type, depth, nrecv, maxlen;
			void *v = realloc(r->qp, (size_t)(r->nqp + 1) * sizeof(*r->qp));

			if (!v)
				return -ENOMEM;
			r->qp = v;
			if (sscanf(line,
				   "NQ %u %u %llu %llu %u %u %u %u %u %u %d %u %llu %llu",
				   &q.rec_qpn, &q.peer_rec_qpn, &type, &depth,
				   &q.peer_qpn, &q.peer_lid, &q.rq_psn, &q.sq_psn, &q.mtu,
				   &q.rd_atomic, &q.is_global, &q.sgid_index, &nrecv,
				   &maxlen) != 14)
				goto bad;
			/* our sq_psn is the peer's rq_psn and the other way round */
			q.type = (uint32_t)type;
			q.depth = (uint32_t)(depth ? depth : 64);
			q.nrecv = nrecv;
			q.maxlen = maxlen ? maxlen : 1;
			r->qp[r->nqp++] = q;
		} else if (!strncmp(line, "NG ", 3)) {
			unsigned qpn;
			char gid[64];
			struct rs_qp *q;

			if (sscanf(line, "NG %u %63s", &qpn, gid) != 2 ||
			    !(q = rs_qp_find(r, qpn)))
				goto bad;
			rp_unhex(q->peer_gid, gid);
		} else if (!strncmp(line, "NM ", 3)) {
			unsigned rkey;
			unsigned long long lo, hi;
			int k;

			if (sscanf(line, "NM %u %llu %llu", &rkey, &lo, &hi) != 3)
				goto bad;
			for (k = 0; k < r->nmr; k++)
				if (r->mr[k].rkey == rkey)
					break;
			if (k == r->nmr) {
				void *v = realloc(r->mr,
						  (size_t)(r->nmr + 1) * sizeof(*r->mr));

				if (!v)
					return -ENOMEM;
				r->mr = v;
				r->mr[r->nmr++] = (struct rs_mr){ .rkey = rkey,
								  .lo = lo,
								  .hi = hi };
			}
			if (lo < r->mr[k].lo)
				r->mr[k].lo = lo;
			if (hi > r->mr[k].hi)
				r->mr[k].hi = hi;
		} else if (!strncmp(line, "NS ", 3)) {
			struct rs_send s = { 0 };
			unsigned long long after, wi, len, imm;
			void *v =
				realloc(r->snd, (size_t)(r->nsnd + 1) * sizeof(*r->snd));

			if (!v)
				return -ENOMEM;
			r->snd = v;
			if (sscanf(line, "NS %u %llu %llu %llu %llu", &s.qpn, &after, &wi,
				   &len, &imm) != 5)
				goto bad;
			s.after = after;
			s.with_imm = wi != 0;
			s.len = (uint32_t)len;
			s.imm = imm;
			if (len > r->smax)
				r->smax = len;
			r->snd[r->nsnd++] = s;
		} else {
			goto bad;
		}
	}
bad:
	fprintf(r->log, "rbtrace replay --responder: bad request line '%s'\n", line);
	return -EPROTO;
}

static int rs_post_recvs(struct rs_qp *q)
{
	while (q->posted < q->nrecv && q->posted - q->received < q->depth) {
		uint32_t slot = (uint32_t)(q->posted % q->depth);
		struct ibv_sge sge = { .addr = (uintptr_t)(q->buf +
							   (uint64_t)slot * q->maxlen),
				       .length = (uint32_t)q->maxlen,
				       .lkey = q->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = q->posted,
					  .sg_list = &sge,
					  .num_sge = 1 },
				   *bad;

		if (ibv_post_recv(q->qp, &wr, &bad))
			return -EIO;
		q->posted++;
	}
	return 0;
}

/* Whole pages: a device may pin (and read) every page an MR touches. */
static size_t rs_pages(size_t n)
{
	return (n + 4095) & ~(size_t)4095;
}

static int rs_setup(struct responder *r)
{
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	int cqe = 16;

	r->pd = ibv_alloc_pd(r->ctx);
	for (int i = 0; i < r->nqp; i++)
		cqe += (int)r->qp[i].depth * 2;
	r->cq = r->pd ? ibv_create_cq(r->ctx, cqe, NULL, NULL, 0) : NULL;
	if (!r->cq)
		return -EIO;
	for (int i = 0; i < r->nmr; i++) {
		struct rs_mr *m = &r->mr[i];
		size_t len = m->hi > m->lo ? m->hi - m->lo : 1;

		if (len > (1ull << 32) ||
		    posix_memalign((void **)&m->buf, 4096, rs_pages(len)))
			return -ENOMEM;
		memset(m->buf, 0x5a, len);
		m->mr = ibv_reg_mr(r->pd, m->buf, len, acc);
		if (!m->mr)
			return -EIO;
	}
	if (posix_memalign((void **)&r->sbuf, 4096, rs_pages(r->smax + 64)))
		return -ENOMEM;
	memset(r->sbuf, 0xa5, r->smax + 64);
	r->smr = ibv_reg_mr(r->pd, r->sbuf, r->smax + 64, acc);
	if (!r->smr)
		return -EIO;
	for (int i = 0; i < r->nqp; i++) {
		struct rs_qp *q = &r->qp[i];
		struct ibv_qp_init_attr ia = {
			.send_cq = r->cq,
			.recv_cq = r->cq,
			.cap = { .max_send_wr = q->depth,
				 .max_recv_wr = q->depth,
				 .max_send_sge = 1,
				 .max_recv_sge = 1 },
			.qp_type = (enum ibv_qp_type)q->type,
		};
		struct ibv_qp_attr a;

		if (posix_memalign((void **)&q->buf, 4096,
				   rs_pages(q->maxlen * q->depth)))
			return -ENOMEM;
		q->mr = ibv_reg_mr(r->pd, q->buf, q->maxlen * q->depth, acc);
		q->qp = q->mr ? ibv_create_qp(r->pd, &ia) : NULL;
		if (!q->qp)
			return -EIO;
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_INIT;
		a.port_num = 1;
		a.qp_access_flags = (unsigned)acc;
		if (ibv_modify_qp(q->qp, &a,
				  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS))
			return -EIO;
		if (rs_post_recvs(q))
			return -EIO;
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTR;
		a.path_mtu = (enum ibv_mtu)(q->mtu ? q->mtu : r->pattr.active_mtu);
		a.dest_qp_num = q->peer_qpn;
		a.rq_psn = q->rq_psn;
		a.max_dest_rd_atomic = (uint8_t)(q->rd_atomic ? q->rd_atomic : 1);
		a.min_rnr_timer = 1;
		a.ah_attr.dlid = (uint16_t)q->peer_lid;
		a.ah_attr.port_num = 1;
		if (q->is_global) {
			a.ah_attr.is_global = 1;
			memcpy(a.ah_attr.grh.dgid.raw, q->peer_gid, 16);
			a.ah_attr.grh.sgid_index = (uint8_t)q->sgid_index;
			a.ah_attr.grh.hop_limit = 1;
		}
		if (ibv_modify_qp(q->qp, &a,
				  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  (q->type == IBV_QPT_RC
						   ? IBV_QP_MAX_DEST_RD_ATOMIC |
							     IBV_QP_MIN_RNR_TIMER
						   : 0)))
			return -EIO;
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = q->sq_psn;
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		if (ibv_modify_qp(q->qp, &a,
				  IBV_QP_STATE | IBV_QP_SQ_PSN |
					  (q->type == IBV_QPT_RC
						   ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
							     IBV_QP_RNR_RETRY |
							     IBV_QP_MAX_QP_RD_ATOMIC
						   : 0)))
			return -EIO;
	}
	return 0;
}

static int rs_publish(struct responder *r, int fd)
{
	char gid[40];

	rp_hex(gid, r->gid.raw);
	for (int i = 0; i < r->nqp; i++)
		if (rp_sendf(fd, "Q 0 %u %u %u %u %u 0 %s\n", r->qp[i].rec_qpn,
			     r->qp[i].peer_rec_qpn, r->qp[i].qp->qp_num, r->qp[i].type,
			     r->pattr.lid, gid))
			return -EPIPE;
	for (int i = 0; i < r->nmr; i++)
		if (rp_sendf(fd, "M 0 %llu %llu %llu %u %u\n",
			     (unsigned long long)r->mr[i].lo,
			     (unsigned long long)(r->mr[i].hi - r->mr[i].lo),
			     (unsigned long long)(uintptr_t)r->mr[i].buf, r->mr[i].rkey,
			     r->mr[i].mr->rkey))
			return -EPIPE;
	return rp_sendf(fd, "E\n");
}

static void rs_try_sends(struct responder *r)
{
	for (int k = 0; k < r->nqp; k++) {
		struct rs_qp *q = &r->qp[k];

		/* in order per QP, each once the peer's messages it answered arrived */
		while (q->cur < q->nsidx) {
			struct rs_send *s = &r->snd[q->sidx[q->cur]];
			struct ibv_sge sge = { .addr = (uintptr_t)r->sbuf,
					       .length = s->len,
					       .lkey = r->smr->lkey };
			struct ibv_send_wr wr, *bad;

			if (q->received < s->after || q->sent - q->send_done >= q->depth)
				break;
			memset(&wr, 0, sizeof(wr));
			wr.wr_id = 1ull << 63 | (uint64_t)q->cur;
			wr.sg_list = &sge;
			wr.num_sge = 1;
			wr.opcode = s->with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
			wr.imm_data = htobe32((uint32_t)s->imm);
			wr.send_flags = IBV_SEND_SIGNALED;
			if (ibv_post_send(q->qp, &wr, &bad))
				return;
			s->done = 1;
			q->sent++;
			q->cur++;
		}
	}
}

int rp_responder_run(const struct rbt_replay_opts *o)
{
	struct responder r = { .log = o->log ? o->log : stderr };
	struct rp_job jj = { .o = o, .log = r.log, .net_fd = -1 };
	char line[256];
	int fd, rc = 0;
	unsigned long iter = 0;

	if (!o->listen && !o->connect) {
		fprintf(r.log, "rbtrace replay --responder: give --listen PORT (or "
			       "--connect)\n");
		return -EINVAL;
	}
	rc = rp_open_device(&jj, NULL, &r.ctx);
	if (rc)
		return rc;
	if (ibv_query_port(r.ctx, 1, &r.pattr) || ibv_query_gid(r.ctx, 1, 0, &r.gid))
		memset(&r.gid, 0, sizeof(r.gid));
	fd = o->listen ? rp_listen_accept(r.log, o->listen)
		       : rp_connect(r.log, o->connect);
	if (fd < 0) {
		ibv_close_device(r.ctx);
		return fd;
	}
	if (rp_sendf(fd, "HELLO responder\n") ||
	    rp_readline(fd, line, sizeof(line), RP_NET_TIMEOUT_MS) < 0 ||
	    strncmp(line, "HELLO replayer", 14)) {
		fprintf(r.log,
			"rbtrace replay --responder: the peer is not a replayer\n");
		rc = -EPROTO;
		goto out;
	}
	rc = rs_read_needs(&r, fd);
	for (int i = 0; !rc && i < r.nsnd; i++) {
		struct rs_qp *q = rs_qp_find(&r, r.snd[i].qpn);
		int *v;

		if (!q)
			continue;
		v = realloc(q->sidx, (size_t)(q->nsidx + 1) * sizeof(*v));
		if (!v) {
			rc = -ENOMEM;
			break;
		}
		q->sidx = v;
		q->sidx[q->nsidx++] = i;
	}
	if (!rc)
		rc = rs_setup(&r);
	if (rc) {
		fprintf(r.log, "rbtrace replay --responder: cannot stand in: %s\n",
			strerror(-rc));
		rp_sendf(fd, "X cannot build the stand-in resources\n");
		goto out;
	}
	rc = rs_publish(&r, fd);
	if (!rc && (rp_readline(fd, line, sizeof(line), RP_NET_TIMEOUT_MS * 4) < 0 ||
		    strcmp(line, "READY") || rp_sendf(fd, "READY\n")))
		rc = -EPROTO;
	while (!rc) {
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(r.cq, 16, wc);

		for (int i = 0; i < n; i++) {
			struct rs_qp *q = NULL;

			for (int k = 0; k < r.nqp; k++)
				if (r.qp[k].qp->qp_num == wc[i].qp_num)
					q = &r.qp[k];
			if (!q)
				continue;
			if (wc[i].opcode & IBV_WC_RECV) {
				q->received++;
				rs_post_recvs(q);
			} else {
				q->send_done++;
			}
		}
		rs_try_sends(&r);
		if ((++iter & 1023) == 0) {
			struct pollfd p = { .fd = fd, .events = POLLIN };

			if (poll(&p, 1, 0) == 1) {
				if (rp_readline(fd, line, sizeof(line), 1000) < 0 ||
				    strcmp(line, "DONE"))
					rc = -ECONNRESET;
				else
					rp_sendf(fd, "DONE\n");
				break;
			}
			if ((iter & 16383) == 0)
				sched_yield();
		}
	}
	fprintf(r.log, "rbtrace replay --responder: stood in for %d QP(s), %d MR(s); ",
		r.nqp, r.nmr);
	for (int i = 0; i < r.nqp; i++)
		fprintf(r.log, "QP %u: %llu received, %llu sent%s", r.qp[i].rec_qpn,
			(unsigned long long)r.qp[i].received,
			(unsigned long long)r.qp[i].sent, i + 1 < r.nqp ? "; " : "\n");
	if (!r.nqp)
		fputc('\n', r.log);
out:
	close(fd);
	for (int i = 0; i < r.nqp; i++) {
		if (r.qp[i].qp)
			ibv_destroy_qp(r.qp[i].qp);
		if (r.qp[i].mr)
			ibv_dereg_mr(r.qp[i].mr);
		free(r.qp[i].buf);
		free(r.qp[i].sidx);
	}
	for (int i = 0; i < r.nmr; i++) {
		if (r.mr[i].mr)
			ibv_dereg_mr(r.mr[i].mr);
		free(r.mr[i].buf);
	}
	if (r.smr)
		ibv_dereg_mr(r.smr);
	free(r.sbuf);
	if (r.cq)
		ibv_destroy_cq(r.cq);
	if (r.pd)
		ibv_dealloc_pd(r.pd);
	ibv_close_device(r.ctx);
	free(r.qp);
	free(r.mr);
	free(r.snd);
	return rc;
}
