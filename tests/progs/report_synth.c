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

#include "trace_format/rbt_format.h"

struct end {
	struct rbt_writer *w;
	uint32_t stream;
	uint64_t qp, cq, qpn, peer;
	int nic;
};

static void put(struct end *e, struct rbt_event *ev, uint64_t ts)
{
	ev->ts = ts;
	ev->stream = e->stream;
	if (rbt_writer_append(e->w, ev)) {
		fprintf(stderr, "report_synth: append failed\n");
		exit(1);
	}
}

static uint64_t nic_of(uint64_t host)
{
	return host / 4 + 123456789; /* a 250 MHz NIC clock with an offset */
}

static void setup(struct end *e, int bad_dest)
{
	struct rbt_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.type = RBT_EV_THREAD;
	ev.u.thread.tid = e->stream;
	ev.u.thread.name = "main";
	put(e, &ev, 100);
	memset(&ev, 0, sizeof(ev));
	ev.type = RBT_EV_MR_REG;
	ev.u.mr_reg.ts_exit = 900;
	ev.u.mr_reg.pd = 0xd0;
	ev.u.mr_reg.mr = 0xe0;
	ev.u.mr_reg.addr = 0x10000;
	ev.u.mr_reg.length = 4096;
	ev.u.mr_reg.lkey = 0x42;
	ev.u.mr_reg.rkey = 0x43;
	ev.u.mr_reg.access = 7;
	put(e, &ev, 500);
	memset(&ev, 0, sizeof(ev));
	ev.type = RBT_EV_CQ_CREATE;
	ev.u.cq_create.ts_exit = 1100;
	ev.u.cq_create.ctx = 0xc0;
	ev.u.cq_create.cq = e->cq;
	ev.u.cq_create.cqe = 64;
	ev.u.cq_create.cqe_asked = 64;
	ev.u.cq_create.ts_source = e->nic ? 1 : 0;
	put(e, &ev, 1000);
	memset(&ev, 0, sizeof(ev));
	ev.type = RBT_EV_QP_CREATE;
	struct rbt_ev_qp_create *q = &ev.u.qp_create;
	q->ts_exit = 2100;
	q->ctx = 0xc0;
	q->pd = 0xd0;
	q->qp = e->qp;
	q->qp_num = e->qpn;
	q->qp_type = IBV_QPT_RC;
	q->send_cq = q->recv_cq = e->cq;
	q->max_send_wr = 16;
	q->max_recv_wr = 16;
	q->max_inline_data = 64;
	put(e, &ev, 2000);
	for (int s = IBV_QPS_INIT; s <= IBV_QPS_RTS; s++) {
		memset(&ev, 0, sizeof(ev));
		ev.type = RBT_EV_QP_MODIFY;
		struct rbt_ev_qp_modify *m = &ev.u.qp_modify;
		m->ts_exit = 3000 + s * 100 + 10;
		m->qp = e->qp;
		m->qp_state = s;
		m->attr_mask = IBV_QP_STATE;
		if (s == IBV_QPS_RTR) {
			m->attr_mask |= IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					IBV_QP_RQ_PSN | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV;
			m->path_mtu = IBV_MTU_4096;
			m->dest_qp_num = bad_dest ? 0x7777 : e->peer;
			m->rq_psn = 0;
			m->min_rnr_timer = 12;
		} else if (s == IBV_QPS_RTS) {
			m->attr_mask |= IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
					IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
			m->sq_psn = 0;
			m->timeout = 14;
			m->retry_cnt = 7;
			m->rnr_retry = 7;
		}
		put(e, &ev, 3000 + s * 100);
	}
}

static void clock_sample(struct end *e, uint64_t ts)
{
	if (!e->nic)
		return;
	struct rbt_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.type = RBT_EV_CLOCK_SAMPLE;
	ev.u.clock_sample.ctx = 0xc0;
	ev.u.clock_sample.nic_ts = nic_of(ts);
	ev.u.clock_sample.nic_hz = 250000000;
	ev.u.clock_sample.mono_ns = ts;
	put(e, &ev, ts);
}

