/* rbt_model.h - the one public interface of model/: what a trace means, computed once.
 *
 * The model reads decoded events (trace_format's reader) of one or more traces and
 * keeps, for each trace:
 * - the resource tables: every object (device context, PD, MR, MW, XRC domain,
 *   completion channel, CQ, SRQ, QP, AH) by handle and QPs by QP number, each with its
 *   lifetime. A handle is a pointer of the recording process, reused once its object
 *   is destroyed: a handle created again is a new object (a new struct, a new id).
 * - the clocks: trace ticks to ns since the trace's start, to ns on the timeline
 *   shared by all the traces (aligned on the TSC for one host's traces, else by
 *   their real-time starts), to the trace's
 *   CLOCK_MONOTONIC, and a NIC clock to host ticks through a least-squares model
 *   fitted on the trace's clock samples.
 * - the post -> completion join: posts are joined to completions on (QP number,
 *   wr_id), never wr_id alone; unsignaled send WRs are retired by the next signaled
 *   one of their queue; receives come from the QP's own queue, its SRQ, or for an XRC
 *   receive from any XRC SRQ of the trace; CQs may be shared by several QPs; extended
 *   polls that read no QP number are resolved through the CQ's QPs; a completion read
 *   before its post (another thread's chunk came first) waits for the post; a NIC
 *   timestamp read before its device's first clock sample waits for the sample.
 *   Each completed WR is handed to ops->wr_done once, with how its completion time is
 *   known (exact through the NIC clock, or bounded by the last empty poll); each WR
 *   still outstanding at rbt_model_finish() once more with no completion.
 * Several traces are read together merged by aligned time (rbt_model_run_files()),
 * so both ends of a connection are joined while their work is outstanding, and QPs
 * are paired across traces by their dest_qp_num.
 *
 * Memory grows with the resources and the work outstanding, never with the trace's
 * length (unless opts.keep_events asks for copies of the resource events).
 * The model must never exit, print, or trust an event: every field of a damaged
 * trace may be garbage, every lookup can miss. It depends on trace_format/ only: it
 * takes the verbs constants (ABI values) from the verbs header and links no RDMA
 * library.
 * Functions return 0 or a negative errno.
 */
#ifndef RBT_MODEL_H
#define RBT_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trace_format/rbt_format.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rbt_model;

/* ---- objects ------------------------------------------------------------------ */

enum rbt_model_kind {
	RBT_MODEL_CTX = 0, /* device_open .. device_close, handle = ctx */
	RBT_MODEL_PD,
	RBT_MODEL_MR,
	RBT_MODEL_MW,
	RBT_MODEL_XRCD,
	RBT_MODEL_CHANNEL,
	RBT_MODEL_CQ,
	RBT_MODEL_SRQ,
	RBT_MODEL_QP,
	RBT_MODEL_AH,
	RBT_MODEL_KINDS
};
/* "qp" for RBT_MODEL_QP. */
const char *rbt_model_kind_name(enum rbt_model_kind k);

/* The part every object has. Objects live until rbt_model_destroy(), destroyed or
 * not, so pointers to them stay valid. */
struct rbt_model_res {
	enum rbt_model_kind kind;
	int trace;
	uint64_t handle;
	uint64_t id;	     /* 1, 2, ... in the order the model met the objects */
	uint64_t create_ts;  /* ticks of the create call; 0 when first seen in use */
	uint64_t destroy_ts; /* ticks of the destroy call (or of the create that
			      * replaced it); valid when destroyed */
	bool destroyed;
	bool created; /* its create event was seen (false: first seen in use) */
	/* With opts.keep_events: copies of the create event (NULL when the object was
	 * first seen in use), of every successful modify (qp_modify, srq_modify,
	 * cq_resize, mr_rereg) in trace order, and of the destroy. */
	const struct rbt_event *create;
	const struct rbt_event *const *mods;
	uint32_t n_mods, cap_mods;
	const struct rbt_event *destroy;
	void *user; /* the consumer's (set it in ops->res_new) */
	/* The trace's objects of this kind, newest first (rbt_model_list()). */
	struct rbt_model_res *next_of_kind;
};

