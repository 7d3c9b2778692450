/* replay_synth.c - writes the two ends of an RC exchange as traces, by hand,
 * through the writer API: the fixtures of the replayer's tests, so that they do
 * not depend on the recorder. Each end: device, PD, one MR, one CQ, one RC QP
 * connected to the other end's, receives pre-posted.
 *
 * usage: replay_synth OUTDIR [--iters N] [--interval-us U] [--scenario S] [--send-wr N]
 *   S = pingpong (default; SENDs both ways, then one RDMA WRITE and one READ),
 *       stream   (the client posts a SEND every U us, the server only receives),
 *       rnr      (the client sends, the server never posted a receive, rnr_retry 0),
 *       rkey     (the client writes with an rkey the server never had),
 *       unpolled (one CQ per QP; the client never polls its SEND's completion),
 *       unpolled-lost (the same, but the answer the client polled never comes)
 *       waiting  (as stream, but each of the server's polls begins 2 us before
 *                 the client's SEND and returns its receive 6 us after: a
 *                 poll that waited for the send it gets)
 *       deaf     (the client polls for an answer and reposts its receive every U us,
 *                 N times; the server never sends: the replay diverges at the
 *                 first poll, and every later one would wait in vain)
 * --final-state N: the server's trace ends with the recorder's qp_final_state
 *   of its QP saying state N (enum ibv_qp_state) at exit, whatever its modifies
 *   say (a replay that ends elsewhere must report it).
 * Writes OUTDIR/a.rbt (client, QP 100) and OUTDIR/b.rbt (server, QP 200).
 * Test fixture only: it never touches a verbs device.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/trace_builder.h"

#define A_BASE 0x7f0000010000ull
#define B_BASE 0x7f0000020000ull
#define MR_LEN 8192u

static uint64_t send_wr = 32; /* the QPs' max_send_wr (--send-wr) */

struct end {
	struct rbt_tb *tb;
	uint32_t qpn, peer_qpn, lkey, rkey;
	uint64_t base, t, ctx, pd, mr, cq, qp;
	uint32_t sq_psn, rq_psn;
};

static void open_end(struct end *e, const char *path, uint64_t t0, uint64_t mono0)
{
	struct rbt_tb_opts o = { .tool = "replay_synth",
				 .pid = e->qpn,
				 .t0 = t0,
				 .mono0 = mono0,
				 .real0 = mono0,
				 .stream = e->qpn };

	e->tb = rbt_tb_open(path, &o);
	e->t = t0;
	e->ctx = e->base + 0x100;
	e->pd = e->base + 0x200;
	e->mr = e->base + 0x300;
	e->cq = e->base + 0x400;
	e->qp = e->base + 0x500;

	/* Set up in no time: every call returns at 0. */
	rbt_tb_device(e->tb, e->t, 0, e->ctx, "synth0");
	rbt_tb_pd(e->tb, e->t, 0, e->ctx, e->pd);
	struct rbt_event *ev = rbt_tb_new(e->tb, RBT_EV_MR_REG, e->t);
	ev->u.mr_reg.pd = e->pd;
	ev->u.mr_reg.mr = e->mr;
	ev->u.mr_reg.addr = e->base;
	ev->u.mr_reg.iova = e->base;
	ev->u.mr_reg.length = MR_LEN;
	ev->u.mr_reg.access =
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	ev->u.mr_reg.lkey = e->lkey;
	ev->u.mr_reg.rkey = e->rkey;
	rbt_tb_put(e->tb, ev);
	rbt_tb_cq(e->tb, e->t, 0, e->ctx, e->cq, 64);
	struct rbt_tb_qp q = { .ctx = e->ctx,
			       .pd = e->pd,
			       .qp = e->qp,
			       .qp_num = e->qpn,
			       .qp_type = IBV_QPT_RC,
			       .send_cq = e->cq,
			       .recv_cq = e->cq,
			       .max_send_wr = (uint32_t)send_wr,
			       .max_recv_wr = 32,
			       .max_send_sge = 1,
			       .max_recv_sge = 1 };
	rbt_tb_qp(e->tb, e->t, 0, &q);
}

