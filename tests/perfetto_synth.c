/* perfetto_synth.c - writes a trace shaped like perftest's ib_write_bw client
 * (one thread, one RC QP of 128 send WRs, 64 KiB RDMA writes posted one per
 * ibv_post_send, every 100th signaled, polled when the send queue is full with the
 * empty polls folded), for the Perfetto timeline's size test: recording half a
 * million WRs over softnic takes longer than a test should.
 *
 * usage: perfetto_synth OUT [--wrs N]   (default 500000)
 * Test fixture only: it never touches a verbs device.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "tests/trace_builder.h"

#define DEPTH 128
#define SIG   100

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: perfetto_synth OUT [--wrs N]\n");
		return 2;
	}
	uint64_t wrs = 500000;
	if (argc == 4 && !strcmp(argv[2], "--wrs"))
		wrs = strtoull(argv[3], NULL, 0);
	struct rbt_tb_opts o = { .tool = "perfetto_synth", .pid = 4242, .t0 = 1000 };
	struct rbt_tb *tb = rbt_tb_open(argv[1], &o);
	uint64_t t = 2000;
	const uint64_t ctx = 0x1000, pd = 0x2000, mr = 0x3000, cq = 0x4000, qp = 0x5000;
	const uint32_t qpn = 0x11;
	rbt_tb_thread(tb, t, 7, "main");
	rbt_tb_device(tb, t, t + 100, ctx, "softnic0");
	t += 200;
	rbt_tb_pd(tb, t, t + 100, ctx, pd);
	t += 200;
	rbt_tb_mr(tb, t, t + 100, pd, mr, 0x7f0000000000ull, 65536, 0x100, 0x200);
	t += 200;
	rbt_tb_cq(tb, t, t + 100, ctx, cq, 256);
	struct rbt_tb_qp q = { .ctx = ctx,
			       .pd = pd,
			       .qp = qp,
			       .send_cq = cq,
			       .recv_cq = cq,
			       .qp_num = qpn,
			       .max_send_wr = DEPTH,
			       .max_recv_wr = 1,
			       .max_send_sge = 1,
			       .max_recv_sge = 1 };
	t += 200;
	rbt_tb_qp(tb, t, t + 100, &q);
	t += 200;
	rbt_tb_modify(tb, t, t + 100, qp, IBV_QPS_INIT, IBV_QP_STATE, NULL);
	t += 200;
	rbt_tb_modify(tb, t, t + 100, qp, IBV_QPS_RTR, IBV_QP_STATE, NULL);
	t += 200;
	rbt_tb_modify(tb, t, t + 100, qp, IBV_QPS_RTS, IBV_QP_STATE, NULL);
	t += 1000;
	struct rbt_sge sge = { .addr = 0x7f0000000000ull,
			       .length = 65536,
			       .lkey = 0x100 };
	/* signaled WRs outstanding: their ids and when the NIC completes them */
	uint64_t sig_id[DEPTH / SIG + 2], sig_done[DEPTH / SIG + 2];
	int n_sig = 0;
	uint64_t posted = 0, completed = 0, wire = t;
	while (completed < wrs) {
		bool full = posted - completed >= DEPTH || posted == wrs;
		if (n_sig && (full || sig_done[0] <= t)) {
			if (sig_done[0] > t) { /* empty polls until it is there */
				uint64_t n = (sig_done[0] - t) / 40 + 1;
				rbt_tb_poll(tb, t, t + 30, cq, 16, NULL, 0, n);
				t = sig_done[0] + 10;
			}
			struct rbt_wc wc =
				rbt_tb_wc(sig_id[0], IBV_WC_RDMA_WRITE, qpn, 0);
			rbt_tb_poll(tb, t, t + 60, cq, 16, &wc, 1, 1);
			t += 90;
			completed = sig_id[0] + 1;
			memmove(sig_id, sig_id + 1,
				(size_t)(n_sig - 1) * sizeof(*sig_id));
			memmove(sig_done, sig_done + 1,
				(size_t)(n_sig - 1) * sizeof(*sig_done));
			n_sig--;
			continue;
		}
		bool sig = posted % SIG == SIG - 1 || posted == wrs - 1;
		struct rbt_send_wr w = rbt_tb_send_wr(posted, IBV_WR_RDMA_WRITE,
						      sig ? IBV_SEND_SIGNALED : 0, &sge);
		w.remote_addr = 0x7e0000000000ull;
		w.rkey = 0x300;
		uint64_t dur = 120 + (posted * 7919) % 90; /* a post takes 120-210 ns */
		rbt_tb_post_send(tb, t, t + dur, qp, qpn, &w, 1);
		/* 64 KiB at ~50 Gb/s: the wire is busy 10.5 us per WR */
		wire = (wire > t ? wire : t) + 10500;
		if (sig) {
			sig_id[n_sig] = posted;
			sig_done[n_sig++] = wire + 900;
		}
		posted++;
		t += dur + 40 + (posted * 104729) % 60;
	}
	rbt_tb_destroy_qp(tb, t, t + 100, qp);
	rbt_tb_close(tb, NULL);
	return 0;
}
