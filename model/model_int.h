/* model_int.h - state shared by model/'s source files; not public.
 *
 * Sized by the resources and the work outstanding of the traces, never by their
 * length. Nothing here may print, exit or trust an event.
 */
#ifndef RBT_MODEL_INT_H
#define RBT_MODEL_INT_H

#include <stdbool.h>
#include <stdint.h>

/* Only the constants (libibverbs ABI values): the model links no RDMA library. */
#include <infiniband/verbs.h>

#include "model/rbt_model.h"
#include "util/rbt_map.h"

/* A least-squares model of host ticks (y) over NIC ticks (x), both relative to the
 * first sample of the device. */
struct mt_clock {
	uint64_t ctx;
	uint64_t n;
	uint64_t x0, y0;
	uint64_t x_last; /* the latest NIC time sampled (raw) */
	/* running means and co-moments of the NIC ticks x and of y - b0 x, the
	 * host ticks less the nominal rate's line: the fit's residual is then
	 * not lost to rounding beside seconds of spread */
	double mx, my, cxy, m2x, m2y;
	double b0; /* the nominal rate (host ticks per NIC tick; 0: unknown) */
	double b;  /* host ticks per NIC tick, the model in use */
	double nic_hz;
	double max_resid_ticks;
};

/* A completion seen before its post. */
struct rbt_model_parked {
	struct rbt_model_comp c;
};

/* A completed WR whose NIC timestamp waits for its device's first clock sample. */
struct mt_deferred {
	struct rbt_model_qp *qp;
	struct rbt_model_wr w;
	struct rbt_model_comp c;
};

struct mt_trace {
	struct rbt_model_trace pub;
	char *name, *host, *cmdline, *tool;
	struct rbt_map tab[RBT_MODEL_KINDS]; /* by handle: the latest object */
	struct rbt_map qpns, lkeys, rkeys, clocks, threads;
	struct rbt_model_res *lists[RBT_MODEL_KINDS];
	/* the last lookups: the data path mostly repeats them */
	struct rbt_model_qp *c_qp, *c_qpn;
	struct rbt_model_cq *c_cq;
	struct mt_clock *first_clock;
	struct rbt_model_ring deferred; /* of struct mt_deferred */
	uint32_t n_threads;
};

struct rbt_model {
	struct rbt_model_ops ops;
	void *arg;
	int batch, keep_events;
	unsigned threads;
	struct mt_trace **traces;
	int n_traces;
	uint32_t cap_traces;
	bool origin_set, finished;
	uint64_t next_id;
	struct rbt_model_stats stats;
};

/* model_res.c */
void mt_set_origin(struct rbt_model *m);
void mt_trace_free(struct mt_trace *t);
struct rbt_model_cq *mt_cq_get(struct rbt_model *m, struct mt_trace *t, uint64_t handle);
struct rbt_model_qp *mt_qp_new(struct rbt_model *m, struct mt_trace *t, uint64_t handle,
			       uint32_t qpn);
struct rbt_model_qp *mt_qp_find(struct rbt_model *m, struct mt_trace *t, uint64_t handle,
				uint32_t qpn);
void mt_qp_history(struct rbt_model_qp *qp, uint64_t ts, uint32_t to, uint64_t mask,
		   int64_t ret, bool implicit);
/* Applies a resource event (create, modify, destroy); returns its object. */
struct rbt_model_res *mt_on_resource(struct rbt_model *m, struct mt_trace *t,
				     const struct rbt_event *ev);
/* The object a resource event names, before it is applied; NULL for creates. */
struct rbt_model_res *mt_resource_of(struct mt_trace *t, const struct rbt_event *ev);

/* model_clock.c */
void mt_on_clock(struct rbt_model *m, struct mt_trace *t, const struct rbt_event *ev);
bool mt_clock_map(const struct mt_clock *c, uint64_t nic, double *host);
/* Whether a sample at or after NIC time nic has been read (interpolation). */
bool mt_clock_covers(const struct mt_clock *c, uint64_t nic);
struct mt_clock *mt_clock_of(const struct mt_trace *t, uint64_t ctx);

/* model_join.c */
void mt_on_post_send(struct rbt_model *m, struct mt_trace *t, const struct rbt_event *ev,
		     struct rbt_model_qp *qp);
void mt_on_post_recv(struct rbt_model *m, struct mt_trace *t, const struct rbt_event *ev,
		     struct rbt_model_qp *qp);
void mt_on_post_srq_recv(struct rbt_model *m, struct mt_trace *t,
			 const struct rbt_event *ev, struct rbt_model_srq *srq);
void mt_on_poll(struct rbt_model *m, struct mt_trace *t, const struct rbt_event *ev,
		struct rbt_model_cq *cq);
void mt_drain_deferred(struct rbt_model *m, struct mt_trace *t, bool final);
void mt_join_finish(struct rbt_model *m, struct mt_trace *t);

#endif