static void modify(struct end *e, int state, int rnr_retry)
{
	struct rbt_ev_qp_modify attr, *m = &attr;

	memset(&attr, 0, sizeof(attr));
	if (state == IBV_QPS_INIT) {
		m->attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			       IBV_QP_ACCESS_FLAGS;
		m->port_num = 1;
		m->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	} else if (state == IBV_QPS_RTR) {
		m->attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		m->path_mtu = IBV_MTU_1024;
		m->dest_qp_num = e->peer_qpn;
		m->rq_psn = e->rq_psn;
		m->max_dest_rd_atomic = 1;
		m->min_rnr_timer = 1;
		m->ah_dlid = 1;
		m->ah_port_num = 1;
		m->port_num = 1;
	} else {
		m->attr_mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
		m->sq_psn = e->sq_psn;
		m->timeout = 14;
		m->retry_cnt = 7;
		m->rnr_retry = (uint64_t)rnr_retry;
		m->max_rd_atomic = 1;
	}
	rbt_tb_modify(e->tb, e->t, e->t + 1000, e->qp, (uint32_t)state,
		      (uint32_t)m->attr_mask, m);
}

static void post_recv(struct end *e, uint64_t wr_id, uint32_t len)
{
	struct rbt_sge sge = { .addr = e->base, .length = len, .lkey = e->lkey };
	struct rbt_recv_wr wr = rbt_tb_recv_wr(wr_id, &sge);

	rbt_tb_post_recv(e->tb, e->t, e->t + 200, e->qp, e->qpn, &wr, 1);
}

static void post_send(struct end *e, uint64_t wr_id, int op, uint32_t len, uint64_t raddr,
		      uint32_t rkey)
{
	struct rbt_sge sge = { .addr = e->base + 4096, .length = len, .lkey = e->lkey };
	struct rbt_send_wr wr =
		rbt_tb_send_wr(wr_id, (uint32_t)op, IBV_SEND_SIGNALED, &sge);

	wr.remote_addr = raddr;
	wr.rkey = rkey;
	rbt_tb_post_send(e->tb, e->t, e->t + 300, e->qp, e->qpn, &wr, 1);
}

/* A poll from e->t that returns one completion `took` ns later. */
static void poll_took(struct end *e, uint64_t took, uint64_t wr_id, int status,
		      int opcode, uint32_t len)
{
	struct rbt_wc wc = rbt_tb_wc(wr_id, (uint32_t)opcode, e->qpn, len);

	wc.status = (uint64_t)status;
	rbt_tb_poll(e->tb, e->t, e->t + took, e->cq, 1, &wc, 1, 1);
}

static void poll1(struct end *e, uint64_t wr_id, int status, int opcode, uint32_t len)
{
	poll_took(e, 100, wr_id, status, opcode, len);
}

