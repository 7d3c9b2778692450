/* report_synth.c - writes synthetic traces with known timing for the `rbtrace report`
 * CLI tests: both ends of an RC ping-pong (client + server, one file each), with or
 * without NIC completion timestamps and clock samples, optionally with a problem.
 *
 * usage: report_synth [--iters N] [--nic] [--problem=retry|none] CLIENT.rbt SERVER.rbt
 * Test fixture only: it never touches a verbs device. Times: a tick is 1 ns; the
 * client posts (300 ns), the message reaches the server 2 us after the post returns,
 * the server polls 500 ns later, thinks 1 us, posts (300 ns), 2 us back, the client
 * polls 500 ns after arrival.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "tests/trace_builder.h"

struct end {
	struct rbt_tb *tb;
	uint64_t qp, cq, qpn, peer;
	int nic;
};

static uint64_t nic_of(uint64_t host)
{
	return host / 4 + 123456789; /* a 250 MHz NIC clock with an offset */
}

static void setup(struct end *e, uint32_t stream, int bad_dest)
{
	rbt_tb_thread(e->tb, 100, stream, "main");
	rbt_tb_mr(e->tb, 500, 900, 0xd0, 0xe0, 0x10000, 4096, 0x42, 0x43);
	struct rbt_event *ev = rbt_tb_new(e->tb, RBT_EV_CQ_CREATE, 1000);
	ev->u.cq_create.ts_exit = 1100;
	ev->u.cq_create.ctx = 0xc0;
	ev->u.cq_create.cq = e->cq;
	ev->u.cq_create.cqe = 64;
	ev->u.cq_create.cqe_asked = 64;
	ev->u.cq_create.ts_source = e->nic ? 1 : 0;
	rbt_tb_put(e->tb, ev);
	struct rbt_tb_qp q = { .ctx = 0xc0,
			       .pd = 0xd0,
			       .qp = e->qp,
			       .qp_num = (uint32_t)e->qpn,
			       .qp_type = IBV_QPT_RC,
			       .send_cq = e->cq,
			       .recv_cq = e->cq,
			       .max_send_wr = 16,
			       .max_recv_wr = 16,
			       .max_inline_data = 64 };
	rbt_tb_qp(e->tb, 2000, 2100, &q);
	for (int s = IBV_QPS_INIT; s <= IBV_QPS_RTS; s++) {
		struct rbt_ev_qp_modify m;
		uint32_t mask = IBV_QP_STATE;
		memset(&m, 0, sizeof(m));
		if (s == IBV_QPS_RTR) {
			mask |= IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				IBV_QP_MIN_RNR_TIMER | IBV_QP_AV;
			m.path_mtu = IBV_MTU_4096;
			m.dest_qp_num = bad_dest ? 0x7777 : e->peer;
			m.rq_psn = 0;
			m.min_rnr_timer = 12;
		} else if (s == IBV_QPS_RTS) {
			mask |= IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				IBV_QP_RNR_RETRY;
			m.sq_psn = 0;
			m.timeout = 14;
			m.retry_cnt = 7;
			m.rnr_retry = 7;
		}
		rbt_tb_modify(e->tb, 3000 + s * 100, 3000 + s * 100 + 10, e->qp,
			      (uint32_t)s, mask, &m);
	}
}

static void clock_sample(struct end *e, uint64_t ts)
{
	if (!e->nic)
		return;
	struct rbt_event *ev = rbt_tb_new(e->tb, RBT_EV_CLOCK_SAMPLE, ts);
	ev->u.clock_sample.ctx = 0xc0;
	ev->u.clock_sample.nic_ts = nic_of(ts);
	ev->u.clock_sample.nic_hz = 250000000;
	ev->u.clock_sample.mono_ns = ts;
	rbt_tb_put(e->tb, ev);
}

static struct rbt_sge sge = { .addr = 0x10000, .length = 32, .lkey = 0x42 };

static void post_send(struct end *e, uint64_t ts, uint64_t id)
{
	struct rbt_send_wr wr = rbt_tb_send_wr(id, IBV_WR_SEND,
					       IBV_SEND_SIGNALED | IBV_SEND_INLINE, &sge);
	rbt_tb_post_send(e->tb, ts, ts + 300, e->qp, (uint32_t)e->qpn, &wr, 1);
}

static void post_recv(struct end *e, uint64_t ts, uint64_t id)
{
	struct rbt_recv_wr wr = rbt_tb_recv_wr(id, &sge);
	rbt_tb_post_recv(e->tb, ts, ts + 50, e->qp, (uint32_t)e->qpn, &wr, 1);
}

