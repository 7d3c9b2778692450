/* analyzer_internal.h - state shared by the analyzer's source files; not public.
 *
 * Everything here is sized by the resources and the work outstanding of the traces,
 * never by their length: per-WR records live only between post and completion.
 */
#ifndef RBT_ANALYZER_INTERNAL_H
#define RBT_ANALYZER_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analyzer/rbt_analyzer.h"
#include "model/rbt_model.h"
#include "util/rbt_grow.h"
#include "util/rbt_json.h"

/* ---- small utilities (analyzer_util.c) ---------------------------------------- */

/* Growable string. */
struct an_str {
	char *s;
	size_t len, cap;
};
void an_str_printf(struct an_str *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void an_str_free(struct an_str *b);
char *an_strdup(const char *s);

/* ---- log-bucketed histogram (HDR-style, analyzer_hist.c) ----------------------- */
#define AN_HIST_SUB_BITS 6 /* 64 sub-buckets per octave: <= 1.6 % bucket width */
#define AN_HIST_SUB	 (1u << AN_HIST_SUB_BITS)
#define AN_HIST_OCT	 (64 - AN_HIST_SUB_BITS + 1)

struct an_hist {
	uint64_t count, sum, min, max;
	uint64_t *oct[AN_HIST_OCT]; /* allocated on first use of an octave */
};
/* Adds n samples of value v. The fast path (octave already allocated) is inline:
 * the data path adds several samples per completion. */
void an_hist_add_slow(struct an_hist *h, uint64_t v, uint64_t n);
static inline void an_hist_add_n(struct an_hist *h, uint64_t v, uint64_t n)
{
	uint32_t o = 0, s = (uint32_t)v;
	if (v >= AN_HIST_SUB) {
		uint32_t e = 63 - (uint32_t)__builtin_clzll(v); /* >= SUB_BITS */
		o = e - AN_HIST_SUB_BITS + 1;
		s = (uint32_t)(v >> (e - AN_HIST_SUB_BITS)) - AN_HIST_SUB;
	}
	uint64_t *oct = h->oct[o];
	if (__builtin_expect(!oct, 0)) {
		an_hist_add_slow(h, v, n);
		return;
	}
	oct[s] += n;
	if (v < h->min || !h->count)
		h->min = v;
	if (v > h->max)
		h->max = v;
	h->count += n;
	h->sum += v * n;
}
static inline void an_hist_add(struct an_hist *h, uint64_t v)
{
	an_hist_add_n(h, v, 1);
}
void an_hist_merge(struct an_hist *dst, const struct an_hist *src);
/* q in [0,1]; the bucket's midpoint clamped to [min,max]; 0 when empty. */
double an_hist_quantile(const struct an_hist *h, double q);
void an_hist_free(struct an_hist *h);
/* Iterate non-empty buckets: returns false at end. */
bool an_hist_next_bucket(const struct an_hist *h, uint32_t *idx, double *lo, double *hi,
			 uint64_t *n);
void an_hist_summary(const struct an_hist *h, struct rbt_phase_summary *s);

/* Rates over time in a fixed number of bins: bins double in width when the trace
 * outgrows them, so memory stays flat. */
#define AN_RATE_BINS 120
struct an_rate {
	bool started;
	uint64_t t0, width; /* aligned ns; width = 1 << shift */
	uint32_t shift;
	uint64_t wrs[AN_RATE_BINS], bytes[AN_RATE_BINS];
};
void an_rate_add(struct an_rate *r, uint64_t t, uint64_t wrs, uint64_t bytes);

/* ---- counters over time (analyzer_series.c) ------------------------------------
 * Per-QP and per-CQ series on the analyzer's one time base (aligned ns, so the two
 * ends of a connection share the axis): AN_SERIES_BINS bins each; when a sample falls
 * past the last bin the time base doubles its bin width and every series folds pairs
 * of its bins the next time it is touched (an_series_sync), so memory stays flat
 * whatever the trace's length. Kept generic for every sink (HTML plots, timeline
 * counters): a sum per bin (rates), a gauge per bin (the most and the last value
 * sampled, for levels such as outstanding WRs), a latency histogram per bin (coarse:
 * 4 buckets per octave, for p50/p99 over time). */
#define AN_SERIES_BINS	 128
#define AN_LAT_BUCKETS	 156 /* 4 per octave up to 2^39 ns */
#define AN_LAT_QPS_MAX	 64  /* QPs of all traces with a latency series (memory) */
#define AN_SERIES_SHIFT0 12  /* the first bins are 4 us wide */
struct an_timebase {
	bool started;
	uint64_t t0, hi; /* aligned ns: bin 0's start; the latest sample */
	uint32_t shift;	 /* bins are 1 << shift ns wide */
};
struct an_series { /* a sum per bin */
	uint32_t shift;
	uint64_t v[AN_SERIES_BINS];
};
struct an_gauge { /* a level: its max and its last sample per bin, + 1 (0: none) */
	uint32_t shift;
	uint64_t pre; /* the level before the time base started */
	struct {
		uint64_t max, last;
	} b[AN_SERIES_BINS];
};
struct an_lat_series { /* completion latencies per bin */
	uint32_t shift;
	uint32_t b[AN_SERIES_BINS][AN_LAT_BUCKETS];
};
/* What the analysis keeps over time for one QP (allocated on its first WR). */
struct an_qp_series {
	struct an_series posted, done, recvs; /* send WRs posted, completed; receives */
	struct an_gauge outstanding;	      /* send WRs outstanding */
	/* round trips completed per bin and their split (ns summed, for the mean) */
	struct an_series rt_n, rt_post, rt_wire, rt_app;
	struct an_lat_series *lat; /* end to end of the send WRs; NULL past the cap */
};
/* Brings a series to the time base's bin width (before reading it). */
void an_series_sync(const struct an_timebase *tb, struct an_series *s);
void an_gauge_sync(const struct an_timebase *tb, struct an_gauge *g);
void an_lat_sync(const struct an_timebase *tb, struct an_lat_series *l);
/* Bin of aligned time t (moving the time base on as needed); -1 before it starts.
 * A sample with start set starts it (the first work request), others do not (the
 * receives a program posts while it sets up). Inline, as the adders: the data path
 * takes a few samples per WR. */
int an_tb_bin_slow(struct an_timebase *tb, uint64_t t, bool start);
static inline int an_tb_bin(struct an_timebase *tb, uint64_t t, bool start)
{
	if (__builtin_expect(tb->started && t >= tb->t0, 1)) {
		uint64_t b = (t - tb->t0) >> tb->shift;
		if (__builtin_expect(b < AN_SERIES_BINS, 1)) {
			if (t > tb->hi)
				tb->hi = t;
			return (int)b;
		}
	}
	return an_tb_bin_slow(tb, t, start);
}
static inline void an_series_add(const struct an_timebase *tb, struct an_series *s,
				 int bin, uint64_t v)
{
	if (bin < 0)
		return;
	if (__builtin_expect(s->shift != tb->shift, 0))
		an_series_sync(tb, s);
	s->v[bin] += v;
}
static inline void an_gauge_set(const struct an_timebase *tb, struct an_gauge *g, int bin,
				uint64_t v)
{
	if (bin < 0) {
		g->pre = v;
		return;
	}
	if (__builtin_expect(g->shift != tb->shift, 0))
		an_gauge_sync(tb, g);
	if (v + 1 > g->b[bin].max)
		g->b[bin].max = v + 1;
	g->b[bin].last = v + 1;
}
void an_lat_add(const struct an_timebase *tb, struct an_lat_series *l, int bin,
		uint64_t ns, uint64_t n);
/* The bins in use: 0 .. an_tb_bins() - 1. */
int an_tb_bins(const struct an_timebase *tb);
/* A gauge's level in each bin: its max, a bin without samples carrying the last
 * value before it (0 before the first). */
void an_gauge_levels(const struct an_gauge *g, int n, uint64_t *out);
/* Quantile q of bin's latencies (ns); -1 when the bin is empty. */
double an_lat_quantile(const struct an_lat_series *l, int bin, double q);

/* ---- analysis state ------------------------------------------------------------ */

enum { AN_SIZE_CLASSES = 6 };
extern const char *const an_size_class_name[AN_SIZE_CLASSES];
int an_size_class(uint64_t bytes);
const char *an_wr_opcode_name(int op); /* 128 = RECV */
const char *an_wc_status_name(uint64_t st);
const char *an_qp_state_name(uint64_t st);

/* The analyzer's own state hangs off the model's objects (their user pointer): the
 * model owns what a trace means (resources, lifetimes, the join, the clocks), the
 * analyzer what it makes of it (statistics, evidence for the diagnoses). */
struct an_trace;
struct an_cq;
struct an_qp;
struct an_srq;

/* Statistics of one (QP, opcode, size class). */
struct an_group {
	struct an_qp *qp;
	int opcode; /* ibv_wr_opcode, 128 = receive */
	int size_class;
	uint64_t wrs, bytes, errors, signaled, inlined, exact, bounded;
	struct an_hist h[RBT_PHASE_COUNT];
};

/* A message (a WR that consumes a receive) sent to the peer, for round trips. */
#define AN_RT_N 512 /* messages remembered per QP (a ring indexed by sequence) */
struct an_rt_msg {
	uint64_t seq;		    /* k-th message of this QP; UINT64_MAX: empty slot */
	uint64_t post_ts, post_dur; /* sender's ticks */
	int64_t resp_to;	    /* the peer's message it answers, -1: none */
	double remote_app_ns; /* sender's poll of that message -> this post's return */
};
struct an_rt_wait {
	uint64_t seq, poll_exit; /* a receive completion whose message is not seen yet */
	uint64_t recv_post_exit; /* when the receive that took it was posted */
};

/* A send WR outstanding while its CQ was polled empty (analyzer_stall.c). */
struct an_stall {
	bool active;
	struct rbt_model_wr wr;		/* the oldest WR outstanding */
	uint64_t first_poll, last_poll; /* ticks of the empty polls seen meanwhile */
	uint64_t empty_polls;
	uint32_t outstanding; /* send WRs outstanding (the most seen) */
	uint64_t end;	      /* ticks: the last empty poll, or the trace's end */
	uint64_t peer_rq;     /* receives the peer had posted (at the end) */
	bool peer_known;
};

struct an_qp {
	struct rbt_model_qp *m; /* the QP: number, type, state, set-up, queues */
	struct an_trace *t;
	/* the analyzer's side of the model's links (set when the model makes them) */
	struct an_cq *scq, *rcq;
	struct an_srq *srq;
	struct an_qp *peer;

	/* counters */
	uint64_t posts, post_wrs, post_wrs_signaled, inlined, recv_posts, recv_wrs;
	uint64_t post_bytes;
	uint64_t posts_busy; /* posted while others were outstanding on the SQ */
	uint64_t max_chain;
	uint64_t inline_eligible, inline_missed;
	uint64_t data_wrs_256, unaligned;
	uint64_t unaligned_atomic, unaligned_atomic_addr;
	uint64_t flushes;
	/* per opcode slot (an_opcode_slot): WRs posted, their bytes, sizes; and the
	 * joined completions by status (the last slot: any status beyond) */
	uint64_t op_posts[14], op_bytes[14], op_min[14], op_max[14];
	uint64_t wc_status[32];
	bool err_seen;
	struct rbt_model_comp first_err;
	uint64_t first_err_wr_opcode, first_err_wr_bytes, first_err_remote_addr,
		first_err_rkey, first_err_lkey, first_err_sge_addr;
	bool first_err_peer_known;
	uint64_t first_err_peer_rq, first_err_peer_recvs;
	/* posts while not in RTS (re-checked at the end against the full history) */
	uint64_t bad_state_posts;
	uint64_t bad_state_ts[8];
	uint8_t bad_state_state[8];
	bool bad_state_recv[8];
	int64_t bad_state_ret[8];
	uint32_t n_bad_state;
	/* receive queue running dry */
	uint64_t rq_empty_count, rq_empty_since, rq_empty_longest, rq_empty_longest_ts;
	bool rq_empty;
	uint64_t last_lkey;
	void *last_mr;	  /* the MR of last_lkey, NULL: none */
	bool lkey_cached; /* last_lkey/last_mr are valid */
	/* round trips (analyzer_attr.c) */
	struct an_rt_msg *rt_msgs; /* [AN_RT_N], messages sent to the peer */
	uint64_t rt_send_seq, rt_recv_seq;
	struct rbt_model_ring rt_wait; /* receives waiting for the peer's post */
	bool rt_pending;	       /* a message came in and awaits our answer */
	uint64_t rt_req_poll_exit, rt_req_seq;
	struct an_hist rt_rtt, rt_local_post, rt_remote_app, rt_nic_wire;
	uint64_t rt_count;
	double min_in_ns; /* least aligned one-way time of messages from the peer */
	bool have_min_in;
	/* messages from the peer that were sent before the receive that took them was
	 * posted: how much earlier (aligned ns, 0 when not), judged at the end against
	 * the refined clock offset */
	struct an_hist late_recv;
	uint64_t late_max_ts; /* receiver's ticks of the latest-posted receive */
	double late_max_ns;
	/* stalls (analyzer_stall.c): the episode of the send queue's oldest WR while
	 * its CQ is polled empty, the longest one, and the queue at the trace's end */
	struct an_stall st_cur, st_best, st_end;
	struct an_pf_qp *pf;	    /* the Perfetto timeline's tracks of this QP */
	uint64_t last_recv_post_ts; /* ticks of the last post_recv (the peer's view) */
	struct an_qp_series *ser;   /* counters over time, NULL until its first WR */
	/* stats */
	struct an_group *groups[16 * AN_SIZE_CLASSES]; /* [opcode slot][size class] */
	struct an_qp *next;			       /* the trace's QPs, newest first */
};

struct an_srq {
	struct rbt_model_srq *m;
};

struct an_cq {
	struct rbt_model_cq *m;
	uint64_t polls, empty_polls, polled_wcs;
	uint64_t last_poll;	/* ticks: exit of the latest poll, empty or not */
	struct an_qp **senders; /* the QPs whose send CQ it is */
	uint32_t n_senders, cap_senders;
	bool overrun;
	uint64_t overrun_ts;
	struct an_gauge *occ;	 /* completions due on it over time, NULL until used */
	struct an_series *empty; /* polls that came back empty over time, ditto */
	struct an_pf_ctr *pf;	 /* the Perfetto timeline's counter of this CQ */
};

struct an_mr {
	struct rbt_model_mr *m;
	struct an_qp *users[4];
	uint32_t n_users;
};

struct an_thread {
	struct rbt_model_thread *m;
	/* Perfetto: WR lanes of this thread, [0] sends, [1] receives: when each is free
	 * (aligned ns); as many as WRs were outstanding at once, up to AN_MAX_LANES */
	uint64_t *lane_end[2];
	uint32_t n_lanes[2];
	struct an_pf_seq *pf;	/* the Perfetto timeline's sequence of this thread */
	struct an_thread *next; /* all of them, for the end */
};

struct an_finding_priv {
	struct rbt_finding f;
	char *title, *evidence, *advice;
};

struct an_trace {
	const struct rbt_model_trace *mt; /* header, name, clocks, integrity */
	const struct rbt_analyzer *an;	  /* for the filter */
	int idx;
	struct an_qp *qp_list;
	struct an_rate rate;

	uint64_t posts, polls, empty_polls, post_fail;
	uint64_t first_post_ts, last_post_ts;
	bool any_post;
	uint64_t mr_regs;
	/* registrations and deregistrations after the first post: what came so
	 * far (seen), and of it what a later post confirmed as the data path
	 * (traffic); a QP created or connected first takes seen back to traffic
	 * (setup) */
	struct an_mr_tally {
		uint64_t regs, deregs, ns;
		uint32_t n_ts; /* of mr_reg_ts */
	} mr_seen, mr_traffic;
	uint64_t mr_reg_ts[8]; /* the first registrations' times */
	/* MR deregistered while a QP that used it lives */
	uint64_t early_dereg;
	uint64_t early_dereg_ts;
	uint64_t early_dereg_addr, early_dereg_len, early_dereg_lkey;
	uint32_t early_dereg_qpn;
	bool early_dereg_outstanding;
	/* async events */
	uint64_t async_events;
	uint64_t cq_err_events;
	uint64_t lost_events; /* from loss events */
	uint64_t nic_outside;
	/* analyzer_series.c: the ticks of this trace that fall in the time base's bin
	 * ser_bin (at its width ser_shift), so most samples skip the conversion */
	uint64_t ser_lo, ser_hi;
	int ser_bin;
	uint32_t ser_shift;
};

/* ---- output sinks (analyzer_text.c, analyzer_json.c, analyzer_html.c,
 * analyzer_perfetto.c) ----
 * Every output is one of these. A streaming sink (the Perfetto timeline) is told
 * about the calls, threads and WRs while the events are analysed; every sink that
 * writes a document after the analysis has write(). The analysis calls the
 * an_sinks_*() helpers below, never an output by name. */
struct an_sink_ops {
	const char *name;
	bool per_wr; /* wants each WR apart (no chain of alike WRs as one) */
	void (*begin)(struct rbt_analyzer *an);
	void (*thread)(struct rbt_analyzer *an, struct an_trace *t, struct an_thread *th);
	void (*call)(struct rbt_analyzer *an, struct an_trace *t, uint32_t tid,
		     const char *name, uint64_t ts, uint64_t ts_exit,
		     const char *args_json);
	/* a WR entered its queue: qp NULL for a receive posted to an SRQ; the sink
	 * may keep a word of its own in w->user */
	void (*wr_posted)(struct rbt_analyzer *an, struct an_trace *t, struct an_qp *qp,
			  struct rbt_model_wr *w);
	void (*wr)(struct rbt_analyzer *an, struct an_trace *t, struct an_qp *qp,
		   const struct rbt_model_wr *w, const struct rbt_model_comp *c);
	void (*end)(struct rbt_analyzer *an); /* after the diagnosis */
	int (*write)(struct rbt_analyzer *an, FILE *out);
	void (*free)(struct rbt_analyzer *an); /* at rbt_analyzer_destroy() */
};
extern const struct an_sink_ops an_sink_text, an_sink_json, an_sink_html,
	an_sink_perfetto, an_sink_perfetto_json, an_sink_export;

/* analyzer_json.c: "peer": {"trace", qpn_key: the peer QP's number} or null (the
 * report's JSON and the HTML page's data name the number differently) */
void an_json_peer(struct rbt_json *j, const struct an_qp *qp, const char *qpn_key);

/* analyzer_perfetto.c: WRs posted in the files (a plain read), for the size rule */
int an_pf_count_wrs(const char *const *paths, int n, uint64_t *out);
int an_pf_status(const struct rbt_analyzer *an); /* 0, or the stream's -errno */

/* analyzer_pbuf.c: a protobuf writer for the Perfetto timeline. A message is built
 * in a growing buffer; nested messages are opened and closed around their fields
 * (their length is put in front when they close). oom: an allocation failed, the
 * message is incomplete (an_pb_flush then fails). */
struct an_pb {
	uint8_t *b;
	size_t n, cap;
	size_t open[8]; /* start of each open nested message's content */
	int depth;
	bool oom;
};
void an_pb_varint(struct an_pb *pb, uint32_t field, uint64_t v);
void an_pb_int(struct an_pb *pb, uint32_t field, int64_t v); /* int64: two's compl. */
void an_pb_double(struct an_pb *pb, uint32_t field, double v);
void an_pb_bytes(struct an_pb *pb, uint32_t field, const void *p, size_t len);
void an_pb_str(struct an_pb *pb, uint32_t field, const char *s);
void an_pb_begin(struct an_pb *pb, uint32_t field);
void an_pb_end(struct an_pb *pb);
/* Writes what is complete (depth 0) to f and empties the buffer: 0 or -errno. */
int an_pb_flush(struct an_pb *pb, FILE *f);
void an_pb_free(struct an_pb *pb);

struct an_cm;

struct rbt_analyzer {
	struct rbt_analyzer_opts opts;
	struct rbt_model *model;
	struct an_trace **traces;
	int n_traces;
	uint32_t cap_traces;
	bool finished;

	struct an_finding_priv *findings;
	int n_findings;
	uint32_t cap_findings;
	struct rbt_finding *pub_findings;

	struct rbt_analyzer_counts counts;
	uint64_t flow_seq;
	struct an_thread *threads;

	/* the streaming sinks (Perfetto when opts.perfetto) */
	const struct an_sink_ops *stream[2];
	int n_stream;
	struct rbt_json pf;  /* the Perfetto JSON stream */
	struct an_pf *pft;   /* the Perfetto protobuf stream (analyzer_perfetto.c) */
	uint64_t posted_wrs; /* WRs posted in the files (0: not counted) */
	bool export_header;  /* the CSV header line is out */

	/* per (trace, qp) group storage */
	struct an_group **groups;
	uint32_t n_groups, cap_groups;
	/* counters over time (analyzer_series.c) */
	struct an_timebase tb;
	uint32_t n_lat_qps;
	uint64_t progress_next;
	uint64_t progress_rchar0;
	uint64_t progress_t0, progress_last; /* CLOCK_MONOTONIC ns */
	bool progress_drawn;
	/* zooming in (analyzer_filter.c): filt as given, filt_on when it selects */
	struct rbt_analyzer_filter filt;
	bool filt_on;
	uint64_t filt_findings_out; /* findings left out by it */
	struct an_cm *cm;	    /* analyzer_cm.c: the connection manager's records */
};

static inline struct an_qp *an_qp_of(const struct rbt_model_qp *q)
{
	return q ? (struct an_qp *)q->res.user : NULL;
}
static inline struct an_cq *an_cq_of(const struct rbt_model_cq *q)
{
	return q ? (struct an_cq *)q->res.user : NULL;
}
static inline double an_ticks_ns(const struct an_trace *t, uint64_t ticks)
{
	return rbt_model_ticks_ns(t->mt, ticks);
}
static inline double an_aligned_ns(const struct an_trace *t, double ticks)
{
	return rbt_model_aligned_ns(t->mt, ticks);
}

/* analyzer_core.c: the model's callbacks and the public entry points */
void an_sort_findings(struct rbt_analyzer *an);
struct an_thread *an_thread_get(struct rbt_analyzer *an, struct an_trace *t,
				uint32_t tid);
/* The streaming sinks, in order. */
void an_sinks_call(struct rbt_analyzer *an, struct an_trace *t, uint32_t tid,
		   const char *name, uint64_t ts, uint64_t ts_exit, const char *args);

/* analyzer_res.c: what the analyzer counts from the events themselves */
void an_res_new(struct rbt_analyzer *an, struct rbt_model_res *r);
void an_before(struct rbt_analyzer *an, struct an_trace *t, const struct rbt_event *ev,
	       struct rbt_model_res *r);
void an_after(struct rbt_analyzer *an, struct an_trace *t, const struct rbt_event *ev,
	      struct rbt_model_res *r);
void an_send_wr_checks(struct rbt_analyzer *an, struct an_trace *t, struct an_qp *qp,
		       const struct rbt_send_wr *wr, const struct rbt_model_wr *w);

int an_opcode_slot(int op);
int an_slot_opcode(int slot);

/* analyzer_attr.c: the attribution of each completed WR, round trips, errors */
void an_attr_posted(struct rbt_analyzer *an, struct an_qp *qp, uint64_t post_ts,
		    uint64_t post_exit, const struct rbt_send_wr *wr);
void an_attr_completion(struct rbt_analyzer *an, struct an_qp *qp,
			const struct rbt_model_comp *c, const struct rbt_model_wr *w);
void an_attr_done(struct rbt_analyzer *an, struct an_qp *qp, const struct rbt_model_wr *w,
		  const struct rbt_model_comp *c, uint32_t n, uint32_t nsig);
/* A completed WR's phases in ns, as the histograms get them (receives: recv_wait
 * and poll or poll_hi); poll_exit: the ticks its WR slice ends. */
struct an_wr_times {
	uint64_t post, e2e, nic, poll, nic_lo, nic_hi, poll_hi, recv_wait;
	uint64_t poll_exit;
	bool outside; /* the NIC time fell outside [post, poll] (clamped) */
};
void an_wr_times(const struct an_trace *t, const struct rbt_model_wr *w,
		 const struct rbt_model_comp *c, struct an_wr_times *x);
void an_note_error(struct an_qp *qp, const struct rbt_model_comp *c,
		   const struct rbt_model_wr *w);

/* analyzer_core.c: a trace's CQs in the model's table order (start with *pos 0). */
struct an_cq *an_cq_next(const struct rbt_analyzer *an, const struct an_trace *t,
			 uint32_t *pos);

/* analyzer_output.c: shared by the sinks */
extern const char *const an_phase_name[RBT_PHASE_COUNT];
const char *an_sev_name(int s);
const char *an_qp_type_name(uint32_t t);
const char *an_fmt_ns(char *buf, size_t n, double ns);
/* Merged histograms of a trace (all when t NULL) or a QP, per phase. */
void an_trace_hists(const struct rbt_analyzer *an, const struct an_trace *t,
		    const struct an_qp *qp, struct an_hist h[RBT_PHASE_COUNT]);
void an_hists_free(struct an_hist h[RBT_PHASE_COUNT]);
double an_trace_dur_ns(const struct an_trace *t);

/* analyzer_stall.c: WRs that never complete while the program polls, or after it
 * stopped polling */
void an_stall_poll(struct an_cq *cq, uint64_t ts, uint64_t ts_exit, uint64_t count);
void an_stall_sender(struct an_cq *cq, struct an_qp *qp);
void an_stall_end(struct rbt_analyzer *an); /* before the model's finish */
void an_stall_diagnose(struct rbt_analyzer *an);

/* analyzer_series.c: the samples the analysis takes (aligned ns t) */
struct an_qp_series *an_qp_series_get(struct rbt_analyzer *an, struct an_qp *qp);
void an_ser_posted(struct rbt_analyzer *an, struct an_qp *qp, uint64_t ticks);
void an_ser_done(struct rbt_analyzer *an, struct an_qp *qp, uint64_t ticks, bool recv,
		 uint64_t e2e_ns, uint32_t n);
void an_ser_cq(struct rbt_analyzer *an, struct an_trace *t, struct an_cq *cq,
	       uint64_t ticks, int bin); /* bin: of ticks, or -2 to compute it */
void an_ser_poll(struct rbt_analyzer *an, struct an_trace *t, struct an_cq *cq,
		 uint64_t ticks);
void an_ser_roundtrip(struct rbt_analyzer *an, struct an_qp *qp, uint64_t ticks,
		      double post_ns, double wire_ns, double app_ns);
void an_ser_empty(struct rbt_analyzer *an, struct an_trace *t, struct an_cq *cq,
		  uint64_t ts, uint64_t ts_exit, uint64_t count);
void an_ser_end(struct rbt_analyzer *an); /* the axis to the traces' ends */

/* analyzer_filter.c: zooming in (--from/--to/--qp/--pid/--thread). The analysis
 * asks these about what it counts; the model is always fed everything. */
#define AN_TID_ANY UINT32_MAX /* the thread is not known: any thread passes */
#define AN_QP_ANY  UINT32_MAX /* not about one QP (checked apart) */
bool an_filter_slow(const struct rbt_analyzer *an, const struct an_trace *t, uint32_t qpn,
		    uint64_t ts, uint32_t tid);
/* Whether what happened at ts (ticks of trace t) on QP qpn, by thread tid, is
 * selected. */
static inline bool an_filter(const struct rbt_analyzer *an, const struct an_trace *t,
			     uint32_t qpn, uint64_t ts, uint32_t tid)
{
	return !an->filt_on || an_filter_slow(an, t, qpn, ts, tid);
}
/* A WR is selected by its post. */
static inline bool an_filter_wr(const struct rbt_analyzer *an, const struct an_qp *qp,
				const struct rbt_model_wr *w)
{
	return !an->filt_on || an_filter_slow(an, qp->t, qp->m->qpn, w->post_ts, w->tid);
}
/* An event of the data path (post, poll) to count, before the model applies it;
 * false: the analysis leaves it out (what the diagnoses must see of an event left
 * out is done here). */
bool an_filter_event(struct rbt_analyzer *an, struct an_trace *t,
		     const struct rbt_event *ev, struct rbt_model_res *r);
void an_filter_findings(struct rbt_analyzer *an); /* after the diagnosis */
/* Whether a sink shows a trace (--pid), a QP and a CQ (--qp: a CQ of one) at all. */
bool an_filter_shows_trace(const struct rbt_analyzer *an, const struct an_trace *t);
bool an_filter_shows_qp(const struct rbt_analyzer *an, const struct an_qp *qp);
bool an_filter_shows_cq(const struct rbt_analyzer *an, const struct an_cq *cq);
/* The filter in force: one text line (nothing without one), the JSON "filter"
 * member (nothing without one). */
void an_filter_write_text(const struct rbt_analyzer *an, FILE *f);
void an_filter_write_json(const struct rbt_analyzer *an, struct rbt_json *j);

/* analyzer_res.c: what the diagnoses see of every poll, counted or not */
void an_poll_seen(struct an_trace *t, const struct rbt_event *ev, struct an_cq *cq);

/* analyzer_diag.c */
void an_diagnose(struct rbt_analyzer *an);
void an_add_finding(struct rbt_analyzer *an, int sev, int code, int trace, uint32_t qpn,
		    double time_ns, const char *title, const char *evidence,
		    const char *advice);
void an_pair_qps(struct rbt_analyzer *an);

/* analyzer_cm.c: connections made through librdmacm (one per CM id) */
void an_cm_feed(struct rbt_analyzer *an, struct an_trace *t, const struct rbt_event *ev);
void an_cm_diagnose(struct rbt_analyzer *an); /* builds, pairs, adds findings */
void an_cm_write_text(struct rbt_analyzer *an, FILE *f);
struct rbt_json;
void an_cm_write_json(struct rbt_analyzer *an, struct rbt_json *j); /* "connections" */
void an_cm_write_html(struct rbt_analyzer *an, FILE *f);
void an_cm_free(struct rbt_analyzer *an);

#endif
