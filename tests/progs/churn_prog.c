/*
 * churn_prog - a verbs program whose resources come and go while it runs, for
 * the replayer's lifetime tests (replay_life_test). Two RC QPs of one process
 * connected to each other, on one CQ:
 *   1. --iters times: registers a fresh MR, SENDs from it and RDMA WRITEs into
 *      another fresh MR through its rkey, then deregisters both (MR
 *      registration on the data path);
 *   2. moves the responder QP to ERR, destroys both QPs (the recorder queries
 *      their state on the way: ERR and RTS), creates a new pair, connects it
 *      and exchanges again (a reconnect; --reconnects times, default 1);
 *   3. ibv_rereg_mr moves the long-lived MR to another buffer
 *      (IBV_REREG_MR_CHANGE_TRANSLATION) and SENDs from its new place
 *      (not with --no-rereg 1);
 *   4. exits with the second pair still alive (their state is taken at exit).
 * Steps are --gap-us apart (default 2000), so a replay's lateness is visible.
 * Exits 0 only if every completion was the expected one; every wait is bounded.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/progs/prog_util.h"

static struct ibv_pd *pd;
static struct ibv_cq *cq;
static uint16_t lid;
static int gap_us = 2000;

static void gap(void)
{
	usleep((useconds_t)gap_us);
}

static void expect(uint64_t id, enum ibv_wc_opcode op)
{
	struct ibv_wc wc;
	uint64_t t0 = prog_now_ns();
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		if (prog_now_ns() - t0 > 5000000000ull)
			prog_fail("no completion for wr_id %llu", (unsigned long long)id);
	if (n < 0 || wc.status != IBV_WC_SUCCESS || wc.wr_id != id || wc.opcode != op)
		prog_fail("wr_id %llu: got wr_id %llu status %s opcode %d",
			  (unsigned long long)id, (unsigned long long)wc.wr_id,
			  ibv_wc_status_str(wc.status), (int)wc.opcode);
}

/* A pair of RC QPs on the CQ, connected to each other. */
static void make_pair(struct ibv_qp **a, struct ibv_qp **b)
{
	struct prog_rc ra, rb;

	*a = prog_rc_qp(pd, cq, 16, 16, 0, NULL);
	*b = prog_rc_qp(pd, cq, 16, 16, 0, NULL);
	if (!*a || !*b)
		prog_die("ibv_create_qp");
	ra = prog_rc_quick(lid, (*b)->qp_num);
	rb = prog_rc_quick(lid, (*a)->qp_num);
	ra.access = rb.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	ra.rq_psn = ra.sq_psn = rb.rq_psn = rb.sq_psn = 11;
	prog_rc_connect_or_die(*a, &ra);
	prog_rc_connect_or_die(*b, &rb);
}

static void post_send(struct ibv_qp *qp, uint64_t id, enum ibv_wr_opcode op, void *addr,
		      uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	if (prog_post_send(qp, id, op, IBV_SEND_SIGNALED, addr, len, lkey, raddr, rkey))
		prog_fail("ibv_post_send of wr_id %llu failed", (unsigned long long)id);
}

/* A SEND from src (lkey) into dst's receive buffer (its lkey), both polled. */
static void exchange(struct ibv_qp *from, struct ibv_qp *to, uint64_t id, void *src,
		     uint32_t slkey, void *dst, uint32_t dlkey)
{
	if (prog_post_recv(to, id + 1, dst, 256, dlkey))
		prog_fail("ibv_post_recv failed");
	post_send(from, id, IBV_WR_SEND, src, 64, slkey, 0, 0);
	expect(id + 1, IBV_WC_RECV);
	expect(id, IBV_WC_SEND);
}

int main(int argc, char **argv)
{
	static char buf[8192] __attribute__((aligned(4096)));
	static char buf2[8192] __attribute__((aligned(4096)));
	static char pool[8][8192] __attribute__((aligned(4096)));
	struct ibv_context *ctx;
	struct ibv_qp *qa, *qb;
	struct ibv_mr *mr;
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	int iters = 4, reconnects = 1, rereg = 1;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--iters"))
			iters = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--gap-us"))
			gap_us = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--reconnects"))
			reconnects = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--no-rereg"))
			rereg = !atoi(argv[i + 1]);
	}
	if (iters < 1 || iters > 8)
		prog_fail("--iters must be 1..8");
	ctx = prog_open_first(&lid);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!pd || !cq || !mr)
		prog_fail("set-up failed");
	make_pair(&qa, &qb);

	/* 1. MRs registered, used and deregistered on the data path */
	for (int i = 0; i < iters; i++) {
		char *src = pool[i], *dst = pool[i] + 4096;
		struct ibv_mr *ms, *md;

		gap();
		ms = ibv_reg_mr(pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
		md = ibv_reg_mr(pd, dst, 4096,
				IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		if (!ms || !md)
			prog_fail("ibv_reg_mr %d failed", i);
		snprintf(src, 64, "churn %d", i);
		exchange(qa, qb, 100 + 10 * (uint64_t)i, src, ms->lkey, buf, mr->lkey);
		post_send(qa, 105 + 10 * (uint64_t)i, IBV_WR_RDMA_WRITE, src, 32,
			  ms->lkey, (uint64_t)(uintptr_t)dst + 64, md->rkey);
		expect(105 + 10 * (uint64_t)i, IBV_WC_RDMA_WRITE);
		if (strcmp(dst + 64, src))
			prog_fail("RDMA WRITE %d wrote the wrong bytes", i);
		if (ibv_dereg_mr(ms) || ibv_dereg_mr(md))
			prog_fail("ibv_dereg_mr %d failed", i);
	}

	/* 2. tear down (the responder to ERR first) and reconnect */
	for (int r = 0; r < reconnects; r++) {
		gap();
		if (ibv_modify_qp(qb, &err, IBV_QP_STATE))
			prog_fail("ERR failed");
		if (ibv_destroy_qp(qa) || ibv_destroy_qp(qb))
			prog_fail("ibv_destroy_qp failed");
		gap();
		make_pair(&qa, &qb);
		gap();
		snprintf(buf + 1024, 64, "after reconnect %d", r);
		exchange(qa, qb, 200 + (uint64_t)r, buf + 1024, mr->lkey, buf + 4096,
			 mr->lkey);
	}

	/* 3. the long-lived MR moves to another buffer */
	if (!rereg)
		goto out;
	gap();
	if (ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf2, sizeof(buf2),
			 0))
		prog_fail("ibv_rereg_mr failed");
	strcpy(buf2, "after the rereg");
	exchange(qa, qb, 300, buf2, mr->lkey, buf2 + 4096, mr->lkey);
	if (strcmp(buf2 + 4096, "after the rereg"))
		prog_fail("the SEND after the rereg delivered the wrong bytes");

	/* 4. exit with qa and qb alive */
out:
	printf("churn_prog: ok qps=%u,%u\n", qa->qp_num, qb->qp_num);
	return 0;
}
