/*
 * mw_prog - a verbs program that uses every memory-window verb once, for the
 * recorder's test (softnic_mw_test runs it under `rbtrace record --softnic`
 * and looks for each call in the trace). Two RC QPs of one process connected
 * to each other (qb owns the windows, qa uses them):
 * ibv_alloc_mw of both types, ibv_bind_mw (type 1), an RDMA WRITE and READ
 * through that window, a BIND_MW WR (type 2), SEND_WITH_INV of its key,
 * ibv_wr_bind_mw and ibv_wr_local_inv, ibv_dealloc_mw.
 * Prints the keys it used ("type1_key=... type2_key=... type2_key2=...")
 * and exits 0 only if every completion was the expected one. It must never
 * hang: every wait is bounded.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include "tests/progs/prog_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct ibv_cq *cq;

static void expect(uint64_t id, enum ibv_wc_opcode op, unsigned flags)
{
	struct ibv_wc wc;
	struct timespec t0, t;
	int n;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 5)
			prog_fail("no completion for wr_id %llu", (unsigned long long)id);
	}
	if (n < 0 || wc.status != IBV_WC_SUCCESS || wc.wr_id != id || wc.opcode != op ||
	    (wc.wc_flags & flags) != flags)
		prog_fail("wr_id %llu: got wr_id %llu status %s opcode %d",
			  (unsigned long long)id, (unsigned long long)wc.wr_id,
			  ibv_wc_status_str(wc.status), (int)wc.opcode);
}

static void post(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;

	if (ibv_post_send(qp, wr, &bad))
		prog_fail("ibv_post_send of wr_id %llu failed",
			  (unsigned long long)wr->wr_id);
}

static struct ibv_qp *make_qp(struct ibv_context *ctx, struct ibv_pd *pd)
{
	struct ibv_qp_init_attr_ex ia = { 0 };
	struct prog_rc rc = { 0 };
	struct ibv_qp *qp;

	ia.send_cq = ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ia.pd = pd;
	ia.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
			    IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_RDMA_WRITE |
			    IBV_QP_EX_WITH_RDMA_READ;
	qp = ibv_create_qp_ex(ctx, &ia);
	if (!qp)
		prog_fail("ibv_create_qp_ex failed");
	rc.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (prog_rc_init(qp, &rc))
		prog_fail("INIT failed");
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest, uint16_t lid)
{
	struct prog_rc rc = prog_rc_patient(lid, dest);

	rc.mtu = IBV_MTU_4096;
	rc.rq_psn = rc.sq_psn = 7;
	rc.min_rnr_timer = 1;
	if (prog_rc_rtr(qp, &rc))
		prog_fail("RTR failed");
	if (prog_rc_rts(qp, &rc))
		prog_fail("RTS failed");
}

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr, *wmr;
	struct ibv_qp *qa, *qb;
	struct ibv_qp_ex *qx;
	struct ibv_mw *mw1, *mw2;
	struct ibv_port_attr pa;
	struct ibv_send_wr wr;
	struct ibv_recv_wr rwr = { 0 }, *rbad;
	struct ibv_sge sge;
	struct ibv_mw_bind mb = { 0 };
	struct ibv_mw_bind_info bi = { 0 };
	static char buf[8192] __attribute__((aligned(4096)));
	static char win[8192] __attribute__((aligned(4096)));
	uint32_t k1, k2, k3;

	if (!l || !l[0] || !(ctx = ibv_open_device(l[0])))
		prog_fail("no RDMA device");
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	wmr = ibv_reg_mr(pd, win, sizeof(win),
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	if (!pd || !cq || !mr || !wmr)
		prog_fail("set-up failed");

	/* qa requests, qb (the windows' QP) responds; connected to each other */
	qa = make_qp(ctx, pd);
	qb = make_qp(ctx, pd);
	if (!(qx = ibv_qp_to_qp_ex(qb)) || ibv_query_port(ctx, 1, &pa))
		prog_fail("QP set-up failed");
	connect_qp(qa, qb->qp_num, pa.lid);
	connect_qp(qb, qa->qp_num, pa.lid);

	mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	if (!mw1 || !mw2)
		prog_fail("ibv_alloc_mw failed");

	/* type 1 through the verb; the window grants what the MR does not */
	mb.wr_id = 101;
	mb.send_flags = IBV_SEND_SIGNALED;
	mb.bind_info.mr = wmr;
	mb.bind_info.addr = (uint64_t)(uintptr_t)win;
	mb.bind_info.length = 4096;
	mb.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (ibv_bind_mw(qb, mw1, &mb))
		prog_fail("ibv_bind_mw failed");
	expect(101, IBV_WC_BIND_MW, 0);
	k1 = mw1->rkey;
	strcpy(buf, "through a window");
	sge.addr = (uint64_t)(uintptr_t)buf;
	sge.length = 17;
	sge.lkey = mr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 102;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.wr.rdma.remote_addr = (uint64_t)(uintptr_t)win + 100;
	wr.wr.rdma.rkey = k1;
	post(qa, &wr);
	expect(102, IBV_WC_RDMA_WRITE, 0);
	sge.addr = (uint64_t)(uintptr_t)buf + 1024;
	wr.wr_id = 103;
	wr.opcode = IBV_WR_RDMA_READ;
	post(qa, &wr);
	expect(103, IBV_WC_RDMA_READ, 0);
	if (strcmp(buf + 1024, "through a window"))
		prog_fail("RDMA READ through the window read the wrong bytes");

	/* type 2 by a BIND_MW WR, ended by a SEND_WITH_INV */
	k2 = ibv_inc_rkey(mw2->rkey);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 104;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.bind_mw.mw = mw2;
	wr.bind_mw.rkey = k2;
	wr.bind_mw.bind_info.mr = wmr;
	wr.bind_mw.bind_info.addr = (uint64_t)(uintptr_t)win + 4096;
	wr.bind_mw.bind_info.length = 2048;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	post(qb, &wr);
	expect(104, IBV_WC_BIND_MW, 0);
	sge.addr = (uint64_t)(uintptr_t)buf + 2048;
	sge.length = 64;
	rwr.wr_id = 201;
	rwr.sg_list = &sge;
	rwr.num_sge = 1;
	if (ibv_post_recv(qb, &rwr, &rbad))
		prog_fail("ibv_post_recv failed");
	sge.addr = (uint64_t)(uintptr_t)buf;
	sge.length = 16;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 105;
	wr.opcode = IBV_WR_SEND_WITH_INV;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.invalidate_rkey = k2;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	post(qa, &wr);
	{
		/* the receive (WITH_INV, the key in invalidated_rkey) and the send,
		 * in whichever order the CQ gives them */
		struct ibv_wc wc[2];
		int got = 0;
		struct timespec t0, t;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (got < 2) {
			int n = ibv_poll_cq(cq, 2 - got, wc + got);

			if (n < 0)
				prog_fail("ibv_poll_cq failed");
			got += n;
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (got < 2 && t.tv_sec - t0.tv_sec > 5)
				prog_fail("SEND_WITH_INV did not complete");
		}
		for (int i = 0; i < 2; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				prog_fail("SEND_WITH_INV: %s",
					  ibv_wc_status_str(wc[i].status));
			if (wc[i].wr_id == 201 && (!(wc[i].wc_flags & IBV_WC_WITH_INV) ||
						   wc[i].invalidated_rkey != k2))
				prog_fail("the receive does not report the invalidation");
		}
	}

	/* type 2 again, through the ibv_wr_* API, ended by LOCAL_INV */
	k3 = ibv_inc_rkey(k2);
	bi.mr = wmr;
	bi.addr = (uint64_t)(uintptr_t)win;
	bi.length = 512;
	bi.mw_access_flags = IBV_ACCESS_REMOTE_READ;
	ibv_wr_start(qx);
	qx->wr_id = 106;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(qx, mw2, k3, &bi);
	qx->wr_id = 107;
	ibv_wr_local_inv(qx, k3);
	if (ibv_wr_complete(qx))
		prog_fail("ibv_wr_complete failed");
	expect(106, IBV_WC_BIND_MW, 0);
	expect(107, IBV_WC_LOCAL_INV, 0);

	/* unbind type 1 (length 0) so that its MR can go */
	memset(&mb, 0, sizeof(mb));
	mb.wr_id = 108;
	mb.send_flags = IBV_SEND_SIGNALED;
	if (ibv_bind_mw(qb, mw1, &mb))
		prog_fail("unbinding failed");
	expect(108, IBV_WC_BIND_MW, 0);
	if (ibv_dealloc_mw(mw1) || ibv_dealloc_mw(mw2))
		prog_fail("ibv_dealloc_mw failed");
	if (ibv_destroy_qp(qa) || ibv_destroy_qp(qb) || ibv_dereg_mr(wmr) ||
	    ibv_dereg_mr(mr) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) ||
	    ibv_close_device(ctx))
		prog_fail("tear-down failed");
	ibv_free_device_list(l);
	printf("mw_prog: ok type1_key=%u type2_key=%u type2_key2=%u\n", k1, k2, k3);
	return 0;
}
