/* report_waiter.c - a real verbs program with known timing, and each problem the
 * report diagnoses, for the report's ground-truth tests over softnic.
 *
 * Two RC QPs of this process are connected to each other (loopback). Each iteration
 * posts one signaled SEND (or WRITE) on QP A; in --mode=wait it then waits a known
 * time after the post returned before it polls, in --mode=spin it polls at once and
 * keeps polling. With softnic's latency model (SOFTNIC_LATENCY_NS) the true NIC time
 * is known, so the poll phase is too.
 *
 * usage: report_waiter [--iters N] [--wait-us W] [--mode wait|spin] [--problem P]
 * P: none, rnr, latercv, cqsmall, notrts, mrdereg, badrkey, noinline, unaligned,
 *    mrreg, allsig, mtu, psn
 * Test fixture only; it exits 0 when the scenario ran as intended (an expected error
 * completion included) and prints one line on failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "tests/progs/prog_util.h"

struct ctx {
	struct ibv_context *dev;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cqa, *cqb;
	struct ibv_qp *a, *b;
	char *buf;
	uint16_t lid;
	uint32_t a_inline; /* what the device granted QP A (hardware rounds up) */
};

static struct ibv_qp *make_qp(struct ctx *c, struct ibv_cq *cq, int max_inline)
{
	struct ibv_qp_cap cap;
	struct ibv_qp *qp = prog_rc_qp(c->pd, cq, 64, 64, (uint32_t)max_inline, &cap);
	if (!qp)
		prog_die("ibv_create_qp");
	if (cq == c->cqa)
		c->a_inline = cap.max_inline_data;
	return qp;
}

