/* rbt_analyzer.h - the one public interface of rbtrace's analyzer (`rbtrace report`).
 *
 * The analyzer reads the decoded events of one or more traces (trace_format's reader)
 * and attributes every work request's time to its post, NIC and poll phases, keeps
 * statistics per process / QP / opcode / size class in log-bucketed histograms, and
 * diagnoses the RDMA problems it can prove from the events. Memory grows with the
 * work outstanding and the number of resources, never with the trace's length.
 *
 * It must never exit, print outside the FILE * it is given (and the progress line on
 * stderr when asked), or trust an event: every field may be garbage in a damaged trace.
 * Functions return 0 or a negative errno.
 */
#ifndef RBT_ANALYZER_H
#define RBT_ANALYZER_H

#include <stdint.h>
#include <stdio.h>

#include "trace_format/rbt_format.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rbt_analyzer;

/* Zooming in (docs/report.md, "Zooming in"): what every output counts and shows.
 * The model always sees every event, so resources, their states and the post ->
 * completion join stay right; the filter picks the work requests (a WR belongs to
 * the filter when it was posted inside the window, on a selected QP, by a selected
 * process and thread: one posted before the window and completed inside is not
 * counted), the polls (of a selected thread, inside the window, on a CQ of a
 * selected QP), the statistics made of them, and the findings (about a selected QP
 * and trace, proved by an event inside the window; one with no moment of its own,
 * a pattern over the WRs such as all_signaled, is judged on the WRs selected). */
#define RBT_ANALYZER_FILTER_QPS 64
struct rbt_analyzer_filter {
	/* [from_ns, to_ns) on the shared timeline: ns since the earliest trace's
	 * start (a single trace: since its start) */
	int has_from, has_to;
	double from_ns, to_ns;
	uint32_t qps[RBT_ANALYZER_FILTER_QPS]; /* QP numbers; n_qps 0: every QP */
	int n_qps;
	int has_pid, has_tid;
	uint32_t pid; /* the traced process (a trace's header pid) */
	uint32_t tid; /* the posting / polling thread */
};

struct rbt_analyzer_opts {
	/* When set, a Perfetto / Chrome trace-event JSON document is streamed here while
	 * the events are analysed (it is completed by rbt_analyzer_finish()). */
	FILE *perfetto;
	/* Show a progress line on stderr, redrawn in place, once the run has taken
	 * progress_delay_ms (0: 1000) and cleared at the end (the CLI sets it when
	 * stderr is a terminal); progress_bytes: the traces' total size, for the
	 * fraction; progress_name: what the line starts with (NULL: "rbtrace"). */
	int progress;
	uint64_t progress_bytes;
	uint32_t progress_delay_ms;
	const char *progress_name;
	/* NULL: everything (copied at create). */
	const struct rbt_analyzer_filter *filter;
	/* When set, one row per completed WR is streamed here (`rbtrace export`): CSV
	 * with a header line, or NDJSON when export_ndjson; columns in docs/export.md. */
	FILE *export_wrs;
	int export_ndjson;
};

int rbt_analyzer_create(const struct rbt_analyzer_opts *opts, struct rbt_analyzer **out);
/* NULL is fine. */
void rbt_analyzer_destroy(struct rbt_analyzer *an);

/* Low-level feeding, for tests and embedders: declare every trace first (its header
 * is copied; name labels it in the report), then feed each trace's events in its file
 * order. Returns the trace's index (>= 0) or -errno. */
int rbt_analyzer_add_trace(struct rbt_analyzer *an, const struct rbt_header *hdr,
			   const char *name);
int rbt_analyzer_feed(struct rbt_analyzer *an, int trace, const struct rbt_event *ev);
/* Tells the analyzer what the reader saw about a trace's integrity (damage, loss). */
void rbt_analyzer_set_reader_stats(struct rbt_analyzer *an, int trace,
				   const struct rbt_reader_stats *st, int finished);

/* Opens the files, reads them together (merged by their aligned clocks, so the
 * two ends of a connection are joined while their work is outstanding) and feeds
 * every event. On error, errbuf names the file and the problem. */
int rbt_analyzer_run_files(struct rbt_analyzer *an, const char *const *paths, int n,
			   char *errbuf, size_t errlen);

/* After the last event: cross-trace pairing, diagnosis, the end of the Perfetto
 * stream. Call once. */
int rbt_analyzer_finish(struct rbt_analyzer *an);

/* Outputs (after finish). The JSON schema and every number are described in
 * docs/report.md. */
int rbt_analyzer_write_text(struct rbt_analyzer *an, FILE *out);
int rbt_analyzer_write_json(struct rbt_analyzer *an, FILE *out);
int rbt_analyzer_write_html(struct rbt_analyzer *an, FILE *out);
/* One row per resource (device context, PD, MR, ..., QP, AH) of every trace, in
 * the format of opts.export_ndjson (CSV or NDJSON); columns in docs/export.md. */