/* A FIFO of fixed-size elements (the outstanding WRs of a queue). Read n; the rest
 * is the container's. Also usable by consumers for their own FIFOs (elem set). */
struct rbt_model_ring {
	void *v;
	uint32_t elem, cap, head, n; /* cap: a power of two */
};
static inline void *rbt_model_ring_at(const struct rbt_model_ring *r, uint32_t i)
{
	return (char *)r->v + (size_t)((r->head + i) & (r->cap - 1)) * r->elem;
}
void *rbt_model_ring_grow(struct rbt_model_ring *r); /* push into a full ring */
/* A new element at the tail (not zeroed), NULL when out of memory. */
static inline void *rbt_model_ring_push(struct rbt_model_ring *r)
{
	if (__builtin_expect(r->n == r->cap, 0))
		return rbt_model_ring_grow(r);
	return rbt_model_ring_at(r, r->n++);
}
void rbt_model_ring_drop(struct rbt_model_ring *r, uint32_t n); /* from the head */
void rbt_model_ring_remove(struct rbt_model_ring *r, uint32_t i);
void rbt_model_ring_free(struct rbt_model_ring *r);

/* One posted WR, from its post until its completion. */
struct rbt_model_wr {
	uint64_t wr_id;
	uint64_t post_ts, post_exit; /* ticks of the post call (exit >= entry) */
	uint64_t share;		     /* ticks: (exit - entry) / WRs the post posted */
	uint64_t bytes;		     /* sum of the sge lengths (receives: 0) */
	uint64_t remote_addr, rkey;  /* send WRs */
	uint64_t lkey, sge_addr;     /* of the first sge */
	uint64_t user;		     /* the consumer's (set it in ops->wr_posted) */
	uint32_t tid;		     /* the posting thread */
	uint8_t opcode;		     /* enum ibv_wr_opcode; receives: RBT_MODEL_RECV */
	uint8_t signaled, inl, recv;
};
#define RBT_MODEL_RECV 128 /* the opcode slot of receives */

/* A completion as the join saw it: when it was polled and how its time is known. */
struct rbt_model_comp {
	uint64_t poll_ts, poll_exit; /* ticks of the poll that returned it */
	uint32_t poll_tid;
	bool recv;  /* it retired a receive */
	bool exact; /* host: its moment, NIC timestamp through the clock model */
	double host;
	uint64_t hw_ts, ctx; /* NIC timestamp and its device, 0 = none */
	uint64_t lo;	     /* without exact: it happened after this (ticks), 0 none */
	uint64_t status, vendor_err, byte_len, opcode, wr_id;
};

/* One QP state change (enum ibv_qp_state values). */
struct rbt_model_state_change {
	uint64_t ts;
	uint8_t from, to;
	uint64_t mask;
	int64_t ret;   /* a failed modify_qp: its return, to == from */
	bool implicit; /* to ERR by an error completion, not by a modify */
};
#define RBT_MODEL_STATE_UNKNOWN 255 /* a QP first seen in use */

struct rbt_model_cq;
struct rbt_model_srq;

struct rbt_model_qp {
	struct rbt_model_res res;
	uint32_t qpn, type, state; /* enum ibv_qp_type, ibv_qp_state */
	struct rbt_model_cq *scq, *rcq;
	struct rbt_model_srq *srq;
	uint64_t pd, xrcd;
	uint64_t max_send_wr, max_recv_wr, max_inline, sq_sig_all;
	/* set-up, from the successful modify_qps (the last value of each attribute) */
	bool have_rtr, have_rts, modified_to_err;
	uint64_t rtr_ts, rts_ts, modify_to_err_ts; /* ticks of the first such modify */
	uint64_t path_mtu, dest_qpn, rq_psn, sq_psn, min_rnr_timer, timeout, retry_cnt,
		rnr_retry, max_rd_atomic, max_dest_rd_atomic, ah_dlid, port;
	/* the state the device reported at its end (the recorder's query right
	 * before its destroy, why 0, or at the process's exit, why 1: the
	 * qp_final_state event); have_final false when the trace has none */
	bool have_final;
	uint32_t final_state, final_why;
	uint64_t final_ts;
	/* every state change, modify or implicit (the first 4096) */
	struct rbt_model_state_change *hist;
	uint32_t n_hist, cap_hist;
	/* the other end: a QP of any trace whose dest_qp_num is this one's number and
	 * the other way round, paired when both reached RTR */
	struct rbt_model_qp *peer;
	/* outstanding WRs (of struct rbt_model_wr): sends; receives of its own RQ */
	struct rbt_model_ring sq, rq;
	/* internal: completions waiting for their post */
	struct rbt_model_parked *parked;
	uint32_t n_parked, cap_parked;
	uint64_t park_mask;
};

