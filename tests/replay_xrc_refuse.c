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

#include "trace_format/rbt_format.h"

static struct rbt_writer *w;
static uint64_t now = 1000000;

static void put(struct rbt_event *ev)
{
	ev->stream = 1;
	ev->ts = now;
	now += 1000;
	if (rbt_writer_append(w, ev)) {
		fprintf(stderr, "replay_xrc_refuse: append failed\n");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	struct rbt_header h = { 0 };
	struct rbt_event ev;
	const char *what = argc == 3 ? argv[1] : "";

	if (strcmp(what, "raw") && strcmp(what, "nodom") && strcmp(what, "tm")) {
		fprintf(stderr, "usage: replay_xrc_refuse raw|nodom|tm OUT.rbt\n");
		return 2;
	}
	h.pid = 1;
	h.clock_source = RBT_CLOCK_MONO;
	h.clock_hz = 1000000000ull;
	h.start.ticks = now;
	h.start.mono_ns = now;
	h.host = "synth-host";
	h.cmdline = "replay_xrc_refuse";
	h.tool = "replay_xrc_refuse";
	if (rbt_writer_open(argv[2], &h, NULL, &w)) {
		fprintf(stderr, "replay_xrc_refuse: cannot write %s\n", argv[2]);
		return 1;
	}
	memset(&ev, 0, sizeof(ev));
	ev.type = RBT_EV_DEVICE_OPEN;
	ev.u.device_open.ctx = 0x100;
	ev.u.device_open.name = "synth0";
	put(&ev);
	memset(&ev, 0, sizeof(ev));
	ev.type = RBT_EV_PD_ALLOC;
	ev.u.pd_alloc.ctx = 0x100;
	ev.u.pd_alloc.pd = 0x200;
	put(&ev);
	memset(&ev, 0, sizeof(ev));
	ev.type = RBT_EV_CQ_CREATE;
	ev.u.cq_create.ctx = 0x100;
	ev.u.cq_create.cq = 0x300;
	ev.u.cq_create.cqe_asked = ev.u.cq_create.cqe = 16;
	put(&ev);
	if (!strcmp(what, "tm")) {
		memset(&ev, 0, sizeof(ev));
		ev.type = RBT_EV_SRQ_CREATE;
		ev.u.srq_create.pd = 0x200;
		ev.u.srq_create.srq = 0x400;
		ev.u.srq_create.max_wr = 16;
		ev.u.srq_create.max_sge = 1;
		ev.u.srq_create.srq_type = IBV_SRQT_TM;
		ev.u.srq_create.cq = 0x300;
		put(&ev);
	}
	memset(&ev, 0, sizeof(ev));
	ev.type = RBT_EV_QP_CREATE;
	ev.u.qp_create.ctx = 0x100;
	ev.u.qp_create.qp = 0x500;
	if (!strcmp(what, "raw")) {
		ev.u.qp_create.qp_num = 77;
		ev.u.qp_create.qp_type = IBV_QPT_RAW_PACKET;
	} else if (!strcmp(what, "nodom")) {
		ev.u.qp_create.qp_num = 78;
		ev.u.qp_create.qp_type = IBV_QPT_XRC_RECV;
		ev.u.qp_create.xrcd = 0x600; /* never opened */
		ev.u.qp_create.ex = 1;
	} else {
		ev.u.qp_create.qp_num = 79;
		ev.u.qp_create.qp_type = IBV_QPT_RC;
		ev.u.qp_create.srq = 0x400;
	}
	if (ev.u.qp_create.qp_type != IBV_QPT_XRC_RECV) {
		ev.u.qp_create.pd = 0x200;
		ev.u.qp_create.send_cq = ev.u.qp_create.recv_cq = 0x300;
		ev.u.qp_create.max_send_wr = ev.u.qp_create.max_recv_wr = 16;
		ev.u.qp_create.max_send_sge = ev.u.qp_create.max_recv_sge = 1;
	}
	put(&ev);
	return rbt_writer_close(w, NULL) ? 1 : 0;
}
