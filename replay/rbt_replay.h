/* rbt_replay.h - the replayer's public interface: reissue the verbs of recorded
 * traces on a device (rbtrace replay). Comparing two traces (rbtrace diff) is the
 * analyzer's (rbt_analyzer_diff).
 *
 * The replayer is a shared module, librbtrace-replay.so, the only part of
 * rbtrace that links libibverbs: `rbtrace replay` dlopen()s it (the other
 * commands run where no RDMA stack is installed) and calls it through the one
 * symbol it exports, RBT_REPLAY_MODULE_SYM, a struct rbt_replay_module.
 *
 * The replayer never touches memory outside the MRs it registered itself: every
 * recorded address is rewritten to (replayed MR, offset) and bounds-checked.
 * Library functions return 0 or a negative errno and never exit; messages for the
 * user go to the FILE * given in the options.
 */
#ifndef RBT_REPLAY_H
#define RBT_REPLAY_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

enum rbt_replay_timing {
	RBT_REPLAY_RECORDED = 0, /* each post at its recorded offset from the start */
	RBT_REPLAY_ASAP = 1,	 /* as fast as the device allows */
	RBT_REPLAY_SCALE = 2,	 /* recorded offsets multiplied by scale */
	RBT_REPLAY_DEPS = 3,	 /* after the completions seen before, + think time */
};

/* Which order between the recorded threads of a trace replay keeps, besides
 * each thread's own (--thread-order). */
enum rbt_replay_thread_order {
	/* a post or modify waits for another thread's polls and completion-event
	 * waits that returned before it on a CQ of its QP (or SRQ), and for any
	 * thread's QP creates, modifies and MR registrations before it */
	RBT_REPLAY_ORDER_SHARED = 0,
	/* ... and for every poll and wait of every thread that returned before
	 * it (a hand-off through program memory the trace cannot see is kept;
	 * independent threads run in the recorded interleaving) */
	RBT_REPLAY_ORDER_RECORDED = 1,
};

struct rbt_replay_opts {
	const char *device;  /* NULL: the recorded device if present, else the first */
	int timing;	     /* enum rbt_replay_timing */
	double scale;	     /* for RBT_REPLAY_SCALE (2.0 = twice as slow) */
	const char *listen;  /* "PORT": wait for the peer replayer/responder */
	const char *connect; /* "HOST:PORT" */
	int responder;	     /* stand in for a missing peer (no trace) */
	const char *out;   /* record the replay here (several traces: X.0.rbt, X.1.rbt) */
	int allow_damaged; /* replay the intact part of a damaged trace */
	int json;	   /* fidelity report as JSON */
	int poll_timeout_ms;  /* how long a poll waits for recorded completions; 0=5000 */
	int realtime;	      /* run timelines SCHED_FIFO (needs privilege) */
	uint64_t max_time_ms; /* end the run this long after the start; 0: none */
	FILE *log;	      /* messages and the report; NULL = stderr */
	FILE *report;	      /* the fidelity report; NULL = stdout */
	/* with listen: how many replayer processes connect (0 or 1: one); the
	 * listener relays their directories and holds the barriers */
	int peers;
	int thread_order; /* enum rbt_replay_thread_order */
};

/* Why a replay ended before the end of its traces (rbt_replay_summary.stopped). */
enum rbt_replay_stop {
	RBT_REPLAY_RAN_ALL = 0,
	RBT_REPLAY_STOP_SIGNAL = 1,   /* SIGINT or SIGTERM (stop_signal says which) */
	RBT_REPLAY_STOP_MAX_TIME = 2, /* max_time_ms ran out */
	/* after a divergence, the side's waits that found nothing used up
	 * RBT_REPLAY_DIVERGED_WAIT_MS */
	RBT_REPLAY_STOP_DIVERGED = 3,
};

/* After a side's first divergence (or another side's in the same process),
 * its waits that end without what they waited for take at most this much in
 * total; then the side stops and the report is printed. */
#define RBT_REPLAY_DIVERGED_WAIT_MS 2000

struct rbt_replay_summary {
	uint64_t posts;
	uint64_t completions_expected;
	uint64_t completions_matched;
	/* successful completions beyond the recorded ones on a QP: work the replay
	 * posted as recorded whose completion the program never polled */
	uint64_t completions_unpolled;
	uint64_t divergences; /* every one, repeats included */
	uint64_t divergences_distinct;
	/* recorded completions in all, and those up to where each side stopped
	 * (completions_expected: the ones compared) */
	uint64_t completions_recorded;
	int stopped;	 /* enum rbt_replay_stop: the first reason any side stopped */
	int stop_signal; /* RBT_REPLAY_STOP_SIGNAL: the signal */
	double late_p50_ns, late_p99_ns, late_max_ns;
	/* the replayer's own overshoot: issue time - max(deadline, the moment the
	 * previous step (e.g. a poll waiting for a completion) was done) */
	double own_p50_ns, own_p99_ns, own_max_ns;
	double wall_ns;	    /* from the first to the last timeline step */
	double rec_wall_ns; /* the same span in the recording */
	/* streamed: of wall_ns, the time the run stood still while the next
	 * window was read and prepared (the schedule resumes after each) */
	double paused_ns;
};

/* Replays ntraces traces (the ends of one job). Returns 0 when the replay ran
 * (divergences are counted in *sum), -EINVAL/-ENOTSUP... with a message on log
 * when it refused before issuing any verb. Inside the module only: callers go
 * through rbt_replay_module.run. */
int rbt_replay_run(const char *const *traces, int ntraces,
		   const struct rbt_replay_opts *opts, struct rbt_replay_summary *sum);

/* What librbtrace-replay.so exports, checked by the loader before the first
 * call: a module from another build of rbtrace (other struct layouts) is
 * refused in one line instead of being called with the wrong arguments. Bump
 * RBT_REPLAY_ABI whenever a struct above or run's signature changes. */
#define RBT_REPLAY_ABI	      4
#define RBT_REPLAY_MODULE_SYM "rbt_replay_module"
#define RBT_REPLAY_MODULE_SO  "librbtrace-replay.so"

struct rbt_replay_module {
	uint32_t abi;	       /* RBT_REPLAY_ABI when the module was built */
	uint32_t opts_size;    /* sizeof(struct rbt_replay_opts) */
	uint32_t summary_size; /* sizeof(struct rbt_replay_summary) */
	int (*run)(const char *const *traces, int ntraces,
		   const struct rbt_replay_opts *opts, struct rbt_replay_summary *sum);
};

#ifdef __cplusplus
}
#endif
#endif