struct rbt_model_cq {
	struct rbt_model_res res;
	uint64_t cqe, ctx, ts_source;
	/* completions the posts expect on it (signaled sends, receives of the QPs
	 * using it for receives), and their peak */
	int64_t outstanding, peak;
	uint64_t peak_ts;
	uint64_t capacity; /* sum of max_send_wr/max_recv_wr of the QPs feeding it */
	/* the completion bound: a poll found it empty after drained_lo (ticks) */
	bool have_drained;
	uint64_t drained_lo, drained_ts;
	/* the QPs on it (the first 4), for completions without a QP number */
	struct rbt_model_qp *qps[4];
	uint32_t n_qps;
};

struct rbt_model_srq {
	struct rbt_model_res res;
	uint64_t srq_type, srqn, max_wr;
	struct rbt_model_ring rq; /* outstanding receives */
};

struct rbt_model_mr {
	struct rbt_model_res res;
	uint64_t pd, addr, length, access, lkey, rkey;
};

/* A recording thread (stream), first seen in a thread event or asked for. */
struct rbt_model_thread {
	uint32_t tid;
	uint32_t idx;	  /* 0, 1, ... in the order the model met the trace's threads */
	const char *name; /* NULL until a thread event names it */
	void *user;
};

/* ---- callbacks ------------------------------------------------------------------
 * Every member may be NULL. They run inside rbt_model_feed() (and finish), in trace
 * order; they must not feed the model.
 */
struct rbt_model_ops {
	/* The timeline's origin is fixed (before the first event is fed). */
	void (*begin)(void *arg);
	/* A new object: created, or first seen in use (create_ts 0). */
	void (*res_new)(void *arg, struct rbt_model_res *r);
	/* A new thread of a trace, or a name given to one. */
	void (*thread)(void *arg, int trace, struct rbt_model_thread *th);
	/* Every event, before the model applies it and after: r is the object it names
	 * (a post's QP or SRQ, a poll's CQ, a modify's or destroy's object; after a
	 * create, the new object; NULL when none or unknown). Before a post, its QP
	 * is already resolved (and created when first seen). */
	void (*before)(void *arg, int trace, const struct rbt_event *ev,
		       struct rbt_model_res *r);
	void (*after)(void *arg, int trace, const struct rbt_event *ev,
		      struct rbt_model_res *r);
	/* A WR entered its queue (q: the QP, or the SRQ of a post_srq_recv); sw: its
	 * send WR in the event (NULL for receives). The consumer may set w->user. */
	void (*wr_posted)(void *arg, struct rbt_model_res *q, struct rbt_model_wr *w,
			  const struct rbt_send_wr *sw);
	/* A completion joined to its WR w (of a send: the WR named by wr_id; the
	 * unsignaled ones it retires follow in wr_done), before the WRs are handed
	 * over. For an error completion the QP moves to ERR just after. */
	void (*completion)(void *arg, struct rbt_model_qp *qp,
			   const struct rbt_model_comp *c, const struct rbt_model_wr *w);
	/* Once per completed WR: n identical WRs of one chain (same post, opcode, size,
	 * inline flag) retired by one completion come as one call when opts.batch is
	 * set (nsig of them signaled), else n is 1. c NULL: the WR was still
	 * outstanding at rbt_model_finish() (qp NULL for an SRQ's receive). */
	void (*wr_done)(void *arg, struct rbt_model_qp *qp, const struct rbt_model_wr *w,
			const struct rbt_model_comp *c, uint32_t n, uint32_t nsig);
	/* A completion no post was found for, at rbt_model_finish() (qp: where it was
	 * polled). Others (no QP, too many waiting) are only counted. */
	void (*unmatched)(void *arg, struct rbt_model_qp *qp,
			  const struct rbt_model_comp *c);
};