int main(int argc, char **argv)
{
	struct end a = { .qpn = 100,
			 .peer_qpn = 200,
			 .lkey = 0x1001,
			 .rkey = 0x2001,
			 .base = A_BASE,
			 .sq_psn = 0x100,
			 .rq_psn = 0x200 };
	struct end b = { .qpn = 200,
			 .peer_qpn = 100,
			 .lkey = 0x3001,
			 .rkey = 0x4001,
			 .base = B_BASE,
			 .sq_psn = 0x200,
			 .rq_psn = 0x100 };
	const char *scen = "pingpong";
	int iters = 100, interval = 50, final_state = -1;
	char pa[4096], pb[4096];
	uint64_t t0 = 1000000000ull, start;

	if (argc < 2) {
		fprintf(stderr,
			"usage: replay_synth OUTDIR [--iters N] [--interval-us U] "
			"[--scenario "
			"pingpong|stream|waiting|rnr|rkey|unpolled|unpolled-lost|deaf]"
			"\n");
		return 2;
	}
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--iters"))
			iters = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--interval-us"))
			interval = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--scenario"))
			scen = argv[i + 1];
		else if (!strcmp(argv[i], "--send-wr"))
			send_wr = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--final-state"))
			final_state = atoi(argv[i + 1]);
	}
	snprintf(pa, sizeof(pa), "%s/a.rbt", argv[1]);
	snprintf(pb, sizeof(pb), "%s/b.rbt", argv[1]);
	open_end(&a, pa, t0, t0);
	open_end(&b, pb, t0, t0);
	a.t = b.t = t0 + 10000;
	modify(&a, IBV_QPS_INIT, 0);
	modify(&b, IBV_QPS_INIT, 0);
	a.t = b.t = t0 + 20000;
	if (!strcmp(scen, "deaf"))
		b.t = t0 + 20000; /* the server only connects */
	if (strcmp(scen, "stream") && strcmp(scen, "waiting") && strcmp(scen, "rnr")) {
		post_recv(&a, 0x10, 64);
	}
	if (strcmp(scen, "rnr"))
		post_recv(&b, 0x10, 64);
	if (!strcmp(scen, "stream") || !strcmp(scen, "waiting"))
		for (int i = 1; i < 32 && i < iters; i++)
			post_recv(&b, 0x10 + (uint64_t)i, 64);
	a.t = b.t = t0 + 30000;
	modify(&a, IBV_QPS_RTR, 0);
	modify(&b, IBV_QPS_RTR, 0);
	a.t = b.t = t0 + 40000;
	modify(&a, IBV_QPS_RTS, strcmp(scen, "rnr") ? 7 : 0);
	modify(&b, IBV_QPS_RTS, 7);
	start = t0 + 1000000;

	if (!strcmp(scen, "pingpong")) {
		for (int i = 0; i < iters; i++) {
			uint64_t t = start + (uint64_t)i * (uint64_t)interval * 1000;

			a.t = t;
			post_send(&a, 0x20, IBV_WR_SEND, 64, 0, 0);
			b.t = t + 8000;
			poll1(&b, 0x10, IBV_WC_SUCCESS, IBV_WC_RECV, 64);
			b.t += 1000;
			post_recv(&b, 0x10, 64);
			b.t += 1000;
			post_send(&b, 0x20, IBV_WR_SEND, 64, 0, 0);
			b.t += 8000;
			poll1(&b, 0x20, IBV_WC_SUCCESS, IBV_WC_SEND, 64);
			a.t = t + 10000;
			poll1(&a, 0x20, IBV_WC_SUCCESS, IBV_WC_SEND, 64);
			a.t = t + 20000;
			poll1(&a, 0x10, IBV_WC_SUCCESS, IBV_WC_RECV, 64);
			a.t += 1000;
			post_recv(&a, 0x10, 64);
		}
		a.t += 20000;
		post_send(&a, 0x30, IBV_WR_RDMA_WRITE, 128, B_BASE + 512, b.rkey);
		a.t += 10000;
		poll1(&a, 0x30, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 128);
		a.t += 10000;
		post_send(&a, 0x40, IBV_WR_RDMA_READ, 256, B_BASE + 1024, b.rkey);
		a.t += 10000;
		poll1(&a, 0x40, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 256);
	} else if (!strcmp(scen, "stream")) {
		/* client: one SEND every interval, signaled, polled right after;
		 * server: receives, reposts. */
		for (int i = 0; i < iters; i++) {
			uint64_t t = start + (uint64_t)i * (uint64_t)interval * 1000;

			a.t = t;
			post_send(&a, 0x20 + (uint64_t)i, IBV_WR_SEND, 64, 0, 0);
			a.t = t + 5000;
			poll1(&a, 0x20 + (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_SEND, 64);
			b.t = t + 6000;
			poll1(&b, 0x10 + (uint64_t)(i % 32), IBV_WC_SUCCESS, IBV_WC_RECV,
			      64);
			b.t += 1000;
			if (i + 32 < iters)
				post_recv(&b, 0x10 + (uint64_t)(i % 32), 64);
		}
	} else if (!strcmp(scen, "waiting")) {
		/* the server's poll spins from 2 us before the client's SEND
		 * until its receive comes, 6 us after */
		for (int i = 0; i < iters; i++) {
			uint64_t t = start + (uint64_t)i * (uint64_t)interval * 1000;

			b.t = t - 2000;
			poll_took(&b, 8000, 0x10 + (uint64_t)(i % 32), IBV_WC_SUCCESS,
				  IBV_WC_RECV, 64);
			a.t = t;
			post_send(&a, 0x20 + (uint64_t)i, IBV_WR_SEND, 64, 0, 0);
			a.t = t + 5000;
			poll1(&a, 0x20 + (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_SEND, 64);
			b.t = t + 7000;
			if (i + 32 < iters)
				post_recv(&b, 0x10 + (uint64_t)(i % 32), 64);
		}
	} else if (!strncmp(scen, "unpolled", 8)) {
		/* One CQ serves both queues of each QP. The client sends, the
		 * server answers 1 ms later; the client's one poll is recorded as
		 * returning the answer, and it never polls its SEND's completion
		 * (a replay's poll finds that one queued first). "unpolled-lost":
		 * the server never answers - the recorded receive cannot come. */
		a.t = start;
		post_send(&a, 0x20, IBV_WR_SEND, 64, 0, 0);
		b.t = start + 500000;
		poll1(&b, 0x10, IBV_WC_SUCCESS, IBV_WC_RECV, 64);
		if (strcmp(scen, "unpolled-lost")) {
			b.t = start + 1000000;
			post_send(&b, 0x21, IBV_WR_SEND, 64, 0, 0);
			b.t += 10000;
			poll1(&b, 0x21, IBV_WC_SUCCESS, IBV_WC_SEND, 64);
		}
		a.t = start + 2000000;
		poll1(&a, 0x10, IBV_WC_SUCCESS, IBV_WC_RECV, 64);
	} else if (!strcmp(scen, "deaf")) {
		for (int i = 0; i < iters; i++) {
			a.t = start + (uint64_t)i * (uint64_t)interval * 1000;
			poll1(&a, 0x10, IBV_WC_SUCCESS, IBV_WC_RECV, 64);
			a.t += 1000;
			post_recv(&a, 0x10, 64);
		}
	} else if (!strcmp(scen, "rnr")) {
		a.t = start;
		post_send(&a, 0x20, IBV_WR_SEND, 64, 0, 0);
		a.t += 100000;
		poll1(&a, 0x20, IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_SEND, 0);
	} else if (!strcmp(scen, "rkey")) {
		a.t = start;
		post_send(&a, 0x30, IBV_WR_RDMA_WRITE, 128, B_BASE + 512, 0xbad00bad);
		a.t += 10000;
		poll1(&a, 0x30, IBV_WC_REM_ACCESS_ERR, IBV_WC_RDMA_WRITE, 0);
		/* the server's receive is flushed: its QP went to ERR too */
		b.t = start + 20000;
		poll1(&b, 0x10, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0);
	} else {
		fprintf(stderr, "replay_synth: unknown scenario %s\n", scen);
		return 2;
	}
	if (final_state >= 0) {
		struct rbt_event *ev =
			rbt_tb_new(b.tb, RBT_EV_QP_FINAL_STATE, b.t + 1000);

		ev->u.qp_final_state.ts_exit = b.t + 1100;
		ev->u.qp_final_state.qp = b.qp;
		ev->u.qp_final_state.qp_num = b.qpn;
		ev->u.qp_final_state.qp_state = (uint64_t)final_state;
		ev->u.qp_final_state.why = 1;
		rbt_tb_put(b.tb, ev);
	}
	rbt_tb_close(a.tb, NULL);
	rbt_tb_close(b.tb, NULL);
	return 0;
}
