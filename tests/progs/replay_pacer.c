/* replay_pacer.c - a real verbs program with a steady schedule: two RC QPs of one
 * process connected to each other, one SEND every U microseconds (busy-waiting on
 * CLOCK_MONOTONIC), each polled to completion on both ends before the next.
 * Recorded with librbtrace, its trace measures the replayer's timing fidelity.
 *
 * usage: replay_pacer [--iters N] [--interval-us U] [--size B] [--fail rnr|rkey]
 * Prints "pacer: N sends in X us (R msg/s)". Exits 1 on any verbs failure.
 * --fail rnr: one SEND to a QP with no receive posted, rnr_retry 0;
 * --fail rkey: one RDMA WRITE with an rkey that does not exist. Both poll the
 * error completion, query both QPs' states and exit 0 when the error came.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/progs/prog_util.h"

static int die(const char *what)
{
	fprintf(stderr, "replay_pacer: %s failed\n", what);
	return 1;
}

static int rnr_retry = 7;

static int connect_qp(struct ibv_qp *qp, uint32_t dest, uint16_t lid, uint32_t psn_out,
		      uint32_t psn_in)
{
	return prog_rc_connect_patient(qp, lid, dest, IBV_ACCESS_REMOTE_WRITE, psn_out,
				       psn_in, (uint8_t)rnr_retry);
}

static int wait_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	return n == 1 && wc.status == IBV_WC_SUCCESS ? 0 : -1;
}

int main(int argc, char **argv)
{
	int iters = 2000, interval = 50, size = 64, n;
	const char *fail = NULL;

	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	uint16_t lid;
	char *buf;
	uint64_t t0, next;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--iters"))
			iters = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--interval-us"))
			interval = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--size"))
			size = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--fail"))
			fail = argv[i + 1];
	}
	if (fail && !strcmp(fail, "rnr"))
		rnr_retry = 0;
	ctx = prog_open_first(&lid);
	pd = ibv_alloc_pd(ctx);
	buf = calloc(2, (size_t)size + 64);
	mr = pd && buf ? ibv_reg_mr(pd, buf, 2 * ((size_t)size + 64),
				    IBV_ACCESS_LOCAL_WRITE)
		       : NULL;
	if (!mr)
		return die("ibv_reg_mr");
	for (int i = 0; i < 2; i++) {
		cq[i] = ibv_create_cq(ctx, 32, NULL, NULL, 0);
		qp[i] = cq[i] ? prog_rc_qp(pd, cq[i], 16, 16, 0, NULL) : NULL;
		if (!qp[i])
			return die("ibv_create_qp");
	}
	if (connect_qp(qp[0], qp[1]->qp_num, lid, 11, 22) ||
	    connect_qp(qp[1], qp[0]->qp_num, lid, 22, 11))
		return die("ibv_modify_qp");
	if (fail) {
		struct ibv_sge ss = { (uintptr_t)buf, (uint32_t)size, mr->lkey };
		struct ibv_send_wr sw = { .wr_id = 7,
					  .sg_list = &ss,
					  .num_sge = 1,
					  .send_flags = IBV_SEND_SIGNALED },
				   *bs;
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qi;
		struct ibv_wc wc;
		int want;

		if (!strcmp(fail, "rkey")) {
			sw.opcode = IBV_WR_RDMA_WRITE;
			sw.wr.rdma.remote_addr = (uintptr_t)buf + 64;
			sw.wr.rdma.rkey = mr->rkey ^ 0x5a5a00;
			want = IBV_WC_REM_ACCESS_ERR;
		} else {
			sw.opcode = IBV_WR_SEND;
			want = IBV_WC_RNR_RETRY_EXC_ERR;
		}
		if (ibv_post_send(qp[0], &sw, &bs))
			return die("ibv_post_send");
		while ((n = ibv_poll_cq(cq[0], 1, &wc)) == 0)
			;
		for (int i = 0; i < 2; i++)
			if (ibv_query_qp(qp[i], &qa, IBV_QP_STATE, &qi) == 0)
				printf("pacer: QP %u state %d\n", qp[i]->qp_num,
				       qa.qp_state);
		printf("pacer: completion status %s\n",
		       n == 1 ? ibv_wc_status_str(wc.status) : "none");
		return n == 1 && (int)wc.status == want ? 0 : 1;
	}
	t0 = prog_now_ns();
	next = t0;
	for (int i = 0; i < iters; i++) {
		struct ibv_sge rs = { (uintptr_t)buf + (uint64_t)size + 64,
				      (uint32_t)size, mr->lkey };
		struct ibv_sge ss = { (uintptr_t)buf, (uint32_t)size, mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = (uint64_t)i,
					  .sg_list = &rs,
					  .num_sge = 1 },
				   *br;
		struct ibv_send_wr sw = { .wr_id = (uint64_t)i,
					  .sg_list = &ss,
					  .num_sge = 1,
					  .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED },
				   *bs;

		if (ibv_post_recv(qp[1], &rw, &br))
			return die("ibv_post_recv");
		while (prog_now_ns() < next)
			;
		if (ibv_post_send(qp[0], &sw, &bs))
			return die("ibv_post_send");
		if (wait_one(cq[0]) || wait_one(cq[1]))
			return die("completion");
		next += (uint64_t)interval * 1000;
	}
	{
		double us = (double)(prog_now_ns() - t0) / 1e3;

		printf("pacer: %d sends in %.0f us (%.0f msg/s)\n", iters, us,
		       iters / (us / 1e6));
	}
	ibv_destroy_qp(qp[0]);
	ibv_destroy_qp(qp[1]);
	ibv_destroy_cq(cq[0]);
	ibv_destroy_cq(cq[1]);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	return 0;
}