struct rbt_model_opts {
	const struct rbt_model_ops *ops;
	void *arg;
	int batch;	 /* see ops->wr_done */
	int keep_events; /* copies of resource events in rbt_model_res */
	/* rbt_model_run_files(): threads decoding each file ahead (the reader's
	 * rbt_reader_opts.threads; 0 or 1: none). The events fed are the same. */
	unsigned threads;
};

/* ---- traces and clocks ------------------------------------------------------------ */

struct rbt_model_trace {
	int idx;
	const char *name;
	struct rbt_header hdr; /* strings owned by the model */
	double ns_per_tick;
	int64_t align_ns; /* this trace's start (real time) - the timeline's origin */
	uint64_t events;
	uint64_t min_ts, max_ts; /* of the events with a timestamp */
	bool any_ts;
	uint64_t nic_unmapped; /* NIC timestamps no clock sample could map */
	/* what the reader saw (rbt_model_run_files() or rbt_model_set_reader_stats) */
	bool have_stats;
	struct rbt_reader_stats rstats;
	int finished;
	char reader_error[192]; /* rbt_reader_error() at the end: the last damage */
};

/* ns since the trace's start. */
static inline double rbt_model_ticks_ns(const struct rbt_model_trace *t, uint64_t ticks)
{
	return ((double)ticks - (double)t->hdr.start.ticks) * t->ns_per_tick;
}
/* ns on the shared timeline (since the earliest trace start in real time). */
static inline double rbt_model_aligned_ns(const struct rbt_model_trace *t, double ticks)
{
	return (ticks - (double)t->hdr.start.ticks) * t->ns_per_tick +
	       (double)t->align_ns;
}
/* The same clamped to [0, 9.2e18]: a damaged trace may put events anywhere. */
static inline uint64_t rbt_model_aligned_u64(const struct rbt_model_trace *t,
					     double ticks)
{
	double v = rbt_model_aligned_ns(t, ticks);
	if (!(v > 0))
		return 0;
	return v < 9.2e18 ? (uint64_t)v : (uint64_t)9.2e18;
}
/* A duration in ticks as ns, rounded, clamped to [0, 9.2e18]. Inline: the
 * attribution converts several durations per WR. */
static inline uint64_t rbt_model_dur_ns(const struct rbt_model_trace *t, double ticks)
{
	double v = ticks * t->ns_per_tick;
	if (!(v > 0))
		return 0;
	return v < 9.2e18 ? (uint64_t)(v + 0.5) : (uint64_t)9.2e18;
}
/* The trace's CLOCK_MONOTONIC in ns at ticks (from the header's start pair). */
uint64_t rbt_model_mono_ns(const struct rbt_model_trace *t, uint64_t ticks);

/* Host ticks of NIC timestamp nic of device ctx (the trace's first clock when ctx
 * has none). Returns 0, or -ENOENT when no clock sample can map it (yet). */
int rbt_model_nic_to_host(const struct rbt_model *m, int trace, uint64_t ctx,
			  uint64_t nic, double *host_ticks);

struct rbt_model_clock_fit {
	uint64_t ctx;
	uint64_t samples;
	double ns_per_nic_tick; /* fitted slope, host ns per NIC tick */
	double max_residual_ns; /* largest |prediction - sample| of the model as used */
	double rms_residual_ns; /* of the final least-squares fit */
};
/* The fit of the trace's first NIC clock; -ENOENT when it has none. */
int rbt_model_clock_fit(const struct rbt_model *m, int trace,
			struct rbt_model_clock_fit *out);

/* ---- life cycle -------------------------------------------------------------------- */

int rbt_model_create(const struct rbt_model_opts *opts, struct rbt_model **out);
/* NULL is fine. */
void rbt_model_destroy(struct rbt_model *m);