static struct rbt_sge sge = { .addr = 0x10000, .length = 32, .lkey = 0x42 };

static void post_send(struct end *e, uint64_t ts, uint64_t id)
{
	struct rbt_send_wr wr;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	wr.n_sges = 1;
	wr.sges = &sge;
	struct rbt_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.type = RBT_EV_POST_SEND;
	ev.u.post_send.ts_exit = ts + 300;
	ev.u.post_send.qp = e->qp;
	ev.u.post_send.qp_num = e->qpn;
	ev.u.post_send.n_wrs = 1;
	ev.u.post_send.wrs = &wr;
	put(e, &ev, ts);
}

static void post_recv(struct end *e, uint64_t ts, uint64_t id)
{
	struct rbt_recv_wr wr;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.n_sges = 1;
	wr.sges = &sge;
	struct rbt_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.type = RBT_EV_POST_RECV;
	ev.u.post_recv.ts_exit = ts + 50;
	ev.u.post_recv.qp = e->qp;
	ev.u.post_recv.qp_num = e->qpn;
	ev.u.post_recv.n_wrs = 1;
	ev.u.post_recv.wrs = &wr;
	put(e, &ev, ts);
}

/* comp: host time each completion happened (for its NIC timestamp). */
static void poll(struct end *e, uint64_t ts, uint64_t exit, int n, const uint64_t *ids,
		 const int *recv, const uint64_t *comp, int status)
{
	struct rbt_wc wcs[2];
	memset(wcs, 0, sizeof(wcs));
	for (int i = 0; i < n; i++) {
		wcs[i].wr_id = ids[i];
		wcs[i].qp_num = e->qpn;
		wcs[i].opcode = recv[i] ? IBV_WC_RECV : IBV_WC_SEND;
		wcs[i].byte_len = 32;
		wcs[i].status = status;
		wcs[i].hw_ts = e->nic ? nic_of(comp[i]) : 0;
	}
	struct rbt_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.type = RBT_EV_POLL_CQ;
	ev.u.poll_cq.ts_exit = exit;
	ev.u.poll_cq.ret = n;
	ev.u.poll_cq.cq = e->cq;
	ev.u.poll_cq.asked = 2;
	ev.u.poll_cq.count = n ? 1 : (exit - ts) / 50;
	ev.u.poll_cq.n_wcs = (uint32_t)n;
	ev.u.poll_cq.wcs = wcs;
	put(e, &ev, ts);
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
	struct end c = { .stream = 4001,
			 .qp = 0xa000,
			 .cq = 0xc000,
			 .qpn = 0x11,
			 .peer = 0x22,
			 .nic = nic };
	struct end s = { .stream = 4002,
			 .qp = 0xb000,
			 .cq = 0xd000,
			 .qpn = 0x22,
			 .peer = 0x11,
			 .nic = nic };
	struct rbt_header h;
	memset(&h, 0, sizeof(h));
	h.clock_source = RBT_CLOCK_MONO;
	h.clock_hz = 1000000000;
	h.start.real_ns = 1700000000000000000ull;
	h.host = "synth";
	h.tool = "report_synth";
	struct rbt_writer_opts o = { .chunk_bytes = 16384 };
	h.pid = 111;
	h.cmdline = "client";
	if (rbt_writer_open(paths[0], &h, &o, &c.w)) {
		fprintf(stderr, "report_synth: %s: cannot write\n", paths[0]);
		return 1;
	}
	h.pid = 222;
	h.cmdline = "server";
	if (rbt_writer_open(paths[1], &h, &o, &s.w)) {
		fprintf(stderr, "report_synth: %s: cannot write\n", paths[1]);
		return 1;
	}
	rbt_writer_begin_chunk(c.w, c.stream);
	rbt_writer_begin_chunk(s.w, s.stream);
	setup(&c, retry);
	setup(&s, 0);
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
	if (rbt_writer_close(c.w, NULL) || rbt_writer_close(s.w, NULL)) {
		fprintf(stderr, "report_synth: close failed\n");
		return 1;
	}
	return 0;
}