/* comp: host time each completion happened (for its NIC timestamp). */
static void poll(struct end *e, uint64_t ts, uint64_t exit, int n, const uint64_t *ids,
		 const int *recv, const uint64_t *comp, int status)
{
	struct rbt_wc wcs[2];
	for (int i = 0; i < n; i++) {
		wcs[i] = rbt_tb_wc(ids[i], recv[i] ? IBV_WC_RECV : IBV_WC_SEND,
				   (uint32_t)e->qpn, 32);
		wcs[i].status = (uint64_t)status;
		wcs[i].hw_ts = e->nic ? nic_of(comp[i]) : 0;
	}
	rbt_tb_poll(e->tb, ts, exit, e->cq, 2, wcs, (uint32_t)n,
		    n ? 1 : (exit - ts) / 50);
}

int main(int argc, char **argv)
{
	int iters = 1000, nic = 0;
	const char *problem = "none", *paths[2] = { NULL, NULL };
	int np = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--nic"))
			nic = 1;
		else if (!strncmp(argv[i], "--problem=", 10))
			problem = argv[i] + 10;
		else if (np < 2)
			paths[np++] = argv[i];
	}
	if (np != 2 || iters < 1) {
		fprintf(stderr,
			"usage: report_synth [--iters N] [--nic] [--problem=retry|none] "
			"CLIENT.rbt SERVER.rbt\n");
		return 2;
	}
	int retry = !strcmp(problem, "retry");
	struct end c = {
		.qp = 0xa000, .cq = 0xc000, .qpn = 0x11, .peer = 0x22, .nic = nic
	};
	struct end s = {
		.qp = 0xb000, .cq = 0xd000, .qpn = 0x22, .peer = 0x11, .nic = nic
	};
	struct rbt_tb_opts o = { .tool = "report_synth",
				 .host = "synth",
				 .real0 = 1700000000000000000ull,
				 .chunk_bytes = 16384 };
	/* The header's start pair is zero but for the realtime clock. */
	o.pid = 111;
	o.cmdline = "client";
	o.stream = 4001;
	c.tb = rbt_tb_open(paths[0], &o);
	o.pid = 222;
	o.cmdline = "server";
	o.stream = 4002;
	s.tb = rbt_tb_open(paths[1], &o);
	rbt_tb_stream(c.tb, 4001);
	rbt_tb_stream(s.tb, 4002);
	setup(&c, 4001, retry);
	setup(&s, 4002, 0);
	post_recv(&c, 4000, 1000);
	post_recv(&s, 4000, 2000);
	uint64_t t = 10000, next_sample = 0;
	for (int i = 0; i < iters; i++) {
		if (t >= next_sample) {
			clock_sample(&c, t);
			clock_sample(&s, t);
			next_sample = t + 1000000;
		}
		post_send(&c, t, i);
		if (retry) {
			/* nobody answers: the client's send fails, the rest is flushed */
			int r0 = 0;
			uint64_t id = i, comp = t + 300 + 50000;
			poll(&c, t + 400, comp, 0, NULL, NULL, NULL, 0);
			poll(&c, comp, comp + 100, 1, &id, &r0, &comp,
			     IBV_WC_RETRY_EXC_ERR);
			break;
		}
		/* every empty poll ends before the completion it did not see */
		uint64_t arrive_s = t + 300 + 2000, s_poll = arrive_s + 500;
		poll(&s, t, arrive_s, 0, NULL, NULL, NULL, 0); /* spinning, empty */
		uint64_t id = 2000 + i;
		int r1 = 1, r0 = 0;
		poll(&s, s_poll - 100, s_poll, 1, &id, &r1, &arrive_s, 0);
		post_recv(&s, s_poll + 50, 2000 + i + 1);
		uint64_t s_post = s_poll + 1000;
		post_send(&s, s_post, i);
		uint64_t arrive_c = s_post + 300 + 2000, c_poll = arrive_c + 500;
		uint64_t sid = i;
		poll(&s, arrive_c + 100, arrive_c + 200, 1, &sid, &r0, &arrive_c, 0);
		/* the client: its send completes when the server got it (acked at once) */
		poll(&c, t + 400, arrive_s, 0, NULL, NULL, NULL, 0);
		uint64_t cid = i;
		poll(&c, arrive_s + 400, arrive_s + 500, 1, &cid, &r0, &arrive_s, 0);
		poll(&c, arrive_s + 600, arrive_c, 0, NULL, NULL, NULL, 0);
		uint64_t rid = 1000u + i;
		int rv = 1;
		poll(&c, c_poll - 100, c_poll, 1, &rid, &rv, &arrive_c, 0);
		post_recv(&c, c_poll + 50, 1000 + i + 1);
		t = c_poll + 1000;
	}
	rbt_tb_close(c.tb, NULL);
	rbt_tb_close(s.tb, NULL);
	return 0;
}