static void to_init(struct ibv_qp *qp)
{
	struct prog_rc rc = { .access =
				      IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	if (prog_rc_init(qp, &rc))
		prog_die("modify INIT");
}

static void to_rtr_rts(struct ctx *c, struct ibv_qp *qp, uint32_t dest, enum ibv_mtu mtu,
		       uint32_t rq_psn, uint32_t sq_psn, int rnr_retry)
{
	struct prog_rc rc = prog_rc_quick(c->lid, dest);
	rc.mtu = mtu;
	rc.rq_psn = rq_psn;
	rc.sq_psn = sq_psn;
	rc.rnr_retry = (uint8_t)rnr_retry;
	if (prog_rc_rtr(qp, &rc))
		prog_die("modify RTR");
	if (prog_rc_rts(qp, &rc))
		prog_die("modify RTS");
}

static void post_recv(struct ctx *c, struct ibv_qp *qp, uint64_t id)
{
	if (prog_post_recv(qp, id, c->buf + 8192, 4096, c->mr->lkey))
		prog_die("ibv_post_recv");
}

static int post_send(struct ctx *c, struct ibv_qp *qp, uint64_t id, int op, uint32_t len,
		     unsigned flags, uint64_t off, uint32_t rkey)
{
	return prog_post_send(qp, id, (enum ibv_wr_opcode)op, flags, c->buf + off, len,
			      c->mr->lkey, (uintptr_t)c->buf + 16384, rkey);
}

/* Polls cq until n completions came; returns the first non-success status seen. */
static int poll_n(struct ibv_cq *cq, int n, uint64_t deadline_ns)
{
	struct ibv_wc wc[8];
	int got = 0, bad = 0;
	while (got < n) {
		int k = ibv_poll_cq(cq, 8, wc);
		if (k < 0)
			prog_die("ibv_poll_cq");
		for (int i = 0; i < k; i++)
			if (wc[i].status != IBV_WC_SUCCESS && !bad)
				bad = wc[i].status;
		got += k;
		if (deadline_ns && prog_now_ns() > deadline_ns) {
			fprintf(stderr,
				"report_waiter: timed out waiting for completions\n");
			exit(1);
		}
	}
	return bad;
}

static void spin_until(uint64_t t)
{
	while (prog_now_ns() < t)
		;
}

int main(int argc, char **argv)
{
	int iters = 200, wait_us = 50;
	const char *mode = "wait", *problem = "none";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--wait-us") && i + 1 < argc)
			wait_us = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--mode") && i + 1 < argc)
			mode = argv[++i];
		else if (!strcmp(argv[i], "--problem") && i + 1 < argc)
			problem = argv[++i];
		else {
			fprintf(stderr, "report_waiter: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
#define P(x) (!strcmp(problem, x))
	struct ctx c;
	memset(&c, 0, sizeof(c));
	c.dev = prog_open_first(&c.lid);
	c.pd = ibv_alloc_pd(c.dev);
	if (posix_memalign((void **)&c.buf, 4096, 65536))
		prog_die("posix_memalign");
	memset(c.buf, 0, 65536);
	c.mr = ibv_reg_mr(c.pd, c.buf, 65536,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				  IBV_ACCESS_REMOTE_READ);
	if (!c.pd || !c.mr)
		prog_die("pd/mr");
	c.cqa = ibv_create_cq(c.dev, P("cqsmall") ? 4 : 256, NULL, NULL, 0);
	c.cqb = ibv_create_cq(c.dev, 256, NULL, NULL, 0);
	if (!c.cqa || !c.cqb)
		prog_die("ibv_create_cq");
	int max_inline = P("noinline") ? 64 : 0;
	c.a = make_qp(&c, c.cqa, max_inline);
	c.b = make_qp(&c, c.cqb, 0);
	to_init(c.a);
	to_init(c.b);
	if (P("notrts")) {
		/* post while QP A is only in INIT */
		int r = post_send(&c, c.a, 1, IBV_WR_SEND, 64, IBV_SEND_SIGNALED, 0, 0);
		printf("post in INIT returned %d\n", r);
	}
	to_rtr_rts(&c, c.a, c.b->qp_num, IBV_MTU_1024, 0, P("psn") ? 77 : 0,
		   P("rnr") ? 0 : 7);
	to_rtr_rts(&c, c.b, c.a->qp_num, P("mtu") ? IBV_MTU_4096 : IBV_MTU_1024, 0, 0, 7);
	int recvs = P("rnr") || P("latercv") ? 0 : iters + 8;
	if (recvs > 60)
		recvs = 60;
	for (int i = 0; i < recvs; i++)
		post_recv(&c, c.b, 1000 + i);
	uint64_t deadline = prog_now_ns() + 20000000000ull;
	int status = 0;
	if (P("rnr") || P("badrkey") || P("psn")) {
		/* one message that fails: RNR (no receive), a bad rkey, or a PSN mismatch */
		int op = P("badrkey") ? IBV_WR_RDMA_WRITE : IBV_WR_SEND;
		post_send(&c, c.a, 1, op, 64, IBV_SEND_SIGNALED, 0,
			  P("badrkey") ? c.mr->rkey + 0x1000 : 0);
		post_send(&c, c.a, 2, op, 64, IBV_SEND_SIGNALED, 0, c.mr->rkey);
		status = poll_n(c.cqa, 2, deadline);
		printf("first error status %d (%s)\n", status, ibv_wc_status_str(status));
		goto out;
	}
	if (P("cqsmall")) {
		/* 16 signaled WRITEs outstanding on a CQ of 4 */
		for (int i = 0; i < 16; i++)
			post_send(&c, c.a, i, IBV_WR_RDMA_WRITE, 64, IBV_SEND_SIGNALED, 0,
				  c.mr->rkey);
		usleep(10000);
		struct ibv_wc wc[16];
		int k = ibv_poll_cq(c.cqa, 16, wc);
		printf("polled %d\n", k);
		goto out;
	}
	int posted_recv = recvs;
	for (int i = 0; i < iters; i++) {
		int op = IBV_WR_SEND;
		uint32_t len = 64;
		uint64_t off = 0;
		unsigned flags = IBV_SEND_SIGNALED;
		if (P("unaligned")) {
			op = IBV_WR_RDMA_WRITE;
			len = 4096;
			off = 8;
		}
		if (P("allsig"))
			op = IBV_WR_RDMA_WRITE;
		/* without a problem to provoke, a well-behaved program inlines
		 * what the QP takes inline (the problems need their lkeys) */
		if (!strcmp(problem, "none") && len <= c.a_inline)
			flags |= IBV_SEND_INLINE;
		if (P("mrreg")) {
			struct ibv_mr *m = ibv_reg_mr(c.pd, c.buf + 32768, 4096,
						      IBV_ACCESS_LOCAL_WRITE);
			if (!m)
				prog_die("ibv_reg_mr");
			ibv_dereg_mr(m);
		}
		int n = 1;
		if (P("allsig")) {
			/* two WRs outstanding at each post: a busy QP, all signaled, one WR per
			 * doorbell */
			if (post_send(&c, c.a, 2 * i, op, len, flags, off, c.mr->rkey))
				prog_die("ibv_post_send");
			n = 2;
		}
		if (post_send(&c, c.a, i, op, len, flags, off, c.mr->rkey))
			prog_die("ibv_post_send");
		uint64_t ret = prog_now_ns();
		if (P("latercv")) {
			/* the receive comes 200 us after the message was sent */
			spin_until(ret + 200000);
			post_recv(&c, c.b, 1000 + i);
		}
		if (!strcmp(mode, "wait"))
			spin_until(ret + (uint64_t)wait_us * 1000);
		status |= poll_n(c.cqa, n, deadline);
		if (op == IBV_WR_SEND) {
			status |= poll_n(c.cqb, 1, deadline);
			if (posted_recv < iters + 8 && !P("latercv"))
				post_recv(&c, c.b, 1000 + posted_recv++);
		}
	}
out:
	if (P("mrdereg")) {
		/* deregister the MR while its QPs still exist */
		ibv_dereg_mr(c.mr);
		c.mr = NULL;
	}
	ibv_destroy_qp(c.a);
	ibv_destroy_qp(c.b);
	if (c.mr)
		ibv_dereg_mr(c.mr);
	ibv_destroy_cq(c.cqa);
	ibv_destroy_cq(c.cqb);
	ibv_dealloc_pd(c.pd);
	ibv_close_device(c.dev);
	free(c.buf);
	return 0;
}