/* Declare every trace first (its header is copied; name labels it), then feed each
 * trace's events in its file order. Returns the trace's index or -errno (-EBUSY
 * once an event was fed: the timeline's origin is fixed by then). */
int rbt_model_add_trace(struct rbt_model *m, const struct rbt_header *hdr,
			const char *name);
int rbt_model_feed(struct rbt_model *m, int trace, const struct rbt_event *ev);
void rbt_model_set_reader_stats(struct rbt_model *m, int trace,
				const struct rbt_reader_stats *st, int finished);
/* Opens the files, refuses one recording given twice, adds them as traces and feeds
 * them merged by aligned time (the data path; other events as soon as they are
 * read). On error errbuf names the file and the problem. */
int rbt_model_run_files(struct rbt_model *m, const char *const *paths, int n,
			char *errbuf, size_t errlen);
/* After the last event: the WRs waiting for a clock sample get bounds, the
 * outstanding WRs and the unmatched completions are handed over. Call once. */
int rbt_model_finish(struct rbt_model *m);

/* ---- queries ------------------------------------------------------------------------ */

int rbt_model_n_traces(const struct rbt_model *m);
const struct rbt_model_trace *rbt_model_trace(const struct rbt_model *m, int trace);
/* The latest object of that kind created with handle, destroyed or not; NULL. */
struct rbt_model_res *rbt_model_by_handle(const struct rbt_model *m, int trace,
					  enum rbt_model_kind kind, uint64_t handle);
/* The latest QP with that number in the trace, destroyed or not; NULL. */
struct rbt_model_qp *rbt_model_qp_by_num(const struct rbt_model *m, int trace,
					 uint32_t qpn);
/* The live MR with that lkey / rkey; NULL. */
struct rbt_model_mr *rbt_model_mr_by_lkey(const struct rbt_model *m, int trace,
					  uint64_t lkey);
struct rbt_model_mr *rbt_model_mr_by_rkey(const struct rbt_model *m, int trace,
					  uint64_t rkey);
/* The trace's objects of a kind, newest first (follow next_of_kind). */
struct rbt_model_res *rbt_model_list(const struct rbt_model *m, int trace,
				     enum rbt_model_kind kind);
/* The by-handle table of a kind in its own (stable, hash) order: start with
 * *pos = 0; NULL at the end. */
struct rbt_model_res *rbt_model_table_next(const struct rbt_model *m, int trace,
					   enum rbt_model_kind kind, uint32_t *pos);
/* A trace's thread by tid, created when first asked for; NULL without memory. */
struct rbt_model_thread *rbt_model_thread(struct rbt_model *m, int trace, uint32_t tid);
/* WRs a post event posted: all of them, or those before bad_wr when it failed. */
uint32_t rbt_model_posted(const struct rbt_event *ev);

struct rbt_model_stats {
	uint64_t events;
	uint64_t unmatched_completions; /* completions no post was found for */
	uint64_t tracked_wrs;		/* WRs outstanding now */
	uint64_t peak_tracked_wrs;	/* most WRs outstanding at once */
};
void rbt_model_stats(const struct rbt_model *m, struct rbt_model_stats *out);

/* A deep copy of an event (arrays, strings, blobs) in one allocation: free() it.
 * NULL without memory. The copy holds the event's head and the member of u that
 * its type uses, not the whole union (a post's copy is 80 bytes of head, not
 * sizeof(struct rbt_event)): read it through a pointer, and copy it by
 * rbt_model_event_head_size() bytes, never as a whole struct. */
struct rbt_event *rbt_model_event_copy(const struct rbt_event *ev);
/* The same copy into memory the caller has: rbt_model_event_size(ev) bytes,
 * 8-byte aligned; returns buf. */
size_t rbt_model_event_size(const struct rbt_event *ev);
struct rbt_event *rbt_model_event_copy_to(void *buf, const struct rbt_event *ev);
/* The bytes of ev's head and of the member of u its type uses (all of struct
 * rbt_event for a type this build does not know). */
size_t rbt_model_event_head_size(const struct rbt_event *ev);

#ifdef __cplusplus
}
#endif
#endif
