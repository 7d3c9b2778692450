/* trace_builder.h - one way for tests, fixtures and benchmarks to write synthetic
 * traces: open a trace with a synthetic header, add a device / PD / MR / CQ / QP,
 * post work requests and complete them, every event at an explicit timestamp.
 *
 * Every helper writes exactly one event whose fields are the arguments plus the
 * defaults named beside it; anything else is set through rbt_tb_new() and
 * rbt_tb_put(), which still save the type / stream / timestamp / error plumbing.
 * Handles, QP numbers and keys are the caller's: the builder never invents an
 * identity, so a trace says what its test asserts on.
 *
 * Test and bench code only: a failed write prints one line naming the tool and the
 * file and exits(1) (a fixture that cannot write its trace has nothing to test). It
 * never touches a verbs device. Usable from C and C++.
 */
#ifndef RBT_TRACE_BUILDER_H
#define RBT_TRACE_BUILDER_H

#include <stddef.h>
#include <stdint.h>

#include "trace_format/rbt_format.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rbt_tb;

/* Zero means the default given beside each field. */
struct rbt_tb_opts {
	const char *tool;      /* "trace_builder"; names the writer and errors */
	const char *host;      /* "synth-host" */
	const char *cmdline;   /* = tool */
	uint32_t pid, ppid;    /* 0, 0 */
	uint32_t clock_source; /* RBT_CLOCK_MONO */
	uint64_t clock_hz;     /* 1e9 (a tick is 1 ns); see no_clock */
	int no_clock;	       /* clock_hz 0 even so (a trace without a clock) */
	uint64_t t0;	       /* header start pair: ticks */
	uint64_t mono0, real0; /* its CLOCK_MONOTONIC / REALTIME (0: mono = t0) */
	uint32_t stream;       /* the stream events go to until rbt_tb_stream() */
	size_t chunk_bytes;    /* the writer's (0: its default) */
	int zstd_level;	       /* the writer's (0: its default) */
	int ts_column;	       /* the writer's timestamp column (recorder's layout) */
};

/* Opens PATH for writing (exits on failure). A NULL opts is all defaults. */
struct rbt_tb *rbt_tb_open(const char *path, const struct rbt_tb_opts *opts);
/* Same, with a header the caller wrote in full (opts: tool, stream, chunking). */
struct rbt_tb *rbt_tb_open_hdr(const char *path, const struct rbt_header *hdr,
			       const struct rbt_tb_opts *opts);
/* Writes the trailer (NULL: the writer's default, end pair zero) and closes. */
void rbt_tb_close(struct rbt_tb *tb, const struct rbt_trailer *trailer);
/* The writer underneath, for tests of the writer itself. */
struct rbt_writer *rbt_tb_writer(struct rbt_tb *tb);
const struct rbt_header *rbt_tb_header(const struct rbt_tb *tb);

/* Begins a chunk for STREAM; later events go to it. */
void rbt_tb_stream(struct rbt_tb *tb, uint32_t stream);
/* The generic form: a zeroed event of TYPE at TS in the current stream (the
 * builder's scratch event: valid until the next rbt_tb_new), then put it. */
struct rbt_event *rbt_tb_new(struct rbt_tb *tb, uint32_t type, uint64_t ts);
void rbt_tb_put(struct rbt_tb *tb, struct rbt_event *ev);
/* Appends EV as given, stream and ts included (exits on failure). */
void rbt_tb_append(struct rbt_tb *tb, const struct rbt_event *ev);

/* ---- resources: one event each, at ts, returning at te, ret 0 ---------------- */
void rbt_tb_thread(struct rbt_tb *tb, uint64_t ts, uint64_t tid, const char *name);
void rbt_tb_device(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t ctx,
		   const char *name);
void rbt_tb_pd(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t ctx, uint64_t pd);
/* access: LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ (7); iova 0 (ibv_reg_mr). */
void rbt_tb_mr(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t pd, uint64_t mr,
	       uint64_t addr, uint64_t length, uint32_t lkey, uint32_t rkey);
/* cqe_asked = cqe. */
void rbt_tb_cq(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t ctx, uint64_t cq,
	       uint32_t cqe);

/* A QP's creation; fields left zero in the description are left zero. */
struct rbt_tb_qp {
	uint64_t ctx, pd, qp, send_cq, recv_cq, srq, xrcd;
	uint32_t qp_num, qp_type; /* qp_type: enum ibv_qp_type, 0 = RC (2) */
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge;
	uint32_t max_inline_data, sq_sig_all;
};
void rbt_tb_qp(struct rbt_tb *tb, uint64_t ts, uint64_t te, const struct rbt_tb_qp *q);
/* A modify of QP to STATE with MASK; the other attributes from ATTR (NULL: none;
 * its ts_exit, qp, qp_state and attr_mask are ignored). */
void rbt_tb_modify(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t qp,
		   uint32_t state, uint32_t mask, const struct rbt_ev_qp_modify *attr);
void rbt_tb_destroy_qp(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t qp);
void rbt_tb_dereg_mr(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t mr);

/* ---- the data path ------------------------------------------------------------ */
struct rbt_send_wr rbt_tb_send_wr(uint64_t wr_id, uint32_t opcode, uint32_t flags,
				  const struct rbt_sge *sge);
struct rbt_recv_wr rbt_tb_recv_wr(uint64_t wr_id, const struct rbt_sge *sge);
/* opcode: enum ibv_wc_opcode; status 0 (SUCCESS). */
struct rbt_wc rbt_tb_wc(uint64_t wr_id, uint32_t opcode, uint32_t qp_num,
			uint32_t byte_len);

/* ibv_post_send / ibv_post_recv of N WRs, ret 0. */
void rbt_tb_post_send(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t qp,
		      uint32_t qp_num, const struct rbt_send_wr *wrs, uint32_t n);
void rbt_tb_post_recv(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t qp,
		      uint32_t qp_num, const struct rbt_recv_wr *wrs, uint32_t n);
void rbt_tb_post_srq_recv(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t srq,
			  const struct rbt_recv_wr *wrs, uint32_t n);
/* One ibv_poll_cq returning the N completions (ret = n). COUNT, as given, is how
 * many polls the event stands for (1, or N folded empty polls: see poll_cq in
 * rbt_format.h). */
void rbt_tb_poll(struct rbt_tb *tb, uint64_t ts, uint64_t te, uint64_t cq, uint32_t asked,
		 const struct rbt_wc *wcs, uint32_t n, uint64_t count);

#ifdef __cplusplus
}
#endif
#endif
