/* replay_xrc_refuse.c - writes, through the writer API, traces the replayer must
 * refuse before it issues any verb, for tests/replay_xrc_test.sh:
 *   raw     one RAW_PACKET QP (number 77)
 *   nodom   one XRC_RECV QP (number 78) in an XRC domain the trace never opened
 *   tm      a tag-matching SRQ beside an RC QP (number 79)
 *
 * usage: replay_xrc_refuse raw|nodom|tm OUT.rbt
 * Test fixture only: it never touches a verbs device.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/trace_builder.h"

/* Events are 1 us apart, each returning at once (ts_exit 0). */
static uint64_t now = 1000000;

static uint64_t next_ts(void)
{
	uint64_t t = now;
	now += 1000;
	return t;
}

int main(int argc, char **argv)
{
	const char *what = argc == 3 ? argv[1] : "";

	if (strcmp(what, "raw") && strcmp(what, "nodom") && strcmp(what, "tm")) {
		fprintf(stderr, "usage: replay_xrc_refuse raw|nodom|tm OUT.rbt\n");
		return 2;
	}
	struct rbt_tb_opts o = {
		.tool = "replay_xrc_refuse", .pid = 1, .t0 = now, .stream = 1
	};
	struct rbt_tb *tb = rbt_tb_open(argv[2], &o);
	rbt_tb_device(tb, next_ts(), 0, 0x100, "synth0");
	rbt_tb_pd(tb, next_ts(), 0, 0x100, 0x200);
	rbt_tb_cq(tb, next_ts(), 0, 0x100, 0x300, 16);
	if (!strcmp(what, "tm")) {
		struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_SRQ_CREATE, next_ts());
		ev->u.srq_create.pd = 0x200;
		ev->u.srq_create.srq = 0x400;
		ev->u.srq_create.max_wr = 16;
		ev->u.srq_create.max_sge = 1;
		ev->u.srq_create.srq_type = IBV_SRQT_TM;
		ev->u.srq_create.cq = 0x300;
		rbt_tb_put(tb, ev);
	}
	struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_QP_CREATE, next_ts());
	ev->u.qp_create.ctx = 0x100;
	ev->u.qp_create.qp = 0x500;
	if (!strcmp(what, "raw")) {
		ev->u.qp_create.qp_num = 77;
		ev->u.qp_create.qp_type = IBV_QPT_RAW_PACKET;
	} else if (!strcmp(what, "nodom")) {
		ev->u.qp_create.qp_num = 78;
		ev->u.qp_create.qp_type = IBV_QPT_XRC_RECV;
		ev->u.qp_create.xrcd = 0x600; /* never opened */
		ev->u.qp_create.ex = 1;
	} else {
		ev->u.qp_create.qp_num = 79;
		ev->u.qp_create.qp_type = IBV_QPT_RC;
		ev->u.qp_create.srq = 0x400;
	}
	if (ev->u.qp_create.qp_type != IBV_QPT_XRC_RECV) {
		ev->u.qp_create.pd = 0x200;
		ev->u.qp_create.send_cq = ev->u.qp_create.recv_cq = 0x300;
		ev->u.qp_create.max_send_wr = ev->u.qp_create.max_recv_wr = 16;
		ev->u.qp_create.max_send_sge = ev->u.qp_create.max_recv_sge = 1;
	}
	rbt_tb_put(tb, ev);
	rbt_tb_close(tb, NULL);
	return 0;
}
