/* meet.c - the meeting files, the device and the QP walk of meet.h, shared by
 * replay_herd and shm_prog. It owns no state beyond the directory's name, and must never issue a verb a program of this shape would not. */
#define _GNU_SOURCE
#include "tests/progs/meet.h"

#include "tests/progs/prog_util.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *meet_dir = ".";

double meet_now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void meet_publish(const char *name, const struct meet_info *i)
{
	char p[512], t[520];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", meet_dir, name);
	snprintf(t, sizeof(t), "%s.tmp", p);
	f = fopen(t, "w");
	if (!f ||
	    fprintf(f, "%u %u %u %u %llu\n", i->lid, i->qpn, i->qpn2, i->rkey, i->addr) <
		    0 ||
	    fclose(f) || rename(t, p))
		prog_fail("cannot write %s", p);
}

struct meet_info meet_lookup(const char *name)
{
	double t0 = meet_now_s();
	struct meet_info i;
	char p[512];

	snprintf(p, sizeof(p), "%s/%s", meet_dir, name);
	for (;;) {
		FILE *f = fopen(p, "r");

		if (f) {
			int n = fscanf(f, "%u %u %u %u %llu", &i.lid, &i.qpn, &i.qpn2,
				       &i.rkey, &i.addr);

			fclose(f);
			if (n == 5)
				return i;
		}
		if (meet_now_s() - t0 > MEET_TIMEOUT_S)
			prog_fail("%s never appeared", name);
		usleep(10000);
	}
}

void meet_dev_open(struct meet_dev *d, int cqe)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_port_attr pa;

	if (!l || !l[0])
		prog_fail("no RDMA device");
	d->ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	if (!d->ctx || ibv_query_port(d->ctx, 1, &pa))
		prog_fail("cannot open the device");
	d->lid = pa.lid;
	d->pd = ibv_alloc_pd(d->ctx);
	d->cq = ibv_create_cq(d->ctx, cqe, NULL, NULL, 0);
	if (!d->pd || !d->cq)
		prog_fail("cannot create a PD or CQ");
}

struct ibv_qp *meet_qp_new(struct meet_dev *d, enum ibv_qp_type type, uint32_t wr,
			   uint32_t qkey)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = d->cq,
		.recv_cq = d->cq,
		.qp_type = type,
		.cap = { .max_send_wr = wr,
			 .max_recv_wr = wr,
			 .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	struct ibv_qp *qp = ibv_create_qp(d->pd, &ia);
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	if (!qp)
		prog_fail("ibv_create_qp: %s", strerror(errno));
	if (type == IBV_QPT_UD) {
		a.qkey = qkey;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	if (ibv_modify_qp(qp, &a, mask))
		prog_fail("modify to INIT failed");
	return qp;
}

void meet_qp_up(struct ibv_qp *qp, unsigned dlid, unsigned dqpn)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	int mask = IBV_QP_STATE;

	if (qp->qp_type != IBV_QPT_UD) {
		a.path_mtu = IBV_MTU_4096;
		a.dest_qp_num = dqpn;
		a.rq_psn = 0;
		a.ah_attr.dlid = (uint16_t)dlid;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (qp->qp_type == IBV_QPT_RC) {
			a.max_dest_rd_atomic = 1;
			a.min_rnr_timer = 12;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
	}
	if (ibv_modify_qp(qp, &a, mask))
		prog_fail("modify to RTR failed");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (qp->qp_type == IBV_QPT_RC) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	if (ibv_modify_qp(qp, &a, mask))
		prog_fail("modify to RTS failed");
}

struct ibv_mr *meet_reg(struct meet_dev *d, void *buf, size_t len)
{
	struct ibv_mr *mr = ibv_reg_mr(d->pd, buf, len,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

	if (!mr)
		prog_fail("ibv_reg_mr of %zu bytes: %s", len, strerror(errno));
	return mr;
}

int meet_poll(struct meet_dev *d, struct ibv_wc *wc, double deadline)
{
	int n;

	while ((n = ibv_poll_cq(d->cq, 1, wc)) == 0) {
		if (meet_now_s() > deadline)
			return 0;
		sched_yield();
	}
	if (n < 0)
		prog_fail("ibv_poll_cq failed");
	if (wc->status != IBV_WC_SUCCESS)
		prog_fail("completion wr_id %llu: %s", (unsigned long long)wc->wr_id,
			  ibv_wc_status_str(wc->status));
	return 1;
}

int meet_ud_send(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len, uint32_t lkey,
		 struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct ibv_sge sg = { (uintptr_t)addr, len, lkey };
	struct ibv_send_wr wr = { .wr_id = id,
				  .sg_list = &sg,
				  .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;

	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = qkey;
	return ibv_post_send(qp, &wr, &bad);
}

struct meet_info meet_client(struct ibv_qp *qp, unsigned c, const struct meet_info *mine,
			     const char *peer)
{
	char name[64];
	struct meet_info p;

	snprintf(name, sizeof(name), "client-%u", c);
	meet_publish(name, mine);
	snprintf(name, sizeof(name), "%s-%u", peer, c);
	p = meet_lookup(name);
	meet_qp_up(qp, p.lid, p.qpn);
	snprintf(name, sizeof(name), "%s-%u-ready", peer, c);
	meet_lookup(name);
	return p;
}
