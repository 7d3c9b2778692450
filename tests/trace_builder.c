/* trace_builder.c - synthetic traces for tests and benchmarks (trace_builder.h).
 *
 * Owns the plumbing every fixture used to repeat: the header's defaults, the
 * current stream, one scratch event, and one failure line. It must never invent a
 * handle, a key or a timestamp the caller did not give, nor touch a verbs device.
 */
#include "tests/trace_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rbt_tb {
	struct rbt_writer *w;
	struct rbt_header hdr;
	const char *tool;
	const char *path;
	uint32_t stream;
	struct rbt_event ev;
};

static void die(const struct rbt_tb *tb, int err)
{
	fprintf(stderr, "%s: %s: %s\n", tb->tool, tb->path, rbt_strerror(err));
	exit(1);
}

struct rbt_tb *rbt_tb_open_hdr(const char *path, const struct rbt_header *hdr,
			       const struct rbt_tb_opts *opts)
{
	static const struct rbt_tb_opts none;
	const struct rbt_tb_opts *o = opts ? opts : &none;
	struct rbt_tb *tb = calloc(1, sizeof(*tb));
	if (!tb) {
		fprintf(stderr, "trace_builder: out of memory\n");
		exit(1);
	}
	tb->tool = o->tool ? o->tool : "trace_builder";
	tb->path = path;
	tb->hdr = *hdr;
	tb->stream = o->stream;
	struct rbt_writer_opts wo = { .chunk_bytes = o->chunk_bytes,
				      .zstd_level = o->zstd_level,
				      .ts_column = o->ts_column };
	int err = rbt_writer_open(path, hdr, &wo, &tb->w);
	if (err)
		die(tb, err);
	return tb;
}

struct rbt_tb *rbt_tb_open(const char *path, const struct rbt_tb_opts *opts)
{
	static const struct rbt_tb_opts none;
	const struct rbt_tb_opts *o = opts ? opts : &none;
	const char *tool = o->tool ? o->tool : "trace_builder";
	struct rbt_header h = {
		.pid = o->pid,
		.ppid = o->ppid,
		.clock_source = o->clock_source ? o->clock_source : RBT_CLOCK_MONO,
		.clock_hz = o->no_clock	  ? 0
			    : o->clock_hz ? o->clock_hz
					  : 1000000000ull,
		.start = { o->t0, o->mono0 ? o->mono0 : o->t0, o->real0 },
		.host = o->host ? o->host : "synth-host",
		.cmdline = o->cmdline ? o->cmdline : tool,
		.tool = tool,
	};
	return rbt_tb_open_hdr(path, &h, o);
}

void rbt_tb_close(struct rbt_tb *tb, const struct rbt_trailer *trailer)
{
	int err = rbt_writer_close(tb->w, trailer);
	if (err)
		die(tb, err);
	free(tb);
}

struct rbt_writer *rbt_tb_writer(struct rbt_tb *tb)
{
	return tb->w;
}

const struct rbt_header *rbt_tb_header(const struct rbt_tb *tb)
{
	return &tb->hdr;
}

void rbt_tb_stream(struct rbt_tb *tb, uint32_t stream)
{
	int err = rbt_writer_begin_chunk(tb->w, stream);
	if (err)
		die(tb, err);
	tb->stream = stream;
}

struct rbt_event *rbt_tb_new(struct rbt_tb *tb, uint32_t type, uint64_t ts)
{
	memset(&tb->ev, 0, sizeof(tb->ev));
	tb->ev.type = type;
	tb->ev.stream = tb->stream;
	tb->ev.ts = ts;
	return &tb->ev;
}

void rbt_tb_append(struct rbt_tb *tb, const struct rbt_event *ev)
{
	int err = rbt_writer_append(tb->w, ev);
	if (err)
		die(tb, err);
}

void rbt_tb_put(struct rbt_tb *tb, struct rbt_event *ev)
{
	ev->stream = tb->stream;
	rbt_tb_append(tb, ev);
}

void rbt_tb_thread(struct rbt_tb *tb, uint64_t ts, uint64_t tid, const char *name)
{
	struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_THREAD, ts);
	ev->u.thread.tid = tid;
	ev->u.thread.name = name;
	rbt_tb_put(tb, ev);
}

void rbt_tb_device(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t ctx,
		   const char *name)
{
	struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_DEVICE_OPEN, ts);
	ev->u.device_open.ts_exit = te;
	ev->u.device_open.ctx = ctx;
	ev->u.device_open.name = name;
	rbt_tb_put(tb, ev);
}

void rbt_tb_pd(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t ctx, uint64_t pd)
{
	struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_PD_ALLOC, ts);
	ev->u.pd_alloc.ts_exit = te;
	ev->u.pd_alloc.ctx = ctx;
	ev->u.pd_alloc.pd = pd;
	rbt_tb_put(tb, ev);
}

void rbt_tb_mr(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t pd, uint64_t mr,
	       uint64_t addr, uint64_t length, uint32_t lkey, uint32_t rkey)
{
	struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_MR_REG, ts);
	struct rbt_ev_mr_reg *m = &ev->u.mr_reg;
	m->ts_exit = te;
	m->pd = pd;
	m->mr = mr;
	m->addr = addr;
	m->length = length;
	m->access = 7; /* LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ */
	m->lkey = lkey;
	m->rkey = rkey;
	rbt_tb_put(tb, ev);
}