int rbt_analyzer_write_resources(struct rbt_analyzer *an, FILE *out);

/* ---- results, for tests and embedders ------------------------------------------ */

enum rbt_severity {
	RBT_SEV_INFO = 0,
	RBT_SEV_WARNING = 1,
	RBT_SEV_ERROR = 2,
};

/* Every finding the diagnoser can raise, once: X(code, severity, also, title).
 * severity: what it is raised at; also: the other severity it takes in the case
 * docs/findings.md names (-1: none); title: what it is about, in a few words (each
 * finding has its own title with the numbers). docs/findings.md has one entry per
 * code (tests/findings_test checks both ways), report_check.py checks the JSON. */
/* clang-format off */
#define RBT_FINDING_LIST(X)                                                               \
	X(qp_error, RBT_SEV_ERROR, RBT_SEV_WARNING, "a QP went to the error state")       \
	X(rnr_retry_exceeded, RBT_SEV_ERROR, -1, "the peer had no receive posted")        \
	X(rnr_late_receives, RBT_SEV_WARNING, -1, "messages sent before their receive")   \
	X(post_not_rts, RBT_SEV_ERROR, -1, "a post on a QP not ready for it")             \
	X(cq_too_small, RBT_SEV_ERROR, -1, "a CQ shallower than its QPs' work")           \
	X(cq_overrun, RBT_SEV_ERROR, -1, "a CQ overran")                                  \
	X(all_signaled, RBT_SEV_WARNING, -1, "every send WR asks for a completion")       \
	X(one_wr_per_doorbell, RBT_SEV_INFO, -1, "one WR per ibv_post_send")              \
	X(not_inlined, RBT_SEV_WARNING, -1, "small sends not inlined")                    \
	X(unaligned_buffer, RBT_SEV_WARNING, RBT_SEV_ERROR, "unaligned buffers")          \
	X(mr_on_datapath, RBT_SEV_WARNING, -1, "MRs registered on the data path")         \
	X(mr_dereg_before_qp, RBT_SEV_WARNING, RBT_SEV_ERROR, "an MR freed before its QP") \
	X(mtu_mismatch, RBT_SEV_WARNING, -1, "the two ends' path MTUs differ")            \
	X(psn_mismatch, RBT_SEV_ERROR, -1, "the two ends' PSNs differ")                   \
	X(dest_qpn_mismatch, RBT_SEV_ERROR, -1, "two QPs that do not name each other")    \
	X(dest_qpn_unmatched, RBT_SEV_WARNING, -1, "a destination QP in no trace")        \
	X(wr_stalled, RBT_SEV_ERROR, RBT_SEV_WARNING, "a WR stalled while its CQ was polled") \
	X(polling_stopped, RBT_SEV_WARNING, -1, "WRs left outstanding, no more polls")    \
	X(trace_incomplete, RBT_SEV_WARNING, -1, "the trace is incomplete")               \
	X(cm_rejected, RBT_SEV_ERROR, -1, "a connect rejected by the peer")                \
	X(cm_no_listener, RBT_SEV_ERROR, -1, "a connect to a port nobody listened on")     \
	X(cm_addr_error, RBT_SEV_ERROR, -1, "an address on no RDMA device")                \
	X(cm_timeout, RBT_SEV_ERROR, -1, "a route or connect timed out")                  \
	X(cm_connect_error, RBT_SEV_ERROR, -1, "a connect whose QP set-up failed")         \
	X(cm_event_not_acked, RBT_SEV_WARNING, RBT_SEV_ERROR, "a CM event never acked")     \
	X(cm_qp_after_disconnect, RBT_SEV_WARNING, -1, "a QP used after DISCONNECTED")
/* clang-format on */

enum rbt_finding_code {
#define RBT__FINDING_ENUM(code, sev, also, title) RBT_FINDING_##code,
	RBT_FINDING_LIST(RBT__FINDING_ENUM)
#undef RBT__FINDING_ENUM
		RBT_FINDING_COUNT
};

struct rbt_finding_kind {
	const char *code;
	int severity, also; /* enum rbt_severity; also -1: none */
	const char *title;
};
/* The list above as a table: RBT_FINDING_COUNT entries in list order. */
const struct rbt_finding_kind *rbt_analyzer_finding_kinds(void);

struct rbt_finding {
	int severity;	      /* enum rbt_severity */
	const char *code;     /* stable id: "qp_error", "rnr_retry_exceeded", ... */
	const char *title;    /* one line */
	const char *evidence; /* the events that prove it, one per line */
	const char *advice;   /* what to change */
	int trace;	      /* index of the trace, -1 when it spans several */
	uint32_t qp_num;      /* 0 when not about one QP */
	double time_ns;	      /* of the proving event, ns since the trace's start */
};

