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

/* ---- small utilities (analyzer_util.c) ---------------------------------------- */

/* uint64 -> pointer map, open addressing with linear probing. */
struct an_map {
	uint64_t *keys;
	void **vals;
	uint32_t cap; /* power of two, 0 when empty */
	uint32_t n;
};
void *an_map_get(const struct an_map *m, uint64_t key);
int an_map_put(struct an_map *m, uint64_t key, void *val);
void *an_map_del(struct an_map *m, uint64_t key);
void an_map_free(struct an_map *m);
#define AN_MAP_FOREACH(m, i)                    \
	for (uint32_t i = 0; i < (m)->cap; i++) \
		if ((m)->vals[i])

/* Growable string. */
struct an_str {
	char *s;
	size_t len, cap;
};
void an_str_printf(struct an_str *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void an_str_free(struct an_str *b);
char *an_strdup(const char *s);
/* JSON string literal (with quotes) of s into f. */
void an_json_str(FILE *f, const char *s);

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

/* ---- analysis state ------------------------------------------------------------ */

enum { AN_SIZE_CLASSES = 6 };
extern const char *const an_size_class_name[AN_SIZE_CLASSES];
int an_size_class(uint64_t bytes);
const char *an_wr_opcode_name(int op); /* 128 = RECV */
const char *an_wc_status_name(uint64_t st);
const char *an_qp_state_name(uint64_t st);

struct an_trace;
struct an_cq;
struct an_qp;

/* Statistics of one (QP, opcode, size class). */
struct an_group {
	struct an_qp *qp;
	int opcode; /* ibv_wr_opcode, 128 = receive */
	int size_class;
	uint64_t wrs, bytes, errors, signaled, inlined, exact, bounded;
	struct an_hist h[RBT_PHASE_COUNT];
};

/* A send WR between its post and its completion. */
struct an_swr {
	uint64_t wr_id;
	uint64_t post_ts, post_exit, share; /* ticks */
	uint64_t bytes;
	uint64_t flow;
	uint64_t remote_addr, rkey, lkey, sge_addr; /* for the evidence of an error */
	uint32_t tid;
	uint8_t opcode, signaled, inl;
};

struct an_rwr {
	uint64_t wr_id;
	uint64_t post_ts, post_exit;
	uint32_t tid;
};

/* FIFO ring of outstanding WRs. */
struct an_ring {
	void *v;
	uint32_t elem, cap, head, n; /* cap power of two */
};
static inline void *an_ring_at(struct an_ring *r, uint32_t i)
{
	return (char *)r->v + (size_t)((r->head + i) & (r->cap - 1)) * r->elem;
}
void *an_ring_grow(struct an_ring *r); /* push into a full ring */
static inline void *an_ring_push(struct an_ring *r)
{
	if (__builtin_expect(r->n == r->cap, 0))
		return an_ring_grow(r);
	return an_ring_at(r, r->n++);
}
void an_ring_drop(struct an_ring *r, uint32_t n); /* from the head */
void an_ring_remove(struct an_ring *r, uint32_t i);

/* How a completion's time is known. */
struct an_comp {
	uint64_t poll_ts, poll_exit; /* ticks */
	uint32_t poll_tid;
	bool exact;
	double host;	     /* exact: completion in host ticks */
	uint64_t hw_ts, ctx; /* NIC timestamp and its device, 0 = none */
	uint64_t lo;	     /* bound: after this (ticks) */
	uint64_t status, vendor_err, byte_len, opcode;
	uint64_t wr_id;
};

/* A completed WR whose NIC timestamp waits for the first clock sample of its device
 * (the recorder may take it only later); bounded, see an_defer(). */
struct an_deferred {
	struct an_qp *qp;
	struct an_swr w;
	struct an_rwr r;
	struct an_comp c;
	bool recv;
};

/* A completion seen before its post (another thread's chunk came first). */
struct an_parked {
	struct an_comp c;
	bool recv;
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

struct an_state_change {
	uint64_t ts;
	uint8_t from, to;
	uint64_t mask;
	int64_t ret;
	bool implicit; /* by an error completion, not a modify */
};

struct an_qp {
	struct an_trace *t;
	uint64_t handle;
	uint32_t qpn;
	uint32_t type;
	uint32_t state;
	struct an_cq *scq, *rcq;
	struct an_srq *srq;
	uint64_t pd;
	uint64_t max_send_wr, max_recv_wr, max_inline, sq_sig_all;
	uint64_t create_ts;
	bool destroyed;
	uint64_t destroy_ts;
	/* set-up, from the modify_qps */
	bool have_rtr, have_rts;
	uint64_t path_mtu, dest_qpn, rq_psn, sq_psn, min_rnr_timer, timeout, retry_cnt,
		rnr_retry, max_rd_atomic, max_dest_rd_atomic, ah_dlid, port;
	uint64_t rtr_ts, rts_ts;
	struct an_state_change *hist;
	uint32_t n_hist, cap_hist;

	struct an_ring sq, rq;
	struct an_parked *parked;
	uint32_t n_parked, cap_parked;
	uint64_t park_mask; /* a bit per parked wr_id (hashed): posts skip the scan */

	/* counters */
	uint64_t posts, post_wrs, post_wrs_signaled, inlined, recv_posts, recv_wrs;
	uint64_t post_bytes;
	uint64_t posts_busy; /* posted while others were outstanding on the SQ */
	uint64_t max_chain;
	uint64_t inline_eligible, inline_missed;
	uint64_t data_wrs_256, unaligned;
	uint64_t unaligned_atomic, unaligned_atomic_addr;
	uint64_t flushes;
	bool err_seen;
	struct an_comp first_err;
	uint64_t first_err_wr_opcode, first_err_wr_bytes, first_err_remote_addr,
		first_err_rkey, first_err_lkey, first_err_sge_addr;
	bool first_err_peer_known;
	uint64_t first_err_peer_rq, first_err_peer_recvs;
	uint64_t modify_to_err_ts;
	bool modified_to_err;
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
	void *last_mr;
	/* pairing and round trips (analyzer_core.c) */
	struct an_qp *peer;
	struct an_rt_msg *rt_msgs; /* [AN_RT_N], messages sent to the peer */
	uint64_t rt_send_seq, rt_recv_seq;
	struct an_ring rt_wait; /* receives waiting for the peer's post to be read */
	bool rt_pending;	/* a message came in and awaits our answer */
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
	/* stats */
	struct an_group *groups[16 * AN_SIZE_CLASSES]; /* [opcode slot][size class] */
	struct an_qp *next;
};

struct an_srq {
	uint64_t handle;
	struct an_ring rq;
	struct an_cq *cq;
};

struct an_clock {
	uint64_t ctx;
	uint64_t n;
	/* least squares of host ticks (y) over NIC ticks (x), both relative to the
	 * first sample */
	uint64_t x0, y0;
	double mx, my, cxy, m2x, m2y; /* running means and co-moments */
	double b;		      /* host ticks per NIC tick, the model in use */
	double nic_hz;
	double max_resid_ticks;
};

struct an_cq {
	uint64_t handle;
	uint64_t cqe;
	uint64_t ctx;
	uint64_t ts_source;
	int64_t outstanding, peak;
	uint64_t peak_ts;
	uint64_t capacity; /* sum of the caps of the QPs feeding it */
	uint64_t polls, empty_polls, polled_wcs;
	uint64_t drained_lo; /* ticks: a poll found the CQ empty after this */
	uint64_t drained_ts; /* entry of that poll */
	bool have_drained;
	bool overrun;
	uint64_t overrun_ts;
	bool destroyed;
	/* the QPs on it, for extended polls whose completions carry no QP number */
	struct an_qp *qps[4];
	uint32_t n_qps;
};

struct an_mr {
	uint64_t handle, pd, addr, length, access, lkey, rkey;
	uint64_t reg_ts;
	struct an_qp *users[4];
	uint32_t n_users;
};

struct an_thread {
	uint32_t tid;
	uint32_t idx;
	char *name;
	/* Perfetto: WR lanes of this thread, [0] sends, [1] receives: when each is free
	 * (aligned ns); as many as WRs were outstanding at once, up to AN_MAX_LANES */
	uint64_t *lane_end[2];
	uint32_t n_lanes[2];
};

struct an_finding_priv {
	struct rbt_finding f;
	char *title, *evidence, *advice;
};

struct an_trace {
	int idx;
	char *name;
	struct rbt_header hdr;
	char *host, *cmdline, *tool;
	double ns_per_tick;
	int64_t align_ns; /* trace start (real time) - global origin */
	bool have_pid_label;

	struct an_map qps, qpns, cqs, srqs, mrs, mr_lkeys, clocks, threads, mr_rkeys;
	struct an_qp *qp_list;
	/* the last lookups: the data path mostly repeats them (reset when QPs change) */
	struct an_qp *c_qp, *c_qpn;
	struct an_cq *c_cq;
	uint32_t n_threads;
	struct an_rate rate;

	uint64_t events, posts, polls, empty_polls, post_fail;
	uint64_t first_post_ts, last_post_ts;
	bool any_post;
	uint64_t mr_regs, mr_regs_traffic, mr_deregs_traffic, mr_dereg_cand_total;
	uint64_t mr_reg_cand[8];
	uint32_t n_mr_reg_cand;
	uint64_t mr_reg_cand_total;
	uint64_t mr_traffic_ns;
	/* MR deregistered while a QP that used it lives */
	uint64_t early_dereg;
	uint64_t early_dereg_ts;
	uint64_t early_dereg_addr, early_dereg_len, early_dereg_lkey;
	uint32_t early_dereg_qpn;
	bool early_dereg_outstanding;
	/* async events */
	uint64_t async_events;
	uint64_t cq_err_events;
	/* integrity */
	bool have_stats;
	struct rbt_reader_stats rstats;
	int finished;
	uint64_t lost_events; /* from loss events */
	uint64_t min_ts, max_ts;
	bool any_ts;
	uint64_t nic_outside;
	struct an_clock *first_clock;
	struct an_ring deferred; /* of struct an_deferred */
	uint64_t nic_unmapped;	 /* NIC timestamps no clock sample could map */
};

struct rbt_analyzer {
	struct rbt_analyzer_opts opts;
	struct an_trace **traces;
	int n_traces;
	bool origin_set;
	uint64_t origin_real_ns;
	bool finished;

	struct an_finding_priv *findings;
	int n_findings, cap_findings;
	struct rbt_finding *pub_findings;

	struct rbt_analyzer_counts counts;
	uint64_t tracked_wrs;
	uint64_t flow_seq;
	uint32_t next_track;
	bool perfetto_first;

	/* per (trace, qp) group storage */
	struct an_group **groups;
	uint32_t n_groups, cap_groups;
	uint64_t progress_next;
	uint64_t progress_rchar0;
};

/* analyzer_core.c */
double an_ticks_ns(const struct an_trace *t, uint64_t ticks); /* since trace start */
double an_aligned_ns(const struct an_trace *t, double ticks); /* since global origin */
/* The same clamped to [0, 2^63): a damaged trace may put events anywhere. */
uint64_t an_aligned_u64(const struct an_trace *t, double ticks);
void an_sort_findings(struct rbt_analyzer *an);

/* analyzer_diag.c */
void an_diagnose(struct rbt_analyzer *an);
void an_add_finding(struct rbt_analyzer *an, int sev, const char *code, int trace,
		    uint32_t qpn, double time_ns, const char *title, const char *evidence,
		    const char *advice);
void an_pair_qps(struct rbt_analyzer *an);

/* analyzer_perfetto.c */
void an_pf_begin(struct rbt_analyzer *an);
void an_pf_trace(struct rbt_analyzer *an, struct an_trace *t);
void an_pf_thread(struct rbt_analyzer *an, struct an_trace *t, struct an_thread *th);
void an_pf_call(struct rbt_analyzer *an, struct an_trace *t, uint32_t tid,
		const char *name, uint64_t ts, uint64_t ts_exit, const char *args_json);
void an_pf_wr(struct rbt_analyzer *an, struct an_trace *t, struct an_qp *qp,
	      const struct an_swr *w, bool recv, const struct an_comp *c);
void an_pf_flow_start(struct rbt_analyzer *an, struct an_trace *t, uint32_t tid,
		      uint64_t ts, uint64_t flow);
void an_pf_end(struct rbt_analyzer *an);

struct an_thread *an_thread_get(struct rbt_analyzer *an, struct an_trace *t,
				uint32_t tid);

#endif