void rbt_tb_cq(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t ctx, uint64_t cq,
	       uint32_t cqe)
{
	struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_CQ_CREATE, ts);
	ev->u.cq_create.ts_exit = te;
	ev->u.cq_create.ctx = ctx;
	ev->u.cq_create.cq = cq;
	ev->u.cq_create.cqe_asked = cqe;
	ev->u.cq_create.cqe = cqe;
	rbt_tb_put(tb, ev);
}

void rbt_tb_qp(struct rbt_tb *tb, uint64_t ts, uint64_t te, const struct rbt_tb_qp *q)
{
	struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_QP_CREATE, ts);
	struct rbt_ev_qp_create *c = &ev->u.qp_create;
	c->ts_exit = te;
	c->ctx = q->ctx;
	c->pd = q->pd;
	c->qp = q->qp;
	c->qp_num = q->qp_num;
	c->qp_type = q->qp_type ? q->qp_type : 2; /* IBV_QPT_RC */
	c->send_cq = q->send_cq;
	c->recv_cq = q->recv_cq;
	c->srq = q->srq;
	c->xrcd = q->xrcd;
	c->max_send_wr = q->max_send_wr;
	c->max_recv_wr = q->max_recv_wr;
	c->max_send_sge = q->max_send_sge;
	c->max_recv_sge = q->max_recv_sge;
	c->max_inline_data = q->max_inline_data;
	c->sq_sig_all = q->sq_sig_all;
	rbt_tb_put(tb, ev);
}

void rbt_tb_modify(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t qp,
		   uint32_t state, uint32_t mask, const struct rbt_ev_qp_modify *attr)
{
	struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_QP_MODIFY, ts);
	struct rbt_ev_qp_modify *m = &ev->u.qp_modify;
	if (attr)
		*m = *attr;
	m->ts_exit = te;
	m->qp = qp;
	m->qp_state = state;
	m->attr_mask = mask;
	rbt_tb_put(tb, ev);
}

void rbt_tb_destroy_qp(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t qp)
{
	struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_QP_DESTROY, ts);
	ev->u.qp_destroy.ts_exit = te;
	ev->u.qp_destroy.qp = qp;
	rbt_tb_put(tb, ev);
}

void rbt_tb_dereg_mr(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t mr)
{
	struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_MR_DEREG, ts);
	ev->u.mr_dereg.ts_exit = te;
	ev->u.mr_dereg.mr = mr;
	rbt_tb_put(tb, ev);
}

struct rbt_send_wr rbt_tb_send_wr(uint64_t wr_id, uint32_t opcode, uint32_t flags,
				  const struct rbt_sge *sge)
{
	struct rbt_send_wr wr;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.opcode = opcode;
	wr.send_flags = flags;
	wr.n_sges = sge ? 1 : 0;
	wr.sges = sge;
	return wr;
}

struct rbt_recv_wr rbt_tb_recv_wr(uint64_t wr_id, const struct rbt_sge *sge)
{
	struct rbt_recv_wr wr;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.n_sges = sge ? 1 : 0;
	wr.sges = sge;
	return wr;
}

struct rbt_wc rbt_tb_wc(uint64_t wr_id, uint32_t opcode, uint32_t qp_num,
			uint32_t byte_len)
{
	struct rbt_wc wc;
	memset(&wc, 0, sizeof(wc));
	wc.wr_id = wr_id;
	wc.opcode = opcode;
	wc.qp_num = qp_num;
	wc.byte_len = byte_len;
	return wc;
}

void rbt_tb_post_send(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t qp,
		      uint32_t qp_num, const struct rbt_send_wr *wrs, uint32_t n)
{
	struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_POST_SEND, ts);
	ev->u.post_send.ts_exit = te;
	ev->u.post_send.qp = qp;
	ev->u.post_send.qp_num = qp_num;
	ev->u.post_send.n_wrs = n;
	ev->u.post_send.wrs = wrs;
	rbt_tb_put(tb, ev);
}

void rbt_tb_post_recv(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t qp,
		      uint32_t qp_num, const struct rbt_recv_wr *wrs, uint32_t n)
{
	struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_POST_RECV, ts);
	ev->u.post_recv.ts_exit = te;
	ev->u.post_recv.qp = qp;
	ev->u.post_recv.qp_num = qp_num;
	ev->u.post_recv.n_wrs = n;
	ev->u.post_recv.wrs = wrs;
	rbt_tb_put(tb, ev);
}

void rbt_tb_post_srq_recv(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t srq,
			  const struct rbt_recv_wr *wrs, uint32_t n)
{
	struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_POST_SRQ_RECV, ts);
	ev->u.post_srq_recv.ts_exit = te;
	ev->u.post_srq_recv.srq = srq;
	ev->u.post_srq_recv.n_wrs = n;
	ev->u.post_srq_recv.wrs = wrs;
	rbt_tb_put(tb, ev);
}

void rbt_tb_poll(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t cq, uint32_t asked,
		 const struct rbt_wc *wcs, uint32_t n, uint64_t count)
{
	struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_POLL_CQ, ts);
	ev->u.poll_cq.ts_exit = te;
	ev->u.poll_cq.ret = n;
	ev->u.poll_cq.cq = cq;
	ev->u.poll_cq.asked = asked;
	ev->u.poll_cq.count = count;
	ev->u.poll_cq.n_wcs = n;
	ev->u.poll_cq.wcs = wcs;
	rbt_tb_put(tb, ev);
}