/* The findings, most severe first; valid until destroy. Returns the count. */
int rbt_analyzer_findings(const struct rbt_analyzer *an, const struct rbt_finding **out);
/* Whether any trace has a QP with that number (after the run). */
int rbt_analyzer_has_qp(const struct rbt_analyzer *an, uint32_t qp_num);
/* A finding's moment on the shared timeline (the unit of rbt_analyzer_filter). */
double rbt_analyzer_finding_timeline_ns(const struct rbt_analyzer *an,
					const struct rbt_finding *f);

enum rbt_phase {
	RBT_PHASE_POST = 0,	/* share of the post call */
	RBT_PHASE_NIC,		/* post return -> completion (NIC ts mapped to host) */
	RBT_PHASE_POLL,		/* completion -> return of the poll that handed it */
	RBT_PHASE_E2E,		/* post share + NIC + poll */
	RBT_PHASE_NIC_LO,	/* without NIC ts: lower bound of the NIC phase */
	RBT_PHASE_NIC_HI,	/* ... upper bound */
	RBT_PHASE_POLL_HI,	/* ... upper bound of the poll phase (lower is 0) */
	RBT_PHASE_RECV_WAIT,	/* receive: post_recv return -> poll that returned it */
	RBT_PHASE_RECV_POLL,	/* receive: completion (NIC ts) -> poll return */
	RBT_PHASE_RECV_POLL_HI, /* ... upper bound without NIC ts */
	RBT_PHASE_COUNT
};

struct rbt_phase_summary {
	uint64_t count;
	double p50, p90, p99, p999, max, mean; /* ns */
};

/* Percentiles of a phase over the completed WRs of trace `trace` (-1: all traces),
 * QP `qp_num` (0: all QPs) and opcode `opcode` (an enum ibv_wr_opcode value, 128 for
 * receives, -1: all). Returns 0, or -ENOENT when nothing matched. */
int rbt_analyzer_phase(const struct rbt_analyzer *an, int trace, uint32_t qp_num,
		       int opcode, enum rbt_phase phase, struct rbt_phase_summary *out);

struct rbt_analyzer_counts {
	uint64_t events;
	uint64_t wrs_completed; /* send WRs attributed (incl. unsignaled) */
	uint64_t wrs_nic_exact; /* ... with a NIC timestamp */
	uint64_t wrs_bounded;	/* ... with a bound only */
	uint64_t recvs_completed;
	uint64_t unmatched_completions; /* completions whose post was never seen */
	uint64_t outstanding_at_end;	/* posted WRs never completed */
	uint64_t
		recvs_outstanding_at_end; /* ... of them receives (still posted at exit) */
	uint64_t nic_outside_bound;	  /* NIC ts mapped outside [post, poll] */
	uint64_t peak_tracked_wrs;	  /* most WRs held at once (memory) */
};
void rbt_analyzer_counts(const struct rbt_analyzer *an, struct rbt_analyzer_counts *out);

/* The clock model of a trace's NIC clock (the first device with samples). */
struct rbt_clock_fit {
	uint64_t samples;
	double ns_per_nic_tick; /* fitted slope, host ns per NIC tick */
	double max_residual_ns; /* largest |prediction - sample| of the model as used */
	double rms_residual_ns; /* of the final least-squares fit */
};
int rbt_analyzer_clock_fit(const struct rbt_analyzer *an, int trace,
			   struct rbt_clock_fit *out);

/* Round trips measured on connected QP pairs across traces (see docs/report.md). */
struct rbt_roundtrip_summary {
	uint64_t count;
	double rtt_p50, local_post_p50, remote_app_p50, nic_wire_p50; /* ns */
};
int rbt_analyzer_roundtrip(const struct rbt_analyzer *an, int trace, uint32_t qp_num,
			   struct rbt_roundtrip_summary *out);

/* ---- rbtrace diff ------------------------------------------------------------------
 * Compares two traces of one job (an original and its replay): each is analysed on
 * its own, their QPs are paired in creation order, and per QP and opcode it compares
 * the WRs posted (count, bytes, sizes), the WRs completed (count, bytes, errors) and
 * the completions by status; those are divergences. The phases of `rbtrace report`
 * (post, NIC or its bounds, poll, end to end; a receive's wait) are shown side by
 * side, never judged: a replay on another machine is meant to differ in time.
 * Writes the comparison to out (text, or JSON with json) and one warning line per
 * incomplete trace to log. Returns the number of divergences (>= 0) or -errno. */
struct rbt_analyzer_diff_opts {
	int json;
	FILE *out; /* NULL = stdout */
	FILE *log; /* NULL = stderr */
};
int rbt_analyzer_diff(const char *a, const char *b,
		      const struct rbt_analyzer_diff_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
